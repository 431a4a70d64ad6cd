"""The `dying` early warning: a steady rise of the zero-variance share, projected to the dead threshold."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from rewardpipe.monitoring import Thresholds, monitor_records
from rewardpipe.monitoring.trend import detect_decline, fit_line, fit_weighted, required_z, windows
from tests.monitoring.test_library_duplicates import rec
from tests.test_monitor import step_with_fraction


def run(tenths_per_step, th=None, previous_state=None):
    """Component c constant in that many tenths of 40 groups per step."""
    records = [
        r for step, tenths in enumerate(tenths_per_step) for r in step_with_fraction(step, 4 * tenths, groups=40)
    ]
    return monitor_records(records, th, previous_state)


def c_alarms(result):
    return [(a.step, a.kind) for a in result.alarms if a.component == "c"]


def test_a_steady_rise_is_dying_with_the_projected_step_of_death_and_warns_once():
    """40 groups a step, 10% more of them constant each step: the 5 steps 0-4 find the rise (z 4.4 against the
    binomial noise of their 200 groups, 3.09 needed), step 5 confirms it (z 4.1 over steps 1-5)."""
    result = run([1, 2, 3, 4, 5, 6, 7, 8, 9])
    verdicts = [result.step(s).components["c"].verdict for s in range(9)]
    assert verdicts == ["ok"] * 5 + ["dying"] * 3 + ["dead"]
    first = result.step(5).components["c"]
    assert first.cause == "zero_variance_rising"
    assert first.zero_fraction_slope == pytest.approx(0.1)
    assert first.zero_fraction_slope_z == pytest.approx(4.08, abs=0.01)
    assert first.projected_dead_step == 8  # 60% at step 5, +10 points per step, dead at 90%
    assert "around step 8" in first.message and "from 20% at step 1 to 60% at step 5" in first.message
    assert "4.1 standard errors above no change, fitted over 5 checked steps" in first.message
    assert c_alarms(result) == [(5, "dying_component"), (8, "dead_component")]
    dying = result.alarms[0]
    assert dying.figures["projected_dead_step"] == 8 and dying.figures["window"] == 5
    assert dying.figures["window_groups"] == 200 and dying.figures["slope_z"] == pytest.approx(4.08, abs=0.01)
    dead = next(a for a in result.alarms if a.kind == "dead_component")
    assert "warned as dying since step 5" in dead.message and dead.figures["dying_since"] == 5


def test_one_step_at_a_time_with_the_stored_state_gives_the_same_warnings():
    one_pass = run([1, 2, 3, 4, 5, 6, 7, 8, 9])
    state, alarms = None, []
    for step, tenths in enumerate([1, 2, 3, 4, 5, 6, 7, 8, 9]):
        result = monitor_records(step_with_fraction(step, 4 * tenths, groups=40), previous_state=state)
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
        ([1, 2, 3, 4, 5], "a rise found at its last step only is not yet confirmed"),
    ],
)
def test_no_dying_without_a_steady_rise(shares, why):
    result = run(shares)
    assert all(r.components["c"].verdict != "dying" for r in result.steps), why
    assert not any(a.kind == "dying_component" for a in result.alarms)


def test_the_warning_rearms_only_after_the_rise_stops():
    # rise (warn at 5), hold at 70% (still fitted as rising: no repeat), fall (reversed), rise again
    result = run([1, 2, 3, 4, 5, 6, 7, 7, 7, 6, 5, 4, 3, 2, 1, 1, 2, 3, 4, 5, 6, 7])
    dying = [step for step, kind in c_alarms(result) if kind == "dying_component"]
    assert dying == [5, 19]


def test_thresholds_tune_the_window_and_slope():
    assert c_alarms(run([1, 2, 3, 4, 5, 6, 7, 8, 9], Thresholds(dying_window=10))) == [(8, "dead_component")]
    assert c_alarms(run([1, 2, 3, 4, 5, 6], Thresholds(dying_min_slope=0.2))) == []


def test_fit_and_projection():
    assert fit_line([(0, 0.1), (1, 0.2), (2, 0.3)]) == pytest.approx((0.1, 0.1, 1.0))
    decline = detect_decline([(10, 0.2), (12, 0.3), (14, 0.4), (16, 0.5), (18, 0.6)], 5, 0.9, 0.02, 20)
    assert decline.projected_dead_step == 24 and decline.slope == pytest.approx(0.05)
    assert detect_decline([(0, 0.2), (1, 0.3), (2, 0.4)], 3, 0.9, 0.02, horizon=3) is None  # death at 7


def coin_flip_records(seed, steps, groups=16, k=4, p_of_step=lambda step: 0.5, start=0):
    """Component c is a coin flip per rollout (P(1) = p_of_step(step)); a group has zero variance when its K flips
    agree, which for p = 0.5 and K = 4 is 1/8 of the groups: a healthy, stationary share of about 12%."""
    rnd = random.Random(seed)
    out = []
    for step in range(start, start + steps):
        p = p_of_step(step)
        for g in range(groups):
            out.extend(rec(step, g, i, float(rnd.random() < p)) for i in range(k))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_a_healthy_stationary_component_does_not_warn(seed):
    """The review's case: p = 0.5, K = 4, 16 groups per step (zero-variance share ~12%, in steps of 1/16).

    Measured with the review's generator (/work/hB/mon.py, the same shape), 600 steps per seed: the first 5-step
    fit warned 59 times over 10 seeds (5.9 per run); with a baseline test, 8 over 40 seeds (0.2 per run), 2 of them
    in a run's first 10 steps, where no baseline existed (these seeds: seed 2 at step 7). The weighted fit's z
    needs no baseline: 20 runs of 600 steps (seeds 1000-1019) warn once in all (the baseline test: 7 times in 4
    runs), and these seeds never."""
    result = monitor_records(coin_flip_records(seed, 300))
    assert [a.step for a in result.alarms if a.component == "c" and a.kind == "dying_component"] == []


@pytest.mark.parametrize("seed", range(4))
def test_a_component_really_dying_after_a_healthy_stretch_is_still_warned_before_it_is_dead(seed):
    """64 groups per step, healthy for 40 steps, then the policy converges: P(1) rises 0.5 -> 1 over ~17 steps, so the
    zero-variance share climbs from 12% to 100%. The warning comes while the component is still `ok`, before
    the first `dead` verdict."""

    def p(step):
        return min(1.0, 0.5 + 0.03 * max(0, step - 40))

    result = monitor_records(coin_flip_records(seed, 60, groups=64, p_of_step=p))
    verdicts = {r.step: r.components["c"].verdict for r in result.steps}
    first_dead = min(s for s, v in verdicts.items() if v == "dead")
    warned = [a.step for a in result.alarms if a.component == "c" and a.kind == "dying_component"]
    assert warned and 40 < warned[0] < first_dead, (warned, first_dead)


def test_the_weighted_fit_is_the_least_squares_line_of_every_group():
    """Weighting each share by its groups is the ordinary least-squares line of the groups' 0/1 zero-variance
    indicators on their step; z is its slope over sqrt(p(1-p) / Sxx) (Cochran-Armitage)."""
    points, weights = [(0, 0.0), (1, 0.25), (2, 0.5), (4, 0.5)], [4, 4, 2, 10]
    xs, ys = [], []
    for (x, share), n in zip(points, weights, strict=True):
        xs += [x] * n
        ys += [1.0] * round(share * n) + [0.0] * (n - round(share * n))
    slope, intercept = np.polyfit(xs, ys, 1)
    fitted = fit_weighted(points, weights)
    assert (fitted.intercept, fitted.slope) == pytest.approx((intercept, slope))
    sxx = sum((x - sum(xs) / len(xs)) ** 2 for x in xs)
    p = (sum(ys) + 1) / (len(ys) + 2)
    assert fitted.z == pytest.approx(slope / math.sqrt(p * (1 - p) / sxx))


def test_a_longer_window_sees_a_slow_rise_of_few_groups_that_the_shortest_cannot():
    """4 groups a step, one more constant group every 8 steps (+3 points per step): 5 points are noise, the
    longer windows of the stored 25 are not."""
    points = [(s, min(1.0, (s // 8) / 4)) for s in range(25)]
    assert detect_decline(points[-5:], 5, 0.9, 0.02, 20, groups=4) is None
    decline = detect_decline(points, 5, 0.9, 0.02, 20, groups=4)
    assert decline is not None and decline.points in (20, 25) and decline.groups == 4 * decline.points
    assert decline.z >= required_z(25, 5)
    assert windows(25, 5) == [5, 10, 20, 25] and windows(4, 5) == []
    assert required_z(5, 5) > required_z(10, 5) > required_z(25, 5) > 2.0


def test_the_groups_behind_each_point_weight_it():
    """The same shares, once with the high ones from big steps and once from tiny ones: only the first is a rise."""
    points = [(0, 0.2), (1, 0.2), (2, 0.2), (3, 0.2), (4, 0.5), (5, 0.5)]
    assert detect_decline(points, 5, 0.9, 0.02, 20, weights=[50] * 6) is not None
    assert detect_decline(points, 5, 0.9, 0.02, 20, weights=[50, 50, 50, 50, 2, 2]) is None


def test_the_baseline_survives_the_stored_state_one_step_at_a_time():
    """The Lambda checks one step per call: the longer windows (up to 20 steps before the shortest) and their
    groups are in the stored trend, so it warns exactly where one pass does."""

    def p(step):
        return min(1.0, 0.5 + 0.03 * max(0, step - 20))

    records = coin_flip_records(0, 36, groups=64, p_of_step=p)
    one_pass = monitor_records(records)
    assert any(a.kind == "dying_component" and a.step > 20 for a in one_pass.alarms)
    state, alarms = None, []
    for step in range(36):
        result = monitor_records([r for r in records if r["step"] == step], previous_state=state)
        alarms += result.alarms
        state = json.loads(json.dumps(result.state.to_dict()))
    assert [a.to_dict() for a in alarms] == [a.to_dict() for a in one_pass.alarms]
