"""Score: finish the episode with the configured reward, write the record, return the Nova reward shape.

Logger, Tracer and event validation come from rewardpipe.aws.lambda_support.step_handler.
"""

from rewardpipe.aws import rollout
from rewardpipe.aws.lambda_support import step_handler

lambda_handler = step_handler(rollout.StateRef, rollout.score_step)
