"""ChatClient, OpenAISimulator and OpenAIPolicy against a local stub /chat/completions server."""

import socket

import pytest

from rewardpipe.envs.ask_before_coding.environment import ENVIRONMENT as ENV
from rewardpipe.envs.ask_before_coding.environment import POLICY_SYSTEM_PROMPT, AskBeforeCoding
from rewardpipe.episode import apply_env_turn, apply_policy_turn, start_episode
from rewardpipe.openai_client import ChatClient, EndpointError
from rewardpipe.policies import OpenAIPolicy
from rewardpipe.simulator import OpenAISimulator, RuleBasedSimulator
from tests.core.conftest import make_task

TASK = make_task()


def client(server, **kwargs) -> ChatClient:
    kwargs.setdefault("backoff_s", 0.0)
    return ChatClient(server.url, "test-model", **kwargs)


def test_request_shape_and_reply(chat_server):
    chat_server.reply("hello there")
    text = client(chat_server).complete([{"role": "user", "content": "hi"}], temperature=0.3, max_tokens=7)
    assert text == "hello there"
    (request,) = chat_server.requests
    assert request["path"] == "/chat/completions"
    assert request["body"] == {
        "model": "test-model",
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.3,
        "max_tokens": 7,
    }


def test_base_url_trailing_slash_is_tolerated(chat_server):
    chat_server.reply("ok")
    ChatClient(chat_server.url + "/", "m", backoff_s=0).complete([])
    assert chat_server.requests[0]["path"] == "/chat/completions"


def test_list_of_parts_content_is_joined(chat_server):
    chat_server.replies.append(
        (
            200,
            {
                "choices": [
                    {
                        "message": {
                            "content": [
                                {"type": "text", "text": "a"},
                                {"type": "x", "text": 5},
                                {"type": "text", "text": "b"},
                            ]
                        }
                    }
                ]
            },
        )
    )
    assert client(chat_server).complete([]) == "ab"


def test_retries_on_503_then_succeeds(chat_server):
    chat_server.replies.append((503, {"error": "busy"}))
    chat_server.replies.append((503, {"error": "busy"}))
    chat_server.reply("finally")
    assert client(chat_server, max_retries=2).complete([]) == "finally"
    assert len(chat_server.requests) == 3


def test_repeated_500s_raise_endpoint_error_after_all_attempts(chat_server):
    chat_server.replies.extend([(500, {"error": "down"})] * 5)
    with pytest.raises(EndpointError, match=r"3 attempts.*HTTP 500"):
        client(chat_server, max_retries=2).complete([])
    assert len(chat_server.requests) == 3


def test_client_error_is_not_retried(chat_server):
    chat_server.replies.append((400, {"error": "bad request: unknown model"}))
    with pytest.raises(EndpointError, match=r"HTTP 400.*unknown model"):
        client(chat_server).complete([])
    assert len(chat_server.requests) == 1


@pytest.mark.parametrize(
    "body",
    [
        b"<html>not json</html>",
        {"choices": []},
        {"result": "no choices"},
        {"choices": [{"message": {}}]},
        {"choices": [{"message": {"content": None}}]},
        {"choices": [{"message": {"content": 42}}]},
    ],
)
def test_malformed_body_raises_endpoint_error(chat_server, body):
    chat_server.replies.append((200, body))
    with pytest.raises(EndpointError):
        client(chat_server).complete([])


def test_authorization_header_sent_when_api_key_given(chat_server):
    chat_server.reply("x")
    client(chat_server, api_key="sk-test-123").complete([])
    headers = {k.lower(): v for k, v in chat_server.requests[0]["headers"].items()}
    assert headers["authorization"] == "Bearer sk-test-123"


def test_no_authorization_header_without_a_key(chat_server):
    chat_server.reply("x")
    client(chat_server).complete([])
    headers = {k.lower() for k in chat_server.requests[0]["headers"]}
    assert "authorization" not in headers


