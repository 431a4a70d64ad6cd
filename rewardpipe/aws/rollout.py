"""One function per state of the rollout workflow; the episode itself is rewardpipe.episode's.

Nothing bulky travels between states (see rewardpipe.aws.state): the episode, its transcript and the
replay turns live in S3 under ``runs/<run>/state/<attempt>/``.

States (all conversation work happens in two ``lambda:invoke.waitForTaskToken`` states)::

    StartEpisode  validate the input, store the task and replay turns, open the episode, then converse
    Converse      apply the trainer's reply (callback mode), then converse; its Next is itself
    Finished      (Pass) the execution's output
    RunCode*      a code runner (Lambda or Fargate) runs the job the conversation wrote, then Score
    RecordError   every failure ends here and writes an error record

"Converse" is :func:`rewardpipe.episode.converse` -- the same loop the local runner uses -- run until
the episode commits or ends, the next turn is the trainer's, or the Lambda's time runs short. Each
conversation state completes its own task token with the outcome (:class:`TokenDelivery`):

* the trainer's turn: the turn request goes to the queue with this state's token, and the trainer's
  SendTaskSuccess re-enters Converse (one state transition per trainer turn);
* out of time: SendTaskSuccess ``{"resume": true}`` re-enters Converse;
* committed, with a short job and the time to wait for it: the code-runner Lambda is invoked from here,
  the episode scored and its record written, then SendTaskFailure ``Rollout.Finished`` carrying the
  output leaves the loop for Finished;
* a job for Fargate (or too long to wait for here): SendTaskFailure ``Rollout.RunCode`` carrying the
  reference leaves the loop for the code-runner states and Score.

A Task state has one Next, so leaving the loop without a Choice state after every turn (one more
transition per turn) takes a named error that the loop's Catch routes; neither name is ever a failure.
A two-question replay or OpenAI rollout is two state transitions (StartEpisode, Finished), a callback
one with three trainer turns five.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from typing import TYPE_CHECKING, Any, ClassVar, Literal, cast

from pydantic import ConfigDict, Field, SerializeAsAny, field_validator, model_validator

from rewardpipe.aws.settings import Settings, open_bucket_store
from rewardpipe.aws.state import (
    PAYLOAD_BUDGET,
    PayloadTooLarge,
    StateStore,
    guard_payload,
    inputs_prefix,
    payload_size,
)
from rewardpipe.deferred import DeferredModel

# The workflow runs the configured environment (Settings.environment: ENVIRONMENT_REF, the built-in
# ask_before_coding without it), with its task model, state model, system prompt and execution job.
from rewardpipe.environment import EpisodeState, TaskRow, stored_action
from rewardpipe.execution.result import clean_text
from rewardpipe.models import MAX_ID_LENGTH, ErrorInfo, InputId, Record

if TYPE_CHECKING:
    from rewardpipe.rewards.base import Reward

TASKS_PREFIX = "tasks/"
JOBS_PREFIX = "jobs/"
# Documented limits of an execution (docs/aws.md "Limits"). The state stays in S3 whatever the size,
# but these bound an execution's history (about 7 events per trainer turn, 25,000 allowed), a
# snapshot's size and the time a rollout can take.
MAX_TURNS_LIMIT = 20
MAX_TOKENS_LIMIT = 16_384
# Time a turn that does not call an LLM endpoint may need; one that does needs the deployment's
# ``Settings.llm_turn_reserve_s`` (derived from the endpoint's HTTP timeout and retries). A Lambda with less
# time left than the next turn needs pauses and is invoked again.
QUICK_TURN_RESERVE_S = 5.0

Next = Literal["ask_trainer", "converse", "run_lambda", "run_fargate", "score"]
# Errors a conversation state completes its own task token with to leave the Converse loop (never failures).
FINISHED = "Rollout.Finished"
RUN_CODE = "Rollout.RunCode"
# SendTaskFailure's cause is at most 32,768 characters.
CAUSE_LIMIT = 32_768
# Time an inline job needs beyond its own budget: sandbox grace, S3 hand-off, scoring, the record.
INLINE_RUN_MARGIN_S = 60.0


class ExecutionResultMissing(RuntimeError):
    """The code runner finished but left no result object (crashed container, lost write)."""


class PolicyError(RuntimeError):
    """The policy failed (endpoint down, bad reply, a trainer reply that is not text)."""


class SimulatorError(RuntimeError):
    """The user simulator failed."""


def hook_failed(env: Any, hook: str, exc: Exception) -> SimulatorError:
    """An exception in one of the environment's own hooks (start, on_policy_turn, execution_job): the
    environment's failure, recorded as simulator_error and never charged to the policy. Its message is the local
    run's (:func:`rewardpipe.episode.hook_failure`, naming the hook and the user's line that raised): the same
    rollout fails with the same record locally and here."""
    from rewardpipe.episode import hook_failure

    return SimulatorError(hook_failure(env, hook, exc))


def _tools_failed(env: Any, exc: Exception) -> SimulatorError:
    """A ``tool_schemas`` that raised or returned tools no trainer can be handed (the callback path only: no
    local counterpart), worded as round thirty-two published it."""
    return SimulatorError(f"environment '{env.name}': tool_schemas failed: {type(exc).__name__}: {exc}")


# The tools a callback rollout's trainer is handed travel through S3 (tools.json, beside the snapshots): the turn
# message names the key only, so neither SQS (a message of at most 256 KiB) nor Step Functions (256 KiB a state)
# carries them. Bounded all the same: the trainer reads them at every turn and sends them with every request.
TOOLS_LIMIT = 1_048_576


def task_tools(env: Any, task: Any) -> list[dict[str, Any]] | None:
    """The environment's tools for ``task`` as the local OpenAI policy offers them (``tool_schemas(task)``), or None
    when it offers none. A ``tool_schemas`` that raises, returns something other than a list of JSON objects or more
    than :data:`TOOLS_LIMIT` bytes of them is the environment's failure (:func:`_tools_failed`)."""
    from rewardpipe.episode import call_hook

    if not callable(getattr(env, "tool_schemas", None)):
        return None
    try:
        tools = call_hook(env, "tool_schemas", task)  # as every hook is called: bounded by hook_timeout_s
        if not tools:
            return None
        listed = [dict(tool) for tool in tools]
        size = payload_size(listed)  # TypeError/ValueError: not JSON
    except Exception as exc:  # the environment's own hook
        raise _tools_failed(env, exc) from exc
    if size > TOOLS_LIMIT:
        raise _tools_failed(env, ValueError(f"the tools are {size} bytes, over {TOOLS_LIMIT}"))
    return listed


class SnapshotMismatch(RuntimeError):
    """An episode snapshot written by another environment (name or version) than the one this deployment runs:
    it is never resumed (its state would be read with the wrong model); the rollout ends in an error record."""


def storable_run_id(value: Any) -> bool:
    """A run id must be a store key segment as it is (``runs/<run>/`` is listed and decoded back into run
    ids, so it is never hashed); group and rollout ids of up to MAX_ID_LENGTH characters are always
    storable: the store gives a long one a hash-suffixed key and keeps the full id in the record
    (rewardpipe.store.encode_id, the one scheme for long ids, locally and on AWS)."""
    from rewardpipe.models import id_problem
    from rewardpipe.store import encode_id

    try:
        encode_id(value, allow_hash=False)
    except ValueError:
        return False
    return id_problem(value) is None  # the one id rule of every input (rewardpipe.models.InputId)


def usable_id(value: Any) -> bool:
    """A group, rollout or task id a record can carry: the input id rule (rewardpipe.models.InputId).
    A failure record falls back to its own ids for anything else: a lone surrogate, say, cannot even be
    written as UTF-8, and the record would be lost with it."""
    from rewardpipe.models import id_problem

    return isinstance(value, str) and 0 < len(value) <= MAX_ID_LENGTH and id_problem(value) is None


