"""StartEpisode: validate the execution input, store the task and replay turns, open the episode and
converse as far as it can go without the trainer (a replay or OpenAI rollout usually to its commit, its
job run and its record); then complete this state's task token with the outcome.

Logger, Tracer and event validation come from rewardpipe.aws.lambda_support.step_handler.
"""

from rewardpipe.aws import rollout
from rewardpipe.aws.lambda_support import step_handler

lambda_handler = step_handler(rollout.StartRequest, rollout.start)
