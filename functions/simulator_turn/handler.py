"""SimulatorTurn: the user simulator answers the last assistant turn (it holds the hidden spec)."""

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
@event_parser(model=rollout.RolloutContext)
def lambda_handler(event: rollout.RolloutContext, context: Any) -> dict[str, Any]:
    logger.append_keys(run=event.run, rollout=event.rollout, turn=event.state.assistant_turns)
    return rollout.simulator_turn(event, SETTINGS)