def _check_run(value: str) -> str:
    if not storable_run_id(value):
        from rewardpipe.store import MAX_SEGMENT

        raise ValueError(
            f"a run id must fit a store key (at most {MAX_SEGMENT} characters once percent-encoded) "
            f"and hold no control, format or line-separator character"
        )
    return value


class PolicySpec(DeferredModel):
    model_config = ConfigDict(extra="forbid")

    # docs/aws.md "Starting rollouts": the trainer supplies the turns unless the input says otherwise.
    mode: Literal["replay", "openai", "callback"] = "callback"
    # callback: the named turn queue the trainer's turns are asked on (the stack's TURN_CHANNELS, e.g. "nova"
    # for the Nova bridge's own queue); the trainers' turn queue when absent.
    channel: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9_-]{0,31}$")
    # replay: the assistant turns to play back, in order (or, for large ones, where the client stored them).
    turns: list[str] | None = None
    turns_key: str | None = None
    # openai: endpoint and model (default to the stack's settings), sampling parameters.
    base_url: str | None = None
    model: str | None = None
    temperature: float = Field(default=1.0, ge=0, le=2)
    max_tokens: int = Field(default=1024, ge=1, le=MAX_TOKENS_LIMIT)

    @model_validator(mode="after")
    def _mode_needs(self) -> PolicySpec:
        if self.mode == "replay" and self.turns is None and self.turns_key is None:
            raise ValueError("policy.mode 'replay' needs policy.turns (the assistant turns to replay)")
        if self.turns is not None and self.turns_key is not None:
            raise ValueError("give policy.turns or policy.turns_key, not both")
        if self.mode != "replay" and (self.turns is not None or self.turns_key is not None):
            raise ValueError(
                f"policy.turns and policy.turns_key are for policy.mode 'replay', not '{self.mode}' "
                f"(without a mode the policy is 'callback')"
            )
        if self.channel is not None and self.mode != "callback":
            raise ValueError("policy.channel names a turn queue: it only applies to policy.mode 'callback'")
        return self


class ExecutionRef(DeferredModel):
    route: Literal["lambda", "fargate", "none"]
    job_key: str | None = None
    result_key: str | None = None
    timeout_s: float | None = None


class RolloutInput(DeferredModel):
    """What an execution is started with."""

    model_config = ConfigDict(extra="forbid")

    run: str = Field(min_length=1)
    step: int = Field(default=0, ge=0)
    group: InputId
    rollout: InputId
    # The task row inline, validated at the start with the configured environment's own task model
    # (Settings.environment.task_model), or where it is stored.
    task: dict[str, Any] | None = None
    task_key: str | None = None
    policy: PolicySpec = Field(default_factory=lambda: PolicySpec(mode="callback"))
    max_turns: int | None = Field(default=None, ge=1, le=MAX_TURNS_LIMIT)

    _run = field_validator("run")(_check_run)

    @model_validator(mode="after")
    def _one_task(self) -> RolloutInput:
        if (self.task is None) == (self.task_key is None):
            raise ValueError("give exactly one of 'task' (the task inline) or 'task_key' (an S3 key under tasks/)")
        if self.task_key is not None and not self.task_key.startswith(TASKS_PREFIX):
            raise ValueError(f"task_key must be under '{TASKS_PREFIX}' in the records bucket, got {self.task_key!r}")
        return self


class StartRequest(DeferredModel):
    """StartEpisode's payload: the execution input, the execution's name (the attempt id) and the state's
    task token (absent when the handler is called directly, e.g. in tests: it then only returns its outcome)."""

    model_config = ConfigDict(extra="forbid")

    input: RolloutInput
    attempt: str = Field(min_length=1, max_length=80, pattern=r"^[0-9A-Za-z_-]+$")
    task_token: str | None = None


class ConverseRequest(DeferredModel):
    """Converse's payload. The state passes on nothing but the trainer's reply (or ``{"resume": true}``),
    so the ids come from the execution (``$$.Execution.Input.run``, ``$$.Execution.Name``) and the
    episode from its one key per attempt. ``entered`` is ``$$.State.EnteredTime``, the same for every
    retry of one entry: a retry that finds the reply already applied in this entry does not apply it twice."""

    model_config = ConfigDict(extra="ignore")

    run: str = Field(min_length=1)
    attempt: str = Field(min_length=1, max_length=80, pattern=r"^[0-9A-Za-z_-]+$")
    task_token: str | None = None
    entered: str | None = None
    retry_count: int = Field(default=0, ge=0)
    reply: dict[str, Any] = Field(default_factory=dict)


class EpisodeSnapshot(DeferredModel):
    """What is stored in S3 between states: everything a later state needs, however large.

    ``state`` is the environment's own state model; read a stored snapshot with :func:`read_snapshot`, which
    validates it with the configured environment's model after checking ``environment`` (``name@version`` of
    the environment that wrote it) is that environment's."""

    task_key: str
    policy: PolicySpec
    state: SerializeAsAny[EpisodeState]
    environment: str | None = None  # name@version of the environment that wrote it
    execution: ExecutionRef | None = None
    version: int = Field(default=0, ge=0)  # how many times a conversation step has written it
    applied_reply_at: str | None = None  # the state entry (EnteredTime) that applied the last trainer reply
    tools_key: str | None = None  # callback mode: the task's tool schemas, stored once (task_tools)


# Snapshots written before they carried their environment were all ask_before_coding's.
LEGACY_ENVIRONMENT = "ask_before_coding"


def read_snapshot(raw: Any, env: Any) -> EpisodeSnapshot:
    """A stored snapshot, its state read with ``env``'s state model. A snapshot of another environment name or
    version raises :class:`SnapshotMismatch` (never resumed); a malformed one ValueError (pydantic's)."""
    from rewardpipe.aws.settings import environment_tag

    if not isinstance(raw, dict):
        raise ValueError(f"an episode snapshot must be a JSON object, got {type(raw).__name__}")
    mine = environment_tag(env)
    written = raw.get("environment")
    if written is None:
        if env.name != LEGACY_ENVIRONMENT:
            raise SnapshotMismatch(
                f"the episode snapshot names no environment (written before snapshots carried "
                f"one, by {LEGACY_ENVIRONMENT}); this deployment runs {mine}: not resumed"
            )
    elif written != mine:
        raise SnapshotMismatch(
            f"the episode snapshot was written by environment {str(written)[:200]!r}; this "
            f"deployment runs {mine!r}: not resumed"
        )
    state = env.state_model.model_validate(raw.get("state"))
    return EpisodeSnapshot.model_validate({**raw, "state": state})


class StateRef(DeferredModel):
    """A conversation step's outcome, and what the code-runner states and Score get: small and of bounded
    size whatever the transcript holds."""

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
    # callback mode: where the trainer may put a reply too large to send (the client does it for you).
    reply_key: str | None = None

    def dump(self) -> dict[str, Any]:
        return guard_payload(self.model_dump(mode="json", exclude_none=True), "the rollout reference")


def transcript_key(state: EpisodeState) -> str:
    """``runs/<run>/transcripts/step=<n>/group=<g>/<rollout>.json``: beside the records but outside the
    ``step=<n>/`` folders the record readers list, and under the same lifecycle rule."""
    from rewardpipe.store import transcript_key as key_of

    return key_of(state.run_id, int(state.step), state.group_id, state.rollout_id)


def put_transcript(
    store: Any,
    state: EpisodeState,
    task: TaskRow | None = None,
    execution: Any = None,
    record: Record | None = None,
    env: Any = None,
) -> str:
    """Store the rollout's transcript (rewardpipe.transcripts: messages, the environment's own fields such as
    revealed spec items, executed code, verdict and scores), the same document the local runner writes;
    replayable via ``to_rollout()``. ``env``: the environment that ran it (default: the built-in one)."""
    from rewardpipe.transcripts import transcript_of_episode

    return store.put_transcript(
        transcript_of_episode(state, task, execution, record, env=env if env is not None else environment())
    )


