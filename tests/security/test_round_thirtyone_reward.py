"""Round thirty-one on the reward and environment side.

R1. A count of nothing drew a hidden detail: "One?" and "Two?" revealed one on 13 of the 46 bundled tasks ("durations
of one hour or more", "the seconds always have two digits"), "Is a one-liner fine?" and "Can I ask one thing?" the
same, "Single?" "a single hyphen" on 8, "Double?" "double quotes", "Four?" "four decimal numbers", so the question
then the code scored asked_before_coding 1.0 and no guessed_immediately. Words of how many (number words, "single",
"double", "thousand"...) name no subject alone, and a spec item sharing only them with a question is no match; beside
a noun they still tell which item it is ("What about zero people?" is the item of zero people).

R2. "case" meaning an instance read as letter case: "What's the use case?", "Test cases?", "In that case, ok?" and
"Is that the case?" revealed "matching is case-insensitive" (or the like) on 9 bundled tasks. "case" after a noun it
makes a compound with, after "in" (and a determiner), and in "is that the case" names no subject; letter case is
asked as before ("Does case matter?", "Upper case?", "Is the case preserved?").

R3. A question's frame alone drew a hidden detail: "What should the result be?" told "the result is a list of (word,
count) tuples" on 10 bundled tasks where "What should the output be?" asked nothing ("output" is a stopword),
"Numbers?" a detail on 17. The words the loop check already reads as the framing stopwords ("result", "number",
"argument", "amount", "produce"...) name no subject alone; beside another word they say what it is of ("What type is
the result?", "What about negative numbers?").
"""

from __future__ import annotations

import pytest


def _bundled():
    from rewardpipe.envs.ask_before_coding.tasks import BUNDLED_TASKS
    from rewardpipe.models import load_tasks

    return load_tasks(BUNDLED_TASKS)


def _task(task_id):
    (task,) = [task for task in _bundled() if task.task_id == task_id]
    return task


def _drawn(questions):
    """(task id, question) of every bundled task on which a question draws a hidden detail."""
    from rewardpipe.envs.ask_before_coding.questions import best_spec_match, question_subject

    drawn = []
    for task in _bundled():
        for question in questions:
            subject = question_subject(question, task.prompt, task.entry_point)
            matched = subject.generic or best_spec_match(subject.words, task.spec)[0] is not None
            if not subject.asks_nothing and matched:
                drawn.append((task.task_id, question))
    return drawn


def _asked(question, task_id):
    """The spec item the rule-based user tells on ``task_id`` when ``question`` opens the episode (or None)."""
    from rewardpipe.envs.ask_before_coding.questions import best_spec_match, question_subject

    task = _task(task_id)
    subject = question_subject(question, task.prompt, task.entry_point)
    index, _ = best_spec_match(subject.words, task.spec)
    return None if index is None else task.spec[index]


def _question_then_code(question, task_id):
    """(asked_before_coding, guessed_immediately, what the user replied) of ``question`` then the reference code."""
    from rewardpipe.envs.ask_before_coding.environment import ENVIRONMENT
    from rewardpipe.envs.ask_before_coding.reward import asked_before_coding, guessed_immediately
    from rewardpipe.episode import apply_env_turn, apply_policy_turn, start_episode
    from rewardpipe.rewards.base import Transcript

    task = _task(task_id)
    state = start_episode(task, env=ENVIRONMENT, run_id="r", step=0, group_id="g", rollout_id="x")
    state = apply_env_turn(apply_policy_turn(state, question, ENVIRONMENT, task), task, ENVIRONMENT)
    reply = state.messages[-1].content
    state = apply_policy_turn(state, f"```python\n{task.reference_solution}\n```", ENVIRONMENT, task)
    transcript = Transcript.from_messages(state.messages)
    with_state = (asked_before_coding.fn(transcript, state), guessed_immediately.fn(transcript, state))
    # scored on its own (no bookkeeping: the recorded reply and the question's words decide)
    alone = (asked_before_coding.fn(transcript, None), guessed_immediately.fn(transcript, None))
    return with_state, alone, reply


# -- R1: a count of nothing asks nothing --------------------------------------------------------------------------

COUNTS_OF_NOTHING = [
    "One?",
    "Two?",
    "Zero?",
    "Four?",
    "Thousand?",
    "Single?",
    "Double?",
    "Multiple?",
    "Is a one-liner fine?",
    "Is a two-liner ok?",
    "One more question?",
    "Can I ask one thing?",
    "Just one or two?",
    "Twenty-two?",
]


def test_a_count_of_nothing_draws_no_detail_on_any_bundled_task():
    drawn = _drawn(COUNTS_OF_NOTHING)
    assert not drawn, f"{len(drawn)} details drawn, e.g. {drawn[:5]}"


