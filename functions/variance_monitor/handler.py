"""Variance check: per-component within-group statistics of a step, as metrics, verdict JSON and alarms.

Invoke with ``{"run_id": "...", "step": 3}`` after a step, or let the schedule check the newest
complete step of every run (an EventBridge scheduled event carries no run_id).
"""

from rewardpipe.aws.lambda_support import step_handler
from rewardpipe.aws.monitoring import CheckRequest, run_check

lambda_handler = step_handler(CheckRequest, run_check)
