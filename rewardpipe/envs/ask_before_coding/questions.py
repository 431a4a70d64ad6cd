"""What a clarifying question asks about (:mod:`.replies` judges what a reply says).

Shared by the user simulators (which decide what to reveal) and the ask-before-coding reward (which pays only
for questions that asked something): one rule, so a turn the simulator would not answer is never paid as a
question. Pure text functions, no I/O.

The rule: a question's *subject* is the content words of its prose (stemmed, no stopwords), minus words that
name no subject (filler such as "explain", "again", "clarify", "anything"), minus the generic cues that ask
for the requirements in general ("any other requirements / details / constraints / edge cases?"), minus code
(fenced blocks and inline spans) and the function's own name. A question with neither a subject nor a
generic cue asks nothing specific: "?", "ok?", "can you explain again?", "format_duration?". So does a
question that merely restates the request (its subject is mostly the request's own words, and it adds none
of its own).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from rewardpipe.envs.ask_before_coding.words import (  # noqa: F401 - STOPWORDS, FILLER, GENERIC_CUES: this API
    _INLINE_CODE,
    COUNT_WORDS,
    FILLER,
    FRAMING,
    GENERIC_CUES,
    QUALIFIERS,
    STOPWORDS,
    content_words,
    fold,
    key_tokens,
    matching_words,
    phrase_reading,
    read_words,
)
from rewardpipe.parsing import QUESTION_MARKS, parse_turn

# The simulators' fixed replies that reveal nothing (a question that asked nothing specific, matched no
# detail, came after every detail was told, or a turn that was not a question). Kept here, beside the
# rule, so the reward can recognise a recorded non-answer without importing the simulators.
NOTHING_MATCHES = (
    "That is up to you.",
    "I don't have a preference there; use your judgement.",
    "Whatever you think is sensible.",
)
NOTHING_LEFT = "I think I've told you everything that matters; the rest is up to you."
NOT_A_QUESTION = ("Okay.", "Sounds good.", "Go ahead.")
ASK_SOMETHING_SPECIFIC = (
    "What would you like to know? Ask me about something specific.",
    "Could you be more specific about what you want to know?",
    "I'm not sure what you are asking; which part is unclear?",
)
NON_ANSWERS = frozenset(
    " ".join(reply.split()).lower()
    for reply in (*NOTHING_MATCHES, NOTHING_LEFT, *NOT_A_QUESTION, *ASK_SOMETHING_SPECIFIC)
)


def is_non_answer(reply: str) -> bool:
    """True for a reply that is one of the simulators' fixed replies revealing nothing."""
    return " ".join(fold(reply).split()).lower() in NON_ANSWERS


# A question whose subject words are mostly the request's own words restates the request: it asks nothing new.
RESTATEMENT_OVERLAP = 0.6


@dataclass(frozen=True)
class QuestionSubject:
    """What a question asks about: its specific words (no stopwords, filler, generic cues, code, or the
    function's name) and whether it asks for the requirements in general."""

    words: frozenset[str]
    generic: bool

    @property
    def asks_nothing(self) -> bool:
        """True for a content-free question ("?", "ok?", "can you explain again?", the request echoed back)."""
        return not self.words and not self.generic


# An identifier-like run (a function's name is one): matched without backtracking, one pass.
_IDENTIFIER = re.compile(r"[A-Za-z0-9_]+")


# A number in a question's prose, with its decimal part (one pass: the optional group starts with a ".").
_NUMBER = re.compile(r"\d+(?:\.\d+)?", re.ASCII)
# A minus sign (ASCII or U+2212) right before a digit and after no word, number or closing bracket: a negative
# number ("-5", "format_duration(-5)", "`-1`"), not a subtraction ("5-3", "n - 1") or a range ("2-5", "UTC-5").
_NEGATIVE_NUMBER = re.compile(r"(?<![\w.)\]}])[-\u2212]\d")
#: What a negative number asks about: negatives ("Is -5 valid?" is "Is a negative duration valid?"), as a
#: word the spec's "A negative duration ..." and the synonyms ("below zero", "minus") share.
NEGATIVE = "negativ"


