"""Monitor: statistics, verdicts and causes, exclusions, hysteresis, state carried between calls."""

from __future__ import annotations

import json
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from rewardpipe.models import ErrorInfo, Record
from rewardpipe.monitoring import (
    MonitorInputError,
    MonitorState,
    StoreAlarmSink,
    Thresholds,
    iter_jsonl_records,
    monitor_records,
    monitor_step,
    state_key,
)
from rewardpipe.store import LocalStore

K = 8  # rollouts per group


def rec(group, k, comps, step=0, run="run", status="scored", error=None, aggregate="sum"):
    if aggregate == "sum":
        aggregate = None if status == "error" else sum(v for v in comps.values() if v is not None)
    return Record(
        run_id=run,
        step=step,
        group_id=f"g{group}",
        rollout_id=f"g{group}-{k}",
        task_id=f"t{group}",
        status=status,
        error=error,
        components=comps,
        weights={name: 1.0 for name in comps},
        aggregate=aggregate,
    )


def batch(fn, groups=10, k=K, step=0, **kw):
    """Records whose components are ``fn(group, rollout_index)``."""
    return [rec(g, i, fn(g, i), step=step, **kw) for g in range(groups) for i in range(k)]


def varied(g, i):
    return {"correctness": ((g + i) % 4) / 4}


def stats_of(records, name, th=None, step=0):
    return monitor_records(records, th).step(step).components[name]


# -- verdicts and causes --------------------------------------------------------------------------


def test_ok_when_values_vary_inside_groups():
    s = stats_of(batch(varied), "correctness")
    assert s.verdict == "ok" and s.cause is None and s.message is None
    assert s.zero_variance_group_fraction == 0.0
    assert s.eligible_groups == 10 and s.values == 80
    assert s.within_group_std_mean == pytest.approx(math.sqrt(0.078125))  # std of 0, .25, .5, .75


def test_dead_at_minimum_names_the_likely_cause():
    records = batch(lambda g, i: {"correctness": 0.0, "asked_before_coding": [0.0, 0.6, 1.0][i % 3]})
    result = monitor_records(records)
    s = result.step(0).components["correctness"]
    assert (s.verdict, s.cause, s.constant_value) == ("dead", "constant_at_minimum", 0.0)
    assert s.zero_variance_group_fraction == 1.0
    assert "0.0" in s.message and "are the tests running the model's code" in s.message
    assert result.step(0).components["asked_before_coding"].verdict == "ok"
    (alarm,) = result.alarms
    assert (alarm.kind, alarm.component, alarm.step, alarm.cause) == (
        "dead_component",
        "correctness",
        0,
        "constant_at_minimum",
    )
    assert alarm.figures["zero_variance_group_fraction"] == 1.0
    assert alarm.run_id == "run"


def test_dead_at_minimum_in_most_groups_while_a_few_pass():
    # 24 of 25 groups fail every test, one group passes every test: 96% of groups constant at 0.0.
    records = batch(lambda g, i: {"correctness": 1.0 if g == 0 else 0.0}, groups=25)
    s = stats_of(records, "correctness")
    assert s.verdict == "dead" and s.cause == "constant_at_minimum"
    assert s.zero_variance_group_fraction == 1.0 and s.std > 0
    assert "correctness is 0.0 (its minimum) in every rollout of 96% of groups (24/25)" in s.message
    assert "100% of groups are constant" in s.message


def test_dead_at_maximum_is_saturated():
    s = stats_of(batch(lambda g, i: {"asked_before_coding": 1.0}), "asked_before_coding")
    assert (s.verdict, s.cause, s.constant_value) == ("dead", "constant_at_maximum", 1.0)
    assert "asked_before_coding constant at its maximum 1.0" in s.message and "saturated" in s.message


def test_penalty_that_never_fires_is_info_not_an_alarm():
    records = batch(lambda g, i: {"loop_penalty": 0.0, "correctness": float(i % 2)})
    result = monitor_records(records)
    s = result.step(0).components["loop_penalty"]
    assert (s.verdict, s.cause, s.constant_value) == ("info", "penalty_never_fires", 0.0)
    assert "never fires" in s.message and "info, not an alarm" in s.message
    assert result.alarms == [] and s.dead_streak == 0


