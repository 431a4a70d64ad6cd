"""The rules of the game: reading a guess out of a turn, and the green/yellow/grey feedback.

**The guess format.** A turn guesses by writing the word between ``<guess>`` and ``</guess>`` (any case, e.g.
``I'll try <guess>crane</guess>``). When a turn holds several complete tags, the **last one wins**: a model
that reasons about candidates before committing commits last, and the feedback names the word it judged, so
the model always sees which one counted. The word must be exactly five ASCII letters (surrounding spaces,
Markdown emphasis, code marks or quotes around it, a final period, full-width forms and invisible format
characters are read through, as :func:`rewardpipe.tagged.plain_content` reads them; case is not significant);
anything else (no tag, an unclosed tag, ``<guess>cranes</guess>``, ``<guess>cr4ne</guess>``) is a *malformed*
turn: the environment answers it with a format reminder, and it uses no guess.

Parsing is linear in the turn's length (:func:`rewardpipe.tagged.tagged_spans`), whatever the model writes.

**Feedback** follows Wordle's rules for repeated letters: greens first (right letter, right place); then,
left to right, a letter is yellow only while the answer still holds a copy of it not yet matched, and grey
after that. ``speed`` against ``abide``: S grey, P grey, the first E yellow, the second E grey (the answer's
only E is taken), D yellow. ``lolly`` against ``hello``: the first L is grey, because both of the answer's
L's are matched green in places 3 and 4.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from pathlib import Path

from rewardpipe.tagged import plain_content, tagged_spans

WORD_LENGTH = 5
GUESS_TAG = "guess"
#: The longest tag content looked at: a valid guess is five letters and a few spaces.
MAX_GUESS_CONTENT = 64
GREEN, YELLOW, GREY = "G", "Y", "X"
COLOUR_NAMES = {GREEN: "green", YELLOW: "yellow", GREY: "grey"}
SOLVED_PATTERN = GREEN * WORD_LENGTH
_LETTERS = frozenset(string.ascii_lowercase)

WORDS_FILE = Path(__file__).resolve().parent / "data" / "words.txt"


class GuessProblem(str, Enum):
    """Why a turn holds no usable guess."""

    NO_TAG = "no_tag"
    UNCLOSED_TAG = "unclosed_tag"
    NOT_FIVE_LETTERS = "not_five_letters"


@dataclass(frozen=True)
class ParsedGuess:
    """What one turn guessed: ``word`` (lowercase) or the ``problem`` that kept it from guessing; ``tags``
    is how many complete guess tags the turn held (the last one counted)."""

    word: str | None
    problem: GuessProblem | None
    tags: int


def is_word_shape(text: str) -> bool:
    """Five ASCII letters (any case)."""
    return len(text) == WORD_LENGTH and text.isascii() and set(text.lower()) <= _LETTERS


def parse_guess(text: str) -> ParsedGuess:
    """The guess of one turn (see the module docstring)."""
    scan = tagged_spans(text, GUESS_TAG)
    if not scan.spans:
        problem = GuessProblem.UNCLOSED_TAG if scan.unclosed else GuessProblem.NO_TAG
        return ParsedGuess(None, problem, 0)
    start, end = scan.spans[-1]
    if end - start > MAX_GUESS_CONTENT:
        return ParsedGuess(None, GuessProblem.NOT_FIVE_LETTERS, len(scan.spans))
    word = plain_content(text[start:end])
    if not is_word_shape(word):
        return ParsedGuess(None, GuessProblem.NOT_FIVE_LETTERS, len(scan.spans))
    return ParsedGuess(word.lower(), None, len(scan.spans))


@lru_cache(maxsize=65536)
def feedback(guess: str, answer: str) -> str:
    """The pattern of ``guess`` against ``answer`` (both five lowercase letters): one of ``G`` (green),
    ``Y`` (yellow), ``X`` (grey) per letter, with Wordle's rules for repeated letters."""
    if guess == answer:
        return SOLVED_PATTERN
    pattern = [GREY] * WORD_LENGTH
    unmatched: dict[str, int] = {}
    for index, (g, a) in enumerate(zip(guess, answer, strict=False)):
        if g == a:
            pattern[index] = GREEN
        else:
            unmatched[a] = unmatched.get(a, 0) + 1
    for index, g in enumerate(guess):
        if pattern[index] == GREY and unmatched.get(g, 0) > 0:
            pattern[index] = YELLOW
            unmatched[g] -= 1
    return "".join(pattern)


def letter_credit(pattern: str) -> float:
    """Partial credit of one pattern: greens count 1, yellows 1/2, over the word's length."""
    return (pattern.count(GREEN) + 0.5 * pattern.count(YELLOW)) / WORD_LENGTH


@lru_cache(maxsize=65536)
def describe(guess: str, pattern: str) -> str:
    """The feedback as the model reads it: ``C=green R=grey A=yellow N=grey E=grey``."""
    return " ".join(f"{letter.upper()}={COLOUR_NAMES[colour]}" for letter, colour in zip(guess, pattern, strict=False))


def load_words(path: str | Path = WORDS_FILE) -> frozenset[str]:
    """A word list: one word a line; blank lines and ``#`` comments ignored; every word five letters. The
    bundled list is read once; a file of one's own every time it is asked for (it may have been edited)."""
    if Path(path) == WORDS_FILE:
        return _bundled_words()
    return _read_words(path)


@lru_cache(maxsize=1)
def _bundled_words() -> frozenset[str]:
    return _read_words(WORDS_FILE)


def _read_words(path: str | Path) -> frozenset[str]:
    words = set()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})") from None
    for lineno, line in enumerate(text.splitlines(), start=1):
        word = line.strip().lower()
        if not word or word.startswith("#"):
            continue
        if not is_word_shape(word):
            raise ValueError(f"{path}:{lineno}: {word[:40]!r} is not a five-letter word")
        words.add(word)
    if not words:
        raise ValueError(f"{path}: the word list is empty")
    return frozenset(words)
