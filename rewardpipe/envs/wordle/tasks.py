"""The wordle task row: a prompt, the secret ``answer`` and how many guesses the model gets.

Two shapes of row are read, each validated field by field (an unknown field is an error naming it):

* flat: ``{"task_id": "w-001", "prompt": "...", "answer": "crane", "max_guesses": 6}`` (``max_guesses``
  defaults to 6);
* the AWS sample's: ``{"id": "w-001", "metadata": {"prompt": "...", "answer": "crane"}}`` (``max_guesses``
  may sit in ``metadata`` too; a numeric ``id`` is read as text).

The bundled set (``rewardpipe/data/wordle_tasks.jsonl``, :data:`BUNDLED_TASKS`) holds words of the bundled word
list, repeated letters among them. Like every task file it sits outside the environment's package: task rows
are never shipped with the code (a deployment gets them through S3).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from rewardpipe.environment import TaskRow
from rewardpipe.envs.wordle.game import is_word_shape

BUNDLED_TASKS = Path(__file__).resolve().parents[2] / "data" / "wordle_tasks.jsonl"
DEFAULT_MAX_GUESSES = 6
MAX_GUESSES = 10

_SAMPLE_FIELDS = {"id", "metadata"}
_METADATA_FIELDS = ("prompt", "answer", "max_guesses")


def _from_sample_row(row: dict[str, Any]) -> dict[str, Any]:
    """A row of the AWS sample's shape as a flat row (a flat row passes through)."""
    if not _SAMPLE_FIELDS & row.keys():
        return row
    if "task_id" in row:
        raise ValueError("a row has either 'task_id' (flat) or 'id' and 'metadata' (the AWS sample's shape), not both")
    extra = sorted(set(row) - _SAMPLE_FIELDS)
    if extra:
        raise ValueError(
            f"a row of the AWS sample's shape has only 'id' and 'metadata'; unknown field(s): "
            f"{', '.join(map(repr, extra))}"
        )
    if "id" not in row:
        raise ValueError("a row of the AWS sample's shape needs 'id'")
    metadata = row.get("metadata")
    if not isinstance(metadata, dict):
        raise ValueError(f"'metadata' must be an object with 'prompt' and 'answer', got {type(metadata).__name__}")
    unknown = sorted(set(metadata) - set(_METADATA_FIELDS))
    if unknown:
        raise ValueError(
            f"'metadata' holds {', '.join(_METADATA_FIELDS)}; unknown field(s): {', '.join(map(repr, unknown))}"
        )
    task_id = row["id"]
    if isinstance(task_id, int) and not isinstance(task_id, bool):
        task_id = str(task_id)
    return {"task_id": task_id, **metadata}


class WordleTask(TaskRow):
    """One game: the ``prompt`` the model sees, the secret ``answer`` (five letters, read in lowercase) and
    ``max_guesses`` (1 to 10, default 6)."""

    prompt: str = Field(min_length=1)
    answer: str
    max_guesses: int = Field(default=DEFAULT_MAX_GUESSES, ge=1, le=MAX_GUESSES, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _read_sample_shape(cls, data: Any) -> Any:
        return _from_sample_row(data) if isinstance(data, dict) else data

    @field_validator("answer")
    @classmethod
    def _five_letters(cls, value: str) -> str:
        word = value.strip()
        if not is_word_shape(word):
            raise ValueError(f"the answer must be five letters a-z, got {value[:40]!r}")
        return word.lower()
