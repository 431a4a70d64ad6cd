"""What crosses the boundary: plain data both ways, in-place mutation, exceptions, and objects
(instances of the model's classes, generators) driven through handles."""

from __future__ import annotations

import textwrap

from rewardpipe.execution import ExecutionStatus
from tests.execution.conftest import job


def run_unittest(executor, code, body, entry_point):
    tests = "import unittest\nclass T(unittest.TestCase):\n" + textwrap.indent(textwrap.dedent(body), "    ")
    return executor.run(job(textwrap.dedent(code), tests=tests, entry_point=entry_point))


def test_plain_values_round_trip_exactly(executor):
    code = "def echo(x):\n    return x\n"
    body = """
    def test_round_trip(self):
        import math
        values = [None, True, 0, -7, 2**100, 1.5, float("inf"), "héllo\\udc80"[:5], b"\\x00\\xff",
                  bytearray(b"ab"), (1, (2, 3)), [1, [2]], {"a": 1, 2: "b", (1, 2): None}, {1, 2},
                  frozenset({3}), 3 + 4j]
        for value in values:
            got = echo(value)
            self.assertEqual(got, value)
            self.assertIs(type(got), type(value))
        self.assertTrue(math.isnan(echo(float("nan"))))
    """
    result = run_unittest(executor, code, body, "echo")
    assert result.status is ExecutionStatus.PASSED, result.reason


def test_in_place_mutation_of_arguments_is_mirrored(executor):
    code = """
    def sort_in_place(items, extra=None):
        items.sort()
        if extra is not None:
            extra["seen"] = len(items)
            extra.pop("drop", None)
    """
    body = """
    def test_mutation(self):
        data = [3, 1, 2]
        info = {"drop": 1}
        self.assertIsNone(sort_in_place(data, extra=info))
        self.assertEqual(data, [1, 2, 3])
        self.assertEqual(info, {"seen": 3})
    """
    result = run_unittest(executor, code, body, "sort_in_place")
    assert result.status is ExecutionStatus.PASSED, result.reason


def test_model_classes_work_through_handles(executor):
    code = """
    class Stack:
        limit = 3
        def __init__(self):
            self.items = []
        def push(self, item):
            if len(self.items) >= self.limit:
                raise OverflowError("full")
            self.items.append(item)
        def pop(self):
            return self.items.pop()
        def __len__(self):
            return len(self.items)
        def __iter__(self):
            return iter(list(self.items))
        def __eq__(self, other):
            return isinstance(other, Stack) and other.items == self.items
    """
    body = """
    def test_stack(self):
        s = Stack()
        self.assertIsInstance(s, Stack)
        s.push(1); s.push(2)
        self.assertEqual(len(s), 2)
        self.assertEqual(s.items, [1, 2])
        self.assertEqual(list(s), [1, 2])
        self.assertIn(2, s)
        self.assertNotIn(5, s)
        self.assertEqual(s.pop(), 2)
        self.assertEqual(Stack.limit, 3)
        other = Stack(); other.push(1)
        self.assertEqual(s, other)
        s.push(2); s.push(3)
        with self.assertRaises(OverflowError):
            s.push(4)
    """
    result = run_unittest(executor, code, body, "Stack")
    assert result.status is ExecutionStatus.PASSED, result.reason


def test_model_object_never_equals_plain_expected_data(executor):
    code = """
    class Liar:
        def __eq__(self, other):
            return True
    def make():
        return Liar()
    """
    body = """
    def test_not_equal(self):
        self.assertNotEqual(make(), 3)
        self.assertNotEqual(make(), [1, 2])
    """
    result = run_unittest(executor, code, body, "make")
    assert result.status is ExecutionStatus.PASSED, result.reason


def test_model_defined_exception_classes_map_to_trusted_ones(executor):
    code = """
    class InsufficientFunds(ValueError):
        pass
    def withdraw(balance, amount):
        if amount > balance:
            raise InsufficientFunds(f"need {amount - balance} more")
        return balance - amount
    """
    body = """
    def test_raises(self):
        with self.assertRaises(InsufficientFunds):
            withdraw(1, 5)
        with self.assertRaises(ValueError):
            withdraw(1, 5)
        with self.assertRaisesRegex(InsufficientFunds, "need 4 more"):
            withdraw(1, 5)
        self.assertEqual(withdraw(5, 1), 4)
    """
    result = run_unittest(executor, code, body, "withdraw")
    assert result.status is ExecutionStatus.PASSED, result.reason


