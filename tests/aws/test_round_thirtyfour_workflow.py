"""Round thirty-four, the rollout workflow on AWS (Fargate retries, the kept score's reads).

* The kept score (``scored.json``) was read as "none" whenever S3 could not answer (throttled, a 5xx, the connection
  cut): a retry of the state that scored then ran the model's code again and scored again. Only a missing object
  (NoSuchKey) or one that is not a score is "none" now; a read S3 could not answer fails the state (a transient
  error, which Step Functions retries), and RecordError, reading it no better, writes an error record: the
  rollout is never scored a second time.
* A Fargate step retried by Step Functions on an ECS error after its task had started ran the job a second time. A
  task now claims its job (a conditional create of ``claim.json`` beside it) before it runs it: a second task of the
  same job runs nothing; it waits for the first task's result, or ends with none (``executor_crash``).
"""

from __future__ import annotations

import pytest

from rewardpipe.aws.lambda_support import TransientError
from tests.aws.handlers import Context, load
from tests.aws.test_rollout_handlers import _client_error, _event, bucket, runner  # noqa: F401 - fixtures
from tests.aws.test_round_thirtythree_workflow import _counted_runs, _throttled_once
from tests.aws.test_round_thirtytwo_runtime import _values

pytestmark = pytest.mark.xdist_group("cdk")


def _scored_json_unreadable(monkeypatch, code: str, times: int) -> list:
    """Every S3 read of a ``scored.json`` fails ``times`` times with ``code`` (after the store's own retries)."""
    from rewardpipe.store import S3Store, StoreError

    real, failed = S3Store._read, []

    def read(self, key):
        if key.endswith("/scored.json") and len(failed) < times:
            failed.append(key)
            raise StoreError(f"S3 error {code} while trying to read {key}") from _client_error(code)
        return real(self, key)

    monkeypatch.setattr(S3Store, "_read", read)
    return failed


class TestAKeptScoreSOnlyMissingWhenS3SaysSo:
    @pytest.mark.parametrize("code", ["SlowDown", "503", "InternalError"])
    def test_a_retried_score_state_whose_kept_score_cannot_be_read_runs_nothing_again(
        self,
        bucket,  # noqa: F811
        runner,  # noqa: F811
        monkeypatch,
        code,
    ):
        """Before: the throttled read was taken for "no kept score", the code ran again and the record was the
        second run's (0 correctness where the first run passed every test)."""
        runs = _counted_runs(monkeypatch)
        ref = load("rollout_start").lambda_handler({"input": _event(), "attempt": "att-1"}, Context())
        _throttled_once(monkeypatch, "put_transcript")
        with pytest.raises(Exception, match="SlowDown"):
            load("score_rollout").lambda_handler(ref, Context())
        failed = _scored_json_unreadable(monkeypatch, code, 1)
        with pytest.raises(TransientError, match="KeptScoreUnreadable"):  # Step Functions retries it
            load("score_rollout").lambda_handler(ref, Context())
        assert failed and len(runs) == 1
        out = load("score_rollout").lambda_handler(ref, Context())  # the next retry reads it
        assert len(runs) == 1 and out["status"] == "scored" and _values(out)["correctness"] == 1.0

    def test_the_unreadable_kept_score_is_never_rescored_by_record_error(self, bucket, runner, monkeypatch):  # noqa: F811
        """The Score state's retries all failed to read it: RecordError writes an error record, never a re-score."""
        runs = _counted_runs(monkeypatch)
        ref = load("rollout_start").lambda_handler({"input": _event(), "attempt": "att-1"}, Context())
        _throttled_once(monkeypatch, "put_transcript")
        with pytest.raises(Exception, match="SlowDown"):
            load("score_rollout").lambda_handler(ref, Context())
        _scored_json_unreadable(monkeypatch, "SlowDown", 100)
        failed = {
            "context": {**ref, "failed": {"ScoreStep": {"Error": "TransientError", "Cause": "S3 error SlowDown"}}},
            "attempt": "att-1",
        }
        out = load("error_record").lambda_handler(failed, Context())
        assert len(runs) == 1 and out["status"] == "error"

    def test_a_retried_conversation_state_whose_kept_score_cannot_be_read_converses_nothing_again(
        self,
        bucket,  # noqa: F811
        runner,  # noqa: F811
        monkeypatch,
    ):
        from rewardpipe.aws import rollout
        from tests.aws.test_round_thirtytwo_runtime import _FifteenMinutes

        real, conversed = rollout._converse, []
        monkeypatch.setattr(rollout, "_converse", lambda *a, **k: conversed.append(1) or real(*a, **k))
        runs = _counted_runs(monkeypatch)
        _throttled_once(monkeypatch, "put_transcript")
        event = {"input": _event(), "attempt": "att-1"}
        with pytest.raises(Exception, match="SlowDown"):
            load("rollout_start").lambda_handler(event, _FifteenMinutes())
        _scored_json_unreadable(monkeypatch, "503", 1)
        with pytest.raises(TransientError, match="KeptScoreUnreadable"):
            load("rollout_start").lambda_handler(event, _FifteenMinutes())
        assert conversed == [1] and len(runs) == 1

    def test_a_kept_score_that_is_not_there_or_not_a_score_is_none(self, bucket):  # noqa: F811
        from rewardpipe.aws.rollout import kept_score
        from rewardpipe.aws.state import StateStore

        assert kept_score(bucket, "r", "att-1") is None  # not there
        StateStore(bucket, "r", "att-1").put("scored.json", {"status": "scored"})  # not a record
        assert kept_score(bucket, "r", "att-1") is None
        bucket.put_bytes("runs/r/state/att-1/scored.json", b"{not json")
        assert kept_score(bucket, "r", "att-1") is None


