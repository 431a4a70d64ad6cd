"""Round eight: test shapes that split trust scored wrongly, each checked against plain unittest with the code and
the tests in one process (the reference), plus the forged-pass probes of this round that already held.

* Class 5, correct code scored 0 silently: the model's code (and the hidden tests) were compiled with the runtime
  modules' own ``from __future__ import annotations``, so annotations were strings; ``copy.copy`` of a model
  object made a broken stub; ``inspect.signature`` of a model function was the stub's ``(*args, **kwargs)``;
  pickling a model object (which cannot be carried) was a silent ``failed`` rather than a loud ``error``.
"""

from __future__ import annotations

import textwrap

import pytest

from rewardpipe.execution import ExecutionJob, ExecutionStatus
from rewardpipe.execution.runtime import trusted, untrusted
from rewardpipe.execution.shape_lint import shape_findings
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


# --- copy, deepcopy and pickle of a model object -------------------------------------------------------------------

COPY_CODE = """
class Box:
    def __init__(self, x):
        self.items = [x]
    def add(self, y):
        self.items.append(y)
def f(x):
    return Box(x)
"""
COPY_TESTS = """
import copy
class T(unittest.TestCase):
    def test(self):
        box = f(3)
        shallow, deep = copy.copy(box), copy.deepcopy(box)
        self.assertEqual(shallow.items, [3])
        self.assertEqual(deep.items, [3])
        box.add(4)
        self.assertEqual(shallow.items, [3, 4])  # a shallow copy shares the list
        self.assertEqual(deep.items, [3])
        self.assertEqual(copy.deepcopy([box])[0].items, [3, 4])
        self.assertIsNot(shallow, box)
"""
COPY_WRONG = COPY_CODE.replace("self.items = [x]", "self.items = [x + 1]")
PICKLE_TESTS = """
import pickle
class T(unittest.TestCase):
    def test(self):
        self.assertEqual(pickle.loads(pickle.dumps(f(3))).items, [3])
"""


def test_a_model_object_is_copied_where_it_lives(one_worker):
    assert _run(one_worker, COPY_CODE, COPY_TESTS).status is PASSED
    wrong = _run(one_worker, COPY_WRONG, COPY_TESTS)
    assert wrong.status is FAILED and wrong.passed == 0, wrong.reason


def test_pickling_a_model_object_is_an_error_naming_the_fallback(one_worker):
    result = _run(one_worker, COPY_CODE, PICKLE_TESTS)
    assert result.status is ERROR, (result.status, result.reason)
    assert "inprocess" in result.reason and "pickle" in result.reason
    assert not result.model_fault


def test_pickling_plain_results_still_works(one_worker):
    tests = """
    import pickle
    class T(unittest.TestCase):
        def test(self):
            self.assertEqual(pickle.loads(pickle.dumps(f([1, (2,)]))), [1, (2,)])
    """
    assert _run(one_worker, PLAIN_F, tests).status is PASSED


def test_doctor_flags_pickling_in_the_tests():
    found = [line for line in shape_findings(textwrap.dedent(PICKLE_TESTS)) if "pickle" in line]
    assert len(found) == 1 and "inprocess" in found[0], found
    inprocess = shape_findings(textwrap.dedent(PICKLE_TESTS), trust_mode="inprocess")
    assert not [line for line in inprocess if "pickle" in line]


ALIASED_SHAPES = {
    "from pickle import dumps": ("from pickle import dumps\n", "dumps(f(3))", "pickle"),
    "import pickle as pk": ("import pickle as pk\n", "pk.dumps(f(3))", "pickle"),
    "from pickle import Pickler as P": (
        "import io\nfrom pickle import Pickler as P\n",
        "P(io.BytesIO()).dump(f(3))",
        "pickle",
    ),
    "from decimal import setcontext as sc": ("from decimal import setcontext as sc\n", "sc(None)", "decimal context"),
    "from os import environ as env": ("from os import environ as env\n", "env['TZ'] = 'UTC'", "environment"),
    "import os as o": ("import os as o\n", "o.chdir('/')", "working directory"),
}


