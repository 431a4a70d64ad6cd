"""The monitor sees every step: the set of checked steps, late steps, replays, corrupt states, isolation."""

from __future__ import annotations

import json

import pytest

from rewardpipe.monitoring import (
    MonitorState,
    StoreAlarmSink,
    check_pending,
    load_state,
    monitor_records,
    monitor_step,
    state_key,
)
from rewardpipe.store import LocalStore, StoreError
from tests.test_monitor import batch, step_with_fraction, varied


def alarms_of(result, component="c"):
    return [(a.step, a.kind) for a in result.alarms if a.component == component]


def put(store, records):
    for record in records:
        store.put_record(record)


# -- the checked set ------------------------------------------------------------------------------


def test_checked_ranges_merge_and_answer_membership():
    state = MonitorState()
    for step in (5, 0, 1, 3, 2, 9):
        state.mark_checked(step)
    assert state.checked == [(0, 3), (5, 5), (9, 9)] and state.last_step == 9
    assert [s for s in range(11) if state.is_checked(s)] == [0, 1, 2, 3, 5, 9]
    assert state.unchecked([9, 8, 4, 0, 4, 10]) == [4, 8, 10]
    state.mark_checked(4)
    assert state.checked == [(0, 5), (9, 9)]
    again = MonitorState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert again.checked == state.checked and again.is_checked(4) and not again.is_checked(6)


def test_a_step_checked_after_a_later_step_still_alarms():
    later = monitor_records(step_with_fraction(3, 0))  # step 3 healthy, checked first
    late = monitor_records(step_with_fraction(2, 10), previous_state=later.state)
    assert not late.step(2).replayed
    assert alarms_of(late) == [(2, "dead_component")]
    assert late.state.checked == [(2, 3)]


def test_a_replay_of_a_checked_step_neither_alarms_nor_changes_the_state():
    first = monitor_records(step_with_fraction(0, 10) + step_with_fraction(2, 10))
    assert alarms_of(first) == [(0, "dead_component")]
    # step 1 was never checked: it is checked now; 0 and 2 are replays
    again = monitor_records(
        step_with_fraction(0, 10) + step_with_fraction(1, 0) + step_with_fraction(2, 10), previous_state=first.state
    )
    assert [r.replayed for r in again.steps] == [True, False, True]
    assert alarms_of(again) == [(1, "recovered")]
    assert again.step(0).components["c"].dead_streak is None  # a replay is not tracked


def test_version_1_state_is_upgraded_with_every_step_up_to_last_step_checked():
    old = {
        "schema": "rewardpipe.monitor-state/v1",
        "run_id": "run",
        "last_step": 4,
        "targets": {"component:c": {"active": True, "streak": 1, "since": 2}},
    }
    state = MonitorState.from_dict(old)
    assert state.checked == [(0, 4)] and state.targets["component:c"].active
    result = monitor_records(step_with_fraction(4, 10) + step_with_fraction(5, 0), previous_state=old)
    assert [r.replayed for r in result.steps] == [True, False]
    assert alarms_of(result) == [(5, "recovered")]


def test_dead_streak_counts_consecutive_dead_checked_steps():
    # dead, dead, insufficient data (neither extends nor breaks), dead, ok, dead
    steps = [
        step_with_fraction(0, 10),
        step_with_fraction(1, 10),
        step_with_fraction(2, 10, groups=2),
        step_with_fraction(3, 10),
        step_with_fraction(4, 0),
        step_with_fraction(5, 10),
    ]
    result = monitor_records([r for s in steps for r in s])
    assert [result.step(s).components["c"].dead_streak for s in range(6)] == [1, 2, 2, 3, 0, 1]
    assert result.state.targets["component:c"].dead_streak == 1
    assert result.step(0).aggregate.dead_streak == 0  # the aggregate varies (x varies)


def test_an_invalid_record_dict_is_reported_and_the_rest_are_checked():
    records = [json.loads(r.to_json()) for r in batch(lambda g, i: {"correctness": 0.0})]
    records[3]["step"] = "three"
    del records[7]["group_id"]
    result = monitor_records(records)
    assert [u["key"] for u in result.unreadable] == ["record #3", "record #7"]
    assert "step" in result.unreadable[0]["reason"] and "group_id" in result.unreadable[1]["reason"]
    assert result.step(0).records == 78 and alarms_of(result, "correctness") == [(0, "dead_component")]


