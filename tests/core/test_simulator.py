"""The rule-based user simulator: reveals only what is asked, never volunteers, never leaks tests."""

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rewardpipe.envs.ask_before_coding.environment import ENVIRONMENT as ENV
from rewardpipe.episode import apply_policy_turn, start_episode
from rewardpipe.models import load_tasks
from rewardpipe.simulator import (
    ASK_SOMETHING_SPECIFIC,
    NOT_A_QUESTION,
    NOTHING_LEFT,
    NOTHING_MATCHES,
    RuleBasedSimulator,
    content_words,
)
from tests.core.conftest import COMMIT, make_task

TASKS_FILE = Path(__file__).resolve().parents[2] / "rewardpipe" / "data" / "tasks.jsonl"

SPEC = [
    "Timestamps are parsed in the ISO 8601 format.",
    "Duplicate names are removed, keeping the first occurrence.",
    "An empty list returns an empty dictionary.",
    "Names are compared case-insensitively when detecting duplicates.",
]
TASK = make_task(task_id="t-sim", spec=SPEC)
SIM = RuleBasedSimulator()


def ask(text: str, revealed=(), task=TASK, rollout_id="r1"):
    state = start_episode(task, env=ENV, run_id="run", step=0, group_id="g", rollout_id=rollout_id, max_turns=20)
    state = apply_policy_turn(state, text, ENV, task)
    state.revealed = list(revealed)
    return SIM.respond(state, task)


def test_specific_question_reveals_the_most_relevant_detail():
    reply = ask("What format are the timestamps in?")
    assert reply.revealed == 0
    assert reply.text == SPEC[0]


def test_specific_question_uses_word_forms_that_differ_from_the_spec():
    # "lists" vs the spec's "list", "timestamp strings parsed" vs "Timestamps are parsed".
    assert ask("What do I return for empty lists?").revealed == 2
    assert ask("How are timestamp strings parsed?").revealed == 0


def test_rare_words_outweigh_shared_ones():
    # "duplicate" appears in items 1 and 3; "case" only in item 3 (and is not mistaken for "edge case").
    assert ask("Is duplicate detection case sensitive?").revealed == 3


def test_generic_question_reveals_the_next_detail_in_order():
    assert ask("Are there any other requirements?").revealed == 0
    assert ask("Are there any other requirements?", revealed=[0, 2]).revealed == 1
    assert ask("What other details are there?", revealed=[0, 1]).revealed == 2


@pytest.mark.parametrize("question", ["What else?", "?", "ok?", "Can you explain again?", "Anything else?"])
def test_a_question_that_asks_nothing_specific_reveals_nothing(question):
    reply = ask(question)
    assert reply.revealed is None
    assert reply.text in ASK_SOMETHING_SPECIFIC


def test_generic_question_whose_words_only_match_a_revealed_detail_reveals_the_next_one():
    reply = ask("Any other constraints on the timestamp format?", revealed=[0])
    assert reply.revealed == 1


@pytest.mark.parametrize("turn", ["I'll write the function now.", COMMIT, "", "Names are duplicates."])
def test_a_non_question_reveals_nothing(turn):
    reply = ask(turn)
    assert reply.revealed is None
    assert reply.text in NOT_A_QUESTION
    assert all(item not in reply.text for item in SPEC)


def test_a_question_matching_nothing_is_up_to_you():
    reply = ask("Should I use tabs or spaces for indentation?")
    assert reply.revealed is None
    assert reply.text in NOTHING_MATCHES
    assert all(item not in reply.text for item in SPEC)


def test_asking_again_about_a_revealed_detail_restates_it_without_a_new_reveal():
    question = "Which occurrence of a duplicate name is kept?"
    first = ask(question)
    assert first.revealed == 1
    again = ask(question, revealed=[1])
    assert again.revealed is None
    assert SPEC[1] in again.text
    assert again.text != SPEC[1]  # phrased as a restatement


def test_restating_does_not_leak_a_weaker_matching_unrevealed_detail():
    # Item 3 shares "names" and "duplicates" with the question, but item 1 answers it better.
    again = ask("Are duplicate names removed, keeping the first occurrence?", revealed=[1])
    assert again.revealed is None
    assert SPEC[3] not in again.text


def test_when_everything_is_revealed_a_generic_question_gets_nothing_left():
    reply = ask("Any other requirements?", revealed=[0, 1, 2, 3])
    assert reply.revealed is None
    assert reply.text == NOTHING_LEFT


def test_a_task_without_spec_cannot_be_built():
    # With nothing to ask about, asked_before_coding could never be earned: refused at the input instead
    # (tests/cli/test_input_rules.py checks every command that reads tasks).
    with pytest.raises(ValueError, match="spec"):
        make_task(task_id="empty", spec=[])


def test_replies_are_deterministic_per_rollout_and_turn():
    texts = {ask("Should I use tabs or spaces?", rollout_id="same").text for _ in range(3)}
    assert len(texts) == 1


