"""Round thirty-three, the sandbox attacked again: text the model's code chose, run in the trusted runner.

The hidden tests run in the trusted runner, beside unittest and the verdict. Tests that ``eval(repr(p))`` (a common
check of a ``__repr__``), ``exec`` or ``compile`` a value, run the doctests of the model's function or ``pickle.loads``
what it returned ran the model's text there: a wrong answer whose ``__repr__`` replaced the runner's result methods
**passed**, and so did every later job of that runner, any task's and any answer's, until the runner was recycled (500
jobs). The runner now refuses to compile text the tests do not spell themselves while a job runs (a loud ``error``
naming the in-process fallback: the tests' shape, whatever the answer), and to unpickle any global but plain value
classes and the tests' own classes (the model's failure: the pickle is its output).
"""

from __future__ import annotations

import textwrap

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.shape_lint import shape_findings
from tests.security import test_round_thirtyone_sandbox as thirtyone

executor = thirtyone.executor  # (the fixture: every layer this host allows, then the Lambda/Fargate mode)


def _run(executor, name: str, code: str, tests: str):
    return thirtyone._run(executor, name, code, tests, entry_point="f")


def _assert_passes(executor, name: str, code: str, tests: str) -> None:
    result = _run(executor, name, code, tests)
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


def _tests(body: str, imports: str = "import unittest", before: str = "") -> str:
    return (
        f"{imports}\n{before}\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
        + textwrap.indent(textwrap.dedent(body), " " * 8)
        + "\n"
    )


# Text that makes every failure and error of this runner a success, for this job and every later one.
FORGE = (
    "[(C := __import__('rewardpipe.execution.runtime.harness', fromlist=['x']).CountingResult), "
    "setattr(C, 'addFailure', lambda s, t, e, C=C: C.addSuccess(s, t)), "
    "setattr(C, 'addError', lambda s, t, e, C=C: C.addSuccess(s, t)), 0][-1]"
)
WRONG_POINT = f"""
FORGE = {FORGE!r}
class Point:
    def __init__(self, x):
        self.x = x
    def __repr__(self):
        return FORGE
def f(x):
    '''>>> {FORGE}
    0
    '''
    return Point(x + 1)
def text(x):
    return FORGE
"""

TEXT_RUNS = {
    "eval of a repr": "p = f(3)\nself.assertEqual(eval(repr(p)), p)\nself.assertEqual(p.x, 3)",
    "exec of a result": "exec(text(3))\nself.assertEqual(f(3).x, 3)",
    "compile, then eval": "eval(compile(text(3), '<t>', 'eval'))\nself.assertEqual(f(3).x, 3)",
    "builtins.eval": "import builtins\nbuiltins.eval(repr(f(3)))\nself.assertEqual(f(3).x, 3)",
    "doctest of the function": "import doctest\ndoctest.run_docstring_examples(f, {})\nself.assertEqual(f(3).x, 3)",
}


@pytest.mark.parametrize("name", sorted(TEXT_RUNS))
def test_text_the_model_chose_never_runs_in_the_trusted_runner(executor, name):
    result = _run(executor, name, WRONG_POINT, _tests(TEXT_RUNS[name]))
    assert result.status is not ExecutionStatus.PASSED, (result.status, result.reason)
    assert result.passed == 0, result.reason
    # Nothing of it stayed in the runner: the next job's wrong answer fails.
    later = _run(executor, "later", "def f(x):\n    return -1\n", _tests("self.assertEqual(f(2), 4)"))
    assert later.status is ExecutionStatus.FAILED, (later.status, later.reason)


def test_evaluating_a_value_is_a_loud_error_naming_the_fallback_whatever_the_answer(executor):
    right = (
        "class Point:\n    def __init__(self, x):\n        self.x = x\n"
        "    def __repr__(self):\n        return f'Point({self.x})'\n"
    )
    result = _run(executor, "right", right + "def f(x):\n    return Point(x)\n", _tests(TEXT_RUNS["eval of a repr"]))
    assert result.status is ExecutionStatus.ERROR, (result.status, result.reason)
    assert "in-process fallback" in result.reason and "text that is not their own" in result.reason, result.reason