# -- a retried Fargate step runs its job once ----------------------------------------------------------------------


class _CountingExecutor:
    def __init__(self) -> None:
        self.runs = 0

    def run(self, job):
        from rewardpipe.execution.result import ExecutionResult

        self.runs += 1
        return ExecutionResult(id=job.id, status="passed", passed=1, total=1, reason=f"run {self.runs}")


def _fargate_job(bucket):  # noqa: F811
    from rewardpipe.aws import jobs
    from rewardpipe.execution.result import ExecutionJob

    job_key, result_key = jobs.job_keys("r", "x", "a1")
    jobs.put_job(bucket, job_key, ExecutionJob(code="def f():\n    return 1\n", entry_point="f", tests="", timeout_s=5))
    return {"BUCKET": bucket.bucket, "JOB_KEY": job_key, "RESULT_KEY": result_key}


def _entry_in_process(monkeypatch):
    """containers/code_runner/entry.py's main, without scrubbing this test process's own credentials."""
    import importlib
    import os
    import sys
    import tempfile

    from rewardpipe.aws import hardening
    from tests.aws import harness

    # entry.main points TMPDIR and tempfile.tempdir at the task's scratch volume (the test's tmp_path, which only
    # root can enter): put both back after the test, or every later sandbox of this process (its fork servers run as
    # other uids) is refused its directories.
    monkeypatch.setattr(tempfile, "tempdir", tempfile.tempdir)
    monkeypatch.setenv("TMPDIR", os.environ.get("TMPDIR", tempfile.gettempdir()))
    monkeypatch.setattr(hardening, "scrub_credentials", lambda env: [])
    monkeypatch.setattr(hardening, "make_non_dumpable", lambda: False)
    monkeypatch.syspath_prepend(str(harness.ROOT / "containers" / "code_runner"))
    sys.modules.pop("entry", None)
    return importlib.import_module("entry")


class TestARetriedFargateStepRunsItsJobOnce:
    def test_a_second_task_of_a_finished_job_runs_nothing_and_keeps_its_result(
        self,
        bucket,  # noqa: F811
        monkeypatch,
        tmp_path,
    ):
        """Before: Step Functions' retry of RunCodeFargate (an ECS error after the task had started) started a task
        that ran the job again and replaced the first run's result with its own."""
        entry = _entry_in_process(monkeypatch)
        env = {**_fargate_job(bucket), "TMPDIR": str(tmp_path)}
        executor = _CountingExecutor()
        assert entry.main(env, s3_client=bucket.client, executor=executor) == 0
        assert entry.main(env, s3_client=bucket.client, executor=executor) == 0  # the retry's task
        assert executor.runs == 1
        assert bucket.get_json(env["RESULT_KEY"])["reason"] == "run 1"

    def test_a_second_task_while_the_first_runs_waits_for_its_result(self, bucket, monkeypatch, tmp_path):  # noqa: F811
        from rewardpipe.aws import jobs
        from rewardpipe.execution.result import ExecutionResult

        entry = _entry_in_process(monkeypatch)
        env = {**_fargate_job(bucket), "TMPDIR": str(tmp_path)}
        assert jobs.claim_job(bucket, env["JOB_KEY"])  # the first task, still running
        assert not jobs.claim_job(bucket, env["JOB_KEY"])
        polls: list[float] = []

        def sleep(seconds):  # the first task writes its result while the second waits
            polls.append(seconds)
            jobs.put_result(bucket, env["RESULT_KEY"], ExecutionResult(id="x", status="passed", passed=1, total=1))

        monkeypatch.setattr(jobs, "_sleep", sleep)
        executor = _CountingExecutor()
        assert entry.main(env, s3_client=bucket.client, executor=executor) == 0
        assert executor.runs == 0 and polls

    def test_a_second_task_whose_first_left_no_result_fails_without_running(self, bucket, monkeypatch, tmp_path):  # noqa: F811
        from rewardpipe.aws import jobs

        entry = _entry_in_process(monkeypatch)
        env = {**_fargate_job(bucket), "TMPDIR": str(tmp_path)}
        jobs.claim_job(bucket, env["JOB_KEY"])
        clock = iter(range(0, 10_000, 100))
        monkeypatch.setattr(jobs, "_clock", lambda: next(clock))
        monkeypatch.setattr(jobs, "_sleep", lambda s: None)
        executor = _CountingExecutor()
        assert entry.main(env, s3_client=bucket.client, executor=executor) == 1  # no result: executor_crash
        assert executor.runs == 0
        assert bucket.get_json(env["RESULT_KEY"], default=None) is None
