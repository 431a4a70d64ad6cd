"""Round five against issue 19's reward and text classes: new variants of each class, none of them a copy of
round four's cases.

* **Loops in disguise** (item 8): the same question again with a zero-width space or soft hyphen inside every
  word, in fullwidth or mathematical letters, with an accent on every letter, with Cyrillic look-alikes, or
  spelt out letter by letter. A reader (and an LLM user) sees the same question; the loop rule saw nothing in
  common.
* **Leaks the vetting cannot read** (item 8): an LLM user asked to answer in fullwidth letters, with invisible
  characters, letter by letter or in another script handed over every hidden detail in one reply: the
  concept reader dropped the words it could not read, so nothing in the reply counted against it.
"""

from __future__ import annotations

import pytest

from rewardpipe.envs.ask_before_coding.replies import vet_llm_reply
from rewardpipe.envs.ask_before_coding.similarity import find_loop, repeats
from rewardpipe.envs.ask_before_coding.words import concepts
from tests.core.conftest import StubChatServer
from tests.core.test_empty_questions import _episode_turns
from tests.security.test_round_four_reward_gaming import (
    DURATION,
    PARAPHRASES,
    QUESTION,
    REAL_QUESTIONS,
    _llm_reply,
    _one_detail_at_most,
    recorded,
    three_paths,
)


