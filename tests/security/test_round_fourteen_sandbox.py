"""Round fourteen (issue 19): the sandbox and split trust, attacked with shapes earlier rounds did not try. Each case
runs through the sandbox and, where the claim is "as in one process", through plain unittest with the code and the
tests in one process as the reference.

* A right answer scored 0 silently: a writable ``memoryview`` the tests hand over crossed read-only, so the model's
  write through it raised "cannot modify read-only memory" (and nothing reached the tests' buffer).
"""

from __future__ import annotations

import textwrap

import pytest

from rewardpipe.execution import ExecutionJob, ExecutionStatus
from tests.security.test_round_seven import _one_process

PASSED, FAILED, ERROR = ExecutionStatus.PASSED, ExecutionStatus.FAILED, ExecutionStatus.ERROR


def _run(executor, code: str, tests: str, entry_point: str = "f", **fields):
    return executor.run(
        ExecutionJob(
            code=textwrap.dedent(code),
            tests="import unittest\n" + textwrap.dedent(tests),
            entry_point=entry_point,
            **fields,
        )
    )


def _same_as_one_process(executor, code: str, tests: str, expected: ExecutionStatus, entry_point: str = "f"):
    assert _one_process(code, tests) is expected  # the reference agrees with what the case claims
    result = _run(executor, code, tests, entry_point=entry_point)
    assert result.status is expected, (result.status, result.reason)
    return result


# --- a writable memoryview crosses writable, and what the callee writes reaches the caller's buffer --------------

WRITES_THROUGH = """
def f(view):
    view[0] = ord("x")
"""
MEMORYVIEW_TESTS = {
    "whole": """
        class T(unittest.TestCase):
            def test(self):
                buffer = bytearray(b"abc")
                f(memoryview(buffer))
                self.assertEqual(buffer, bytearray(b"xbc"))
        """,
    "a-slice-of-one": """
        class T(unittest.TestCase):
            def test(self):
                buffer = bytearray(b"abcd")
                f(memoryview(buffer)[2:])
                self.assertEqual(buffer, bytearray(b"abxd"))
        """,
    "every-other-byte": """
        class T(unittest.TestCase):
            def test(self):
                buffer = bytearray(b"abcdef")
                f(memoryview(buffer)[1::2])
                self.assertEqual(buffer, bytearray(b"axcdef"))
        """,
}


@pytest.mark.parametrize("case", MEMORYVIEW_TESTS)
def test_a_writable_memoryview_is_written_through_as_in_one_process(executor, case):
    _same_as_one_process(executor, WRITES_THROUGH, MEMORYVIEW_TESTS[case], PASSED)


def test_a_read_only_memoryview_stays_read_only_and_a_wrong_write_still_fails(executor):
    code = """
    def f(view):
        try:
            view[0] = ord("x")
        except TypeError:
            return "read-only"
        return "writable"
    """
    tests = """
    class T(unittest.TestCase):
        def test(self):
            self.assertEqual(f(memoryview(b"abc")), "read-only")
            self.assertEqual(f(memoryview(bytearray(b"abc"))), "writable")
    """
    _same_as_one_process(executor, code, tests, PASSED)
    wrong = "def f(view):\n    view[0] = ord('y')\n"
    _same_as_one_process(executor, wrong, MEMORYVIEW_TESTS["whole"], FAILED)
