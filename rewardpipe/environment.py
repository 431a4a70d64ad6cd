"""The environment protocol (API v1): what a multi-turn task looks like to rewardpipe.

A user's environment subclasses :class:`Environment` in their own package::

    class Guess(Environment):
        name = "guess_number"
        version = "1"
        task_model = GuessTask          # a TaskRow subclass: task_id, prompt and the env's own fields
        state_model = GuessState        # an EpisodeState subclass: ids, messages, next_action + its own fields
        max_turns = 5
        reward = GUESS_REWARD           # a rewardpipe.Reward

        def on_policy_turn(self, state, task, text): ...   # after the platform appended the assistant turn
        def respond(self, state, task, ctx): ...           # the environment's own messages

    ENVIRONMENT = Guess()

Every hook returns a **new** state (``state.evolve(...)`` / ``state.append(...)``) and leaves its inputs as they
are; a state must survive a round trip through JSON (it is paused between Lambda invocations and replayed).
``next_action`` says who acts next:

* ``"policy"``: the model speaks (what ``start`` and ``respond`` usually leave);
* ``"env"``: the environment speaks (what ``on_policy_turn`` usually leaves); stored as ``"simulator"``,
  the literal older snapshots carry;
* ``"execute"``: the episode is over and :meth:`Environment.execution_job` gives the sandbox job to run;
* ``"score"``: the episode is over, nothing to run.

The platform keeps for itself: the turn limit (``max_turns``, or ``--max-turns``; end reason ``turn_limit``),
the classification of failures (``policy_error``, ``simulator_error`` for the environment's own turn, ...),
routing jobs to the sandbox, the record and the transcript.
"""

from __future__ import annotations

import hashlib
import inspect
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Generic, Literal, Self, TypeVar, cast

from pydantic import ConfigDict, Field, field_serializer, field_validator

from rewardpipe.deferred import DeferredModel
from rewardpipe.models import Message, RolloutIdentity, TaskId

if TYPE_CHECKING:  # pragma: no cover
    from rewardpipe.execution.result import ExecutionJob
    from rewardpipe.policies import ScriptedPolicy
    from rewardpipe.rewards.base import Reward

API_VERSION = 1
DEFAULT_MAX_TURNS = 6
MAX_TURNS = 100  # assistant turns one episode may take; also the CLI's --max-turns bound
#: The most characters of one message an environment's hook adds (an observation) that are kept, by default: a longer
#: one is cut, with a note saying so (see ``Environment.max_observation_chars``).
MAX_OBSERVATION_CHARS = 200_000
#: The most messages one call of an environment's hook (``start``, ``on_policy_turn``, ``respond``) adds that are kept,
#: by default: the ones past it are dropped, with a note saying so (see ``Environment.max_observation_messages``).
#: Above the 64 tool calls a policy's reply keeps (``openai_client.MAX_TOOL_CALLS``), each answered by a message.
MAX_OBSERVATION_MESSAGES = 100
#: The most characters all the messages one call of an environment's hook adds keep together, by default: the messages
#: past it are dropped like those past ``max_observation_messages`` (the first is always kept, cut to
#: ``max_observation_chars``); see ``Environment.max_observation_total_chars``.
MAX_OBSERVATION_TOTAL_CHARS = 1_000_000

NextAction = Literal["policy", "env", "execute", "score"]
#: How each next action is written in a stored state (older snapshots call the environment "simulator").
STORED_ACTION = {"policy": "policy", "env": "simulator", "execute": "execute", "score": "score"}
_READ_ACTION = {"simulator": "env"}
#: What on_policy_turn and respond may leave as next_action.
AFTER_POLICY_TURN = frozenset({"env", "execute", "score"})
AFTER_ENV_TURN = frozenset({"policy", "execute", "score"})


class PolicyExhausted(Exception):
    """A policy has no further turn to give (e.g. a replayed transcript ended)."""


class ContextLimitReached(PolicyExhausted):
    """The conversation no longer fits the policy model's context window (the endpoint refused it as too
    long): the episode ends there, end reason ``context_limit``, and is scored as it stands, as at the turn
    limit. Raised by ``OpenAIPolicy``; a policy of your own may raise it too. Raised before the model's first turn
    (the task itself, or ``max_tokens``, leaves no room) it is a ``policy_error``: nothing of the model's to score."""


def stored_action(action: str) -> str:
    """``next_action`` as a stored snapshot writes it (``env`` is ``simulator`` there)."""
    return STORED_ACTION.get(action, action)


