"""The environment protocol through the platform's loop, with environments that are not about code."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import Field

from rewardpipe import (
    EnvContext,
    Environment,
    EpisodeState,
    Message,
    Reward,
    ScriptedPolicy,
    TaskRow,
    component,
)
from rewardpipe.episode import (
    EnvServices,
    apply_env_turn,
    apply_policy_turn,
    converse,
    replay_through_hooks,
    run_episode,
    start_episode,
)
from rewardpipe.models import InputFileError, load_task_rows
from tests.api.conftest import GUESS_TASKS

IDS = dict(run_id="run", step=3, group_id="g", rollout_id="r")


class Echo(TaskRow):
    word: str


class EchoState(EpisodeState):
    seen: list[str] = Field(default_factory=list)


@component(range=(0, 1), role="outcome")
def echoed(state: EchoState, task: Echo) -> float:
    return 1.0 if any(task.word in said for said in state.seen) else 0.0


class EchoEnv(Environment):
    """The model must say the task's word; the environment answers 'again' until it does."""

    name = "echo"
    version = "1"
    task_model = Echo
    state_model = EchoState
    max_turns = 3
    reward = Reward("echo", [echoed])

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def on_policy_turn(self, state: EchoState, task: Echo, text: str) -> EchoState:
        self.calls.append(("on_policy_turn", [m.role for m in state.messages]))
        seen = [*state.seen, text]
        if task.word in text:
            return state.evolve(seen=seen, next_action="score", end_reason="said_it")
        return state.evolve(seen=seen, next_action="env")

    def respond(self, state: EchoState, task: Echo, ctx: EnvContext) -> EchoState:
        self.calls.append(("respond", ctx))
        return state.append({"role": "user", "content": "again"}, next_action="policy")


TASK = Echo(task_id="t1", prompt="Say the word.", word="banana")


class Script:
    def __init__(self, *turns: Any) -> None:
        self.turns = list(turns)

    def next_turn(self, state, task):
        return self.turns[state.assistant_turns]


class NeverRuns:
    def run(self, job):
        raise AssertionError("nothing should be executed")

    def run_batch(self, jobs, workers=None):
        raise AssertionError("nothing should be executed")


def test_start_opens_with_the_prompt_and_the_platform_fills_in_ids_and_the_turn_limit():
    env = EchoEnv()
    state = start_episode(TASK, env=env, **IDS)
    assert [(m.role, m.content) for m in state.messages] == [("user", "Say the word.")]
    assert (state.run_id, state.step, state.group_id, state.rollout_id, state.task_id) == ("run", 3, "g", "r", "t1")
    assert state.max_turns == 3 and state.next_action == "policy" and isinstance(state, EchoState)
    assert start_episode(TASK, env=env, max_turns=9, **IDS).max_turns == 9  # --max-turns wins


def test_on_policy_turn_sees_the_assistant_turn_already_appended():
    env = EchoEnv()
    state = apply_policy_turn(start_episode(TASK, env=env, **IDS), "apple", env, TASK)
    assert env.calls[0] == ("on_policy_turn", ["user", "assistant"])
    assert state.messages[-1] == Message(role="assistant", content="apple") and state.next_action == "env"


def test_the_environment_ends_the_episode_and_nothing_is_executed():
    env = EchoEnv()
    record = run_episode(TASK, Script("apple", "banana!"), env, NeverRuns(), **IDS)
    assert record.status == "scored" and record.components == {"echoed": 1.0}
    assert record.metrics["end_reason"] == "said_it"
    assert [c[0] for c in env.calls] == ["on_policy_turn", "respond", "on_policy_turn"]


def test_the_platform_keeps_the_turn_limit():
    record = run_episode(TASK, Script("a", "b", "c", "d"), EchoEnv(), NeverRuns(), **IDS)
    assert record.metrics["end_reason"] == "turn_limit" and record.components == {"echoed": 0.0}
    record = run_episode(TASK, Script("a", "b", "c", "d"), EchoEnv(), NeverRuns(), max_turns=1, **IDS)
    assert record.metrics["end_reason"] == "turn_limit"


def test_env_is_stored_as_simulator_and_read_back_as_env():
    env = EchoEnv()
    state = apply_policy_turn(start_episode(TASK, env=env, **IDS), "apple", env, TASK)
    stored = json.loads(state.model_dump_json())
    assert stored["next_action"] == "simulator"
    again = EchoState.model_validate(stored)
    assert again == state and again.next_action == "env"
    assert EchoState.model_validate({**stored, "next_action": "env"}).next_action == "env"


def test_steps_return_new_states_and_leave_their_inputs_alone():
    env = EchoEnv()
    first = start_episode(TASK, env=env, **IDS)
    before = first.model_dump_json()
    second = apply_policy_turn(first, "apple", env, TASK)
    third = apply_env_turn(second, TASK, env)
    assert first.model_dump_json() == before and len(second.messages) == 2 and len(third.messages) == 3


def test_a_hook_that_breaks_the_step_contract_is_the_environments_error_record():
    class Bad(EchoEnv):
        def on_policy_turn(self, state, task, text):
            return state.evolve(next_action="policy")

    record = run_episode(TASK, Script("apple"), Bad(), NeverRuns(), **IDS)
    assert record.status == "error" and record.error.kind == "simulator_error"
    assert "on_policy_turn" in record.error.message and "env, execute, score" in record.error.message
    assert record.components == {"echoed": None}


