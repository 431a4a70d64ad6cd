"""Policies produce assistant turns: scripted players, a replay of recorded turns, or a live endpoint.

* :class:`ScriptedPolicy` plays one scripted strategy (fixed turns, or a function of the state); an
  environment's ``scenarios(task)`` names a few, one of them ``reference``;
* :class:`ScenarioMix` is ``run --policy scripted``: every rollout draws one scenario, seeded by the rollout's
  ids, so groups have real, reproducible within-group variance;
* :class:`ReplayPolicy` replays recorded rollouts; :class:`OpenAIPolicy` asks an OpenAI-compatible endpoint.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import random
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from rewardpipe.bounded import AbandonedCalls
from rewardpipe.environment import ContextLimitReached, PolicyExhausted
from rewardpipe.models import Message, Rollout
from rewardpipe.openai_client import ChatClient, ContextLengthExceeded, NoTextBeforeLimit, OwnsChatClient
from rewardpipe.rewards.base import how_failed

if TYPE_CHECKING:  # pragma: no cover
    from rewardpipe.environment import EpisodeState, TaskRow

__all__ = [
    "OpenAIPolicy",
    "Policy",
    "PolicyExhausted",
    "ReplayPolicy",
    "ScenarioFailed",
    "ScenarioMix",
    "ScriptedPolicy",
    "fenced",
]


class Policy(Protocol):
    def next_turn(self, state: EpisodeState, task: TaskRow) -> str | Message: ...


def fenced(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


def rollout_rng(seed: int, state: EpisodeState) -> random.Random:
    """A random generator of one rollout: the same seed and ids give the same draws, whatever the order
    the rollouts are played in."""
    digest = hashlib.sha256(f"{seed}:{state.run_id}:{state.step}:{state.rollout_id}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


TurnFn = Callable[..., "str | Message"]


class ScriptedPolicy:
    """One scripted strategy, for ``doctor`` and ``run --policy scripted``.

    ``ScriptedPolicy(turns, *, weight=1.0, max_turns=None, description="")``: ``turns`` is the list of
    assistant turns to say in order (then the policy is exhausted and the episode is scored as it stands),
    or a function ``(state, task)`` or ``(state, task, rng)`` returning the next turn (``rng``: a
    ``random.Random`` of the rollout). ``weight`` is how often :class:`ScenarioMix` draws it (0: never, e.g.
    a scenario for doctor only); ``max_turns`` the turn limit doctor plays it with (default: the
    environment's).
    """

    def __init__(
        self,
        turns: Sequence[str | Message] | TurnFn,
        *,
        weight: float = 1.0,
        max_turns: int | None = None,
        description: str = "",
    ) -> None:
        numeric = isinstance(weight, (int, float)) and not isinstance(weight, bool)
        if not (numeric and math.isfinite(weight) and weight >= 0):
            raise ValueError(f"a scenario's weight must be a finite number >= 0, got {weight!r}")
        if max_turns is not None and (isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1):
            raise ValueError(f"max_turns must be a positive integer, got {max_turns!r}")
        if callable(turns):
            if inspect.iscoroutinefunction(turns) or inspect.iscoroutinefunction(type(turns).__call__):
                # Called, never awaited (as a hook is): each turn was a coroutine that never ran, every rollout the
                # scenario played a policy_error saying only "policy returned coroutine, not text".
                raise TypeError(
                    "a ScriptedPolicy's function is async def; a scripted player is called synchronously: define it "
                    "with def (and run async code inside it with asyncio.run(...))"
                )
            self.turns: tuple | None = None
            self.fn: TurnFn | None = turns
            try:
                params = inspect.signature(turns).parameters.values()
                self._takes_rng = sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)) >= 3
            except (TypeError, ValueError):
                self._takes_rng = False
        elif isinstance(turns, (list, tuple)) and all(isinstance(t, (str, Message)) for t in turns):
            self.turns, self.fn, self._takes_rng = tuple(turns), None, False
        else:
            raise TypeError(
                "ScriptedPolicy takes a list of turns (text or Message) or a function (state, task[, rng]) -> turn"
            )
        self.weight = float(weight)
        self.max_turns = max_turns
        self.description = description

    def turn(self, state: EpisodeState, task: TaskRow, rng: random.Random) -> str | Message:
        if self.turns is not None:
            index = state.assistant_turns
            if index >= len(self.turns):
                raise PolicyExhausted(f"the scenario has {len(self.turns)} turn(s)")
            return self.turns[index]
        assert self.fn is not None
        return self.fn(state, task, rng) if self._takes_rng else self.fn(state, task)

    def next_turn(self, state: EpisodeState, task: TaskRow) -> str | Message:
        rng = rollout_rng(0, state)
        rng.random()
        return self.turn(state, task, rng)

    def __repr__(self) -> str:
        return f"ScriptedPolicy({'turns' if self.turns is not None else 'fn'}, weight={self.weight:g})"


ScenariosFn = Callable[[Any], Mapping[str, ScriptedPolicy]]


class ScenarioFailed(Exception):
    """A scripted player, or the environment's ``scenarios()``, failed while a rollout was played (raised, or called
    ``sys.exit()``): the message names which scenario of which task, and how it failed. Its rollout is a
    ``policy_error``; the run goes on."""


class PlayerTimeout(Exception):
    """A scripted player's turn still running past its environment's ``hook_timeout_s``: abandoned (Python cannot stop
    a thread), its rollout a ``policy_error``, the run goes on."""


def play_turn(
    turn: Callable[..., str | Message], args: tuple[Any, ...], timeout_s: Any, calls: AbandonedCalls
) -> str | Message:
    """``turn(*args)`` (a scripted player's), bounded by ``timeout_s`` (its environment's ``hook_timeout_s``; None: a
    plain call): a scripted player is the environment's code as much as a hook is, and one that hung hung ``run
    --policy scripted`` and ``doctor``."""
    if timeout_s is None:
        return turn(*args)
    limit = float(timeout_s)

    def late(running: int) -> PlayerTimeout:
        if running:
            return PlayerTimeout(f"not played: {running} earlier turns still running past hook_timeout_s={limit:g} s")
        return PlayerTimeout(f"did not return within hook_timeout_s={limit:g} s (abandoned, perhaps still running)")

    return calls.call(turn, args, {}, limit, late)


class BoundedPlayer:
    """A scripted player (``ScriptedPolicy``) whose every turn is bounded by ``timeout_s`` (:func:`play_turn`); what
    ``doctor`` plays an environment's scenarios as."""

    def __init__(self, player: Any, timeout_s: Any) -> None:
        self.player = player
        self.timeout_s = timeout_s
        self._late_turns = AbandonedCalls("rewardpipe-scenario-player")

    def next_turn(self, state: EpisodeState, task: Any) -> str | Message:
        return play_turn(self.player.next_turn, (state, task), self.timeout_s, self._late_turns)


