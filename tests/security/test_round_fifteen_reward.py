"""Round fifteen: the ask-before-coding reward, its text and its output, attacked as a policy would.

F1. The same question again with its letters doubled or stretched ("SShhoouulldd nneeggaattiivvee ...",
"Shooouuuld"), its vowels dropped ("Shld ngtv drtns rs n rrr?"), or written in the boxed letters Unicode has
no decomposition for (negative circled and negative squared capitals, regional indicator letters) escaped the
loop penalty in a live episode and where a transcript is scored on its own: a reader reads each as the
question. Loops are now also judged on a turn's consonant skeleton (``similarity.skeleton``: letters without
vowels, each run of one letter as one) as an exact key, the boxed letters are read as the letters they box, a
turn written upside down ("\u00bf\u0279o\u0279\u0279\u01dd u\u0250 ...") is read the right way up, and the same words
with the letters inside them scrambled ("Slhuod nivgteae daniurtos rasie an error?") are one key too. The
look-alikes' other case (Cherokee small letters, which casefold to the capitals UTS #39 lists) is read as well.

F2. An honest question about a negative example value ("What should format_duration(-5) return?", "Is -5
valid?", "What happens with `-1`?") lost the number's sign: its subject was {"5"}, which the simulator matched to
no detail ("That is up to you.") or to the wrong one ("What if seconds is -5?" revealed the format of durations
under an hour). Asking first that way scored as guessing (asked_before_coding 0, guessed_immediately -1). A
negative number now adds "negative" to the question's subject.

F3. Names checked with a pattern ending in ``$`` through ``re.match`` took a trailing newline: a component named
``"correctness\n"`` (a record key, a metric dimension CloudWatch refuses, a line break in every table), a tool
name, an execution attempt (an S3 key segment), ``init``'s names and a judge's placeholder path. They are
checked whole (``fullmatch``).
"""

from __future__ import annotations

import pytest

from rewardpipe.envs.ask_before_coding.similarity import find_loop
from tests.security.test_round_fourteen_reward import CHEROKEE, loop_penalty_without_bookkeeping
from tests.security.test_round_thirteen_reward import COMMIT, NEGATIVE, play

# --- F1: letters doubled, vowels dropped, letters in boxes ----------------------------------------------------


def _boxed(start: int):
    return lambda text: "".join(chr(start + ord(c.upper()) - 65) if c.isalpha() else c for c in text)


def _scrambled(text: str) -> str:
    """Each word's inner letters shuffled, its first and last kept (a reader still reads it)."""
    import random

    rng, out = random.Random(1), []
    for word in text.split():
        core = word.rstrip("?")
        if len(core) > 3:
            inner = list(core[1:-1])
            rng.shuffle(inner)
            core = core[0] + "".join(inner) + core[-1]
        out.append(core + word[len(core) :])
    return " ".join(out)


_TURNED = dict(
    zip(
        "abcdefghijklmnopqrstuvwxyz?",
        "\u0250q\u0254p\u01dd\u025f\u0183\u0265\u1d09\u027e\u029el\u026fuodb\u0279s\u0287n\u028c\u028dx\u028ez\u00bf",
        strict=True,
    )
)


DISGUISES = {
    "letters doubled": lambda t: "".join(c * 2 if c.isalpha() else c for c in t),
    "inner letters scrambled": _scrambled,
    "upside down": lambda t: "".join(_TURNED.get(c.lower(), c) for c in reversed(t)),
    "vowels tripled": lambda t: "".join(c * 3 if c in "aeiou" else c for c in t),
    "vowels dropped": lambda t: "".join(c for c in t if c not in "aeiou"),
    "negative circled capitals": _boxed(0x1F150),
    "negative squared capitals": _boxed(0x1F170),
    "regional indicators, spaced": lambda t: " ".join(_boxed(0x1F1E6)(t)),
    "Cherokee small letters": lambda t: "".join(CHEROKEE.get(c, c).lower() for c in t.upper()),
}


@pytest.mark.parametrize(
    "turns",
    [
        ["How do you pronounce /\u00f0\u0259/ here?", "Should the \u0259 sound count as a vowel?"],
        ["Is the list sorted?", "Is the list reversed?"],
    ],
)
def test_other_questions_with_turned_letters_or_the_same_letters_stay_different(turns):
    assert find_loop(turns) is None