@pytest.mark.parametrize(
    ("question", "task_id"),
    [
        ("One?", "abc-001-format-duration"),
        ("Two?", "abc-005-top-words"),
        ("Is a one-liner fine?", "abc-002-slugify-title"),
        ("Double?", "abc-015-parse-csv-line"),
    ],
)
def test_a_count_of_nothing_then_the_code_scores_as_a_guess(question, task_id):
    with_state, alone, reply = _question_then_code(question, task_id)
    assert with_state == (0.0, -1.0), reply
    assert alone == (0.0, -1.0), reply


@pytest.mark.parametrize(
    ("question", "task_id", "told"),
    [
        ("What about zero people?", "abc-003-split-bill", "zero or a negative number of people"),
        ("Double quotes?", "abc-015-parse-csv-line", "double quotes"),
        ("Is one hour written as 1:00:00?", "abc-001-format-duration", "one hour or more"),
        ("Should a single hyphen separate words?", "abc-002-slugify-title", "single hyphen"),
        # R3: what a frame is said of
        ("What type is the result?", "abc-005-top-words", "list of (word, count) tuples"),
        ("What about negative numbers?", "abc-003-split-bill", "negative number of people"),
        ("Is the result sorted?", "abc-014-merge-intervals", "sorted by start"),
    ],
)
def test_a_count_or_a_frame_beside_its_noun_still_asks_and_picks_the_item(question, task_id, told):
    assert told in (_asked(question, task_id) or ""), _asked(question, task_id)


def test_a_count_of_nothing_is_sent_to_no_llm_user():
    from rewardpipe.envs.ask_before_coding.questions import question_subject

    task = _task("abc-001-format-duration")
    for question in ("One?", "Two?", "Single?", "Twenty-two?"):
        assert question_subject(question, task.prompt, task.entry_point).asks_nothing, question


# -- R2: "case" as an instance is no letter case -------------------------------------------------------------------

CASE_AS_INSTANCE = [
    "What's the use case?",
    "What is the use-case here?",
    "Test cases?",
    "Any test case I should know?",
    "Worst case?",
    "In that case, ok?",
    "In any case, shall I go ahead?",
    "Is that the case?",
    "Is that really the case?",
    "If that's the case, can I go?",
    "That\u2019s the case?",
]


def test_case_as_an_instance_draws_no_detail_on_any_bundled_task():
    drawn = _drawn(CASE_AS_INSTANCE)
    assert not drawn, f"{len(drawn)} details drawn, e.g. {drawn[:5]}"


@pytest.mark.parametrize("question", ["What's the use case?", "Is that the case?"])
def test_case_as_an_instance_then_the_code_scores_as_a_guess(question):
    with_state, alone, reply = _question_then_code(question, "abc-004-parse-bool")
    assert with_state == (0.0, -1.0), reply
    assert alone == (0.0, -1.0), reply


@pytest.mark.parametrize(
    "question",
    [
        "Does case matter?",
        "Upper case?",
        "Is the case preserved?",
        "Is matching case-sensitive?",
        "What case should the input be in?",
        "Does letter case count?",
    ],
)
def test_letter_case_is_still_asked(question):
    assert "case-insensitive" in (_asked(question, "abc-004-parse-bool") or ""), question


def test_what_an_instance_is_of_is_still_asked():
    assert _asked("What should happen in the case of an empty string?", "abc-004-parse-bool") is not None
    assert _drawn(["What happens in the case of an empty string?"])


# -- R3: a question's frame alone asks nothing ------------------------------------------------------------------

FRAMES_ALONE = [
    "What should the result be?",
    "What's the result?",
    "Results?",
    "Number?",
    "Which numbers?",
    "Amount?",
    "Arguments?",
    "What does it produce?",
    "The result, ok?",
]


def test_a_frame_alone_draws_no_detail_on_any_bundled_task():
    drawn = _drawn(FRAMES_ALONE)
    assert not drawn, f"{len(drawn)} details drawn, e.g. {drawn[:5]}"


def test_a_frame_alone_asks_what_its_stopword_twin_asks():
    from rewardpipe.envs.ask_before_coding.questions import question_subject

    for frame, twin in [("What should the result be?", "What should the output be?"), ("Numbers?", "Inputs?")]:
        assert question_subject(frame).asks_nothing == question_subject(twin).asks_nothing is True


def test_a_frame_alone_then_the_code_scores_as_a_guess():
    with_state, alone, reply = _question_then_code("What should the result be?", "abc-005-top-words")
    assert with_state == (0.0, -1.0), reply
    assert alone == (0.0, -1.0), reply


@pytest.mark.slow
@pytest.mark.parametrize("unit", ["in ", "in the ", "use-", "is that ", "that's not ", "use case ", "in case "])
def test_reading_case_as_an_instance_stays_linear(unit):
    import rewardpipe.envs.ask_before_coding.questions as questions
    from tests.security.test_round_four_scorer_text import _build, assert_linear
    from tests.security.text_cost import operations

    def at(n: int) -> int:
        text = _build("Is ", unit, " case?", n)
        return operations(lambda: questions._subject_words(text), [questions])

    assert_linear(f"_subject_words({unit!r} * n)", at)
