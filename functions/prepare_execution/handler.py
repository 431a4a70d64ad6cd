"""PrepareExecution: write the committed code's job to S3 and route it (Lambda or Fargate) by its time budget.

Logger, Tracer and event validation come from rewardpipe.aws.lambda_support.step_handler.
"""

from rewardpipe.aws import rollout
from rewardpipe.aws.lambda_support import step_handler

lambda_handler = step_handler(rollout.RolloutContext, rollout.prepare_execution)