def test_a_formula_with_symbols_like_turned_capitals_is_read_the_right_way_up():
    from rewardpipe.envs.ask_before_coding.similarity import upright

    assert upright("Is A \u2229 B \u22a5 C?") == "Is A \u2229 B \u22a5 C?"


@pytest.mark.parametrize("name", DISGUISES)
def test_a_question_repeated_with_its_letters_disguised_is_a_loop(name):
    again = DISGUISES[name](NEGATIVE)
    assert again != NEGATIVE
    assert find_loop([NEGATIVE, again]) is not None
    assert find_loop([NEGATIVE, again], new_details={0}, by_values=False) is not None


@pytest.mark.parametrize("name", DISGUISES)
def test_the_disguised_repeat_costs_the_loop_penalty_in_a_live_episode(name):
    components = play([NEGATIVE, DISGUISES[name](NEGATIVE), COMMIT])
    assert components["loop_penalty"] == -0.5
    assert components["asked_before_coding"] == 1.0


@pytest.mark.parametrize("name", DISGUISES)
def test_the_disguised_repeat_costs_the_loop_penalty_without_bookkeeping(name):
    assert loop_penalty_without_bookkeeping(DISGUISES[name](NEGATIVE)) == -0.5


@pytest.mark.parametrize(
    "turns",
    [
        ["What should happen for 100 seconds?", "What should happen for 10 seconds?"],
        ["Should the result be uppercase?", "Should the result be lowercase?"],
        ["Should a tab count as a space?", "Should a tub count as a spice?"],
        ["Is it ok?", "Is out ok?"],
    ],
)
def test_questions_that_differ_in_their_answers_stay_apart_where_the_reply_told_something_new(turns):
    """A turn whose reply revealed a new detail is a loop only as the same question again: consonants alike
    do not make it one (and numbers keep their digits)."""
    assert find_loop(turns, new_details={0, 1}, by_values=False) is None


# --- F2: a question about a negative example value ------------------------------------------------------------

NEGATIVE_EXAMPLES = [
    "What should format_duration(-5) return?",
    "Is -5 valid?",
    "What happens with `-1`?",
    "What if seconds is -5?",
    "What about \u22123.5 seconds?",
]


@pytest.mark.parametrize("question", NEGATIVE_EXAMPLES)
def test_a_question_about_a_negative_value_asks_about_negatives(question):
    from rewardpipe.envs.ask_before_coding.questions import best_spec_match, question_subject
    from tests.security.test_round_four_reward_gaming import DURATION

    subject = question_subject(question, DURATION.prompt, DURATION.entry_point)
    assert best_spec_match(subject.words, DURATION.spec, set()) == (3, False)  # "A negative duration ..."


@pytest.mark.parametrize("question", NEGATIVE_EXAMPLES)
def test_asking_about_a_negative_value_first_scores_as_asking_first(question):
    components = play([question, COMMIT])
    assert components["asked_before_coding"] == 1.0
    assert components["guessed_immediately"] == 0.0


@pytest.mark.parametrize(
    "question",
    ["What is 5-3 here?", "Are 2-5 hours written with two digits?", "What about UTC-5?", "Is n - 1 seconds ok?"],
)
def test_a_subtraction_or_a_range_is_no_negative_value(question):
    from rewardpipe.envs.ask_before_coding.questions import NEGATIVE, question_subject

    assert NEGATIVE not in question_subject(question).words


# --- F3: a trailing newline in a checked name ------------------------------------------------------------------


def test_a_name_with_a_trailing_newline_is_refused_everywhere_it_is_checked():
    from rewardpipe.aws.state import check_attempt
    from rewardpipe.components import ComponentDefinitionError, check_name
    from rewardpipe.envs.tool_call.tools import ToolDefinitionError, tool

    with pytest.raises(ComponentDefinitionError):
        check_name("correctness\n")
    assert check_name("correctness") == "correctness"
    with pytest.raises(ToolDefinitionError):
        tool(name="lookup\n")(lambda world, x: x)
    with pytest.raises(ValueError, match="attempt"):
        check_attempt("exec-1\n")
    assert check_attempt("exec-1") == "exec-1"
