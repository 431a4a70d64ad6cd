"""The rollout-step handlers and the code runners, called directly with moto S3: happy paths that
the state machine test does not isolate, and malformed events (each must fail loudly, naming the
field, so the state machine's Catch turns it into an error record)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from pydantic import ValidationError

from rewardpipe.models import load_tasks
from tests.aws import harness
from tests.aws.handlers import Context, load

# Its handlers are checked against their functions' IAM policies, read from the synthesized template.
pytestmark = pytest.mark.xdist_group("cdk")

BUCKET = "rollout-test-records"
TASK = load_tasks(harness.ROOT / "rewardpipe" / "data" / "tasks.jsonl")[0]


@pytest.fixture
def bucket(aws, monkeypatch):
    import boto3

    from rewardpipe.store import S3Store

    s3 = boto3.client("s3", region_name=harness.REGION)
    s3.create_bucket(Bucket=BUCKET)
    monkeypatch.setenv("BUCKET", BUCKET)
    monkeypatch.setenv("REWARD_NAME", "ask_before_coding")
    monkeypatch.setenv("ROUTING_THRESHOLD_S", "600")
    return S3Store(BUCKET, client=s3)


@pytest.fixture
def runner(bucket, monkeypatch):
    """The code-runner Lambda, deployed in moto: the conversation states and Score invoke it with the job inline."""
    name = harness.create_function("code_runner", "code-runner", env={"EXECUTION_ROUTE": "lambda"})
    monkeypatch.setenv("RUNNER_FUNCTION", name)
    return name


COMMIT = f"```python\n{TASK.reference_solution}\n```"


def _event(**policy) -> dict:
    return {
        "run": "r",
        "step": 2,
        "group": "g",
        "rollout": "x",
        "task": TASK.model_dump(mode="json"),
        "policy": policy or {"mode": "replay", "turns": [COMMIT]},
    }


def _started(bucket, attempt: str = "att-1", **policy) -> dict:
    return load("rollout_start").lambda_handler({"input": _event(**policy), "attempt": attempt}, Context())


def _snapshot(bucket, ref: dict) -> dict:
    return bucket.get_json(ref["state_key"])


def test_start_stores_the_task_and_turns_once_and_passes_only_keys(bucket):
    ref = _started(bucket, mode="replay", turns=["What about negative input?", COMMIT])
    snapshot = _snapshot(bucket, ref)
    assert re.fullmatch(rf"tasks/inline/r/{TASK.task_id}-[0-9a-f]{{16}}\.json", snapshot["task_key"])
    assert bucket.get_json(snapshot["task_key"])["tests"] == TASK.tests
    # The replay turns are stored once, beside the snapshots; the snapshot only points at them.
    assert ref["state_key"] == "runs/r/state/att-1/episode.json" and ref["version"] == 0
    assert snapshot["policy"]["turns_key"] == "runs/r/state/att-1/replay.json"
    assert bucket.get_json("runs/r/state/att-1/replay.json") == ["What about negative input?", COMMIT]
    assert "turns" not in snapshot["policy"]
    # StartEpisode conversed all the way to the commit: next is the code runner, whose job travels inline (no job
    # object: it is rebuilt from the episode where it runs).
    assert snapshot["state"]["turn_kinds"] == ["question", "commit"] and len(snapshot["state"]["messages"]) == 4
    assert ref["next"] == "run_lambda" and "job_key" not in ref["execution"] and bucket.list_keys("jobs/") == []
    assert "messages" not in json.dumps(ref) and TASK.prompt not in json.dumps(ref)


def test_the_reference_stays_small_however_long_the_transcript(bucket):
    from rewardpipe.aws.state import payload_size

    long_turn = "Could you clarify this? " + "x" * 32_000  # ~8k tokens
    ref = _started(bucket, mode="replay", turns=[long_turn] * 5 + [COMMIT])
    assert payload_size(ref) < 2_000
    assert sum(len(m["content"]) for m in _snapshot(bucket, ref)["state"]["messages"]) > 5 * 32_000


def test_start_reads_a_task_by_key(bucket):
    bucket.put_json("tasks/shared/t1.json", TASK.model_dump(mode="json"))
    ref = load("rollout_start").lambda_handler(
        {
            "input": {
                "run": "r",
                "group": "g",
                "rollout": "y",
                "task_key": "tasks/shared/t1.json",
                "policy": {"mode": "callback"},
            },
            "attempt": "a1",
        },
        Context(),
    )
    assert ref["next"] == "ask_trainer" and ref["policy_mode"] == "callback"
    assert ref["reply_key"] == "runs/r/state/a1/reply-0.json"
    assert _snapshot(bucket, ref)["state"]["task_id"] == TASK.task_id


@pytest.mark.parametrize(
    "event, field",
    [
        ({"group": "g", "rollout": "x", "task_key": "tasks/a.json"}, "run"),
        ({"run": "r", "group": "g", "rollout": "x"}, "task"),
        ({"run": "r", "group": "g", "rollout": "x", "task_key": "secrets/a.json"}, "task_key"),
        ({"run": "r", "step": -1, "group": "g", "rollout": "x", "task_key": "tasks/a.json"}, "step"),
        ({"run": "r", "group": "g", "rollout": "x", "task_key": "tasks/a.json", "policy": {"mode": "replay"}}, "turns"),
        ({"run": "r", "group": "g", "rollout": "x", "task_key": "tasks/a.json", "policy": {"mode": "psychic"}}, "mode"),
        ({"run": "r", "group": "g", "rollout": "x", "task": {"task_id": "t"}}, "prompt"),
        ({"run": "x" * 300, "group": "g", "rollout": "x", "task_key": "tasks/a.json"}, "run"),
        ({"run": "r", "group": "g", "rollout": "x" * 1025, "task_key": "tasks/a.json"}, "rollout"),
        ({"run": "r", "group": "g", "rollout": "x", "task_key": "tasks/a.json", "max_turns": 21}, "max_turns"),
        (
            {
                "run": "r",
                "group": "g",
                "rollout": "x",
                "task_key": "tasks/a.json",
                "policy": {"mode": "openai", "max_tokens": 16_385},
            },
            "max_tokens",
        ),
    ],
)
def test_start_rejects_malformed_input_naming_the_field(bucket, event, field):
    with pytest.raises(ValidationError) as info:
        load("rollout_start").lambda_handler({"input": event, "attempt": "a1"}, Context())
    assert field in str(info.value)


def test_start_only_reads_replay_turns_the_client_stored_for_this_attempt(bucket):
    bucket.put_json("runs/r/state/inputs/other/turns.json", ["stolen"])
    event = {**_event(), "policy": {"mode": "replay", "turns_key": "runs/r/state/inputs/other/turns.json"}}
    with pytest.raises(ValueError, match="turns_key must be under runs/r/state/inputs/a1/"):
        load("rollout_start").lambda_handler({"input": event, "attempt": "a1"}, Context())
    bucket.put_json("runs/r/state/inputs/a1/turns.json", [COMMIT])
    event["policy"]["turns_key"] = "runs/r/state/inputs/a1/turns.json"
    ref = load("rollout_start").lambda_handler({"input": event, "attempt": "a1"}, Context())
    assert _snapshot(bucket, ref)["state"]["turn_kinds"] == ["commit"]


def test_a_missing_task_object_is_a_clear_error(bucket):
    with pytest.raises(FileNotFoundError, match=r"tasks/none\.json"):
        load("rollout_start").lambda_handler(
            {"input": {"run": "r", "group": "g", "rollout": "x", "task_key": "tasks/none.json"}, "attempt": "a"},
            Context(),
        )


def test_score_rejects_a_reference_without_a_state_key(bucket):
    with pytest.raises(ValidationError) as info:
        load("score_rollout").lambda_handler(
            {
                "run": "r",
                "step": 0,
                "group": "g",
                "rollout": "x",
                "attempt": "a",
                "version": 0,
                "next": "score",
                "next_action": "done",
                "policy_mode": "callback",
            },
            Context(),
        )
    assert "state_key" in str(info.value)


def test_converse_reads_only_its_own_attempts_episode(bucket):
    _started(bucket, attempt="att-2", mode="callback")
    with pytest.raises(ValidationError, match="attempt"):
        load("converse").lambda_handler({"run": "r", "attempt": "att-2/../att-9", "reply": {"text": "Hi?"}}, Context())
    with pytest.raises(FileNotFoundError, match="att-3"):
        load("converse").lambda_handler({"run": "r", "attempt": "att-3", "reply": {"text": "Hi?"}}, Context())


def _reply(ref: dict, reply: dict, entered: str = "2026-12-01T00:00:00.000Z", retry_count: int = 0) -> dict:
    """Converse's payload as the state machine builds it: ids from the execution, the reply as its input."""
    return {
        "run": ref["run"],
        "attempt": ref["attempt"],
        "entered": entered,
        "retry_count": retry_count,
        "reply": reply,
    }


