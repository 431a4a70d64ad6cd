"""The ask-before-coding episode's state: what the simulator and the reward need beyond the messages.

Its own module, so a Lambda that only carries a state between steps imports nothing else of the environment.
"""

from __future__ import annotations

from pydantic import Field

from rewardpipe.environment import EpisodeState
from rewardpipe.parsing import TurnKind

#: Why an LLM-played user's reply was replaced by the rule-based user's (``SimulatorReply.fallback``).
FALLBACK_NO_TEXT = "no_text"  # the user's model wrote no text before its max_tokens
FALLBACK_UNVETTED = "unvetted"  # a reply the rules cannot vet (several details, unreadable letters, made-up ones)


class AskBeforeCodingState(EpisodeState):
    """The episode as the simulator and the reward need it."""

    turn_kinds: list[TurnKind] = Field(default_factory=list)
    revealed: list[int] = Field(default_factory=list)
    # Assistant turns (0-based) whose simulator reply revealed a new spec item: the questions that were real.
    answered_turns: list[int] = Field(default_factory=list)
    # Assistant turns whose reply restated a detail told before (SimulatorReply.restated): the rule-based user read
    # the question as one already answered, asked again in the same words or others. The loop penalty charges them.
    restated_turns: list[int] = Field(default_factory=list)
    final_code: str | None = None
    # An LLM-played user's replies replaced by the rule-based user's (SimulatorReply.fallback), and those of them
    # with no text before the user's max_tokens: the record's llm_user_fallbacks and llm_user_no_text.
    user_fallbacks: int = Field(default=0, ge=0)
    user_no_text: int = Field(default=0, ge=0)
