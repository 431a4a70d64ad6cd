"""The trainer-side RolloutClient against the deployed (moto) state machine."""

from __future__ import annotations

import re

import pytest

from rewardpipe.aws.client import RolloutClient, execution_name
from rewardpipe.models import load_tasks
from tests.aws import harness

pytestmark = pytest.mark.xdist_group("cdk")
TASK = load_tasks(harness.ROOT / "rewardpipe" / "data" / "tasks.jsonl")[1]


def test_execution_names_are_valid_deterministic_and_distinct():
    name = execution_name("run/with spaces" * 10, 3, "g0-1")
    assert re.fullmatch(r"[0-9A-Za-z_-]{1,80}", name)
    assert name == execution_name("run/with spaces" * 10, 3, "g0-1")
    assert name != execution_name("run/with spaces" * 10, 3, "g0-2")
    assert execution_name("a", 1, "b") != execution_name("a-s1", 0, "b")  # no collisions by concatenation


def test_a_group_through_callbacks_with_failures_reported(deployment, sfn):
    import boto3

    client = RolloutClient(deployment.state_machine_arn, queue_url=deployment.queue_url, sfn=sfn,
                           sqs=boto3.client("sqs", region_name=harness.REGION))
    arns = client.start_group("run-cl", 0, "g0", task=TASK, policies=[{"mode": "callback"}] * 3)
    assert client.start("run-cl", 0, "g0", "g0-1", task=TASK) == arns[1]  # a retried start is the same rollout

    def respond(request):
        if request["rollout"] == "g0-2":
            raise RuntimeError("model server overloaded")
        if len(request["messages"]) == 1:
            return "Could you tell me more about the expected output?"
        return f"```python\n{TASK.reference_solution}\n```"

    answered = client.serve_turns(respond, until=client.all_done(arns), poll_s=0.05)
    assert answered == 4  # two turns each for g0-0 and g0-1
    results = client.wait(arns, poll_s=0.05)
    assert [r["id"] for r in results] == ["g0-0", "g0-1", "g0-2"]
    assert [r["status"] for r in results] == ["scored", "scored", "error"]
    assert {m["name"]: m["value"] for m in results[0]["metrics_list"]}["correctness"] == 1.0
    assert {m["name"]: m["value"] for m in results[2]["metrics_list"]}["reward_error"] == 1