def test_penalty_that_never_fires_alarms_when_asked():
    records = batch(lambda g, i: {"loop_penalty": 0.0, "correctness": float(i % 2)})
    result = monitor_records(records, Thresholds(alarm_idle_penalties=True))
    s = result.step(0).components["loop_penalty"]
    assert (s.verdict, s.cause) == ("dead", "constant_at_maximum") and s.dead_streak == 1
    assert [(a.component, a.kind) for a in result.alarms] == [("loop_penalty", "dead_component")]


@pytest.mark.parametrize(
    "name, value, cause",
    [
        ("loop_penalty", -0.5, "constant_at_minimum"),  # a penalty that ALWAYS fires is dead
        ("asked_before_coding", 1.0, "constant_at_maximum"),  # a bonus at its maximum is saturation, not info
        ("unknown_penalty", 0.0, "constant_everywhere"),  # no known range: not assumed to be a penalty
    ],
)
def test_only_an_idle_penalty_is_info(name, value, cause):
    s = stats_of(batch(lambda g, i: {name: value, "x": float(i % 2)}), name)
    assert (s.verdict, s.cause) == ("dead", cause)


def test_varies_across_batch_but_constant_within_groups_is_dead():
    records = batch(lambda g, i: {"difficulty": g / 10})
    s = stats_of(records, "difficulty")
    assert s.std > 0.25  # batch std looks healthy ...
    assert s.within_group_std_mean == 0.0  # ... group std does not
    assert (s.verdict, s.cause) == ("dead", "constant_within_groups")
    assert "varies across the batch" in s.message


def test_constant_everywhere_unknown_range():
    s = stats_of(batch(lambda g, i: {"format": 0.3}), "format")
    assert (s.verdict, s.cause) == ("dead", "constant_everywhere")
    assert s.constant_value == pytest.approx(0.3)
    assert "in every scored rollout" in s.message


def test_known_range_constant_in_the_middle_is_constant_everywhere():
    s = stats_of(batch(lambda g, i: {"correctness": 0.5}), "correctness")
    assert s.cause == "constant_everywhere"


def test_unknown_range_uses_values_seen():
    # 19 of 20 groups at the lowest value seen, one at the highest
    s = stats_of(batch(lambda g, i: {"custom": 5.0 if g == 0 else 2.0}, groups=20), "custom")
    assert s.cause == "constant_at_minimum" and "lowest value seen" in s.message
    th = Thresholds(ranges={"custom": (0.0, 10.0)})
    s = stats_of(batch(lambda g, i: {"custom": 5.0 if g == 0 else 2.0}, groups=20), "custom", th)
    assert s.cause == "constant_within_groups"


def test_below_dead_fraction_is_ok():
    # 8 of 10 groups constant (80% < 90%)
    s = stats_of(batch(lambda g, i: {"c": float(i % 2) if g < 2 else 0.0}), "c")
    assert s.zero_variance_group_fraction == pytest.approx(0.8)
    assert s.verdict == "ok"
    s = stats_of(batch(lambda g, i: {"c": float(i % 2) if g < 2 else 0.0}), "c", Thresholds(dead_fraction=0.8))
    assert s.verdict == "dead"


def test_insufficient_data_without_eligible_groups():
    result = monitor_records(batch(lambda g, i: {"c": 0.0}, groups=10, k=1))
    s = result.step(0).components["c"]
    assert (s.verdict, s.cause, s.eligible_groups, s.groups) == ("insufficient_data", "no_eligible_groups", 0, 10)
    assert s.zero_variance_group_fraction is None and s.within_group_std_mean is None
    assert result.alarms == []


def test_insufficient_data_with_too_few_groups():
    s = stats_of(batch(lambda g, i: {"c": 0.0}, groups=3), "c")
    assert (s.verdict, s.cause) == ("insufficient_data", "too_few_groups")
    assert stats_of(batch(lambda g, i: {"c": 0.0}, groups=3), "c", Thresholds(min_groups=3)).verdict == "dead"


def test_single_rollout_groups_are_ignored():
    # 10 dead groups of 8, plus 30 singleton groups whose values differ from each other.
    records = batch(lambda g, i: {"c": 0.5}) + [rec(100 + j, 0, {"c": j / 30}) for j in range(30)]
    s = stats_of(records, "c")
    assert s.groups == 40 and s.eligible_groups == 10
    assert s.zero_variance_group_fraction == 1.0 and s.verdict == "dead"
    assert s.values == 110  # singletons still count in the batch mean/std


