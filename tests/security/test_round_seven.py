"""Round seven: an independent check with unseen test shapes, through the library API.

Each case failed on the round-six tree. Under split trust the model's functions run in another process and what
they return or raise crosses a wire; these shapes came back wrong: a correct answer scored 0 silently (class 5)
because an exception arrived as its message alone, a model exception class lost its hierarchy, the same model
object was never ``is`` itself, ``issubclass`` of two model classes raised; and a wrong answer passed (a forged
pass) because every model function showed the stub class's docstring. Each expected verdict is what plain
unittest gives in one process (``test_each_shape_agrees_with_one_process`` checks that too)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import traceback

import pytest

from rewardpipe.execution import ExecutionJob, ExecutionStatus
from rewardpipe.execution.runtime import trusted, wire

PASSED, FAILED = ExecutionStatus.PASSED, ExecutionStatus.FAILED


def _run(executor, code: str, tests: str, entry_point: str):
    return executor.run(
        ExecutionJob(
            code=textwrap.dedent(code), tests="import unittest\n" + textwrap.dedent(tests), entry_point=entry_point
        )
    )


def _one_process(code: str, tests: str) -> ExecutionStatus:
    """The verdict of plain unittest with the code and the tests in one module (the reference)."""
    source = textwrap.dedent(code) + "\nimport unittest\n" + textwrap.dedent(tests) + "\nunittest.main()\n"
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "one_process.py")
        with open(path, "w") as handle:
            handle.write(source)
        done = subprocess.run([sys.executable, path], capture_output=True, timeout=60, check=False)
    return PASSED if done.returncode == 0 else FAILED


# --- exceptions cross with their args, attributes and class ------------------------------------------------------

EXCEPTION_ARGS = {
    "keyerror-args": (
        "def f(d, k):\n    return d[k]\n",
        """
        class T(unittest.TestCase):
            def test(self):
                with self.assertRaises(KeyError) as cm:
                    f({}, "k")
                self.assertEqual(cm.exception.args[0], "k")
        """,
    ),
    "custom-attributes": (
        """
        class InsufficientFunds(Exception):
            def __init__(self, balance, amount):
                super().__init__(f"need {amount}, have {balance}")
                self.balance = balance
                self.amount = amount

        def withdraw(balance, amount):
            if amount > balance:
                raise InsufficientFunds(balance, amount)
            return balance - amount
        """,
        """
        class T(unittest.TestCase):
            def test(self):
                with self.assertRaisesRegex(InsufficientFunds, "need 10") as cm:
                    withdraw(5, 10)
                self.assertEqual((cm.exception.balance, cm.exception.amount), (5, 10))
        """,
    ),
    "several-args": (
        "def f(x):\n    raise ValueError('bad', x)\n",
        """
        class T(unittest.TestCase):
            def test(self):
                with self.assertRaises(ValueError) as cm:
                    f(3)
                self.assertEqual(cm.exception.args, ("bad", 3))
        """,
    ),
    "own-str": (
        """
        class ParseError(ValueError):
            def __init__(self, line):
                super().__init__(line)
                self.line = line

            def __str__(self):
                return f"parse error on line {self.line}"

        def parse(text):
            raise ParseError(3)
        """,
        """
        class T(unittest.TestCase):
            def test(self):
                with self.assertRaisesRegex(ParseError, "on line 3") as cm:
                    parse("x")
                self.assertEqual(cm.exception.args, (3,))
        """,
    ),
    "oserror-filename": (
        "def f(path):\n    raise FileNotFoundError(2, 'No such file', path)\n",
        """
        class T(unittest.TestCase):
            def test(self):
                with self.assertRaises(FileNotFoundError) as cm:
                    f("x.txt")
                self.assertEqual((cm.exception.errno, cm.exception.filename), (2, "x.txt"))
        """,
    ),
}


ENTRY_POINTS = {"custom-attributes": "withdraw", "own-str": "parse"}


@pytest.mark.parametrize("case", sorted(EXCEPTION_ARGS))
def test_a_raised_exception_keeps_its_args_and_attributes(one_worker, case):
    code, tests = EXCEPTION_ARGS[case]
    result = _run(one_worker, code, tests, ENTRY_POINTS.get(case, "f"))
    assert result.status is PASSED, (result.status, result.reason)


STANDARD_LIBRARY_EXCEPTIONS = {
    "statistics": (
        "import statistics\n\ndef f(xs):\n    return statistics.mean(xs)\n",
        """
        import statistics

        class T(unittest.TestCase):
            def test(self):
                with self.assertRaises(statistics.StatisticsError):
                    f([])
        """,
    ),
    "json": (
        "import json\n\ndef f(text):\n    return json.loads(text)\n",
        """
        import json

        class T(unittest.TestCase):
            def test(self):
                with self.assertRaises(json.JSONDecodeError) as cm:
                    f("{")
                self.assertEqual(cm.exception.pos, 1)
        """,
    ),
}


@pytest.mark.parametrize("case", sorted(STANDARD_LIBRARY_EXCEPTIONS))
def test_a_standard_library_exception_arrives_as_itself(one_worker, case):
    code, tests = STANDARD_LIBRARY_EXCEPTIONS[case]
    result = _run(one_worker, code, tests, "f")
    assert result.status is PASSED, (result.status, result.reason)


HIERARCHY_CODE = """
class AppError(Exception):
    pass

