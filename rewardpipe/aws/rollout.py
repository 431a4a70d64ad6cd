"""The rollout context that travels through the state machine, and one function per state.

Every function takes the context (a dict from Step Functions), calls ONE step of rewardpipe.episode
and returns the whole new context, so the state machine only branches on ``state.next_action`` and
``execution.route``. The episode logic itself is the core's: these functions load the task, pick the
policy / simulator / reward from settings, and move JSON in and out of S3.

Context shape::

    {"run": str, "step": int, "group": str, "rollout": str,
     "task_key": "tasks/...json",                  # after StartEpisode (inline tasks are stored there)
     "policy": {"mode": "replay"|"openai"|"callback", "turns": [...], "base_url": ..., "model": ...},
     "state": EpisodeState,                         # after StartEpisode
     "execution": {"route": "lambda"|"fargate"|"none", "job_key": ..., "result_key": ..., "timeout_s": ...},
     "policy_reply": {"text": ...},                 # only right after a trainer callback
     "error": {"Error": ..., "Cause": ...}}         # only on the way into RecordError
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rewardpipe.aws.settings import Settings, open_bucket_store
from rewardpipe.episode import EpisodeState
from rewardpipe.models import ErrorInfo, Record, Task

TASKS_PREFIX = "tasks/"
JOBS_PREFIX = "jobs/"


class ExecutionResultMissing(RuntimeError):
    """The code runner finished but left no result object (crashed container, lost write)."""


class PolicySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["replay", "openai", "callback"] = "replay"
    # replay: the assistant turns to play back, in order.
    turns: list[str] | None = None
    # openai: endpoint and model (default to the stack's settings), sampling parameters.
    base_url: str | None = None
    model: str | None = None
    temperature: float = Field(default=1.0, ge=0, le=2)
    max_tokens: int = Field(default=1024, ge=1, le=65536)

    @model_validator(mode="after")
    def _mode_needs(self) -> "PolicySpec":
        if self.mode == "replay" and self.turns is None:
            raise ValueError("policy.mode 'replay' needs policy.turns (the assistant turns to replay)")
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
    max_turns: int | None = Field(default=None, ge=1, le=100)

    @model_validator(mode="after")
    def _one_task(self) -> "RolloutInput":
        if (self.task is None) == (self.task_key is None):
            raise ValueError("give exactly one of 'task' (the task inline) or 'task_key' (an S3 key under tasks/)")
        if self.task_key is not None and not self.task_key.startswith(TASKS_PREFIX):
            raise ValueError(f"task_key must be under '{TASKS_PREFIX}' in the records bucket, got {self.task_key!r}")
        return self


class RolloutContext(BaseModel):
    """What every later state receives and returns."""

    model_config = ConfigDict(extra="ignore")

    run: str
    step: int
    group: str
    rollout: str
    task_key: str
    policy: PolicySpec
    state: EpisodeState
    execution: ExecutionRef | None = None
    policy_reply: dict[str, Any] | None = None

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True, exclude={"policy_reply"})


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


# --------------------------------------------------------------------------------------------------
# One function per state


def start(event: RolloutInput, settings: Settings, store: Any = None) -> dict[str, Any]:
    from rewardpipe.episode import start_episode

    store = store or open_bucket_store(settings)
    if event.task is not None:
        task = event.task
        task_key = inline_task_key(event.run, task.task_id)
        store.put_json(task_key, task.model_dump(mode="json"))
    else:
        task_key = event.task_key  # type: ignore[assignment]
        task = load_task(store, task_key)
    state = start_episode(
        task, run_id=event.run, step=event.step, group_id=event.group, rollout_id=event.rollout,
        max_turns=event.max_turns or settings.max_turns,
    )
    ctx = RolloutContext(run=event.run, step=event.step, group=event.group, rollout=event.rollout,
                         task_key=task_key, policy=event.policy, state=state)
    return ctx.dump()


def _api_key(settings: Settings) -> str | None:
    if not settings.policy_api_key_secret:
        return None
    from rewardpipe.aws.settings import aws_client

    return aws_client("secretsmanager").get_secret_value(SecretId=settings.policy_api_key_secret)["SecretString"]


def build_policy(ctx: RolloutContext, settings: Settings) -> Any:
    from rewardpipe.models import Message, Rollout
    from rewardpipe.policies import OpenAIPolicy, ReplayPolicy

    spec = ctx.policy
    if spec.mode == "replay":
        recorded = Rollout(
            rollout_id=ctx.rollout, group_id=ctx.group, task_id=ctx.state.task_id, step=ctx.step,
            messages=[Message(role="assistant", content=t) for t in spec.turns or []],
        )
        return ReplayPolicy([recorded])
    if spec.mode == "openai":
        return OpenAIPolicy(
            spec.base_url or settings.policy_base_url, spec.model or settings.policy_model,
            api_key=_api_key(settings), temperature=spec.temperature, max_tokens=spec.max_tokens,
        )
    raise ValueError("policy.mode 'callback' takes its turn from the trainer, not from a policy object")


def policy_turn(ctx: RolloutContext, settings: Settings, store: Any = None, policy: Any = None) -> dict[str, Any]:
    from rewardpipe.episode import PolicyExhausted, apply_policy_turn, end_without_commit

    if ctx.policy_reply is not None:
        text = ctx.policy_reply.get("text")
        if not isinstance(text, str):
            raise ValueError("the trainer's callback output must be {\"text\": \"<assistant turn>\"}")
    else:
        store = store or open_bucket_store(settings)
        task = load_task(store, ctx.task_key)
        policy = policy or build_policy(ctx, settings)
        try:
            text = policy.next_turn(ctx.state, task)
        except PolicyExhausted as exc:
            ctx.state = end_without_commit(ctx.state, f"policy_exhausted: {exc}")
            return ctx.dump()
    ctx.state = apply_policy_turn(ctx.state, text)
    return ctx.dump()


def build_simulator(settings: Settings) -> Any:
    from rewardpipe.simulator import OpenAISimulator, RuleBasedSimulator

    if settings.simulator == "openai":
        return OpenAISimulator(settings.policy_base_url, settings.policy_model, api_key=_api_key(settings))
    return RuleBasedSimulator()


def simulator_turn(ctx: RolloutContext, settings: Settings, store: Any = None) -> dict[str, Any]:
    from rewardpipe.episode import apply_simulator_turn

    store = store or open_bucket_store(settings)
    ctx.state = apply_simulator_turn(ctx.state, load_task(store, ctx.task_key), build_simulator(settings))
    return ctx.dump()


def prepare_execution(ctx: RolloutContext, settings: Settings, store: Any = None) -> dict[str, Any]:
    """Write the job for the committed code to S3 and choose the back end by its time budget."""
    from rewardpipe.aws.jobs import job_keys, put_job
    from rewardpipe.episode import execution_job

    store = store or open_bucket_store(settings)
    job = execution_job(ctx.state, load_task(store, ctx.task_key))
    if job is None:
        ctx.execution = ExecutionRef(route="none")
        return ctx.dump()
    job_key, result_key = job_keys(ctx.run, ctx.rollout, uuid.uuid4().hex)
    put_job(store, job_key, job)
    route = "fargate" if job.timeout_s > settings.routing_threshold_s else "lambda"
    ctx.execution = ExecutionRef(route=route, job_key=job_key, result_key=result_key, timeout_s=job.timeout_s)
    return ctx.dump()


def score(ctx: RolloutContext, settings: Settings, store: Any = None) -> tuple[Record, str]:
    """Score the episode with the configured reward and write its record. Returns (record, key).

    Also emits the execution latency metric (route = lambda | fargate) for the dashboard.
    """
    from rewardpipe.aws.jobs import get_result
    from rewardpipe.episode import finish_episode

    store = store or open_bucket_store(settings)
    task = load_task(store, ctx.task_key)
    execution = None
    if ctx.execution is not None and ctx.execution.route != "none":
        execution = get_result(store, ctx.execution.result_key or "")
        if execution is None:
            raise ExecutionResultMissing(
                f"the {ctx.execution.route} code runner left no result at {ctx.execution.result_key}"
            )
        from rewardpipe.aws.metrics import emit, execution_point

        emit([execution_point(ctx.execution.route, execution.duration_ms)])
    record = finish_episode(ctx.state, task, execution, settings.reward)
    put_transcript(store, ctx.state, task, execution, record)
    return record, store.put_record(record)


def rollout_output(record: Record, key: str) -> dict[str, Any]:
    """What an execution returns: the Nova reward shape plus where the record is."""
    return {**record.to_nova(), "status": record.status, "record_key": key}


def score_step(ctx: RolloutContext, settings: Settings) -> dict[str, Any]:
    """The Score state: :func:`score`, returned as the execution's output."""
    return rollout_output(*score(ctx, settings))


