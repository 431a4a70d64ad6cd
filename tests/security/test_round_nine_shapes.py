"""Round nine (issue 19, class 5): checks of what kind of object a model value is saw the sandbox's stub under split
trust, so a right answer scored 0 silently: ``isinstance(gen, types.GeneratorType)``, ``collections.abc`` checks,
``inspect.isgenerator/isfunction/isclass/isgeneratorfunction``, ``callable(x)`` (always True), ``type(x).__name__``,
``type(x) is ...``, an instance of the model's exception class returned as a value, ``mock.create_autospec`` of a
model function. Each shape is checked against plain unittest with the code and the tests in one process (the
reference), with wrong answers of the right kind (still ``failed``) and models that lie about their kind.

Also: a failed assertion whose diff is expensive (difflib on two huge nearly-equal values) is cheap in the runner.
"""

from __future__ import annotations

import textwrap
import time

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.runtime import trusted, untrusted, wire
from rewardpipe.execution.shape_lint import shape_findings
from tests.security.test_round_eight_shapes import _run
from tests.security.test_round_seven import _one_process

PASSED, FAILED, ERROR = ExecutionStatus.PASSED, ExecutionStatus.FAILED, ExecutionStatus.ERROR


def _methods(*lines: str) -> str:
    """A TestCase with one test method per line (so a failure names the check)."""
    body = "".join(f"    def test_{index:02d}(self):\n        {line}\n" for index, line in enumerate(lines))
    return "import collections.abc, enum, inspect, types\nclass T(unittest.TestCase):\n" + body


# --- the kinds of the interpreter's own objects: generators, functions, methods, classes ---------------------------

GENERATOR = """
def f(n):
    for i in range(n):
        yield i
"""
GENERATOR_TESTS = _methods(
    "self.assertIsInstance(f(3), types.GeneratorType)",
    "self.assertTrue(inspect.isgenerator(f(3)))",
    "self.assertTrue(inspect.isfunction(f))",
    "self.assertTrue(inspect.isgeneratorfunction(f))",
    "self.assertFalse(inspect.isclass(f))",
    "self.assertFalse(callable(f(3)))",
    "self.assertTrue(callable(f))",
    'self.assertEqual(type(f(3)).__name__, "generator")',
    "self.assertIs(type(f(3)), types.GeneratorType)",
    "self.assertIs(type(f), types.FunctionType)",
    "self.assertIsInstance(f(3), (list, collections.abc.Iterator))",
    "self.assertIsInstance(f(3), collections.abc.Generator)",
    "self.assertNotIsInstance(f(3), collections.abc.Sized)",
    "self.assertIsInstance(f, collections.abc.Callable)",
    "self.assertEqual(list(f(3)), [0, 1, 2])",
)
GENERATOR_WRONG = GENERATOR.replace("yield i", "yield i + 1")
GENERATOR_AS_LIST = "def f(n):\n    return list(range(n))\n"
GENERATOR_AS_ITERATOR = """
class Counter:
    def __init__(self, n):
        self.i, self.n = 0, n
    def __iter__(self):
        return self
    def __next__(self):
        if self.i >= self.n:
            raise StopIteration
        self.i += 1
        return self.i - 1
def f(n):
    return Counter(n)
"""
# A right answer's values, and a check of its kind: a generator must be a generator.
LAZY_TESTS = """
import types
class T(unittest.TestCase):
    def test(self):
        result = f(3)
        self.assertIsInstance(result, types.GeneratorType)
        self.assertEqual(list(result), [0, 1, 2])
"""