class NotFound(AppError, KeyError):
    pass

def find(key):
    raise NotFound(key)
"""
HIERARCHY_TESTS = """
class T(unittest.TestCase):
    def test_parent(self):
        with self.assertRaises(AppError):
            find("a")

    def test_builtin_base(self):
        with self.assertRaises(KeyError):
            find("a")
"""


def test_a_model_exception_is_caught_by_its_model_parent_class(one_worker):
    # The tests read AppError only: NotFound arrived as a plain Exception and assertRaises(AppError) failed.
    result = _run(one_worker, HIERARCHY_CODE, HIERARCHY_TESTS, "find")
    assert result.status is PASSED, (result.status, result.reason)
    wrong_code = HIERARCHY_CODE.replace("raise NotFound(key)", "raise ValueError(key)")
    wrong = _run(one_worker, wrong_code, HIERARCHY_TESTS, "find")
    assert wrong.status is FAILED and wrong.passed == 0, (wrong.status, wrong.reason)


def test_a_wrong_exception_payload_still_fails(one_worker):
    code, tests = EXCEPTION_ARGS["custom-attributes"]
    result = _run(one_worker, code.replace("self.balance = balance", "self.balance = -1"), tests, "withdraw")
    assert result.status is FAILED, (result.status, result.reason)


def _forged(info: dict) -> BaseException:
    return trusted.Connection(-1, -1).exception(info)


@pytest.mark.parametrize(
    ("module", "name"),
    [("unittest.case", "_ShouldStop"), ("unittest.case", "SkipTest"), ("unittest", "SkipTest"), ("os", "_Error")],
)
def test_a_forged_exception_never_becomes_a_class_that_steers_unittest(module, name):
    # _ShouldStop raised inside a test ends it as a success; SkipTest skips it. The model names the class it raised.
    exc = _forged({"type": name, "module": module, "base": "Exception", "msg": "x", "args": wire.encode(["x"])})
    assert type(exc) is Exception


@pytest.mark.parametrize(
    "info",
    [
        # SyntaxError's details are not type-checked by its constructor; formatting it then raised in the runner.
        {
            "type": "SyntaxError",
            "module": "builtins",
            "base": "SyntaxError",
            "msg": "m",
            "args": wire.encode(["m", ("f", "x", "bad", "t")]),
        },
        {"type": "JSONDecodeError", "module": "json.decoder", "base": "ValueError", "msg": "e", "args": {"h": 1}},
        {
            "type": "ValueError",
            "module": "builtins",
            "base": "ValueError",
            "msg": "e",
            "attrs": {"with_traceback": 1, "args": 2, "__traceback__": 3},
        },
        {
            "type": "UnicodeDecodeError",
            "module": "builtins",
            "base": "UnicodeDecodeError",
            "msg": "x",
            "args": wire.encode(["utf-8", b"\xff", "a", 1, "bad"]),
        },
    ],
    ids=["syntaxerror-offset", "handle-args", "shadowing-attributes", "bad-unicode-args"],
)
def test_a_forged_exception_payload_cannot_break_the_runner(info):
    exc = _forged(info)
    "".join(traceback.format_exception_only(type(exc), exc))  # what unittest does with a failing test's error
    assert callable(exc.with_traceback) and type(exc.args) is tuple


# --- the same model object is the same stub -----------------------------------------------------------------------

IDENTITY = {
    "enum-member": (
        """
        from enum import Enum

        class Color(Enum):
            RED = 1
            GREEN = 2

        def parse(name):
            return Color[name.upper()]
        """,
        """
        class T(unittest.TestCase):
            def test(self):
                self.assertIs(parse("red"), Color.RED)
                self.assertIsNot(parse("green"), Color.RED)
        """,
        "parse",
    ),
    "singleton": (
        """
        class Config:
            _instance = None

            def __new__(cls):
                if cls._instance is None:
                    cls._instance = super().__new__(cls)
                return cls._instance

        def get():
            return Config()
        """,
        """
        class T(unittest.TestCase):
            def test(self):
                self.assertIs(get(), get())
                self.assertIs(Config(), get())
        """,
        "get",
    ),
    "fluent-builder": (
        """
        class Builder:
            def __init__(self):
                self.parts = []

            def add(self, part):
                self.parts.append(part)
                return self

            def build(self):
                return "".join(self.parts)
        """,
        """
        class T(unittest.TestCase):
            def test(self):
                builder = Builder()
                self.assertIs(builder.add("a"), builder)
                self.assertEqual(builder.add("b").build(), "ab")
        """,
        "Builder",
    ),
}


# A guard: a different object is not the caller's (a function handing its argument back fails assertIsNot).
IDENTITY["returned-argument"] = (
    "class P:\n    pass\n\ndef clone(p):\n    return p\n",
    """
    class T(unittest.TestCase):
        def test(self):
            p = P()
            self.assertIsNot(clone(p), p)
    """,
    "clone",
)


@pytest.mark.parametrize("case", sorted(IDENTITY))
def test_the_same_model_object_is_itself(one_worker, case):
    code, tests, entry_point = IDENTITY[case]
    result = _run(one_worker, code, tests, entry_point)
    expected = FAILED if case == "returned-argument" else PASSED
    assert result.status is expected, (result.status, result.reason)


ISSUBCLASS_CODE = """
class Animal:
    sound = "..."

    def speak(self):
        return self.sound

