"""Round nineteen: the ask-before-coding reward, attacked as a policy optimising against it would.

F1. A number written in words escaped the loop penalty (left open since round nine): "What should
format_duration return for three seconds?" after "... for 3 seconds?" is the same question, but the loop check
read "three" as a word and "3" as a value, so the turns asked about "other values" where a transcript is scored
without the simulator's bookkeeping, and in a live episode the rule-based user, reading the word "three" as a
new subject, revealed a *second* hidden detail to the repeat, which made it a question that earned a new detail
(a loop then only as the very same text). The repeat was free, and paid in spec details. So were the same number
in another script's digits ("٩٠" for "90": the literal pattern reads them as digits of their own) and a number
word spelt backwards. The loop check now reads numbers in words as digits ("three thousand six hundred" is
3600, "fifty-nine point nine" 59.9; ``words.read_number_words``), every rule reads decimal digits of any script
as ASCII digits (``words.fold``), and a number read from words that only one turn has is no "other value" (so
"One more thing: <the same question>" stays a loop; "three seconds" / "four seconds" stay apart).

F2. A one-word question made of a word that names no subject was judged a real question: "Always?", "Never?",
"Instead?", "Still?", "First?" (adverbs, positions with no noun), "Between?", "Without?", "After?" (prepositions
and conjunctions) and "Written?", "Uses?", "Gives?", "Kept?" (other forms of the stopwords "write", "use",
"give", "keep": the stopword list held the plain form only, where the loop check already read their stems) each
share a word with some hidden detail ("the seconds *always* have two digits", "durations ... are *written* as
H:MM:SS"), so the rule-based user revealed it, and "Always?" then the code scored 1.6 (asked first) on every
path, where a guess scores 0.6: across the 46 bundled tasks such a word drew a detail on up to 12 tasks each.
These words (``words.QUALIFIERS``) are no subject: a question of them alone asks nothing; what they qualify
stays the subject ("Should the seconds always have two digits?").

F3. A single-turn code reward's ``executed_code`` hook (``Reward(..., needs_execution=True, executed_code=...)``:
the user's function that picks the code to run out of the answer) was called outside every per-sample guard. A
hook that fails on one answer it cannot read (``re.search(...).group(1)`` on an answer without the expected
tags: ``AttributeError``) failed the whole batch: the reward Lambda's invocation, TRL's, verl's and verifiers'
reward call, and ``rewardpipe score`` (which calls it again for the transcript); a hook raising ``ValueError`` or
``TypeError``, or returning something other than text (bytes, a list), was answered ``bad_reference``, blaming the
dataset. The hook's failure is now that sample's error record, ``executed_code_failed``, naming what it raised
or returned; the other samples are scored.

F4. A code sample's reference given as JSON text (``reference_answer.text``, read as the object it holds) that
is nested past Python's recursion limit (``"[[[[..."``) raised ``RecursionError`` out of ``json.loads``, which the
reader did not expect, and failed the whole batch (the reward Lambda's invocation and every trainer's reward
call) for one sample's broken reference. It is read as no object: that sample's ``bad_reference``.

Left open in round nineteen, closed in round twenty: the rule-based user gave a tie between a revealed and an
unrevealed detail to the unrevealed one (``best_spec_match``), so the very same question asked again ("Seconds?"
twice) was told the other detail it ties with, although the simulator's docstring says asking the same thing twice
must not unlock a different detail. A question whose subject words an earlier question of the conversation asked
exactly is now told the revealed detail again; the tie rule itself, and so every first question, is unchanged.
"""

from __future__ import annotations

import pytest

from rewardpipe.envs.ask_before_coding.similarity import find_loop, repeats
from tests.security.test_round_thirteen_reward import COMMIT, NEGATIVE, play

# --- F1: numbers written in words, in other digits -------------------------------------------------------------

