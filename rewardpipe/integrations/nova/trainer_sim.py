"""A simulated Nova Forge trainer, written from the documented v0 shapes only (docs/aws.md).

It plays Nova's side of a delegated rollout: it sends rollout requests, answers every generate request it
receives like a vLLM server would (``data.choices[0].message.content`` + ``finish_reason``), and collects
the rollout responses. The moto end-to-end test and ``rewardpipe nova simulate`` (against a deployed
stack) both drive it, so a user can check a deployment before paying for a training job.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

# policy(sample_id, turn, messages) -> assistant text, or None to never answer that turn (a lost response).
Policy = Callable[[str, int, list[dict[str, Any]]], "str | None"]


@dataclass(frozen=True)
class NovaQueues:
    rollout_request: str
    rollout_response: str
    generate_request: str
    generate_response: str


@dataclass
class SimulatedTrainer:
    sqs: Any
    queues: NovaQueues
    policy: Policy
    responses: dict[str, dict[str, Any]] = field(default_factory=dict)
    duplicate_responses: list[dict[str, Any]] = field(default_factory=list)
    generate_requests: list[dict[str, Any]] = field(default_factory=list)
    unanswered: list[str] = field(default_factory=list)

    def _send(self, url: str, body: dict[str, Any], group: str, dedup: str | None = None) -> None:
        kwargs: dict[str, Any] = {"QueueUrl": url, "MessageBody": json.dumps(body)}
        if url.endswith(".fifo"):
            kwargs["MessageGroupId"] = group
            kwargs["MessageDeduplicationId"] = dedup or uuid.uuid4().hex
        self.sqs.send_message(**kwargs)

    def request_rollout(self, sample_id: str, data: dict[str, Any], *, value_range=(0.0, 1.0),
                        timestamp: float | None = None, max_length: int = 10240, redeliver: bool = False) -> dict:
        body = {"version": "v0", "timestamp": timestamp if timestamp is not None else time.time(),
                "sample_id": sample_id, "max_length": max_length, "rewards": {"range": list(value_range)},
                "data": data}
        self._send(self.queues.rollout_request, body, sample_id)
        if redeliver:  # SQS is at-least-once: the same request may arrive twice
            self._send(self.queues.rollout_request, body, sample_id)
        return body

    def _receive(self, url: str) -> list[dict[str, Any]]:
        out = []
        for message in self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                                WaitTimeSeconds=0).get("Messages", []):
            self.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
            out.append(json.loads(message["Body"]))
        return out

    def answer_generate_requests(self, reverse: bool = False) -> int:
        """Answer what is waiting (in reverse order of arrival when ``reverse``: out-of-order responses)."""
        batch = self._receive(self.queues.generate_request)
        self.generate_requests.extend(batch)
        for request in (reversed(batch) if reverse else batch):
            turn = int(str(request["step_id"]).rsplit("_", 1)[-1])
            text = self.policy(request["sample_id"], turn, request["messages"])
            if text is None:
                self.unanswered.append(request["step_id"])
                continue
            self._send(self.queues.generate_response, {
                "version": "v0", "sample_id": request["sample_id"], "step_id": request["step_id"],
                "data": {"choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                      "finish_reason": "stop"}]},
                "finish_reason": "stop", "serving_model_num": 0,
            }, request["sample_id"])
        return len(batch)

    def collect_responses(self) -> int:
        batch = self._receive(self.queues.rollout_response)
        for response in batch:
            if response["sample_id"] in self.responses:
                self.duplicate_responses.append(response)
            else:
                self.responses[response["sample_id"]] = response
        return len(batch)
