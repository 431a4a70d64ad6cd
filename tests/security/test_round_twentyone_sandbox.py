"""Round twenty-one: the sandbox, attacked through the public executor as the model would.

* A wrong answer chose the loud ``error`` for its 0 (excluded from GRPO) by declaring a class the tests construct and
  hand back to its code as an exception subclass. Tests such as ``assertEqual(area(Circle(2)), 12)`` read ``Circle``
  from the model's namespace: a plain class is a stub (the call runs in the model's process and the instance crosses
  as its handle), but an exception class is rebuilt here as a local copy (so ``assertRaises`` works), and an instance
  of it could not cross back: "the hidden tests need the in-process fallback". ``class Circle(Exception): pass`` with
  a wrong ``area`` was an ``error`` where the same wrong ``area`` with a plain class was ``failed``; so was
  ``from statistics import StatisticsError as Circle``. Such an instance is now made again where its class lives,
  from its args, and is the tests' own object whenever the model's code hands it back.
* The same choice, the other way round: tests that subclass a class of the model's they use as an exception
  (``class Strict(AppError)`` beside ``assertRaises(AppError)``) work with a right answer's exception class (a local
  class here), and a wrong answer that declared ``class AppError: pass`` (a stub, which cannot be subclassed across
  the boundary) made the run the loud "in-process fallback" ``error``. Where the tests use the name as an exception
  class (caught, raised, handed to ``assertRaises``), subclassing a stub of it is the model's failure.
* A view of a value the model's code returned, handed back by the tests (``report(tally(s).items())``): a plain dict's
  view crosses, an ``OrderedDict``'s (``odict_items``, a type of its own) could not, so a wrong answer returning an
  empty ``OrderedDict`` made its 0 the loud "in-process fallback" ``error``. An OrderedDict's views cross as a dict's,
  in its own order. Likewise ``type(result)`` handed back (``name_of(type(make()))``): ``dict`` crossed by name, a
  wrong answer's ``OrderedDict`` class could not; the standard classes whose values the wire carries now cross by name.
"""

from __future__ import annotations

import textwrap

import pytest

from rewardpipe.execution import ExecutionJob, ExecutionStatus

CONSTRUCTS_AND_HANDS_BACK = textwrap.dedent("""
    import unittest

    class TestArea(unittest.TestCase):
        def test_two(self):
            self.assertEqual(area(Circle(2)), 12)

        def test_one(self):
            self.assertEqual(area(Circle(1)), 3)
""")


def _area_job(code: str, tests: str = CONSTRUCTS_AND_HANDS_BACK) -> ExecutionJob:
    return ExecutionJob(code=textwrap.dedent(code), tests=tests, entry_point="area", timeout_s=5.0)


@pytest.mark.parametrize(
    "declared",
    [
        "class Circle(Exception):\n    pass\n",
        "class Circle(ValueError):\n    def __init__(self, r):\n        super().__init__(r)\n",
        "from statistics import StatisticsError as Circle\n",
    ],
    ids=["exception-subclass", "builtin-base-with-init", "reexported-standard-exception"],
)
def test_a_wrong_answer_cannot_make_its_zero_an_error_by_declaring_an_exception_class(executor, declared):
    """Before: ``error`` ("the hidden tests need the in-process fallback (a Circle cannot be passed to the model's
    code ...)"), for every one of these wrong answers; a plain class with the same wrong ``area`` was ``failed``."""
    result = executor.run(_area_job(declared + "def area(c):\n    return 0\n"))
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)
    assert result.passed == 0 and result.total == 2
    assert "in-process fallback" not in result.reason


def test_a_right_answer_with_an_exception_class_the_tests_construct_passes(executor):
    """The instance is made where its class lives: the model's own ``__init__`` ran on the tests' args."""
    right = """
        class Circle(Exception):
            def __init__(self, r):
                super().__init__(r)
                self.r = r

        def area(c):
            return 3 * c.r * c.r
    """
    result = executor.run(_area_job(right))
    assert result.status is ExecutionStatus.PASSED, result.reason


HANDS_BACK_ITS_EXCEPTIONS = textwrap.dedent("""
    import unittest

    class TestOops(unittest.TestCase):
        def test_made_by_the_tests(self):
            e = Oops(5)
            self.assertIs(same(e), e)
            self.assertIs(same([e])[0], e)

        def test_caught(self):
            try:
                boom()
            except Oops as caught:
                self.assertEqual(describe(caught), "oops 7")
""")