def test_callback_reply_must_carry_text(bucket):
    from rewardpipe.aws.rollout import PolicyError

    ref = _started(bucket, mode="callback")
    with pytest.raises(PolicyError, match="text"):
        load("converse").lambda_handler(_reply(ref, {"answer": "no text field"}), Context())


def test_a_trainer_turn_is_applied_then_the_simulator_answers_in_the_same_invocation(bucket):
    ref = _started(bucket, mode="callback")
    assert ref["next"] == "ask_trainer" and ref["reply_key"] == "runs/r/state/att-1/reply-0.json"
    out = load("converse").lambda_handler(_reply(ref, {"text": "Should negative input raise?"}), Context())
    assert out["version"] == 1 and out["state_key"] == "runs/r/state/att-1/episode.json"
    assert out["next"] == "ask_trainer" and out["reply_key"] == "runs/r/state/att-1/reply-1.json"
    messages = _snapshot(bucket, out)["state"]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]


def test_an_outcome_too_large_for_send_task_failure_is_refused_before_it_is_sent():
    from rewardpipe.aws.rollout import CAUSE_LIMIT, FINISHED, TokenDelivery
    from rewardpipe.aws.settings import Settings
    from rewardpipe.aws.state import PayloadTooLarge

    sent = []

    class Recording(TokenDelivery):
        def _client(self, service):
            return type("C", (), {"send_task_failure": lambda _, **kw: sent.append(kw)})()

    delivery = Recording("token", Settings(), "bucket")
    delivery.leave(FINISHED, {"status": "scored"})
    assert sent == [{"taskToken": "token", "error": FINISHED, "cause": '{"status":"scored"}'}]
    with pytest.raises(PayloadTooLarge, match="32768"):
        delivery.leave(FINISHED, {"metrics": "m" * CAUSE_LIMIT})
    assert len(sent) == 1
    assert len(FINISHED) <= 256


