"""The loop check after an independent review (findings A and B).

* **A question about another value is not a loop.** Two questions alike in every word but the value asked about
  ("... for 59.9 seconds?" / "... for 3600 seconds?", ``human_size(512)`` / ``human_size(1536)``) cost -0.5, even
  when each reply revealed a new hidden detail. A turn asking about other literal values (numbers, quoted strings,
  a call's arguments, inline code) is never the later turn of a loop; with the simulator's bookkeeping, a turn
  whose reply revealed a new detail is a loop only as the same question again (exactly, or inside a longer turn).
* **The loop check's cost is bounded per transcript.** Each turn compared with 32 predecessors, each comparison up
  to MAX_CANDIDATES anchor pairs per character: ~20 s of CPU on 100 KB of random "abcd" turns. Operations are
  counted (``text_cost``), never timed.
"""

from __future__ import annotations

import random

import pytest

import rewardpipe.envs.ask_before_coding.similarity as similarity
import rewardpipe.envs.ask_before_coding.words as words
from rewardpipe.envs.ask_before_coding.similarity import find_loop, repeats
from tests.security.test_round_four_scorer_text import clear_caches
from tests.security.test_round_nine_reward import REWORDINGS
from tests.security.text_cost import operations

TEMPLATES = [
    "What should the output be for {} seconds?",
    "What should human_size({}) return?",
    "What should `format_duration({})` return?",
    "What should median([{}]) return?",
    "Should parse_bool('{}') return True?",
    'Is "{}" accepted as true?',
    "What do you want for {}?",
    "What if size is {}?",
]
VALUES = [("59.9", "3600"), ("512", "1536"), ("-5", "59.9"), ("None", "1, 2, 3, 4"), ("0", "4"), ("yes", "on")]
FITTING = [
    (template, first, second)
    for template in TEMPLATES
    for first, second in VALUES
    # a word in place of a value outside quotes or a call is a word, not a value
    if "(" in template or "'" in template or '"' in template or (first[-1].isdigit() and second[-1].isdigit())
]


@pytest.mark.parametrize(("template", "first", "second"), FITTING)
def test_the_same_question_about_another_value_is_not_a_loop(template, first, second):
    one, other = template.format(first), template.format(second)
    assert not repeats(one, other)
    assert find_loop([one, other]) is None
    assert find_loop([other, "Should negative input raise an error?", one]) is None


@pytest.mark.parametrize(("template", "first", "second"), FITTING[::3])
@pytest.mark.parametrize("name", ["leet", "mixed_case", "backwards", "words_backwards", "look_alikes"])
def test_the_same_value_asked_again_reworded_is_still_a_loop(template, first, second, name):
    question = template.format(first)
    again = REWORDINGS[name](question, 7)
    assert find_loop([question, again]) == (0, 1)
    assert find_loop([question, template.format(second), question, template.format(second)]) is not None
    assert find_loop([question] * 4) == (0, 1)


NEAR_PAIRS = [
    ("Should the result be uppercase?", "Should the result be lowercase?"),
    ("Is a password without a digit strong?", "Is a password without a symbol strong?"),
    ("Should negative durations raise an error?", "Should fractional durations raise an error?"),
]


@pytest.mark.parametrize(("first", "second"), NEAR_PAIRS)
def test_a_turn_that_revealed_a_new_detail_is_a_loop_only_as_the_same_question(first, second):
    assert find_loop([first, second]) == (0, 1)  # only their words to go by: alike
    assert find_loop([first, second], new_details={0, 1}) is None
    # the same question again, exactly or inside a longer turn, whatever the reply said
    assert find_loop([first, second, first], new_details={0, 1, 2}) == (0, 2)
    assert find_loop([first, f"Sorry to ask again: {first} I want to be sure."], new_details={0, 1}) == (0, 1)


def test_the_live_episode_does_not_charge_a_question_that_revealed_a_new_detail():
    for questions in (
        ["What should the output be for 59.9 seconds?", "What should the output be for 3600 seconds?"],
        ["Should the result be in clock format?", "Should the result be in clock format?"],
    ):
        expected = 0.0 if questions[0] != questions[1] else -0.5
        assert episode_loop_penalty(questions) == expected, questions


PADDED = [
    ["Is that all? (1)", "Is that all? (2)"],
    ["What do you mean? #1", "What do you mean? #2", "What do you mean? #3"],
    [
        "Clarify the format for 1?",
        "Clarify the format for 2?",
        "Clarify the format for 3?",
        "Clarify the format for 4?",
    ],
]


@pytest.mark.parametrize("questions", PADDED)
def test_a_value_padded_onto_the_same_question_is_still_a_loop_where_the_replies_are_known(questions):
    """A counter appended to the same question would dodge the penalty if values alone decided. With the
    simulator's bookkeeping (every training episode), what each reply revealed decides instead (a generic question
    whose every reply reveals the next hidden detail is not a loop: each reply told the model something new)."""
    assert episode_loop_penalty(questions) == -0.5, questions
    assert find_loop(questions, new_details=frozenset(), by_values=False) is not None


def episode_loop_penalty(questions: list[str]) -> float:
    """The loop penalty of a live episode of the duration task: ``questions``, then the reference solution."""
    from rewardpipe.envs.ask_before_coding.environment import ENVIRONMENT
    from rewardpipe.episode import apply_env_turn, apply_policy_turn, finish_episode, start_episode
    from rewardpipe.rewards import get_reward
    from tests.core.conftest import result
    from tests.security.test_round_four_reward_gaming import DURATION

    state = start_episode(DURATION, env=ENVIRONMENT, run_id="r", step=0, group_id="g", rollout_id="x")
    for turn in [*questions, f"```python\n{DURATION.reference_solution}```"]:
        state = apply_policy_turn(state, turn, ENVIRONMENT, DURATION)
        if state.next_action == "env":
            state = apply_env_turn(state, DURATION, ENVIRONMENT)
    record = finish_episode(state, DURATION, result("passed", 3, 3), get_reward("ask_before_coding"), ENVIRONMENT)
    return record.components["loop_penalty"]


def _random_turns(count: int, chars: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice("abcd") for _ in range(chars)) + "?" for _ in range(count)]


#: Operations per character compared (anchor pairs, their sort and chain) or read: measured ~120 at most.
OPS_PER_CHAR = 150


@pytest.mark.parametrize(("count", "chars"), [(33, 400), (12, 1000), (3, 4000)])
def test_the_loop_check_is_bounded_per_transcript_whatever_its_turns(monkeypatch, count, chars):
    """Turns sharing every anchor (four letters): the work is bounded by the characters compared per transcript
    (made small here, so the traced run is short) plus the transcript's length, not by turns x lookback x length.
    """
    monkeypatch.setattr(similarity, "COMPARED_CHARS_PER_TRANSCRIPT", 20_000, raising=False)
    turns = _random_turns(count, chars)
    budget = OPS_PER_CHAR * (20_000 + sum(map(len, turns)))
    spent = operations(lambda: find_loop(turns), [similarity, words], clear_caches, limit=budget)
    assert spent <= budget, f"find_loop on {count} turns of {chars} characters: more than {budget} operations"


def test_the_bound_leaves_an_episode_compared_in_full():
    """Six turns of a thousand characters, each compared with all the others on text and letters: within it."""
    per_pair = 2 * 2 * 1000
    assert 15 * per_pair <= similarity.COMPARED_CHARS_PER_TRANSCRIPT
    first = "I need to check the requirements again. " * 25
    assert find_loop([*_random_turns(5, 1000), first, first[:-6] + "Hmm."]) == (5, 6)
