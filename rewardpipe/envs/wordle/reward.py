"""The wordle reward: did the model solve it, how close and how early did it get, did it keep the format, and
did it waste guesses.

| component        | range    | role    | weight | value                                                          |
|------------------|----------|---------|--------|----------------------------------------------------------------|
| `solved`         | [0, 1]   | outcome | 1.0    | 1 when a guess was the answer                                  |
| `letter_credit`  | [0, 1]   | shaping | 0.3    | the best guess's greens + yellows/2, over 5 (1 when solved)   |
| `speed`          | [0, 1]   | shaping | 0.2    | the mean, over the game's guess slots, of the best letter     |
|                  |          |         |        | credit reached by that slot (1 from the solving guess on)     |
| `format_ok`      | [0, 1]   | shaping | 0.2    | the share of turns that held a well-formed `<guess>` tag      |
| `wasted_guesses` | [-1, 0]  | penalty | 0.3    | -0.5 per repeated guess or word not in the list, down to -1    |

Why these: ``solved`` alone is 0 for most of a weak policy's games, so every group where nobody solves has no
signal; ``letter_credit`` and ``speed`` are **not gated** on solving (an unsolved game that found four greens
earns more than one that found none), and ``speed`` is where "fewer guesses" lives: a game solved on guess 2
keeps 1 in five of its six slots, one solved on guess 6 in one. ``format_ok`` moves while the model learns
the tag, then sits at 1 (the monitor calls a component constant at its maximum dead, which is the point).
``wasted_guesses`` is a penalty: it fires only when a guess says nothing new.

Every component reads only the episode's final state (the environment keeps the game there), so scoring a
rollout parses nothing again.
"""

from __future__ import annotations

from typing import Any

from rewardpipe.components import component
from rewardpipe.envs.wordle.game import letter_credit as pattern_credit
from rewardpipe.envs.wordle.state import TurnResult, WordleState
from rewardpipe.models import ErrorInfo
from rewardpipe.rewards.base import Reward

WASTED_GUESS_PENALTY = 0.5


def _game(state: Any) -> WordleState | None:
    return state if isinstance(state, WordleState) else None


@component(range=(0.0, 1.0), role="outcome", weight=1.0, description="a guess was the answer")
def solved(state: Any) -> float | None:
    game = _game(state)
    if game is None:
        return None
    return 1.0 if game.solved else 0.0


@component(range=(0.0, 1.0), role="shaping", weight=0.3, description="best guess: greens + yellows/2, over 5")
def letter_credit(state: Any) -> float | None:
    game = _game(state)
    if game is None:
        return None
    return max(map(pattern_credit, game.feedback), default=0.0)


@component(
    range=(0.0, 1.0),
    role="shaping",
    weight=0.2,
    description="mean over the guess slots of the best credit reached by then (1 once solved)",
)
def speed(state: Any) -> float | None:
    game = _game(state)
    if game is None:
        return None
    slots = max(game.max_guesses, len(game.feedback), 1)
    best = total = 0.0
    for pattern in game.feedback:
        best = max(best, pattern_credit(pattern))
        total += best
    # Slots after the last guess keep what it reached: 1 after the solving guess, the best credit otherwise.
    total += best * (slots - len(game.feedback))
    return total / slots


@component(range=(0.0, 1.0), role="shaping", weight=0.2, description="share of turns with a well-formed guess tag")
def format_ok(state: Any) -> float | None:
    game = _game(state)
    if game is None:
        return None
    results = game.turn_results
    if not results:
        return 0.0
    return sum(1 for r in results if r != TurnResult.MALFORMED) / len(results)


@component(
    range=(-1.0, 0.0),
    role="penalty",
    weight=0.3,
    description="-0.5 per repeated guess or word not in the word list (at most -1)",
)
def wasted_guesses(state: Any) -> float | None:
    game = _game(state)
    if game is None:
        return None
    wasted = sum(1 for r in game.turn_results if r == TurnResult.REPEAT or r == TurnResult.NOT_A_WORD)
    return -min(1.0, WASTED_GUESS_PENALTY * wasted) if wasted else 0.0


def explain_error(state: Any) -> ErrorInfo | None:
    if _game(state) is None:
        return ErrorInfo(
            kind="component_unavailable",
            message="the wordle reward scores a wordle episode's state (run or score it with --env wordle)",
        )
    return None


WORDLE = Reward(
    "wordle",
    [solved, letter_credit, speed, format_ok, wasted_guesses],
    explain_error=explain_error,
    description="Wordle: solved, letter credit and speed (not gated on solving), format, wasted guesses",
)
