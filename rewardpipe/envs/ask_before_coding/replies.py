"""What a user's reply says: which hidden details it states, whether it answered at all, and what an
LLM-played user may say.

Three rules, shared by every path that pays for a question, so the paths agree:

* **stated details** (:func:`stated_details`): a reply states a hidden detail when it covers enough of the
  detail's *key content*: the concepts (:func:`~rewardpipe.envs.ask_before_coding.words.concepts`: stems
  compared on their first letters, a few synonym groups such as raise/throw or truncate/floor, exact tokens
  such as ``ValueError`` or ``H:MM:SS``) that the detail has and the request does not, weighted by how rare
  each is among the task's details. A paraphrase in other words is caught by its concepts, and a token
  only one detail has (``H:MM:SS``) states that detail on its own.
* **answered** (:func:`reply_informs`): a reply answers when it adds something: a concept that neither the
  question, the request nor an earlier reply had ("Negative durations raise ValueError."), or a yes/no
  (or a choice among the question's own options) to a question that asked for one ("Yes.", "Truncated.").
  A deferral ("up to you", "I'm not sure, use your judgement", "I haven't thought about that", "N/A", "TBD",
  "I'll think about it") is not an answer unless it also adds real content (its own tokens are none), and
  neither is a reply that only asks back ("Can you rephrase?"). Hedges and qualities any program should have
  (``VAGUE``: "Possibly.", "It depends.", "Make it robust.", "Handle it gracefully.") are no content, and a
  hedged or two-way yes/no ("Perhaps, perhaps not.", "Yes and no.") is no choice; "Probably not." is one.
* **what an LLM user may say** (:func:`vet_llm_reply`): at most one hidden detail per reply, enforced.
  A reply judged to state several details is replaced by the one the question asked about. A reply with
  anything the rules cannot attribute to the question, the request, the details already told and at most
  one new detail (a paraphrase the judge did not recognise, a detail made up) is replaced by what the
  rule-based user says, and so is any reply to a question that itself spells out several details (a "yes"
  would confirm them all). The LLM's words reach the policy only when every concept in them is accounted
  for. Text is read after :func:`~rewardpipe.envs.ask_before_coding.words.fold` (fullwidth, invisible,
  accented and look-alike letters as plain ones), and a reply with more than a few letters no rule can read
  (another script, letters spelt out one by one) is replaced too: what the rules cannot read, they cannot vet.

Each function is linear in the length of the texts (one pass over the words; per detail, set operations).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from rewardpipe.envs.ask_before_coding.questions import (
    RESTATEMENT_OVERLAP,
    QuestionSubject,
    _subject_words,
    asked_match,
    best_spec_match,
    is_non_answer,
    question_subject,
)
from rewardpipe.envs.ask_before_coding.words import (
    FILLER,
    GENERIC_CUES,
    _stem,
    concept,
    concepts,
    content_words,
    fold,
    key_tokens,
    unread_letters,
    unread_symbols,
)
from rewardpipe.parsing import QUESTION_MARKS, TurnKind, parse_turn

if TYPE_CHECKING:  # pragma: no cover
    from rewardpipe.models import Message

#: New concepts a deferring reply must add, without an exact token, to count as an answer all the same.
DEFERRAL_CONTENT = 3
#: A reply states a detail when it covers at least this (IDF-weighted) share of the detail's key content.
STATED_SHARE = 0.35
#: Letters an LLM user's reply may have that no rule reads (:func:`~.words.unread_letters`: another script,
#: letters spelt out one by one) before the reply is replaced: what the rules cannot read, they cannot vet.
MAX_UNREAD_LETTERS = 4
#: Characters an LLM user's reply may have in tokens without a letter or digit (:func:`~.words.unread_symbols`:
#: Morse, Braille, flag letters) before it is replaced. Prose has a few ("--", "->", "..."), a small table a
#: dozen or two; a sentence in such a code has one or more a letter.
MAX_UNREAD_SYMBOLS = 32

# Words of conversation that carry no requirement: yes/no, deferral, politeness. A reply made only of these
# (and of the question's own words) adds nothing; they never count against an LLM user's reply either.
_POLAR_WORDS = [
    "yes",
    "yeah",
    "yep",
    "yup",
    "nope",
    "nah",
    "correct",
    "exactly",
    "indeed",
    "absolutely",
    "definitely",
    "certainly",
    "sure",
    "course",
    "right",
    "true",
    "false",
    "always",
    "never",
    "affirmative",
    "agreed",
]
_CONVERSATION_WORDS = [
    "up",
    "decide",
    "decision",
    "decided",
    "judgement",
    "judgment",
    "whatever",
    "sensible",
    "reasonable",
    "choice",
    "choose",
    "call",
    "mind",
    "care",
    "fine",
    "idea",
    "unsure",
    "uncertain",
    "guess",
    "pick",
    "discretion",
    "flexible",
    "either",
    "way",
    "best",
    "think",
    "thought",
    "remember",
    "recall",
    "gut",
    "instinct",
    "feel",
    "free",
    "happy",
    "depend",
    "depends",
    "honestly",
    "really",
    "open",
    "good",
    "great",
    "question",
    "thanks",
    "thank",
    "please",
    "hope",
    "helps",
    "help",
    "note",
    "mean",
    "also",
    "well",
    "hi",
    "hello",
    "hey",
    "sorry",
    "much",
    "bit",
    "lot",
    "sense",
    "makes",
    "seems",
    "seem",
    "works",
    "work",
    "done",
    "go",
    "ahead",
    "sounds",
    "told",
    "everything",
    "nothing",
    "else",
    "rest",
    "fine",
    "detail",
    "details",
    "leave",
    "yours",
    "mine",
    "whichever",
    "anyway",
    "overall",
    "totally",
    "strong",
    "opinion",
    "particular",
    "preference",
    "prefer",
]
# Words *about the conversation* rather than the program: who would know or decide (team, expert, owner),
# where it is written (description, documentation, mentioned), knowing and being able (information,
# certain, unable, afraid), how hard or open it is (tricky, interesting, depends, assume). A reply made of
# these says nothing about what the code must do: "I'd have to check with my team.", "The task description
# has everything you need.", "I'm afraid I can't share more information." (A word some bundled task's
# hidden details use stays content: "above", "pass", "option", "point", "one", "accept", ...)
_META_WORDS = [
    "team",
    "colleague",
    "manager",
    "boss",
    "stakeholder",
    "department",
    "expert",
    "developer",
    "engineer",
    "someone",
    "somebody",
    "anyone",
    "anybody",
    "everyone",
    "nobody",
    "myself",
    "yourself",
    "task",
    "description",
    "specification",
    "specified",
    "spec",
    "document",
    "documentation",
    "docs",
    "instruction",
    "instructions",
    "mention",
    "mentioned",
    "previous",
    "previously",
    "said",
    "told",
    "practice",
    "practices",
    "convention",
    "conventions",
    "standard",
    "common",
    "sense",
    "usual",
    "typical",
    "instinct",
    "instincts",
    "trust",
    "clue",
    "info",
    "information",
    "confidential",
    "secret",
    "comment",
    "comments",
    "answer",
    "answers",
    "ask",
    "asking",
    "tricky",
    "interesting",
    "hard",
    "difficult",
    "complicated",
    "tough",
    "obvious",
    "approach",
    "implementation",
    "check",
    "checking",
    "back",
    "later",
    "figure",
    "able",
    "unable",
    "afraid",
    "unfortunately",
    "depend",
    "depending",
    "assume",
    "assumption",
    "something",
    "nothing",
    "both",
    "way",
    "ways",
    "however",
    "lol",
    "mate",
    "dunno",
    "idk",
    "haha",
    "know",
    "knowledge",
    "certain",
    "haven",
    "got",
    "come",
    "comes",
    "feeling",
    "feelings",
    "follow",
    "refer",
    "see",
    "test",
    "tests",
]
CONVERSATIONAL = (
    frozenset(concept(w) for w in (*_POLAR_WORDS, *_CONVERSATION_WORDS, *_META_WORDS)) | FILLER | GENERIC_CUES
)
_POLAR_START = frozenset(_POLAR_WORDS) | {"no", "not", "of"}  # "No.", "Not padded.", "Of course."

# Words that say how sure the user is, or how good any program should be, and never what this one must do:
# hedges (how likely, how often: "possibly", "it depends", "sometimes") and qualities every program is asked to
# have ("robust", "clean", "efficient", "gracefully", "properly"), with their adverbs and comparatives. A reply
# whose new words are only these names no value and no choice: "Possibly.", "Make it robust.", "Keep it
# simple.". Matched on whole words (stemmed), so "property" or "production" stay content.
_HEDGE_WORDS = [
    "possibly",
    "possible",
    "probably",
    "probable",
    "perhaps",
    "maybe",
    "likely",
    "unlikely",
    "presumably",
    "hopefully",
    "potentially",
    "arguably",
    "sometimes",
    "occasionally",
    "depends",
    "depending",
    "somewhat",
    "somehow",
    "ideally",
    "kind",
]
_QUALITY_WORDS = [
    "robust",
    "clean",
    "efficient",
    "fast",
    "quick",
    "speedy",
    "optimal",
    "simple",
    "careful",
    "graceful",
    "proper",
    "appropriate",
    "good",
    "nice",
    "best",
    "better",
    "practices",
    "readable",
    "elegant",
    "reliable",
    "sensible",
    "sane",
    "solid",
    "neat",
    "tidy",
    "smart",
    "professional",
    "ready",
    "production",
    "correctly",
]


def _forms(adjective: str) -> tuple[str, ...]:
    """An adjective with its adverb and comparatives ("simple": "simply", "simpler", "simplest")."""
    if adjective.endswith("le"):
        adverb = adjective[:-1] + "y"
    elif adjective.endswith("y"):
        adverb = adjective[:-1] + "ily"
    else:
        adverb = adjective + "ly"
    return (adjective, adverb, adjective + "er", adjective + "est", adjective.rstrip("e") + "er")


VAGUE = frozenset(_stem(word) for word in _HEDGE_WORDS) | {
    _stem(form) for word in _QUALITY_WORDS for form in _forms(word)
}
# Phrases that hedge with words that elsewhere carry content ("case" is letter case, "sort" sorting).
_HEDGE_PHRASES = (
    "in some cases",
    "in most cases",
    "in any case",
    "case by case",
    "edge case",
    "corner case",
    "sort of",
    "more or less",
)

# A reply that defers the decision or admits not knowing (matched on the lower-cased reply with its
# whitespace collapsed and curly apostrophes made straight).
DEFERRALS = (
    "up to you",
    "your call",
    "your choice",
    "your decision",
    "you decide",
    "you choose",
    "your judgement",
    "your judgment",
    "use your",
    "don't know",
    "do not know",
    "dont know",
    "not sure",
    "no idea",
    "no preference",
    "don't have a preference",
    "don't mind",
    "do not mind",
    "doesn't matter",
    "does not matter",
    "don't care",
    "do not care",
    "whatever",
    "either way",
    "either is fine",
    "haven't decided",
    "have not decided",
    "haven't thought",
    "have not thought",
    "not decided",
    "can't say",
    "cannot say",
    "as you see fit",
    "as you like",
    "your discretion",
    "go with your",
    "what you think",
    "you think is",
    "seems best",
    "makes sense to you",
    "told you everything",
    "nothing else",
    "no other",
    "nothing more",
    "anything is fine",
    "anything works",
    "no strong",
    "not important",
    "hard to say",
    "not certain",
    "no opinion",
    "leave it to you",
    "leave that to you",
    "i'll leave",
    "feel free",
    "unsure",
    "no particular",
    "haven't considered",
    "have not considered",
    "not really thought",
    "rather not",
    "keep that open",
    "keep it open",
    "let you figure",
    "figure it out",
    "figure that out",
    "surprise me",
    "what works",
    "what you want",
    "what you like",
    "your way",
    "your own",
    "dealer's choice",
    "no requirement",
    "no constraint",
    "not specified",
    "unspecified",
    "didn't think",
    "did not think",
    "never thought",
    "no clue",
    "beats me",
    "good question",
    "not a concern",
    "don't worry",
    "do not worry",
    "can't remember",
    "cannot remember",
    "don't remember",
    "do not remember",
    "not decided",
    # refusing, redirecting, or pointing back at what was already said
    "can't share",
    "cannot share",
    "can't help",
    "cannot help",
    "can't answer",
    "cannot answer",
    "can't tell",
    "cannot tell",
    "not able to",
    "unable to",
    "no comment",
    "get back to you",
    "check with",
    "ask someone",
    "not the right person",
    "not my ",
    "what do you think",
    "what would you",
    "you're the expert",
    "you are the expert",
    "dunno",
    "idk",
    "no clue",
    "a clue",
    "rather you",
    "yourself",
    "see above",
    "as written",
    "as i said",
    "like i said",
    "i mentioned",
    "already told",
    "already said",
    "not specified",
    "isn't specified",
    "not something i",
    "depends on",
    "it depends",
    "best practice",
    "common sense",
    "the convention",
    "confidential",
    "any approach",
    "either option",
    "both options",
    "any option",
    "reasonable to you",
    "sensible to you",
    "whichever",
    "however you",
    "however seems",
    "trust your",
    "next question",
    "ask me something",
    "don't have that",
    "do not have that",
    "no information",
    "right person",
    "wrong person",
    "tricky one",
    "a tricky",
    "tough one",
    "hard one",
    "good one",
    "refer to",
    "the request",
    "original request",
    "the specification",
    "the description",
    "the task",
    "the docs",
    "the documentation",
    "comes to mind",
    "come to mind",
    "tests pass",
    "as long as it",
    "no strong",
    "no feelings",
    "one way or the other",
    # promising an answer later is not one now
    "think about it",
    "think it over",
    "let you know",
    "will tell you",
    "i'll tell you",
    "come back to",
    "to be decided",
    "to be determined",
    "to be confirmed",
)
# Whole replies that pass on the question ("Pass.", "Next."): matched on the reply without its punctuation.
_PASSES = frozenset(
    {"pass", "next", "skip this", "skip that", "no comment", "next one", "moving on", "n/a", "na", "tbd", "tba", "tbc"}
)
# A question that asks for a yes or a no: its last sentence opens with an auxiliary verb.
_AUXILIARIES = frozenset(
    [
        "is",
        "are",
        "was",
        "were",
        "am",
        "do",
        "does",
        "did",
        "should",
        "shall",
        "can",
        "could",
        "will",
        "would",
        "must",
        "may",
        "might",
        "has",
        "have",
        "had",
    ]
)


def _normalised(text: str) -> str:
    return " ".join(fold(text).replace("\u2019", "'").split()).lower()


def defers(reply: str) -> bool:
    """True when the reply defers the decision or admits not knowing (see DEFERRALS)."""
    text = _normalised(reply)
    return any(phrase in text for phrase in DEFERRALS) or text.strip(".,;:!?\"'*_()- ") in _PASSES


def _last_question_sentence(question: str) -> str:
    prose = parse_turn(question).prose
    end = max(prose.rfind(mark) for mark in QUESTION_MARKS)
    head = prose[:end] if end >= 0 else prose
    start = max(head.rfind(stop) for stop in ".!\n" + QUESTION_MARKS)
    return head[start + 1 :]


def asks_for_a_choice(question: str) -> bool:
    """True for a yes/no question ("Should negatives raise?") or one offering options ("... or ...?")."""
    sentence = _last_question_sentence(question).lower()
    words = sentence.split()
    return bool(words) and (words[0].strip("\"'*_(") in _AUXILIARIES or " or " in f" {sentence} ")


def _opens_with_yes_or_no(reply: str) -> bool:
    """Does the reply open with a yes or a no, after at most one hedge ("Probably not.", not "Perhaps, perhaps
    not." nor "Kind of."), and not say both ("Yes and no.", "Maybe yes, maybe no.")?"""
    words = [word.strip(".,;:!?\"'*_()-") for word in _normalised(reply).split()]
    if len(words) > 1 and _stem(words[0]) in VAGUE:
        words = words[1:] if words[1] in _POLAR_START - {"of"} else []
    if not words or words[0] not in _POLAR_START:
        return False
    said = set(words)
    return not (said & _NEGATIVE and said & (_POLAR_START - _NEGATIVE - {"of"}))


_NEGATIVE = frozenset({"no", "not", "nope", "nah", "never", "false"})


def _without_hedges(reply: str) -> str:
    """The reply without its hedges and vague qualities (``VAGUE``, ``_HEDGE_PHRASES``), as it was otherwise (case
    kept, so "ValueError" stays an exact token): two passes over its words."""
    text = _HEDGE_PHRASE.sub(" ", " ".join(fold(reply).split()))
    return _WORDS.sub(lambda word: " " if _stem(word[0].lower()) in VAGUE else word[0], text)


_WORDS = re.compile(r"[A-Za-z]+")
_HEDGE_PHRASE = re.compile(r"\b(?:" + "|".join(map(re.escape, _HEDGE_PHRASES)) + r")s?\b", re.IGNORECASE)


class SaidSoFar:
    """What a conversation has said before the reply being judged, as concepts: the request's and the earlier
    replies'. It grows one reply at a time (:meth:`add`), so judging every reply of a conversation costs one
    pass over it, however many turns it has."""

    def __init__(self, request: str = "", earlier: Iterable[str] = ()) -> None:
        self.request = concepts(request)
        self.earlier: set[str] = set()
        for text in earlier:
            self.add(text)

    def add(self, reply: str) -> None:
        self.earlier |= concepts(reply)


@lru_cache(maxsize=1)
def _passing_tokens() -> frozenset[str]:
    """The exact tokens of the deferrals and passes themselves ("n/a", "TBD"): saying one is not saying a
    requirement, so it never counts as the exact token that makes a deferring reply an answer."""
    return frozenset().union(*(key_tokens(phrase) for phrase in (*DEFERRALS, *_PASSES)), _PASSING_ACRONYMS)


# Passes written in capitals, where they read as exact tokens ("TBD", "NA").
_PASSING_ACRONYMS = frozenset({"tbd", "tba", "tbc", "na"})


def asks_back(reply: str) -> bool:
    """True when every sentence of the reply's prose with a letter or digit in it is a question: the user
    asked something back ("Can you rephrase?", "Why do you ask?") and stated nothing. One pass."""
    prose = parse_turn(reply).prose
    asked = False
    start = 0
    for end, char in enumerate(prose):
        if char in _SENTENCE_ENDS:
            if any(c.isalnum() for c in prose[start:end]):
                if char not in QUESTION_MARKS:
                    return False
                asked = True
            start = end + 1
    return asked and not any(c.isalnum() for c in prose[start:])


_SENTENCE_ENDS = frozenset(".!\n" + QUESTION_MARKS)


def reply_informs(reply: str, question: str, known: Iterable[str] | SaidSoFar = ()) -> bool:
    """Did ``reply`` answer ``question`` with new information? ``known``: what the conversation had already
    said, the request first, then earlier replies (or a :class:`SaidSoFar`). See the module docstring."""
    if not reply.strip() or is_non_answer(reply):
        return False
    if not isinstance(known, SaidSoFar):
        texts = list(known)
        known = SaidSoFar(texts[0] if texts else "", texts[1:])
    passing = _passing_tokens()
    said = concepts(_without_hedges(reply)) - CONVERSATIONAL - passing
    asked = concepts(question)
    new = said - asked - known.request - known.earlier
    deferring = defers(reply)
    if asks_back(reply) and not new & key_tokens(reply):
        # A question back ("Can you rephrase?") states nothing, whatever words it asks with: also one made only of
        # the question's own words (the question echoed back, "Hours or minutes?"), which a yes/no question took
        # for an answer (round twenty).
        return False
    if new:
        # A deferral that mentions a stray word or two ("up to you, I haven't thought about leap years") still
        # defers; real content beside it is more than that, or an exact token ("..., but raise ValueError").
        return not deferring or len(new) >= DEFERRAL_CONTENT or bool(new & key_tokens(reply))
    if deferring:
        return False
    # Said in the request's own words: an answer about what was asked ("An empty string encodes to an empty
    # string." to "What about empty input?"), unless it only restates the request.
    restates = _restates(said, known.request)
    if said & asked and said - asked - known.earlier and not restates:
        return True
    # A yes or a no answers a question that asked for one, but not one that only introduces the request said again
    # ("Could you restate what you need?" / "Sure: <the request>", round twenty): that is no answer either.
    return asks_for_a_choice(question) and (_opens_with_yes_or_no(reply) or bool(said & asked)) and not restates


def _restates(said: set[str], request: set[str]) -> bool:
    return bool(request) and len(said & request) / len(said | request) >= RESTATEMENT_OVERLAP


# --- which hidden details a reply states ----------------------------------------------------------------


@dataclass(frozen=True)
class DetailKeys:
    """Per hidden detail, its key content (concepts the request does not have) and the exact tokens only it
    has; the IDF weight of each concept among the details."""

    keys: tuple[frozenset[str], ...]
    unique_tokens: tuple[frozenset[str], ...]
    weight: dict[str, float]


@lru_cache(maxsize=1024)
def detail_keys(spec: tuple[str, ...], prompt: str = "") -> DetailKeys:
    known = concepts(prompt) | CONVERSATIONAL
    keys = tuple(frozenset(concepts(item) - known) or frozenset(concepts(item)) for item in spec)
    tokens = [key_tokens(item) - key_tokens(prompt) for item in spec]
    unique = tuple(
        frozenset(t - set().union(*(o for j, o in enumerate(tokens) if j != i))) for i, t in enumerate(tokens)
    )
    counts: dict[str, int] = {}
    for key in keys:
        for c in key:
            counts[c] = counts.get(c, 0) + 1
    weight = {c: math.log(1 + len(spec) / n) for c, n in counts.items()}
    return DetailKeys(keys, unique, weight)


def detail_coverage(reply: str, spec: Sequence[str], prompt: str = "") -> list[float]:
    """Per detail, the weighted share of its key content the reply covers (1.0 with one of its unique
    tokens)."""
    index = detail_keys(tuple(spec), prompt)
    said = concepts(reply)
    shares = []
    for key, unique in zip(index.keys, index.unique_tokens, strict=True):
        total = sum(index.weight[c] for c in key)
        share = sum(index.weight[c] for c in key & said) / total if total else 0.0
        shares.append(1.0 if unique & said else share)
    return shares


def stated_details(
    reply: str, spec: Sequence[str], prompt: str = "", revealed: set[int] | Sequence[int] = ()
) -> list[int]:
    """The not-yet-revealed details ``reply`` states (coverage >= STATED_SHARE), the best covered first
    (ties in spec order)."""
    shares = detail_coverage(reply, spec, prompt)
    stated = [(-share, i) for i, share in enumerate(shares) if share >= STATED_SHARE and i not in revealed]
    return [i for _, i in sorted(stated)]


# --- the recorded conversation: which questions were answered with a detail ---------------------------------


def would_reveal(subject: QuestionSubject, spec: Sequence[str], revealed: set[int] | Sequence[int]) -> int | None:
    """The detail the rule-based simulator would newly reveal for this question, or None."""
    index, restated = best_spec_match(subject.words, spec, revealed)
    if index is not None and not restated:
        return index
    if subject.generic:
        return next((i for i in range(len(spec)) if i not in revealed), None)
    return None


def _questions_back(reply: str, question: str, prompt: str) -> bool:
    """A reply that only asks back, with no exact token the question and the request did not have: the question
    echoed ("Should negatives raise an error?" to itself) states no detail, though its words are the detail's
    (round twenty: a recorded or LLM user's echo revealed the detail the question spelt out)."""
    return asks_back(reply) and not key_tokens(reply) - key_tokens(question) - key_tokens(prompt)


def answered_detail(
    question: str,
    reply: str,
    spec: Sequence[str],
    *,
    prompt: str = "",
    entry_point: str = "",
    revealed: set[int] | Sequence[int] = (),
    known: Iterable[str] | SaidSoFar = (),
) -> int | None:
    """The not-yet-revealed detail a recorded ``reply`` gave in answer to ``question``, or None.

    A question that asks nothing never earns one, whatever the reply said. The reply states a detail
    (:func:`stated_details`; the one the question asked about first), unless it defers; or, answering in
    few words ("Yes."), it informs (:func:`reply_informs`) and the rule-based user would have revealed a
    detail to that question.
    """
    subject = question_subject(question, prompt, entry_point)
    if subject.asks_nothing or _questions_back(reply, question, prompt):
        return None
    stated = stated_details(reply, spec, prompt, revealed)
    # the question the reply answers: the turn's first that asks something, as the rule-based user reads it
    first, asked, _ = asked_match(question, spec, revealed, prompt, entry_point)
    if stated and not defers(reply):
        return asked if asked in stated else stated[0]
    if reply_informs(reply, question, known if isinstance(known, SaidSoFar) else [prompt, *known]):
        return would_reveal(first, spec, revealed)
    return None


def request_of(messages: Sequence[Message]) -> str:
    """The request a recorded conversation opens with: its user messages before the first assistant turn. Not just
    a first message that is the user's: a conversation opening with a system message (the reward Lambda's, TRL's
    samples) had no request at all, so a reply that only restated it ("Sure: <the request>") was new information
    and the request echoed back a real question (round twenty)."""
    request = []
    for message in messages:
        if message.role == "assistant":
            break
        if message.role == "user":
            request.append(message.content)
    return "\n".join(request)


def reveals_in(messages: Sequence[Message], spec: Sequence[str], entry_point: str = "") -> list[tuple[int, int]]:
    """``(assistant turn, spec index)`` for each assistant turn (0-based, among assistant turns) of a recorded
    conversation that was a real clarifying question: a question answered with a not-yet-revealed detail
    (:func:`answered_detail`). For transcripts scored without the simulator's own bookkeeping."""
    answered: list[tuple[int, int]] = []
    revealed: set[int] = set()
    prompt = request_of(messages)
    said = SaidSoFar(prompt)
    turn = -1
    for position, message in enumerate(messages):
        if message.role != "assistant":
            continue
        turn += 1
        following = messages[position + 1] if position + 1 < len(messages) else None
        if following is None or following.role != "user":
            continue
        if parse_turn(message.content).kind is TurnKind.QUESTION:
            index = answered_detail(
                message.content,
                following.content,
                spec,
                prompt=prompt,
                entry_point=entry_point,
                revealed=revealed,
                known=said,
            )
            if index is not None:
                revealed.add(index)
                answered.append((turn, index))
        said.add(following.content)
    return answered


def answered_turns_in(messages: Sequence[Message], spec: Sequence[str], entry_point: str = "") -> frozenset[int]:
    """The assistant turns of :func:`reveals_in`."""
    return frozenset(turn for turn, _ in reveals_in(messages, spec, entry_point))


# --- what an LLM-played user may say ------------------------------------------------------------------------


#: Where a question is cut into the parts that may each ask about a detail of their own.
_QUESTION_PARTS = frozenset(",;\n" + QUESTION_MARKS)


def asked_details(
    question: str,
    spec: Sequence[str],
    *,
    prompt: str = "",
    entry_point: str = "",
    revealed: set[int] | Sequence[int] = (),
) -> set[int]:
    """The not-yet-revealed details the parts of ``question`` ask about, one per part at most: the question's
    prose cut at question marks, commas, semicolons and line ends, each part's subject matched to its best
    detail (:func:`~rewardpipe.envs.ask_before_coding.questions.best_spec_match`) on the words it adds to the
    request. One pass over the prose (the request is read once)."""
    prose = fold(parse_turn(question).prose)
    ignored = FILLER | GENERIC_CUES | (_subject_words(prompt, entry_point) if prompt else set())
    if entry_point:
        ignored = ignored | content_words(entry_point)
    found: set[int] = set()
    seen: set[frozenset[str]] = set()
    start = 0
    for end in range(len(prose) + 1):
        if end < len(prose) and prose[end] not in _QUESTION_PARTS:
            continue
        part = prose[start:end]
        start = end + 1
        words = frozenset(content_words(part) - ignored)
        if not words or words in seen:
            continue  # a part that asks nothing of its own, or what an earlier part asked
        seen.add(words)
        index, restated = best_spec_match(words, spec, revealed)
        if index is not None and not restated:
            found.add(index)
            if len(found) > 1:
                break  # several: all a caller needs to know
    return found


def vet_llm_reply(
    text: str,
    question: str,
    spec: Sequence[str],
    *,
    prompt: str = "",
    entry_point: str = "",
    revealed: set[int] | Sequence[int] = (),
) -> tuple[str | None, int | None]:
    """``(reply, newly revealed detail)`` an LLM user's ``text`` may stand as; ``(None, None)`` when it must be
    replaced by the rule-based user's reply (see the module docstring).

    ``text`` stands when every concept in it comes from the question, the request, a detail already told
    or the one detail it states; a reply stating several details becomes the one the question asked about.
    """
    if unread_letters(text) > MAX_UNREAD_LETTERS or unread_symbols(text) > MAX_UNREAD_SYMBOLS:
        # A reply in another script, spelt out letter by letter, or written in a code without letters (Morse,
        # Braille; the policy can ask the LLM user for any of them): the rules would read nothing in it, and
        # so let every detail it states through.
        return None, None
    if len(stated_details(question, spec, prompt, revealed)) > 1 and not defers(text):
        # The question spells out several details itself ("Should negatives raise ValueError, and are
        # fractions truncated?"): a "yes" would confirm them all. The rule-based user answers one.
        return None, None
    if len(asked_details(question, spec, prompt=prompt, entry_point=entry_point, revealed=revealed)) > 1 and not defers(
        text
    ):
        # The question asks about several details, each in a part of its own ("Yes or no for each: negatives
        # raise? fractions cut? hour shown?"), none spelt out enough to count as stated: "yes, yes, no" answers
        # them all, in words the rules allow. The rule-based user answers one.
        return None, None
    if _questions_back(text, question, prompt):
        return text, None  # a question back reveals nothing, though it repeats the detail the question spelt out
    stated = stated_details(text, spec, prompt, revealed)
    subject, asked, _ = asked_match(question, spec, revealed, prompt, entry_point)
    if len(stated) > 1:
        keep = asked if asked in stated else stated[0]
        return spec[keep], keep
    detail = stated[0] if stated else None
    allowed = concepts(question) | concepts(prompt) | CONVERSATIONAL
    for index in (*revealed, *([detail] if detail is not None else [])):
        if 0 <= index < len(spec):
            allowed |= concepts(spec[index])
    if concepts(text) - allowed:
        return (spec[detail], detail) if detail is not None else (None, None)
    if detail is None and reply_informs(text, question, [prompt, *(spec[i] for i in revealed if 0 <= i < len(spec))]):
        detail = would_reveal(subject, spec, revealed)
    return text, detail


__all__ = [
    "CONVERSATIONAL",
    "DEFERRALS",
    "DEFERRAL_CONTENT",
    "STATED_SHARE",
    "DetailKeys",
    "SaidSoFar",
    "answered_detail",
    "answered_turns_in",
    "asked_details",
    "asks_for_a_choice",
    "defers",
    "detail_coverage",
    "detail_keys",
    "reply_informs",
    "reveals_in",
    "stated_details",
    "vet_llm_reply",
    "would_reveal",
]