# --------------------------------------------------------------------------------------------------
# Failures


_KIND_BY_ERROR = {
    "ExecutionResultMissing": "executor_crash",
    "EpisodeError": "orchestration_error",
    "ValidationError": "bad_input",
    "UnknownAction": "orchestration_error",
    "States.Timeout": "timeout",
}
_KIND_BY_PHASE = {
    "policy": "policy_error",
    "simulator": "simulator_error",
    "execute": "executor_crash",
    "score": "scoring_error",
}


def describe_failure(error: Any, state: EpisodeState | None) -> ErrorInfo:
    """Turn a Step Functions Catch payload ``{"Error", "Cause"}`` into the record's ErrorInfo."""
    error = error if isinstance(error, dict) else {}
    name = str(error.get("Error") or "UnknownError")
    cause = error.get("Cause")
    detail = cause if isinstance(cause, str) else json.dumps(cause) if cause is not None else ""
    try:  # Lambda failures carry a JSON cause with errorType / errorMessage
        parsed = json.loads(detail)
        if isinstance(parsed, dict) and "errorMessage" in parsed:
            detail = f"{parsed.get('errorType', name)}: {parsed['errorMessage']}"
    except (json.JSONDecodeError, TypeError):
        pass
    if state is None:
        kind = "bad_input" if name in ("ValidationError", "FileNotFoundError", "ValueError") else "start_error"
    else:
        kind = _KIND_BY_ERROR.get(name) or _KIND_BY_PHASE.get(state.next_action, "orchestration_error")
    return ErrorInfo(kind=kind, message=f"{name}: {detail}"[:2000] if detail else name)


