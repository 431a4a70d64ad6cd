"""The tool-call task row: a prompt, the initial ``world`` and the goal (the expected final world, the
expected answer, or both), with the calls that reach it (``reference_calls``: doctor's reference scenario
plays them, and checks they do reach the goal).

The bundled set (``rewardpipe/data/tool_call_tasks.jsonl``, :data:`BUNDLED_TASKS`) runs over the shop toolset
(:mod:`~rewardpipe.envs.tool_call.shop`). Like every task file it sits outside the environment's package: task
rows are never shipped with the code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, model_validator

from rewardpipe.deferred import DeferredModel
from rewardpipe.environment import TaskRow

BUNDLED_TASKS = Path(__file__).resolve().parents[2] / "data" / "tool_call_tasks.jsonl"


class PlannedCall(DeferredModel):
    """One call of a task's reference solution."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolCallTask(TaskRow):
    """``world``: the JSON object the tools start from; ``expected_world`` and/or ``expected_answer``: the
    goal (the answer is compared after trimming, case-folding and collapsing spaces); ``reference_calls``:
    calls that reach it (in order)."""

    world: dict[str, Any]
    expected_world: dict[str, Any] | None = None
    expected_answer: str | None = Field(default=None, min_length=1)
    reference_calls: list[PlannedCall] = Field(default_factory=list)

    @model_validator(mode="after")
    def _has_a_goal(self) -> ToolCallTask:
        if self.expected_world is None and self.expected_answer is None:
            raise ValueError("a tool-call task needs a goal: expected_world, expected_answer, or both")
        return self


def normalise_answer(text: Any) -> str:
    """How answers are compared: trimmed, case-folded, inner spaces collapsed, a final period dropped."""
    return " ".join(str(text).casefold().split()).rstrip(".").strip()