def test_api_key_from_the_environment(chat_server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    chat_server.reply("x")
    client(chat_server).complete([])
    headers = {k.lower(): v for k, v in chat_server.requests[0]["headers"].items()}
    assert headers["authorization"] == "Bearer sk-env"


def test_unreachable_endpoint_raises_endpoint_error():
    # A port held bound but never listening refuses every connection, and no other process (the suite's other xdist
    # process, another run's server on port 0) can take it meanwhile, as it could once the port was let go.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        with pytest.raises(EndpointError, match="2 attempts"):
            ChatClient(f"http://127.0.0.1:{port}", "m", max_retries=1, backoff_s=0, timeout_s=2).complete([])


@pytest.mark.parametrize("base_url, model", [("", "m"), ("http://x", "")])
def test_missing_url_or_model_is_a_clear_error(base_url, model):
    with pytest.raises(ValueError):
        ChatClient(base_url, model)


# --- OpenAISimulator ---------------------------------------------------------------------------------------


def asked_state(question: str):
    state = start_episode(TASK, env=ENV, run_id="run", step=0, group_id="g", rollout_id="r", max_turns=6)
    return apply_policy_turn(state, question, ENV, TASK)


def test_simulator_swaps_roles_and_hides_tests(chat_server):
    chat_server.reply("Floating point inputs return a float result.")
    simulator = OpenAISimulator(chat_server.url, "sim-model", client=client(chat_server))
    reply = simulator.respond(asked_state("What about floats?"), TASK)
    body = chat_server.requests[0]["body"]
    assert body["model"] == "test-model"
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user"]  # the programmer's question is the simulator's "user" turn
    assert body["messages"][1]["content"] == "What about floats?"
    system = body["messages"][0]["content"]
    assert TASK.prompt in system
    assert all(item in system for item in TASK.spec)
    assert TASK.tests not in system and "assertEqual" not in system
    assert TASK.reference_solution not in system
    assert body["temperature"] == 0.0
    assert reply.text == "Floating point inputs return a float result."
    assert reply.revealed == 1


def test_simulator_sees_the_whole_conversation_with_roles_swapped(chat_server):
    chat_server.reply("Negative numbers are allowed and added normally.")
    chat_server.reply("That is up to you.")
    simulator = OpenAISimulator("unused", "unused", client=client(chat_server))
    state = asked_state("Are negatives allowed?")
    state = apply_env_turn(state, TASK, AskBeforeCoding(simulator))
    assert state.revealed == [0]
    state = apply_policy_turn(state, "Tabs or spaces?", ENV, TASK)
    reply = simulator.respond(state, TASK)
    messages = chat_server.requests[1]["body"]["messages"]
    assert [(m["role"], m["content"]) for m in messages[1:]] == [
        ("user", "Are negatives allowed?"),
        ("assistant", "Negative numbers are allowed and added normally."),
        ("user", "Tabs or spaces?"),
    ]
    assert reply.revealed is None


def test_simulator_does_not_count_a_restated_detail_as_new(chat_server):
    chat_server.reply("As I said, negative numbers are allowed and added normally.")
    simulator = OpenAISimulator("unused", "unused", client=client(chat_server))
    state = asked_state("Negatives again?")
    state.revealed = [0]
    assert simulator.respond(state, TASK).revealed is None


def test_simulator_endpoint_failure_raises(chat_server):
    chat_server.replies.extend([(500, {})] * 3)
    simulator = OpenAISimulator("unused", "unused", client=client(chat_server, max_retries=2))
    with pytest.raises(EndpointError):
        simulator.respond(asked_state("Are negative numbers allowed?"), TASK)


# --- OpenAIPolicy ------------------------------------------------------------------------------------------


def test_policy_sends_system_prompt_and_conversation(chat_server):
    chat_server.reply("Should negative numbers be supported?")
    policy = OpenAIPolicy(
        "unused", "unused", temperature=0.7, max_tokens=99, system_prompt=ENV.system_prompt, client=client(chat_server)
    )
    state = start_episode(TASK, env=ENV, run_id="run", step=0, group_id="g", rollout_id="r")
    text = policy.next_turn(state, TASK)
    assert text == "Should negative numbers be supported?"
    body = chat_server.requests[0]["body"]
    assert body["messages"] == [
        {"role": "system", "content": POLICY_SYSTEM_PROMPT},
        {"role": "user", "content": TASK.prompt},
    ]
    assert body["temperature"] == 0.7 and body["max_tokens"] == 99
    assert all(item not in str(body) for item in TASK.spec)  # the policy never sees the hidden spec


def test_policy_builds_its_own_client_with_the_api_key(chat_server):
    chat_server.reply("ok")
    policy = OpenAIPolicy(chat_server.url, "policy-model", api_key="sk-policy", system_prompt=ENV.system_prompt)
    state = start_episode(TASK, env=ENV, run_id="run", step=0, group_id="g", rollout_id="r")
    state = apply_policy_turn(state, "Negatives?", ENV, TASK)
    state = apply_env_turn(state, TASK, AskBeforeCoding(RuleBasedSimulator()))
    policy.next_turn(state, TASK)
    request = chat_server.requests[0]
    assert request["body"]["model"] == "policy-model"
    assert [m["role"] for m in request["body"]["messages"]] == ["system", "user", "assistant", "user"]
    headers = {k.lower(): v for k, v in request["headers"].items()}
    assert headers["authorization"] == "Bearer sk-policy"


def test_policy_retries_then_succeeds(chat_server):
    chat_server.replies.append((503, {}))
    chat_server.reply("```python\ndef add(a, b):\n    return a + b\n```")
    policy = OpenAIPolicy("unused", "unused", client=client(chat_server, max_retries=1))
    state = start_episode(TASK, env=ENV, run_id="run", step=0, group_id="g", rollout_id="r")
    assert "def add" in policy.next_turn(state, TASK)
    assert len(chat_server.requests) == 2
