"""The evidence beside every record: one rollout's transcript.

``runs/<run>/transcripts/step=<n>/group=<g>/<rollout>.json`` holds the messages, the hidden spec items the
simulator revealed (and which assistant turn each answered), the code that was executed, the execution
verdict with its reason, and the scores. It sits beside the records but outside the ``step=<n>/`` folders
the record readers list. The local runner, ``rewardpipe score`` and the AWS Score step write the same
document through :meth:`rewardpipe.store.Store.put_transcript`; ``rewardpipe show`` and the report read it.

A transcript is also a valid :class:`~rewardpipe.models.Rollout` once its extra fields are dropped
(:meth:`RolloutTranscript.to_rollout`), so it can be replayed or re-scored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Sequence

from pydantic import ConfigDict, Field

from rewardpipe.deferred import DeferredModel
from rewardpipe.models import ErrorInfo, Message, Record, RolloutIdentity
from rewardpipe.parsing import parse_turn

if TYPE_CHECKING:  # pragma: no cover
    from rewardpipe.episode import EpisodeState
    from rewardpipe.execution.result import ExecutionResult
    from rewardpipe.models import Task

TRANSCRIPT_SCHEMA = "rewardpipe.transcript/v1"


class RevealedItem(DeferredModel):
    index: int
    text: str
    turn: int | None = None  # the assistant turn (0-based) whose question it answered


class Verdict(DeferredModel):
    """What happened to the executed code: the executor's status and reason, or why nothing ran."""

    status: str  # passed | failed | timeout | error | not_executed
    reason: str = ""
    passed: int = 0
    total: int = 0


class RolloutTranscript(RolloutIdentity):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    schema_: Literal["rewardpipe.transcript/v1"] = Field(default=TRANSCRIPT_SCHEMA, alias="schema")
    turn_kinds: list[str] = Field(default_factory=list)
    revealed: list[RevealedItem] = Field(default_factory=list)
    executed_code: str | None = None
    verdict: Verdict
    end_reason: str | None = None
    status: str = "scored"
    error: ErrorInfo | None = None
    components: dict[str, float | None] = Field(default_factory=dict)
    aggregate: float | None = None

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


def verdict_of(execution: "ExecutionResult | None", code: str | None, record: Record | None = None) -> Verdict:
    if execution is not None:
        return Verdict(status=execution.status.value, reason=execution.reason or "", passed=execution.passed,
                       total=execution.total)
    if record is not None and record.error is not None:
        return Verdict(status="error", reason=f"{record.error.kind}: {record.error.message}")
    return Verdict(status="not_executed", reason="no code was committed" if code is None else "the code was not run")


def _scores(record: Record | None) -> dict[str, Any]:
    if record is None:
        return {}
    return {"status": record.status, "error": record.error, "components": dict(record.components),
            "aggregate": record.aggregate}


def transcript_of_episode(state: "EpisodeState", task: "Task | None", execution: "ExecutionResult | None" = None,
                          record: Record | None = None) -> RolloutTranscript:
    """The transcript of an episode run here (runner, AWS state machine): exact reveal bookkeeping.
    Without the task (a failure before it could be loaded) the revealed items keep their index only."""
    spec = task.spec if task is not None else []
    turns = dict(zip(state.revealed, state.answered_turns))
    revealed = [RevealedItem(index=i, text=spec[i] if 0 <= i < len(spec) else "", turn=turns.get(i))
                for i in state.revealed]
    return RolloutTranscript(
        **state.record_ids(),
        messages=list(state.messages),
        turn_kinds=[str(getattr(k, "value", k)) for k in state.turn_kinds],
        revealed=revealed,
        executed_code=state.final_code,
        verdict=verdict_of(execution, state.final_code, record),
        end_reason=state.end_reason,
        **_scores(record),
    )


def transcript_of_messages(*, run_id: str, step: int, group_id: str, rollout_id: str, task_id: str,
                           messages: Sequence[Message], spec: Sequence[str], executed_code: str | None,
                           execution: "ExecutionResult | None", record: Record | None = None) -> RolloutTranscript:
    """The transcript of a recorded conversation (``rewardpipe score``): reveals read off the user replies."""
    from rewardpipe.questions import reveals_in

    kinds = [parse_turn(m.content).kind.value for m in messages if m.role == "assistant"]
    revealed = [RevealedItem(index=index, text=spec[index], turn=turn) for turn, index in reveals_in(messages, spec)]
    return RolloutTranscript(
        run_id=run_id, step=step, group_id=group_id, rollout_id=rollout_id, task_id=task_id,
        messages=list(messages), turn_kinds=kinds, revealed=revealed, executed_code=executed_code,
        verdict=verdict_of(execution, executed_code, record), **_scores(record),
    )
