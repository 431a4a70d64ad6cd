"""Round twenty-eight on the reward side, as the model would attack it (gsm8k, code extraction).

R1. gsm8k's strict format missed a last line carrying a decoded chat-template end token: ``#### 42<|im_end|>`` (or
``</s>``, ``<|eot_id|>``, DeepSeek's ``<｜end▁of▁sentence｜>``, alone on a line after the mark) had format 0.5, the
answer still read: a right answer in the asked format lost a quarter of its reward to how the trainer decoded it.
End tokens at the end of the text are passed over (not any tag: ``#### 42<br>`` is still loose).

R2. gsm8k read a hedge inside one box as its last number: ``\\boxed{41 or 42}``, ``\\boxed{41, 42}``,
``\\boxed{41 \\text{ or } 42}``, ``\\boxed{41 < x < 43}`` scored correct against 42 (and 43). A box holding two numbers
that stand alone (after its last ``=``: ``\\boxed{6 \\times 7 = 42}`` is 42; an index or a power is no number that
stands alone: ``\\boxed{x_1 = 42}``) answers nothing, and then neither does the text's last number. So is a mark's
number followed on its line by another after a connective (``#### 41 or 42`` was 41), and a number with a tolerance
(``#### 42±1``, ``#### 42 +/- 1`` were 42).

R3. A Python block written as a console session (``>>> def f(x):``, ``...     return x``, ``>>> f(2)`` then its
output ``4``) was joined into the program as written, so a right answer failed to compile (round twenty-seven left
it open). A block whose first line is a ``>>>`` prompt is the session's input: its prompts go, its output lines
are no code.

R4. An environment's observation had no size bound of the platform's (round twenty-six left it open): a user
environment returning millions of characters put them whole into the state, the policy's request, the record's
transcript and the state paused on AWS. A message an environment's hook adds is cut to ``max_observation_chars``
(a class attribute, 200,000 by default) with a note in it, and the record counts the cut messages.
"""

from __future__ import annotations

import pytest

from rewardpipe import Environment, Reward, TaskRow, component
from rewardpipe.environment import check_environment
from rewardpipe.episode import apply_env_turn, apply_policy_turn, run_episode, start_episode
from rewardpipe.models import Message
from rewardpipe.parsing import TurnKind, extract_code, parse_turn
from rewardpipe.rewards.gsm8k import GSM8K, extracted_answer
from tests.security.test_round_twentyone_reward import _gsm8k

# -- R1: an end token after the mark is no part of the model's answer ---------------------------------------------


@pytest.mark.parametrize(
    "end",
    [
        "<|im_end|>",
        "</s>",
        "<|eot_id|>",
        "<|endoftext|>",
        "<|end|>",
        "<end_of_turn>",
        "<eos>",
        "<\uff5cend\u2581of\u2581sentence\uff5c>",
        " <|im_end|>",
        "\n<|im_end|>",
        "<|eot_id|><|end_of_text|>\n",
    ],
)
def test_an_end_token_after_the_mark_keeps_the_strict_format(end):
    """Attack (on the right answer): nothing; the trainer decoded the end token with the text. ``#### 42`` then the
    token is the asked format (it was 0.5)."""
    assert _gsm8k(f"6 times 7.\n#### 42{end}", 42) == {"format": 1.0, "answer_correct": 1.0}


@pytest.mark.parametrize("tail", ["<br>", " dollars<|im_end|>", "<|im_end|>\nmore words", "<b>"])
def test_other_tags_or_words_after_the_mark_stay_loose(tail):
    assert _gsm8k(f"6 times 7.\n#### 42{tail}", 42)["format"] == 0.5


