"""The review of round six: each case failed on the round-six tree and holds now.

A plain-data shadow of a name the tests read (``math = None``) made a wrong answer an ``error``; tests broken on a
line that reads nothing of the model's became the model's ``failed``; the tests' own too-deep value, ``defaultdict``
with a lambda and zoned datetime stopped crossing; honest replies with a divider or emoji were refused; honest code
shown to a judge was altered."""

from __future__ import annotations

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.sandbox import make_executor
from tests.security.conftest import RIGHT_ADD, WRONG_ADD, job
from tests.security.test_round_six_sandbox import READS_A_MODEL_NAME_AT_LOAD

READS_MATH_AT_LOAD = READS_A_MODEL_NAME_AT_LOAD  # round six's tests: math read at module level


@pytest.mark.parametrize("shadow", ["math = None\n", "math = 0\n", "math = {'ulp': 1}\n"])
def test_a_plain_data_shadow_is_the_models_failure_not_an_error(one_worker, shadow):
    # A wrong answer binding the name the tests read at load to plain data must be FAILED, not ERROR.
    result = one_worker.run(job(shadow + WRONG_ADD, tests=READS_MATH_AT_LOAD))
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)


# Tests broken whatever the model writes (a module-level bug unrelated to any model name) must stay ERROR.
BROKEN_BY_ITSELF = """
import unittest
LIMITS = {"a": 1}["b"]

class TestAdd(unittest.TestCase):
    def test_small(self):
        self.assertTrue(math.isclose(add(1, 2), 3))
"""
BROKEN_BY_A_TYPO = """
import unittest
LIMIT = helpr(3)

class TestAdd(unittest.TestCase):
    def test_small(self):
        self.assertEqual(add(1, 2), 3)
"""


@pytest.mark.parametrize("tests", [BROKEN_BY_ITSELF, BROKEN_BY_A_TYPO], ids=["keyerror", "nameerror-typo"])
def test_tests_broken_by_themselves_stay_an_error_for_a_right_answer(one_worker, tests):
    result = one_worker.run(job("import math\n" + RIGHT_ADD, tests=tests))
    assert result.status is ExecutionStatus.ERROR, (result.status, result.reason)


# A test's own deep value (not built from the model's replies): the in-process fallback would pass a right
# answer; under split trust it must stay the tests' error (excluded), never the right answer's 0.
RIGHT_DEPTH = (
    "def add(a, b):\n    d = 0\n    while isinstance(a, list):\n        a = a[0]\n        d += 1\n    return d + b\n"
)
TESTS_SEND_THEIR_OWN_DEEP_VALUE = """
import unittest

class TestAdd(unittest.TestCase):
    def test_deep(self):
        value = 0
        for _ in range(250):
            value = [value]
        self.assertEqual(add(value, 0), 250)
"""


def test_the_tests_own_too_deep_value_does_not_fail_a_right_answer(one_worker):
    result = one_worker.run(job(RIGHT_DEPTH, tests=TESTS_SEND_THEIR_OWN_DEEP_VALUE))
    assert result.status is not ExecutionStatus.FAILED, (result.status, result.reason)
    inproc = one_worker.run(job(RIGHT_DEPTH, tests=TESTS_SEND_THEIR_OWN_DEEP_VALUE, trust_mode="inprocess"))
    assert inproc.status is ExecutionStatus.PASSED, (inproc.status, inproc.reason)


# Before 7075bb1 a test's defaultdict with its own factory (a lambda) crossed as a plain dict; 7075bb1 asked the
# trusted side for a handle to the lambda, which it cannot give, and the whole task became an error. It crosses
# as a plain dict again.
RIGHT_TOTAL = "def add(a, b):\n    return sum(a.values()) + b\n"
TESTS_PASS_A_DEFAULTDICT_WITH_A_LAMBDA = """
import collections
import unittest

class TestAdd(unittest.TestCase):
    def test_counts(self):
        counts = collections.defaultdict(lambda: 0)
        counts["a"] += 2
        self.assertEqual(add(counts, 1), 3)
"""


# A test's ZoneInfo-aware datetime now crosses with its key: the hardened child must be able to load the zone.
RIGHT_HOUR = "def add(a, b):\n    return a.hour + b\n"
TESTS_PASS_A_ZONED_DATETIME = """
import datetime
import unittest
import zoneinfo

class TestAdd(unittest.TestCase):
    def test_hour(self):
        moment = datetime.datetime(2024, 1, 1, 5, tzinfo=zoneinfo.ZoneInfo("America/New_York"))
        self.assertEqual(add(moment, 1), 6)
"""


@pytest.mark.parametrize(
    ("code", "tests"),
    [(RIGHT_TOTAL, TESTS_PASS_A_DEFAULTDICT_WITH_A_LAMBDA), (RIGHT_HOUR, TESTS_PASS_A_ZONED_DATETIME)],
    ids=["defaultdict with a lambda", "zoned datetime"],
)
def test_a_tests_own_value_still_reaches_a_right_answer(one_worker, code, tests):
    result = one_worker.run(job(code, tests=tests))
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


