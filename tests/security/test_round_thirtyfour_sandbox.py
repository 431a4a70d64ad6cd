"""Round thirty-four, the sandbox: what the trusted runner pays for a value the model hands over.

A set of ints whose hashes are all equal (multiples of ``2**61 - 1``) costs whoever builds it one comparison per pair
of items: 20,000 of them kept the trusted runner decoding (in C, where the job's deadline cannot stop it) until the job
timed out and the runner was replaced. Decoding now counts the pairs of equal hashes among a set's items or a mapping's
keys before building it and refuses a reply with over ``wire.MAX_HASH_COLLISIONS`` of them (the model's failure, as a
reply over its value budget is): what decoding costs is linear in what the model sent.
"""

from __future__ import annotations

import fractions
import textwrap

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.runtime import wire
from rewardpipe.execution.shape_lint import shape_findings
from tests.security import test_round_thirtyone_sandbox as thirtyone

executor = thirtyone.executor  # (the fixture: every layer this host allows, then the Lambda/Fargate mode)

MODULUS = 2**61 - 1  # an int's hash is the int modulo this: its multiples all hash to 0


class _Counted:
    """An object whose hash is a constant and whose comparisons are counted (a model object that lies in its
    ``__hash__``, as its stub on the trusted side answers)."""

    equalities = 0

    def __hash__(self):
        return 7

    def __eq__(self, other):
        type(self).equalities += 1
        return self is other


def _colliding_ints(count: int) -> list:
    return [{"i": format(MODULUS * k, "x")} if (MODULUS * k).bit_length() > 53 else MODULUS * k for k in range(count)]


SHAPES = {
    "set": lambda items: {"s": items},
    "frozenset": lambda items: {"fs": items},
    "dict keys": lambda items: {"d": [[item, 0] for item in items]},
    "keys view": lambda items: {"dk": items},
    "Counter": lambda items: {"ctr": [[item, 1] for item in items]},
    "set in a list": lambda items: {"l": [1, {"s": items}]},
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_decoding_items_whose_hashes_are_equal_compares_within_a_budget(shape):
    # 800 objects with one hash: 319,600 comparisons to build the set; refused before any is made.
    _Counted.equalities = 0
    made = [_Counted() for _ in range(800)]
    tree = SHAPES[shape]([{"h": number} for number in range(len(made))])
    with pytest.raises(wire.ValueBudgetExceeded):
        wire.decode(tree, made.__getitem__)
    assert _Counted.equalities <= wire.MAX_HASH_COLLISIONS


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_ints_whose_hashes_are_equal_are_refused_as_over_the_budget(shape):
    tree = SHAPES[shape](_colliding_ints(3000))
    with pytest.raises(wire.ValueBudgetExceeded):
        wire.decode(tree)


def test_the_budget_is_for_the_whole_reply_not_each_container():
    # 40 sets of 40 colliding ints each: 780 pairs apiece, 31,200 in all.
    tree = {"l": [{"s": _colliding_ints(40)} for _ in range(40)]}
    with pytest.raises(wire.ValueBudgetExceeded):
        wire.decode(tree)


@pytest.mark.parametrize(
    "value",
    [
        set(range(5000)),
        frozenset(str(n) for n in range(5000)),
        {n: n for n in range(5000)},
        {-1, -2, *range(100)},  # (-1 and -2 hash alike: a few equal hashes are fine)
        {MODULUS * k for k in range(150)},  # 11,175 pairs: within
        {(n, str(n)): None for n in range(3000)}.keys(),
    ],
    ids=["ints", "strings", "dict", "minus one", "within the budget", "keys view"],
)
def test_values_within_the_budget_decode_as_they_were(value):
    assert wire.decode(wire.encode(value)) == value


def test_a_returned_set_of_colliding_ints_fails_and_the_runner_goes_on(executor):
    code = "def f(n):\n    return {(2**61 - 1) * k for k in range(n)}\n"
    tests = (
        "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n"
        "        self.assertEqual(len(f(20000)), 20000)\n"
    )
    result = thirtyone._run(executor, "colliding set", code, tests, entry_point="f")
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)
    assert "hashes are equal" in (result.reason or ""), result.reason
    right = thirtyone._run(executor, "small set", code, tests.replace("20000", "50"), entry_point="f")
    assert right.status is ExecutionStatus.PASSED, right.reason


