"""The deployed bridge's roles, against injected clients (boto3 SQS and Step Functions) and a Store.

::

    Nova ──Invoke(rollout request)──► rollout proxy (rollout_request_arn) ──► [RolloutRequest FIFO] ──► intake
         ──StartExecution(name from the request, policy "callback" on the "nova" turn channel)──► rollout state machine
    rollout ──{task_token, state_key}──► [Nova turn queue] ──► forward_turn ──► [GenerateRequest FIFO] ──► Nova
    Nova ──generate response──► [GenerateResponse FIFO] ──► route_response ──SendTaskSuccess({"text", ...})──► rollout
    rollout ends (EventBridge status change) ──► respond ──rollout response──► [RolloutResponse FIFO] ──► Nova
    every minute: sweep ──► rollouts past their budget: StopExecution + error answer (never a hang), and the
                            age of the oldest unanswered request as a metric (the near-timeout alarm)

Bookkeeping lives in the records bucket under ``nova/`` (small JSON objects; a lifecycle rule expires
them): ``nova/requests/<execution>.json`` per rollout request (sample, range, deadline, answered),
``nova/steps/<step key>.json`` per waiting turn (task token, reply key), ``nova/rounds/...`` (which
training round a request belongs to), ``nova/due/<minute>/<start ms>-<execution>.json`` per unanswered
request (filed under the minute its budget runs out; deleted when it is answered, so the sweeper lists only
rollouts in flight), ``nova/inbox/`` (a request too large for its queue, parked by the proxy) and
``nova/reports/<execution>.json`` (the report envelope) and ``nova/answers/<execution>.json`` (the claim of
the answer: a conditional create, so one attempt of two answering a rollout at once answers it). A request
rejected at intake has no execution; it is filed under the name its execution would have had (or, when it
does not even parse, under ``rejected-<digest of the message>``), with its envelope and an error record like
any other answer, so a redelivered copy is recognised and not answered twice.
The conversation itself is read from the workflow's state snapshot; a turn larger than the Step
Functions budget is handed back through the turn's ``reply_key`` object.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from rewardpipe.aws.client import STALE_TOKEN_ERRORS
from rewardpipe.aws.client import execution_name as client_execution_name
from rewardpipe.aws.state import PAYLOAD_BUDGET, payload_size, wire_json
from rewardpipe.integrations.nova.protocol import (
    BridgeConfig,
    GenerateResponse,
    NovaProtocolError,
    RewardRange,
    RolloutRequest,
    check_linear_bounds,
    generate_request,
    group_of,
    parse,
    request_key,
    reward_bounds,
    rollout_result,
    task_source,
)
from rewardpipe.models import MAX_ID_LENGTH, ErrorInfo, Record, nova_fields
from rewardpipe.rewards import Reward

logger = logging.getLogger("rewardpipe.nova")
PREFIX = "nova/"
# A sample's training rounds, counted for as long as the run's records are kept: outside ``nova/``, whose objects
# the stack expires after ``bookkeeping_days`` (a marker that expired made a later round count fewer and take an
# earlier round's step and execution name: taken for that round's redelivery, it was never started or answered).
ROUNDS_PREFIX = "nova-rounds/"
# Where the markers were kept before (under the expiring prefix): still counted, and copied out, so a run that spans
# the upgrade keeps its numbering.
_OLD_ROUNDS_PREFIX = f"{PREFIX}rounds/"
# SQS's documented maximum message size; a generate request above it cannot be sent to Nova.
MAX_SQS_MESSAGE_BYTES = 256 * 1024
# How long an answer's claim (nova/answers/) is its claimer's alone: a claim older than this whose rollout is still
# unanswered belongs to an invocation that died between claiming and sending (a Lambda cut off at its timeout), and
# the next answer attempt sends the claimed response itself. An answer takes seconds from claim to send; past this,
# a copy sent while the claimer still runs carries the same deduplication id, which the FIFO queue drops for 5 min.
CLAIM_GRACE_S = 60.0
# The turn channel of the bridge's rollouts: their turn requests go to the bridge's own queue, never to the
# trainers' (rewardpipe.aws.rollout.PolicySpec.channel; the stack maps it to the queue's URL).
TURN_CHANNEL = "nova"


def wall_clock() -> float:
    """Seconds since the epoch: the deployed bridge's only source of the time (budgets, the sweeper)."""
    return time.time()


def _now() -> float:
    # Looked up at each call, not bound at import: the end-to-end test moves the deployed Lambdas' time
    # forward instead of waiting out a budget of minutes.
    return wall_clock()


@dataclass(frozen=True)
class Queues:
    rollout_response: str
    generate_request: str
    turn_requests: str = ""
    rollout_request: str = ""


def request_time(timestamp: Any, now: float) -> float:
    """When Nova sent a request, from its ``timestamp`` (ISO 8601, as the BYOO docs show it, or epoch seconds or
    milliseconds), never later than ``now``; ``now`` when it has none that parses. Nova's ``rollout.timeout``
    runs from there, so the bridge's budget does too: a request that waited in a queue has less time left."""
    from datetime import datetime

    value: float | None = None
    if isinstance(timestamp, (int, float)) and not isinstance(timestamp, bool):
        value = float(timestamp)
    elif isinstance(timestamp, str) and timestamp.strip():
        try:
            value = float(timestamp)
        except ValueError:
            try:
                parsed = datetime.fromisoformat(timestamp.strip().replace("Z", "+00:00"))
            except ValueError:
                return now
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=UTC)
            value = parsed.timestamp()
    if value is None or value != value or value in (float("inf"), float("-inf")):
        return now
    if value > 1e11:  # milliseconds
        value /= 1000.0
    return min(value, now)


