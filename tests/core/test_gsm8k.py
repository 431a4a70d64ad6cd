"""The single-turn GSM8K reward: format levels, answer extraction, reference forms, unreadable references."""

from decimal import Decimal

import pytest

from rewardpipe.models import Message
from rewardpipe.rewards import get_reward
from rewardpipe.rewards.gsm8k import extracted_answer, reference_value

GSM8K = get_reward("gsm8k")


def score(response: str, reference=42):
    messages = [Message(role="user", content="What is 6 * 7?"), Message(role="assistant", content=response)]
    return GSM8K.score(messages, reference=reference)


@pytest.mark.parametrize(
    "response, expected",
    [
        ("6 times 7 is 42.\n#### 42", 1.0),
        ("6 times 7 is 42.\n####42\n\n", 1.0),
        ("Work.\n#### $1,234.50", 1.0),
        ("#### 42 dollars", 0.5),
        ("#### **42**", 0.5),
        ("The answer is \\boxed{42}.", 0.5),
        ("#### 42\nHope that helps.", 0.5),
        ("The answer is 42.", 0.0),
        ("#### Step 1\nMultiply: 42.", 0.0),  # a Markdown heading marks no answer
        ("", 0.0),
    ],
)
def test_format_levels(response, expected):
    assert score(response).components["format"] == expected


def test_format_weight_gives_at_most_half_a_point():
    assert GSM8K.weights["format"] * 1.0 == 0.5
    assert GSM8K.weights["answer_correct"] == 1.0


@pytest.mark.parametrize(
    "text, expected",
    [
        ("#### 1,234", "1234"),
        ("**Answer**\n#### **-8**", "-8"),
        ("#### $56", "56"),
        ("It costs $7.25 in total.", "7.25"),
        ("#### -15", "-15"),
        ("The temperature drops to -3.5 degrees.", "-3.5"),
        ("\\boxed{ 18 }", "18"),
        ("\\boxed{-2,000}", "-2000"),
        ("First 3, then 4, so 12.", "12"),  # last number when nothing is marked
        ("#### 7\nlater I mention 99", "7"),  # a marked answer beats the last number
        ("\\boxed{5} but then #### 6", "6"),  # '####' beats \\boxed
        ("#### 3\n#### 4", "4"),  # the last marked answer wins
        ("Half of it: .5", "0.5"),
        ("no numbers here", None),
    ],
)
def test_answer_extraction(text, expected):
    got = extracted_answer(text)
    assert got == (Decimal(expected) if expected is not None else None)


@pytest.mark.parametrize(
    "response, reference, correct",
    [
        ("#### 42", 42, 1.0),
        ("#### 42.0", "42", 1.0),
        ("#### 1,000", 1000, 1.0),
        ("#### $18", "18", 1.0),
        ("#### -7", -7, 1.0),
        ("#### 0.5", 0.5, 1.0),
        ("#### 41", 42, 0.0),
        ("I don't know.", 42, 0.0),
    ],
)
def test_answer_correctness(response, reference, correct):
    assert score(response, reference).components["answer_correct"] == correct


@pytest.mark.parametrize(
    "reference",
    [
        42,
        "42",
        " 42 ",
        "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nSo 18 more, 24 + 18 = 42 in total.\n#### 42",
        {"text": "#### 42"},
        {"answer": "42"},
        {"answer": 42},
        {"value": "42.00"},
        "$42",
    ],
)
def test_reference_forms(reference):
    assert reference_value(reference) == Decimal(42)
    assert score("#### 42", reference).components["answer_correct"] == 1.0


@pytest.mark.parametrize(
    "reference",
    [None, "forty-two", "", {"unrelated": 1}, [42], True, "NaN", "Infinity", "sNaN", float("nan"), float("inf")],
)
def test_unreadable_reference_is_an_error_not_zero(reference):
    result = score("#### 42", reference)
    assert result.components["answer_correct"] is None
    assert result.aggregate is None
    assert result.error is not None and result.error.kind == "bad_reference"
    assert result.components["format"] == 1.0  # the format is still measured


def test_aggregate_is_weighted_sum_for_a_loose_correct_answer():
    result = score("so \\boxed{42}", 42)
    assert result.aggregate == pytest.approx(0.5 * 0.5 + 1.0 * 1.0)


def test_only_the_last_assistant_turn_is_scored():
    messages = [
        Message(role="user", content="q"),
        Message(role="assistant", content="#### 42"),
        Message(role="user", content="again"),
        Message(role="assistant", content="#### 41"),
    ]
    assert GSM8K.score(messages, reference=42).components["answer_correct"] == 0.0


def test_no_assistant_turn_scores_zero_not_error():
    result = GSM8K.score([Message(role="user", content="q")], reference=42)
    assert result.components == {"format": 0.0, "answer_correct": 0.0}
    assert result.error is None


def test_diagnostics():
    result = score("#### 42")
    assert result.metrics["answer_found"] is True
    assert result.metrics["response_chars"] == len("#### 42")


def test_degenerate_long_output_is_scored_without_pathological_backtracking():
    # 200k characters of whitespace after a marker: a quadratic regex would take minutes here.
    response = "#### " + " " * 200_000 + "\n#### **42**"
    result = score(response)
    assert result.components == {"format": 0.5, "answer_correct": 1.0}
