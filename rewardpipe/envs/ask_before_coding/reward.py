"""The multi-turn "ask before coding" reward: outcome + behaviour + penalties.

| component             | weight | value                                                                  |
|-----------------------|--------|------------------------------------------------------------------------|
| correctness           | 1.0    | fraction of hidden tests passing on the final committed code; 0 if none |
|                       |        | committed or on timeout; None (an error) if the tests could not run     |
| asked_before_coding   | 0.6    | 1.0 first turn was a real question and later committed; 0.6 a real      |
|                       |        | question later, then committed (only questions before the first commit) |
| guessed_immediately   | 0.4    | -1.0 if the episode commits before any real question                    |
| loop_penalty          | 0.2    | -0.5 if two assistant turns (any two) are more than 80% similar, or     |
|                       |        | one (24+ characters) recurs, 90% of it, inside another, or they share   |
|                       |        | more than 80% of their distinct words in any order (read as concepts:   |
|                       |        | synonyms, leetspeak and words spelt backwards are the same words);      |
|                       |        | in an episode, never for a turn whose reply revealed a new detail but   |
|                       |        | the same question again, and always for a question the rule-based user  |
|                       |        | answered with a detail it had told before (asked again, in any words);  |
|                       |        | scored without the simulator's bookkeeping,                             |
|                       |        | never for a turn asking about other literal values (numbers, quoted     |
|                       |        | strings, a call's arguments)                                            |

The blog compares the last two turns; a policy then loops for free by alternating (A, B, A, B) or by
asking the same question four times before a commit, so every pair of turns is compared. Similarity is
:func:`~rewardpipe.envs.ask_before_coding.similarity.turn_similarity`: the ratio ``2 * matched / total``
difflib's ratio has, with the matched characters found by anchoring on shared runs of characters, in time
linear in the turns' length (difflib's own matching is quadratic: seconds of scorer CPU for one long turn).
A question repeated inside a longer turn ("Sorry to ask again: ...", the question asked twice in one turn) is a
loop too (:func:`~rewardpipe.envs.ask_before_coding.similarity.repeats`): padding dilutes the ratio, not the
repeat.

A *real* question is a question turn the user answered with a newly revealed spec item (the simulator's
bookkeeping, the episode state's ``answered_turns``). A bare "?", "ok?" or "can you explain again?" reveals nothing,
so it earns nothing and does not delay a guess: "?" then code scores exactly like the code alone. Without the
bookkeeping (a transcript scored on its own, with no task spec at hand), a question counts when it asks
something specific (:func:`rewardpipe.questions.question_subject`, the same rule the simulators apply before
answering) and the recorded user reply answered it with new information
(:func:`~rewardpipe.envs.ask_before_coding.replies.reply_informs`): not one of the simulators' fixed replies
("That is up to you."), not an LLM user's deferral ("I'm not sure, use your judgement"), not a repeat of what
was already said. A made-up word ("xyz?") has a subject no rule can tell from a real one, but the user did
not answer it.

Roles: ``correctness`` is the outcome, ``asked_before_coding`` shaping, the other two penalties.
``asked_before_coding`` is deliberately not gated on correctness: gating a behaviour bonus behind a rarely
reached outcome is exactly how a component goes silently dead.
"""

from __future__ import annotations

from typing import Any

from rewardpipe.components import component
from rewardpipe.envs.ask_before_coding.questions import question_subject
from rewardpipe.envs.ask_before_coding.replies import SaidSoFar, reply_informs, request_of
from rewardpipe.envs.ask_before_coding.similarity import (  # noqa: F401 - turn_similarity: part of this API
    LOOP_SIMILARITY_THRESHOLD,
    find_loop,
    turn_similarity,
)
from rewardpipe.models import MetricValue
from rewardpipe.parsing import TurnKind
from rewardpipe.rewards.base import Reward, Transcript
from rewardpipe.rewards.execution import execution_correctness, execution_metrics, explain_execution_error


def answered_turns(state: Any) -> frozenset[int] | None:
    """The simulator's bookkeeping of the episode (None without a state that kept it)."""
    answered = getattr(state, "answered_turns", None)
    return None if answered is None else frozenset(answered)


def asked_again(transcript: Transcript, state: Any) -> bool:
    """Whether a question turn of the episode was answered with a detail told before (the bookkeeping's
    ``restated_turns``): the rule-based user read it as an answered question asked again. In other words than the
    first time it is no loop to the turns' words and characters, and was one all the same."""
    kinds = transcript.kinds
    restated = getattr(state, "restated_turns", None) or ()
    return any(0 <= turn < len(kinds) and kinds[turn] is TurnKind.QUESTION for turn in restated)


def real_questions(transcript: Transcript, state: Any = None) -> list[bool]:
    """Per assistant turn: was it a real clarifying question (see the module docstring)?"""
    answered = answered_turns(state)
    if answered is not None:
        return [kind is TurnKind.QUESTION and index in answered for index, kind in enumerate(transcript.kinds)]
    prompt = request_of(transcript.messages)
    real, said = [], SaidSoFar(prompt)
    for kind, text, reply in zip(transcript.kinds, transcript.assistant_texts, _replies(transcript), strict=False):
        real.append(
            kind is TurnKind.QUESTION
            and reply is not None
            and not question_subject(text, prompt).asks_nothing
            and reply_informs(reply, text, said)
        )
        if reply is not None:
            said.add(reply)
    return real


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


@component(range=(-0.5, 0.0), role="penalty", weight=0.2, description="two assistant turns near-identical")
def loop_penalty(transcript: Transcript, state: Any) -> float:
    """-0.5 when any two assistant turns of the conversation are more than 80% similar, or one is repeated
    inside another (not only the last two: the same question asked four times, or A, B, A, B, then a commit,
    is a loop too). A turn that asks about other values than the earlier one, or whose reply revealed a
    detail not revealed before (the simulator's bookkeeping, :func:`answered_turns`; a transcript scored without
    it has only its words to go by) is a loop only as the same question again, exactly or inside a longer turn.
    A commit is never a loop of a question (committing the code a question showed is what asking is for), and
    questions are compared as the simulator reads them too (junk in inline code or a block does not hide a
    repeat). A question the rule-based user answered by restating a detail told before is a loop whatever its
    words (:func:`asked_again`): the same question reworded."""
    if asked_again(transcript, state):
        return -0.5
    answered = answered_turns(state)
    # With the bookkeeping, what each reply revealed decides (a value padded onto the same question reveals
    # nothing: still a loop); without it, only the words: a question about other values is another question.
    loop = find_loop(
        transcript.assistant_texts,
        new_details=answered or frozenset(),
        by_values=answered is None,
        kinds=transcript.kinds,
    )
    return -0.5 if loop is not None else 0.0


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
