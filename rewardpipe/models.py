"""The data that crosses every boundary: tasks, rollouts, messages and scored records.

One definition serves the local runner, the Lambda handlers and the Fargate code runner, so a record
written by any of them reads the same way everywhere.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

RECORD_SCHEMA = "rewardpipe.record/v1"

ASSISTANT_ROLE_ALIASES = {"nova_assistant": "assistant", "model": "assistant"}


def content_to_text(content: Any) -> str:
    """Flatten OpenAI-style content (a string or a list of parts) into plain text.

    Parts may be strings or ``{"type": "text", "text": ...}`` dicts; non-text parts (images, tool
    payloads) carry nothing a text reward can score, so they are skipped rather than rejected.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces: list[str] = []
        for part in content:
            if isinstance(part, str):
                pieces.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                pieces.append(part["text"])
        return "".join(pieces)
    if isinstance(content, dict) and isinstance(content.get("text"), str):
        return content["text"]
    raise ValueError(f"message content must be a string or a list of text parts, got {type(content).__name__}")


class Message(BaseModel):
    """One chat turn. ``content`` is always normalised to text; ``nova_assistant`` becomes ``assistant``."""

    model_config = ConfigDict(extra="ignore")

    role: str
    content: str = ""

    @field_validator("role", mode="before")
    @classmethod
    def _normalise_role(cls, value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise ValueError("role must be a non-empty string")
        return ASSISTANT_ROLE_ALIASES.get(value, value)

    @field_validator("content", mode="before")
    @classmethod
    def _normalise_content(cls, value: Any) -> str:
        return content_to_text(value)


class Task(BaseModel):
    """A coding task: what the model sees (``prompt``) and what it must discover or pass (the rest)."""

    model_config = ConfigDict(extra="forbid")

    task_id: str = Field(min_length=1)
    prompt: str = Field(min_length=1)
    spec: list[str]
    entry_point: str = Field(min_length=1)
    tests: str = Field(min_length=1)
    tests_format: Literal["unittest", "check"] = "unittest"
    reference_solution: str = Field(min_length=1)
    timeout_s: float | None = Field(default=None, gt=0, le=3600)
    # "split" (default): the hidden tests run in a separate trusted process. "inprocess" is the documented,
    # statically screened fallback for tests that must hand the model's code objects that cannot cross a
    # process boundary (callbacks, subclassing); it is the task author's choice, never the model's.
    trust_mode: Literal["split", "inprocess"] = "split"


class Rollout(BaseModel):
    """A recorded episode: the transcript of one of the K samples of a GRPO group."""

    model_config = ConfigDict(extra="forbid")

    rollout_id: str = Field(min_length=1)
    group_id: str = Field(min_length=1)
    task_id: str = Field(min_length=1)
    step: int = Field(default=0, ge=0)
    messages: list[Message]


class ErrorInfo(BaseModel):
    """Why a record could not be scored. ``kind`` is a stable machine-readable class."""

    kind: str
    message: str


MetricValue = float | int | str | bool | None


class Record(BaseModel):
    """One scored (or unscorable) rollout. Components are ``None`` when they could not be computed."""

    model_config = ConfigDict(populate_by_name=True)

    schema_: Literal["rewardpipe.record/v1"] = Field(default=RECORD_SCHEMA, alias="schema")
    run_id: str
    step: int = 0
    group_id: str
    rollout_id: str
    task_id: str
    status: Literal["scored", "error"]
    error: ErrorInfo | None = None
    components: dict[str, float | None]
    weights: dict[str, float]
    aggregate: float | None
    metrics: dict[str, MetricValue] = Field(default_factory=dict)

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True)

    def to_nova(self) -> dict[str, Any]:
        """The Nova Forge reward shape: ``aggregate_reward_score`` plus typed ``metrics_list``."""
        return nova_output(self.rollout_id, self.aggregate, self.components, self.metrics, self.error)