def test_a_job_the_invocation_has_no_time_to_wait_for_goes_to_score_which_runs_it(bucket, runner):
    class ThirtySeconds(Context):
        def get_remaining_time_in_millis(self) -> int:
            return 30_000  # under the default job budget (10 s) + the inline margin (60 s)

    out = load("rollout_start").lambda_handler({"input": _event(), "attempt": "short-job"}, ThirtySeconds())
    assert out["next"] == "run_lambda" and out["execution"] == {"route": "lambda", "timeout_s": TASK.timeout_s or 10.0}
    assert bucket.list_keys("jobs/") == []
    # RouteJob sends run_lambda to Score, which runs the job on the runner (inline) and scores.
    scored = load("score_rollout").lambda_handler(out, Context())
    assert (
        scored["status"] == "scored" and {m["name"]: m["value"] for m in scored["metrics_list"]}["correctness"] == 1.0
    )


def test_a_turn_channel_must_be_one_of_the_stacks_and_only_for_callback_rollouts(bucket, monkeypatch):
    from rewardpipe.aws.rollout import describe_failure

    monkeypatch.setenv("TURN_CHANNELS", json.dumps({"nova": "https://sqs.us-east-1.amazonaws.com/123456789012/nova"}))
    ref = _started(bucket, mode="callback", channel="nova")
    assert ref["next"] == "ask_trainer" and _snapshot(bucket, ref)["policy"]["channel"] == "nova"
    with pytest.raises(ValueError, match="'trainers' is not a turn channel of this stack") as caught:
        _started(bucket, attempt="att-2", mode="callback", channel="trainers")
    # The state machine records it as bad input (StartEpisode's ValueError), before any turn was taken.
    cause = json.dumps({"errorType": "ValueError", "errorMessage": str(caught.value)})
    assert describe_failure({"Error": "ValueError", "Cause": cause}, "StartEpisodeStep", None).kind == "bad_input"
    with pytest.raises(ValidationError, match=r"only applies to policy\.mode 'callback'"):
        _started(bucket, attempt="att-3", mode="replay", turns=[COMMIT], channel="nova")


def test_a_resume_cannot_stand_in_for_the_trainers_turn(bucket):
    from rewardpipe.aws.rollout import PolicyError

    ref = _started(bucket, mode="callback")
    with pytest.raises(PolicyError, match="not a resume"):
        load("converse").lambda_handler(_reply(ref, {"resume": True}), Context())


def test_a_retried_entry_does_not_apply_the_trainer_turn_twice(bucket):
    ref = _started(bucket, mode="callback")
    reply = {"text": "Should negative input raise?"}
    load("converse").lambda_handler(_reply(ref, reply, entered="T1"), Context())
    # Step Functions retries the same entry (same EnteredTime, RetryCount 1) after the first attempt saved:
    again = load("converse").lambda_handler(_reply(ref, reply, entered="T1", retry_count=1), Context())
    assert again["next"] == "ask_trainer" and len(_snapshot(bucket, again)["state"]["messages"]) == 3
    # The next entry (new EnteredTime) with the same text is a new turn: a model may repeat itself.
    third = load("converse").lambda_handler(_reply(ref, reply, entered="T2", retry_count=1), Context())
    assert [m["role"] for m in _snapshot(bucket, third)["state"]["messages"]] == ["user", "assistant", "user"] * 1 + [
        "assistant",
        "user",
    ]


def test_a_large_trainer_reply_is_read_from_its_reply_key_only(bucket):
    from rewardpipe.aws.rollout import PolicyError

    ref = _started(bucket, mode="callback")
    bucket.put_json("runs/r/state/att-1/elsewhere.json", {"text": "x"})
    with pytest.raises(PolicyError, match="reply_key"):
        load("converse").lambda_handler(_reply(ref, {"text_key": "runs/r/state/att-1/elsewhere.json"}), Context())
    bucket.put_json(ref["reply_key"], {"text": COMMIT + "\n# " + "y" * 300_000})
    out = load("converse").lambda_handler(_reply(ref, {"text_key": ref["reply_key"]}), Context())
    assert out["next"] == "run_lambda"
    assert len(_snapshot(bucket, out)["state"]["messages"][-1]["content"]) > 300_000


