"""Verdict semantics: passed only when every expected test ran and passed; model failures are
failed/timeout; harness faults are error."""

from __future__ import annotations

import textwrap

import pytest

from rewardpipe.execution import ExecutionStatus, execute
from rewardpipe.execution.result import ExecutionJob
from tests.execution.conftest import ADD_TESTS, job


def test_correct_code_passes_every_test(executor):
    result = executor.run(job("def add(a, b):\n    return a + b\n"))
    assert (result.status, result.passed, result.total) == (ExecutionStatus.PASSED, 3, 3)
    assert result.mode == "split"
    assert result.fraction_passed == 1.0


def test_partly_correct_code_fails_with_partial_count(executor):
    code = "def add(a, b):\n    return a + b if a >= 0 else 0\n"
    result = executor.run(job(code))
    assert (result.status, result.passed, result.total) == (ExecutionStatus.FAILED, 2, 3)
    assert "2 of 3 tests passed" in result.reason
    assert "test_negative" in result.reason


def test_code_that_raises_at_import_fails_with_zero_tests_run(executor):
    result = executor.run(job("raise RuntimeError('broken model code')\n"))
    assert (result.status, result.passed, result.total) == (ExecutionStatus.FAILED, 0, 3)
    assert "0 of 3 expected tests ran" in result.reason
    assert "broken model code" in result.reason


def test_syntax_error_in_model_code_fails(executor):
    result = executor.run(job("def add(a, b) return a + b\n"))
    assert result.status is ExecutionStatus.FAILED
    assert "SyntaxError" in result.reason


def test_missing_entry_point_is_an_error(executor):
    # issue 9: code that does not define the entry point is an error naming it, never a pass or a test failure
    result = executor.run(job("def plus(a, b):\n    return a + b\n"))
    assert (result.status, result.passed) == (ExecutionStatus.ERROR, 0)
    assert "does not define the entry point 'add'" in result.reason
    # ...but the fault is the model's: it scores 0, it is never an infrastructure error dropped from GRPO
    assert result.model_fault and not result.is_infrastructure_error and result.fraction_passed == 0.0


def test_unusable_hidden_tests_are_an_infrastructure_error_not_a_model_fault(executor):
    result = executor.run(job("def add(a, b):\n    return a + b\n", tests="import unittest\n"))
    assert result.status is ExecutionStatus.ERROR
    assert not result.model_fault and result.is_infrastructure_error


def test_skipped_hidden_test_is_not_a_pass(executor):
    tests = (
        ADD_TESTS
        + "\n    @unittest.skip('flaky')\n    def test_skipped(self):\n        self.assertEqual(add(1, 1), 2)\n"
    )
    result = executor.run(job("def add(a, b):\n    return a + b\n", tests=tests))
    assert (result.status, result.passed, result.total) == (ExecutionStatus.FAILED, 3, 4)
    assert "skipped" in result.reason


def test_check_format_humaneval_style(executor):
    tests = "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(0, 0) == 0\n"
    good = executor.run(job("def add(a, b):\n    return a + b\n", tests=tests, tests_format="check"))
    bad = executor.run(job("def add(a, b):\n    return a * b + 1\n", tests=tests, tests_format="check"))
    assert (good.status, good.passed, good.total) == (ExecutionStatus.PASSED, 1, 1)
    assert (bad.status, bad.passed, bad.total) == (ExecutionStatus.FAILED, 0, 1)


def test_unparseable_tests_are_a_harness_error(executor):
    result = executor.run(job("def add(a, b):\n    return a + b\n", tests="class Broken(:\n"))
    assert result.status is ExecutionStatus.ERROR
    assert "do not parse" in result.reason
    with pytest.raises(ValueError):
        _ = result.fraction_passed


def test_tests_without_test_methods_are_a_harness_error(executor):
    result = executor.run(job("def add(a, b):\n    return a + b\n", tests="import unittest\nx = 1\n"))
    assert result.status is ExecutionStatus.ERROR
    assert "no test" in result.reason