class Dog(Animal):
    sound = "woof"

class Car:
    pass
"""
ISSUBCLASS_TESTS = """
class T(unittest.TestCase):
    def test(self):
        self.assertTrue(issubclass(Dog, Animal))
        self.assertFalse(issubclass(Car, Animal))
        self.assertFalse(issubclass(int, Animal))
        self.assertEqual(Dog().speak(), "woof")
"""


def test_issubclass_between_model_classes(one_worker):
    result = _run(one_worker, ISSUBCLASS_CODE, ISSUBCLASS_TESTS, "Dog")
    assert result.status is PASSED, (result.status, result.reason)


# --- the model object's own dunders, never the stub's ------------------------------------------------------------

DOCSTRING_TESTS = """
class T(unittest.TestCase):
    def test_documented(self):
        self.assertTrue(word_count.__doc__)

    def test_counts(self):
        self.assertEqual(word_count("a b c"), 3)
"""
DOCSTRING_CONTENT_TESTS = """
class T(unittest.TestCase):
    def test_documented(self):
        self.assertIn("words", word_count.__doc__)
        self.assertEqual(word_count.__name__, "word_count")
"""
VARS_TESTS = """
class T(unittest.TestCase):
    def test(self):
        self.assertEqual(vars(word_count), {})
        self.assertEqual(word_count.__qualname__, "word_count")
"""
DOCUMENTED = 'def word_count(text):\n    """Count the words of text."""\n    return len(text.split())\n'
UNDOCUMENTED = "def word_count(text):\n    return len(text.split())\n"


def test_a_missing_docstring_does_not_pass_a_docstring_test(one_worker):
    # Forged pass: every model function showed the stub class's docstring, so code without one passed.
    result = _run(one_worker, UNDOCUMENTED, DOCSTRING_TESTS, "word_count")
    assert result.status is FAILED and result.passed == 1, (result.status, result.reason)


@pytest.mark.parametrize(
    "tests", [DOCSTRING_TESTS, DOCSTRING_CONTENT_TESTS, VARS_TESTS], ids=["required", "content", "vars"]
)
def test_a_docstring_and_name_are_the_models_own(one_worker, tests):
    result = _run(one_worker, DOCUMENTED, tests, "word_count")
    assert result.status is PASSED, (result.status, result.reason)


# --- a standard-library module the tests take from the model's namespace -------------------------------------------

PROMPT_IMPORT_CODE = """
import graphlib
import xml.etree.ElementTree as ET

def order(graph):
    return list(graphlib.TopologicalSorter(graph).static_order())
"""
PROMPT_IMPORT_TESTS = """
class T(unittest.TestCase):
    def test(self):
        graph = {"b": {"a"}, "c": {"b"}}
        self.assertEqual(order(graph), list(graphlib.TopologicalSorter(graph).static_order()))
        self.assertEqual(ET.fromstring("<a/>").tag, "a")