MODEL_CLASSES = """
import enum

class Color(enum.Enum):
    RED = 1
    GREEN = 2

class Stack:
    def __init__(self):
        self.items = []
    def push(self, item):
        self.items.append(item)
        return self
    def __len__(self):
        return len(self.items)
    def __eq__(self, other):
        return isinstance(other, Stack) and self.items == other.items

class Bag:
    def __init__(self, items):
        self.items = list(items)
    def __iter__(self):
        return iter(self.items)
    def __contains__(self, item):
        return item in self.items
    def __len__(self):
        return len(self.items)
    def __hash__(self):
        return 1
    def count(self):
        return len(self.items)

def f(n):
    return Stack().push(n)
def bag(*items):
    return Bag(items)
def color():
    return Color.RED
def lazy():
    return map(str, [1, 2])
"""
MODEL_CLASS_TESTS = _methods(
    "self.assertIs(type(f(1)), Stack)",
    "self.assertIsNot(type(f(1)), list)",
    'self.assertEqual(type(f(1)).__name__, "Stack")',
    'self.assertEqual(f(1).__class__.__name__, "Stack")',
    "self.assertIs(f(1).__class__, Stack)",
    "self.assertEqual(type(f(1)), type(f(2)))",
    "self.assertIsInstance(f(1), Stack)",
    "self.assertIsInstance(f(1), collections.abc.Sized)",
    "self.assertNotIsInstance(f(1), collections.abc.Iterable)",
    "self.assertNotIsInstance(f(1), collections.abc.Hashable)",
    "self.assertFalse(callable(f(1)))",
    "self.assertTrue(callable(f(1).push))",
    "self.assertTrue(inspect.ismethod(f(1).push))",
    "self.assertIsInstance(f(1).push, types.MethodType)",
    "self.assertTrue(inspect.isclass(Stack))",
    "self.assertIsInstance(Stack, type)",
    "self.assertIs(type(Stack), type)",
    "self.assertTrue(callable(Stack))",
    "self.assertTrue(issubclass(Stack, collections.abc.Sized))",
    "self.assertFalse(issubclass(Stack, collections.abc.Iterable))",
    "self.assertTrue(issubclass(Bag, (int, collections.abc.Collection)))",
    "self.assertIsInstance(bag(1, 2), collections.abc.Collection)",
    "self.assertIsInstance(bag(1, 2), collections.abc.Hashable)",
    "self.assertNotIsInstance(bag(1, 2), collections.abc.Iterator)",
    "self.assertIn(2, bag(1, 2))",
    "self.assertEqual(sorted(bag(2, 1)), [1, 2])",
    "self.assertIsInstance(color(), enum.Enum)",
    "self.assertIs(type(color()), Color)",
    "self.assertIs(color(), Color.RED)",
    "self.assertTrue(issubclass(Color, enum.Enum))",
    "self.assertIsInstance(Color, enum.EnumMeta)",
    "self.assertEqual(len(Color), 2)",
    "self.assertIsInstance(lazy(), map)",
    "self.assertIs(type(lazy()), map)",
    "self.assertIsInstance(lazy(), collections.abc.Iterator)",
    "self.assertEqual(list(lazy()), ['1', '2'])",
)

# A model class named like a built-in or like the interpreter's own kinds is still the model's class.
NAMED_LIKE_BUILTINS = """
class list:
    def __init__(self, items):
        self.items = items
    def __iter__(self):
        return iter(self.items)
class generator:
    def __iter__(self):
        return iter([0, 1, 2])
    def __next__(self):
        return 0
def f(n):
    return list([0, 1, 2])
def g(n):
    return generator()
"""
NAMED_LIKE_BUILTINS_TESTS = {
    "type-is-list": "self.assertIs(type(f(3)), __builtins__['list'] if isinstance(__builtins__, dict) else "
    "__builtins__.list)",
    "isinstance-list": "import builtins; self.assertIsInstance(f(3), builtins.list)",
    "generator-type": "self.assertIsInstance(g(3), types.GeneratorType)",
    "is-generator": "self.assertTrue(inspect.isgenerator(g(3)))",
    "type-is-generator": "self.assertIs(type(g(3)), types.GeneratorType)",
}

# --- an instance of the model's own exception class, returned as a value ----------------------------------------

