"""The synthesized state machine, executed by moto's Step Functions engine with the real handlers.

Every test deploys the one synthesized template into a fresh moto account (tests/aws/harness.py).
"""

from __future__ import annotations

import json
import time

import pytest

from rewardpipe.models import Message, Rollout, load_tasks
from rewardpipe.transcripts import RolloutTranscript
from tests.aws import harness

pytestmark = pytest.mark.xdist_group("cdk")

TASKS = {t.task_id: t for t in load_tasks(harness.ROOT / "rewardpipe" / "data" / "tasks.jsonl")}
TASK = next(iter(TASKS.values()))


def fenced(code: str) -> str:
    return f"Here is the code:\n```python\n{code}\n```"


# Four different behaviours in one GRPO group, so every component varies.
GROUP_TURNS = {
    "ask-then-commit": ["What should happen when the input is negative?", fenced(TASK.reference_solution)],
    "guess": [fenced(f"def {TASK.entry_point}(*args, **kwargs):\n    return None")],
    "loop": [
        "Can you explain again what exactly you need?",
        "Can you explain again what exactly you need?",
        fenced(TASK.reference_solution),
    ],
    "never-commits": ["Let me think about this first.", "Still thinking."],
}


def _input(run: str, rollout: str, turns: list[str], task=TASK, group: str = "g0", **extra) -> dict:
    return {
        "run": run,
        "step": 0,
        "group": group,
        "rollout": rollout,
        "task": task.model_dump(mode="json"),
        "policy": {"mode": "replay", "turns": turns},
        **extra,
    }


def harness_store(deployment):
    import boto3

    from rewardpipe.store import S3Store

    return S3Store(deployment.bucket, client=boto3.client("s3", region_name=harness.REGION))


def _records(deployment, run: str, step: int = 0) -> dict:
    import boto3

    from rewardpipe.store import S3Store

    store = S3Store(deployment.bucket, client=boto3.client("s3", region_name=harness.REGION))
    return {r.rollout_id: r for r in store.iter_records(run, step)}


def _start_all(sfn, arn: str, payloads: list[dict]) -> list[dict]:
    import uuid

    arns = [
        sfn.start_execution(stateMachineArn=arn, name=f"x-{uuid.uuid4().hex}", input=json.dumps(p))["executionArn"]
        for p in payloads
    ]
    return [harness.wait_execution(sfn, a) for a in arns]


def test_a_group_scores_the_same_as_the_local_runner(deployment, sfn):
    from rewardpipe.envs.ask_before_coding.environment import ENVIRONMENT
    from rewardpipe.episode import run_episode
    from rewardpipe.execution import get_executor
    from rewardpipe.policies import ReplayPolicy
    from rewardpipe.rewards import get_reward

    payloads = [_input("run-a", rollout, turns) for rollout, turns in GROUP_TURNS.items()]
    results = _start_all(sfn, deployment.state_machine_arn, payloads)
    assert [r["status"] for r in results] == ["SUCCEEDED"] * len(payloads)
    outputs = {json.loads(r["output"])["id"]: json.loads(r["output"]) for r in results}
    stored = _records(deployment, "run-a")
    assert sorted(stored) == sorted(GROUP_TURNS)

    reward = get_reward(
        "ask_before_coding",
        {"correctness": 1.0, "asked_before_coding": 0.6, "guessed_immediately": 0.4, "loop_penalty": 0.2},
    )
    recordings = [
        Rollout(
            rollout_id=r,
            group_id="g0",
            task_id=TASK.task_id,
            messages=[Message(role="assistant", content=t) for t in turns],
        )
        for r, turns in GROUP_TURNS.items()
    ]
    policy = ReplayPolicy(recordings)
    for rollout_id in GROUP_TURNS:
        local = run_episode(
            TASK,
            policy,
            ENVIRONMENT,
            get_executor(),
            reward,
            run_id="run-a",
            step=0,
            group_id="g0",
            rollout_id=rollout_id,
            max_turns=6,
        )
        remote = stored[rollout_id]
        assert remote.status == local.status == "scored", (rollout_id, remote.error)
        assert remote.components == pytest.approx(local.components), rollout_id
        assert remote.aggregate == pytest.approx(local.aggregate), rollout_id
        assert remote.metrics["end_reason"] == local.metrics["end_reason"]
        # The execution output is the Nova reward shape, with each component as a Reward metric.
        out = outputs[rollout_id]
        assert out["aggregate_reward_score"] == pytest.approx(local.aggregate)
        rewards = {m["name"]: m["value"] for m in out["metrics_list"] if m["type"] == "Reward"}
        assert rewards == pytest.approx({k: v for k, v in local.components.items() if v is not None})
    # The transcript of every rollout is kept beside the records: the core's transcript document, which
    # carries the Rollout (replayable) plus reveals, executed code, verdict and scores.
    import boto3

    from rewardpipe.store import S3Store

    store = S3Store(deployment.bucket, client=boto3.client("s3", region_name=harness.REGION))
    for rollout_id, turns in GROUP_TURNS.items():
        saved = store.get_json(f"runs/run-a/transcripts/step=0/group=g0/{rollout_id}.json")
        full = RolloutTranscript.model_validate(saved)
        transcript = full.to_rollout()
        assert [m.content for m in transcript.messages if m.role == "assistant"] == turns
        assert saved["end_reason"] == stored[rollout_id].metrics["end_reason"]
        assert full.components == stored[rollout_id].components
        assert full.verdict.status in ("passed", "failed", "not_executed")
    # The group really varies: a dead-component check on it would see signal in every component.
    for name in ("correctness", "asked_before_coding", "guessed_immediately"):
        assert len({stored[r].components[name] for r in stored}) > 1, name


