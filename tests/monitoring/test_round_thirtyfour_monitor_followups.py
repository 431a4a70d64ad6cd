"""Round thirty-four, the monitor's follow-ups: an open dead alarm whose target stops being judged is closed with a
note (and stops counting in DeadStreak), the ``llm_user_replaced`` warning on every path the monitor runs, and the
report's ``turn_kinds`` bounded in count."""

from __future__ import annotations

import pytest

from rewardpipe.monitoring import monitor_records
from rewardpipe.monitoring.thresholds import Thresholds
from tests.monitoring.test_round_thirtythree_followups import _records as _few_records

# -- 1. an open dead alarm whose target is no longer judged ---------------------------------------------------------

PENALTY = {"pen": (-1.0, 0.0), "ok": (0.0, 1.0)}


def _records(values_of, weights, steps=2):
    """``steps`` steps of 5 groups of 4 records each (enough groups for a verdict at each step)."""
    return _few_records(values_of, weights, steps=steps, groups=5)


def _step(step, values_of, weights):
    records = _records(values_of, weights, steps=step + 1)
    return [r for r in records if r.step == step]


def _dead_then(later_records, later_th, th=None):
    """A run whose ``pen`` is dead (alarmed, idle penalties alarmed) at steps 0-1, then ``later_records``."""
    th = th or Thresholds(ranges=PENALTY, alarm_idle_penalties=True, raise_after=1)
    first = monitor_records(_records(lambda i: {"pen": 0.0, "ok": float(i % 2)}, {"pen": 1.0, "ok": 1.0}), th)
    assert [a.kind for a in first.alarms if a.component == "pen"] == ["dead_component"]
    assert first.state.targets["component:pen"].active
    return monitor_records(later_records, later_th, first.state)


def _closed(result, component="pen"):
    target = result.state.targets[f"component:{component}"]
    assert not target.active
    assert target.dead_streak == 0
    (alarm,) = [a for a in result.alarms if a.component == component]
    assert alarm.kind == "recovered"
    assert alarm.recovered_from == "dead_component"
    assert "without a recovery" in alarm.message
    return alarm


def test_an_alarm_on_a_component_now_an_idle_penalty_is_closed_with_a_note():
    later = _step(2, lambda i: {"pen": 0.0, "ok": float(i % 2)}, {"pen": 1.0, "ok": 1.0})
    result = _dead_then(later, Thresholds(ranges=PENALTY, alarm_idle_penalties=False, raise_after=1))
    assert result.step(2).components["pen"].verdict == "info"
    alarm = _closed(result)
    assert alarm.cause == "no_longer_judged_idle_penalty"
    assert "idle penalty" in alarm.message
    # closed once: the next idle step says nothing more
    again = monitor_records(
        _step(3, lambda i: {"pen": 0.0, "ok": float(i % 2)}, {"pen": 1.0, "ok": 1.0}),
        Thresholds(ranges=PENALTY, alarm_idle_penalties=False, raise_after=1),
        result.state,
    )
    assert [a for a in again.alarms if a.component == "pen"] == []


def test_an_alarm_on_a_component_gone_from_the_records_is_closed_and_its_streak_ends():
    later = _step(2, lambda i: {"renamed": 0.0, "ok": float(i % 2)}, {"renamed": 1.0, "ok": 1.0})
    result = _dead_then(later, Thresholds(ranges=PENALTY, alarm_idle_penalties=True, raise_after=1))
    alarm = _closed(result)
    assert alarm.cause == "no_longer_judged_absent"
    assert "absent" in alarm.message


def test_an_alarm_on_a_component_now_ignored_is_closed():
    later = _step(2, lambda i: {"pen": 0.0, "ok": float(i % 2)}, {"pen": 1.0, "ok": 1.0})
    th = Thresholds(ranges=PENALTY, alarm_idle_penalties=True, raise_after=1, ignore=["pen"])
    alarm = _closed(_dead_then(later, th))
    assert alarm.cause == "no_longer_judged_ignored"


