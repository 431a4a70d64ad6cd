"""SimulatorTurn: the user simulator answers the last assistant turn (it alone holds the hidden spec).

Logger, Tracer and event validation come from rewardpipe.aws.lambda_support.step_handler.
"""

from rewardpipe.aws import rollout
from rewardpipe.aws.lambda_support import step_handler

lambda_handler = step_handler(rollout.RolloutContext, rollout.simulator_turn)
