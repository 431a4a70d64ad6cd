"""Round thirty-five (third wave), ask_before_coding: the user simulator read a question word by word.

A1. The rule-based user matched a question to a hidden detail on the question's own words only, though the reply
rules and the loop check read the same synonym groups (``words.SYNONYMS``: "throw" is "raise", "exception" is
"error", "below zero" and "less than zero" are "negative"). An honest question in other words than the detail's was
misjudged: "Should it throw an exception for bad input?" was told "That is up to you." (no detail, the guess
penalty for a policy that then commits), and "What should happen when the duration is below zero?" was told the
zero-padding detail ("zero" alone), a detail it did not ask about. A policy could also ask the same thing twice in
other words ("negative ... ValueError?", then "below zero ... exception thrown?") and have the second unlock a
different detail, a reveal paid as a real question and, revealing something new, exempt from the loop penalty.
The simulator now matches by concept: a question's words and each detail's words with their synonym groups' names,
a two-word phrase a group names read as that concept rather than its words.
"""

from __future__ import annotations

import pytest

from rewardpipe import ScriptedPolicy
from rewardpipe.envs.ask_before_coding.environment import AskBeforeCoding
from rewardpipe.envs.ask_before_coding.tasks import BUNDLED_TASKS
from rewardpipe.episode import converse, run_episode, start_episode
from rewardpipe.models import load_tasks
from tests.core.conftest import FakeExecutor, result

_TASKS = {task.task_id: task for task in load_tasks(BUNDLED_TASKS)}
_DURATION = _TASKS["abc-001-format-duration"]
_NEGATIVE_DETAIL = _DURATION.spec.index("A negative duration is invalid input and raises ValueError.")
STUB = "```python\ndef format_duration(seconds):\n    return None\n```"


def _state(turns):
    env = AskBeforeCoding()
    state = start_episode(_DURATION, env=env, run_id="r", step=0, group_id="g", rollout_id="k0")
    return converse(state, _DURATION, ScriptedPolicy(list(turns)), env)


def _record(turns):
    return run_episode(
        _DURATION, ScriptedPolicy(list(turns)), AskBeforeCoding(), FakeExecutor(result("failed", 0, 7)),
        run_id="r", step=0, group_id="g", rollout_id="x",
    )  # fmt: skip


@pytest.mark.parametrize(
    "question",
    [
        "Should it throw an exception for bad input?",
        "What should happen when the duration is below zero?",
        "What if seconds is less than zero?",
        "Is an exception thrown for illegal durations?",
    ],
)
def test_a1_a_question_in_other_words_than_the_detail_is_told_that_detail(question):
    state = _state([question])
    assert state.revealed == [_NEGATIVE_DETAIL], state.messages[-1].content
    assert state.answered_turns == [0]


def test_a1_an_honest_question_in_synonyms_earns_asking_credit():
    record = _record(["Should it throw an exception for bad input?", STUB])
    assert record.components["asked_before_coding"] == 1.0
    assert record.components["guessed_immediately"] == 0.0


def test_a1_the_same_question_reworded_does_not_unlock_another_detail():
    state = _state(
        [
            "Should a negative duration raise ValueError?",
            "If the number of seconds is below zero, do you want an exception thrown?",
            STUB,
        ]
    )
    assert state.revealed == [_NEGATIVE_DETAIL] and state.answered_turns == [0]
    assert state.messages[-2].content.startswith("As I said")


def test_a1_the_words_of_a_phrase_still_ask_where_no_phrase_is_made():
    """ "zero" outside a phrase a synonym group names is still the word: zero-padding is still asked about."""
    state = _state(["Should the hours be padded with a zero?"])
    assert state.revealed == [0]
