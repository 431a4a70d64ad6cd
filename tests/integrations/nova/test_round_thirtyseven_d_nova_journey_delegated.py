"""Round thirty-seven (third wave), a Nova Forge user's journey: the delegated-rollout contract, item by item.

* A ``step_id`` is ``<sample_id>_<turn>``, and Nova sends the same ``sample_id`` again at a later training step
  (a new ``timestamp``: the bridge's next round). The generate request of a turn was sent to the FIFO queue with
  that ``step_id`` as its deduplication id, so the same turn of the next round, within SQS's five-minute window,
  was taken for a duplicate and silently dropped: Nova never generated it, and the rollout waited out its whole
  budget into an error answer. A turn's deduplication id is now its wait's (the task token's), so a redelivered
  turn message is still queued once and each round's turn is queued.
"""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from rewardpipe.integrations.nova.bridge import Bridge, Queues
from rewardpipe.integrations.nova.protocol import BridgeConfig
from tests.integrations.nova.test_nova_contract import REWARD, FakeSfn, MemoryStore
from tests.integrations.test_round_thirtythree_nova_multiturn import _scored

OPENING = [{"role": "system", "content": "SYSTEM"}, {"role": "user", "content": "Write add(a, b)."}]


@pytest.fixture
def moto_bridge(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")

        def fifo(name: str) -> str:  # as the stack makes the bridge's queues: explicit deduplication ids
            attributes = {"FifoQueue": "true", "ContentBasedDeduplication": "false"}
            return sqs.create_queue(QueueName=f"x-SageMaker-{name}.fifo", Attributes=attributes)["QueueUrl"]

        clock = {"now": 1_000_000.0}
        queues = Queues(fifo("RolloutResponse"), fifo("GenerateRequest"), rollout_request=fifo("RolloutRequest"))
        bridge = Bridge(
            BridgeConfig(rollout_budget_s=480.0),
            REWARD,
            MemoryStore(),
            sqs,
            FakeSfn(),
            queues,
            state_machine_arn="arn:aws:states:us-east-1:1:stateMachine:m",
            clock=lambda: clock["now"],
        )
        yield bridge, clock


def _received(bridge, queue_url: str) -> list[dict]:
    out = bridge.sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=0)
    return [json.loads(m["Body"]) for m in out.get("Messages", [])]


def _request(bridge, clock, sample_id: str) -> dict:
    return bridge.intake({"version": "v0", "timestamp": clock["now"], "sample_id": sample_id, "data": {"task_id": "t"}})


def _turn(bridge, sample_id: str, token: str) -> dict:
    bridge.store.put_json(f"states/{token}.json", {"state": {"messages": OPENING}})
    return bridge.forward_turn({"task_token": token, "rollout": sample_id, "state_key": f"states/{token}.json"})


def test_the_same_turn_of_a_later_round_reaches_nova_within_the_deduplication_window(moto_bridge):
    bridge, clock = moto_bridge
    first = bridge.intake(
        {"version": "v0", "timestamp": clock["now"], "sample_id": "s-000_0", "data": {"task_id": "t"}}
    )
    assert _turn(bridge, "s-000_0", "token-round-0")["step_id"] == "s-000_0_0"
    bridge.respond(first["execution"], "SUCCEEDED", _scored(1.6))
    clock["now"] += 60  # the next training step asks for the same sample again, a minute later
    second = bridge.intake(
        {"version": "v0", "timestamp": clock["now"], "sample_id": "s-000_0", "data": {"task_id": "t"}}
    )
    assert second["status"] == "started" and second["execution"] != first["execution"]
    assert _turn(bridge, "s-000_0", "token-round-1")["step_id"] == "s-000_0_0"
    sent = _received(bridge, bridge.queues.generate_request)
    assert [m["step_id"] for m in sent] == ["s-000_0_0", "s-000_0_0"]  # one per round, in order


def test_a_redelivered_turn_message_is_still_queued_once(moto_bridge):
    bridge, clock = moto_bridge
    _request(bridge, clock, "s-001_0")
    for _ in range(2):  # the turn queue delivers the state machine's message twice
        _turn(bridge, "s-001_0", "token-a")
    assert [m["step_id"] for m in _received(bridge, bridge.queues.generate_request)] == ["s-001_0_0"]
