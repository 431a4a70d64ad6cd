"""The bridge's Lambda entry points: a Bridge built from the function's environment, and one function per
event source (SQS batches with partial-failure reporting, the EventBridge status change, the schedule)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from rewardpipe.integrations.nova.bridge import Bridge, Queues
from rewardpipe.integrations.nova.protocol import BridgeConfig

logger = logging.getLogger("rewardpipe.nova")


def bridge_from_env(env: Mapping[str, str] | None = None) -> Bridge:
    from rewardpipe.aws.settings import Settings, aws_client, open_bucket_store

    env = os.environ if env is None else env
    settings = Settings.from_env(env)
    config = BridgeConfig.model_validate(json.loads(env.get("NOVA_CONFIG") or "{}"))
    return Bridge(
        config,
        settings.reward,
        open_bucket_store(settings),
        aws_client("sqs"),
        aws_client("stepfunctions"),
        Queues(
            rollout_response=env.get("ROLLOUT_RESPONSE_QUEUE_URL", ""),
            generate_request=env.get("GENERATE_REQUEST_QUEUE_URL", ""),
            rollout_request=env.get("ROLLOUT_REQUEST_QUEUE_URL", ""),
        ),
        state_machine_arn=env.get("STATE_MACHINE_ARN", ""),
        task_model=settings.environment.task_model,
        environment=settings.environment,
    )


def sqs_batch(role: Callable[[Bridge, str], Any]) -> Callable[[Any, Any], dict[str, Any]]:
    """An SQS event-source handler: each record's body goes to ``role``; a record that raises is reported in
    ``batchItemFailures`` (and, on a FIFO queue, so is every later one, keeping the group's order). On a
    standard queue (the turn queue) the records after a failed one are processed: holding them back would
    count a receive against each without processing it, and dead-letter them with the bad one."""

    def handler(event: Any, context: Any) -> dict[str, Any]:  # noqa: ARG001 - Lambda handler signature (event, context)
        bridge = bridge_from_env()
        failures: list[dict[str, str]] = []
        for record in (event or {}).get("Records", []):
            message_id = str(record.get("messageId", ""))
            fifo = str(record.get("eventSourceARN", "")).endswith(".fifo")
            if failures and fifo:  # FIFO: nothing after a failed message may be processed ahead of it
                failures.append({"itemIdentifier": message_id})
                continue
            try:
                role(bridge, record["body"])
            except Exception:  # retried by SQS, then dead-lettered
                logger.exception("nova bridge: message %s failed", message_id)
                failures.append({"itemIdentifier": message_id})
        return {"batchItemFailures": failures}

    return handler


def status_change(event: Any, context: Any) -> dict[str, Any]:  # noqa: ARG001 - Lambda handler signature (event, context)
    """EventBridge "Step Functions Execution Status Change" → the rollout response of that execution."""
    detail = (event or {}).get("detail") or {}
    return bridge_from_env().respond_to_status_change(detail if isinstance(detail, dict) else {})


def rollout_proxy(event: Any, context: Any) -> dict[str, Any]:  # noqa: ARG001 - Lambda handler signature (event, context)
    """The function the recipe's ``rollout_request_arn`` names: Nova invokes it with each rollout request."""
    return bridge_from_env().accept(event)


def sweep(event: Any, context: Any) -> dict[str, Any]:  # noqa: ARG001 - Lambda handler signature (event, context)
    """Every minute: answer the rollouts past their budget, and emit the age of the oldest unanswered request
    (``NovaOldestUnansweredSeconds``, what the near-timeout alarm watches: it grows while a rollout waits,
    where an execution's duration is only known once it ends)."""
    from rewardpipe.aws.metrics import emit, oldest_unanswered_point

    bridge = bridge_from_env()
    out = bridge.sweep()
    emit([oldest_unanswered_point(out["oldest_unanswered_s"], bridge.config.run_id)])
    return {
        "answered": len(out["answered"]),
        "in_flight": out["in_flight"],
        "oldest_unanswered_s": round(out["oldest_unanswered_s"], 1),
    }