def _endpoint_failure(exc: BaseException) -> bool:
    """An endpoint's failure inside a scripted player (one that asks an LLM): passed on as it is, for the turn loop
    to classify (a content filter, a context window)."""
    client = sys.modules.get("rewardpipe.openai_client")
    return client is not None and isinstance(exc, client.EndpointError)


class ScenarioMix:
    """Every rollout plays one scenario of its task, drawn by the scenarios' weights from a generator seeded
    by ``(seed, run, step, rollout)``; from ``collapse_from_step`` on, every rollout plays ``collapse_to``
    (the collapse the monitor exists to catch). The same generator, advanced past the draw, is what a
    scenario function receives as ``rng``. ``timeout_s`` (the environment's ``hook_timeout_s``) bounds each player's
    turn (:func:`play_turn`); ``scenarios`` is asked as it is (``Environment.scripted_policy`` bounds it too)."""

    def __init__(
        self,
        scenarios: ScenariosFn,
        *,
        seed: int = 0,
        collapse_from_step: int | None = None,
        collapse_to: str | None = None,
        timeout_s: float | None = None,
    ) -> None:
        if collapse_from_step is not None and collapse_to is None:
            raise ValueError("this environment names no collapse_scenario, so --collapse-from-step cannot be used")
        self.scenarios = scenarios
        self.seed = seed
        self.collapse_from_step = collapse_from_step
        self.collapse_to = collapse_to
        self._by_task: dict[int, tuple[Any, Mapping[str, ScriptedPolicy]]] = {}
        self._drawn: dict[tuple, tuple[str, Any]] = {}
        self.timeout_s = timeout_s  # each player's turn, as the environment's hook_timeout_s bounds its hooks
        self._late_turns = AbandonedCalls("rewardpipe-scenario-player")

    def _scenarios(self, task: Any) -> Mapping[str, ScriptedPolicy]:
        """A task's scenarios, asked of the environment once per task (a task's scenarios do not change)."""
        known = self._by_task.get(id(task))
        if known is not None and known[0] is task:
            return known[1]
        try:
            scenarios = self.scenarios(task)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # the environment's code (sys.exit() too): its rollout's error, not the run's end
            raise ScenarioFailed(f"scenarios() of task {task.task_id!r} {how_failed(exc)}") from exc
        if not isinstance(scenarios, Mapping) or not all(isinstance(s, ScriptedPolicy) for s in scenarios.values()):
            # a list of names, a dict of plain functions: "AttributeError: 'list' object has no attribute 'items'"
            # said neither what returned it nor what it should be
            odd = (
                scenarios
                if not isinstance(scenarios, Mapping)
                else next(s for s in scenarios.values() if not isinstance(s, ScriptedPolicy))
            )
            what = "returned" if odd is scenarios else "named"
            raise ScenarioFailed(
                f"scenarios() of task {task.task_id!r} {what} a {type(odd).__name__}: it returns a dict of named "
                f"ScriptedPolicy players"
            )
        if not scenarios:
            raise ValueError(f"the environment gives no scenarios for task '{task.task_id}' to play")
        if len(self._by_task) >= 4096:
            self._by_task.clear()
        self._by_task[id(task)] = (task, scenarios)  # the task is kept, so its id is never reused meanwhile
        return scenarios

    def strategy(self, state: EpisodeState, task: Any = None) -> str:
        return self._draw(state, task)[0]

    def _draw(self, state: EpisodeState, task: Any) -> tuple[str, Any]:
        """``(scenario, generator state after the draw)`` of a rollout, drawn once and remembered for its
        later turns (a fresh generator per turn would give the same draws, for a hash and a reseed each)."""
        key = (state.run_id, state.step, state.rollout_id, id(task))
        drawn = self._drawn.get(key)
        if drawn is not None:
            return drawn
        if self.collapse_from_step is not None and state.step >= self.collapse_from_step:
            name: str = self.collapse_to  # type: ignore[assignment]
        else:
            scenarios = self._scenarios(task)
            names = [name for name, scenario in scenarios.items() if scenario.weight > 0]
            if not names:
                raise ValueError(f"every scenario of task '{task.task_id}' has weight 0")
            name = rollout_rng(self.seed, state).choices(names, weights=[scenarios[n].weight for n in names])[0]
        rng = rollout_rng(self.seed, state)
        rng.random()  # decorrelate from the strategy draw
        drawn = (name, rng.getstate())
        if len(self._drawn) >= 4096:  # bounded: the rollouts of one step at most are in play at once
            self._drawn.clear()
        self._drawn[key] = drawn
        return drawn

    def next_turn(self, state: EpisodeState, task: Any) -> str | Message:
        scenarios = self._scenarios(task)
        name, rng_state = self._draw(state, task)
        if name not in scenarios:
            raise ValueError(f"no scenario named '{name}' for task '{task.task_id}' (known: {', '.join(scenarios)})")
        rng = random.Random.__new__(random.Random)  # no seeding from the OS: the state is set right after
        rng.setstate(rng_state)
        try:
            return play_turn(scenarios[name].turn, (state, task, rng), self.timeout_s, self._late_turns)
        except (PolicyExhausted, KeyboardInterrupt):  # the script ended (or the window is full): scored as it stands
            raise
        except BaseException as exc:  # a player's failure, named: "RuntimeError: boom" said neither
            if _endpoint_failure(exc):
                raise
            raise ScenarioFailed(f"scenario {name!r} of task {task.task_id!r} {how_failed(exc)}") from exc