RETURNED_EXCEPTION = """
class ParseError(ValueError):
    def __init__(self, message, position):
        super().__init__(message)
        self.position = position

def f(text):
    if not text.isdigit():
        return ParseError("not a number", 0)
    return int(text)

def explain(error):
    return f"{type(error).__name__} at {error.position}"
"""
RETURNED_EXCEPTION_TESTS = """
class T(unittest.TestCase):
    def test(self):
        error = f("x")
        self.assertIsInstance(error, ParseError)
        self.assertIsInstance(error, ValueError)
        self.assertEqual(str(error), "not a number")
        self.assertEqual(error.position, 0)
        self.assertEqual(explain(error), "ParseError at 0")
        self.assertEqual(f("12"), 12)
"""
RETURNED_EXCEPTION_WRONG = RETURNED_EXCEPTION.replace('"not a number", 0', '"not a number", 1')

# --- dataclasses of the model's code ---------------------------------------------------------------------------------

DATACLASS = """
import dataclasses

@dataclasses.dataclass
class Point:
    x: int
    y: list

def f(x):
    return Point(x, [x])

def plain(x):
    return x
"""
DATACLASS_TESTS = _methods(
    "import dataclasses; self.assertTrue(dataclasses.is_dataclass(f(1)))",
    "import dataclasses; self.assertTrue(dataclasses.is_dataclass(Point))",
    "import dataclasses; self.assertFalse(dataclasses.is_dataclass(plain(1)))",
    "import dataclasses; self.assertEqual(dataclasses.asdict(f(1)), {'x': 1, 'y': [1]})",
    "import dataclasses; self.assertEqual(dataclasses.astuple(f(2)), (2, [2]))",
    "import dataclasses; self.assertEqual([field.name for field in dataclasses.fields(f(1))], ['x', 'y'])",
)
DATACLASS_WRONG = DATACLASS.replace("Point(x, [x])", "Point(x, [x + 1])")


# --- mock.create_autospec of a model function ----------------------------------------------------------------------

AUTOSPEC_CODE = """
def f(a, b=2):
    return a + b

class Account:
    def __init__(self, balance=0):
        self.balance = balance
    def deposit(self, amount):
        self.balance += amount
        return self.balance

def account():
    return Account(5)
"""
AUTOSPEC_TESTS = """
from unittest import mock
class T(unittest.TestCase):
    def test_function(self):
        spec = mock.create_autospec(f, return_value=7)
        self.assertEqual(spec(1), 7)
        spec.assert_called_once_with(1)
        with self.assertRaises(TypeError):
            spec(1, 2, 3)
        self.assertEqual(f(1), 3)
    def test_class(self):
        spec = mock.create_autospec(Account)
        spec(1).deposit(2)
        spec.assert_called_once_with(1)
        with self.assertRaises(TypeError):
            spec(1, 2)
    def test_instance(self):
        spec = mock.create_autospec(account())
        spec.deposit(3)
        spec.deposit.assert_called_once_with(3)
        with self.assertRaises(TypeError):
            spec.deposit(1, 2)
        with self.assertRaises(AttributeError):
            spec.withdraw(1)
        self.assertEqual(account().deposit(1), 6)
"""


def test_a_generator_is_a_generator(one_worker):
    result = _run(one_worker, GENERATOR, GENERATOR_TESTS)
    assert result.status is PASSED, result.reason


def test_the_models_classes_answer_kind_checks_as_in_one_process(one_worker):
    result = _run(one_worker, MODEL_CLASSES, MODEL_CLASS_TESTS)
    assert result.status is PASSED, result.reason


def test_a_returned_exception_is_the_models_exception(one_worker):
    result = _run(one_worker, RETURNED_EXCEPTION, RETURNED_EXCEPTION_TESTS)
    assert result.status is PASSED, result.reason
    wrong = _run(one_worker, RETURNED_EXCEPTION_WRONG, RETURNED_EXCEPTION_TESTS)
    assert wrong.status is FAILED and wrong.passed == 0, wrong.reason