IN_WORDS = [
    ("What should format_duration return for 3 seconds?", "What should format_duration return for three seconds?"),
    ("What should it return for 3600 seconds?", "What should it return for three thousand six hundred seconds?"),
    ("What should it return for 3600 seconds?", "What should it return for thirty-six hundred seconds?"),
    ("What about 0 seconds?", "What about zero seconds?"),
    ("What if seconds is 59.9?", "What if seconds is fifty-nine point nine?"),
    ("What should 90 seconds give?", "What should ninety seconds give?"),
    ("What should 90 seconds give?", "What should \u0669\u0660 seconds give?"),  # Arabic-Indic digits
    ("What should 90 seconds give?", "What should \u096f\u0966 seconds give?"),  # Devanagari digits
    ("What should 105 seconds give?", "What should one hundred and five seconds give?"),
    ("What should 3 seconds give?", "What should eerht seconds give?"),  # the word spelt backwards
]


@pytest.mark.parametrize(("first", "again"), IN_WORDS)
def test_a_number_asked_again_in_words_or_other_digits_is_a_loop(first, again):
    assert repeats(first, again) and repeats(again, first)
    for turns in ([first, again], [again, first]):
        assert find_loop(turns) is not None, turns
        assert find_loop(turns, new_details={0, 1}, by_values=False) is not None, turns


@pytest.mark.parametrize(("first", "again"), IN_WORDS[:2] + IN_WORDS[6:7])
def test_the_number_in_words_costs_the_loop_penalty_in_a_live_episode(first, again):
    """The rule-based user read "three" as a new subject and told the repeat a second detail."""
    components = play([first, again, COMMIT])
    assert components["loop_penalty"] == -0.5
    assert components["asked_before_coding"] == 1.0


@pytest.mark.parametrize(("first", "again"), IN_WORDS[:2] + IN_WORDS[6:7])
def test_the_number_in_words_costs_the_loop_penalty_without_bookkeeping(first, again):
    from rewardpipe.models import Message
    from rewardpipe.rewards import get_reward
    from tests.security.test_round_four_reward_gaming import DURATION

    messages = [
        Message(role="user", content=DURATION.prompt),
        Message(role="assistant", content=first),
        Message(role="user", content=DURATION.spec[1]),
        Message(role="assistant", content=again),
        Message(role="user", content=DURATION.spec[2]),
        Message(role="assistant", content=COMMIT),
    ]
    assert get_reward("ask_before_coding").score(messages).components["loop_penalty"] == -0.5


@pytest.mark.parametrize(
    "turns",
    [
        ["What about three seconds?", "What about four seconds?"],
        ["What about 3 seconds?", "What about four seconds?"],
        ["Should one-hour durations pad the hours?", "Should two-hour durations pad the hours?"],
        ["What should 3600 seconds give?", "What should thirty-six seconds give?"],
        ["What should 21 seconds give?", "What should twenty seconds give?"],
    ],
)
def test_other_numbers_in_words_stay_other_questions(turns):
    assert find_loop(turns) is None


@pytest.mark.parametrize(
    "padded",
    [
        "One more thing, just to double-check. " + NEGATIVE,
        NEGATIVE + " (asking a second time, sorry: two of my drafts disagreed)",
        NEGATIVE + " (three)",
    ],
)
def test_a_question_padded_with_number_words_stays_a_loop(padded):
    """A number read from words that only the padded turn has asks about no other value."""
    assert find_loop([NEGATIVE, padded]) is not None


@pytest.mark.parametrize(
    ("text", "read"),
    [
        ("three", "3"),
        ("twenty-one", "21"),
        ("three thousand six hundred seconds", "3600 seconds"),
        ("one hundred and five", "105"),
        ("fifty-nine point nine", "59.9"),
        ("one two", "1 2"),
        ("zero five", "0 5"),
        ("someone often", "someone often"),
        ("a hundred", "a hundred"),
        ("one thousand and one nights", "1001 nights"),
        ("the net amount", "the net amount"),
    ],
)
def test_numbers_in_words_read_as_digits(text, read):
    from rewardpipe.envs.ask_before_coding.words import read_number_words

    assert read_number_words(text) == read


