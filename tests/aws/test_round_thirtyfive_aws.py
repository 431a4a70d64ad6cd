"""Round thirty-five, the rollout workflow on AWS: a retry after the Lambda runner answered runs no code again.

The code-runner Lambda has no storage (no AWS permission: its answer is the only copy of the run). The attempt kept a
score (``scored.json``) once scored, but nothing between the runner's answer and that score: a fault there (the kept
score's own write throttled, another transient S3 fault) had Step Functions retry the state, which ran the model's
code again (a second runner invocation, and the verdict of a second run: a flaky test, a timeout under load) and
counted the execution-latency metric twice. The answer is kept (``executed.json``) as soon as it comes, and a retry
scores it.

A second Fargate task of a claimed job (Step Functions retried the step after an ECS error) waits, billed, for the
first task's result: it waited the job's whole budget plus 600 s from its own start, so a first task that had died
without a result (its container killed) cost a second task a whole budget more. It waits until the first task's
budget, counted from the claim, is spent.
"""

from __future__ import annotations

import json

import pytest

from tests.aws.handlers import Context, load
from tests.aws.test_rollout_handlers import _client_error, _event, bucket, runner  # noqa: F401 - fixtures
from tests.aws.test_round_thirtyfour_workflow import _CountingExecutor, _entry_in_process, _fargate_job
from tests.aws.test_round_thirtythree_workflow import _counted_runs
from tests.aws.test_round_thirtytwo_runtime import _values

pytestmark = pytest.mark.xdist_group("cdk")


def _kept_score_write_throttled_once(monkeypatch) -> None:
    """The attempt's first write of its kept score fails with S3's SlowDown (a transient fault the state retries)."""
    from rewardpipe.aws import rollout
    from rewardpipe.aws.state import StateStore

    real, failed = StateStore.put, []

    def put(self, name, obj):
        if name == rollout.SCORED_NAME and not failed:
            failed.append(name)
            raise _client_error("SlowDown")
        return real(self, name, obj)

    monkeypatch.setattr(StateStore, "put", put)


def _latency_points(text: str) -> int:
    from rewardpipe.aws.metrics import EXECUTION_MS

    return sum(1 for line in text.splitlines() if line.startswith("{") and EXECUTION_MS in json.loads(line))


def test_a_score_state_retried_before_its_score_was_kept_scores_the_runners_first_answer(
    bucket,  # noqa: F811
    runner,  # noqa: F811
    monkeypatch,
    capsys,
):
    """Before: two runs of the code, the record was the second run's (correctness 0 where the first passed), and two
    latency points for one rollout."""
    runs = _counted_runs(monkeypatch)  # a second run of the code fails every test
    ref = load("rollout_start").lambda_handler({"input": _event(), "attempt": "att-1"}, Context())
    assert ref["next"] == "run_lambda"
    _kept_score_write_throttled_once(monkeypatch)
    capsys.readouterr()
    answers: list = []
    for _ in range(2):  # the first try fails after the run; Step Functions retries the Score state
        try:
            answers.append(load("score_rollout").lambda_handler(ref, Context()))
        except Exception as exc:  # noqa: BLE001 - the throttled try, checked below
            answers.append(exc)
    failed, out = answers
    assert "SlowDown" in str(failed)
    record = bucket.get_json(out["record_key"])
    assert (len(runs), out["status"], record["status"]) == (1, "scored", "scored")
    assert _values(out)["correctness"] == record["components"]["correctness"] == 1.0
    assert _latency_points(capsys.readouterr().out) == 1


def test_a_kept_answer_is_used_only_for_the_same_job(bucket):  # noqa: F811
    """The answer is kept with its job's digest: another job of the attempt (or a hand-written object) is run."""
    from rewardpipe.aws.rollout import EXECUTED_NAME, _job_digest, kept_runner_answer
    from rewardpipe.aws.state import StateStore
    from rewardpipe.execution.result import ExecutionJob, ExecutionResult

    states = StateStore(bucket, "r", "att-1")
    job = ExecutionJob(code="def f(): return 1", tests="assert f() == 1", entry_point="f")
    other = ExecutionJob(code="def f(): return 2", tests="assert f() == 1", entry_point="f")
    result = ExecutionResult(id="", status="passed", passed=1, total=1)
    assert kept_runner_answer(states, job) is None  # nothing kept
    states.put(EXECUTED_NAME, {"job_sha256": _job_digest(job), "result": result.model_dump(mode="json")})
    assert kept_runner_answer(states, job) == result
    assert kept_runner_answer(states, other) is None
    states.put(EXECUTED_NAME, {"job_sha256": _job_digest(job), "result": {"status": "no such status"}})
    assert kept_runner_answer(states, job) is None


def _claimed(bucket, job_key: str, claimed_at) -> None:  # noqa: F811
    """The first task's claim of the job, made at ``claimed_at`` (its wall clock)."""
    from rewardpipe.aws import jobs

    bucket.put_json(jobs.claim_key(job_key), {"claimed_at": claimed_at})


def test_a_second_task_of_a_job_whose_first_task_died_long_ago_does_not_wait(bucket, monkeypatch, tmp_path):  # noqa: F811
    """Before: it polled S3 every 5 s for the job's timeout plus 600 s (here 605 s), billed all along."""
    import time

    from rewardpipe.aws import jobs

    entry = _entry_in_process(monkeypatch)
    env = {**_fargate_job(bucket), "TMPDIR": str(tmp_path)}
    _claimed(bucket, env["JOB_KEY"], time.time() - 3 * 3600)  # its budget (5 s + 600 s) was spent long ago
    polls: list[float] = []
    clock = iter(range(0, 100_000, 5))
    monkeypatch.setattr(jobs, "_sleep", polls.append)
    monkeypatch.setattr(jobs, "_clock", lambda: next(clock))
    executor = _CountingExecutor()
    assert entry.main(env, s3_client=bucket.client, executor=executor) == 1  # no result: executor_crash, as before
    assert executor.runs == 0 and polls == []


def test_the_second_task_waits_what_is_left_of_the_first_tasks_budget(bucket, monkeypatch):  # noqa: F811
    from rewardpipe.aws import jobs

    job_key, _ = jobs.job_keys("r", "x", "a1")
    monkeypatch.setattr(jobs, "_wall", lambda: 10_000.0)
    budget = 5 + jobs.CLAIM_WAIT_MARGIN_S
    _claimed(bucket, job_key, 10_000.0 - 100)
    assert jobs.claim_wait_s(bucket, job_key, 5) == budget - 100
    _claimed(bucket, job_key, 10_000.0 + 50)  # a first task's clock a little ahead never lengthens the wait
    assert jobs.claim_wait_s(bucket, job_key, 5) == budget
    for unreadable in ("yesterday", None, True):
        _claimed(bucket, job_key, unreadable)
        assert jobs.claim_wait_s(bucket, job_key, 5) == budget  # the whole budget, as before
    bucket.put_bytes(jobs.claim_key(job_key), b"\xff not json")
    assert jobs.claim_wait_s(bucket, job_key, 5) == budget
