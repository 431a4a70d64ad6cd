"""The tool-call task row: a prompt, the initial ``world`` and the goal (the expected final world, the
expected answer, or both), with the calls that reach it (``reference_calls``: doctor's reference scenario
plays them, and checks they do reach the goal).

The bundled set (``rewardpipe/data/tool_call_tasks.jsonl``, :data:`BUNDLED_TASKS`) runs over the shop toolset
(:mod:`~rewardpipe.envs.tool_call.shop`). Like every task file it sits outside the environment's package: task
rows are never shipped with the code.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, model_validator

from rewardpipe.deferred import DeferredModel
from rewardpipe.environment import TaskRow
from rewardpipe.rewards.numeric import plain_decimal
from rewardpipe.tagged import GROUPED_DIGITS, plain_content

BUNDLED_TASKS = Path(__file__).resolve().parents[2] / "data" / "tool_call_tasks.jsonl"


class PlannedCall(DeferredModel):
    """One call of a task's reference solution."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolCallTask(TaskRow):
    """``world``: the JSON object the tools start from; ``expected_world`` and/or ``expected_answer``: the
    goal (the answer is compared as :func:`normalise_answer` reads it); ``reference_calls``:
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


# A number written with thousands separators, whole: "12,000", "-1,234.50", "1,00,000" (gsm8k's grouping rule).
_GROUPED_NUMBER = re.compile(rf"[-+]?(?:{GROUPED_DIGITS.pattern})(?:\.\d+)?")


def normalise_answer(text: Any) -> str:
    """How answers are compared: read as :func:`rewardpipe.tagged.plain_content` reads a tag's content (full-width
    forms as ASCII, invisible format characters dropped, Markdown emphasis, code marks and quotes around the whole
    answer dropped), case-folded, inner spaces collapsed, a final period dropped. Applied to both sides alike.

    An honest ``<answer>**7**</answer>`` (a model bolding what it was asked for) or ``<answer>`7`</answer>`` scored
    the goal missed against ``7``; what lies between the marks is compared as before, so nothing wrong is made right.
    """
    answer = " ".join(plain_content(str(text)).casefold().split()).rstrip(".").strip()
    # "12,000" is the number 12000 as a model writes it (the task asked for "the number only", and got it): the
    # grouping commas go when they group the whole answer's digits as thousands, and only then ("1,2" stays).
    return answer.replace(",", "") if _GROUPED_NUMBER.fullmatch(answer) else answer


def answers_match(given: Any, expected: Any) -> bool:
    """Whether a final answer is the expected one: both read by :func:`normalise_answer`, then compared as numbers
    when both are plain decimal numbers as every built-in reads one (:func:`rewardpipe.rewards.numeric.plain_decimal`:
    ``12000.00`` is ``12000``, ``1,234.5`` is ``1234.50``, ``١٢٠٠٠`` in Arabic-Indic digits is ``12000``, ``−5`` with a
    typographic minus sign is ``-5``, ``$12,000`` is ``12000``; no exponent, so no reading of a hostile answer can
    overflow, take time or equal everything), else as text. Compared as text, an honest ``12000.00`` missed a goal of
    ``12000``, and (round thirty-four) ``١٢٠٠٠`` one that gsm8k would have read as met."""
    left, right = normalise_answer(given), normalise_answer(expected)
    if left == right:
        return True
    left_number, right_number = plain_decimal(left), plain_decimal(right)
    return left_number is not None and left_number == right_number