def test_a_dataclass_of_the_models_is_a_dataclass(one_worker):
    result = _run(one_worker, DATACLASS, DATACLASS_TESTS)
    assert result.status is PASSED, result.reason
    wrong = _run(one_worker, DATACLASS_WRONG, DATACLASS_TESTS)
    assert wrong.status is FAILED and wrong.passed == 4, wrong.reason  # the kind checks pass, the values fail


def test_create_autospec_of_a_model_function(one_worker):
    result = _run(one_worker, AUTOSPEC_CODE, AUTOSPEC_TESTS)
    assert result.status is PASSED, result.reason


def test_an_entry_point_named_like_a_rewritten_check_is_the_models(one_worker):
    tests = "class T(unittest.TestCase):\n    def test(self):\n        self.assertEqual(issubclass(2, 3), 5)\n"
    code = "def issubclass(a, b):\n    return a + b\n"
    assert _run(one_worker, code, tests, "issubclass").status is PASSED
    assert _run(one_worker, code.replace("a + b", "a * b"), tests, "issubclass").status is FAILED


@pytest.mark.parametrize("code", [GENERATOR_WRONG, GENERATOR_AS_LIST, GENERATOR_AS_ITERATOR])
def test_a_wrong_answer_still_fails_a_kind_check_or_its_values(one_worker, code):
    result = _run(one_worker, code, LAZY_TESTS)
    assert result.status is FAILED and result.passed == 0, (result.status, result.reason)


@pytest.mark.parametrize("name", sorted(NAMED_LIKE_BUILTINS_TESTS))
def test_a_model_class_named_like_a_builtin_is_not_one(one_worker, name):
    tests = _methods(NAMED_LIKE_BUILTINS_TESTS[name])
    result = _run(one_worker, NAMED_LIKE_BUILTINS, tests)
    assert result.status is FAILED and result.passed == 0, (result.status, result.reason)


# --- models that lie about the kind of their objects ---------------------------------------------------------------

# The model's process describes the kinds (untrusted.describe_kind); its code can replace that. A lie decides at
# most a check of what kind a stub is, never a value, never a verdict of ``error``.
LIE = """
import sys
_runtime = sys.modules["rewardpipe.execution.runtime.untrusted"]
_runtime.describe_kind = lambda obj, handles: {description}
class Fake:
    def __iter__(self):
        return iter([5, 6, 7])
    def __next__(self):
        return 5
    def __len__(self):
        return 3
    def __eq__(self, other):
        return True
def f(n):
    return Fake()
"""
LIES = {
    "generator": '["t", "generator", 6, 0]',
    "a-list": '["o", 0, [1, "builtins", "list"], ["builtins", "list"]]',
    "a-date": '["o", 0, [1, "datetime", "date"], ["datetime", "date"]]',
    "a-dict-view": '["o", 0, [1, "builtins", "dict_keys"], None]',
    "a-metaclass": '["o", 0, [1, "abc", "ABCMeta"], ["abc", "ABCMeta"]]',
    "an-assertion-error": '["x", {"type": "AssertionError", "module": "builtins", "base": "AssertionError"}]',
    "a-skip": '["x", {"type": "SkipTest", "module": "unittest.case", "base": "Exception", "msg": "x"}]',
    "a-stop": '["x", {"type": "StopIteration", "module": "builtins", "base": "StopIteration"}]',
    "a-keyboard-interrupt": '["x", {"type": "KeyboardInterrupt", "module": "builtins", "base": ""}]',
    "a-system-exit": '["x", {"type": "SystemExit", "module": "builtins", "base": "", "args": {"l": [0]}}]',
    "a-function-with-flags": '["t", "function", 1, 65535]',
    "unknown-kind": '["t", "list", 65535, 0]',
    "malformed": '["o", "x", [None], 7]',
    "huge-mask": '["o", 10 ** 30, [2, "x" * 10000, "y" * 10000], None]',
    "not-a-list": '"generator"',
    "class-of-another": '["c", 65535, [1, "builtins", "type"], -1, ["builtins", "list"]]',
}
LIE_TESTS = """
import types
class T(unittest.TestCase):
    def test_values(self):
        self.assertEqual(list(f(3)), [0, 1, 2])
    def test_equal(self):
        self.assertEqual(f(3), [0, 1, 2])
    def test_raised_or_values(self):
        result = f(3)
        if isinstance(result, types.GeneratorType):
            self.assertEqual(list(result), [0, 1, 2])
        else:
            self.assertEqual(result, [0, 1, 2])
"""


