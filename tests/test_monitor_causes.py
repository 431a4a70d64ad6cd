"""Named causes (saturation, shaping starves outcome, unreachable gate, redundant components) and the
example rollouts every alarm carries, each on records built to show it."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from rewardpipe.models import ErrorInfo, Record
from rewardpipe.monitoring import ConsoleAlarmSink, StoreAlarmSink, monitor_records
from rewardpipe.monitoring.examples import REASON_CHARS, clean, transcript_key
from rewardpipe.monitoring.statistics import SAMPLE_GROUPS, accumulate
from rewardpipe.store import LocalStore

K = 8
WEIGHTS = {"correctness": 1.0, "asked_before_coding": 0.6, "guessed_immediately": 0.4, "loop_penalty": 0.2}


def record(g, i, comps, metrics=None, step=0, status="scored", error=None):
    weights = {name: WEIGHTS.get(name, 1.0) for name in comps}
    return Record(
        run_id="run",
        step=step,
        group_id=f"g{g}",
        rollout_id=f"g{g}-{i}",
        task_id=f"t{g}",
        status=status,
        error=error,
        components=comps,
        weights=weights,
        metrics=metrics or {},
        aggregate=None if status == "error" else sum(weights[n] * v for n, v in comps.items()),
    )


def build(fn, groups=10, metrics=None):
    return [record(g, i, fn(g, i), metrics(g, i) if metrics else None) for g in range(groups) for i in range(K)]


def diagnoses(result, cause, step=0):
    return [d for d in result.step(step).diagnoses if d.cause == cause]


def alarm_for(result, component, kind="dead_component"):
    (alarm,) = [a for a in result.alarms if a.component == component and a.kind == kind]
    return alarm


# -- saturation ------------------------------------------------------------------------------------


def test_saturation_names_the_maximum_and_is_attached_to_the_alarm():
    result = monitor_records(build(lambda g, i: {"asked_before_coding": 1.0, "correctness": float(i % 2)}))
    (diagnosis,) = diagnoses(result, "saturation")
    assert diagnosis.components == ["asked_before_coding"]
    assert diagnosis.figures["maximum"] == 1.0 and diagnosis.figures["zero_variance_group_fraction"] == 1.0
    assert diagnosis.figures["weight"] == 0.6 and "saturated" in diagnosis.message
    alarm = alarm_for(result, "asked_before_coding")
    assert [c["cause"] for c in alarm.causes] == ["saturation"]
    assert all("asked_before_coding = 1.0, like every rollout" in e["reason"] for e in alarm.examples)


def test_no_saturation_when_the_component_still_varies():
    result = monitor_records(build(lambda g, i: {"asked_before_coding": [1.0, 0.6][i % 2], "correctness": 0.5}))
    assert diagnoses(result, "saturation") == []


# -- dense shaping starves the sparse outcome --------------------------------------------------------


def test_shaping_carrying_the_advantage_while_the_outcome_is_constant():
    result = monitor_records(
        build(lambda g, i: {"correctness": 0.0, "asked_before_coding": [0.0, 0.6, 1.0][i % 3], "loop_penalty": 0.0})
    )
    stats = result.step(0).components
    assert stats["asked_before_coding"].advantage_share == 1.0 and stats["correctness"].advantage_share == 0.0
    (diagnosis,) = diagnoses(result, "shaping_starves_outcome")
    assert diagnosis.components == ["asked_before_coding", "correctness"]
    assert diagnosis.figures["shaping_advantage_share"] == 1.0
    assert diagnosis.figures["outcome_zero_variance_group_fraction"] == 1.0
    assert "carries 100% of the GRPO advantage while correctness is constant in 100% of groups" in diagnosis.message
    assert "shaping_starves_outcome" in [c["cause"] for c in alarm_for(result, "correctness").causes]


def test_no_starvation_while_the_outcome_still_varies_or_the_shaping_is_a_minority():
    varied_outcome = monitor_records(
        build(lambda g, i: {"correctness": float(i % 2), "asked_before_coding": [0.0, 0.6, 1.0][i % 3]})
    )
    assert diagnoses(varied_outcome, "shaping_starves_outcome") == []
    # the outcome is constant, but a third component shares the advantage so no shaping one has most of it
    split = monitor_records(
        build(
            lambda g, i: {
                "correctness": 0.0,
                "asked_before_coding": [0.0, 1.0][i % 2],
                "other": [0.0, 0.6][(i // 2) % 2],
                "third": [0.6, 0.0][i // 4],
            }
        )
    )
    shares = {n: s.advantage_share for n, s in split.step(0).components.items()}
    assert shares == pytest.approx({"correctness": 0.0, "asked_before_coding": 1 / 3, "other": 1 / 3, "third": 1 / 3})
    assert diagnoses(split, "shaping_starves_outcome") == []


def test_outcome_components_are_configurable():
    from rewardpipe.monitoring import Thresholds

    th = Thresholds(outcome_components=("passed",), ranges={"passed": (0.0, 1.0)})
    result = monitor_records(build(lambda g, i: {"passed": 0.0, "style": float(i % 2)}), th)
    (diagnosis,) = diagnoses(result, "shaping_starves_outcome")
    assert diagnosis.components == ["style", "passed"]


# -- unreachable gate ------------------------------------------------------------------------------


def gate_metrics(g, i):
    return [
        {"questions": 2, "committed": False},
        {"questions": 0, "committed": True},
        {"questions": 0, "committed": False},
    ][i % 3]


def test_a_bonus_nobody_earns_is_an_unreachable_gate_with_the_closest_misses_as_examples():
    result = monitor_records(
        build(lambda g, i: {"asked_before_coding": 0.0, "correctness": float(i % 2)}, metrics=gate_metrics)
    )
    (diagnosis,) = diagnoses(result, "unreachable_gate")
    assert diagnosis.components == ["asked_before_coding"] and diagnosis.figures["rollouts"] == 80
    alarm = alarm_for(result, "asked_before_coding")
    assert "unreachable_gate" in [c["cause"] for c in alarm.causes]
    assert len(alarm.examples) == 3
    for example in alarm.examples:  # asked-but-never-committed rollouts, one per group
        assert example["reason"] == "closest miss: asked 2 question(s) but never committed code"
        assert example["rollout_id"].endswith(("-0", "-3", "-6"))
    assert len({e["group_id"] for e in alarm.examples}) == 3


def test_no_unreachable_gate_once_any_rollout_earns_the_bonus():
    result = monitor_records(
        build(lambda g, i: {"asked_before_coding": 0.6 if (g, i) == (0, 0) else 0.0, "correctness": float(i % 2)})
    )
    assert result.step(0).components["asked_before_coding"].verdict == "dead"
    assert diagnoses(result, "unreachable_gate") == []


def test_the_outcome_at_zero_is_not_called_a_gate():
    result = monitor_records(build(lambda g, i: {"correctness": 0.0, "asked_before_coding": float(i % 2)}))
    assert diagnoses(result, "unreachable_gate") == []


# -- redundant components ----------------------------------------------------------------------------


def test_two_components_perfectly_correlated_within_groups_are_redundant():
    # b = 2a + g inside each group (a different offset per group), c independent of both
    result = monitor_records(build(lambda g, i: {"a": float(i % 3), "b": 2.0 * (i % 3) + g, "c": float(i % 2)}))
    (diagnosis,) = diagnoses(result, "redundant_components")
    assert diagnosis.components == ["a", "b"]
    assert diagnosis.figures["groups_compared"] == min(10, SAMPLE_GROUPS)
    assert diagnosis.figures["min_abs_correlation"] > 0.999 and "move together" in diagnosis.message


def test_anti_correlated_components_are_redundant_against_each_other():
    result = monitor_records(build(lambda g, i: {"a": float(i % 3), "b": -float(i % 3), "c": float(i % 2)}))
    (diagnosis,) = diagnoses(result, "redundant_components")
    assert "against each other" in diagnosis.message and diagnosis.figures["mean_correlation"] < -0.999


def test_one_group_that_breaks_the_correlation_clears_redundancy():
    def comps(g, i):
        b = 2.0 * (i % 3) if g != 5 else float((i * 7) % 4)
        return {"a": float(i % 3), "b": b}

    assert diagnoses(monitor_records(build(comps)), "redundant_components") == []

    # and one that varies while the other is constant in that group also clears it
    def constant_b(g, i):
        return {"a": float(i % 3), "b": 2.0 * (i % 3) if g != 2 else 1.0}

    assert diagnoses(monitor_records(build(constant_b)), "redundant_components") == []


# -- examples -------------------------------------------------------------------------------------------


def exec_metrics(g, i):
    if i % 4 == 0:
        return {
            "committed": True,
            "exec_status": "failed",
            "exec_reason": f"AssertionError: add(1, 2) != 3 [{g}]",
            "tests_passed": 0,
            "tests_total": 5,
        }
    if i % 4 == 1:
        return {"committed": True, "exec_status": "timeout", "exec_reason": "time limit 5s"}
    return {"committed": False, "assistant_turns": 1, "questions": 1}


def test_correctness_dead_at_zero_shows_rollouts_whose_code_ran_and_failed():
    records = build(lambda g, i: {"correctness": 0.0, "asked_before_coding": float(i % 2)}, metrics=exec_metrics)
    alarm = alarm_for(monitor_records(records), "correctness")
    assert len(alarm.examples) == 3 and len({e["group_id"] for e in alarm.examples}) == 3
    for example in alarm.examples:
        g = example["group_id"][1:]
        assert example["rollout_id"] == f"g{g}-0" or example["rollout_id"] == f"g{g}-4"
        assert example["reason"].startswith(f"code ran and failed: AssertionError: add(1, 2) != 3 [{g}]")
        assert example["step"] == 0
        assert example["transcript_key"] == f"runs/run/transcripts/step=0/group=g{g}/{example['rollout_id']}.json"


def test_a_behaviour_component_at_its_minimum_shows_behaviour_not_test_failures():
    records = build(
        lambda g, i: {"correctness": float(i % 2), "guessed_immediately": -1.0},
        metrics=lambda g, i: {**exec_metrics(g, 0), "assistant_turns": 1, "questions": 0},
    )
    alarm = alarm_for(monitor_records(records), "guessed_immediately")
    for example in alarm.examples:
        assert example["reason"].startswith(
            "1 assistant turn(s), 0 question(s), committed code; guessed_immediately = -1.0"
        )
        assert "tests" not in example["reason"]


def test_examples_fall_back_to_timeouts_then_missing_commits():
    only_timeouts = build(
        lambda g, i: {"correctness": 0.0, "x": float(i % 2)}, metrics=lambda g, i: exec_metrics(g, 1 if i % 2 else 2)
    )
    reasons = [e["reason"] for e in alarm_for(monitor_records(only_timeouts), "correctness").examples]
    assert reasons and all(r.startswith("code timed out: time limit 5s") for r in reasons)
    no_code = build(lambda g, i: {"correctness": 0.0, "x": float(i % 2)}, metrics=lambda g, i: exec_metrics(g, 2))
    reasons = [e["reason"] for e in alarm_for(monitor_records(no_code), "correctness").examples]
    assert reasons and all(r.startswith("no code committed (1 assistant turns, 1 questions)") for r in reasons)
    counts_only = build(
        lambda g, i: {"correctness": 0.0, "x": float(i % 2)},
        metrics=lambda g, i: {"exec_status": "failed", "tests_passed": 1, "tests_total": 4},
    )
    reasons = [e["reason"] for e in alarm_for(monitor_records(counts_only), "correctness").examples]
    assert reasons and all(r.startswith("code ran and failed: 1/4 tests passed") for r in reasons)


def test_error_rate_alarm_shows_error_records():
    records = build(lambda g, i: {"correctness": float(i % 2)})
    records += [
        record(
            g,
            100,
            {"correctness": None},
            status="error",
            error=ErrorInfo(kind="executor_crash", message="sandbox died"),
        )
        for g in range(10)
    ]
    alarm = alarm_for(monitor_records(records), "errors", kind="error_rate")
    assert alarm.examples and all(e["reason"] == "error executor_crash: sandbox died" for e in alarm.examples)


def test_hostile_reasons_are_one_printable_bounded_line():
    hostile = "\x1b[2J\x1b]0;pwned\x07line1\nline2\r" + "A" * 1000
    records = build(
        lambda g, i: {"correctness": 0.0, "x": float(i % 2)},
        metrics=lambda g, i: {"exec_status": "failed", "exec_reason": hostile, "tests_passed": 0, "tests_total": 1},
    )
    alarm = alarm_for(monitor_records(records), "correctness")
    for example in alarm.examples:
        assert len(example["reason"]) <= REASON_CHARS
        assert all(ch.isprintable() for ch in example["reason"])
    assert clean("a\nb\tc") == "a\\x0ab\\x09c"  # visible escapes, as every other output shows them


def test_examples_travel_in_json_the_store_and_the_terminal(tmp_path):
    records = build(lambda g, i: {"correctness": 0.0, "x": float(i % 2)}, metrics=exec_metrics)
    result = monitor_records(records)
    data = json.loads(result.to_json())
    (dead,) = [a for a in data["alarms"] if a["component"] == "correctness"]
    assert len(dead["examples"]) == 3 and set(dead["examples"][0]) == {
        "rollout_id",
        "group_id",
        "step",
        "transcript_key",
        "reason",
    }
    store = LocalStore(tmp_path)
    sink = StoreAlarmSink(store)
    alarm = alarm_for(result, "correctness")
    sink.emit(alarm)
    assert store.get_json(sink.written[0])["examples"] == alarm.examples
    buffer = io.StringIO()
    ConsoleAlarmSink(Console(file=buffer, width=300, color_system=None)).emit(alarm)
    text = buffer.getvalue()
    assert f"example {alarm.examples[0]['rollout_id']} (group {alarm.examples[0]['group_id']})" in text
    assert alarm.examples[0]["transcript_key"] in text


def test_the_sample_behind_examples_is_bounded_per_step():
    records = build(lambda g, i: {"correctness": float(i % 2)}, groups=5 * SAMPLE_GROUPS)
    _, steps = accumulate(records)
    assert len(steps[0].sample) == SAMPLE_GROUPS and len(steps[0].groups) == 5 * SAMPLE_GROUPS
    assert sum(len(v) for v in steps[0].sample.values()) == SAMPLE_GROUPS * K


def test_transcript_keys_encode_ids_like_record_keys():
    assert transcript_key("r 1", 3, "a/b", "../x") == "runs/r%201/transcripts/step=3/group=a%2Fb/..%2Fx.json"
