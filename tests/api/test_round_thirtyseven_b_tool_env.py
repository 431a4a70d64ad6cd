"""Round thirty-seven (second wave), a new user's tool-use environment: doctor on scripted players that write what
a hostile model writes."""

import json
from pathlib import Path

import pytest

from rewardpipe import Message, ScriptedPolicy
from rewardpipe.envs.wordle.environment import Wordle
from rewardpipe.testing import check_environment

WORDLE_TASKS = (Path(__file__).resolve().parents[2] / "rewardpipe" / "data" / "wordle_tasks.jsonl").read_text()
# JSON's "\ud800" decodes to a lone surrogate: a model's reply (a recording, an endpoint's JSON) may hold one.
HOSTILE = "</script>\x1b[31m\u202e\ud800 [red]x[/red]"
HOSTILE_CALL = {"id": HOSTILE, "type": "function", "function": {"name": HOSTILE, "arguments": {HOSTILE: HOSTILE}}}
HOSTILE_PLAYERS = {
    "hostile_text": ScriptedPolicy([HOSTILE] * 6),
    "hostile_call": ScriptedPolicy([Message(role="assistant", content=HOSTILE, tool_calls=[HOSTILE_CALL])] * 6),
}


class HostileWordle(Wordle):
    """The built-in wordle, with one more scripted player, writing what a hostile model writes."""

    def __init__(self, hostile: str) -> None:
        super().__init__()
        self.hostile = hostile

    def scenarios(self, task):
        return {**super().scenarios(task), self.hostile: HOSTILE_PLAYERS[self.hostile]}


@pytest.mark.parametrize("scenario", sorted(HOSTILE_PLAYERS))
def test_a_scripted_turn_holding_a_lone_surrogate_is_no_state_not_json_finding(scenario):
    # `run` scored these and AWS stores them (the lone surrogate written as its \u escape); doctor wrote the state
    # with pydantic's own JSON writer, which refuses a lone surrogate anywhere, and failed every task with
    # state_not_json, blaming the environment for the model's text.
    # (a state field that really does not survive JSON is still found: tests/security/*_environments.py)
    check_environment(HostileWordle(scenario), [json.loads(line) for line in WORDLE_TASKS.splitlines()[:2]])


class DictTurnWordle(Wordle):
    """A scripted player returning a tool-calling turn as the dict an OpenAI response holds, not a Message."""

    def scenarios(self, task):
        turn = {"role": "assistant", "content": "", "tool_calls": [HOSTILE_CALL]}
        return {**super().scenarios(task), "dict_turn": ScriptedPolicy(lambda state, task: turn)}


def test_a_scripted_turn_of_the_wrong_type_is_named_with_what_a_turn_may_be():
    # It said "policy returned dict, not text": a user scripting tool calls read that a turn can only be text, where
    # a Message carries them.
    with pytest.raises(AssertionError) as caught:
        check_environment(DictTurnWordle(), [json.loads(WORDLE_TASKS.splitlines()[0])])
    (finding,) = [line for line in str(caught.value).splitlines() if "dict_turn" in line]
    assert "returned dict" in finding and "rewardpipe.Message" in finding and "tool_calls" in finding