@pytest.mark.parametrize("lie", sorted(LIES))
def test_a_model_lying_about_its_kind_gains_no_pass_and_no_error(one_worker, lie):
    code = LIE.replace("{description}", LIES[lie])
    result = _run(one_worker, code, LIE_TESTS)
    assert result.status is FAILED and result.passed == 0, (result.status, result.reason)


def test_a_kind_the_runner_does_not_know_is_no_class_of_this_side():
    conn = trusted.Connection(-1, -1)
    conn.learn_kinds([[1, ["o", 0, [1, "builtins", "list"], ["builtins", "list"]]], [2, ["t", "list", 1, 0]]])
    conn.learn_kinds([[3, ["o", 0, [1, "datetime", "date"], None]], "junk", [4], [5, ["c", 0, None, 0, None]]])
    for handle in (1, 2, 3):
        stub = conn.proxy(handle)
        assert isinstance(stub, trusted.Remote)
        assert not isinstance(stub, (list, tuple, dict, str, int, bytes))
        assert conn.seen_type(stub) is not list
    assert not callable(conn.proxy(1))
    assert isinstance(conn.proxy(5), type) and conn.seen_type(conn.proxy(5)) is type
    # Every stub class is named Remote: no name the model chose is a class name of this side.
    assert {type(conn.proxy(handle)).__name__ for handle in (1, 2, 3, 5)} == {"Remote"}


def test_kinds_are_described_once_and_only_for_stubs():
    handles = untrusted.Handles()
    handles.add([1, 2], describe=False)  # a module-level value: fetched as plain data, if ever
    assert handles.kinds() is None

    def gen():
        yield 1

    first = handles.add(gen())
    described = handles.kinds()
    assert described is not None and described[0] == [first, ["t", "generator", described[0][1][2], 0]]
    assert handles.kinds() is None


# --- the reference: each shape here, as one process sees it ---------------------------------------------------------

REFERENCE_CASES = [
    (GENERATOR, GENERATOR_TESTS, PASSED),
    (MODEL_CLASSES, MODEL_CLASS_TESTS, PASSED),
    (RETURNED_EXCEPTION, RETURNED_EXCEPTION_TESTS, PASSED),
    (RETURNED_EXCEPTION_WRONG, RETURNED_EXCEPTION_TESTS, FAILED),
    (AUTOSPEC_CODE, AUTOSPEC_TESTS, PASSED),
    (DATACLASS, DATACLASS_TESTS, PASSED),
    (DATACLASS_WRONG, DATACLASS_TESTS, FAILED),
    (GENERATOR_WRONG, LAZY_TESTS, FAILED),
    (GENERATOR_AS_LIST, LAZY_TESTS, FAILED),
    (GENERATOR_AS_ITERATOR, LAZY_TESTS, FAILED),
    *((NAMED_LIKE_BUILTINS, _methods(line), FAILED) for line in NAMED_LIKE_BUILTINS_TESTS.values()),
]


@pytest.mark.parametrize("index", range(len(REFERENCE_CASES)))
def test_each_shape_agrees_with_one_process(index):
    code, tests, expected = REFERENCE_CASES[index]
    assert _one_process(code, tests) is expected


# --- doctor: a shape that now works is no longer flagged -----------------------------------------------------------


def test_doctor_no_longer_flags_kind_checks_that_work():
    for tests in (GENERATOR_TESTS, MODEL_CLASS_TESTS, DATACLASS_TESTS, RETURNED_EXCEPTION_TESTS, AUTOSPEC_TESTS):
        assert not [line for line in shape_findings(textwrap.dedent(tests)) if "stub" in line]