@dataclass(frozen=True)
class RolloutIds:
    """What names one rollout."""

    run_id: str
    step: int
    group_id: str
    rollout_id: str
    task_id: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "step": self.step,
            "group_id": self.group_id,
            "rollout_id": self.rollout_id,
            "task_id": self.task_id,
        }


NonEmptyText = Annotated[str, Field(min_length=1)]
NonEmptyMessages = Annotated[list[Message], Field(min_length=1)]


class TaskRow(DeferredModel):
    """One line of a task file: ``task_id``, the ``prompt`` (text, or chat messages) and, in a subclass, the
    environment's own fields (hidden ones included: the model only ever sees what the environment shows it).
    Unknown fields are refused (``extra="forbid"``), so a typo in a task file is an error naming the line."""

    model_config = ConfigDict(extra="forbid")

    task_id: TaskId  # an id less the room of the ids run and doctor make from it (models.MAX_TASK_ID_LENGTH)
    prompt: NonEmptyText | NonEmptyMessages

    def prompt_messages(self) -> list[Message]:
        """The conversation the model starts from: the prompt as one user message, or its messages."""
        prompt = self.prompt
        if isinstance(prompt, str):
            return [Message(role="user", content=prompt)]
        return list(prompt)


class EpisodeState(RolloutIdentity):
    """A rollout in progress: its ids, the conversation so far and who acts next. An environment's state
    model subclasses it with its own (JSON-serialisable) fields.

    The ids, ``max_turns``, ``opening_turns``, ``observations_dropped`` and ``end_reason`` are the platform's: it
    fills them in after ``start``. ``opening_turns`` counts the assistant messages the opening holds (a few-shot
    prompt's examples): they are the task's, not the model's turns. ``observations_dropped`` counts the messages
    hooks added past ``max_observation_messages`` in one call, which the platform dropped."""

    model_config = ConfigDict(extra="forbid")

    run_id: str = ""
    step: int = 0
    group_id: str = ""
    rollout_id: str = ""
    task_id: str = ""
    messages: list[Message] = Field(default_factory=list)
    max_turns: int = Field(default=DEFAULT_MAX_TURNS, ge=1, le=MAX_TURNS)
    opening_turns: int = Field(default=0, ge=0)
    observations_dropped: int = Field(default=0, ge=0)
    next_action: NextAction = "policy"
    end_reason: str | None = None

    @field_validator("next_action", mode="before")
    @classmethod
    def _read_action(cls, value: Any) -> Any:
        return _READ_ACTION.get(value, value) if isinstance(value, str) else value

    @field_serializer("next_action")
    def _write_action(self, value: str) -> str:
        return stored_action(value)

    @property
    def assistant_turns(self) -> int:
        """How many turns the policy has taken (the assistant messages of the opening, a few-shot prompt's
        examples, are not among them)."""
        # (asked several times a turn: kept lean)
        return list(map(_ROLE, self.messages)).count("assistant") - self.opening_turns

    @property
    def ids(self) -> RolloutIds:
        return RolloutIds(self.run_id, self.step, self.group_id, self.rollout_id, self.task_id)

    def evolve(self, **changes: Any) -> Self:
        """A new state with ``changes``; this one is left as it is. Lists you change must be new lists
        (``state.evolve(guesses=[*state.guesses, guess])``), since the copy shares unchanged values. A name that
        is not a field of the state is an error (a typo would otherwise be lost on the next JSON round trip);
        values are not validated (doctor checks that the state survives JSON)."""
        cls = type(self)
        fields = cls.__pydantic_fields__
        if not changes.keys() <= fields.keys():
            name = next(name for name in changes if name not in fields)
            raise AttributeError(f"{cls.__name__} has no field '{name}' (fields: {', '.join(fields)})")
        # model_copy(update=...), without its general cases (deep copies, extra fields, private attributes):
        # the platform copies a state several times a turn.
        new = cls.__new__(cls)
        values = self.__dict__.copy()
        values.update(changes)
        _set(new, "__dict__", values)
        _set(new, "__pydantic_extra__", None)
        _set(new, "__pydantic_fields_set__", self.__pydantic_fields_set__ | changes.keys())
        _set(new, "__pydantic_private__", None)
        return new

    def append(self, *messages: Message | Mapping[str, Any], **changes: Any) -> Self:
        """A new state with ``messages`` added to the conversation (and ``changes`` applied)."""
        added = [m if isinstance(m, Message) else Message.model_validate(m) for m in messages]
        return self.evolve(**changes, messages=[*self.messages, *added])


_set = object.__setattr__
_ROLE = attrgetter("role")
ChatFn = Callable[..., str]


