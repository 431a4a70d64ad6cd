"""The scorer parses every job's hidden tests on its pool threads. On CPython 3.11 two threads building
AST objects at once corrupt the interpreter-wide AST recursion counter (python/cpython gh-106905), so an
innocent job ended as ``error: sandbox failure: SystemError: AST constructor recursion depth mismatch``
(seen in ``exec --batch`` over HumanEval under load). A garbage collection that runs a Python finalizer in
the middle of a parse is what lets the other thread in; this test makes that happen often."""

from __future__ import annotations

import gc
import sys
import threading
import time

from rewardpipe.execution.runtime import harness
from rewardpipe.execution.screening import screen

TESTS = "import unittest\n" + "".join(
    f"class T{i}(unittest.TestCase):\n    def test_{i}(self):\n        self.assertEqual(add({i}, [{i}, ({i},)]), {{'k': {i}}})\n"
    for i in range(40))


class _Finalised:
    def __del__(self):
        time.sleep(0)  # a finalizer that yields the GIL, as sockets and subprocess handles do


def _cycle() -> None:
    a, b = _Finalised(), _Finalised()
    a.other, b.other = b, a


def test_parsing_tests_on_many_threads_never_fails():
    errors: list[str] = []

    def work():
        for _ in range(80):
            _cycle()
            try:
                assert harness.count_expected_tests(TESTS, "unittest") == 40
                screen(TESTS)
            except SystemError as exc:
                errors.append(str(exc))

    old_interval, old_threshold = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(1e-6)
    gc.set_threshold(20, 5, 5)
    try:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(old_interval)
        gc.set_threshold(*old_threshold)
    assert errors == []
