"""Round twenty-seven: the monitor's statistics against realistic reward distributions.

Synthetic runs built the way a trainer's records look (deterministic, no randomness needed), checked against the
ground truth of what GRPO sees:

* a component that recovers from a dead stretch is healthy again: the stretch is no "rise" towards death, and
  fitting a line through it warned ``dying`` at a component whose zero-variance share was 0 %;
* a binary outcome with a rare success (2 % of rollouts pass, K = 4) is honestly dead — it varies in only a few
  groups — but it *can* vary: the message said the tests might not run the model's code, and a penalty that fired
  in some groups was said to "never fire".
"""

from __future__ import annotations

from rewardpipe.monitoring import Thresholds, monitor_records


def record(step: int, group: int, rollout: int, components: dict[str, float], run: str = "r") -> dict:
    return {
        "schema": "rewardpipe.record/v1",
        "run_id": run,
        "step": step,
        "group_id": f"g{group}",
        "rollout_id": f"s{step}g{group}r{rollout}",
        "task_id": f"t{group}",
        "status": "scored",
        "error": None,
        "components": components,
        "weights": {name: 1.0 for name in components},
        "aggregate": sum(components.values()),
        "metrics": {},
    }


def collapse_and_recover(dead_steps: range, steps: int = 14, groups: int = 16, k: int = 8) -> list[dict]:
    """``correctness`` passes in half of every group, except at ``dead_steps`` where every rollout fails; a shaping
    component ``b`` varies throughout."""
    out = []
    for step in range(steps):
        for g in range(groups):
            for i in range(k):
                right = 0.0 if step in dead_steps else float((g + i) % 2)
                out.append(record(step, g, i, {"correctness": right, "b": i / k}))
    return out


def test_a_recovered_component_is_not_dying_because_of_its_dead_stretch():
    result = monitor_records(collapse_and_recover(range(5, 10)))
    verdicts = [result.step(s).components["correctness"].verdict for s in range(14)]
    assert verdicts == ["ok"] * 5 + ["dead"] * 5 + ["ok"] * 4
    kinds = [(a.kind, a.step) for a in result.alarms if a.component == "correctness"]
    assert kinds == [("dead_component", 5), ("recovered", 10)]


def test_a_dead_stretch_too_short_to_alarm_is_no_rise_either():
    # raise_after=3: two dead steps raise nothing, and the healthy steps after them are no decline
    result = monitor_records(collapse_and_recover(range(5, 7)), Thresholds(raise_after=3))
    assert [result.step(s).components["correctness"].verdict for s in range(7, 14)] == ["ok"] * 7
    assert [a for a in result.alarms if a.component == "correctness"] == []


def test_a_rise_after_a_recovery_still_warns_dying():
    # dead at 2-3, healthy at 4-7, then a steady rise 0 -> 75 % over steps 8-13 (the fit starts after the stretch)
    out = []
    for step in range(14):
        constant = 16 if step in (2, 3) else max(0, step - 7) * 2
        for g in range(16):
            for i in range(8):
                right = 0.0 if g < constant else float(i % 2)
                out.append(record(step, g, i, {"correctness": right, "b": i / 8}))
    result = monitor_records(out)
    assert any(a.kind == "dying_component" and a.component == "correctness" and a.step >= 10 for a in result.alarms)
