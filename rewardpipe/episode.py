"""The one definition of a rollout, as explicit steps over any environment.

The local runner calls :func:`run_episode`, which is just these steps in a loop; the Step Functions state
machine calls the same steps one Lambda at a time, carrying the environment's state as JSON between them
and branching on ``next_action``::

    start_episode ─► policy turn ─► apply_policy_turn ─┬─ "env"     ─► apply_env_turn ─► policy turn
                                                      ├─ "execute" ─► execution_job ─► (sandbox) ─► finish
                                                      └─ "score"   ─► finish_episode (nothing to run)

The environment decides what each turn does (:class:`rewardpipe.Environment`); the platform keeps the turn
limit (``turn_limit``), the classification of failures (the policy's: ``policy_error``; the environment's own
turn or hooks: ``simulator_error``), the record and the transcript.
"""

from __future__ import annotations

import contextvars
import re
import sys
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rewardpipe.bounded import AbandonedCalls
from rewardpipe.environment import (
    AFTER_ENV_TURN,
    AFTER_POLICY_TURN,
    DEFAULT_MAX_TURNS,
    MAX_OBSERVATION_CHARS,
    MAX_OBSERVATION_MESSAGES,
    MAX_OBSERVATION_TOTAL_CHARS,
    MAX_TURNS,
    ChatFn,
    ContextLimitReached,
    DeferredSeedContext,
    EnvContext,
    Environment,
    EpisodeState,
    NextAction,
    PolicyExhausted,
    hook_timeout_problem,
    observation_limit_problem,
    stored_action,
)
from rewardpipe.execution.result import ExecutionJob, ExecutionResult
from rewardpipe.models import (
    ErrorInfo,
    Message,
    Record,
    checked_score,
    cut_text,
    record_metrics,
    recordable_metrics,
    text_message,
)
from rewardpipe.safe_text import encodable

if TYPE_CHECKING:  # pragma: no cover
    from rewardpipe.policies import Policy
    from rewardpipe.rewards.base import Reward

__all__ = [
    "DEFAULT_MAX_TURNS",
    "MAX_TURNS",
    "ContextLimitReached",
    "ConversationError",
    "EnvServices",
    "EpisodeError",
    "EpisodeState",
    "NextAction",
    "PolicyExhausted",
    "apply_env_turn",
    "apply_policy_turn",
    "build_record",
    "checked_score",
    "converse",
    "end_without_commit",
    "env_replay",
    "env_scenarios",
    "error_record",
    "execution_job",
    "failure_record",
    "finish_episode",
    "hook_failure",
    "replay_through_hooks",
    "run_episode",
    "start_episode",
    "stored_action",
    "unstarted_record",
]

#: What start() may leave as next_action: the model or the environment speaks first; the episode is not over.
AFTER_START = frozenset({"policy", "env"})
ENDED_BY_ENV = "ended_by_env"
TURN_LIMIT = "turn_limit"
#: the policy had no further turn (a replayed recording ended where the model was to speak)
POLICY_EXHAUSTED = "policy_exhausted"
#: a replayed recording stopped where the environment was to answer (``score`` names a turn limit instead)
RECORDING_ENDED = "recording_ended"
#: the policy model's endpoint refused the conversation as longer than its context window
CONTEXT_LIMIT = "context_limit"
#: a content filter stopped the model's reply, or a request carrying the model's turns (the policy's or the user's)
CONTENT_FILTER = "content_filter"
#: The longest end reason kept (a hook's, or one quoting a policy's exception): a longer one is cut, with a note of its
#: length. It is a metric of every record and a field of the transcript: a hook's megabytes of it were both.
MAX_END_REASON_CHARS = 500


def recording_stopped(messages: Sequence[Message]) -> str:
    """Why a recording that ends before its episode did stopped: where the environment was to answer (its last
    message the model's), or where the model was to speak."""
    return RECORDING_ENDED if messages and messages[-1].role == "assistant" else POLICY_EXHAUSTED


class EpisodeError(RuntimeError):
    """A step was called in the wrong phase, or an environment hook broke the step contract."""


class HookTimeout(EpisodeError):
    """An environment hook still running past the environment's ``hook_timeout_s``: its rollout is a
    ``simulator_error`` (never charged to the model) and the run goes on without it."""

    def __init__(self, env: Any, hook: str, timeout_s: float, still_running: int = 0) -> None:
        label = f"environment '{env.name}': {hook}()"
        message = f"{label} did not return within hook_timeout_s={timeout_s:g} s (abandoned, perhaps still running)"
        if still_running:
            message = f"{label} not called: {still_running} earlier calls still running past {timeout_s:g} s"
        super().__init__(message)
        self.hook = hook
        self.timeout_s = timeout_s


# Per environment (the instance, by id, with a reference telling a reused id apart) and hook, its calls past
# hook_timeout_s (see rewardpipe.bounded); the entry goes with the environment when it can be weakly
# referenced. Keyed by class, two environments of one class (two configurations, a backend each) shared one
# cap: one's hung hooks refused every call of the other's.
_ABANDONED_HOOKS: dict[tuple[int, str], tuple[Callable[[], Any], AbandonedCalls]] = {}
_ABANDONED_LOCK = threading.Lock()


def _abandoned_calls(env: Any, hook: str) -> AbandonedCalls:
    key = (id(env), hook)
    entry = _ABANDONED_HOOKS.get(key)
    if entry is not None and entry[0]() is env:
        return entry[1]
    with _ABANDONED_LOCK:
        entry = _ABANDONED_HOOKS.get(key)
        if entry is None or entry[0]() is not env:
            calls = AbandonedCalls(f"rewardpipe-hook-{env.name}-{hook}")
            held: Callable[[], Any]
            try:
                held = weakref.ref(env)
                weakref.finalize(env, _ABANDONED_HOOKS.pop, key, None)
            except TypeError:  # no weak reference to it (__slots__): kept, as environments live for the run

                def strong() -> Any:
                    return env

                held = strong
            entry = _ABANDONED_HOOKS[key] = (held, calls)
    return entry[1]


