"""Issue 19 item 7: no line of model text makes the scorer hang. Every parser and comparison of model text is
linear (or bounded) in its length.

Measured as an **operation count**, never a clock (:mod:`tests.security.text_cost`: Python instructions plus
regular-expression steps counted on an interpreter of ``re``'s own parse tree, checked against the real
engine on every call). Each target is run on the same adversarial text at three lengths, n, 2n and 4n
(a prefix, a unit repeated to the length, a suffix, all drawn by hypothesis from the characters parsers
trip on, or seeded random text). Two bounds must hold:

* the second difference: ``ops(4n) - ops(2n) <= 3 * (ops(2n) - ops(n)) + slack``. Fixed costs cancel out;
  a linear cost gives 2x, ``n log n`` a little more, a quadratic one 4x, so a quadratic target fails
  however large its constant part;
* an absolute budget of operations per character at 4n: a target that is slow per character fails too.

The same count on an idle and on a loaded machine: nothing here can flake with load.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import rewardpipe.envs.ask_before_coding.questions as questions
import rewardpipe.envs.ask_before_coding.replies as replies
import rewardpipe.envs.ask_before_coding.reward as abc_reward
import rewardpipe.envs.ask_before_coding.similarity as similarity
import rewardpipe.envs.ask_before_coding.simulator as simulator
import rewardpipe.envs.ask_before_coding.words as words
import rewardpipe.envs.tool_call.calls as tool_calls
import rewardpipe.envs.wordle.game as wordle_game
import rewardpipe.monitoring.examples as monitor_examples
import rewardpipe.monitoring.html as monitor_html
import rewardpipe.parsing as parsing
import rewardpipe.rewards.base as reward_base
import rewardpipe.rewards.code_correctness as code_correctness
import rewardpipe.rewards.gsm8k as gsm8k
import rewardpipe.safe_text as safe_text
import rewardpipe.tagged as tagged
from rewardpipe.envs.ask_before_coding.environment import ENVIRONMENT as ENV
from rewardpipe.episode import apply_policy_turn, start_episode
from rewardpipe.models import Message, load_tasks
from tests.core.conftest import result
from tests.security.text_cost import operations

pytestmark = pytest.mark.slow  # about half a minute of traced runs

TASKS = load_tasks(Path(__file__).resolve().parents[2] / "rewardpipe" / "data" / "tasks.jsonl")
TASK = TASKS[0]  # format_duration: four hidden details, ValueError, H:MM:SS

WATCHED = [
    parsing,
    words,
    questions,
    replies,
    similarity,
    abc_reward,
    simulator,
    reward_base,
    gsm8k,
    code_correctness,
    monitor_examples,
    monitor_html,
    safe_text,
    tagged,
    wordle_game,
    tool_calls,
]


def clear_caches() -> None:
    parsing.parse_turn.cache_clear()
    words._stem_cached.cache_clear()
    replies.detail_keys.cache_clear()
    questions._item_words.cache_clear()


def _conversation(text: str) -> list[Message]:
    """The model's text as a question, the user's reply, a repeat, and a commit whose prose carries it."""
    return [
        Message(role="user", content=TASK.prompt),
        Message(role="assistant", content=text + "?"),
        Message(role="user", content=text),
        Message(role="assistant", content=text[::-1] + "?"),
        Message(role="user", content=TASK.spec[0]),
        Message(role="assistant", content=text + "\n```python\n" + text + "\n```\n"),
    ]


def _rule_reply(text: str) -> object:
    state = apply_policy_turn(
        start_episode(TASK, env=ENV, run_id="r", step=0, group_id="g", rollout_id="r"), text, ENV, TASK
    )
    return simulator.RuleBasedSimulator().respond(state, TASK)


# name -> call on one text; every parser and comparison of model text in the package.
TARGETS = {
    "parse_turn": lambda t: parsing.parse_turn(t),
    "question_subject": lambda t: questions.question_subject(t, TASK.prompt, TASK.entry_point),
    "concepts": lambda t: words.concepts(t),
    "reply_informs": lambda t: replies.reply_informs(t, "Should negative durations raise?", [TASK.prompt, t]),
    "stated_details": lambda t: replies.stated_details(t, TASK.spec, TASK.prompt),
    "vet_llm_reply": lambda t: replies.vet_llm_reply(
        t, t + "?", TASK.spec, prompt=TASK.prompt, entry_point=TASK.entry_point
    ),
    "rule_based_simulator": _rule_reply,
    "is_non_answer_and_defers": lambda t: (questions.is_non_answer(t), replies.defers(t)),
    "replay": lambda t: ENV.replay(TASK, _conversation(t)),
    "ask_before_coding_reward": lambda t: abc_reward.ASK_BEFORE_CODING.score(
        _conversation(t), result("passed", 1, 1), state=ENV.replay(TASK, _conversation(t))
    ),
    "ask_before_coding_without_bookkeeping": lambda t: abc_reward.ASK_BEFORE_CODING.score(
        _conversation(t), result("failed", 0, 1)
    ),
    "gsm8k": lambda t: gsm8k.GSM8K.score(
        [Message(role="user", content="q"), Message(role="assistant", content=t)], reference="42"
    ),
    "code_correctness": lambda t: code_correctness.CODE_CORRECTNESS.score(
        [Message(role="user", content="q"), Message(role="assistant", content=t)], result("passed", 1, 1)
    ),
    "monitor_text": lambda t: (monitor_examples.clean(t), monitor_html._t(t), safe_text.printable(t)),
    "tagged_spans": lambda t: (tagged.tagged_spans(t, "guess"), tagged.tagged_spans(t, "tool_call")),
    "wordle_guess": lambda t: wordle_game.parse_guess(t),
    "tool_call_turn": lambda t: (tool_calls.parse_turn(t, None, 0), tool_calls.final_answer(t)),
}
# Two texts compared with each other.
PAIR_TARGETS = {
    "turn_similarity": lambda a, b: similarity.turn_similarity(a, b),
    "loop_penalty": lambda a, b: similarity.find_loop([a, b, a[::-1], b + a[: len(a) // 3]]),
}

# What parsers trip on: fences and their characters, whitespace runs, question marks, sentence ends,
# inline code, '####' answers and numbers, emphasis, line and paragraph separators, look-alike letters,
# words the question and reply rules read.
PIECES = [
    "`",
    "```",
    "~",
    "~~~",
    " ",
    "  ",
    "\t",
    "\n",
    "\r",
    "?",
    "？",
    "⁇",
    ".",
    "!",
    "#",
    "####",
    "1",
    "9,",
    ".5",
    "-",
    "$",
    "*",
    "_",
    "\\boxed{",
    "}",
    "(",
    ")",
    '"',
    ":",
    "a",
    "Z",
    "é",
    "о",
    "\u2028",
    "\u200b",
    "format_duration",
    "negative",
    "seconds",
    "yes",
    "up to you",
    "ValueError",
    "H:MM:SS",
    "a.b",
    "e-",
    "is ",
    "<guess>",
    "</guess>",
    "<GUESS>",
    "<tool_call>",
    "</tool_call>",
    "<answer>",
    "</answer>",
    "<",
    ">",
    "/",
    "{",
    "[",
    '{"name": "x", "arguments": {',
    "crane",
]
piece_runs = st.lists(st.sampled_from(PIECES), min_size=1, max_size=6).map("".join)
edges = st.lists(st.sampled_from(PIECES), max_size=3).map("".join)

N = 500
#: Operations per character of model text at most, at 4n. The costliest target, the whole ask-before-coding reward
#: scoring a conversation that holds the text five times without the environment's bookkeeping, spent about 1,900
#: on seeded random text at round twenty-eight's end and about 2,000 after round thirty's rules for questions that
#: ask nothing (up to 2,100 on hypothesis's inputs); the bound keeps a fifth above that. Growth with length is
#: the second-difference test's to catch, whatever the constant.
BUDGET_PER_CHAR = 2500
#: Second-difference slack for small absolute wobble (a dict resizing, a cache that fills).
SLACK = 4000


def _build(prefix: str, unit: str, suffix: str, n: int) -> str:
    return prefix + (unit * (n // len(unit) + 1))[:n] + suffix


def _random_text(seed: int, n: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choices("abcdefgh ?.`\n", k=4 * N))[:n]


def assert_within_budget(name: str, operations_at_4n: int) -> None:
    assert operations_at_4n <= BUDGET_PER_CHAR * 4 * N, f"{name}: {operations_at_4n} operations for {4 * N} characters"


def assert_linear(name: str, at, n: int = N, unit: str = "characters") -> None:
    """``at(size)`` runs the target on the input of that size and returns its operation count."""
    small, medium, large = at(n), at(2 * n), at(4 * n)
    first, second = medium - small, large - medium
    assert second <= 3 * max(first, 0) + SLACK, (
        f"{name}: {small} / {medium} / {large} operations at {n} / {2 * n} / {4 * n} {unit}: the cost grows "
        f"faster than linearly ({second} more for the last {2 * n} {unit}, {first} for the {n} before)"
    )
    if n == N:
        assert_within_budget(name, large)


# Few drawn examples per target (each is three traced runs), beside the explicit ones: the suite stays fast.
SETTINGS = settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


@pytest.mark.parametrize("name", sorted(TARGETS))
@SETTINGS
@given(prefix=edges, unit=piece_runs, suffix=edges)
@example(prefix="```", unit=" ", suffix="`")  # the code-fence regex's quadratic backtracking (round three)
@example(prefix="~~~", unit="~", suffix="`")
@example(prefix="", unit="`", suffix="\n" + "x\n" * 50)  # a fence as long as the text
@example(prefix="", unit="?)", suffix="x")
@example(prefix="#### ", unit="1,", suffix="x")
@example(prefix="", unit="<guess>", suffix="</guess>")  # thousands of opening tags, one closing
@example(prefix="<tool_call>", unit="[", suffix="</tool_call>")  # JSON nested as deep as the text
def test_every_parser_of_model_text_is_linear(name, prefix, unit, suffix):
    target = TARGETS[name]
    assert_linear(name, lambda n: operations(lambda: target(_build(prefix, unit, suffix, n)), WATCHED, clear_caches))


@pytest.mark.parametrize("name", sorted(TARGETS))
@SETTINGS
@given(seed=st.integers(0, 2**16))
def test_every_parser_stays_within_its_budget_on_random_text(name, seed):
    """Random text: the budget only. Comparing two texts costs more as chance matches between them become
    common with length, up to a fixed number per character (similarity.MAX_CANDIDATES): linear, but not yet
    at the lengths a traced run can afford, so the growth test is for the repeating inputs above."""
    assert_within_budget(name, operations(lambda: TARGETS[name](_random_text(seed, 4 * N)), WATCHED, clear_caches))


@pytest.mark.parametrize("name", sorted(PAIR_TARGETS))
@SETTINGS
@given(first=piece_runs, second=piece_runs, shared=st.integers(0, 3))
@example(first="a", second="a", shared=3)  # one run repeated in both: every anchor occurs everywhere
@example(first="ab", second="ba", shared=0)
@example(first="format_duration ", second="format_duration? ", shared=2)
def test_comparing_two_turns_is_linear(name, first, second, shared):
    target = PAIR_TARGETS[name]

    def at(n: int) -> int:
        a = _build("", first, "", n)
        b = a[: shared * n // 4] + _build("", second, "", n - shared * n // 4)  # a shared opening, then its own
        return operations(lambda: target(a, b), WATCHED, clear_caches)

    assert_linear(name, at)


@pytest.mark.parametrize("name", sorted(PAIR_TARGETS))
@SETTINGS
@given(seed=st.integers(0, 2**16), near=st.booleans())
def test_comparing_two_random_turns_stays_within_its_budget(name, seed, near):
    a = _random_text(seed, 4 * N)
    b = _random_text(seed + 1, 4 * N) if not near else a[: 2 * N] + _random_text(seed + 1, 2 * N)
    assert_within_budget(name, operations(lambda: PAIR_TARGETS[name](a, b), WATCHED, clear_caches))


def test_the_count_sees_the_quadratic_cases_this_issue_reported():
    """The measure itself: the code-fence regex and difflib's matcher of round three fail these bounds."""
    import re
    import types
    from difflib import SequenceMatcher

    old = types.ModuleType("old_parsing")
    old.FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$")
    # (at a quarter of the lengths above: quadratic costs are already plain there, and tracing them is slow)
    with pytest.raises(AssertionError, match="faster than linearly"):
        assert_linear("old fence", lambda n: operations(lambda: old.FENCE.match("```" + " " * n + "`"), [old]), N // 4)
    with pytest.raises(AssertionError, match="faster than linearly"):
        assert_linear(
            "difflib",
            lambda n: operations(  # round three's loop check on two random turns
                lambda: SequenceMatcher(None, _random_text(1, n), _random_text(2, n), autojunk=False).ratio(), []
            ),
            N // 4,
        )


# --- many turns: the cost is linear in the number of turns too ------------------------------------------------

#: Words the long conversations are made of: real words (the reply rules stem and compare them), drawn at
#: random so no two turns are alike (a loop would end the loop check early) and every reply says something new.
_VOCABULARY = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
    "amber",
    "basil",
    "cedar",
    "dune",
    "ember",
    "fjord",
    "grove",
    "heron",
    "iris",
    "jasper",
    "kelp",
    "larch",
    "maple",
    "nettle",
    "olive",
    "pine",
    "quartz",
    "reed",
    "sage",
    "thyme",
    "umber",
    "violet",
    "willow",
    "yarrow",
    "zinnia",
]


