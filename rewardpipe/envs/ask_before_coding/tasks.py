"""The ask-before-coding task: a brief coding request, the details the user holds back, and hidden tests.

The bundled set (``rewardpipe/data/tasks.jsonl``) is :data:`BUNDLED_TASKS`; ``docs/tasks.md`` describes how
to write more.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator

from rewardpipe.environment import TaskRow
from rewardpipe.models import MAX_SPEC_ITEMS, require_function_name

BUNDLED_TASKS = Path(__file__).resolve().parents[2] / "data" / "tasks.jsonl"


def _spec_item(value: str) -> str:
    if not value.strip():
        raise ValueError("a spec item must state a detail, got a blank string")
    return value


class Task(TaskRow):
    """A coding task: what the model sees (``prompt``) and what it must discover or pass (the rest)."""

    prompt: str = Field(min_length=1)
    # The details the user holds back and the simulator reveals when asked. At least one: with none there is
    # nothing to ask about, so asked_before_coding could never be earned (a dead component) and every
    # episode would be charged guessed_immediately whatever the model did.
    spec: list[Annotated[str, AfterValidator(_spec_item)]] = Field(min_length=1, max_length=MAX_SPEC_ITEMS)
    entry_point: str = Field(min_length=1)
    tests: str = Field(min_length=1)
    tests_format: Literal["unittest", "check"] = "unittest"
    reference_solution: str = Field(min_length=1)
    timeout_s: float | None = Field(default=None, gt=0, le=3600, allow_inf_nan=False)
    # "split" (default): the hidden tests run in a separate trusted process. "inprocess" is the documented,
    # statically screened fallback for tests that must hand the model's code objects that cannot cross a
    # process boundary (callbacks, subclassing); it is the task author's choice, never the model's.
    trust_mode: Literal["split", "inprocess"] = "split"

    @field_validator("entry_point")
    @classmethod
    def _entry_point_is_a_name(cls, value: str) -> str:
        return require_function_name(value)