def call_hook(env: Any, hook: str, *args: Any) -> Any:
    """``env.<hook>(*args)``, bounded by the environment's ``hook_timeout_s`` when it declares one (past it:
    :class:`HookTimeout`); without one, a plain call in this thread. A hook calling ``sys.exit()`` is an
    :class:`EpisodeError` like any other failure of it."""
    try:
        return _call_hook(env, hook, *args)
    except (Exception, KeyboardInterrupt):
        raise
    except BaseException as exc:  # noqa: BLE001 - turned into this rollout's error, below
        # Not an Exception: every "one rollout's error" handler let it through, and one hook's sys.exit() (a
        # game engine's own "quit"), asyncio.CancelledError (a task cancelled under the hook's asyncio.run) or a
        # library's own BaseException ended the whole run, every rollout of the step lost.
        from rewardpipe.rewards.base import how_failed

        raise EpisodeError(f"environment '{env.name}': {hook}() {how_failed(exc)}") from None


def _call_hook(env: Any, hook: str, *args: Any) -> Any:
    method = getattr(env, hook)
    timeout_s = getattr(env, "hook_timeout_s", None)
    if timeout_s is None:
        return method(*args)
    problem = hook_timeout_problem(timeout_s)
    if problem:  # an environment used without check_environment: its rollouts say why, none is lost
        raise EpisodeError(f"environment '{env.name}': {problem}")
    timeout_s = float(timeout_s)  # a numpy number or a Decimal declared as the limit: what a thread's wait takes
    calls = _abandoned_calls(env, hook)
    return calls.call(method, args, {}, timeout_s, lambda running: HookTimeout(env, hook, timeout_s, running))