def test_a_dead_streak_below_raise_after_ends_silently_when_the_component_goes():
    th = Thresholds(ranges=PENALTY, alarm_idle_penalties=True, raise_after=5)
    first = monitor_records(_records(lambda i: {"pen": 0.0, "ok": float(i % 2)}, {"pen": 1.0, "ok": 1.0}), th)
    assert first.state.targets["component:pen"].dead_streak == 2
    later = _step(2, lambda i: {"ok": float(i % 2)}, {"ok": 1.0})
    result = monitor_records(later, th, first.state)
    assert result.state.targets["component:pen"].dead_streak == 0
    assert result.state.targets["component:pen"].streak == 0
    assert result.alarms == []


def test_a_step_with_no_scored_record_closes_nothing():
    from rewardpipe.models import Record
    from tests.monitoring.test_fast_path import record

    later = [
        Record.model_validate(
            {**record("r1", 2, f"g{g}", f"g{g}-{i}"), "status": "error", "error": {"kind": "x", "message": "boom"}}
        )
        for g in range(5)
        for i in range(4)
    ]
    result = _dead_then(later, Thresholds(ranges=PENALTY, alarm_idle_penalties=True, raise_after=1))
    assert result.state.targets["component:pen"].active


@pytest.fixture
def bucket(monkeypatch):
    """An S3Store on a moto bucket ``records`` (the variance check keeps its state in S3)."""
    boto3 = pytest.importorskip("boto3")
    from moto import mock_aws

    from rewardpipe.store import S3Store

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="records")
        yield S3Store("records", client=s3)


def _check(store, step, **settings):
    from rewardpipe.aws.monitoring import CheckRequest, run_check
    from rewardpipe.aws.settings import Settings

    return run_check(CheckRequest(run_id="r1", step=step), Settings(bucket="records", **settings), store=store)


def test_the_variance_checks_dead_streak_stops_counting_a_removed_component(bucket, capsys):
    from tests.monitoring.test_round_thirtythree_followups import _emf

    declared = {"pen": {"range": [0, 1], "role": "shaping"}, "ok": {"range": [0, 1], "role": "outcome"}}
    for r in _records(lambda i: {"pen": 0.5, "ok": float(i % 2)}, {"pen": 1.0, "ok": 1.0}, steps=3):
        bucket.put_record(r)
    raised = []
    for step in (0, 1, 2):  # the default policy alarms after 3 dead steps
        out = _check(bucket, step, reward_components=declared)
        raised += [a["kind"] for a in out["results"][0]["alarms"] if a["component"] == "pen"]
    assert raised == ["dead_component"]
    capsys.readouterr()
    for r in _step(3, lambda i: {"ok": float(i % 2)}, {"ok": 1.0}):
        bucket.put_record(r)
    out = _check(bucket, 3, reward_components=declared)
    docs = _emf(capsys.readouterr().out)
    streaks = {doc["component"]: doc["DeadStreak"][0] for doc in docs if "DeadStreak" in doc and "run" not in doc}
    assert streaks.get("pen", 0) == 0
    closed = [a for a in out["results"][0]["alarms"] if a["component"] == "pen"]
    assert [a["cause"] for a in closed] == ["no_longer_judged_absent"]


# -- 2. the run warnings on the variance check's path ---------------------------------------------------------------


def test_the_variance_check_logs_and_reports_the_llm_user_replaced_warning(bucket, capsys):
    import json

    from rewardpipe.monitoring.messages import USER_REPLACED

    records = _records(lambda i: {"ok": float(i % 2)}, {"ok": 1.0}, steps=1)
    for n, r in enumerate(records):
        r.metrics["llm_user_fallbacks"] = int(n % 3 == 0)  # a third of the rollouts: over the warning's share
        bucket.put_record(r)
    capsys.readouterr()
    out = _check(bucket, 0)
    printed = capsys.readouterr().out
    (summary,) = out["results"]
    assert [w["kind"] for w in summary["warnings"]] == [USER_REPLACED]
    logged = [json.loads(line) for line in printed.splitlines() if line.startswith('{"level": "WARNING"')]
    assert [(w["kind"], w["run_id"], w["step"]) for w in logged] == [(USER_REPLACED, "r1", 0)]
    assert "rule-based user replaced the LLM-played user in 7 of 20" in logged[0]["message"]


