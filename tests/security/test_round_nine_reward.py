"""Round nine against issue 19's reward class 8 (gaming ask-before-coding): new payloads, none of them a copy of
rounds two to eight. Each rule is tested as a property over every bundled task's hidden details, not on a list of
examples.

* **Loops reworded** (``loop_penalty``): the same question asked again with its words swapped for synonyms
  ("throw an exception" for "raise an error"), its letters for digits and symbols ("r3turn n3g@tive?"), or
  spelt backwards (the whole turn, or each word) kept too few characters or words in common, so asking it again
  cost nothing. The loop check now reads a turn's words through leetspeak (``words.read_leet``), as concepts
  (``words.loop_key``: a synonym group's name, either way round). Case, accents, zero-width and look-alike
  letters were already read (``words.fold``): guards here. Distinct details asked one by one stay apart, however
  they are written.
"""

from __future__ import annotations

import random
import re

import pytest

from rewardpipe.envs.ask_before_coding.similarity import find_loop, repeats
from tests.security.test_round_four_reward_gaming import DURATION, REWARD, TASKS, recorded


def _as_question(item: str) -> str:
    return f"Is it true that {item[0].lower()}{item[1:].rstrip('.')}?"


#: Every bundled task's hidden details, each asked as a question.
DETAIL_QUESTIONS = [[_as_question(item) for item in task.spec] for task in TASKS]
QUESTIONS = [question for task in DETAIL_QUESTIONS for question in task]

# --- ways to write the same question again --------------------------------------------------------------------

# Leetspeak as people write it (several choices per letter), not the rule's own table.
_LEET = {
    "a": "4@",
    "e": "3€",
    "i": "1!",
    "o": "0",
    "s": "5$",
    "t": "7",
    "l": "1|",
    "g": "9",
    "b": "8",
    "z": "2",
}
_HOMOGLYPHS = {"a": "а", "e": "е", "o": "о", "p": "р", "c": "с", "x": "х", "y": "у", "i": "і"}
_ZERO_WIDTH = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad"]
_MARKS = ["\u0301", "\u0300", "\u0308", "\u0302", "\u0303"]
# Synonyms a user or a model uses for the words of a requirement (words.py's concept groups say which words are
# one concept; this table is the test's own, in the other direction, with forms the groups do not list).
_SYNONYMS = {
    "raise": "throw",
    "raises": "throws",
    "raised": "thrown",
    "error": "exception",
    "errors": "exceptions",
    "negative": "minus",
    "empty": "blank",
    "ignored": "skipped",
    "ignore": "skip",
    "invalid": "malformed",
    "truncated": "floored",
    "maximum": "max",
    "minimum": "min",
    "duplicates": "repeats",
    "duplicate": "repeated",
    "hyphen": "dash",
    "hyphens": "dashes",
    "none": "null",
    "integer": "int",
    "integers": "ints",
    "list": "array",
    "removed": "deleted",
    "sorted": "ordered",
    "string": "text",
    "length": "size",
    "input": "argument",
    "returns": "gives",
    "handled": "treated",
    "accepted": "allowed",
    "rejected": "refused",
}
_WORD = re.compile(r"[A-Za-z]+")


def leet(text: str, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(_LEET[c.lower()]) if c.lower() in _LEET and rng.random() < 0.6 else c for c in text)