def test_check_format_without_check_function_is_a_harness_error(executor):
    result = executor.run(job("def add(a, b):\n    return a + b\n", tests="assert True\n", tests_format="check"))
    assert result.status is ExecutionStatus.ERROR
    assert "check(candidate)" in result.reason


def test_tests_that_crash_at_import_without_the_model_are_a_harness_error(executor):
    tests = (
        "import unittest\nimport module_that_does_not_exist\nclass T(unittest.TestCase):\n    def test_a(self):\n"
        "        pass\n"
    )
    result = executor.run(job("def add(a, b):\n    return a + b\n", tests=tests))
    assert result.status is ExecutionStatus.ERROR
    assert "module_that_does_not_exist" in result.reason


def test_infinite_loop_is_a_timeout_not_an_error(executor):
    result = executor.run(job("def add(a, b):\n    while True:\n        pass\n", timeout_s=0.5))
    assert (result.status, result.passed, result.total) == (ExecutionStatus.TIMEOUT, 0, 3)
    assert result.fraction_passed == 0.0


def test_slow_import_counts_against_the_deadline(executor):
    code = "import time\ntime.sleep(60)\ndef add(a, b):\n    return a + b\n"
    result = executor.run(job(code, timeout_s=0.5))
    assert result.status is ExecutionStatus.TIMEOUT
    # Ended by the job's deadline: long before its import would end, and before the scorer's own grace (timeout_s +
    # grace_s, 5.5 s) would take the fork server for hung. (A 3 s import left a loaded machine too little margin.)
    assert result.duration_ms < 5000


def test_stdout_and_stderr_are_returned(executor):
    code = (
        "import sys\nprint('hello out')\nprint('hello err', file=sys.stderr)\ndef add(a, b):\n"
        "    print('called', a, b)\n    return a + b\n"
    )
    result = executor.run(job(code))
    assert result.status is ExecutionStatus.PASSED
    assert "hello out" in result.stdout and "called 1 2" in result.stdout
    assert "hello err" in result.stderr


def test_output_without_a_final_newline_is_returned(executor):
    # The model's process is killed as soon as the tests are done with it: what it printed without a newline
    # (still in a line buffer) must reach the output files first.
    code = (
        "import sys\nprint('loaded', end='')\nprint('warn', end='', file=sys.stderr)\n"
        "def add(a, b):\n    print(f'|{a}+{b}', end='')\n    return a + b\n"
    )
    result = executor.run(job(code))
    assert result.status is ExecutionStatus.PASSED
    assert result.stdout.startswith("loaded|") and result.stdout.count("|") == result.total, result.stdout
    assert result.stderr == "warn", result.stderr


def test_uncaught_exception_traceback_goes_to_reason_not_a_crash(executor):
    code = "def add(a, b):\n    return {}[a]\n"
    result = executor.run(job(code))
    assert result.status is ExecutionStatus.FAILED
    assert "KeyError" in result.reason


def test_memory_limit_kills_only_the_model():
    from rewardpipe.execution.sandbox import make_executor

    small = make_executor(workers=1, memory_mb=256)  # a low limit keeps the bomb quick
    try:
        if not any(small.isolation()[layer].startswith("on") for layer in ("rlimits", "cgroup")):
            pytest.skip("neither rlimits nor a memory cgroup is available to bound memory")
        code = "def add(a, b):\n    hog = [bytearray(1 << 20) for _ in range(4096)]\n    return a + b\n"
        result = small.run(job(code))
        assert (result.status, result.passed) == (ExecutionStatus.FAILED, 0), result.reason
        assert "MemoryError" in result.reason or "SIGKILL" in result.reason, result.reason
        assert small.run(job("def add(a, b):\n    return a + b\n")).status is ExecutionStatus.PASSED
    finally:
        small.close()


