"""The multi-turn "ask before coding" reward: outcome + behaviour + penalties.

| component             | weight | value                                                                  |
|-----------------------|--------|------------------------------------------------------------------------|
| correctness           | 1.0    | fraction of hidden tests passing on the final committed code; 0 if none |
|                       |        | committed or on timeout; None (an error) if the tests could not run     |
| asked_before_coding   | 0.6    | 1.0 first turn asked and later committed; 0.6 asked later then committed |
|                       |        | (only questions before the first commit count)                          |
| guessed_immediately   | 0.4    | -1.0 if the first assistant turn commits without asking                 |
| loop_penalty          | 0.2    | -0.5 if the last two assistant turns are more than 80% similar          |

Similarity is difflib's ratio, exact for turns up to 3,000 characters; longer turns are compared by their
opening and closing windows and their lengths, because the exact ratio is quadratic (tens of seconds for
two max-length turns).

``asked_before_coding`` is deliberately not gated on correctness: gating a behaviour bonus behind a rarely
reached outcome is exactly how a component goes silently dead.
"""

from __future__ import annotations

from difflib import SequenceMatcher

from rewardpipe.execution.result import ExecutionResult, ExecutionStatus
from rewardpipe.models import ErrorInfo, MetricValue
from rewardpipe.parsing import TurnKind
from rewardpipe.rewards.base import Component, Reward, ScoringInput

LOOP_SIMILARITY_THRESHOLD = 0.8


def execution_correctness(execution: ExecutionResult | None) -> float | None:
    """Fraction of tests passing; ``None`` when the tests could not run (no result, or a harness error).

    A timeout is the model's failure and scores 0.0 even if the result reports tests that passed before the
    clock ran out: partial credit for code that hangs would reward infinite loops after the easy cases.
    """
    if execution is None or execution.status is ExecutionStatus.ERROR:
        return None  # the tests did not run: an infrastructure failure, not a model failure
    if execution.status is ExecutionStatus.TIMEOUT:
        return 0.0
    return execution.fraction_passed


def correctness(data: ScoringInput) -> float | None:
    if data.transcript.final_code is None:
        return 0.0
    return execution_correctness(data.execution)


def asked_before_coding(data: ScoringInput) -> float:
    """Only questions asked before the *first* commit count: guessing, then asking, then committing again
    did not ask before coding (and must not win back most of the guess penalty)."""
    kinds = data.transcript.kinds
    if TurnKind.COMMIT not in kinds:
        return 0.0
    first_commit = kinds.index(TurnKind.COMMIT)
    before = kinds[:first_commit]
    if TurnKind.QUESTION not in before:
        return 0.0
    return 1.0 if before[0] is TurnKind.QUESTION else 0.6


def guessed_immediately(data: ScoringInput) -> float:
    kinds = data.transcript.kinds
    return -1.0 if kinds and kinds[0] is TurnKind.COMMIT else 0.0


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


def loop_penalty(data: ScoringInput) -> float:
    texts = data.transcript.assistant_texts
    if len(texts) < 2:
        return 0.0
    similarity = turn_similarity(texts[-2], texts[-1], above=LOOP_SIMILARITY_THRESHOLD)
    return -0.5 if similarity > LOOP_SIMILARITY_THRESHOLD else 0.0


def diagnostics(data: ScoringInput) -> dict[str, MetricValue]:
    kinds = data.transcript.kinds
    metrics: dict[str, MetricValue] = {
        "turns": len(data.transcript.messages),
        "assistant_turns": len(kinds),
        "questions": kinds.count(TurnKind.QUESTION),
        "committed": data.transcript.final_code is not None,
    }
    execution = data.execution
    if execution is not None:
        metrics.update(
            tests_passed=execution.passed,
            tests_total=execution.total,
            exec_status=execution.status.value,
            exec_reason=execution.reason,
            exec_mode=execution.mode,
            exec_ms=round(execution.duration_ms, 3),
        )
    return metrics


def explain_error(data: ScoringInput) -> ErrorInfo | None:
    execution = data.execution
    if execution is None:
        return ErrorInfo(kind="not_executed", message="code was committed but no execution result was supplied")
    if execution.status is ExecutionStatus.ERROR:
        return ErrorInfo(kind="execution_error", message=execution.reason or "the test harness failed")
    return None


ASK_BEFORE_CODING = Reward(
    name="ask_before_coding",
    components=(
        Component("correctness", 1.0, correctness, "fraction of hidden tests passing", (0.0, 1.0)),
        Component("asked_before_coding", 0.6, asked_before_coding, "asked, then committed", (0.0, 1.0)),
        Component("guessed_immediately", 0.4, guessed_immediately, "committed on turn one", (-1.0, 0.0)),
        Component("loop_penalty", 0.2, loop_penalty, "last two turns near-identical", (-0.5, 0.0)),
    ),
    diagnostics=diagnostics,
    explain_error=explain_error,
    needs_execution=True,
)
