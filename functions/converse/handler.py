"""Converse: apply the trainer's reply (callback mode), then run policy and simulator turns until the
episode commits, ends, needs the trainer again or the invocation runs short of time; when it
commits, write the execution job and pick the code runner.

Logger, Tracer and event validation come from rewardpipe.aws.lambda_support.step_handler.
"""

from rewardpipe.aws import rollout
from rewardpipe.aws.lambda_support import step_handler

lambda_handler = step_handler(rollout.StateRef, rollout.converse_step)
