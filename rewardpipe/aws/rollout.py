"""One function per state of the rollout workflow; the episode itself is rewardpipe.episode's.

Nothing bulky travels between states (see rewardpipe.aws.state): the episode, its transcript and the
replay turns live in S3 under ``runs/<run>/state/<attempt>/``, and each state passes on a small
:class:`StateRef` -- ids, the key of the current snapshot, and ``next`` (where the state machine goes
next). The Choice state only reads ``next``.

States::

    StartEpisode  validate the input, store the task and replay turns, open the episode, then converse
    Converse      apply the trainer's reply (callback mode), then converse
    AskTrainer    (SQS .waitForTaskToken, no Lambda) hand the trainer the snapshot key, wait for its turn
    RunCode*      a code runner (Lambda or Fargate) runs the job PrepareJob wrote
    Score         score, write the record and the transcript, return the Nova reward shape
    RecordError   every failure ends here and writes an error record

"Converse" is :func:`rewardpipe.episode.converse` -- the same loop the local runner uses -- run until
the episode commits or ends, pausing when the next turn is the trainer's or the Lambda's time runs
short. When the episode commits, the same invocation writes the execution job and picks its code
runner, so a two-question replay or OpenAI rollout takes four state transitions in all (Start,
Route, RunCode, Score) and each trainer turn three (AskTrainer, Converse, Route).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rewardpipe.aws.settings import Settings, open_bucket_store
from rewardpipe.aws.state import PAYLOAD_BUDGET, StateStore, guard_payload, inputs_prefix
from rewardpipe.episode import EpisodeState
from rewardpipe.models import ErrorInfo, Record, Task

TASKS_PREFIX = "tasks/"
JOBS_PREFIX = "jobs/"
# Documented limits of an execution (docs/aws.md "Limits"). The state stays in S3 whatever the size,
# but these bound an execution's history (about 14 events per trainer turn, 25,000 allowed), a
# snapshot's size and the time a rollout can take.
MAX_TURNS_LIMIT = 20
MAX_TOKENS_LIMIT = 16_384
# Time a turn that calls an LLM endpoint may need (the chat client's 60 s timeout plus margin) and one
# that does not. A Lambda with less time left than the next turn needs pauses and is invoked again.
LLM_TURN_RESERVE_S = 90.0
QUICK_TURN_RESERVE_S = 5.0

Next = Literal["ask_trainer", "converse", "run_lambda", "run_fargate", "score"]


class ExecutionResultMissing(RuntimeError):
    """The code runner finished but left no result object (crashed container, lost write)."""


class PolicyError(RuntimeError):
    """The policy failed (endpoint down, bad reply, a trainer reply that is not text)."""


class SimulatorError(RuntimeError):
    """The user simulator failed."""


def _check_id(value: str) -> str:
    from rewardpipe.store import encode_id

    encode_id(value, allow_hash=False)  # raises ValueError naming the limit when the id is too long for a key
    return value


class PolicySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["replay", "openai", "callback"] = "replay"
    # replay: the assistant turns to play back, in order (or, for large ones, where the client stored them).
    turns: list[str] | None = None
    turns_key: str | None = None
    # openai: endpoint and model (default to the stack's settings), sampling parameters.
    base_url: str | None = None
    model: str | None = None
    temperature: float = Field(default=1.0, ge=0, le=2)
    max_tokens: int = Field(default=1024, ge=1, le=MAX_TOKENS_LIMIT)

    @model_validator(mode="after")
    def _mode_needs(self) -> "PolicySpec":
        if self.mode == "replay" and self.turns is None and self.turns_key is None:
            raise ValueError("policy.mode 'replay' needs policy.turns (the assistant turns to replay)")
        if self.turns is not None and self.turns_key is not None:
            raise ValueError("give policy.turns or policy.turns_key, not both")
        return self


class ExecutionRef(BaseModel):
    route: Literal["lambda", "fargate", "none"]
    job_key: str | None = None
    result_key: str | None = None
    timeout_s: float | None = None


class RolloutInput(BaseModel):
    """What an execution is started with."""

    model_config = ConfigDict(extra="forbid")

    run: str = Field(min_length=1)
    step: int = Field(default=0, ge=0)
    group: str = Field(min_length=1)
    rollout: str = Field(min_length=1)
    task: Task | None = None
    task_key: str | None = None
    policy: PolicySpec = Field(default_factory=lambda: PolicySpec(mode="callback"))
    max_turns: int | None = Field(default=None, ge=1, le=MAX_TURNS_LIMIT)

    _ids = field_validator("run", "group", "rollout")(_check_id)

    @model_validator(mode="after")
    def _one_task(self) -> "RolloutInput":
        if (self.task is None) == (self.task_key is None):
            raise ValueError("give exactly one of 'task' (the task inline) or 'task_key' (an S3 key under tasks/)")
        if self.task_key is not None and not self.task_key.startswith(TASKS_PREFIX):
            raise ValueError(f"task_key must be under '{TASKS_PREFIX}' in the records bucket, got {self.task_key!r}")
        return self


class StartRequest(BaseModel):
    """StartEpisode's payload: the execution input and the execution's name (the attempt id)."""

    model_config = ConfigDict(extra="forbid")

    input: RolloutInput
    attempt: str = Field(min_length=1, max_length=80, pattern=r"^[0-9A-Za-z_-]+$")


class EpisodeSnapshot(BaseModel):
    """What is stored in S3 between states: everything a later state needs, however large."""

    task_key: str
    policy: PolicySpec
    state: EpisodeState
    execution: ExecutionRef | None = None


class StateRef(BaseModel):
    """What travels between states: small and of bounded size whatever the transcript holds."""

    model_config = ConfigDict(extra="ignore")

    run: str
    step: int
    group: str
    rollout: str
    attempt: str
    version: int = Field(ge=0)
    state_key: str
    next: Next
    next_action: str
    policy_mode: str
    execution: ExecutionRef | None = None
    # callback mode: where the trainer may put a reply too large to send (the client does it for you),
    # and, on the way into Converse, the trainer's reply ({"text"} or {"text_key"}).
    reply_key: str | None = None
    reply: dict[str, Any] | None = None

    def dump(self) -> dict[str, Any]:
        return guard_payload(self.model_dump(mode="json", exclude_none=True, exclude={"reply"}), "the rollout reference")


def transcript_key(state: EpisodeState) -> str:
    """``runs/<run>/transcripts/step=<n>/group=<g>/<rollout>.json``: beside the records but outside the
    ``step=<n>/`` folders the record readers list, and under the same lifecycle rule."""
    from rewardpipe.store import transcript_key as key_of

    return key_of(state.run_id, int(state.step), state.group_id, state.rollout_id)


def put_transcript(store: Any, state: EpisodeState, task: Task | None = None, execution: Any = None,
                   record: Record | None = None) -> str:
    """Store the rollout's transcript (rewardpipe.transcripts: messages, revealed spec items, executed code,
    verdict and scores), the same document the local runner writes; replayable via ``to_rollout()``."""
    from rewardpipe.transcripts import transcript_of_episode

    return store.put_transcript(transcript_of_episode(state, task, execution, record))


def inline_task_key(run: str, task_id: str) -> str:
    from rewardpipe.store import encode_id

    return f"{TASKS_PREFIX}inline/{encode_id(run)}/{encode_id(task_id)}.json"


def load_task(store: Any, key: str) -> Task:
    try:
        raw = store.get_json(key)
    except KeyError:
        raise FileNotFoundError(f"task object {key} does not exist in the records bucket") from None
    return Task.model_validate(raw)


def load_snapshot(store: Any, ref: StateRef) -> tuple[StateStore, EpisodeSnapshot]:
    states = StateStore(store, ref.run, ref.attempt)
    return states, EpisodeSnapshot.model_validate(states.load(ref.state_key))


def replay_turns(store: Any, snapshot: EpisodeSnapshot, states: StateStore) -> list[str]:
    if snapshot.policy.turns is not None:
        return snapshot.policy.turns
    raw = states.get(snapshot.policy.turns_key or "")
    if not isinstance(raw, list) or not all(isinstance(t, str) for t in raw):
        raise ValueError(f"{snapshot.policy.turns_key} must hold a JSON list of assistant turns")
    return raw


# --------------------------------------------------------------------------------------------------
# Policy and simulator


def _api_key(settings: Settings) -> str | None:
    if not settings.policy_api_key_secret:
        return None
    from rewardpipe.aws.settings import aws_client

    return aws_client("secretsmanager").get_secret_value(SecretId=settings.policy_api_key_secret)["SecretString"]


def build_policy(snapshot: EpisodeSnapshot, settings: Settings, turns: list[str] | None = None) -> Any:
    from rewardpipe.models import Message, Rollout
    from rewardpipe.policies import OpenAIPolicy, ReplayPolicy

    spec, state = snapshot.policy, snapshot.state
    if spec.mode == "replay":
        recorded = Rollout(
            rollout_id=state.rollout_id, group_id=state.group_id, task_id=state.task_id, step=state.step,
            messages=[Message(role="assistant", content=t) for t in (turns if turns is not None else spec.turns or [])],
        )
        return ReplayPolicy([recorded])
    if spec.mode == "openai":
        return OpenAIPolicy(
            spec.base_url or settings.policy_base_url, spec.model or settings.policy_model,
            api_key=_api_key(settings), temperature=spec.temperature, max_tokens=spec.max_tokens,
        )
    raise ValueError("policy.mode 'callback' takes its turn from the trainer, not from a policy object")


def build_simulator(settings: Settings) -> Any:
    from rewardpipe.simulator import OpenAISimulator, RuleBasedSimulator

    if settings.simulator == "openai":
        return OpenAISimulator(settings.policy_base_url, settings.policy_model, api_key=_api_key(settings))
    return RuleBasedSimulator()


class _NoPolicy:
    """Callback mode: the conversation always pauses before a policy turn, so this is never asked."""

    def next_turn(self, state: EpisodeState, task: Task) -> str:  # pragma: no cover - guarded by pause
        raise PolicyError("callback mode: the trainer supplies policy turns")


def _pause_rule(mode: str, settings: Settings, remaining_s: Any) -> Any:
    def pause(state: EpisodeState) -> bool:
        if state.next_action == "policy" and mode == "callback":
            return True
        calls_llm = (mode == "openai") if state.next_action == "policy" else (settings.simulator == "openai")
        return remaining_s() < (LLM_TURN_RESERVE_S if calls_llm else QUICK_TURN_RESERVE_S)

    return pause


def failed_snapshot_name(version: int) -> str:
    """Where a conversation step that fails mid-way leaves the turns it had got to (``version`` is the
    snapshot it would have written), so the error record keeps them."""
    return f"failed-{version}.json"


def _converse(snapshot: EpisodeSnapshot, task: Task, settings: Settings, states: StateStore, version: int,
              policy: Any = None, simulator: Any = None) -> EpisodeSnapshot:
    """Run :func:`rewardpipe.episode.converse` from the snapshot; write the job if the episode commits."""
    from rewardpipe.aws.lambda_support import remaining_s
    from rewardpipe.episode import ConversationError, converse

    mode = snapshot.policy.mode
    if policy is None:
        policy = _NoPolicy() if mode == "callback" else build_policy(
            snapshot, settings, replay_turns(states.store, snapshot, states) if mode == "replay" else None)
    try:
        state = converse(snapshot.state, task, policy, simulator or build_simulator(settings),
                         pause=_pause_rule(mode, settings, remaining_s))
    except ConversationError as exc:
        partial = snapshot.model_copy(update={"state": exc.state})
        states.put(failed_snapshot_name(version), partial.model_dump(mode="json", exclude_none=True))
        error = PolicyError if exc.kind == "policy_error" else SimulatorError
        raise error(str(exc)) from exc.cause
    snapshot = snapshot.model_copy(update={"state": state})
    if state.next_action == "execute" and snapshot.execution is None:
        snapshot.execution = prepare_job(state, task, settings, states.store)
    return snapshot


def prepare_job(state: EpisodeState, task: Task, settings: Settings, store: Any) -> ExecutionRef:
    """Write the job for the committed code to S3 and choose the code runner by its time budget."""
    from rewardpipe.aws.jobs import job_keys, put_job
    from rewardpipe.episode import execution_job

    job = execution_job(state, task)
    if job is None:
        return ExecutionRef(route="none")
    job_key, result_key = job_keys(state.run_id, state.rollout_id, uuid.uuid4().hex)
    put_job(store, job_key, job)
    route = "fargate" if job.timeout_s > settings.routing_threshold_s else "lambda"
    return ExecutionRef(route=route, job_key=job_key, result_key=result_key, timeout_s=job.timeout_s)


def _next(snapshot: EpisodeSnapshot) -> str:
    action = snapshot.state.next_action
    if action == "policy" and snapshot.policy.mode == "callback":
        return "ask_trainer"
    if action in ("policy", "simulator"):
        return "converse"  # paused for time: the state machine invokes Converse again
    if action == "execute" and snapshot.execution is not None and snapshot.execution.route != "none":
        return f"run_{snapshot.execution.route}"
    return "score"


def _save(states: StateStore, version: int, snapshot: EpisodeSnapshot, ids: dict[str, Any]) -> dict[str, Any]:
    key = states.save(version, snapshot.model_dump(mode="json", exclude_none=True))
    nxt = _next(snapshot)
    ref = StateRef(
        **ids, attempt=states.attempt, version=version, state_key=key, next=nxt,
        next_action=snapshot.state.next_action, policy_mode=snapshot.policy.mode, execution=snapshot.execution,
        reply_key=states.key(f"reply-{version}.json") if nxt == "ask_trainer" else None,
    )
    return ref.dump()


# --------------------------------------------------------------------------------------------------
# One function per state


def start(event: StartRequest, settings: Settings, store: Any = None) -> dict[str, Any]:
    from rewardpipe.episode import start_episode

    request, store = event.input, store or open_bucket_store(settings)
    states = StateStore(store, request.run, event.attempt)
    if request.task is not None:
        task = request.task
        task_key = inline_task_key(request.run, task.task_id)
        store.put_json(task_key, task.model_dump(mode="json"))
    else:
        task_key = request.task_key  # type: ignore[assignment]
        task = load_task(store, task_key)
    policy = request.policy
    if policy.turns is not None:  # stored once; later snapshots only point at them
        policy = policy.model_copy(update={"turns": None, "turns_key": states.put("replay.json", policy.turns)})
    elif policy.turns_key is not None and not policy.turns_key.startswith(inputs_prefix(request.run, event.attempt)):
        raise ValueError(f"policy.turns_key must be under {inputs_prefix(request.run, event.attempt)} "
                         f"(where RolloutClient stores large replay turns), got {policy.turns_key!r}")
    elif policy.turns_key is not None:
        raw = store.get_json(policy.turns_key, default=None)
        if raw is None:
            raise FileNotFoundError(f"policy.turns_key {policy.turns_key} does not exist in the records bucket")
        policy = policy.model_copy(update={"turns_key": states.put("replay.json", raw)})
    state = start_episode(
        task, run_id=request.run, step=request.step, group_id=request.group, rollout_id=request.rollout,
        max_turns=request.max_turns or settings.max_turns,
    )
    snapshot = _converse(EpisodeSnapshot(task_key=task_key, policy=policy, state=state), task, settings, states, 0)
    ids = {"run": request.run, "step": request.step, "group": request.group, "rollout": request.rollout}
    return _save(states, 0, snapshot, ids)


def trainer_text(ref: StateRef, states: StateStore) -> str:
    """The trainer's turn from a callback reply: ``{"text": ...}``, or ``{"text_key": ...}`` naming the
    object the client stored at this turn's ``reply_key`` because the text was too large to send."""
    reply = ref.reply or {}
    if "text_key" in reply:
        if reply["text_key"] != ref.reply_key:
            raise PolicyError(f"the trainer's text_key must be this turn's reply_key {ref.reply_key!r}, "
                              f"got {reply['text_key']!r}")
        stored = states.get(ref.reply_key)
        text = stored.get("text") if isinstance(stored, dict) else None
    else:
        text = reply.get("text")
    if not isinstance(text, str):
        raise PolicyError("the trainer's callback output must be {\"text\": \"<assistant turn>\"} "
                          "(or {\"text_key\": \"<reply_key>\"} for a large turn)")
    return text


