"""Round twenty-one on the reward side: gsm8k answers read whole or not at all, and tool-call arguments
bounded in whatever form they come."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from rewardpipe.models import Message
from rewardpipe.rewards import get_reward
from rewardpipe.rewards.gsm8k import extracted_answer

GSM8K = get_reward("gsm8k")


def _gsm8k(response: str, reference: object) -> dict[str, float | None]:
    messages = [Message(role="user", content="What is it?"), Message(role="assistant", content=response)]
    return GSM8K.score(messages, reference=reference).components


# -- gsm8k: a number that is only the start of a longer one is not that number ---------------------------


@pytest.mark.parametrize(
    "response, reference",
    [
        ("#### 1/2", 1),  # a fraction was read as its numerator
        ("So it is\n#### 42e5", 42),  # an exponent was dropped
        ("#### 42^2", 42),  # a power was dropped
        ("#### 42**2", 42),
        ("#### 42×10^3", 42),
        ("#### 42.5.1", 42.5),  # a second decimal point
        ("#### 2½", 2),  # a vulgar fraction
        ("The answer is 42/5", 5),  # the last number was the denominator
        ("\\boxed{42/5}", 5),
        ("#### 7\n#### 1/2", 1),  # the last marked answer is the one read, whole
        ("#### \u221242", 42),  # a typographic minus sign is a minus sign: -42 is not 42
        ("#### \uff0d42", 42),
    ],
)
def test_a_wrong_answer_read_as_part_of_its_number_is_not_scored_correct(response, reference):
    assert _gsm8k(response, reference)["answer_correct"] == 0.0


@pytest.mark.parametrize(
    "response, expected",
    [
        ("#### \u221242", Decimal(-42)),
        ("**Answer**\n#### **-8**", Decimal(-8)),  # Markdown bold is not a power
        ("The answer is **42**.", Decimal(42)),
        ("It is 42. 5 more", Decimal(5)),  # a sentence's full stop is no decimal point
        ("#### 42 eggs", Decimal(42)),
        ("#### $1,234.50", Decimal("1234.50")),
        ("6 x 7 = 42", Decimal(42)),
    ],
)
def test_plain_answers_are_still_read(response, expected):
    assert extracted_answer(response) == expected


def test_a_negative_answer_in_typographic_minus_scores_against_a_negative_reference():
    assert _gsm8k("#### \u22127", -7)["answer_correct"] == 1.0