def test_plural_in_the_question_matches_singular_in_the_spec():
    task = make_task(task_id="plural", spec=["Each name is trimmed.", "A price is always positive."])
    assert ask("What about names?", task=task).revealed == 0
    assert ask("Can prices go below zero?", task=task).revealed == 1


def test_content_words_drop_stopwords_and_normalise_forms():
    assert content_words("What should the function return for the names?") == content_words("name")
    assert content_words("cases") == content_words("case")
    assert content_words("entries") == content_words("entry")
    assert content_words("raised") == content_words("raises") == content_words("raise")


BUNDLED = load_tasks(TASKS_FILE)


def leaks(reply: str, task) -> bool:
    code_lines = [line.strip() for line in (task.tests + "\n" + task.reference_solution).splitlines()]
    distinctive = [line for line in code_lines if len(line) > 25]
    return (
        task.tests.strip() in reply
        or task.reference_solution.strip() in reply
        or any(line in reply for line in distinctive)
    )


@pytest.mark.parametrize("task", BUNDLED, ids=lambda t: t.task_id)
def test_bundled_tasks_replies_never_contain_tests_or_reference(task):
    questions = [
        "Are there any other requirements?",
        "What do the tests check?",
        "Can you show me the reference solution?",
        f"What should {task.entry_point} return?",
    ] + [f"Could you clarify this: {item}?" for item in task.spec]
    revealed: list[int] = []
    for question in questions * 2:
        reply = ask(question, revealed=revealed, task=task)
        assert not leaks(reply.text, task), reply.text
        if reply.revealed is not None:
            assert reply.revealed not in revealed
            revealed.append(reply.revealed)
    assert sorted(revealed) == list(range(len(task.spec)))  # every detail can be reached by asking


@pytest.mark.parametrize("task", BUNDLED, ids=lambda t: t.task_id)
def test_bundled_tasks_generic_questions_reveal_every_detail(task):
    revealed: list[int] = []
    for _ in task.spec:
        reply = ask("Are there any other details or edge cases I should know about?", revealed=revealed, task=task)
        assert reply.revealed is not None
        revealed.append(reply.revealed)
    assert sorted(revealed) == list(range(len(task.spec)))


def _hidden_words(task) -> list[str]:
    return sorted(set(re.findall(r"[A-Za-z_]{3,}", task.tests + " " + task.reference_solution)))


@st.composite
def probing_conversation(draw):
    """A bundled task and a run of questions made of words from its hidden tests and reference solution."""
    task = draw(st.sampled_from(BUNDLED))
    words = [*_hidden_words(task), "tests", "solution", "assert", "requirements", "what", "else"]
    questions = draw(st.lists(st.lists(st.sampled_from(words), min_size=1, max_size=8), min_size=1, max_size=6))
    return task, [" ".join(q) + "?" for q in questions]


@settings(max_examples=150, deadline=None)
@given(probing_conversation())
def test_probing_questions_never_get_tests_or_reference_back(conversation):
    task, questions = conversation
    revealed: list[int] = []
    for question in questions:
        reply = ask(question, revealed=revealed, task=task)
        assert not leaks(reply.text, task)
        assert (
            reply.text in task.spec
            or reply.text.removeprefix("As I said: ") in task.spec
            or reply.text in (*NOTHING_MATCHES, NOTHING_LEFT, *ASK_SOMETHING_SPECIFIC)
        )
        if reply.revealed is not None:
            assert reply.revealed not in revealed and reply.text == task.spec[reply.revealed]
            revealed.append(reply.revealed)


# Two details that tie on the word "names": asked about it twice, the user must not tell the second one.
TIED = make_task(
    task_id="t-tied",
    spec=["Names are trimmed of spaces.", "Names are compared case-insensitively.", "An empty list returns {}."],
)


def _converse(*questions: str):
    state = start_episode(TIED, env=ENV, run_id="run", step=0, group_id="g", rollout_id="r-tied", max_turns=20)
    replies = []
    for question in questions:
        state = apply_policy_turn(state, question, ENV, TIED)
        reply = SIM.respond(state, TIED)
        replies.append(reply)
        revealed = [*state.revealed, reply.revealed] if reply.revealed is not None else list(state.revealed)
        state = state.append({"role": "user", "content": reply.text}, next_action="policy", revealed=revealed)
    return replies, state


@pytest.mark.parametrize("again", ["Names?", "names??", "What about the names?", "NAMES?"])
def test_the_same_subject_asked_again_is_told_the_same_detail_not_the_one_it_tied_with(again):
    (first, second), state = _converse("Names?", again)
    assert first.revealed is not None
    assert second.revealed is None and second.text.startswith("As I said") and TIED.spec[first.revealed] in second.text
    assert state.revealed == [first.revealed]


def test_a_different_question_on_a_tied_word_and_a_generic_one_still_reveal_more():
    (first, other), _ = _converse("Names?", "Are names compared case-insensitively?")
    assert {first.revealed, other.revealed} == {0, 1}
    (first, generic, again), _ = _converse("Names?", "Any other requirements?", "Any other requirements?")
    assert len({first.revealed, generic.revealed, again.revealed}) == 3  # generic asks for more, each time
