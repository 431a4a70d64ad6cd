"""Round twenty-five on the reward side, as the model would attack it (reward, scorer text, environments, monitor).

R1. gsm8k read a number a dash sign or range was written with as the positive number: only three minus signs
(U+2212, U+FE63, U+FF0D) were read as "-", so ``#### –42`` (an en dash, as typesetting writes a minus), ``#### ‐42``
(a hyphen), ``#### ⁻42`` (a superscript minus) were 42 (a wrong answer scored correct against 42, the right one 0
against -42) and the range ``#### 10–20`` was 10. The dashes a minus or a range is written with are minus signs
(not the em dash: prose sets that against a number as punctuation). And ``#### - 42``, the mark's sign spaced from its
number, marked nothing, so the 42 after it was read: it is -42.

R2. gsm8k read a LaTeX-grouped number as one of its groups: ``#### 1{,}000`` was 1 and ``\\boxed{1{,}000}`` 0 (its
last group), ``\\boxed{12\\,345}`` 345; and an unmarked answer's last group after a digit separator or spaces was
read alone (``The answer is 1_000``, ``1'000``, ``1 000`` were 0: round twenty-two read them whole or not at all
from the front only). ``{,}`` between digits is the comma it prints (``1{,}000`` is 1000), LaTeX spacing between
digits is a space, and a separator or spaces before the digits make them part of a longer number both ways.

R3. gsm8k read a numbered Markdown heading as the marked answer: a solution under ``#### 1. Understand the problem``
... ``#### 2. Solve`` ending ``\\boxed{42}`` was the answer 2 (a ``####`` mark wins over a boxed one), so the right
answer scored 0. A heading's numbering (``1.``, ``2)``, ``2nd`` before words) marks nothing.

R4. gsm8k read a box only when it held a bare number: ``\\boxed{\\$42}`` (LaTeX's dollar), ``\\boxed{42\\%}``,
``\\boxed{42 \\text{ apples}}``, ``\\boxed{x = 42}`` marked nothing, so the text's last number was read, whatever
followed the box ("for 3 kids": 3), and the right answer scored 0. The last box is the answer, read inside its
braces. And LaTeX's operator commands were not operators (``\\boxed{3 \\cdot 4}`` was 4, ``#### 2 \\times 3`` 2) while
``90^\\circ`` was a power (no answer): ``\\times``, ``\\cdot``, ``\\div``, ``\\pm`` are operators, ``^\\circ`` degrees.

R5. A tool call written as a ``<tool_call>`` tag in the text, where the policy's endpoint was sent ``tools=`` (its
parser makes no call of it), was answered by a ``tool`` message answering no call of the assistant turn before it;
OpenAI refuses such a request, so the next turn failed and the rollout was an excluded ``policy_error``: the model's
way out of a task it was failing. Such a result goes back as the user's message, merged with the user's beside it.

R6. An LLM judge whose provider's content filter refused the material (round twenty-three left it open) made the
sample an excluded ``component_unavailable``: a bad answer that wrote what the judge's provider filters left its
group's baseline. When the request passes with the model's text withheld, the response gets the grade that weighs
least; a task that trips the filter on its own stays unavailable.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from rewardpipe.models import Message
from rewardpipe.rewards.gsm8k import extracted_answer, reference_value
from tests.security.test_round_twentyone_reward import _gsm8k

# -- R1: a dash sign is a minus sign ------------------------------------------------------------------------------


@pytest.mark.parametrize("dash", ["\u2010", "\u2011", "\u2012", "\u2013", "\u02d7", "\u2796", "\u207b", "\u2052"])
def test_a_negative_answer_written_with_a_dash_is_not_the_positive_one(dash):
    """Attack: answer ``#### –42`` (a dash for the minus) when the reference is 42. Rule: a dash written as a sign
    is the minus sign, so the wrong answer scores 0 and the right one, against -42, scores 1."""
    assert _gsm8k(f"So\n#### {dash}42", 42)["answer_correct"] == 0.0
    assert _gsm8k(f"So\n#### {dash}42", -42) == {"format": 1.0, "answer_correct": 1.0}
    assert reference_value(f"{dash}42") == Decimal(-42)


@pytest.mark.parametrize("dash", ["\u2013", "\u2012", "\u2010"])
def test_a_range_written_with_a_dash_is_no_answer(dash):
    """Attack: hedge with a range ``#### 10–20`` against 10. Rule: a range is no answer, whatever dash sets it."""
    assert extracted_answer(f"#### 10{dash}20") is None
    assert _gsm8k(f"#### 10{dash}20", 10) == {"format": 0.0, "answer_correct": 0.0}


