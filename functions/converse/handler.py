"""Converse: apply the trainer's reply (callback mode), then run policy and simulator turns until the
episode commits, ends, needs the trainer again or the invocation runs short of time; then complete this
state's task token with the outcome (ask the trainer, resume, run the code and score, or hand the job to
the code-runner states).

Logger, Tracer and event validation come from rewardpipe.aws.lambda_support.step_handler.
"""

from rewardpipe.aws import rollout
from rewardpipe.aws.lambda_support import step_handler

lambda_handler = step_handler(rollout.ConverseRequest, rollout.converse_step)
