"""Class 9, the test-authoring half: `rewardpipe doctor` warns about test shapes a model can game, and
the safe forms shown in docs/tasks.md raise no warning. The exploit behind each warning is run in the
sandbox too, to show the shape really is weak (the model wins) and the safe form really holds."""

from __future__ import annotations

import json
import textwrap

import pytest
from typer.testing import CliRunner

from rewardpipe.cli import app
from rewardpipe.doctor import weak_test_shapes
from rewardpipe.execution import ExecutionJob, ExecutionStatus
from rewardpipe.models import Task


def task(tests: str, reference: str, entry_point: str, tests_format: str = "unittest") -> Task:
    return Task(
        task_id="t",
        prompt="p",
        spec=["s"],
        entry_point=entry_point,
        tests=textwrap.dedent(tests),
        tests_format=tests_format,
        reference_solution=textwrap.dedent(reference),
    )


NAN_WEAK = """
import unittest
class T(unittest.TestCase):
    def test_root(self):
        assert not abs(sqrt2() - 1.41421356) > 1e-6
    def test_root_again(self):
        self.assertFalse(abs(sqrt2() - 1.41421356) >= 1e-6)
"""
NAN_WEAK_IF = """
def check(candidate):
    if abs(candidate() - 1.41421356) > 1e-6:
        raise AssertionError("wrong")
"""
NAN_SAFE = """
import math, unittest
class T(unittest.TestCase):
    def test_root(self):
        assert abs(sqrt2() - 1.41421356) <= 1e-6
        self.assertTrue(math.isclose(sqrt2(), 1.41421356, abs_tol=1e-6))
        self.assertAlmostEqual(sqrt2(), 1.41421356, places=6)
"""
SQRT2 = "def sqrt2():\n    return 2 ** 0.5\n"
NAN_MODEL = "def sqrt2():\n    return float('nan')\n"

MUTATION_WEAK = """
import unittest
class T(unittest.TestCase):
    def test_sort(self):
        data = [3, 1, 2]
        self.assertEqual(sort_copy(data), sorted(data))
    def test_sort_later(self):
        data = [5, 4]
        got = sort_copy(data)
        expected = list(reversed(data))
        self.assertEqual(got, expected)
"""
MUTATION_SAFE = """
import unittest
class T(unittest.TestCase):
    def test_sort(self):
        data = [3, 1, 2]
        expected = sorted(data)
        self.assertEqual(sort_copy(list(data)), expected)
    def test_in_place(self):
        data = [3, 1, 2]
        sort_copy(data)
        self.assertEqual(data, [3, 1, 2])
    def test_literal(self):
        self.assertEqual(sort_copy([2, 1]), [1, 2])
"""
SORT_COPY = "def sort_copy(xs):\n    return sorted(xs)\n"
MUTATING_MODEL = "def sort_copy(xs):\n    xs.clear()\n    return []\n"

HELPER_WEAK = """
def check(candidate):
    xs = [1, -3, 2]
    assert abs(poly(xs, candidate(xs))) < 1e-6
"""
HELPER_SAFE = """
def poly(xs, x):
    return sum(c * x ** i for i, c in enumerate(xs))

def check(candidate):
    xs = [1, -3, 2]
    assert abs(poly(xs, candidate(xs))) < 1e-6
"""
POLY_REFERENCE = """
def poly(xs, x):
    return sum(c * x ** i for i, c in enumerate(xs))

def find_zero(xs):
    return 1.0
"""
POLY_CHEAT = "def poly(xs, x):\n    return 0\n\ndef find_zero(xs):\n    return 123.0\n"


def test_nan_against_a_negated_tolerance_is_flagged():
    warnings = weak_test_shapes(task(NAN_WEAK, SQRT2, "sqrt2"))
    assert len(warnings) == 2 and all("NaN" in w for w in warnings)
    assert "line 5" in warnings[0] and "line 7" in warnings[1]
    assert len(weak_test_shapes(task(NAN_WEAK_IF, SQRT2, "sqrt2", "check"))) == 1
    assert weak_test_shapes(task(NAN_SAFE, SQRT2, "sqrt2")) == []


def test_expectation_derived_from_a_mutated_argument_is_flagged():
    warnings = weak_test_shapes(task(MUTATION_WEAK, SORT_COPY, "sort_copy"))
    assert len(warnings) == 2 and all("mutated" in w for w in warnings), warnings
    assert "sorted(data)" in warnings[0] and "reversed(data)" in warnings[1]
    assert weak_test_shapes(task(MUTATION_SAFE, SORT_COPY, "sort_copy")) == []


def test_a_helper_the_model_can_redefine_is_flagged():
    warnings = weak_test_shapes(task(HELPER_WEAK, POLY_REFERENCE, "find_zero", "check"))
    assert len(warnings) == 1 and "'poly'" in warnings[0]
    assert weak_test_shapes(task(HELPER_SAFE, POLY_REFERENCE, "find_zero", "check")) == []


@pytest.mark.parametrize(
    "weak, safe, model, entry_point, tests_format",
    [
        (NAN_WEAK, NAN_SAFE, NAN_MODEL, "sqrt2", "unittest"),
        (
            MUTATION_WEAK,
            MUTATION_SAFE.replace("[3, 1, 2])\n    def test_literal", "[1, 2, 3])\n    def test_literal"),
            MUTATING_MODEL,
            "sort_copy",
            "unittest",
        ),
        (HELPER_WEAK, HELPER_SAFE, POLY_CHEAT, "find_zero", "check"),
    ],
)
def test_each_flagged_shape_is_really_gameable_and_the_safe_form_is_not(
    executor, weak, safe, model, entry_point, tests_format
):
    def run(tests):
        return executor.run(
            ExecutionJob(code=model, tests=textwrap.dedent(tests), entry_point=entry_point, tests_format=tests_format)
        )

    assert run(weak).status is ExecutionStatus.PASSED  # the hazard is real
    assert run(safe).status is ExecutionStatus.FAILED


def test_doctor_command_reports_the_warnings(tmp_path):
    path = tmp_path / "tasks.jsonl"
    weak = task(HELPER_WEAK, POLY_REFERENCE, "find_zero", "check").model_dump()
    weak["task_id"] = "poly-[bold]task"
    path.write_text(json.dumps(weak) + "\n")
    outcome = CliRunner().invoke(app, ["doctor", "--tasks", str(path), "--json"])
    payload = json.loads(outcome.stdout)
    assert any("'poly'" in w for w in payload["diagnoses"][0]["warnings"]), payload
    human = CliRunner().invoke(app, ["doctor", "--tasks", str(path)])
    assert "poly-[bold]task" in human.output and "'poly'" in human.output, human.output
