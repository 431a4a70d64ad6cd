"""Round eighteen, AWS: one bad message costs only itself (the Nova bridge's SQS handlers)."""

from __future__ import annotations

import pytest


def _records(arn: str, bodies: list[str]) -> dict:
    return {
        "Records": [
            {"messageId": f"m{i}", "body": body, "eventSourceARN": arn, "attributes": {}}
            for i, body in enumerate(bodies)
        ]
    }


@pytest.fixture
def handler(monkeypatch):
    from rewardpipe.integrations.nova import aws

    monkeypatch.setattr(aws, "bridge_from_env", lambda: "bridge")
    seen: list[str] = []

    def role(bridge, body):
        if body == "poison":
            raise ValueError("malformed turn request")
        seen.append(body)

    return aws.sqs_batch(role), seen


def test_a1_a_bad_message_on_a_standard_queue_holds_back_none_of_the_others(handler):
    run, seen = handler
    out = run(_records("arn:aws:sqs:us-east-1:123456789012:stack-TurnRequests", ["a", "poison", "b", "c"]), None)
    assert out == {"batchItemFailures": [{"itemIdentifier": "m1"}]}
    assert seen == ["a", "b", "c"]  # before: b and c came back unprocessed, a receive counted against each


def test_a1_on_a_fifo_queue_the_messages_after_a_bad_one_still_wait_for_it(handler):
    run, seen = handler
    out = run(_records("arn:aws:sqs:us-east-1:123456789012:stack-SageMaker-X.fifo", ["a", "poison", "b"]), None)
    assert out == {"batchItemFailures": [{"itemIdentifier": "m1"}, {"itemIdentifier": "m2"}]}
    assert seen == ["a"]
