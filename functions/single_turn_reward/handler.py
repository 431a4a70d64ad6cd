"""Nova Forge single-turn reward Lambda (``reward_lambda_arn``).

In: a JSON array of samples (a single object is tolerated). Out: one RewardFunctionOutput per
sample, in order, ids echoed. The event is deliberately NOT parsed into a model here: validation is
per sample inside rewardpipe.single_turn, so one malformed sample gets an error result
(``aggregate_reward_score`` 0.0 flagged by ``reward_error`` = 1) and never fails the batch.
The reward comes from REWARD_NAME / REWARD_WEIGHTS (gsm8k, code_correctness, ...).
"""

from __future__ import annotations

import json
import os
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from rewardpipe.single_turn import score_samples

REWARD_NAME = os.environ.get("REWARD_NAME") or "gsm8k"
REWARD_WEIGHTS = json.loads(os.environ.get("REWARD_WEIGHTS") or "{}") or None
logger = Logger()
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "RewardPipe")
metrics.clear_default_dimensions()  # Powertools metric state is per process; start from a clean set
metrics.clear_metrics()
metrics.set_default_dimensions(reward=REWARD_NAME)


def _errors(results: list[dict[str, Any]]) -> int:
    return sum(1 for r in results for m in r["metrics_list"] if m["name"] == "reward_error" and m["value"])


@metrics.log_metrics
@logger.inject_lambda_context
def lambda_handler(event: Any, context: Any) -> list[dict[str, Any]]:
    from rewardpipe.aws.hardening import make_non_dumpable

    make_non_dumpable()  # code_correctness runs model code in child processes
    results = score_samples(event, REWARD_NAME, REWARD_WEIGHTS)
    errors = _errors(results)
    metrics.add_metric(name="SamplesScored", unit=MetricUnit.Count, value=len(results))
    metrics.add_metric(name="SampleErrors", unit=MetricUnit.Count, value=errors)
    logger.info("scored batch", extra={"samples": len(results), "errors": errors, "reward": REWARD_NAME})
    return results