@dataclass(frozen=True)
class EnvContext:
    """What :meth:`Environment.respond` gets besides the state and the task.

    * ``seed``: stable for one rollout and turn (a retried step gets the same), for an environment that
      needs randomness; ``rng()`` is a ``random.Random`` seeded with it;
    * ``chat(messages, **params) -> str``: rewardpipe's chat client (an OpenAI-compatible endpoint the run
      is configured with), for an environment that talks to an LLM (declare ``calls_llm = True``);
    * ``ids`` and ``turn`` (assistant turns so far)."""

    ids: RolloutIds
    turn: int
    seed: int
    chat_fn: ChatFn | None = None

    def rng(self) -> random.Random:
        return random.Random(self.seed)

    def chat(self, messages: Sequence[Mapping[str, Any] | Message], **params: Any) -> str:
        if self.chat_fn is None:
            raise RuntimeError(
                "this environment asked for an LLM, but the run has no chat endpoint: give "
                "--sim-base-url and --sim-model (or REWARDPIPE_SIM_BASE_URL / REWARDPIPE_SIM_MODEL)"
            )
        plain = [m.model_dump(mode="json") if isinstance(m, Message) else dict(m) for m in messages]
        return self.chat_fn(plain, **params)


def turn_seed(seed: int, ids: RolloutIds, turn: int) -> int:
    digest = hashlib.sha256(f"{seed}:{ids.run_id}:{ids.step}:{ids.rollout_id}:{turn}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


class DeferredSeedContext(EnvContext):
    """An :class:`EnvContext` whose ``seed`` (``turn_seed`` of the run's seed) is worked out the first time it
    is read: the platform builds a context every environment turn, and most environments never read it."""

    def __init__(self, ids: RolloutIds, turn: int, run_seed: int, chat_fn: ChatFn | None = None) -> None:
        _set(self, "ids", ids)
        _set(self, "turn", turn)
        _set(self, "chat_fn", chat_fn)
        _set(self, "_run_seed", run_seed)

    def __getattr__(self, name: str) -> Any:  # only reached while ``seed`` has not been set
        if name != "seed":
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        seed = turn_seed(self._run_seed, self.ids, self.turn)
        _set(self, "seed", seed)
        return seed


# An environment's own state and task types (its state_model and task_model): its hooks take and return them.
StateT = TypeVar("StateT", bound=EpisodeState)
TaskT = TypeVar("TaskT", bound=TaskRow)


class Environment(Generic[StateT, TaskT]):
    """Base class of a multi-turn environment (see the module docstring).

    Class attributes: ``name`` (short name), ``version`` (written to records' manifest and snapshots),
    ``task_model`` (a :class:`TaskRow` subclass), ``state_model`` (an :class:`EpisodeState` subclass),
    ``max_turns`` (the turn limit the platform enforces), ``reward`` (the default
    :class:`rewardpipe.Reward`), ``calls_llm`` (``respond`` talks to an LLM through ``ctx.chat``),
    ``system_prompt`` (what an LLM policy is told before the task's prompt; None: nothing),
    ``collapse_scenario`` (the scenario ``--collapse-from-step`` makes every rollout play),
    ``hook_timeout_s`` (the most seconds one call of a hook may take; None, the default: no limit),
    ``max_observation_chars`` (the most characters of one message ``start`` opens with or ``on_policy_turn`` or
    ``respond`` adds that are kept: a longer one is cut, with a note in it, and the record's ``env_observations_cut``
    counts such messages), ``max_observation_messages`` (the most messages one call of those hooks adds that are
    kept: the ones past it are dropped, a note at the end of the last one kept says so, and the record's
    ``env_observations_dropped`` counts them), ``max_observation_total_chars`` (the most characters the messages of
    one call of those hooks keep together: the messages past it are dropped as those past ``max_observation_messages``
    are, and counted with them; the first message is always kept).
    """

    name: ClassVar[str] = ""
    version: ClassVar[str] = "0"
    api: ClassVar[int] = API_VERSION
    task_model: ClassVar[type[TaskRow]] = TaskRow
    state_model: ClassVar[type[EpisodeState]] = EpisodeState
    max_turns: ClassVar[int] = DEFAULT_MAX_TURNS
    reward: ClassVar[Reward]
    calls_llm: ClassVar[bool] = False
    system_prompt: ClassVar[str | None] = None
    collapse_scenario: ClassVar[str | None] = None
    # A hook (start, on_policy_turn, respond, execution_job, metrics, transcript_fields) still running after this
    # many seconds makes its rollout a simulator_error (a late metrics or transcript_fields only leaves its values
    # out) and the run goes on; the call is abandoned in a thread of its own (Python cannot stop one). None: hooks
    # run in the caller's thread, unbounded, at no cost per call.
    hook_timeout_s: ClassVar[float | None] = None
    # An observation is bounded as the platform's other inputs are: a respond() returning millions of characters
    # (a tool dumping a file, a simulator echoing the model's padding) put them whole into the state, the policy's
    # request, the transcript and the state paused on AWS.
    max_observation_chars: ClassVar[int] = MAX_OBSERVATION_CHARS
    # ... and so is the number of messages one hook call adds: a respond() appending 20,000 messages of 1,000
    # characters each (every one within max_observation_chars) made a 158 MB store for six rollouts.
    max_observation_messages: ClassVar[int] = MAX_OBSERVATION_MESSAGES
    # ... and so is their total: 100 messages within max_observation_chars each still made 20 million characters a call.
    max_observation_total_chars: ClassVar[int] = MAX_OBSERVATION_TOTAL_CHARS

    # -- the episode ------------------------------------------------------------------------------------

    def start(self, task: TaskT) -> StateT:
        """The opening state; by default the task's prompt as the conversation and nothing else."""
        return cast(StateT, self.state_model(messages=task.prompt_messages()))

    def on_policy_turn(self, state: StateT, task: TaskT, text: str) -> StateT:  # noqa: ARG002 - Environment hook: its signature is the public API v1; the default ignores them
        """Called once the platform has appended the model's turn (``state.messages[-1]``, its text is
        ``text``): decide what happens next (``env``, ``execute`` or ``score``). Default: the environment
        answers."""
        return state.evolve(next_action="env")

    def respond(self, state: StateT, task: TaskT, ctx: EnvContext) -> StateT:
        """Append the environment's own messages (user or tool roles) and say who acts next (``policy``,
        ``execute`` or ``score``)."""
        raise NotImplementedError(
            f"environment '{self.name}' has no respond(state, task, ctx): an environment "
            f"whose on_policy_turn hands the turn to the environment must define it"
        )

    def execution_job(self, state: StateT, task: TaskT) -> ExecutionJob | None:  # noqa: ARG002 - Environment hook: its signature is the public API v1; the default ignores them
        """The sandbox job of an episode that ended with ``execute``; None: nothing is executed."""
        return None

    # -- optional hooks -------------------------------------------------------------------------------

    def replay(self, task: TaskT, messages: Sequence[Message]) -> StateT:
        """The final state of a recorded conversation, for ``rewardpipe score``. The default plays the
        recorded assistant turns through the hooks and checks that the environment answers as recorded;
        an environment that calls an LLM must define its own."""
        from rewardpipe.episode import replay_through_hooks

        return cast(StateT, replay_through_hooks(self, task, messages))

    def scenarios(self, task: TaskT) -> Mapping[str, ScriptedPolicy]:  # noqa: ARG002 - Environment hook: its signature is the public API v1; the default ignores it
        """Named scripted policies for ``doctor`` and ``--policy scripted``; one must be named
        ``reference`` (it reaches every outcome component's maximum)."""
        return {}

    def scripted_policy(self, *, seed: int = 0, collapse_from_step: int | None = None) -> Any:
        """The policy ``run --policy scripted`` plays: each rollout draws one of :meth:`scenarios` (by the
        scenarios' weights, from ``seed`` and the rollout's ids); from ``collapse_from_step`` on every
        rollout plays ``collapse_scenario``."""
        from functools import partial

        from rewardpipe.episode import env_scenarios
        from rewardpipe.policies import ScenarioMix

        return ScenarioMix(
            partial(env_scenarios, self),  # bounded by hook_timeout_s, as every hook is
            seed=seed,
            collapse_from_step=collapse_from_step,
            collapse_to=self.collapse_scenario,
            timeout_s=self.hook_timeout_s,  # each player's turn too: it is the environment's code
        )

    def metrics(self, state: StateT, task: TaskT) -> dict[str, Any]:  # noqa: ARG002 - Environment hook: its signature is the public API v1; the default ignores them
        """Extra metrics of a finished episode's record (numbers, text or booleans)."""
        return {}

    def transcript_fields(self, state: StateT, task: TaskT | None) -> dict[str, Any]:  # noqa: ARG002 - Environment hook: its signature is the public API v1; the default ignores them
        """Extra fields of the stored transcript (``turn_kinds``: one label per assistant turn, shown by
        ``rewardpipe show``; ``revealed``)."""
        return {}

    def check_task(self, task: TaskT, runs: Mapping[str, Any]) -> list[str]:  # noqa: ARG002 - Environment hook: its signature is the public API v1; the default ignores them
        """``doctor``'s environment-specific problems with one task, given each scenario's run
        (:class:`rewardpipe.doctor.ScenarioRun`): texts (errors), or :class:`rewardpipe.doctor.Finding` objects
        naming their check and severity (``"warning"`` for one that does not fail doctor)."""
        return []

    def configure(self, **options: str) -> Environment:
        """This environment with options (``run --env-option NAME=VALUE``); by default it takes none."""
        if options:
            raise ValueError(f"environment '{self.name}' takes no options (got {', '.join(sorted(options))})")
        return self

    # -- what the platform reads ------------------------------------------------------------------------

    @property
    def runs_code(self) -> bool:
        """Whether this environment ever asks for an execution job."""
        return type(self).execution_job is not Environment.execution_job

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "api": self.api}

    def __repr__(self) -> str:
        return f"<environment {self.name}@{self.version}>"


