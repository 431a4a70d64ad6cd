"""The `dying` early warning: a steady rise of the zero-variance share, projected to the dead threshold."""

from __future__ import annotations

import json

import pytest

from rewardpipe.monitoring import Thresholds, monitor_records
from rewardpipe.monitoring.trend import detect_decline, fit_line
from tests.test_monitor import step_with_fraction


def run(dead_groups_per_step, th=None, previous_state=None):
    records = [r for step, dead in enumerate(dead_groups_per_step) for r in step_with_fraction(step, dead)]
    return monitor_records(records, th, previous_state)


def c_alarms(result):
    return [(a.step, a.kind) for a in result.alarms if a.component == "c"]


def test_a_steady_rise_is_dying_with_the_projected_step_of_death_and_warns_once():
    result = run([1, 2, 3, 4, 5, 6, 7, 8, 9])
    verdicts = [result.step(s).components["c"].verdict for s in range(9)]
    assert verdicts == ["ok"] * 4 + ["dying"] * 4 + ["dead"]
    first = result.step(4).components["c"]
    assert first.cause == "zero_variance_rising"
    assert first.zero_fraction_slope == pytest.approx(0.1)
    assert first.projected_dead_step == 8  # 50% at step 4, +10 points per step, dead at 90%
    assert "around step 8" in first.message and "from 10% at step 0 to 50% at step 4" in first.message
    assert c_alarms(result) == [(4, "dying_component"), (8, "dead_component")]
    dying = result.alarms[0]
    assert dying.figures["projected_dead_step"] == 8 and dying.figures["window"] == 5
    dead = next(a for a in result.alarms if a.kind == "dead_component")
    assert "warned as dying since step 4" in dead.message and dead.figures["dying_since"] == 4


def test_one_step_at_a_time_with_the_stored_state_gives_the_same_warnings():
    one_pass = run([1, 2, 3, 4, 5, 6, 7, 8, 9])
    state, alarms = None, []
    for step, dead in enumerate([1, 2, 3, 4, 5, 6, 7, 8, 9]):
        result = monitor_records(step_with_fraction(step, dead), previous_state=state)
        alarms += result.alarms
        state = json.loads(json.dumps(result.state.to_dict()))  # what the Lambda stores between calls
    assert [a.to_dict() for a in alarms] == [a.to_dict() for a in one_pass.alarms]


@pytest.mark.parametrize(
    "shares, why",
    [
        ([1, 5, 2, 6, 3, 7, 2], "noisy: r^2 too low"),
        ([0, 0, 1, 1, 1, 1, 2], "too slow to reach the threshold within the horizon"),
        ([5, 5, 5, 5, 5, 5, 5], "flat"),
        ([8, 7, 6, 5, 4, 3, 2], "falling"),
        ([1, 2, 3, 4], "fewer steps than the window"),
    ],
)
def test_no_dying_without_a_steady_rise(shares, why):
    result = run(shares)
    assert all(r.components["c"].verdict != "dying" for r in result.steps), why
    assert not any(a.kind == "dying_component" for a in result.alarms)


def test_the_warning_rearms_only_after_the_rise_stops():
    # rise (warn at 4), hold at 5 groups (still fitted as rising: no repeat), fall (reversed), rise again
    result = run([1, 2, 3, 4, 5, 5, 5, 4, 3, 2, 1, 1, 2, 3, 4, 5])
    dying = [step for step, kind in c_alarms(result) if kind == "dying_component"]
    assert dying[0] == 4 and len(dying) == 2 and dying[1] > 10


def test_thresholds_tune_the_window_and_slope():
    assert c_alarms(run([1, 2, 3, 4], Thresholds(dying_window=3))) == [(2, "dying_component")]
    assert c_alarms(run([1, 2, 3, 4, 5, 6], Thresholds(dying_min_slope=0.2))) == []


def test_fit_and_projection():
    assert fit_line([(0, 0.1), (1, 0.2), (2, 0.3)]) == pytest.approx((0.1, 0.1, 1.0))
    decline = detect_decline([(10, 0.2), (12, 0.3), (14, 0.4), (16, 0.5), (18, 0.6)], 5, 0.9, 0.02, 20)
    assert decline.projected_dead_step == 24 and decline.slope == pytest.approx(0.05)
    assert detect_decline([(0, 0.2), (1, 0.3), (2, 0.4)], 3, 0.9, 0.02, horizon=3) is None  # death at 7