# -- corrupt state in a store -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "content, fragment",
    [
        (b"{not json", "not valid JSON"),
        (b'{"schema": "rewardpipe.monitor-state/v2", "targets": {"c": {"streak": -3}}}', "invalid monitor state"),
        (b'["a list"]', "expected a JSON object"),
        (b'{"schema": "rewardpipe.monitor-state/v2", "run_id": "other"}', "state is for run 'other'"),
        (b'{"schema": "rewardpipe.monitor-state/v2", "checked": [[5, 2]]}', "checked range [5, 2]"),
        # beyond any step a run can have: every later step would count as checked and never alarm
        (
            b'{"schema": "rewardpipe.monitor-state/v2", "checked": [[0, 99999999999999999999]]}',
            "checked range [0, 99999999999999999999]",
        ),
    ],
)
def test_a_corrupt_state_is_kept_aside_and_a_fresh_one_started(tmp_path, content, fragment):
    store = LocalStore(tmp_path)
    put(store, step_with_fraction(0, 10))
    store.put_bytes(state_key("run"), content)
    result = monitor_step(store, "run", 0, sinks=[StoreAlarmSink(store)])
    assert alarms_of(result) == [(0, "dead_component")]  # checked from a fresh state
    (problem,) = [u for u in result.unreadable if u["key"] == state_key("run")]
    assert fragment in problem["reason"] and "started a fresh state" in problem["reason"]
    (aside,) = [k for k in store.list_keys("runs/run/monitor/") if "corrupt" in k]
    assert store.get_bytes(aside) == content  # the corrupt object is kept, byte for byte
    assert aside in problem["reason"]
    assert MonitorState.from_dict(store.get_json(state_key("run"))).checked == [(0, 0)]


def test_load_state_of_a_missing_or_good_state_reports_nothing(tmp_path):
    store = LocalStore(tmp_path)
    state, problem = load_state(store, "run")
    assert problem is None and state.run_id == "run" and state.checked == []
    state.mark_checked(3)
    store.put_json(state_key("run"), state.to_dict())
    again, problem = load_state(store, "run")
    assert problem is None and again.checked == [(3, 3)]
    assert store.list_keys("runs/run/monitor/") == [state_key("run")]


# -- catching up: every unchecked step of every run, isolated ----------------------------------------


class FlakyStore(LocalStore):
    """Reading one chosen step (or listing one run) fails like an S3 outage would."""

    def __init__(self, root, bad_step=None, bad_run=None):
        super().__init__(root)
        self.bad_step, self.bad_run = bad_step, bad_run

    def iter_records(self, run_id, step=None, *, on_bad=None):
        if (run_id, step) == self.bad_step:
            raise StoreError(f"read runs/{run_id}/step={step}/: SlowDown")
        return super().iter_records(run_id, step, on_bad=on_bad)

    def list_steps(self, run_id):
        if run_id == self.bad_run:
            raise StoreError(f"list runs/{run_id}/: AccessDenied")
        return super().list_steps(run_id)


def test_check_pending_checks_unchecked_steps_in_order_and_skips_checked_ones(tmp_path):
    store = LocalStore(tmp_path)
    for step, dead in {0: 10, 1: 10, 2: 0, 3: 10}.items():
        put(store, step_with_fraction(step, dead))
    monitor_step(store, "run", 2)  # step 2 checked out of order first (healthy)
    sink = StoreAlarmSink(store)
    (check,) = check_pending(store, sinks=[sink])
    assert check.checked_steps == [0, 1, 3] and check.problems == []
    assert [(a.step, a.kind) for r in check.results for a in r.alarms] == [(0, "dead_component")]
    assert MonitorState.from_dict(store.get_json(state_key("run"))).checked == [(0, 3)]
    # nothing left: a second call checks and emits nothing
    (again,) = check_pending(store, sinks=[sink])
    assert again.results == [] and len(sink.written) == 1


def test_check_pending_can_leave_the_newest_step_for_later(tmp_path):
    store = LocalStore(tmp_path)
    for step in range(3):
        put(store, batch(varied, step=step))
    (check,) = check_pending(store, ["run"], skip_newest=True)
    assert check.checked_steps == [0, 1]


def test_one_unreadable_step_is_reported_and_retried_while_the_rest_are_checked(tmp_path):
    store = FlakyStore(tmp_path, bad_step=("run", 1))
    for step in range(3):
        put(store, step_with_fraction(step, 10))
    (check,) = check_pending(store)
    assert check.checked_steps == [0, 2]
    assert check.problems == [{"run_id": "run", "step": 1, "error": "StoreError: read runs/run/step=1/: SlowDown"}]
    store.bad_step = None
    (retry,) = check_pending(store)
    assert retry.checked_steps == [1] and retry.problems == []


def test_one_broken_run_does_not_stop_the_others(tmp_path):
    store = FlakyStore(tmp_path, bad_run="b")
    for run in ("a", "b", "c"):
        put(store, batch(lambda g, i: {"c": 0.5, "x": float(i % 2)}, run=run))
    store.put_bytes(state_key("c"), b"garbage")
    checks = {check.run_id: check for check in check_pending(store)}
    assert checks["a"].checked_steps == [0] and checks["a"].problems == []
    assert checks["b"].checked_steps == [] and "AccessDenied" in checks["b"].problems[0]["error"]
    assert checks["c"].checked_steps == [0] and "unusable monitor state" in checks["c"].problems[0]["error"]
    assert [a.kind for a in checks["c"].results[0].alarms] == ["dead_component"]