def test_converse_pauses_when_the_invocation_runs_short_of_time(bucket):
    class Short(Context):
        def get_remaining_time_in_millis(self) -> int:
            return 3_000  # under the reserve of even a quick turn

    event = {"input": _event(mode="replay", turns=["Negative input?", COMMIT]), "attempt": "short"}
    ref = load("rollout_start").lambda_handler(event, Short())
    assert ref["next"] == "converse" and ref["next_action"] == "policy"
    # the state machine re-enters Converse with {"resume": true}: a fresh invocation resumes where it stopped
    out = load("converse").lambda_handler(_reply(ref, {"resume": True}), Context())
    assert out["next"] == "run_lambda" and _snapshot(bucket, out)["state"]["turn_kinds"] == ["question", "commit"]


def test_prepare_routes_by_time_budget_and_size_and_writes_only_fargate_jobs(bucket, monkeypatch):
    from rewardpipe.aws import jobs

    execution = _started(bucket)["execution"]
    assert execution == {"route": "lambda", "timeout_s": TASK.timeout_s or 10.0}  # inline: nothing written
    assert bucket.list_keys("jobs/") == []
    monkeypatch.setenv("ROUTING_THRESHOLD_S", "1")  # same job, lower threshold: Fargate, through S3
    ref = _started(bucket, attempt="att-2")
    assert ref["execution"]["route"] == "fargate" and ref["next"] == "run_fargate"
    job = bucket.get_json(ref["execution"]["job_key"])
    assert job["code"].strip() == TASK.reference_solution.strip() and job["tests"] == TASK.tests
    # A job whose invoke payload would pass Lambda's 6 MB synchronous limit runs on Fargate too.
    monkeypatch.setenv("ROUTING_THRESHOLD_S", "600")
    monkeypatch.setattr(jobs, "SYNC_INVOKE_LIMIT", len(jobs.inline_request(jobs.ExecutionJob.model_validate(job))) - 1)
    ref = _started(bucket, attempt="att-3")
    assert (
        ref["execution"]["route"] == "fargate" and bucket.get_json(ref["execution"]["job_key"])["tests"] == TASK.tests
    )


def test_the_inline_job_stays_within_lambdas_synchronous_payload_limit():
    from rewardpipe.aws import jobs
    from rewardpipe.execution.result import ExecutionJob, ExecutionResult

    assert harness.LIMITS["lambda_sync_bytes"] == jobs.SYNC_INVOKE_LIMIT  # one limit, the harness enforces it
    small = ExecutionJob(code="def f(): pass", tests="assert f() is None", entry_point="f", tests_format="check")
    assert jobs.fits_inline(small)
    assert not jobs.fits_inline(small.model_copy(update={"tests": "#" * jobs.SYNC_INVOKE_LIMIT}))
    # An answer too large for the response limit drops the program's output, never the verdict.
    loud = ExecutionResult(status="passed", passed=1, total=1, stdout="é" * 2_000_000)  # escaped as \u00e9: 6 bytes
    answer = jobs.inline_response(loud)
    assert len(json.dumps(answer).encode()) <= jobs.SYNC_INVOKE_LIMIT
    assert answer["result"]["passed"] == 1 and answer["result"]["status"] == "passed"
    assert "dropped" in answer["result"]["stdout"] and answer["status"] == "passed"


def test_the_code_runner_takes_its_job_inline_and_answers_with_the_result(bucket, runner):
    from rewardpipe.envs.ask_before_coding.environment import ENVIRONMENT
    from rewardpipe.episode import execution_job, start_episode

    state = start_episode(TASK, env=ENVIRONMENT, run_id="r", step=0, group_id="g", rollout_id="x", max_turns=2)
    state = state.evolve(final_code=TASK.reference_solution, next_action="execute")
    job = execution_job(state, TASK, ENVIRONMENT)
    answer = load("code_runner").lambda_handler({"job": job.model_dump(mode="json")}, Context())
    assert answer["status"] == "passed" and answer["passed"] == answer["total"] > 0
    assert answer["result"]["status"] == "passed" and answer["result"]["passed"] == answer["passed"]
    assert bucket.list_keys("") == []  # neither side touched the bucket
    ref = _started(bucket)
    out = load("score_rollout").lambda_handler(ref, Context())
    assert out["status"] == "scored" and out["record_key"] == "runs/r/step=2/group=g/x.json"
    assert {m["name"]: m["value"] for m in out["metrics_list"]}["correctness"] == 1.0
    assert bucket.list_keys("jobs/") == []


