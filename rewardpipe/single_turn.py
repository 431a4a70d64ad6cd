"""Score single-turn samples in the Nova Forge reward-Lambda contract.

Input: a list of samples ``{"id", "messages", "metadata": {...}}`` (a single object is tolerated).
Output: one ``{"id", "aggregate_reward_score", "metrics_list"}`` per sample, in order, ids echoed unchanged
(except an id strict JSON cannot carry, such as a NaN or Infinity number, which is echoed as its string form
so the response can still be sent).

A sample that cannot be scored still gets a result: ``aggregate_reward_score`` 0.0 (the contract demands a
finite number) flagged by the metric ``reward_error`` = 1 and ``error_<kind>`` = 1, so a trainer can drop it
from its group baseline and the monitor counts it as an error rather than a genuine zero.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, ValidationError

from rewardpipe.execution.result import ExecutionJob, ExecutionResult
from rewardpipe.models import ErrorInfo, Message, nova_output
from rewardpipe.rewards import Reward, ScoringInput, Transcript, get_reward
from rewardpipe.rewards import code_correctness


class Sample(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: Any = None
    messages: list[Message]
    metadata: dict[str, Any] | None = None
    reference_answer: Any = None


def find_reference(sample: Sample) -> Any:
    """``reference_answer`` lives in metadata, at the top level, or wrapped as ``{"text": ...}``.

    A ``null`` in metadata does not hide a top-level value: platforms fill the field they know and leave
    the other empty.
    """
    reference = None
    if sample.metadata and sample.metadata.get("reference_answer") is not None:
        reference = sample.metadata["reference_answer"]
    elif sample.reference_answer is not None:
        reference = sample.reference_answer
    if isinstance(reference, dict) and set(reference) == {"text"}:
        reference = reference["text"]
    return reference


def code_reference(sample: Sample) -> Any:
    """What a code sample's tests come from: the reference answer, or else the metadata itself.

    The reference may arrive as a JSON *string* (``reference_answer.text`` is a string field on some
    platforms); a string holding a JSON object is read as that object.
    """
    reference = find_reference(sample)
    if isinstance(reference, str):
        try:
            decoded = json.loads(reference)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict):
            reference = decoded
    if not isinstance(reference, dict) and sample.metadata and "tests" in sample.metadata:
        reference = sample.metadata
    return reference


def _first_problem(exc: Exception) -> str:
    """One line naming the field at fault (pydantic's own first line only says how many errors there were)."""
    if isinstance(exc, ValidationError) and exc.errors():
        first = exc.errors()[0]
        return f"field '{'.'.join(str(p) for p in first['loc']) or '<root>'}': {first['msg']}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _sendable_id(sample_id: Any) -> Any:
    try:
        json.dumps(sample_id, allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        return str(sample_id)
    return sample_id


def _error_output(sample_id: Any, kind: str, message: str) -> dict[str, Any]:
    out = nova_output(sample_id, None, {}, {}, ErrorInfo(kind=kind, message=message))
    out["metrics_list"].append({"name": f"error_{kind}", "value": 1, "type": "Metric"})
    return out


def score_samples(
    samples: Any,
    reward_name: str | Reward = "gsm8k",
    weights: Mapping[str, float] | None = None,
    executor: Any = None,
    workers: int | None = None,
) -> list[dict[str, Any]]:
    """Score a batch. Never raises for bad samples; raises ValueError only for a bad reward configuration.
    ``reward_name`` may also be a Reward object (a trainer adapter's own composition)."""
    reward = reward_name.with_weights(weights) if isinstance(reward_name, Reward) else get_reward(reward_name, weights)
    if isinstance(samples, dict):
        samples = [samples]
    if not isinstance(samples, list):
        return [_error_output(None, "malformed_event", f"expected a list of samples, got {type(samples).__name__}")]

    parsed: list[tuple[Any, Sample | None, str | None]] = []
    for raw in samples:
        sample_id = _sendable_id(raw.get("id")) if isinstance(raw, dict) else None
        try:
            parsed.append((sample_id, Sample.model_validate(raw), None))
        except (ValidationError, ValueError, TypeError) as exc:
            parsed.append((sample_id, None, f"malformed sample: {_first_problem(exc)}"))

    executions = _run_executions(parsed, reward, executor, workers)
    results = []
    for index, (sample_id, sample, problem) in enumerate(parsed):
        if sample is None:
            results.append(_error_output(sample_id, "malformed_sample", problem or "malformed sample"))
            continue
        execution = executions.get(index)
        if isinstance(execution, ErrorInfo):
            results.append(_error_output(sample_id, execution.kind, execution.message))
            continue
        try:
            data = ScoringInput(Transcript.from_messages(sample.messages), execution, find_reference(sample))
            score = reward.score_input(data)
        except Exception as exc:  # noqa: BLE001 - one bad sample must never fail the batch
            results.append(_error_output(sample_id, "scoring_failed", f"{type(exc).__name__}: {exc}"))
            continue
        if score.error:
            results.append(_error_output(sample_id, score.error.kind, score.error.message))
            continue
        if score.aggregate is None or not math.isfinite(score.aggregate):  # e.g. huge weights overflowing
            results.append(_error_output(sample_id, "non_finite_score", "reward produced a non-finite aggregate"))
            continue
        results.append(nova_output(sample_id, score.aggregate, score.components, score.metrics))
    return results


def _run_executions(
    parsed: list[tuple[Any, Sample | None, str | None]], reward: Reward, executor: Any, workers: int | None
) -> dict[int, ExecutionResult | ErrorInfo]:
    """Run every sample's code in one batch (the pool is what makes a 64-sample call fast)."""
    if not reward.needs_execution:
        return {}
    jobs: dict[int, ExecutionJob] = {}
    out: dict[int, ExecutionResult | ErrorInfo] = {}
    for index, (_, sample, _) in enumerate(parsed):
        if sample is None:
            continue
        try:
            transcript = Transcript.from_messages(sample.messages)
            code = reward.code_to_execute(transcript)
            job = code_correctness.job_for_code(code, code_reference(sample), str(index))
        except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
            out[index] = ErrorInfo(kind="bad_reference", message=f"reference_answer: {_first_problem(exc)}")
            continue
        if job is not None:
            jobs[index] = job
    if not jobs:
        return out
    if executor is None:
        from rewardpipe.execution import get_executor

        executor = get_executor()
    try:
        results = list(executor.run_batch(list(jobs.values()), workers=workers))
    except Exception as exc:  # noqa: BLE001 - the executor failing is an infrastructure error for each job
        for index in jobs:
            out[index] = ErrorInfo(kind="executor_crash", message=f"{type(exc).__name__}: {exc}")
        return out
    for index, result in zip(jobs, results):
        out[index] = result
    return out