# --- text and code objects the model chose, run in the trusted runner ------------------------------------------------
# Each runs ``__import__('os').getpid()`` from the model's text; equal to the runner's own pid, it ran in the runner.
CODE_MAKER = """
import marshal
EXPR = "__import__('os').getpid()"
def f(x):
    return x
def expr():
    return EXPR
def statement():
    return "R = " + EXPR
def code_bytes():
    return marshal.dumps(compile("R = " + EXPR, "<m>", "exec"))
def code_parts():
    code = compile(EXPR, "<m>", "eval")
    names = ("co_code", "co_consts", "co_names", "co_stacksize", "co_exceptiontable", "co_linetable")
    return {name: getattr(code, name) for name in names}
"""
CODE_RUNS = {
    "importlib's source_to_code": (
        "import importlib.machinery\n"
        "code = importlib.machinery.SourceFileLoader('m', 'm.py').source_to_code(statement(), 'm.py')\n"
        "space = {}\nexec(code, space)\nself.assertEqual(space['R'], os.getpid())"
    ),
    "importlib's _compile_bytecode": (
        "from importlib._bootstrap_external import _compile_bytecode\n"
        "space = {}\nexec(_compile_bytecode(code_bytes()), space)\nself.assertEqual(space['R'], os.getpid())"
    ),
    "code.replace": (
        "code = compile('0', '<t>', 'eval').replace(**code_parts())\nself.assertEqual(eval(code), os.getpid())"
    ),
    "FunctionType over a built code object": (
        "import types\ncode = compile('0', '<t>', 'eval').replace(**code_parts())\n"
        "self.assertEqual(types.FunctionType(code, {})(), os.getpid())"
    ),
    "dataclasses' private helper": (
        "import dataclasses\nmake = getattr(dataclasses, '_create_fn', None)\n"
        "if make is None:\n    self.skipTest('no _create_fn here')\n"
        "self.assertEqual(make('g', (), ['return ' + expr()], globals={})(), os.getpid())"
    ),
}


def _tests(body: str, imports: str = "import os, unittest") -> str:
    return f"{imports}\n\nclass T(unittest.TestCase):\n    def test_a(self):\n" + textwrap.indent(body, " " * 8) + "\n"


@pytest.mark.parametrize("name", sorted(CODE_RUNS))
def test_code_the_model_chose_never_runs_in_the_trusted_runner(executor, name):
    result = thirtyone._run(executor, name, CODE_MAKER, _tests(CODE_RUNS[name]), entry_point="f")
    assert result.status is ExecutionStatus.ERROR, (result.status, result.reason)
    assert "text that is not their own" in result.reason, result.reason


STANDARD_CODE = {
    "autospec by a decorator": (
        "from unittest import mock\n"
        "with mock.patch('os.getcwd', autospec=True) as fake:\n    fake.return_value = 'x'\n"
        "    self.assertEqual(os.getcwd(), 'x')\nself.assertEqual(f(2), 2)"
    ),
    "create_autospec": (
        "from unittest import mock\nspec = mock.create_autospec(os.path.join)\nspec('a', 'b')\n"
        "spec.assert_called_once_with('a', 'b')\nself.assertEqual(f(2), 2)"
    ),
    "a dataclass made here": (
        "import dataclasses\nBox = dataclasses.make_dataclass('Box', ['v'], frozen=True)\n"
        "self.assertEqual(Box(f(2)).v, 2)"
    ),
    "a namedtuple and a signature": (
        "import collections, inspect\nP = collections.namedtuple('P', 'a b')\n"
        "self.assertEqual(P(1, f(2)).b, 2)\nself.assertIn('obj', str(inspect.signature(len)))"
    ),
    "importing and reloading": (
        "import importlib, colorsys, typing\nimportlib.reload(colorsys)\nimport json.tool\n"
        "self.assertEqual(typing.get_type_hints(lambda: 0), {})\nself.assertEqual(f(2), 2)"
    ),
}


@pytest.mark.parametrize("name", sorted(STANDARD_CODE))
def test_the_standard_librarys_code_makers_entered_by_public_names_still_run(executor, name):
    result = thirtyone._run(executor, name, CODE_MAKER, _tests(STANDARD_CODE[name]), entry_point="f")
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


CODE_BUILDING_LINES = {
    "CodeType": "import types\ntypes.CodeType(0, 0, 0, 0, 0, 0, f(1), (), (), (), 't', 'g', 'g', 1, b'', b'', (), ())",
    "code.replace": "code = compile('0', 't', 'eval').replace(co_code=f(1))",
    "source_to_code": (
        "import importlib.machinery\nimportlib.machinery.SourceFileLoader('m', 'm').source_to_code(f(1), 'm')"
    ),
    "_compile_bytecode": "from importlib._bootstrap_external import _compile_bytecode\n_compile_bytecode(f(1))",
    "a string's replace (no finding)": "self.assertEqual(f('ab').replace('a', 'b'), 'bb')",
}


@pytest.mark.parametrize("name", sorted(CODE_BUILDING_LINES))
def test_doctor_names_tests_that_build_code_objects_in_the_runner(name):
    named = any("builds a code object" in item for item in shape_findings(_tests(CODE_BUILDING_LINES[name])))
    assert named is not name.endswith("(no finding)")