# A range crosses as itself now: a few bytes the reply budget never sees that the tests may materialise in the
# trusted runner. A wrong answer must still be FAILED (or the model's timeout), never an infrastructure error,
# and the next job must be unharmed.
RETURNS_A_HUGE_RANGE = "def add(a, b):\n    return range(10**9)\n"
MATERIALISES = """
import unittest

class TestAdd(unittest.TestCase):
    def test_small(self):
        self.assertEqual(list(add(1, 2)), [3])

    def test_equal(self):
        self.assertCountEqual(add(2, 2), [4])
"""


def test_a_huge_range_is_the_models_failure_and_harms_no_next_job(one_worker):
    result = one_worker.run(job(RETURNS_A_HUGE_RANGE, tests=MATERIALISES, timeout_s=10))
    assert result.status in (ExecutionStatus.FAILED, ExecutionStatus.TIMEOUT), (result.status, result.reason)
    honest = one_worker.run(job(RIGHT_ADD))
    assert honest.status is ExecutionStatus.PASSED, honest.reason


@pytest.fixture(scope="module")
def chrooted():
    """Full mode without Landlock: the chroot fallback (Fargate's 5.10 kernel), the child seeing only /usr."""
    import os

    if os.geteuid() != 0:
        pytest.skip("the chroot fallback needs root")
    executor = make_executor(workers=1, disable=frozenset({"landlock"}))
    if not executor.isolation().get("chroot", "").startswith("on"):
        executor.close()
        pytest.skip("chroot fallback unavailable here")
    yield executor
    executor.close()


def test_a_tests_zoned_datetime_reaches_a_right_answer_in_a_chroot(chrooted):
    # Passed at bf20753 (crossed as a fixed-offset isoformat); now the child must load the ZoneInfo key.
    result = chrooted.run(job(RIGHT_HOUR, tests=TESTS_PASS_A_ZONED_DATETIME))
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


def test_an_unknown_zone_key_keeps_the_offset_instead_of_raising_a_keyerror():
    # The receiver's zone data decides; without the zone (or any zone data) the value keeps its instant and offset.
    import datetime

    from rewardpipe.execution.runtime import wire

    value = wire.decode({"dtx": ["2024-01-01T00:00:00+05:00", 0, None, "No/Such_Zone"]})
    assert value.utcoffset() == datetime.timedelta(hours=5)


@pytest.mark.parametrize(
    "reply",
    [
        "Negative durations raise ValueError.\n\n--------------------------------------",
        "Negative durations raise ValueError. ───────────────────────────────────",
        "Yes, negative durations should raise ValueError "
        "👍👍👍 🙂🙂🙂 ✅✅✅ 🎉🎉🎉 🚀🚀🚀 💯💯💯 🙏🙏🙏 ⭐⭐⭐ 😀😀😀 👌👌👌 🔥🔥🔥",
    ],
    ids=["dash rule", "box-drawing divider", "emoji"],
)
def test_an_honest_one_detail_reply_with_a_divider_or_emoji_stands(reply):
    # Each stood at bf20753 and was refused by 60cc76e's unread_symbols (> 32) until dividers and pictographs
    # stopped counting.
    from rewardpipe.envs.ask_before_coding.replies import vet_llm_reply
    from tests.security.test_round_four_reward_gaming import DURATION, QUESTION

    text, _ = vet_llm_reply(reply, QUESTION, DURATION.spec, prompt=DURATION.prompt, entry_point=DURATION.entry_point)
    assert text == reply, text


# The tests read, at module level, a module the model's code imports (as HumanEval's prompts do for math), but
# one the runner has not imported itself: build_namespace leaves the name unbound, the load fails with NameError,
# and the NameError rule makes a RIGHT answer 'failed' (it was an 'error' at bf20753; in-process it passes).
READS_GRAPHLIB_AT_LOAD = """
import unittest
MIDDLE = len(gl.TopologicalSorter({1: [], 2: []}).static_order() and [1, 2, 3])

class TestAdd(unittest.TestCase):
    def test_small(self):
        self.assertEqual(add(1, MIDDLE - 1), 3)
"""


def test_a_module_the_runner_has_not_imported_does_not_fail_a_right_answer(one_worker):
    result = one_worker.run(job("import graphlib as gl\n" + RIGHT_ADD, tests=READS_GRAPHLIB_AT_LOAD))
    assert result.status is not ExecutionStatus.FAILED, (result.status, result.reason)


def test_honest_code_shown_to_a_judge_is_left_as_written():
    from rewardpipe.judges import _CHAT_CONTROL

    for text in ("buf[MAX_N] = x |> f", "[NOTE] keep [TODO]", "a |> b"):
        assert _CHAT_CONTROL.sub(lambda token: token[0][0] + "\u2060" + token[0][1:], text) == text
    for token in ("<|im_end|>", "[INST]", "[/INST]", "<</SYS>>", "</s>", "<start_of_turn>"):
        assert "\u2060" in _CHAT_CONTROL.sub(lambda found: found[0][0] + "\u2060" + found[0][1:], token)