def test_an_environment_without_respond_fails_its_rollout_not_the_run():
    class Mute(EchoEnv):
        respond = Environment.respond

    record = run_episode(TASK, Script("apple"), Mute(), NeverRuns(), **IDS)
    assert record.error.kind == "simulator_error" and "respond" in record.error.message


def test_the_context_gives_a_seed_per_rollout_and_turn_and_the_chat_client():
    env = EchoEnv()
    asked = []
    services = EnvServices(seed=5, chat=lambda messages, **params: asked.append((messages, params)) or "ok")
    state = apply_policy_turn(start_episode(TASK, env=env, **IDS), "apple", env, TASK)
    apply_env_turn(state, TASK, env, services)
    apply_env_turn(state, TASK, env, services)
    ctx_a, ctx_b = env.calls[1][1], env.calls[2][1]
    assert ctx_a.seed == ctx_b.seed and ctx_a.turn == 1 and ctx_a.ids.rollout_id == "r"
    other = apply_policy_turn(start_episode(TASK, env=env, **{**IDS, "rollout_id": "r2"}), "apple", env, TASK)
    apply_env_turn(other, TASK, env, services)
    assert env.calls[-1][1].seed != ctx_a.seed
    assert ctx_a.chat([Message(role="user", content="hi")], temperature=0) == "ok"
    assert asked == [([{"role": "user", "content": "hi"}], {"temperature": 0})]
    with pytest.raises(RuntimeError, match="--sim-base-url"):
        EnvContext(ids=ctx_a.ids, turn=0, seed=0).chat([])


def test_a_policy_turn_may_carry_tool_calls_and_they_are_kept():
    env = EchoEnv()
    call = {"id": "c1", "type": "function", "function": {"name": "say", "arguments": '{"w": "banana"}'}}
    turn = Message(role="assistant", content="banana", tool_calls=[call])
    state = converse(start_episode(TASK, env=env, **IDS), TASK, Script(turn), env)
    assert state.messages[-1].tool_calls == [call]
    stored = json.loads(state.model_dump_json())["messages"]
    assert stored[-1]["tool_calls"] == [call] and "tool_calls" not in stored[0]  # absent fields are not written


def test_message_tool_fields_round_trip_and_reach_components():
    tool = Message(role="tool", content="42", tool_call_id="c1", name="calc")
    assert Message.model_validate(json.loads(tool.model_dump_json())) == tool
    assert Message(role="user", content="x").model_dump() == {"role": "user", "content": "x"}
    seen = []
    reads = component(range=(0, 1), role="outcome", name="reads")(lambda messages: seen.extend(messages) or 1.0)
    Reward("t", [reads]).score([tool, Message(role="assistant", content="done")])
    assert seen[0].tool_call_id == "c1" and seen[0].name == "calc"


def test_a_task_row_prompt_may_be_messages_and_unknown_fields_name_their_line(tmp_path):
    row = Echo(
        task_id="t", prompt=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Go"}], word="x"
    )
    assert [m.role for m in start_episode(row, env=EchoEnv(), **IDS).messages] == ["system", "user"]
    bad = tmp_path / "tasks.jsonl"
    bad.write_text('{"task_id": "a", "prompt": "p", "word": "w"}\n{"task_id": "b", "prompt": "p", "wrod": "w"}\n')
    with pytest.raises(InputFileError, match=r"tasks.jsonl:2.*'wrod'"):
        load_task_rows(bad, Echo)


def test_the_default_replay_rebuilds_the_state_and_refuses_a_recording_the_env_would_not_say():
    env = EchoEnv()
    live = converse(start_episode(TASK, env=env, **IDS), TASK, Script("apple", "banana"), env)
    replayed = replay_through_hooks(env, TASK, live.messages)
    assert replayed.seen == live.seen and replayed.end_reason == "said_it" and replayed.next_action == "score"
    forged = [*live.messages[:2], Message(role="user", content="you win"), *live.messages[3:]]
    with pytest.raises(ValueError, match="differently from the recording at message 3"):
        replay_through_hooks(env, TASK, forged)


def test_the_guess_tasks_validate_against_the_environments_task_model(acme):
    from acme_rl.guess import ENVIRONMENT

    rows = load_task_rows(GUESS_TASKS, ENVIRONMENT.task_model)
    assert [r.secret for r in rows] == [7, 42, 93] and rows[0].max_guesses == 7


def test_scenarios_are_scripted_policies_playable_by_the_loop(acme):
    from acme_rl.guess import ENVIRONMENT

    task = load_task_rows(GUESS_TASKS, ENVIRONMENT.task_model)[1]
    reference = ENVIRONMENT.scenarios(task)["reference"]
    assert isinstance(reference, ScriptedPolicy)
    record = run_episode(task, reference, ENVIRONMENT, NeverRuns(), max_turns=reference.max_turns, **IDS)
    assert record.components["solved"] == 1.0 and record.metrics["end_reason"] == "solved"


def test_evolve_refuses_a_name_that_is_not_a_field():
    state = start_episode(TASK, env=EchoEnv(), **IDS)
    with pytest.raises(AttributeError, match="EchoState has no field 'sen'"):
        state.evolve(sen=["x"])
    assert state.evolve(seen=["x"]).seen == ["x"] and state.seen == []


def test_an_environment_written_for_another_api_major_is_refused():
    from rewardpipe.environment import check_environment

    class Future(EchoEnv):
        api = 2

    with pytest.raises(ValueError, match="API 2.*speaks API 1"):
        check_environment(Future())
    assert check_environment(EchoEnv).name == "echo"  # a class is instantiated
