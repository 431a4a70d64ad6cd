"""Execution jobs and results handed to a code runner and back.

* The **Lambda runner** gets its job inline, in the synchronous invoke's payload, and answers with the
  result in its response (:func:`inline_request`, :func:`run_inline_job`): neither side touches S3 for it,
  and the runner's credentials (in the VPC where model code runs) need no S3 access at all, so nothing
  they could leak reads another rollout's hidden tests.
* The **Fargate runner** (long jobs, and jobs too large for Lambda's 6 MB synchronous payload) reads the job
  from S3 and writes the result there: ``jobs/<run>/<rollout>/<attempt>/job.json`` and ``.../result.json``.
  The attempt id is fresh for every job, so a result left by an earlier attempt can never be mistaken for
  this one's (containers/code_runner/entry.py).
* A Fargate task **claims** its job before running it (:func:`claim_job`: ``.../claim.json``, created only if
  absent). Step Functions retries the Fargate step on an ECS error, and an error after the task started (a
  failed status poll) starts a second task of the same job: that task runs nothing; it waits for the first
  task's result (:func:`wait_for_result`), no longer than the first task's budget from its claim
  (:func:`claim_wait_s`), or ends with none, so a job never runs twice.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from rewardpipe.execution.result import ExecutionJob, ExecutionResult, ExecutionStatus

JOBS_PREFIX = "jobs/"
# Lambda's Invoke API: "For synchronous invocations, the maximum payload size is 6 MB", request and response
# alike (https://docs.aws.amazon.com/lambda/latest/dg/API_Invoke.html). A job whose request would be larger
# runs on the Fargate runner instead; a response is kept under it by dropping the program's output.
SYNC_INVOKE_LIMIT = 6 * 1024 * 1024


def inline_request(job: ExecutionJob) -> bytes:
    """The Lambda runner's invoke payload for ``job``."""
    return json.dumps({"job": job.model_dump(mode="json")}, separators=(",", ":")).encode("utf-8")


def fits_inline(job: ExecutionJob) -> bool:
    """True when ``job`` can be sent to the Lambda runner in a synchronous invoke."""
    return len(inline_request(job)) <= SYNC_INVOKE_LIMIT


def inline_response(result: ExecutionResult) -> dict[str, Any]:
    """The Lambda runner's answer: the result and its log-safe summary, under the synchronous response limit.

    The sandbox caps the program's stdout and stderr, but JSON escaping can grow them several times; if the
    answer would not fit, they are dropped (the verdict and counts are what scoring reads) and say so."""
    out = {"result": result.model_dump(mode="json"), **summary(result)}
    if len(json.dumps(out).encode("utf-8")) > SYNC_INVOKE_LIMIT:
        note = "(dropped: the result did not fit Lambda's 6 MB response)"
        out["result"] = result.model_copy(update={"stdout": note, "stderr": note}).model_dump(mode="json")
    return out


def run_inline_job(job: ExecutionJob, executor: Any = None) -> ExecutionResult:
    """Run a job handed over inline in the rewardpipe sandbox (the Lambda runner)."""
    if executor is None:
        from rewardpipe.execution import get_executor

        executor = get_executor()
    result = executor.run(job)
    if not isinstance(result, ExecutionResult):
        raise TypeError(f"executor returned {type(result).__name__}, not an ExecutionResult")
    return result


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


CLAIM_NAME = "claim.json"
# S3 answers a conditional create of a key that exists (or is being created) with 412 (or 409).
_CLAIMED = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict", "409"})
# How long a second task of a job waits for the first task's result beyond the job's own budget, and how often
# it looks (the Fargate step's timeout stops it sooner; rollout_workflow.fargate_step_timeout_s).
CLAIM_WAIT_MARGIN_S = 600
CLAIM_POLL_S = 5.0
_sleep, _clock, _wall = time.sleep, time.monotonic, time.time


def claim_key(job_key: str) -> str:
    """``jobs/<run>/<rollout>/<attempt>/claim.json``, beside the job."""
    return _check(job_key).rsplit("/", 1)[0] + "/" + CLAIM_NAME


def claim_job(store: Any, job_key: str) -> bool:
    """Claim the job at ``job_key`` for this task: True when no task claimed it before (a conditional create,
    ``If-None-Match: *``, so of two tasks started at once only one wins), False when another task has it."""
    from rewardpipe.store import StoreError, s3_error_code

    key = claim_key(job_key)
    body = json.dumps({"claimed_at": time.time()}).encode("utf-8")
    try:
        store._call(
            f"claim {key}",
            store.client.put_object,
            Bucket=store.bucket,
            Key=store._full(key),
            Body=body,
            ContentType="application/json",
            IfNoneMatch="*",
        )
    except StoreError as exc:
        if exc.__cause__ is not None and s3_error_code(exc.__cause__) in _CLAIMED:
            return False
        raise
    return True


def claim_wait_s(store: Any, job_key: str, job_timeout_s: float) -> float:
    """How long a second task of the job at ``job_key`` waits for the first's result: until the first task's budget
    (the job's ``timeout_s`` plus :data:`CLAIM_WAIT_MARGIN_S`) is spent, counted from its claim, not from the
    second task's start. The second task is billed while it waits; a first task that died without a result (its
    container killed) left it waiting a whole budget more. A claim that cannot be read gives the whole budget."""
    budget = job_timeout_s + CLAIM_WAIT_MARGIN_S
    try:
        claimed_at = store.get_json(claim_key(job_key))["claimed_at"]
    except Exception:  # noqa: BLE001 - the claim is there (this task lost it); its time is only a shortcut
        return budget
    if isinstance(claimed_at, bool) or not isinstance(claimed_at, (int, float)) or not math.isfinite(claimed_at):
        return budget
    return max(0.0, min(budget, claimed_at + budget - _wall()))


def wait_for_result(store: Any, key: str, wait_s: float) -> ExecutionResult | None:
    """The result another task of the job writes at ``key``, looked for every :data:`CLAIM_POLL_S` for up to
    ``wait_s`` seconds; None if none came (a read S3 could not answer is tried again at the next look)."""
    from rewardpipe.store import StoreError

    deadline = _clock() + wait_s
    while True:
        try:
            result = get_result(store, key)
        except StoreError:
            result = None
        if result is not None or _clock() >= deadline:
            return result
        _sleep(CLAIM_POLL_S)


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