def test_a_healthy_step_has_no_warnings_in_the_checks_summary(bucket):
    for r in _records(lambda i: {"ok": float(i % 2)}, {"ok": 1.0}, steps=1):
        bucket.put_record(r)
    assert "warnings" not in _check(bucket, 0)["results"][0]


# -- 3. the report's turn_kinds, bounded in count -------------------------------------------------------------------


def _transcript(count, kinds):
    """``count`` messages (a user's task, then assistant and user in turn) and ``kinds`` turn kinds."""
    from types import SimpleNamespace

    from rewardpipe.models import Message
    from rewardpipe.transcripts import Verdict

    messages = [Message(role="user", content="the task")] + [
        Message(role="assistant" if i % 2 == 0 else "user", content=f"m{i}") for i in range(count - 1)
    ]
    return SimpleNamespace(
        messages=messages,
        turn_kinds=[f"k{i}" for i in range(kinds)],
        reveals_spec=False,
        executed_code=None,
        verdict=Verdict(status="not_executed"),
        components={},
        aggregate=None,
    )


def _page(compact):
    from rewardpipe.monitoring.html import _transcript as page

    return page({"rollout_id": "r", "group_id": "g", "step": 0, "transcript": compact})


def test_a_long_transcripts_turn_kinds_keep_only_the_shown_turns():
    import json

    from rewardpipe.monitoring.report import FIRST_MESSAGES, LAST_MESSAGES, _compact_transcript

    compact = _compact_transcript(_transcript(100_001, 50_000))
    assert compact["turn_kinds_count"] == 50_000
    shown_turns = [m["turn"] for m in compact["messages"] if m["role"] == "assistant"]
    assert len(compact["turn_kinds"]) + sum(1 for m in compact["messages"] if "turn_kind" in m) <= (
        FIRST_MESSAGES + LAST_MESSAGES
    )
    assert len(json.dumps(compact)) < 20_000
    page = _page(compact)
    # every turn shown is named by its own kind, the first ones and the last ones alike
    for turn in shown_turns:
        assert f"assistant · turn {turn} · k{turn}" in page
    assert shown_turns[0] == 0 and shown_turns[-1] == 49_999


def test_a_short_transcript_with_many_kinds_lists_the_kinds_of_its_turns():
    from rewardpipe.monitoring.report import _compact_transcript

    compact = _compact_transcript(_transcript(7, 100_000))  # 3 assistant turns, 100,000 kinds
    assert compact["turn_kinds"] == ["k0", "k1", "k2"]
    assert compact["turn_kinds_count"] == 100_000
    assert "assistant · turn 2 · k2" in _page(compact)


def test_a_transcript_with_as_many_kinds_as_turns_is_as_before():
    from rewardpipe.monitoring.report import _compact_transcript

    compact = _compact_transcript(_transcript(7, 3))
    assert compact["turn_kinds"] == ["k0", "k1", "k2"]
    assert "turn_kinds_count" not in compact
    assert all("turn_kind" not in m for m in compact["messages"])


def test_a_report_written_before_the_cut_still_names_its_turns():
    from rewardpipe.monitoring.report import _compact_transcript

    compact = _compact_transcript(_transcript(1001, 500))
    old = {**compact, "turn_kinds": [f"k{i}" for i in range(500)]}
    old["messages"] = [{k: v for k, v in m.items() if k != "turn_kind"} for m in compact["messages"]]
    old.pop("turn_kinds_count")
    assert "assistant · turn 499 · k499" in _page(old)
