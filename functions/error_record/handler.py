"""RecordError: every failed path of the state machine ends here and writes an error record to S3.

Its model, FailedRollout, accepts anything (it keeps what is usable), because this is the last stop
of every failure: a malformed event must still produce a record.
"""

from rewardpipe.aws import rollout
from rewardpipe.aws.lambda_support import step_handler

lambda_handler = step_handler(rollout.FailedRollout, rollout.record_failure_step)
