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