def converse_step(ref: StateRef, settings: Settings, store: Any = None, policy: Any = None) -> dict[str, Any]:
    """The Converse state: apply the trainer's reply (callback mode), then converse from there."""
    from rewardpipe.episode import apply_policy_turn

    store = store or open_bucket_store(settings)
    states, snapshot = load_snapshot(store, ref)
    if ref.reply is not None:
        if snapshot.state.next_action != "policy":
            raise PolicyError(f"a trainer reply arrived, but the episode expects '{snapshot.state.next_action}'")
        snapshot.state = apply_policy_turn(snapshot.state, trainer_text(ref, states))
    task = load_task(store, snapshot.task_key)
    snapshot = _converse(snapshot, task, settings, states, ref.version + 1, policy=policy)
    return _save(states, ref.version + 1, snapshot, ref.model_dump(include={"run", "step", "group", "rollout"}))


def score(ref: StateRef, settings: Settings, store: Any = None) -> tuple[Record, str]:
    """Score the episode with the configured reward and write its record. Returns (record, key).

    Also emits the execution latency metric (route = lambda | fargate) for the dashboard.
    """
    from rewardpipe.aws.jobs import get_result
    from rewardpipe.episode import finish_episode

    store = store or open_bucket_store(settings)
    _, snapshot = load_snapshot(store, ref)
    task = load_task(store, snapshot.task_key)
    execution = None
    ref_exec = snapshot.execution
    if ref_exec is not None and ref_exec.route != "none":
        execution = get_result(store, ref_exec.result_key or "")
        if execution is None:
            raise ExecutionResultMissing(f"the {ref_exec.route} code runner left no result at {ref_exec.result_key}")
        from rewardpipe.aws.metrics import emit, execution_point

        emit([execution_point(ref_exec.route, execution.duration_ms)])
    record = finish_episode(snapshot.state, task, execution, settings.reward)
    put_transcript(store, snapshot.state, task, execution, record)
    return record, put_record_once(store, record)


