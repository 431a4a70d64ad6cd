"""The harness enforces AWS limits moto does not (issue 7, item 4): each check must see a breach, or a
test that breaches the limit on AWS would pass here. Every breach below is deliberate and cleared."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from tests.aws import harness

pytestmark = pytest.mark.xdist_group("cdk")


class _History:
    """get_execution_history in pages of at most 1000 events, as the API returns them."""

    def __init__(self, events: list[dict]) -> None:
        self.events = events

    def get_execution_history(self, executionArn, maxResults, nextToken=None):  # noqa: N803 - boto3's names
        start = int(nextToken or 0)
        page = {"events": self.events[start : start + maxResults]}
        if start + maxResults < len(self.events):
            page["nextToken"] = str(start + maxResults)
        return page


def _event(kind: str, details: str, **fields) -> dict:
    return {"type": kind, details: {"name": "ConverseStep", **fields}}


def _taken() -> list[str]:
    found = list(harness.LIMIT_VIOLATIONS)
    harness.LIMIT_VIOLATIONS.clear()
    return found


@pytest.mark.parametrize(
    "kind, details, field",
    [
        ("TaskStateExited", "stateExitedEventDetails", "output"),
        ("TaskStateEntered", "stateEnteredEventDetails", "input"),
        ("TaskScheduled", "taskScheduledEventDetails", "parameters"),
        ("TaskSucceeded", "taskSucceededEventDetails", "output"),  # a trainer's SendTaskSuccess output
    ],
)
def test_a_state_payload_over_256_kib_anywhere_in_the_history_is_a_violation(kind, details, field):
    # 262,144 bytes of UTF-8: 87,382 three-byte characters are 262,146 bytes, though only 87,382 characters.
    over = "€" * 87_382
    fits = "€" * 87_381
    arn = "arn:aws:states:us-east-1:1:execution:m:x"
    assert harness.history_violations(_History([_event(kind, details, **{field: fits})]), arn) == []
    (violation,) = harness.history_violations(_History([_event(kind, details, **{field: over})]), arn)
    assert kind in violation and field in violation and "262146 bytes > 262144" in violation


def test_an_execution_over_25000_history_events_is_a_violation():
    arn = "arn:aws:states:us-east-1:1:execution:m:long"
    quiet = {"type": "TaskStateEntered", "stateEnteredEventDetails": {"name": "ConverseStep", "input": "{}"}}
    assert harness.history_violations(_History([quiet] * 25_000), arn) == []
    (violation,) = harness.history_violations(_History([quiet] * 25_001), arn)
    assert "25001 history events > 25000" in violation


def test_lambda_payloads_over_the_invoke_limits_are_violations(deployment):
    import boto3

    lam = boto3.client("lambda", region_name=harness.REGION)
    name = deployment.function_name("SingleTurnRewardFunction")
    # Malformed samples: answered at once with error results, whatever their size.
    # Over the limit: Lambda refuses the invocation itself (RequestTooLargeException, HTTP 413; the function
    # never runs), and the harness records it, since nothing the project ships may send one.
    with pytest.raises(ClientError, match="RequestTooLargeException"):
        lam.invoke(FunctionName=name, InvocationType="Event", Payload=json.dumps({"pad": "x" * 1_048_576}).encode())
    assert any("asynchronous Lambda request" in v and "> 1048576" in v for v in _taken())
    lam.invoke(FunctionName=name, Payload=json.dumps({"pad": "x" * 1_000_000}).encode())
    assert _taken() == []  # under both limits as a synchronous request
    with pytest.raises(ClientError) as refused:
        lam.invoke(FunctionName=name, Payload=json.dumps({"pad": "x" * 6_291_456}).encode())
    assert refused.value.response["Error"]["Code"] == "RequestTooLargeException"
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 413
    assert any("synchronous Lambda request" in v and "> 6291456" in v for v in _taken())


def test_an_sqs_message_over_the_queues_maximum_is_a_violation(aws):
    import boto3

    sqs = boto3.client("sqs", region_name=harness.REGION)
    small = sqs.create_queue(QueueName="small", Attributes={"MaximumMessageSize": "2048"})["QueueUrl"]
    sqs.send_message(QueueUrl=small, MessageBody="m" * 2048)
    assert _taken() == []
    try:
        sqs.send_message(QueueUrl=small, MessageBody="m" * 2049)
    except ClientError:
        pass  # moto may refuse it too; the harness must have seen it either way
    assert any("SQS message to small" in v and "2049 bytes > 2048" in v for v in _taken())


def test_a_send_task_failure_cause_over_32768_characters_is_a_violation(sfn):
    for cause in ("c" * 32_768, "c" * 32_769):
        try:
            sfn.send_task_failure(taskToken="no-such-token", error="PolicyError", cause=cause)
        except ClientError:
            pass  # the token is unknown; the size is checked first
    (violation,) = _taken()
    assert "SendTaskFailure cause" in violation and "32769" in violation and "> 32768" in violation