class ReplayPolicy:
    """Replays the assistant turns of recorded rollouts, matched by ``(step, rollout_id)``.

    Rollout ids often repeat across training steps ("...-k0" at every step), so the step is part of the
    key; a rollout id recorded at a single step also matches a state at another step. The same
    ``(step, rollout_id)`` recorded twice is ambiguous and rejected. Assistant messages are replayed whole
    (their ``tool_calls`` too).
    """

    def __init__(self, rollouts: Iterable[Rollout]):
        self.turns: dict[tuple[int, str], list[Message]] = {}
        for rollout in rollouts:
            key = (rollout.step, rollout.rollout_id)
            if key in self.turns:
                raise ValueError(f"rollout '{rollout.rollout_id}' is recorded twice for step {rollout.step}")
            self.turns[key] = [m for m in rollout.messages if m.role == "assistant"]
        self._steps_by_id: dict[str, list[int]] = {}
        for step, rollout_id in self.turns:
            self._steps_by_id.setdefault(rollout_id, []).append(step)

    def _recorded(self, state: EpisodeState) -> list[Message] | None:
        exact = self.turns.get((state.step, state.rollout_id))
        if exact is not None:
            return exact
        steps = self._steps_by_id.get(state.rollout_id, [])
        return self.turns[(steps[0], state.rollout_id)] if len(steps) == 1 else None

    def next_turn(self, state: EpisodeState, task: Any) -> str | Message:  # noqa: ARG002 - the policy interface's next_turn(state, task)
        recorded = self._recorded(state)
        if recorded is None:
            raise KeyError(f"no recorded rollout '{state.rollout_id}' (step {state.step}) to replay")
        turn = state.opening_turns + state.assistant_turns  # the recording holds the opening's assistant messages too
        if turn >= len(recorded):
            raise PolicyExhausted(f"recording has {len(recorded)} assistant turn(s)")
        message = recorded[turn]
        return message if message.tool_calls or message.name else message.content


