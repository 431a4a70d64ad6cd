"""The multi-turn "ask before coding" reward: outcome + behaviour + penalties.

| component             | weight | value                                                                  |
|-----------------------|--------|------------------------------------------------------------------------|
| correctness           | 1.0    | fraction of hidden tests passing on the final committed code; 0 if none |
|                       |        | committed or on timeout; None (an error) if the tests could not run     |
| asked_before_coding   | 0.6    | 1.0 first turn was a real question and later committed; 0.6 a real      |
|                       |        | question later, then committed (only questions before the first commit) |
| guessed_immediately   | 0.4    | -1.0 if the episode commits before any real question                    |
| loop_penalty          | 0.2    | -0.5 if the last two assistant turns are more than 80% similar          |

Similarity is difflib's ratio, exact for turns up to 3,000 characters; longer turns are compared by their
opening and closing windows and their lengths, because the exact ratio is quadratic (tens of seconds for
two max-length turns).

A *real* question is a question turn the user answered with a newly revealed spec item (the simulator's
bookkeeping, the episode state's ``answered_turns``). A bare "?", "ok?" or "can you explain again?" reveals nothing,
so it earns nothing and does not delay a guess: "?" then code scores exactly like the code alone. Without the
bookkeeping (a transcript scored on its own, with no task spec at hand), a question counts when it asks
something specific (:func:`rewardpipe.questions.question_subject`, the same rule the simulators apply before
answering) and the recorded user reply is not one of the simulators' replies that reveal nothing ("That is up
to you."): a made-up word ("xyz?") has a subject no rule can tell from a real one, but the simulator did not
answer it.

Roles: ``correctness`` is the outcome, ``asked_before_coding`` shaping, the other two penalties.
``asked_before_coding`` is deliberately not gated on correctness: gating a behaviour bonus behind a rarely
reached outcome is exactly how a component goes silently dead.
"""

from __future__ import annotations

from difflib import SequenceMatcher
from typing import Any

from rewardpipe.components import component
from rewardpipe.envs.ask_before_coding.questions import is_non_answer, question_subject
from rewardpipe.models import MetricValue
from rewardpipe.parsing import TurnKind
from rewardpipe.rewards.base import Reward, Transcript
from rewardpipe.rewards.execution import execution_correctness, execution_metrics, explain_execution_error

LOOP_SIMILARITY_THRESHOLD = 0.8


def answered_turns(state: Any) -> frozenset[int] | None:
    """The simulator's bookkeeping of the episode (None without a state that kept it)."""
    answered = getattr(state, "answered_turns", None)
    return None if answered is None else frozenset(answered)


def real_questions(transcript: Transcript, state: Any = None) -> list[bool]:
    """Per assistant turn: was it a real clarifying question (see the module docstring)?"""
    answered = answered_turns(state)
    if answered is not None:
        return [kind is TurnKind.QUESTION and index in answered for index, kind in enumerate(transcript.kinds)]
    first = transcript.messages[0] if transcript.messages else None
    prompt = first.content if first is not None and first.role == "user" else ""
    return [
        kind is TurnKind.QUESTION
        and not question_subject(text, prompt).asks_nothing
        and reply is not None
        and not is_non_answer(reply)
        for kind, text, reply in zip(transcript.kinds, transcript.assistant_texts, _replies(transcript), strict=False)
    ]


def _replies(transcript: Transcript) -> list[str | None]:
    """Per assistant turn, the user message that follows it (None if none does)."""
    messages = transcript.messages
    return [
        messages[i + 1].content if i + 1 < len(messages) and messages[i + 1].role == "user" else None
        for i, message in enumerate(messages)
        if message.role == "assistant"
    ]


def _real_questions_before_first_commit(transcript: Transcript, state: Any) -> list[bool] | None:
    """``real_questions`` up to the first commit; None when the episode never committed."""
    kinds = transcript.kinds
    if TurnKind.COMMIT not in kinds:
        return None
    return real_questions(transcript, state)[: kinds.index(TurnKind.COMMIT)]


@component(range=(0.0, 1.0), role="outcome", weight=1.0, description="fraction of hidden tests passing")
def correctness(transcript: Transcript, execution: Any) -> float | None:
    if transcript.final_code is None:
        return 0.0
    return execution_correctness(execution)


