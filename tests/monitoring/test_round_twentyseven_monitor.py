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


def rare(groups: int = 32, k: int = 4, passing: int = 3, value: float = 1.0, name: str = "correctness") -> list[dict]:
    """``name`` is 0.0 everywhere except one rollout of each of the first ``passing`` groups (``value`` there);
    ``b`` varies."""
    return [
        record(0, g, i, {name: value if (g < passing and i == 0) else 0.0, "b": i / k})
        for g in range(groups)
        for i in range(k)
    ]


def test_rare_success_is_dead_but_not_blamed_on_a_harness_that_never_runs():
    # 3 passes in 128 rollouts (2.3 %), K = 4: 29/32 groups all fail, 3 vary
    result = monitor_records(rare())
    s = result.step(0).components["correctness"]
    assert (s.verdict, s.cause, s.zero_variance_group_fraction) == ("dead", "constant_at_minimum", 29 / 32)
    assert "are the tests running the model's code" not in s.message
    assert "it varies in 3 of 32 groups" in s.message
    # the ground truth of a binary outcome: a group of 4 varies with probability 1 - (1 - p)^4 - p^4
    p = 3 / 128
    expected = 1 - (1 - p) ** 4 - p**4
    assert f"{100 * expected:.0f}% of groups of 4 at a rate of 2.3%" in s.message
    (alarm,) = [a for a in result.alarms if a.component == "correctness"]
    assert alarm.message.startswith(s.message)


def test_a_bonus_earned_by_a_few_is_not_called_unreachable():
    s = monitor_records(rare(name="asked_before_coding")).step(0).components["asked_before_coding"]
    assert s.cause == "constant_at_minimum" and "cannot reach" not in s.message
    assert "it varies in 3 of 32 groups" in s.message


def test_saturated_with_a_rare_failure_says_so():
    out = [
        record(0, g, i, {"correctness": 0.0 if (g < 2 and i == 0) else 1.0, "b": i / 4})
        for g in range(32)
        for i in range(4)
    ]
    s = monitor_records(out).step(0).components["correctness"]
    assert (s.verdict, s.cause) == ("dead", "constant_at_maximum")
    assert "it varies in 2 of 32 groups" in s.message and "saturated" in s.message


def test_a_penalty_that_fired_in_a_few_groups_is_not_said_never_to_fire():
    s = monitor_records(rare(value=-0.5, name="loop_penalty", passing=2)).step(0).components["loop_penalty"]
    assert (s.verdict, s.cause) == ("info", "penalty_never_fires")  # a rare penalty: still no alarm
    assert "never fires" not in s.message and "it varies in 2 of 32 groups" in s.message


def test_a_component_that_never_varies_keeps_the_harness_hint():
    s = monitor_records(rare(passing=0)).step(0).components["correctness"]
    assert "are the tests running the model's code" in s.message and "it varies in" not in s.message


def with_errors(errors_per_group: int, groups: int = 32, k: int = 8) -> list[dict]:
    """``correctness`` passes in rollout 0 of groups 0-2 only; the last ``errors_per_group`` rollouts of every group
    are error records (an executor that failed)."""
    out = []
    for g in range(groups):
        for i in range(k):
            if i >= k - errors_per_group:
                rec = record(0, g, i, {})
                rec.update(status="error", error={"kind": "executor", "message": "sandbox down"}, aggregate=None)
                out.append(rec)
            else:
                out.append(record(0, g, i, {"correctness": float(g < 3 and i == 0), "b": i / k}))
    return out


def test_a_dead_step_with_many_errors_names_them_as_part_of_why():
    # half the rollouts of every group are errors: 4 scored of 8; dead at 29/32 groups, and the errors are named
    result = monitor_records(with_errors(4))
    s = result.step(0).components["correctness"]
    assert (s.verdict, s.zero_variance_group_fraction, s.values) == ("dead", 29 / 32, 128)  # excluded, never 0
    assert "128 of this step's 256 records (50%) are errors, left out" in s.message
    assert "kept 4.0 scored rollouts on average of 8.0" in s.message
    kinds = sorted(a.kind for a in result.alarms)
    assert kinds == ["dead_component", "error_rate"]


def test_errors_below_the_error_rate_are_not_named():
    # 1 error in 32 groups (0.4 %): a dead verdict's message does not blame them
    out = with_errors(0)
    out[-1].update(status="error", error={"kind": "executor", "message": "x"}, components={}, aggregate=None)
    s = monitor_records(out).step(0).components["correctness"]
    assert s.verdict == "dead" and "are errors" not in s.message


def test_an_older_state_without_groups_continues_without_a_false_dying():
    from rewardpipe.monitoring import MonitorState

    records = collapse_and_recover(range(5, 10), steps=16)
    first = monitor_records([r for r in records if r["step"] < 12])
    saved = first.state.to_dict()
    for target in saved["targets"].values():  # as written before the groups were kept
        target.pop("trend_groups", None)
    state = MonitorState.from_dict(saved)
    assert state.target("component:correctness").trend_groups == []
    rest = monitor_records([r for r in records if r["step"] >= 12], previous_state=state)
    assert [rest.step(s).components["correctness"].verdict for s in range(12, 16)] == ["ok"] * 4
    assert [a for a in rest.alarms if a.component == "correctness"] == []