def test_an_exception_of_the_models_class_crosses_back_as_itself(executor):
    """Made by the tests or raised by the model's code and caught, then handed to its code: before, a loud ``error``
    for a right answer too; now the model's code gets an instance of its class, and the tests their own object back."""
    code = textwrap.dedent("""
        class Oops(ValueError):
            pass

        def same(x):
            return x

        def boom():
            raise Oops(7)

        def describe(e):
            return f"oops {e.args[0]}" if isinstance(e, Oops) else "not mine"
    """)
    result = executor.run(ExecutionJob(code=code, tests=HANDS_BACK_ITS_EXCEPTIONS, entry_point="same", timeout_s=5.0))
    assert result.status is ExecutionStatus.PASSED, result.reason


def test_a_class_that_makes_no_object_of_its_own_is_the_models_failure(executor):
    """An exception class of the model's whose construction returns something else (a ``__new__`` returning plain
    data): the instance the tests made cannot stand for anything there, the test fails (never the loud error)."""
    code = """
        class Circle(Exception):
            def __new__(cls, *args):
                return 5

        def area(c):
            return 12
    """
    result = executor.run(_area_job(code))
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)
    assert result.passed == 0


SUBCLASSES_ITS_EXCEPTION = textwrap.dedent("""
    import unittest

    class Strict(AppError):
        pass

    class TestDouble(unittest.TestCase):
        def test_double(self):
            self.assertEqual(double(2), 4)

        def test_negative(self):
            with self.assertRaises(AppError):
                double(-1)
""")
SUBCLASSES_IT_IN_A_TEST = textwrap.dedent("""
    import unittest

    class TestDouble(unittest.TestCase):
        def test_double(self):
            self.assertEqual(double(2), 4)

        def test_negative(self):
            class Strict(AppError):
                pass

            try:
                double(-1)
            except (KeyError, AppError):
                return
            self.fail("no error")
""")


@pytest.mark.parametrize(
    "tests", [SUBCLASSES_ITS_EXCEPTION, SUBCLASSES_IT_IN_A_TEST], ids=["module-level", "in-a-test"]
)
def test_a_wrong_answer_cannot_make_its_zero_an_error_by_declaring_no_exception_class(executor, tests):
    """Before: ``error`` ("the hidden tests need the in-process fallback (the hidden tests subclass a class of the
    model's code)") for the wrong answer below, where a right answer passed and the same wrong ``double`` with an
    exception class failed."""
    right = (
        "class AppError(Exception):\n    pass\n\n"
        "def double(x):\n    if x < 0:\n        raise AppError(x)\n    return 2 * x\n"
    )
    wrong = "class AppError:\n    pass\n\ndef double(x):\n    return 0\n"
    passed = executor.run(ExecutionJob(code=right, tests=tests, entry_point="double", timeout_s=5.0))
    assert passed.status is ExecutionStatus.PASSED, passed.reason
    result = executor.run(ExecutionJob(code=wrong, tests=tests, entry_point="double", timeout_s=5.0))
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)
    assert result.passed == 0 and result.total == 2


def test_subclassing_a_plain_class_of_the_models_still_needs_the_fallback(executor):
    """Tests that subclass a class they do not use as an exception (``class Square(Shape)``) stay the loud ``error``:
    a right answer's plain class cannot be subclassed across the boundary."""
    tests = textwrap.dedent("""
        import unittest

        class Square(Shape):
            def area(self):
                return 4

        class TestShape(unittest.TestCase):
            def test_total(self):
                self.assertEqual(total([Square()]), 4)
    """)
    code = "class Shape:\n    def area(self):\n        raise NotImplementedError\n\ndef total(xs):\n    return 4\n"
    result = executor.run(ExecutionJob(code=code, tests=tests, entry_point="total", timeout_s=5.0))
    assert result.status is ExecutionStatus.ERROR, (result.status, result.reason)
    assert "subclass a class of the model's code" in result.reason


HANDS_BACK_A_VIEW = textwrap.dedent("""
    import unittest

    class TestReport(unittest.TestCase):
        def test_items(self):
            self.assertEqual(report(tally("aab").items()), "a=2,b=1")

        def test_keys_and_values(self):
            self.assertEqual(join(tally("ba").keys(), tally("ba").values()), "b=1,a=1")
""")