def rollout_output(record: Record, key: str) -> dict[str, Any]:
    """What an execution returns: the Nova reward shape plus where the record is."""
    return guard_payload({**record.to_nova(), "status": record.status, "record_key": key}, "the rollout's output")


def score_step(ref: StateRef, settings: Settings) -> dict[str, Any]:
    """The Score state: :func:`score`, returned as the execution's output."""
    return rollout_output(*score(ref, settings))


def put_record_once(store: Any, record: Record) -> str:
    """Write ``record`` unless a **scored** record is already there (an error record never replaces one).

    On S3 the first write is conditional (``If-None-Match: *``, so two writers cannot both think they
    were first); when an object exists it is read, kept if scored, and replaced otherwise (a scored
    record replaces an earlier attempt's error record).
    """
    from rewardpipe.store import record_key

    key = record_key(record)
    data = record.to_json().encode("utf-8")
    client = getattr(store, "client", None)
    if client is not None and hasattr(store, "bucket"):
        from botocore.exceptions import ClientError

        full = store._full(key)
        try:
            client.put_object(Bucket=store.bucket, Key=full, Body=data, ContentType="application/json", IfNoneMatch="*")
            return key
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                raise
    existing = store.get_json(key, default=None)
    if record.status == "error" and isinstance(existing, dict) and existing.get("status") == "scored":
        return key
    return store.put_record(record)


