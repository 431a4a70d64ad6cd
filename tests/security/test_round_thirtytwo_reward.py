"""Round thirty-two on the reward side of the built-in environments.

R1. "case" after a word for an unusual instance read as letter case, or as nothing: "Any edge cases?" told "matching is
case-insensitive" on the task that has it (the letter-case detail, whatever else the task had), while "Any special
cases?", "Corner cases?" and "Boundary cases?" asked nothing ("Could you be more specific"), then the code scored as
a guess. Each is the question "edge cases" always was: one asking for the requirements in general. Letter case is
asked as before, and round thirty-one's instances ("Test cases?", "Worst case?", "use case") still ask nothing.
"""

from __future__ import annotations

import pytest

from tests.security.test_round_thirtyone_reward import _asked, _bundled, _drawn, _question_then_code

# -- R1: "edge cases" and their kin ask for the requirements in general -------------------------------------------

EDGE_CASE_QUESTIONS = [
    "Any edge cases?",
    "Any edge case I should know about?",
    "What edge cases should I handle?",
    "Edge-cases?",
    "Any special cases?",
    "Are there corner cases?",
    "Boundary cases?",
    "Any tricky cases?",
    "Any unusual cases I should handle?",
]


@pytest.mark.parametrize("question", EDGE_CASE_QUESTIONS)
def test_an_edge_case_question_is_no_letter_case_question(question):
    from rewardpipe.envs.ask_before_coding.questions import question_subject

    task = next(task for task in _bundled() if task.task_id == "abc-004-parse-bool")
    subject = question_subject(question, task.prompt, task.entry_point)
    assert subject.generic and not subject.asks_nothing, subject
    assert "case-insensitive" not in (_asked(question, "abc-004-parse-bool") or "")


@pytest.mark.parametrize("question", EDGE_CASE_QUESTIONS)
def test_an_edge_case_question_draws_a_detail_on_every_bundled_task(question):
    assert len(_drawn([question])) == len(_bundled())


@pytest.mark.parametrize("question", ["Any special cases?", "Are there corner cases?", "Any edge cases?"])
def test_an_edge_case_question_then_the_code_is_asking_first(question):
    with_state, alone, reply = _question_then_code(question, "abc-004-parse-bool")
    assert with_state == (1.0, 0.0), reply
    assert alone == (1.0, 0.0), reply
    assert "case-insensitive" not in reply


@pytest.mark.parametrize(
    "question",
    ["Does case matter?", "Upper case?", "Is matching case-sensitive?", "Any edge cases, and does letter case matter?"],
)
def test_letter_case_is_still_asked(question):
    assert "case-insensitive" in (_asked(question, "abc-004-parse-bool") or ""), question


@pytest.mark.parametrize("question", ["Test cases?", "Worst case?", "What's the use case?", "In that case, ok?"])
def test_a_case_as_a_mere_instance_still_draws_nothing(question):
    assert not _drawn([question])


def test_an_edge_case_run_of_spaces_is_read_in_linear_time():
    from rewardpipe.envs.ask_before_coding.questions import question_subject

    question = ("edge" + " " * 10_000) * 20 + "cases?"
    assert question_subject(question).generic  # long runs between the words: no pairing, no backtracking blow-up
