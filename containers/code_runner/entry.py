"""Fargate entry point: run one execution job from S3 with the same rewardpipe execution layer as the Lambda.

Environment: BUCKET, JOB_KEY, RESULT_KEY (the last two are set per task by the state machine).
Order matters for credential hygiene: the job is fetched first (which makes boto3 resolve the task
role's credentials into memory), then every credential variable is removed from the environment and
the process is made non-dumpable, and only then does the model's code run. The result is written
with the credentials boto3 already holds.

Exit status: 0 = a verdict was written (whatever it is); 1 = the job could not be run (no result
written, so the state machine records ``executor_crash``); 2 = bad configuration.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Mapping

REQUIRED = ("BUCKET", "JOB_KEY", "RESULT_KEY")


def main(env: Mapping[str, str] | None = None, s3_client: Any = None, executor: Any = None) -> int:
    env = dict(os.environ if env is None else env)
    missing = [name for name in REQUIRED if not env.get(name)]
    if missing:
        print(json.dumps({"level": "ERROR", "message": f"missing environment variable(s): {', '.join(missing)}"}), file=sys.stderr)
        return 2

    from rewardpipe.aws import jobs
    from rewardpipe.aws.hardening import make_non_dumpable, scrub_credentials
    from rewardpipe.store import S3Store

    try:
        if s3_client is None:
            import boto3

            s3_client = boto3.client("s3")
        store = S3Store(env["BUCKET"], client=s3_client)
        job = jobs.get_job(store, env["JOB_KEY"])
        scrubbed = scrub_credentials(os.environ)
        dumpable_off = make_non_dumpable()
        if executor is None:
            from rewardpipe.execution import get_executor

            executor = get_executor()
        result = executor.run(job)
        jobs.put_result(store, env["RESULT_KEY"], result)
    except Exception as exc:  # noqa: BLE001 - report and exit non-zero; the state machine records it
        print(json.dumps({"level": "ERROR", "message": "job failed", "error": f"{type(exc).__name__}: {exc}",
                          "job_key": env.get("JOB_KEY")}), file=sys.stderr)
        return 1
    print(json.dumps({"level": "INFO", "message": "job finished", "job_key": env["JOB_KEY"],
                      "credentials_scrubbed": scrubbed, "non_dumpable": dumpable_off, **jobs.summary(result)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
