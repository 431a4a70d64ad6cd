"""Round thirty-four on the built-in environments, played by a policy that maximises reward without doing the task.

E1. tool_call kept the id a structured call carried whatever it was. Some tool parsers take the id from the model's
own output (Mistral's nine characters, Kimi's ``functions.NAME:N``), so a model can give two calls of one turn, or a
call of a later turn, the same id: the environment answered each with a tool message of that id, and OpenAI refuses
the next request ("Invalid parameter: Duplicate value for 'tool_call_id'", HTTP 400; Mistral refuses a conversation
whose calls and results do not pair up). A model about to fail its task made its rollout an excluded
``policy_error`` so, out of its group's baseline. A given id is kept only the first time the episode sees it; a
repeat is answered under an id of the environment's own, unique in the episode (which an id the environment made
up for an earlier call cannot be taken by either).
"""

from __future__ import annotations

from rewardpipe.envs.tool_call import ENVIRONMENT, ToolCallTask
from rewardpipe.episode import converse, start_episode
from rewardpipe.models import Message
from rewardpipe.policies import ScriptedPolicy, chat_messages

WORLD = {
    "accounts": {"checking": 100, "savings": 500, "operating": 1000},
    "inventory": {"widget": {"stock": 2, "price_cents": 250, "cost_cents": 100}},
}


def _play(turns):
    task = ToolCallTask(task_id="t", prompt="What is in checking?", world=WORLD, expected_answer="100")
    state = start_episode(task, env=ENVIRONMENT, run_id="r", step=0, group_id="g", rollout_id="k0")
    return converse(state, task, ScriptedPolicy(list(turns)), ENVIRONMENT)


def _calls(*ids):
    return Message(
        role="assistant",
        content="",
        tool_calls=[
            {"id": given, "type": "function", "function": {"name": "list_items", "arguments": "{}"}} for given in ids
        ],
    )


def test_a_repeated_call_id_is_answered_under_an_id_unique_in_the_episode():
    state = _play(
        [
            _calls("b9mgIC84m", "b9mgIC84m"),  # twice in one turn
            _calls("b9mgIC84m"),  # again in a later turn
            _calls("call_3_0"),  # the id the environment would make up for the next turn's tagged call
            '<tool_call>{"name": "list_items", "arguments": {}}</tool_call>',
            "<answer>100</answer>",
        ]
    )
    ids = [m.tool_call_id for m in state.messages if m.role == "tool"]
    assert len(ids) == 5 and len(set(ids)) == 5, ids
    assert ids[0] == "b9mgIC84m" and ids[3] == "call_3_0"  # a first use keeps the model's id
    assert [call.id for call in state.calls] == ids
    assert state.answer == "100"


def test_the_next_request_answers_each_id_once():
    state = _play([_calls("a", "a"), _calls("a"), "<answer>100</answer>"])
    sent = chat_messages(state.messages)
    answered = [m["tool_call_id"] for m in sent if m["role"] == "tool"]
    assert len(answered) == len(set(answered)), answered
