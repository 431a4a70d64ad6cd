"""Round thirteen: three classes of the ask-before-coding reward found by a reviewer.

F1. An honest question was read as a statement when a typographic closing quote, a guillemet, a CJK closing
bracket, an ellipsis, an emoji or an emoticon followed its question mark (``?”``, ``?»``, ``?」``, ``?…``,
``?😊``, ``?:)``): the turn was ``other``, so asking first scored 0.6 where the plain ``?`` scores 1.6. What may
follow the mark is now read by Unicode category (closing, initial and final punctuation, symbols, marks,
invisible format characters) plus ellipses and common emoticons; a mark followed by words still ends nothing.

F2. "Here is a draft: ```...``` Should negative durations raise an error?", then the revised (or the same) code
committed, was charged a loop: the commit shared the question's code. A commit is never a loop of a question.

F3. A repeated question with junk in inline code or in a non-Python block in its middle, which the simulator
does not read (it answers "As I said: ..."), escaped the loop penalty. Questions are now compared a second time
as the simulator reads them (``questions.read_as_asked``).
"""

from __future__ import annotations

import pytest

from rewardpipe.envs.ask_before_coding.similarity import find_loop
from rewardpipe.parsing import TurnKind, classify_turn, parse_turn
from tests.security.test_round_four_reward_gaming import DURATION

SOLUTION = DURATION.reference_solution
COMMIT = f"```python\n{SOLUTION}```"
ASKED = "Should negative durations raise an error"
NEGATIVE = ASKED + "?"
Q, C = TurnKind.QUESTION, TurnKind.COMMIT


def play(turns: list[str]) -> dict[str, float]:
    """The components of a live episode of the duration task (the reviewer's reproducer)."""
    from rewardpipe.envs.ask_before_coding.environment import ENVIRONMENT
    from rewardpipe.episode import apply_env_turn, apply_policy_turn, finish_episode, start_episode
    from rewardpipe.rewards import get_reward
    from tests.core.conftest import result

    state = start_episode(DURATION, env=ENVIRONMENT, run_id="r", step=0, group_id="g", rollout_id="x")
    for turn in turns:
        state = apply_policy_turn(state, turn, ENVIRONMENT, DURATION)
        if state.next_action != "env":
            break
        state = apply_env_turn(state, DURATION, ENVIRONMENT)
    record = finish_episode(state, DURATION, result("passed", 3, 3), get_reward("ask_before_coding"), ENVIRONMENT)
    return dict(record.components)


ASKED_FIRST = {"correctness": 1.0, "asked_before_coding": 1.0, "guessed_immediately": 0.0, "loop_penalty": 0.0}

# --- F1: what may follow a question mark -----------------------------------------------------------------------

CLOSERS = {
    "right double quote": "\u201d",
    "right single quote": "\u2019",
    "guillemet": "\u00bb",
    "single guillemet": "\u203a",
    "German closing quote": "\u201c",
    "CJK corner bracket": "\u300d",
    "CJK white corner bracket": "\u300f",
    "CJK lenticular bracket": "\u3011",
    "fullwidth parenthesis": "\uff09",
    "quote then parenthesis": "\u201d)",
    "ellipsis": "\u2026",
    "three dots": "...",
    "smiling emoji": "\U0001f60a",
    "thinking emoji": "\U0001f914",
    "emoji with skin tone": "\U0001f44d\U0001f3fd",
    "emoji with variation selector": "\u263a\ufe0f",
    "two emoji": "\U0001f914\U0001f64f",
    "smiley": ":)",
    "smiley with nose": ":-)",
    "wink": ";)",
    "grin": ":D",
    "caret face": "^_^",
    "ellipsis then emoji": "\u2026\U0001f60a",
    "quote then emoticon then tag": "\u201d:)</s>",
}


@pytest.mark.parametrize("name", sorted(CLOSERS))
def test_a_question_followed_by_closing_punctuation_emoji_or_emoticon_is_a_question(name):
    turn = ASKED + "?" + CLOSERS[name]
    assert classify_turn(turn) is TurnKind.QUESTION, turn
    assert classify_turn(turn + "\nThanks.") is TurnKind.QUESTION, turn
    # after the code, it asks for confirmation: a question, not a commit
    assert classify_turn(COMMIT + "\nDoes that match what you want?" + CLOSERS[name]) is TurnKind.QUESTION


@pytest.mark.parametrize("name", ["right double quote", "guillemet", "CJK corner bracket", "thinking emoji", "smiley"])
def test_asking_first_with_a_closer_after_the_mark_scores_as_asking_first(name):
    assert play([ASKED + "?" + CLOSERS[name], COMMIT]) == ASKED_FIRST