"""


def test_a_standard_library_module_the_model_imported_serves_the_tests(one_worker):
    # As HumanEval's prompts import math for their tests: one the runner had not imported itself was left
    # unbound, and the right answer failed on a NameError inside the test method.
    result = _run(one_worker, PROMPT_IMPORT_CODE, PROMPT_IMPORT_TESTS, "order")
    assert result.status is PASSED, (result.status, result.reason)
    wrong = _run(
        one_worker, PROMPT_IMPORT_CODE.replace("static_order())", "static_order())[::-1]"), PROMPT_IMPORT_TESTS, "order"
    )
    assert wrong.status is FAILED, (wrong.status, wrong.reason)


@pytest.mark.parametrize("name", ["antigravity", "this", "__hello__", "idlelib.idle", "numpy", "os._wrap_close", ""])
def test_the_runner_imports_no_module_that_acts_on_import_or_is_not_standard(name):
    assert trusted._standard_module(name) is None


# --- isinstance of a value that crossed as this process's own, against the class the model's code exports ---------

VALUE_CLASS_CODE = """
from collections import deque, namedtuple
from datetime import date

Point = namedtuple("Point", "x y")

def window(xs):
    return deque(xs, maxlen=2), Point(1, 2), date(2024, 1, 31)
"""
VALUE_CLASS_TESTS = """
class T(unittest.TestCase):
    def test(self):
        queue, point, day = window([1, 2, 3])
        self.assertIsInstance(queue, deque)
        self.assertIsInstance(point, Point)
        self.assertIsInstance(day, date)
        self.assertNotIsInstance(point, deque)
        self.assertNotIsInstance((1, 2), Point)
"""


def test_isinstance_of_a_returned_value_against_the_class_the_model_exports(one_worker):
    # A deque, a date or the model's namedtuple crosses as this process's own value, and the name the tests read
    # (the prompt's from collections import deque) is a stub: isinstance was False for a right answer.
    result = _run(one_worker, VALUE_CLASS_CODE, VALUE_CLASS_TESTS, "window")
    assert result.status is PASSED, (result.status, result.reason)
    wrong = _run(one_worker, VALUE_CLASS_CODE.replace("deque(xs, maxlen=2)", "list(xs)"), VALUE_CLASS_TESTS, "window")
    assert wrong.status is FAILED, (wrong.status, wrong.reason)


# --- operators the model's process serves, between two model objects -------------------------------------------

OPERATOR_CODE = """
class Bits:
    def __init__(self, value):
        self.value = value

    def __or__(self, other):
        return Bits(self.value | other.value)

    def __and__(self, other):
        return Bits(self.value & other.value)

    def __xor__(self, other):
        return Bits(self.value ^ other.value)

    def __lshift__(self, other):
        return Bits(self.value << other.value)

    def __pow__(self, other):
        return Bits(self.value ** other.value)

    def __invert__(self):
        return Bits(~self.value)

    def __pos__(self):
        return Bits(abs(self.value))

    def __ior__(self, other):
        self.value |= other.value
        return self

    def __format__(self, spec):
        return format(self.value, spec)
"""
OPERATOR_TESTS = """
class T(unittest.TestCase):
    def test(self):
        a, b = Bits(0b1100), Bits(0b1010)
        self.assertEqual([(a | b).value, (a & b).value, (a ^ b).value], [0b1110, 0b1000, 0b0110])
        self.assertEqual([(a << Bits(1)).value, (Bits(2) ** Bits(3)).value], [0b11000, 8])
        self.assertEqual([(~a).value, (+Bits(-3)).value], [-13, 3])
        self.assertEqual(f"{a:08b}", "00001100")
        c = Bits(1)
        before = c
        c |= Bits(2)
        self.assertIs(c, before)
        self.assertEqual(c.value, 3)
