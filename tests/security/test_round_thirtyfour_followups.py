"""Round thirty-four, follow-ups of the review of the built-in rewards and environments.

F1. ``chat_messages`` kept every call of an assistant turn whose id a tool message answered: two calls of one turn
sharing an id (a tool parser taking ids from the model's text) were both sent back, the id listed twice, and OpenAI
refuses such a request (HTTP 400, "Duplicate value for 'tool_call_id'"): a failing rollout became an excluded
policy_error. Each id is now listed once in the whole request and answered by one tool message after it; any other
result goes as the user's text (as a result of no listed call does).
"""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from itertools import pairwise

import pytest

from rewardpipe.bedrock import converse_request
from rewardpipe.envs.tool_call import ENVIRONMENT, ToolCallTask
from rewardpipe.envs.tool_call.tasks import answers_match
from rewardpipe.episode import converse, start_episode
from rewardpipe.models import Message
from rewardpipe.policies import ScriptedPolicy, chat_messages
from rewardpipe.rewards.gsm8k import answer_correct, answer_format, extracted_answer
from tests.envs.test_round_thirtyfour_envs import WORLD, _calls


def _assert_consistent(sent):
    """OpenAI's rules for a request: every id listed once in it, every listed call answered by exactly one tool
    message after its assistant message and before the next, every tool message answering a listed call."""
    listed = Counter(call["id"] for m in sent if m["role"] == "assistant" for call in m.get("tool_calls") or [])
    assert all(count == 1 for count in listed.values()), listed
    pending: set[str] = set()
    for message in sent:
        if message["role"] == "assistant":
            assert not pending, pending  # every call of the turn before was answered
            pending = {call["id"] for call in message.get("tool_calls") or []}
        elif message["role"] == "tool":
            assert message["tool_call_id"] in pending, message
            pending.discard(message["tool_call_id"])
    assert not pending, pending


def _tool(call_id, content="[]"):
    return Message(role="tool", content=content, tool_call_id=call_id, name="list_items")


@pytest.mark.parametrize(
    "messages",
    [
        # the tool_call environment: a repeat answered under an id of its own
        [_calls("a", "a"), _tool("a"), _tool("call_1_1"), Message(role="assistant", content="done")],
        # an environment of one's own answering each call under the id it was given
        [_calls("a", "a"), _tool("a", "1"), _tool("a", "2"), Message(role="assistant", content="done")],
        # an id a later turn repeats, answered again
        [_calls("a"), _tool("a"), _calls("a"), _tool("a"), Message(role="assistant", content="done")],
        # one call answered twice
        [_calls("a", "b"), _tool("a"), _tool("b"), _tool("a"), Message(role="assistant", content="done")],
    ],
)
def test_f1_the_request_lists_each_call_id_once_and_answers_it_once(messages):
    messages = [Message(role="user", content="go"), *messages]
    sent = chat_messages(messages)
    _assert_consistent(sent)
    # nothing the environment said is lost: every result is in the request, as a tool message or as text
    text = "\n".join(m["content"] for m in sent)
    for message in messages:
        if message.role == "tool":
            assert message.content in text
    roles = [m["role"] for m in sent]
    assert ("user", "user") not in set(pairwise(roles)), roles  # one user turn between two of the model's


def test_f1_a_tool_call_episode_with_repeated_ids_makes_a_consistent_request_on_both_paths():
    task = ToolCallTask(task_id="t", prompt="What is in checking?", world=WORLD, expected_answer="100")
    state = start_episode(task, env=ENVIRONMENT, run_id="r", step=0, group_id="g", rollout_id="k0")
    turns = [_calls("x", "x", "y"), _calls("y", "x"), "<answer>100</answer>"]
    state = converse(state, task, ScriptedPolicy(turns), ENVIRONMENT)
    sent = chat_messages(state.messages[:-1])
    _assert_consistent(sent)
    request = converse_request("anthropic.claude", sent, {})  # the Bedrock path: the same messages, as Converse's
    roles = [turn["role"] for turn in request["messages"]]
    assert all(a != b for a, b in pairwise(roles)), roles
    results = [m.content for m in state.messages if m.role == "tool"]
    converse_text = "\n".join(block["text"] for turn in request["messages"] for block in turn["content"])
    assert all(result in converse_text for result in results)


# F2. gsm8k read a hedge as its first number whenever the words between the two were not on its list of connectives
# ("or", "and", "to", ...): "#### 42 = 41", "#### 42 ≈ 41", "#### 42 (41)", "#### 42 and/or 43", "#### 42 … 43",
# "either", "else", "through", "||" were 42. A single final answer is one number on its mark's line: another of another
# value after it, standing alone (not a power's, an index's or a name's digits) and read whole (not an operand of the
# working), makes the mark a hedge, which reads none.

HEDGES = [
    "#### 42 = 41",
    "#### 42 ≈ 41",
    "#### 42 (41)",
    "#### 42 and/or 43",
    "#### 42 … 43",
    "#### 42 either 43",
    "#### 42, else 43",
    "#### 42 through 43",
    "#### 42 || 43",
    "#### 42 => 43",
    "#### 42 (maybe 43?)",
    "#### 42 / maybe 43",
    "#### 42 or _43_",
    "#### 42 or ٤٣",  # the second in Arabic-Indic digits
    "#### 41 #### 42",  # two marks on one line
    "#### 42 dollars and 3 cents is what he kept",  # 42 or 42.03
    "#### 42 apples, or 41 apples",
    "#### 42\t41.",
]