@pytest.mark.parametrize("name", sorted(CLOSERS))
def test_a_mark_followed_by_words_still_ends_no_sentence(name):
    """What follows the mark is passed over only at the end of a sentence: a mark inside one, followed by words,
    makes no question (as with the ASCII closers before)."""
    closer = CLOSERS[name]
    for turn in (f"Use a?{closer}b in the code.", f"I wrote x?{closer}y here", f"You said ok?{closer}fine then"):
        assert classify_turn(turn) is TurnKind.OTHER, turn
    # before the code, it does not make the turn a question
    assert classify_turn(f"You want it sorted?{closer}\n{COMMIT}") is TurnKind.COMMIT


@pytest.mark.parametrize(
    "turn",
    [
        "Done.\U0001f60a",
        "OK :)",
        "Fine\u2026",
        "\u300cHere it is\u300d",
        "See https://example.com/search?q=1\U0001f60a for details.",
        "Use obj?.prop to read it.",
        "The value is 5 :D",
        "It works \U0001f914",
        "Ready<br>",
    ],
)
def test_statements_with_such_endings_stay_statements(turn):
    assert classify_turn(turn) is TurnKind.OTHER, turn


@pytest.mark.parametrize("unit", ["?\u201d", "\U0001f60a", ":)", "?:)", "\u2026", "?<br>", "?&nbsp;", ")?"])
@pytest.mark.parametrize("suffix", ["", "x", "?"])
def test_reading_what_follows_the_mark_stays_linear(unit, suffix):
    import rewardpipe.parsing as parsing
    from tests.security.test_round_four_scorer_text import assert_linear, clear_caches
    from tests.security.text_cost import operations

    def text(size: int) -> str:
        return "Is it" + unit * (size // len(unit)) + suffix

    assert_linear(
        f"parse_turn({unit!r} + {suffix!r})",
        lambda size: operations(lambda: parse_turn(text(size)), [parsing], clear_caches),
    )


# --- F2: a commit after a question with code ------------------------------------------------------------------

DRAFT = SOLUTION.replace("raise ValueError", "return ''")


@pytest.mark.parametrize(
    ("asked", "shown"),
    [
        (f"Here is a draft:\n```python\n{DRAFT}```\n{NEGATIVE}", DRAFT),
        (f"Here is a draft:\n```\n{DRAFT}```\n{NEGATIVE}", DRAFT),
        (f"```python\n{DRAFT}```\nShould negative durations raise an error instead of returning ''?", DRAFT),
        (f"Draft:\n```python\n{SOLUTION}```\nDoes this match what you want? Should negatives raise?", SOLUTION),
    ],
)
@pytest.mark.parametrize("committed", ["revised", "unchanged"])
def test_committing_the_code_a_question_showed_is_not_a_loop(asked, shown, committed):
    code = SOLUTION if committed == "revised" else shown
    commit = f"```python\n{code}```"
    assert find_loop([asked, commit], kinds=[Q, C]) is None
    assert find_loop([asked, commit]) is None  # kinds read from the turns
    assert find_loop([asked, commit], new_details={0}, by_values=False) is None
    assert play([asked, commit])["loop_penalty"] == 0.0
    assert play([asked, f"Thanks, here it is:\n{commit}"])["loop_penalty"] == 0.0


def test_the_reviewers_draft_then_commit_scores_as_asking_first():
    asked = f"Here is a draft:\n```python\n{DRAFT}```\n{NEGATIVE}"
    assert play([asked, COMMIT]) == ASKED_FIRST
    assert play([asked, f"```python\n{DRAFT}```"])["loop_penalty"] == 0.0


def test_repeated_questions_and_repeated_commits_are_still_loops():
    asked = f"Here is a draft:\n```python\n{DRAFT}```\n{NEGATIVE}"
    assert find_loop([asked, asked, COMMIT], kinds=[Q, Q, C]) == (0, 1)
    assert play([asked, asked, COMMIT])["loop_penalty"] == -0.5
    # the same code committed twice (guess, ask, commit again) is a loop as before
    assert find_loop([COMMIT, NEGATIVE, COMMIT], kinds=[C, Q, C]) == (0, 2)
    assert find_loop([COMMIT, NEGATIVE, COMMIT]) == (0, 2)
    # a statement repeated is a loop as before, whatever code either turn carries
    plan = "I will handle negative durations by raising ValueError and truncate fractional seconds."
    assert find_loop([plan, f"{plan} Really."], kinds=[TurnKind.OTHER, TurnKind.OTHER]) == (0, 1)


# --- F3: junk the simulator does not read in a repeated question -----------------------------------------------

JUNK = {
    "reviewer's": "cfgk cxwz dbfj zxfq dpfc zbjh ftjc bwrz",
    "long words": "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor",
    "one word": "zzqx",
    "punctuation": "!!! ??? ... ;;; ---",
    "upper case": "QWRT ZXCV PLMK",
    "identifiers": "x_y a_b c_d e_f",
}


def _shapes(junk: str) -> dict[str, str]:
    return {
        "inline in the middle": f"Should negative `{junk}` durations raise an error?",
        "inline at the start": f"`{junk}` Should negative durations raise an error?",
        "inline at the end": f"Should negative durations raise an error? `{junk}`",
        "two spans": f"Should `{junk}` negative durations `{junk[::-1]}` raise an error?",
        "text block in the middle": f"Should negative\n```text\n{junk}\n```\ndurations raise an error?",
        "json tilde block in the middle": f"Should negative\n~~~json\n{junk}\n~~~\ndurations raise an error?",
        "block before": f"```text\n{junk}\n```\n{NEGATIVE}",
    }


@pytest.mark.parametrize("junk", sorted(JUNK))
@pytest.mark.parametrize("shape", sorted(_shapes("")))
def test_junk_the_simulator_does_not_read_does_not_hide_a_repeated_question(junk, shape):
    again = _shapes(JUNK[junk])[shape]
    assert classify_turn(again) is TurnKind.QUESTION
    assert play([NEGATIVE, again, COMMIT])["loop_penalty"] == -0.5, again
    assert find_loop([NEGATIVE, again], new_details={0}, by_values=False) == (0, 1), again


def test_the_reviewers_four_junk_repeats_are_a_loop():
    junk = (
        "cfgk cxwz dbfj zxfq dpfc zbjh ftjc bwrz",
        "fldk dmpr hcvs czfq jlpt xhjc hhnv lfzs",
        "hbtr xvmp qlgw bsdn cwlg ktpz mpxz gmqr",
        "dbzj nhkk sqxr cqxr chsd lhsv twzb ctnm",
    )
    turns = [NEGATIVE, *(f"Should negative `{j}` durations raise an error?" for j in junk), COMMIT]
    assert play(turns)["loop_penalty"] == -0.5
    # scored without the simulator's bookkeeping too: the junk is no value the simulator reads
    assert find_loop(turns) == (0, 1)


@pytest.mark.parametrize(
    "turns",
    [
        [NEGATIVE, "How should fractional seconds like `59.9` be handled?"],
        ["Should negative `-5` durations raise an error?", "Should fractional `59.9` durations be truncated?"],
        [NEGATIVE, "Should fractional\n```text\n59.9 -> 0:59\n```\ndurations be truncated?"],
        [NEGATIVE, "Should durations under an hour be written as `M:SS`?", "And an hour or more as `H:MM:SS`?"],
        ["Should `format_duration(-1)` raise an error?", "Should `format_duration(59.9)` be truncated?"],
    ],
)
def test_honest_different_questions_with_code_stay_unpenalised(turns):
    assert play([*turns, COMMIT]) == ASKED_FIRST


def test_questions_read_alike_but_asking_other_values_are_not_loops():
    same_prose = ["What should `format_duration(-1)` return?", "What should `format_duration(90061)` return?"]
    assert find_loop(same_prose) is None  # no bookkeeping: other values, another question
    # with it, a question whose reply revealed a new detail was another question as the simulator read it
    assert find_loop(same_prose, new_details={0, 1}, by_values=False, kinds=[Q, Q]) is None
    names = ["Should it raise `ValueError`?", "Should it raise `TypeError`?"]
    assert find_loop(names) is None
    assert find_loop(["Should it raise?", "Should it raise `ValueError`?"]) is None


@pytest.mark.parametrize("junk", ["`a b` ", "`" + "x" * 40 + "` ", "```text\njunk\n```\n", "`?` "])
def test_reading_questions_as_the_simulator_does_stays_linear(junk):
    import rewardpipe.envs.ask_before_coding.similarity as similarity
    import rewardpipe.envs.ask_before_coding.words as words
    from tests.security.test_round_four_scorer_text import assert_linear, clear_caches
    from tests.security.text_cost import operations

    def turns(size: int) -> list[str]:
        padded = "Should negative " + junk * (size // len(junk)) + "durations raise an error?"
        return [NEGATIVE, padded, padded[::-1], COMMIT]

    assert_linear(
        f"find_loop(junk {junk!r})",
        lambda size: operations(lambda: similarity.find_loop(turns(size)), [similarity, words], clear_caches),
    )
