"""The one raise/recover state machine shared by dead-component and error-rate alarms."""

from __future__ import annotations

from rewardpipe.monitoring.hysteresis import advance
from rewardpipe.monitoring.state import TargetState


def run(steps, raise_after=2):
    """steps: (bad, recovered) per step; returns the transitions as (step, kind, since)."""
    target = TargetState()
    out = []
    for step, (bad, recovered) in enumerate(steps):
        change = advance(target, step, bad=bad, recovered=recovered, raise_after=raise_after)
        if change is not None:
            out.append((step, change.kind, change.since))
    return out, target


def test_raises_after_the_streak_and_once_per_onset():
    out, target = run([(True, False), (True, False), (True, False), (True, False)])
    assert out == [(1, "raised", None)] and target.active and target.since == 1


def test_a_good_step_resets_the_streak_before_the_alarm_opens():
    out, _ = run([(True, False), (False, False), (True, False), (False, False)])
    assert out == []


def test_between_the_thresholds_an_open_alarm_stays_open():
    out, target = run([(True, False), (True, False), (False, False), (False, False), (False, True)])
    assert out == [(1, "raised", None), (4, "recovered", 1)]
    assert not target.active and target.streak == 0 and target.since is None


def test_it_can_raise_again_after_recovering():
    out, _ = run([(True, False), (False, True), (True, False)], raise_after=1)
    assert out == [(0, "raised", None), (1, "recovered", 0), (2, "raised", None)]
