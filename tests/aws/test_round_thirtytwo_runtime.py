"""Round thirty-two, AWS runtime paths.

* The trainer-side client (:meth:`rewardpipe.aws.client.RolloutClient.serve_turns`) sent a turn's text only:
  ``respond`` had to return a string, so a model's tool calls, which the Nova path and the local OpenAI policy
  carry into the episode, could not reach a callback rollout at all (a message refused as "not text"). ``respond``
  may now return an assistant message (a dict, the OpenAI SDK's message or chat completion), read as the local
  policy reads a reply (:func:`rewardpipe.openai_client.choice_message`): the calls reach the episode the same way.
"""

from __future__ import annotations

import json

import pytest

from tests.aws.test_client import _FakeSfn, _FakeSqs, _turn, turn_bucket  # noqa: F401 - the fixture
from tests.integrations.test_round_thirtyone_integrations import TOOL_REPLY, _tool_call

pytestmark = pytest.mark.xdist_group("cdk")


def _serve(respond, bodies, s3=None) -> _FakeSfn:
    from rewardpipe.aws.client import RolloutClient

    sfn, sqs = _FakeSfn(), _FakeSqs(bodies)
    client = RolloutClient("arn:aws:states:us-east-1:1:stateMachine:m", queue_url="q", sfn=sfn, sqs=sqs, s3=s3)
    calls = iter([False, True])
    client.serve_turns(respond, until=lambda: next(calls), poll_s=0.01)
    return sfn


class TestTheClientCarriesToolCalls:
    def test_a_message_with_tool_calls_reaches_the_episode_as_the_local_policy_reads_it(self, turn_bucket):  # noqa: F811
        """Before: ``respond`` returning the model's message failed the turn ("respond returned dict, not text"):
        the rollout an error record, the calls lost."""
        from rewardpipe.aws.rollout import trainer_turn
        from rewardpipe.envs.tool_call import BUNDLED_TASKS, ENVIRONMENT, ToolCallTask
        from rewardpipe.episode import start_episode
        from rewardpipe.models import load_task_rows
        from tests.security.test_round_thirtyone_environments import _endpoint_policy

        s3, _ = turn_bucket
        message = TOOL_REPLY["choices"][0]["message"]
        shapes = {"message": message, "choice": TOOL_REPLY["choices"][0], "completion": TOOL_REPLY}
        sfn = _serve(lambda request: shapes[request["rollout"]], [_turn(token) for token in shapes], s3)
        assert not sfn.failure and set(sfn.success) == set(shapes)
        task = load_task_rows(BUNDLED_TASKS, ToolCallTask)[0]
        state = start_episode(task, env=ENVIRONMENT, run_id="r", step=0, group_id="g", rollout_id="x")
        local = _endpoint_policy(TOOL_REPLY, tools=ENVIRONMENT.tool_schemas).next_turn(state, task)
        for token, output in sfn.success.items():
            turn = trainer_turn(output, "runs/r/state/a/reply-x.json", None)
            assert turn == local and len(turn.tool_calls) == 4, token  # the call that is no object dropped

    def test_an_sdk_message_object_and_plain_text_are_taken(self, turn_bucket):  # noqa: F811
        from rewardpipe.models import Message

        s3, _ = turn_bucket
        calls = [_tool_call("c1", "get_balance", '{"account": "checking"}')]
        replies = {"obj": Message(role="assistant", content="Checking.", tool_calls=calls), "text": "Just text."}
        sfn = _serve(lambda request: replies[request["rollout"]], [_turn("obj"), _turn("text")], s3)
        assert sfn.success == {
            "obj": {"text": "Checking.", "tool_calls": calls},
            "text": {"text": "Just text."},  # as before: no tool_calls key
        }

    def test_a_large_message_goes_through_its_reply_key_with_its_calls(self, turn_bucket):  # noqa: F811
        from rewardpipe.aws.rollout import trainer_turn
        from rewardpipe.aws.state import StateStore

        s3, store = turn_bucket
        calls = [_tool_call("c1", "get_balance", json.dumps({"account": "x" * 250_000}))]
        sfn = _serve(lambda request: {"content": None, "tool_calls": calls}, [_turn("big")], s3)
        assert sfn.success == {"big": {"text_key": "runs/r/state/a/reply-big.json"}}
        turn = trainer_turn(sfn.success["big"], "runs/r/state/a/reply-big.json", StateStore(store, "r", "a"))
        assert turn.content == "" and turn.tool_calls == calls

    def test_a_filtered_reply_is_a_content_filter_stop_and_a_reply_without_a_turn_fails_the_turn(self, turn_bucket):  # noqa: F811
        s3, _ = turn_bucket
        replies = {
            "refused": {"content": None, "refusal": "I can't help with that."},
            "empty": {"choices": [{"message": {"content": None}, "finish_reason": "length"}]},
            "nothing": {"role": "assistant"},
            "number": 42,
        }
        sfn = _serve(lambda request: replies[request["rollout"]], [_turn(token) for token in replies], s3)
        assert sfn.success == {"refused": {"filtered": True}, "empty": {"text": ""}}
        assert set(sfn.failure) == {"nothing", "number"}
