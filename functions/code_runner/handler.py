"""Code runner (short jobs): run the job it is handed in the rewardpipe sandbox and answer with the result.

Runs in the isolated VPC, with no AWS permission beyond its logs: the job arrives in the invoke payload and
the result leaves in the response (rewardpipe.aws.jobs), so credentials leaked to model code read nothing.
The model's program gets a clean environment from the execution layer, and this process is made
non-dumpable first so the program cannot read our credentials through /proc.
"""

from typing import Any

from aws_lambda_powertools import Logger

from rewardpipe.aws import jobs
from rewardpipe.aws.hardening import make_non_dumpable
from rewardpipe.aws.lambda_support import retry_transient
from rewardpipe.deferred import DeferredModel
from rewardpipe.execution.result import ExecutionJob

logger = Logger()


class RunRequest(DeferredModel):
    # A real class, not a string annotation: Lambda imports this file as a module of its own, where pydantic
    # could not resolve a postponed annotation.
    job: ExecutionJob


@logger.inject_lambda_context
@retry_transient
def lambda_handler(raw_event: dict[str, Any], context: Any) -> dict[str, Any]:  # noqa: ARG001 - Lambda handler signature (event, context)
    event = RunRequest.model_validate(raw_event)
    make_non_dumpable()
    out = jobs.inline_response(jobs.run_inline_job(event.job))
    logger.info("job finished", extra={k: v for k, v in out.items() if k != "result"})
    return out