OWN_TEXT = {
    "eval of a literal": "self.assertEqual(eval('2 + 3'), f(5))",
    "exec of a literal": "space = {}\nexec('y = 5', space)\nself.assertEqual(space['y'], f(5))",
    "compile of a literal": "self.assertEqual(eval(compile('5', '<t>', 'eval')), f(5))",
    "literal_eval of the model's text": "import ast\nself.assertEqual(ast.literal_eval(repr([f(5)])), [5])",
    "timeit of a literal": (
        "import timeit\ntimeit.timeit('f(5)', globals=globals(), number=3)\nself.assertEqual(f(5), 5)"
    ),
}
OWN_MODULE_TEXT = (
    "import dataclasses, collections, typing\n"
    "@dataclasses.dataclass\nclass Box:\n    v: int\n"
    "Pair = collections.namedtuple('Pair', 'a b')\n"
    "Boxes = typing.List['Box']\n"
)


@pytest.mark.parametrize("name", sorted(OWN_TEXT))
def test_the_tests_own_text_still_runs(executor, name):
    _assert_passes(executor, name, "def f(x):\n    return x\n", _tests(OWN_TEXT[name]))


def test_the_standard_librarys_generated_code_still_runs(executor):
    body = (
        "self.assertEqual(Box(f(2)).v, 2)\nself.assertEqual(Pair(1, f(2)).b, 2)\n"
        "self.assertEqual(typing.get_type_hints(Box), {'v': int})"
    )
    result = _run(executor, "generated", "def f(x):\n    return x\n", _tests(body, before=OWN_MODULE_TEXT))
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


UNPICKLE = "import pickle\nself.assertEqual(pickle.loads(f(3)), {expected})"


def test_a_pickle_the_model_chose_runs_nothing_in_the_runner(executor):
    evil = (
        "import pickle\nFORGE = " + repr(FORGE) + "\n"
        "class E:\n    def __reduce__(self):\n        return (eval, (FORGE,))\n"
        "def f(x):\n    return pickle.dumps(E())\n"
    )
    result = _run(executor, "pickle", evil, _tests(UNPICKLE.format(expected=4)))
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)
    assert "refuses" in result.reason, result.reason
    later = _run(executor, "later", "def f(x):\n    return -1\n", _tests("self.assertEqual(f(2), 4)"))
    assert later.status is ExecutionStatus.FAILED, (later.status, later.reason)


@pytest.mark.parametrize("protocol", [0, 2, 5])
def test_pickles_of_plain_values_still_load(executor, protocol):
    code = (
        "import pickle, datetime, collections, decimal\n"
        "def f(x):\n    return pickle.dumps([datetime.date(2020, 1, x), collections.OrderedDict(a=x), {x}, b'x', "
        f"bytearray(b'y'), decimal.Decimal('1.5'), frozenset([x]), 2 ** 70, (x, 1.5)], protocol={protocol})\n"
    )
    expected = (
        "[datetime.date(2020, 1, 3), collections.OrderedDict(a=3), {3}, b'x', bytearray(b'y'), decimal.Decimal('1.5'), "
        "frozenset([3]), 2 ** 70, (3, 1.5)]"
    )
    tests = _tests(UNPICKLE.format(expected=expected), "import unittest, datetime, collections, decimal")
    result = _run(executor, "plain", code, tests)
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


def test_the_tests_own_classes_still_unpickle(executor):
    before = "import pickle\nclass Box:\n    def __init__(self, v):\n        self.v = v\n"
    body = "self.assertEqual(pickle.loads(pickle.dumps(Box(f(2)))).v, 2)"
    result = _run(executor, "own class", "def f(x):\n    return x\n", _tests(body, before=before))
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


@pytest.mark.parametrize(
    "line",
    [
        "self.assertEqual(eval(repr(f(3))), f(3))",
        "exec(f(3))",
        "import builtins\nbuiltins.compile(f(3), 't', 'eval')",
        "import doctest\ndoctest.run_docstring_examples(f, {})",
        "import pickle\npickle.loads(f(3))",
        "from pickle import loads\nloads(f(3))",
    ],
    ids=["eval", "exec", "compile", "doctest", "pickle", "pickle by name"],
)
def test_doctor_names_tests_that_run_text_or_pickles_in_the_runner(line):
    found = shape_findings(_tests(line))
    assert any("trusted runner under split trust" in item for item in found), found


def test_doctor_leaves_literal_text_and_in_process_tests_alone():
    tests = _tests("self.assertEqual(eval('2 + 3'), f(5))\nexec('x = 1')")
    assert not any("trusted runner under split trust" in item for item in shape_findings(tests))
    tests = _tests("import pickle\npickle.loads(f(3))")
    assert not any("trusted runner" in item for item in shape_findings(tests, trust_mode="inprocess"))


