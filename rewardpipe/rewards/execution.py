"""What an execution result is worth to a reward, shared by every reward that runs code against tests."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rewardpipe.models import ErrorInfo, MetricValue

if TYPE_CHECKING:  # pragma: no cover
    from rewardpipe.execution.result import ExecutionResult


def execution_correctness(execution: ExecutionResult | None) -> float | None:
    """Fraction of tests passing; ``None`` when the tests could not run (no result, or a harness error).

    A timeout is the model's failure and scores 0.0 even if the result reports tests that passed before the
    clock ran out: partial credit for code that hangs would reward infinite loops after the easy cases.
    """
    from rewardpipe.execution.result import ExecutionStatus

    if execution is None or execution.is_infrastructure_error:
        return None  # the tests did not run: an infrastructure failure, not a model failure
    if execution.status is ExecutionStatus.TIMEOUT:
        return 0.0
    return execution.fraction_passed


def execution_metrics(execution: ExecutionResult | None) -> dict[str, MetricValue]:
    """The execution's verdict as record metrics (none when nothing ran)."""
    if execution is None:
        return {}
    return {
        "tests_passed": execution.passed,
        "tests_total": execution.total,
        "exec_status": execution.status.value,
        "exec_reason": execution.reason,
        "exec_mode": execution.mode,
        "exec_ms": round(execution.duration_ms, 3),
    }


def explain_execution_error(execution: ExecutionResult | None) -> ErrorInfo | None:
    """Why a correctness component came back None: no result was supplied, or the harness failed."""
    if execution is None:
        return ErrorInfo(kind="not_executed", message="code was committed but no execution result was supplied")
    if execution.is_infrastructure_error:
        return ErrorInfo(kind="execution_error", message=execution.reason or "the test harness failed")
    return None
