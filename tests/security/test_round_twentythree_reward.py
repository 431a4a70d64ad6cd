"""Round twenty-three on the reward side: the environments (tool_call, wordle, ask-before-coding) and the monitor.

* **tool_call: an answer-only task scored an episode that changed the world.** A task that states only an
  ``expected_answer`` asks a question; the world was never looked at, so moving the user's money on the way
  (savings swept into checking, then one ``get_balance`` read for "the total of checking and savings") reached the
  goal as fully as the two reads. An answer-only task's goal now also needs a world no call changed.
* **A content filter made the model's bad episode an excluded error.** A request the policy's or the LLM user's
  provider refuses with a content-filter code (Azure OpenAI's ``content_filter``, OpenAI's
  ``content_policy_violation``), or a reply filtered in place of its text (``finish_reason: content_filter``, a
  ``refusal``), was an ``EndpointError``: a ``policy_error`` or ``simulator_error`` record, left out of GRPO. A
  model about to score badly wrote what the provider filters and its rollout vanished from its group (round
  eighteen closed the same door for a context overflow). The chat client raises ``ContentFiltered``; once the
  model has written a turn (or its own reply was the one filtered) the episode ends there, end reason
  ``content_filter``, and is scored as it stands. The task's own prompt refused before any turn, and a refusal
  whose code is not a filter's (whatever its message quotes), are still errors.
* **More parallel tool calls than the environment answers made the next request fail.** The chat client keeps up to
  64 structured calls of a reply; the tool_call environment answers the first 16 and counts the rest. The policy
  sent the whole turn back, so OpenAI refused the next request (HTTP 400: a ``tool_call_id`` without a tool
  message) and the rollout became an excluded ``policy_error``: twenty calls in one turn escaped a bad score.
  The policy now sends back only the calls the tool messages answer (any environment, any number).
* **Operation budgets** (round four's property tests, extended): the whole wordle turn (the guess read, the
  feedback and its description, the reward), the whole tool_call turn (tagged or structured calls validated and
  run, their keys, the redundancy check, the final answer and its comparison) and the conversation an
  OpenAI-compatible policy sends back are linear in the model's text (or in its number of turns) and within the
  per-character budget. They held; they guard the paths the round changed.
"""

from __future__ import annotations

import json

import pytest

from rewardpipe.episode import converse, start_episode
from rewardpipe.models import Message
from rewardpipe.policies import ScriptedPolicy

# -- tool_call: a question is not answered by changing the world --------------------------------------------


def _tool_task(task_id: str):
    from rewardpipe.envs.tool_call import BUNDLED_TASKS, ToolCallTask

    for line in BUNDLED_TASKS.read_text().splitlines():
        row = json.loads(line)
        if row["task_id"] == task_id:
            return ToolCallTask.model_validate(row)
    raise AssertionError(task_id)


def _tool_play(task, turns):
    from rewardpipe.envs.tool_call import ENVIRONMENT, TOOL_CALL

    state = start_episode(task, env=ENVIRONMENT, run_id="r", step=0, group_id="g", rollout_id="k0")
    state = converse(state, task, ScriptedPolicy(list(turns)), ENVIRONMENT)
    return TOOL_CALL.score(state.messages, task=task, state=state).components


def _call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def test_an_answer_reached_by_moving_the_users_money_is_not_the_goal():
    task = _tool_task("tc-010-total")  # checking 4321 + savings 50000, answer only
    sweep = _call("transfer", source="checking", target="savings", amount_cents=4321)
    components = _tool_play(task, [sweep, _call("get_balance", account="savings"), "<answer>54321</answer>"])
    assert components["goal_reached"] == 0.0  # was 1.0: the right number, the checking account emptied


def test_a_change_undone_is_still_a_change_the_question_did_not_ask_for():
    task = _tool_task("tc-001-balance")
    there = _call("transfer", source="checking", target="savings", amount_cents=100)
    back = _call("transfer", source="savings", target="checking", amount_cents=100)
    components = _tool_play(task, [there, back, _call("get_balance", account="checking"), "<answer>12000</answer>"])
    assert components["goal_reached"] == 0.0


