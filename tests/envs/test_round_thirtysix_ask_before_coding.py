"""Round thirty-six, ask_before_coding's rule-based user: a question matched to a hidden detail on its literal words.

A1. A question in other words than the detail's was misjudged: "Should it throw an exception for bad input?" was told
"That is up to you." (an honest question unpaid, the commit after it charged as a guess), and "What if the duration is
below zero?" the zero-padding detail ("zero" alone). Words are now matched as their synonym groups' concepts, one word
one weight ("throw" is "raise", "bad" is "invalid"), and a phrase a group names ("below zero") is that concept, its
count word ("zero") no subject of its own.
A2. A turn of two questions was answered about whichever detail the words of both together matched best: the second
question's, where its words weighed more. One reply states one detail: the first question's that asks something.
A3. The negatives question asked again in other words unlocked a second detail, paid as a real question; now it is
told the detail it was told before, and that repeat is a loop (the loop penalty reads the simulator's bookkeeping:
the same question reworded has too few words in common with the first for the word and character checks).
"""

from __future__ import annotations

import pytest

from rewardpipe import ScriptedPolicy
from rewardpipe.envs.ask_before_coding.environment import AskBeforeCoding
from rewardpipe.envs.ask_before_coding.replies import answered_detail
from rewardpipe.envs.ask_before_coding.tasks import BUNDLED_TASKS
from rewardpipe.episode import converse, run_episode, start_episode
from rewardpipe.models import load_tasks
from tests.core.conftest import FakeExecutor, result
from tests.security.test_loop_values_and_cost import episode_loop_penalty

_TASKS = {task.task_id: task for task in load_tasks(BUNDLED_TASKS)}
_DURATION = _TASKS["abc-001-format-duration"]
_NEGATIVE = _DURATION.spec.index("A negative duration is invalid input and raises ValueError.")
_FRACTIONAL = next(i for i, item in enumerate(_DURATION.spec) if item.startswith("Fractional seconds"))
_PADDING = 0  # "... written as H:MM:SS with the hours not zero-padded."
STUB = "```python\ndef format_duration(seconds):\n    return None\n```"


def _state(turns):
    env = AskBeforeCoding()
    state = start_episode(_DURATION, env=env, run_id="r", step=0, group_id="g", rollout_id="k0")
    return converse(state, _DURATION, ScriptedPolicy([*turns, STUB]), env)


def _record(turns):
    return run_episode(
        _DURATION, ScriptedPolicy([*turns, STUB]), AskBeforeCoding(), FakeExecutor(result("failed", 0, 7)),
        run_id="r", step=0, group_id="g", rollout_id="x",
    )  # fmt: skip


@pytest.mark.parametrize(
    "question",
    [
        "Should it throw an exception for bad input?",
        "What if the duration is below zero?",
        "What should happen when seconds are less than zero?",
        "Is an exception thrown for illegal durations?",
        "What if someone passes a duration below 0?",
    ],
)
def test_a1_a_question_in_other_words_than_the_detail_is_told_that_detail(question):
    state = _state([question])
    assert state.revealed == [_NEGATIVE], state.messages[2].content
    assert state.answered_turns == [0]


def test_a1_an_honest_question_in_synonyms_earns_asking_credit():
    record = _record(["Should it throw an exception for bad input?"])
    assert record.components["asked_before_coding"] == 1.0
    assert record.components["guessed_immediately"] == 0.0


def test_a1_a_count_word_outside_a_phrase_still_asks():
    """ "zero" outside a phrase a synonym group names is still the word: zero-padding is still asked about."""
    assert _state(["Should the hours be padded with a zero?"]).revealed == [_PADDING]


@pytest.mark.parametrize(
    ("turn", "detail"),
    [
        ("Should negative durations raise an error? How should fractional seconds be handled?", _NEGATIVE),
        ("How should fractional seconds be handled? Should negative durations raise an error?", _FRACTIONAL),
        ("Are fractional seconds rounded? And what about negative durations: ValueError?", _FRACTIONAL),
        ("A few questions:\n1. What about negative durations?\n2. Are fractional seconds rounded?", _NEGATIVE),
    ],
)
def test_a2_a_turn_of_two_questions_is_answered_about_the_first(turn, detail):
    state = _state([turn])
    assert state.revealed == [detail], state.messages[2].content


