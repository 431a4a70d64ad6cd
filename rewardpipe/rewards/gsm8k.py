"""Single-turn GSM8K-style math reward: a format component (up to 0.5) and answer correctness (1.0).

Format: the model is asked to end with a line ``#### <number>``.
  * 1.0 (weighted 0.5): the last non-empty line is exactly ``#### <number>`` (chat-template end tokens decoded at
    the end of the text, ``<|im_end|>``, ``</s>``, are passed over);
  * 0.5 (weighted 0.25): a final answer is marked, but loosely (``#### 42 dollars``, ``#### **42**``,
    ``\\boxed{42}``, or the ``####`` line is not last);
  * 0.0: no marked answer (a Markdown heading such as ``#### Step 1`` or ``#### 1. Setup`` marks nothing), or the
    marked answer that correctness reads is no number (``#### 2,5``, ``#### 1/2``, ``#### 10 - 3``: see below).
Correctness: 1.0 when the marked answer (the last ``#### N``, else the last ``\\boxed{...}`` read inside its braces,
where LaTeX around the number is allowed: ``\\boxed{\\$42}``; or, failing both, the last number in the text) equals the
reference numerically, else 0.0. A number is read whole or not at all: one that is part of a fraction, a power,
an expression, a ratio or a mixed number is no answer. A hedge is no answer either (and the text's last number is
not read in its place): a box holding two numbers that stand alone, ``\\boxed{41 or 42}``, or a mark's line holding
after its number another of another value, set apart as the answer is: ``#### 41 or 42``, ``#### 42 = 41``, ``#### 42
(41)``, ``#### 42 or forty-one`` (a number in words is a number: ``#### 42 (forty-two)`` is 42; words and working
may follow the answer: ``#### 42 apples``, ``#### 42 (6 x 7)``). A reference (marked, or
a bare string) is read by the same rule. An unreadable reference answer is an error (None), never a 0 for every
sample, which would make the component constant and silently dead.
"""

from __future__ import annotations

import numbers
import re
from decimal import Decimal, InvalidOperation
from typing import Any

from rewardpipe.components import component
from rewardpipe.models import ErrorInfo, MetricValue
from rewardpipe.rewards.base import Reward
from rewardpipe.rewards.numeric import plain_decimal, readable
from rewardpipe.tagged import GROUPED_DIGITS