def inline_task_key(run: str, task: dict[str, Any]) -> str:
    """Where an inline task is stored: under its id and a digest of its content. Every step of an execution
    reads its task from there, so a re-run (or another group) with a different task under the same id must
    not write the same object: a running execution would go on to score against the other task's tests."""
    import hashlib

    from rewardpipe.store import encode_id

    content = json.dumps(task, sort_keys=True, separators=(",", ":")).encode("utf-8")
    digest = hashlib.sha256(content).hexdigest()[:16]
    return f"{TASKS_PREFIX}inline/{encode_id(run)}/{encode_id(str(task.get('task_id') or 'task'))}-{digest}.json"


def validate_task(raw: Any, env: Any, where: str) -> TaskRow:
    """A task row validated with the environment's own task model. A bad row raises pydantic's ValidationError
    (a bad input: the rollout ends in an error record) titled with where the row came from and the model, so
    the record says which field of which task: ``1 validation error for task object tasks/x.json (environment
    acme_guess, GuessTask)`` then ``secret: Field required``."""
    from pydantic import ValidationError

    try:
        return env.task_model.model_validate(raw)
    except ValidationError as exc:
        title = f"{where} (environment {env.name}, {env.task_model.__name__})"
        try:
            details = [
                {
                    "type": e["type"],
                    "loc": e["loc"],
                    "input": e.get("input"),
                    **({"ctx": e["ctx"]} if "ctx" in e else {}),
                }
                for e in exc.errors()
            ]
            retitled = ValidationError.from_exception_data(title, details)  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 - an error type pydantic cannot rebuild: its own message
            raise exc from None
        raise retitled from None


def load_task(store: Any, key: str, env: Any = None) -> TaskRow:
    try:
        raw = store.get_json(key)
    except KeyError:
        raise FileNotFoundError(f"task object {key} does not exist in the records bucket") from None
    return validate_task(raw, env if env is not None else environment(), f"task object {key}")


def load_snapshot(store: Any, ref: StateRef, env: Any = None) -> tuple[StateStore, EpisodeSnapshot]:
    states = StateStore(store, ref.run, ref.attempt)
    return states, read_snapshot(states.load(ref.state_key), env if env is not None else environment())


def load_head(states: StateStore, env: Any = None) -> EpisodeSnapshot:
    return read_snapshot(states.load(states.head_key), env if env is not None else environment())


def replay_turns(snapshot: EpisodeSnapshot, states: StateStore) -> list[str]:
    if snapshot.policy.turns is not None:
        return snapshot.policy.turns
    raw = states.get(snapshot.policy.turns_key or "")
    if not isinstance(raw, list) or not all(isinstance(t, str) for t in raw):
        raise ValueError(f"{snapshot.policy.turns_key} must hold a JSON list of assistant turns")
    return raw


# --------------------------------------------------------------------------------------------------
# Policy and simulator


def _api_key(settings: Settings) -> str | None:
    from rewardpipe.aws.settings import secret_string

    return secret_string(settings.policy_api_key_secret) or None


def build_policy(snapshot: EpisodeSnapshot, settings: Settings, turns: list[str] | None = None) -> Any:
    from rewardpipe.models import Message, Rollout
    from rewardpipe.policies import OpenAIPolicy, ReplayPolicy

    spec, state = snapshot.policy, snapshot.state
    if spec.mode == "replay":
        recorded = Rollout(
            rollout_id=state.rollout_id,
            group_id=state.group_id,
            task_id=state.task_id,
            step=state.step,
            messages=[Message(role="assistant", content=t) for t in (turns if turns is not None else spec.turns or [])],
        )
        return ReplayPolicy([recorded])
    if spec.mode == "openai":
        base_url, model = spec.base_url or settings.policy_base_url, spec.model or settings.policy_model
        return OpenAIPolicy(
            base_url,
            model,
            temperature=spec.temperature,
            max_tokens=spec.max_tokens,
            client=settings.chat_client(base_url, model, _api_key(settings)),
            system_prompt=settings.environment.system_prompt,
            tools=getattr(settings.environment, "tool_schemas", None),  # as the local run offers them
        )
    raise ValueError("policy.mode 'callback' takes its turn from the trainer, not from a policy object")


def environment(settings: Settings | None = None) -> Any:
    """The environment the workflow runs: the configured one (``settings.environment``), or without settings
    the built-in ask-before-coding."""
    if settings is not None:
        return settings.environment
    from rewardpipe.envs.ask_before_coding.environment import ENVIRONMENT

    return ENVIRONMENT


def _is_ask_before_coding(env: Any) -> bool:
    from rewardpipe.envs.ask_before_coding.environment import AskBeforeCoding

    return isinstance(env, AskBeforeCoding)


def build_simulator(settings: Settings) -> Any:
    """The environment whose turns the conversation plays: the configured one; for ask-before-coding with
    SIMULATOR=openai, with an LLM playing the user through the policy endpoint."""
    env = settings.environment
    if settings.simulator == "openai" and _is_ask_before_coding(env):
        from rewardpipe.envs.ask_before_coding.environment import AskBeforeCoding

        # rewardpipe.simulator puts the moved module in its own place in sys.modules; mypy cannot follow that.
        from rewardpipe.simulator import OpenAISimulator  # type: ignore[attr-defined]

        client = settings.chat_client(settings.policy_base_url, settings.policy_model, _api_key(settings))
        return AskBeforeCoding(OpenAISimulator(settings.policy_base_url, settings.policy_model, client=client))
    return env


def _env_calls_llm(settings: Settings) -> bool:
    env = settings.environment
    return bool(env.calls_llm) or (settings.simulator == "openai" and _is_ask_before_coding(env))


def env_services(settings: Settings) -> Any:
    """What an environment's own turns get (rewardpipe.episode.EnvServices): the policy endpoint's chat client
    for an environment that declares ``calls_llm``, when the deployment has one."""
    from rewardpipe.episode import EnvServices

    env = settings.environment
    if not env.calls_llm or not (settings.policy_base_url and settings.policy_model):
        return EnvServices()
    client = settings.chat_client(settings.policy_base_url, settings.policy_model, _api_key(settings))
    return EnvServices(chat=client.complete)


class _NoPolicy:
    """Callback mode: the conversation always pauses before a policy turn, so this is never asked."""

    def next_turn(self, state: EpisodeState, task: TaskRow) -> str:  # noqa: ARG002 - the policy interface; pragma: no cover - guarded by pause
        raise PolicyError("callback mode: the trainer supplies policy turns")


def _pause_rule(mode: str, settings: Settings, remaining_s: Any) -> Any:
    def pause(state: EpisodeState) -> bool:
        if state.next_action == "policy" and mode == "callback":
            return True
        calls_llm = (mode == "openai") if state.next_action == "policy" else _env_calls_llm(settings)
        return remaining_s() < (settings.llm_turn_reserve_s if calls_llm else QUICK_TURN_RESERVE_S)

    return pause


def failed_snapshot_name(version: int) -> str:
    """Where a conversation step that fails mid-way leaves the turns it had got to (``version`` is the
    snapshot it would have written), so the error record keeps them."""
    return f"failed-{version}.json"


