"""Nova Forge single-turn reward Lambda (``reward_lambda_arn``).

In: a JSON array of samples (a single object is tolerated). Out: one RewardFunctionOutput per
sample, in order, ids echoed. The event is deliberately NOT parsed into a model here: validation is
per sample inside rewardpipe.single_turn, so one malformed sample gets an error result
(``aggregate_reward_score`` 0.0 flagged by ``reward_error`` = 1) and never fails the batch.
The reward comes from SINGLE_TURN_REWARD_REF (the user's ``package.module:ATTR``, resolved by the stack at synth
and imported here by reference, never by an entry-point scan), else REWARD_NAME (gsm8k, code_correctness, ...),
with REWARD_WEIGHTS (rewardpipe.aws.settings.Settings.single_turn_reward); what an unscorable sample is worth to
Nova from ERROR_REWARD (neutral | zero | fail_batch).

The invocation never times out with the batch in hand: code runs only while the context says time is
left, minus a margin for the sandbox's own grace period, scoring and the response, and a sample whose code
could not finish in time is answered flagged; so is a sample still unscored when only the reserve for
sending the answer is left, a reward call still running then (a hung component) included. The answer is
kept under Lambda's 6 MB synchronous response limit by dropping diagnostic metrics, never a sample; an id too
large to echo within it is answered under a short stand-in id, flagged ``id_too_large``.

Called without a Lambda context (the Nova Forge SDK's ``verify_reward_function`` tests a handler file locally
with ``lambda_handler(samples, {})``), the batch is scored as in an invocation with Lambda's whole 15 minutes.
"""

from __future__ import annotations

import os
import time
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from rewardpipe.aws.settings import Settings
from rewardpipe.single_turn import fit_response, is_flagged, score_samples

# Imported at INIT (a bad reference fails the cold start with a ConfigurationError naming the variable).
REWARD = Settings.from_env().single_turn_reward
REWARD_NAME = REWARD.name
ERROR_REWARD = os.environ.get("ERROR_REWARD") or "neutral"
# Kept free at the end of the invocation: the sandbox's grace period past a job's budget (5 s), scoring and
# serialising the answer. Grows with long invocations so a 64-sample batch has room to be scored.
MIN_MARGIN_S = 15.0
MARGIN_FRACTION = 0.05
# Kept free after the last sample is answered: measuring, trimming and sending up to 6 MB of JSON.
ANSWER_RESERVE_S = 5.0
# Lambda Invoke: "For synchronous invocations, the maximum payload size is 6 MB" (request and response);
# a little is kept back for the runtime's own framing.
RESPONSE_LIMIT_BYTES = 6 * 1024 * 1024 - 1024
logger = Logger()
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "RewardPipe")
metrics.clear_default_dimensions()  # Powertools metric state is per process; start from a clean set
metrics.clear_metrics()
metrics.set_default_dimensions(reward=REWARD_NAME)


def _errors(results: list[dict[str, Any]]) -> int:
    return sum(1 for r in results if is_flagged(r))


def deadline(context: Any) -> float:
    """The time.monotonic() by which all code must have finished, from what Lambda says is left."""
    left_s = context.get_remaining_time_in_millis() / 1000.0
    return time.monotonic() + left_s - max(MIN_MARGIN_S, MARGIN_FRACTION * left_s)


def answer_by(context: Any) -> float:
    """The time.monotonic() by which every sample must have been answered (scored or flagged)."""
    return time.monotonic() + context.get_remaining_time_in_millis() / 1000.0 - ANSWER_RESERVE_S


# Lambda's longest invocation: the time a call without a Lambda context is given.
LOCAL_CALL_MS = 15 * 60 * 1000


class LocalContext:
    """What the handler reads of a Lambda context, for a call made without one (a local test harness)."""

    function_name = aws_request_id = "local"
    invoked_function_arn = "local"
    memory_limit_in_mb = 0

    def __init__(self) -> None:
        self._until = time.monotonic() + LOCAL_CALL_MS / 1000.0

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._until - time.monotonic()) * 1000))


def lambda_handler(event: Any, context: Any) -> list[dict[str, Any]]:
    if not callable(getattr(context, "get_remaining_time_in_millis", None)):
        context = LocalContext()  # {} or None: called as the SDK's local verification calls it
    return _score_batch(event, context)


@metrics.log_metrics
@logger.inject_lambda_context
def _score_batch(event: Any, context: Any) -> list[dict[str, Any]]:
    from rewardpipe.aws.hardening import make_non_dumpable

    make_non_dumpable()  # code_correctness runs model code in child processes
    results = score_samples(
        event,
        REWARD,
        deadline=deadline(context),
        answer_by=answer_by(context),
        error_reward=ERROR_REWARD,
        response_limit_bytes=RESPONSE_LIMIT_BYTES,
    )
    errors = _errors(results)
    metrics.add_metric(name="SamplesScored", unit=MetricUnit.Count, value=len(results))
    metrics.add_metric(name="SampleErrors", unit=MetricUnit.Count, value=errors)
    logger.info("scored batch", extra={"samples": len(results), "errors": errors, "reward": REWARD_NAME})
    results, trimmed = fit_response(results, RESPONSE_LIMIT_BYTES)
    if trimmed:
        logger.warning("answer trimmed to Lambda's response limit", extra={"samples": len(results), "trim": trimmed})
    return results