_NUMBER = r"-?\$?(?:\d[\d,]*(?:\.\d+)?|\.\d+)"
_STRICT_LAST_LINE = re.compile(rf"^####\s*({_NUMBER})\s*$")
# Loosely marked: Markdown emphasis around the number ("#### **42**") still marks it.
# (Written so no two parts can both take the same whitespace: that ambiguity backtracks quadratically.)
# (A mark's minus sign may stand apart from its number, "#### - 42": read as -42, where the 42 after it was read.)
_HASH_ANSWER = re.compile(rf"####\s*(?:[*_]+\s*)?((?:-[^\S\r\n]+)?{_NUMBER})")
# A box's content that is one number, and a number inside a box (group 1: what _whole_number reads).
_BOXED_CONTENT = re.compile(rf"\s*({_NUMBER})\s*")
_BOXED_NUMBER = re.compile(rf"({_NUMBER})")
_ANY_NUMBER = re.compile(_NUMBER)
# A reference given as a bare string: one number, a full stop after it allowed ("42.").
_BARE_REFERENCE = re.compile(rf"\s*({_NUMBER})\.?\s*")
# A number is read whole or not at all. Read up to what continues it, "#### 1/2" was 1, "#### 42e5" and
# "#### 42^2" were 42 and "#### 42.5.1" was 42.5: wrong answers scored correct against 1 or 42. What may follow
# a number and make it part of a longer one (a fraction bar, an exponent, a power, a second decimal point, a
# times sign, a vulgar fraction, a superscript digit; "**" only before a digit: after one it closes Markdown bold);
# then (round twenty-two) an operator of any script before an operand ("#### 10 - 3", "#### 2 * 3", "#### 3÷4",
# "#### 3⁄4" with the fraction slash, "#### 2·10^3"), a root, pi or a LaTeX fraction after it ("#### 5√2",
# "#### 2π", "#### 4 \frac{1}{2}"), a ratio or a time ("#### 1:2"), a digit separator ("#### 1_000") and a second
# run of digits after spaces (the mixed number "#### 2 1/2", "#### 1 000" grouped by spaces); an apostrophe between
# digits groups them too ("#### 1'000", Swiss; round twenty-five: it was 1); a tolerance ("#### 42±1", "42 ∓ 1",
# "42 +/- 1": round twenty-eight, they were 42) ...
_ROOT_OR_PI = r"[\u221a\u221b\u221c\u03c0]|\\(?:sqrt|[dt]?frac|pi)\b"
# LaTeX's operator commands are operators as their symbols are ("\boxed{3 \cdot 4}" was 4, "#### 2 \times 3" 2;
# round twenty-five), and "^\circ" is a degree sign, not a power ("\boxed{90^\circ}" was no answer).
_LATEX_OPERATOR = r"\\(?:times|cdot|div|pm|mp|ast)\b"
_CONTINUED = re.compile(  # (spaces of any kind but a line break: "42\u00a0/5" is a fraction as "42 /5" is)
    r"[^\S\r\n]*(?:/[^\S\r\n]*[\d.]|\^(?!\{?\\circ\b)|\*\*[^\S\r\n]*\d|[eE][+-]?\d|\.\d"
    r"|[\u00bc-\u00be\u2150-\u215e\u00b2\u00b3\u00b9\u2070\u2074-\u2079]"
    rf"|(?:[-+*×x·÷±∓\u2044\u2215\u2217\u22c5]|\+/-|{_LATEX_OPERATOR})[^\S\r\n]*(?:\d|\.\d|{_ROOT_OR_PI})|{_ROOT_OR_PI})"
    r"|[:_'\u2019]\d|[^\S\r\n]+\d"
)
# ... and what before it makes it a denominator, a power, an exponent, a root, the second of a ratio or of an
# operation ("42/5" has 5 for its last number, "3 + 4" 4, "\frac{1}{2}" 2, "\sqrt{16}" 16, "1:2" 2), or the last
# group of digits a separator or spaces split ("1_000", "1'000", "1 000" had 0 for their last number, round
# twenty-five: the forward rule alone left the unmarked answer's last group read, "\boxed{1_000}" scored against 0).
# Matched at the end of a few characters before the number, and of the spaces between (however many: "42/" and
# twenty spaces before "5" hid the fraction bar from a window of 16 characters) only: every check is bounded by
# what it looks at once, the reading linear.
_CONTINUING = re.compile(
    r"(?:/|\^|\d[^\S\r\n]*\*\*|×|\d[eE][+-]?|[\u221a\u221b\u221c\u2044\u2215÷±∓]|\\sqrt\{?|\}\{|\+/-"
    rf"|\d[^\S\r\n]*(?:[-+*x·\u2217\u22c5]|{_LATEX_OPERATOR}))[^\S\r\n]*\Z|\d[:_'\u2019]\Z|\d[^\S\r\n]+\Z"
)
# What after "#### N" makes N a heading's numbering, not an answer: a list number's "." or ")" before words, or an
# ordinal's suffix. "#### 1. Understand the problem" over a solution ending "\\boxed{42}" was the answer 1 (a mark of
# "####" wins over a boxed one), so the right answer scored 0 (round twenty-five). Looked at once per mark.
_NUMBERED_HEADING = re.compile(r"[.)][^\S\r\n]+[^\W\d_]|(?:st|nd|rd|th)\b", re.IGNORECASE)
# A single final answer is one number on its mark's line: words may follow it (a unit, a sentence) and so may its
# working, but another number of another value, set apart as the answer is, makes the mark a hedge, no answer. "####
# 41 or 42" was 41 (round twenty-eight), and a list of connectives ("or", "and", "to", ...) left "#### 42 = 41",
# "#### 42 ≈ 41", "#### 42 (41)", "#### 42 and/or 43", "#### 42 … 43", "either", "through", "||" read as 42 (round
# thirty-four). See _another_answer.
# A number written in words is a number as its digits are (round thirty-five): "#### 42 or forty-one" and
# "\\boxed{42 \\text{ or forty-one}}" were 42, a hedge read as its first answer. A run of English number words
# ("forty-one", "one hundred and two", "a thousand") is read as the number it names; "one" after a determiner
# ("the one", "each one") is a pronoun, no number. Each word must end at a word boundary, so a failed run gives
# back at most its last separator: one pass over the line or the box.
_UNIT_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
_UNIT_WORDS += ["eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TEN_WORDS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_WORD_VALUES = (
    {word: value for value, word in enumerate(_UNIT_WORDS)}
    | {word: 10 * value for value, word in enumerate(_TEN_WORDS, start=2)}
    | {"hundred": 100, "thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}
)
_ANY_WORD = "|".join(sorted(_WORD_VALUES, key=len, reverse=True))
_WORDED_NUMBER = re.compile(
    rf"\b(?:{_ANY_WORD})\b(?:(?:[^\S\r\n]+|-)(?:and[^\S\r\n]+)?(?:{_ANY_WORD})\b)*", re.IGNORECASE
)
_SEPARATOR = re.compile(r"[^\S\r\n]+|-")
_PRONOUN_ONE = re.compile(r"\b(?:the|this|that|each|every|any|no|which|one|some)[^\S\r\n]+\Z", re.IGNORECASE)
# Chat-template end tokens a trainer decodes with the text (ChatML's and Llama 3's "<|...|>", DeepSeek's fullwidth
# "<｜...｜>", "</s>", Gemma's "<end_of_turn>", "<eos>"): at the end of the text they are no part of the answer's line
# ("#### 42<|im_end|>" had the loose format, 0.5: round twenty-eight). Other tags are ("#### 42<br>" stays loose).
_END_TOKEN = re.compile(r"<\|[^<>|\s]{1,32}\|>|<\uff5c[^<>\s]{1,48}\uff5c>|</s>|<eos>|<end_of_turn>")
_END_TOKEN_LONGEST = 50
# A minus sign read as the number's own straight after a digit is a subtraction or a range ("3-4", "10 -3").
_AFTER_DIGIT = re.compile(r"\d[^\S\r\n]*\Z")
_LOOKBACK = 16
# Commas are thousands separators only where they group digits as such (1,234,567, or the Indian 1,00,000):
# "#### 2,5" (a decimal comma) was 25 and "#### 41,42" (two answers) 4142. Other commas make no number.
_GROUPED = GROUPED_DIGITS
# LaTeX writes a grouping comma as "{,}" and spaces digits with "\," "\;" "\:" "\!" "\ " or "~": "#### 1{,}000" was 1
# and "\boxed{1{,}000}" 0 (its last group), so a wrong answer scored correct against 1 or 0 and the right one 0
# (round twenty-five). Between digits, "{,}" is the comma it prints and the spacing commands are spaces, so the
# comma and space rules above read the number whole or not at all. One pass; the lookarounds take one character.
_LATEX_SEPARATOR = re.compile(r"(?<=\d)(?:\{,\}|\\[,;:! ]|~)(?=\d)")


def _readable(text: str) -> str:
    """``text`` as the answer readers read it: LaTeX digit separators are the comma or space they print, then as
    :func:`rewardpipe.rewards.numeric.readable` reads it (typographic minus signs are minus signs, full-width forms
    ASCII, invisible characters go). One look at each character."""
    if "{" in text or "\\" in text or "~" in text:
        text = _LATEX_SEPARATOR.sub(lambda match: "," if match[0] == "{,}" else " ", text)
    return readable(text)


def to_decimal(text: str) -> Decimal | None:
    """The number ``text`` is, read as every built-in reads one (:func:`rewardpipe.rewards.numeric.plain_decimal`:
    digits of any script, a typographic minus sign; no exponent, "NaN" or "Infinity"), its commas dropped (the
    grouping rule is _whole_number's)."""
    cleaned = text.replace(",", "").strip()
    if cleaned.startswith("-"):  # "- 42", a minus sign spaced from its number (a mark's)
        cleaned = "-" + cleaned[1:].lstrip()
    return plain_decimal(cleaned)


def _number_value(reference: numbers.Real | Decimal) -> Decimal | None:
    """A reference given as a number: any real number (a dataset's numeric column read with numpy or pandas gives
    numpy.int64, no int; a JSON parser's parse_float, Decimal), its exponent allowed (``1e-05``). "NaN"/"Infinity"
    are no answer: a NaN reference would score every sample 0.0 instead of being reported as unreadable."""
    try:
        value = Decimal(str(reference))
    except (InvalidOperation, ValueError):
        return None
    return value if value.is_finite() else None


def reference_value(reference: Any) -> Decimal | None:
    """Accept ``42``, ``"42"``, a full GSM8K solution ending ``#### 42``, or ``{"answer"|"text": ...}``."""
    if isinstance(reference, dict):
        for key in ("answer", "text", "value", "reference_answer"):
            if key in reference:
                return reference_value(reference[key])
        return None
    if isinstance(reference, bool) or reference is None:
        return None
    if isinstance(reference, (numbers.Real, Decimal)):
        return _number_value(reference)
    if isinstance(reference, str):
        reference = _readable(reference)
        # Read whole, as an answer is: "#### 1/2" is an unreadable reference (an error), not 1; and so is a bare
        # string ("1,5" was 15 and "41,42" 4142, read by Decimal with its commas dropped: round twenty-two).
        marked = _HASH_ANSWER.search(reference) or _BARE_REFERENCE.fullmatch(reference)
        return _whole_number(reference, marked, 1) if marked else None
    return None


def _whole_number(text: str, match: re.Match[str], group: int) -> Decimal | None:
    """The number ``match`` read, unless it is only part of a longer one (then the answer is unreadable)."""
    start, end = match.span(group)
    token = match.group(group)
    gap = start
    while gap > 0 and text[gap - 1] not in "\r\n" and text[gap - 1].isspace():
        gap -= 1
    before = text[max(0, gap - _LOOKBACK) : start]
    if _CONTINUED.match(text, end) or _CONTINUING.search(before):
        return None
    if token.startswith("-") and _AFTER_DIGIT.search(before):
        return None
    whole = token.lstrip("-$").rstrip(",").partition(".")[0]  # (a comma after it ends a clause: "42, so")
    if "," in whole and not _GROUPED.fullmatch(whole):
        return None
    return to_decimal(token)


def _marked_answer(text: str) -> tuple[bool, Decimal | None]:
    """Whether an answer is marked, and the number it reads (None: none): the last ``#### N``, or failing one the
    last ``\\boxed{...}``. A Markdown heading's numbering (``#### 1. Understand the problem``, ``#### 2) Solve``,
    ``#### 2nd step``) marks nothing, as ``#### Step 1`` does not. A hedge (``#### 41 or 42``, ``#### 42 = 41``,
    ``\\boxed{41 or 42}``) is a marked answer that reads no number: the text's last number is not read in its place."""
    last = previous = None
    for match in _HASH_ANSWER.finditer(text):
        if not _NUMBERED_HEADING.match(text, match.end(1)):
            last, previous = match, last
    if last is None:
        return _boxed_answer(text)
    value = _whole_number(text, last, 1)
    if value is not None and _another_answer(text, last, previous, value):
        return True, None
    return True, value


def _another_answer(text: str, last: re.Match[str], previous: re.Match[str] | None, value: Decimal) -> bool:
    """Whether the line of the last mark, whose answer reads ``value``, offers another candidate answer: the mark
    before it (``previous``) on its line reading another value (``#### 41 #### 42``), or after its answer a number of
    another value that stands alone (no power's, index's or name's digits: ``m^2``, ``x_1``, ``cm2``) and is read
    whole (no operand of the working: ``#### 42 (6 x 7)``). Linear: each number after the answer is looked at once."""
    end = last.end(1)
    if previous is not None:
        between = text[previous.end(1) : last.start()]
        if "\n" not in between and "\r" not in between and _whole_number(text, previous, 1) != value:
            return True  # a mark of another value on the last one's line
    line_end = len(text)
    for stop in "\r\n":
        found = text.find(stop, end)
        if 0 <= found < line_end:
            line_end = found
    for number in _ANY_NUMBER.finditer(text, end, line_end):
        digit = number.start() + len(number[0]) - len(number[0].lstrip("-$"))
        if _stands_alone(text, digit, end) and _whole_number(text, number, 0) not in (None, value):
            return True
    return any(worded != value for worded in _worded_values(text, end, line_end))  # "#### 42 or forty-one"


def _worded_values(text: str, start: int, end: int) -> list[Decimal]:
    """The numbers written in words between ``start`` and ``end`` (see _WORDED_NUMBER). Linear."""
    values = []
    for run in _WORDED_NUMBER.finditer(text, start, end):
        words = [word.lower() for word in _SEPARATOR.split(run[0]) if word and word.lower() != "and"]
        if words == ["one"] and _PRONOUN_ONE.search(text, max(start, run.start() - 8), run.start()):
            continue
        total = current = 0
        for word in words:
            value = _WORD_VALUES[word]
            if value == 100:
                current = (current or 1) * 100
            elif value >= 1000:
                total, current = total + (current or 1) * value, 0
            else:
                current += value
        values.append(Decimal(total + current))
    return values


def _boxed_answer(text: str) -> tuple[bool, Decimal | None]:
    """Whether there is a box, and the number the last ``\\boxed{...}`` reads: its content when that is one number,
    else the one number in it that stands alone, after its last ``=``.

    A box with LaTeX around its number (``\\boxed{\\$42}``, ``\\boxed{42\\%}``, ``\\boxed{42 \\text{ apples}}``,
    ``\\boxed{\\textbf{42}}``, ``\\boxed{x = 42}``) marked no answer, so the last number of the whole text was read
    instead, whatever came after the box ("... for 3 kids" was 3): the right answer scored 0 (round twenty-five).
    The last box is the answer, read inside its braces (nested ones counted) by the whole-number rule. A box holding
    two numbers that stand alone (no index or power: the ``1`` of ``x_1``, the ``2`` of ``m^2`` or ``m^{2}`` is
    none) after its last ``=`` is a hedge and reads none: ``\\boxed{41 or 42}``, ``\\boxed{41 \\text{ or } 42}``,
    ``\\boxed{41 < x < 43}`` were their last number (round twenty-eight); ``\\boxed{6 \\times 7 = 42}`` is 42. Linear:
    one search from the end, one pass over the box."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return False, None
    start += len("\\boxed{")
    depth, end = 1, start
    while end < len(text):
        char = text[end]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if not depth:
                break
        end += 1
    start = text.rfind("=", start, end) + 1 or start  # "x = 6 \times 7 = 42": what the last "=" gives
    plain = _BOXED_CONTENT.fullmatch(text, start, end)
    if plain is not None:
        return True, _whole_number(text, plain, 1)
    worded = set(_worded_values(text, start, end))  # "\\boxed{42 \\text{ or forty-one}}": two answers
    alone = last = None
    for last in _BOXED_NUMBER.finditer(text, start, end):
        if _stands_alone(text, last.start(), start):
            if alone is not None:
                return True, None  # two answers in one box: a hedge
            alone = last
    if alone is None and last is None:
        return False, None  # no number in the box: it marks none (the text's last number is read)
    value = _whole_number(text, last if alone is None else alone, 1)  # type: ignore[arg-type]
    return True, (None if worded - {value} else value)


def _stands_alone(text: str, position: int, start: int) -> bool:
    """Whether the number at ``position`` (in a box's content, or a mark's line, from ``start``) is no index, power
    or part of a name: not straight after a letter, or after ``_``, ``^``, ``_{``, ``^{`` written straight after
    something (``m^2``, ``x_{1}``; ``_42_`` set apart is Markdown emphasis, and stands alone)."""
    before = text[position - 1] if position > start else ""
    if before == "{" and position - 1 > start and text[position - 2] in "^_":
        position -= 1
        before = text[position - 1]
    if before in ("^", "_"):
        return position - 1 <= start or text[position - 2].isspace()
    return not before.isalpha()


def extracted_answer(text: str) -> Decimal | None:
    text = _readable(text)
    marked, value = _marked_answer(text)
    if marked:
        return value
    last = None
    for last in _ANY_NUMBER.finditer(text):  # noqa: B007 - only the last match is read
        pass
    return _whole_number(text, last, 0) if last is not None else None


def _without_end_tokens(text: str) -> str:
    """``text`` without the chat-template end tokens (and spaces) at its end. Each step looks at a bounded stretch
    before what is left and drops at least one character: linear."""
    end = len(text)
    while True:
        while end and text[end - 1].isspace():
            end -= 1
        if not end or text[end - 1] != ">":
            return text[:end]
        token = text.rfind("<", max(0, end - _END_TOKEN_LONGEST), end - 1)
        if token < 0 or not _END_TOKEN.fullmatch(text, token, end):
            return text[:end]
        end = token


# Weight 0.5 on a {0, 0.5, 1} value gives the "format up to 0.5" of the single-turn RLVR recipe.
@component(range=(0.0, 1.0), role="shaping", weight=0.5, name="format", description="final answer marked as '#### N'")
def answer_format(completion: str) -> float:
    text = _readable(completion)  # "#### −42" marks -42 as "#### -42" does (answer_correct reads it)
    # A bare "####" is not enough: models use "#### Step 1" as a Markdown heading. Nor is a mark whose number
    # answer_correct cannot read ("#### 2,5" had 1.0 and "#### 1/2" 0.5, marking no answer: round twenty-two).
    marked, value = _marked_answer(text)
    if not marked or value is None:
        return 0.0
    # (a chat template's end token decoded after the mark is no part of its line: "#### 42<|im_end|>" is strict)
    lines = [line.strip() for line in _without_end_tokens(text).splitlines() if line.strip()]
    return 1.0 if lines and _STRICT_LAST_LINE.match(lines[-1]) else 0.5


@component(range=(0.0, 1.0), role="outcome", weight=1.0, description="final answer equals the reference")
def answer_correct(completion: str, reference: Any) -> float | None:
    expected = reference_value(reference)
    if expected is None:
        return None
    got = extracted_answer(completion)
    return 1.0 if got is not None and got == expected else 0.0


def explain_error(reference: Any) -> ErrorInfo | None:
    if reference_value(reference) is None:
        return ErrorInfo(kind="bad_reference", message=f"reference answer is not a number: {reference!r:.200}")
    return None


def diagnostics(completion: str) -> dict[str, MetricValue]:
    got = extracted_answer(completion)
    return {"response_chars": len(completion), "answer_found": got is not None}


GSM8K = Reward("gsm8k", [answer_format, answer_correct], diagnostics=diagnostics, explain_error=explain_error)
