"""Scripted tool users: doctor's scenarios and the ``--policy scripted`` mix.

Every player follows a script built from the task's ``reference_calls`` (the same script on every turn of a
rollout: it is drawn from the rollout's generator), so it can make the mistakes a model makes on the way:

* ``careful``   the reference calls as structured ``tool_calls`` (all in one turn, or one a turn), then the
  answer: reaches the goal;
* ``tagged``    the same calls as ``<tool_call>`` text, the first one sometimes with an argument of the wrong
  type, corrected on the next turn;
* ``redundant`` asks the first call again before going on;
* ``sloppy``    starts with a call that does not parse or names no tool, then either recovers or gives up;
* ``hasty``     answers at once without a call (the collapse ``--collapse-from-step`` plays).

Doctor's scenarios: ``reference`` (one structured call a turn, then the answer), ``tagged``, ``malformed``,
``loop`` (the first call over and over) and ``hasty``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rewardpipe.envs.tool_call.calls import ANSWER_TAG, CALL_TAG
from rewardpipe.models import Message
from rewardpipe.policies import ScriptedPolicy

if TYPE_CHECKING:  # pragma: no cover
    from rewardpipe.envs.tool_call.state import ToolCallState
    from rewardpipe.envs.tool_call.tasks import ToolCallTask

STRATEGY_WEIGHTS = {"careful": 0.35, "tagged": 0.2, "redundant": 0.15, "sloppy": 0.15, "hasty": 0.15}
GIVE_UP = "I could not finish this. <answer>unknown</answer>"
Turn = Any  # str | Message


def answer(task: ToolCallTask) -> str:
    return f"Done. <{ANSWER_TAG}>{task.expected_answer or 'done'}</{ANSWER_TAG}>"


def structured(calls: list[tuple[str, dict[str, Any]]], turn: int) -> Message:
    """An assistant turn carrying ``calls`` as OpenAI-style ``tool_calls``."""
    return Message(
        role="assistant",
        content="",
        tool_calls=[
            {
                "id": f"call_{turn}_{index}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            for index, (name, arguments) in enumerate(calls)
        ],
    )


def tagged(calls: list[tuple[str, dict[str, Any]]]) -> str:
    """An assistant turn writing ``calls`` as ``<tool_call>`` tags."""
    return "\n".join(
        f"<{CALL_TAG}>{json.dumps({'name': name, 'arguments': arguments})}</{CALL_TAG}>" for name, arguments in calls
    )


def _plan(task: ToolCallTask) -> list[tuple[str, dict[str, Any]]]:
    return [(call.name, dict(call.arguments)) for call in task.reference_calls]


def mistyped(name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The call with an argument of the wrong type (a number written as text), or an argument too many."""
    for key, value in arguments.items():
        if isinstance(value, int) and not isinstance(value, bool):
            return name, {**arguments, key: str(value)}
    return name, {**arguments, "note": "please"}


def _one_a_turn(calls: list[tuple[str, dict[str, Any]]], first_turn: int, as_text: bool) -> list[Turn]:
    return [tagged([call]) if as_text else structured([call], first_turn + i) for i, call in enumerate(calls)]


def script(strategy: str, task: ToolCallTask, rng: random.Random) -> list[Turn]:
    """A rollout's turns: the calls, then the answer (see the module docstring)."""
    plan = _plan(task)
    if strategy == "hasty" or not plan:
        return [GIVE_UP if strategy == "hasty" else answer(task)]
    if strategy == "careful":
        calls = [structured(plan, 0)] if rng.random() < 0.5 else _one_a_turn(plan, 0, as_text=False)
        return [*calls, answer(task)]
    if strategy == "tagged":
        slip = [tagged([mistyped(*plan[0])])] if rng.random() < 0.5 else []
        return [*slip, *_one_a_turn(plan, len(slip), as_text=True), answer(task)]
    if strategy == "redundant":
        repeats = [plan[0]] * rng.randint(1, 2)
        return [*_one_a_turn([plan[0], *repeats, *plan[1:]], 0, as_text=False), answer(task)]
    # sloppy: a call that does not parse, or names no tool; then half the time the plan, else giving up
    broken = (
        f'<{CALL_TAG}>{{"name": "{plan[0][0]}", arguments: }}</{CALL_TAG}>'
        if rng.random() < 0.5
        else tagged([("do_" + plan[0][0], plan[0][1])])
    )
    if rng.random() < 0.5:
        return [broken, *_one_a_turn(plan, 1, as_text=True), answer(task)]
    return [broken, GIVE_UP]


def _player(strategy: str) -> Callable[..., Turn]:
    def turn(state: ToolCallState, task: ToolCallTask, rng: random.Random) -> Turn:
        turns = script(strategy, task, rng)
        return turns[min(state.assistant_turns, len(turns) - 1)]

    return turn


def training_scenarios(weights: dict[str, float] | None = None):
    """``task -> {strategy: ScriptedPolicy}`` for :class:`rewardpipe.policies.ScenarioMix`."""
    chosen = dict(weights or STRATEGY_WEIGHTS)
    unknown = set(chosen) - set(STRATEGY_WEIGHTS)
    if unknown:
        raise ValueError(f"unknown strategies {sorted(unknown)}; known: {sorted(STRATEGY_WEIGHTS)}")
    chosen.setdefault("hasty", 0.0)  # the collapse must always be there to play
    mix = {name: ScriptedPolicy(_player(name), weight=weight) for name, weight in chosen.items()}
    if not any(scenario.weight > 0 for scenario in mix.values()):
        raise ValueError("at least one strategy weight must be positive")
    return lambda task: mix


def doctor_scenarios(task: ToolCallTask) -> dict[str, ScriptedPolicy]:
    plan = _plan(task)
    turns = len(plan) + 2
    first = plan[0] if plan else ("list_items", {})
    return {
        "reference": ScriptedPolicy(
            [*_one_a_turn(plan, 0, as_text=False), answer(task)],
            max_turns=turns,
            description="the reference calls, one a turn, then the expected answer",
        ),
        "tagged": ScriptedPolicy(
            [*_one_a_turn(plan, 0, as_text=True), answer(task)],
            max_turns=turns,
            description="the reference calls as <tool_call> text",
        ),
        "malformed": ScriptedPolicy(
            [f"<{CALL_TAG}>{{not json</{CALL_TAG}>", GIVE_UP], description="a call that does not parse, then gives up"
        ),
        "loop": ScriptedPolicy(
            lambda state, task: structured([first], state.assistant_turns), description="the first call over and over"
        ),
        "hasty": ScriptedPolicy([GIVE_UP], description="answers at once, without a call"),
    }
