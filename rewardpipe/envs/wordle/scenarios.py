"""Scripted wordle players: doctor's scenarios and the ``--policy scripted`` mix.

Doctor's scenarios (:func:`doctor_scenarios`), one fixed strategy each, so every component's values show:

* ``reference`` plays the first word of the list consistent with all feedback so far, and the answer with
  its last guess: it solves every task;
* ``malformed`` never writes the tag; ``repeat`` guesses one word (not the answer) every turn; ``random``
  guesses words of the list at random.

The training mix (:func:`training_scenarios`) is what ``run --policy scripted`` plays: each rollout draws a
strategy, and its own pool of candidate words, from a seeded draw on its ids, so groups have real,
reproducible within-group variance:

* ``solver``     plays words of its pool consistent with the feedback: it usually solves, in 2 to 6 guesses;
* ``sloppy``     a solver that sometimes ignores the feedback, repeats itself or fumbles the tag;
* ``random``     guesses at random, now and then a word that is not in the list;
* ``malformed``  mostly forgets the tag;
* ``stuck``      (weight 0) guesses the same word every turn: the collapse ``--collapse-from-step`` plays.

A player knows the answer only as one word hidden in its pool (where it sits is drawn), the way a model's
vocabulary holds it: nothing tells it which word it is but the feedback.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rewardpipe.envs.wordle.game import GUESS_TAG, feedback
from rewardpipe.policies import ScriptedPolicy

if TYPE_CHECKING:  # pragma: no cover
    from rewardpipe.envs.wordle.state import WordleState
    from rewardpipe.envs.wordle.tasks import WordleTask

STRATEGY_WEIGHTS = {"solver": 0.35, "sloppy": 0.3, "random": 0.2, "malformed": 0.15, "stuck": 0.0}
POOL_SIZE = 40
STUCK_WORD = "slate"
NOT_A_WORD = "qzxvj"
# Turns a scripted player plans for (the environment's turn limit is 10).
PLANNED_TURNS = 12

_MALFORMED_TURNS = (
    "I think the word might be {word}.",  # no tag
    "<" + GUESS_TAG + ">{word}",  # unclosed
    "<" + GUESS_TAG + ">{word}s</" + GUESS_TAG + ">",  # six letters
)


def guess(word: str) -> str:
    return f"<{GUESS_TAG}>{word}</{GUESS_TAG}>"


def consistent(word: str, state: WordleState) -> bool:
    """Whether ``word`` could be the answer, given every guess's feedback so far."""
    for previous, pattern in zip(state.guesses, state.feedback):
        if feedback(previous, word) != pattern:
            return False
    return True


def word_ring(words: Sequence[str]) -> tuple[str, ...]:
    """The word list in a fixed shuffled order, twice over: a rollout's pool is a slice of it."""
    shuffled = list(words)
    random.Random(0).shuffle(shuffled)
    return tuple(shuffled) * 2


def _pool(ring: tuple[str, ...], answer: str, rng: random.Random) -> list[str]:
    """A rollout's candidate words: a drawn slice of the shuffled list with the answer at a drawn place (the
    same every turn: the generator a turn gets is the rollout's, reset)."""
    offset = rng.randrange(len(ring) // 2)
    pool = [w for w in ring[offset : offset + POOL_SIZE] if w != answer]
    pool.insert(rng.randrange(len(pool) + 1), answer)
    return pool


def _next_consistent(pool: Sequence[str], state: WordleState) -> str:
    guessed = set(state.guesses)
    for word in pool:
        if word not in guessed and consistent(word, state):
            return word
    return pool[0]


def _training_turn(strategy: str, ring: tuple[str, ...]) -> Callable[..., str]:
    def turn(state: WordleState, task: WordleTask, rng: random.Random) -> str:
        if strategy == "stuck":
            return guess(STUCK_WORD)
        pool = _pool(ring, task.answer, rng)
        for _ in range(min(state.assistant_turns, PLANNED_TURNS) + 1):  # this turn's draw
            roll = rng.random()
        if strategy == "solver":
            return f"My guess: {guess(_next_consistent(pool, state))}"
        fumble = _MALFORMED_TURNS[int(roll * 1000) % len(_MALFORMED_TURNS)].format(word=pool[0])
        if strategy == "sloppy":
            if roll < 0.1:
                return fumble
            if roll < 0.4:
                return guess(pool[int(roll * 100) % len(pool)])  # ignores the feedback (may repeat itself)
            return guess(_next_consistent(pool, state))
        if strategy == "random":
            if roll < 0.15:
                return guess(NOT_A_WORD)
            return guess(pool[int(roll * 10_000) % len(pool)])
        # malformed
        return fumble if roll < 0.7 else guess(pool[int(roll * 100) % len(pool)])

    return turn


def training_scenarios(words: Sequence[str], weights: dict[str, float] | None = None):
    """``task -> {strategy: ScriptedPolicy}`` for :class:`rewardpipe.policies.ScenarioMix`."""
    chosen = dict(weights or STRATEGY_WEIGHTS)
    unknown = set(chosen) - set(STRATEGY_WEIGHTS)
    if unknown:
        raise ValueError(f"unknown strategies {sorted(unknown)}; known: {sorted(STRATEGY_WEIGHTS)}")
    chosen.setdefault("stuck", 0.0)  # the collapse must always be there to play
    # (ScriptedPolicy refuses a negative or non-finite weight, naming it)
    ring = word_ring(words)
    mix = {name: ScriptedPolicy(_training_turn(name, ring), weight=weight) for name, weight in chosen.items()}
    if not any(scenario.weight > 0 for scenario in mix.values()):
        raise ValueError("at least one strategy weight must be positive")
    return lambda task: mix


def _reference(words: Sequence[str]) -> Callable[..., str]:
    def turn(state: WordleState, task: WordleTask) -> str:
        if len(state.guesses) + 1 >= task.max_guesses:
            return guess(task.answer)  # the last guess: whatever the list made of it, solve
        candidates = words if task.answer in words else [*words, task.answer]
        return guess(_next_consistent(candidates, state))

    return turn


def doctor_scenarios(task: WordleTask, words: Sequence[str]) -> dict[str, ScriptedPolicy]:
    other = next(w for w in (*words, "quack", "zesty") if w != task.answer)

    def random_word(state: WordleState, task: WordleTask, rng: random.Random) -> str:
        return guess(words[(rng.randrange(len(words)) + 7 * state.assistant_turns) % len(words)])

    return {
        "reference": ScriptedPolicy(
            _reference(words),
            description="plays the first word consistent with the feedback, and the answer with its last guess",
        ),
        "malformed": ScriptedPolicy(lambda state, task: f"My guess is {other}.", description="never writes the tag"),
        "repeat": ScriptedPolicy(lambda state, task: guess(other), description=f"guesses {other} every turn"),
        "random": ScriptedPolicy(random_word, description="guesses words of the list at random"),
    }
