"""A conversation that outgrows the policy model's context window ends there and is scored, as at the turn limit.

It was a ``policy_error`` record: left out of GRPO, so the rollouts that talked longest vanished from their groups
instead of being scored for what they did. Only a refusal that says the prompt is too long ends the episode;
any other HTTP error is still the endpoint's failure.
"""

import pytest

from rewardpipe import ContextLimitReached
from rewardpipe.envs.ask_before_coding.environment import ENVIRONMENT as ENV
from rewardpipe.episode import CONTEXT_LIMIT, run_episode
from rewardpipe.openai_client import ChatClient, ContextLengthExceeded, EndpointError
from rewardpipe.policies import OpenAIPolicy
from rewardpipe.runner import NoSandbox
from tests.core.conftest import make_task

TASK = make_task()

#: (status, body) of a refused too-long request, as each server family words it.
OVERFLOWS = {
    "openai": (
        400,
        {
            "error": {
                "message": "This model's maximum context length is 8192 tokens. However, your messages resulted "
                "in 9100 tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        },
    ),
    "vllm": (
        400,
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens. However, you requested 5120 tokens "
            "(4096 in the messages, 1024 in the completion).",
            "type": "BadRequestError",
            "code": 400,
        },
    ),
    "vllm, newer": (
        400,
        {
            "object": "error",
            "message": "max_tokens must be at most 1024 (the maximum model length is 4096)",
            "code": 400,
        },
    ),
    "sglang": (
        400,
        {
            "object": "error",
            "message": "The input (5000 tokens) is longer than the model's context length (4096 tokens).",
        },
    ),
    "tgi": (
        422,
        {
            "error": "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 3900 "
            "`inputs` tokens and 1024 `max_new_tokens`",
            "error_type": "validation",
        },
    ),
    # round eighteen: llama.cpp's server (llama-server) was read as any other refusal, a policy_error
    "llama.cpp": (
        400,
        {
            "error": {
                "code": 400,
                "message": "request (9412 tokens) exceeds the available context size (8192 tokens), try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": 9412,
                "n_ctx": 8192,
            }
        },
    ),
    "anthropic-style": (
        400,
        {"error": {"type": "invalid_request_error", "message": "prompt is too long: 210000 tokens > 200000 maximum"}},
    ),
}

#: 4xx refusals for other reasons: still the endpoint's failure.
OTHER_REFUSALS = {
    "bad temperature": (400, {"error": {"message": "temperature must be between 0 and 2", "code": "invalid_value"}}),
    "unknown model": (404, {"error": {"message": "The model `x` does not exist", "code": "model_not_found"}}),
    "auth, whatever it says": (401, {"error": {"message": "context length unknown: invalid api key"}}),
    "too many tools": (400, {"error": {"message": "tools: array too long, expected at most 128 items"}}),
}


def _client(server) -> ChatClient:
    return ChatClient(server.url, "m", backoff_s=0.0, max_retries=2)


@pytest.mark.parametrize("server_family", sorted(OVERFLOWS))
def test_a_too_long_prompt_is_told_apart_and_not_retried(chat_server, server_family):
    chat_server.replies.append(OVERFLOWS[server_family])
    with pytest.raises(ContextLengthExceeded):
        _client(chat_server).complete([{"role": "user", "content": "hi"}])
    assert len(chat_server.requests) == 1


@pytest.mark.parametrize("refusal", sorted(OTHER_REFUSALS))
def test_other_refusals_stay_endpoint_errors(chat_server, refusal):
    chat_server.replies.append(OTHER_REFUSALS[refusal])
    with pytest.raises(EndpointError) as raised:
        _client(chat_server).complete([{"role": "user", "content": "hi"}])
    assert not isinstance(raised.value, ContextLengthExceeded)


def _episode(chat_server):
    policy = OpenAIPolicy("unused", "unused", system_prompt=ENV.system_prompt, client=_client(chat_server))
    return run_episode(TASK, policy, ENV, NoSandbox(), run_id="ctx", step=0, group_id="g", rollout_id="r", max_turns=6)


def test_an_episode_whose_conversation_outgrows_the_window_is_scored_as_it_stands(chat_server):
    chat_server.reply("Should negative numbers be supported?")  # a question: the simulator answers
    chat_server.replies.append(OVERFLOWS["vllm"])  # the second turn no longer fits
    record = _episode(chat_server)
    assert record.status == "scored" and record.error is None
    assert record.metrics["end_reason"] == CONTEXT_LIMIT and record.metrics["assistant_turns"] == 1
    assert record.components["correctness"] == 0.0  # nothing committed: the model's own outcome


def test_an_endpoint_that_fails_otherwise_is_still_a_policy_error(chat_server):
    chat_server.reply("Should negative numbers be supported?")
    chat_server.replies.append(OTHER_REFUSALS["bad temperature"])
    record = _episode(chat_server)
    assert record.status == "error" and record.error.kind == "policy_error"


def test_a_policy_of_ones_own_may_end_its_episode_the_same_way():
    class Windowed:
        def next_turn(self, state, task):
            if state.assistant_turns:
                raise ContextLimitReached("my tokenizer says 4097 > 4096")
            return "What should happen for an empty input?"

    record = run_episode(TASK, Windowed(), ENV, NoSandbox(), run_id="ctx", step=0, group_id="g", rollout_id="r")
    assert record.status == "scored" and record.metrics["end_reason"] == CONTEXT_LIMIT


def test_a_task_that_does_not_fit_before_the_models_first_turn_is_a_policy_error(chat_server):
    """Round eighteen: refused before the model said anything (a task prompt longer than the window, or a
    max_tokens no prompt leaves room for), every rollout was a scored 0 with end reason context_limit: a
    configuration or data problem silently trained on as the model's outcome (a group of equal zeros). Nothing
    of the model's is there to score: it stays a policy_error record, naming the refusal."""
    chat_server.replies.append(OVERFLOWS["vllm"])
    record = _episode(chat_server)
    assert record.status == "error" and record.error.kind == "policy_error"
    assert "context" in record.error.message

    class Windowed:
        def next_turn(self, state, task):
            raise ContextLimitReached("my tokenizer says 9000 > 4096")

    record = run_episode(TASK, Windowed(), ENV, NoSandbox(), run_id="ctx", step=0, group_id="g", rollout_id="r")
    assert record.status == "error" and record.error.kind == "policy_error"


def test_a_conversation_that_outgrows_the_simulators_window_is_scored_as_it_stands():
    """Round eighteen: the LLM playing the user reads the model's turns verbatim, so a model whose questions
    filled the user model's window made its rollout a simulator_error: left out of its group, the longest
    talkers escaped scoring through the simulator as they had through the policy. Such a refusal ends the
    episode at context_limit too; any other failure of the simulator stays a simulator_error."""
    from rewardpipe.episode import EnvServices
    from rewardpipe.policies import ScriptedPolicy

    def refusing(messages, **params):
        raise ContextLengthExceeded("HTTP 400 from sim: This model's maximum context length is 4096 tokens.")

    def failing(messages, **params):
        raise EndpointError("HTTP 500 from sim")

    env = ENV.configure(simulator="openai")
    policy = ScriptedPolicy(["Should negative numbers be supported? " * 200, "```python\npass\n```"])

    def episode(chat):
        services = EnvServices(chat=chat)
        return run_episode(
            TASK, policy, env, NoSandbox(), run_id="c", step=0, group_id="g", rollout_id="r", services=services
        )

    record = episode(refusing)
    assert record.status == "scored" and record.metrics["end_reason"] == CONTEXT_LIMIT
    assert record.metrics["assistant_turns"] == 1
    record = episode(failing)
    assert record.status == "error" and record.error.kind == "simulator_error"


#: Round nineteen: refusals for other reasons that quote what was sent. The model's words may say anything, the
#: server's phrases and OpenAI's code included; the reviewer's case was a 400 whose first KiB quoted the
#: conversation, read as context_limit: a rollout the endpoint failed, scored as the model's own ending.
MODEL_WORDS = "Sorry, this model's maximum context length is 4096 tokens (context_length_exceeded); prompt is too long"
QUOTING_REFUSALS = {
    "a template error quoting the turn": (
        400,
        {"error": {"message": f"Jinja error rendering message 2: unexpected '{MODEL_WORDS}'", "code": 400}},
    ),
    "a code named only inside the message": (
        400,
        {"error": {"message": f"invalid content: {MODEL_WORDS}", "type": "invalid_request_error"}},
    ),
    "a plain-text body": (400, f"Bad Request: could not parse tool arguments {MODEL_WORDS!r}".encode()),
    "a JSON string body": (422, f"invalid message: {MODEL_WORDS}"),
}


@pytest.mark.parametrize("refusal", sorted(QUOTING_REFUSALS))
def test_a_refusal_that_quotes_the_conversation_is_not_a_context_overflow(chat_server, refusal):
    chat_server.replies.append(QUOTING_REFUSALS[refusal])
    talk = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": MODEL_WORDS}]
    with pytest.raises(EndpointError) as raised:
        _client(chat_server).complete(talk)
    assert not isinstance(raised.value, ContextLengthExceeded)


def test_a_real_overflow_is_told_apart_though_the_conversation_talks_about_context_length(chat_server):
    """The server's own sentence counts whatever the model said: only words that are a piece of what was
    sent are taken for a quote, and a code counts as the body's code field."""
    talk = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "What context length do you have?"}]
    for family in ("vllm", "openai", "anthropic-style", "llama.cpp"):
        chat_server.replies.append(OVERFLOWS[family])
        with pytest.raises(ContextLengthExceeded):
            _client(chat_server).complete(talk)
    chat_server.replies.append((400, b"prompt is too long: 9000 tokens > 8192 maximum"))  # not JSON at all
    with pytest.raises(ContextLengthExceeded):
        _client(chat_server).complete(talk)