def mixed_case(text: str, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(c.upper() if rng.random() < 0.5 else c.lower() for c in text)


def look_alikes(text: str, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(_HOMOGLYPHS[c] if c in _HOMOGLYPHS and rng.random() < 0.7 else c for c in text)


def invisible(text: str, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(c + rng.choice(_ZERO_WIDTH) if c.isalpha() and rng.random() < 0.4 else c for c in text)


def accents(text: str, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(c + rng.choice(_MARKS) if c in "aeiouAEIOU" else c for c in text)


def backwards(text: str, seed: int) -> str:
    return text[::-1]


def words_backwards(text: str, seed: int) -> str:
    return _WORD.sub(lambda m: m[0][::-1], text)


def synonyms(text: str, seed: int) -> str:
    return _WORD.sub(lambda m: _swap(m[0]), text)


def _swap(word: str) -> str:
    other = _SYNONYMS.get(word.lower())
    if other is None:
        return word
    return other.capitalize() if word[0].isupper() else other


def synonyms_in_leet(text: str, seed: int) -> str:
    return leet(mixed_case(synonyms(text, seed), seed), seed)


REWORDINGS = {
    f.__name__: f
    for f in (leet, mixed_case, look_alikes, invisible, accents, backwards, words_backwards, synonyms, synonyms_in_leet)
}


def _with_synonyms(question: str) -> bool:
    return synonyms(question, 0) != question


@pytest.mark.parametrize("name", sorted(REWORDINGS))
def test_a_question_asked_again_reworded_is_a_loop(name):
    """Every bundled detail asked as a question, then asked again reworded: a loop, whichever is asked first and
    with another question between."""
    reword = REWORDINGS[name]
    missed = []
    for seed, question in enumerate(QUESTIONS):
        if name.startswith("synonyms") and not _with_synonyms(question):
            continue
        again = reword(question, seed)
        other = "What output format do you want for the result?"
        if not (repeats(question, again) and repeats(again, question) and find_loop([question, other, again])):
            missed.append(again)
    assert not missed, f"{len(missed)} of {len(QUESTIONS)} not a loop, e.g. {missed[:3]}"


@pytest.mark.parametrize(
    "again",
    [
        "5h0uld n3g4t1v3 dur4t10n5 r41s3 4n 3rr0r?",
        "$hould neg@tive dur@tion$ r@i$e @n err0r?",
        "?rorre na esiar snoitarud evitagen dluohS",
        "Dluohs evitagen snoitarud esiar na rorre?",
        "Should minus durations throw an exception?",
        "Sh0uld m1nu$ dur4t10n5 THR0W 4n 3XC3PT10N?",
        "Should durations below zero throw an error?",
    ],
)
def test_the_reworded_repeat_costs_the_loop_penalty(again):
    from tests.core.conftest import result

    first = "Should negative durations raise an error?"
    messages = recorded(DURATION, [(first, "Yes, raise ValueError."), (again, "Yes.")], DURATION.reference_solution)
    assert REWARD.score(messages, result("passed", 3, 3)).components["loop_penalty"] == -0.5


SHORT_REWORDED = [
    ("How should I handle duplicate names?", "How do I treat repeated names?"),
    ("Should invalid input return None?", "Should malformed arguments give null?"),
    ("Skip empty lines?", "Ignore blank lines?"),
    ("Sort names by length?", "Order names by size?"),
]


@pytest.mark.parametrize(("first", "again"), SHORT_REWORDED)
def test_a_short_question_reworded_with_synonyms_is_a_loop(first, again):
    """Too few words for the share of words in common: the very same concepts (two or more) are a loop."""
    assert find_loop([first, again]) == (0, 1)
    assert find_loop([first, "What output format do you want?", again]) == (0, 2)


# --- guards: distinct questions stay distinct, however they are written ---------------------------------------


@pytest.mark.parametrize("name", sorted(REWORDINGS))
def test_a_tasks_details_asked_one_by_one_stay_apart_however_written(name):
    """A task's details asked one by one, each written the same way: no loop where the plain questions have none
    (the rewording reads both sides alike, so it never makes two details one)."""
    reword = REWORDINGS[name]
    for seed, questions in enumerate(DETAIL_QUESTIONS):
        if find_loop(questions) is None:
            assert find_loop([reword(q, seed) for q in questions]) is None, (name, questions)


DISTINCT = [
    ("Should a negative duration raise ValueError or TypeError?", "Should an empty duration list return 0 or None?"),
    ("Is the input a sorted list of integers?", "Is the output a dictionary keyed by name?"),
    ("Do you want the minimum or the maximum?", "Should ties keep their original order?"),
    ("Does x1 come before x2 in the output?", "Does utf8 input need decoding first?"),
    ("Should hyphens be kept in names?", "Should spaces be trimmed from names?"),
    ("Should the result be lowercase, even for acronyms?", "Should numbers keep their leading zeros?"),
    ("Does a 100ms delay count as a timeout?", "Does a retry reset the failure counter?"),
    ("Should live records be kept after a restart?", "Should stale records be purged on startup?"),
    ("If the list is empty, should I raise an error?", "If the list has duplicates, should I keep the first one?"),
    ("Should empty lines be skipped?", "Should long lines be wrapped?"),
    ("Are names unique?", "Are names case-sensitive?"),
    ("Is the limit inclusive?", "Is the start index zero?"),
    ("Round half up?", "Round half to even?"),
    ("Negative input raises?", "Empty input raises?"),
]


@pytest.mark.parametrize(("first", "second"), DISTINCT)
@pytest.mark.parametrize("name", ["plain", "leet", "mixed_case", "words_backwards", "backwards"])
def test_questions_about_different_things_are_not_loops(first, second, name):
    reword = REWORDINGS.get(name, lambda text, seed: text)
    assert find_loop([reword(first, 1), reword(second, 2)]) is None


def test_different_values_stay_different_when_read_as_leetspeak():
    from rewardpipe.envs.ask_before_coding.similarity import canonical, word_set

    assert canonical("For 0 seconds, 1:00:00 or 3600?") == "for 0 seconds, 1:00:00 or 3600?"
    assert canonical("r3turn n3g@tive?") == "return negative?"
    for first, second in [("x3", "x4"), ("100ms", "500ms"), ("utf8", "utf16"), ("h1", "h2"), ("v10", "v12")]:
        question = "Should {} come before the maximum and the minimum here?"
        assert word_set(canonical(question.format(first))) != word_set(canonical(question.format(second)))


def test_the_ideal_episode_is_still_not_a_loop():
    from tests.core.test_empty_questions import _episode_turns
    from tests.security.test_round_four_reward_gaming import REAL_QUESTIONS

    record = _episode_turns(DURATION, REAL_QUESTIONS, DURATION.reference_solution)
    assert record.components["loop_penalty"] == 0.0


@pytest.mark.parametrize("unit", ["r3turn n3g@tive? ", "4" * 9 + "b ", "evitagen ", "$", "x1 " * 3, "wole b orez "])
def test_reading_reworded_loops_stays_linear(unit):
    """Item 7: leetspeak is one regex pass, a word's key one look each way round, a transcript's turns each
    compared with a bounded number of earlier ones."""
    import rewardpipe.envs.ask_before_coding.similarity as similarity
    import rewardpipe.envs.ask_before_coding.words as words
    from tests.security.test_round_four_scorer_text import assert_linear, clear_caches
    from tests.security.text_cost import operations

    def turns(size: int) -> list[str]:
        text = unit * (size // len(unit) + 1)
        return [text, text[::-1], text.upper(), "Should negative durations raise?"]

    assert_linear(
        f"find_loop({unit!r})",
        lambda size: operations(lambda: similarity.find_loop(turns(size)), [similarity, words], clear_caches),
    )


# --- vague replies pay nothing on the paths without the simulator's bookkeeping ---------------------------------

# Hedges (how likely, how often) and qualities any program should have, alone or together, in several shapes:
# none names a value or a choice. Scored on all three paths (the bookkeeping read off the replies, a bare
# Reward.score, score_samples), where each used to pay asked_before_coding 1.0.
VAGUE_REPLIES = [
    "Possibly.",
    "Possibly, possibly.",
    "Make it robust.",
    "Make it robust and efficient, please.",
    "Handle it gracefully.",
    "Keep it simple and readable.",
    "Be careful there.",
    "Sometimes, yes and no.",
    "It really depends.",
    "In some cases.",
    "Kind of.",
    "Perhaps, perhaps not.",
    "Maybe yes, maybe no.",
    "Make it production-ready.",
    "Handle edge cases properly.",
    "Follow best practices and keep it clean.",
    "Whatever is most sensible; it should be reliable.",
    "That would be nice.",
    "Hopefully fast.",
    "Do it properly, nicely and quickly.",
]


@pytest.mark.parametrize("reply", VAGUE_REPLIES)
def test_a_vague_reply_pays_nothing_on_any_path(reply):
    """As round eight's non-answers: each of the four real questions, on the three paths, earns nothing."""
    from tests.security.test_round_eight_reward import (
        test_a_reply_that_passes_shrugs_asks_back_or_promises_later_pays_nothing as pays_nothing,
    )

    pays_nothing(reply)


def test_every_hidden_detail_still_pays():
    """Guard, over every bundled task: a reply stating a hidden detail answers a generic question on the paths
    without bookkeeping, except a detail the request already states ("returns True or False")."""
    from rewardpipe.envs.ask_before_coding.replies import reply_informs

    missed = {
        item
        for task in TASKS
        for item in task.spec
        if not reply_informs(item, "Are there any other requirements?", [task.prompt])
    }
    assert missed == {"The function returns True or False."}


@pytest.mark.parametrize("hedge", ["Possibly: ", "Ideally, ", "Probably ", "Keep it simple: ", "To be robust, "])
def test_a_hedge_beside_a_hidden_detail_changes_nothing(hedge):
    """Guard, over every bundled task: a hedge or a quality in front of a detail neither adds nor takes."""
    from rewardpipe.envs.ask_before_coding.replies import reply_informs

    changed = [
        (task.task_id, item)
        for task in TASKS
        for item in task.spec
        for question in ("Are there any other requirements?", _as_question(item))
        if reply_informs(hedge + item, question, [task.prompt]) != reply_informs(item, question, [task.prompt])
    ]
    assert not changed, changed[:5]


@pytest.mark.parametrize(
    ("question", "reply"),
    [
        ("Should negative durations raise an error?", "Yes."),
        ("Should negative durations raise an error?", "Probably not."),
        ("Should negative durations raise an error?", "No, they should return an empty string."),
        ("How should fractional seconds be handled?", "Keep it simple: just drop them."),
        ("What output format do you want for the duration?", "Ideally H:MM:SS, robustly padded."),
        ("How should fractional seconds be handled?", "Probably truncate them."),
    ],
)
def test_a_choice_or_a_value_beside_a_hedge_still_pays(question, reply):
    """Guard: asked_before_coding 1.0 on the three paths, as round eight's answers."""
    from tests.security.test_round_eight_reward import (
        test_an_answer_with_a_question_or_a_contraction_in_it_still_pays as pays,
    )

    pays(question, reply)


@pytest.mark.parametrize("unit", ["Possibly. ", "in some cases ", "robustly", "sort of sort of ", "Kind of? "])
def test_reading_a_reply_for_hedges_stays_linear(unit):
    """Item 7: hedges are dropped in two passes over the reply's words."""
    import rewardpipe.envs.ask_before_coding.replies as replies
    import rewardpipe.envs.ask_before_coding.words as words
    import rewardpipe.parsing as parsing
    from tests.security.test_round_four_scorer_text import assert_linear, clear_caches
    from tests.security.text_cost import operations

    assert_linear(
        f"reply_informs({unit!r})",
        lambda size: operations(
            lambda: replies.reply_informs(unit * (size // len(unit) + 1), "Should negatives raise?", ["Write f."]),
            [replies, words, parsing],
            clear_caches,
        ),
    )


# --- a component value outside its declared range is scored as it is, and said loudly ---------------------------


def _range_reward(value: float):
    from rewardpipe import component
    from rewardpipe.rewards.base import Reward

    @component(range=(0.0, 1.0), role="shaping", weight=0.5, description="returns what it is given")
    def bonus(completion: str) -> float:
        return value if completion == "big" else 0.5

    @component(range=(-1.0, 0.0), role="penalty", weight=1.0, description="always in range")
    def cost(completion: str) -> float:
        return -0.25

    return Reward("ranged", [bonus, cost])


def _messages(text: str):
    from rewardpipe.models import Message

    return [Message(role="user", content="q"), Message(role="assistant", content=text)]


@pytest.mark.parametrize("value", [5.0, -0.5, 1.000001, 1e99])
def test_an_out_of_range_value_is_scored_as_it_is_and_named_in_the_record(value):
    from rewardpipe.episode import record_from_score
    from rewardpipe.rewards.base import OUT_OF_RANGE_METRIC, OutOfRangeWarning

    reward = _range_reward(value)
    with pytest.warns(OutOfRangeWarning, match="bonus"):
        score = reward.score(_messages("big"))
    assert score.components == {"bonus": value, "cost": -0.25}  # the contract: the value, not an error
    assert score.error is None and score.aggregate == 0.5 * value - 0.25
    assert score.metrics[OUT_OF_RANGE_METRIC] == f"bonus={value:g} outside [0, 1]"
    record = record_from_score(score, run_id="r", step=0, group_id="g", rollout_id="o", task_id="t")
    assert record.status == "scored" and record.metrics[OUT_OF_RANGE_METRIC] == f"bonus={value:g} outside [0, 1]"


def test_an_out_of_range_value_warns_once_per_component_on_every_scoring_path():
    import warnings

    from rewardpipe.rewards.base import OUT_OF_RANGE_METRIC, OutOfRangeWarning, ScoringInput

    reward = _range_reward(5.0)
    inputs = [ScoringInput(messages=_messages(text)) for text in ("big", "ok", "big")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        many = reward.score_many(inputs)
        columns = reward.score_columns(inputs)
    assert [type(w.message) for w in caught] == [OutOfRangeWarning]
    assert [OUT_OF_RANGE_METRIC in s.metrics for s in many] == [True, False, True]
    assert columns.values[0] == [5.0, 0.5, 5.0]
    fresh = _range_reward(5.0)
    with pytest.warns(OutOfRangeWarning):
        fresh.score_columns(inputs)  # the trainer's column path (TRL) warns too: a column has no metrics


def test_a_strict_run_can_make_an_out_of_range_value_an_error():
    import warnings

    from rewardpipe.rewards.base import OutOfRangeWarning

    with warnings.catch_warnings():
        warnings.simplefilter("error", OutOfRangeWarning)
        with pytest.raises(OutOfRangeWarning):
            _range_reward(5.0).score(_messages("big"))


@pytest.mark.parametrize("value", [0.0, 1.0, 1.0 + 1e-12, -1e-12, 0.5])
def test_a_value_in_range_or_at_its_ends_is_not_flagged(value):
    import warnings

    from rewardpipe.rewards.base import OUT_OF_RANGE_METRIC

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        score = _range_reward(value).score(_messages("big"))
    assert OUT_OF_RANGE_METRIC not in score.metrics and score.aggregate == 0.5 * value - 0.25


def test_a_non_finite_value_is_still_an_error_record_not_a_range_note():
    from rewardpipe.episode import record_from_score
    from rewardpipe.rewards.base import OUT_OF_RANGE_METRIC

    score = _range_reward(float("inf")).score(_messages("big"))
    assert OUT_OF_RANGE_METRIC not in score.metrics
    record = record_from_score(score, run_id="r", step=0, group_id="g", rollout_id="o", task_id="t")
    assert record.status == "error" and record.error.kind == "component_out_of_range"


def test_the_builtin_reward_never_leaves_its_ranges():
    from tests.core.test_empty_questions import _episode_turns
    from tests.security.test_round_four_reward_gaming import REAL_QUESTIONS

    record = _episode_turns(DURATION, REAL_QUESTIONS, DURATION.reference_solution)
    assert "out_of_range" not in record.metrics
