"""Fargate entry point: run one execution job from S3 with the same rewardpipe execution layer as the Lambda.

Environment: BUCKET, JOB_KEY, RESULT_KEY (the last two are set per task by the state machine).
Order matters for credential hygiene: the job is fetched first (which makes boto3 resolve the task
role's credentials into memory), then every credential variable is removed from the environment and
the process is made non-dumpable, and only then does the model's code run. The result is written
with the credentials boto3 already holds.

The root filesystem is read-only, so the only writable place is the scratch volume named by TMPDIR
(``/scratch``). It is checked before anything else, and made the only temp dir this process uses, so a
scratch volume the runtime user cannot write fails at once with a message that says so, instead of
every job ending in an opaque sandbox error.

A task runs its job only after claiming it (rewardpipe.aws.jobs.claim_job): a second task of the same job (Step
Functions retried the Fargate step after an ECS error, with the first task started) runs nothing and waits for
the first task's result, until the first task's budget, counted from its claim, is spent.

Exit status: 0 = a verdict was written (whatever it is; by this task or, for a claimed job, by the task that
claimed it); 1 = the job could not be run (no result written, so the state machine records ``executor_crash``);
2 = bad configuration.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import Any

REQUIRED = ("BUCKET", "JOB_KEY", "RESULT_KEY")


def _error(message: str, **fields: Any) -> None:
    print(json.dumps({"level": "ERROR", "message": message, **fields}), file=sys.stderr)


def scratch_problem(path: str) -> str | None:
    """Why ``path`` cannot serve as this process's temp dir, or None when it can (probed by writing)."""
    import tempfile

    try:
        info = os.stat(path)
    except OSError as exc:
        return f"scratch dir {path} is missing ({exc.strerror})"
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        return (
            f"scratch dir {path} is not writable by uid {os.geteuid()} (owner uid {info.st_uid}, mode "
            f"{info.st_mode & 0o7777:04o}: {exc.strerror}); the image must create it, chown it to the "
            f"runtime user and declare it a VOLUME"
        )
    return None


def use_scratch(env: Mapping[str, str]) -> str | None:
    """Point tempfile at the scratch dir for this process and its children; returns the problem, if any."""
    import tempfile

    path = env.get("TMPDIR")  # the image and the task both set it to the scratch volume
    if not path:
        try:
            path = tempfile.gettempdir()
        except FileNotFoundError as exc:
            return f"no writable temp dir and TMPDIR is not set: {exc}"
    problem = scratch_problem(path)
    if problem is None:
        os.environ["TMPDIR"] = path
        tempfile.tempdir = path
    return problem


def _run_by_another_task(store: Any, env: Mapping[str, str], wait_s: float) -> int:
    """Another task claimed this job (a retried Fargate step): its result, not a second run, is the verdict."""
    from rewardpipe.aws import jobs

    result = jobs.wait_for_result(store, env["RESULT_KEY"], wait_s)
    if result is None:
        _error("job claimed by another task, which left no result; not run again", job_key=env["JOB_KEY"])
        return 1
    print(json.dumps({"level": "INFO", "message": "job already run by another task", "job_key": env["JOB_KEY"]}))
    return 0


def main(env: Mapping[str, str] | None = None, s3_client: Any = None, executor: Any = None) -> int:
    env = dict(os.environ if env is None else env)
    missing = [name for name in REQUIRED if not env.get(name)]
    if missing:
        _error(f"missing environment variable(s): {', '.join(missing)}")
        return 2
    problem = use_scratch(env)
    if problem:
        _error(problem, job_key=env.get("JOB_KEY"))
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
        if not jobs.claim_job(store, env["JOB_KEY"]):
            return _run_by_another_task(store, env, jobs.claim_wait_s(store, env["JOB_KEY"], job.timeout_s))
        scrubbed = scrub_credentials(os.environ)
        dumpable_off = make_non_dumpable()
        if executor is None:
            from rewardpipe.execution import get_executor

            executor = get_executor()
        result = executor.run(job)
        jobs.put_result(store, env["RESULT_KEY"], result)
    except Exception as exc:  # noqa: BLE001 - report and exit non-zero; the state machine records it
        _error("job failed", error=f"{type(exc).__name__}: {exc}", job_key=env.get("JOB_KEY"))
        return 1
    print(
        json.dumps(
            {
                "level": "INFO",
                "message": "job finished",
                "job_key": env["JOB_KEY"],
                "credentials_scrubbed": scrubbed,
                "non_dumpable": dumpable_off,
                **jobs.summary(result),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
