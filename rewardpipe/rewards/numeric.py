"""The number reader the built-in rewards share: what text counts as a plain decimal number, and which.

gsm8k reads the number a marked answer holds, and tool_call compares a final answer with the expected one as numbers
when both are numbers. They read them alike (round thirty-four: tool_call took only ASCII digits, so ``١٢٠٠٠`` in
Arabic-Indic digits, ``−12000`` with a typographic minus sign and ``$12,000`` missed a goal of 12000 that gsm8k
would have met):

* decimal digits of any script (``١٢``, ``۱۲``, ``१२``, full-width ``１２``) are the digits they stand for; other
  numerals (superscripts, vulgar fractions, Roman numerals) are not digits;
* typographic minus signs and the dashes typesetting writes one with are minus signs, full-width forms the ASCII
  they stand for (:data:`SIGNS`), and invisible characters are dropped (:func:`readable`);
* a dollar sign may stand before the digits, and commas may group them as thousands (``1,234,567``, the Indian
  ``1,00,000``; not ``2,5`` or ``41,42``);
* no exponent, ``nan`` or ``inf``: a hostile answer is never expanded, and never equals everything.
"""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal

from rewardpipe.tagged import FULL_WIDTH, GROUPED_DIGITS

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
# Full-width forms (what a CJK input method types) are the ASCII they stand for, as tool_call's answers always were
# (rewardpipe.tagged.plain_content): gsm8k read "#### 42／42" (a fraction) and "#### 42 － 42" as 42, its operator no
# "/" or "-", and "#### １２，０００" as no number (round thirty-four).
SIGNS.update({code: chr(ascii_code) for code, ascii_code in FULL_WIDTH.items()})  # (its hyphen-minus: "-" too)
# Invisible characters (format characters: zero-width spaces and joiners, soft hyphens, bidirectional marks; and
# combining marks) are no part of what a reader sees: "#### 4\u200b2" shows 42 and was read as 4, and
# "#### 42\u200b/5" hid its fraction bar (42). They are dropped before anything is read (round twenty-two), but
# for the invisible operators ("#### 4\u20622" is 4 times 2).
_INVISIBLE = frozenset({"Cf", "Mn", "Me"})

# A plain decimal number once its digits are ASCII: a sign, a dollar sign, digits (grouped by commas or not), a
# decimal part, a final full stop.
_PLAIN = re.compile(rf"[-+]?\$?(?:(?:\d+|{GROUPED_DIGITS.pattern})(?:\.\d*)?|\.\d+)", re.ASCII)


def readable(text: str) -> str:
    """``text`` as a reader sees it: typographic minus signs and full-width forms as ASCII (:data:`SIGNS`), invisible
    characters dropped. One look at each character."""
    if text.isascii():
        return text
    text = text.translate(SIGNS)
    return "".join(char for char in text if char.isascii() or unicodedata.category(char) not in _INVISIBLE)


def ascii_digits(text: str) -> str:
    """``text`` with the decimal digits of every script (Unicode's ``Nd``) as ASCII digits. One look at each
    character."""
    if text.isascii():
        return text
    return "".join(str(int(char)) if char.isdecimal() else char for char in text)


def plain_decimal(text: str) -> Decimal | None:
    """The number ``text`` is, whole (spaces around it allowed), read by the rules of the module docstring; None when
    it is no plain decimal number. Exact: no exponent, so no answer's reading can overflow or take time."""
    number = ascii_digits(readable(text)).strip()
    if not _PLAIN.fullmatch(number):
        return None
    return Decimal(number.replace("$", "").replace(",", "").rstrip("."))
