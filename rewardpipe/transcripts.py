"""The evidence beside every record: one rollout's transcript.

``runs/<run>/transcripts/step=<n>/group=<g>/<rollout>.json`` holds the messages (tool calls included), the
code that was executed, the execution verdict with its reason, the scores, and what the environment adds
(the ask-before-coding environment: each assistant turn's kind, and the hidden spec items the simulator
revealed with the assistant turn each answered). It sits beside the records but outside the ``step=<n>/`` folders
the record readers list. The local runner, ``rewardpipe score`` and the AWS Score step write the same
document through :meth:`rewardpipe.store.Store.put_transcript`; ``rewardpipe show`` and the report read it.

A transcript is also a valid :class:`~rewardpipe.models.Rollout` once its extra fields are dropped
(:meth:`RolloutTranscript.to_rollout`), so it can be replayed or re-scored.
"""

from __future__ import annotations

import contextlib
import functools
import json
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Literal

from pydantic import ConfigDict, Field, TypeAdapter

from rewardpipe.deferred import DeferredModel
from rewardpipe.models import MAX_METRIC_TEXT_CHARS, ErrorInfo, Record, RolloutIdentity, cut_text

if TYPE_CHECKING:  # pragma: no cover
    from rewardpipe.environment import Environment, EpisodeState
    from rewardpipe.execution.result import ExecutionResult

TRANSCRIPT_SCHEMA: Final = "rewardpipe.transcript/v1"


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

    @property
    def reveals_spec(self) -> bool:
        """Whether the environment reports revealed spec items (ask-before-coding does, even none; an environment
        with no spec, such as tool_call or wordle, sets no ``revealed`` and has none to count)."""
        return "revealed" in self.model_fields_set

    def to_json_dict(self) -> dict[str, Any]:
        # ``revealed`` is stored only when the environment set it, so a reader can tell "revealed none" from "no spec"
        return self.model_dump(mode="json", by_alias=True, exclude=None if self.reveals_spec else {"revealed"})


def tool_call_parts(call: Mapping[str, Any], *, ensure_ascii: bool = False) -> tuple[Any, str, Any]:
    """One OpenAI-style tool call of a transcript (``{"id", "function": {"name", "arguments"}}``, or name and arguments
    at its top level) as (name, arguments as text, id): arguments that are not text as their JSON. The parts are the
    model's, unescaped: the terminal and the report each escape them their own way."""
    function = call.get("function")
    if not isinstance(function, Mapping):
        function = {}
    name = function.get("name", call.get("name", "?"))
    arguments = function.get("arguments", call.get("arguments", ""))
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=ensure_ascii, default=str)
    return name, arguments, call.get("id")


def verdict_of(
    execution: ExecutionResult | None,
    code: str | None,
    record: Record | None = None,
    runs_code: bool = True,
    *,
    runner: str = "environment",
) -> Verdict:
    """What happened to the code: ``runner`` is what would have run it (an episode's environment, or the reward
    of a single-turn sample scored without one)."""
    if execution is not None:
        return Verdict(
            status=execution.status.value, reason=execution.reason or "", passed=execution.passed, total=execution.total
        )
    if record is not None and record.error is not None:
        return Verdict(status="error", reason=f"{record.error.kind}: {record.error.message}")
    if not runs_code:
        return Verdict(status="not_executed", reason=f"the {runner} runs no code")
    return Verdict(status="not_executed", reason="no code was committed" if code is None else "the code was not run")


def _scores(record: Record | None) -> dict[str, Any]:
    if record is None:
        return {}
    return {
        "status": record.status,
        "error": record.error,
        "components": dict(record.components),
        "aggregate": record.aggregate,
    }


def _executed_code(state: EpisodeState, task: Any, env: Environment) -> str | None:
    """The code of the episode's execution job (None when it has none, or the task is not known)."""
    if task is None or state.next_action != "execute":
        return None
    from rewardpipe.episode import execution_job  # not at the top: report and show read transcripts without it

    try:
        job = execution_job(state, task, env)
    except Exception:  # noqa: BLE001 - a transcript is evidence: a failing hook leaves the field empty
        return None
    return job.code if job is not None else None


#: What an environment's transcript_fields() may set (the rest of a transcript is the platform's).
ENVIRONMENT_FIELDS: Final = ("turn_kinds", "revealed", "executed_code")


def _environment_fields(given: Any) -> dict[str, Any]:
    """The fields of ``given`` an environment may set, each kept only if it has the transcript's shape: a
    wrong one is left out rather than failing the transcript (and the run writing it)."""
    kept: dict[str, Any] = {}
    if not isinstance(given, dict):
        return kept
    for name in ENVIRONMENT_FIELDS:
        if name in given:
            value = given[name]
            if isinstance(value, (list, tuple)):
                value = value[:MAX_FIELD_ITEMS]  # before validating: a list of millions was validated and kept whole
            with contextlib.suppress(Exception):
                kept[name] = _bounded(_field_adapter(name).validate_python(value))
    return kept


#: The most items of a list an environment's transcript_fields() gives (``turn_kinds``, ``revealed``) a transcript
#: keeps; its texts are cut to ``MAX_METRIC_TEXT_CHARS`` and its ``executed_code`` to ``MAX_FIELD_CODE_CHARS``. Without
#: a bound, a hook echoing the model's turns (a million turn kinds, a megabyte of "revealed" text) wrote it into
#: every transcript.
MAX_FIELD_ITEMS: Final = 1000
MAX_FIELD_CODE_CHARS: Final = 200_000


def _bounded(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, str):
        return cut_text(value, MAX_FIELD_CODE_CHARS)
    return [
        item.model_copy(update={"text": cut_text(item.text, MAX_METRIC_TEXT_CHARS)})
        if isinstance(item, RevealedItem)
        else cut_text(item, MAX_METRIC_TEXT_CHARS)
        for item in value
    ]


@functools.cache
def _field_adapter(name: str) -> TypeAdapter[Any]:
    return TypeAdapter(typing.get_type_hints(RolloutTranscript)[name])


def transcript_of_episode(
    state: EpisodeState,
    task: Any,
    execution: ExecutionResult | None = None,
    record: Record | None = None,
    *,
    env: Environment,
) -> RolloutTranscript:
    """The transcript of an episode (run here, on AWS, or replayed by ``score``): its messages, the code of
    its execution job, the verdict, the scores, and what the environment adds
    (:meth:`rewardpipe.Environment.transcript_fields`: turn kinds, revealed details...). ``task`` may be
    None (a failure before it could be loaded)."""
    from rewardpipe.episode import call_hook  # not at the top: report and show read transcripts without it

    fields: dict[str, Any] = {"executed_code": _executed_code(state, task, env)}
    # evidence only: the environment's extras are left out when the hook fails, calls sys.exit() or outlives
    # hook_timeout_s (called as every hook is: called directly, its sys.exit() ended the run)
    with contextlib.suppress(Exception):
        fields.update(_environment_fields(call_hook(env, "transcript_fields", state, task)))
    return RolloutTranscript(
        **state.record_ids(),
        messages=list(state.messages),
        verdict=verdict_of(execution, fields.get("executed_code"), record, env.runs_code),
        end_reason=state.end_reason,
        **fields,
        **_scores(record),
    )