@component(range=(0.0, 1.0), role="shaping", weight=0.6, description="asked a real question, then committed")
def asked_before_coding(transcript: Transcript, state: Any) -> float:
    """Only real questions asked before the *first* commit count: guessing, then asking, then committing
    again did not ask before coding (and must not win back most of the guess penalty)."""
    before = _real_questions_before_first_commit(transcript, state)
    if not before or not any(before):
        return 0.0
    return 1.0 if before[0] else 0.6


@component(range=(-1.0, 0.0), role="penalty", weight=0.4, description="committed before any real question")
def guessed_immediately(transcript: Transcript, state: Any) -> float:
    """-1.0 when code was committed before any real question: turns that ask nothing (a bare "?", a
    statement) in front of the code do not turn a guess into asking."""
    before = _real_questions_before_first_commit(transcript, state)
    return -1.0 if before is not None and not any(before) else 0.0


# Character-level matching is quadratic: two max-length turns (~15k characters) take tens of seconds each.
# Longer turns are judged on their opening and closing windows plus their lengths (see turn_similarity).
EXACT_SIMILARITY_MAX_CHARS = 3000
SIMILARITY_WINDOW_CHARS = 1500


def _ratio(a: str, b: str, above: float | None = None) -> float:
    """SequenceMatcher's ratio. With ``above``, a pair that cannot exceed it gets an upper bound (<= above)
    instead, from the cheap length and character-count bounds: the answer to "ratio > above" is the same."""
    if a == b:
        return 1.0
    matcher = SequenceMatcher(None, a, b, autojunk=False)
    if above is not None:
        for bound in (matcher.real_quick_ratio, matcher.quick_ratio):
            value = bound()
            if value <= above:
                return value
    return matcher.ratio()


def turn_similarity(a: str, b: str, above: float | None = None) -> float:
    """SequenceMatcher ratio in [0, 1] of two turns, ignoring surrounding whitespace.

    Exact up to EXACT_SIMILARITY_MAX_CHARS. Beyond that it is the smallest of: the similarity of the first
    SIMILARITY_WINDOW_CHARS characters, of the last ones, and the length bound 2*min/(len a + len b) — so a
    turn repeated to max_length still scores near 1, two different long turns score low, and the cost stays
    bounded. With ``above``, a value that is at most ``above`` may be an upper bound rather than the ratio
    (see ``_ratio``); a value above it is exact.
    """
    a, b = a.strip(), b.strip()
    if a == b:
        return 1.0
    if not a or not b:
        return 0.0
    if max(len(a), len(b)) <= EXACT_SIMILARITY_MAX_CHARS:
        return _ratio(a, b, above)
    window = SIMILARITY_WINDOW_CHARS
    length_bound = 2.0 * min(len(a), len(b)) / (len(a) + len(b))
    return min(length_bound, _ratio(a[:window], b[:window], above), _ratio(a[-window:], b[-window:], above))


@component(range=(-0.5, 0.0), role="penalty", weight=0.2, description="last two turns near-identical")
def loop_penalty(transcript: Transcript) -> float:
    texts = transcript.assistant_texts
    if len(texts) < 2:
        return 0.0
    similarity = turn_similarity(texts[-2], texts[-1], above=LOOP_SIMILARITY_THRESHOLD)
    return -0.5 if similarity > LOOP_SIMILARITY_THRESHOLD else 0.0


def diagnostics(transcript: Transcript, state: Any, execution: Any) -> dict[str, MetricValue]:
    kinds = transcript.kinds
    metrics: dict[str, MetricValue] = {
        "turns": len(transcript.messages),
        "assistant_turns": len(kinds),
        "questions": kinds.count(TurnKind.QUESTION),
        "real_questions": sum(real_questions(transcript, state)),
        "committed": transcript.final_code is not None,
    }
    metrics.update(execution_metrics(execution))
    return metrics


def explain_error(execution: Any) -> Any:
    return explain_execution_error(execution)


ASK_BEFORE_CODING = Reward(
    "ask_before_coding",
    [correctness, asked_before_coding, guessed_immediately, loop_penalty],
    diagnostics=diagnostics,
    explain_error=explain_error,
    needs_execution=True,
)
