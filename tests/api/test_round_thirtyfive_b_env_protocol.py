"""Round thirty-five (second wave), the environment protocol: a user's own environment whose hooks misbehave, as
``doctor`` says it. A run's error record of a failing hook names the line of the user's file to look at; doctor said
only that start(), execution_job(), scenarios(), transcript_fields(), replay() or check_task() failed, not where."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from rewardpipe import Environment, EpisodeState, Message, Reward, ScriptedPolicy, TaskRow, component
from rewardpipe.doctor import diagnose
from rewardpipe.environment import check_environment
from rewardpipe.runner import plan_step, run_slots

HERE = Path(__file__).name


class Fault(TaskRow):
    fault: str = ""  # which hook goes wrong for this task


@component(range=(0, 1), role="outcome")
def won(state: EpisodeState) -> float:
    return float(state.end_reason == "won")


@component(range=(0, 1), role="shaping")
def quick(state: EpisodeState) -> float:
    return 1.0 / state.assistant_turns


class Broken(Environment):
    name = "broken"
    version = "1"
    task_model = Fault
    state_model = EpisodeState
    max_turns = 3
    reward = Reward("broken", [won, quick])

    def start(self, task):
        if task.fault == "start":
            raise ValueError("no board")  # LINE: start
        if task.fault == "start_returns_dict":
            return {"messages": []}
        return self.state_model(messages=task.prompt_messages())

    def on_policy_turn(self, state, task, text):
        ending = text == "win" or state.assistant_turns >= 2
        if ending and task.fault == "execution_job":
            return state.evolve(next_action="execute", end_reason="won" if text == "win" else "slow")
        if ending:
            return state.evolve(next_action="score", end_reason="won" if text == "win" else "slow")
        return state.evolve(next_action="env")

    def respond(self, state, task, ctx):
        return state.append(Message(role="user", content="go on"), next_action="policy")

    def execution_job(self, state, task):
        if state.next_action == "execute":
            raise LookupError("no code to run")  # LINE: execution_job
        return None

    def transcript_fields(self, state, task):
        if task.fault == "transcript_fields":
            raise TypeError("no kinds")  # LINE: transcript_fields
        return {}

    def replay(self, task, messages):
        if task.fault == "replay":
            raise RuntimeError("no recording")  # LINE: replay
        return super().replay(task, messages)

    def check_task(self, task, runs):
        if task.fault == "check_task":
            raise ArithmeticError("no check")  # LINE: check_task
        return []

    def scenarios(self, task):
        if task.fault == "scenarios":
            raise KeyError("no players")  # LINE: scenarios
        return {
            "reference": ScriptedPolicy(lambda state, task: "win"),
            "slow": ScriptedPolicy(lambda state, task: "wait"),
        }


class NoSandbox:
    def run_batch(self, jobs, workers=None):
        raise AssertionError("nothing is executed")


def line_of(marker: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.rstrip().endswith(f"# LINE: {marker}"))


def findings(fault: str) -> list[str]:
    (diagnosis,) = diagnose([Fault(task_id=fault, prompt="play", fault=fault)], Broken(), NoSandbox())
    return [finding.message for finding in diagnosis.findings]


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ("start", "start() failed: ValueError: no board"),
        ("execution_job", "execution_job() failed: LookupError: no code to run"),
        ("scenarios", "scenarios() failed: KeyError: 'no players'"),
        ("transcript_fields", "transcript_fields() failed: TypeError: no kinds"),
        ("replay", "replay() failed: RuntimeError: no recording"),
        ("check_task", "check_task() failed: ArithmeticError: no check"),
    ],
)
def test_doctor_names_the_line_of_the_users_file_where_a_hook_raised(fault, said):
    named = [message for message in findings(fault) if said in message]
    assert named, findings(fault)
    for message in named:  # the path is relative to the working directory: the file's name and line end it
        assert f"{said} (at " in message and f"{HERE}:{line_of(fault)})" in message


def test_doctor_names_where_a_hook_is_defined_when_the_platform_refuses_what_it_returned():
    # No line of the user's raised: the platform said what start() returned, so where start() is defined is named.
    defined = inspect.getsourcelines(Broken.start)[1]
    named = [message for message in findings("start_returns_dict") if "start() returned dict" in message]
    assert named and all("(start() is at " in message and f"{HERE}:{defined})" in message for message in named)


def test_an_async_tool_schemas_is_refused_when_the_environment_is_loaded_naming_it():
    # Called as a hook before each model turn, never awaited: it passed the check, and every rollout's policy then
    # failed on a coroutine where the tools were (the model's policy_error, for the environment's mistake).
    class AsyncTools(Broken):
        async def tool_schemas(self, task):
            return []

    with pytest.raises(ValueError, match=r"tool_schemas\(\) is async def"):
        check_environment(AsyncTools())
    check_environment(Broken())  # (the same environment with no such hook loads)


def test_an_async_scripted_player_costs_only_its_tasks_rollouts_and_says_it_is_async():
    async def player(state, task):
        return "win"

    with pytest.raises(TypeError, match="ScriptedPolicy's function is async def"):
        ScriptedPolicy(player)

    class AsyncPlayer(Broken):
        def scenarios(self, task):
            if task.fault == "async_player":
                return {"reference": ScriptedPolicy(player)}
            return super().scenarios(task)

    env = AsyncPlayer()
    tasks = [Fault(task_id="fine", prompt="p"), Fault(task_id="bad", prompt="p", fault="async_player")]
    records = run_slots(plan_step(tasks, 0, 2, 2), policy=env.scripted_policy(), env=env, executor=None, run_id="r")
    assert {r.status for r in records if r.task_id == "fine"} == {"scored"}
    bad = [r for r in records if r.task_id == "bad"]
    assert len(bad) == 2 and all(r.status == "error" and r.error.kind == "policy_error" for r in bad)
    assert all("async def" in r.error.message for r in bad)


class Counted(EpisodeState):
    waits: int = 0


class Rebuilt(EpisodeState):  # a state class of another environment, with the same base fields
    pass


class Switching(Broken):
    """Its respond() hands back another class than its state_model for one task (a helper of another environment
    rebuilding the state): locally it played on; on AWS the state is read back with the state_model."""

    state_model = Counted

    def respond(self, state, task, ctx):
        new = state.append(Message(role="user", content="go on"), next_action="policy", waits=state.waits + 1)
        return Rebuilt.model_validate(new.model_dump(exclude={"waits"})) if task.fault == "switch" else new


def test_a_later_hook_returning_another_class_than_the_state_model_costs_its_rollout_naming_the_hook():
    env = Switching()
    tasks = [Fault(task_id="fine", prompt="p"), Fault(task_id="bad", prompt="p", fault="switch")]
    policy = ScriptedPolicy(["wait", "win"])
    records = run_slots(plan_step(tasks, 0, 2, 2), policy=policy, env=env, executor=None, run_id="r")
    assert {r.status for r in records if r.task_id == "fine"} == {"scored"}
    bad = [r for r in records if r.task_id == "bad"]
    assert len(bad) == 2 and all(r.status == "error" and r.error.kind == "simulator_error" for r in bad)
    for record in bad:
        assert "respond() returned a Rebuilt, not the environment's state_model Counted" in record.error.message
        assert f"{HERE}:{inspect.getsourcelines(Switching.respond)[1]})" in record.error.message