# Round thirty-three, the tests users write: what the tests read of the model's functions and classes, and operators
# between two of its objects, that a right answer failed on (AttributeError, TypeError) under split trust.
MODEL_CLASSES = """
import abc, enum
class Color(enum.Enum):
    RED = 1
    GREEN = 2
class Num:
    def __init__(self, v):
        self.v = v
    def __divmod__(self, other):
        return (self.v // other.v, self.v % other.v)
    def __ifloordiv__(self, other):
        self.v //= other.v
        return self
    def __imod__(self, other):
        self.v %= other.v
        return self
    def __itruediv__(self, other):
        self.v /= other.v
        return self
class Shape(abc.ABC):
    @abc.abstractmethod
    def area(self): ...
def f(a, b=10, *, c=3):
    return Color.RED
"""
READS = {
    "an enum's members": (
        "self.assertEqual(list(Color.__members__), ['RED', 'GREEN'])\nself.assertIs(Color.__members__['RED'], f(1))\n"
        "self.assertIn('GREEN', Color.__members__)"
    ),
    "divmod of two objects": "self.assertEqual(divmod(Num(7), Num(2)), (3, 1))",
    "in-place operators": (
        "a = Num(7)\nb = a\na //= Num(2)\nself.assertIs(a, b)\nself.assertEqual(b.v, 3)\na %= Num(2)\n"
        "self.assertEqual(b.v, 1)\na /= Num(2)\nself.assertEqual(b.v, 0.5)"
    ),
    "abstract methods": "self.assertEqual(Shape.__abstractmethods__, frozenset({'area'}))",
    "a function's defaults": "self.assertEqual(f.__defaults__, (10,))\nself.assertEqual(f.__kwdefaults__, {'c': 3})",
}


@pytest.mark.parametrize("name", sorted(READS))
def test_what_the_tests_read_of_the_models_classes_is_its_own(executor, name):
    _assert_passes(executor, name, MODEL_CLASSES, _tests(READS[name]))


def test_a_wrong_in_place_operator_still_fails(executor):
    wrong = MODEL_CLASSES.replace("self.v //= other.v\n        return self", "return Num(self.v // other.v)")
    result = _run(executor, "wrong", wrong, _tests(READS["in-place operators"]))
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)


# Round thirty-three: a NaN's sign and payload crossed as the one JSON ``NaN``, so a right answer to a task about the
# bits of a float failed (and the tests' own NaN of another sign reached the model's code as the usual one).
FROM_BITS = "import struct\ndef f(bits):\n    return struct.unpack('<d', struct.pack('<Q', bits))[0]\n"
NAN_BITS = {
    "a negative NaN": "import math\nself.assertEqual(math.copysign(1.0, f(0xFFF8000000000000)), -1.0)",
    "a NaN's payload": (
        "import struct\nself.assertEqual(struct.pack('<d', f(0x7FF8000000000001)).hex(), '010000000000f87f')"
    ),
    "the usual NaN is math.nan": "import math\nself.assertIs(f(0x7FF8000000000000), math.nan)",
}


@pytest.mark.parametrize("name", sorted(NAN_BITS))
def test_a_nan_crosses_with_its_bits(executor, name):
    _assert_passes(executor, name, FROM_BITS, _tests(NAN_BITS[name]))


def test_the_tests_nan_reaches_the_model_with_its_sign(executor):
    body = "import math\nself.assertEqual(f(-math.nan)[0], -1.0)\nself.assertEqual(f([-math.nan])[0], -1.0)"
    code = "import math\ndef f(x):\n    y = x[0] if isinstance(x, list) else x\n    return [math.copysign(1.0, y)]\n"
    _assert_passes(executor, "to the model", code, _tests(body))


def test_a_nan_in_long_lists_and_a_complex_keeps_its_bits(executor):
    # (a list of 16 scalars or more is looked at in C first: numbers alone, then scalars of several kinds)
    code = (
        "import struct\nNEG = struct.unpack('<d', struct.pack('<Q', 0xFFF8000000000000))[0]\n"
        "def f(n):\n    return [*map(float, range(n)), 7, NEG], [*(['a', None, 1.5] * n), NEG], complex(NEG, 1)\n"
    )
    body = (
        "import math\nnumbers, mixed, pair = f(30)\nself.assertEqual(math.copysign(1.0, numbers[-1]), -1.0)\n"
        "self.assertEqual(math.copysign(1.0, pair.real), -1.0)\n"
        "self.assertEqual(math.copysign(1.0, mixed[-1]), -1.0)\nself.assertEqual(numbers[:3], [0.0, 1.0, 2.0])"
    )
    _assert_passes(executor, "long lists", code, _tests(body))