#: Verbs of the programmer's own next move ("Can I start?", "Shall we run it?", "Let me submit?"): right after "I",
#: "we" or "me" they ask leave to go on, not about the program, though a spec item may use the same word ("the
#: start date", "runs of spaces"). Only that verb goes: what it is said of stays ("Should I start counting from
#: the next business day?" asks about counting and business days).
_OWN_MOVES = (
    "start|begin|proceed|continue|go|run|submit|commit|send|write|code|implement|try|test|finish|execute|launch|ship"
)
_OWN_MOVE = re.compile(
    rf"\b(?:i|we|me)(?:['\u2019](?:ll|d))?\s+(?:(?:just|now|then|first|finally|already)\s+)?"
    rf"(?:go\s+ahead\s+and\s+)?(?:{_OWN_MOVES})(?:s|ed|ing|ning|ted|ting)?\b(?:\s+ahead\b)?",
    re.IGNORECASE,
)
# "one" as a pronoun ("Which one?", "this one"), where it names no number: "one hour" and "1" still do.
_PRONOUN_ONE = re.compile(r"\b(?:which|this|that|each|either|any|the\s+other)\s+one\b", re.IGNORECASE)
#: Where "case" means an instance, not letter case ("What's the use case?", "Test cases?", "In that case, ok?", "Is
#: that the case?" told "matching is case-insensitive" on 9 bundled tasks): after a noun it makes a compound with,
#: after "in" (and a determiner), and as what a statement is said to be ("is that the case", "if that's the case").
#: The word "case" goes, what the instance is of stays ("In the case of an empty list?" asks about empty lists);
#: letter case is asked as before ("Does case matter?", "Upper case?", "Is the case preserved?"). ("edge cases" and
#: their kin are read apart, as the generic cue: :data:`_EDGE_KIND_CASES`.)
_INSTANCE_COMPOUNDS = frozenset(
    (
        "use",
        "test",
        "worst",
        "best",
        "base",
        "corner",
        "special",
        "general",
        "typical",
        "common",
        "average",
        "normal",
        "simple",
        "trivial",
        "real",
        "business",
        "failure",
        "happy",
        "extreme",
        "boundary",
        "unit",
        "example",
        "sample",
        "border",
        "limit",
        "odd",
        "rare",
    )
)
_IN_DETERMINERS = frozenset(
    (
        "any",
        "that",
        "this",
        "which",
        "each",
        "either",
        "every",
        "such",
        "some",
        "no",
        "the",
        "whichever",
        "whatever",
        "most",
        "many",
    )
)
_THAT = frozenset(("that", "this", "it", "which"))
_COPULAS = frozenset(("is", "was", "isn't", "wasn't"))
_CASE_ADVERBS = frozenset(("not", "really", "still", "always"))
#: How far before a "case" its reading is decided: the few words before it.
_CASE_CONTEXT = 48
_CASE = re.compile(r"\bcases?\b", re.IGNORECASE)
_PLAIN_WORD = re.compile(r"[a-z']+")


def _is_an_instance(before: list[str]) -> bool:
    """Whether "case" after the words ``before`` (lower case, "'" for apostrophes) means an instance."""
    last = before[-1] if before else ""
    if last in _INSTANCE_COMPOUNDS or last == "in" or (last in _IN_DETERMINERS and before[-2:-1] == ["in"]):
        return True
    if last != "the":
        return False
    said = before[:-1]
    if said and said[-1] in _CASE_ADVERBS:
        said = said[:-1]
    # "is that the case" / "that's the case", "that is the case"
    return (said[-1:] != [] and said[-1] in {f"{that}'s" for that in _THAT}) or (
        len(said) >= 2
        and ((said[-2] in _COPULAS and said[-1] in _THAT) or (said[-2] in _THAT and said[-1] in ("is", "was")))
    )


