"""Score: finish the episode with the configured reward, write the record, return the Nova reward shape."""

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
    record, key = rollout.score(event, SETTINGS)
    logger.info("record written", extra={"key": key, "status": record.status, "aggregate": record.aggregate})
    return rollout.rollout_output(record, key)