def _many_turns(turns: int, seed: int = 0) -> list[Message]:
    """The request, then ``turns`` question/reply pairs of random words, then a commit."""
    rng = random.Random(seed)
    messages = [Message(role="user", content=TASK.prompt)]
    for _ in range(turns):
        messages.append(Message(role="assistant", content="Should " + " ".join(rng.choices(_VOCABULARY, k=6)) + "?"))
        messages.append(Message(role="user", content=" ".join(rng.choices(_VOCABULARY, k=6)).capitalize() + "."))
    return [*messages, Message(role="assistant", content="```python\n" + TASK.reference_solution + "\n```")]


# name -> call on a conversation: everything that reads a whole recorded conversation turn by turn.
CONVERSATION_TARGETS = {
    "reveals_in": lambda m: replies.reveals_in(m, TASK.spec, TASK.entry_point),
    "replay": lambda m: ENV.replay(TASK, m),
    "ask_before_coding_without_bookkeeping": lambda m: abc_reward.ASK_BEFORE_CODING.score(m, result("passed", 1, 1)),
    "loop_penalty": lambda m: similarity.find_loop([x.content for x in m if x.role == "assistant"]),
}
TURNS = 24  # (before each reply was judged incrementally, reveals_in and replay grew 3.6x from 48 to 96)


@pytest.mark.parametrize("name", sorted(CONVERSATION_TARGETS))
@pytest.mark.parametrize("seed", [0])
def test_reading_a_conversation_is_linear_in_its_number_of_turns(name, seed):
    """A recorded conversation of n, 2n and 4n short turns: judging each reply against everything said before
    it, or each turn against the earlier ones, must not redo the earlier turns' work for every turn."""
    target = CONVERSATION_TARGETS[name]
    assert similarity.find_loop([m.content for m in _many_turns(4 * TURNS, seed) if m.role == "assistant"]) is None
    assert_linear(
        name, lambda n: operations(lambda: target(_many_turns(n, seed)), WATCHED, clear_caches), TURNS, "turns"
    )