def each_with_bounded_hooks(env: Any, function: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    """``function(item)`` for each of ``items`` (a batch's episodes, each calling ``env``'s hooks), in order. When the
    environment bounds its hooks (``hook_timeout_s``) they run together, a thread each (up to
    ``MAX_ABANDONED_CALLS``, past which a hook still hung is refused at once anyway): one after another, a batch
    whose hooks hang waited one timeout per episode (a TRL step stalled for minutes); together it waits about one.
    Unbounded hooks run one after another in this thread, as they always have. ``function`` handles its own item's
    failures; one it raises is raised here."""
    from rewardpipe import bounded

    if getattr(env, "hook_timeout_s", None) is None or len(items) < 2:
        return [function(item) for item in items]
    from concurrent.futures import ThreadPoolExecutor

    threads = max(1, min(len(items), bounded.MAX_ABANDONED_CALLS))
    with ThreadPoolExecutor(threads, thread_name_prefix=f"rewardpipe-hooks-{env.name}") as pool:
        # each in a copy of the caller's context (its context variables), as a hook's own thread runs
        futures = [pool.submit(contextvars.copy_context().run, function, item) for item in items]
        return [future.result() for future in futures]


def env_scenarios(env: Any, task: Any) -> Any:
    """``env.scenarios(task)`` as the platform asks for it: bounded by ``hook_timeout_s`` like every other hook (a
    ``scenarios()`` that hung hung the whole run, every rollout of the step lost)."""
    return call_hook(env, "scenarios", task)


class EnvironmentHookFailed(EpisodeError):
    """A hook of the environment's that the policy asks (``tool_schemas``) failed: the rollout's ``simulator_error``,
    the environment's failure, not the model's."""


def env_tool_schemas(env: Any) -> Any:
    """The environment's ``tool_schemas`` as a policy is given them: a list as it is, a function of the task called as
    the platform calls a hook (bounded by ``hook_timeout_s``; one that raises or hangs is an
    :class:`EnvironmentHookFailed` naming ``tool_schemas()``, where it was the policy's error and unbounded)."""
    schemas = getattr(env, "tool_schemas", None)
    if not callable(schemas):
        return schemas

    def for_task(task: Any) -> Any:
        try:
            return call_hook(env, "tool_schemas", task)
        except Exception as exc:
            raise EnvironmentHookFailed(hook_failure(env, "tool_schemas", exc)) from exc

    return for_task


def env_replay(env: Any, task: Any, messages: Sequence[Message]) -> Any:
    """``env.replay(task, messages)`` as the platform asks for it. An environment's own ``replay()`` is one hook call,
    bounded by ``hook_timeout_s`` (one that hung hung ``rewardpipe score`` for every recording); the default one plays
    the recording through the hooks, each of them bounded on its own."""
    if getattr(type(env), "replay", None) is Environment.replay:
        return env.replay(task, messages)
    return call_hook(env, "replay", task, messages)


@dataclass(frozen=True)
class EnvServices:
    """What the platform gives the environment's turns: the run's seed and rewardpipe's chat client."""

    seed: int = 0
    chat: ChatFn | None = None

    def context(self, state: EpisodeState) -> EnvContext:
        return DeferredSeedContext(state.ids, state.assistant_turns, self.seed, self.chat)


NO_SERVICES = EnvServices()


def start_episode(
    task: Any, *, env: Environment, run_id: str, step: int, group_id: str, rollout_id: str, max_turns: int | None = None
) -> EpisodeState:
    """The opening state: ``env.start(task)`` with the rollout's ids and turn limit (the environment's
    ``max_turns`` unless ``max_turns`` is given)."""
    state = call_hook(env, "start", task)
    if not isinstance(state, EpisodeState):
        raise EpisodeError(
            f"environment '{env.name}': start() returned {type(state).__name__}, not a state"
            f"{_returned_nothing(state)}; return an instance of the environment's state_model (the default "
            f"start(): self.state_model(messages=task.prompt_messages()))"
        )
    _check_state_model(state, env, "start")
    if not isinstance(state.messages, list) or not all(isinstance(m, Message) for m in state.messages):
        odd = (
            state.messages
            if not isinstance(state.messages, list)
            else next(m for m in state.messages if not isinstance(m, Message))
        )
        raise EpisodeError(
            f"environment '{env.name}': start() opened the conversation with a {type(odd).__name__}, "
            f"not a list of Message; give Message(role=..., content=...) objects (task.prompt_messages() builds "
            f"the task's prompt)"
        )
    if state.next_action not in AFTER_START:
        # An episode over before the model's first turn has no answer to score: it was scored all the same (the
        # task's prompt alone), a score for nothing the model did.
        raise EpisodeError(
            f"environment '{env.name}': start() left next_action {state.next_action!r}; it must be one of "
            f"{', '.join(sorted(AFTER_START))} (an episode ends after the model's first turn, not before it); return "
            f"state.evolve(next_action='policy')"
        )
    state = _text_end_reason(state, env, "start")
    # The opening messages are the environment's too (a task's prompt built from a file, a tool's first dump):
    # cut to the same bound as every later observation, with the same note, counted the same way.
    state = _bounded_observations(state, 0, env, "start", 0)
    return state.evolve(
        run_id=run_id,
        step=step,
        group_id=group_id,
        rollout_id=rollout_id,
        task_id=task.task_id,
        max_turns=max_turns or env.max_turns,
        # A few-shot prompt's assistant messages are the task's: counted as the model's turns, they took its turn
        # limit, started a scripted player mid-script, and made a prompt too long for the model's window (or
        # filtered) a scored context_limit (or content_filter), a 0 for a turn the model never took.
        opening_turns=sum(1 for message in state.messages if message.role == "assistant"),
    )


def _check_state_model(state: EpisodeState, env: Environment, hook: str) -> None:
    """On AWS the state is read back between turns with the environment's ``state_model``: a hook returning another
    class (a parent's state, one of another environment, a state rebuilt by a helper of another environment) ran
    locally with its fields and on AWS with the model's, or failed there on a field the model does not have. Asked of
    ``start()`` and of every later hook's state (round thirty-five: only ``start()``'s was, so an ``on_policy_turn``
    or ``respond`` switching the class played on locally, ``run`` and ``doctor`` scoring what AWS would not)."""
    model = getattr(env, "state_model", None)
    if isinstance(model, type) and not isinstance(state, model):
        raise EpisodeError(
            f"environment '{env.name}': {hook}() returned a {type(state).__name__}, not the environment's "
            f"state_model {model.__name__} (on AWS the state is read back with it between turns); build it with "
            f"self.state_model(...) or change the state it was given (state.evolve(...)), or declare "
            f"state_model = {type(state).__name__}"
        )


def _returned_nothing(value: Any) -> str:
    """The hint of a hook that returned None: the likeliest cause is a missing ``return``."""
    return " (a missing return?)" if value is None else ""


def _expect(state: EpisodeState, action: NextAction) -> None:
    if state.next_action != action:
        raise EpisodeError(
            f"rollout {state.rollout_id}: expected next_action '{action}', state is '{state.next_action}'"
        )


def _checked_messages(new: EpisodeState, before: EpisodeState, env: Environment, hook: str) -> None:
    """A hook only appends to the conversation, and only messages of its own: the turns so far must be there
    as they were (the turn limit counts the assistant messages, so a hook that dropped them would keep the
    episode going for ever), and every message it added must be a :class:`Message` that is not the model's
    (``evolve`` does not validate: a text or a dict would reach the record and the transcript)."""
    label = f"environment '{env.name}': {hook}()"
    messages, earlier = new.messages, before.messages
    if not isinstance(messages, list) or len(messages) < len(earlier):
        raise EpisodeError(
            f"{label} removed messages from the conversation; a hook only appends to it: return "
            f"state.append(Message(...)) or state.evolve(...) of the state it was given, not a state built anew"
        )
    for index, (was, now) in enumerate(zip(earlier, messages, strict=False)):
        if was is not now and was != now:
            raise EpisodeError(
                f"{label} changed message {index + 1} of the conversation; a hook only appends: add a new "
                f"message with state.append(Message(...)) instead of editing one"
            )
    for message in messages[len(earlier) :]:
        if not isinstance(message, Message):
            raise EpisodeError(
                f"{label} added a {type(message).__name__} to the conversation, not a Message (use state.append)"
            )
        if message.role == "assistant":
            raise EpisodeError(
                f"{label} added an assistant message: only the policy speaks as the assistant; append the "
                f"environment's own messages with role 'user' or 'tool' (state.append(Message(role='user', ...)))"
            )


#: How a message cut to the environment's ``max_observation_chars`` ends (the record counts such messages).
OBSERVATION_CUT = "[rewardpipe cut this message: "
#: How the last message kept of a hook call that added more than ``max_observation_messages`` ends.
OBSERVATIONS_DROPPED = "[rewardpipe dropped the "
_CUT_NOTE_CHARS = 400  # the notes are at most this long: where episode_metrics looks for them


def _bounded_observations(
    new: EpisodeState, added_from: int, env: Environment, hook: str, dropped_before: int
) -> EpisodeState:
    """``new`` with the messages its hook added (from ``added_from`` on; ``start``'s opening messages from 0) bounded:
    each cut to the environment's ``max_observation_chars`` (a note at the end of each cut one naming the hook and the
    length it gave), then the first ones kept while they are at most ``max_observation_messages`` and their characters
    together at most ``max_observation_total_chars`` (the first is always kept); the rest dropped, counted in
    ``observations_dropped`` on top of ``dropped_before``, and a note at the end of the last one kept says how many and
    which limit."""
    limit = getattr(env, "max_observation_chars", MAX_OBSERVATION_CHARS)
    most = getattr(env, "max_observation_messages", MAX_OBSERVATION_MESSAGES)
    total = getattr(env, "max_observation_total_chars", MAX_OBSERVATION_TOTAL_CHARS)
    problem = (
        observation_limit_problem(limit)
        or observation_limit_problem(most, "max_observation_messages")
        or observation_limit_problem(total, "max_observation_total_chars")
    )
    if problem:  # an environment used without check_environment: its rollouts say why
        raise EpisodeError(f"environment '{env.name}': {problem}")
    messages = new.messages
    added = len(messages) - added_from
    if (
        added <= most
        and all(len(message.content) <= limit for message in messages[added_from:])
        and sum(len(message.content) for message in messages[added_from:]) <= total
    ):
        return new if new.observations_dropped == dropped_before else new.evolve(observations_dropped=dropped_before)
    kept = list(messages[:added_from])
    used, past = 0, "max_observation_messages"
    for message in messages[added_from : added_from + most]:
        content = message.content
        if len(kept) > added_from and used + min(len(content), limit) > total:
            # 100 messages within max_observation_chars each were still 20 million characters a call
            past = "max_observation_total_chars"
            break
        used += min(len(content), limit)
        if len(content) > limit:
            note = _cut_note(hook, len(content), limit)
            message = message.model_copy(update={"content": f"{content[:limit]}\n{note}"})
        kept.append(message)
    dropped = added - (len(kept) - added_from)
    if dropped:
        last = kept[-1]
        bound = most if past == "max_observation_messages" else total
        note = f"{OBSERVATIONS_DROPPED}{dropped:,} messages {hook}() added past this one; {past} is {bound:,}]"
        kept[-1] = last.model_copy(update={"content": f"{last.content}\n{note}"})
    return new.evolve(messages=kept, observations_dropped=dropped_before + dropped)


def _cut_note(hook: str, given: int, limit: int) -> str:
    return f"{OBSERVATION_CUT}{hook}() gave {given:,} characters; max_observation_chars is {limit:,}]"


# The note as _cut_note writes it (numbers grouped by thousands, as ``:,`` writes them), at the very end of a message.
_GROUPED = r"[0-9]{1,3}(?:,[0-9]{3}){0,9}"
_CUT_NOTE = re.compile(
    rf"\n{re.escape(OBSERVATION_CUT)}[a-z_]{{1,40}}\(\) gave {_GROUPED} characters; max_observation_chars is "
    rf"({_GROUPED})\]"
    # the last message kept of a hook call that added too many ends with the note of those dropped after it
    rf"(?:\n{re.escape(OBSERVATIONS_DROPPED)}{_GROUPED} messages [a-z_]{{1,40}}\(\) added past this one; "
    rf"max_observation_(?:messages|total_chars) is {_GROUPED}\])?\Z"
)


def observations_cut(state: EpisodeState, limit: int | None = None) -> int:
    """How many of the conversation's messages were cut to the environment's ``max_observation_chars`` (``limit``,
    when known).

    Only a message the platform cut counts: one ending in the note exactly, its first part as long as the limit
    the note names (and, with ``limit``, that limit the environment's: the message is longer than any left whole).
    The note's words anywhere else (a tool's error quoting the model's argument, a simulator echoing its turn)
    counted as cuts: a model made the record report observations cut that never were."""
    count = 0
    for message in state.messages:
        content = message.content
        if message.role == "assistant":
            continue
        found = _CUT_NOTE.search(content, max(len(content) - _CUT_NOTE_CHARS, 0))
        if found is None:
            continue
        stated = int(found.group(1).replace(",", ""))
        # A message left whole is at most ``limit`` long; a cut one is its first ``limit`` characters, then the note.
        if found.start() == stated and (limit is None or stated == limit):
            count += 1
    return count


def _ids(state: EpisodeState) -> tuple[Any, ...]:
    return (state.rollout_id, state.group_id, state.step, state.task_id, state.run_id)


def _text_end_reason(state: EpisodeState, env: Environment, hook: str) -> EpisodeState:
    """``state`` with its end reason text the record and the transcript can hold: a value that is not text is an
    :class:`EpisodeError` naming the hook; a lone surrogate (an end reason quoting a replayed turn of the model's)
    is replaced by U+FFFD, as in every other text a record carries (raw, it made the record and the transcript
    unwritable and ended the run)."""
    reason = state.end_reason
    if reason is None:
        return state
    if not isinstance(reason, str):
        raise EpisodeError(
            f"environment '{env.name}': {hook}() left end_reason a {type(reason).__name__}; it must be text: "
            f"state.evolve(end_reason=str(...))"
        )
    written = encodable(cut_text(reason, MAX_END_REASON_CHARS))
    return state if written is reason else state.evolve(end_reason=written)


def _checked(new: Any, env: Environment, hook: str, allowed: frozenset[str], before: EpisodeState) -> EpisodeState:
    if not isinstance(new, EpisodeState):
        raise EpisodeError(
            f"environment '{env.name}': {hook}() returned {type(new).__name__}, not a new state"
            f"{_returned_nothing(new)}; return the state it was given, changed: state.evolve(next_action=...) "
            f"or state.append(Message(...), next_action=...)"
        )
    _check_state_model(new, env, hook)
    if new.next_action not in allowed:
        raise EpisodeError(
            f"environment '{env.name}': {hook}() left next_action {new.next_action!r}; it must be "
            f"one of {', '.join(sorted(allowed))}: set it with state.evolve(next_action=...)"
        )
    new = _text_end_reason(new, env, hook)
    _checked_messages(new, before, env, hook)
    if new.observations_dropped != before.observations_dropped:
        raise EpisodeError(
            f"environment '{env.name}': {hook}() changed observations_dropped ({before.observations_dropped!r} -> "
            f"{new.observations_dropped!r}); it is the platform's (messages it dropped past max_observation_messages): "
            f"leave it out of state.evolve(...)"
        )
    new = _bounded_observations(new, len(before.messages), env, hook, before.observations_dropped)
    if _ids(new) != _ids(before):
        # The ids file the record and the transcript: a hook that renamed its rollout (state.evolve(rollout_id=
        # ...), or a state built anew) overwrote another rollout's record, under a task that may not exist.
        was, now = before.ids.as_dict(), new.ids.as_dict()
        changed = ", ".join(f"{name} {was[name]!r} -> {now[name]!r}" for name in was if was[name] != now[name])
        raise EpisodeError(
            f"environment '{env.name}': {hook}() changed the rollout's ids ({changed}); they are the platform's: "
            f"return the state it was given, changed with state.evolve(...) or state.append(...), not one built anew"
        )
    if new.opening_turns != before.opening_turns:
        raise EpisodeError(
            f"environment '{env.name}': {hook}() changed opening_turns ({before.opening_turns!r} -> "
            f"{new.opening_turns!r}); it is the platform's (the assistant messages the task's prompt opens with): "
            f"leave it out of state.evolve(...)"
        )
    if new.max_turns != before.max_turns:
        # The turn limit is the platform's (the environment's max_turns, --max-turns, the deployment's MAX_TURNS,
        # at most 20 on AWS, where it bounds an execution's 25,000 history events): a hook that raised it kept
        # its episode going past every limit, a deployed execution until Step Functions failed it, unrecorded.
        raise EpisodeError(
            f"environment '{env.name}': {hook}() changed max_turns ({before.max_turns!r} -> {new.max_turns!r}); "
            f"the turn limit is the platform's (set the environment's max_turns, or end the episode)"
        )
    if new.next_action in ("execute", "score") and new.end_reason is None:
        new = new.evolve(end_reason=ENDED_BY_ENV)
    return new


_BASE_FIELDS = frozenset(EpisodeState.model_fields)


def _same_in_json(value: Any, again: Any) -> bool:
    """Whether ``again`` (read back from JSON) is ``value``: a list for a tuple is the same (the state model's
    own validation makes it one), a list for a set is not (code doing ``state.seen | {x}`` fails on it)."""
    if isinstance(value, (list, tuple)) and isinstance(again, (list, tuple)):
        return len(value) == len(again) and all(map(_same_in_json, value, again))
    if isinstance(value, dict) and isinstance(again, dict):
        return value.keys() == again.keys() and all(_same_in_json(value[k], again[k]) for k in value)
    try:
        return bool(value == again)
    except Exception:  # noqa: BLE001 - an object whose == raises (an array's ambiguous truth) is not the same
        return False


def _json_problem(state: EpisodeState, fields: Sequence[str]) -> str | None:
    """Why ``state`` would not come back as it is from the JSON it is stored as between turns on AWS
    (``model_dump(mode="json", exclude_none=True)``, read back by the state model), naming the first field that
    does not; None when it does. Only ``fields`` are compared (the environment's own: the platform checks its)."""
    import json

    try:
        text = json.dumps(state.model_dump(mode="json", exclude_none=True), allow_nan=False)
        again = type(state).model_validate(json.loads(text))
    except Exception:  # noqa: BLE001 - which field: asked of each below
        again = None
    for name in fields:
        value = getattr(state, name)
        if again is not None:
            if _same_in_json(value, getattr(again, name)):
                continue
            back = getattr(again, name)
            return f"field {name!r} holds {value!r:.80}, which reads back as {back!r:.80}"
        try:
            json.dumps(state.model_dump(mode="json", include={name}), allow_nan=False)
        except ValueError as exc:
            if "JSON compliant" in str(exc):  # json's own word for NaN and the infinities
                return f"field {name!r} holds a number JSON cannot hold (NaN or an infinity)"
            return f"field {name!r} cannot be written as JSON: {type(exc).__name__}: {str(exc).splitlines()[0]}"
        except Exception as exc:  # noqa: BLE001 - whatever keeps it from being written is the finding
            first = str(exc).splitlines()[0] if str(exc) else ""
            return f"field {name!r} cannot be written as JSON: {type(exc).__name__}: {first}"
    if again is None:  # every field writes on its own: the state's own validation refuses what it wrote
        try:
            type(state).model_validate_json(state.model_dump_json(exclude_none=True))
        except Exception as exc:  # noqa: BLE001 - the finding
            return f"it does not read back: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return None


def _check_survives_json(state: EpisodeState, env: Environment, hook: str) -> None:
    """A state a hook returned must survive the JSON round trip it takes between turns on AWS: one holding an
    object failed there and nowhere locally, a set came back a list and a NaN a None, so `run` and `doctor`
    scored an environment that behaved otherwise once deployed. Only the environment's own fields are checked
    (none: nothing to do). Its failure is a :class:`ConversationError`, the rollout's ``simulator_error``."""
    fields = [name for name in type(state).model_fields if name not in _BASE_FIELDS]
    problem = _json_problem(state, fields) if fields else None
    if problem is not None:
        where = hook_location(env, hook)  # said first: a summary cuts a long message's end
        failure = EpisodeError(
            f"environment '{env.name}': {hook}(){f' (at {where})' if where else ''} left a state that does not survive "
            f"JSON, as AWS stores it between turns: {problem}; keep the state's fields JSON values (text, finite "
            f"numbers, booleans, None, lists and dicts of them, pydantic models), declared on {type(state).__name__}"
        )
        raise ConversationError("simulator_error", state, failure, hook_failure(env, hook, failure))


def apply_policy_turn(state: EpisodeState, turn: str | Message, env: Environment, task: Any) -> EpisodeState:
    """Append the assistant turn, let the environment say what happens next, and enforce the turn limit."""
    _expect(state, "policy")
    # A policy's text needs no validation to be an assistant message (a turn a policy builds itself does).
    message = turn if isinstance(turn, Message) else text_message("assistant", turn)
    if message.role != "assistant":
        raise EpisodeError(
            f"rollout {state.rollout_id}: a policy turn must be an assistant message, got role '{message.role}'"
        )
    new = state.evolve(messages=[*state.messages, message])
    # The hook gets a list of its own: one it changes in place is then seen as changed, and leaves ours whole.
    shown = new.evolve(messages=list(new.messages))
    new = _checked(
        call_hook(env, "on_policy_turn", shown, task, message.content), env, "on_policy_turn", AFTER_POLICY_TURN, new
    )
    if new.next_action == "env" and new.assistant_turns >= new.max_turns:
        new = new.evolve(next_action="score", end_reason=TURN_LIMIT)
    return new


def apply_env_turn(
    state: EpisodeState, task: Any, env: Environment, services: EnvServices | None = None
) -> EpisodeState:
    """The environment's turn (``env.respond``)."""
    _expect(state, "env")
    ctx = (services or NO_SERVICES).context(state)
    shown = state.evolve(messages=list(state.messages))  # a list of its own, as in apply_policy_turn
    return _checked(call_hook(env, "respond", shown, task, ctx), env, "respond", AFTER_ENV_TURN, state)


def end_without_commit(state: EpisodeState, reason: str) -> EpisodeState:
    """Stop the episode early (e.g. a replay ran out of turns): it is scored as it stands. ``reason`` may quote
    a policy's exception: its lone surrogates are replaced (see :func:`_text_end_reason`)."""
    return state.evolve(next_action="score", end_reason=encodable(cut_text(reason, MAX_END_REASON_CHARS)))


def execution_job(state: EpisodeState, task: Any, env: Environment) -> ExecutionJob | None:
    """The sandbox job of an episode that ended with ``execute`` (None otherwise, or when there is none)."""
    if state.next_action != "execute":
        return None
    job = call_hook(env, "execution_job", state, task)
    if job is not None and not isinstance(job, ExecutionJob):
        # A dict or the code as text went on to the sandbox, which failed it as its own crash (or, scored without
        # it, as nothing executed: a 0), and the run's transcript of it failed the whole run.
        raise EpisodeError(
            f"environment '{env.name}': execution_job() returned {type(job).__name__}, not an ExecutionJob (or None): "
            f"return rewardpipe.ExecutionJob(code=..., tests=...), or None when nothing is to run"
        )
    return job


def record_from_score(
    score: Any,
    *,
    run_id: str,
    step: int,
    group_id: str,
    rollout_id: str,
    task_id: str,
    extra_metrics: dict | None = None,
) -> Record:
    metrics = record_metrics(score.metrics, extra_metrics or {})
    components, aggregate, error = checked_score(score.components, score.weights, score.aggregate, score.error)
    return Record(
        run_id=run_id,
        step=step,
        group_id=group_id,
        rollout_id=rollout_id,
        task_id=task_id,
        status="error" if error else "scored",
        error=error,
        components=components,
        weights=score.weights,
        aggregate=aggregate,
        metrics=metrics,
    )


def build_record(
    *,
    run_id: str,
    step: int,
    group_id: str,
    rollout_id: str,
    task_id: str,
    messages: Sequence[Message],
    execution: ExecutionResult | None,
    reward: Reward,
    extra_metrics: dict | None = None,
    task: Any = None,
    state: Any = None,
    reference: Any = None,
) -> Record:
    """Score a conversation and make its record (a component that raised or could not compute makes an
    error record, never a 0)."""
    score = reward.score(messages, execution, reference, task=task, state=state)
    return record_from_score(
        score,
        run_id=run_id,
        step=step,
        group_id=group_id,
        rollout_id=rollout_id,
        task_id=task_id,
        extra_metrics=extra_metrics,
    )


#: What a finished episode's record says of it beside the environment's own metrics: never replaced by them.
PLATFORM_EPISODE_METRICS = ("end_reason", "env_metrics_error", "env_observations_cut", "env_observations_dropped")


def episode_metrics(state: EpisodeState, task: Any, env: Environment) -> dict[str, Any]:
    """What a finished episode's record says beyond the reward: the end reason and the environment's own."""
    metrics: dict[str, Any] = {"end_reason": state.end_reason}
    limit = getattr(env, "max_observation_chars", MAX_OBSERVATION_CHARS)
    cut = observations_cut(state, limit if observation_limit_problem(limit) is None else None)
    if cut:  # messages an environment's hook added cut to its max_observation_chars (each ends with a note)
        metrics["env_observations_cut"] = cut
    if state.observations_dropped:  # messages hooks added past max_observation_messages in one call, dropped
        metrics["env_observations_dropped"] = state.observations_dropped
    try:
        extra = call_hook(env, "metrics", state, task)
    except Exception as exc:  # noqa: BLE001 - extra evidence, never a reason to lose the score
        from rewardpipe.rewards.base import first_line, user_location

        where = user_location(exc)  # the line of the environment's file that raised, as for every other hook
        metrics["env_metrics_error"] = f"{first_line(exc)} (at {where})" if where else first_line(exc)
        if isinstance(exc, HookTimeout):  # as every path words a hook past its hook_timeout_s
            metrics["env_metrics_error"] = hook_failure(env, "metrics", exc)
        return metrics
    if not isinstance(extra, Mapping):
        metrics["env_metrics_error"] = f"metrics() returned {type(extra).__name__}, not a dict"
        return metrics
    # A record's metric is a number, a text, a boolean or None: anything else would make the record itself
    # fail to validate, and the run with it. Left out, and said so.
    kept, problem = recordable_metrics(dict(extra), "metrics()")
    # end_reason and env_metrics_error are the platform's: an environment's metric of either name (its own
    # "end_reason") replaced how the episode really ended, or claimed a failure of metrics() that was none.
    clashing = [name for name in PLATFORM_EPISODE_METRICS if name in kept]
    for name in clashing:
        del kept[name]
    if clashing:
        named = f"metrics() used the platform's own names (left out: {', '.join(clashing)})"
        problem = named if problem is None else f"{problem}; {named}"
    metrics.update(kept)
    if problem is not None:
        metrics["env_metrics_error"] = problem
    return metrics


def finish_episode(
    state: EpisodeState,
    task: Any,
    execution: ExecutionResult | None,
    reward: Reward | None,
    env: Environment,
    env_metrics: dict[str, Any] | None = None,
) -> Record:
    """Score a finished episode (``reward``, default the environment's) with everything it offers its
    components: messages, transcript, task, final state and execution. ``env_metrics``: what
    :func:`episode_metrics` gave for it when the caller read them already (``metrics()`` is called once)."""
    if state.next_action not in ("execute", "score"):
        raise EpisodeError(f"rollout {state.rollout_id}: cannot score an episode in phase '{state.next_action}'")
    return build_record(
        **state.record_ids(),
        messages=state.messages,
        execution=execution,
        reward=reward if reward is not None else env.reward,
        task=task,
        state=state,
        extra_metrics=env_metrics if env_metrics is not None else episode_metrics(state, task, env),
    )


def failure_record(
    *,
    run_id: str,
    step: int,
    group_id: str,
    rollout_id: str,
    task_id: str,
    kind: str,
    message: str,
    reward: Reward,
    metrics: dict | None = None,
) -> Record:
    """The record for an infrastructure failure: every component unknown, never a score of 0."""
    return Record(
        run_id=run_id,
        step=step,
        group_id=group_id,
        rollout_id=rollout_id,
        task_id=task_id,
        status="error",
        error=ErrorInfo(kind=kind, message=message[:2000]),
        components={name: None for name in reward.component_names},
        weights=reward.weights,
        aggregate=None,
        metrics=metrics or {},
    )


def unstarted_record(**ids_and_failure: Any) -> Record:
    """:func:`failure_record` (same arguments, no ``metrics``) for a rollout that failed before its episode had a
    state (the environment's ``start()`` raised, an input was refused): no assistant turn was played. One function
    for the local runner and the workflow's error record, so the two record such a rollout alike."""
    return failure_record(**ids_and_failure, metrics={"assistant_turns": 0})


def error_record(state: EpisodeState, kind: str, message: str, reward: Reward) -> Record:
    """:func:`failure_record` for an episode, keeping how far the conversation got."""
    return failure_record(
        **state.record_ids(),
        kind=kind,
        message=message,
        reward=reward,
        metrics={"assistant_turns": state.assistant_turns, "end_reason": state.end_reason},
    )


def hook_failure(env: Any, hook: str, exc: BaseException) -> str:
    """The error message of an environment hook that raised: ``environment 'NAME': HOOK() raised TYPE: MESSAGE``
    (a bare ``KeyError: 'secret'`` did not say which of a user's hooks raised it). A hook past ``hook_timeout_s``:
    ``environment 'NAME': HOOK() did not return within hook_timeout_s=N s ... (HOOK() is at FILE:LINE)``. Any other
    :class:`EpisodeError` already names the environment and the hook: ``TYPE: MESSAGE`` as before."""
    from rewardpipe.rewards.base import user_location

    if isinstance(exc, HookTimeout):
        # Its message already reads "environment 'NAME': HOOK() did not return within ...", as a raising hook's
        # does: the class name before it ("HookTimeout: environment ...") made it the one hook failure worded apart.
        defined = hook_location(env, exc.hook)
        return f"{exc} ({exc.hook}() is at {defined})" if defined else str(exc)
    text = f"{type(exc).__name__}: {exc}"
    where = user_location(exc)
    if isinstance(exc, EpisodeError):
        # The platform's own word on what the hook did (returned a dict, left a state that is not JSON, did not
        # return in time): the hook's own definition is where to look.
        defined = hook_location(env, hook) if where is None and f"{hook}()" in text else None
        return f"{text} ({hook}() is at {defined})" if defined and defined not in text else text
    at = f" (at {where})" if where else ""
    return f"environment '{getattr(env, 'name', type(env).__name__)}': {hook}() raised {text}{at}"


def hook_location(env: Any, hook: str) -> str | None:
    """``file:line`` where the environment's class defines ``hook`` (None for rewardpipe's own default), written
    as a raising hook's line is (relative to the working directory when under it)."""
    import inspect
    import os

    from rewardpipe.rewards.base import _library_dirs, shown_path

    # doctor plays a watching wrapper of the environment (its hooks are rewardpipe's): the user's class is inside
    env = getattr(env, "_doctor_env", env)
    method = getattr(type(env), hook, None)
    code = getattr(inspect.unwrap(method), "__code__", None) if callable(method) else None
    if code is None:
        return None
    path = os.path.realpath(code.co_filename)
    if path.replace("\\", "/").startswith(_library_dirs()):
        return None
    return f"{shown_path(path)}:{code.co_firstlineno}"


class ConversationError(RuntimeError):
    """The policy or the environment failed mid-conversation.

    ``kind`` says which (``policy_error``, or ``simulator_error`` for the environment's own turn or hooks)
    and ``state`` is the state the failing step was given, so the caller can record the failure against the
    right party with the turns so far. The message is ``"<ExceptionType>: <message>"`` of the original
    exception (also kept as ``cause``), or ``message`` when given (:func:`hook_failure`'s, naming the hook).
    """

    def __init__(self, kind: str, state: EpisodeState, cause: Exception, message: str | None = None):
        super().__init__(message if message is not None else f"{type(cause).__name__}: {cause}")
        self.kind = kind
        self.state = state
        self.cause = cause


def _player_failure(exc: Exception) -> str:
    """A policy's failure as its record says it; a scripted player's (the environment's own code, which
    :class:`~rewardpipe.policies.ScenarioFailed` names) ends with the line of the user's file that raised."""
    from rewardpipe.policies import ScenarioFailed
    from rewardpipe.rewards.base import user_location

    text = f"{type(exc).__name__}: {exc}"
    where = user_location(exc.__cause__) if isinstance(exc, ScenarioFailed) and exc.__cause__ is not None else None
    return f"{text} (at {where})" if where else text


def _outgrew_window(exc: BaseException) -> bool:
    """The environment's LLM (the user it plays reads the model's turns) refused the conversation as too long
    for its window: ContextLimitReached, or rewardpipe's chat client's ContextLengthExceeded."""
    if isinstance(exc, ContextLimitReached):
        return True
    client = sys.modules.get("rewardpipe.openai_client")  # never imported here only to ask
    return client is not None and isinstance(exc, client.ContextLengthExceeded)


def _filtered_by_model(exc: BaseException, state: EpisodeState) -> bool:
    """A content filter stopped the exchange on what the model wrote: its own reply filtered, or a request that
    carried its turns (the first turn's prompt, the task alone, is the task's: still an error). Without this a
    model made its rollout an excluded error by writing what the policy's or the LLM user's provider filters."""
    client = sys.modules.get("rewardpipe.openai_client")  # never imported here only to ask
    if client is None or not isinstance(exc, client.ContentFiltered):
        return False
    return not exc.on_prompt or state.assistant_turns > 0


def converse(
    state: EpisodeState,
    task: Any,
    policy: Policy,
    env: Environment,
    pause: Callable[[EpisodeState], bool] | None = None,
    services: EnvServices | None = None,
) -> EpisodeState:
    """Run policy and environment turns until the episode ends (``execute`` or ``score``).

    A failure of the policy (including a turn that is neither text nor an assistant message) or of the
    environment raises :class:`ConversationError` naming which one failed; the caller decides how to record
    it.

    ``pause(state)`` is asked before every turn; when it says True the conversation stops there and the
    state is returned as it stands (``next_action`` still ``policy`` or ``env``), for the caller to resume
    later with the same function. The state machine pauses when the next turn is the trainer's (callback
    mode) or when its Lambda is running out of time; the local runner never pauses.
    """
    made_by = "start"  # the hook that made the state: a state it left that is not JSON is its failure
    while state.next_action in ("policy", "env"):
        if pause is not None and pause(state):
            return state
        _check_survives_json(state, env, made_by)
        made_by = "on_policy_turn" if state.next_action == "policy" else "respond"
        if state.next_action == "policy":
            try:
                turn = policy.next_turn(state, task)
            except ContextLimitReached as exc:  # the conversation outgrew the model's window: scored as it stands
                if not state.assistant_turns:  # the task itself (or max_tokens) does not fit: nothing to score
                    raise ConversationError(
                        "policy_error", state, ContextLimitReached(f"before the model's first turn: {exc}")
                    ) from exc
                return end_without_commit(state, CONTEXT_LIMIT)
            except PolicyExhausted as exc:
                return end_without_commit(state, f"{POLICY_EXHAUSTED}: {exc}" if str(exc) else POLICY_EXHAUSTED)
            except EnvironmentHookFailed as exc:  # a hook the policy asked (tool_schemas): the environment's failure
                raise ConversationError("simulator_error", state, exc, str(exc)) from exc
            except Exception as exc:  # any policy failure, classified for the caller
                if _filtered_by_model(exc, state):
                    return end_without_commit(state, CONTENT_FILTER)
                raise ConversationError("policy_error", state, exc, _player_failure(exc)) from exc
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # noqa: BLE001 - turned into this rollout's error, below
                # Not an Exception: a policy of the user's own (a scripted player's function) calling sys.exit(), or
                # raising asyncio.CancelledError, ended the whole run, silently, every rollout of the step lost.
                from rewardpipe.rewards.base import how_failed

                failure = EpisodeError(f"the policy {how_failed(exc)}")
                raise ConversationError("policy_error", state, failure, str(failure)) from None
            if not isinstance(turn, (str, Message)) or (isinstance(turn, Message) and turn.role != "assistant"):
                what = f"a {turn.role} message" if isinstance(turn, Message) else type(turn).__name__
                # (a dict is what a user scripting tool calls returns first: say what carries them)
                raise ConversationError(
                    "policy_error",
                    state,
                    TypeError(
                        f"policy returned {what}, not text or an assistant rewardpipe.Message (a turn with tool calls "
                        "is Message(role='assistant', content=..., tool_calls=[...]))"
                    ),
                )
            try:
                state = apply_policy_turn(state, turn, env, task)
            except Exception as exc:  # the environment's on_policy_turn failed
                message = hook_failure(env, "on_policy_turn", exc)
                raise ConversationError("simulator_error", state, exc, message) from exc
        else:
            try:
                state = apply_env_turn(state, task, env, services)
            except Exception as exc:  # any environment failure, classified for the caller
                if state.assistant_turns and _outgrew_window(exc):  # the user's LLM read the model's turns
                    return end_without_commit(state, CONTEXT_LIMIT)
                if state.assistant_turns and _filtered_by_model(exc, state):
                    return end_without_commit(state, CONTENT_FILTER)
                raise ConversationError("simulator_error", state, exc, hook_failure(env, "respond", exc)) from exc
    _check_survives_json(state, env, made_by)
    return state


def run_episode(
    task: Any,
    policy: Policy,
    env: Environment,
    executor: Any,
    reward: Reward | None = None,
    *,
    run_id: str,
    step: int,
    group_id: str,
    rollout_id: str,
    max_turns: int | None = None,
    services: EnvServices | None = None,
) -> Record:
    """One rollout end to end. Every failure of the machinery becomes an error record."""
    reward = reward if reward is not None else env.reward
    try:
        state = start_episode(
            task, env=env, run_id=run_id, step=step, group_id=group_id, rollout_id=rollout_id, max_turns=max_turns
        )
    except Exception as exc:  # noqa: BLE001 - the environment's start failed: this rollout's error, as in run_slots
        return failure_record(
            run_id=run_id,
            step=step,
            group_id=group_id,
            rollout_id=rollout_id,
            task_id=task.task_id,
            kind="simulator_error",
            message=hook_failure(env, "start", exc),
            reward=reward,
        )
    try:
        state = converse(state, task, policy, env, services=services)
    except ConversationError as exc:  # a policy/environment failure is infrastructure, not a score
        return error_record(exc.state, exc.kind, str(exc), reward)
    try:
        job = execution_job(state, task, env)
    except Exception as exc:  # noqa: BLE001 - the environment's execution_job failed
        return error_record(state, "simulator_error", hook_failure(env, "execution_job", exc), reward)
    execution = None
    if job is not None:
        try:
            execution = executor.run(job)
        except Exception as exc:  # noqa: BLE001
            return error_record(state, "executor_crash", f"{type(exc).__name__}: {exc}", reward)
    return finish_episode(state, task, execution, reward, env)


class ReplayMismatch(ValueError):
    """A recorded conversation is not what the environment says to it now."""


def _opening_difference(env: Environment, recorded: Sequence[Message], opening: Sequence[Message]) -> str:
    """Where a recorded conversation leaves the environment's opening messages, said so the user can fix it."""
    if (
        recorded
        and recorded[0].role in ("system", "developer")
        and (not opening or opening[0].role != recorded[0].role)
    ):
        told = " (the environment's system_prompt is told to the policy, not recorded)" if env.system_prompt else ""
        return f"it starts with a {recorded[0].role} message the environment does not open with{told}: leave it out"
    for index, expected in enumerate(opening):
        if index >= len(recorded):
            return f"it ends after {len(recorded)} message(s), before the environment's opening {expected.role} message"
        if recorded[index].model_dump() != expected.model_dump():

            def cut(text: str) -> str:
                return repr(text if len(text) <= 60 else text[:57] + "...")

            return (
                f"message {index + 1} is a {recorded[index].role} message {cut(recorded[index].content)} where the "
                f"environment opens with a {expected.role} message {cut(expected.content)}"
            )
    return "it differs from the environment's opening"


def replay_through_hooks(env: Environment, task: Any, messages: Sequence[Message]) -> EpisodeState:
    """The final state of a recorded conversation, rebuilt by playing its assistant turns through the
    environment's hooks; every message the environment adds must be the recorded one (else
    :class:`ReplayMismatch` says where), so the state is the one the live run had."""
    if env.calls_llm:
        raise ReplayMismatch(
            f"environment '{env.name}' calls an LLM and defines no replay(task, messages), so a "
            f"recorded conversation cannot be scored as it stands: use run --policy replay"
        )

    def same(a: Message, b: Message) -> bool:
        return a.model_dump() == b.model_dump()

    recorded = list(messages)
    state = start_episode(task, env=env, run_id="", step=0, group_id="", rollout_id="", max_turns=MAX_TURNS)
    opening = len(state.messages)
    if len(recorded) < opening or not all(same(a, b) for a, b in zip(recorded, state.messages, strict=False)):
        difference = _opening_difference(env, recorded, state.messages)
        raise ReplayMismatch(f"the recorded conversation does not open with the task's prompt: {difference}")
    position = opening
    while state.next_action in ("policy", "env"):
        if state.next_action == "policy":
            if position >= len(recorded):
                return end_without_commit(state, POLICY_EXHAUSTED)
            message = recorded[position]
            if message.role != "assistant":
                raise ReplayMismatch(f"message {position + 1} is a {message.role} message where the model speaks")
            state = apply_policy_turn(state, message, env, task)
            position += 1
        else:
            if position >= len(recorded):
                return end_without_commit(state, RECORDING_ENDED)
            before = len(state.messages)
            state = apply_env_turn(state, task, env)
            added = state.messages[before:]
            expected = recorded[position : position + len(added)]
            if len(expected) != len(added) or not all(same(a, b) for a, b in zip(added, expected, strict=True)):
                raise ReplayMismatch(
                    f"the environment answers differently from the recording at message {position + 1}"
                )
            position += len(added)
    if position < len(recorded):
        raise ReplayMismatch(
            f"the episode ended ({state.end_reason}) at message {position}, but the recording "
            f"goes on to message {len(recorded)}"
        )
    return state