# --------------------------------------------------------------------------------------------------
# Failures

# Which state failed decides the error kind, except for errors that name their own kind.
_KIND_BY_ERROR = {
    "ExecutionResultMissing": "executor_crash",
    "PolicyError": "policy_error",
    "SimulatorError": "simulator_error",
    "EpisodeError": "orchestration_error",
    "UnknownAction": "orchestration_error",
    "PayloadTooLarge": "orchestration_error",
    "States.Timeout": "timeout",
    "States.HeartbeatTimeout": "timeout",
}
_KIND_BY_STATE = {
    "StartEpisodeStep": "start_error",
    "AskTrainer": "policy_error",
    "RunCodeLambda": "executor_crash",
    "RunCodeFargate": "executor_crash",
    "ScoreStep": "scoring_error",
}
_BAD_INPUT_ERRORS = ("ValidationError", "FileNotFoundError", "ValueError")


def _detail(name: str, cause: Any) -> tuple[str, str, str]:
    """(error type, its message, "type: message") from a Catch payload; Lambda failures carry a JSON cause."""
    detail = cause if isinstance(cause, str) else json.dumps(cause) if cause is not None else ""
    kind_name, message = name, detail
    try:
        parsed = json.loads(detail)
        if isinstance(parsed, dict) and "errorMessage" in parsed:
            kind_name, message = str(parsed.get("errorType") or name), str(parsed["errorMessage"])
            detail = f"{kind_name}: {message}"
    except (json.JSONDecodeError, TypeError):
        pass
    return kind_name, message, detail