#: "case" after a word for an unusual instance ("Any edge cases?", "Special cases?", "Corner case?") asks for the
#: requirements in general, as "edge cases" always did: the pair is read as the generic cue "edge". Before, "case" there
#: was letter case ("Any edge cases?" told "matching is case-insensitive" on a task that had it, whatever else it had)
#: and "Special cases?" or "Corner cases?" asked nothing, though each is the same real question.
_EDGE_KIND_CASES = re.compile(
    r"\b(?:edge|corner|special|boundary|extreme|border|limit|limiting|tricky|unusual|odd|rare|weird|pathological|"
    r"degenerate|exceptional|awkward|niche)[\s\-]{1,8}cases?\b",
    re.IGNORECASE,
)


def _without_case_as_instance(prose: str) -> str:
    """``prose`` without the word "case" where it means an instance (:data:`_INSTANCE_COMPOUNDS`). Linear: one
    pass for the word, then a bounded look at the few words before each."""
    if "case" not in prose.lower():
        return prose
    prose = _EDGE_KIND_CASES.sub(" edge ", prose)
    parts, at = [], 0
    for match in _CASE.finditer(prose):
        window = prose[max(0, match.start() - _CASE_CONTEXT) : match.start()].lower().replace("\u2019", "'")
        if _is_an_instance(_PLAIN_WORD.findall(window)[-4:]):
            parts.append(prose[at : match.start()])
            at = match.end()
    parts.append(prose[at:])
    return " ".join(parts)


def _subject_words(text: str, entry_point: str = "") -> set[str]:
    """Content words of ``text``'s prose: no fenced code, not the function's name, not the programmer's own next
    move (:data:`_OWN_MOVE`), a pronoun "one" or "case" as an instance (:func:`_without_case_as_instance`); of its
    inline code spans, only the values and exact names (``format_duration(-5)``, ``ValueError``), never their words."""
    prose, spans = read_as_asked(text)
    prose = _PRONOUN_ONE.sub(lambda m: m.group()[: -len("one")], _OWN_MOVE.sub(" ", prose))
    prose = _without_case_as_instance(prose)
    if entry_point:
        # The name as a whole identifier, in any case (a token-by-token pass: linear in the prose however
        # long the name is, where a search for the name at every position would multiply the two).
        name = entry_point.lower()
        prose, spans = (
            _IDENTIFIER.sub(lambda m: " " if m.group().lower() == name else m.group(), part) for part in (prose, spans)
        )
    # A number is a subject however short ("What if the input is 0?", "What about 1.5?"): content_words
    # drops one-character words, and cuts "1.5" in two. Its sign is one too: "What should format_duration(-5)
    # return?" asks about negatives (its words alone, {"5"}, matched no detail, or the wrong one).
    # A phrase a synonym group names ("below zero", "less than zero", "leading zeros") is that concept, and its count
    # is no subject of its own: "zero" alone matched the zero-padding detail before the detail of negatives the
    # phrase asks about. Its other words stay ("upper case" still asks about case).
    content, phrased, phrase_words = read_words(prose)
    counts = {word for word in phrase_words if word in COUNT_WORDS or word.isdigit()}
    words = ((content | set(_NUMBER.findall(prose))) - counts) | phrased | inline_values(spans)
    if _NEGATIVE_NUMBER.search(prose) or _NEGATIVE_NUMBER.search(spans):
        words.add(NEGATIVE)
    return words


def read_as_asked(text: str) -> tuple[str, str]:
    """What the simulators read of a turn: ``(prose, spans)``, its prose folded (:func:`fold`) with its fenced
    blocks and inline code spans left out, and the text of those spans, of which only the values and exact
    names count (:func:`inline_values`). The loop check compares questions as read here too
    (:func:`~rewardpipe.envs.ask_before_coding.similarity.find_loop`): junk in a span or a block in the middle
    of a repeated question is not read, so it does not make the question new."""
    whole = fold(parse_turn(text).prose)
    # Inline code: a call on a value ("What should `format_duration(-5)` return?") or a name ("`ValueError` or
    # `TypeError`?") asks about that value or name. Its plain words stay out (a span must not carry a
    # dictionary), but the values and exact tokens of every span count, as they would in prose.
    return _INLINE_CODE.sub(" ", whole), " ".join(match.group()[1:-1] for match in _INLINE_CODE.finditer(whole))