def test_a_non_finite_aggregate_is_an_error_record_on_the_lambda_path(bucket, runner, monkeypatch):
    # A guess that passes: correctness 1 and guessed_immediately -1, so 1e308 + 1e308 overflows to inf.
    monkeypatch.setenv("REWARD_WEIGHTS", json.dumps({"correctness": 1e308, "guessed_immediately": -1e308}))
    ref = _started(bucket)
    out = load("score_rollout").lambda_handler(ref, Context())
    record = bucket.get_json(out["record_key"])
    assert record["status"] == "error" and record["error"]["kind"] == "non_finite_aggregate"
    assert record["aggregate"] is None and "smaller weights" in record["error"]["message"]
    # Nova sees it flagged, with a finite number, never inf or NaN.
    flags = {m["name"]: m["value"] for m in out["metrics_list"]}
    assert flags["reward_error"] == 1 and out["status"] == "error"
    assert json.loads(json.dumps(out, allow_nan=False))["aggregate_reward_score"] is not None


def test_score_without_a_fargate_result_raises_execution_result_missing(bucket, monkeypatch):
    from rewardpipe.aws.rollout import ExecutionResultMissing

    monkeypatch.setenv("ROUTING_THRESHOLD_S", "1")  # a Fargate job whose container never wrote its result
    with pytest.raises(ExecutionResultMissing, match="left no result"):
        load("score_rollout").lambda_handler(_started(bucket), Context())


def test_a_runner_that_answers_without_a_result_is_an_executor_crash_not_a_score(bucket, runner, monkeypatch):
    from rewardpipe.aws import rollout

    harness.LAMBDA_FAULTS["code-runner"] = RuntimeError("sandbox exploded")
    with pytest.raises(rollout.ExecutorCrash, match="sandbox exploded"):
        load("score_rollout").lambda_handler(_started(bucket), Context())


@pytest.mark.parametrize(
    "event",
    [
        {},
        {"job": {}},
        {"job_key": "jobs/a/job.json", "result_key": "jobs/r.json"},
        {"job": {"code": "x", "tests": "y", "entry_point": "not a name"}},
    ],
)
def test_code_runner_rejects_malformed_requests(bucket, event):
    with pytest.raises(ValidationError):
        load("code_runner").lambda_handler(event, Context())


def _failed(context, state: str, error: str, cause: str = "boom", attempt: str = "att-1") -> dict:
    return {"context": {**context, "failed": {state: {"Error": error, "Cause": cause}}}, "attempt": attempt}


@pytest.mark.parametrize(
    "event, kind",
    [
        ("not even an object", "start_error"),
        (
            _failed({"run": "r", "group": "g", "rollout": "z"}, "StartEpisodeStep", "ValidationError", "bad"),
            "bad_input",
        ),
        (
            {"context": {"run": 5, "step": "two", "group": None, "rollout": "z2", "failed": "junk"}, "attempt": "a"},
            "start_error",
        ),
        ({"context": ["a", "list"], "attempt": None}, "start_error"),
        ({"context": {"run": "r", "group": "g", "rollout": "z3"}, "attempt": 7}, "start_error"),
    ],
)
def test_error_record_handler_always_writes_a_record(bucket, event, kind):
    out = load("error_record").lambda_handler(event, Context())
    assert out["status"] == "error" and out["aggregate_reward_score"] == 0.0
    record = bucket.get_json(out["record_key"])
    assert record["status"] == "error" and record["aggregate"] is None and record["error"]["kind"] == kind
    assert set(record["components"]) == {"correctness", "asked_before_coding", "guessed_immediately", "loop_penalty"}


def test_error_record_names_the_failed_state_and_the_lambda_error(bucket):
    ref = _started(bucket, mode="callback")
    cause = json.dumps({"errorType": "EndpointError", "errorMessage": "HTTP 503"})
    out = load("error_record").lambda_handler(_failed(ref, "ConverseStep", "EndpointError", cause), Context())
    record = bucket.get_json(out["record_key"])
    assert record["error"] == {"kind": "policy_error", "message": "[ConverseStep] EndpointError: HTTP 503"}
    assert record["task_id"] == TASK.task_id and record["step"] == 2


@pytest.mark.parametrize(
    "state, error, kind",
    [
        ("ScoreStep", "ZeroDivisionError", "scoring_error"),  # a reward crash is not the executor's fault
        ("ScoreStep", "ExecutionResultMissing", "executor_crash"),
        ("RunCodeLambda", "Lambda.Unknown", "executor_crash"),
        ("RunCodeFargate", "States.TaskFailed", "executor_crash"),
        ("AskTrainer", "PolicyError", "policy_error"),
        ("AskTrainer", "States.Timeout", "timeout"),
        ("ConverseStep", "SimulatorError", "simulator_error"),
        ("ConverseStep", "TransientError", "policy_error"),  # phase of the snapshot: a policy turn
        ("ConverseStep", "PayloadTooLarge", "orchestration_error"),
    ],
)
def test_the_failed_state_decides_the_error_kind(bucket, state, error, kind):
    ref = _started(bucket, mode="callback")
    out = load("error_record").lambda_handler(_failed(ref, state, error), Context())
    record = bucket.get_json(out["record_key"])
    assert record["error"]["kind"] == kind and record["error"]["message"].startswith(f"[{state}]")


