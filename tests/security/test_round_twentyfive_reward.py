"""Round twenty-five on the reward side, as the model would attack it (reward, scorer text, environments, monitor).

R1. gsm8k read a number a dash sign or range was written with as the positive number: only three minus signs
(U+2212, U+FE63, U+FF0D) were read as "-", so ``#### –42`` (an en dash, as typesetting writes a minus), ``#### ‐42``
(a hyphen), ``#### ⁻42`` (a superscript minus) were 42 (a wrong answer scored correct against 42, the right one 0
against -42) and the range ``#### 10–20`` was 10. The dashes a minus or a range is written with are minus signs
(not the em dash: prose sets that against a number as punctuation).

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
"""

from __future__ import annotations

from decimal import Decimal

import pytest

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
