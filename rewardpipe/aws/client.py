"""Trainer-side helper: start rollout executions, answer callback turns, collect the rewards.

    client = RolloutClient(state_machine_arn, queue_url=turn_request_queue_url)
    arns = client.start_group("run1", step=0, group="g3", task_key="tasks/catalog/t.json",
                              policies=[{"mode": "callback"}] * 8)
    client.serve_turns(lambda request: my_model.generate(request["messages"]), until=client.all_done(arns))
    rewards = client.wait(arns)          # [{"id", "aggregate_reward_score", "metrics_list", "status", ...}]

Execution names are derived from (run, step, rollout), so starting the same rollout twice (a trainer
retry) returns the existing execution instead of scoring it again.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from typing import Any, Callable, Iterable

_UNSAFE = re.compile(r"[^0-9A-Za-z_-]+")
NAME_LIMIT = 80


def execution_name(run: str, step: int, rollout: str) -> str:
    """A valid, deterministic Step Functions execution name (≤ 80 chars of [0-9A-Za-z_-])."""
    digest = hashlib.sha256(json.dumps([run, step, rollout]).encode()).hexdigest()[:10]
    readable = _UNSAFE.sub("-", f"{run}-s{step}-{rollout}").strip("-")
    return f"{readable[: NAME_LIMIT - len(digest) - 1]}-{digest}"


class RolloutClient:
    def __init__(self, state_machine_arn: str, *, queue_url: str = "", sfn: Any = None, sqs: Any = None) -> None:
        import boto3

        self.state_machine_arn = state_machine_arn
        self.queue_url = queue_url
        self.sfn = sfn or boto3.client("stepfunctions")
        self.sqs = sqs or (boto3.client("sqs") if queue_url else None)

    def execution_arn(self, name: str) -> str:
        return self.state_machine_arn.replace(":stateMachine:", ":execution:", 1) + f":{name}"

    def start(self, run: str, step: int, group: str, rollout: str, *, task: Any = None, task_key: str | None = None,
              policy: dict | None = None, max_turns: int | None = None) -> str:
        payload: dict[str, Any] = {"run": run, "step": step, "group": group, "rollout": rollout,
                                   "policy": policy or {"mode": "callback"}}
        if task is not None:
            payload["task"] = task.model_dump(mode="json") if hasattr(task, "model_dump") else task
        if task_key is not None:
            payload["task_key"] = task_key
        if max_turns is not None:
            payload["max_turns"] = max_turns
        name = execution_name(run, step, rollout)
        try:
            return self.sfn.start_execution(stateMachineArn=self.state_machine_arn, name=name,
                                            input=json.dumps(payload))["executionArn"]
        except self.sfn.exceptions.ExecutionAlreadyExists:
            return self.execution_arn(name)

    def start_group(self, run: str, step: int, group: str, *, policies: Iterable[dict], task: Any = None,
                    task_key: str | None = None, max_turns: int | None = None) -> list[str]:
        """One execution per policy; rollout ids are ``<group>-<i>``."""
        return [self.start(run, step, group, f"{group}-{i}", task=task, task_key=task_key, policy=policy,
                           max_turns=max_turns) for i, policy in enumerate(policies)]

    def all_done(self, arns: list[str]) -> Callable[[], bool]:
        return lambda: all(self.sfn.describe_execution(executionArn=a)["status"] != "RUNNING" for a in arns)

    def serve_turns(self, respond: Callable[[dict], str], until: Callable[[], bool], *, poll_s: float = 1.0,
                    timeout_s: float = 3600.0) -> int:
        """Answer turn requests from the queue until ``until()``; returns how many were answered.

        ``respond(request)`` gets ``{"run", "step", "group", "rollout", "messages"}`` and returns the
        assistant turn. If it raises, the execution is told (SendTaskFailure) and ends in an error record.
        """
        if self.sqs is None:
            raise ValueError("serve_turns needs the TurnRequestQueueUrl output as queue_url")
        answered = 0
        deadline = time.monotonic() + timeout_s
        while not until():
            if time.monotonic() > deadline:
                raise TimeoutError(f"turn requests still pending after {timeout_s}s")
            messages = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10,
                                                WaitTimeSeconds=min(20, int(poll_s))).get("Messages", [])
            if not messages and poll_s < 1:
                time.sleep(poll_s)  # no long poll below one second: do not spin
            for message in messages:
                request = json.loads(message["Body"])
                token = request.pop("task_token")
                try:
                    text = respond(request)
                except Exception as exc:  # noqa: BLE001 - reported to the execution, which records it
                    self.sfn.send_task_failure(taskToken=token, error="PolicyError", cause=f"{type(exc).__name__}: {exc}"[:32000])
                else:
                    self.sfn.send_task_success(taskToken=token, output=json.dumps({"text": text}))
                    answered += 1
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
        return answered

    def wait(self, arns: list[str], *, timeout_s: float = 3600.0, poll_s: float = 1.0) -> list[dict]:
        """Each execution's output (the Nova reward shape), in order; a failed execution gives
        ``{"status": "failed", "error": ...}`` (its rollout has no record: the alarm fires)."""
        deadline = time.monotonic() + timeout_s
        results: list[dict | None] = [None] * len(arns)
        while any(r is None for r in results):
            for i, arn in enumerate(arns):
                if results[i] is not None:
                    continue
                desc = self.sfn.describe_execution(executionArn=arn)
                if desc["status"] == "SUCCEEDED":
                    results[i] = json.loads(desc["output"])
                elif desc["status"] != "RUNNING":
                    results[i] = {"status": "failed", "execution_status": desc["status"],
                                  "error": desc.get("error"), "cause": desc.get("cause")}
            if any(r is None for r in results):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{sum(r is None for r in results)} execution(s) still running after {timeout_s}s")
                time.sleep(poll_s)
        return results  # type: ignore[return-value]
