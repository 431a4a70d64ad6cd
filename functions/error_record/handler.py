"""RecordError: every failed path of the state machine ends here and writes an error record to S3."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.parser import event_parser

from rewardpipe.aws import rollout
from rewardpipe.aws.settings import Settings

logger = Logger()
tracer = Tracer()
SETTINGS = Settings.from_env()


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@event_parser(model=rollout.FailedRollout)
def lambda_handler(event: rollout.FailedRollout, context: Any) -> dict[str, Any]:
    record, key = rollout.record_failure(event, SETTINGS)
    logger.warning("error record written", extra={"key": key, "error": record.error.model_dump() if record.error else None})
    return rollout.rollout_output(record, key)
