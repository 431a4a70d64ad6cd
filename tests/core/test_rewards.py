"""The ask-before-coding reward and the Reward machinery (weights, errors, aggregate), on hand-built transcripts."""

from difflib import SequenceMatcher

import pytest

from rewardpipe.rewards import REWARDS, Reward, get_reward
from rewardpipe.rewards.ask_before_coding import (
    LOOP_SIMILARITY_THRESHOLD,
    turn_similarity,
)
from tests.core.conftest import COMMIT, QUESTION, STATEMENT, fence, result, transcript

ABC = get_reward("ask_before_coding")


# The user's replies: answers with new information, so a question in these transcripts is a real one on the
# path without the simulator's bookkeeping (a reply that says nothing pays nothing: issue 19 item 8).
ANSWERS = [
    "Negative numbers raise ValueError.",
    "Zero gives an empty list.",
    "Floats are rounded down first.",
    "Strings are rejected with TypeError.",
    "Duplicates are kept in their original order.",
]


def components(*turns, execution=None):
    messages = transcript(*turns)
    replies = iter(ANSWERS)
    for message in messages[1:]:
        if message.role == "user":
            message.content = next(replies)
    return ABC.score(messages, execution).components


# --- correctness -------------------------------------------------------------------------------------------


def test_correctness_is_fraction_of_tests_passing():
    score = ABC.score(transcript(QUESTION, COMMIT), result("failed", passed=3, total=4))
    assert score.components["correctness"] == pytest.approx(0.75)
    assert score.error is None


def test_correctness_all_passing_is_one():
    assert components(QUESTION, COMMIT, execution=result("passed", 5, 5))["correctness"] == 1.0


def test_timeout_is_a_model_failure_scored_zero_even_with_partial_passes():
    score = ABC.score(transcript(QUESTION, COMMIT), result("timeout", passed=2, total=4, reason="wall-clock"))
    assert score.components["correctness"] == 0.0
    assert score.error is None
    assert score.aggregate is not None


def test_harness_error_makes_the_whole_score_an_error_not_zero():
    score = ABC.score(
        transcript(QUESTION, COMMIT, reply=ANSWERS[0]), result("error", reason="test source does not parse")
    )
    assert score.components["correctness"] is None
    assert score.aggregate is None
    assert score.error is not None
    assert score.error.kind == "execution_error"
    assert "does not parse" in score.error.message
    # the behaviour components are still reported for diagnosis
    assert score.components["asked_before_coding"] == 1.0


def test_code_without_the_entry_point_scores_zero_not_an_excluded_error():
    # Renaming a wrong function must not turn a failure into an error that GRPO ignores.
    missing = result("error", reason="the code does not define the entry point 'f'").model_copy(
        update={"model_fault": True}
    )
    score = ABC.score(transcript(QUESTION, COMMIT), missing)
    assert score.error is None
    assert score.components["correctness"] == 0.0
    assert score.aggregate is not None


def test_committed_code_without_an_execution_result_is_an_error():
    score = ABC.score(transcript(COMMIT), None)
    assert score.components["correctness"] is None
    assert score.error.kind == "not_executed"


def test_no_commit_scores_zero_without_needing_execution():
    score = ABC.score(transcript(QUESTION, QUESTION + " And zeros?"), None)
    assert score.components["correctness"] == 0.0
    assert score.error is None
    assert score.metrics["committed"] is False


def test_correctness_uses_the_last_commit_even_if_questions_follow_it():
    turns = transcript(COMMIT, QUESTION)
    assert ABC.score(turns, result("passed", 2, 2)).components["correctness"] == 1.0


# --- asked_before_coding -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "turns, expected",
    [
        ((QUESTION, COMMIT), 1.0),
        ((QUESTION, QUESTION, STATEMENT, COMMIT), 1.0),
        ((STATEMENT, QUESTION, COMMIT), 0.6),
        ((STATEMENT, STATEMENT, QUESTION, QUESTION, COMMIT), 0.6),
        ((QUESTION, QUESTION), 0.0),  # asked but never committed
        ((QUESTION,), 0.0),
        ((COMMIT,), 0.0),  # never asked
        ((STATEMENT, COMMIT), 0.0),
        ((COMMIT, QUESTION, COMMIT), 0.0),  # guessed first: the later question was not "before coding"
        ((STATEMENT, COMMIT, QUESTION, COMMIT), 0.0),
        ((QUESTION, COMMIT, QUESTION, COMMIT), 1.0),
    ],
)
def test_asked_before_coding(turns, expected):
    assert components(*turns, execution=result("passed", 1, 1))["asked_before_coding"] == expected