def test_an_answer_read_without_changing_anything_still_reaches_the_goal():
    task = _tool_task("tc-010-total")
    reads = _call("get_balance", account="checking") + _call("get_balance", account="savings")
    refused = _call("transfer", source="checking", target="savings", amount_cents=10**8)  # refused: nothing changed
    components = _tool_play(task, [refused, reads, "<answer>54321</answer>"])
    assert components["goal_reached"] == 1.0


def test_a_task_with_a_world_and_an_answer_goal_is_judged_on_both_as_before():
    task = _tool_task("tc-009-restock-and-report")
    turns = [_call(c.name, **c.arguments) for c in task.reference_calls]
    assert _tool_play(task, [*turns, f"<answer>{task.expected_answer}</answer>"])["goal_reached"] == 1.0


# -- a content filter ends the episode as it stands; it does not exclude it -------------------------------------

FILTERED_REQUEST = (400, {"error": {"message": "The response was filtered", "code": "content_filter", "status": 400}})
FILTERED_POLICY = (400, {"error": {"message": "Your request was rejected", "code": "content_policy_violation"}})
FILTERED_REPLY = (
    200,
    {"choices": [{"message": {"role": "assistant", "content": None}, "finish_reason": "content_filter"}]},
)
REFUSED_REPLY = (200, {"choices": [{"message": {"role": "assistant", "content": None, "refusal": "I can't help."}}]})
#: a 400 that only quotes the model's words about filters (its code is another's): the endpoint's failure
QUOTING = (400, {"error": {"message": "invalid message: content_filter content_policy_violation", "code": "bad"}})


