"""A simulated Nova Forge trainer, written from the documented v0 shapes only (docs/aws.md).

It plays Nova's side of a delegated rollout: it invokes the rollout proxy Lambda (the recipe's
``rollout_request_arn``) with each rollout request, as Nova does, answers every generate request it receives
like a vLLM server would (``data.choices[0].message.content`` + ``finish_reason``), and collects the rollout
responses. The moto end-to-end test and ``rewardpipe nova simulate`` (against a deployed
stack) both drive it, so a user can check a deployment before paying for a training job.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any

# policy(sample_id, turn, messages) -> assistant text, or None to never answer that turn (a lost response), or a
# whole choice object (``{"message": {...}, "finish_reason": ...}``: tool calls, a null content) sent as it is.
Policy = Callable[[str, int, list[dict[str, Any]]], "str | dict[str, Any] | None"]


@dataclass(frozen=True)
class NovaQueues:
    """The recipe's four BYOO settings: ``rollout_request_arn`` is the rollout proxy Lambda's ARN (Nova invokes
    it), the others are queue URLs."""

    rollout_request_arn: str
    rollout_response: str
    generate_request: str
    generate_response: str


class RolloutRequestRefused(RuntimeError):
    """The rollout proxy Lambda answered an invocation with a function error."""


@dataclass
class SimulatedTrainer:
    sqs: Any
    queues: NovaQueues
    policy: Policy
    lam: Any = None  # a boto3 Lambda client (invokes the rollout proxy)
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

    def request_rollout(
        self,
        sample_id: str,
        data: dict[str, Any],
        *,
        value_range=(0.0, 1.0),
        timestamp: float | None = None,
        max_length: int = 10240,
        redeliver: bool = False,
    ) -> dict:
        from datetime import datetime

        sent = timestamp if timestamp is not None else time.time()
        # ISO 8601, the form the BYOO docs show ("timestamp": "2025-10-28T...").
        stamp = datetime.fromtimestamp(sent, tz=UTC).isoformat().replace("+00:00", "Z")
        body = {
            "version": "v0",
            "timestamp": stamp,
            "sample_id": sample_id,
            "max_length": max_length,
            "rewards": {"range": list(value_range)},
            "data": data,
        }
        self.invoke_rollout_proxy(body)
        if redeliver:  # an invocation Nova retries delivers the same request twice
            self.invoke_rollout_proxy(body)
        return body

    def invoke_rollout_proxy(self, body: Any) -> dict[str, Any]:
        """What Nova does with ``rollout_request_arn``: a synchronous Lambda invocation with the request."""
        if self.lam is None:
            import boto3

            self.lam = boto3.client("lambda", region_name=self.sqs.meta.region_name)
        response = self.lam.invoke(
            FunctionName=self.queues.rollout_request_arn,
            InvocationType="RequestResponse",
            Payload=json.dumps(body).encode("utf-8"),
        )
        answer = response["Payload"].read()
        if response.get("FunctionError"):
            raise RolloutRequestRefused(f"the rollout proxy failed: {answer[:500]!r}")
        return json.loads(answer) if answer else {}

    def _receive(self, url: str) -> list[dict[str, Any]]:
        out = []
        for message in self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get(
            "Messages", []
        ):
            self.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
            out.append(json.loads(message["Body"]))
        return out

    def answer_generate_requests(self, reverse: bool = False) -> int:
        """Answer what is waiting (in reverse order of arrival when ``reverse``: out-of-order responses)."""
        batch = self._receive(self.queues.generate_request)
        self.generate_requests.extend(batch)
        for request in reversed(batch) if reverse else batch:
            turn = int(str(request["step_id"]).rsplit("_", 1)[-1])
            text = self.policy(request["sample_id"], turn, request["messages"])
            if text is None:
                self.unanswered.append(request["step_id"])
                continue
            choice = (
                text
                if isinstance(text, dict)
                else {"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            )
            self._send(
                self.queues.generate_response,
                {
                    "version": "v0",
                    "sample_id": request["sample_id"],
                    "step_id": request["step_id"],
                    "data": {"choices": [{"index": 0, **choice}]},
                    "finish_reason": choice.get("finish_reason", "stop"),
                    "serving_model_num": 0,
                },
                request["sample_id"],
            )
        return len(batch)

    def collect_responses(self) -> int:
        batch = self._receive(self.queues.rollout_response)
        for response in batch:
            if response["sample_id"] in self.responses:
                self.duplicate_responses.append(response)
            else:
                self.responses[response["sample_id"]] = response
        return len(batch)


def fenced(code: str) -> str:
    return f"Here you go:\n```python\n{code}\n```"


def scripted_turns(index: int, task: Any) -> list[str]:
    """What the simulated model writes for the ``index``-th sample of a group: four strategies (ask then
    correct code; correct code at once; a wrong guess at once; two questions then correct code), so every
    component of the blog's reward varies inside a group of four."""
    strategies = [
        ["Should negative inputs be handled?", fenced(task.reference_solution)],
        [fenced(task.reference_solution)],
        [fenced(f"def {task.entry_point}(*args, **kwargs):\n    return None")],
        ["Any constraints on the input?", "And what about the output format?", fenced(task.reference_solution)],
    ]
    return strategies[index % len(strategies)]