def test_asked_before_coding_is_not_gated_on_correctness():
    assert components(QUESTION, COMMIT, execution=result("failed", 0, 3))["asked_before_coding"] == 1.0


def test_confirmation_question_with_code_counts_as_asking_not_committing():
    ask_with_code = fence("def f(x):\n    return x") + "\nIs this the rounding you want?"
    values = components(ask_with_code, COMMIT, execution=result("passed", 1, 1))
    assert values["asked_before_coding"] == 1.0
    assert values["guessed_immediately"] == 0.0


# --- guessed_immediately -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "turns, expected",
    [
        ((COMMIT,), -1.0),
        ((QUESTION, COMMIT), 0.0),
        ((COMMIT, QUESTION, COMMIT), -1.0),
        # A statement (or an empty "?") in front of the code asked nothing: still a guess.
        ((STATEMENT, COMMIT), -1.0),
        (("?", COMMIT), -1.0),
        ((STATEMENT, QUESTION, COMMIT), 0.0),
    ],
)
def test_guessed_immediately(turns, expected):
    assert components(*turns, execution=result("passed", 1, 1))["guessed_immediately"] == expected


def test_no_assistant_turn_at_all_is_not_a_guess():
    values = components()
    assert values["guessed_immediately"] == 0.0
    assert values["correctness"] == 0.0


# --- loop_penalty ------------------------------------------------------------------------------------------


def similarity(a: str, b: str) -> float:
    return SequenceMatcher(None, a.strip(), b.strip(), autojunk=False).ratio()


BASE = "Could you tell me what the function should return for an empty list input?"


def _variant_with_similarity(above: bool) -> str:
    """Replace a growing suffix of BASE until the similarity crosses the threshold; return the side asked."""
    previous = BASE
    for cut in range(1, len(BASE)):
        candidate = BASE[: len(BASE) - cut] + "Z" * cut
        if similarity(BASE, candidate) <= LOOP_SIMILARITY_THRESHOLD:
            return previous if above else candidate
        previous = candidate
    raise AssertionError("no crossing found")


def test_loop_penalty_just_above_the_threshold():
    near = _variant_with_similarity(above=True)
    assert similarity(BASE, near) > LOOP_SIMILARITY_THRESHOLD
    assert components(STATEMENT, BASE, near)["loop_penalty"] == -0.5


def test_no_loop_penalty_at_or_just_below_the_threshold():
    far = _variant_with_similarity(above=False)
    assert similarity(BASE, far) <= LOOP_SIMILARITY_THRESHOLD
    assert similarity(BASE, far) > 0.7  # close to the boundary, not trivially different
    assert components(STATEMENT, BASE, far)["loop_penalty"] == 0.0


def test_loop_penalty_looks_at_every_pair_of_assistant_turns():
    # issue 19 item 8: the blog's "last two turns" let A, B, A, B or a repeat before a commit loop for free
    assert components(BASE, BASE, STATEMENT)["loop_penalty"] == -0.5
    assert components(BASE, STATEMENT, BASE)["loop_penalty"] == -0.5
    assert components(STATEMENT, BASE, BASE)["loop_penalty"] == -0.5
    assert components(BASE, STATEMENT, COMMIT)["loop_penalty"] == 0.0


def test_loop_penalty_needs_two_assistant_turns():
    assert components(BASE)["loop_penalty"] == 0.0


def test_loop_penalty_ignores_surrounding_whitespace():
    assert components(BASE, "\n  " + BASE + "  \n")["loop_penalty"] == -0.5


