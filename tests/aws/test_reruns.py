"""Re-runs against a live deployment: a second execution never changes what a running one reads."""

from __future__ import annotations

import pytest

from tests.aws import harness
from tests.aws.test_state_machine import TASK, _records

pytestmark = pytest.mark.xdist_group("cdk")


def test_a_rerun_with_a_changed_task_under_the_same_id_does_not_change_the_running_executions_task(deployment, sfn):
    """Inline tasks were stored at tasks/inline/<run>/<task_id>.json and read back at every step: a re-run
    whose task (same id) had different tests overwrote the object, and the execution still running was
    scored against the other task's tests."""
    import boto3

    from rewardpipe.aws.client import RolloutClient

    # The same task id with one expectation changed: the reference solution fails it.
    changed = TASK.model_copy(
        update={"tests": TASK.tests.replace('format_duration(0), "0:00"', 'format_duration(0), "9:99"')}
    )
    assert changed.tests != TASK.tests and changed.task_id == TASK.task_id
    client = RolloutClient(
        deployment.state_machine_arn,
        queue_url=deployment.queue_url,
        bucket=deployment.bucket,
        sfn=sfn,
        sqs=boto3.client("sqs", region_name=harness.REGION),
        s3=boto3.client("s3", region_name=harness.REGION),
    )
    running = client.start("run-rerun", 0, "g0", "r0", task=TASK)  # callback: waits for the trainer's turn
    _wait_for_turn_request(client)
    rerun = client.start("run-rerun", 0, "g1", "r1", task=changed, policy={"mode": "replay", "turns": ["hi?"]})
    harness.wait_execution(sfn, rerun)
    client.serve_turns(
        lambda request: f"```python\n{TASK.reference_solution}\n```", until=client.all_done([running]), poll_s=0.05
    )
    (out,) = client.wait([running], poll_s=0.05)
    assert out["status"] == "scored", out
    assert _records(deployment, "run-rerun")["r0"].components["correctness"] == 1.0


def _wait_for_turn_request(client, timeout_s: float = 60.0) -> None:
    """Until the execution has stored its task and asks for its first turn (the message is only peeked at)."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if client.sqs.receive_message(QueueUrl=client.queue_url, WaitTimeSeconds=1, VisibilityTimeout=0).get(
            "Messages"
        ):
            return
    raise AssertionError("the execution never asked for a turn")


def test_trying_a_taken_name_does_not_change_the_turns_its_execution_may_not_have_read(s3):
    """Large replay turns go to S3 under the attempt's name before StartExecution; a re-run with other turns
    first tries the name of the execution still running (just started: its StartEpisode has not read them
    yet), finds it taken and moves on to -a2. Its turns must land beside, not on top of, that execution's."""
    import json

    from rewardpipe.aws.client import RolloutClient, execution_name
    from rewardpipe.store import S3Store

    class OneRunningExecution:
        class exceptions:  # noqa: N801 - mirrors the boto3 client attribute
            class ExecutionAlreadyExists(Exception):
                pass

        def __init__(self):
            self.inputs = {}

        def start_execution(self, stateMachineArn, name, input):
            if name in self.inputs:
                raise self.exceptions.ExecutionAlreadyExists(name)
            self.inputs[name] = input
            return {"executionArn": f"arn:aws:states:us-east-1:1:execution:m:{name}"}

        def describe_execution(self, executionArn):
            return {"status": "RUNNING", "input": self.inputs[executionArn.rsplit(":", 1)[-1]]}

    s3.create_bucket(Bucket="records")
    sfn = OneRunningExecution()
    client = RolloutClient("arn:aws:states:us-east-1:1:stateMachine:m", bucket="records", sfn=sfn, s3=s3)
    big = ["q" * 150_000, "r" * 150_000]
    first = client.start("run", 0, "g", "r0", task_key="tasks/t.json", policy={"mode": "replay", "turns": big})
    first_key = json.loads(sfn.inputs[execution_name("run", 0, "r0")])["policy"]["turns_key"]
    second = client.start(
        "run", 0, "g", "r0", task_key="tasks/t.json", policy={"mode": "replay", "turns": ["other " * 40_000]}
    )
    assert second != first and second.endswith(execution_name("run", 0, "r0", 2))
    assert S3Store("records", client=s3).get_json(first_key) == big
