"""What a clarifying question asks about, and which hidden detail a reply states.

Shared by the user simulators (which decide what to reveal) and the ask-before-coding reward (which pays only
for questions that asked something): one rule, so a turn the simulator would not answer is never paid as a
question. Pure text functions, no I/O.

The rule: a question's *subject* is the content words of its prose (stemmed, no stopwords), minus words that
name no subject (filler such as "explain", "again", "clarify", "anything"), minus the generic cues that ask
for the requirements in general ("any other requirements / details / constraints / edge cases?"), minus code
(fenced blocks and inline spans) and the function's own name. A question with neither a subject nor a
generic cue asks nothing specific: "?", "ok?", "can you explain again?", "format_duration?". So does a
question that merely restates the request (its subject is mostly the request's own words).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from rewardpipe.parsing import TurnKind, parse_turn

if TYPE_CHECKING:  # pragma: no cover
    from rewardpipe.models import Message

STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "if",
        "then",
        "else",
        "of",
        "to",
        "in",
        "on",
        "at",
        "by",
        "for",
        "with",
        "from",
        "as",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "do",
        "does",
        "did",
        "doing",
        "have",
        "has",
        "had",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "there",
        "here",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "when",
        "where",
        "why",
        "how",
        "can",
        "could",
        "should",
        "would",
        "will",
        "shall",
        "may",
        "might",
        "must",
        "i",
        "you",
        "we",
        "they",
        "he",
        "she",
        "me",
        "my",
        "your",
        "our",
        "their",
        "us",
        "them",
        "not",
        "no",
        "yes",
        "so",
        "than",
        "too",
        "very",
        "just",
        "also",
        "any",
        "some",
        "all",
        "each",
        "every",
        "about",
        "into",
        "over",
        "under",
        "again",
        "further",
        "once",
        "only",
        "own",
        "same",
        "such",
        "both",
        "few",
        "more",
        "most",
        "other",
        "please",
        "thanks",
        "thank",
        "tell",
        "know",
        "want",
        "need",
        "like",
        "let",
        "lets",
        "ok",
        "okay",
        "sure",
        "before",
        "keep",
        "mind",
        "function",
        "write",
        "code",
        "program",
        "implement",
        "return",
        "returns",
        "returned",
        "value",
        "values",
        "input",
        "output",
        "give",
        "get",
        "make",
        "use",
        "should",
        "does",
        "do",
    ]
)

# Questions that ask for the task's requirements in general rather than about something specific. Stemmed below
# (after _stem is defined) so they compare equal to the stemmed words of a question.
_GENERIC_CUE_WORDS = [
    "requirement",
    "requirements",
    "detail",
    "details",
    "spec",
    "specs",
    "specification",
    "specifications",
    "constraint",
    "constraints",
    "expect",
    "expected",
    "expectation",
    "expectations",
    "edge",
    "assumption",
    "assumptions",
    "rule",
    "rules",
]
# ("edge" alone marks "edge cases" as generic: "case" must stay specific for questions about letter case.)

# Words that name no subject: a question made only of these and stopwords ("can you explain again?", "is that
# right?", "anything else?") asks nothing specific, so it earns no detail (and no asked_before_coding).
_FILLER_WORDS = [
    "explain",
    "explanation",
    "again",
    "mean",
    "meant",
    "clarify",
    "clarification",
    "elaborate",
    "repeat",
    "rephrase",
    "understand",
    "understood",
    "confirm",
    "sure",
    "right",
    "correct",
    "fine",
    "good",
    "great",
    "else",
    "anything",
    "something",
    "everything",
    "question",
    "questions",
    "help",
    "idea",
    "think",
    "thought",
    "thoughts",
    "opinion",
    "suggestion",
    "suggestions",
    "feedback",
    "say",
    "said",
    "thing",
    "things",
    "stuff",
    "exactly",
    "really",
    "hmm",
    "hmmm",
    "huh",
    "hello",
    "hi",
    "hey",
    "wait",
    "well",
    "uh",
    "uhm",
    "um",
    "umm",
    "er",
    "erm",
    "eh",
    "ah",
    "oh",
    "okay",
    "alright",
    "info",
    "information",
    "more",
    "context",
    "background",
    "catch",
    "special",
    "particular",
    "specific",
    "specifics",
    "preference",
    "prefer",
    "matter",
    "important",
    "behavior",
    "behaviour",
    "happen",
    "scenario",
    "situation",
    "approach",
    "handle",
    "deal",
    "way",
]
# (The second group asks for "more" without saying about what: "More info?", "Any more context?", "What's the
# catch?", "How should I approach this?". The rule-based simulator would say "that is up to you", but an LLM
# playing the user reads them as "tell me the requirements" and reveals a detail: as filler they reach
# neither simulator, so the two agree. Words a bundled spec item uses ("work", "look", "case") stay subjects.)

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
    return " ".join(reply.split()).lower() in NON_ANSWERS


# A question whose subject words are mostly the request's own words restates the request: it asks nothing new.
RESTATEMENT_OVERLAP = 0.6
# A reply states a spec item when it contains at least this share of the item's content words.
REVEAL_OVERLAP = 0.5


# A word is a whole run of letters and digits of any script (underscores split words: "snake_case"); only
# ASCII words are read. A word with a letter from another script is dropped whole, never cut into ASCII
# fragments: "Mоre infо?" spelt with Cyrillic "о" must not become the subject words "re" and "inf", which
# would send a filler question past the rule to an LLM user who reads it as "tell me the requirements".
_WORD = re.compile(r"[^\W_]+")
_INLINE_CODE = re.compile(r"`[^`\n]+`")


@lru_cache(maxsize=1 << 14)  # a pure function of one word; a run's vocabulary is small and repeats a lot
def _stem(word: str) -> str:
    """A tiny suffix stripper that maps a word's common forms to one key (name/names/named -> "nam").

    Both sides of a comparison go through it, so it only has to be consistent, not linguistic: "cases"
    and "case" must meet, which is why a final "e" goes too and "es" is only a suffix after s/x/z/ch/sh.
    """
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            if suffix == "es" and not word[:-2].endswith(("s", "x", "z", "ch", "sh")):
                suffix = "s"
            if suffix == "s" and word.endswith(("ss", "us", "is")):
                break
            word = word[: -len(suffix)]
            break
    if len(word) > 3 and word.endswith("e"):
        word = word[:-1]
    return word


GENERIC_CUES = frozenset(_stem(word) for word in _GENERIC_CUE_WORDS)
FILLER = frozenset(_stem(word) for word in _FILLER_WORDS)


def content_words(text: str) -> set[str]:
    return {_stem(w) for w in _WORD.findall(text.lower()) if w.isascii() and w not in STOPWORDS and len(w) > 1}


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


def _subject_words(text: str, entry_point: str = "") -> set[str]:
    """Content words of ``text``'s prose: no fenced code, no inline code spans, not the function's name."""
    prose = _INLINE_CODE.sub(" ", parse_turn(text).prose)
    if entry_point:
        prose = re.sub(rf"(?<![A-Za-z0-9_]){re.escape(entry_point)}(?![A-Za-z0-9_])", " ", prose, flags=re.I)
    return content_words(prose)


def question_subject(question: str, prompt: str = "", entry_point: str = "") -> QuestionSubject:
    """The subject of an assistant turn, judged on its prose only: words inside code blocks or inline code
    spans ask nothing (they would let a turn stuff a dictionary into a fence), and neither does the name of
    the function the request already gave. A question whose words are mostly the request's own words
    (shared words >= RESTATEMENT_OVERLAP of the union of both) restates the request and asks nothing either."""
    words = _subject_words(question, entry_point)
    generic = bool(words & GENERIC_CUES)
    subject = words - GENERIC_CUES - FILLER
    if prompt and subject and not generic:
        request = _subject_words(prompt, entry_point) - FILLER
        if request and len(subject & request) / len(subject | request) >= RESTATEMENT_OVERLAP:
            subject = set()
    return QuestionSubject(frozenset(subject), generic)


@lru_cache(maxsize=1024)
def _item_words(spec: tuple[str, ...]) -> tuple[frozenset[str], ...]:
    """Content words of each spec item (a task's spec is matched against every question asked about it)."""
    return tuple(frozenset(content_words(item)) for item in spec)


def best_spec_match(
    words: set[str] | frozenset[str] | Sequence[str], spec: Sequence[str], revealed: set[int] | Sequence[int] = ()
) -> tuple[int | None, bool]:
    """(index, already_revealed) of the spec item sharing the most IDF-weighted subject words, or (None, False).

    The most relevant item overall answers the question; a revealed item that matches *better* is restated
    rather than leaking a weaker-matching new detail the question did not ask about. Ties go to the
    unrevealed item, then to spec order.
    """
    words = set(words)
    if not words or not spec:
        return None, False
    item_words = _item_words(tuple(spec))
    doc_freq = {w: sum(1 for iw in item_words if w in iw) for w in words}

    def score(i: int) -> float:
        return sum(math.log(1 + len(spec) / doc_freq[w]) for w in words if w in item_words[i])

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


def stated_spec_items(reply: str, spec: Sequence[str], revealed: set[int] | Sequence[int] = ()) -> list[int]:
    """The not-yet-revealed spec items a free-text reply states (at least REVEAL_OVERLAP of each item's
    content words), the best stated first (ties in spec order)."""
    reply_words = content_words(reply)
    overlaps = []
    for i, item in enumerate(spec):
        if i in revealed:
            continue
        words = content_words(item)
        overlap = len(words & reply_words) / max(1, len(words))
        if overlap >= REVEAL_OVERLAP:
            overlaps.append((-overlap, i))
    return [i for _, i in sorted(overlaps)]


def revealed_spec_item(reply: str, spec: Sequence[str], revealed: set[int] | Sequence[int] = ()) -> int | None:
    """The not-yet-revealed spec item a free-text reply states (at least half of its content words), or None."""
    stated = stated_spec_items(reply, spec, revealed)
    return stated[0] if stated else None


def answered_turns_in(messages: Sequence[Message], spec: Sequence[str]) -> frozenset[int]:
    """The assistant turns of :func:`reveals_in`."""
    return frozenset(turn for turn, _ in reveals_in(messages, spec))


def reveals_in(messages: Sequence[Message], spec: Sequence[str]) -> list[tuple[int, int]]:
    """``(assistant turn, spec index)`` for each assistant turn (0-based, among assistant turns) of a recorded
    conversation that was a real clarifying question: a question answered with a not-yet-revealed spec item.

    For transcripts scored without the simulator's own bookkeeping (``rewardpipe score``). A question counts
    when the user reply that follows states an unrevealed spec item (a rule-based reply is the item itself,
    an LLM reply is matched as the LLM-backed simulator matches it live), or — since a terse recorded reply
    ("Yes.") names nothing — when the rule-based simulator would have answered the question with an
    unrevealed item. A question that asks nothing specific never counts, whatever the recorded reply says.
    """
    answered: list[tuple[int, int]] = []
    revealed: set[int] = set()
    prompt = messages[0].content if messages and messages[0].role == "user" else ""
    turn = -1
    for position, message in enumerate(messages):
        if message.role != "assistant":
            continue
        turn += 1
        following = messages[position + 1] if position + 1 < len(messages) else None
        if following is None or following.role != "user" or parse_turn(message.content).kind is not TurnKind.QUESTION:
            continue
        subject = question_subject(message.content, prompt)
        if subject.asks_nothing:
            continue  # whatever the reply said, a content-free question asked for nothing
        index = revealed_spec_item(following.content, spec, revealed)
        if index is None:
            index = _would_reveal(subject, spec, revealed)
        if index is not None:
            revealed.add(index)
            answered.append((turn, index))
    return answered


def _would_reveal(subject: QuestionSubject, spec: Sequence[str], revealed: set[int]) -> int | None:
    """The item the rule-based simulator would newly reveal for this question, or None."""
    index, restated = best_spec_match(subject.words, spec, revealed)
    if index is not None and not restated:
        return index
    if subject.generic:
        return next((i for i in range(len(spec)) if i not in revealed), None)
    return None