@pytest.mark.parametrize("sign", ["-", "\u2013", "\u2212"])
def test_a_marks_minus_sign_spaced_from_its_number_is_still_its_sign(sign):
    """Attack: ``#### - 42`` (the sign spaced from the number) marked nothing, and the 42 after it was read: the
    wrong answer scored correct against 42, the right one 0 against -42. Rule: the mark's sign is the number's."""
    assert _gsm8k(f"#### {sign} 42", 42)["answer_correct"] == 0.0
    assert _gsm8k(f"#### {sign} 42", -42) == {"format": 0.5, "answer_correct": 1.0}
    assert extracted_answer("Answer:\n- 42") == 42  # a list's bullet, not a mark's sign


def test_an_em_dash_before_a_number_is_still_punctuation():
    """The em dash is prose's: ``The answer—42`` still reads 42."""
    assert extracted_answer("The answer\u201442") == 42
    assert extracted_answer("#### 42 \u2013 the number of eggs") == 42


# -- R2: a grouped number is read whole or not at all ---------------------------------------------------------------


@pytest.mark.parametrize(
    "response, reference",
    [
        ("#### 1{,}000", 1),  # a LaTeX grouping comma: read as 1
        ("\\boxed{1{,}000}", 0),  # read as its last group
        ("#### 1\\,000", 1),  # a LaTeX thin space
        ("\\boxed{12\\,345}", 345),
        ("#### 1~000", 1),
        ("#### 1\\ 000", 1),
        ("#### 1'000", 1),  # Swiss grouping
        ("The answer is 1_000", 0),  # the last group, unmarked
        ("The answer is 1 000", 0),
        ("The answer is 1\u2019000", 0),
        ("\\boxed{1_000}", 0),
        ("The total is $1{,}250.", 250),
    ],
)
def test_a_grouped_number_is_not_one_of_its_groups(response, reference):
    """Attack: write the answer grouped (LaTeX ``{,}``, ``\\,``, ``~``, an apostrophe, an underscore, spaces) so that
    one group is read, and aim that group at the reference. Rule: a number is read whole or not at all, from the
    front and from the back."""
    assert _gsm8k(response, reference)["answer_correct"] == 0.0


@pytest.mark.parametrize(
    "response, expected",
    [
        ("#### 1{,}000", 1000),
        ("\\boxed{1{,}000}", 1000),
        ("\\boxed{1{,}234{,}567}", 1234567),
        ("The total is $1{,}250.", 1250),
        ("#### 3{,}5", None),  # a decimal comma, in LaTeX: no answer, as "3,5" is none
        ("It is 42, 5 more than 37.", 37),
        ("Step 3:\n42", 42),
        ("It is 5 - 3 = 2", 2),
    ],
)
def test_latex_grouping_reads_as_the_comma_it_prints(response, expected):
    """A correct answer in LaTeX's grouping is the number it shows (it scored 0: read as 1, or as 000)."""
    assert extracted_answer(response) == (None if expected is None else Decimal(expected))


def test_a_latex_grouped_reference_is_read():
    assert reference_value("1{,}000") == Decimal(1000)
    assert _gsm8k("#### 1{,}000", "1{,}000") == {"format": 1.0, "answer_correct": 1.0}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("prefix", "unit", "suffix"),
    [("#### ", "1{,}", "000"), ("#### ", "1\\,", "0"), ("", "1 ", "0"), ("", "\u20131", "")],
)
def test_reading_a_grouped_answer_stays_linear(prefix, unit, suffix):
    """The new separators and signs are looked at once each: round twenty-two's operation budget holds."""
    from tests.security.test_round_twentytwo_reward import test_reading_an_answer_stays_linear

    test_reading_an_answer_stays_linear(prefix, unit, suffix)


