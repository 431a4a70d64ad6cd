"""Round eight: test shapes that split trust scored wrongly, each checked against plain unittest with the code and
the tests in one process (the reference), plus the forged-pass probes of this round that already held.

* Class 5, correct code scored 0 silently: the model's code (and the hidden tests) were compiled with the runtime
  modules' own ``from __future__ import annotations``, so annotations were strings.
"""

from __future__ import annotations

import textwrap

import pytest

from rewardpipe.execution import ExecutionJob, ExecutionStatus
from rewardpipe.execution.sandbox import make_executor
from tests.security.test_round_seven import _one_process

PASSED = ExecutionStatus.PASSED


@pytest.fixture(scope="module")
def one_worker():
    executor = make_executor(workers=1)
    yield executor
    executor.close()


def _run(executor, code: str, tests: str, entry_point: str = "f", **fields):
    return executor.run(
        ExecutionJob(
            code=textwrap.dedent(code),
            tests="import unittest\n" + textwrap.dedent(tests),
            entry_point=entry_point,
            **fields,
        )
    )


# --- annotations are the model's own objects, as in one process ---------------------------------------------------

ANNOTATED_CODE = """
def f(value: int):
    kind = f.__annotations__["value"]
    return kind(value)
"""
ANNOTATED_TESTS = """
class T(unittest.TestCase):
    def test(self):
        self.assertEqual(f("3"), 3)
"""
TESTS_ANNOTATION = """
def helper(x: int) -> int:
    return x

class T(unittest.TestCase):
    def test(self):
        self.assertIs(helper.__annotations__["x"], int)
        self.assertEqual(f(2), 2)
"""
PLAIN_F = "def f(x):\n    return x\n"


def test_the_models_annotations_are_not_strings(one_worker):
    result = _run(one_worker, ANNOTATED_CODE, ANNOTATED_TESTS)
    assert result.status is PASSED, result.reason


def test_the_tests_annotations_are_not_strings(one_worker):
    result = _run(one_worker, PLAIN_F, TESTS_ANNOTATION)
    assert result.status is PASSED, result.reason


def test_inprocess_tests_annotations_are_not_strings(one_worker):
    result = _run(one_worker, PLAIN_F, TESTS_ANNOTATION, trust_mode="inprocess")
    assert result.status is PASSED, result.reason


# --- the reference: each shape made to work here passes in one process (``_one_process`` of round seven) -----------

REFERENCE_CASES = [
    (ANNOTATED_CODE, ANNOTATED_TESTS, PASSED),
    (PLAIN_F, TESTS_ANNOTATION, PASSED),
]


@pytest.mark.parametrize("index", range(len(REFERENCE_CASES)))
def test_each_shape_agrees_with_one_process(index):
    code, tests, expected = REFERENCE_CASES[index]
    assert _one_process(code, tests) is expected