def test_long_repeated_turns_are_a_loop():
    # max-length degenerate output: compared in linear time, on the whole text
    first = "I need to check the requirements again. " * 400
    second = "I need to check the requirements again. " * 390 + "Hmm."
    assert turn_similarity(first, second) > 0.9
    assert components(STATEMENT, first, second)["loop_penalty"] == -0.5


def test_long_different_turns_are_not_a_loop():
    first = "".join(f"Line {i}: the value of item {i * 7} is {i**2}.\n" for i in range(200))
    second = "".join(f"Row {i}: widget {i * 3} costs ${i + 11}.\n" for i in range(200))
    assert turn_similarity(first, second) <= LOOP_SIMILARITY_THRESHOLD
    assert components(STATEMENT, first, second)["loop_penalty"] == 0.0


def test_long_turns_with_the_same_opening_but_different_lengths_are_not_a_loop():
    opening = "Here is my analysis of the problem so far. " * 80
    assert turn_similarity(opening, opening + "More detail. " * 600) <= LOOP_SIMILARITY_THRESHOLD


def test_turn_similarity_agrees_with_difflib_on_a_small_edit():
    a, b = BASE, BASE.replace("empty", "blank")
    assert turn_similarity(a, b) == pytest.approx(similarity(a, b))
    assert turn_similarity("  same ", "same") == 1.0
    assert turn_similarity("", "something") == 0.0


# --- aggregate, weights, registry --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "turns, execution",
    [
        ((QUESTION, COMMIT), result("failed", 1, 3)),
        ((COMMIT,), result("passed", 2, 2)),
        ((STATEMENT, BASE, BASE), None),
        ((STATEMENT, QUESTION, COMMIT), result("timeout", 0, 2)),
    ],
)
def test_aggregate_is_the_weighted_sum(turns, execution):
    score = ABC.score(transcript(*turns), execution)
    expected = sum(score.weights[name] * value for name, value in score.components.items())
    assert score.aggregate == pytest.approx(expected)


def test_hand_computed_aggregate_for_a_guess():
    score = ABC.score(transcript(COMMIT), result("failed", 1, 4))
    # 1.0 * 0.25 + 0.6 * 0 + 0.4 * -1 + 0.2 * 0
    assert score.aggregate == pytest.approx(0.25 - 0.4)


def test_default_weights():
    assert ABC.weights == {
        "correctness": 1.0,
        "asked_before_coding": 0.6,
        "guessed_immediately": 0.4,
        "loop_penalty": 0.2,
    }


def test_weights_override_changes_the_aggregate_and_reported_weights():
    reward = get_reward("ask_before_coding", {"guessed_immediately": 2.0, "correctness": 0.5})
    score = reward.score(transcript(COMMIT), result("passed", 1, 1))
    assert score.weights["guessed_immediately"] == 2.0
    assert score.weights["asked_before_coding"] == 0.6  # untouched
    assert score.aggregate == pytest.approx(0.5 * 1.0 + 2.0 * -1.0)
    assert ABC.weights["guessed_immediately"] == 0.4  # the registry entry is not mutated


def test_unknown_component_in_weights_is_an_error_naming_it():
    with pytest.raises(ValueError, match="correctnes"):
        get_reward("ask_before_coding", {"correctnes": 1.0})


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "1.0", None, True])
def test_non_finite_or_non_numeric_weight_is_an_error(bad):
    with pytest.raises(ValueError, match="correctness"):
        get_reward("ask_before_coding", {"correctness": bad})


def test_unknown_reward_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="gsm8k"):
        get_reward("no_such_reward")


def test_registry_holds_the_built_in_rewards():
    assert set(REWARDS) == {"ask_before_coding", "gsm8k", "code_correctness", "wordle", "tool_call"}
    assert all(isinstance(r, Reward) for r in REWARDS.values())


def test_diagnostics_report_execution_details():
    score = ABC.score(transcript(QUESTION, COMMIT), result("failed", 1, 3, reason="tests failed"))
    assert score.metrics["tests_passed"] == 1
    assert score.metrics["tests_total"] == 3
    assert score.metrics["exec_status"] == "failed"
    assert score.metrics["questions"] == 1
    assert score.metrics["assistant_turns"] == 2
