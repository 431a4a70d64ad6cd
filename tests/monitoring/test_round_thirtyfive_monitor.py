"""Round thirty-five, the monitor: the evidence of an alarm on a component that gives GRPO nothing inside groups.
A pooled verdict's examples come from every step of the pool (the steps' group ids repeat), and a component whose
only difference inside groups is a NaN or a None says so. Each failed before its fix (docs/changelog.md, round
thirty-five, the trainer integrations and the monitor)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from rewardpipe.monitoring import monitor_records
from rewardpipe.monitoring.pooling import StepHistory


def _records(step: int, groups: int, values_of: Any, k: int = 4) -> list[dict[str, Any]]:
    """One step of ``groups`` groups of ``k``, ids ``g0``, ``g1``... at every step (as a trainer callback's batches);
    ``values_of(group, rollout)`` gives the components."""
    out = []
    for g in range(groups):
        for i in range(k):
            components = values_of(g, i)
            numbers = [v for v in components.values() if v is not None and math.isfinite(v)]
            out.append(
                {
                    "run_id": "r",
                    "step": step,
                    "group_id": f"g{g}",
                    "rollout_id": f"s{step}-g{g}-r{i}",
                    "task_id": f"t{g}",
                    "status": "scored",
                    "components": components,
                    "weights": dict.fromkeys(components, 1.0),
                    "aggregate": sum(numbers) if numbers else None,
                }
            )
    return out


def _varied(g: int, i: int) -> float:
    return [0.0, 0.25, 0.5, 1.0][(g + i) % 4]


def test_a_pooled_alarms_examples_come_from_every_step_of_the_pool():
    """Two small batches (2 groups each, groups g0 and g1 in both): ``prompt`` is constant inside every group. The
    examples were s0-g0, s0-g1 and s0-g0 again (a group told apart by its id alone), none from step 1."""
    history, state, alarms = StepHistory(), None, []
    for step in (0, 1):
        result = monitor_records(
            _records(step, 2, lambda g, i: {"good": _varied(g, i), "prompt": float(g % 2)}), None, state, history
        )
        state, alarms = result.state, alarms + result.alarms
    (alarm,) = [a for a in alarms if a.component == "prompt"]
    assert alarm.figures["pooled_steps"] == [0, 1]
    groups = [(e["step"], e["group_id"]) for e in alarm.examples]
    assert len(groups) == len(set(groups)) == 3  # three different groups...
    assert {step for step, _ in groups} == {0, 1}  # ...of both steps


@pytest.mark.parametrize("hole", [math.nan, None, math.inf])
def test_a_component_varying_only_by_a_value_that_is_no_number_says_so(hole):
    """``fmt`` is 1.0 in three rollouts of every group and NaN (None, inf) in the fourth: its only difference inside
    groups is a value the figures leave out. It is dead (it gives GRPO nothing), and its message and examples said
    "1.0 in every scored rollout", "like every rollout of its group", of groups holding the NaN."""
    result = monitor_records(_records(0, 8, lambda g, i: {"good": _varied(g, i), "fmt": hole if i == 0 else 1.0}))
    stats = result.step(0).components["fmt"]
    assert stats.verdict == "dead"
    (alarm,) = [a for a in result.alarms if a.component == "fmt"]
    said = "8 None" if hole is None else "8 NaN or inf"
    assert said in alarm.message
    assert "left out" in alarm.message
    assert alarm.examples
    for example in alarm.examples:
        assert "that has a number (1 other scored rollout(s): None, NaN or inf)" in example["reason"]
    # the good component, varying honestly, raises nothing
    assert not [a for a in result.alarms if a.component == "good"]


def test_a_constant_component_with_every_value_a_number_reads_as_before():
    result = monitor_records(_records(0, 8, lambda g, i: {"good": _varied(g, i), "fmt": 1.0}))
    (alarm,) = [a for a in result.alarms if a.component == "fmt"]
    assert "left out" not in alarm.message
    assert all(e["reason"].endswith("like every rollout of its group") for e in alarm.examples)


def _spread(g: int, i: int) -> float:
    """A value that differs inside every group, honestly, and between groups."""
    return (g * 7 + i * 3) % 10 / 10


def test_a_reward_drowned_by_a_large_offset_is_not_called_cancelling():
    """``offset`` is 1e6 in every rollout and ``good`` varies honestly in every group: the reward's changes inside a
    group (about 0.3) are below epsilon times its size (1e6), so it is dead by the monitor's rule (float rounding
    beside the values), but the alarm said its components "cancel (opposite signs with equal weights) or their
    weights are 0", and, judged at an absolute bound across the batch, that it "depends on the prompt"."""
    result = monitor_records(_records(0, 8, lambda g, i: {"good": _spread(g, i), "offset": 1e6}))
    report = result.step(0)
    assert report.components["good"].verdict == "ok"
    aggregate = report.aggregate
    assert aggregate.verdict == "dead"
    assert aggregate.cause == "constant_everywhere"
    assert "cancel" not in aggregate.message and "depends on the prompt" not in aggregate.message
    assert "epsilon times its size" in aggregate.message and "1e+06" in aggregate.message
    # a reward that really cancels still says so
    cancels = monitor_records(_records(0, 8, lambda g, i: {"up": _spread(g, i), "down": -_spread(g, i)})).step(0)
    assert cancels.aggregate.cause == "components_cancel"
    assert "epsilon times its size" not in cancels.aggregate.message