# --- what the tests read of the model's functions and classes, as in one process -------------------------------------
MODEL_CLASSES = """
import dataclasses
class Base:
    pass
@dataclasses.dataclass
class Point(Base):
    x: int
    y: int = 0
class Sub(Point):
    pass
def f(a: int, b: list[int], c: dict[str, tuple[int, ...]] | None = None) -> int | None:
    return a
def make(x):
    return Point(x)
"""
READS = {
    "a function's module": "self.assertEqual(f.__module__, 'solution')",
    "a class's module": "self.assertEqual(Point.__module__, 'solution')",
    "an instance's module": "self.assertEqual(make(1).__module__, 'solution')",
    "type hints of a function": (
        "import typing\nhints = typing.get_type_hints(f)\n"
        "self.assertEqual(hints, {'a': int, 'b': list[int], 'c': dict[str, tuple[int, ...]] | None, "
        "'return': int | None})"
    ),
    "a class's annotations": "self.assertEqual(Point.__annotations__, {'x': int, 'y': int})",
    "match args": "self.assertEqual(Point.__match_args__, ('x', 'y'))",
    "subclasses": "self.assertEqual([c.__name__ for c in Point.__subclasses__()], ['Sub'])",
}


@pytest.mark.parametrize("name", sorted(READS))
def test_what_the_tests_read_of_the_models_code_is_as_in_one_process(executor, name):
    result = thirtyone._run(executor, name, MODEL_CLASSES, _tests(READS[name]), entry_point="make")
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


def test_a_wrong_annotation_still_fails(executor):
    code = MODEL_CLASSES.replace("-> int | None", "-> int")
    result = thirtyone._run(executor, "wrong", code, _tests(READS["type hints of a function"]), entry_point="make")
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)


@pytest.mark.parametrize(
    "value",
    [list[int], dict[str, list[int]], tuple[int, ...], int | None, list[int] | str, type[int]],
    ids=str,
)
def test_type_expressions_cross_as_themselves(value):
    assert wire.decode(wire.encode(value)) == value


@pytest.mark.parametrize(
    "tree",
    [{"ut": [{"h": 0}, None]}, {"ut": [{"bi": "int"}]}, {"ga": [1, [{"bi": "int"}]]}, {"ga": [{"bi": "list"}, []]}],
    ids=["a model object in a union", "one member", "not a type", "no arguments"],
)
def test_a_malformed_type_expression_is_refused(tree):
    with pytest.raises(wire.WireError):
        wire.decode(tree, lambda _handle: object())


MATCH = "match make(0):\n    case Point(x=0):\n        pass\n    case _:\n        self.fail('no match')"


@pytest.mark.parametrize(
    "code", [MODEL_CLASSES, MODEL_CLASSES.replace("return Point(x)", "return Point(x + 1)")], ids=["right", "wrong"]
)
def test_a_class_pattern_naming_the_models_class_is_a_loud_error_whatever_the_answer(executor, code):
    result = thirtyone._run(executor, "match", code, _tests(MATCH), entry_point="make")
    assert result.status is ExecutionStatus.ERROR, (result.status, result.reason)
    assert "class pattern" in result.reason and "in-process fallback" in result.reason, result.reason


def test_the_models_own_type_error_with_that_message_is_its_failure(executor):
    code = "def make(x):\n    raise TypeError('called match pattern must be a type')\n"
    result = thirtyone._run(executor, "raised", code, _tests("make(0)"), entry_point="make")
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)


def test_the_tests_own_class_patterns_still_run(executor):
    tests = "class Own:\n    __match_args__ = ('v',)\n    def __init__(self, v):\n        self.v = v\n\n" + _tests(
        "match Own(make(0).x):\n    case Own(0):\n        pass\n    case _:\n        self.fail('no match')"
    ).replace("import os, unittest\n", "")
    result = thirtyone._run(executor, "own", MODEL_CLASSES, "import os, unittest\n" + tests, entry_point="make")
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


def test_doctor_names_a_class_pattern_naming_the_models_class():
    assert any("class pattern" in item for item in shape_findings(_tests(MATCH)))
    own = "class Point:\n    pass\n\n" + _tests(MATCH)
    assert not any("class pattern" in item for item in shape_findings(own))


def _fraction_tree(numerator: int, denominator: int) -> dict:
    return {"fr": [{"i": format(numerator, "x")}, {"i": format(denominator, "x")}]}


def test_fractions_too_long_to_reduce_are_refused_before_their_gcd():
    # Two parts of 2**20 bits: reducing them is 2**40 bits times bits, over the budget (minutes of the runner's CPU
    # at a reply's 16 MiB).
    odd = (1 << (1 << 20)) - 1
    with pytest.raises(wire.ValueBudgetExceeded):
        wire.decode(_fraction_tree(odd, odd - 2))
    # The budget is the reply's: many fractions of 2**17-bit parts come to it too.
    part = (1 << (1 << 17)) - 1
    with pytest.raises(wire.ValueBudgetExceeded):
        wire.decode({"l": [_fraction_tree(part, part - 2) for _ in range(20)]})


@pytest.mark.parametrize(
    "value",
    [
        fractions.Fraction(1, 3),
        sum(fractions.Fraction(1, k) for k in range(1, 2000)),  # a harmonic number: ~2,800 digits each part
        fractions.Fraction(3**100_000, 2),
    ],
    ids=["small", "harmonic", "a long numerator over a short denominator"],
)
def test_fractions_within_the_budget_cross_as_they_were(value):
    assert wire.decode(wire.encode(value)) == value
