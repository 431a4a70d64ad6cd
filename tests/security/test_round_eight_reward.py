"""Round eight against issue 19's reward classes (6, 8, 10): new payloads, none of them a copy of rounds two to
seven.

* **A user component that raises** (item 6): a component (or a reward's diagnostics) ending in an exception that is
  not an ``Exception`` (``sys.exit()``, ``GeneratorExit``, ``asyncio.CancelledError`` raised by a sync function,
  ``SystemExit`` in an async component, whose event loop re-raises it) left ``score_samples`` and failed the whole
  batch. Each is now that sample's ``component_raised`` error record; ``KeyboardInterrupt`` still stops the run.
* **Loops in another order** (item 8): the same turn with its clauses or its two questions swapped, its words
  reversed or each said twice kept few runs of characters in order (similarity 0.53 to 0.67), so asking it again
  cost no ``loop_penalty``. A turn whose distinct words (stemmed, no stopwords, numbers kept) are more than 80%
  another's, in any order, is a loop now; questions that differ in a word or a number are not.
* **Non-answers that paid** (item 8, on every path: the simulator's bookkeeping read off the replies, a bare
  ``Reward.score``, ``score_samples``): a pass whose own token is an exact one ("N/A", "TBD": the token that was to
  mark real content beside a deferral was the pass itself), a shrug (``¯\\_(ツ)_/¯``: its "_" was an exact token), a
  question back ("Can you rephrase?"), a promise of an answer later ("Good point, I'll think about it.": "ll" of
  "I'll" was a new word) each earned ``asked_before_coding`` 1.0. A deferral's or pass's own tokens are no
  content, a token needs a letter or digit, a reply that only asks back states nothing, a contraction's left-over
  letters are stopwords, and promising to answer later defers.
* **Several details asked in parts, answered yes/no** (item 8, the LLM user's one-detail cap): "Yes or no for each:
  negatives raise? fractions cut? hour always shown? padded minutes?" spells out no detail enough to count as
  stated, so the LLM user's "yes, yes, no, no" (words the rules allow) stood, and told the policy four details
  in one reply (none of them booked). A question whose parts (cut at question marks, commas, semicolons, line
  ends) ask about more than one unrevealed detail is answered by the rule-based user: one detail.
"""

from __future__ import annotations

import asyncio
import sys

import pytest

from rewardpipe import component
from rewardpipe.rewards.base import Reward
from rewardpipe.single_turn import score_samples

# --- item 6: whatever a user component raises costs its own sample, never the batch ----------------------------


def _raise(kind: str) -> None:
    if kind == "sys.exit":
        sys.exit(2)
    if kind == "GeneratorExit":
        raise GeneratorExit
    if kind == "CancelledError":
        raise asyncio.CancelledError
    if kind == "BaseException subclass":
        raise type("Abort", (BaseException,), {})("stop")
    raise AssertionError(kind)


RAISED = ["sys.exit", "GeneratorExit", "CancelledError", "BaseException subclass"]
SAMPLES = [
    {"id": i, "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": f"a{i}"}]}
    for i in range(3)
]


@component(range=(0.0, 1.0), role="outcome", weight=1.0, description="always 1")
def _one(completion: str) -> float:
    return 1.0


def _reward(kind: str, where: str) -> Reward:
    if where == "async component":

        @component(range=(0.0, 1.0), role="shaping", weight=1.0, description="raises on a1")
        async def bad(completion: str) -> float:
            if completion == "a1":
                _raise(kind)
            return 0.5

        return Reward("r", [_one, bad])

    @component(range=(0.0, 1.0), role="shaping", weight=1.0, description="raises on a1")
    def bad_sync(completion: str) -> float:
        if completion == "a1" and where == "component":
            _raise(kind)
        return 0.5

    if where == "diagnostics":

        def diagnostics(completion: str) -> dict:
            if completion == "a1":
                _raise(kind)
            return {}

        return Reward("r", [_one, bad_sync], diagnostics=diagnostics)
    return Reward("r", [_one, bad_sync])