@pytest.mark.parametrize("mapping", ["dict", "OrderedDict"])
def test_a_view_of_the_models_ordered_dict_crosses_back(executor, mapping):
    """Before: the wrong answer returning an empty OrderedDict was ``error`` ("a odict_items cannot be passed to the
    model's code"), the one returning an empty dict ``failed``; a right answer returning an OrderedDict was the error
    too."""
    right = f"""
        from collections import OrderedDict

        def tally(s):
            counts = {mapping}()
            for c in s:
                counts[c] = counts.get(c, 0) + 1
            return counts

        def report(items):
            return ",".join(f"{{k}}={{v}}" for k, v in items)

        def join(keys, values):
            return report(zip(keys, values))
    """
    wrong = f"from collections import OrderedDict\n\ndef tally(s):\n    return {mapping}()\n\n"
    wrong += "def report(items):\n    return ''\n\ndef join(keys, values):\n    return ''\n"
    passed = executor.run(ExecutionJob(code=textwrap.dedent(right), tests=HANDS_BACK_A_VIEW, entry_point="report"))
    assert passed.status is ExecutionStatus.PASSED, passed.reason
    failed = executor.run(ExecutionJob(code=wrong, tests=HANDS_BACK_A_VIEW, entry_point="report"))
    assert failed.status is ExecutionStatus.FAILED, (failed.status, failed.reason)
    assert failed.passed == 0 and failed.total == 2


def test_a_standard_exception_its_args_cannot_make_again_stays_the_loud_error(executor):
    """A ``json.JSONDecodeError`` the tests made, handed to a right answer that re-exports the class: its args alone do
    not make it again, so it cannot cross and the run stays the loud ``error`` it was (never a right answer's 0)."""
    tests = textwrap.dedent("""
        import unittest

        class TestDescribe(unittest.TestCase):
            def test_describe(self):
                self.assertEqual(describe(JSONDecodeError("bad", "doc", 0)), "bad")
    """)
    code = "from json import JSONDecodeError\n\ndef describe(e):\n    return e.msg\n"
    result = executor.run(ExecutionJob(code=code, tests=tests, entry_point="describe", timeout_s=5.0))
    assert result.status is ExecutionStatus.ERROR, (result.status, result.reason)
    assert "JSONDecodeError cannot be passed" in result.reason


HANDS_BACK_ITS_TYPE = textwrap.dedent("""
    import collections
    import unittest

    class TestKind(unittest.TestCase):
        def test_name(self):
            self.assertEqual(name_of(type(make())), "dict")

        def test_class_returned(self):
            self.assertIs(kind(), dict)
""")


@pytest.mark.parametrize("made", ["collections.OrderedDict()", "collections.deque()", "decimal.Decimal(1)"])
def test_the_type_of_a_wrong_answers_result_crosses_back(executor, made):
    """Before: ``error`` ("a type cannot be passed to the model's code"); a wrong answer returning ``[]`` failed."""
    code = f"import collections, decimal\n\ndef make():\n    return {made}\n\n"
    code += "def name_of(t):\n    return ''\n\ndef kind():\n    return type(make())\n"
    result = executor.run(ExecutionJob(code=code, tests=HANDS_BACK_ITS_TYPE, entry_point="make", timeout_s=5.0))
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)
    assert result.passed == 0 and result.total == 2


def test_the_standard_value_classes_cross_as_themselves(executor):
    """Both ways, by name: the tests get the class itself (``assertIs``), and the model's code the tests' one."""
    tests = textwrap.dedent("""
        import collections
        import fractions
        import unittest

        class TestKind(unittest.TestCase):
            def test_returned(self):
                self.assertIs(kind(), collections.OrderedDict)
                self.assertIs(ratio(), fractions.Fraction)
                self.assertEqual(kind()(a=1), {"a": 1})

            def test_handed_over(self):
                self.assertEqual(name_of(type(kind()())), "OrderedDict")
                self.assertEqual(name_of(collections.deque), "deque")
    """)
    code = textwrap.dedent("""
        import collections
        import fractions

        def kind():
            return collections.OrderedDict

        def ratio():
            return fractions.Fraction

        def name_of(cls):
            return cls.__name__
    """)
    result = executor.run(ExecutionJob(code=code, tests=tests, entry_point="kind", timeout_s=5.0))
    assert result.status is ExecutionStatus.PASSED, result.reason
