"""A user's own environment and reward whose hooks fail on demand (the task's ``fault`` field says which), for
tests/aws/test_round_thirtysix_b_same_code.py: the same rollouts run through `rewardpipe run` and through the
state machine must leave the same records. Imported by reference (``tests.aws.user_faults:ENVIRONMENT``) in both
places, as a deployment imports a user package."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from rewardpipe import Environment, EpisodeState, Reward, TaskRow, component


class FaultTask(TaskRow):
    fault: str = ""


class FaultState(EpisodeState):
    said: list[str] = Field(default_factory=list)


@component(range=(0.0, 1.0), role="outcome", weight=1.0)
def said_done(state: Any) -> float | None:
    return 1.0 if any("done" in s for s in state.said) else 0.0


@component(range=(0.0, 1.0), role="shaping", weight=0.5)
def fragile(state: Any, task: Any) -> float | None:
    if task.fault == "component":
        raise ZeroDivisionError("fragile divided by zero")
    return min(1.0, len(state.said) / 3)


FAULTY = Reward("faulty", [said_done, fragile])


class FaultEnv(Environment):
    name = "faulty"
    version = "1"
    task_model = FaultTask
    state_model = FaultState
    max_turns = 3
    reward = FAULTY

    def start(self, task: Any) -> Any:
        if task.fault == "start":
            raise LookupError("start blew up")
        return super().start(task)

    def on_policy_turn(self, state: Any, task: Any, text: str) -> Any:
        if task.fault == "turn":
            raise RuntimeError("on_policy_turn blew up")
        said = [*state.said, text]
        if "done" in text:
            return state.evolve(said=said, next_action="execute" if task.fault == "job" else "score")
        return state.evolve(said=said, next_action="env")

    def respond(self, state: Any, task: Any, ctx: Any) -> Any:
        return state.append({"role": "user", "content": "go on"}, next_action="policy")

    def execution_job(self, state: Any, task: Any) -> Any:
        raise OSError("execution_job blew up")

    def metrics(self, state: Any, task: Any) -> dict[str, Any]:
        return {"said": len(state.said)}


ENVIRONMENT = FaultEnv()
