"""Single-turn code reward: run the response's code against tests carried by the sample.

The sample's reference answer (or metadata) carries ``tests``, ``entry_point`` (not for ``stdio`` tests) and
optionally ``tests_format`` / ``timeout_s``; ``stdio`` tests may be the list of cases itself or its JSON text.
Components: ``correctness`` (fraction of tests passing on the last assistant turn's code, even when that turn
ends with a confirmation question; 0.0 on timeout; None when the harness failed) and ``has_code`` (1.0 when the
response contains a fenced Python block, a weak format signal).
"""

from __future__ import annotations

import json
from typing import Any

from rewardpipe.components import component
from rewardpipe.execution.result import ExecutionJob
from rewardpipe.models import ErrorInfo
from rewardpipe.rewards.base import Reward, Transcript
from rewardpipe.rewards.execution import execution_correctness, explain_execution_error


def _last_turn_code(transcript: Transcript) -> str | None:
    turns = transcript.assistant_turns
    return turns[-1].code if turns else None


@component(range=(0.0, 1.0), role="outcome", weight=1.0, description="fraction of tests passing")
def correctness(transcript: Transcript, execution: Any) -> float | None:
    # Single-turn: the last turn's code is what was run, even if it ends by asking "does this work?" — there
    # is no next turn in which to answer, so the code is the response.
    if _last_turn_code(transcript) is None:
        return 0.0
    return execution_correctness(execution)


@component(range=(0.0, 1.0), role="shaping", weight=0.0, description="response contains a fenced Python block")
def has_code(transcript: Transcript) -> float:
    return 1.0 if _last_turn_code(transcript) is not None else 0.0


def job_for(transcript: Transcript, reference: Any, sample_id: str = "") -> ExecutionJob | None:
    """The execution job for a single-turn sample (its last turn's code), or None when there is no code.

    Raises ValueError naming the missing field when the reference lacks what the tests need.
    """
    return job_for_code(_last_turn_code(transcript), reference, sample_id)


def job_for_code(code: str | None, reference: Any, sample_id: str = "") -> ExecutionJob | None:
    """The job running ``code`` against the tests the reference carries; None when there is no code."""
    if code is None:
        return None
    if not isinstance(reference, dict):
        raise ValueError("reference_answer must be an object with 'tests' and 'entry_point'")
    tests_format = reference.get("tests_format", "unittest")
    needed = ("tests",) if tests_format == "stdio" else ("tests", "entry_point")
    missing = [key for key in needed if not reference.get(key)]
    if missing:
        raise ValueError(f"reference_answer is missing {', '.join(missing)}")
    tests = reference["tests"]
    if tests_format == "stdio" and isinstance(tests, list | dict):
        # the cases (or {"cases": [...], "float_tolerance": ...}) themselves: their JSON text, as ExecutionJob takes
        # them
        tests = json.dumps(tests)
    return ExecutionJob(
        id=sample_id,
        code=code,
        tests=tests,
        entry_point=reference.get("entry_point") or "",
        tests_format=tests_format,
        # None means "not given"; anything else is validated by ExecutionJob, whose error names the field.
        timeout_s=10.0 if reference.get("timeout_s") is None else reference["timeout_s"],
    )


def explain_error(execution: Any) -> ErrorInfo | None:
    return explain_execution_error(execution)


def diagnostics(transcript: Transcript, execution: Any) -> dict[str, Any]:
    from rewardpipe.envs.ask_before_coding.reward import diagnostics as episode_diagnostics

    return episode_diagnostics(transcript, None, execution)


CODE_CORRECTNESS = Reward(
    "code_correctness",
    [correctness, has_code],
    diagnostics=diagnostics,
    explain_error=explain_error,
    needs_execution=True,
    executed_code=_last_turn_code,
)
