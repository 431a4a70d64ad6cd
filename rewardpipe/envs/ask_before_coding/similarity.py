"""How alike two assistant turns are, in time linear in their length: the loop penalty's similarity.

``turn_similarity(a, b)`` is ``2 * M / (len(a) + len(b))`` (the form of difflib's ratio), where ``M`` is the
length of a common subsequence of the two turns found by *anchoring*: every run of ``ANCHOR_CHARS``
characters that occurs in both turns is an anchor; the longest chain of anchors in the same order in both
turns is kept (a longest increasing subsequence, ``O(n log n)``), and ``M`` counts the characters that chain
matches. Turns are compared after collapsing runs of whitespace and ignoring case, so re-spacing or
re-capitalising a repeated question does not make it new.

Why not difflib: ``SequenceMatcher.ratio`` is quadratic (a second of scorer CPU for two turns of 3,000
random characters, minutes for two of 30,000), and cutting it to windows misses a loop whose difference
sits inside a window. Anchoring keeps the whole text:

* ``M`` is the length of a real common subsequence, so the similarity never exceeds the LCS ratio: two
  turns share as much as it says, at least;
* a near-duplicate loses only the characters inside its edits and runs shorter than ``ANCHOR_CHARS``
  between two edits, so a repeated question with a few words changed stays far above the threshold
  (``Can you explain again?`` / ``Can you explain it again?`` is 0.94, as with difflib);
* unrelated turns share few runs of ``ANCHOR_CHARS`` characters in order, so they stay low (random text
  near 0; two different questions about the same task typically 0.3 to 0.6).

Cost bound: a run that repeats inside a turn (``aaaa...``, a pasted block) is tried against at most
``MAX_CANDIDATES`` of its occurrences in the other turn (those nearest the same relative position), so the
chain is built from at most ``MAX_CANDIDATES`` pairs per character: linear in the length, whatever the text.
Each turn's runs are indexed once, and a pair visits only the runs both turns have.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable, Collection, Sequence
from itertools import groupby
from typing import Any

from rewardpipe.envs.ask_before_coding.confusables import LOOK_ALIKE_TABLE
from rewardpipe.envs.ask_before_coding.questions import inline_values, read_as_asked
from rewardpipe.envs.ask_before_coding.words import LEET, fold, loop_key, loop_phrase, number_words, read_leet
from rewardpipe.parsing import TurnKind, classify_turn

#: More than this similar is a loop (contracts.md: "more than 80% similar").
LOOP_SIMILARITY_THRESHOLD = 0.8
#: Earlier turns a turn is compared with for near-duplicates; exact repeats are found across the whole
#: conversation. Far more than an episode's turns (6 by default): only a recorded transcript reaches it.
LOOP_LOOKBACK_TURNS = 32
#: Length of the shared runs that anchor a match. Shorter runs also anchor chance coincidences between
#: unrelated turns (" the ", "tion"); longer ones lose near-duplicates edited every few characters.
ANCHOR_CHARS = 4
#: A turn whose words (at least this many characters of them) recur verbatim inside another turn is a loop
#: too: the same question padded with new text ("Sorry to ask again: ...", "... I want to be sure") or asked
#: twice in one turn dilutes the ratio below the threshold, but it is the same question again.
CONTAINED_MIN_CHARS = 24
#: A turn saying the same words as another in another order (its clauses or its questions swapped, its words
#: shuffled or each said twice) is a loop too: more than the threshold of their distinct words (stemmed, no
#: stopwords; numbers and one-letter names kept) shared, when the turn with fewer has at least this many.
#: Fewer would make "What if n is 0?" and "If n is 0, what?" the only kind of pair it judges.
MIN_REORDERED_WORDS = 3
#: Two turns with the very same :func:`word_set` of at least this many words are a loop, anywhere: a short
#: question reworded ("How should I handle duplicate names?" / "How do I treat repeated names?") has too few
#: words for the share above, but the same concepts, all of them.
MIN_SAME_SET_WORDS = 2
#: Occurrences of one anchor in the other turn that are tried (the nearest to the same relative position).
MAX_CANDIDATES = 4
#: Unmatched stretches between two anchors up to this long are matched exactly (an LCS of two short strings):
#: it recovers the characters between edits closer together than an anchor.
GAP_CHARS = 32
#: Characters one :func:`find_loop` compares by anchoring (the two turns' lengths, summed over the pairs so
#: compared): each costs up to MAX_CANDIDATES anchor pairs, so this bounds a transcript's loop check (a fraction
#: of a second) whatever its length and its turns. Six turns of a thousand characters, each compared with all
#: the others on its text and on its letters, use 60,000.
COMPARED_CHARS_PER_TRANSCRIPT = 150_000


# --- what a question asks about: its literal values ---------------------------------------------------------

# A call's arguments (``median([1, 2])``, ``to_roman(0)``), a quoted string (``'maybe'``), inline code, a number
# (``59.9``, ``-5``, ``3600``, ``0``). No nesting and a bounded length: one pass that cannot backtrack.
_LITERAL = re.compile(
    r"(?<![\w.])(?P<call>[a-z_][\w.]*\((?P<args>[^()\n]{0,80})\))"
    r"|`(?P<code>[^`\n]{1,80})`"
    r"|(?<!\w)'(?P<single>[^'\n]{0,40})'(?!\w)"
    r"|(?<!\w)\"(?P<double>[^\"\n]{0,40})\"(?!\w)"
    r"|(?<![\w.])(?P<number>[-+]?\d+(?:[.,:]\d+)*)(?!\w)"
)


def literals(text: str) -> frozenset[str]:
    """The literal values a normalised turn asks about: a call's arguments, quoted strings, inline code and
    numbers, each with its spaces dropped (``median([1, 2])`` and ``median([1,2])`` ask the same; a number with
    a unit, ``100ms``, is a word). Two turns that ask about different values ("... for 59.9 seconds?" /
    "... for 3600 seconds?", ``human_size(512)`` / ``human_size(1536)``) ask different questions, however alike
    the rest of their words. Linear: one regex pass that cannot backtrack (a match starts only at a word's
    start, and every part is one character class or bounded)."""
    found = set()
    for match in _LITERAL.finditer(text):
        kind = match.lastgroup or ""
        value = match["args"] if kind == "call" else match[kind]
        if kind == "number":
            found.add("n:" + "".join(value.split()))
        else:
            # "l" read as "i" ("'alice'" and "'@1!c3'" alike) and each word's letters either way round ("'sey'"
            # is "'yes'"), as the loop check reads the words around it
            value = "".join(value.split()).translate(_L_AS_I)
            found.add("v:" + min(value, _LETTER_RUN.sub(lambda run: run[0][::-1], value)))
    return frozenset(found)


_LEET_DIGITS = str.maketrans({digit: letter for digit, letter in LEET.items() if digit.isdigit()})
_L_AS_I = str.maketrans("l", "i")
_LETTER_RUN = re.compile("[^\\W\\d_]+")


def values_of(text: str, spelt: str | None = None) -> tuple[frozenset[str], frozenset[str]]:
    """A canonical turn's :func:`literals`, read forwards and backwards (a turn spelt backwards, "?21 rof", asks
    about the same values as the turn it reverses). With ``spelt`` (the turn as :func:`spelt_out` reads it, before
    its number words are digits), the literals are that text's, and the numbers written in words are values of
    their own kind (``w:``): :func:`different_values` reads "three" as "3" but not as a value padded on."""
    if spelt is None:
        return literals(text), literals(text[::-1])
    in_words = frozenset("w:" + number for number in number_words(spelt)[1])
    return literals(spelt) | in_words, literals(spelt[::-1]) | in_words


def asks_other_values(
    a: tuple[frozenset[str], frozenset[str]], b: tuple[frozenset[str], frozenset[str]], words_a: str, words_b: str
) -> bool:
    """Does a turn ask about other values (:func:`values_of`) than another, read either way round?"""
    return different_values(a[0], b[0], words_a, words_b) and different_values(a[0], b[1], words_a, words_b)


def different_values(a: frozenset[str], b: frozenset[str], words_a: str, words_b: str) -> bool:
    """Do two turns' :func:`literals` differ (either having one the other lacks)? A bare whole number that reads,
    in leetspeak, as a word of the other turn ("15" for "is", "4" for "a") is that word written in digits, not
    a value: a loop reworded in leetspeak asks about the same values."""
    if a == b:
        return False
    # A number written in words ("w:3") is the number written in digits ("n:3"); one that only one turn has
    # differs only where the other turn has a value of its own too ("three seconds" / "four seconds"): "One more
    # thing: <the same question>" pads the question, it asks about no other value.
    read_a, read_b = _as_numbers(a), _as_numbers(b)
    in_a, in_b = (set(words.translate(_L_AS_I).split()) for words in (words_a, words_b))
    differing = []
    for mine, theirs, words in ((read_a, read_b, in_b), (read_b, read_a, in_a)):
        found = []
        for value, in_words in mine.items():
            if value in theirs:
                continue
            number = value[2:]
            if value.startswith("n:") and number.isdigit() and number.translate(_LEET_DIGITS) in words:
                continue
            found.append(in_words)
        differing.append(found)
    mine_only, theirs_only = differing
    return any(not in_words or theirs_only for in_words in mine_only) or any(
        not in_words or mine_only for in_words in theirs_only
    )


def _as_numbers(values: frozenset[str]) -> dict[str, bool]:
    """Each value as a number in digits would be (``w:3`` as ``n:3``), and whether it was written only in words."""
    read: dict[str, bool] = {}
    for value in values:
        if value.startswith("w:"):
            read.setdefault("n:" + value[2:], True)
        else:
            read[value] = False
    return read


def normalise(text: str) -> str:
    """:func:`~rewardpipe.envs.ask_before_coding.words.fold`-ed (fullwidth, invisible, accented and look-alike
    letters as plain ones), the look-alikes of every script Unicode lists (``confusables``: Armenian, Cherokee,
    Lisu, Coptic... letters that look like Latin ones) as the letters they look like, whitespace runs collapsed
    to one space, ends stripped, case folded: what a loop is judged on."""
    folded = fold(text)
    if not folded.isascii():
        # and the look-alikes' other case: Cherokee small letters ("\uab4e"...) casefold to the capitals UTS #39
        # lists, which a reader reads as Latin small capitals just the same
        folded = folded.translate(LOOK_ALIKE_TABLE).casefold().translate(LOOK_ALIKE_TABLE)
    return " ".join(folded.split()).casefold()


def canonical(text: str) -> str:
    """:func:`normalise`-d ``text`` with words written in digits and symbols read as letters
    (:func:`~rewardpipe.envs.ask_before_coding.words.read_leet`: "r3turn n3g@tive?" is "return negative?"), and
    text written upside down read the right way up (:func:`upright`), and numbers written in words as digits
    (:func:`~rewardpipe.envs.ask_before_coding.words.read_number_words`: "three seconds" is "3 seconds"): what the
    loop check compares. Numbers and numbers with units stay as they are."""
    return number_words(spelt_out(text))[0]


def spelt_out(text: str) -> str:
    """:func:`canonical` but for its numbers written in words (the text :func:`values_of` reads them in)."""
    return read_leet(normalise(upright(text)))


# Text "flipped" upside down (what online generators make): each letter as the letter turned half a turn, the
# whole text reversed. Turned letters with no plain reading of their own ("ɐ", "ǝ", "ɹ", "ʇ"...), and the plain
# letters that are each other turned (b/q, d/p, n/u, M/W), as the letters they show the right way up.
_TURNED = "ɐɔǝɟƃɥᴉɾʞɯɹʇʌʍʎ∀ᗺƆᗡƎℲ⅁ſ˥ԀΌᴚ⊥∩Λ⅄¿¡˙"
_UPRIGHT = str.maketrans(
    {
        **dict(zip(_TURNED, "acefghijkmrtvwyABCDEFGJLPQRTUVY?!.", strict=True)),
        **dict(zip("bqdpnuMW", "qbpdunWM", strict=True)),
    }
)
# What says a turn is upside down: the turned small letters (the capitals among _TURNED are also mathematical
# symbols, "∩" and "⊥", which a formula uses the right way up).
_TURNED_LETTER = re.compile(f"[{_TURNED[:15]}]")
#: Share of a turn's letters that must be turned ones for it to be read as written upside down: "ǝ" (a schwa)
#: in a pronunciation does not turn a turn over; "¿ɹoɹɹǝ uɐ ǝsᴉɐɹ ..." has one in two.
UPSIDE_DOWN_SHARE = 0.2


def upright(text: str) -> str:
    """``text`` the right way up when it is written upside down (at least UPSIDE_DOWN_SHARE of its letters
    turned ones: "¿ɹoɹɹǝ uɐ ǝsᴉɐɹ suoᴉʇɐɹnp ǝʌᴉʇɐƃǝu plnoɥS" is "Should negative durations raise an error?"),
    else ``text`` itself. Linear: one regex count and, when turned, one reversal and one translation."""
    if text.isascii():
        return text
    turned = len(_TURNED_LETTER.findall(text))
    if not turned or turned < UPSIDE_DOWN_SHARE * sum(map(len, _LETTER_RUN.findall(text))):
        return text
    return text[::-1].translate(_UPRIGHT)


_NOT_LETTER_OR_DIGIT = re.compile(r"[\W_]+")


def letters_of(text: str) -> str:
    """The letters and digits of a normalised turn and nothing else: the same question with its letters spaced
    out, dotted or hyphenated ("W h a t", "w.h.a.t") has the same letters as the plain one."""
    return _NOT_LETTER_OR_DIGIT.sub("", text)


_VOWELS = re.compile("[aeiou]+")
#: Shortest :func:`skeleton` that is a key: shorter ones ("Why?", "Is it ok?") are too few consonants to tell
#: two questions apart (and such turns are compared by their text anyway).
MIN_SKELETON_CHARS = 6


def skeleton(letters: str) -> str:
    """A turn's :func:`letters_of` without its vowels and with each run of one letter as one: the same question
    with its letters doubled or stretched ("SShhoouulldd", "Shoooould") or its vowels dropped ("Shld ngtv drtns
    rs n rrr?") still reads as the question, and has its consonants in the same order. Digits stay as they are
    ("100" is not "10"). Linear: one regex pass that cannot backtrack, then one step per run of one character."""
    return "".join(char if not char.isdigit() else "".join(run) for char, run in groupby(_VOWELS.sub("", letters)))


def scrambled_key(words: str) -> str:
    """A turn's :func:`words_of` with each word's letters sorted and the words sorted: the same question with the
    letters inside its words scrambled ("Slhuod nivgteae daniurtos rasie an error?", which a reader still reads)
    or its words in another order has the same key. A word with a digit keeps its order ("12" is not "21").
    Empty for a turn of fewer than MIN_REORDERED_WORDS words (too few to tell two questions apart)."""
    split = words.split()
    if len(split) < MIN_REORDERED_WORDS:
        return ""
    return " ".join(sorted(word if _HAS_DIGIT.search(word) else "".join(sorted(word)) for word in split))


_HAS_DIGIT = re.compile(r"\d")


def backwards_keys(text: str) -> tuple[str, str]:
    """The letters and digits of a normalised turn spelt backwards, whole and word by word: a turn whose letters
    are these of another ("?rorre na esiar", "rorre? na esiar") is that turn again."""
    letters = letters_of(text)
    return letters[::-1], "".join(word[::-1] for word in words_of(text).split())


def anchor_positions(text: str, k: int = ANCHOR_CHARS) -> dict[str, list[int]]:
    """Where each ``k``-character run of ``text`` starts (ascending): a turn's index, built once per turn."""
    positions: dict[str, list[int]] = {}
    for i in range(len(text) - k + 1):
        positions.setdefault(text[i : i + k], []).append(i)
    return positions


def _pairs(a: str, b: str, in_a: dict[str, list[int]], in_b: dict[str, list[int]]) -> list[tuple[int, int]]:
    """(position in a, position in b) of shared anchors, ordered by b then *descending* a (so a chain that
    increases strictly in a takes at most one pair per position of b). Only the runs both turns have are
    visited: two unrelated turns cost little more than their indexes."""
    scale = len(a) / len(b)
    pairs: list[tuple[int, int]] = []
    for run in in_a.keys() & in_b.keys():
        found = in_a[run]
        for j in in_b[run]:
            near = found
            if len(found) > MAX_CANDIDATES:
                centre = bisect_left(found, j * scale)
                start = min(max(0, centre - MAX_CANDIDATES // 2), len(found) - MAX_CANDIDATES)
                near = found[start : start + MAX_CANDIDATES]
            pairs.extend((i, j) for i in near)
    pairs.sort(key=lambda pair: (pair[1], -pair[0]))
    return pairs


def _chain(pairs: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The longest subsequence of ``pairs`` strictly increasing in both positions (patience sorting)."""
    tails: list[int] = []  # tails[length - 1]: the smallest a-position ending a chain of that length
    tail_index: list[int] = []  # index into pairs of that tail
    previous = [-1] * len(pairs)
    for index, (i, _) in enumerate(pairs):
        length = bisect_left(tails, i)
        if length == len(tails):
            tails.append(i)
            tail_index.append(index)
        else:
            tails[length] = i
            tail_index[length] = index
        previous[index] = tail_index[length - 1] if length else -1
    chain = []
    index = tail_index[-1] if tail_index else -1
    while index >= 0:
        chain.append(pairs[index])
        index = previous[index]
    chain.reverse()
    return chain


def matched_characters(
    a: str, b: str, in_a: dict[str, list[int]] | None = None, in_b: dict[str, list[int]] | None = None
) -> int:
    """Length of the common subsequence the chain of shared ANCHOR_CHARS-character runs spells out
    (``in_a``/``in_b``: the turns' :func:`anchor_positions`, when already built).

    Consecutive anchors on one diagonal overlap and extend the match by their offset; an anchor on another
    diagonal adds only the part of it past both previous ends (so the count is a real common subsequence).
    """
    k = ANCHOR_CHARS
    if min(len(a), len(b)) < k:
        return _gap_match(a, b)
    in_a = anchor_positions(a) if in_a is None else in_a
    in_b = anchor_positions(b) if in_b is None else in_b
    matched, end_a, end_b = 0, 0, 0
    for i, j in _chain(_pairs(a, b, in_a, in_b)):
        if i >= end_a and j >= end_b:
            matched += _gap_match(a[end_a:i], b[end_b:j])
        gained = min(i + k - max(i, end_a), j + k - max(j, end_b))
        if gained > 0:
            matched += gained
            end_a, end_b = i + k, j + k
    return matched + _gap_match(a[end_a:], b[end_b:])


def _gap_match(a: str, b: str) -> int:
    """LCS length of two short unmatched stretches (between anchors, or a turn shorter than an anchor);
    0 when either is longer than GAP_CHARS, so the cost stays bounded (GAP_CHARS x the other's length).

    Bit-parallel (Hyyro's form of Allison and Dix): one row of the LCS table is the bits of one int, and each
    character of the longer stretch updates it in a few integer operations instead of a Python loop over the
    shorter one (about 30 times faster; two unrelated turns are almost all gap, so this is the loop check's
    cost). A 0 bit in ``row`` marks a position of ``short`` where the LCS grew."""
    if not a or not b or min(len(a), len(b)) > GAP_CHARS or max(len(a), len(b)) > GAP_CHARS * 4:
        return 0
    short, other = (a, b) if len(a) <= len(b) else (b, a)
    where: dict[str, int] = {}
    for bit, char in enumerate(short):
        where[char] = where.get(char, 0) | (1 << bit)
    full = (1 << len(short)) - 1
    row = full
    for char in other:
        mask = where.get(char)
        if mask:
            matched = row & mask
            row = ((row + matched) | (row - matched)) & full
    return len(short) - row.bit_count()


def turn_similarity(a: str, b: str, above: float | None = None) -> float:
    """Similarity in [0, 1] of two turns (see the module docstring): 1.0 for turns equal after
    normalising, 0.0 when either is empty.

    With ``above``, a pair whose lengths alone keep it at or below ``above`` gets that length bound
    (``2 * shorter / (len a + len b)``, never less than the similarity) without being compared: the answer to
    "similarity > above" is the same.
    """
    return _similarity(normalise(a), normalise(b), above)


def _similarity(
    a: str,
    b: str,
    above: float | None = None,
    indexes: Callable[[], tuple[dict[str, list[int]], dict[str, list[int]]]] | None = None,
) -> float:
    """``turn_similarity`` of normalised turns; ``indexes`` builds their anchor indexes (only if compared)."""
    if a == b:
        return 1.0
    if not a or not b:
        return 0.0
    length_bound = 2.0 * min(len(a), len(b)) / (len(a) + len(b))
    if above is not None and length_bound <= above:
        return length_bound
    return 2.0 * matched_characters(a, b, *(indexes() if indexes else (None, None))) / (len(a) + len(b))


def words_of(text: str) -> str:
    """The words of a normalised turn, one space apart: its punctuation and markup dropped."""
    return " ".join("".join(c if c.isalnum() else " " for c in text).split())


def word_set(text: str) -> frozenset[str]:
    """The distinct words of a normalised turn, in no order, each as its
    :func:`~rewardpipe.envs.ask_before_coding.words.loop_key`: stemmed, a synonym as its group's concept, spelt
    backwards or forwards alike; stopwords, filler and framing words ("argument", "result") dropped, numbers
    and one-letter names kept (so "... for 0 seconds?" and "... for 1 seconds?" stay apart). Linear in the
    turn's length."""
    return _distinct_words(words_of(read_leet(text)))


def _distinct_words(words: str) -> frozenset[str]:
    """:func:`word_set` of a turn's :func:`words_of` (after reading leetspeak), for callers that have those."""
    kept = [(word, key) for word in words.split() if (key := loop_key(word)) is not None]
    found: set[str] = set()
    skip = False
    # Two words a synonym group names together ("below zero", "lower case") are that one concept.
    for index, (word, key) in enumerate(kept):
        if skip:
            skip = False
        elif index + 1 < len(kept) and (phrase := loop_phrase(word, kept[index + 1][0])) is not None:
            found.add(phrase)
            skip = True
        else:
            found.add(key)
    return frozenset(found)


def same_words(a: frozenset[str], b: frozenset[str], threshold: float = LOOP_SIMILARITY_THRESHOLD) -> bool:
    """Do two turns' :func:`word_set`\\ s share more than ``threshold`` of their union (the shorter having at
    least MIN_REORDERED_WORDS words)? The same question reworded by moving its words, not by changing them."""
    if min(len(a), len(b)) < MIN_REORDERED_WORDS or min(len(a), len(b)) <= threshold * max(len(a), len(b)):
        return False
    shared = len(a & b)
    return shared > threshold * (len(a) + len(b) - shared)


def repeats(a: str, b: str, threshold: float = LOOP_SIMILARITY_THRESHOLD) -> bool:
    """Are turns ``a`` and ``b`` a loop? More than ``threshold`` similar (:func:`turn_similarity`) on their
    normalised text or on their letters and digits alone (:func:`letters_of`: a repeat spelt out letter by
    letter), or the words of one (at least CONTAINED_MIN_CHARS characters of them) found verbatim, in order,
    inside the other's (after normalising: the same question padded with new text, or asked twice in one
    turn), or the same words in any order (:func:`same_words`: its clauses or its questions swapped). Never
    when they ask about different values (:func:`asks_other_values`)."""
    spelt_a, spelt_b = spelt_out(a), spelt_out(b)
    a, b = number_words(spelt_a)[0], number_words(spelt_b)[0]
    words_a, words_b = words_of(a), words_of(b)
    if asks_other_values(values_of(a, spelt_a), values_of(b, spelt_b), words_a, words_b):
        return False
    letters_a, letters_b = letters_of(a), letters_of(b)
    return (
        _similarity(a, b, threshold) > threshold
        or (bool(letters_a) and letters_a in backwards_keys(b))
        or (len(skeleton_a := skeleton(letters_a)) >= MIN_SKELETON_CHARS and skeleton_a == skeleton(letters_b))
        or (bool(scrambled_a := scrambled_key(words_a)) and scrambled_a == scrambled_key(words_b))
        or _contained(words_a, words_b)
        or _similarity(letters_a or a, letters_b or b, threshold) > threshold
        or _same_set(_distinct_words(words_a), _distinct_words(words_b), threshold)
    )


def _same_set(a: frozenset[str], b: frozenset[str], threshold: float) -> bool:
    return (a == b and len(a) >= MIN_SAME_SET_WORDS) or same_words(a, b, threshold)


def _contained(a: str, b: str) -> bool:
    shorter, longer = (a, b) if len(a) <= len(b) else (b, a)
    return len(shorter) >= CONTAINED_MIN_CHARS and f" {shorter} " in f" {longer} "  # whole words only


def find_loop(
    turns: Sequence[str],
    threshold: float = LOOP_SIMILARITY_THRESHOLD,
    new_details: Collection[int] = (),
    by_values: bool = True,
    kinds: Sequence[TurnKind] | None = None,
) -> tuple[int, int] | None:
    """The first pair ``(earlier, later)`` of turns that :func:`repeats` each other, or None.

    Every turn is compared with every earlier one: an exact repeat (the same letters and digits after
    normalising) through a dictionary of the turns seen, anywhere in the conversation; a near-duplicate (on
    the normalised text or on its letters and digits alone) among the previous ``LOOP_LOOKBACK_TURNS`` turns
    (every pair of an episode of that many turns and one more; the bound keeps a recorded transcript of
    thousands of turns linear). Pairs whose lengths alone keep them at or below the threshold are not
    compared by their characters (only by whether one's words are in the other's). The same words in another
    order (:func:`same_words`) are a loop among the lookback's turns, and the very same set of words
    (MIN_SAME_SET_WORDS or more) anywhere.

    A turn is never the later of a loop when it asks about other values than the earlier
    (:func:`asks_other_values`), unless ``by_values`` is False: with the simulator's bookkeeping the callers
    pass ``new_details`` instead, which says what each reply revealed (a value padded onto the same
    question, "Explain again? (2)", reveals nothing new and stays a loop there).
    A turn in ``new_details`` (the turns whose reply revealed a detail not revealed
    before) is a loop only as the same question again, exactly (the same letters, forwards or backwards) or
    padded with more text: a question alike another in most of its words that earned a new detail asked about
    something else ("Should the result be uppercase?" / "... lowercase?"), and one question of an earlier turn
    that asked several, asked again alone and answered now, was not answered then.

    Cost bound: comparing two turns by their characters costs up to MAX_CANDIDATES anchor pairs per
    character; at most COMPARED_CHARS_PER_TRANSCRIPT characters (the two turns' lengths, summed over the pairs
    compared) are compared so in one call, the pairs after that only by the linear checks (exact repeats,
    words contained, the same words). The cheapest pairs are compared first (passes capped by PAIR_COST_CAPS),
    so long turns cannot spend the budget before a short repeated question is compared: two padding turns of
    37,480 characters used to leave a misspelt repeat ("Shuold a negtaive ...") uncompared. An episode's turns
    never come near it.

    Which turns are compared (``kinds``, the turns' :class:`~rewardpipe.parsing.TurnKind`; read from the
    turns when not given): a commit is never a loop of a question, either way round. Committing the code a
    question showed ("Here is a draft: ... Should negative durations raise?"), revised or unchanged after the
    answer, is what asking first is for; repeated questions, repeated commits and repeated statements are
    loops as before. Questions are compared a second time as the simulators read them
    (:func:`~rewardpipe.envs.ask_before_coding.questions.read_as_asked`: the prose without fenced blocks or
    inline code, of inline code only its values and exact names), so junk in a span or a block in the middle
    of a repeated question, which the simulator does not read and answers "As I said", does not make it new.
    """
    if kinds is None and any("`" in turn or "~" in turn for turn in turns):
        kinds = [classify_turn(turn) for turn in turns]  # without code or inline code, no kind changes anything
    budget = _Budget(COMPARED_CHARS_PER_TRANSCRIPT)
    spelt = [spelt_out(turn) for turn in turns]
    normalised = [number_words(text)[0] for text in spelt]
    # The cheapest pairs are compared by anchoring first: one pass per cap on a pair's cost, each comparing only
    # the pairs the passes before could not afford (their verdicts kept), so long turns (padding) cannot spend the
    # budget before a short repeated question is compared.
    for cap in PAIR_COST_CAPS:
        budget.cap = cap
        found = _find_loop_within(turns, kinds, normalised, spelt, threshold, new_details, by_values, budget)
        if found is not None or not budget.skipped:
            return found
        budget.skipped = False
    return None


class _Budget:
    """The characters left to compare by anchoring in one :func:`find_loop` call, the cap of the current pass
    on one pair's cost, whether the pass skipped a pair above it, and the verdicts of the pairs compared."""

    __slots__ = ("cap", "left", "seen", "skipped")

    def __init__(self, left: int) -> None:
        self.left = left
        self.cap: int | None = None
        self.skipped = False
        self.seen: dict[tuple[str, str], bool] = {}


#: The passes of :func:`find_loop`: the most a pair may cost (the two turns' lengths) to be compared by anchoring
#: in each (None: any pair the budget still affords).
PAIR_COST_CAPS: tuple[int | None, ...] = (2_000, 16_000, None)


def _find_loop_within(
    turns: Sequence[str],
    kinds: Sequence[TurnKind] | None,
    normalised: list[str],
    spelt: list[str],
    threshold: float,
    new_details: Collection[int],
    by_values: bool,
    budget: _Budget,
) -> tuple[int, int] | None:
    """One pass of :func:`find_loop`, comparing by anchoring the pairs ``budget`` allows (``spelt``: the turns
    as :func:`spelt_out` reads them, ``normalised`` the same with their number words as digits)."""
    classes = list(kinds) if kinds is not None else [None] * len(turns)
    values = [values_of(text, spelt_text) for text, spelt_text in zip(normalised, spelt, strict=True)]
    found = _find_loop(
        normalised,
        list(values),
        classes,
        _kinds_may_loop,
        threshold,
        new_details,
        by_values,
        budget,
    )
    if found is not None or kinds is None:
        return found
    # The questions as the simulators read them: a turn with code or inline code read without it, compared with
    # every other question (two turns read as written were compared above).
    read: list[str | None] = [None] * len(turns)
    changed: list[bool | None] = [None] * len(turns)
    for turn, (text, kind) in enumerate(zip(turns, kinds, strict=True)):
        if kind is not TurnKind.QUESTION:
            continue
        read[turn], changed[turn] = normalised[turn], False
        if "`" in text or "~" in text:
            prose, spans = read_as_asked(text)
            spelt_reading = spelt_out(prose)
            reading = number_words(spelt_reading)[0]
            if reading != normalised[turn]:
                read[turn], changed[turn] = reading, True
                forwards, backwards = values_of(reading, spelt_reading)
                extra = _inline_literals(spans)
                values[turn] = (forwards | extra, backwards | extra)
    if not any(changed):
        return None
    # A question whose reply revealed a new detail was another question as the simulator read it.
    return _find_loop(read, values, changed, _one_read_anew, threshold, new_details, by_values, budget, True)


def _kinds_may_loop(earlier: object, later: object) -> bool:
    """A commit is never a loop of a question, nor a question of a commit."""
    return {earlier, later} != {TurnKind.QUESTION, TurnKind.COMMIT}


def _one_read_anew(earlier: object, later: object) -> bool:
    """Two questions both read as written were compared already: one of them must read otherwise."""
    return bool(earlier or later)


def _inline_literals(spans: str) -> frozenset[str]:
    """The values of inline code as :func:`literals`: its values and exact names (what the simulators read of it)
    and the literals inside it (a call's arguments, quoted strings: ``format_duration(yes)`` asks about ``yes``).
    Plain words are no value: junk in a span asks about nothing."""
    read = sorted(inline_values(spans))
    named = literals(" ".join(value if _PLAIN_NUMBER.fullmatch(value) else f"`{value}`" for value in read))
    return named | literals(canonical(spans))


_PLAIN_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _find_loop(
    normalised: Sequence[str | None],
    values: Sequence[tuple[frozenset[str], frozenset[str]]],
    classes: Sequence[object],
    compatible: Callable[[object, object], bool],
    threshold: float,
    new_details: Collection[int],
    by_values: bool,
    budget: _Budget,
    new_never_repeats: bool = False,
) -> tuple[int, int] | None:
    """:func:`find_loop` over canonical turns (None: a turn left out), a pair compared only when ``compatible``
    says its two turns' ``classes`` may loop; ``budget`` holds the characters left to compare by anchoring (and
    the pass's cap on one pair's cost).
    ``new_never_repeats``: a turn in ``new_details`` is never the later of a loop (the simulator read it as
    another question: it answered a new detail)."""
    # The first turn of each class with a key: a later turn matches the first of a class it may loop with.
    seen: dict[str, dict[object, int]] = {}
    words = [words_of(text) if text is not None else "" for text in normalised]
    sets = [_distinct_words(text_words) for text_words in words]
    seen_sets: dict[tuple[frozenset[str], tuple[frozenset[str], frozenset[str]]], dict[object, int]] = {}
    # A turn with no letter or digit at all ("?", "...") is keyed by its normalised text instead.
    letters = [(letters_of(text) or text) if text is not None else "" for text in normalised]
    # The same letters doubled, stretched or without their vowels: a key like the letters' (not for a turn whose
    # reply revealed a new detail, as the same words in another order are not).
    skeletons = [skeleton(turn_letters) for turn_letters in letters]
    seen_skeletons: dict[str, dict[object, int]] = {}
    # The same words with the letters inside them scrambled, or in another order: a key too (the same condition).
    scrambled = [scrambled_key(text_words) for text_words in words]
    seen_scrambled: dict[str, dict[object, int]] = {}
    # Each turn's anchors, of its text and of its letters, built once (only the lookback's kept).
    indexes: dict[tuple[int, bool], dict[str, list[int]]] = {}

    def index(turn: int, of_letters: bool = False) -> dict[str, list[int]]:
        if (turn, of_letters) not in indexes:
            indexes[turn, of_letters] = anchor_positions(letters[turn] if of_letters else normalised[turn] or "")
        return indexes[turn, of_letters]

    def first(table: dict[Any, dict[object, int]], key: Any, later: int) -> int | None:
        firsts = table.get(key, {})
        return min((turn for kind, turn in firsts.items() if compatible(kind, classes[later])), default=None)

    def similar(first: str, second: str, pair: Callable[[], tuple[dict, dict]]) -> bool:
        if first == second:
            return True
        if not first or not second or 2.0 * min(len(first), len(second)) / (len(first) + len(second)) <= threshold:
            return False  # the length bound alone keeps it at or below: nothing to compare
        cost = len(first) + len(second)
        if (first, second) in budget.seen:
            return budget.seen[first, second]
        if budget.cap is not None and cost > budget.cap:
            budget.skipped = True  # compared in a later pass, once the cheaper pairs have been
            return False
        if cost > budget.left:
            return False
        budget.left -= cost
        verdict = budget.seen[first, second] = _similarity(first, second, threshold, pair) > threshold
        return verdict

    def differ(earlier: int, later: int) -> bool:
        return by_values and asks_other_values(values[earlier], values[later], words[earlier], words[later])

    def match(later: int, text: str, new: bool) -> int | None:
        """The earlier turn ``later`` repeats, or None."""
        if (earlier := first(seen, letters[later], later)) is not None and not differ(earlier, later):
            return earlier
        for key in backwards_keys(text) if letters_of(text) else ():  # the same letters backwards
            if (earlier := first(seen, key, later)) is not None and not differ(earlier, later):
                return earlier
        if not new and (earlier := first(seen_sets, (sets[later], values[later]), later)) is not None:
            return earlier
        if (
            not new
            and len(skeletons[later]) >= MIN_SKELETON_CHARS
            and (earlier := first(seen_skeletons, skeletons[later], later)) is not None
            and not differ(earlier, later)
        ):
            return earlier
        if (
            not new
            and scrambled[later]
            and (earlier := first(seen_scrambled, scrambled[later], later)) is not None
            and not differ(earlier, later)
        ):
            return earlier
        for earlier in range(max(0, later - LOOP_LOOKBACK_TURNS), later):
            earlier_text = normalised[earlier]
            if earlier_text is None or not compatible(classes[earlier], classes[later]) or differ(earlier, later):
                continue
            pair = lambda first=earlier, second=later: (index(first), index(second))  # noqa: E731
            letter_pair = lambda first=earlier, second=later: (index(first, True), index(second, True))  # noqa: E731
            # A turn that earned a new detail is a loop inside a longer turn only as the earlier question padded
            # ("Explain again? (2)"), never as one question of an earlier turn that asked several, re-asked
            # because the reply answered another of them (round twelve: charged -0.5 for asking what was not
            # answered).
            if _contained(words[earlier], words[later]) and not (new and len(words[later]) < len(words[earlier])):
                return earlier
            if not new and (
                same_words(sets[earlier], sets[later], threshold)
                or similar(earlier_text, text, pair)
                or similar(letters[earlier], letters[later], letter_pair)
            ):
                return earlier
        return None

    for later, text in enumerate(normalised):
        if text is None:
            continue
        new = later in new_details
        for of_letters in (False, True):
            indexes.pop((later - LOOP_LOOKBACK_TURNS - 1, of_letters), None)
        if not (new and new_never_repeats) and (earlier := match(later, text, new)) is not None:
            return earlier, later
        seen.setdefault(letters[later], {}).setdefault(classes[later], later)
        if len(sets[later]) >= MIN_SAME_SET_WORDS:
            seen_sets.setdefault((sets[later], values[later]), {}).setdefault(classes[later], later)
        if len(skeletons[later]) >= MIN_SKELETON_CHARS:
            seen_skeletons.setdefault(skeletons[later], {}).setdefault(classes[later], later)
        if scrambled[later]:
            seen_scrambled.setdefault(scrambled[later], {}).setdefault(classes[later], later)
    return None