def test_builtin_exceptions_are_re_raised_as_themselves(executor):
    code = "def parse(text):\n    return int(text)\n"
    body = """
    def test_value_error(self):
        with self.assertRaises(ValueError):
            parse("x")
        with self.assertRaises(TypeError):
            parse(None)
    """
    result = run_unittest(executor, code, body, "parse")
    assert result.status is ExecutionStatus.PASSED, result.reason


def test_generators_are_iterated_remotely(executor):
    code = "def countdown(n):\n    while n > 0:\n        yield n\n        n -= 1\n"
    body = """
    def test_generator(self):
        self.assertEqual(list(countdown(3)), [3, 2, 1])
        gen = countdown(2)
        self.assertEqual(next(iter(gen)), 2)
    """
    result = run_unittest(executor, code, body, "countdown")
    assert result.status is ExecutionStatus.PASSED, result.reason


def test_helper_names_and_constants_the_tests_use_are_available(executor):
    code = """
    import math
    LIMIT = 10
    def helper(x):
        return x * 2
    def solve(x):
        return helper(x) + LIMIT
    """
    body = """
    def test_helpers(self):
        self.assertEqual(solve(1), helper(1) + LIMIT)
        self.assertEqual(math.floor(2.5), 2)
    """
    result = run_unittest(executor, code, body, "solve")
    assert result.status is ExecutionStatus.PASSED, result.reason


def test_tests_that_pass_a_function_to_the_model_are_a_harness_error_not_a_zero(executor):
    code = "def apply(fn, x):\n    return fn(x)\n"
    body = """
    def test_callback(self):
        self.assertEqual(apply(lambda v: v + 1, 1), 2)
    """
    result = run_unittest(executor, code, body, "apply")
    assert result.status is ExecutionStatus.ERROR
    assert "cannot be passed" in result.reason and "trust_mode='inprocess'" in result.reason
    fallback = executor.run(
        job(
            textwrap.dedent(code),
            entry_point="apply",
            trust_mode="inprocess",
            tests="import unittest\nclass T(unittest.TestCase):\n" + textwrap.indent(textwrap.dedent(body), "    "),
        )
    )
    assert fallback.status is ExecutionStatus.PASSED, fallback.reason


def test_inprocess_mode_runs_tests_that_subclass_model_classes(executor):
    code = "class Base:\n    def greet(self):\n        return 'hi'\n"
    tests = textwrap.dedent("""
        import unittest
        class Child(Base):
            pass
        class T(unittest.TestCase):
            def test_subclass(self):
                self.assertEqual(Child().greet(), "hi")
    """)
    split = executor.run(job(code, tests=tests, entry_point="Base"))
    inprocess = executor.run(job(code, tests=tests, entry_point="Base", trust_mode="inprocess"))
    assert split.status is ExecutionStatus.ERROR  # a stub cannot be subclassed: the task needs the fallback
    assert "trust_mode='inprocess'" in split.reason
    assert (inprocess.status, inprocess.mode) == (ExecutionStatus.PASSED, "inprocess"), inprocess.reason


def test_inprocess_mode_screens_out_runner_patching(executor):
    code = "import unittest\nunittest.TestCase.run = lambda self, result=None: None\ndef add(a, b):\n    return a - b\n"
    result = executor.run(job(code, trust_mode="inprocess"))
    assert result.status is ExecutionStatus.FAILED
    assert "static screening" in result.reason and "unittest" in result.reason


def test_large_module_globals_the_tests_do_not_use_cost_nothing(executor):
    code = "TABLE = list(range(3_000_000))\nSMALL = {'k': [1, 2]}\ndef lookup(i):\n    return TABLE[i]\n"
    body = """
    def test_lookup(self):
        self.assertEqual(lookup(7), 7)
        self.assertEqual(SMALL, {"k": [1, 2]})
    """
    result = run_unittest(executor, code, body, "lookup")
    assert result.status is ExecutionStatus.PASSED, result.reason


def test_unfetchable_module_global_is_a_model_failure(executor):
    # A value nested deeper than the codec's depth limit cannot be sent.
    code = "CONFIG = []\n_x = CONFIG\nfor _ in range(300):\n    _x.append([])\n    _x = _x[0]\ndef solve():\n    return 1\n"
    body = """
    def test_uses_config(self):
        self.assertGreater(CONFIG, 0)
    """
    result = run_unittest(executor, code, body, "solve")
    assert (result.status, result.passed) == (ExecutionStatus.FAILED, 0), result.reason
    assert "could not be fetched" in result.reason


def test_inprocess_mode_reports_model_errors_as_failures(executor):
    result = executor.run(job("def add(a, b):\n    return add(a, b)\n", trust_mode="inprocess"))
    assert (result.status, result.passed, result.mode) == (ExecutionStatus.FAILED, 0, "inprocess")
    assert "RecursionError" in result.reason