def test_an_error_record_never_replaces_a_scored_record(bucket, runner):
    ref = _started(bucket)
    scored = load("score_rollout").lambda_handler(ref, Context())
    late = load("error_record").lambda_handler(_failed(ref, "ScoreStep", "States.Timeout"), Context())
    assert late["record_key"] == scored["record_key"]
    assert bucket.get_json(scored["record_key"])["status"] == "scored"
    # ...while a scored record does replace an earlier attempt's error record.
    bucket.put_json(scored["record_key"], {**bucket.get_json(scored["record_key"]), "status": "error"})
    load("score_rollout").lambda_handler(ref, Context())
    assert bucket.get_json(scored["record_key"])["status"] == "scored"


def test_failed_executions_without_ids_get_distinct_records(bucket):
    keys = {
        load("error_record").lambda_handler(
            {"context": {"failed": {"StartEpisodeStep": {"Error": "ValidationError"}}}, "attempt": name}, Context()
        )["record_key"]
        for name in ("exec-one", "exec-two")
    }
    assert keys == {
        "runs/unknown/step=0/group=unknown/exec-one.json",
        "runs/unknown/step=0/group=unknown/exec-two.json",
    }


class _Describe:
    """A Step Functions client whose DescribeExecution answers ``input`` or raises ``error`` (an AWS code)."""

    def __init__(self, input_text: str | None = None, error: str | None = None) -> None:
        self.input_text, self.error, self.calls = input_text, error, []

    def describe_execution(self, executionArn):  # boto3's parameter name
        from botocore.exceptions import ClientError

        self.calls.append(executionArn)
        if self.error:
            raise ClientError({"Error": {"Code": self.error, "Message": self.error}}, "DescribeExecution")
        return {"executionArn": executionArn, "input": self.input_text}


FIRST_STATE_FAILED = {
    "context": {"failed": {"StartEpisodeStep": {"Error": "RuntimeError", "Cause": "boom"}}},
    "attempt": "exec-raw",
    "execution": "arn:aws:states:us-east-1:123456789012:execution:m:exec-raw",
}


def test_a_failed_first_states_ids_are_read_back_from_the_execution(bucket):
    """StartEpisode's Catch passes on only its error (its input may be near 256 KiB): RecordError reads
    the execution's input with DescribeExecution and records the rollout under its own ids."""
    from rewardpipe.aws.rollout import FailedRollout, record_failure, with_execution_input
    from rewardpipe.aws.settings import Settings

    sfn = _Describe(json.dumps({**_event(), "rollout": "raw"}))
    event = with_execution_input(FailedRollout.model_validate(FIRST_STATE_FAILED), sfn)
    assert sfn.calls == [FIRST_STATE_FAILED["execution"]]
    record, key = record_failure(event, Settings.from_env())
    assert key == "runs/r/step=2/group=g/raw.json" and record.task_id == TASK.task_id
    assert record.error.message == "[StartEpisodeStep] RuntimeError: boom"


def test_a_converse_failure_whose_episode_cannot_be_read_is_recorded_under_the_executions_ids(bucket, monkeypatch):
    """Converse's Catch passes on only its run; when the episode's snapshot is gone too, the record still
    goes under the rollout's own group and id (read back from the execution), not under "unknown"."""
    import rewardpipe.aws.settings as aws_settings

    sfn = _Describe(json.dumps({**_event(), "rollout": "lost"}))
    real = aws_settings.aws_client
    monkeypatch.setattr(
        aws_settings, "aws_client", lambda service, **kw: sfn if service == "stepfunctions" else real(service, **kw)
    )
    event = {
        "context": {"run": "r", "failed": {"ConverseStep": {"Error": "RuntimeError", "Cause": "boom"}}},
        "attempt": "att-lost",
        "execution": "arn:aws:states:us-east-1:123456789012:execution:m:att-lost",
    }
    out = load("error_record").lambda_handler(event, Context())
    assert out["record_key"] == "runs/r/step=2/group=g/lost.json"
    assert bucket.get_json(out["record_key"])["error"]["message"] == "[ConverseStep] RuntimeError: boom"
    # With the episode readable, no call is made: its snapshot names the rollout.
    sfn.calls.clear()
    _started(bucket, attempt="att-found", mode="callback")
    out = load("error_record").lambda_handler({**event, "attempt": "att-found"}, Context())
    assert sfn.calls == [] and out["record_key"] == "runs/r/step=2/group=g/x.json"