def _converse(
    snapshot: EpisodeSnapshot,
    task: TaskRow,
    settings: Settings,
    states: StateStore,
    version: int,
    policy: Any = None,
    simulator: Any = None,
) -> EpisodeSnapshot:
    """Run :func:`rewardpipe.episode.converse` from the snapshot; write the job if the episode commits."""
    from rewardpipe.aws.lambda_support import remaining_s
    from rewardpipe.episode import ConversationError, converse

    mode = snapshot.policy.mode
    if policy is None:
        policy = (
            _NoPolicy()
            if mode == "callback"
            else build_policy(snapshot, settings, replay_turns(snapshot, states) if mode == "replay" else None)
        )
    try:
        state = converse(
            snapshot.state,
            task,
            policy,
            simulator or build_simulator(settings),
            pause=_pause_rule(mode, settings, remaining_s),
            services=env_services(settings),
        )
    except ConversationError as exc:
        partial = snapshot.model_copy(update={"state": exc.state})
        states.put(failed_snapshot_name(version), partial.model_dump(mode="json", exclude_none=True))
        error = PolicyError if exc.kind == "policy_error" else SimulatorError
        raise error(str(exc)) from exc.cause
    snapshot = snapshot.model_copy(update={"state": state})
    if state.next_action == "execute" and snapshot.execution is None:
        try:
            snapshot.execution = prepare_job(state, task, settings, states.store)
        except Exception as exc:  # the environment's execution_job failed: its turn, not ours
            states.put(failed_snapshot_name(version), snapshot.model_dump(mode="json", exclude_none=True))
            raise hook_failed(settings.environment, "execution_job", exc) from exc
    return snapshot


def prepare_job(state: EpisodeState, task: TaskRow, settings: Settings, store: Any) -> ExecutionRef:
    """Choose the code runner for the committed code: the Lambda runner, which gets the job inline in its
    invoke payload (nothing is written), or, for a job above the routing threshold or too large for a
    synchronous invoke, Fargate, whose job is written to S3 here."""
    from rewardpipe.aws.jobs import fits_inline, job_keys, put_job
    from rewardpipe.episode import execution_job

    job = execution_job(state, task, settings.environment)
    if job is None:
        return ExecutionRef(route="none")
    if job.timeout_s <= settings.routing_threshold_s and fits_inline(job):
        return ExecutionRef(route="lambda", timeout_s=job.timeout_s)
    job_key, result_key = job_keys(state.run_id, state.rollout_id, uuid.uuid4().hex)
    put_job(store, job_key, job)
    return ExecutionRef(route="fargate", job_key=job_key, result_key=result_key, timeout_s=job.timeout_s)


def _next(snapshot: EpisodeSnapshot) -> str:
    action = snapshot.state.next_action
    if action == "policy" and snapshot.policy.mode == "callback":
        return "ask_trainer"
    if action in ("policy", "env"):
        return "converse"  # paused for time: Converse is entered again
    if action == "execute" and snapshot.execution is not None and snapshot.execution.route != "none":
        return f"run_{snapshot.execution.route}"
    return "score"


def _save(states: StateStore, snapshot: EpisodeSnapshot, ids: dict[str, Any]) -> StateRef:
    key = states.save_head(snapshot.model_dump(mode="json", exclude_none=True))
    nxt = _next(snapshot)
    return StateRef(
        **ids,
        attempt=states.attempt,
        version=snapshot.version,
        state_key=key,
        next=nxt,
        next_action=stored_action(snapshot.state.next_action),
        policy_mode=snapshot.policy.mode,
        execution=snapshot.execution,
        reply_key=states.key(f"reply-{snapshot.version}.json") if nxt == "ask_trainer" else None,
    )


class TokenDelivery:
    """Completes a conversation state's task token with its outcome (see the module docstring).

    Without a token (the handler called directly) nothing is sent: the outcome is only returned.
    """

    def __init__(self, token: str | None, settings: Settings, bucket: str, channel: str | None = None) -> None:
        self.token, self.settings, self.bucket, self.channel = token, settings, bucket, channel

    def _client(self, service: str) -> Any:
        from rewardpipe.aws.settings import aws_client

        return aws_client(service)

    def ask_trainer(self, ref: StateRef, tools_key: str | None = None) -> None:
        if self.token is None:
            return
        from rewardpipe.aws.settings import ConfigurationError

        queue_url = turn_queue(self.settings, self.channel)
        if not queue_url:
            raise ConfigurationError("environment variable TURN_QUEUE_URL (the trainer's turn queue) is not set")
        # Keys, not the transcript: the trainer reads the conversation at state_key and writes a reply too
        # large for SendTaskSuccess to reply_key.
        body = {
            "task_token": self.token,
            "run": ref.run,
            "step": ref.step,
            "group": ref.group,
            "rollout": ref.rollout,
            "bucket": self.bucket,
            "state_key": ref.state_key,
            "reply_key": ref.reply_key,
        }
        if tools_key is not None:  # the environment's tools for the task (task_tools), which the client hands respond
            body["tools_key"] = tools_key
        self._client("sqs").send_message(QueueUrl=queue_url, MessageBody=json.dumps(body))

    def resume(self) -> None:
        if self.token is not None:
            self._client("stepfunctions").send_task_success(taskToken=self.token, output=json.dumps({"resume": True}))

    def leave(self, error: str, payload: dict[str, Any]) -> None:
        if self.token is None:
            return
        cause = json.dumps(payload, separators=(",", ":"))
        if len(cause) > CAUSE_LIMIT:
            raise PayloadTooLarge(
                f"the {error} outcome is {len(cause)} characters, over SendTaskFailure's {CAUSE_LIMIT}-character cause"
            )
        self._client("stepfunctions").send_task_failure(taskToken=self.token, error=error, cause=cause)


def turn_queue(settings: Settings, channel: str | None) -> str:
    """The queue a callback rollout asks its turns on: its channel's (ValueError for a channel the stack does
    not have, so such a rollout fails at its start as bad input), else the trainers'."""
    if channel is None:
        return settings.turn_queue_url
    if channel not in settings.turn_channels:
        raise ValueError(
            f"policy.channel {channel!r} is not a turn channel of this stack "
            f"(known: {sorted(settings.turn_channels) or 'none'})"
        )
    return settings.turn_channels[channel]


class ExecutorCrash(RuntimeError):
    """The code-runner Lambda, invoked from a conversation state, failed."""


def run_inline(job: Any, settings: Settings) -> Any:
    """Invoke the code-runner Lambda with the job in the payload and wait for the result in its response
    (rewardpipe.aws.jobs: no S3 on either side). A Step Functions transition costs as much as about ten
    seconds of a 256 MB Lambda waiting, so a short job is cheaper run from a conversation state than as
    more states; the Score state runs it the same way when the conversation state had no time to wait."""
    from rewardpipe.aws.jobs import inline_request
    from rewardpipe.aws.lambda_support import TransientError
    from rewardpipe.aws.settings import ConfigurationError, aws_client
    from rewardpipe.execution.result import ExecutionResult

    if not settings.runner_function:
        raise ConfigurationError("environment variable RUNNER_FUNCTION (the code-runner Lambda) is not set")
    client = aws_client("lambda", read_timeout=int(job.timeout_s + INLINE_RUN_MARGIN_S), max_attempts=1)
    response = client.invoke(FunctionName=settings.runner_function, Payload=inline_request(job))
    try:
        answer = json.loads(response["Payload"].read() or b"{}")
    except (ValueError, AttributeError):
        answer = {}
    if response.get("FunctionError"):
        name = str(answer.get("errorType") or "Unknown")
        message = str(answer.get("errorMessage") or "")
        if name == "TransientError":
            raise TransientError(f"the code runner: {message}")
        raise ExecutorCrash(f"the code runner failed: {name}: {message}"[:2000])
    if not isinstance(answer, dict) or not isinstance(answer.get("result"), dict):
        raise ExecutionResultMissing("the lambda code runner answered without a result")
    return ExecutionResult.model_validate(answer["result"])


def _can_run_inline(ref: StateRef, settings: Settings) -> bool:
    from rewardpipe.aws.lambda_support import remaining_s

    execution = ref.execution
    return (
        ref.next == "run_lambda"
        and bool(settings.runner_function)
        and execution is not None
        and remaining_s() > (execution.timeout_s or 0) + INLINE_RUN_MARGIN_S
    )