def _reply(text: str):
    return (200, {"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]})


def _client(replies):
    import httpx

    from rewardpipe.openai_client import ChatClient

    queue = list(replies)

    def handle(request):
        status, body = queue.pop(0)
        return httpx.Response(status, json=body)

    return ChatClient("http://endpoint.invalid/v1", "m", max_retries=0, transport=httpx.MockTransport(handle))


def _abc_episode(policy, chat=None):
    from rewardpipe.envs.ask_before_coding.environment import ENVIRONMENT
    from rewardpipe.episode import EnvServices, run_episode
    from rewardpipe.runner import NoSandbox
    from tests.core.conftest import make_task

    env = ENVIRONMENT.configure(simulator="openai") if chat is not None else ENVIRONMENT
    return run_episode(
        make_task(),
        policy,
        env,
        NoSandbox(),
        run_id="cf",
        step=0,
        group_id="g",
        rollout_id="r",
        services=EnvServices(chat=chat),
    )


def _policy(replies):
    from rewardpipe.policies import OpenAIPolicy

    return OpenAIPolicy("http://endpoint.invalid/v1", "m", client=_client(replies), temperature=0.0)


@pytest.mark.parametrize("filtered", [FILTERED_REQUEST, FILTERED_POLICY, FILTERED_REPLY, REFUSED_REPLY])
def test_the_policys_request_filtered_after_the_models_turn_is_scored_not_excluded(filtered):
    record = _abc_episode(_policy([_reply("Should negative numbers be allowed?"), filtered]))
    assert record.status == "scored"  # was an excluded policy_error
    assert record.metrics["end_reason"] == "content_filter" and record.metrics["assistant_turns"] == 1


@pytest.mark.parametrize("filtered", [FILTERED_REPLY, REFUSED_REPLY])
def test_the_models_own_first_reply_filtered_is_scored(filtered):
    record = _abc_episode(_policy([filtered]))
    assert record.status == "scored" and record.metrics["end_reason"] == "content_filter"


def test_the_task_prompt_itself_filtered_is_still_an_error():
    """Before the model wrote anything only the task was sent: the task's problem, never the model's 0."""
    record = _abc_episode(_policy([FILTERED_REQUEST]))
    assert record.status == "error" and record.error.kind == "policy_error"


@pytest.mark.parametrize("failure", [QUOTING, (400, {"error": {"message": "bad temperature", "code": "invalid"}})])
def test_other_refusals_are_still_the_endpoints_failure(failure):
    record = _abc_episode(_policy([_reply("Should negative numbers be allowed?"), failure]))
    assert record.status == "error" and record.error.kind == "policy_error"


@pytest.mark.parametrize("filtered", [FILTERED_REQUEST, FILTERED_REPLY])
def test_the_llm_users_request_filtered_on_the_models_question_is_scored_not_excluded(filtered):
    user = _client([filtered])
    record = _abc_episode(
        ScriptedPolicy(["Should negative numbers be allowed?", "```python\npass\n```"]), user.complete
    )
    assert record.status == "scored"  # was an excluded simulator_error
    assert record.metrics["end_reason"] == "content_filter" and record.metrics["assistant_turns"] == 1


def test_the_llm_users_other_failures_are_still_a_simulator_error():
    user = _client([QUOTING])
    record = _abc_episode(
        ScriptedPolicy(["Should negative numbers be allowed?", "```python\npass\n```"]), user.complete
    )
    assert record.status == "error" and record.error.kind == "simulator_error"


@pytest.mark.parametrize("stop", ["content_filtered", "guardrail_intervened"])
def test_bedrock_says_filtered_as_the_local_client_does(stop):
    """An environment's ctx.chat on AWS is Bedrock's client: a withheld reply is ContentFiltered there too."""
    from rewardpipe.bedrock import reply_text
    from rewardpipe.openai_client import ContentFiltered, EndpointError

    with pytest.raises(ContentFiltered):
        reply_text({"output": {"message": {"content": []}}, "stopReason": stop}, "m")
    with pytest.raises(EndpointError) as raised:
        reply_text({"output": {"message": {"content": []}}, "stopReason": "max_tokens"}, "m")
    assert not isinstance(raised.value, ContentFiltered)


# -- a turn's calls beyond what the environment answers are not sent back ----------------------------------------


def test_more_parallel_calls_than_are_answered_do_not_make_the_next_request_fail():
    import httpx

    from rewardpipe.envs.tool_call import ENVIRONMENT
    from rewardpipe.episode import run_episode
    from rewardpipe.openai_client import ChatClient
    from rewardpipe.policies import OpenAIPolicy
    from rewardpipe.runner import NoSandbox

    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "get_balance", "arguments": '{"account": "savings"}'}}
        for i in range(20)
    ]
    replies = [
        {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": calls}}]},
        {"choices": [{"message": {"role": "assistant", "content": "<answer>1</answer>"}, "finish_reason": "stop"}]},
    ]

    def openai_like(request):
        """OpenAI's rule: every call of an assistant turn is answered by a tool message before the next turn."""
        messages = json.loads(request.content)["messages"]
        for index, message in enumerate(messages):
            ids = {call["id"] for call in message.get("tool_calls") or []}
            answered = set()
            for later in messages[index + 1 :]:
                if later["role"] == "assistant":
                    break
                answered.add(later.get("tool_call_id"))
            if ids - answered:
                return httpx.Response(400, json={"error": {"message": "tool_call_ids did not have response messages"}})
        return httpx.Response(200, json=replies.pop(0))

    client = ChatClient("http://endpoint.invalid/v1", "m", max_retries=0, transport=httpx.MockTransport(openai_like))
    policy = OpenAIPolicy("http://endpoint.invalid/v1", "m", client=client, tools=ENVIRONMENT.tool_schemas)
    task = _tool_task("tc-001-balance")
    record = run_episode(task, policy, ENVIRONMENT, NoSandbox(), run_id="p", step=0, group_id="g", rollout_id="r")
    assert record.status == "scored"  # was an excluded policy_error (HTTP 400 on the second request)
    assert record.components["valid_calls"] == 1 / 13  # 8 refused past the per-turn limit, 4 unread


def test_answered_calls_are_still_sent_back_whole():
    from rewardpipe.models import Message
    from rewardpipe.policies import chat_messages

    call = {"id": "a", "type": "function", "function": {"name": "list_items", "arguments": "{}"}}
    sent = chat_messages(
        [
            Message(role="user", content="hi"),
            Message(role="assistant", content="", tool_calls=[call]),
            Message(role="tool", content="[]", tool_call_id="a", name="list_items"),
        ]
    )
    assert sent[1]["tool_calls"] == [call]


# -- operation budgets: the environments' whole turns and the conversation sent back ---------------------------


def _budget_targets():
    from rewardpipe.envs.tool_call import ENVIRONMENT as TOOLS
    from rewardpipe.envs.tool_call import TOOL_CALL
    from rewardpipe.envs.tool_call.tasks import normalise_answer
    from rewardpipe.envs.wordle import ENVIRONMENT as WORDLE_ENV
    from rewardpipe.envs.wordle import WORDLE, WordleTask

    game = WordleTask(task_id="w", prompt="Guess.", answer="crane")
    shop = _tool_task("tc-002-move-savings")

    def wordle_turn(text: str) -> object:
        state = start_episode(game, env=WORDLE_ENV, run_id="r", step=0, group_id="g", rollout_id="k")
        state = WORDLE_ENV.on_policy_turn(state.append(Message(role="assistant", content=text)), game, text)
        if state.next_action == "env":
            state = WORDLE_ENV.respond(state, game)
        return WORDLE.score(state.messages, task=game, state=state)

    def tool_turn(text: str, tool_calls=None) -> object:
        state = start_episode(shop, env=TOOLS, run_id="r", step=0, group_id="g", rollout_id="k")
        state = state.append(Message(role="assistant", content=text, tool_calls=tool_calls))
        state = TOOLS.on_policy_turn(state, shop, text)
        if state.next_action == "env":
            state = TOOLS.respond(state, shop)
        return TOOL_CALL.score(state.messages, task=shop, state=state), normalise_answer(text)

    def structured(text: str) -> object:
        calls = [
            {"id": text[:40], "type": "function", "function": {"name": name, "arguments": text}}
            for name in ("transfer", text[:64], "get_balance")
        ]
        return tool_turn(text, calls)

    return {"wordle_turn": wordle_turn, "tool_call_turn": tool_turn, "tool_call_structured": structured}


BUDGET_TARGETS = sorted(_budget_targets())
#: (prefix, unit repeated to the length, suffix) of the model's turn
TURN_TEXTS = [
    ("<guess>", "crane ", "</guess>"),  # (thousands of opening tags: round four's)
    ("<tool_call>", '{"name": "transfer", "arguments": {"source": "savings"}}</tool_call><tool_call>', ""),
    ('{"source": "savings", "target": "checking", "amount_cents": ', "[", "]}"),
    ('{"account": "', "\\ud800x", '"}'),
    ("<answer>", "5000 ", "</answer>"),
]


@pytest.mark.slow
@pytest.mark.parametrize("name", BUDGET_TARGETS)
@pytest.mark.parametrize("prefix, unit, suffix", TURN_TEXTS)
def test_the_environments_whole_turns_are_linear(name, prefix, unit, suffix):
    import rewardpipe.envs.tool_call.environment as tool_env
    import rewardpipe.envs.tool_call.tools as tools
    import rewardpipe.envs.wordle.environment as wordle_env
    from tests.security.test_round_four_scorer_text import WATCHED, _build, assert_linear, clear_caches
    from tests.security.text_cost import operations

    target = _budget_targets()[name]
    watched = [*WATCHED, tool_env, tools, wordle_env]
    assert_linear(name, lambda n: operations(lambda: target(_build(prefix, unit, suffix, n)), watched, clear_caches))


@pytest.mark.slow
def test_the_conversation_sent_back_is_linear_in_its_turns():
    import rewardpipe.policies as policies
    from tests.security.test_round_four_scorer_text import assert_linear
    from tests.security.text_cost import operations

    def conversation(turns: int) -> list[Message]:
        out = [Message(role="user", content="go")]
        for turn in range(turns):
            calls = [{"id": f"c{turn}_{i}", "type": "function", "function": {"name": "x"}} for i in range(3)]
            out.append(Message(role="assistant", content="", tool_calls=calls))
            out += [Message(role="tool", content="{}", tool_call_id=f"c{turn}_{i}") for i in range(2)]
        return out

    def at(turns: int) -> int:
        talk = conversation(turns)
        return operations(lambda: policies.chat_messages(talk), [policies], lambda: None)

    assert_linear("chat_messages", at, n=100, unit="turns")
