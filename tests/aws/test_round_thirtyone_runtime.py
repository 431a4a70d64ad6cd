"""Round thirty-one, AWS runtime paths (an independent review, "moto is not AWS"): what the real services refuse
that moto, botocore's Stubber or a local endpoint took.

* Bedrock Converse takes a conversation that ends with the assistant's turn as a prefill to continue (Anthropic's
  models): their current models refuse it ("This model does not support assistant message prefill. The
  conversation must end with a user message."), the older ones refuse it when it ends with whitespace ("final
  assistant content cannot end with trailing whitespace"), as a model's answer often does. An OpenAI-compatible
  endpoint answers such a conversation after its last turn, and moto has no Converse. A judge or an environment
  passing a rollout as it is (ending with the model's answer) failed every call on AWS: each such sample an error
  record instead of a judgement. Such a conversation now gets a ``(continue)`` user turn after it, answered as
  the local client's is; the harness checks a request as Bedrock does (:func:`tests.aws.harness.converse_problem`).
* Anthropic models on Bedrock refuse a stop sequence of whitespace only ("each stop sequence must contain
  non-whitespace"), the most common judge stop of all (``stop="\n"``), which an OpenAI-compatible endpoint
  takes: every judged sample was a paid ValidationException and an error record naming only that. Such a request
  is now refused before it is sent, naming ``stop`` and the model (another model family takes it, and is sent it).
* CloudWatch takes no NaN ("special values (for example, NaN, +Infinity, -Infinity) are not supported"):
  :func:`rewardpipe.aws.metrics.metric_value` clamped an infinity into range but passed NaN through, and
  :func:`rewardpipe.aws.metrics.emit` printed ``[NaN]``, which is not JSON: CloudWatch Logs does not read the
  document as EMF and the point is lost unseen. A point with no finite value is now left out of what is emitted.
"""

from __future__ import annotations

import json
import math

import pytest

from rewardpipe.aws.metrics import MetricPoint, emit
from tests.aws import harness
from tests.aws.test_bedrock_judge import MODEL, _client, _reply, stubbed  # noqa: F401 - the fixture

pytestmark = pytest.mark.xdist_group("cdk")


def _request(messages: list[dict]) -> dict:
    return {"modelId": MODEL, "messages": messages}


def test_the_harness_refuses_a_converse_request_bedrock_refuses():
    user, answer = {"role": "user", "content": [{"text": "Grade this."}]}, "The answer is 4."
    for bad in (
        [user, {"role": "assistant", "content": [{"text": answer}]}],  # a prefill: the current models take none
        [user, {"role": "assistant", "content": [{"text": answer + "\n"}]}],  # nor do the older ones, so
        [user, {"role": "assistant", "content": [{"text": " "}]}, user],  # blank
        [{"role": "assistant", "content": [{"text": answer}]}, user],  # not from the user's
        [user, user],  # not alternating
    ):
        assert harness.converse_problem(_request(bad)) is not None, bad
    # Whitespace ending an assistant turn that is not the last is taken.
    middle = [user, {"role": "assistant", "content": [{"text": "Which one?\n"}]}, user]
    assert harness.converse_problem(_request(middle)) is None


@pytest.mark.parametrize("ending", ["", "\n", "  \n\n"])
def test_a_conversation_ending_with_the_models_turn_is_answered_after_it(stubbed, ending):  # noqa: F811
    """Before: the model's answer went out as the final message, "...4.\\n", a prefill Bedrock refuses: the judged
    component an error on every sample."""
    from rewardpipe.bedrock import CONTINUE, converse_request

    messages = [
        {"role": "system", "content": "Rate the conversation from 0 to 10."},
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "Let me see.\n"},
        {"role": "assistant", "content": [{"type": "text", "text": "The answer is 4." + ending}]},
    ]
    request = converse_request(MODEL, messages, {})
    assert harness.converse_problem(request) is None
    assert request["messages"][-2:] == [
        {"role": "assistant", "content": [{"text": "Let me see.\n"}, {"text": "The answer is 4." + ending}]},
        {"role": "user", "content": [{"text": CONTINUE}]},
    ]
    client, stubber = stubbed
    stubber.add_response("converse", _reply("8"), request)
    assert _client(client, []).complete(messages) == "8"
    # A conversation that is only the model's turn gets the user's turn on both sides.
    alone = converse_request(MODEL, [{"role": "assistant", "content": "4" + ending}], {})
    assert harness.converse_problem(alone) is None
    assert [m["role"] for m in alone["messages"]] == ["user", "assistant", "user"]


@pytest.mark.parametrize("stop", ["\n", ["VERDICT", "\n\n"], " \t"])
def test_a_whitespace_stop_sequence_for_an_anthropic_model_is_refused_before_the_call(stubbed, stop):  # noqa: F811
    """Before: the request went out and Bedrock refused it, on every judged sample."""
    from rewardpipe.bedrock import converse_request

    messages = [{"role": "user", "content": "Grade this."}]
    for model in (MODEL, "us.anthropic.claude-3-5-haiku-20241022-v1:0"):
        with pytest.raises(ValueError, match="stop") as refused:
            request = converse_request(model, messages, {"stop": stop})
            assert harness.converse_problem(request) is None, "sent a request Bedrock refuses"
        assert "whitespace" in str(refused.value)
    client, _ = stubbed  # refused before any call: the Stubber has no response queued
    with pytest.raises(ValueError, match="stop"):
        _client(client, []).complete(messages, stop=stop)
    other = converse_request("amazon.nova-lite-v1:0", messages, {"stop": stop})  # takes it
    assert other["inferenceConfig"]["stopSequences"] == ([stop] if isinstance(stop, str) else stop)
    assert harness.converse_problem(other) is None


def test_emit_leaves_out_a_point_cloudwatch_cannot_take(capsys):
    """Before: ``"ExecutionDurationMs":[NaN]`` was printed (not JSON, so not EMF: the point silently lost)."""
    sent = emit(
        [
            MetricPoint("ExecutionDurationMs", math.nan, "Milliseconds", {"route": "lambda"}),
            MetricPoint("ExecutionDurationMs", 12.5, "Milliseconds", {"route": "fargate"}),
            MetricPoint("ComponentMean", math.inf, "None", {"component": "c"}),
        ]
    )
    stdout = capsys.readouterr().out
    assert "NaN" not in stdout
    assert harness.emf_violations(stdout) == []
    docs = [json.loads(line) for line in stdout.splitlines() if line.startswith('{"_aws"')]
    assert [(d.get("route"), d.get("component")) for d in docs] == [("fargate", None), (None, "c")]
    assert sent == 2
