"""Round thirty on the reward, environment and monitoring side.

R1. A recovery judged over pooled small steps did not say so: the ``recovered`` alarm of a component whose
verdict was pooled over steps 2-3 (each step alone had too few groups for a verdict) said "recovered at step 3:
zero-variance groups down to 0%" with the pool's figures (4 eligible groups, where step 3 had 2) and no
``pooled_steps``, where the dead alarm it closed said both. A recovery judged over a pool now says so in its
message and carries ``pooled_steps`` in its figures, as the dead alarm does.

R2. The dead alarm of a pooled verdict counted pooled verdicts as steps: with ``raise_after=2``, steps 0-3 judged
as two pools raised "(dead for 2 consecutive steps)" and ``consecutive_dead_steps: 2``, where four steps were
dead. A streak of pooled verdicts is now said as the verdicts it is, over the steps they span.
"""

from __future__ import annotations

from rewardpipe.monitoring import monitor_records
from rewardpipe.monitoring.pooling import StepHistory
from tests.monitoring.test_small_batches import TH, records


def _steps(step, dead, **kwargs):
    """Two groups of four rollouts: ``format`` constant 0.0 when ``dead``, else varying in every group."""
    out = records(step, dead=("format",), **kwargs)
    if not dead:
        for record in out:
            record["components"]["format"] = float(int(record["rollout_id"][-1]) % 2)
    return out


def _alarms(plan, th=TH):
    history, state, found = StepHistory(), None, []
    for step, dead in plan:
        result = monitor_records(_steps(step, dead), th, state, history)
        state = result.state
        found += [alarm for alarm in result.alarms if alarm.component == "format"]
    return found


# -- R1: a pooled recovery says it was pooled -----------------------------------------------------------------


def test_a_recovery_judged_over_pooled_steps_says_so():
    raised, recovered = _alarms([(0, True), (1, True), (2, False), (3, False)])
    assert raised.kind == "dead_component" and raised.figures["pooled_steps"] == [0, 1]
    assert recovered.kind == "recovered" and recovered.step == 3
    assert recovered.figures["pooled_steps"] == [2, 3]
    assert "pooled over steps 2\u20133" in recovered.message


def test_a_recovery_judged_on_its_own_step_says_nothing_of_pools():
    big = TH.model_copy(update={"min_groups": 2})
    _raised, recovered = _alarms([(0, True), (1, False)], big)
    assert recovered.kind == "recovered" and "pooled_steps" not in recovered.figures
    assert "pooled" not in recovered.message


# -- R2: a streak of pooled verdicts is not a streak of steps ------------------------------------------------


def test_a_streak_of_pooled_verdicts_names_the_steps_it_spans():
    (raised,) = _alarms([(step, True) for step in range(4)], TH.model_copy(update={"raise_after": 2}))
    assert raised.step == 3 and raised.figures["pooled_steps"] == [2, 3]
    assert "2 consecutive steps" not in raised.message
    assert "dead in 2 consecutive verdicts over steps 0\u20133" in raised.message
    assert raised.figures["consecutive_dead_verdicts"] == 2 and raised.figures["dead_since_step"] == 0


def test_a_streak_of_steps_judged_alone_is_said_as_before():
    th = TH.model_copy(update={"raise_after": 2, "min_groups": 2})
    (raised,) = _alarms([(step, True) for step in range(3)], th)
    assert raised.step == 1 and "(dead for 2 consecutive steps)" in raised.message
    assert raised.figures["consecutive_dead_steps"] == 2 and "consecutive_dead_verdicts" not in raised.figures
