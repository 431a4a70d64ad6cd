"""Round twenty-seven: how the verdict is counted, attacked through the public executor as the model would.

* ``stdio``: a case's expected output may be 1 MiB, and what its program printed was refused beyond the same 1 MiB,
  so a right program printing an expected output at (or within a few bytes of) the limit failed for the newline
  ``print`` ends it with, and with a float tolerance for printing its numbers with more digits: a right answer's 0.
  A program may print twice the largest expected output now; beyond that the case still fails.
* ``check``: the candidate was the entry point as the namespace held it *after* the tests' code ran. An entry point
  named ``check`` (MBPP names several functions so) was by then the tests' own ``def check``, so ``check(check)``
  never called the model's code and every answer, a right one too, failed; and tests that define a function of the
  entry point's name themselves (a reference copy, a prompt's stub) checked that function, so every answer, a wrong
  one too, got its verdict. The candidate is the model's entry point, taken before the tests' code runs.
* ``unittest`` tests that define the entry point themselves call their own function: every answer gets its verdict, in
  one process too. The tests' shape: ``rewardpipe doctor`` warns about it.
"""

from __future__ import annotations

import json

import pytest

from rewardpipe.doctor import weak_test_shapes
from rewardpipe.execution import ExecutionJob, ExecutionStatus
from rewardpipe.execution.runtime import harness
from rewardpipe.models import Task

LIMIT = harness.MAX_STDIO_OUTPUT_BYTES


def _stdio(code: str, cases: object) -> ExecutionJob:
    return ExecutionJob(code=code, tests=json.dumps(cases), tests_format="stdio", timeout_s=10.0)


# An expected output of exactly the largest size a case may expect, without a final newline (datasets strip them).
LARGEST_EXPECTED = "7 " * (LIMIT // 2 - 1) + "77"


@pytest.mark.parametrize(
    ("code", "tests"),
    [
        ("import sys\nprint(sys.stdin.read())\n", [{"input": LARGEST_EXPECTED, "output": LARGEST_EXPECTED}]),
        (
            "import sys\nprint('\\n'.join(sys.stdin.read().split()))\n",
            [{"input": LARGEST_EXPECTED, "output": LARGEST_EXPECTED}],
        ),
        (
            "n = int(input())\nprint(' '.join(['0.50000'] * n))\n",
            {"cases": [{"input": str(LIMIT // 4), "output": "0.5 " * (LIMIT // 4)}], "float_tolerance": 1e-6},
        ),
    ],
    ids=["final-newline", "a-line-each", "more-digits"],
)
def test_a_right_program_printing_the_largest_expected_output_passes(executor, code, tests):
    assert len(LARGEST_EXPECTED) == LIMIT
    result = executor.run(_stdio(code, tests))
    assert result.status is ExecutionStatus.PASSED, result.reason


def test_output_beyond_twice_the_largest_expected_output_still_fails(executor):
    code = f"import sys\nsys.stdout.write('7 ' * {LIMIT} + '7')\n"
    result = executor.run(_stdio(code, [{"input": "", "output": "7"}]))
    assert result.status is ExecutionStatus.FAILED, result.reason
    assert "over the 2 MiB limit" in result.reason
    assert not result.is_infrastructure_error


CHECK_NAMED_CHECK = """
def check(candidate):
    assert candidate(4) == 5
    assert candidate(-1) == 0
"""


@pytest.mark.parametrize("trust_mode", ["split", "inprocess"])
@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("def check(n):\n    return n + 1\n", ExecutionStatus.PASSED),
        ("def check(n):\n    return n\n", ExecutionStatus.FAILED),
    ],
    ids=["right", "wrong"],
)
def test_an_entry_point_named_check_is_the_candidate(executor, trust_mode, code, status):
    job = ExecutionJob(
        code=code, tests=CHECK_NAMED_CHECK, entry_point="check", tests_format="check", trust_mode=trust_mode
    )
    result = executor.run(job)
    assert result.status is status, result.reason
    assert result.passed == (1 if status is ExecutionStatus.PASSED else 0)


# The tests carry a function of the entry point's name (here a right one, as a copied reference would be).
DEFINES_THE_ENTRY_POINT = """
def increment(n):
    return n + 1


def check(candidate):
    assert candidate(4) == 5
"""


def test_a_function_of_the_tests_named_as_the_entry_point_is_not_the_candidate(executor):
    job = ExecutionJob(
        code="def increment(n):\n    return n\n",
        tests=DEFINES_THE_ENTRY_POINT,
        entry_point="increment",
        tests_format="check",
    )
    result = executor.run(job)
    assert result.status is ExecutionStatus.FAILED, result.reason
    assert result.passed == 0


RIGHT_INCREMENT = "def increment(n):\n    return n + 1\n"
UNITTEST_DEFINING = """
import unittest
{binding}


class TestIncrement(unittest.TestCase):
    def test_four(self):
        self.assertEqual(increment(4), 5)
"""


@pytest.mark.parametrize(
    "binding",
    ["def increment(n):\n    return n + 1", "increment = lambda n: n + 1", "from operator import index as increment"],
    ids=["def", "assignment", "import"],
)
def test_doctor_warns_about_unittest_tests_defining_the_entry_point(binding):
    fields = {"task_id": "t", "prompt": "p", "spec": ["s"], "entry_point": "increment"}
    task = Task(**fields, tests=UNITTEST_DEFINING.format(binding=binding), reference_solution=RIGHT_INCREMENT)
    warnings = [w for w in weak_test_shapes(task) if "define the entry point 'increment'" in w]
    assert len(warnings) == 1, weak_test_shapes(task)
    plain = task.model_copy(update={"tests": UNITTEST_DEFINING.format(binding="")})
    assert not [w for w in weak_test_shapes(plain) if "define the entry point" in w]


def test_unittest_tests_defining_the_entry_point_pass_every_answer(executor):
    """What the warning is about (the same in one process): not the sandbox's to change."""
    tests = UNITTEST_DEFINING.format(binding="def increment(n):\n    return n + 1")
    job = ExecutionJob(code="def increment(n):\n    return 0\n", tests=tests, entry_point="increment")
    assert executor.run(job).status is ExecutionStatus.PASSED
