"""The number reader the built-in rewards share: what text counts as a plain decimal number, and which.

gsm8k reads the number a marked answer holds, and tool_call compares a final answer with the expected one as numbers
when both are numbers. They read them alike (round thirty-four: tool_call took only ASCII digits, so ``١٢٠٠٠`` in
Arabic-Indic digits, ``−12000`` with a typographic minus sign and ``$12,000`` missed a goal of 12000 that gsm8k
would have met):

* decimal digits of any script (``١٢``, ``۱۲``, ``१२``, full-width ``１２``) are the digits they stand for; other
  numerals (superscripts, vulgar fractions, Roman numerals) are not digits;
* typographic minus signs and the dashes typesetting writes one with are minus signs (:data:`SIGNS`);
* a dollar sign may stand before the digits, and commas may group them as thousands (``1,234,567``, the Indian
  ``1,00,000``; not ``2,5`` or ``41,42``);
* no exponent, ``nan`` or ``inf``: a hostile answer is never expanded, and never equals everything.
"""

from __future__ import annotations

import re
from decimal import Decimal

from rewardpipe.tagged import GROUPED_DIGITS

# Typographic minus signs are minus signs: "#### −42" was read as 42 (the sign is no "-"), so a negative answer scored
# correct against the positive reference. So are the other dashes typesetting writes a minus or a range with (round
# twenty-five: "#### –42" with an en dash was 42, "#### 10–20" 10): the hyphens (U+2010, U+2011), figure and en
# dashes, the modifier-letter, heavy, superscript, subscript and commercial minus signs. Not the em dash or the
# horizontal bar: prose sets those against a number as punctuation ("the answer—42").
SIGNS = str.maketrans(
    dict.fromkeys(
        (
            "\u2212",
            "\ufe63",
            "\uff0d",
            "\u2010",
            "\u2011",
            "\u2012",
            "\u2013",
            "\u02d7",
            "\u2796",
            "\u207b",
            "\u208b",
            "\u2052",
        ),
        "-",
    )
)
# And the invisible operators, U+2061 to U+2064 (function application, times, separator, plus), are operators.
SIGNS.update(dict.fromkeys(range(0x2061, 0x2065), "*"))

# A plain decimal number once its digits are ASCII: a sign, a dollar sign, digits (grouped by commas or not), a
# decimal part, a final full stop.
_PLAIN = re.compile(rf"[-+]?\$?(?:(?:\d+|{GROUPED_DIGITS.pattern})(?:\.\d*)?|\.\d+)", re.ASCII)


def ascii_digits(text: str) -> str:
    """``text`` with the decimal digits of every script (Unicode's ``Nd``) as ASCII digits. One look at each
    character."""
    if text.isascii():
        return text
    return "".join(str(int(char)) if char.isdecimal() else char for char in text)


def plain_decimal(text: str) -> Decimal | None:
    """The number ``text`` is, whole (spaces around it allowed), read by the rules of the module docstring; None when
    it is no plain decimal number. Exact: no exponent, so no answer's reading can overflow or take time."""
    number = ascii_digits(text.translate(SIGNS)).strip()
    if not _PLAIN.fullmatch(number):
        return None
    return Decimal(number.replace("$", "").replace(",", "").rstrip("."))