@dataclass
class Bridge:
    config: BridgeConfig
    reward: Reward
    store: Any
    sqs: Any
    sfn: Any
    queues: Queues
    state_machine_arn: str = ""
    clock: Callable[[], float] = _now
    # The deployed environment's task model: inline task rows are validated with it at intake (issue 20). None:
    # the built-in coding Task.
    task_model: Any = None
    # The deployed environment: the tools it offers for a rollout's task go into the system prompt of every generate
    # request (:meth:`_task_tools`). None: not asked (the built-in coding environment offers none).
    # None: not checked (the built-in coding environment offers none).
    environment: Any = None

    def __post_init__(self) -> None:
        if self.config.range_mapping == "linear":  # refused here, not answered with the bottom of every range
            check_linear_bounds(reward_bounds(self.reward), f"reward '{self.reward.name}'")

    # -- bookkeeping -------------------------------------------------------------------------------

    @staticmethod
    def _request_path(execution: str) -> str:
        return f"{PREFIX}requests/{execution}.json"

    @staticmethod
    def _sample_path(sample_id: str) -> str:
        return f"{PREFIX}samples/{hashlib.sha256(sample_id.encode('utf-8')).hexdigest()[:40]}.json"

    @staticmethod
    def _step_path(step_id: str) -> str:
        return f"{PREFIX}steps/{hashlib.sha256(step_id.encode('utf-8')).hexdigest()[:40]}.json"

    def _send(self, queue_url: str, body: dict[str, Any], group: str, dedup: str) -> None:
        self._send_text(queue_url, json.dumps(body, allow_nan=False), group, dedup)

    def _send_text(self, queue_url: str, payload: str, group: str, dedup: str) -> None:
        kwargs: dict[str, Any] = {"QueueUrl": queue_url, "MessageBody": payload}
        if queue_url.endswith(".fifo"):
            kwargs["MessageGroupId"] = hashlib.sha256(group.encode("utf-8", "surrogatepass")).hexdigest()[:64]
            kwargs["MessageDeduplicationId"] = hashlib.sha256(dedup.encode("utf-8", "surrogatepass")).hexdigest()[:64]
        self.sqs.send_message(**kwargs)

    # -- intake ------------------------------------------------------------------------------------

    # -- the rollout proxy (what Nova invokes) ---------------------------------------------------------

    def accept(self, event: Any) -> dict[str, Any]:
        """The rollout-proxy Lambda: Nova invokes the recipe's ``rollout_request_arn`` with a rollout request
        (a batch, as a list, is accepted too); each goes on the bridge's FIFO request queue for intake, which
        retries, dead-letters and never loses it. The message group is the sample (requests of one sample stay
        in order) and the deduplication id the request's identity, so a request Nova retries within SQS's
        5-minute window is queued once. A request too large for the queue is parked in S3 and queued by key."""
        items = event if isinstance(event, list) else [event]
        accepted = []
        for item in items:
            data: Any = item
            if isinstance(item, (str, bytes)):
                try:
                    data = json.loads(item)
                except ValueError:
                    data = None
            # JSON either way (a string that is not JSON as a JSON string): its escapes keep the message inside the
            # characters SQS accepts, where a control character in the raw text failed the whole batch.
            text = json.dumps(
                data
                if data is not None
                else (item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item))
            )
            sample_id = _sample_id_of(data) or ""
            identity = f"{sample_id}\x00{data.get('timestamp')!r}" if isinstance(data, dict) else text
            if len(text.encode("utf-8", "surrogatepass")) > MAX_SQS_MESSAGE_BYTES:
                key = f"{PREFIX}inbox/{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()}.json"
                self.store.put_json(key, data)
                text = json.dumps({"version": "v0", "sample_id": sample_id, "request_key": key})
            self._send_text(self.queues.rollout_request, text, sample_id or text, identity)
            accepted.append(sample_id)
        return {"status": "accepted", "sample_ids": accepted}

    # -- intake ------------------------------------------------------------------------------------

    def _unpark(self, body: Any) -> Any:
        """A request the proxy parked in S3 (too large for the queue) in place of its pointer."""
        try:
            data = json.loads(body) if isinstance(body, (str, bytes)) else body
        except ValueError:
            return body
        key = data.get("request_key") if isinstance(data, dict) else None
        if (
            isinstance(key, str)
            and key.startswith(f"{PREFIX}inbox/")
            and set(data) <= {"version", "sample_id", "request_key"}
        ):
            parked = self.store.get_json(key, default=None)
            return parked if parked is not None else body
        return body

    def intake(self, body: Any) -> dict[str, Any]:
        """One rollout request → one execution (or an immediate error answer when it cannot start)."""
        body = self._unpark(body)
        try:
            request = parse(RolloutRequest, body)
        except NovaProtocolError as exc:
            sample_id = _sample_id_of(body)
            if sample_id is None:
                logger.error("unanswerable rollout request (no sample_id): %s", exc)
                return {"status": "rejected", "reason": str(exc)}
            # Answer under the id Nova sent, whatever else is wrong with the request (no re-validation), in the range
            # it asked for when that part of it is sound (else [0, 1]): mid-range or the mean of the group's answers
            # of another range would be a GRPO advantage of its own.
            request = RolloutRequest.model_construct(
                sample_id=sample_id, rewards=_sound_range(body), data={}, timestamp=_field_of(body, "timestamp")
            )
            return self._reject(request, _rejected_name(body), 0, ErrorInfo(kind="bad_request", message=str(exc)))
        step = self._round(request, request_key(request))
        name = client_execution_name(self.config.run_id, step, request.sample_id)
        path = self._request_path(name)
        known = self.store.get_json(path, default=None)
        # A redelivered request: its rollout is running or answered already; unless the start itself failed
        # (throttled, say) after the request was filed, in which case this delivery starts it.
        if known is not None and (known.get("started", True) or known.get("answered")):
            return {"status": "duplicate", "execution": known.get("execution")}
        try:
            task, task_key = task_source(request, self.config, *([self.task_model] if self.task_model else []))
        except NovaProtocolError as exc:
            return self._reject(request, name, step, ErrorInfo(kind="bad_input", message=str(exc)))
        group = group_of(request.sample_id, self.config)
        if known is None:
            sent_at = request_time(request.timestamp, self.clock())
            entry = {
                "sample_id": request.sample_id,
                "group": group,
                "range": list(request.rewards.range),
                "sent_at": sent_at,
                "deadline": sent_at + self.config.rollout_budget_s,
                "execution": name,
                "answered": False,
                "step": step,
                "started": False,
            }
            try:
                tools = self._task_tools(task, task_key)
                if tools:
                    entry["tools_prompt"] = checked_tools_prompt(tools)
            except ToolsUnusable as exc:  # the environment's failure, answered now: never a rollout without its tools
                error = ErrorInfo(kind="simulator_error", message=str(exc))
                return self._reject(request, name, step, error)
            self.store.put_json(path, entry)
            self.store.put_json(self._sample_path(request.sample_id), {"execution": name})
            self._file_member(entry, name)
            self.store.put_json(self._due_key(entry, name), {})
        else:
            entry = {k: v for k, v in known.items() if k != "_key"}
        # The workflow's own client: deterministic names (a second start finds the running execution) and
        # a large inline task offloaded to S3 instead of an oversized execution input. The turns go to the
        # bridge's own turn channel, never to a trainer's queue.
        arn = self._client().start(
            self.config.run_id,
            step,
            group,
            request.sample_id,
            task=task,
            task_key=task_key,
            policy={"mode": "callback", "channel": TURN_CHANNEL},
            max_turns=self.config.max_turns,
        )
        started = arn.rsplit(":", 1)[-1]
        entry = {**entry, "started": True}
        if started != name:  # an earlier attempt of this name failed: follow the new attempt
            self.store.put_json(self._request_path(started), {**entry, "execution": started})
            self.store.put_json(self._sample_path(request.sample_id), {"execution": started})
            self._file_member(entry, started)
            self._delete(self._due_key(entry, name))
            self.store.put_json(self._due_key(entry, started), {})
            entry = {**entry, "execution": started}
        self.store.put_json(path, entry)
        return {"status": "started", "execution": started}

    def _task_tools(self, task: Any, task_key: str | None) -> list[Any] | None:
        """The tools the deployed environment offers the model for this task (its ``tool_schemas``), or None. Nova's
        generate request has no tools field, so Nova's model would never see them: they are rendered into the system
        prompt of the rollout's generate requests instead (:func:`with_tools_prompt`), with a warning logged. None
        when the task cannot be read here (a stored task missing or not the environment's: the rollout says so).
        :class:`ToolsUnusable` when ``tool_schemas`` raises, hangs past ``hook_timeout_s`` or returns something other
        than a list of JSON objects (the checks of the trainers' callback rollouts, :func:`rewardpipe.aws.rollout.
        task_tools`): the rollout never sees its tool hook again on the Nova channel, so it would run without them."""
        from rewardpipe.aws.rollout import SimulatorError, task_tools

        env = self.environment
        schemas = getattr(env, "tool_schemas", None) if env is not None else None
        if callable(schemas):
            if task is None and task_key is not None:
                stored = self.store.get_json(task_key, default=None)
                try:
                    task = (self.task_model or _default_task_model()).model_validate(stored)
                except Exception:  # noqa: BLE001 - the rollout reports an unreadable task as it always did
                    return None
            try:
                schemas = task_tools(env, task)
            except SimulatorError as exc:
                raise ToolsUnusable(str(exc)) from None
        if not isinstance(schemas, list) or not schemas:
            return None
        logger.warning(
            "environment '%s' offers the model tools, and Nova's generate request has no tools field: they are "
            "written into the system prompt of each generate request (docs/guides/nova-forge.md)",
            getattr(env, "name", type(env).__name__),
        )
        return schemas

    def _client(self) -> Any:
        from rewardpipe.aws.client import RolloutClient

        return RolloutClient(
            self.state_machine_arn,
            bucket=getattr(self.store, "bucket", ""),
            sfn=self.sfn,
            s3=getattr(self.store, "client", None),
        )

    def _round(self, request: RolloutRequest, key: str) -> int:
        """Round = how many times this ``sample_id`` was requested before (with another timestamp): one marker per
        request under :data:`ROUNDS_PREFIX`, which the bookkeeping expiration never removes while the run lasts."""
        folder = f"{hashlib.sha256(request.sample_id.encode('utf-8')).hexdigest()[:40]}/"
        marker = f"{ROUNDS_PREFIX}{folder}"
        existing = {k.removeprefix(marker) for k in self.store.list_keys(marker)}
        for old in self.store.list_keys(f"{_OLD_ROUNDS_PREFIX}{folder}"):
            name = old.rsplit("/", 1)[-1]
            if name not in existing:  # a marker written before the upgrade, before it expires
                self.store.put_json(f"{marker}{name}", {"sample_id": request.sample_id})
                existing.add(name)
        if f"{key}.json" not in existing:
            self.store.put_json(f"{marker}{key}.json", {"sample_id": request.sample_id})
            existing.add(f"{key}.json")
        return len(existing) - 1

    # -- policy turns ------------------------------------------------------------------------------

    def forward_turn(self, body: Any) -> dict[str, Any]:
        """A waiting policy turn (``{task_token, rollout, messages, ...}`` from the state machine) → one
        generate request; the token is kept under the turn's ``step_id`` for the router."""
        message = json.loads(body) if isinstance(body, (str, bytes)) else body
        token, sample_id = message.get("task_token"), message.get("rollout")
        state_key = message.get("state_key")
        if not isinstance(token, str) or not isinstance(sample_id, str) or not isinstance(state_key, str):
            raise NovaProtocolError("turn request needs 'task_token', 'rollout' (the sample_id) and 'state_key'")
        # Only keys travel through the workflow: the conversation so far is in the episode's state snapshot.
        snapshot = self.store.get_json(state_key)
        request = generate_request(sample_id, list(snapshot["state"]["messages"]))
        entry = self._pending_for_sample(sample_id)
        if entry is not None and self.clock() > entry["deadline"]:
            self.sfn.send_task_failure(
                taskToken=token,
                error="RolloutBudgetExceeded",
                cause=f"rollout {sample_id} passed its {self.config.rollout_budget_s:g}s budget",
            )
            return {"status": "budget_exceeded", "step_id": request.step_id}
        payload = request.model_dump(mode="json")
        if entry is not None and entry.get("tools_prompt"):
            payload["messages"] = with_tools_prompt(payload["messages"], str(entry["tools_prompt"]))
        if len(json.dumps(payload).encode("utf-8")) > MAX_SQS_MESSAGE_BYTES:
            self.sfn.send_task_failure(
                taskToken=token,
                error="MessageTooLarge",
                cause=f"generate request {request.step_id} exceeds SQS's 256 KiB",
            )
            return {"status": "too_large", "step_id": request.step_id}
        self.store.put_json(
            self._step_path(request.step_id),
            {
                "task_token": token,
                "sample_id": sample_id,
                "step_id": request.step_id,
                "used": False,
                "reply_key": message.get("reply_key"),
            },
        )
        # Deduplicated by the wait (its task token), never by the step_id alone: Nova asks for the same sample_id
        # again at a later training step, whose turns have the same step_ids, and SQS would drop the next round's
        # turn within its five-minute window as a duplicate of this one (the rollout then waited out its budget).
        self._send(self.queues.generate_request, payload, sample_id, f"{request.step_id}\x00{token}")
        return {"status": "sent", "step_id": request.step_id}

    def route_response(self, body: Any) -> dict[str, Any]:
        """A generate response → resume the execution waiting for that ``step_id``. Unknown, late or repeated
        responses are dropped (logged), never delivered to the wrong rollout. The reply is read as the local
        OpenAI policy reads it (GenerateResponse.reply): its text and tool calls, a filtered reply, or none."""
        from rewardpipe.openai_client import EndpointError

        try:
            response = parse(GenerateResponse, body)
        except NovaProtocolError as exc:
            return self._malformed_response(body, exc)
        path = self._step_path(response.step_id)
        entry = self.store.get_json(path, default=None)
        if entry is None or entry.get("used"):
            return {"status": "unknown_step" if entry is None else "duplicate", "step_id": response.step_id}
        try:
            reply, status, cause = response.reply(self.config.model_finish_reasons), "delivered", ""
        except EndpointError as exc:  # no message, a content that is no text: the local policy's policy_error
            reply, status, cause = None, "failed", str(exc)
        return self._resume(path, entry, response.step_id, reply, response.stop, cause, status)

    def _malformed_response(self, body: Any, exc: NovaProtocolError) -> dict[str, Any]:
        """A generate response that does not parse: when it still names a waiting step, that turn ends now as a
        policy_error naming what was malformed (the local policy's outcome of a malformed reply), where it was
        dropped and its rollout waited out its whole budget; otherwise it is dropped (logged)."""
        logger.error("malformed generate response: %s", exc)
        step = _text_field(body, "step_id")
        path = self._step_path(step) if step else None
        entry = self.store.get_json(path, default=None) if path else None
        if step is None or path is None or entry is None or entry.get("used"):
            return {"status": "malformed", "reason": str(exc)}
        if entry.get("sample_id") != _text_field(body, "sample_id"):  # never another rollout's turn
            return {"status": "malformed", "reason": str(exc)}
        cause = f"Nova's generate response for step {step} is malformed: {exc}"
        return {**self._resume(path, entry, step, None, None, cause, "malformed"), "reason": str(exc)}

    def _resume(
        self,
        path: str,
        entry: dict[str, Any],
        step: str,
        reply: dict[str, Any] | None,
        finish_reason: str | None,
        cause: str,
        status: str,
    ) -> dict[str, Any]:
        """Resume the turn waiting at ``path`` with ``reply`` (GenerateResponse.reply), or end it as a policy_error
        with ``cause`` when there is none."""
        try:
            if reply is None:
                # The rollout ends now as a policy_error record (the error the trainer-callback turns send), where
                # the ValueError failed this message until it was dead-lettered and the rollout waited out its budget.
                self.sfn.send_task_failure(taskToken=entry["task_token"], error="PolicyError", cause=cause[:32000])
            else:
                output: dict[str, Any] = {**reply, "finish_reason": finish_reason}
                if output.get("tool_calls") is None:
                    output.pop("tool_calls", None)
                if payload_size(output) > PAYLOAD_BUDGET and entry.get("reply_key"):
                    # A turn too large for SendTaskSuccess goes to the turn's reply_key (the workflow reads it there).
                    stored = {key: output[key] for key in ("text", "tool_calls") if key in output}
                    output = {"text_key": self.store.put_json(entry["reply_key"], stored)}
                self.sfn.send_task_success(taskToken=entry["task_token"], output=wire_json(output))
        except Exception as exc:  # the rollout timed out or was stopped meanwhile
            if _error_code(exc) not in STALE_TOKEN_ERRORS:
                raise  # not marked used: the response comes back from its queue and is delivered then
            self.store.put_json(path, {**entry, "used": True})
            return {"status": "expired", "step_id": step}
        # Marked only now: a delivery that failed (throttled, 5xx) is retried from the queue instead of being
        # taken for a duplicate and dropped. A copy processed meanwhile is refused by Step Functions, which
        # accepts one completion per task token (InvalidToken/TaskTimedOut: "expired" above).
        self.store.put_json(path, {**entry, "used": True})
        return {"status": status, "step_id": step}

    # -- results -----------------------------------------------------------------------------------

    def _pending_for_sample(self, sample_id: str) -> dict[str, Any] | None:
        latest = self.store.get_json(self._sample_path(sample_id), default=None)
        return self._request(latest["execution"]) if latest else None

    def _request(self, execution: str) -> dict[str, Any] | None:
        path = self._request_path(execution)
        entry = self.store.get_json(path, default=None)
        return {**entry, "_key": path} if entry is not None else None

    def respond_to_status_change(self, detail: dict[str, Any]) -> dict[str, Any]:
        """:meth:`respond` to an EventBridge "Step Functions Execution Status Change" event's ``detail``.

        Step Functions leaves the output out of the event when its escaped form exceeds 248 KB (``"output":
        null``, ``"outputDetails": {"included": false}``); for a Standard workflow DescribeExecution still has
        it, so a Nova rollout's output is read there rather than its score answered as an error."""
        name, status, output = str(detail.get("name", "")), str(detail.get("status", "")), detail.get("output")
        if status == "SUCCEEDED" and output is None and _is_execution_name(name) and self._request(name) is not None:
            arn = detail.get("executionArn")
            arn = arn if isinstance(arn, str) and arn else self._client().execution_arn(name)
            output = self.sfn.describe_execution(executionArn=arn).get("output")
        return self.respond(name, status, output)

    def respond(self, execution_name_: str, status: str, output: Any, *, own_record: bool = False) -> dict[str, Any]:
        """An execution ended (SUCCEEDED with the rollout's output, or FAILED / TIMED_OUT / ABORTED):
        send its rollout response once. ``own_record``: the bridge writes the error record of its answer (the
        sweeper's timeout), if this answer is the one that claims the rollout."""
        entry = self._request(execution_name_) if _is_execution_name(execution_name_) else None
        if entry is None:
            return {"status": "not_a_nova_rollout"}
        if entry.get("answered"):
            if "deadline" in entry:  # a retried answer whose clean-up failed
                self._delete(self._due_key(entry, entry["execution"]))
            return {"status": "already_answered"}
        request = RolloutRequest(sample_id=entry["sample_id"], rewards={"range": entry["range"]})
        data = _output_object(output)
        if status == "SUCCEEDED" and data is None:  # an output that is no JSON object: no result to read
            error = ErrorInfo(
                kind="orchestration_error",
                message=f"execution {execution_name_} succeeded with an output that is no JSON object",
            )
            return self._answer(entry, request, aggregate=None, components={}, metrics={}, error=error)
        data = data or {}
        if status == "SUCCEEDED" and data.get("status") == "scored":
            values, metrics = nova_fields(data)  # components and flags apart, whatever their names
            components = {c: values.get(c) for c in self.reward.component_names}
            metrics.pop("reward_error", None)
            return self._answer(
                entry,
                request,
                aggregate=data.get("aggregate_reward_score"),
                components=components,
                metrics=metrics,
                error=None,
            )
        if status == "SUCCEEDED":
            kind = next(
                (name[len("error_") :] for name in nova_fields(data)[1] if name.startswith("error_")),
                "rollout_error",
            )
            error = ErrorInfo(kind=kind, message=f"rollout ended with an error record ({data.get('record_key')})")
        elif own_record:
            error = ErrorInfo(kind="timeout", message="rollout exceeded its budget (bridge sweeper)")
        else:
            error = ErrorInfo(
                kind="timeout" if status in ("TIMED_OUT", "ABORTED") else "orchestration_error",
                message=f"execution {execution_name_} ended {status}",
            )
        return self._answer(
            entry, request, aggregate=None, components={}, metrics={}, error=error, own_record=own_record
        )

    def _answer(
        self,
        entry: dict[str, Any],
        request: RolloutRequest,
        *,
        aggregate,
        components,
        metrics,
        error,
        own_record: bool = False,
        final: bool = False,
    ):
        neutral = error is not None and self.config.error_reward == "neutral"
        if neutral and not final and not own_record and self._defer(entry, error):
            return {"status": "deferred"}
        response, envelope = rollout_result(
            request.sample_id,
            request.rewards.range,
            self.reward,
            self.config,
            aggregate=aggregate,
            components=components,
            metrics=metrics,
            error=error,
            group_scores=self._group_scores(entry, request.rewards.range) if neutral else (),
        )
        body = response.model_dump(mode="json") if response is not None else None
        claim = self._claim(entry, body, envelope)
        if claim is not None:  # another answer holds the rollout: its decision stands, nothing is written twice
            if claim.get("stale"):  # ... but its claimer died before it finished: finish it with its response
                body, envelope, own_record = claim.get("response"), claim.get("envelope", envelope), False
            else:
                return {"status": "already_answered"}
        # Sent before the rollout is marked answered: a record write or a send that fails (throttled, a 5xx past
        # botocore's retries) releases the claim and fails this invocation, whose retry (the event again, the next
        # sweep, the request redelivered) must still find the rollout unanswered and send it. A send repeated
        # because the mark below failed has the same deduplication id, so the FIFO queue takes it once.
        try:
            if own_record and error is not None:
                self._write_error_record(entry, error)
            if body is not None:
                self._send(
                    self.queues.rollout_response,
                    body,
                    entry.get("group", request.sample_id),
                    entry.get("_key", request.sample_id),
                )
        except BaseException:
            if "_key" in entry:
                self._delete(self._claim_key(entry["_key"]))
            raise
        self._file_group_score(entry, body)
        if body is None:
            logger.error("error_reward=fail_batch: not answering %s (%s)", request.sample_id, error)
            out = {"status": "unanswered", "envelope": envelope}
        else:
            out = {"status": "answered", "response": body, "envelope": envelope}
        if "_key" in entry:
            self.store.put_json(entry["_key"], {k: v for k, v in {**entry, "answered": True}.items() if k != "_key"})
            self.store.put_json(entry["_key"].replace("/requests/", "/reports/"), envelope)
        if "deadline" in entry:  # answered: no longer in flight (what the sweeper lists and the alarm measures)
            self._delete(self._due_key(entry, entry["execution"]))
        if not final:
            self._release_deferred(entry)
        return out

    # -- neutral error answers wait for their group ------------------------------------------------------

    def _file_member(self, entry: dict[str, Any], execution: str) -> None:
        """File the request under its GRPO group and round (``nova/members/``), by sample: who a deferred error
        answer waits for (:meth:`_mates_in_flight`)."""
        sample = hashlib.sha256(str(entry.get("sample_id", "")).encode("utf-8", "surrogatepass")).hexdigest()[:40]
        self.store.put_json(f"{self._group_prefix(entry, 'members')}{sample}.json", {"execution": execution})

    def _mates_in_flight(self, entry: dict[str, Any]) -> list[str]:
        """The executions of ``entry``'s group and round, other than its own, still running: neither answered nor
        waiting as a deferred error answer themselves."""
        list_keys = getattr(self.store, "list_keys", None)
        if not callable(list_keys):  # a store that cannot list (a minimal one): no mate to wait for
            return []
        waiting = []
        for key in list_keys(self._group_prefix(entry, "members")):
            execution = (self.store.get_json(key, default=None) or {}).get("execution")
            if not isinstance(execution, str) or execution == entry.get("execution"):
                continue
            mate = self._request(execution) if _is_execution_name(execution) else None
            if mate is not None and not mate.get("answered") and not mate.get("deferred"):
                waiting.append(execution)
        return waiting

    def _defer(self, entry: dict[str, Any], error: ErrorInfo) -> bool:
        """Hold back a ``neutral`` error answer while group-mates of its round still run (answered at once, before,
        with the mean of the scores answered so far: the middle of the range for the group's first rollout to end,
        a GRPO advantage whenever the group's scores lay elsewhere). It is sent when the last of them is answered
        (:meth:`_release_deferred`), or by the sweeper once none runs or at its own deadline, whichever is first:
        never later than its budget, and Nova waits for the whole group before it computes an advantage anyway.
        A request rejected at intake is held the same way (its budget runs from when Nova sent it): rejected while a
        group-mate runs, it was answered at once with the middle of the range. False (answer now) for a request past
        its budget or with no mate running (nothing of the group to wait for: a group's first request to be
        rejected, before any mate started, is still answered at once, mid-range when nothing is scored)."""
        if "_key" not in entry or "deadline" not in entry or self.clock() > float(entry["deadline"]):
            return False
        if not self._mates_in_flight(entry):
            return False
        held = {k: v for k, v in entry.items() if k != "_key"}
        if entry.get("rejected"):  # no rollout, so no marker yet: the sweeper sends it at its budget by this one
            self.store.put_json(self._due_key(entry, entry["execution"]), {})
        self.store.put_json(entry["_key"], {**held, "deferred": {"error": error.model_dump(mode="json")}})
        self.store.put_json(self._deferred_key(entry), {})
        # Checked again once filed: a mate answered meanwhile marked itself answered before it looked for held
        # answers, so it either saw this one (and sends it) or is seen answered here (and this one goes now); when
        # both, the answer's claim lets one of them send it.
        return bool(self._mates_in_flight(entry))

    def _deferred_key(self, entry: dict[str, Any]) -> str:
        return f"{self._group_prefix(entry, 'deferred')}{entry['execution']}.json"

    def _answer_deferred(self, entry: dict[str, Any]) -> dict[str, Any]:
        """Send a deferred error answer now, with the mean of its group's scores answered by now."""
        error = ErrorInfo.model_validate((entry.get("deferred") or {}).get("error") or {})
        request = RolloutRequest(sample_id=entry["sample_id"], rewards={"range": entry["range"]})
        entry = {k: v for k, v in entry.items() if k != "deferred"}
        out = self._answer(entry, request, aggregate=None, components={}, metrics={}, error=error, final=True)
        self._delete(self._deferred_key(entry))
        return out

    def _sweep_deferred(self) -> tuple[list[dict[str, Any]], list[Exception]]:
        """The held error answers whose mates are all answered by now (their release failed): sent. Only held answers
        are filed under ``nova/deferred/`` (each is removed once sent), so this costs as many reads as are held."""
        answered: list[dict[str, Any]] = []
        failures: list[Exception] = []
        for key in self.store.list_keys(f"{PREFIX}deferred/"):
            execution = key.rsplit("/", 1)[-1].removesuffix(".json")
            held = self._request(execution) if _is_execution_name(execution) else None
            if held is None or held.get("answered") or not held.get("deferred"):
                self._delete(key)
                continue
            if self._mates_in_flight(held):
                continue
            try:
                answered.append(self._answer_deferred(held))
            except Exception as exc:
                logger.exception("sweep: answering %s failed", execution)
                failures.append(exc)
        return answered, failures

    def _release_deferred(self, entry: dict[str, Any]) -> None:
        """After ``entry``'s answer: send the deferred error answers of its group and round that wait for no running
        mate any more. A failure here costs nothing but time: the sweeper sends them at its next run."""
        try:
            for key in self.store.list_keys(self._group_prefix(entry, "deferred")):
                execution = key.rsplit("/", 1)[-1].removesuffix(".json")
                held = self._request(execution) if _is_execution_name(execution) else None
                ready = held is not None and held.get("deferred") and not held.get("answered")
                if ready and held is not None and not self._mates_in_flight(held):
                    self._answer_deferred(held)
        except Exception:  # this answer is sent; the sweeper sends the held ones
            logger.exception("releasing the deferred error answers of %s failed", entry.get("group"))

    def _group_prefix(self, entry: dict[str, Any], kind: str = "groups") -> str:
        """Where one GRPO group of one training round files its answered scores (``nova/groups/``), its requests
        (``nova/members/``) and its deferred error answers (``nova/deferred/``)."""
        group = f"{entry.get('group', entry.get('sample_id', ''))}\x00{int(entry.get('step', 0))}"
        return f"{PREFIX}{kind}/{hashlib.sha256(group.encode('utf-8', 'surrogatepass')).hexdigest()[:40]}/"

    def _file_group_score(self, entry: dict[str, Any], body: Any) -> None:
        """File the score of a scored answer just sent under its group, for the ``neutral`` answer of a group-mate
        that errs later (:meth:`_group_scores`); an error answer is no score and is not filed."""
        if not isinstance(body, dict) or body.get("stop_reason") == "error" or "execution" not in entry:
            return
        score = (body.get("rewards") or {}).get("aggregate_score")
        self.store.put_json(
            f"{self._group_prefix(entry)}{entry['execution']}.json",
            {"score": score, "range": list(entry.get("range") or [])},
        )

    def _group_scores(self, entry: dict[str, Any], target: tuple[float, float]) -> list[float]:
        """The scores answered so far for the scored rollouts of ``entry``'s group in this round and range: what a
        ``neutral`` error answer averages (it waits for its running group-mates first, up to its own budget:
        :meth:`_defer`); with none scored it gets the middle of the range."""
        list_keys = getattr(self.store, "list_keys", None)
        if not callable(list_keys):
            return []
        scores: list[float] = []
        for key in list_keys(self._group_prefix(entry)):
            filed = self.store.get_json(key, default=None)
            if isinstance(filed, dict) and list(filed.get("range") or []) == list(target):
                score = filed.get("score")
                if isinstance(score, (int, float)) and not isinstance(score, bool):
                    scores.append(float(score))
        return scores

    @staticmethod
    def _claim_key(request_path: str) -> str:
        return request_path.replace("/requests/", "/answers/")

    def _claim(self, entry: dict[str, Any], body: Any, envelope: dict[str, Any]) -> dict[str, Any] | None:
        """Claim the rollout's answer: None when this attempt holds it now (it writes the record, sends and marks);
        else the claim another attempt holds (``stale`` when that attempt must have died: older than
        :data:`CLAIM_GRACE_S` with the rollout still unanswered). On S3 the claim is a conditional create
        (``If-None-Match: *``), so of two sweeps, or a sweep and the responder, answering one rollout at once
        exactly one decides; elsewhere it is read, then written."""
        if "_key" not in entry:
            return None
        key = self._claim_key(entry["_key"])
        claim = {"response": body, "envelope": envelope, "claimed_at": self.clock()}
        client, bucket = getattr(self.store, "client", None), getattr(self.store, "bucket", None)
        if client is not None and bucket:
            try:
                client.put_object(
                    Bucket=bucket,
                    Key=self.store._full(key),
                    Body=json.dumps(claim, allow_nan=False).encode("utf-8"),
                    ContentType="application/json",
                    IfNoneMatch="*",
                )
                return None
            except Exception as exc:
                if _error_code(exc) not in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                    raise
        elif self.store.get_json(key, default=None) is None:
            self.store.put_json(key, claim)
            return None
        held = self.store.get_json(key, default=None)
        if held is None:  # released meanwhile (its send failed): claim it again
            return self._claim(entry, body, envelope)
        current = self.store.get_json(entry["_key"], default={}) or {}
        age = self.clock() - float(held.get("claimed_at", 0.0))
        return {**held, "stale": not current.get("answered") and age > CLAIM_GRACE_S}

    def _reject(self, request: RolloutRequest, name: str, step: int, error: ErrorInfo) -> dict[str, Any]:
        """Answer a request that starts no rollout, keeping what every answer keeps: the request entry
        (answered), the report envelope and an error record."""
        path = self._request_path(name)
        if self.store.get_json(path, default=None) is not None:  # a redelivered copy: answered already
            return {"status": "duplicate", "execution": name}
        # A budget from when Nova sent it, as a started rollout has: a neutral answer is held while group-mates of its
        # round run (:meth:`_defer`), and the sweeper sends it by then at the latest.
        sent_at = request_time(getattr(request, "timestamp", None), self.clock())
        entry = {
            "sample_id": request.sample_id,
            "group": group_of(request.sample_id, self.config),
            "range": list(request.rewards.range),
            "sent_at": sent_at,
            "deadline": sent_at + self.config.rollout_budget_s,
            "execution": name,
            "answered": False,
            "step": step,
            "rejected": error.kind,
            "_key": path,
        }
        # The record first: the answer marks the request answered, after which a redelivered copy does nothing.
        self._write_error_record(entry, error)
        out = self._answer(entry, request, aggregate=None, components={}, metrics={}, error=error)
        return {**out, "status": "rejected_" + out["status"], "execution": name}

    # -- in flight: the sweeper and its metric -------------------------------------------------------

    @staticmethod
    def _due_prefix(minute: int) -> str:
        return f"{PREFIX}due/{minute:010d}/"

    def _due_key(self, entry: dict[str, Any], execution: str) -> str:
        """Filed under the first whole minute after the deadline, named by when Nova sent the request."""
        sent_at = float(entry.get("sent_at", entry["deadline"] - self.config.rollout_budget_s))
        return f"{self._due_prefix(int(entry['deadline'] // 60) + 1)}{int(sent_at * 1000):013d}-{execution}.json"

    @staticmethod
    def _parse_due(key: str) -> tuple[int, float | None, str] | None:
        """(due minute, sent at, execution name) of a marker key; sent at is None for a marker an earlier version
        of the bridge wrote (``nova/due/<minute>/<execution>.json``), whose rollout is still swept."""
        match = re.fullmatch(rf"{PREFIX}due/(\d{{10}})/(?:(\d{{13}})-)?([A-Za-z0-9_-]{{1,80}})\.json", key)
        if not match:
            return None
        return int(match.group(1)), (int(match.group(2)) / 1000.0 if match.group(2) else None), match.group(3)

    def _delete(self, key: str) -> None:
        client, bucket = getattr(self.store, "client", None), getattr(self.store, "bucket", None)
        if client is not None and bucket:
            client.delete_object(Bucket=bucket, Key=self.store._full(key))
        elif hasattr(self.store, "delete"):
            self.store.delete(key)

    def sweep(self) -> dict[str, Any]:
        """Stop every unanswered rollout past its budget and answer it, so a generate response that never comes
        costs one budget, never Nova's ``rollout.timeout``; and measure the oldest unanswered request.

        Only rollouts in flight have a marker under ``nova/due/`` (an answer deletes it), so a sweep's cost
        follows the rollouts in flight, not those already answered. A rollout past its budget is stopped;
        if its execution had already succeeded (its result is on the way through the status-change event),
        it is answered with that scored result, never with a substitute; otherwise a ``timeout`` error record
        is written (conditionally: it never replaces a scored record) and the error reward is sent.
        Returns ``{"answered": [...], "in_flight": n, "oldest_unanswered_s": age}``."""
        now = self.clock()
        now_minute = int(now // 60)
        answered, failures = self._sweep_deferred()
        ages: list[float] = []
        for key in self.store.list_keys(f"{PREFIX}due/"):
            marker = self._parse_due(key)
            if marker is None:
                continue
            minute, sent_at, name = marker
            if minute > now_minute and sent_at is not None:
                ages.append(now - sent_at)
                continue
            entry = self._request(name)
            if entry is None or entry.get("answered"):
                self._delete(key)
                continue
            if entry.get("deferred") and now > entry["deadline"]:
                try:  # a held error answer at its budget: sent with what is scored by now
                    answered.append(self._answer_deferred(entry))
                except Exception as exc:
                    logger.exception("sweep: answering %s failed", name)
                    failures.append(exc)
                continue
            if now <= entry["deadline"]:
                ages.append(
                    now - (sent_at if sent_at is not None else entry["deadline"] - self.config.rollout_budget_s)
                )
                continue
            try:
                answered.append(self._expire(entry))
            except Exception as exc:  # this rollout is retried next minute; the others go on
                logger.exception("sweep: answering %s failed", name)
                failures.append(exc)
                ages.append(
                    now - (sent_at if sent_at is not None else entry["deadline"] - self.config.rollout_budget_s)
                )
                continue
            if sent_at is None:
                self._delete(key)
        if failures:
            # Every other rollout past its budget was answered; the sweep still fails (the sweeper's errors alarm),
            # and the failed ones stay in flight for the next sweep.
            raise failures[0]
        return {"answered": answered, "in_flight": len(ages), "oldest_unanswered_s": max(ages, default=0.0)}

    def _expire(self, entry: dict[str, Any]) -> dict[str, Any]:
        arn = self._client().execution_arn(entry["execution"])
        try:
            self.sfn.stop_execution(
                executionArn=arn,
                error="RolloutBudgetExceeded",
                cause=f"no result within {self.config.rollout_budget_s:g}s",
            )
        except Exception as exc:  # noqa: BLE001 - finished already (or never started): its status decides below
            logger.info("stop_execution(%s): %s", arn, exc)
        status, output = "ABORTED", None
        try:
            description = self.sfn.describe_execution(executionArn=arn)
            status, output = description["status"], description.get("output")
        except Exception as exc:  # unknown: answered as the timeout it is
            if _error_code(exc) not in ("ExecutionDoesNotExist",):
                raise
        if status == "SUCCEEDED":
            return self.respond(entry["execution"], status, output)
        # The timeout record is written by whichever answer claims the rollout (_answer), so a sweep that overlaps
        # another, or the responder answering the execution's own end, never times out a rollout answered already.
        return self.respond(entry["execution"], "TIMED_OUT", None, own_record=True)

    def _write_error_record(self, entry: dict[str, Any], error: ErrorInfo) -> None:
        """The error record of an answer the bridge gave itself, written like every record on AWS: only if no
        scored record is there (rewardpipe.aws.rollout.put_record_once, a conditional write on S3)."""
        from rewardpipe.aws.rollout import put_record_once

        record = Record(
            run_id=self.config.run_id,
            step=int(entry.get("step", 0)),
            group_id=_record_id(entry["group"]),
            rollout_id=_record_id(entry["sample_id"]),
            task_id="unknown",
            status="error",
            error=error,
            components={c: None for c in self.reward.component_names},
            weights=self.reward.weights,
            aggregate=None,
        )
        put_record_once(self.store, record)


#: How the tools a rollout's task offers open their part of the system prompt (:func:`tools_prompt`).
TOOLS_PROMPT_HEADER = "Tools you can call (OpenAI function schemas, one JSON object per line):"
#: The characters a line reader (``str.splitlines``) splits on that JSON may leave raw inside a string: written as
#: ``\u`` escapes, so one tool is one line whatever its text holds.
_RAW_LINE_BREAKS = re.compile("[\x85\u2028\u2029]")


class ToolsUnusable(ValueError):
    """The environment's tools for a rollout cannot be offered to Nova's model: its ``simulator_error``."""


def tools_prompt(tools: list[Any]) -> str:
    """The tools as system-prompt text, a format of its own (docs/guides/nova-forge.md "Environments with tools"):
    the line :data:`TOOLS_PROMPT_HEADER`, then each tool's schema as one line of strict JSON (keys sorted, ``", "``
    and ``": "`` between items, text as itself but for a lone surrogate and the line breaks JSON leaves raw, written
    as ``\\u`` escapes), so no description or default can end its line or the list early. ValueError/TypeError for a
    schema that is no strict JSON (a NaN, an infinity, a cycle, an object that is no JSON value)."""
    from rewardpipe.safe_text import escape_lone_surrogates

    lines = [TOOLS_PROMPT_HEADER]
    for tool in tools:
        plain = json.loads(json.dumps(tool, allow_nan=False))  # its keys as JSON has them (an int key is text)
        text = escape_lone_surrogates(json.dumps(plain, sort_keys=True, ensure_ascii=False, allow_nan=False))
        lines.append(_RAW_LINE_BREAKS.sub(lambda match: f"\\u{ord(match[0]):04x}", text))
    return "\n".join(lines)


def checked_tools_prompt(tools: list[Any]) -> str:
    """:func:`tools_prompt`, or :class:`ToolsUnusable` naming why the tools cannot be offered: a schema that is no
    strict JSON, or a prompt no generate request could carry (over SQS's message size on its own)."""
    try:
        text = tools_prompt(tools)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ToolsUnusable(f"tool_schemas: the tools are no strict JSON ({type(exc).__name__}: {exc})") from None
    size = len(text.encode("utf-8"))
    if size > MAX_SQS_MESSAGE_BYTES:
        raise ToolsUnusable(
            f"tool_schemas: the tools take {size} bytes of the system prompt, over the {MAX_SQS_MESSAGE_BYTES} bytes "
            "of a whole generate request"
        )
    return text


def with_tools_prompt(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """``messages`` with ``text`` at the end of their opening system message (a new one first when there is none)."""
    first = messages[0] if messages else None
    if first is not None and first.get("role") == "system" and isinstance(first.get("content"), str):
        return [{**first, "content": f"{first['content']}\n\n{text}"}, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def _default_task_model() -> Any:
    from rewardpipe.models import Task

    return Task


def _output_object(output: Any) -> dict[str, Any] | None:
    """An execution's output as a dict: ``{}`` when it has none, None when it is no JSON object (text that does not
    parse, a list, a number), which answered nothing before (AttributeError/ValueError out of the responder and of
    every sweep after the budget)."""
    if output is None or output == "":
        return {}
    try:
        data = json.loads(output) if isinstance(output, (str, bytes)) else output
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _error_code(exc: BaseException) -> str:
    code = getattr(exc, "response", {}).get("Error", {}).get("Code") if hasattr(exc, "response") else None
    return str(code or type(exc).__name__)


def _field_of(body: Any, name: str) -> Any:
    """Field ``name`` of a message body (JSON text or an object), None when it has none."""
    try:
        data = json.loads(body) if isinstance(body, (str, bytes)) else body
    except ValueError:
        return None
    return data.get(name) if isinstance(data, dict) else None


def _sound_range(body: Any) -> RewardRange:
    """The ``rewards`` of a request that does not parse as a whole, when that part of it does; else the default."""
    try:
        return RewardRange.model_validate(_field_of(body, "rewards") or {})
    except (ValueError, TypeError):  # pydantic's ValidationError is a ValueError
        return RewardRange()


def _sample_id_of(body: Any) -> str | None:
    return _text_field(body, "sample_id")


def _text_field(body: Any, name: str) -> str | None:
    """The non-empty text field ``name`` of a message body (JSON text or an object), None when it has none."""
    value = _field_of(body, name)
    return value if isinstance(value, str) and value else None


def _record_id(value: str) -> str:
    """``value`` as a record id: an id over the record's limit (only a request rejected for it can carry
    one) keeps its head and a digest of the whole."""
    if len(value) <= MAX_ID_LENGTH:
        return value
    return f"{value[: MAX_ID_LENGTH - 41]}#{hashlib.sha256(value.encode('utf-8', 'surrogatepass')).hexdigest()[:40]}"


def _rejected_name(body: Any) -> str:
    """Where an unparsable request is filed: the same message (a redelivery) gives the same name."""
    if isinstance(body, (str, bytes)):
        raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    else:
        raw = json.dumps(body, sort_keys=True, default=repr).encode("utf-8", "surrogatepass")
    return "rejected-" + hashlib.sha256(raw).hexdigest()[:40]


def _is_execution_name(name: Any) -> bool:
    import re

    return isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9_-]{1,80}", name) is not None