def test_epsilon_tolerance():
    noisy = batch(lambda g, i: {"c": 0.7 + (1e-9 if i % 2 else -1e-9)})
    s = stats_of(noisy, "c")
    assert s.verdict == "dead" and s.within_group_std_mean < 1e-8
    audible = batch(lambda g, i: {"c": 0.7 + (1e-3 if i % 2 else -1e-3)})
    assert stats_of(audible, "c").verdict == "ok"
    assert stats_of(audible, "c", Thresholds(epsilon=1e-2)).verdict == "dead"
    assert stats_of(noisy, "c", Thresholds(epsilon=1e-10)).verdict == "ok"


def test_large_offset_does_not_break_precision():
    # Values around 1e6 with 1e-3 differences: a naive sum-of-squares variance would be mostly rounding error.
    s = stats_of(batch(lambda g, i: {"c": 1e6 + (i % 2) * 1e-3}), "c")
    assert s.within_group_std_mean == pytest.approx(5e-4, rel=1e-3)
    # measured exactly, and judged relative to the values' scale (round thirty-three): 1e-9 of 1e6 is rounding dust
    assert s.verdict == "dead"


# -- exclusions -----------------------------------------------------------------------------------


def test_error_records_are_excluded_and_counted():
    good = batch(lambda g, i: {"correctness": float(i % 2)})
    errors = [
        rec(
            g,
            100 + j,
            {"correctness": 0.0},
            status="error",
            aggregate=0.0,
            error=ErrorInfo(kind="sandbox_timeout" if j else "oom", message="x"),
        )
        for g in range(10)
        for j in range(2)
    ]
    report = monitor_records(good + errors).step(0)
    assert (report.records, report.scored, report.errors) == (100, 80, 20)
    assert report.error_rate == pytest.approx(0.2)
    assert report.error_kinds == {"oom": 10, "sandbox_timeout": 10}
    s = report.components["correctness"]
    assert s.values == 80 and s.mean == pytest.approx(0.5)  # the error rows' 0.0 are not in the mean
    assert report.aggregate.values == 80


def test_errors_can_leave_a_group_ineligible():
    # each group: one scored rollout and 7 errors -> no group is eligible, no dead verdict from errors
    records = [rec(g, 0, {"c": 0.0}) for g in range(10)] + [
        rec(g, i, {"c": None}, status="error", error=ErrorInfo(kind="infra", message="x"))
        for g in range(10)
        for i in range(1, 8)
    ]
    result = monitor_records(records)
    assert result.step(0).components["c"].verdict == "insufficient_data"
    assert [a.kind for a in result.alarms] == ["error_rate"]
    assert "88%" in result.alarms[0].message and "infra 70" in result.alarms[0].message


def test_none_component_excluded_for_that_component_only():
    # 'judge' is None in half the rollouts; the remaining values are constant -> dead. 'correctness' unaffected.
    def fn(g, i):
        return {"correctness": float(i % 2), "judge": None if i % 2 else 1.0}

    report = monitor_records(batch(fn)).step(0)
    judge, corr = report.components["judge"], report.components["correctness"]
    assert judge.missing == 40 and judge.values == 40 and judge.eligible_groups == 10
    assert judge.mean == 1.0 and judge.verdict == "dead"
    assert corr.values == 80 and corr.missing == 0 and corr.verdict == "ok"
    assert report.errors == 0


def test_non_finite_values_excluded():
    report = monitor_records(batch(lambda g, i: {"c": float("nan") if i == 0 else float(i % 2)}, aggregate=1.0)).step(0)
    c = report.components["c"]
    assert c.non_finite == 10 and c.values == 70 and math.isfinite(c.mean) and c.verdict == "ok"


def test_aggregate_none_excluded():
    report = monitor_records(batch(varied, aggregate=None)).step(0)
    assert report.aggregate.values == 0 and report.aggregate.missing == 80
    assert report.aggregate.verdict == "insufficient_data"


# -- aggregate ------------------------------------------------------------------------------------