def describe_failure(error: Any, failed_state: str | None, state: EpisodeState | None) -> ErrorInfo:
    """Turn a Step Functions Catch payload ``{"Error", "Cause"}`` into the record's ErrorInfo.

    ``failed_state`` is the name of the state whose Catch fired (the Catch puts the payload under
    ``$.failed.<state name>``); the message starts with it, so an operator knows where to look.
    """
    error = error if isinstance(error, dict) else {}
    name = str(error.get("Error") or "UnknownError")
    error_type, message, detail = _detail(name, error.get("Cause"))
    # A retried fault that never cleared arrives as TransientError "<OriginalType>: ..."
    original = message.split(":", 1)[0].strip() if error_type == "TransientError" else error_type
    kind = _KIND_BY_ERROR.get(name) or _KIND_BY_ERROR.get(original)
    if kind is None and failed_state == "StartEpisodeStep" and original in _BAD_INPUT_ERRORS:
        kind = "bad_input"
    if kind is None and failed_state == "ConverseStep" and state is not None:
        kind = {"policy": "policy_error", "simulator": "simulator_error"}.get(state.next_action)
    if kind is None:
        kind = _KIND_BY_STATE.get(failed_state or "", "orchestration_error" if state is not None else "start_error")
    where = f"[{failed_state}] " if failed_state else ""
    message = f"{where}{name}: {detail}" if detail and not detail.startswith(name) else f"{where}{detail or name}"
    return ErrorInfo(kind=kind, message=message[:2000])