@pytest.mark.parametrize(
    ("values_of", "dead"),
    [
        (lambda g, i: 1000.0 * g + 1e-12 * i, True),  # rounding noise on a large scale, varying only across groups
        (lambda g, i: 1e6 + 1e-10 * i, True),  # rounding noise on a large constant
        (lambda g, i: float(g % 2), True),  # constant per group, varying across groups
        (lambda g, i: 1e-4 * _spread(g, i), False),  # honest small changes
        (lambda g, i: 100.0 + 0.01 * _spread(g, i), False),  # honest small changes on an offset
    ],
)
def test_a_component_that_gives_nothing_inside_groups_alarms_and_an_honest_one_does_not(values_of, dead):
    result = monitor_records(_records(0, 8, lambda g, i: {"good": _spread(g, i), "c": values_of(g, i)}))
    alarms = [a for a in result.alarms if a.component == "c"]
    if not dead:
        assert alarms == [] and result.step(0).components["c"].verdict == "ok"
        return
    (alarm,) = alarms
    assert alarm.kind == "dead_component" and alarm.cause and alarm.message
    assert len(alarm.examples) == 3 and all(e["transcript_key"] for e in alarm.examples)


def test_a_pooled_verdict_names_only_the_steps_that_give_the_component():
    """``c`` is given at step 0, left out of steps 1-9 (renamed, then back) and given again at steps 10 and 11, two
    small steps each: its verdict, judged on steps 10 and 11, said "pooled over steps 4-11" (``pooled_steps`` 4 to
    11), as if eight steps' evidence were behind it."""
    history, state, alarms = StepHistory(), None, []
    for step in range(12):
        given = step in (0, 10, 11)
        result = monitor_records(
            _records(step, 2, lambda g, i, given=given: {"good": _varied(g, i), **({"c": 1.0} if given else {})}),
            None,
            state,
            history,
        )
        state, alarms = result.state, alarms + result.alarms
    (alarm,) = [a for a in alarms if a.component == "c"]
    assert alarm.step == 11
    assert alarm.figures["pooled_steps"] == [10, 11]
    assert "pooled over steps 10\u201311" in alarm.message


def _small_steps(order, values_of):  # type: ignore[no-untyped-def]
    """Steps of 2 groups each, checked one call each in ``order`` (a late step's records came after a later step)."""
    history, state, results = StepHistory(), None, {}
    for step in order:
        result = monitor_records(_records(step, 2, values_of), None, state, history)
        state, results[step] = result.state, result
    return results


def test_a_late_step_is_judged_alone_and_pools_no_step_twice():
    """Steps 0 and 2 pooled (``c`` constant: dead, alarmed at 2), then step 1 arrives late: it opened a pool, and
    step 3 was judged over steps 1-3, step 2's groups counted in a second verdict."""
    results = _small_steps((0, 2, 1, 3, 4), lambda g, i: {"good": _varied(g, i), "c": 1.0})
    assert results[2].step(2).components["c"].pooled_steps == [0, 2]
    late = results[1].step(1).components["c"]
    assert late.verdict == "insufficient_data" and "a late step (checked after step 2): not pooled" in late.message
    assert results[3].step(3).components["c"].verdict == "insufficient_data"  # a pool opened at 3, alone so far
    assert results[4].step(4).components["c"].pooled_steps == [3, 4]


def test_a_late_step_leaves_the_open_pool_of_later_steps_open():
    results = _small_steps((0, 1, 3, 2, 4), lambda g, i: {"good": _varied(g, i), "c": 1.0})
    assert results[1].step(1).components["c"].pooled_steps == [0, 1]
    assert results[3].step(3).components["c"].verdict == "insufficient_data"  # its pool opens at 3
    assert results[2].step(2).components["c"].verdict == "insufficient_data"  # late: alone
    assert results[4].step(4).components["c"].pooled_steps == [3, 4]  # the pool of 3 goes on
