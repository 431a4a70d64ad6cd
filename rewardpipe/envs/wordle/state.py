"""The wordle episode's state: the guesses so far, their feedback, what each turn did, and whether it is solved.

Its own module, so a Lambda that only carries a state between steps imports nothing else of the environment.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rewardpipe.environment import EpisodeState


class TurnResult:
    """What one assistant turn did to the game (the values of ``WordleState.turn_results``: plain text, so a
    state is compared, copied and written without an enum's cost)."""

    GUESS = "guess"  # a new word: feedback given, one guess used
    SOLVED = "solved"  # the answer: the game is over
    REPEAT = "repeat"  # a word already guessed: feedback again, one guess used (and wasted)
    NOT_A_WORD = "not_a_word"  # five letters but not in the word list: no guess used
    MALFORMED = "malformed"  # no usable <guess> tag: a format reminder, no guess used


TurnResultName = Literal["guess", "solved", "repeat", "not_a_word", "malformed"]


class WordleState(EpisodeState):
    """``guesses`` (lowercase words that used a guess, repeats included) and ``feedback`` (their patterns,
    ``G``/``Y``/``X`` per letter) are parallel lists; ``turn_results`` has one entry per assistant turn;
    ``max_guesses`` is the task's, kept here so the reward reads the state alone."""

    guesses: list[str] = Field(default_factory=list)
    feedback: list[str] = Field(default_factory=list)
    turn_results: list[TurnResultName] = Field(default_factory=list)
    solved: bool = False
    max_guesses: int = Field(default=6, ge=1)
