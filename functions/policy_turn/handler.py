"""PolicyTurn: one assistant turn (replayed, from an OpenAI-compatible endpoint, or the trainer's callback reply).

Logger, Tracer and event validation come from rewardpipe.aws.lambda_support.step_handler.
"""

from rewardpipe.aws import rollout
from rewardpipe.aws.lambda_support import step_handler

lambda_handler = step_handler(rollout.RolloutContext, rollout.policy_turn)