def test_an_executor_failure_ends_in_an_error_record_not_a_zero(deployment, sfn):
    harness.LAMBDA_FAULTS[deployment.function_name("CodeRunnerFunction")] = RuntimeError("sandbox pool exploded")
    result = harness.run_execution(
        sfn, deployment.state_machine_arn, _input("run-f", "r0", GROUP_TURNS["ask-then-commit"])
    )
    assert result["status"] == "SUCCEEDED"
    output = json.loads(result["output"])
    assert output["status"] == "error"
    assert {m["name"]: m["value"] for m in output["metrics_list"]}["reward_error"] == 1
    record = _records(deployment, "run-f")["r0"]
    assert record.status == "error" and record.aggregate is None
    assert set(record.components.values()) == {None}
    assert record.error.kind == "executor_crash"
    assert "sandbox pool exploded" in record.error.message
    transcript = harness_store(deployment).get_json("runs/run-f/transcripts/step=0/group=g0/r0.json")
    assert len(transcript["messages"]) == 4 and transcript["turn_kinds"] == ["question", "commit"]
    assert transcript["status"] == "error" and "sandbox pool exploded" in transcript["verdict"]["reason"]


def test_a_policy_endpoint_failure_is_recorded_as_a_policy_error(deployment, sfn):
    """The endpoint stays down through the transient retries: Converse's Catch records a policy error,
    naming the state that failed and keeping the conversation so far."""
    payload = _input("run-p", "r0", [])
    payload["policy"] = {"mode": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
    result = harness.run_execution(sfn, deployment.state_machine_arn, payload)
    assert result["status"] == "SUCCEEDED"
    record = _records(deployment, "run-p")["r0"]
    assert record.status == "error" and record.error.kind == "policy_error"
    assert record.error.message.startswith("[StartEpisodeStep] TransientError: PolicyError")
    transcript = harness_store(deployment).get_json("runs/run-p/transcripts/step=0/group=g0/r0.json")
    assert [m["role"] for m in transcript["messages"]] == ["user"]


def test_malformed_input_still_leaves_an_error_record(deployment, sfn):
    bad = {"run": "run-m", "step": 0, "group": "g0", "rollout": "r0", "policy": {"mode": "replay", "turns": []}}
    result = harness.run_execution(sfn, deployment.state_machine_arn, bad)  # no task at all
    assert result["status"] == "SUCCEEDED"
    record = _records(deployment, "run-m")["r0"]
    assert record.status == "error" and record.error.kind == "bad_input"
    assert "task" in record.error.message


def test_a_long_job_runs_on_fargate_through_the_container_entry_point(deployment, sfn):
    """timeout_s above the routing threshold (600 s) takes the ECS runTask.sync branch; the container's
    entry point runs as a separate process with the task's environment and talks to S3 over HTTP."""
    probe = TASK.model_copy(
        update={
            "task_id": "env-probe",
            "timeout_s": 700,
            "entry_point": "leaked",
            "tests": (
                "import unittest\n"
                "class T(unittest.TestCase):\n"
                "    def test_no_credentials_in_env(self):\n"
                "        self.assertEqual(leaked(), [])\n"
            ),
            "reference_solution": "def leaked():\n    return []\n",
        }
    )
    code = (
        "import os\n"
        "def leaked():\n"
        "    return sorted(k for k in os.environ if k.startswith('AWS_') and 'ENDPOINT' not in k)\n"
    )
    result = harness.run_execution(
        sfn,
        deployment.state_machine_arn,
        _input("run-l", "r0", ["Anything else I should know?", fenced(code)], task=probe),
    )
    assert result["status"] == "SUCCEEDED", result
    assert len(harness.CONTAINER_RUNS) == 1
    run = harness.CONTAINER_RUNS[0]
    assert run["returncode"] == 0, run["stderr"][-2000:]
    assert run["env"]["JOB_KEY"].startswith("jobs/run-l/r0/") and run["env"]["RESULT_KEY"].endswith("/result.json")
    assert run["env"]["BUCKET"] == deployment.bucket
    finished = json.loads(run["stdout"].strip().splitlines()[-1])
    assert "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI" in finished["credentials_scrubbed"]
    record = _records(deployment, "run-l")["r0"]
    assert record.status == "scored", record.error
    # The model's program saw no AWS credential variables: its test passed.
    assert record.components["correctness"] == 1.0


def test_a_crashed_fargate_container_ends_in_an_error_record(deployment, sfn):
    """The container exits non-zero without writing a result (here: its job object is gone); the ECS
    task still "succeeds" from Step Functions' point of view, so Score must notice the missing result."""
    harness.CONTAINER_FAULT_ENV["JOB_KEY"] = "jobs/vanished/job.json"
    slow = TASK.model_copy(update={"timeout_s": 900})
    result = harness.run_execution(
        sfn, deployment.state_machine_arn, _input("run-x", "r0", [fenced(TASK.reference_solution)], task=slow)
    )
    assert result["status"] == "SUCCEEDED"
    assert [r["returncode"] for r in harness.CONTAINER_RUNS] == [1]
    record = _records(deployment, "run-x")["r0"]
    assert record.status == "error" and record.aggregate is None
    assert record.error.kind == "executor_crash" and "left no result" in record.error.message


def _serve_raw(deployment, sfn, execution: str, answers) -> list[dict]:
    """Answer turn requests straight from the queue (no RolloutClient); returns the message bodies, each
    with the conversation the trainer read at its state_key when it answered (``seen``)."""
    import boto3

    sqs = boto3.client("sqs", region_name=harness.REGION)
    bodies = []
    deadline = time.time() + 120
    while sfn.describe_execution(executionArn=execution)["status"] == "RUNNING":
        assert time.time() < deadline, "callback execution did not finish"
        received = sqs.receive_message(QueueUrl=deployment.queue_url, WaitTimeSeconds=0).get("Messages", [])
        for message in received:
            body = json.loads(message["Body"])
            seen = harness_store(deployment).get_json(body["state_key"])["state"]["messages"]
            bodies.append({**body, "seen": seen})
            sfn.send_task_success(taskToken=body["task_token"], output=json.dumps({"text": next(answers)}))
            sqs.delete_message(QueueUrl=deployment.queue_url, ReceiptHandle=message["ReceiptHandle"])
        time.sleep(0.05)
    return bodies


def test_a_trainer_supplies_turns_through_the_callback_queue(deployment, sfn):
    payload = _input("run-c", "r0", [])
    payload["policy"] = {"mode": "callback"}
    execution = sfn.start_execution(
        stateMachineArn=deployment.state_machine_arn, name="callback-run", input=json.dumps(payload)
    )["executionArn"]
    answers = iter(["Should negative durations raise an error?", fenced(TASK.reference_solution)])
    bodies = _serve_raw(deployment, sfn, execution, answers)
    assert sfn.describe_execution(executionArn=execution)["status"] == "SUCCEEDED"
    # Each request carries keys, not the conversation: the trainer reads it from the state snapshot.
    assert all("messages" not in b and b["bucket"] == deployment.bucket for b in bodies)
    seen_messages = [b["seen"] for b in bodies]
    assert [len(m) for m in seen_messages] == [1, 3]
    assert seen_messages[0][0]["content"] == TASK.prompt
    # The trainer saw the conversation so far, never the hidden spec or tests.
    assert TASK.tests not in json.dumps(seen_messages)
    record = _records(deployment, "run-c")["r0"]
    assert record.status == "scored" and record.components["correctness"] == 1.0
    assert record.components["asked_before_coding"] == 1.0
    # One state per trainer turn and no Choice between them: StartEpisode asked the first, Converse the second
    # and then ran the job and scored; Finished is the output.
    entered = [
        e["stateEnteredEventDetails"]["name"]
        for e in sfn.get_execution_history(executionArn=execution)["events"]
        if e["type"].endswith("StateEntered")
    ]
    assert entered == ["StartEpisodeStep", "ConverseStep", "ConverseStep", "Finished"]


# -- AWS limits (enforced by the harness: any state payload over 256 KiB fails the test) ------------------

LONG_QUESTION = "Before I code this, one question about the input format? " + "Detail. " * 4_000  # ~32 KB, ~8k tokens


def test_six_long_turns_in_replay_mode_end_in_a_scored_record(deployment, sfn):
    from rewardpipe.aws.client import RolloutClient

    turns = [LONG_QUESTION] * 5 + [fenced(TASK.reference_solution)]
    client = RolloutClient(
        deployment.state_machine_arn,
        bucket=deployment.bucket,
        sfn=sfn,
        s3=__import__("boto3").client("s3", region_name=harness.REGION),
    )
    arn = client.start("run-big", 0, "g0", "r0", task=TASK, policy={"mode": "replay", "turns": turns})
    (out,) = client.wait([arn], poll_s=0.05)
    assert out["status"] == "scored", out
    record = _records(deployment, "run-big")["r0"]
    assert record.components["correctness"] == 1.0 and record.metrics["assistant_turns"] == 6
    # Once started, the turns are stored once and every state passes only keys (the harness checks each).
    assert harness_store(deployment).get_json(f"runs/run-big/state/{arn.rsplit(':', 1)[-1]}/replay.json") == turns


def test_six_long_turns_in_callback_mode_end_in_a_scored_record(deployment, sfn):
    payload = _input("run-bigc", "r0", [])
    payload["policy"] = {"mode": "callback"}
    execution = sfn.start_execution(
        stateMachineArn=deployment.state_machine_arn, name="callback-big", input=json.dumps(payload)
    )["executionArn"]
    answers = iter([LONG_QUESTION] * 5 + [fenced(TASK.reference_solution)])
    _serve_raw(deployment, sfn, execution, answers)
    assert sfn.describe_execution(executionArn=execution)["status"] == "SUCCEEDED"
    record = _records(deployment, "run-bigc")["r0"]
    assert record.status == "scored" and record.metrics["assistant_turns"] == 6
    assert record.components["correctness"] == 1.0


@pytest.mark.parametrize("mode", ["replay", "callback"])
def test_a_single_300_kb_turn_ends_in_a_record(deployment, sfn, mode):
    import boto3

    from rewardpipe.aws.client import RolloutClient

    huge = fenced(TASK.reference_solution) + "\n# " + "z" * 300_000
    client = RolloutClient(
        deployment.state_machine_arn,
        queue_url=deployment.queue_url,
        bucket=deployment.bucket,
        sfn=sfn,
        sqs=boto3.client("sqs", region_name=harness.REGION),
        s3=boto3.client("s3", region_name=harness.REGION),
    )
    policy = {"mode": "replay", "turns": [huge]} if mode == "replay" else {"mode": "callback"}
    arn = client.start(f"run-huge-{mode}", 0, "g0", "r0", task=TASK, policy=policy)
    if mode == "callback":
        assert client.serve_turns(lambda request: huge, until=client.all_done([arn]), poll_s=0.05) == 1
    else:  # the client stored the turns in S3 first: the input alone would be over the limit
        execution_input = json.loads(sfn.describe_execution(executionArn=arn)["input"])
        assert execution_input["policy"]["turns_key"].startswith(f"runs/run-huge-{mode}/state/inputs/")
    (out,) = client.wait([arn], poll_s=0.05)
    assert out["status"] in ("scored", "error")
    record = _records(deployment, f"run-huge-{mode}")["r0"]
    assert record.status == out["status"]


def _raw_input(run: str, turns: list[str], size: int, **extra) -> dict:
    """An execution input of exactly ``size`` bytes, as a caller starting the execution directly (not
    through RolloutClient, which moves large inputs to S3) sends it: an inline task whose hidden tests
    carry a long comment."""
    payload = {**_input(run, "r0", turns), **extra}
    task = payload["task"]
    task["tests"] += "\n# "
    task["tests"] += "p" * (size - len(json.dumps(payload).encode("utf-8")))
    assert len(json.dumps(payload).encode("utf-8")) == size
    return payload


def _start_raw(sfn, deployment, payload: dict) -> dict:
    import uuid

    arn = sfn.start_execution(
        stateMachineArn=deployment.state_machine_arn, name=f"raw-{uuid.uuid4().hex}", input=json.dumps(payload)
    )["executionArn"]
    return harness.wait_execution(sfn, arn)


def test_a_raw_start_near_256_kib_failing_at_its_first_state_ends_in_an_error_record(deployment, sfn):
    """The first state's Catch used to add its error to the 250 KiB input; with a long cause (a stack
    trace) that output is over 256 KiB: States.DataLimitExceeded on AWS, which no Catch catches, so the
    execution failed without a record (the harness fails the test on that payload)."""
    cause = "the policy runtime crashed: " + "frame " * 4_000  # ~24 KB, like a deep stack trace
    harness.LAMBDA_FAULTS[deployment.function_name("RolloutWorkflowStartEpisode")] = RuntimeError(cause)
    result = _start_raw(sfn, deployment, _raw_input("run-raw-fail", [fenced(TASK.reference_solution)], 250 * 1024))
    assert result["status"] == "SUCCEEDED"
    record = _records(deployment, "run-raw-fail")["r0"]  # under the input's ids, read back from the execution
    assert record.status == "error" and record.aggregate is None
    assert record.error.message.startswith("[StartEpisodeStep] RuntimeError: the policy runtime crashed")
    assert json.loads(result["output"])["status"] == "error"


def test_a_raw_start_near_256_kib_failing_in_converse_ends_in_an_error_record(deployment, sfn):
    """Converse's failure path used to copy the whole execution input next to the error: over 256 KiB."""
    payload = _raw_input("run-raw-converse", [], 250 * 1024, policy={"mode": "callback"})
    execution = sfn.start_execution(
        stateMachineArn=deployment.state_machine_arn, name="raw-converse", input=json.dumps(payload)
    )["executionArn"]
    cause = "the simulator crashed: " + "frame " * 4_000
    harness.LAMBDA_FAULTS[deployment.function_name("RolloutWorkflowConverse")] = RuntimeError(cause)
    _serve_raw(deployment, sfn, execution, iter(["Should negative durations raise an error?"]))
    assert sfn.describe_execution(executionArn=execution)["status"] == "SUCCEEDED"
    record = _records(deployment, "run-raw-converse")["r0"]
    assert record.status == "error" and record.error.message.startswith("[ConverseStep] RuntimeError: the simulator")


def test_a_valid_raw_start_near_256_kib_is_scored(deployment, sfn):
    result = _start_raw(sfn, deployment, _raw_input("run-raw-ok", [fenced(TASK.reference_solution)], 250 * 1024))
    assert result["status"] == "SUCCEEDED"
    record = _records(deployment, "run-raw-ok")["r0"]
    assert record.status == "scored" and record.components["correctness"] == 1.0


# A raw execution input up to this size is documented to work (docs/aws.md, "Limits"): StartEpisode's
# Parameters add the task token and the execution name to the input, and that must stay within 256 KiB
# for the largest token and name AWS issues (SendTaskSuccess: taskToken "Maximum length of 2048";
# execution names: at most 80 characters).
RAW_INPUT_LIMIT = 253 * 1024
MAX_TASK_TOKEN, MAX_EXECUTION_NAME = 2048, 80


def test_a_raw_input_up_to_the_documented_limit_leaves_room_for_the_largest_task_token(deployment, sfn):
    result = _start_raw(
        sfn, deployment, _raw_input("run-raw-limit", [fenced(TASK.reference_solution)], RAW_INPUT_LIMIT)
    )
    assert _records(deployment, "run-raw-limit")["r0"].status == "scored"
    (scheduled,) = [
        e["taskScheduledEventDetails"]["parameters"]
        for e in sfn.get_execution_history(executionArn=result["executionArn"])["events"]
        if e["type"] == "TaskScheduled" and "StartEpisode" in e["taskScheduledEventDetails"]["parameters"]
    ]
    payload = json.loads(scheduled)["Payload"]
    worst = (
        len(scheduled.encode("utf-8"))
        - len(payload["task_token"])
        - len(payload["attempt"])
        + MAX_TASK_TOKEN
        + MAX_EXECUTION_NAME
    )
    assert worst <= harness.LIMITS["sfn_payload_bytes"], worst


def test_start_execution_refuses_an_input_over_256_kib_and_the_caller_sees_why(deployment, sfn):
    """Over 262,144 bytes there is no execution to record anything for: StartExecution itself refuses."""
    from botocore.exceptions import ClientError

    payload = _raw_input("run-over", [fenced(TASK.reference_solution)], 262_145)
    with pytest.raises(ClientError) as info:
        _start_raw(sfn, deployment, payload)
    assert info.value.response["Error"]["Code"] == "ValidationException"
    assert "'input'" in str(info.value) and "262144" in str(info.value)
    assert sfn.list_executions(stateMachineArn=deployment.state_machine_arn)["executions"] == []
    assert _records(deployment, "run-over") == {}


# -- the synthesized definition: retries, timeouts -----------------------------------------------------


def _states(synth) -> dict:
    (sm,) = [r for r in synth.template["Resources"].values() if r["Type"] == "AWS::StepFunctions::StateMachine"]
    parts = sm["Properties"]["DefinitionString"]["Fn::Join"][1]
    return json.loads("".join(p if isinstance(p, str) else "ARN" for p in parts))["States"]


def test_throttling_and_placement_failures_retry_with_full_jitter_and_a_cap(synth):
    states = _states(synth)
    for name, state in states.items():
        for retry in state.get("Retry", []):
            assert retry.get("JitterStrategy") == "FULL" and 0 < retry.get("MaxDelaySeconds", 0) <= 60, (name, retry)
    assert any("Lambda.TooManyRequestsException" in r["ErrorEquals"] for r in states["ConverseStep"]["Retry"])
    assert any("AmazonECS.Unknown" in r["ErrorEquals"] for r in states["RunCodeFargate"]["Retry"])


def test_the_fargate_step_outlasts_the_largest_job_and_llm_steps_get_the_policy_timeout(synth):
    from rewardpipe.models import Task

    largest = next(m.le for m in Task.model_fields["timeout_s"].metadata if hasattr(m, "le"))
    assert _states(synth)["RunCodeFargate"]["TimeoutSeconds"] >= largest + 300
    functions = {
        k: r["Properties"] for k, r in synth.template["Resources"].items() if r["Type"] == "AWS::Lambda::Function"
    }
    policy_timeout = 300  # stacks/config.py default
    for prefix in ("RolloutWorkflowStartEpisode", "RolloutWorkflowConverse"):
        (props,) = [p for k, p in functions.items() if k.startswith(prefix) and "Logs" not in k]
        assert props["Timeout"] == policy_timeout, prefix


@pytest.mark.parametrize(
    "role, prefixes",
    [
        ("RolloutWorkflowScore", {"tasks/*", "jobs/*", "runs/*"}),  # a missing result must read as 404 (executor_crash)
        ("RolloutWorkflowRecordError", {"runs/*"}),  # an absent earlier record must read as 404
        ("RolloutWorkflowConverse", {"tasks/*", "runs/*"}),
        ("RolloutWorkflowStartEpisode", {"tasks/*", "runs/*"}),
    ],
)
def test_functions_that_read_maybe_missing_keys_may_list_those_prefixes(synth, role, prefixes):
    listed = set()
    for logical, resource in synth.template["Resources"].items():
        if resource["Type"] == "AWS::IAM::Policy" and logical.startswith(role):
            for st in resource["Properties"]["PolicyDocument"]["Statement"]:
                if st["Action"] == "s3:ListBucket":
                    listed.update(st["Condition"]["StringLike"]["s3:prefix"])
    assert listed == prefixes


def test_the_stack_turn_limit_cannot_exceed_the_documented_rollout_limit():
    from rewardpipe.aws.rollout import MAX_TURNS_LIMIT
    from stacks.constructs.rollout_workflow import checked_max_turns

    assert checked_max_turns(MAX_TURNS_LIMIT) == MAX_TURNS_LIMIT
    with pytest.raises(ValueError, match="rewardpipe.max_turns: at most 20"):
        checked_max_turns(MAX_TURNS_LIMIT + 1)
