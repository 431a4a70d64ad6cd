"""Trainer-side helper: start rollout executions, answer callback turns, collect the rewards.

    client = RolloutClient(state_machine_arn, queue_url=turn_request_queue_url, bucket=records_bucket)
    arns = client.start_group("run1", step=0, group="g3", task_key="tasks/catalog/t.json",
                              policies=[{"mode": "callback"}] * 8)
    client.serve_turns(lambda request: my_model.generate(request["messages"]), until=client.all_done(arns))
    rewards = client.wait(arns)          # [{"id", "aggregate_reward_score", "metrics_list", "status", ...}]

Execution names are derived from (run, step, rollout). Starting the same rollout again returns the
existing execution only while it is RUNNING with the same input (a retried start); a finished (even
succeeded), failed, stopped or differently configured earlier execution gets a new attempt
(``<name>-a2``, ``-a3``, ...), so a re-run never silently hands back an old result: a callback
rollout's input does not contain the turns, so an old success would score another model's answers.

Nothing bulky goes through Step Functions: an input over :data:`PAYLOAD_BUDGET` has its task and
replay turns stored in the records bucket first, the trainer reads each conversation from S3, and a
reply over the budget is stored in S3 too (this needs ``bucket``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import re
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

from rewardpipe.aws.state import PAYLOAD_BUDGET, inputs_prefix, payload_size, wire_json

_UNSAFE = re.compile(r"[^0-9A-Za-z_-]+")
NAME_LIMIT = 80
ATTEMPT_SUFFIX_ROOM = 4  # "-a99"
MAX_ATTEMPTS = 99
# SendTaskSuccess/SendTaskFailure errors that mean "this turn is no longer wanted": the execution
# timed out, failed, or already got this answer (a redelivered message). Never fatal to serve_turns.
STALE_TOKEN_ERRORS = frozenset({"TaskTimedOut", "InvalidToken", "TaskDoesNotExist"})


def execution_name(run: str, step: int, rollout: str, attempt: int = 1) -> str:
    """A valid, deterministic Step Functions execution name (≤ 80 chars of [0-9A-Za-z_-])."""
    digest = hashlib.sha256(json.dumps([run, step, rollout]).encode()).hexdigest()[:10]
    readable = _UNSAFE.sub("-", f"{run}-s{step}-{rollout}").strip("-")
    base = f"{readable[: NAME_LIMIT - len(digest) - 1 - ATTEMPT_SUFFIX_ROOM]}-{digest}"
    return base if attempt == 1 else f"{base}-a{attempt}"


def _check_input(payload: dict[str, Any]) -> None:
    """Refuse, before StartExecution, an input the execution's first state would refuse (``RolloutInput``: a run
    id no store key can hold, an id over MAX_ID_LENGTH or with a control character, ``max_turns`` over the
    limit, no task): AWS would start the execution and bill it, and its error record would go under run
    ``unknown``, not the trainer's run."""
    from pydantic import ValidationError

    from rewardpipe.aws.rollout import RolloutInput

    try:
        RolloutInput.model_validate(json.loads(json.dumps(payload)))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"rollout {str(payload.get('rollout'))[:80]!r} cannot be started: {problems}") from None


def _error_code(exc: BaseException) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


def _transient(exc: BaseException) -> bool:
    from rewardpipe.aws.lambda_support import is_transient

    return is_transient(exc)


# A throttled or failing call that botocore's own retries did not clear (Step Functions and SQS throttle
# per account with a token bucket, shared with every other trainer in it) is tried again this many times,
# with full-jitter backoff capped at API_MAX_DELAY_S, before the client gives up.
API_ATTEMPTS = 8
API_MAX_DELAY_S = 20.0


def _with_retries(call: Callable[..., Any], **kwargs: Any) -> Any:
    for attempt in range(1, API_ATTEMPTS + 1):
        try:
            return call(**kwargs)
        except Exception as exc:  # re-raised unless transient
            if attempt == API_ATTEMPTS or not _transient(exc):
                raise
            time.sleep(random.uniform(0, min(API_MAX_DELAY_S, 0.5 * 2**attempt)))
    raise AssertionError("unreachable")


# DeleteMessage with the handle of a message whose visibility timeout ran out: SQS answers
# InvalidParameterValue ("The receipt handle has expired") or ReceiptHandleIsInvalid. The message is
# delivered again with a new handle, answered as a stale turn and deleted then.
EXPIRED_RECEIPT_ERRORS = frozenset({"InvalidParameterValue", "ReceiptHandleIsInvalid"})