# -- R3: a numbered heading marks no answer -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "response",
    [
        "#### 1. Understand the problem\nWe add.\n#### 2. Solve\n20 + 22 = 42, so the answer is \\boxed{42}.",
        "#### 1) Setup\nThe answer is \\boxed{42}",
        "#### **2. Compute**\n\\boxed{42}",
        "#### 2nd step\nSo \\boxed{42}",
        "#### 42\n#### 3. Check\nIt adds up.",
    ],
)
def test_a_numbered_heading_is_not_the_marked_answer(response):
    """Attack (on the right answer): a solution laid out under numbered Markdown headings (``#### 1. Understand the
    problem``) and ending ``\\boxed{42}`` was read as the heading's number (a ``####`` mark wins over a boxed one), so
    the right answer scored 0. Rule: a heading's numbering (a list number's ``.`` or ``)`` before words, an
    ordinal) marks nothing, as ``#### Step 1`` marks nothing."""
    assert extracted_answer(response) == 42
    assert _gsm8k(response, 42)["answer_correct"] == 1.0


def test_marks_that_are_answers_still_read():
    assert extracted_answer("#### 42.") == 42
    assert extracted_answer("So\n#### 42") == 42
    assert extracted_answer("#### 42 dollars") == 42
    assert _gsm8k("#### **42**", 42) == {"format": 0.5, "answer_correct": 1.0}


# -- R4: a box is read inside its braces; LaTeX's operators are operators ------------------------------------------


@pytest.mark.parametrize(
    "response",
    [
        "She pays \\boxed{\\$42} for 3 kids.",
        "\\boxed{42\\%} of 5",
        "So \\boxed{42 \\text{ apples}} in 3 days",
        "\\boxed{\\textbf{42}} (3 steps)",
        "\\boxed{x = 42}, checked in 2 ways",
        "\\boxed{42.} 3",
        "\\boxed{41} was wrong; \\boxed{\\$42} for 3 kids",
    ],
)
def test_a_boxed_answer_with_latex_around_it_is_the_answer(response):
    """Attack (on the right answer): box it as LaTeX writes it (``\\boxed{\\$42}``, ``\\boxed{42\\%}``, a unit in
    ``\\text{}``) and say anything with a number after it: the box marked nothing and the text's last number (3) was
    read, so the right answer scored 0. Rule: the last box is the answer, read inside its braces."""
    assert extracted_answer(response) == 42
    assert _gsm8k(response, 42) == {"format": 0.5, "answer_correct": 1.0}


@pytest.mark.parametrize(
    "response, reference",
    [
        ("\\boxed{3 \\cdot 4}", 4),
        ("#### 2 \\times 3", 2),
        ("It is 2 \\cdot 3", 3),
        ("#### 42 \\pm 1", 42),
        ("\\boxed{\\frac{1}{2}}", 2),
        ("\\boxed{\\sqrt{16}}", 16),
    ],
)
def test_a_latex_expression_is_no_answer(response, reference):
    """Attack: write the expression with LaTeX's operator commands (``\\times``, ``\\cdot``, ``\\pm``) where round
    twenty-two refused the symbols: ``\\boxed{3 \\cdot 4}`` was 4. Rule: an expression is no answer."""
    assert _gsm8k(response, reference)["answer_correct"] == 0.0


def test_degrees_are_no_power():
    """``90^\\circ`` is 90 degrees (it was no answer: ``^`` read as a power), ``2^3`` still no answer."""
    assert extracted_answer("\\boxed{90^\\circ}") == 90
    assert extracted_answer("#### 90^{\\circ}") == 90
    assert extracted_answer("#### 2^3") is None
    assert extracted_answer("6 \\times 7 = 42") == 42


