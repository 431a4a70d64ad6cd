"""A test's Step Functions executions end with it: moto runs them in daemon threads that outlive the test, and
one still running went on into the next test of the worker (its Lambdas invoked in-process there, its turn
request sent to the next deployment's queue of the same name). tests/aws/conftest.py's ``aws`` fixture stops
what is still running and waits for it (harness.quiesce_executions); this checks that call."""

from __future__ import annotations

import time

import pytest

from rewardpipe.models import load_tasks
from tests.aws import harness

pytestmark = pytest.mark.xdist_group("cdk")

TASK = load_tasks(harness.ROOT / "rewardpipe" / "data" / "tasks.jsonl")[0]


def _waiting(sqs, url: str) -> str:
    return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"][
        "ApproximateNumberOfMessages"
    ]


@pytest.mark.parametrize("policy", ["replay", "callback"])
def test_an_execution_left_running_is_stopped_and_does_nothing_more(deployment, policy):
    import boto3

    from rewardpipe.aws.client import RolloutClient

    sfn = boto3.client("stepfunctions", region_name=harness.REGION)
    sqs = boto3.client("sqs", region_name=harness.REGION)
    client = RolloutClient(
        deployment.state_machine_arn, queue_url=deployment.queue_url, bucket=deployment.bucket, sfn=sfn, sqs=sqs
    )
    # replay: a whole rollout of Lambda steps one after the other (its next steps would run after the test);
    # callback: its first step runs, then it waits on the trainer's turn (parked: quiesce does not wait for it).
    turns = ["What should it return for a negative duration?", f"```python\n{TASK.reference_solution}\n```"]
    client.start(
        "left", 0, "g", "g-0", task=TASK, policy={"mode": policy, "turns": turns} if policy == "replay" else None
    )
    time.sleep(0.3)  # under way
    assert harness.quiesce_executions() == []  # returns when nothing of it is working any more
    invocations, waiting = len(harness.INVOCATION_CPU), _waiting(sqs, deployment.queue_url)
    time.sleep(1.5)  # whatever a still-running execution would do next, it would do by now
    # (moto may still move the stopped execution's status on; only its effects matter here)
    assert len(harness.INVOCATION_CPU) == invocations
    assert _waiting(sqs, deployment.queue_url) == waiting