class FailedRollout(BaseModel):
    """RecordError's input: whatever context the failing state had, plus the Catch payload."""

    model_config = ConfigDict(extra="ignore")

    run: str = Field(default="unknown", min_length=1)
    step: int = Field(default=0, ge=0)
    group: str = Field(default="unknown", min_length=1)
    rollout: str = Field(default="unknown", min_length=1)
    task: dict[str, Any] | None = None
    task_key: str | None = None
    state: dict[str, Any] | None = None
    error: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _coerce(cls, data: Any) -> Any:
        # The raw input may be malformed in any field; keep what is usable, drop the rest.
        if not isinstance(data, dict):
            return {"error": {"Error": "MalformedInput", "Cause": f"execution input was {type(data).__name__}"}}
        clean = dict(data)
        for name in ("run", "group", "rollout"):
            if not isinstance(clean.get(name), str) or not clean.get(name):
                clean.pop(name, None)
        if isinstance(clean.get("step"), bool) or not isinstance(clean.get("step"), int) or clean.get("step", 0) < 0:
            clean.pop("step", None)
        for name in ("task", "state", "error"):
            if not isinstance(clean.get(name), dict):
                clean.pop(name, None)
        if not isinstance(clean.get("task_key"), str):
            clean.pop("task_key", None)
        return clean


def record_failure_step(event: FailedRollout, settings: Settings) -> dict[str, Any]:
    """The RecordError state: :func:`record_failure`, returned as the execution's output."""
    return rollout_output(*record_failure(event, settings))


def record_failure(event: FailedRollout, settings: Settings, store: Any = None) -> tuple[Record, str]:
    """Write the error record of a rollout whose execution failed anywhere."""
    from rewardpipe.episode import error_record

    store = store or open_bucket_store(settings)
    reward = settings.reward
    state = None
    if event.state is not None:
        try:
            state = EpisodeState.model_validate(event.state)
        except ValueError:
            state = None
    info = describe_failure(event.error, state)
    if state is not None:
        record = error_record(state, info.kind, info.message, reward)
        put_transcript(store, state, record=record)
    else:
        task_id = "unknown"
        if event.task and isinstance(event.task.get("task_id"), str) and event.task["task_id"]:
            task_id = event.task["task_id"]
        elif event.task_key:
            task_id = event.task_key.rsplit("/", 1)[-1].removesuffix(".json") or "unknown"
        record = Record(
            run_id=event.run, step=event.step, group_id=event.group, rollout_id=event.rollout, task_id=task_id,
            status="error", error=info, components={name: None for name in reward.component_names},
            weights=reward.weights, aggregate=None, metrics={"assistant_turns": 0},
        )
    return record, store.put_record(record)
