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

from rewardpipe.parsing import TurnKind, classify_turn, parse_turn
from tests.security.test_round_four_reward_gaming import DURATION

SOLUTION = DURATION.reference_solution
COMMIT = f"```python\n{SOLUTION}```"
ASKED = "Should negative durations raise an error"
NEGATIVE = ASKED + "?"


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