# -- R2: a hedge is no answer --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "response",
    [
        "\\boxed{41 or 42}",
        "\\boxed{42 or 41}",
        "\\boxed{41, 42}",
        "\\boxed{41 \\text{ or } 42}",
        "\\boxed{41 \\lor 42}",
        "\\boxed{41 \\mid 42}",
        "\\boxed{x = 41 \\text{ or } 42}",
        "\\boxed{41 < x < 43}",
        "\\boxed{41\\ \\text{to}\\ 43}",
        "#### 41 or 42",
        "#### 42 or 41",
        "#### 41 and 42",
        "#### 42 **or** 41",
        "#### 41 to 43",
        "#### 41;42",
        "#### 41 | 42",
        "#### 41 ~ 42",
        "#### 42 (or 41)",
        "#### 42±1",
        "#### 42 ± 1",
        "#### 42 +/- 1",
        "#### 42 ∓ 1",
        "The answer is 42 ± 1",
    ],
)
def test_a_hedged_answer_is_no_answer(response):
    """Attack: hedge the answer between two numbers inside one box, or on the mark's line (round twenty-seven left
    it open): whichever number was read scored correct against it. Rule: a marked answer is one number."""
    for reference in (41, 42, 43):
        assert _gsm8k(f"Let me think.\n{response}", reference) == {"format": 0.0, "answer_correct": 0.0}, reference


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("\\boxed{42}", 42),
        ("\\boxed{x = 42}", 42),
        ("\\boxed{x_1 = 42}", 42),
        ("\\boxed{6 \\times 7 = 42}", 42),
        ("\\boxed{42 \\text{ apples}}", 42),
        ("\\boxed{\\$1,234}", 1234),
        ("\\boxed{1{,}000}", 1000),
        ("\\boxed{90^\\circ}", 90),
        ("\\boxed{-42}", -42),
        ("\\boxed{x^2 = 42}", 42),
        ("#### 42 apples", 42),
        ("#### 42 dollars is what he kept", 42),  # ("... and 3 cents" is a hedge: round 34)
        ("#### 42 (6 x 7)", 42),
        ("#### 42\nor 41 at the start", 42),
        ("6 \\times 7 = 42", 42),
        ("He has 41 or 42", 42),
    ],
)
def test_single_marked_answers_are_still_read(response, expected):
    assert extracted_answer(response) == expected


@pytest.mark.slow
@pytest.mark.parametrize(
    ("prefix", "unit", "suffix"),
    [
        ("\\boxed{", "1 ", "}"),
        ("\\boxed{", "x_1 ", "= 42}"),
        ("\\boxed{", "= ", "42}"),
        ("#### 42", " or", " 41"),
        ("#### 42", "*", ""),
        ("#### 42 ", "*_ (", "x"),
        ("#### 42 or ", "*$ ", "x"),
        ("#### 42", "<|im_end|>", ""),
        ("#### 42", "<|a", "|>"),
        ("#### 42", " </s>", ""),
    ],
)
def test_reading_hedges_and_end_tokens_stays_linear(prefix, unit, suffix):
    """The box's numbers and the text's end tokens are looked at once each: round twenty-two's operation budget."""
    from tests.security.test_round_twentytwo_reward import test_reading_an_answer_stays_linear

    test_reading_an_answer_stays_linear(prefix, unit, suffix)


# -- R3: a console session's code is its input ---------------------------------------------------------------------

_SESSION = """Here it is:

```pycon
>>> def double(x):
...     return x * 2
...
>>> double(2)
4
>>> double(-1)
-2
```
"""


@pytest.mark.parametrize("tag", ["pycon", "python", ""])
def test_a_console_session_is_its_input(tag):
    """Attack (on the right answer): write the solution as an interactive session. Its prompts and output were
    joined into the program, which did not compile: the right answer failed every test."""
    turn = _SESSION.replace("```pycon", f"```{tag}")
    code = extract_code(turn)
    assert code == "def double(x):\n    return x * 2\n\ndouble(2)\ndouble(-1)\n"
    compile(code, "<session>", "exec")
    assert parse_turn(turn).kind is TurnKind.COMMIT


def test_a_session_indented_in_a_list_item_is_its_input():
    turn = "1. The function:\n\n   ```python\n   >>> x = 1\n   >>>\n   >>> print(x)\n   1\n   ```\n"
    assert extract_code(turn) == "x = 1\n\nprint(x)\n"


def test_an_ipython_session_is_its_input():
    turn = (
        "```ipython\nIn [1]: def double(x):\n   ...:     return x * 2\n   ...:\n\nIn [2]: double(2)\nOut[2]: 4\n```\n"
    )
    assert extract_code(turn) == "def double(x):\n    return x * 2\n\ndouble(2)\n"


def test_a_session_of_output_only_is_no_code():
    assert extract_code("```python\n>>>\n42\n```\n") is None
    assert parse_turn("```python\n>>>\n42\n```\n").kind is TurnKind.OTHER


@pytest.mark.parametrize(
    "body",
    [
        "x = 1\n>>> y = 2\n",  # a prompt after code: the block is a program (it does not compile: as written)
        "def f():\n    ...\n",
        "print('>>> not a prompt')\n",
    ],
)
def test_programs_are_still_taken_as_written(body):
    assert extract_code(f"```python\n{body}```\n") == body