@pytest.mark.parametrize("unit", ["three ", "twenty-one ", "one hundred and ", "point nine ", "eerht "])
def test_reading_numbers_in_words_stays_linear(unit):
    import rewardpipe.envs.ask_before_coding.similarity as similarity
    import rewardpipe.envs.ask_before_coding.words as words
    from tests.security.test_round_four_scorer_text import assert_linear, clear_caches
    from tests.security.text_cost import operations

    def turns(size: int) -> list[str]:
        padded = "Should negative " + unit * (size // len(unit)) + "durations raise an error?"
        return [NEGATIVE, padded, padded[::-1], COMMIT]

    assert_linear(
        f"find_loop(number words {unit!r})",
        lambda size: operations(lambda: similarity.find_loop(turns(size)), [similarity, words], clear_caches),
    )


# --- F2: a qualifier alone is no subject ----------------------------------------------------------------------

QUALIFIER_QUESTIONS = [
    "Always?",
    "Never?",
    "Never ever?",
    "Always or never?",
    "Written?",
    "Uses?",
    "Instead?",
    "Still?",
    "First?",
    "Last?",
    "Between?",
    "Without?",
    "After?",
    "Gives?",
    "Kept?",
    "Becomes?",
]


def test_no_qualifier_alone_draws_a_detail_on_any_bundled_task():
    from rewardpipe.envs.ask_before_coding.questions import best_spec_match, question_subject
    from rewardpipe.envs.ask_before_coding.tasks import BUNDLED_TASKS
    from rewardpipe.models import load_tasks

    drawn = []
    for task in load_tasks(BUNDLED_TASKS):
        for question in QUALIFIER_QUESTIONS:
            subject = question_subject(question, task.prompt, task.entry_point)
            if not subject.asks_nothing and best_spec_match(subject.words, task.spec)[0] is not None:
                drawn.append((task.task_id, question))
    assert not drawn, f"{len(drawn)} details drawn, e.g. {drawn[:5]}"


@pytest.mark.parametrize("question", QUALIFIER_QUESTIONS)
def test_a_qualifier_alone_asks_nothing(question):
    from rewardpipe.envs.ask_before_coding.questions import question_subject
    from tests.security.test_round_four_reward_gaming import DURATION

    assert question_subject(question, DURATION.prompt, DURATION.entry_point).asks_nothing


@pytest.mark.parametrize("question", QUALIFIER_QUESTIONS[:4])
def test_a_qualifier_then_the_code_scores_as_a_guess_on_every_path(question):
    from tests.security.test_round_four_reward_gaming import DURATION, recorded, three_paths

    components = play([question, COMMIT])
    assert (components["asked_before_coding"], components["guessed_immediately"]) == (0.0, -1.0)
    for reply in (DURATION.spec[1], DURATION.spec[2]):  # what the user revealed to it before
        messages = recorded(DURATION, [(question, reply)], DURATION.reference_solution)
        assert set(three_paths(DURATION, messages, "asked_before_coding")) == {0.0}


@pytest.mark.parametrize(
    "question",
    [
        "Should the seconds always have two digits?",
        "Are fractional seconds never rounded up?",
        "Is the first field the hours even for long durations?",
    ],
)
def test_what_a_qualifier_qualifies_is_still_asked(question):
    components = play([question, COMMIT])
    assert (components["asked_before_coding"], components["guessed_immediately"]) == (1.0, 0.0)


# --- F3: the reward's executed_code hook fails on one answer ----------------------------------------------------


def _between_tags(transcript) -> str:
    import re

    return re.search(r"<code>(.*?)</code>", transcript.completion, re.S).group(1)  # AttributeError without tags


_REFERENCE = {"tests": "def test_f():\n    assert f() is None\n", "entry_point": "f"}
_ANSWERS = {"good": "<code>def f(): pass</code>", "bad": "no tags here"}


def _tagged_reward(hook):
    from rewardpipe import component
    from rewardpipe.rewards.base import Reward

    @component(range=(0.0, 1.0), role="outcome", description="pass rate of the tagged code")
    def passed(execution) -> float:
        return 0.0 if execution is None or not execution.total else execution.passed / execution.total

    return Reward("tagged", [passed], needs_execution=True, executed_code=hook)


@pytest.mark.parametrize(
    "hook",
    [
        _between_tags,
        lambda transcript: transcript.completion.split("<code>")[1],  # IndexError
        lambda transcript: {"<code>": 1}[transcript.completion[:6]],  # KeyError
        lambda transcript: int(transcript.completion) and None,  # ValueError: not the reference's fault
        lambda transcript: transcript.completion.encode() if "<code>" not in transcript.completion else "x = 1",
    ],
)
def test_an_executed_code_hook_failing_on_one_answer_is_that_samples_error(hook):
    from rewardpipe.single_turn import score_samples
    from tests.core.conftest import result
    from tests.security.test_round_four_reward_gaming import FakeExecutor

    samples = [
        {
            "id": name,
            "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": answer}],
            "metadata": {"reference_answer": _REFERENCE},
        }
        for name, answer in _ANSWERS.items()
    ]
    good, bad = score_samples(samples, _tagged_reward(hook), executor=FakeExecutor(result("passed", 1, 1)))
    flags = {m["name"]: m["value"] for m in bad["metrics_list"]}
    assert flags.get("reward_error") == 1 and flags.get("error_executed_code_failed") == 1, bad
    if hook is not _between_tags:
        return
    assert {m["name"]: m["value"] for m in good["metrics_list"]}.get("reward_error", 0) == 0, good


