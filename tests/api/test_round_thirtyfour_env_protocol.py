"""Round thirty-four: a user's own environment failing in its hooks. Each failure names the hook and the line of
the user's file to look at, and costs only the rollouts of the task that triggers it; a state that would not
survive the JSON round trip it takes on AWS between turns fails its rollout locally too, naming the field."""

from __future__ import annotations

import inspect
import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

from rewardpipe import Environment, EpisodeState, Message, Reward, ScriptedPolicy, TaskRow, component
from rewardpipe.runner import plan_step, run_slots

HERE = Path(__file__).name


class Fault(TaskRow):
    fault: str = ""  # what goes wrong for this task ("" for nothing)


class HuntState(EpisodeState):
    moves: list[int] = Field(default_factory=list)  # turn-level: 1 for a move that got closer
    extra: Any = None


@component(range=(0, 1), role="outcome")
def finished(state: HuntState) -> float:
    return float(state.end_reason == "done")


@component(range=(0, 1), role="shaping")
def closer_share(state: HuntState) -> float:
    return sum(state.moves) / len(state.moves) if state.moves else 0.0


NOT_JSON: dict[str, Any] = {
    "object": object(),
    "set": {1, 2},
    "nan": math.nan,
    "infinity": math.inf,
}


class Faulty(Environment):
    name = "faulty"
    version = "1"
    task_model = Fault
    state_model = HuntState
    max_turns = 3
    reward = Reward("faulty", [finished, closer_share])

    def start(self, task):
        if task.fault == "start_raises":
            raise ValueError("no map")  # LINE: start_raises
        return self.state_model(messages=task.prompt_messages())

    def on_policy_turn(self, state, task, text):
        if task.fault == "turn_raises":
            raise KeyError("compass")  # LINE: turn_raises
        if task.fault == "turn_returns_dict":
            return state.model_dump()
        moves = [*state.moves, int(text == "closer")]
        if state.assistant_turns >= 2:
            return state.evolve(moves=moves, next_action="score", end_reason="done")
        return state.evolve(moves=moves, next_action="env")

    def respond(self, state, task, ctx):
        if task.fault == "respond_raises":
            raise RuntimeError("the guide fell asleep")  # LINE: respond_raises
        if task.fault == "respond_returns_none":
            return None
        if task.fault.startswith("state_"):
            return state.append(
                Message(role="user", content="warmer"), extra=NOT_JSON[task.fault[6:]], next_action="policy"
            )
        return state.append(Message(role="user", content="warmer"), next_action="policy")


class Closer:
    def next_turn(self, state, task):
        return "closer"


class NoSandbox:
    def run(self, job):
        raise AssertionError("nothing is executed")

    def run_batch(self, jobs, workers=None):
        raise AssertionError("nothing is executed")


def line_of(marker: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.rstrip().endswith(f"# LINE: {marker}"))


def def_line(hook: str) -> int:
    return inspect.getsourcelines(getattr(Faulty, hook))[1]


def play(fault: str) -> tuple[list[Any], list[Any]]:
    """Two tasks, two rollouts each: one task that is fine, one with ``fault``."""
    tasks = [Fault(task_id="fine", prompt="find it"), Fault(task_id="bad", prompt="find it", fault=fault)]
    records = run_slots(plan_step(tasks, 0, 2, 2), policy=Closer(), env=Faulty(), executor=NoSandbox(), run_id="r")
    fine = [r for r in records if r.task_id == "fine"]
    bad = [r for r in records if r.task_id == "bad"]
    assert [r.status for r in fine] == ["scored", "scored"]  # the failure cost only the bad task's rollouts
    assert all(r.components == {"finished": 1.0, "closer_share": 1.0} for r in fine)
    assert len(bad) == 2 and all(r.status == "error" and r.aggregate is None for r in bad)
    assert all(r.error.kind == "simulator_error" for r in bad)
    return fine, bad


RAISED = "raised"  # the line that raised is named; otherwise where the hook is defined


