"""Code runner (short jobs): read a job from S3, run it in the rewardpipe sandbox, write the result.

Runs in the isolated VPC. The model's program gets a clean environment from the execution layer, and
this process is made non-dumpable first so the program cannot read our credentials through /proc.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from pydantic import Field

from rewardpipe.aws import jobs
from rewardpipe.aws.hardening import make_non_dumpable
from rewardpipe.aws.lambda_support import retry_transient
from rewardpipe.aws.settings import Settings, open_bucket_store
from rewardpipe.deferred import DeferredModel

logger = Logger()
SETTINGS = Settings.from_env()


class RunRequest(DeferredModel):
    job_key: str = Field(min_length=1)
    result_key: str = Field(min_length=1)


@logger.inject_lambda_context
@retry_transient
def lambda_handler(raw_event: dict[str, Any], context: Any) -> dict[str, Any]:
    event = RunRequest.model_validate(raw_event)
    make_non_dumpable()
    result = jobs.run_job(open_bucket_store(SETTINGS), event.job_key, event.result_key)
    out = jobs.summary(result)
    logger.info("job finished", extra=out)
    return out