@dataclass
class SimulationReport:
    sent: list[str]
    responses: dict[str, dict[str, Any]]
    duplicates: list[dict[str, Any]]
    missing: list[str]
    out_of_range: list[str]
    seconds: float

    @property
    def errored(self) -> list[str]:
        """The samples answered with an error answer (any ``stop_reason`` but ``end_of_conversation``): the scripted
        strategies are all scorable, so on a working deployment there is none (a task not uploaded to
        ``tasks/nova/``, a broken sandbox or reward answers every sample, in range, with ``error``)."""
        return [sid for sid, response in self.responses.items() if response.get("stop_reason") != "end_of_conversation"]

    @property
    def ok(self) -> bool:
        return not (self.missing or self.duplicates or self.out_of_range or self.errored)


def simulate(
    sqs: Any,
    queues: NovaQueues,
    tasks: list[Any],
    *,
    groups: int = 2,
    group_size: int = 4,
    value_range: tuple[float, float] = (0.0, 1.0),
    timeout_s: float = 600.0,
    tick: Callable[[], None] | None = None,
    poll_s: float = 1.0,
    prefix: str = "simulate",
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    lam: Any = None,
) -> SimulationReport:
    """Send ``groups`` × ``group_size`` rollout requests (one task per group), answer every generate request
    with :func:`scripted_turns`, and wait until every sample has its rollout response or ``timeout_s``
    passes. ``tick`` runs once per poll (the tests pump the bridge there)."""
    if not tasks:
        raise ValueError("simulate needs at least one task")
    run = uuid.uuid4().hex[:8]
    scripts: dict[str, list[str]] = {}

    def policy(sample_id: str, turn: int, messages: list[dict[str, Any]]) -> str | None:  # noqa: ARG001 - the trainer's policy callback signature
        script = scripts.get(sample_id)
        return script[min(turn, len(script) - 1)] if script else None

    trainer = SimulatedTrainer(sqs, queues, policy, lam=lam)
    sent = []
    for group in range(groups):
        task = tasks[group % len(tasks)]
        for index in range(group_size):
            sample_id = f"{prefix}-{run}-{group:03d}_{index}"
            scripts[sample_id] = scripted_turns(index, task)
            trainer.request_rollout(sample_id, {"task_id": task.task_id}, value_range=value_range)
            sent.append(sample_id)
    start = clock()
    while len(trainer.responses) < len(sent) and clock() - start < timeout_s:
        if tick is not None:
            tick()
        trainer.answer_generate_requests()
        trainer.collect_responses()
        if len(trainer.responses) < len(sent):
            sleep(poll_s)
    lo, hi = value_range
    out_of_range = [
        sid
        for sid, r in trainer.responses.items()
        if not lo <= r.get("rewards", {}).get("aggregate_score", lo - 1) <= hi
    ]
    return SimulationReport(
        sent,
        trainer.responses,
        trainer.duplicate_responses,
        [s for s in sent if s not in trainer.responses],
        out_of_range,
        clock() - start,
    )
