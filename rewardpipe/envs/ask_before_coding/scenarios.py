"""Scripted players of the ask-before-coding task: doctor's scenarios and the ``--policy scripted`` mix.

Doctor's scenarios (:func:`doctor_scenarios`) each play one fixed strategy so every component's reachable
values show: ``reference`` asks one generic question per hidden detail (each worded differently), then commits
the reference solution; ``guess`` commits a stub at once; ``loop`` repeats one question; ``stall_then_ask``
opens with a statement, asks once, then commits.

The training mix (:func:`training_scenarios`) is what ``run --policy scripted`` plays: each rollout draws a
strategy from a seeded draw on its ids, so groups have real, reproducible within-group variance:

* ``ask_first``  asks on turn one, keeps asking for a random number of turns, then commits;
* ``ask_later``  opens with a non-question, then asks, then commits;
* ``guess``      commits on turn one;
* ``loop``       repeats the same question until the turn limit, never committing.

A committing strategy submits the reference solution only when it has learnt every hidden detail, and a
signature-only guess otherwise: the "asking is needed to pass" design of the task, simulated.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING, Any

from rewardpipe.environment import MAX_TURNS
from rewardpipe.policies import ScriptedPolicy, fenced

if TYPE_CHECKING:  # pragma: no cover
    from rewardpipe.envs.ask_before_coding.tasks import Task

# Strategies of the scripted mix and how often a healthy policy picks each.
STRATEGY_WEIGHTS = {"ask_first": 0.35, "ask_later": 0.2, "guess": 0.3, "loop": 0.15}

_QUESTIONS = (
    "Before I write this, could you tell me more about the requirements?",
    "Are there any other details or edge cases I should know about?",
    "What else should I keep in mind — any constraints on the input or the output format?",
    "Is there anything more about the expected behaviour I should know?",
)
_STALL = "Let me think about how to approach this first."
_LOOP_QUESTION = "Can you explain again what exactly you need?"
GENERIC_QUESTION = "Could you tell me more about the requirements?"
# Doctor's generic questions, one per hidden detail, each worded differently: asking the same question again
# is a loop (loop_penalty compares every pair of turns), and the reference scenario must not be one.
GENERIC_QUESTIONS = (
    GENERIC_QUESTION,
    "Is there anything more about the expected behaviour I should know?",
    "Do you have more specifications for me?",
    "What else do you expect from it?",
    "What other details should I keep in mind?",
    "Anything else I need to know about the requirements?",
    "What further details matter here?",
    "Any more specifications?",
)


def stub_guess(task: Task) -> str:
    """What a model that never asked commits: a plausible signature with no knowledge of the hidden spec."""
    return f"def {task.entry_point}(*args, **kwargs):\n    return None\n"


def _commit(state: Any, task: Task) -> str:
    knows_everything = len(state.revealed) >= len(task.spec)
    code = task.reference_solution if knows_everything else stub_guess(task)
    return "Thanks, that makes it clear. Here is the implementation:\n" + fenced(code)


def _training_turn(strategy: str):
    def turn(state: Any, task: Task, rng: random.Random) -> str:
        current = state.assistant_turns
        planned_questions = rng.randint(1, max(1, len(task.spec)))
        if strategy == "guess":
            return "Here is my solution:\n" + fenced(stub_guess(task))
        if strategy == "loop":
            return _LOOP_QUESTION
        if strategy == "ask_later" and current == 0:
            return _STALL
        asked = current - (1 if strategy == "ask_later" else 0)
        last_turn = current + 1 >= state.max_turns
        if asked < planned_questions and not last_turn:
            return _QUESTIONS[asked % len(_QUESTIONS)]
        return _commit(state, task)

    return turn


_TRAINING_TURNS = {name: _training_turn(name) for name in STRATEGY_WEIGHTS}


def check_weights(weights: dict[str, Any]) -> dict[str, float]:
    """The strategy weights of the mix; an unknown strategy, a negative or non-finite weight, or all zero is
    a ValueError naming it (checked before any rollout, where it would turn every one into a policy error)."""
    unknown = set(weights) - set(STRATEGY_WEIGHTS)
    if unknown:
        raise ValueError(f"unknown strategies {sorted(unknown)}; known: {sorted(STRATEGY_WEIGHTS)}")
    for name, weight in weights.items():
        numeric = isinstance(weight, (int, float)) and not isinstance(weight, bool)
        if not (numeric and math.isfinite(weight) and weight >= 0):
            raise ValueError(f"strategy weight for '{name}' must be a finite number >= 0, got {weight!r}")
    if not sum(weights.values()) > 0:
        raise ValueError("at least one strategy weight must be positive")
    return {name: float(weight) for name, weight in weights.items()}


def training_scenarios(weights: dict[str, float] | None = None):
    """``task -> {strategy: ScriptedPolicy}`` for :class:`rewardpipe.policies.ScenarioMix`."""
    weights = check_weights(dict(weights or STRATEGY_WEIGHTS))
    mix = {name: ScriptedPolicy(_TRAINING_TURNS[name], weight=weight) for name, weight in weights.items()}
    return lambda task: mix


def _doctor_turn(name: str, questions: int):
    def turn(state: Any, task: Task) -> str:
        current = state.assistant_turns
        if name == "guess":
            return fenced(stub_guess(task))
        if name == "loop":
            return _LOOP_QUESTION
        if name == "stall_then_ask" and current == 0:
            return "Let me think about this first."
        asked = current - (1 if name == "stall_then_ask" else 0)
        if asked < questions:
            return GENERIC_QUESTIONS[asked % len(GENERIC_QUESTIONS)]
        if name == "reference":
            return fenced(task.reference_solution)  # whatever was revealed: the tests are checked on it
        return fenced(task.reference_solution if len(state.revealed) >= len(task.spec) else stub_guess(task))

    return turn


def doctor_scenarios(task: Task) -> dict[str, ScriptedPolicy]:
    # room for one question per detail, the commit, and a stall; within the turn limit (a spec holds at most
    # MAX_SPEC_ITEMS = MAX_TURNS - 1 items, so the reference scenario still asks them all and commits)
    turns = min(len(task.spec) + 3, MAX_TURNS)
    return {
        "reference": ScriptedPolicy(
            _doctor_turn("reference", len(task.spec)),
            max_turns=turns,
            description="asks one generic question per hidden detail, then commits the reference solution",
        ),
        "guess": ScriptedPolicy(_doctor_turn("guess", 0), max_turns=turns, description="commits a stub at once"),
        "loop": ScriptedPolicy(_doctor_turn("loop", 0), max_turns=turns, description="repeats one question"),
        "stall_then_ask": ScriptedPolicy(
            _doctor_turn("stall_then_ask", 1), max_turns=turns, description="a statement, one question, then a commit"
        ),
    }