@pytest.mark.slow
@pytest.mark.parametrize(
    ("prefix", "unit", "suffix"), [("", "\\boxed{", "42"), ("\\boxed{", "{", "42"), ("", "1 \\cdot ", "2")]
)
def test_reading_a_box_stays_linear(prefix, unit, suffix):
    """The last box is found from the end and read once, however many boxes or braces the text holds."""
    from tests.security.test_round_twentytwo_reward import test_reading_an_answer_stays_linear

    test_reading_an_answer_stays_linear(prefix, unit, suffix)


# -- R5: a tool result sent back answers a call the request carries -------------------------------------------------


def _openai_like(replies):
    """OpenAI's two rules on a conversation with tools: every call of an assistant turn is answered by a tool
    message before the next turn, and every tool message answers a call of the assistant turn before it."""
    import httpx

    def handle(request):
        calls: set = set()  # the calls of the latest assistant turn not answered yet
        for message in json.loads(request.content)["messages"]:
            if message["role"] == "assistant" and calls:
                return httpx.Response(400, json={"error": {"message": "tool_call_ids did not have responses"}})
            if message["role"] == "assistant":
                calls = {call["id"] for call in message.get("tool_calls") or []}
            elif message["role"] == "tool" and message.get("tool_call_id") not in calls:
                return httpx.Response(
                    400, json={"error": {"message": "messages with role 'tool' must be a response to a tool_calls"}}
                )
            elif message["role"] == "tool":
                calls.discard(message["tool_call_id"])
        return httpx.Response(200, json=replies.pop(0))

    return httpx.MockTransport(handle)


def _reply(content, tool_calls=None):
    message = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {"choices": [{"message": message, "finish_reason": "stop"}]}


@pytest.mark.parametrize(
    "first",
    [
        # A call written as a tag in the text, where the endpoint was sent tools= and its parser makes no call of it.
        _reply('<tool_call>{"name": "get_balance", "arguments": {"account": "checking"}}</tool_call>'),
        # A structured call whose id the environment had to make up (none given): its answer matched no call.
        _reply(
            None, [{"type": "function", "function": {"name": "get_balance", "arguments": '{"account": "checking"}'}}]
        ),
    ],
)
def test_a_tool_result_for_a_call_the_request_does_not_carry_does_not_fail_the_next_request(first):
    """Attack: about to fail a task, write the tool call as a ``<tool_call>`` tag in the text instead of a structured
    call. The environment answers it with a ``tool`` message, the next request carries a tool message that answers no
    call of the assistant turn before it, OpenAI refuses it (HTTP 400) and the rollout was an excluded
    ``policy_error``. Rule: a tool result is sent back as a tool message only where it answers a call the request
    carries; otherwise it is the user's message (what a model without a tool parser reads)."""
    from rewardpipe.envs.tool_call import ENVIRONMENT
    from rewardpipe.episode import run_episode
    from rewardpipe.openai_client import ChatClient
    from rewardpipe.policies import OpenAIPolicy
    from rewardpipe.runner import NoSandbox
    from tests.security.test_round_twentythree_reward import _tool_task

    replies = [first, _reply("<answer>12000</answer>")]
    transport = _openai_like(replies)
    client = ChatClient("http://endpoint.invalid/v1", "m", max_retries=0, transport=transport)
    policy = OpenAIPolicy("http://endpoint.invalid/v1", "m", client=client, tools=ENVIRONMENT.tool_schemas)
    task = _tool_task("tc-001-balance")
    record = run_episode(task, policy, ENVIRONMENT, NoSandbox(), run_id="p", step=0, group_id="g", rollout_id="r")
    assert record.status == "scored"  # was an excluded policy_error (HTTP 400 on the second request)
    assert record.components["goal_reached"] == 1.0


def test_an_unanswered_tool_result_keeps_its_content_for_the_model():
    from rewardpipe.policies import chat_messages

    sent = chat_messages(
        [
            Message(role="user", content="hi"),
            Message(role="assistant", content="<tool_call>...</tool_call> <tool_call>...</tool_call>"),
            Message(role="tool", content='{"result": 1}', tool_call_id="call_0_0", name="get_balance"),
            Message(role="tool", content='{"result": 2}', tool_call_id="call_0_1"),
            Message(role="user", content="1 more call(s) in that turn were not read"),
        ]
    )
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]  # one user turn: roles still alternate
    assert '{"result": 1}' in sent[2]["content"] and '{"result": 2}' in sent[2]["content"]
    assert "get_balance" in sent[2]["content"] and "not read" in sent[2]["content"]


