"""Round thirty-three, the rollout workflow on AWS (Lambda and Fargate paths, records, retries).

* A state that scored and then failed with a transient fault (its transcript or record write throttled, its
  answer to Step Functions throttled) is retried by Step Functions. The retry ran the model's code again and scored
  again: a second run of the same code (a flaky test, a timeout under load, a judge's other verdict) could change
  the rollout's score, and the record of the first score was replaced by the second's. A retry of the attempt
  that scored now answers with the score it kept (``scored.json``), with the execution it was scored on, and runs
  nothing again. A retried conversation state that had scored also conversed again from the start of its entry (an
  LLM policy asked again, a transcript of another conversation than the one scored); it answers at once.
"""

from __future__ import annotations

import json

import pytest

from tests.aws.handlers import Context, load
from tests.aws.test_rollout_handlers import _client_error, _event, bucket, runner  # noqa: F401 - fixtures
from tests.aws.test_round_thirtytwo_runtime import _FifteenMinutes, _sent_nothing_back, _values

pytestmark = pytest.mark.xdist_group("cdk")


def _counted_runs(monkeypatch) -> list:
    """Every run of the committed code on the Lambda runner; from the second on, the run fails (as a flaky test, or
    a job timed out under load, would): a score taken from a second run differs from the first's."""
    from rewardpipe.aws import rollout
    from rewardpipe.execution.result import ExecutionResult

    real, runs = rollout.run_inline, []

    def run_inline(job, settings):
        runs.append(job)
        result = real(job, settings)
        if len(runs) == 1:
            return result
        return ExecutionResult(id=result.id, status="failed", passed=0, total=result.total, reason="flaky")

    monkeypatch.setattr(rollout, "run_inline", run_inline)
    return runs


def _throttled_once(monkeypatch, name: str, code: str = "SlowDown") -> None:
    """``rollout.<name>`` raises S3's ``code`` on its first call (SlowDown: a transient fault the state retries)."""
    from rewardpipe.aws import rollout

    real, calls = getattr(rollout, name), []

    def once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise _client_error(code)
        return real(*args, **kwargs)

    monkeypatch.setattr(rollout, name, once)


class TestARetryAfterTheScoreRunsNothingAgain:
    def test_a_retried_score_state_answers_with_the_score_it_kept(self, bucket, runner, monkeypatch):  # noqa: F811
        """Before: the retry ran the code a second time and the record said 0 correctness where the first run had
        passed every test."""
        runs = _counted_runs(monkeypatch)
        ref = load("rollout_start").lambda_handler({"input": _event(), "attempt": "att-1"}, Context())
        assert ref["next"] == "run_lambda"
        _throttled_once(monkeypatch, "put_transcript")
        with pytest.raises(Exception, match="SlowDown"):
            load("score_rollout").lambda_handler(ref, Context())
        out = load("score_rollout").lambda_handler(ref, Context())  # Step Functions' retry of the Score state
        assert len(runs) == 1
        record = bucket.get_json(out["record_key"])
        assert out["status"] == record["status"] == "scored"
        assert _values(out)["correctness"] == 1.0 == record["components"]["correctness"]
        # The transcript is written by the retry, with the execution the score was taken on.
        (key,) = bucket.list_keys("runs/r/transcripts/")
        transcript = json.dumps(bucket.get_json(key))
        assert '"passed"' in transcript and "flaky" not in transcript

    def test_a_retried_conversation_state_answers_with_the_score_it_kept(self, bucket, runner, monkeypatch):  # noqa: F811
        """The conversation state that scored inline and could not send its answer: before, its retry ran the code
        again, and the answer and the record were the second run's."""
        runs = _counted_runs(monkeypatch)
        tried = _sent_nothing_back(monkeypatch)
        event = {"input": _event(), "attempt": "att-1", "task_token": "t"}
        with pytest.raises(Exception, match="ThrottlingException"):
            load("rollout_start").lambda_handler(event, _FifteenMinutes())
        with pytest.raises(Exception, match="ThrottlingException"):
            load("rollout_start").lambda_handler(event, _FifteenMinutes())  # the retry
        assert len(runs) == 1
        first, retried = (json.loads(t["cause"]) for t in tried)
        assert _values(retried) == _values(first) and _values(retried)["correctness"] == 1.0
        assert retried["aggregate_reward_score"] == first["aggregate_reward_score"]
        assert bucket.get_json(first["record_key"])["components"]["correctness"] == 1.0

    def test_another_attempt_scores_afresh(self, bucket, runner, monkeypatch):  # noqa: F811
        """Only the same attempt's score is reused: a re-run (another execution name) runs its own code."""
        runs = _counted_runs(monkeypatch)
        ref = load("rollout_start").lambda_handler({"input": _event(), "attempt": "att-1"}, Context())
        load("score_rollout").lambda_handler(ref, Context())
        again = load("rollout_start").lambda_handler({"input": _event(), "attempt": "att-2"}, Context())
        out = load("score_rollout").lambda_handler(again, Context())
        assert len(runs) == 2 and _values(out)["correctness"] == 0.0

    def test_a_retried_conversation_state_converses_nothing_again(self, bucket, runner, monkeypatch):  # noqa: F811
        """Before: the retry opened the episode and conversed again (an LLM policy asked for its turns again, and
        the transcript a retry wrote could be of another conversation than the one scored)."""
        from rewardpipe.aws import rollout

        real, conversed = rollout._converse, []
        monkeypatch.setattr(rollout, "_converse", lambda *a, **k: conversed.append(1) or real(*a, **k))
        _throttled_once(monkeypatch, "put_transcript")
        event = {"input": _event(), "attempt": "att-1"}
        with pytest.raises(Exception, match="SlowDown"):
            load("rollout_start").lambda_handler(event, _FifteenMinutes())
        out = load("rollout_start").lambda_handler(event, _FifteenMinutes())  # the retry
        assert conversed == [1] and out["next"] == "finished" and out["output"]["status"] == "scored"
        # a retried Converse entry of an attempt that scored answers the same way
        retried = {"run": "r", "attempt": "att-1", "retry_count": 1, "reply": {"resume": True}}
        again = load("converse").lambda_handler(retried, Context())
        assert conversed == [1] and again["output"] == out["output"]
        assert bucket.list_keys("runs/r/transcripts/") and _values(out["output"])["correctness"] == 1.0


def test_the_score_record_error_answers_with_has_a_transcript_of_the_execution_it_was_scored_on(
    bucket,  # noqa: F811
    runner,  # noqa: F811
    monkeypatch,
):
    """Before: RecordError wrote the kept score's missing transcript without its execution: the record said every
    test passed and the transcript "not_executed: the code was not run"."""
    ref = load("rollout_start").lambda_handler({"input": _event(), "attempt": "att-1"}, Context())
    _throttled_once(monkeypatch, "put_transcript", "AccessDenied")  # not transient: the Score state's Catch
    with pytest.raises(Exception, match="AccessDenied"):
        load("score_rollout").lambda_handler(ref, Context())
    failed = {"context": {**ref, "failed": {"ScoreStep": {"Error": "AccessDenied", "Cause": "m"}}}, "attempt": "att-1"}
    out = load("error_record").lambda_handler(failed, Context())
    assert out["status"] == "scored" and _values(out)["correctness"] == 1.0
    (key,) = bucket.list_keys("runs/r/transcripts/")
    verdict = bucket.get_json(key)["verdict"]
    assert verdict["status"] == "passed" and verdict["passed"] == verdict["total"] > 0