@pytest.mark.parametrize(
    "describe, raises",
    [
        (_Describe(error="ThrottlingException"), True),  # retried by the state (TransientError)
        (_Describe(error="AccessDeniedException"), False),  # recorded anyway, under run "unknown"
        (_Describe(input_text="[1, 2]"), False),  # an input that is not an object
    ],
)
def test_an_unreadable_execution_input_still_ends_in_a_record_unless_it_is_worth_retrying(bucket, describe, raises):
    from botocore.exceptions import ClientError

    from rewardpipe.aws.rollout import FailedRollout, record_failure, with_execution_input
    from rewardpipe.aws.settings import Settings

    event = FailedRollout.model_validate(FIRST_STATE_FAILED)
    if raises:
        with pytest.raises(ClientError):
            with_execution_input(event, describe)
        return
    _, key = record_failure(with_execution_input(event, describe), Settings.from_env())
    assert key == "runs/unknown/step=0/group=unknown/exec-raw.json"


def test_a_long_rollout_id_keeps_its_full_value_under_the_stores_hashed_key(bucket):
    from rewardpipe.models import Record
    from rewardpipe.store import encode_id, record_key

    long_a, long_b = "a" * 300, "a" * 299 + "b"
    ref_a = load("rollout_start").lambda_handler(
        {"input": {**_event(mode="replay", turns=["Negative input?"]), "rollout": long_a}, "attempt": "la"}, Context()
    )
    ref_b = load("rollout_start").lambda_handler(
        {"input": {**_event(mode="replay", turns=["Negative input?"]), "rollout": long_b}, "attempt": "lb"}, Context()
    )
    # One scheme for long ids, the store's: the key is hash-suffixed, the record keeps the whole id.
    assert ref_a["record_key"] != ref_b["record_key"]
    assert ref_a["record_key"].rsplit("/", 1)[-1] == encode_id(long_a) + ".json" != long_a + ".json"
    record = bucket.get_json(ref_a["record_key"])
    assert record["rollout_id"] == long_a and ref_a["record_key"] == record_key(Record.model_validate(record))
    # A failure of such a rollout finds the same key (and leaves the scored record there).
    out = load("error_record").lambda_handler(
        _failed({"run": "r", "step": 2, "group": "g", "rollout": long_b}, "ScoreStep", "RuntimeError"), Context()
    )
    assert out["record_key"] == ref_b["record_key"] and bucket.get_json(out["record_key"])["status"] == "scored"


def test_an_over_long_run_id_is_recorded_under_unknown_named_by_the_execution(bucket):
    out = load("error_record").lambda_handler(
        {
            **_failed({"run": "r" * 300, "group": "g", "rollout": "x"}, "StartEpisodeStep", "ValidationError"),
            "attempt": "exec-long",
        },
        Context(),
    )
    assert out["record_key"] == "runs/unknown/step=0/group=g/exec-long.json"
    assert bucket.get_json(out["record_key"])["error"]["kind"] == "bad_input"


def test_the_payload_guard_raises_a_catchable_error_naming_the_size():
    from rewardpipe.aws.state import PayloadTooLarge, guard_payload

    assert guard_payload({"a": "b"}, "x") == {"a": "b"}
    with pytest.raises(PayloadTooLarge, match=r"the output is 2000[0-9]{2} bytes"):
        guard_payload({"a": "é" * 100_010}, "the output")


# -- the Fargate container's entry point ------------------------------------------------------------


def _entry(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(harness.ROOT / "containers" / "code_runner" / "entry.py")],
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(harness.ROOT), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_container_entry_point_names_missing_configuration():
    proc = _entry({"BUCKET": "b"})
    assert proc.returncode == 2
    assert "JOB_KEY" in proc.stderr and "RESULT_KEY" in proc.stderr


def test_container_entry_point_fails_without_writing_a_result_when_the_job_is_missing(bucket):
    url = harness.start_server()
    proc = _entry(
        {
            "BUCKET": BUCKET,
            "JOB_KEY": "jobs/none/job.json",
            "RESULT_KEY": "jobs/none/result.json",
            "AWS_ENDPOINT_URL": url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": harness.REGION,
        }
    )
    assert proc.returncode == 1 and "no execution job" in proc.stderr
    assert bucket.get_json("jobs/none/result.json", default=None) is None


