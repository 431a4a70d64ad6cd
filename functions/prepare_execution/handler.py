"""PrepareExecution: write the committed code's job to S3 and route it (Lambda or Fargate) by time budget."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Tracer

from rewardpipe.aws import rollout
from rewardpipe.aws.settings import Settings

logger = Logger()
tracer = Tracer()
SETTINGS = Settings.from_env()


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def lambda_handler(raw_event: dict[str, Any], context: Any) -> dict[str, Any]:
    event = rollout.RolloutContext.model_validate(raw_event)
    logger.append_keys(run=event.run, rollout=event.rollout)
    out = rollout.prepare_execution(event, SETTINGS)
    logger.info("execution routed", extra={"execution": out.get("execution")})
    return out