@pytest.mark.parametrize("where", ["component", "async component"])
@pytest.mark.parametrize("kind", RAISED)
def test_a_component_ending_in_any_exception_is_its_samples_error_record(kind, where):
    out = score_samples(SAMPLES, _reward(kind, where), error_reward="neutral")
    flags = [{m["name"]: m["value"] for m in o["metrics_list"]} for o in out]
    assert [f["reward_error"] for f in flags] == [0, 1, 0], flags
    assert flags[1]["error_component_raised"] == 1, flags
    assert [o["aggregate_reward_score"] for o in out] == [1.5, 1.5, 1.5]  # neutral: the group's mean, never a 0


@pytest.mark.parametrize("kind", RAISED)
def test_diagnostics_ending_in_any_exception_keep_the_score(kind):
    out = score_samples(SAMPLES, _reward(kind, "diagnostics"), error_reward="neutral")
    assert [o["aggregate_reward_score"] for o in out] == [1.5, 1.5, 1.5]
    assert all({m["name"]: m["value"] for m in o["metrics_list"]}["reward_error"] == 0 for o in out)


@pytest.mark.parametrize("kind", RAISED)
def test_the_trl_columns_path_keeps_a_raising_sample_as_its_own_error(kind):
    from rewardpipe.models import Message
    from rewardpipe.rewards.base import ScoringInput

    reward = _reward(kind, "component")
    inputs = [ScoringInput(messages=[Message(**m) for m in s["messages"]]) for s in SAMPLES]
    columns = reward.score_columns(inputs)
    assert [e is not None for e in columns.errors] == [False, True, False]
    assert columns.errors[1].kind == "component_raised"


def test_a_keyboard_interrupt_in_a_component_still_stops_the_run():
    @component(range=(0.0, 1.0), role="shaping", weight=1.0, description="interrupted")
    def interrupted(completion: str) -> float:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        score_samples(SAMPLES, Reward("r", [_one, interrupted]))


# --- item 8: the same words in another order are the same turn ------------------------------------------------

Q = "Should negative durations raise an error?"
B = "What output format do you want for the duration?"
REORDERED = {
    "clauses swapped": (
        "Should negative durations raise an error, and what about zero?",
        "What about zero, and should negative durations raise an error?",
    ),
    "two questions swapped": (f"{Q} {B}", f"{B} {Q}"),
    "words reversed": (Q, "Error? An raise durations negative should"),
    "each word said twice": (Q, "Should should negative negative durations durations raise raise an an error error?"),
    "plural and tense moved": (
        "How are fractional seconds handled when formatting?",
        "When formatting, how do you handle a fractional second?",
    ),
}


@pytest.mark.parametrize("name", sorted(REORDERED))
def test_the_same_words_in_another_order_are_a_loop(name):
    from rewardpipe.envs.ask_before_coding.similarity import repeats
    from tests.core.conftest import result
    from tests.security.test_round_four_reward_gaming import DURATION, REWARD, recorded

    first, again = REORDERED[name]
    assert repeats(first, again) and repeats(again, first), name
    for pairs in (
        [(first, "Okay."), (again, "Okay.")],
        [(first, "Okay."), (B + " Or H:MM?", "Okay."), (again, "Okay.")],
    ):
        messages = recorded(DURATION, pairs, DURATION.reference_solution)
        assert REWARD.score(messages, result("passed", 3, 3)).components["loop_penalty"] == -0.5, name


DIFFERENT = [
    ("What should format_duration return for 0 seconds?", "What should format_duration return for 1 seconds?"),
    ("Should negative durations raise an error?", "Should negative durations return an empty string?"),
    ("Is the input a list or a tuple?", "Is the output a list or a tuple?"),
    ("What if n is 0?", "If n is 0, what?"),  # too few words to judge by their set (the characters judge them)
    ("Any edge cases?", "Any edge cases beyond negative durations and fractions?"),
]