def _fullwidth(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def _bold_math(text: str) -> str:  # MATHEMATICAL BOLD letters
    return "".join(
        chr(0x1D400 + ord(c) - 65) if "A" <= c <= "Z" else chr(0x1D41A + ord(c) - 97) if "a" <= c <= "z" else c
        for c in text
    )


# The same words, drawn so that a person and an LLM read them as before.
DISGUISES = {
    "zero-width space in every word": lambda t: "\u200b".join(t),
    "soft hyphen in every word": lambda t: "\u00ad".join(t),
    "word joiner": lambda t: "\u2060".join(t),
    "fullwidth": _fullwidth,
    "mathematical bold": _bold_math,
    "accent on every letter": lambda t: "".join(c + "\u0301" if c.isalpha() else c for c in t),
    "Cyrillic look-alikes": lambda t: t.replace("a", "\u0430").replace("e", "\u0435").replace("o", "\u043e"),
    "Greek look-alikes": lambda t: t.replace("o", "\u03bf").replace("i", "\u03b9").replace("T", "\u03a4"),
    "letters spaced out": lambda t: " ".join(t),
    "letters dotted": lambda t: " ".join(".".join(word) for word in t.split()),
}


@pytest.mark.parametrize("disguise", sorted(DISGUISES))
def test_a_repeat_in_disguise_is_a_loop(disguise):
    assert_a_repeat_in_disguise_is_a_loop(DISGUISES[disguise])


def assert_a_repeat_in_disguise_is_a_loop(disguise) -> None:
    """Every real question, asked again in ``disguise`` (a function of the text), is a loop on every path."""
    for question in REAL_QUESTIONS:
        other = next(q for q in REAL_QUESTIONS if q != question)
        again = disguise(question)
        assert repeats(question, again), again
        for turns in ([question, again], [question, other, again], [again, other, question, other]):
            assert find_loop(turns) is not None, turns
        record = _episode_turns(DURATION, [question, other, again], DURATION.reference_solution)
        assert record.components["loop_penalty"] == -0.5, again
        messages = recorded(DURATION, [(t, "Okay.") for t in (question, other, again)], DURATION.reference_solution)
        assert set(three_paths(DURATION, messages, "loop_penalty")) == {-0.5}


def test_different_questions_stay_different_in_any_disguise():
    for disguise in DISGUISES.values():
        for question in REAL_QUESTIONS:
            for other in REAL_QUESTIONS:
                if other != question:
                    assert not repeats(question, disguise(other)), (question, disguise(other))
    assert find_loop(["?", "??"]) is None  # no letters at all: judged on the text, as before


def test_fold_reads_disguised_words_as_the_plain_ones():
    from rewardpipe.envs.ask_before_coding.words import fold, unread_letters

    plain = "Negative durations raise ValueError; fractional seconds are truncated."
    for name, disguise in DISGUISES.items():
        if "letters" in name or "zero-width space" in name:
            continue  # spelt out: not words any more (unread_letters counts them)
        assert concepts(disguise(plain)) == concepts(plain), name
        assert unread_letters(disguise(plain)) == 0, name
    assert fold(plain) is plain
    for name in ("letters spaced out", "letters dotted", "zero-width space in every word"):
        assert unread_letters(DISGUISES[name](plain)) > 20, name
    assert fold("More\u200binfo?") == "More info?"
    assert unread_letters("负数时长抛出值错误") == 9
    assert unread_letters("Yes, use the 24-hour clock, as Zoë said; a 1 x 2 grid is fine. I agree.") <= 1


@pytest.mark.parametrize(
    "reply",
    [
        "Yes, e.g. if n is 0 return an empty list, i.e. [].",
        "Temperatures are in °C and °F, e.g. 20 °C.",
        "Use the Straße name as is; Łódź and Ørsted too.",
        "If x is 0 or y is 0, return 0.",
    ],
)
def test_ordinary_replies_are_read_not_refused(reply):
    """Abbreviations, variable names and Latin letters without a decomposition are words a rule reads: a reply
    made of them is vetted, not replaced as unreadable (only spelt-out runs and other scripts are)."""
    from rewardpipe.envs.ask_before_coding.replies import MAX_UNREAD_LETTERS
    from rewardpipe.envs.ask_before_coding.words import unread_letters

    assert unread_letters(reply) <= MAX_UNREAD_LETTERS, reply


LEAK = " ".join(PARAPHRASES)  # every hidden detail of format_duration, in words of the LLM's own
UNREADABLE_LEAKS = {
    **{name: disguise(LEAK) for name, disguise in DISGUISES.items()},
    "another script": "时长达到一小时时显示为时:分:秒，小时不补零。不到一小时只写分和两位秒。小数秒直接舍去，"
    "不进位。负数是非法输入，要抛出值错误。",
    "letters hyphenated": " ".join("-".join(word) for word in LEAK.split()),
}


@pytest.mark.parametrize("name", sorted(UNREADABLE_LEAKS))
def test_an_llm_users_leak_the_rules_cannot_read_does_not_stand(name):
    leak = UNREADABLE_LEAKS[name]
    text, _ = vet_llm_reply(leak, QUESTION, DURATION.spec, prompt=DURATION.prompt, entry_point=DURATION.entry_point)
    assert text != leak, name
    server = StubChatServer()
    try:
        for revealed in ((), (3,), (0, 3)):
            reply = _llm_reply(server, QUESTION, leak, revealed)
            assert reply.text != leak, name
            _one_detail_at_most(reply, leak, revealed)
    finally:
        server.close()


def test_a_one_detail_answer_in_disguise_is_vetted_as_the_plain_one():
    """Folding reads a disguised answer as the plain answer it is: the same verdict, the same detail booked."""
    for answer in (PARAPHRASES[3], "Yes, negative durations raise ValueError.", "Yes."):
        plain_text, plain_detail = vet_llm_reply(
            answer, QUESTION, DURATION.spec, prompt=DURATION.prompt, entry_point=DURATION.entry_point
        )
        for name in ("fullwidth", "accent on every letter", "soft hyphen in every word", "Cyrillic look-alikes"):
            disguised = DISGUISES[name](answer)
            text, detail = vet_llm_reply(
                disguised, QUESTION, DURATION.spec, prompt=DURATION.prompt, entry_point=DURATION.entry_point
            )
            assert detail == plain_detail, (name, answer)
            assert text == (disguised if plain_text == answer else plain_text), (name, answer)


# --- item 5: test shapes under which correct code fails silently, each a doctor finding -------------------------

# (tests, correct code). Each passes in one process; under split trust the correct code fails (`failed`, not
# the loud `error` the docs promise for shapes split trust cannot run): the tests set state of their own
# process (a patch, a seed, the environment, standard input), or a test never counts as passed (skipped, an
# expected failure). The runtime half (a loud error) lives in the excluded runtime files; `doctor` names them.
_NOW = "import time\ndef now():\n    return time.time()\n"
SILENT_ZERO_SHAPES = {
    "mock.patch of a module the model uses": (
        "with mock.patch('time.time', return_value=5.0):\n    self.assertEqual(now(), 5.0)",
        _NOW,
    ),
    "patch.object": ("with mock.patch.object(time, 'time', return_value=5.0):\n    self.assertEqual(now(), 5.0)", _NOW),
    "builtins.input": (
        "with mock.patch('builtins.input', return_value='3'):\n    self.assertEqual(now(), 3)",
        "def now():\n    return int(input())\n",
    ),
    "sys.stdin": ("sys.stdin = io.StringIO('3')\nself.assertEqual(now(), 3)", "def now():\n    return int(input())\n"),
    # (random.seed: works across the boundary since round thirty-three, test_round_thirtythree_sandbox.py)
    "os.environ": (
        "os.environ['UNIT'] = 'ms'\nself.assertEqual(now(), 'ms')",
        "import os\ndef now():\n    return os.environ.get('UNIT', 's')\n",
    ),
    "patch.dict of os.environ": (
        "with mock.patch.dict(os.environ, {'UNIT': 'ms'}):\n    self.assertEqual(now(), 'ms')",
        "import os\ndef now():\n    return os.environ.get('UNIT', 's')\n",
    ),
}


def _silent_tests(body: str) -> str:
    import textwrap

    return (
        "import io, os, random, sys, time, unittest\nfrom unittest import mock\n\nclass T(unittest.TestCase):\n"
        "    def test_it(self):\n" + textwrap.indent(body, " " * 8) + "\n"
    )


def _findings(tests: str) -> list[str]:
    from rewardpipe.doctor import weak_test_shapes
    from rewardpipe.models import Task

    task = Task(task_id="t", prompt="p", spec=["s"], entry_point="now", tests=tests, reference_solution="x = 1\n")
    return weak_test_shapes(task)


@pytest.fixture(scope="module")
def executor():
    from rewardpipe.execution.sandbox import make_executor

    executor = make_executor(workers=2)
    yield executor
    executor.close()


@pytest.mark.parametrize("shape", sorted(SILENT_ZERO_SHAPES))
def test_tests_setting_their_own_process_state_are_a_doctor_finding(executor, shape):
    from rewardpipe.execution import ExecutionJob, ExecutionStatus

    body, right = SILENT_ZERO_SHAPES[shape]
    tests = _silent_tests(body)
    if not right.startswith("import os"):  # (in-process screening rejects the module os)
        inprocess = executor.run(ExecutionJob(code=right, tests=tests, entry_point="now", trust_mode="inprocess"))
        assert inprocess.status is ExecutionStatus.PASSED, (shape, inprocess.reason)  # the code is correct
    split = executor.run(ExecutionJob(code=right, tests=tests, entry_point="now"))
    assert split.status is not ExecutionStatus.PASSED, shape  # and split trust cannot see what the tests set
    found = _findings(tests)
    assert found and all("another process" in item for item in found), (shape, found)
    assert "tests line 6" in found[0], found


@pytest.mark.parametrize(
    "body",
    [
        "@unittest.expectedFailure\ndef test_known(self):\n    self.assertEqual(now(), 2)",
        "@unittest.skip('later')\ndef test_later(self):\n    self.assertEqual(now(), 1)",
        "@unittest.skipIf(sys.platform == 'linux', 'x')\ndef test_later(self):\n    self.assertEqual(now(), 1)",
        "def test_skipped(self):\n    self.skipTest('not yet')",
    ],
    ids=["expectedFailure", "skip", "skipIf", "skipTest"],
)
def test_a_test_that_never_counts_as_passed_is_a_doctor_finding(executor, body):
    import textwrap

    from rewardpipe.execution import ExecutionJob, ExecutionStatus

    tests = (
        "import sys, unittest\n\nclass T(unittest.TestCase):\n    def test_one(self):\n"
        "        self.assertEqual(now(), 1)\n" + textwrap.indent(body, "    ") + "\n"
    )
    result = executor.run(ExecutionJob(code="def now():\n    return 1\n", tests=tests, entry_point="now"))
    assert result.status is not ExecutionStatus.PASSED  # correct code: plain unittest would say OK
    found = _findings(tests)
    assert len(found) == 1 and "never counts as passed" in found[0], found


def test_shapes_that_work_across_the_boundary_are_not_flagged():
    fine = _silent_tests(
        "with mock.patch('sys.stdout', new_callable=io.StringIO) as out:\n    now()\n"
        "with mock.patch.object(sys, 'stderr', new_callable=io.StringIO):\n    now()\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n    now()\n"
        "self.assertEqual(now(), 1)"
    )
    assert _findings(fine) == []
    assert _findings(_silent_tests("os.chdir('/')\nself.assertEqual(now(), 1)")) != []


# --- item 8: a genuine question about a value or a name written as inline code ---------------------------------

INLINE_QUESTIONS = [
    "What should `format_duration(-5)` return?",
    "What does `format_duration(-0.5)` give?",
    "And `format_duration(-1)`?",
    "`ValueError` or `TypeError`?",
]


@pytest.mark.parametrize("question", INLINE_QUESTIONS)
def test_a_question_about_a_value_in_inline_code_asks_something(question):
    """Inline code was dropped whole (so a span cannot carry a dictionary), which left "What should
    `format_duration(-5)` return?" asking nothing: a genuine question scored as a guess (-0.4)."""
    from rewardpipe.envs.ask_before_coding.questions import question_subject
    from tests.core.conftest import result

    assert not question_subject(question, DURATION.prompt, DURATION.entry_point).asks_nothing, question
    answer = "A negative duration is invalid: it raises ValueError."
    messages = recorded(DURATION, [(question, answer)], DURATION.reference_solution)
    assert set(three_paths(DURATION, messages, "guessed_immediately")) == {0.0}, question
    assert set(three_paths(DURATION, messages, "asked_before_coding")) == {1.0}, question
    from tests.security.test_round_four_reward_gaming import REWARD

    assert REWARD.score(messages, result("passed", 3, 3)).components["asked_before_coding"] == 1.0


@pytest.mark.parametrize(
    "question",
    ["`format_duration`?", "Can you explain `format_duration`?", "`negative hours minutes seconds truncated`?"],
)
def test_inline_code_of_plain_words_or_the_functions_name_still_asks_nothing(question):
    from rewardpipe.envs.ask_before_coding.questions import question_subject

    assert question_subject(question, DURATION.prompt, DURATION.entry_point).asks_nothing, question


# --- item 3's other side: a test whose assertions never run passes every rollout ------------------------------

NEVER_RUN = {
    "async test in a plain TestCase": "import unittest\nclass T(unittest.TestCase):\n"
    "    async def test_a(self):\n        self.assertEqual(add(1, 2), 3)\n",
    "test containing yield": "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n"
    "        for a, b, want in ((1, 2, 3),):\n            yield self.assertEqual(add(a, b), want)\n",
}


@pytest.mark.parametrize("shape", sorted(NEVER_RUN))
def test_a_test_whose_body_never_runs_is_a_doctor_finding(executor, shape):
    from rewardpipe.doctor import weak_test_shapes
    from rewardpipe.execution import ExecutionJob, ExecutionStatus
    from rewardpipe.models import Task

    tests = NEVER_RUN[shape]
    wrong = executor.run(ExecutionJob(code="def add(a, b):\n    return 0\n", tests=tests, entry_point="add"))
    assert wrong.status is ExecutionStatus.PASSED  # as in plain unittest: the shape itself is the hole
    task = Task(task_id="t", prompt="p", spec=["s"], entry_point="add", tests=tests, reference_solution="x = 1\n")
    (finding,) = weak_test_shapes(task)
    assert "never run" in finding and "tests line 3" in finding, finding
    awaited = tests.replace("unittest.TestCase", "unittest.IsolatedAsyncioTestCase")
    if "async" in shape:
        assert weak_test_shapes(task.model_copy(update={"tests": awaited})) == []


# A load_tests hook that calls the model's code decides, from what it returns, which tests load (or raises, which
# unittest turns into one failing placeholder): the count then differs from the source's, and that was an
# infrastructure error (no reward at all) for what is the model's wrong answer.
LOAD_TESTS_CALLS_THE_MODEL = (
    "import unittest\n"
    "def load_tests(loader, tests, pattern):\n"
    "    assert add(7, 8) == 15\n"
    "    return tests\n"
    "class T(unittest.TestCase):\n"
    "    def test_a(self):\n"
    "        self.assertEqual(add(1, 2), 3)\n"
    "    def test_b(self):\n"
    "        self.assertEqual(add(2, 2), 4)\n"
)


def test_a_load_tests_hook_failing_on_the_models_answer_is_the_models_failure(executor):
    from rewardpipe.execution import ExecutionJob, ExecutionStatus

    hard_coded = "def add(a, b):\n    return {(1, 2): 3, (2, 2): 4}.get((a, b), 0)\n"
    wrong = executor.run(ExecutionJob(code=hard_coded, tests=LOAD_TESTS_CALLS_THE_MODEL, entry_point="add"))
    assert wrong.status is ExecutionStatus.FAILED and wrong.passed == 0, (wrong.status, wrong.reason)
    assert "load_tests" in wrong.reason, wrong.reason
    right = executor.run(
        ExecutionJob(code="def add(a, b):\n    return a + b\n", tests=LOAD_TESTS_CALLS_THE_MODEL, entry_point="add")
    )
    assert right.status is ExecutionStatus.PASSED, right.reason
    # Without a call into the model's code, a count that differs is still the tests' own problem: an error.
    broken = LOAD_TESTS_CALLS_THE_MODEL.replace(
        "    assert add(7, 8) == 15\n", "    raise RuntimeError('broken hook')\n"
    )
    own = executor.run(ExecutionJob(code="def add(a, b):\n    return a + b\n", tests=broken, entry_point="add"))
    assert own.status is ExecutionStatus.ERROR, (own.status, own.reason)
    # A hook that builds its tests from the model's answers loads another count whatever the answer: the tests'
    # problem too, never a 0 for a correct answer.
    data_driven = LOAD_TESTS_CALLS_THE_MODEL.replace(
        "    assert add(7, 8) == 15\n    return tests\n",
        "    for a in range(3):\n        total = add(a, a)\n"
        "        tests.addTest(unittest.FunctionTestCase(lambda t=total, a=a: None if t == 2 * a else 1 / 0))\n"
        "    return tests\n",
    )
    right_data = executor.run(
        ExecutionJob(code="def add(a, b):\n    return a + b\n", tests=data_driven, entry_point="add")
    )
    assert right_data.status is ExecutionStatus.ERROR, (right_data.status, right_data.reason)