def test_a_console_session_scores_through_code_correctness():
    """The single-turn code reward runs the session's input (the job carries it, not the transcript)."""
    from rewardpipe.rewards.base import Transcript
    from rewardpipe.rewards.code_correctness import job_for

    transcript = Transcript.from_messages(
        [Message(role="user", content="Write double."), Message(role="assistant", content=_SESSION)]
    )
    job = job_for(transcript, {"tests": "assert double(3) == 6", "entry_point": "double"})
    assert job is not None
    assert ">>>" not in job.code
    assert "\n4\n" not in job.code


def test_gsm8k_scores_a_clean_answer_as_before():
    messages = [Message(role="user", content="q"), Message(role="assistant", content="So\n#### 42")]
    assert GSM8K.score(messages, reference="42").components == {"format": 1.0, "answer_correct": 1.0}


# -- R4: an environment's observation is bounded -------------------------------------------------------------------


class _Echoes(Environment):
    """Answers the model's turn with an observation of ``size`` characters, then lets the model speak once more."""

    name = "echoes"
    version = "1"
    max_turns = 2
    reward = Reward("echoes", [component(range=(0, 1), role="outcome", name="said")(lambda messages: 1.0)])
    size = 10

    def on_policy_turn(self, state, task, text):
        return state.evolve(next_action="env")

    def respond(self, state, task, ctx):
        return state.append({"role": "user", "content": "x" * self.size}, next_action="policy")


class _Watches:
    """A policy recording the longest message it was shown."""

    def __init__(self) -> None:
        self.longest = 0

    def next_turn(self, state, task):
        self.longest = max([self.longest, *(len(message.content) for message in state.messages)])
        return "ok"


def _episode(env):
    policy = _Watches()
    record = run_episode(
        TaskRow(task_id="t", prompt="p"), policy, env, None, run_id="r", step=0, group_id="g", rollout_id="a"
    )
    return record, policy


def test_a_huge_observation_is_cut_and_the_record_says_so():
    """Attack (on the run): a user environment's respond() returns an observation of millions of characters (a
    tool dumping a file, a simulator echoing the model's padding back). It went whole into the state, the policy's
    request, the record's transcript and the paused state on AWS. It is cut to ``max_observation_chars``, with a
    note in the message, and the record counts the cut messages."""
    from rewardpipe.environment import MAX_OBSERVATION_CHARS

    env = _Echoes()
    env.size = 5 * MAX_OBSERVATION_CHARS
    record, policy = _episode(env)
    assert record.status == "scored"
    assert MAX_OBSERVATION_CHARS < policy.longest < MAX_OBSERVATION_CHARS + 300
    assert record.metrics["env_observations_cut"] == 1


def test_an_observation_within_the_bound_is_as_it_was():
    record, policy = _episode(_Echoes())
    assert policy.longest == 10
    assert "env_observations_cut" not in record.metrics


def test_the_bound_is_the_environments_to_set():
    env = _Echoes()
    env.max_observation_chars = 100
    env.size = 1000
    state = start_episode(TaskRow(task_id="t", prompt="p"), env=env, run_id="r", step=0, group_id="g", rollout_id="a")
    state = apply_policy_turn(state, "hi", env, None)
    state = apply_env_turn(state, None, env)
    shown = state.messages[-1].content
    assert shown.startswith("x" * 100) and not shown.startswith("x" * 101)
    assert "1,000 characters" in shown and "max_observation_chars" in shown


@pytest.mark.parametrize("limit", [0, -5, 2.5, True, "100"])
def test_a_bound_that_is_no_count_is_the_environments_error(limit):
    env = _Echoes()
    env.max_observation_chars = limit
    record, _ = _episode(env)
    assert record.status == "error" and record.error.kind == "simulator_error"
    assert "max_observation_chars" in record.error.message
    with pytest.raises(ValueError, match="max_observation_chars"):
        check_environment(type("Odd", (_Echoes,), {"max_observation_chars": limit}))


@pytest.mark.slow
@pytest.mark.parametrize("unit", ["...", ">>> \n", "   ...: x\n", "In [1]:", "\n"])
def test_reading_a_session_stays_linear(unit):
    """Each line of a block is looked at once for its prompt, however many prompts or dots it holds."""
    import rewardpipe.parsing as parsing
    from tests.security.test_round_four_scorer_text import _build, assert_linear
    from tests.security.text_cost import operations

    assert_linear(
        f"parse_turn(session of {unit!r} * n)",
        lambda n: operations(
            lambda: parsing.parse_turn.__wrapped__(_build("```python\n>>> x\n", unit, "\n```", n)), [parsing]
        ),
    )