@pytest.mark.parametrize(("first", "second"), DIFFERENT)
def test_questions_that_differ_in_a_word_or_a_number_are_not_the_same_words(first, second):
    from rewardpipe.envs.ask_before_coding.similarity import normalise, same_words, word_set

    assert not same_words(word_set(normalise(first)), word_set(normalise(second)))


def test_no_two_of_a_tasks_details_asked_as_questions_are_the_same_words():
    from itertools import combinations

    from rewardpipe.envs.ask_before_coding.scenarios import GENERIC_QUESTIONS
    from rewardpipe.envs.ask_before_coding.similarity import normalise, same_words, word_set
    from tests.security.test_round_four_reward_gaming import TASKS

    for task in TASKS:
        questions = [f"Is it true that {item[0].lower()}{item[1:].rstrip('.')}?" for item in task.spec]
        for first, second in combinations([*questions, task.prompt, *GENERIC_QUESTIONS], 2):
            assert not same_words(word_set(normalise(first)), word_set(normalise(second))), (first, second)


def test_the_ideal_episode_is_still_not_a_loop():
    from tests.core.test_empty_questions import _episode_turns
    from tests.security.test_round_four_reward_gaming import DURATION, REAL_QUESTIONS

    record = _episode_turns(DURATION, REAL_QUESTIONS, DURATION.reference_solution)
    assert record.components["loop_penalty"] == 0.0