def inline_values(spans: str) -> set[str]:
    """The values and exact names (:func:`key_tokens`) of inline code spans' text, the only part of them read."""
    return set(_NUMBER.findall(spans)) | key_tokens(spans)


def question_subject(question: str, prompt: str = "", entry_point: str = "") -> QuestionSubject:
    """The subject of an assistant turn, judged on its prose only: words inside code blocks or inline code
    spans ask nothing (they would let a turn stuff a dictionary into a fence), and neither does the name of
    the function the request already gave.

    A question whose words are mostly the request's own words (shared words >= RESTATEMENT_OVERLAP of the
    union of both) echoes the request: the echoed words ask nothing, so its subject is only what it adds to
    the request. The request echoed back asks nothing; the request quoted around a real question ("What
    should format_duration return for a duration given in seconds as a human-readable string when the
    seconds are negative?") asks about what it adds ("negative"), and is answered about that alone.
    """
    words = _subject_words(question, entry_point)
    generic = bool(words & GENERIC_CUES)
    subject = words - GENERIC_CUES - FILLER - QUALIFIERS
    if prompt and subject and not generic:
        request = _subject_words(prompt, entry_point) - FILLER
        if request and len(subject & request) / len(subject | request) >= RESTATEMENT_OVERLAP:
            subject -= request
    if subject <= COUNT_WORDS | FRAMING:
        # how many of nothing ("One?", "Two?"), or a question's frame alone ("What should the result be?", "Numbers?"):
        # what a count is of, or what is asked of the result, names the subject
        subject = set()
    return QuestionSubject(frozenset(subject), generic)


@lru_cache(maxsize=1024)
def _item_words(spec: tuple[str, ...]) -> tuple[frozenset[str], ...]:
    """Content words of each spec item and the concepts its phrases name, read as a question's are
    (:func:`~rewardpipe.envs.ask_before_coding.words.matching_words`; a task's spec is matched against every
    question asked about it)."""
    return tuple(matching_words(content_words(item) | phrase_reading(item)[0]) for item in spec)


def best_spec_match(
    words: Iterable[str], spec: Sequence[str], revealed: set[int] | Sequence[int] = ()
) -> tuple[int | None, bool]:
    """(index, already_revealed) of the spec item sharing the most IDF-weighted subject words, or (None, False).

    The most relevant item overall answers the question; a revealed item that matches *better* is restated
    rather than leaking a weaker-matching new detail the question did not ask about. Ties go to the
    unrevealed item, then to spec order. Words are compared as synonym groups' concepts
    (:func:`~rewardpipe.envs.ask_before_coding.words.matching_words`): "throw an exception" asks about a detail
    that "raises ValueError", "bad input" about "invalid input".
    """
    words = set(matching_words(frozenset(words)))
    if not words or not spec:
        return None, False
    item_words = _item_words(tuple(spec))
    doc_freq = {w: sum(1 for iw in item_words if w in iw) for w in words}

    def score(i: int) -> float:
        shared = words & item_words[i]
        if shared <= COUNT_WORDS:
            return 0.0  # only a count in common ("one" of "one hour"): the question did not ask about that item
        return sum(math.log(1 + len(spec) / doc_freq[w]) for w in shared)

    unrevealed = [i for i in range(len(spec)) if i not in revealed]
    best_new = max(unrevealed, key=score, default=None)
    best_old = max(sorted(i for i in revealed if 0 <= i < len(spec)), key=score, default=None)
    new_score = score(best_new) if best_new is not None else 0.0
    old_score = score(best_old) if best_old is not None else 0.0
    if best_new is not None and new_score > 0 and new_score >= old_score:
        return best_new, False
    if best_old is not None and old_score > 0:
        return best_old, True
    return None, False


#: The most parts of a turn read one by one for the question it asks first (:func:`asked_match`); a turn with more
#: question marks is read whole beyond them (a hostile turn of thousands of "?" costs no more than a few).
MAX_QUESTION_PARTS = 16