def chat_message(message: Message) -> dict[str, Any]:
    """A message as an OpenAI-compatible endpoint takes it (tool fields only when present)."""
    return message.model_dump(mode="json")


def chat_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The conversation as an endpoint takes it back: an assistant turn's ``tool_calls`` only the ones the tool
    messages after it answer. OpenAI refuses (HTTP 400) a request in which a call has no answer; an environment
    answers a bounded number of a turn's calls (tool_call: the first 16, the rest counted), so a model that made
    more calls in one turn than that made its next request fail, its rollout an excluded ``policy_error``.

    And the other way round: OpenAI refuses a ``tool`` message that answers no call of the assistant turn before it,
    as sent. A call the model wrote as a ``<tool_call>`` tag in its text (the endpoint's parser made no call of it),
    or one whose id the environment made up, was answered by such a message, and the next request failed: a model
    about to fail its task made its rollout an excluded ``policy_error`` by writing its call as text (round
    twenty-five). Such a result is sent as the user's message instead (what a model without a tool parser reads),
    merged with the user's messages beside it so the roles still alternate.

    And each id once (round thirty-four): OpenAI refuses a request that lists an id twice ("Duplicate value for
    'tool_call_id'"), and a tool parser taking ids from the model's text lets two calls share one. A call whose id an
    earlier call of the request has is not sent back, and a tool message answering an id already answered is sent as
    text: every id is listed once in the whole request and answered by exactly one tool message after it."""
    out = [chat_message(m) for m in messages]
    sent_calls: set[Any] = set()  # the ids of the latest assistant turn's calls, as sent back, not yet answered
    listed: set[str] = set()  # the ids of every call sent back so far
    as_user: set[int] = set()
    for index, message in enumerate(messages):
        if message.role == "tool":
            if message.tool_call_id in sent_calls:
                sent_calls.discard(message.tool_call_id)  # answered: a second answer goes as text
            else:
                out[index] = {"role": "user", "content": _tool_result_text(message)}
                as_user.add(index)
        if message.role != "assistant":
            continue
        sent_calls = set()
        if not message.tool_calls:
            continue
        answered = set()
        for later in messages[index + 1 :]:
            if later.role == "assistant":
                break
            if later.role == "tool" and later.tool_call_id is not None:
                answered.add(later.tool_call_id)
        # Only a text id can be answered (a tool message's tool_call_id is text); a list or an object as the id (an
        # endpoint's, or a parser's taking it from the model's output) is not even hashable: asked of the set, it
        # failed the rollout's next request ("unhashable type"), an excluded policy_error of the model's making.
        kept = []
        for call in message.tool_calls:
            if isinstance(call, dict) and isinstance(call.get("id"), str) and call["id"] in answered - listed:
                kept.append(call)
                listed.add(call["id"])
        sent_calls = {call["id"] for call in kept}
        if len(kept) != len(message.tool_calls):
            if kept:
                out[index]["tool_calls"] = kept
            else:
                out[index].pop("tool_calls", None)
    return _merged_user_turns(out, as_user) if as_user else out


def _tool_result_text(message: Message) -> str:
    name = f" ({message.name})" if message.name else ""
    return f"[result of tool call {message.tool_call_id or '?'}{name}]\n{message.content}"


def _merged_user_turns(out: list[dict[str, Any]], as_user: set[int]) -> list[dict[str, Any]]:
    """``out`` with each tool result sent as the user's (``as_user``: their indices) merged into the user message
    before it, and the user message after it merged in: one user turn between two assistant turns, as strict chat
    templates require. Two user messages the conversation itself holds side by side stay as they were. Each run's
    texts are joined once (linear in the conversation, however many results a turn had)."""
    merged: list[dict[str, Any]] = []
    parts: list[str] = []  # the texts of the user message merged[-1] is being built from
    for index, message in enumerate(out):
        joins = message["role"] == "user" and (index in as_user or index - 1 in as_user)
        if joins and merged and merged[-1]["role"] == "user":
            parts.append(message["content"])
            continue
        if len(parts) > 1:
            merged[-1] = {**merged[-1], "content": "\n\n".join(parts)}
        merged.append(message)
        parts = [message["content"]] if message["role"] == "user" else []
    if len(parts) > 1:
        merged[-1] = {**merged[-1], "content": "\n\n".join(parts)}
    return merged


class OpenAIPolicy(OwnsChatClient):
    """Any OpenAI-compatible chat endpoint (a local vLLM server, a hosted API) plays the model.

    ``system_prompt`` (the environment's ``system_prompt``, usually) goes in front of the conversation.
    ``tools``: the tools the model may call, OpenAI-style schemas, or a function of the task returning them
    (an environment's ``tool_schemas``); they are sent with every request (``tools=``), and a reply's
    ``tool_calls`` are kept on the assistant message."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        temperature: float = 1.0,
        max_tokens: int = 1024,
        system_prompt: str | None = None,
        client: ChatClient | None = None,
        tools: Sequence[Mapping[str, Any]] | Callable[[Any], Sequence[Mapping[str, Any]]] | None = None,
    ):
        self.client = client or ChatClient(base_url, model, api_key=api_key)
        self.params = {"temperature": temperature, "max_tokens": max_tokens}
        self.system_prompt = system_prompt
        self.tools = tools

    def next_turn(self, state: EpisodeState, task: Any) -> str | Message:
        try:
            return self._next_turn(state, task)
        except ContextLengthExceeded as exc:  # the model's own turns filled its window: its episode ends
            raise ContextLimitReached(str(exc)) from exc
        except NoTextBeforeLimit:
            # The model spent max_tokens before writing a word (a reasoning model still thinking): its turn says
            # nothing, and is scored as such. As a policy_error it was left out of its group's baseline, so a model
            # that would fail its task escaped the score by thinking past the limit.
            return ""

    def _next_turn(self, state: EpisodeState, task: Any) -> str | Message:
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        messages += chat_messages(state.messages)
        tools = self.tools(task) if callable(self.tools) else self.tools
        if not tools:
            return self.client.complete(messages, **self.params)
        reply = self.client.complete_message(messages, tools=[dict(t) for t in tools], **self.params)
        if reply["tool_calls"]:
            return Message(role="assistant", content=reply["content"], tool_calls=reply["tool_calls"])
        return reply["content"]