def test_judging_words_in_any_order_stays_linear():
    """Item 7: a turn's set of words is one pass over it; a long transcript compares each turn with a bounded
    number of earlier ones."""
    import rewardpipe.envs.ask_before_coding.similarity as similarity
    import rewardpipe.envs.ask_before_coding.words as words
    from tests.security.test_round_four_scorer_text import assert_linear, clear_caches
    from tests.security.text_cost import operations

    def turns(size: int) -> list[str]:
        return [" ".join(f"w{(i * 7 + j) % (size + 3)}" for j in range(size // 8 + 3)) + "?" for i in range(8)]

    assert_linear(
        "find_loop(reordered words)",
        lambda size: operations(lambda: similarity.find_loop(turns(size)), [similarity, words], clear_caches),
    )


# --- item 8: a reply that passes, shrugs, asks back or promises later answered nothing --------------------------

NON_ANSWERS = [
    "N/A",
    "TBD",
    "TBC.",
    "\u00af\\_(\u30c4)_/\u00af",
    "Can you rephrase?",
    "Sorry, what exactly do you mean by that?",
    "Good point, I'll think about it.",
    "I will tell you tomorrow.",
    "Let me think it over and let you know.",
    "That is still to be determined.",
]


@pytest.mark.parametrize("reply", NON_ANSWERS)
def test_a_reply_that_passes_shrugs_asks_back_or_promises_later_pays_nothing(reply):
    from tests.security.test_round_four_reward_gaming import DURATION, REAL_QUESTIONS, recorded, three_paths

    for question in REAL_QUESTIONS:
        messages = recorded(DURATION, [(question, reply)], DURATION.reference_solution)
        assert three_paths(DURATION, messages, "asked_before_coding") == (0.0, 0.0, 0.0), (question, reply)
        assert three_paths(DURATION, messages, "guessed_immediately") == (-1.0, -1.0, -1.0), (question, reply)


@pytest.mark.parametrize(
    ("question", "reply"),
    [
        ("Should negative durations raise an error?", "Yes, raise ValueError. Does that help?"),
        ("What output format do you want for the duration?", "H:MM:SS? Yes, like a clock."),
        ("What output format do you want for the duration?", "Like a clock: H:MM:SS, or M:SS under an hour."),
        ("Should negative durations raise an error?", "No, they won't be passed; don't check."),
        ("How should fractional seconds be handled?", "Just drop them, never round up. Anything else?"),
    ],
)
def test_an_answer_with_a_question_or_a_contraction_in_it_still_pays(question, reply):
    from tests.security.test_round_four_reward_gaming import DURATION, recorded, three_paths

    messages = recorded(DURATION, [(question, reply)], DURATION.reference_solution)
    assert three_paths(DURATION, messages, "asked_before_coding") == (1.0, 1.0, 1.0), reply


@pytest.mark.parametrize("unit", ["Why? ", "a.", "?!", "x" * 7 + "\n", "_ "])
def test_reading_a_reply_for_a_question_back_stays_linear(unit):
    """Item 7: a reply is read sentence by sentence once."""
    import rewardpipe.envs.ask_before_coding.replies as replies
    import rewardpipe.envs.ask_before_coding.words as words
    import rewardpipe.parsing as parsing
    from tests.security.test_round_four_scorer_text import assert_linear, clear_caches
    from tests.security.text_cost import operations

    assert_linear(
        f"reply_informs({unit!r})",
        lambda size: operations(
            lambda: replies.reply_informs(unit * size, "Should negatives raise?", ["Write f."]),
            [replies, words, parsing],
            clear_caches,
        ),
    )


# --- item 8: a question in parts, each about a detail, is answered about one ----------------------------------

MULTI_PART = {
    "question marks": "Quick yes/no for each: negatives raise? fractions cut? hour always shown? padded minutes?",
    "commas": "Yes or no for each: negatives raise, fractions cut, hour shown, minutes padded?",
    "lines": "Please answer each line yes or no:\n- negatives raise\n- fractions cut\n- minutes padded",
    # (round thirty-one: "fractions" matched no detail; the "two" of "Two quick ones" made the second one)
    "semicolons": "Two quick ones; do negatives raise; are fractional parts cut?",
}


@pytest.mark.parametrize("shape", sorted(MULTI_PART))
@pytest.mark.parametrize("answer", ["yes, yes, no, no", "Yes; yes; no.", "1. yes\n2. yes\n3. no"])
def test_a_question_in_parts_answered_yes_or_no_tells_one_detail(shape, answer):
    from tests.core.conftest import StubChatServer
    from tests.security.test_round_four_reward_gaming import DURATION, _llm_reply, _one_detail_at_most

    server = StubChatServer()
    try:
        reply = _llm_reply(server, MULTI_PART[shape], answer)
    finally:
        server.close()
    assert reply.text != answer, (shape, reply)
    _one_detail_at_most(reply, answer)
    assert reply.text in DURATION.spec or reply.revealed is None


@pytest.mark.parametrize(
    ("question", "answer"),
    [
        ("Should negative durations raise an error?", "Yes."),
        ("If the input is negative, should I raise or return None?", "Raise."),
        ("For a duration of 3600 seconds, should it print 1:00:00?", "Yes."),
    ],
)
def test_a_question_about_one_detail_in_parts_keeps_the_llms_answer(question, answer):
    from rewardpipe.envs.ask_before_coding.replies import vet_llm_reply
    from tests.security.test_round_four_reward_gaming import DURATION

    text, _ = vet_llm_reply(answer, question, DURATION.spec, prompt=DURATION.prompt, entry_point=DURATION.entry_point)
    assert text == answer


@pytest.mark.parametrize("unit", ["a, ", "negatives raise? ", ";", "\n"])
def test_cutting_a_question_into_parts_stays_linear(unit):
    """Item 7: the parts are read in one pass; the request once."""
    import rewardpipe.envs.ask_before_coding.questions as questions
    import rewardpipe.envs.ask_before_coding.replies as replies
    import rewardpipe.envs.ask_before_coding.words as words
    import rewardpipe.parsing as parsing
    from tests.security.test_round_four_reward_gaming import DURATION
    from tests.security.test_round_four_scorer_text import assert_linear, clear_caches
    from tests.security.text_cost import operations

    assert_linear(
        f"asked_details({unit!r})",
        lambda size: operations(
            lambda: replies.asked_details(unit * size, DURATION.spec, prompt=DURATION.prompt),
            [replies, questions, words, parsing],
            clear_caches,
        ),
    )