def question_parts(text: str) -> list[str]:
    """The prose of ``text`` cut after each run of question marks (not one inside an inline code span: "`x?`" asks
    nothing), in order, each with a letter or digit in it; what follows the last mark is a part too. At most
    MAX_QUESTION_PARTS parts: the first ones. Linear: one regex pass that cannot backtrack
    (a run of marks is one cut, so a flood of "?" is one step)."""
    prose = parse_turn(text).prose
    # the spans blanked out at their own length, so the cuts found in ``masked`` are the prose's
    masked = _INLINE_CODE.sub(lambda span: "`" * len(span.group()), prose) if "`" in prose else prose
    parts: list[str] = []
    start = 0
    for cut in _QUESTION_END.finditer(masked):
        part = prose[start : cut.end()]
        start = cut.end()
        if _ALNUM.search(part):
            parts.append(part)
            if len(parts) == MAX_QUESTION_PARTS:
                return parts  # the rest is read with the whole turn (:func:`asked_match`), not again on its own
    if _ALNUM.search(prose, start):
        parts.append(prose[start:])
    return parts


_QUESTION_END = re.compile(f"[{re.escape(QUESTION_MARKS)}]+")
_ALNUM = re.compile(r"[^\W_]")


def asked_match(
    question: str,
    spec: Sequence[str],
    revealed: set[int] | Sequence[int] = (),
    prompt: str = "",
    entry_point: str = "",
) -> tuple[QuestionSubject, int | None, bool]:
    """(the subject a reply answers, the detail it matches, whether that detail was revealed already:
    :func:`best_spec_match`) for an assistant turn. One reply states one detail, and a turn of several questions
    ("Should negatives raise an error? How are fractional seconds handled?") is answered about its first one that
    asks for something not told yet (a new detail, or the requirements in general), not about whichever detail
    the words of all its questions together match best: that picked a later question's detail where its words
    happened to weigh more ("So negatives raise ValueError, right? And fractions?" confirms, then asks: it is
    answered about fractions). A turn whose questions all ask what was told is answered about the first of them (a
    restatement); one whose questions ask nothing one by one, or that has a single question, is read whole."""
    parts = question_parts(question)
    told: tuple[QuestionSubject, int | None, bool] | None = None
    if len(parts) > 1:
        for part in parts:
            subject = question_subject(part, prompt, entry_point)
            if subject.asks_nothing:
                continue
            index, restated = best_spec_match(subject.words, spec, revealed)
            if (index is not None and not restated) or subject.generic:
                return subject, index, restated
            if index is not None and told is None:
                told = subject, index, restated
    if told is not None:
        return told
    subject = question_subject(question, prompt, entry_point)
    index, restated = best_spec_match(subject.words, spec, revealed)
    return subject, index, restated


# Moved to :mod:`.replies` (what a reply says), kept importable here for code written against this module.
_MOVED_TO_REPLIES = {
    "reveals_in": "reveals_in",
    "answered_turns_in": "answered_turns_in",
    "_would_reveal": "would_reveal",
}


def stated_spec_items(reply: str, spec: Sequence[str], revealed: set[int] | Sequence[int] = ()) -> list[int]:
    """The not-yet-revealed spec items a free-text reply states, best first
    (:func:`rewardpipe.envs.ask_before_coding.replies.stated_details`, without the request at hand)."""
    from rewardpipe.envs.ask_before_coding.replies import stated_details

    return stated_details(reply, spec, "", revealed)


def revealed_spec_item(reply: str, spec: Sequence[str], revealed: set[int] | Sequence[int] = ()) -> int | None:
    """The not-yet-revealed spec item a free-text reply states best, or None."""
    stated = stated_spec_items(reply, spec, revealed)
    return stated[0] if stated else None


def __getattr__(name: str) -> Any:
    if name in _MOVED_TO_REPLIES:
        from rewardpipe.envs.ask_before_coding import replies

        return getattr(replies, _MOVED_TO_REPLIES[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
