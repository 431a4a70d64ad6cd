"""Round twelve (issue 19, class 8): honest behaviour the loop penalty charged, found by an independent review.

A turn asking two questions gets one answered (the simulator states one detail a reply). Asking the other one
again, alone, earned a new detail and was still charged -0.5 as a loop, because its words were inside the earlier
turn's. A turn that earned a new detail is now a loop inside a longer turn only as the earlier question padded
with more text; the question whose answer was already given, asked again, stays a loop.
"""

from __future__ import annotations

import pytest

from rewardpipe.envs.ask_before_coding.similarity import find_loop
from tests.security.test_loop_values_and_cost import episode_loop_penalty

NEGATIVE = "Should negative durations raise an error?"
FRACTIONAL = "How should fractional seconds be handled?"
TWO_AT_ONCE = [f"{NEGATIVE} {FRACTIONAL}", f"A few questions:\n1. {NEGATIVE}\n2. {FRACTIONAL}"]


@pytest.mark.parametrize("first", TWO_AT_ONCE)
def test_one_question_of_an_earlier_turn_answered_now_is_not_a_loop(first):
    assert find_loop([first, FRACTIONAL], new_details={0, 1}, by_values=False) is None
    # Not answered now (the reply restated what the first turn's reply said): the same question again.
    assert find_loop([first, NEGATIVE], new_details={0}, by_values=False) == (0, 1)
    # Padded with more text, a turn that earned a new detail is still the earlier question again.
    assert find_loop([NEGATIVE, f"{NEGATIVE} Sorry, once more."], new_details={0, 1}, by_values=False) == (0, 1)


@pytest.mark.parametrize("first", TWO_AT_ONCE)
def test_the_live_episode_does_not_charge_asking_what_was_not_answered(first):
    assert episode_loop_penalty([first, FRACTIONAL]) == 0.0
    assert episode_loop_penalty([first, NEGATIVE]) == -0.5  # answered already: asked again for nothing
