"""Round thirty-six (fourth wave): the rule-based user's new reading of a turn by its questions
(:func:`~rewardpipe.envs.ask_before_coding.questions.asked_match`, ``question_parts``) on hostile turns.

The turn is the model's: its cost must grow linearly with its length whatever it repeats (question marks, inline code
holding them, the synonym groups' phrases, numbers), counted in operations (:mod:`tests.security.text_cost`).
These payloads held when written; they are kept as regressions of the matcher's cost.
"""

from __future__ import annotations

import pytest

from rewardpipe.envs.ask_before_coding.questions import asked_match
from tests.security.test_round_four_scorer_text import TASK, WATCHED, _build, assert_linear, clear_caches
from tests.security.text_cost import operations


@pytest.mark.parametrize(
    "prefix, unit, suffix",
    [
        ("", "negative? ", "x"),  # a question per part, each matching a detail
        ("", "below zero? ", ""),  # a synonym group's phrase in every part
        ("Should it raise? ", "`a?` ", "?"),  # marks inside inline code are no cuts
        ("", "?", "What about negative durations?"),  # one run of marks, then the question
        ("", "? x ", ""),  # parts of one letter each: past MAX_QUESTION_PARTS the turn is read whole
        ("", "-1.5? ", ""),  # numbers and their sign
    ],
)
def test_matching_a_turn_to_a_detail_is_linear(prefix, unit, suffix):
    def at(n: int) -> int:
        text = _build(prefix, unit, suffix, n)
        return operations(
            lambda: asked_match(text, TASK.spec, {0}, TASK.prompt, TASK.entry_point), WATCHED, clear_caches
        )

    assert_linear(f"asked_match {unit!r}", at)
