"""StartEpisode: validate the execution input, store an inline task, open the episode."""

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
    event = rollout.RolloutInput.model_validate(raw_event)
    logger.append_keys(run=event.run, step=event.step, group=event.group, rollout=event.rollout)
    return rollout.start(event, SETTINGS)