def _turn_request(message: dict[str, Any]) -> dict[str, Any] | None:
    """A queue message's turn request, or None when it is not one (deleted and skipped)."""
    try:
        body = json.loads(message["Body"])
    except (ValueError, TypeError, KeyError, RecursionError):
        return None
    if not isinstance(body, dict):
        return None
    if not all(isinstance(body.get(name), str) and body[name] for name in ("task_token", "state_key", "reply_key")):
        return None
    return body


def _turn_tools(store: Any, tools_key: Any, state_key: str) -> list[dict[str, Any]]:
    """The tools a turn request names (``tools_key``, beside its conversation), as a list of JSON objects."""
    folder = state_key.rpartition("/")[0] + "/"
    if not isinstance(tools_key, str) or not tools_key.startswith(folder) or ".." in tools_key.split("/"):
        raise ValueError(f"the turn request's tools_key must be under {folder}, got {str(tools_key)[:200]!r}")
    tools = store.get_json(tools_key)
    if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
        raise ValueError(f"{tools_key} must hold a JSON list of tool schemas")
    return tools


def trainer_reply(turn: Any) -> dict[str, Any]:
    """The callback output for what ``respond`` returned: its text, or an assistant message as the local OpenAI
    policy reads one (:func:`rewardpipe.openai_client.choice_message`), ``{"text", "tool_calls"}``, so a model's
    tool calls reach the episode (:func:`rewardpipe.aws.rollout.trainer_turn`). A message is a dict (``content``,
    ``tool_calls``), an object with ``model_dump`` (the OpenAI SDK's message, a rewardpipe Message), a choice
    (``{"message", "finish_reason"}``) or a whole chat completion (its first choice). A reply a content filter or
    a refusal took the place of is sent as ``{"filtered": true}``; TypeError when it holds no turn."""
    from rewardpipe.openai_client import ContentFiltered, EndpointError, NoTextBeforeLimit, choice_message

    if isinstance(turn, str):
        return {"text": turn}
    if hasattr(turn, "model_dump"):
        turn = turn.model_dump(mode="json", exclude_none=True)
    if not isinstance(turn, dict):
        raise TypeError(f"respond returned {type(turn).__name__}, not text or an assistant message")
    choices = turn.get("choices")
    choice = (choices[0] if isinstance(choices, list) and choices else {}) if "choices" in turn else turn
    if "choices" not in turn and "message" not in turn:
        choice = {"message": turn}
    try:
        message = choice_message(choice, "respond")
    except ContentFiltered:
        return {"filtered": True}
    except NoTextBeforeLimit:  # max_tokens ran out before any text: the model's empty turn
        return {"text": ""}
    except EndpointError as exc:
        raise TypeError(f"respond returned no assistant turn: {exc}") from None
    if not message["tool_calls"]:
        return {"text": message["content"]}
    return {"text": message["content"], "tool_calls": message["tool_calls"]}


# How long a turn's message stays hidden past each extension while it is answered (the turn queue's own
# visibility timeout is 5 minutes; SQS allows up to 12 hours per extension).
TURN_KEEP_HIDDEN_S = 300