def _conclude(
    ref: StateRef, snapshot: EpisodeSnapshot, task: TaskRow, settings: Settings, store: Any, delivery: TokenDelivery
) -> dict[str, Any]:
    """Deliver a conversation step's outcome; returns it (the handler logs it, tests read it)."""
    if ref.next == "ask_trainer":
        delivery.ask_trainer(ref, snapshot.tools_key)
    elif ref.next == "converse":
        delivery.resume()
    elif ref.next == "score" or _can_run_inline(ref, settings):
        # runs a Lambda-route job; the output leaves in SendTaskFailure's cause
        states = StateStore(store, ref.run, ref.attempt)
        output = rollout_output(*score_snapshot(store, snapshot, task, settings, states), budget=CAUSE_LIMIT)
        delivery.leave(FINISHED, output)
        done = {**ref.dump(), "next": "finished", "status": output["status"], "record_key": output["record_key"]}
        return done if delivery.token is not None else {**done, "output": output}
    else:
        delivery.leave(RUN_CODE, ref.dump())
    return ref.dump()


def _finished_already(store: Any, states: StateStore, settings: Settings, token: str | None) -> dict[str, Any] | None:
    """A conversation state retried after it scored (its answer or a write after the score failed): answered with
    the score this attempt kept, from the episode as it was scored, before anything is conversed or run again (an
    LLM turn asked again, the model's code run again, a conversation other than the one scored). None otherwise."""
    kept = kept_score(store, states.run, states.attempt)
    if kept is None:
        return None
    env = settings.environment
    snapshot = load_head(states, env)
    if kept[0].rollout_id != snapshot.state.rollout_id:
        return None
    record, key = _write_kept(store, snapshot.state, load_task(store, snapshot.task_key, env), *kept, env)
    output = rollout_output(record, key, budget=CAUSE_LIMIT)
    TokenDelivery(token, settings, settings.bucket, snapshot.policy.channel).leave(FINISHED, output)
    done = {"run": states.run, "attempt": states.attempt, "next": "finished", "status": output["status"]}
    done["record_key"] = key
    return done if token is not None else {**done, "output": output}


# --------------------------------------------------------------------------------------------------
# One function per state


def start(event: StartRequest, settings: Settings, store: Any = None) -> dict[str, Any]:
    from rewardpipe.episode import start_episode

    request, store = event.input, store or open_bucket_store(settings)
    env = settings.environment
    states = StateStore(store, request.run, event.attempt)
    finished = _finished_already(store, states, settings, event.task_token)
    if finished is not None:
        return finished
    if request.task is not None:
        task = validate_task(request.task, env, "the input's task")
        stored = task.model_dump(mode="json")
        task_key = inline_task_key(request.run, stored)
        store.put_json(task_key, stored)
    else:
        task_key = request.task_key  # type: ignore[assignment]
        task = load_task(store, task_key, env)
    policy = request.policy
    turn_queue(settings, policy.channel)  # an unknown channel is bad input, found before any turn
    if policy.turns is not None:  # stored once; the snapshot only points at them
        policy = policy.model_copy(update={"turns": None, "turns_key": states.put("replay.json", policy.turns)})
    elif policy.turns_key is not None and not policy.turns_key.startswith(inputs_prefix(request.run, event.attempt)):
        raise ValueError(
            f"policy.turns_key must be under {inputs_prefix(request.run, event.attempt)} "
            f"(where RolloutClient stores large replay turns), got {policy.turns_key!r}"
        )
    elif policy.turns_key is not None:
        raw = store.get_json(policy.turns_key, default=None)
        if raw is None:
            raise FileNotFoundError(f"policy.turns_key {policy.turns_key} does not exist in the records bucket")
        policy = policy.model_copy(update={"turns_key": states.put("replay.json", raw)})
    try:
        state = start_episode(
            task,
            env=env,
            run_id=request.run,
            step=request.step,
            group_id=request.group,
            rollout_id=request.rollout,
            max_turns=request.max_turns or settings.max_turns or min(env.max_turns, MAX_TURNS_LIMIT),
        )
    except Exception as exc:  # the environment's start() failed: the environment's fault
        raise hook_failed(env, "start", exc) from exc
    # Only the trainers' own queue is read by a client that hands the tools on (RolloutClient.serve_turns); a named
    # channel's consumer (the Nova bridge: a generate request carries messages only) never reads them.
    tools = task_tools(env, task) if policy.mode == "callback" and policy.channel is None else None
    opening = EpisodeSnapshot(
        task_key=task_key,
        policy=policy,
        state=state,
        environment=settings.environment_tag,
        tools_key=states.put("tools.json", tools) if tools else None,
    )
    snapshot = _converse(opening, task, settings, states, 0)
    ids = {"run": request.run, "step": request.step, "group": request.group, "rollout": request.rollout}
    ref = _save(states, snapshot, ids)
    return _conclude(
        ref,
        snapshot,
        task,
        settings,
        store,
        TokenDelivery(event.task_token, settings, settings.bucket, snapshot.policy.channel),
    )


def trainer_text(reply: dict[str, Any], reply_key: str, states: StateStore) -> str:
    """The trainer's turn from a callback reply: ``{"text": ...}``, or ``{"text_key": ...}`` naming the
    object the client stored at this turn's ``reply_key`` because the text was too large to send."""
    if "text_key" in reply:
        if reply["text_key"] != reply_key:
            raise PolicyError(
                f"the trainer's text_key must be this turn's reply_key {reply_key!r}, got {reply['text_key']!r}"
            )
        stored = states.get(reply_key)
        text = stored.get("text") if isinstance(stored, dict) else None
    else:
        text = reply.get("text")
    if not isinstance(text, str):
        raise PolicyError(
            'the trainer\'s callback output must be {"text": "<assistant turn>"} '
            '(or {"text_key": "<reply_key>"} for a large turn)'
        )
    return text


def trainer_turn(reply: dict[str, Any], reply_key: str, states: StateStore) -> Any:
    """The trainer's turn as the local OpenAI policy plays the same reply: its text (:func:`trainer_text`), an
    assistant Message when the reply carries ``tool_calls`` (beside ``text``, or in the ``text_key`` object), or
    None when ``{"filtered": true}`` says a content filter or a refusal took the reply's place (its episode ends
    as a content_filter stop, scored as it stands)."""
    from rewardpipe.models import Message

    if reply.get("filtered") is True:
        return None
    text = trainer_text(reply, reply_key, states)
    source = states.get(reply_key) if "text_key" in reply else reply
    calls = source.get("tool_calls") if isinstance(source, dict) else None
    if not calls:
        return text
    from rewardpipe.openai_client import EndpointError, choice_tool_calls

    try:  # the local policy's reading of a reply's calls: a list, at most MAX_TOOL_CALLS objects kept
        kept = choice_tool_calls({"message": {"tool_calls": calls}}, "the trainer's reply")
    except EndpointError as exc:
        raise PolicyError(str(exc)) from None
    return Message(role="assistant", content=text, tool_calls=kept) if kept else text