def test_whole_reward_dead():
    result = monitor_records(batch(lambda g, i: {"correctness": 0.0, "asked_before_coding": 1.0}))
    agg = result.step(0).aggregate
    assert agg.verdict == "dead" and agg.cause == "constant_everywhere"
    assert {(a.component, a.kind) for a in result.alarms} == {
        ("correctness", "dead_component"),
        ("asked_before_coding", "dead_component"),
        ("aggregate", "dead_component"),
    }


def test_components_that_cancel_make_the_aggregate_dead():
    # a and b vary inside groups but a + b is constant (equal weights, opposite signs)
    result = monitor_records(batch(lambda g, i: {"a": float(i % 2), "b": -float(i % 2)}))
    report = result.step(0)
    assert report.components["a"].verdict == report.components["b"].verdict == "ok"
    assert report.aggregate.verdict == "dead" and report.aggregate.cause == "components_cancel"
    assert "a, b" in report.aggregate.message
    assert [(a.component, a.cause) for a in result.alarms] == [("aggregate", "components_cancel")]


# -- statistics against a plain reference implementation -----------------------------------------


def reference_stats(values_by_group):
    allv = [v for vs in values_by_group for v in vs]
    mean = sum(allv) / len(allv)
    std = math.sqrt(sum((v - mean) ** 2 for v in allv) / len(allv))
    stds = []
    for vs in values_by_group:
        if len(vs) >= 2:
            m = sum(vs) / len(vs)
            stds.append(math.sqrt(sum((v - m) ** 2 for v in vs) / len(vs)))
    zero = sum(1 for s in stds if s <= 1e-6)
    return mean, std, (sum(stds) / len(stds) if stds else None), (zero / len(stds) if stds else None)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.lists(st.one_of(st.sampled_from([0.0, 1.0, 0.5]), st.floats(-100, 100)), min_size=1, max_size=6),
        min_size=1,
        max_size=12,
    )
)
def test_statistics_match_reference(values_by_group):
    records = [rec(g, i, {"c": v}) for g, vs in enumerate(values_by_group) for i, v in enumerate(vs)]
    random.Random(0).shuffle(records)  # order must not matter
    s = stats_of(records, "c", Thresholds(min_groups=1))
    mean, std, wstd, frac = reference_stats(values_by_group)
    assert s.mean == pytest.approx(mean, abs=1e-9)
    assert s.std == pytest.approx(std, rel=1e-6, abs=1e-6)
    assert s.min == min(min(vs) for vs in values_by_group) and s.max == max(max(vs) for vs in values_by_group)
    if wstd is None:
        assert s.within_group_std_mean is None and s.verdict == "insufficient_data"
    else:
        assert s.within_group_std_mean == pytest.approx(wstd, rel=1e-6, abs=1e-6)
        assert s.zero_variance_group_fraction == pytest.approx(frac)


def test_steps_are_separate_and_sorted():
    records = batch(varied, step=3) + batch(lambda g, i: {"correctness": 0.0}, step=1)
    random.Random(1).shuffle(records)
    result = monitor_records(records)
    assert [r.step for r in result.steps] == [1, 3]
    assert result.step(1).components["correctness"].verdict == "dead"
    assert result.step(3).components["correctness"].verdict == "ok"


def test_plain_dicts_are_accepted():
    records = [json.loads(r.to_json()) for r in batch(lambda g, i: {"correctness": 0.0})]
    assert stats_of(records, "correctness").verdict == "dead"


def test_several_runs_rejected():
    with pytest.raises(MonitorInputError, match=r"several runs.*a, b"):
        monitor_records(batch(varied, run="a") + batch(varied, run="b"))


def test_to_dict_is_json():
    result = monitor_records(batch(lambda g, i: {"correctness": 0.0}))
    data = json.loads(result.to_json())
    comp = data["steps"][0]["components"]["correctness"]
    assert comp["verdict"] == "dead" and comp["zero_variance_group_fraction"] == 1.0
    assert data["alarms"][0]["component"] == "correctness"
    assert data["state"]["schema"] == "rewardpipe.monitor-state/v2"
    assert data["state"]["checked"] == [[0, 0]] and data["state"]["last_step"] == 0


