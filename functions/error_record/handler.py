"""RecordError: every failed path of the state machine ends here and writes an error record to S3."""

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
def lambda_handler(event: Any, context: Any) -> dict[str, Any]:
    # Like every handler here, the event is validated with the pydantic model directly; this one must accept
    # anything (FailedRollout keeps what is usable), because it is the last stop of every failure.
    record, key = rollout.record_failure(rollout.FailedRollout.model_validate(event), SETTINGS)
    logger.warning("error record written", extra={"key": key, "error": record.error.model_dump() if record.error else None})
    return rollout.rollout_output(record, key)
