"""Round twenty-five: the new user's journeys (README, the guides, `rewardpipe init` → doctor → run → monitor →
report) with a reward and an environment of one's own, and the natural mistakes on the way."""

from __future__ import annotations

from rewardpipe.models import ErrorInfo, Record
from rewardpipe.monitoring.monitor import monitor_records


def _records(kind: str, message: str) -> list[Record]:
    """Two groups of four rollouts at step 0, every one an error record of ``kind``."""
    return [
        Record(
            run_id="run",
            step=0,
            group_id=f"g{g}",
            rollout_id=f"g{g}-k{k}",
            task_id=f"t{g}",
            status="error",
            error=ErrorInfo(kind=kind, message=message),
            components={"found": None},
            weights={"found": 1.0},
            aggregate=None,
        )
        for g in range(2)
        for k in range(4)
    ]


def _error_alarm(kind: str, message: str) -> str:
    result = monitor_records(_records(kind, message))
    (alarm,) = [a for a in result.alarms if a.kind == "error_rate"]
    return alarm.message


def test_an_error_rate_alarm_of_a_component_that_raised_points_at_the_reward_not_the_sandbox():
    # A user's component returning a string made every record component_raised; the alarm said "check the
    # executor/sandbox", which the user's reward never touched.
    message = _error_alarm("component_raised", "component 'as_str' raised TypeError: returned str '1'")
    assert "executor/sandbox" not in message
    assert "reward" in message and "component" in message


def test_an_error_rate_alarm_of_the_environment_points_at_its_hooks():
    message = _error_alarm("simulator_error", "environment 'num': respond() raised RuntimeError: boom")
    assert "executor/sandbox" not in message and "environment" in message


def test_an_error_rate_alarm_of_the_sandbox_still_points_at_the_sandbox():
    assert "executor/sandbox" in _error_alarm("executor_crash", "BrokenPipeError: the fork server went away")