# -- thresholds -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"recover_fraction": 0.95}, "recover_fraction"),
        ({"dead_fraction": 0}, "dead_fraction"),
        ({"dead_fraction": 1.5}, "dead_fraction"),
        ({"min_groups": 0}, "min_groups"),
        ({"epsilon": -1}, "epsilon"),
        ({"error_rate": 0.1, "error_recover_rate": 0.2}, "error_recover_rate"),
        ({"ranges": {"c": (1.0, 0.0)}}, "range of 'c'"),
        ({"dead_frac": 0.5}, "dead_frac"),
    ],
)
def test_bad_thresholds_are_named(kwargs, fragment):
    with pytest.raises(ValidationError, match=fragment):
        Thresholds(**kwargs)


# -- hysteresis -----------------------------------------------------------------------------------


def step_with_fraction(step, dead_groups, groups=10):
    """A step where ``dead_groups`` of ``groups`` groups have a constant 'c'."""
    return batch(
        lambda g, i: {"c": 0.5 if g < dead_groups else float(i % 2), "x": float(i % 3)}, groups=groups, step=step
    )


def alarms_of(result):
    return [(a.step, a.component, a.kind) for a in result.alarms if a.component == "c"]


def test_alarm_once_per_onset_and_again_after_recovery():
    fractions = {0: 10, 1: 10, 2: 9, 3: 7, 4: 10, 5: 3, 6: 6, 7: 10, 8: 10}
    records = [r for step, dead in fractions.items() for r in step_with_fraction(step, dead)]
    result = monitor_records(records)
    # raised at 0; 1, 2 still dead (no repeat); 3 = 70% is between recover (50%) and dead (90%): stays
    # active; 4 dead (no repeat); 5 = 30% recovers; 6 = 60% is not dead; 7 dead again: re-alarm.
    assert alarms_of(result) == [(0, "c", "dead_component"), (5, "c", "recovered"), (7, "c", "dead_component")]
    assert [result.step(s).components["c"].alarm_active for s in range(9)] == [
        True,
        True,
        True,
        True,
        True,
        False,
        False,
        True,
        True,
    ]
    assert result.alarms[1].recovered_from == "dead_component" and "since step 0" in result.alarms[1].message


def test_raise_after_consecutive_dead_steps():
    th = Thresholds(raise_after=2)
    fractions = {0: 10, 1: 5, 2: 10, 3: 10, 4: 10}
    records = [r for step, dead in fractions.items() for r in step_with_fraction(step, dead)]
    result = monitor_records(records, th)
    assert alarms_of(result) == [(3, "c", "dead_component")]  # 0 alone is not enough; 2+3 are
    assert result.alarms[0].figures["consecutive_dead_steps"] == 2


def test_insufficient_data_neither_raises_nor_clears():
    records = step_with_fraction(0, 10) + step_with_fraction(1, 0, groups=2) + step_with_fraction(2, 10)
    result = monitor_records(records)
    assert result.step(1).components["c"].verdict == "insufficient_data"
    assert alarms_of(result) == [(0, "c", "dead_component")]


def test_ignored_components_get_verdicts_but_no_alarms():
    result = monitor_records(step_with_fraction(0, 10), Thresholds(ignore=("c",)))
    assert result.step(0).components["c"].verdict == "dead"
    assert alarms_of(result) == []


def test_state_carried_between_single_step_calls_matches_one_pass():
    fractions = {0: 10, 1: 10, 2: 3, 3: 10}
    one_pass = monitor_records([r for s, d in fractions.items() for r in step_with_fraction(s, d)])
    state = None
    alarms = []
    for step, dead in fractions.items():
        result = monitor_records(step_with_fraction(step, dead), previous_state=state)
        alarms += result.alarms
        state = json.loads(json.dumps(result.state.to_dict()))  # as stored by put_json
    assert [a.to_dict() for a in alarms] == [a.to_dict() for a in one_pass.alarms]
    assert MonitorState.from_dict(state).targets["component:c"].active is True


def test_replayed_step_does_not_repeat_or_advance():
    first = monitor_records(step_with_fraction(0, 10))
    again = monitor_records(step_with_fraction(0, 10), previous_state=first.state)
    assert again.alarms == [] and again.step(0).replayed
    assert again.state == first.state


def test_state_of_another_run_rejected():
    first = monitor_records(step_with_fraction(0, 10))
    with pytest.raises(MonitorInputError, match="state is for run 'run'"):
        monitor_records(batch(varied, run="other", step=1), previous_state=first.state)


