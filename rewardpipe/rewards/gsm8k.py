"""Single-turn GSM8K-style math reward: a format component (up to 0.5) and answer correctness (1.0).

Format: the model is asked to end with a line ``#### <number>``.
  * 1.0 (weighted 0.5): the last non-empty line is exactly ``#### <number>``;
  * 0.5 (weighted 0.25): a final answer is marked, but loosely (``#### 42 dollars``, ``#### **42**``,
    ``\\boxed{42}``, or the ``####`` line is not last);
  * 0.0: no marked answer (a Markdown heading such as ``#### Step 1`` marks nothing).
Correctness: 1.0 when the marked answer (or, failing that, the last number in the text) equals the reference
numerically, else 0.0. An unreadable reference answer is an error (None), never a 0 for every sample, which
would make the component constant and silently dead.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from rewardpipe.components import component
from rewardpipe.models import ErrorInfo, MetricValue
from rewardpipe.rewards.base import Reward

_NUMBER = r"-?\$?(?:\d[\d,]*(?:\.\d+)?|\.\d+)"
_STRICT_LAST_LINE = re.compile(rf"^####\s*({_NUMBER})\s*$")
# Loosely marked: Markdown emphasis around the number ("#### **42**") still marks it.
# (Written so no two parts can both take the same whitespace: that ambiguity backtracks quadratically.)
_HASH_ANSWER = re.compile(rf"####\s*(?:[*_]+\s*)?({_NUMBER})")
_BOXED = re.compile(rf"\\boxed\{{\s*({_NUMBER})\s*\}}")
_ANY_NUMBER = re.compile(_NUMBER)
# A number is read whole or not at all. Read up to what continues it, "#### 1/2" was 1, "#### 42e5" and
# "#### 42^2" were 42 and "#### 42.5.1" was 42.5: wrong answers scored correct against 1 or 42. What may follow
# a number and make it part of a longer one (a fraction bar, an exponent, a power, a second decimal point, a
# times sign, a vulgar fraction, a superscript digit; "**" only before a digit: after one it closes Markdown bold) ...
_CONTINUED = re.compile(
    r"[ \t]*(?:/[ \t]*[\d.]|\^|\*\*[ \t]*\d|[×x][ \t]*10|[eE][+-]?\d|\.\d"
    r"|[\u00bc-\u00be\u2150-\u215e\u00b2\u00b3\u00b9\u2070\u2074-\u2079])"
)
# ... and what before it makes it a denominator, a power or an exponent ("42/5" has 5 for its last number).
# Matched at the end of a few characters before the number only: every check is bounded, the reading linear.
_CONTINUING = re.compile(r"(?:/|\^|\d[ \t]*\*\*|×|\d[eE][+-]?)[ \t]*\Z")
_LOOKBACK = 16
# Commas are thousands separators only where they group digits as such (1,234,567, or the Indian 1,00,000):
# "#### 2,5" (a decimal comma) was 25 and "#### 41,42" (two answers) 4142. Other commas make no number.
_GROUPED = re.compile(r"\d{1,3}(?:,\d{3})+|\d{1,2}(?:,\d{2})+,\d{3}")
# Typographic minus signs are minus signs: "#### −42" was read as 42 (the sign is no "-"), so a negative
# answer scored correct against the positive reference. One character for one: match positions are kept.
_MINUS_SIGNS = str.maketrans({"\u2212": "-", "\ufe63": "-", "\uff0d": "-"})


def to_decimal(text: str) -> Decimal | None:
    cleaned = text.replace(",", "").replace("$", "").strip().rstrip(".")
    try:
        value = Decimal(cleaned)
    except (InvalidOperation, ValueError):
        return None
    # "NaN"/"Infinity" parse as Decimals but are no answer: a NaN reference would score every sample 0.0
    # (and a signalling NaN raises on comparison) instead of being reported as unreadable.
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
    if isinstance(reference, (int, float)):
        return to_decimal(str(reference))
    if isinstance(reference, str):
        reference = reference.translate(_MINUS_SIGNS)
        marked = _HASH_ANSWER.search(reference)
        if marked:
            # Read whole, as an answer is: "#### 1/2" is an unreadable reference (an error), not 1.
            return _whole_number(reference, marked, 1)
        return to_decimal(reference)
    return None


def _whole_number(text: str, match: re.Match[str], group: int) -> Decimal | None:
    """The number ``match`` read, unless it is only part of a longer one (then the answer is unreadable)."""
    start, end = match.span(group)
    if _CONTINUED.match(text, end) or _CONTINUING.search(text[max(0, start - _LOOKBACK) : start]):
        return None
    token = match.group(group)
    whole = token.lstrip("-$").rstrip(",").partition(".")[0]  # (a comma after it ends a clause: "42, so")
    if "," in whole and not _GROUPED.fullmatch(whole):
        return None
    return to_decimal(token)


def extracted_answer(text: str) -> Decimal | None:
    text = text.translate(_MINUS_SIGNS)
    for pattern in (_HASH_ANSWER, _BOXED):
        last = None
        for last in pattern.finditer(text):  # noqa: B007 - only the last match is read
            pass
        if last is not None:
            return _whole_number(text, last, 1)
    last = None
    for last in _ANY_NUMBER.finditer(text):  # noqa: B007 - only the last match is read
        pass
    return _whole_number(text, last, 0) if last is not None else None


# Weight 0.5 on a {0, 0.5, 1} value gives the "format up to 0.5" of the single-turn RLVR recipe.
@component(range=(0.0, 1.0), role="shaping", weight=0.5, name="format", description="final answer marked as '#### N'")
def answer_format(completion: str) -> float:
    text = completion.translate(_MINUS_SIGNS)  # "#### −42" marks -42 as "#### -42" does (answer_correct reads it)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if lines and _STRICT_LAST_LINE.match(lines[-1]):
        return 1.0
    # A bare "####" is not enough: models use "#### Step 1" as a Markdown heading.
    if _HASH_ANSWER.search(text) or _BOXED.search(text):
        return 0.5
    return 0.0


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