@pytest.mark.parametrize("text", HEDGES)
@pytest.mark.parametrize("reference", ["42", "41", "43"])
def test_f2_a_hedge_is_no_answer(text, reference):
    completion = f"Some working with 12 and 30.\n{text}"
    assert answer_correct(completion, reference) == 0.0
    assert extracted_answer(completion) is None
    assert answer_format(completion) == 0.0


@pytest.mark.parametrize(
    ("text", "value", "form"),
    [
        ("#### 42.", "42", 0.5),
        ("#### 42", "42", 1.0),
        ("#### $42", "42", 1.0),
        ("#### 42 dollars", "42", 0.5),
        ("#### 1,234", "1234", 1.0),
        ("#### 42 m^2", "42", 0.5),  # a power is no second answer
        ("#### 42 m^{2}", "42", 0.5),
        ("#### 42 cm2", "42", 0.5),  # nor is a unit's name
        ("#### 42 [^1]", "42", 0.5),  # nor a footnote's mark
        ("#### **42**", "42", 0.5),
        ("#### 42\nStep 3 was the hardest.", "42", 0.5),  # the next line is not the mark's
        ("6 \\times 7 = \\boxed{42}", "42", 0.5),  # what stands before a box on its line is its working
        ("\\boxed{42}.", "42", 0.5),
        ("#### ٤٢", "42", 1.0),
        ("#### 42 (6 x 7)", "42", 0.5),  # its working
        ("#### 42 (6 x 7 = 42)", "42", 0.5),  # another number of the same value is the same answer
        ("#### 42 or _42_", "42", 0.5),
        ("She pays \\boxed{\\$42} for 3 kids.", "42", 0.5),  # a box's braces hold its answer
    ],
)
def test_f2_a_single_answer_is_read_as_before(text, value, form):
    completion = f"Some working with 12 and 30.\n{text}"
    assert extracted_answer(completion) == Decimal(value)
    assert answer_correct(completion, value) == 1.0
    assert answer_format(completion) == form


# F3. tool_call compared answers as numbers only when both were ASCII digits: "١٢٠٠٠" (Arabic-Indic), "−12000" (a
# typographic minus sign), "$12,000" missed a goal of 12000 while gsm8k read each as the number it is. Both built-ins
# read a number with one reader (rewardpipe.rewards.numeric), so what one takes for a number the other does too.

ANSWERS = [
    "12000",
    "١٢٠٠٠",  # Arabic-Indic
    "۱۲۰۰۰",  # Extended Arabic-Indic
    "१२०००",  # Devanagari
    "١٢,٠٠٠",
    "１２０００",  # full-width
    "12,000",
    "$12,000",
    "12000.00",
    "12000.",
    "-12000",
    "−12000",  # a typographic minus sign
    "–12000",  # an en dash
    "1.2e4",
    "12 000",
    "12,00",
    "12000²",
    "nan",
    "１２，０００",
    "１２０００．００",
    "12000\u0301",
]


@pytest.mark.parametrize("answer", ANSWERS)
@pytest.mark.parametrize("expected", ["12000", "-12000", "١٢٠٠٠"])
def test_f3_gsm8k_and_tool_call_read_the_same_numbers(answer, expected):
    gsm8k = answer_correct(f"#### {answer}", expected)
    assert answers_match(answer, expected) is (gsm8k == 1.0), (answer, expected, gsm8k)


@pytest.mark.parametrize("answer", ["١٢٠٠٠", "−12000", "$12,000", "١٢,٠٠٠"])
def test_f3_a_number_in_other_digits_or_signs_reaches_a_tool_call_goal(answer):
    expected = "-12000" if answer.startswith("−") else "12000"
    assert answers_match(answer, expected)
    assert answers_match(expected, answer)


def test_f3_no_other_number_matches():
    for answer in ["١٢٠٠١", "12,00", "1200", "١٢٠٠٠١", "12000 or 12001"]:
        assert not answers_match(answer, "12000"), answer


# F4 (found looking for more of F2 and F3). gsm8k read full-width forms (what a CJK input method types) as no
# operators: "#### 42／42" (a fraction, 1) and "#### 42 － 42" (0) were 42, so a wrong answer scored correct; and
# "#### １２，０００" read no number, where tool_call read 12000. The shared reader takes full-width forms as the
# ASCII they stand for, as tool_call's answers always were.


@pytest.mark.parametrize("text", ["#### 42／42", "#### ４２／４２", "#### 42 － 42", "#### 42＊1", "#### 42＾1"])
def test_f4_a_full_width_operator_makes_no_answer_of_its_operand(text):
    assert answer_correct(f"Working.\n{text}", 42) == 0.0
    assert extracted_answer(text) is None


@pytest.mark.parametrize(
    ("mark", "number", "value"), [("####", "１２，０００", 12000), ("####", "１２．５", "12.5"), ("＃＃＃＃", "42", 42)]
)
def test_f4_a_full_width_number_is_read(mark, number, value):
    assert extracted_answer(f"{mark} {number}") == Decimal(value)
    assert answers_match(number, str(value))


@pytest.mark.parametrize(("text", "value"), [("######## 42", 42), ("#### 42 #### 42", 42), ("#### 41\n#### 42", 42)])
def test_f2_marks_on_one_line_of_one_value_are_one_answer(text, value):
    assert extracted_answer(text) == value
