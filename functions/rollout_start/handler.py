"""StartEpisode: validate the execution input, store an inline task, open the episode.

Logger, Tracer and event validation come from rewardpipe.aws.lambda_support.step_handler.
"""

from rewardpipe.aws import rollout
from rewardpipe.aws.lambda_support import step_handler

lambda_handler = step_handler(rollout.RolloutInput, rollout.start)
