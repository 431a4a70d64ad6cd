"""Variance check: per-component within-group statistics of a step, as metrics, verdict JSON and alarms.

Invoke with ``{"run_id": "...", "step": 3}`` after a step, or let the schedule check the newest
complete step of every run.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Tracer

from rewardpipe.aws.monitoring import CheckRequest, run_check
from rewardpipe.aws.settings import Settings

logger = Logger()
tracer = Tracer()
SETTINGS = Settings.from_env()


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def lambda_handler(raw_event: dict[str, Any], context: Any) -> dict[str, Any]:
    event = CheckRequest.model_validate(raw_event)
    out = run_check(event, SETTINGS)
    logger.info("variance check done", extra={"checked": out["checked"]})
    return out