def test_the_turn_after_an_unanswered_tool_result_stays_its_own():
    from rewardpipe.policies import chat_messages

    sent = chat_messages(
        [
            Message(role="user", content="hi"),
            Message(role="assistant", content="<tool_call>...</tool_call>"),
            Message(role="tool", content="1", tool_call_id="call_0_0"),
            Message(role="assistant", content="<answer>1</answer>"),
        ]
    )
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "assistant"]
    assert sent[3]["content"] == "<answer>1</answer>"


# -- R6: a judge's provider refusing the model's text is the model's grade ------------------------------------------


class _FilteringJudge:
    """A judge behind a provider whose content filter refuses any request holding ``trigger``; it grades 7 else."""

    model = "filtering"

    def __init__(self, trigger: str) -> None:
        self.trigger, self.calls = trigger, 0

    def complete(self, messages, **params):
        from rewardpipe.openai_client import ContentFiltered

        self.calls += 1
        if any(self.trigger in message["content"] for message in messages):
            raise ContentFiltered("HTTP 400: content_filter", on_prompt=True)
        tag = messages[0]["content"].split("VERDICT ", 1)[1].split(":", 1)[0]
        return f"Fine.\nVERDICT {tag}: 7"


def _filtered(trigger, completion, *, weight=1.0, range=(0.0, 1.0), role="outcome", prompt="Name a colour."):
    from rewardpipe import Reward, llm_judge

    judge = llm_judge(
        "quality",
        "Grade {completion} for {prompt}.",
        client=_FilteringJudge(trigger),
        weight=weight,
        range=range,
        role=role,
    )
    reward = Reward("judged", [judge])
    return reward.score([Message(role="user", content=prompt), Message(role="assistant", content=completion)])


@pytest.mark.parametrize(
    ("weight", "value_range", "role", "worst"),
    [(1.0, (0.0, 1.0), "outcome", 0.0), (0.5, (-1.0, 0.0), "penalty", -1.0), (-1.0, (0.0, 1.0), "penalty", 1.0)],
)
def test_a_response_the_judges_provider_refuses_gets_the_worst_grade_not_an_error(weight, value_range, role, worst):
    """Attack: a bad answer written to trip the judge provider's content filter (round twenty-three left it open): the
    judge was unavailable, the sample an excluded ``component_unavailable`` record, out of its group's baseline. Rule:
    when the same request passes with the model's text withheld, that text tripped the filter, and it gets the grade
    that weighs least (the range's low end, or its high end under a negative weight)."""
    score = _filtered("FORBIDDEN", "red FORBIDDEN", weight=weight, range=value_range, role=role)
    assert score.error is None and score.components["quality"] == worst
    assert _filtered("FORBIDDEN", "red").components["quality"] == pytest.approx(0.7)  # others still graded


def test_a_task_the_judges_provider_refuses_is_still_unavailable():
    """The prompt itself trips the filter: the model's text did not, so no grade is made up."""
    score = _filtered("FORBIDDEN", "red", prompt="Name a FORBIDDEN colour.")
    assert score.error is not None and score.error.kind == "component_unavailable"


@pytest.mark.slow
def test_tool_results_sent_as_the_users_stay_linear():
    """However many results a turn's text calls had, they are merged into one user turn in one pass."""
    import rewardpipe.policies as policies
    from tests.security.test_round_four_scorer_text import assert_linear
    from tests.security.text_cost import operations

    def at(results: int) -> int:
        talk = [Message(role="user", content="go"), Message(role="assistant", content="<tool_call>")]
        talk += [Message(role="tool", content="{}", tool_call_id=f"call_0_{i}") for i in range(results)]
        return operations(lambda: policies.chat_messages(talk), [policies], lambda: None)

    assert_linear("chat_messages", at, n=100, unit="tool results")
