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
    "loop": ["Can you explain again what exactly you need?", "Can you explain again what exactly you need?",
             fenced(TASK.reference_solution)],
    "never-commits": ["Let me think about this first.", "Still thinking."],
}


def _input(run: str, rollout: str, turns: list[str], task=TASK, group: str = "g0", **extra) -> dict:
    return {"run": run, "step": 0, "group": group, "rollout": rollout, "task": task.model_dump(mode="json"),
            "policy": {"mode": "replay", "turns": turns}, **extra}


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

    arns = [sfn.start_execution(stateMachineArn=arn, name=f"x-{uuid.uuid4().hex}", input=json.dumps(p))["executionArn"]
            for p in payloads]
    return [harness.wait_execution(sfn, a) for a in arns]


def test_a_group_scores_the_same_as_the_local_runner(deployment, sfn):
    from rewardpipe.episode import run_episode
    from rewardpipe.execution import get_executor
    from rewardpipe.policies import ReplayPolicy
    from rewardpipe.rewards import get_reward
    from rewardpipe.simulator import RuleBasedSimulator

    payloads = [_input("run-a", rollout, turns) for rollout, turns in GROUP_TURNS.items()]
    results = _start_all(sfn, deployment.state_machine_arn, payloads)
    assert [r["status"] for r in results] == ["SUCCEEDED"] * len(payloads)
    outputs = {json.loads(r["output"])["id"]: json.loads(r["output"]) for r in results}
    stored = _records(deployment, "run-a")
    assert sorted(stored) == sorted(GROUP_TURNS)

    reward = get_reward("ask_before_coding", {"correctness": 1.0, "asked_before_coding": 0.6,
                                              "guessed_immediately": 0.4, "loop_penalty": 0.2})
    recordings = [Rollout(rollout_id=r, group_id="g0", task_id=TASK.task_id,
                          messages=[Message(role="assistant", content=t) for t in turns])
                  for r, turns in GROUP_TURNS.items()]
    policy = ReplayPolicy(recordings)
    for rollout_id in GROUP_TURNS:
        local = run_episode(TASK, policy, RuleBasedSimulator(), get_executor(), reward,
                            run_id="run-a", step=0, group_id="g0", rollout_id=rollout_id, max_turns=6)
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
    result = harness.run_execution(sfn, deployment.state_machine_arn,
                                   _input("run-f", "r0", GROUP_TURNS["ask-then-commit"]))
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
    harness.LAMBDA_FAULTS[deployment.function_name("RolloutWorkflowPolicyTurn")] = ConnectionError("endpoint down")
    result = harness.run_execution(sfn, deployment.state_machine_arn, _input("run-p", "r0", ["hi?"]))
    assert result["status"] == "SUCCEEDED"
    record = _records(deployment, "run-p")["r0"]
    assert record.status == "error" and record.error.kind == "policy_error"
    assert "endpoint down" in record.error.message


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
    probe = TASK.model_copy(update={
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
    })
    code = ("import os\n"
            "def leaked():\n"
            "    return sorted(k for k in os.environ if k.startswith('AWS_') and 'ENDPOINT' not in k)\n")
    result = harness.run_execution(sfn, deployment.state_machine_arn,
                                   _input("run-l", "r0", ["Anything else I should know?", fenced(code)], task=probe))
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
    result = harness.run_execution(sfn, deployment.state_machine_arn,
                                   _input("run-x", "r0", [fenced(TASK.reference_solution)], task=slow))
    assert result["status"] == "SUCCEEDED"
    assert [r["returncode"] for r in harness.CONTAINER_RUNS] == [1]
    record = _records(deployment, "run-x")["r0"]
    assert record.status == "error" and record.aggregate is None
    assert record.error.kind == "executor_crash" and "left no result" in record.error.message


def test_a_trainer_supplies_turns_through_the_callback_queue(deployment, sfn):
    import boto3

    sqs = boto3.client("sqs", region_name=harness.REGION)
    payload = _input("run-c", "r0", [])
    payload["policy"] = {"mode": "callback"}
    execution = sfn.start_execution(stateMachineArn=deployment.state_machine_arn, name="callback-run",
                                    input=json.dumps(payload))["executionArn"]
    answers = iter(["Should negative durations raise an error?", fenced(TASK.reference_solution)])
    seen_messages = []
    deadline = time.time() + 60
    while sfn.describe_execution(executionArn=execution)["status"] == "RUNNING":
        assert time.time() < deadline, "callback execution did not finish"
        received = sqs.receive_message(QueueUrl=deployment.queue_url, WaitTimeSeconds=0).get("Messages", [])
        for message in received:
            body = json.loads(message["Body"])
            seen_messages.append(body["messages"])
            sfn.send_task_success(taskToken=body["task_token"], output=json.dumps({"text": next(answers)}))
            sqs.delete_message(QueueUrl=deployment.queue_url, ReceiptHandle=message["ReceiptHandle"])
        time.sleep(0.05)
    assert sfn.describe_execution(executionArn=execution)["status"] == "SUCCEEDED"
    # The trainer saw the conversation so far, never the hidden spec or tests.
    assert [len(m) for m in seen_messages] == [1, 3]
    assert seen_messages[0][0]["content"] == TASK.prompt
    assert TASK.tests not in json.dumps(seen_messages)
    record = _records(deployment, "run-c")["r0"]
    assert record.status == "scored" and record.components["correctness"] == 1.0
    assert record.components["asked_before_coding"] == 1.0