def test_invalid_state_is_a_clear_error():
    with pytest.raises(MonitorInputError, match="invalid monitor state"):
        monitor_records(step_with_fraction(0, 10), previous_state={"targets": {"x": {"streak": -1}}})


def test_error_rate_alarm_hysteresis():
    def step(n, errors):
        good = batch(varied, step=n)
        bad = [
            rec(g, 50 + j, {"correctness": None}, step=n, status="error", error=ErrorInfo(kind="timeout", message=""))
            for j, g in enumerate(range(errors))
        ]
        return good + bad

    # 80 good records per step; errors 20 (20%), 20, 6 (7%: above recover 5%), 2 (2.4%), 20
    records = [r for n, e in enumerate([20, 20, 6, 2, 20]) for r in step(n, e)]
    result = monitor_records(records)
    errs = [(a.step, a.kind) for a in result.alarms if a.component == "errors"]
    assert errs == [(0, "error_rate"), (3, "recovered"), (4, "error_rate")]
    assert result.alarms[0].figures["error_kinds"] == {"timeout": 20}


def test_the_error_streak_counts_bad_steps_whatever_the_alarm_and_error_raise_after_is_its_own():
    def step(n, errors):
        return batch(varied, step=n) + [
            rec(g, 50 + j, {"correctness": None}, step=n, status="error", error=ErrorInfo(kind="timeout", message=""))
            for j, g in enumerate(range(errors))
        ]

    # bad (20%), bad, bad, below the threshold (2.4%), bad
    records = [r for n, e in enumerate([20, 20, 20, 2, 20]) for r in step(n, e)]
    result = monitor_records(records, Thresholds(raise_after=1, error_raise_after=3))
    assert [s.error_streak for s in result.steps] == [1, 2, 3, 0, 1]  # the alarm opened at 3 and the streak went on
    assert [(a.step, a.kind) for a in result.alarms if a.component == "errors"] == [(2, "error_rate"), (3, "recovered")]
    assert result.state.targets["errors"].error_streak == 1
    again = monitor_records(records, Thresholds(error_raise_after=3), previous_state=result.state)
    assert [s.error_streak for s in again.steps] == [None] * 5  # replays do not advance it
    assert Thresholds(raise_after=2).errors_raise_after == 2  # unset: the dead-component raise_after


# -- store integration and JSONL ------------------------------------------------------------------


def test_monitor_step_with_store_carries_state_and_writes_alarms(tmp_path):
    store = LocalStore(tmp_path)
    for step, dead in {0: 10, 1: 10, 2: 2}.items():
        for r in step_with_fraction(step, dead):
            store.put_record(r)
    store._write("runs/run/step=1/group=g0/garbage.json", b"nope")
    sink = StoreAlarmSink(store)
    kinds = []
    for step in (0, 1, 2):
        result = monitor_step(store, "run", step, sinks=[sink])
        kinds.append([(a.component, a.kind) for a in result.alarms])
        if step == 1:
            (bad,) = result.unreadable
            assert bad["key"] == "runs/run/step=1/group=g0/garbage.json" and "not valid JSON" in bad["reason"]
        else:
            assert result.unreadable == []
    assert kinds == [[("c", "dead_component")], [], [("c", "recovered")]]
    assert store.get_json(state_key("run"))["last_step"] == 2
    assert sorted(sink.written) == [
        "runs/run/alarms/step=0/c-dead_component.json",
        "runs/run/alarms/step=2/c-recovered.json",
    ]
    assert store.get_json(sink.written[0])["cause"] == "constant_everywhere"
    # re-running a step (a retried Lambda) raises nothing new
    assert monitor_step(store, "run", 2, sinks=[sink]).alarms == []


def test_iter_jsonl_records_skips_bad_lines(tmp_path):
    path = tmp_path / "r.jsonl"
    lines = [r.to_json() for r in batch(varied, groups=1)]
    lines.insert(2, "{broken")
    lines.insert(4, json.dumps({"run_id": "run"}))
    path.write_text("\n".join(lines) + "\n\n")
    bad = []
    records = list(iter_jsonl_records(path, on_bad=bad.append))
    assert len(records) == 8
    assert [b.key for b in bad] == [f"{path}:3", f"{path}:5"]
    assert bad[0].reason == "not valid JSON" and "field" in bad[1].reason