def converse_step(event: ConverseRequest, settings: Settings, store: Any = None, policy: Any = None) -> dict[str, Any]:
    """The Converse state: apply the trainer's reply (callback mode), then converse from there."""
    from rewardpipe.episode import CONTENT_FILTER, apply_policy_turn, end_without_commit

    store = store or open_bucket_store(settings)
    env = settings.environment
    states = StateStore(store, event.run, event.attempt)
    finished = _finished_already(store, states, settings, event.task_token) if event.retry_count > 0 else None
    if finished is not None:
        return finished
    snapshot = load_head(states, env)
    awaits_trainer = snapshot.policy.mode == "callback" and snapshot.state.next_action == "policy"
    task: TaskRow | None = None
    if event.reply == {"resume": True} and awaits_trainer:  # only the trainer's own turn moves it on
        raise PolicyError('the trainer\'s callback output must be {"text": "<assistant turn>"}, not a resume')
    if event.reply != {"resume": True}:
        # A retry of this very entry (same EnteredTime) after the reply was applied must not apply it again.
        applied_here = (
            event.retry_count > 0 and event.entered is not None and snapshot.applied_reply_at == event.entered
        )
        if not applied_here:
            if not awaits_trainer:
                raise PolicyError(f"a trainer reply arrived, but the episode expects '{snapshot.state.next_action}'")
            turn = trainer_turn(event.reply, states.key(f"reply-{snapshot.version}.json"), states)
            task = load_task(store, snapshot.task_key, env)
            if turn is None:  # filtered in place of the reply: the local policy's content_filter stop
                snapshot.state = end_without_commit(snapshot.state, CONTENT_FILTER)
            else:
                try:
                    snapshot.state = apply_policy_turn(snapshot.state, turn, env, task)
                except Exception as exc:  # the environment's on_policy_turn failed
                    raise hook_failed(env, "on_policy_turn", exc) from exc
            snapshot.applied_reply_at = event.entered
    if task is None:
        task = load_task(store, snapshot.task_key, env)
    snapshot = _converse(snapshot, task, settings, states, snapshot.version + 1, policy=policy)
    snapshot.version += 1
    state = snapshot.state
    ids = {"run": event.run, "step": int(state.step), "group": state.group_id, "rollout": state.rollout_id}
    ref = _save(states, snapshot, ids)
    return _conclude(
        ref,
        snapshot,
        task,
        settings,
        store,
        TokenDelivery(event.task_token, settings, settings.bucket, snapshot.policy.channel),
    )


# The scored record of an attempt, kept in its state folder before anything else is written: if a later write or the
# answer fails, RecordError answers with this score (:func:`record_failure`), never with an error record, and a retry
# of the state that scored answers with it too (:func:`score_snapshot`), running nothing again. The execution the
# score was taken on is kept beside the record's fields (under ``execution``) for the rollout's transcript.
SCORED_NAME = "scored.json"
KEPT_EXECUTION = "execution"


class KeptScoreUnreadable(RuntimeError):
    """The kept score (:data:`SCORED_NAME`) may be there but S3 did not answer its read (throttled, a server error,
    the connection cut, access denied): not "no score", so the state that scored must not score again."""


def kept_score(store: Any, run: str, attempt: str, rollout: str | None = None) -> tuple[Record, Any] | None:
    """``(record, execution or None)`` this very attempt scored and kept (:data:`SCORED_NAME`), or None: none (the
    usual case: the store says there is no such object), not a scored record, or of another run or rollout, none of
    which is a score. A read the store could not answer raises :class:`KeptScoreUnreadable` (with the store's error
    as its cause, so a transient one is retried as such): taking it for "none" would score the rollout again."""
    from rewardpipe.execution.result import ExecutionResult
    from rewardpipe.store import StoreError

    try:
        key = StateStore(store, run, attempt).key(SCORED_NAME)
    except ValueError:
        return None
    try:
        data = store.get_bytes(key)
    except KeyError:
        return None
    except StoreError as exc:
        raise KeptScoreUnreadable(f"the kept score at {key} could not be read: {exc}") from exc
    try:
        raw = json.loads(data)
        record = Record.model_validate(raw)
    except ValueError:  # not JSON, not UTF-8, not a record: written by no scoring state
        return None
    if record.status != "scored" or record.run_id != run or (rollout is not None and record.rollout_id != rollout):
        return None
    execution = None
    with contextlib.suppress(ValueError):  # the record stands without it (one kept before the execution was)
        if isinstance(raw.get(KEPT_EXECUTION), dict):
            execution = ExecutionResult.model_validate(raw[KEPT_EXECUTION])
    return record, execution


# The Lambda runner's answer, kept in the attempt's state folder as soon as it comes: the runner has no storage of its
# own (no AWS permission: docs/aws.md), so its answer is the only copy of the run. A retry of the state after
# that (the judge throttled, the kept score or the transcript not written) scores this answer: the model's code
# runs once per answered invoke, not once per retry (a second run costs a runner invocation and may give another
# verdict: a flaky test, a timeout under load). Only an answer lost on its way back is run again.
EXECUTED_NAME = "executed.json"


def _job_digest(job: Any) -> str:
    import hashlib

    return hashlib.sha256(job.model_dump_json().encode("utf-8")).hexdigest()


def kept_runner_answer(states: StateStore, job: Any) -> Any:
    """The Lambda runner's answer to ``job`` this attempt kept (:data:`EXECUTED_NAME`), or None: none kept, one of
    another job, not a result, or a read the store could not answer (then the code is run again, as before there
    was a kept answer: a verdict from a second run is better than an error record)."""
    from rewardpipe.execution.result import ExecutionResult
    from rewardpipe.store import StoreError

    try:
        raw = json.loads(states.store.get_bytes(states.key(EXECUTED_NAME)))
    except (KeyError, StoreError, ValueError):
        return None
    if not isinstance(raw, dict) or raw.get("job_sha256") != _job_digest(job):
        return None
    try:
        return ExecutionResult.model_validate(raw.get("result"))
    except ValueError:  # not written by a scoring state
        return None


def score_snapshot(
    store: Any, snapshot: EpisodeSnapshot, task: TaskRow, settings: Settings, states: StateStore | None = None
) -> tuple[Record, str]:
    """Score the episode with the configured reward and write its record and transcript. Returns (record, key).

    With ``states`` (the attempt's), a scored record is first kept there as :data:`SCORED_NAME`: a failure after the
    score (its transcript or record not written, the answer not sent, the function timed out) loses no score.

    The committed code's result comes from the Lambda runner, invoked here with the job inline (rebuilt from
    the episode, which is how it was built at the commit), or from the Fargate runner's ``result.json``.
    Also emits the execution latency metric (route = lambda | fargate) for the dashboard.
    """
    from rewardpipe.aws.jobs import get_result
    from rewardpipe.episode import execution_job, finish_episode

    env = settings.environment
    kept = kept_score(store, states.run, states.attempt, snapshot.state.rollout_id) if states is not None else None
    if kept is not None:  # a retry of the state that scored: its score stands, nothing is run or scored again
        return _write_kept(store, snapshot.state, task, *kept, env)
    execution = None
    ran_now = False  # this call ran the code (the latency metric is of runs, each counted once)
    ref_exec = snapshot.execution
    if ref_exec is not None and ref_exec.route == "lambda":
        job = execution_job(snapshot.state, task, env)
        if job is None:
            raise ExecutionResultMissing("the episode has no committed code to run")
        execution = kept_runner_answer(states, job) if states is not None else None
        if execution is None:
            execution, ran_now = run_inline(job, settings), True
            if states is not None:
                states.put(EXECUTED_NAME, {"job_sha256": _job_digest(job), "result": execution.model_dump(mode="json")})
    elif ref_exec is not None and ref_exec.route == "fargate":
        execution = get_result(store, ref_exec.result_key or "")
        if execution is None:
            raise ExecutionResultMissing(f"the {ref_exec.route} code runner left no result at {ref_exec.result_key}")
        ran_now = True  # (a retry reads the same result.json again: the Fargate task is not run again)
    if execution is not None and ref_exec is not None and ran_now:  # (an execution always comes from a route)
        from rewardpipe.aws.metrics import emit, execution_point

        emit([execution_point(ref_exec.route, execution.duration_ms)])
    record = finish_episode(snapshot.state, task, execution, settings.reward, env)
    if states is not None and record.status == "scored":
        kept_execution = execution.model_dump(mode="json") if execution is not None else None
        states.put(SCORED_NAME, {**json.loads(record.to_json()), KEPT_EXECUTION: kept_execution})
    put_transcript(store, snapshot.state, task, execution, record, env=env)
    return record, put_record_once(store, record)