def check_environment(env: Any) -> Environment:
    """``env`` if it is a usable environment (an instance; a class is instantiated), else TypeError/ValueError
    naming what is wrong."""
    from rewardpipe.rewards.base import Reward

    if isinstance(env, type) and issubclass(env, Environment):
        env = env()
    if not isinstance(env, Environment):
        raise TypeError(f"{env!r} is not an environment (a rewardpipe.Environment subclass or instance)")
    label = f"environment {type(env).__module__}.{type(env).__name__}"
    if not isinstance(env.name, str) or not env.name:
        raise ValueError(f"{label}: set the class attribute name = '<short name>'")
    if getattr(env, "api", None) != API_VERSION:
        raise ValueError(
            f"{label}: written for rewardpipe API {env.api!r}; this rewardpipe speaks API "
            f"{API_VERSION} (see the versioning page of the docs to upgrade it)"
        )
    if not (isinstance(env.task_model, type) and issubclass(env.task_model, TaskRow)):
        raise ValueError(f"{label}: task_model must be a rewardpipe.TaskRow subclass")
    if not (isinstance(env.state_model, type) and issubclass(env.state_model, EpisodeState)):
        raise ValueError(f"{label}: state_model must be a rewardpipe.EpisodeState subclass")
    turns = env.max_turns
    if isinstance(turns, bool) or not isinstance(turns, int) or not 1 <= turns <= MAX_TURNS:
        raise ValueError(f"{label}: max_turns must be an integer from 1 to {MAX_TURNS}, got {turns!r}")
    if not isinstance(getattr(env, "reward", None), Reward):
        raise ValueError(f"{label}: set the class attribute reward = <a rewardpipe.Reward>")
    problem = (
        hook_timeout_problem(getattr(env, "hook_timeout_s", None))
        or observation_limit_problem(getattr(env, "max_observation_chars", MAX_OBSERVATION_CHARS))
        or observation_limit_problem(
            getattr(env, "max_observation_messages", MAX_OBSERVATION_MESSAGES), "max_observation_messages"
        )
        or observation_limit_problem(
            getattr(env, "max_observation_total_chars", MAX_OBSERVATION_TOTAL_CHARS), "max_observation_total_chars"
        )
    )
    if problem:
        raise ValueError(f"{label}: {problem}")
    for hook in HOOKS:
        # Hooks are called, never awaited: an ``async def`` one hands back a coroutine that never runs, and every
        # rollout failed at play ("returned coroutine, not a new state") with a "never awaited" warning.
        if inspect.iscoroutinefunction(getattr(type(env), hook, None)):
            raise ValueError(
                f"{label}: {hook}() is async def; hooks are called synchronously: define it with def "
                "(and run async code inside it with asyncio.run(...))"
            )
    return env


#: The methods of an environment the platform calls (its hooks).
HOOKS = (
    "start",
    "on_policy_turn",
    "respond",
    "execution_job",
    "replay",
    "scenarios",
    "metrics",
    "transcript_fields",
    "check_task",
    "configure",
    # a function of the task, called before each model turn (a list attribute in its place serves every task): an
    # async def one passed the check, and every rollout's policy then failed on a coroutine where the tools were
    "tool_schemas",
)


def hook_timeout_problem(timeout_s: Any) -> str | None:
    """What is wrong with an environment's ``hook_timeout_s`` (None when it is fit: None or seconds above 0)."""
    from rewardpipe.bounded import limit_problem

    return limit_problem(timeout_s, "hook_timeout_s")


def observation_limit_problem(limit: Any, name: str = "max_observation_chars") -> str | None:
    """What is wrong with an environment's ``max_observation_chars`` (or ``name``: ``max_observation_messages``,
    ``max_observation_total_chars``), None when it is a count of 1 or more."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        return f"{name} must be an integer of 1 or more, got {limit!r}"
    return None
