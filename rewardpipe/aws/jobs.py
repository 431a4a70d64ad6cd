"""Execution jobs and results handed between the state machine and a code runner through S3.

Layout: ``jobs/<run>/<rollout>/<attempt>/job.json`` and ``.../result.json``. The attempt id is fresh
for every PrepareExecution, so a result left by an earlier attempt can never be mistaken for this
one's. Both code runners (the Lambda and the Fargate container) call :func:`run_job`.
"""

from __future__ import annotations

from typing import Any

from rewardpipe.execution.result import ExecutionJob, ExecutionResult, ExecutionStatus

JOBS_PREFIX = "jobs/"


def job_keys(run: str, rollout: str, attempt: str) -> tuple[str, str]:
    from rewardpipe.store import encode_id

    base = f"{JOBS_PREFIX}{encode_id(run)}/{encode_id(rollout)}/{encode_id(attempt)}/"
    return base + "job.json", base + "result.json"


def _check(key: str) -> str:
    if not isinstance(key, str) or not key.startswith(JOBS_PREFIX) or ".." in key.split("/"):
        raise ValueError(f"job and result keys must be under '{JOBS_PREFIX}', got {key!r}")
    return key


def put_job(store: Any, key: str, job: ExecutionJob) -> None:
    store.put_json(_check(key), job.model_dump(mode="json"))


def get_job(store: Any, key: str) -> ExecutionJob:
    try:
        raw = store.get_json(_check(key))
    except KeyError:
        raise FileNotFoundError(f"no execution job at {key}") from None
    return ExecutionJob.model_validate(raw)


def put_result(store: Any, key: str, result: ExecutionResult) -> None:
    store.put_json(_check(key), result.model_dump(mode="json"))


def get_result(store: Any, key: str) -> ExecutionResult | None:
    """The result, or None if the runner never wrote one."""
    raw = store.get_json(_check(key), default=None)
    return None if raw is None else ExecutionResult.model_validate(raw)


def run_job(store: Any, job_key: str, result_key: str, executor: Any = None) -> ExecutionResult:
    """Read the job, run it in the rewardpipe sandbox, write the result. Executor exceptions propagate
    (the state machine records them as ``executor_crash``); a sandbox verdict of any status is written."""
    job = get_job(store, job_key)
    if executor is None:
        from rewardpipe.execution import get_executor

        executor = get_executor()
    result = executor.run(job)
    if not isinstance(result, ExecutionResult):
        raise TypeError(f"executor returned {type(result).__name__}, not an ExecutionResult")
    put_result(store, result_key, result)
    return result


def summary(result: ExecutionResult) -> dict[str, Any]:
    """Small, log-safe view of a result (no stdout/stderr of the model's program)."""
    return {
        "id": result.id,
        "status": result.status.value if isinstance(result.status, ExecutionStatus) else str(result.status),
        "passed": result.passed,
        "total": result.total,
        "duration_ms": round(result.duration_ms, 1),
        "mode": result.mode,
    }