def _write_kept(
    store: Any, state: EpisodeState, task: TaskRow | None, record: Record, execution: Any, env: Any
) -> tuple[Record, str]:
    """Write what a kept score's attempt may not have written: its transcript, then its record (the order
    :func:`score_snapshot` writes them in, so a scored record there already has its transcript: this attempt's, or
    a re-run's that stands). Answers with the kept score."""
    from rewardpipe.store import record_key

    key = record_key(record)
    existing = store.get_json(key, default=None)
    if not _keeps(existing, record, keep_scored=True):
        put_transcript(store, state, task, execution, record, env=env)
        _put_unless_scored(store, record, keep_scored=True)
    return record, key


def score(ref: StateRef, settings: Settings, store: Any = None) -> tuple[Record, str]:
    """The Score state's work, after a code-runner state: :func:`score_snapshot` of the referenced episode."""
    store = store or open_bucket_store(settings)
    states, snapshot = load_snapshot(store, ref, settings.environment)
    return score_snapshot(store, snapshot, load_task(store, snapshot.task_key, settings.environment), settings, states)


# What an execution's output keeps when it must shrink, stage by stage: first every component and flag, then the
# components and ``reward_error``; the record at ``record_key`` keeps every metric.
_OUTPUT_TRIM = (
    lambda m: m["type"] == "Reward" or m["name"] == "reward_error" or m["name"].startswith("error_"),
    lambda m: m["type"] == "Reward" or m["name"] == "reward_error",
)


def _output_size(out: dict[str, Any]) -> int:
    """The larger of the output's UTF-8 size (a state's output) and its length as SendTaskFailure's cause."""
    return max(payload_size(out), len(json.dumps(out, separators=(",", ":"))))


def rollout_output(record: Record, key: str, budget: int = PAYLOAD_BUDGET) -> dict[str, Any]:
    """What an execution returns: the Nova reward shape plus where the record is, within ``budget`` (a state's
    output, or :data:`CAUSE_LIMIT` for the cause a conversation state leaves its loop with). A reward's many
    diagnostics are dropped from it to fit, never a score, a component or the error flag: a scored rollout
    must not be answered as an error because its output was too large to send."""
    out = {**record.to_nova(), "status": record.status, "record_key": key}
    for keep in _OUTPUT_TRIM:
        if _output_size(out) <= budget:
            break
        out = {**out, "metrics_list": [m for m in out["metrics_list"] if keep(m)]}
    return guard_payload(out, "the rollout's output", budget)


def score_step(ref: StateRef, settings: Settings) -> dict[str, Any]:
    """The Score state: :func:`score`, returned as the execution's output."""
    return rollout_output(*score(ref, settings))


# S3 answers a conditional write that lost: 412 when the precondition failed, 409 when another
# conditional write to the key was in flight, 404 when If-Match named an object deleted meanwhile.
_LOST_CONDITION = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict", "409", "NoSuchKey", "404"})
RECORD_WRITE_ATTEMPTS = 10


def put_record_once(store: Any, record: Record) -> str:
    """Write ``record`` unless a **scored** record is already there (an error record never replaces one).

    On S3 every write is conditional, so two attempts of one rollout writing at once (a re-run's scored
    record, a late error record of the attempt before it) cannot both act on what they read: the first
    write only creates (``If-None-Match: *``); a replacement names the object it read (``If-Match:
    <ETag>``), and a write that lost reads again and decides again. Elsewhere: read, then write.
    """
    from rewardpipe.store import record_key

    key = record_key(record)
    _put_unless_scored(store, record)
    return key


def _put_unless_scored(store: Any, record: Record, keep_scored: bool = False) -> bool:
    """:func:`put_record_once`; True when ``record`` was written, False when a scored record was kept. With
    ``keep_scored`` a scored record is kept even from a scored ``record`` (one written late, after a re-run's)."""
    from rewardpipe.store import record_key

    key = record_key(record)
    client = getattr(store, "client", None)
    if client is None or not hasattr(store, "bucket"):
        existing = store.get_json(key, default=None)
        if _keeps(existing, record, keep_scored):
            return False
        store.put_record(record)
        return True
    from botocore.exceptions import ClientError

    full, data = store._full(key), record.to_json().encode("utf-8")
    condition: dict[str, str] = {"IfNoneMatch": "*"}
    for _ in range(RECORD_WRITE_ATTEMPTS):
        try:
            client.put_object(Bucket=store.bucket, Key=full, Body=data, ContentType="application/json", **condition)
            return True
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) not in _LOST_CONDITION:
                raise
        try:
            current = client.get_object(Bucket=store.bucket, Key=full)
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) not in ("NoSuchKey", "404"):
                raise
            condition = {"IfNoneMatch": "*"}  # deleted meanwhile: create it again
            continue
        try:
            existing = json.loads(current["Body"].read())
        except ValueError:
            existing = None  # unreadable: replaced like an error record
        if _keeps(existing, record, keep_scored):
            return False
        condition = {"IfMatch": current["ETag"]}
    from rewardpipe.aws.lambda_support import TransientError

    raise TransientError(f"the record at {key} kept changing during {RECORD_WRITE_ATTEMPTS} conditional writes")


def _keeps(existing: Any, record: Record, keep_scored: bool = False) -> bool:
    """True when ``existing`` (a stored record, as JSON) must stay instead of ``record``."""
    scored = isinstance(existing, dict) and existing.get("status") == "scored"
    return scored and (record.status == "error" or keep_scored)


# --------------------------------------------------------------------------------------------------
# Failures

