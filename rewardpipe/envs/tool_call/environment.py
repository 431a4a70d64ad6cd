"""The tool-call environment: the model reaches a goal in a small world by calling typed tools, then answers.

* task: :class:`~rewardpipe.envs.tool_call.tasks.ToolCallTask` (prompt, initial ``world``, expected world
  and/or answer, reference calls);
* state: :class:`~rewardpipe.envs.tool_call.state.ToolCallState` (the world, every call, the answer);
* ``on_policy_turn``: a turn with calls (structured ``tool_calls``, or ``<tool_call>`` tags in its text:
  :mod:`~rewardpipe.envs.tool_call.calls`) hands the turn to the environment; a turn without any is the
  final answer and ends the episode (``score``, end reason ``answered``);
* ``respond``: runs each call (:meth:`~rewardpipe.envs.tool_call.tools.Toolset.call`: arguments validated
  strictly against the tool's schema; a tool's exception is the call's error) and appends one ``tool``
  message per call, with its ``tool_call_id``;
* ``execution_job``: none (the tools are trusted, pure functions; nothing the model writes is executed);
* ``replay``: the recorded calls played again through the tools, every tool message checked against the
  recording (``rewardpipe score --env tool_call``);
* ``scenarios``: doctor's (``reference`` plays the task's reference calls); ``--policy scripted`` plays the
  seeded mix of :mod:`~rewardpipe.envs.tool_call.scenarios`;
* reward: :data:`~rewardpipe.envs.tool_call.reward.TOOL_CALL`.

Your own tools: subclass :class:`ToolCallEnvironment` with ``name`` and ``toolset`` (a
:class:`~rewardpipe.envs.tool_call.tools.Toolset` of ``@tool`` functions) and your tasks' worlds.
An OpenAI-compatible policy is sent the tools' schemas (:meth:`ToolCallEnvironment.tool_schemas`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar, cast

from rewardpipe.environment import EnvContext, Environment
from rewardpipe.envs.tool_call.calls import CALL_TAG, MAX_CALLS_PER_TURN, ParsedCall, parse_turn
from rewardpipe.envs.tool_call.reward import TOOL_CALL
from rewardpipe.envs.tool_call.shop import SHOP
from rewardpipe.envs.tool_call.state import CallLog, ToolCallState
from rewardpipe.envs.tool_call.tasks import ToolCallTask
from rewardpipe.envs.tool_call.tools import CallOutcome, Toolset
from rewardpipe.models import Message

POLICY_SYSTEM_PROMPT = (
    "You can call tools to act on the user's behalf. Call a tool with the tools interface, or, if you have "
    f'none, write <{CALL_TAG}>{{"name": "<tool>", "arguments": {{...}}}}</{CALL_TAG}> (one tag per call). '
    "Each call is answered with its result. When the task is done, reply without any tool call, giving your "
    "final answer as <answer>...</answer>."
)


def call_key(name: str, arguments: Mapping[str, Any]) -> str:
    """What makes two calls the same call: the tool and its validated arguments, as canonical JSON."""
    return json.dumps([name, arguments], sort_keys=True, separators=(",", ":"), default=str)


def world_digest(world: Mapping[str, Any]) -> str:
    """What makes two worlds the same world: a digest of its canonical JSON."""
    text = json.dumps(world, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _worlds_seen(state: ToolCallState) -> list[str | None]:
    """The digest of the world at each version so far (None where unknown: a state stored before they were kept)."""
    if len(state.worlds_seen) == state.world_version + 1:
        return list(state.worlds_seen)
    return [None] * state.world_version + [world_digest(state.world)]


def _same_world(seen: Sequence[str | None], version: int, other: int) -> bool:
    return version == other or (seen[version] is not None and seen[version] == seen[other])


def _unused_id(used: set[str], turn: int, index: int) -> str:
    """An id for a call whose own id an earlier call of the episode has (the model's parser may take ids from the
    model's text, so two calls can share one): answered under it, the tool messages repeat an id, and OpenAI refuses
    the next request (HTTP 400, "Duplicate value for 'tool_call_id'"), the rollout an excluded policy_error of the
    model's making (round thirty-four). Unique in the episode; the call, as the assistant message holds it, keeps its
    id and goes unanswered under it (:func:`rewardpipe.policies.chat_messages` sends the result as text)."""
    made = f"call_{turn}_{index}"
    suffix = 0
    while made in used:
        suffix += 1
        made = f"call_{turn}_{index}_{suffix}"
    return made


def _refusal(text: str) -> str:
    return json.dumps({"error": text})


class ToolCallEnvironment(Environment[ToolCallState, ToolCallTask]):
    """See the module docstring; ``toolset`` is the class attribute a subclass sets."""

    name = "tool_call"
    version = "1"
    task_model = ToolCallTask
    state_model = ToolCallState
    max_turns = 8
    reward = TOOL_CALL
    system_prompt = POLICY_SYSTEM_PROMPT
    collapse_scenario = "hasty"
    toolset: ClassVar[Toolset] = SHOP

    def tool_schemas(self, task: ToolCallTask | None = None) -> list[dict[str, Any]]:  # noqa: ARG002 - every task shares one tool set; callers name the task
        """The tools as an OpenAI-compatible endpoint is sent them (``tools=``)."""
        return self.toolset.schemas()

    # -- the episode ------------------------------------------------------------------------------------

    def start(self, task: ToolCallTask) -> ToolCallState:
        return ToolCallState(messages=task.prompt_messages(), world=task.world)

    def _parsed(self, state: ToolCallState, text: str) -> Any:
        return parse_turn(text, state.messages[-1].tool_calls, state.assistant_turns - 1)

    def on_policy_turn(self, state: ToolCallState, task: ToolCallTask, text: str) -> ToolCallState:  # noqa: ARG002 - Environment hook: its signature is the public API v1
        parsed = self._parsed(state, text)
        if parsed.answer is not None:
            return state.evolve(
                answer=parsed.answer,
                turn_kinds=[*state.turn_kinds, "answer"],
                next_action="score",
                end_reason="answered",
            )
        return state.evolve(turn_kinds=[*state.turn_kinds, "calls"], next_action="env")

    def _run(self, call: ParsedCall, index: int, world: dict[str, Any]) -> CallOutcome:
        if call.problem is not None:
            return CallOutcome("invalid", _refusal(call.problem), world)
        if index >= MAX_CALLS_PER_TURN:
            return CallOutcome("refused", _refusal(f"not run: at most {MAX_CALLS_PER_TURN} calls per turn"), world)
        return self.toolset.call(call.name, call.arguments, world)

    def respond(self, state: ToolCallState, task: ToolCallTask, ctx: EnvContext | None = None) -> ToolCallState:  # noqa: ARG002 - Environment hook: its signature is the public API v1
        parsed = self._parsed(state, state.messages[-1].content)
        turn = state.assistant_turns - 1
        world, version = state.world, state.world_version
        seen = _worlds_seen(state)
        logs, replies = list(state.calls), []
        used = {log.id for log in logs}
        for index, call in enumerate(parsed.calls):
            if call.id in used:
                call = replace(call, id=_unused_id(used, turn, index))
            used.add(call.id)
            outcome = self._run(call, index, world)
            name = call.name if isinstance(call.name, str) and call.name in self.toolset.tools else None
            key = call_key(name, outcome.arguments) if name and outcome.arguments is not None else None
            changed = outcome.world is not world
            if changed:
                # A change back to a world the episode was already in: this call and those since did nothing
                # overall (a transfer out and back, a price set and set back), whatever the goal says after.
                digest = world_digest(outcome.world)
                redundant = digest in seen
                world, version = outcome.world, version + 1
                seen.append(digest)
            else:
                # The same call again, answered before in the same world, that changes nothing now: a second
                # read (also after a change that was undone), not a second transfer (which does something).
                redundant = key is not None and any(
                    log.key == key and _same_world(seen, log.world_version, version) for log in logs
                )
            logs.append(
                CallLog(
                    id=call.id,
                    turn=turn,
                    name=name,
                    status=outcome.status,
                    key=key,
                    world_version=version,
                    redundant=redundant,
                )
            )
            replies.append(Message(role="tool", content=outcome.content, tool_call_id=call.id, name=name))
        if parsed.unread:
            replies.append(
                Message(
                    role="user",
                    content=f"{parsed.unread} more call(s) in that turn were not read: "
                    f"at most {MAX_CALLS_PER_TURN} calls a turn are run.",
                )
            )
        return state.append(
            *replies,
            world=world,
            world_version=version,
            calls=logs,
            worlds_seen=seen,
            unread_calls=state.unread_calls + parsed.unread,
            next_action="policy",
        )

    # -- scoring recorded conversations, doctor, the record -----------------------------------------------

    def replay(self, task: ToolCallTask, messages: Sequence[Message]) -> ToolCallState:
        """The state of a recorded episode: its assistant turns played through the tools again, every tool
        message checked against the recorded one."""
        from rewardpipe.episode import replay_through_hooks

        return cast(ToolCallState, replay_through_hooks(self, task, messages))  # built by this environment's hooks

    def scenarios(self, task: ToolCallTask) -> dict[str, Any]:
        from rewardpipe.envs.tool_call.scenarios import doctor_scenarios

        return doctor_scenarios(task)

    def scripted_policy(
        self, *, seed: int = 0, collapse_from_step: int | None = None, weights: Mapping[str, float] | None = None
    ) -> Any:
        """The seeded strategy mix of :mod:`~rewardpipe.envs.tool_call.scenarios` (``weights`` per
        strategy, default :data:`~rewardpipe.envs.tool_call.scenarios.STRATEGY_WEIGHTS`)."""
        from rewardpipe.envs.tool_call.scenarios import training_scenarios
        from rewardpipe.policies import ScenarioMix

        return ScenarioMix(
            training_scenarios(dict(weights) if weights else None),
            seed=seed,
            collapse_from_step=collapse_from_step,
            collapse_to=self.collapse_scenario,
        )

    def metrics(self, state: ToolCallState, task: ToolCallTask) -> dict[str, Any]:  # noqa: ARG002 - Environment hook: its signature is the public API v1
        statuses = [call.status for call in state.calls]
        return {
            "calls": len(statuses),
            "invalid_calls": statuses.count("invalid") + state.unread_calls,
            "tool_errors": statuses.count("tool_error"),
            "redundant_calls": sum(1 for call in state.calls if call.redundant),
            "answered": state.answer is not None,
        }

    def transcript_fields(self, state: ToolCallState, task: ToolCallTask | None) -> dict[str, Any]:  # noqa: ARG002 - Environment hook: its signature is the public API v1
        return {"turn_kinds": list(state.turn_kinds)}

    def check_task(self, task: ToolCallTask, runs: Mapping[str, Any]) -> list[str]:
        """Every reference call names a tool and type-checks, and the reference reaches the goal without a
        tool refusing a call (a task whose reference only works by luck is a broken task)."""
        problems = []
        for index, planned in enumerate(task.reference_calls):
            outcome = self.toolset.call(planned.name, planned.arguments, task.world)
            if outcome.status == "invalid":
                problems.append(f"reference call {index + 1} ({planned.name}) is invalid: {outcome.content}")
        reference = runs.get("reference")
        state = reference.state if reference is not None else None
        if isinstance(state, ToolCallState):
            refused = [call for call in state.calls if call.status == "tool_error"]
            if refused:
                problems.append(f"the reference calls make a tool refuse call {refused[0].id} ({refused[0].name})")
        return problems


ENVIRONMENT = ToolCallEnvironment()