def test_credentials_are_scrubbed_and_the_process_made_non_dumpable():
    code = (
        "import os, json\n"
        "os.environ['AWS_SECRET_ACCESS_KEY'] = 's'; os.environ['AWS_CONTAINER_CREDENTIALS_RELATIVE_URI'] = '/x'\n"
        "from rewardpipe.aws.hardening import scrub_credentials, make_non_dumpable, is_dumpable\n"
        "removed = scrub_credentials(os.environ)\n"
        "ok = make_non_dumpable()\n"
        "print(json.dumps([sorted(removed), ok, is_dumpable(), [k for k in os.environ if k.startswith('AWS_')]]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(harness.ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    removed, ok, dumpable, left = json.loads(proc.stdout)
    assert removed == ["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_SECRET_ACCESS_KEY"] and left == []
    if sys.platform.startswith("linux"):
        assert ok is True and dumpable is False


# -- the OpenAI-compatible policy ------------------------------------------------------------------


class PolicyTimeout(Context):
    """The conversation functions run with the policy timeout (300 s), enough for LLM turns."""

    def get_remaining_time_in_millis(self) -> int:
        return 300_000


POLICY_KEY_CONTEXT = json.dumps({"rewardpipe": {"policy": {"api_key_secret_name": "policy-key"}}}, sort_keys=True)


@pytest.fixture
def chat_endpoint():
    """A local OpenAI-compatible endpoint that always asks a question and records what it was sent."""
    server, url, seen = harness.chat_server(lambda body: "Which format do you want?")
    yield url, seen
    server.shutdown()


def test_openai_policy_turn_calls_the_endpoint_with_the_key_from_secrets_manager(bucket, chat_endpoint, monkeypatch):
    import boto3

    url, seen = chat_endpoint
    boto3.client("secretsmanager", region_name=harness.REGION).create_secret(Name="policy-key", SecretString="sk-test")
    # The grant to read the key exists in a stack configured with it: the IAM harness checks against that one.
    monkeypatch.setattr(harness, "DIRECT_CONTEXT", POLICY_KEY_CONTEXT)
    monkeypatch.setenv("POLICY_API_KEY_SECRET", "policy-key")
    monkeypatch.setenv("POLICY_MODEL", "default-model")
    monkeypatch.setenv("MAX_TURNS", "2")

    ref = load("rollout_start").lambda_handler(
        {"input": _event(mode="openai", base_url=url), "attempt": "o"}, PolicyTimeout()
    )
    state = _snapshot(bucket, ref)["state"]
    assert state["messages"][1] == {"role": "assistant", "content": "Which format do you want?"}
    assert state["turn_kinds"] == ["question", "question"] and state["end_reason"] == "turn_limit"
    # Nothing to run: scored in the same invocation.
    assert ref["next"] == "finished" and bucket.get_json(ref["record_key"])["status"] == "scored"
    call = seen[0]
    assert len(seen) == 2 and call["path"] == "/v1/chat/completions" and call["auth"] == "Bearer sk-test"
    assert call["body"]["model"] == "default-model"
    # The policy sees the conversation, never the hidden spec or tests.
    assert any(m == {"role": "user", "content": TASK.prompt} for m in call["body"]["messages"])
    sent = " ".join(m["content"] for m in call["body"]["messages"])
    assert TASK.tests not in sent and all(item not in sent for item in TASK.spec)


def test_an_unreachable_endpoint_fails_the_step_loudly(bucket):
    from rewardpipe.aws.lambda_support import TransientError
    from rewardpipe.aws.rollout import PolicyError

    # Raised under the name the state machine retries; after the retries its Catch records a policy_error.
    event = {"input": _event(mode="openai", base_url="http://127.0.0.1:9/v1", model="m"), "attempt": "u"}
    with pytest.raises(TransientError, match=r"^PolicyError") as info:
        load("rollout_start").lambda_handler(event, PolicyTimeout())
    assert isinstance(info.value.__cause__, PolicyError)


def _client_error(code: str):
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": "m"}}, "PutObject")


@pytest.mark.parametrize(
    "code, transient",
    [
        ("SlowDown", True),
        ("ThrottlingException", True),
        ("503", True),
        ("InternalError", True),
        ("AccessDenied", False),
        ("NoSuchBucket", False),
    ],
)
def test_transient_faults_are_recognised_through_the_cause_chain(code, transient):
    from rewardpipe.aws.lambda_support import is_transient
    from rewardpipe.store import StoreError

    try:
        try:
            raise _client_error(code)
        except Exception as inner:
            raise StoreError(f"S3 error {code}") from inner
    except StoreError as outer:
        assert is_transient(outer) is transient


def test_s3_throttling_in_a_step_surfaces_as_transient_error(bucket, monkeypatch):
    from rewardpipe.aws import settings as settings_module
    from rewardpipe.aws.lambda_support import TransientError

    ref = _started(bucket, mode="callback")

    class Throttled:
        def __getattr__(self, name):
            def call(*args, **kwargs):
                raise _client_error("SlowDown")

            return call

    monkeypatch.setitem(settings_module._CLIENTS, "s3", Throttled())
    with pytest.raises(TransientError, match="SlowDown"):
        load("converse").lambda_handler({**ref, "reply": {"text": "Negative input?"}}, Context())


# -- cold start ------------------------------------------------------------------------------------


# What a handler may import at cold start is checked for every handler in tests/aws/test_cold_start_imports.py.


def test_rollout_functions_skip_the_pydantic_plugin_scan(synth):
    for logical, resource in synth.template["Resources"].items():
        if resource["Type"] == "AWS::Lambda::Function" and logical.startswith(("RolloutWorkflow", "CodeRunner")):
            assert resource["Properties"]["Environment"]["Variables"]["PYDANTIC_DISABLE_PLUGINS"] == "__all__", logical