def test_model_code_may_use_threads_and_common_modules(executor):
    code = textwrap.dedent("""
        import threading, math, collections, itertools, functools, heapq, re, json, decimal, fractions
        def add(a, b):
            box = []
            worker = threading.Thread(target=lambda: box.append(a + b))
            worker.start()
            worker.join()
            return box[0]
    """)
    result = executor.run(job(code))
    assert result.status is ExecutionStatus.PASSED, result.reason


def test_module_level_execute_uses_the_default_executor():
    result = execute("def add(a, b):\n    return a + b\n", ADD_TESTS, "add", timeout_s=5)
    assert result.status is ExecutionStatus.PASSED


def test_entry_point_that_is_not_an_identifier_is_a_job_error(executor):
    # Refused when the job is built (exec, the Lambda and the single-turn reward all build one)...
    for name in ("add(1)", "class", "a b", ""):
        with pytest.raises(ValueError):
            job("def add(a, b):\n    return a + b\n", entry_point=name)
    # ...and still by the sandbox, for a job that skipped validation.
    unchecked = ExecutionJob.model_construct(**{**job("x = 1\n").model_dump(), "entry_point": "add(1)"})
    result = executor.run(unchecked)
    assert result.status is ExecutionStatus.ERROR
    assert "not a Python identifier" in result.reason


def test_model_code_can_use_tempfile_in_its_own_directory(executor):
    code = textwrap.dedent("""
        import os, tempfile
        with tempfile.NamedTemporaryFile("w", delete=False) as handle:
            handle.write("scratch")
        print("TMP", open(handle.name).read(), os.path.dirname(handle.name) == os.getcwd())
        def add(a, b):
            return a + b
    """)
    result = executor.run(job(code))
    assert result.status is ExecutionStatus.PASSED, result.reason
    assert "TMP scratch True" in result.stdout


# Correct code returning the standard collections passed in one process and failed under split trust: they
# arrived as their base type, so a test reading a namedtuple's field, a Counter's most_common or a defaultdict's
# default failed, and an OrderedDict in the wrong order compared equal. They cross with their type now.
COLLECTION_TESTS = """
import collections, unittest

class T(unittest.TestCase):
    def test_fields(self):
        point = f("point")
        self.assertEqual((point.x, point.y), (1, 2))
        self.assertEqual(type(point).__name__, "Point")
    def test_counter(self):
        self.assertEqual(f("counter").most_common(1), [("a", 3)])
    def test_order(self):
        self.assertEqual(f("ordered"), collections.OrderedDict([("b", 1), ("a", 2)]))
    def test_default(self):
        self.assertEqual(f("grouped")["missing"], [])
    def test_deque(self):
        queue = f("queue")
        self.assertEqual(queue.popleft(), 1)
        self.assertEqual(queue.maxlen, 3)
"""
COLLECTIONS_RIGHT = """
import collections
Point = collections.namedtuple("Point", "x y")

def f(kind):
    return {
        "point": lambda: Point(1, 2),
        "counter": lambda: collections.Counter("aaab"),
        "ordered": lambda: collections.OrderedDict([("b", 1), ("a", 2)]),
        "grouped": lambda: collections.defaultdict(list),
        "queue": lambda: collections.deque([1, 2], maxlen=3),
    }[kind]()
"""


def test_standard_collections_returned_by_correct_code_pass(executor):
    result = executor.run(job(COLLECTIONS_RIGHT, tests=COLLECTION_TESTS, entry_point="f"))
    assert result.status is ExecutionStatus.PASSED, result.reason
    wrong_order = COLLECTIONS_RIGHT.replace('[("b", 1), ("a", 2)]', '[("a", 2), ("b", 1)]')
    result = executor.run(job(wrong_order, tests=COLLECTION_TESTS, entry_point="f"))
    assert result.status is ExecutionStatus.FAILED and result.passed == 4, (result.status, result.reason)
