"""Round thirty-two on the reward side of the built-in environments.

R1. "case" after a word for an unusual instance read as letter case, or as nothing: "Any edge cases?" told "matching is
case-insensitive" on the task that has it (the letter-case detail, whatever else the task had), while "Any special
cases?", "Corner cases?" and "Boundary cases?" asked nothing ("Could you be more specific"), then the code scored as
a guess. Each is the question "edge cases" always was: one asking for the requirements in general. Letter case is
asked as before, and round thirty-one's instances ("Test cases?", "Worst case?", "use case") still ask nothing.

R2. The tool-call environment compared answers as text: ``12000.00`` (or ``12,000.0``) missed a goal of ``12000``.
Two plain decimal numbers are compared as numbers now; anything else (exponents, ``nan``, ``inf``, hex, other
scripts' digits) as text, so no hostile answer overflows, takes long or equals everything.
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


# -- R2: numeric answers are compared as numbers -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [("12000.00", "12000"), ("12,000.0", "12000"), ("+12000", "12000"), ("54321.", "54321"), ("7.50", "7.5")],
)
def test_the_same_number_written_otherwise_reaches_the_goal(given, expected):
    from rewardpipe.envs.tool_call.tasks import answers_match

    assert answers_match(given, expected)


@pytest.mark.parametrize(
    "given",
    ["12000.01", "1e999", "1.2e4", "nan", "inf", "-inf", "0x2EE0", "12 000", "12000 or 54321", "1" * 2000, ""],
)
def test_another_or_hostile_number_does_not(given):
    from rewardpipe.envs.tool_call.tasks import answers_match

    assert not answers_match(given, "12000")


def test_nan_is_not_every_number():
    from rewardpipe.envs.tool_call.tasks import answers_match

    assert not answers_match("NaN", "12000") and not answers_match("12000", "nan")


def test_the_goal_component_compares_numbers_as_numbers():
    from rewardpipe.envs.tool_call.environment import ENVIRONMENT
    from rewardpipe.envs.tool_call.reward import goal_reached
    from rewardpipe.envs.tool_call.state import ToolCallState
    from rewardpipe.envs.tool_call.tasks import BUNDLED_TASKS
    from rewardpipe.models import load_task_rows

    task = next(t for t in load_task_rows(BUNDLED_TASKS, ENVIRONMENT.task_model) if t.task_id == "tc-001-balance")
    assert task.expected_answer == "12000"
    for answer, value in (("12000.00", 1.0), ("12000", 1.0), ("12,000.00", 1.0), ("1.2e4", 0.0), ("12001", 0.0)):
        state = ToolCallState(messages=[], world=task.world, answer=answer)
        assert goal_reached.fn(state, task) == value, answer