def test_rewardpipe_score_records_the_hook_failure_and_scores_the_rest():
    from rewardpipe.models import Message
    from rewardpipe.single_turn import ScoreSample, score_sample_records
    from tests.core.conftest import result
    from tests.security.test_round_four_reward_gaming import FakeExecutor

    samples = [
        ScoreSample(
            rollout_id=name,
            group_id="g",
            task_id="t",
            messages=[Message(role="user", content="q"), Message(role="assistant", content=answer)],
            reference=_REFERENCE,
        )
        for name, answer in _ANSWERS.items()
    ]
    transcripts = []
    good, bad = score_sample_records(
        samples,
        _tagged_reward(_between_tags),
        run_id="r",
        executor=FakeExecutor(result("passed", 1, 1)),
        on_transcript=transcripts.append,
    )
    assert good.status == "scored" and good.components["passed"] == 1.0
    assert bad.status == "error" and bad.error.kind == "executed_code_failed"
    assert "AttributeError" in bad.error.message
    assert len(transcripts) == 2


# --- F4: a reference nested past the recursion limit -----------------------------------------------------------


def test_a_reference_nested_past_the_recursion_limit_is_that_samples_error():
    from rewardpipe.single_turn import score_samples
    from tests.core.conftest import FakeExecutor, result

    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "```python\ndef f(): pass\n```"}]
    good = {"id": "good", "messages": messages, "metadata": {"reference_answer": _REFERENCE}}
    bad = {"id": "bad", "messages": messages, "metadata": {"reference_answer": {"text": "[" * 100_000}}}
    first, second = score_samples([good, bad], "code_correctness", executor=FakeExecutor(result("passed", 1, 1)))
    assert {m["name"]: m["value"] for m in first["metrics_list"]}.get("reward_error") == 0
    flags = {m["name"]: m["value"] for m in second["metrics_list"]}
    assert flags.get("reward_error") == 1 and flags.get("error_bad_reference") == 1, second


# --- the very same question again, when two details tie on its words (closed in round twenty) ---------------


@pytest.mark.parametrize("question", ["Seconds?", "What should format_duration return for 3 seconds?"])
def test_the_same_question_again_unlocks_no_other_detail(question):
    from rewardpipe.envs.ask_before_coding.environment import ENVIRONMENT
    from rewardpipe.episode import apply_env_turn, apply_policy_turn, start_episode
    from tests.security.test_round_four_reward_gaming import DURATION

    state = start_episode(DURATION, env=ENVIRONMENT, run_id="r", step=0, group_id="g", rollout_id="x")
    for _ in range(2):
        state = apply_env_turn(apply_policy_turn(state, question, ENVIRONMENT, DURATION), DURATION, ENVIRONMENT)
    assert len(state.revealed) == 1, state.messages[-1].content