STILL_UNSEEN = """
import dataclasses
from dataclasses import replace as changed
class Meta(type):
    pass
class T(unittest.TestCase):
    def test(self):
        self.assertEqual(list(map(type, f(3))), [int])
        kind = type
        self.assertIs(kind(f(3)), list)
        self.assertEqual(changed(f(3), x=1).x, 1)
        self.assertEqual(type(f(3)).__name__, "P")
"""


def test_doctor_flags_the_kind_checks_the_runner_does_not_see():
    found = [line for line in shape_findings(textwrap.dedent(STILL_UNSEEN)) if "stub" in line]
    assert sorted(int(line.split(":", 1)[0].split()[-1]) for line in found) == [8, 9, 11], found
    assert all("inprocess" in line for line in found)
    assert not [line for line in shape_findings(textwrap.dedent(STILL_UNSEEN), "inprocess") if "stub" in line]


def test_the_wire_encodes_by_type_never_by_a_claimed_class():
    class Claims:
        __class__ = property(lambda self: list)  # a lie, as a model object may tell one

    assert isinstance(Claims(), list)
    with pytest.raises(wire.Unencodable):
        wire.encode(Claims())


# --- a failed assertion's diff is cheap in the runner ----------------------------------------------------------------

EXPENSIVE_DIFF_CODE = """
def f(n):
    return [f"item {i} " + "y" * 19 + "z" for i in range(n)]
def g(n):
    return "\\n".join(f"line {i} " + "x" * 19 + "z" for i in range(n))
def h(n):
    return {i: "v" * 30 + str(i) for i in range(n)}
"""
EXPENSIVE_DIFF_TESTS = """
class T(unittest.TestCase):
    maxDiff = None
    def test_list(self):
        self.assertEqual(f(400), [f"item {i} " + "y" * 20 for i in range(400)])
    def test_text(self):
        self.assertEqual(g(400), "\\n".join(f"line {i} " + "x" * 20 for i in range(400)))
    def test_dict(self):
        self.assertEqual(h(400), {i: "w" * 30 + str(i) for i in range(400)})
    def test_huge_list(self):
        self.assertListEqual(f(200_000), [])
"""


def test_an_expensive_failure_diff_is_cheap_and_still_fails(one_worker):
    # In one process each of the first three diffs costs about a minute of CPU (difflib is super-linear): three
    # minutes, against 30 s here (generous, for a loaded machine: 10 s of 20 left too little margin).
    started = time.monotonic()
    result = _run(one_worker, EXPENSIVE_DIFF_CODE, EXPENSIVE_DIFF_TESTS, timeout_s=60.0)
    assert result.status is FAILED and result.passed == 0 and result.total == 4, (result.status, result.reason)
    assert time.monotonic() - started < 30


def test_a_small_failure_diff_is_still_shown():
    assert "".join(trusted._bounded_ndiff(["a\n", "b\n"], ["a\n", "c\n"])) == "  a\n- b\n+ c\n"
    assert "left out" in "".join(trusted._bounded_ndiff(["x" * 100] * 100, ["y" * 100] * 100))
    assert trusted._bounded_pformat([1, [2, 3]]) == "[1, [2, 3]]"
    assert trusted._bounded_pformat(list(range(trusted.MAX_SHOWN_VALUES + 1))) == "(too large to show)"


def test_the_dataclasses_one_job_makes_the_runner_build_are_bounded():
    conn = trusted.Connection(-1, -1)
    conn.learn_kinds([[handle, ["o", 0, [1, None, None], None, [f"field{handle}"]]] for handle in range(2, 200)])
    stubs = [conn.proxy(handle) for handle in range(2, 200)]
    made = [stub for stub in stubs if "__dataclass_fields__" in vars(type(stub))]
    assert len(made) == trusted.MAX_DATACLASS_SHAPES
    assert len(conn.dataclass_shapes) == trusted.MAX_DATACLASS_SHAPES
