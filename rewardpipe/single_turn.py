"""Score single-turn samples in the Nova Forge reward-Lambda contract.

Input: a list of samples ``{"id", "messages", "metadata": {...}}`` (a single object is tolerated).
Output: one ``{"id", "aggregate_reward_score", "metrics_list"}`` per sample, in order, ids echoed unchanged
(except an id strict JSON cannot carry, such as a NaN or Infinity number, or one holding a lone surrogate, which
is echoed as its string form with such a surrogate escaped, so the response can still be sent).

A sample that cannot be scored still gets a result, always flagged by the metric ``reward_error`` = 1 and
``error_<kind>`` = 1. Its ``aggregate_reward_score`` must be a finite number (the contract has no null and
Nova cannot drop a sample), so :func:`apply_error_reward` decides which: ``neutral`` (the mean of the same
prompt's scored samples in the batch, so its GRPO advantage is about 0), ``zero``, or ``fail_batch``.

With a ``deadline``, a sample's code starts only while its whole time limit fits in the time left (so a
sample that times out is the model's ``timeout``); a sample there was no time to start is answered flagged
(``error_deadline_exceeded``) instead of the caller timing out. With
``answer_by``, the same holds for reading and scoring: a sample not yet answered by then is flagged too, unless
its code already ran (its verdict, a ``timeout`` included, is the model's and is scored, within
:data:`LATE_SCORING_GRACE_S` after the later of ``answer_by`` and the executions' end). A scoring call still
running then (a component with no ``timeout_s`` that hung) is abandoned: its sample is a ``component_timeout``.

:func:`fit_response` keeps the answer inside a size limit (Lambda's synchronous response is at most 6 MB) by
dropping diagnostics, never a sample; an id too large to echo within it is answered under a short stand-in, that
sample flagged ``id_too_large`` (:func:`ids_too_large`).
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Generator, Mapping, Sequence
from typing import Any

from pydantic import ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from rewardpipe.bounded import AbandonedCalls, call_on_main_thread_until, main_thread_call_stoppable
from rewardpipe.deferred import DeferredModel
from rewardpipe.environment import TaskRow
from rewardpipe.execution.result import ExecutionJob, ExecutionResult
from rewardpipe.models import (
    MAX_STEP,
    NO_ANSWER,
    ErrorInfo,
    InputId,
    Message,
    chat_role,
    has_answer,
    non_finite_error,
    nova_fields,
    nova_output,
)
from rewardpipe.rewards import Reward, Score, ScoringInput, Transcript, code_correctness, get_reward

ERROR_REWARDS = ("neutral", "zero", "fail_batch")
NOT_ANSWERED_IN_TIME = "not scored: the invocation's time ran out before this sample's turn"
# A code wave is not started with less time than this left: a job needs interpreter start-up at least.
MIN_JOB_S = 1.0


class BatchFailed(RuntimeError):
    """``error_reward=fail_batch`` and a sample could not be scored: the whole batch is refused."""


class ResponseTooLarge(RuntimeError):
    """Even with every diagnostic dropped, one answer per sample does not fit the response limit."""


#: The role a sample's message without one is read with (:class:`Sample`).
ROLELESS_ROLE = "user"


class Sample(DeferredModel):
    """One sample of the single-turn reward Lambda (Nova Forge RFT), also what the trainer adapters score.

    The Nova Forge SDK's RFT sample makes a message's ``role`` optional (and its ``content``). A message without a
    role (absent or null) is read as a ``user`` turn: part of the prompt the model answered, never the model's
    answer (the generated turn Nova appends always has its role), so it can neither be scored as the answer nor
    hide it, and its text stays in the conversation a component reads. An empty or unknown role is still
    refused."""

    model_config = ConfigDict(extra="allow")

    id: Any = None
    messages: list[Message]
    metadata: dict[str, Any] | None = None
    reference_answer: Any = None

    @field_validator("messages", mode="before")
    @classmethod
    def _roleless_turns_are_the_prompts(cls, value: Any) -> Any:
        if isinstance(value, list) and any(isinstance(m, dict) and m.get("role") is None for m in value):
            return [{**m, "role": ROLELESS_ROLE} if isinstance(m, dict) and m.get("role") is None else m for m in value]
        return value


def find_reference(sample: Sample) -> Any:
    """``reference_answer`` lives in metadata, at the top level, or wrapped as ``{"text": ...}``.

    An empty place in metadata (``null``, or the wrapper with nothing in it: ``{"text": null}``) does not hide a
    top-level value: platforms fill the field they know and leave the other empty. Nor does a blank one (``""``,
    ``{"text": ""}``), which is the reference only when no place holds another (an expected output may be empty).
    """
    places = []
    for place in ((sample.metadata or {}).get("reference_answer"), sample.reference_answer):
        if isinstance(place, dict) and set(place) == {"text"}:
            place = place["text"]
        if place is not None:
            places.append(place)
    return next((place for place in places if place != ""), places[0] if places else None)


def misnamed_reference(sample: Sample) -> str | None:
    """What is wrong with a sample that carries its reference answer under ``reference`` (the name a
    ``rewardpipe score`` file and :func:`rewardpipe.testing.check_reward` use) rather than ``reference_answer``,
    and no ``reference_answer``: the field was kept as an unknown extra and never read, so every such sample was
    a ``bad_reference`` "reference answer is not a number: None", not naming the field that was there."""
    if find_reference(sample) is not None:
        return None
    for where, fields in (("", sample.model_extra or {}), ("metadata.", sample.metadata or {})):
        if fields.get("reference") is not None:
            return (
                f"field '{where}reference' is not read: a sample's reference answer is 'reference_answer' (at the top "
                f"level or in metadata)"
            )
    return None


def code_reference(sample: Sample) -> Any:
    """What a code sample's tests come from: the reference answer, or else the metadata itself.

    The reference may arrive as a JSON *string* (``reference_answer.text`` is a string field on some
    platforms); a string holding a JSON object is read as that object.
    """
    reference = find_reference(sample)
    if isinstance(reference, str):
        try:
            decoded = json.loads(reference)
        except (ValueError, RecursionError):  # not JSON, or nested past the recursion limit: not an object
            decoded = None
        if isinstance(decoded, dict):
            reference = decoded
    if not isinstance(reference, dict) and sample.metadata and "tests" in sample.metadata:
        reference = sample.metadata
    return reference


def _first_problem(exc: Exception) -> str:
    """One line naming the field at fault (pydantic's own first line only says how many errors there were)."""
    if isinstance(exc, ValidationError) and exc.errors():
        from rewardpipe.models import field_error

        return field_error(exc.errors()[0], "<root>")
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _sendable_id(sample_id: Any) -> Any:
    """``sample_id`` as it came when the runtime can send it back, else its text. The python3.12+ runtime writes the
    answer with ``ensure_ascii=False`` and encodes it as UTF-8 after the handler returned, so an id holding a lone
    surrogate (JSON's ``"\\ud800"``) would lose the whole batch there: it is echoed with the surrogate escaped."""
    from rewardpipe.safe_text import escape_lone_surrogates

    try:
        json.dumps(sample_id, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except (ValueError, TypeError, RecursionError):  # UnicodeEncodeError is a ValueError
        try:
            return escape_lone_surrogates(str(sample_id))
        except Exception:  # noqa: BLE001 - no text of it (too deep, an int past the digit limit): still one answer
            return f"<an id of type {type(sample_id).__name__} that cannot be written>"
    return sample_id


#: The error of a sample whose id cannot be echoed within the answer's size limit (:func:`ids_too_large`).
ID_TOO_LARGE = "id_too_large"
# What one sample's answer takes at most besides its id, as fit_response measures it: the bare envelope, the
# longest a float score can be written ("-1.7976931348623157e+308") and the ", " between answers; and at least
# (the shortest score, "0.0").
_BARE_ANSWER_BYTES = len(json.dumps({"id": None, "aggregate_reward_score": -1.7976931348623157e308})) - 4 + 2
_SHORTEST_ANSWER_BYTES = len(json.dumps({"id": None, "aggregate_reward_score": 0.0})) - 4 + 2


def _id_bytes(sample_id: Any) -> int:
    return len(json.dumps(sample_id))  # as fit_response measures it (ASCII: every character one byte)


def _stand_in_id(sample_id: Any, size: int) -> str:
    """A short id naming the one it stands for: its size and a digest of its JSON, so the trainer can still
    match the answer to the sample it sent."""
    import hashlib

    text = json.dumps(sample_id, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return f"<id of {size} bytes not echoed: sha256 {hashlib.sha256(text).hexdigest()[:32]}>"


def ids_too_large(sample_ids: Sequence[Any], limit_bytes: int) -> dict[int, tuple[str, str]]:
    """The ids (by position) that cannot be echoed whole within ``limit_bytes``: ``{index: (stand-in id, why)}``.

    Even with every diagnostic dropped (:func:`fit_response`) a batch's answer holds each sample's id and score, so
    one id of megabytes (a request may hold 6 MB; an id of non-ASCII text takes up to three times its size in the
    measured answer) would refuse the whole batch's answer. Only when the bare answers do not fit, the largest
    ids, largest first, are answered under a short stand-in until they do: those samples, and only they, are an
    ``id_too_large`` error. A batch over the limit by its number of samples alone is left to :func:`fit_response`
    to refuse."""
    sizes = [_id_bytes(sample_id) for sample_id in sample_ids]
    total = 2 + sum(size + _BARE_ANSWER_BYTES for size in sizes)
    if total <= limit_bytes:
        return {}
    out: dict[int, tuple[str, str]] = {}
    for index in sorted(range(len(sizes)), key=lambda i: sizes[i], reverse=True):
        stand_in = _stand_in_id(sample_ids[index], sizes[index])
        saved = sizes[index] - _id_bytes(stand_in)
        if total <= limit_bytes or saved <= 0:
            break
        total -= saved
        out[index] = (
            stand_in,
            f"not scored: its id takes {sizes[index]} bytes in the answer, which echoed whole would pass the "
            f"{limit_bytes}-byte response limit; answered under a stand-in id",
        )
    return out


def refuse_unanswerable(sample_ids: Sequence[Any], stand_ins: Mapping[int, tuple[str, str]], limit_bytes: int) -> None:
    """Raise :class:`ResponseTooLarge` when one bare answer per sample (each id as it will be echoed, the shortest
    score) cannot fit ``limit_bytes``: a batch of too many samples for the answer's limit, refused before any is read
    or scored (a 6 MB request of 1.5 million ``{}`` took a minute and 2 GB to end in the same refusal)."""
    total = 2 + sum(
        _id_bytes(stand_ins[index][0] if index in stand_ins else sample_id) + _SHORTEST_ANSWER_BYTES
        for index, sample_id in enumerate(sample_ids)
    )
    if total > limit_bytes:
        raise ResponseTooLarge(
            f"{len(sample_ids)} samples need at least {total} bytes even as bare ids and scores, over the "
            f"{limit_bytes}-byte response limit: send smaller batches"
        )


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
    *,
    deadline: float | None = None,
    answer_by: float | None = None,
    error_reward: str = "zero",
    response_limit_bytes: int | None = None,
) -> list[dict[str, Any]]:
    """Score a batch. Never raises for bad samples; raises ValueError only for a bad configuration, and
    :class:`BatchFailed` when ``error_reward="fail_batch"`` and a sample could not be scored.

    ``deadline`` is a ``time.monotonic()`` value by which every sample's code must have finished;
    ``answer_by`` one by which every sample must be answered (read and scored, code or not): a sample
    reached later is answered flagged ``deadline_exceeded`` at once, so no batch, however large, runs
    past its caller's time. ``reward_name`` may also be a Reward object (a trainer adapter's own composition).
    With ``response_limit_bytes`` (the answer's size limit, :func:`fit_response`), ids too large to echo within it
    are answered under a stand-in (:func:`ids_too_large`), and a batch of too many samples for any answer to fit
    is refused at once with :class:`ResponseTooLarge` (:func:`refuse_unanswerable`).
    """
    if error_reward not in ERROR_REWARDS:
        raise ValueError(f"error_reward must be one of {', '.join(ERROR_REWARDS)}, got {error_reward!r}")
    reward = reward_name.with_weights(weights) if isinstance(reward_name, Reward) else get_reward(reward_name, weights)
    if isinstance(samples, dict):
        samples = [samples]
    if isinstance(samples, (tuple, Generator)):  # a Python caller's batch: one answer per sample
        samples = list(samples)
    if not isinstance(samples, list):
        return [_error_output(None, "malformed_event", f"expected a list of samples, got {type(samples).__name__}")]
    reads_reference = "reference" in reward.reads

    def out_of_time() -> bool:
        return answer_by is not None and time.monotonic() >= answer_by

    sample_ids = [_sendable_id(raw.get("id")) if isinstance(raw, dict) else None for raw in samples]
    stand_ins = {} if response_limit_bytes is None else ids_too_large(sample_ids, response_limit_bytes)
    if response_limit_bytes is not None:
        refuse_unanswerable(sample_ids, stand_ins, response_limit_bytes)
    parsed: list[tuple[Any, Sample | None, str | None]] = []
    for index, raw in enumerate(samples):
        sample_id = stand_ins[index][0] if index in stand_ins else sample_ids[index]
        if out_of_time() or index in stand_ins:  # (a stand-in's sample is answered id_too_large below)
            parsed.append((sample_id, None, None))
            continue
        try:
            valid = Sample.model_validate(raw)
        except (ValidationError, ValueError, TypeError) as exc:
            parsed.append((sample_id, None, f"malformed sample: {_first_problem(exc)}"))
            continue
        if not has_answer(valid.messages):  # the check `rewardpipe score` makes: no answer is bad input, not a 0
            parsed.append((sample_id, None, f"malformed sample: {NO_ANSWER}"))
            continue
        misnamed = misnamed_reference(valid) if reads_reference else None
        if misnamed:
            parsed.append((sample_id, None, f"malformed sample: {misnamed}"))
            continue
        parsed.append((sample_id, valid, None))

    executions = _run_executions(parsed, reward, executor, workers, deadline)
    # Samples whose code ran are scored past answer_by (their verdicts are the model's, a timeout included), but
    # only within a short grace after the later of answer_by and the executions' end: a slow component or an LLM
    # judge must not carry the batch far past the time its caller set (the review after round six).
    late_limit = None if answer_by is None else max(answer_by, time.monotonic()) + LATE_SCORING_GRACE_S

    def too_late(execution: Any) -> bool:
        if not out_of_time():
            return False
        return not isinstance(execution, ExecutionResult) or time.monotonic() >= (late_limit or 0.0)

    results: list[Any] = []
    # A reward with async components (a judge calling an LLM) is scored for the whole batch at once, so its
    # calls run concurrently; any other sample by sample (each answered before the next is started).
    batched: list[tuple[int, Any, ScoringInput]] = []
    for index, (sample_id, sample, problem) in enumerate(parsed):
        if index in stand_ins:
            results.append(_error_output(sample_id, ID_TOO_LARGE, stand_ins[index][1]))
            continue
        if sample is None and problem is not None:
            results.append(_error_output(sample_id, "malformed_sample", problem))
            continue
        execution = executions.get(index)
        # A sample whose code ran was reached: its verdict is in hand (a timeout is the model's 0), and scoring
        # it is the reward's arithmetic on that verdict. Only a sample still unread or without its code's
        # verdict when the time is up is answered flagged.
        if sample is None or too_late(execution):
            results.append(_error_output(sample_id, "deadline_exceeded", NOT_ANSWERED_IN_TIME))
            continue
        if isinstance(execution, ErrorInfo):
            results.append(_error_output(sample_id, execution.kind, execution.message))
            continue
        data = ScoringInput(execution=execution, reference=find_reference(sample), messages=sample.messages)
        if reward.has_async:
            batched.append((len(results), sample_id, data))
            results.append(None)
            continue
        try:
            score = _within(late_limit, reward.score_input, data)
        except _ScoringTimedOut as exc:
            results.append(_error_output(sample_id, "component_timeout", str(exc)))
            continue
        except Exception as exc:  # noqa: BLE001 - one bad sample must never fail the batch
            results.append(_error_output(sample_id, "scoring_failed", f"{type(exc).__name__}: {exc}"))
            continue
        results.append(_score_output(sample_id, score))
    if batched and late_limit is not None and out_of_time() and time.monotonic() >= late_limit:
        for position, sample_id, _ in batched:  # never start the batch's judge calls this late
            results[position] = _error_output(sample_id, "deadline_exceeded", NOT_ANSWERED_IN_TIME)
        batched = []
    if batched:
        scores: Sequence[Score | Exception]
        try:
            scores = _within(late_limit, reward.score_many, [data for _, _, data in batched], on_this_thread=False)
        except Exception as exc:  # noqa: BLE001 - the batch's own failure: each of its samples says so
            scores = [exc] * len(batched)
        for (position, sample_id, _), scored in zip(batched, scores, strict=False):
            if isinstance(scored, _ScoringTimedOut):
                results[position] = _error_output(sample_id, "component_timeout", str(scored))
            elif isinstance(scored, Exception):
                results[position] = _error_output(sample_id, "scoring_failed", f"{type(scored).__name__}: {scored}")
            else:
                results[position] = _score_output(sample_id, scored)
    return apply_error_reward(results, [prompt_key(raw) for raw in samples], error_reward)


#: How long after the later of ``answer_by`` and the end of the batch's executions samples whose code ran are
#: still scored (scoring them is the reward's arithmetic on verdicts in hand: microseconds for the built-ins).
LATE_SCORING_GRACE_S = 2.0


class _ScoringTimedOut(Exception):
    """The reward was still scoring (a component with no ``timeout_s`` of its own hung) or picking the code to run
    (its ``executed_code`` hook) when the batch's time ran out: that sample's error, and the batch goes on."""

    def __init__(self, still_running: int = 0) -> None:
        reason = f"{still_running} earlier calls of it still running" if still_running else "still running"
        super().__init__(f"the reward's call was {reason} when the invocation's time ran out")


#: The reward's calls (scoring, ``executed_code``) of an invocation with a time limit that passed it, perhaps still
#: running (each holds a thread).
_SCORING_CALLS = AbandonedCalls("rewardpipe-single-turn-scoring")


def _within(until: float | None, call: Any, arg: Any, *, on_this_thread: bool = True) -> Any:
    """``call(arg)``, without a time limit when ``until`` is None; else stopped at ``until`` (a ``time.monotonic()``
    value) with :class:`_ScoringTimedOut`, so a component that never returns costs its sample, never the batch and
    its caller's answer. On the main thread (a Lambda handler's) by its timer, in this thread: a component may use
    ``signal`` itself there (``math_verify`` does), as it could before calls were bounded; elsewhere, or for
    ``score_many`` (``on_this_thread`` False: its event loop), in a thread of its own that is abandoned at ``until``
    (Python cannot stop a thread)."""
    if until is None:
        return call(arg)
    seconds = max(0.0, until - time.monotonic())
    if on_this_thread and main_thread_call_stoppable():
        return call_on_main_thread_until(call, (arg,), seconds, _ScoringTimedOut)
    return _SCORING_CALLS.call(call, (arg,), {}, seconds, _ScoringTimedOut)


def _score_output(sample_id: Any, score: Any) -> dict[str, Any]:
    from rewardpipe.episode import checked_score

    if score.error is None and score.aggregate is None:
        return _error_output(sample_id, "non_finite_score", "reward produced no aggregate")
    # The check every record goes through (a Reward's own scores have been through it already): a component or
    # aggregate that is not finite, or beyond ±MAX_SCORE_MAGNITUDE (a component that parsed the model's "1e308"),
    # is that sample's error, never a score handed to the trainer.
    _, _, error = checked_score(dict(score.components), dict(score.weights), score.aggregate, score.error)
    if error is not None:  # a value that is not finite is a non_finite_score answer, as it always was
        return _error_output(sample_id, "non_finite_score" if non_finite_error(error) else error.kind, error.message)
    return nova_output(sample_id, score.aggregate, score.components, score.metrics)


def prompt_key(raw: Any) -> str | None:
    """The prompt a sample answers: its messages up to (not including) the last assistant turn, as
    canonical JSON. Samples of one GRPO group share it. None when the sample has no readable messages."""
    messages = raw.get("messages") if isinstance(raw, dict) else None
    if not isinstance(messages, list):
        return None
    last = max(
        (i for i, m in enumerate(messages) if isinstance(m, dict) and chat_role(m.get("role")) == "assistant"),
        default=len(messages),
    )
    try:
        return json.dumps(messages[:last], sort_keys=True, allow_nan=False, default=str)
    except (ValueError, TypeError, RecursionError):
        return None


def is_flagged(output: Mapping[str, Any]) -> bool:
    return bool(nova_fields(output)[1].get("reward_error"))  # the flag, never a component of that name


def apply_error_reward(
    outputs: list[dict[str, Any]], group_keys: Sequence[Any], policy: str = "neutral"
) -> list[dict[str, Any]]:
    """Give every flagged output (``reward_error`` = 1) the reward ``policy`` says, in place.

    * ``neutral``: the mean reward of the unflagged outputs with the same group key (same prompt), so the
      sample's GRPO advantage is about 0 and it pushes the policy nowhere; the batch's unflagged mean when
      its group has none; 0.0 when nothing in the batch was scored.
    * ``zero``: 0.0, which GRPO reads as a genuinely bad answer (a penalty for an infrastructure fault).
    * ``fail_batch``: raise :class:`BatchFailed`, so the caller sees the invocation fail.

    The flag stays either way, so whoever reads the metrics can still tell errors from scores.
    """
    if policy not in ERROR_REWARDS:
        raise ValueError(f"error_reward must be one of {', '.join(ERROR_REWARDS)}, got {policy!r}")
    flagged = {i for i, out in enumerate(outputs) if is_flagged(out)}  # a set: a batch may be large
    if not flagged or policy == "zero":
        for i in flagged:
            outputs[i]["aggregate_reward_score"] = 0.0
        return outputs
    if policy == "fail_batch":
        raise BatchFailed(f"{len(flagged)} of {len(outputs)} samples could not be scored (error_reward=fail_batch)")
    keys = list(group_keys) + [None] * (len(outputs) - len(group_keys))
    scored: dict[Any, list[float]] = {}
    every: list[float] = []
    for i, out in enumerate(outputs):
        if i not in flagged:
            every.append(out["aggregate_reward_score"])
            if keys[i] is not None:
                scored.setdefault(keys[i], []).append(out["aggregate_reward_score"])
    batch_mean = _mean(every) if every else 0.0
    for i in sorted(flagged):
        group = scored.get(keys[i]) if keys[i] is not None else None
        outputs[i]["aggregate_reward_score"] = _mean(group) if group else batch_mean
    return outputs


def _mean(values: Sequence[float]) -> float:
    """The mean of finite values, itself always finite: each is divided first, so two rewards near the
    float maximum (a large configured weight) cannot overflow the sum and lose the batch."""
    return math.fsum(value / len(values) for value in values)


# Lambda serialises a Python 3.11 handler's answer with json.dumps' defaults (ASCII only: a non-ASCII
# character takes 6 or 12 bytes), so that is how the answer is measured.
_TRIM_STAGES = (
    ("diagnostics", lambda m: m["type"] == "Reward" or m["name"] == "reward_error" or m["name"].startswith("error_")),
    ("reward_error only", lambda m: m["name"] == "reward_error"),
)


def fit_response(outputs: list[dict[str, Any]], limit_bytes: int) -> tuple[list[dict[str, Any]], str | None]:
    """``outputs`` made to fit ``limit_bytes`` as JSON, and what was dropped (None when nothing was).

    Never drops a sample or changes a score. In order, until it fits: the diagnostic metrics (rewards and
    error flags stay), everything but ``reward_error``, then ``metrics_list`` itself (optional in the
    contract). Raises :class:`ResponseTooLarge` when even ids and scores alone do not fit.
    """
    if len(json.dumps(outputs)) <= limit_bytes:
        return outputs, None
    for stage, keep in _TRIM_STAGES:
        outputs = [{**out, "metrics_list": [m for m in out.get("metrics_list", []) if keep(m)]} for out in outputs]
        if len(json.dumps(outputs)) <= limit_bytes:
            return outputs, f"dropped metrics to fit {limit_bytes} bytes: kept {stage}"
    outputs = [{"id": out["id"], "aggregate_reward_score": out["aggregate_reward_score"]} for out in outputs]
    size = len(json.dumps(outputs))
    if size <= limit_bytes:
        return outputs, f"dropped metrics_list to fit {limit_bytes} bytes"
    raise ResponseTooLarge(
        f"{len(outputs)} samples need {size} bytes even as bare ids and scores, over the "
        f"{limit_bytes}-byte response limit: send smaller batches or shorter ids"
    )


def _run_executions(
    parsed: list[tuple[Any, Sample | None, str | None]],
    reward: Reward,
    executor: Any,
    workers: int | None,
    deadline: float | None = None,
) -> dict[int, ExecutionResult | ErrorInfo]:
    """Run every sample's code in one batch (the pool is what makes a 64-sample call fast). The reward's
    ``executed_code`` hook is given until ``deadline`` (by which all code must have run) to pick each sample's."""
    if not reward.needs_execution:
        return {}
    jobs: dict[int, ExecutionJob] = {}
    out: dict[int, ExecutionResult | ErrorInfo] = {}
    for index, (_, sample, _) in enumerate(parsed):
        if sample is None:
            continue
        code = code_to_run(reward, sample.messages, until=deadline)
        if isinstance(code, ErrorInfo):
            out[index] = code
            continue
        try:
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
        if deadline is None:
            out.update(zip(jobs, executor.run_batch(list(jobs.values()), workers=workers), strict=True))
        else:
            out.update(_run_before_deadline(executor, jobs, workers, deadline))
    except Exception as exc:  # noqa: BLE001 - an infrastructure error for each job it left unanswered
        for index in jobs:
            out.setdefault(index, ErrorInfo(kind="executor_crash", message=f"{type(exc).__name__}: {exc}"))
    return out


#: The error of a sample whose code the reward's ``executed_code`` hook could not pick out of the answer.
EXECUTED_CODE_FAILED = "executed_code_failed"


def code_to_run(reward: Reward, messages: Sequence[Message], *, until: float | None = None) -> str | ErrorInfo | None:
    """The code ``reward`` runs for an answer (:meth:`Reward.code_to_execute`), or the sample's error when the
    reward's ``executed_code`` hook (the user's function picking the code out of the answer) raised on it, returned
    something other than text or None: that sample's ``executed_code_failed``, never the batch's failure nor a
    ``bad_reference`` blaming the dataset. A hook still running at ``until`` (a ``time.monotonic()`` value: the
    time all code must have run by) is abandoned: that sample's ``deadline_exceeded``, as a job with no time left
    to run is."""
    from rewardpipe.rewards.base import first_line

    try:
        code = _within(until, reward.code_to_execute, Transcript.from_messages(messages))
    except _ScoringTimedOut as exc:
        return ErrorInfo(kind="deadline_exceeded", message=f"reward '{reward.name}' executed_code: {exc}")
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - the hook's failure on one answer costs that sample only
        return ErrorInfo(
            kind=EXECUTED_CODE_FAILED, message=f"reward '{reward.name}' executed_code raised {first_line(exc)}"
        )
    if code is not None and not isinstance(code, str):
        return ErrorInfo(
            kind=EXECUTED_CODE_FAILED,
            message=f"reward '{reward.name}' executed_code returned {type(code).__name__}, not text or None",
        )
    return code


def _run_before_deadline(
    executor: Any, jobs: dict[int, ExecutionJob], workers: int | None, deadline: float
) -> dict[int, ExecutionResult | ErrorInfo]:
    """Run the jobs on ``workers`` lanes, each starting its next job as soon as it is free, and only when
    the job's *own* time limit still fits before ``deadline``.

    So a job that runs out its time limit ran all of it: its ``timeout`` is the model's failure (a 0),
    whatever else the batch held. Only a job there was no time left to start with its full budget is an
    infrastructure outcome (``deadline_exceeded``); a hanging sample costs one lane its time limit and
    never a neighbour's budget (nor its own answer: it is not cut short and then excused).
    """
    threads = workers or getattr(getattr(executor, "config", None), "workers", None) or os.cpu_count() or 2
    pending = list(jobs.items())
    out: dict[int, ExecutionResult | ErrorInfo] = {}
    lock = threading.Lock()

    def lane() -> None:
        while True:
            with lock:
                if not pending:
                    return
                index, job = pending.pop(0)
                left = deadline - time.monotonic()
                if left < max(job.timeout_s, MIN_JOB_S):
                    out[index] = ErrorInfo(
                        kind="deadline_exceeded",
                        message=(
                            f"not run: {left:.1f} s were left of the invocation, less than this sample's time "
                            f"limit of {job.timeout_s:g} s"
                        ),
                    )
                    continue
            try:
                result = next(iter(executor.run_batch([job], workers=1)))
            except Exception as exc:  # noqa: BLE001 - this job's answer only; the other lanes go on
                result = ErrorInfo(kind="executor_crash", message=f"{type(exc).__name__}: {exc}")
            with lock:
                out[index] = result

    count = max(1, min(threads, len(pending)))
    lanes = [threading.Thread(target=lane, name="rewardpipe-lane") for _ in range(count)]
    for thread in lanes:
        thread.start()
    for thread in lanes:
        thread.join()
    settle = getattr(executor, "settle", None)  # results that waited on the rest of the batch (see its docstring)
    if callable(settle):
        for index, result in list(out.items()):
            if isinstance(result, ExecutionResult):
                out[index] = settle(result)
    return out


# --------------------------------------------------------------------------------------------------
# `rewardpipe score FILE --reward REF`: single-turn samples from a file, scored into records


class ScoreSample(DeferredModel):
    """One line of a single-turn samples file: the conversation (the last assistant message is the answer)
    and its ``reference``. The ids are optional: ``rollout_id`` defaults to the line, ``group_id`` to the
    ``task_id`` or else to the prompt (the samples of one prompt form a GRPO group), ``task_id`` to the group."""

    model_config = ConfigDict(extra="forbid")

    rollout_id: InputId | None = None
    group_id: InputId | None = None
    task_id: InputId | None = None
    step: int = Field(default=0, ge=0, le=MAX_STEP, strict=True)
    messages: list[Message] = Field(min_length=1)
    reference: Any = None
    #: which id of the line named its task: "task_id", "group_id" (the task defaults to the group) or "" (neither:
    #: the task id is the prompt's group, which names no task of a task file)
    _task_from: str = PrivateAttr(default="task_id")

    @property
    def names_task(self) -> bool:
        """Whether the line gave a ``task_id`` (without one, its task id is its group's)."""
        return self._task_from == "task_id"

    @property
    def unknown_task_message(self) -> str:
        """Why the task file does not hold this sample's task, in the terms of what the line gave."""
        if self.names_task:
            return f"task '{self.task_id}' is not in the task file"
        group = f", and its group_id '{self.group_id}' is no task of the task file" if self._task_from else ""
        return f"the sample gives no task_id{group} (give each sample the task_id of its task file row)"


class OpenTaskRow(TaskRow):
    """A task row of any shape (``task_id``, ``prompt`` and whatever else), for a single-turn reward that reads
    ``task`` without an environment to define the row."""

    model_config = ConfigDict(extra="allow")


def prompt_digest_id(prompt: Sequence[Message] | str) -> str:
    """The id of a prompt no ``task_id`` names: ``p-`` and 16 hex digits of the SHA-256 of the prompt, the same
    for one prompt in every batch and at any position. ``prompt`` is a conversation's messages (only those before
    its last assistant turn, the answer, are the prompt: a sample's whole conversation can be given) or, for a
    prompt no message can hold, its text. ``rewardpipe score`` and the TRL integration both name tasks with it."""
    import hashlib

    if not isinstance(prompt, str):
        last = max((i for i, m in enumerate(prompt) if m.role == "assistant"), default=len(prompt))
        prompt = json.dumps([m.model_dump(mode="json") for m in prompt[:last]], sort_keys=True, ensure_ascii=False)
    # surrogatepass: an earlier turn of the model's may hold a lone surrogate (only hashed here)
    return "p-" + hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).hexdigest()[:16]


class SampleReader:
    """The samples of a JSONL file, one line at a time: ``(line number, ScoreSample | None, problem | None)``.
    A bad line (not UTF-8, not JSON, a field wrong, no assistant message, a ``rollout_id`` already seen at its
    step) comes back with a problem naming ``file:line`` and the field."""

    def __init__(self, path: str | os.PathLike) -> None:
        from pathlib import Path

        self.path = Path(path)
        self._seen: dict[tuple[int, str], int] = {}
        # (step, group) -> (its first sample's task, line): a group is one prompt, so one task (as the rollouts
        # reader and the monitor hold it: records of a group of two tasks are refused there)
        self._group_task: dict[tuple[int, str], tuple[str, int]] = {}

    def __iter__(self):
        from rewardpipe.models import open_input, same_text, validated_lines

        with open_input(self.path) as fh:
            for lineno, where, sample, problem in validated_lines(fh, self.path, ScoreSample):
                if sample is None:
                    yield lineno, None, problem
                    continue
                if not has_answer(sample.messages):
                    yield lineno, None, f"{where}: {NO_ANSWER}"
                    continue
                group = sample.group_id or sample.task_id or prompt_digest_id(sample.messages)
                task_id = sample.task_id or group
                rollout_id = sample.rollout_id or f"line-{lineno}"
                task_from = "task_id" if sample.task_id else "group_id" if sample.group_id else ""
                sample = sample.model_copy(update={"rollout_id": rollout_id, "group_id": group, "task_id": task_id})
                sample._task_from = task_from
                key = (sample.step, same_text(rollout_id))
                first = self._seen.setdefault(key, lineno)
                if first != lineno:
                    yield (
                        lineno,
                        None,
                        (f"{where} ({rollout_id[:80]}): duplicate rollout_id (first on line {first})"),
                    )
                    continue
                task, task_line = self._group_task.setdefault((sample.step, group), (task_id, lineno))
                if task != task_id:
                    del self._seen[key]  # refused: its id stays free for a corrected line
                    yield (
                        lineno,
                        None,
                        (
                            f"{where} ({rollout_id[:80]}): field 'task_id': group '{group[:80]}' of step "
                            f"{sample.step} is task '{task[:80]}' (line {task_line}), not '{task_id[:80]}': "
                            "a group is one prompt"
                        ),
                    )
                    continue
                yield lineno, sample, None


def _executed(outcome: ExecutionResult | ErrorInfo | None) -> ExecutionResult | None:
    """A sample's execution result; None when it has none or its execution failed (an ErrorInfo)."""
    return None if isinstance(outcome, ErrorInfo) else outcome


def _task_of(tasks: Mapping[str, Any] | None, task_id: str | None) -> Any:
    """The task a sample names, or None (no task file, no task id, or not in the file)."""
    return tasks.get(task_id) if tasks is not None and task_id is not None else None


def score_sample_records(
    samples: Sequence[ScoreSample],
    reward: Reward,
    *,
    run_id: str,
    executor: Any = None,
    tasks: Mapping[str, Any] | None = None,
    workers: int | None = None,
    on_transcript: Any = None,
) -> list[Any]:
    """One record per sample (and its transcript to ``on_transcript``): code runs in one batch when the reward
    executes code, then each sample is scored; a sample naming an unknown task, a bad reference or a
    component that raised is an error record, never a 0."""
    from rewardpipe.episode import build_record, failure_record, record_from_score
    from rewardpipe.transcripts import RolloutTranscript, verdict_of

    parsed: list[tuple[Any, Sample | None, str | None]] = [
        (
            sample.rollout_id,
            Sample(id=sample.rollout_id, messages=sample.messages, reference_answer=sample.reference),
            None,
        )
        for sample in samples
    ]
    executions = _run_executions(parsed, reward, executor, workers)
    # A reward with async components (an LLM judge) is scored for the whole batch at once: its calls run together.
    together: dict[int, Any] = {}
    if reward.has_async:
        ready = [
            i
            for i, sample in enumerate(samples)
            if not isinstance(executions.get(i), ErrorInfo) and (tasks is None or sample.task_id in tasks)
        ]
        scores = reward.score_many(
            [
                ScoringInput(
                    execution=_executed(executions.get(i)),  # (none of these is an ErrorInfo)
                    reference=samples[i].reference,
                    messages=samples[i].messages,
                    task=_task_of(tasks, samples[i].task_id),
                )
                for i in ready
            ]
        )
        together = dict(zip(ready, scores, strict=True))
    records = []
    for index, sample in enumerate(samples):
        ids: dict[str, Any] = {
            "run_id": run_id,
            "step": sample.step,
            "group_id": sample.group_id,
            "rollout_id": sample.rollout_id,
            "task_id": sample.task_id,
        }
        task = _task_of(tasks, sample.task_id)
        outcome = executions.get(index)
        execution = _executed(outcome)  # the verdict's: none when the execution itself failed
        code = None
        if tasks is not None and task is None:
            record = failure_record(**ids, kind="unknown_task", message=sample.unknown_task_message, reward=reward)
        elif isinstance(outcome, ErrorInfo):
            record = failure_record(**ids, kind=outcome.kind, message=outcome.message, reward=reward)
        elif index in together:
            record = record_from_score(together[index], **ids)
        else:
            record = build_record(
                **ids,
                messages=sample.messages,
                execution=execution,
                reward=reward,
                task=task,
                reference=sample.reference,
            )
            if reward.needs_execution:
                picked = code_to_run(reward, sample.messages)  # ran once already: the code of the verdict
                code = None if isinstance(picked, ErrorInfo) else picked
        records.append(record)
        if on_transcript is not None:
            on_transcript(
                RolloutTranscript(
                    **ids,
                    messages=list(sample.messages),
                    executed_code=code,
                    verdict=verdict_of(
                        execution,
                        code,
                        record if record.status == "error" else None,
                        reward.needs_execution,
                        runner="reward",  # no environment: the reward decides whether code runs
                    ),
                    status=record.status,
                    error=record.error,
                    components=dict(record.components),
                    aggregate=record.aggregate,
                )
            )
    return records