class FailedRollout(BaseModel):
    """RecordError's input: whatever the failing state had, plus ``failed: {<state name>: {Error, Cause}}``.

    The payload is ``{"context": <that>, "attempt": <execution name>}``. Everything is optional,
    because this is the last stop of every failure: a malformed event must still produce a record.
    """

    model_config = ConfigDict(extra="ignore")

    attempt: str = Field(default="unknown-execution", min_length=1)
    run: str = Field(default="unknown", min_length=1)
    step: int = Field(default=0, ge=0)
    group: str = Field(default="unknown", min_length=1)
    rollout: str | None = None
    task: dict[str, Any] | None = None
    task_key: str | None = None
    state_key: str | None = None
    version: int | None = None
    failed_state: str | None = None
    error: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _coerce(cls, data: Any) -> Any:
        # The raw input may be malformed in any field; keep what is usable, drop the rest.
        if not isinstance(data, dict):
            return {"error": {"Error": "MalformedInput", "Cause": f"RecordError payload was {type(data).__name__}"}}
        context = data.get("context", data)
        attempt = data.get("attempt") if isinstance(data.get("attempt"), str) and data.get("attempt") else None
        if not isinstance(context, dict):
            malformed = {"error": {"Error": "MalformedInput", "Cause": f"execution input was {type(context).__name__}"}}
            return {**malformed, "attempt": attempt} if attempt else malformed
        # StartEpisode's input is the raw execution input; later states carry a StateRef.
        clean = dict(context.get("input", context)) if isinstance(context.get("input"), dict) else dict(context)
        failed = context.get("failed")
        if isinstance(failed, dict) and failed:
            clean["failed_state"], clean["error"] = next(iter(failed.items()))
        elif "error" in context:
            clean["error"] = context["error"]
        if attempt:
            clean["attempt"] = attempt
        for name in ("attempt", "run", "group", "rollout", "task_key", "state_key", "failed_state"):
            if not isinstance(clean.get(name), str) or not clean.get(name):
                clean.pop(name, None)
        for name in ("step", "version"):
            if isinstance(clean.get(name), bool) or not isinstance(clean.get(name), int) or clean.get(name, 0) < 0:
                clean.pop(name, None)
        for name in ("task", "error"):
            if not isinstance(clean.get(name), dict):
                clean.pop(name, None)
        return clean