@pytest.mark.parametrize("case", sorted(ALIASED_SHAPES))
def test_doctor_sees_through_an_imported_alias(case):
    """The doctor's findings of a dotted name (pickle.dumps, decimal.setcontext, os.environ) held only where the tests
    spelt it out: imported under another name, the same call went unflagged."""
    imports, statement, finding = ALIASED_SHAPES[case]
    tests = f"{imports}import unittest\nclass T(unittest.TestCase):\n    def test_it(self):\n        {statement}\n"
    assert [line for line in shape_findings(tests) if finding in line], shape_findings(tests)


def test_an_alias_of_another_module_is_not_flagged():
    tests = (
        "from json import dumps\nfrom secrets import choice as seed\nimport unittest\n"
        "class T(unittest.TestCase):\n    def test_it(self):\n        dumps(f(3))\n        seed('ab')\n"
    )
    assert not [line for line in shape_findings(tests) if "pickle" in line or "random" in line]


# --- inspect.signature of the model's callables --------------------------------------------------------------------

SIGNATURE_CODE = """
def f(x: int, y=2, *, z: "str" = "a") -> list:
    return x
class Acc:
    def __init__(self, start=0):
        self.v = start
    def add(self, n):
        self.v += n
        return self.v
"""
SIGNATURE_TESTS = """
import inspect
class T(unittest.TestCase):
    def test(self):
        sig = inspect.signature(f)
        self.assertEqual(list(sig.parameters), ["x", "y", "z"])
        self.assertEqual(sig.parameters["y"].default, 2)
        self.assertIs(sig.parameters["x"].annotation, int)
        self.assertEqual(sig.parameters["z"].kind, inspect.Parameter.KEYWORD_ONLY)
        self.assertIs(sig.return_annotation, list)
        self.assertEqual(str(sig), "(x: int, y=2, *, z: 'str' = 'a') -> list")
        self.assertEqual(list(inspect.signature(Acc).parameters), ["start"])
        self.assertEqual(list(inspect.signature(Acc(1).add).parameters), ["n"])
"""
SIGNATURE_WRONG = SIGNATURE_CODE.replace("def f(x: int, y=2,", "def f(x: int, y=3,")


def test_the_signature_of_a_model_function_is_its_own(one_worker):
    result = _run(one_worker, SIGNATURE_CODE, SIGNATURE_TESTS)
    assert result.status is PASSED, result.reason
    wrong = _run(one_worker, SIGNATURE_WRONG, SIGNATURE_TESTS)
    assert wrong.status is FAILED and wrong.passed == 0, wrong.reason


@pytest.mark.parametrize(
    "described",
    [
        None,
        [[["x", 9, False, None, False, None]], False, None],
        [[["not an identifier", 1, False, None, False, None]], False, None],
        [[["x", 1, True, 1, False, None], ["y", 1, False, None, False, None]], False, None],  # default before none
        [[[1, 1, False, None, False, None]], False, None],
        "text",
    ],
)
def test_a_forged_signature_is_a_remote_error(described):
    with pytest.raises(trusted.RemoteError):
        trusted._rebuilt_signature(described)


# --- module-level names of the model's code with dunder names -------------------------------------------------------

DUNDER_CODE = "__all__ = ['f']\n__version__ = '1.2'\ndef f(x):\n    return x\n"
DUNDER_TESTS = """
class T(unittest.TestCase):
    def test(self):
        self.assertEqual(__all__, ["f"])
        self.assertEqual(__version__, "1.2")
        self.assertEqual(f(1), 1)
"""


def test_the_models_all_and_version_reach_the_tests(one_worker):
    assert _run(one_worker, DUNDER_CODE, DUNDER_TESTS).status is PASSED
    wrong = _run(one_worker, DUNDER_CODE.replace("1.2", "1.3"), DUNDER_TESTS)
    assert wrong.status is FAILED and wrong.passed == 0, wrong.reason
    missing = _run(one_worker, PLAIN_F, DUNDER_TESTS)
    assert missing.status is FAILED and missing.passed == 0, missing.reason


def test_module_machinery_is_never_the_models():
    exports = untrusted.describe_exports(
        {"__builtins__": {}, "__spec__": None, "__getattr__": len, "__all__": [], "f": len}, untrusted.Handles()
    )
    assert sorted(exports) == ["__all__", "f"]


# --- shapes left open in round eight (what kind of object a model value is saw the stub): round nine serves them,
# so doctor no longer flags them (tests/security/test_round_nine_shapes.py runs them) ---------------------------------

