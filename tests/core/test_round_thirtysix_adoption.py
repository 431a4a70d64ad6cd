"""Round thirty-six, adoption: a new user's own environment and reward through the documented paths."""

from __future__ import annotations

import pytest

from rewardpipe import Environment, EpisodeState, Reward, TaskRow, component
from rewardpipe.models import Rollout
from rewardpipe.runner import NoSandbox, score_rollouts
from rewardpipe.testing import check_environment


class NumberTask(TaskRow):
    secret: int


@component(range=(0, 1), role="outcome")
def won(state):
    return float(state.end_reason == "found")


class NumberGame(Environment):
    name = "number_game"
    version = "1"
    task_model = NumberTask
    state_model = EpisodeState
    max_turns = 4
    reward = Reward("number_game", [won])

    def on_policy_turn(self, state, task, text):
        if text.strip() == "13":
            raise KeyError("unlucky thirteen")  # the user's own bug, on one recording
        if text.strip() == str(task.secret):
            return state.evolve(next_action="score", end_reason="found")
        return state.evolve(next_action="env")

    def respond(self, state, task, ctx):
        return state.append({"role": "user", "content": "no"}, next_action="policy")


def _recording(rollout_id: str, guess: str) -> Rollout:
    messages = [{"role": "user", "content": "Guess."}, {"role": "assistant", "content": guess}]
    return Rollout(rollout_id=rollout_id, group_id="g", task_id="t", messages=messages)


def test_a_hook_raising_while_a_recording_is_replayed_names_the_environment_and_the_users_line():
    tasks = {"t": NumberTask(task_id="t", prompt="Guess.", secret=7)}
    records = score_rollouts(
        [_recording("a", "7"), _recording("b", "13")], tasks, executor=NoSandbox(), env=NumberGame(), run_id="r"
    )
    assert [r.status for r in records] == ["scored", "error"]
    error = records[1].error
    assert error.kind == "replay_failed"
    assert "number_game" in error.message and "KeyError: 'unlucky thirteen'" in error.message
    assert "test_round_thirtysix_adoption.py:" in error.message  # the line of the user's file that raised


def test_check_environment_names_the_task_row_and_the_field_a_list_of_dicts_gets_wrong():
    rows = [{"task_id": "a", "prompt": "Guess.", "secret": 7}, {"task_id": "b", "prompt": "Guess.", "secret": "x"}]
    with pytest.raises(ValueError, match=r"task row 1 \('b'\) is not a row of NumberTask: field 'secret'"):
        check_environment(NumberGame(), rows)
    with pytest.raises(ValueError, match=r"task row 0 \('a'\).*missing required field 'secret'"):
        check_environment(NumberGame(), [{"task_id": "a", "prompt": "Guess."}])


def test_check_environment_given_one_row_instead_of_a_list_says_so():
    # Iterated, a dict gave its keys as rows: pydantic's "valid dictionary" error about the string 'task_id'.
    with pytest.raises(ValueError, match="got one dict: wrap it in a list"):
        check_environment(NumberGame(), {"task_id": "a", "prompt": "Guess.", "secret": 7})


def test_check_environment_with_a_single_turn_reward_says_it_reads_reference_as_doctor_does():
    # Played, every scenario's components were None: 16 unexplained_none findings, not one saying why.
    @component(range=(0, 1), role="outcome")
    def exact(completion, reference):
        return float(completion == reference)

    rows = [{"task_id": "a", "prompt": "Guess.", "secret": 7}]
    with pytest.raises(ValueError, match=r"exact read 'reference', which an episode does not have"):
        check_environment(NumberGame(), rows, reward=Reward("single", [exact]))


class ForgetsToReturn(NumberGame):
    def respond(self, state, task, ctx):
        state.append({"role": "user", "content": "no"}, next_action="policy")  # the return forgotten

    def scenarios(self, task):
        from rewardpipe import ScriptedPolicy

        return {"reference": ScriptedPolicy(["7"]), "wrong": ScriptedPolicy(["1", "7"])}


def test_doctor_names_where_a_hook_that_broke_the_contract_is_defined_as_run_does():
    # doctor plays a watching wrapper of the environment, whose hooks are rewardpipe's: the location was not found.
    with pytest.raises(AssertionError) as caught:
        check_environment(ForgetsToReturn(), [{"task_id": "a", "prompt": "Guess.", "secret": 7}])
    assert "respond() returned NoneType" in str(caught.value)
    assert "(respond() is at tests/core/test_round_thirtysix_adoption.py:" in str(caught.value)


class NanState(EpisodeState):
    closeness: float = 0.0


class LeavesANan(NumberGame):
    state_model = NanState

    def respond(self, state, task, ctx):
        return state.append({"role": "user", "content": "no"}, next_action="policy", closeness=float("nan"))

    def scenarios(self, task):
        from rewardpipe import ScriptedPolicy

        return {"reference": ScriptedPolicy(["7"]), "wrong": ScriptedPolicy(["1", "7"])}


def test_doctors_state_not_json_finding_names_the_field():
    # It said pydantic's first line, "ValidationError: 1 validation error for NanState", naming no field.
    with pytest.raises(AssertionError) as caught:
        check_environment(LeavesANan(), [{"task_id": "a", "prompt": "Guess.", "secret": 7}])
    (finding,) = [line for line in str(caught.value).splitlines() if "[state_not_json]" in line]
    assert "field 'closeness'" in finding and "NaN" in finding