def test_a2_a_question_mark_inside_inline_code_does_not_cut_the_question():
    state = _state(["What should `format_duration(-5)?` do when the duration is negative?"])
    assert state.revealed == [_NEGATIVE]


def test_a2_a_recorded_yes_to_two_questions_answers_the_first():
    turn = "Are fractional seconds truncated? Should negative durations raise ValueError?"
    found = answered_detail(turn, "Yes.", _DURATION.spec, prompt=_DURATION.prompt, entry_point=_DURATION.entry_point)
    assert found == _FRACTIONAL


REWORDED = [
    [
        "Should a negative duration raise ValueError?",
        "If the number of seconds is below zero, do you want an exception?",
    ],
    ["Should negative durations be rejected?", "What about durations that are less than zero?"],
    ["What if the duration is negative?", "Should it throw an exception for bad input?"],
]


@pytest.mark.parametrize("turns", REWORDED)
def test_a3_the_same_question_reworded_unlocks_nothing_and_is_a_loop(turns):
    state = _state(turns)
    assert state.revealed == [_NEGATIVE] and state.answered_turns == [0]
    assert state.restated_turns == [1]
    assert state.messages[4].content.startswith("As I said")
    assert episode_loop_penalty(turns) == -0.5


def test_a3_a_new_question_after_an_answered_one_is_no_loop():
    assert episode_loop_penalty(["What if the duration is negative?", "Are fractional seconds rounded?"]) == 0.0


def test_a2_a_confirmation_then_a_new_question_is_answered_about_the_new_one():
    turns = [
        "What if the duration is negative?",
        "So negative durations raise ValueError, right? And how are fractional seconds handled?",
    ]
    state = _state(turns)
    assert state.revealed == [_NEGATIVE, _FRACTIONAL] and state.restated_turns == []
    assert episode_loop_penalty(turns) == 0.0


@pytest.mark.parametrize(
    "again",
    [
        "Should negative durations raise an error? How should fractional seconds be handled?",
        "How should fractional seconds be handled? Should negative durations raise an error?",
    ],
)
def test_a2_the_same_two_questions_again_in_any_order_unlock_nothing(again):
    """Answered about its first question, a turn asked again must not be answered about its second: the same
    questions, the same answer (and a loop)."""
    turns = ["Should negative durations raise an error? How should fractional seconds be handled?", again]
    state = _state(turns)
    assert state.revealed == [_NEGATIVE] and state.restated_turns == [1]
    assert episode_loop_penalty(turns) == -0.5


@pytest.mark.parametrize(
    "turn",
    [
        "?" * 5000 + " What about negative durations?",
        "ok? " * 5 + "What about negative durations? Are fractional seconds rounded?",
    ],
)
def test_a2_questions_that_ask_nothing_before_the_real_one_do_not_hide_it(turn):
    assert _state([turn]).revealed == [_NEGATIVE]


def test_a2_a_turn_of_more_questions_than_are_read_one_by_one_still_gets_one_detail():
    """Past MAX_QUESTION_PARTS parts the turn is read whole (a hostile turn of thousands of them costs no more than a
    few): still one detail, never one per question."""
    state = _state(["ok? " * 40 + "What about negative durations? Are fractional seconds rounded?"])
    assert len(state.revealed) == 1


def test_a3_asking_for_more_once_everything_is_told_is_no_loop():
    """Told again what it was told, a generic question ("Any other constraints on the format?") asked for more: no
    repeat of an answered question."""
    turns = ["Hours?", "Minutes?", "Fractions?", "Negatives?", "Any other constraints on the format?"]
    state = _state(turns)
    assert len(state.revealed) == len(_DURATION.spec) and state.restated_turns == []
    assert episode_loop_penalty(turns) == 0.0
