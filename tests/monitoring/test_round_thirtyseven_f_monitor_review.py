"""Round thirty-seven (second review), the monitor's new verdicts on realistic noisy runs.

The open dead alarm of a component set per prompt (cause ``constant_within_groups``) stays open through an ``info``
step where the penalty fired on no group (docs/monitor.md): such a step shows no signal either. It stayed open through
every ``info`` step, those where the penalty varied inside groups too (fired on single rollouts: the idle penalty's
shape, signal within those groups), so one step of whole-group firing alarmed a per-rollout penalty for the rest of
the run.
"""

from __future__ import annotations

import random
from typing import Any

from rewardpipe.monitoring import MonitorState, Thresholds, monitor_records
from tests.monitoring.test_round_thirtyfive_monitor import _records  # (step, groups, values_of(g, i), k)

PENALTY = {"pen": (-1.0, 0.0)}


def _step(step: int, whole: set[int], single: set[int], rng: random.Random) -> list[dict[str, Any]]:
    """``pen`` fires on every rollout of the ``whole`` groups and on the first rollout of the ``single`` ones."""
    return _records(
        step,
        32,
        lambda g, i: {"good": rng.random(), "pen": -1.0 if g in whole or (g in single and i == 0) else 0.0},
    )


def _pen_alarms(result: Any) -> list[tuple[str, int, str]]:
    return [(a.kind, a.step, a.cause) for a in result.alarms if a.component == "pen"]


def test_a_step_where_the_penalty_varies_inside_groups_closes_the_per_prompt_alarm():
    rng = random.Random(5)
    records = _step(0, {3, 9}, set(), rng) + _step(1, set(), {4, 20}, rng) + _step(2, set(), {7}, rng)
    result = monitor_records(records, Thresholds(ranges=PENALTY))
    assert _pen_alarms(result)[0] == ("dead_component", 0, "constant_within_groups")
    assert result.step(1).components["pen"].verdict == "info"
    assert not result.step(2).components["pen"].alarm_active
    assert [kind for kind, _, _ in _pen_alarms(result)] == ["dead_component", "recovered"]


def test_the_same_one_step_per_call():
    rng = random.Random(6)
    state: MonitorState | None = None
    for step, (whole, single) in enumerate([({3, 9}, set()), (set(), {4, 20})]):
        result = monitor_records(_step(step, whole, single, rng), Thresholds(ranges=PENALTY), state)
        state = result.state
    assert not result.step(1).components["pen"].alarm_active
    assert not state.targets["component:pen"].active


def test_a_step_where_it_fires_on_no_group_still_keeps_the_alarm_open():
    """The guard (it passed before): all 0 is no recovery."""
    rng = random.Random(7)
    records = _step(0, {3, 9}, set(), rng) + _step(1, set(), set(), rng)
    result = monitor_records(records, Thresholds(ranges=PENALTY))
    assert result.step(1).components["pen"].alarm_active
    assert _pen_alarms(result) == [("dead_component", 0, "constant_within_groups")]


def test_a_per_rollout_penalty_that_fires_often_on_a_few_hard_tasks_is_not_dead():
    """Found in this review, fixed in round thirty-eight (test_round_thirtyeight_monitor): a penalty that fires per
    rollout (at 30-90 % on about 5 % of the tasks, 0 elsewhere) varies inside those groups, yet a step where its one
    or two fired groups happen to be whole was judged set per prompt (``constant_within_groups``, whole groups at
    least as many as varying ones), and the next step where it varies closed the alarm: dead and recovered alarms over
    and over. Telling the two apart needs the evidence of many steps (the whole and varying groups counted across the
    run), not one step's few groups."""
    rng = random.Random(0)
    records: list[dict[str, Any]] = []
    for step in range(60):
        rates = [rng.uniform(0.3, 0.9) if rng.random() < 0.05 else 0.0 for _ in range(32)]
        records += _records(step, 32, lambda g, i, r=rates: {"good": rng.random(), "pen": -float(rng.random() < r[g])})
    assert _pen_alarms(monitor_records(records, Thresholds(ranges=PENALTY))) == []