class RolloutClient:
    def __init__(
        self,
        state_machine_arn: str,
        *,
        queue_url: str = "",
        bucket: str = "",
        sfn: Any = None,
        sqs: Any = None,
        s3: Any = None,
        workers: int = 8,
    ) -> None:
        import boto3

        self.state_machine_arn = state_machine_arn
        self.queue_url = queue_url
        self.bucket = bucket
        self.sfn = sfn or boto3.client("stepfunctions")
        self.sqs = sqs or (boto3.client("sqs") if queue_url else None)
        self._s3 = s3
        self.workers = workers

    # -- S3 -----------------------------------------------------------------------------------------

    def _store(self, bucket: str = "") -> Any:
        from rewardpipe.store import S3Store

        bucket = bucket or self.bucket
        if not bucket:
            raise ValueError("this needs the records bucket: pass bucket=<RecordsBucketName output> to RolloutClient")
        if self._s3 is None:
            import boto3

            self._s3 = boto3.client("s3")
        return S3Store(bucket, client=self._s3)

    # -- starting -----------------------------------------------------------------------------------

    def execution_arn(self, name: str) -> str:
        return self.state_machine_arn.replace(":stateMachine:", ":execution:", 1) + f":{name}"

    def _offload(self, payload: dict[str, Any], name: str) -> dict[str, Any]:
        """Move the task, then the replay turns, to S3 until the input fits the budget."""
        from rewardpipe.aws.rollout import inline_task_key

        if payload_size(payload) > PAYLOAD_BUDGET and isinstance(payload.get("task"), dict):
            task = payload.pop("task")
            key = inline_task_key(payload["run"], task)
            payload["task_key"] = self._store().put_json(key, task)
        turns = payload.get("policy", {}).get("turns")
        if payload_size(payload) > PAYLOAD_BUDGET and isinstance(turns, list):
            # Named by content too: trying a name whose execution exists (a re-run with other turns) must not
            # change the turns that execution may not have read yet.
            digest = hashlib.sha256(json.dumps(turns).encode("utf-8")).hexdigest()[:16]
            key = f"{inputs_prefix(payload['run'], name)}turns-{digest}.json"
            policy = {k: v for k, v in payload["policy"].items() if k != "turns"}
            payload["policy"] = {**policy, "turns_key": self._store().put_json(key, turns)}
        if payload_size(payload) > PAYLOAD_BUDGET:
            raise ValueError(
                f"the execution input is {payload_size(payload)} bytes even with the task and turns "
                f"in S3 (budget {PAYLOAD_BUDGET}); shorten the ids or policy settings"
            )
        return payload

    def start(
        self,
        run: str,
        step: int,
        group: str,
        rollout: str,
        *,
        task: Any = None,
        task_key: str | None = None,
        policy: dict | None = None,
        max_turns: int | None = None,
    ) -> str:
        """Start (or find) the execution of one rollout and return its ARN.

        An execution of this rollout that is RUNNING with the same input is returned as it is (Step
        Functions itself answers a repeated StartExecution of a running execution that way); one that has
        finished in any way (SUCCEEDED, FAILED, TIMED_OUT, ABORTED), or was started with a different input,
        is left alone and a new attempt is started under the next free name.
        """
        payload: dict[str, Any] = {
            "run": run,
            "step": step,
            "group": group,
            "rollout": rollout,
            "policy": dict(policy or {"mode": "callback"}),
        }
        if task is not None:
            payload["task"] = task.model_dump(mode="json") if hasattr(task, "model_dump") else task
        if task_key is not None:
            payload["task_key"] = task_key
        if max_turns is not None:
            payload["max_turns"] = max_turns
        _check_input(payload)
        for attempt in range(1, MAX_ATTEMPTS + 1):
            name = execution_name(run, step, rollout, attempt)
            body = wire_json(self._offload(json.loads(json.dumps(payload)), name))
            try:
                return _with_retries(
                    self.sfn.start_execution, stateMachineArn=self.state_machine_arn, name=name, input=body
                )["executionArn"]
            except self.sfn.exceptions.ExecutionAlreadyExists:
                arn = self.execution_arn(name)
                old = _with_retries(self.sfn.describe_execution, executionArn=arn)
                if old["status"] == "RUNNING" and _same_input(old.get("input"), body):
                    return arn
        raise RuntimeError(f"rollout {rollout!r} of run {run!r} step {step} already has {MAX_ATTEMPTS} attempts")

    def start_group(
        self,
        run: str,
        step: int,
        group: str,
        *,
        policies: Iterable[dict],
        task: Any = None,
        task_key: str | None = None,
        max_turns: int | None = None,
    ) -> list[str]:
        """One execution per policy; rollout ids are ``<group>-<i>``."""
        return [
            self.start(
                run, step, group, f"{group}-{i}", task=task, task_key=task_key, policy=policy, max_turns=max_turns
            )
            for i, policy in enumerate(policies)
        ]

    # -- waiting ------------------------------------------------------------------------------------

    def _poll(self, arns: list[str], done: dict[str, dict]) -> None:
        """Describe only the executions not known to be finished; record the ones that finished.

        A throttled (or otherwise transient) describe ends the poll early: the executions not yet
        described stay pending for the next poll, which the caller backs off before."""
        for arn in arns:
            if arn not in done:
                try:
                    desc = self.sfn.describe_execution(executionArn=arn)
                except Exception as exc:  # re-raised unless transient
                    if _transient(exc):
                        return
                    raise
                if desc["status"] != "RUNNING":
                    done[arn] = desc

    def all_done(
        self, arns: list[str], *, min_interval_s: float = 1.0, max_interval_s: float = 5.0
    ) -> Callable[[], bool]:
        """A predicate for ``serve_turns(until=...)``: True once every execution has finished.

        Each poll describes only the executions still running. Polls back off: a poll that finds none newly
        finished doubles the wait before the next one (from ``min_interval_s`` up to ``max_interval_s``), one
        that does resets it; calls in between answer from what the last poll saw. So a serve loop calling it
        every second stays under DescribeExecution's account-wide rate even with hundreds of rollouts."""
        done: dict[str, dict] = {}
        pending = len(set(arns))
        timing = {"next": float("-inf"), "interval": min_interval_s}

        def check() -> bool:
            if len(done) < pending and time.monotonic() >= timing["next"]:
                before = len(done)
                self._poll(arns, done)
                grown = min(max_interval_s, max(timing["interval"] * 2, min_interval_s))
                timing["interval"] = min_interval_s if len(done) > before else grown
                timing["next"] = time.monotonic() + timing["interval"]
            return len(done) >= pending

        return check

    def wait(
        self, arns: list[str], *, timeout_s: float = 3600.0, poll_s: float = 1.0, max_poll_s: float = 30.0
    ) -> list[dict]:
        """Each execution's output (the Nova reward shape), in order; a failed execution gives
        ``{"status": "failed", "error": ...}`` (its rollout has no record: the alarm fires).

        Polls only the executions still running, backing off from ``poll_s`` to ``max_poll_s``."""
        deadline = time.monotonic() + timeout_s
        done: dict[str, dict] = {}
        delay = poll_s
        while True:
            self._poll(arns, done)
            if len(done) >= len(set(arns)):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(set(arns)) - len(done)} execution(s) still running after {timeout_s}s")
            time.sleep(delay)
            delay = min(max_poll_s, delay * 2)
        results = []
        for arn in arns:
            desc = done[arn]
            if desc["status"] == "SUCCEEDED":
                results.append(json.loads(desc["output"]))
            else:
                results.append(
                    {
                        "status": "failed",
                        "execution_status": desc["status"],
                        "error": desc.get("error"),
                        "cause": desc.get("cause"),
                    }
                )
        return results

    # -- callback turns -----------------------------------------------------------------------------

    def _request(self, body: dict[str, Any]) -> dict[str, Any]:
        """What ``respond`` gets: the ids and the conversation so far, read from the state snapshot."""
        store = self._store(str(body.get("bucket") or ""))
        snapshot = store.get_json(str(body["state_key"]))
        request = {
            "run": body.get("run"),
            "step": body.get("step"),
            "group": body.get("group"),
            "rollout": body.get("rollout"),
            "messages": snapshot["state"]["messages"],
        }
        tools_key = body.get("tools_key")
        if tools_key is not None:  # the environment offers tools: what the local OpenAI policy sends as tools=
            request["tools"] = _turn_tools(store, tools_key, str(body["state_key"]))
        return request

    def _fail(self, token: str, context: str, exc: Exception) -> bool:
        """Tell the execution its turn failed (it ends in a policy_error record); False: nothing delivered."""
        _with_retries(
            self.sfn.send_task_failure,
            taskToken=token,
            error="PolicyError",
            cause=f"{context}{type(exc).__name__}: {exc}"[:32000],
        )
        return False

    def _answer(self, body: dict[str, Any], respond: Callable[[dict], str]) -> bool:
        """Answer one turn request; True if a turn was delivered. Stale tokens are not errors."""
        token = body["task_token"]
        try:
            try:
                request = self._request(body)
            except Exception as exc:  # a transient read is retried with the message
                if _transient(exc):
                    raise
                return self._fail(token, "the turn request could not be read: ", exc)
            try:
                output = trainer_reply(respond(request))
            except Exception as exc:  # noqa: BLE001 - reported to the execution, which records it
                return self._fail(token, "", exc)
            if payload_size(output) > PAYLOAD_BUDGET:  # the whole reply, its tool calls too
                key = self._store(str(body.get("bucket") or "")).put_json(str(body["reply_key"]), output)
                output = {"text_key": key}
            # A throttled answer is sent again here: left to the queue, the turn would be generated again.
            _with_retries(self.sfn.send_task_success, taskToken=token, output=wire_json(output))
            return True
        except Exception as exc:
            if _error_code(exc) in STALE_TOKEN_ERRORS:
                return False  # the execution no longer waits for this turn (timed out, failed or answered)
            raise

    def serve_turns(
        self,
        respond: Callable[[dict], str],
        until: Callable[[], bool],
        *,
        poll_s: float = 1.0,
        timeout_s: float = 3600.0,
        keep_hidden_s: float = TURN_KEEP_HIDDEN_S,
    ) -> int:
        """Answer turn requests from the queue until ``until()``; returns how many turns were delivered.

        ``respond(request)`` gets ``{"run", "step", "group", "rollout", "messages"}``, and ``"tools"`` when the
        environment offers the model tools (its ``tool_schemas`` for the task, OpenAI-style, what the local OpenAI
        policy sends as ``tools=``: pass ``request.get("tools")`` on to the model), and returns the
        assistant turn: its text, or an assistant message with ``tool_calls`` (:func:`trainer_reply`). Up to
        ``workers`` requests are answered in parallel. If ``respond`` raises, the execution is told
        (SendTaskFailure) and ends in an error record. A request whose execution no
        longer waits (TaskTimedOut, InvalidToken, TaskDoesNotExist: e.g. a redelivered message), a second
        copy of a turn in the same batch and a malformed message are deleted and skipped. A message whose answer hit a
        transient fault (throttling, a 5xx, a dropped connection: after botocore's own retries) is left on the queue, so
        it comes back after its visibility timeout and is answered then; any other failure is raised, once
        the batch's answered messages are deleted. Transient faults of the queue itself (receiving,
        deleting) and a delete whose receipt handle expired never end the loop: at worst a turn comes
        back and is answered as stale. While a turn is being generated its message is kept
        hidden (its visibility extended every ``keep_hidden_s / 2`` seconds), so a turn that takes longer
        than the queue's visibility timeout is not delivered and generated a second time; a crashed
        trainer's turns still come back within ``keep_hidden_s``.
        """
        if self.sqs is None:
            raise ValueError("serve_turns needs the TurnRequestQueueUrl output as queue_url")
        answered = 0
        deadline = time.monotonic() + timeout_s
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            while not until():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"turn requests still pending after {timeout_s}s")
                try:
                    messages = self.sqs.receive_message(
                        QueueUrl=self.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=min(20, int(poll_s))
                    ).get("Messages", [])
                except Exception as exc:  # re-raised unless transient
                    if not _transient(exc):
                        raise
                    messages = []
                    time.sleep(max(poll_s, 1.0))
                if not messages and poll_s < 1:
                    time.sleep(poll_s)  # no long poll below one second: do not spin
                futures: list[tuple[dict[str, Any], Future[bool] | None]] = []
                tokens: set[str] = set()
                for message in messages:
                    body = _turn_request(message)
                    # SQS delivers at least once: a second copy of a turn in the same batch is not generated twice.
                    if body is None or body["task_token"] in tokens:
                        futures.append((message, None))
                        continue
                    tokens.add(body["task_token"])
                    futures.append((message, pool.submit(self._answer, body, respond)))
                self._keep_hidden([(m, f) for m, f in futures if f is not None], keep_hidden_s)
                fatal: BaseException | None = None
                for message, future in futures:
                    if future is not None:
                        try:
                            answered += bool(future.result())
                        except Exception as exc:  # noqa: BLE001 - sorted below
                            from rewardpipe.aws.lambda_support import is_transient

                            if not is_transient(exc):
                                fatal = fatal or exc
                            continue  # not deleted: redelivered after the visibility timeout
                    self._delete(message)
                if fatal is not None:
                    raise fatal
        return answered

    def _delete(self, message: dict[str, Any]) -> None:
        assert self.sqs is not None  # only serve_turns deletes, and it refuses to run without a queue
        try:
            _with_retries(self.sqs.delete_message, QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
        except Exception as exc:  # re-raised unless the message simply comes back
            if not (_transient(exc) or _error_code(exc) in EXPIRED_RECEIPT_ERRORS):
                raise

    def _keep_hidden(self, pending: list, keep_hidden_s: float) -> None:
        """Wait for the answers, extending the visibility of each message whose answer is still running."""
        assert self.sqs is not None  # only serve_turns waits, and it refuses to run without a queue
        while pending:
            wait([future for _, future in pending], timeout=keep_hidden_s / 2)
            pending = [(message, future) for message, future in pending if not future.done()]
            for message, _ in pending:
                # at worst the turn is delivered again and its late answer is stale
                with contextlib.suppress(Exception):
                    self.sqs.change_message_visibility(
                        QueueUrl=self.queue_url,
                        ReceiptHandle=message["ReceiptHandle"],
                        VisibilityTimeout=max(1, round(keep_hidden_s)),
                    )


def _same_input(old: Any, new: str) -> bool:
    try:
        return json.loads(old) == json.loads(new)
    except (TypeError, json.JSONDecodeError):
        return False