"""


def test_operators_between_model_objects_are_served(one_worker):
    # A right answer's bit-set class raised TypeError on |, &, ^, <<, **, ~, +, |= and a format spec.
    result = _run(one_worker, OPERATOR_CODE, OPERATOR_TESTS, "Bits")
    assert result.status is PASSED, (result.status, result.reason)


def test_a_plain_operand_never_reaches_the_models_operator(one_worker):
    # assertAlmostEqual subtracts the expected value: handed to the model's __sub__, it could answer 0.
    code = """
    class Liar:
        def __sub__(self, other):
            return 0.0

        def __rsub__(self, other):
            return 0.0

        def __or__(self, other):
            return True

        def __ror__(self, other):
            return True

    def area(r):
        return Liar()
    """
    tests = """
    class T(unittest.TestCase):
        def test_almost(self):
            self.assertAlmostEqual(area(1), 3.14159, places=4)

        def test_or(self):
            self.assertTrue(area(1) | 3.14159)
    """
    result = _run(one_worker, code, tests, "area")
    assert result.status is FAILED and result.passed == 0, (result.status, result.reason)


# --- a context manager of the model's -------------------------------------------------------------------------

CONTEXT_CODE = """
class Resource:
    log = []

    def __init__(self, name):
        self.name = name
        self.open = False

    def __enter__(self):
        self.open = True
        return self

    def __exit__(self, kind, value, traceback):
        self.open = False
        Resource.log.append((kind.__name__ if kind else None, value.args if value else None))
        return True  # suppress everything
"""
CONTEXT_TESTS = """
class T(unittest.TestCase):
    def test_scope(self):
        resource = Resource("db")
        with resource as inside:
            self.assertIs(inside, resource)
            self.assertTrue(resource.open)
        self.assertFalse(resource.open)
        del resource.name
        self.assertFalse(hasattr(resource, "name"))
"""
SUPPRESSED_FAILURE_TESTS = """
class T(unittest.TestCase):
    def test_failure_inside(self):
        with Resource("db"):
            self.assertEqual(len(Resource.log), 12345)

    def test_told_no_expected_value(self):
        try:
            with Resource("db"):
                self.assertEqual("hidden-expected", "other")
        except AssertionError:
            pass
        self.assertEqual(Resource.log[-1], ("AssertionError", ()))
"""


def test_a_model_context_manager_runs_its_enter_and_exit(one_worker):
    # with ModelClass() as x: raised TypeError (the stub had no __enter__/__exit__), and del obj.attr failed.
    result = _run(one_worker, CONTEXT_CODE, CONTEXT_TESTS, "Resource")
    assert result.status is PASSED, (result.status, result.reason)


def test_a_model_context_manager_never_suppresses_a_failure_nor_learns_its_message(one_worker):
    # In one process the model's __exit__ returning True swallows the failed assertion (a forged pass), and it
    # is handed the AssertionError holding the expected value.
    result = _run(one_worker, CONTEXT_CODE, SUPPRESSED_FAILURE_TESTS, "Resource")
    assert result.status is FAILED and result.passed == 1, (result.status, result.reason)
    assert "12345" in result.reason


def test_doctor_flags_a_raise_inside_a_model_context_manager():
    from rewardpipe.execution.shape_lint import shape_findings

    tests = """
import unittest
from contextlib import suppress

class T(unittest.TestCase):
    def test(self):
        with Suppress(ValueError):
            raise ValueError("x")
        with suppress(KeyError):
            raise KeyError("y")
        with Resource("db") as resource:
            self.assertTrue(resource.open)
"""
    found = [line for line in shape_findings(tests) if "context manager" in line]
    assert len(found) == 1 and "Suppress" in found[0], found
    assert not [line for line in shape_findings(tests, trust_mode="inprocess") if "context manager" in line]


# --- the reference: every shape above gives the same verdict in one process -----------------------------------

REFERENCE_CASES = [
    *((code, tests, PASSED) for code, tests in EXCEPTION_ARGS.values()),
    *((code, tests, PASSED) for code, tests in STANDARD_LIBRARY_EXCEPTIONS.values()),
    (HIERARCHY_CODE, HIERARCHY_TESTS, PASSED),
    *((code, tests, FAILED if "clone" in code else PASSED) for code, tests, _ in IDENTITY.values()),
    (ISSUBCLASS_CODE, ISSUBCLASS_TESTS, PASSED),
    (UNDOCUMENTED, DOCSTRING_TESTS, FAILED),
    (DOCUMENTED, DOCSTRING_TESTS, PASSED),
    (DOCUMENTED, DOCSTRING_CONTENT_TESTS, PASSED),
    (DOCUMENTED, VARS_TESTS, PASSED),
    (PROMPT_IMPORT_CODE, PROMPT_IMPORT_TESTS, PASSED),
    (VALUE_CLASS_CODE, VALUE_CLASS_TESTS, PASSED),
    (OPERATOR_CODE, OPERATOR_TESTS, PASSED),
    (CONTEXT_CODE, CONTEXT_TESTS, PASSED),
]


@pytest.mark.parametrize("index", range(len(REFERENCE_CASES)))
def test_each_shape_agrees_with_one_process(index):
    code, tests, expected = REFERENCE_CASES[index]
    assert _one_process(code, tests) is expected