@pytest.mark.parametrize(
    ("fault", "hook", "said", "named"),
    [
        ("start_raises", "start", "start() raised ValueError: no map", RAISED),
        ("turn_raises", "on_policy_turn", "on_policy_turn() raised KeyError: 'compass'", RAISED),
        ("respond_raises", "respond", "respond() raised RuntimeError: the guide fell asleep", RAISED),
        ("turn_returns_dict", "on_policy_turn", "on_policy_turn() returned dict, not a new state", "defined"),
        (
            "respond_returns_none",
            "respond",
            "respond() returned NoneType, not a new state (a missing return?)",
            "defined",
        ),
    ],
)
def test_a_failing_hook_names_the_line_of_the_users_file_to_look_at(fault, hook, said, named):
    _, bad = play(fault)
    for record in bad:
        assert said in record.error.message
        if named == RAISED:
            assert "(at " in record.error.message and f"{HERE}:{line_of(fault)})" in record.error.message
        else:
            assert f"({hook}() is at " in record.error.message and f"{HERE}:{def_line(hook)})" in record.error.message


@pytest.mark.parametrize("kind", sorted(NOT_JSON))
def test_a_state_that_does_not_survive_json_costs_its_rollout_naming_the_field_and_the_fix(kind):
    # On AWS the state is stored as JSON between turns and read back with the state model: an object() failed
    # there and nowhere locally, a set came back a list and a NaN came back None, so the same environment scored
    # differently on AWS than in `run` and `doctor`.
    _, bad = play(f"state_{kind}")
    for record in bad:
        message = record.error.message
        assert "environment 'faulty': respond() (at " in message  # where first: a summary cuts the end
        assert f"{HERE}:{def_line('respond')}) left a state that does not survive JSON" in message
        assert message.count(f"{HERE}:") == 1
        assert "field 'extra'" in message
        if kind == "set":
            assert "field 'extra' holds {1, 2}, which reads back as [1, 2]" in message


class Played(Faulty):
    """Scripted players and metrics of the user's own: the task's fault breaks one of them."""

    def scenarios(self, task):
        def player(state, task):
            if task.fault == "player_raises":
                raise LookupError("the player lost its script")  # LINE: player_raises
            return "closer"

        return {"reference": ScriptedPolicy(player)}

    def metrics(self, state, task):
        if task.fault == "metrics_raises":
            raise ArithmeticError("no count")  # LINE: metrics_raises
        return {"moves": len(state.moves)}


def test_a_raising_scripted_player_and_metrics_name_the_line_of_the_users_file():
    tasks = [Fault(task_id=fault, prompt="p", fault=fault) for fault in ("player_raises", "metrics_raises")]
    env = Played()
    records = {
        r.task_id: r
        for r in run_slots(
            plan_step(tasks, 0, 2, 1), policy=env.scripted_policy(), env=env, executor=NoSandbox(), run_id="r"
        )
    }
    player = records["player_raises"]
    assert player.status == "error" and player.error.kind == "policy_error"
    assert "scenario 'reference' of task 'player_raises' raised LookupError" in player.error.message
    assert player.error.message.endswith(f"{HERE}:{line_of('player_raises')})")
    metrics = records["metrics_raises"]
    assert metrics.status == "scored"  # extra evidence, never the score
    assert metrics.metrics["env_metrics_error"].startswith("ArithmeticError: no count (at ")
    assert metrics.metrics["env_metrics_error"].endswith(f"{HERE}:{line_of('metrics_raises')})")


def test_a_start_that_builds_another_state_class_than_the_state_model_costs_its_rollout_naming_the_fix():
    # A state_model subclassed from another environment's while start() still built the parent's class ran
    # locally with the parent's fields; on AWS the state is read back with the state_model between turns.
    class OtherState(EpisodeState):
        pass

    class ParentStart(Faulty):
        def start(self, task):
            if task.fault == "parent_state":
                return OtherState(messages=task.prompt_messages())
            return super().start(task)

    tasks = [Fault(task_id="fine", prompt="p"), Fault(task_id="bad", prompt="p", fault="parent_state")]
    records = run_slots(plan_step(tasks, 0, 2, 1), policy=Closer(), env=ParentStart(), executor=NoSandbox(), run_id="r")
    by_task = {r.task_id: r for r in records}
    assert by_task["fine"].status == "scored"
    bad = by_task["bad"]
    assert bad.status == "error" and bad.error.kind == "simulator_error"
    assert "start() returned a OtherState, not the environment's state_model HuntState" in bad.error.message
    assert "build it with self.state_model(...)" in bad.error.message
    assert f"{HERE}:" in bad.error.message  # where start() is defined