def storable_id(value: str) -> str:
    """``value`` if it can be a store key segment, else a shortened, hash-suffixed form of it (so an
    over-long id still gets its error record, at a key no other id shares)."""
    from rewardpipe.store import encode_id

    try:
        encode_id(value, allow_hash=False)  # the store would hash it too; this form keeps the key short
        return value
    except ValueError:
        digest = hashlib.sha256(value.encode("utf-8")).hexdigest()[:16]
        return f"{value[:60]}~{digest}"


def record_failure_step(event: FailedRollout, settings: Settings) -> dict[str, Any]:
    """The RecordError state: :func:`record_failure`, returned as the execution's output."""
    return rollout_output(*record_failure(event, settings))


def _failed_snapshot(store: Any, event: FailedRollout) -> EpisodeSnapshot | None:
    """The furthest state of the episode: what a conversation step left when it failed mid-way, else
    the snapshot the failing state was given, else nothing (the record then has no transcript)."""
    from rewardpipe.store import StoreError

    keys = []
    try:
        states = StateStore(store, event.run, event.attempt)
    except ValueError:
        return None
    if event.failed_state == "StartEpisodeStep":
        keys.append(states.key(failed_snapshot_name(0)))
    elif event.failed_state == "ConverseStep" and isinstance(event.version, int):
        keys.append(states.key(failed_snapshot_name(event.version + 1)))
    if event.state_key is not None:
        keys.append(event.state_key)
    for key in keys:
        try:
            return EpisodeSnapshot.model_validate(states.load(key))
        except (ValueError, FileNotFoundError, StoreError):  # absent, foreign or unreadable: try the next
            continue
    return None


def record_failure(event: FailedRollout, settings: Settings, store: Any = None) -> tuple[Record, str]:
    """Write the error record of a rollout whose execution failed anywhere.

    Failed executions without ids are told apart by the execution name; over-long ids are shortened
    with a hash suffix; an existing scored record is never replaced.
    """
    from rewardpipe.episode import error_record, failure_record

    store = store or open_bucket_store(settings)
    reward = settings.reward
    snapshot = _failed_snapshot(store, event)
    state = snapshot.state if snapshot is not None else None
    info = describe_failure(event.error, event.failed_state, state)
    if state is not None:
        record = error_record(state, info.kind, info.message, reward)
        put_transcript(store, state, record=record)
    else:
        task_id = "unknown"
        if event.task and isinstance(event.task.get("task_id"), str) and event.task["task_id"]:
            task_id = event.task["task_id"]
        elif event.task_key:
            task_id = event.task_key.rsplit("/", 1)[-1].removesuffix(".json") or "unknown"
        record = failure_record(
            run_id=storable_id(event.run), step=event.step, group_id=storable_id(event.group),
            rollout_id=storable_id(event.rollout or event.attempt), task_id=task_id,
            kind=info.kind, message=info.message, reward=reward, metrics={"assistant_turns": 0},
        )
    return record, put_record_once(store, record)