# Which state failed decides the error kind, except for errors that name their own kind.
_KIND_BY_ERROR = {
    "ExecutionResultMissing": "executor_crash",
    "ExecutorCrash": "executor_crash",
    "PolicyError": "policy_error",
    "SimulatorError": "simulator_error",
    "EpisodeError": "orchestration_error",
    "UnknownAction": "orchestration_error",
    "PayloadTooLarge": "orchestration_error",
    "SnapshotMismatch": "environment_mismatch",
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
# The workflow's own carriers of an episode's failure (a ConversationError, a hook that raised): their message is
# the one the local run records (the kind already says which party failed), so their class name is not added.
_LOCAL_WORDING = ("SimulatorError", "PolicyError")


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
        kind = {"policy": "policy_error", "env": "simulator_error"}.get(state.next_action)
    if kind is None:
        kind = _KIND_BY_STATE.get(failed_state or "", "orchestration_error" if state is not None else "start_error")
    where = f"[{failed_state}] " if failed_state else ""
    if error_type in _LOCAL_WORDING and message:
        message = f"{where}{message}"  # the local record's message, after where it failed
    else:
        message = f"{where}{name}: {detail}" if detail and not detail.startswith(name) else f"{where}{detail or name}"
    return ErrorInfo(kind=kind, message=clean_text(message[:2000]))  # a cause may echo unencodable input


class FailedRollout(DeferredModel):
    """RecordError's input: what the failing state passed on, plus ``failed: {<state name>: {Error, Cause}}``.

    The payload is ``{"context": <that>, "attempt": <execution name>, "execution": <execution ARN>}``.
    A state whose input is a small reference passes that on; StartEpisode, whose input is the raw
    execution input (up to 256 KiB), passes on only its error, because adding the error to such an input
    could take the state's output past Step Functions' 256 KiB limit (``States.DataLimitExceeded``, which
    no Catch catches, so the execution would end without a record). Its ids are then read from the
    execution itself (:func:`with_execution_input`). Everything is optional, because this is the last
    stop of every failure: a malformed event must still produce a record.
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
    execution: str | None = None

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
        if isinstance(data.get("execution"), str) and data["execution"]:
            clean["execution"] = data["execution"]
        for name in ("attempt", "run", "group", "rollout", "task_key", "state_key", "failed_state", "execution"):
            if not isinstance(clean.get(name), str) or not clean.get(name):
                clean.pop(name, None)
        # Ids the store cannot hold are unusable like missing ones: the record goes under run "unknown"
        # (named by the execution when the run is unusable), never under an id of our own making.
        if "run" in clean and not storable_run_id(clean["run"]):
            clean.pop("run")
            clean.pop("rollout", None)
        for name in ("group", "rollout"):
            if name in clean and not usable_id(clean[name]):
                clean.pop(name)
        for name in ("step", "version"):
            if isinstance(clean.get(name), bool) or not isinstance(clean.get(name), int) or clean.get(name, 0) < 0:
                clean.pop(name, None)
        for name in ("task", "error"):
            if not isinstance(clean.get(name), dict):
                clean.pop(name, None)
        return clean


def record_failure_step(event: FailedRollout, settings: Settings) -> dict[str, Any]:
    """The RecordError state: :func:`record_failure`, returned as the execution's output."""
    from rewardpipe.aws.settings import aws_client

    return rollout_output(
        *record_failure(
            event, settings, read_execution_input=lambda e: with_execution_input(e, aws_client("stepfunctions"))
        )
    )


def with_execution_input(event: FailedRollout, sfn: Any) -> FailedRollout:
    """``event`` with the ids of the execution's own input, read with DescribeExecution (the input of a
    failed first state is not passed on: see :class:`FailedRollout`). A throttled or failing call raises
    (TransientError, retried by the state); an input that cannot be read, or is not a JSON object, leaves
    the event as it is (the record then goes under run ``unknown``, named by the execution)."""
    from botocore.exceptions import ClientError

    from rewardpipe.aws.lambda_support import is_transient

    try:
        raw = sfn.describe_execution(executionArn=event.execution)["input"]
        execution_input = json.loads(raw)
    except ClientError as exc:
        if is_transient(exc):
            raise
        return event
    except (KeyError, TypeError, ValueError):
        return event
    failed = {event.failed_state: event.error} if event.failed_state else {}
    return FailedRollout.model_validate(
        {
            "context": {"input": execution_input, "failed": failed},
            "attempt": event.attempt,
            "execution": event.execution,
        }
    )


def _failed_snapshot(store: Any, event: FailedRollout, env: Any) -> EpisodeSnapshot | None:
    """The furthest state of the episode: what a conversation step left when it failed mid-way, else
    the episode as the last step saved it (or the snapshot a Score state was given), else nothing (the
    record then has no transcript). A snapshot of another environment (``env`` None: the configured one
    cannot be loaded) counts as nothing: its state cannot be read with this environment's model."""
    from rewardpipe.store import StoreError

    if env is None:
        return None
    try:
        states = StateStore(store, event.run, event.attempt)
    except ValueError:
        return None
    head = None
    # absent, foreign, unreadable or of another environment version
    with contextlib.suppress(ValueError, FileNotFoundError, StoreError, SnapshotMismatch):
        head = read_snapshot(states.load(event.state_key or states.head_key), env)
    failed = None
    if event.failed_state == "StartEpisodeStep":
        failed = failed_snapshot_name(0)
    elif event.failed_state == "ConverseStep" and head is not None:
        failed = failed_snapshot_name(head.version + 1)
    if failed is not None:
        try:
            return read_snapshot(states.load(states.key(failed)), env)
        except (ValueError, FileNotFoundError, StoreError, SnapshotMismatch):
            pass
    return head


class _NoComponents:
    """The reward of an error record when the configured reward cannot be loaded (its error is the record's)."""

    component_names: ClassVar[list[str]] = []
    weights: ClassVar[dict[str, float]] = {}


def _configured(load: Any) -> tuple[Any, str | None]:
    """(what ``load()`` gives, None), or (None, the ConfigurationError's text): RecordError is the last stop of
    every failure and must write its record even when the deployment's configuration is what failed."""
    from rewardpipe.aws.settings import ConfigurationError

    try:
        return load(), None
    except ConfigurationError as exc:
        return None, str(exc)


def _keep_score(
    store: Any, record: Record, execution: Any, snapshot: EpisodeSnapshot | None, env: Any
) -> tuple[Record, str]:
    """Write (again) the scored record of an attempt that failed after scoring, with a transcript (of the execution
    it was scored on) if it has none, and answer with it: the failure came after the score and changes nothing."""
    from rewardpipe.aws.lambda_support import is_transient
    from rewardpipe.store import record_key

    _put_unless_scored(store, record, keep_scored=True)  # its own write, or a re-run's that came after it
    if snapshot is not None and env is not None:
        try:
            if store.get_json(transcript_key(snapshot.state), default=None) is None:
                put_transcript(store, snapshot.state, execution=execution, record=record, env=env)
        except Exception as exc:  # the record is what is answered; its transcript is worth a retry only
            if is_transient(exc):
                raise
    return record, record_key(record)


def record_failure(
    event: FailedRollout, settings: Settings, store: Any = None, read_execution_input: Any = None
) -> tuple[Record, str]:
    """Write the error record of a rollout whose execution failed anywhere.

    When the failing state passed on too little to name the rollout (StartEpisode passes only its error,
    Converse its run) and its episode cannot be loaded either, ``read_execution_input`` (an event ->
    event function, :func:`with_execution_input`) supplies the ids from the execution's own input.
    Failed executions without usable ids are told apart by the execution name; a long group or rollout
    id keeps its full value in the record under the store's hash-suffixed key; an existing scored
    record is never replaced. An attempt that failed after it scored (its transcript or record not written, its
    answer not sent, its function timed out) is answered with its score and its record written: no error record.
    """
    from rewardpipe.episode import error_record, unstarted_record

    store = store or open_bucket_store(settings)
    reward, reward_problem = _configured(lambda: settings.reward)
    env, env_problem = _configured(lambda: settings.environment)
    reward = reward if reward is not None else _NoComponents()
    snapshot = _failed_snapshot(store, event, env)
    if snapshot is None and event.rollout is None and event.execution and read_execution_input is not None:
        event = read_execution_input(event)
        snapshot = _failed_snapshot(store, event, env)
    try:
        scored = kept_score(store, event.run, event.attempt)
    except KeptScoreUnreadable:  # the states before retried the read: an error record, never a score taken again
        scored = None
    if scored is not None:  # the failure came after this attempt's score: answered with it, as it stands
        return _keep_score(store, *scored, snapshot, env)
    state = snapshot.state if snapshot is not None else None
    info = describe_failure(event.error, event.failed_state, state)
    problem = env_problem or reward_problem
    if problem and problem not in info.message:
        info = ErrorInfo(kind=info.kind, message=clean_text(f"{info.message} (configuration: {problem})"[:2000]))
    if state is not None:
        # cast: _NoComponents stands in for a reward that cannot load; the records read only its names and weights
        record = error_record(state, info.kind, info.message, cast("Reward", reward))
    else:
        task_id = "unknown"
        if event.task and usable_id(event.task.get("task_id")):
            task_id = event.task["task_id"]
        elif event.task_key and usable_id(event.task_key.rsplit("/", 1)[-1].removesuffix(".json")):
            task_id = event.task_key.rsplit("/", 1)[-1].removesuffix(".json")
        record = unstarted_record(
            run_id=event.run,
            step=event.step,
            group_id=event.group,
            rollout_id=event.rollout or event.attempt,
            task_id=task_id,
            kind=info.kind,
            message=info.message,
            reward=cast("Reward", reward),
        )
    from rewardpipe.store import record_key

    # the record first: its transcript follows it, so a scored record kept here keeps its own transcript
    if _put_unless_scored(store, record) and state is not None:
        put_transcript(store, state, record=record, env=env)
    return record, record_key(record)
