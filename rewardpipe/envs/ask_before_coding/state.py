"""The ask-before-coding episode's state: what the simulator and the reward need beyond the messages.

Its own module, so a Lambda that only carries a state between steps imports nothing else of the environment.
"""

from __future__ import annotations

from pydantic import Field

from rewardpipe.environment import EpisodeState
from rewardpipe.parsing import TurnKind


class AskBeforeCodingState(EpisodeState):
    """The episode as the simulator and the reward need it."""

    turn_kinds: list[TurnKind] = Field(default_factory=list)
    revealed: list[int] = Field(default_factory=list)
    # Assistant turns (0-based) whose simulator reply revealed a new spec item: the questions that were real.
    answered_turns: list[int] = Field(default_factory=list)
    final_code: str | None = None