def nova_output(
    sample_id: Any,
    aggregate: float | None,
    components: dict[str, float | None],
    metrics: dict[str, MetricValue],
    error: ErrorInfo | None = None,
) -> dict[str, Any]:
    """Build one Nova ``RewardFunctionOutput``.

    Nova requires a finite number for every entry, so an uncomputable component is left out of
    ``metrics_list`` (a reward of 0 would be a lie), as is any non-finite value, and an error is flagged by
    the ``reward_error`` metric; the aggregate of an error (or a non-finite aggregate) is reported as 0.0
    *and* flagged, because the contract has no null. Trainers that read ``reward_error`` can drop the
    sample from the group baseline.
    """
    metrics_list: list[dict[str, Any]] = []
    for name, value in components.items():
        if value is not None and math.isfinite(value):
            metrics_list.append({"name": name, "value": float(value), "type": "Reward"})
    for name, value in metrics.items():
        if isinstance(value, bool):
            value = int(value)
        if isinstance(value, (int, float)) and math.isfinite(value):
            metrics_list.append({"name": name, "value": value, "type": "Metric"})
    # A non-finite aggregate cannot be sent either: it is reported as 0.0 and flagged like any error.
    finite = aggregate is not None and math.isfinite(aggregate)
    flagged = bool(error) or (aggregate is not None and not finite)
    metrics_list.append({"name": "reward_error", "value": 1 if flagged else 0, "type": "Metric"})
    return {
        "id": sample_id,
        "aggregate_reward_score": float(aggregate) if finite else 0.0,
        "metrics_list": metrics_list,
    }


class InputFileError(ValueError):
    """A JSONL input file has a bad line; the message names the file, line and field."""


M = TypeVar("M", bound=BaseModel)


def _describe_validation_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "<line>"
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown field '{field}'")
        elif err["type"] == "missing":
            parts.append(f"missing required field '{field}'")
        else:
            parts.append(f"field '{field}': {err['msg']}")
    return "; ".join(parts)


def parse_jsonl(lines: Iterable[str], model: type[M], source: str) -> Iterator[M]:
    """Parse JSONL into ``model`` instances; any bad line raises :class:`InputFileError` naming it."""
    for _, item in _parse_numbered(lines, model, source):
        yield item


def iter_json_objects(lines: Iterable[str], source: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank JSONL line; a line that is not an object raises
    :class:`InputFileError` naming ``source`` and the line."""
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputFileError(f"{source}:{lineno}: not valid JSON ({exc.msg})") from None
        if not isinstance(raw, dict):
            raise InputFileError(f"{source}:{lineno}: expected a JSON object, got {type(raw).__name__}")
        yield lineno, raw


def _parse_numbered(lines: Iterable[str], model: type[M], source: str) -> Iterator[tuple[int, M]]:
    for lineno, raw in iter_json_objects(lines, source):
        try:
            yield lineno, model.model_validate(raw)
        except ValidationError as exc:
            ident = raw.get("task_id") or raw.get("rollout_id") or ""
            label = f" ({ident})" if ident else ""
            raise InputFileError(f"{source}:{lineno}{label}: {_describe_validation_error(exc)}") from None


def load_tasks(path: str | Path) -> list[Task]:
    """Load a task JSONL file; duplicate ``task_id`` values are an error too."""
    path = Path(path)
    with path.open(encoding="utf-8") as fh:
        numbered = list(_parse_numbered(fh, Task, str(path)))
    first_line: dict[str, int] = {}
    for lineno, task in numbered:
        if task.task_id in first_line:
            raise InputFileError(
                f"{path}:{lineno}: duplicate task_id '{task.task_id}' (first on line {first_line[task.task_id]})"
            )
        first_line[task.task_id] = lineno
    return [task for _, task in numbered]


def load_rollouts(path: str | Path) -> list[Rollout]:
    path = Path(path)
    with path.open(encoding="utf-8") as fh:
        return list(parse_jsonl(fh, Rollout, str(path)))