TYPE_OF_MODEL_OBJECT = """
import collections.abc, inspect, types
class T(unittest.TestCase):
    def test(self):
        self.assertIsInstance(f(3), types.GeneratorType)
        self.assertTrue(inspect.isfunction(f))
        self.assertFalse(callable(f(3)))
        self.assertEqual(type(f(3)).__name__, "generator")
        self.assertIsInstance(f(3), (list, collections.abc.Iterator))
"""


def test_doctor_no_longer_flags_checks_of_what_kind_a_model_object_is():
    assert not [line for line in shape_findings(textwrap.dedent(TYPE_OF_MODEL_OBJECT)) if "stub" in line]


# --- forged-pass probes of this round: each already held on main (a model's failure, never a pass) --------------

HELD = {
    "keyboardinterrupt-from-hash-during-dict-compare": (
        "class X:\n    def __eq__(self, o): raise AssertionError\n    def __hash__(self): raise KeyboardInterrupt\n"
        "def f(x):\n    return X()\n",
        """
        class T(unittest.TestCase):
            def test(self):
                self.assertEqual({f(1): 1}, {3: 1})
        """,
    ),
    "systemexit-mid-iteration": (
        "class X:\n    def __iter__(self):\n        yield 1\n        raise SystemExit(0)\ndef f(x):\n    return X()\n",
        """
        class T(unittest.TestCase):
            def test(self):
                self.assertEqual(list(f(1)), [1, 2])
        """,
    ),
    "generatorexit-raised": (
        "def f(x):\n    raise GeneratorExit('x')\n",
        """
        class T(unittest.TestCase):
            def test(self):
                self.assertEqual(f(1), 2)
        """,
    ),
    "keyboardinterrupt-in-a-cleanup": (
        "def f(x):\n    raise KeyboardInterrupt\n",
        """
        class T(unittest.TestCase):
            def setUp(self):
                self.addCleanup(f, 1)
            def test(self):
                self.assertEqual(1, 1)
        """,
    ),
    "class-context-exit-raises": (
        "class C:\n    def __enter__(self): return 1\n    def __exit__(self, *a): raise ValueError('x')\n"
        "def f(x):\n    return C()\n",
        """
        class T(unittest.TestCase):
            @classmethod
            def setUpClass(cls):
                cls.v = cls.enterClassContext(f(1))
            def test(self):
                self.assertEqual(self.v, 1)
        """,
    ),
    "model-raises-skiptest": (
        "import unittest\ndef f(x):\n    raise unittest.SkipTest('no')\n",
        """
        class T(unittest.TestCase):
            def test(self):
                self.assertEqual(f(1), 2)
        """,
    ),
    "systemexit-in-a-subtest": (
        "def f(x):\n    if x == 2:\n        raise SystemExit\n    return x\n",
        """
        class T(unittest.TestCase):
            def test(self):
                for i in range(3):
                    with self.subTest(i=i):
                        self.assertEqual(f(i), i)
        """,
    ),
    "bool-raises-keyboardinterrupt": (
        "class X:\n    def __bool__(self): raise KeyboardInterrupt\ndef f(x):\n    return X()\n",
        """
        class T(unittest.TestCase):
            def test(self):
                self.assertFalse(f(1))
        """,
    ),
}


@pytest.mark.parametrize("name", sorted(HELD))
def test_forged_pass_probes_fail(one_worker, name):
    code, tests = HELD[name]
    result = _run(one_worker, code, tests)
    assert result.status is FAILED and result.passed == 0, (result.status, result.reason)


# --- the reference: each shape made to work here passes in one process (``_one_process`` of round seven) -----------

REFERENCE_CASES = [
    (ANNOTATED_CODE, ANNOTATED_TESTS, PASSED),
    (PLAIN_F, TESTS_ANNOTATION, PASSED),
    (COPY_CODE, COPY_TESTS, PASSED),
    (COPY_WRONG, COPY_TESTS, FAILED),
    (COPY_CODE, PICKLE_TESTS, PASSED),
    (SIGNATURE_CODE, SIGNATURE_TESTS, PASSED),
    (SIGNATURE_WRONG, SIGNATURE_TESTS, FAILED),
    (DUNDER_CODE, DUNDER_TESTS, PASSED),
]


@pytest.mark.parametrize("index", range(len(REFERENCE_CASES)))
def test_each_shape_agrees_with_one_process(index):
    code, tests, expected = REFERENCE_CASES[index]
    assert _one_process(code, tests) is expected
