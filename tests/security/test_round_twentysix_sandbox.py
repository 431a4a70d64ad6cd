"""Round twenty-six: the values and calls crossing the split-trust boundary, attacked through the public executor as
the model would.

* An exception the tests caught and handed back to the model's code (``except ValueError as e: explain(e)``) could not
  cross when the runner had rebuilt it as a class the wire does not carry by value: a standard library's
  (``json.JSONDecodeError``, ``binascii.Error``, both always loaded in the runner), or the runner's own report of the
  model's misdoing (``RemoteError`` for a malformed or oversized reply, ``ModelProcessDied`` once its process exited).
  The run was the loud "in-process fallback" ``error``, so a wrong answer chose it for its 0 (excluded from GRPO) by
  what it raised, and a right answer that let ``json.loads`` raise was that ``error`` too. A raised exception of such a
  class now stands for the model's own object (its process keeps it for the job, as a returned one), and what the runner
  raised for the model's misdoing, handed back, is the model's failure.
* The same ``error``, reached through a built-in the wire carries by name: a wrong answer whose function returned
  ``reversed`` (or ``iter``, ``zip``, ``enumerate``, ``object``) where the tests wanted one of its own made the tests
  build an iterator (or a bare object) in the runner, and handing that back (``unshift(shift("hello"))``) was the
  ``error``. Once the model's replies handed the tests such a built-in, an iterator or bare object the tests hand back
  is the model's failure; the tests' own ``f(iter(xs))`` stays the loud ``error`` otherwise.
* ``name_of(type(make()))`` (round twenty-one's shape): ``type()`` of a stub is answered in the runner, from the
  object's description, as the interpreter's type (a generator's, a function's) or a standard class (an
  ``itertools.chain``), and neither could be handed back; nor could the stub's own class, for an object the model's
  process left undescribed. Each was the ``error`` for a wrong answer's result. The interpreter's types cross by name to
  the model's side, a standard class stands for the model's class it was answered for, and a stub's class is the
  model's failure.
* A forged pass: a StopIteration from a ``send``/``throw`` the tests read off a model object is let through as a
  generator's end (round twelve), and that stub was known by the handle the reply named, so a wrong answer that answered
  ``g.send`` with its entry point (or handed that ``send`` back later as another function) ended the tests'
  ``any(map(is_prime, composites))`` early and passed. Only a stub made by the reply to that read is such a step now.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from rewardpipe.execution import ExecutionJob, ExecutionStatus


def _run(executor, code: str, tests: str, entry_point: str):
    job = ExecutionJob(code=textwrap.dedent(code), tests=textwrap.dedent(tests), entry_point=entry_point, timeout_s=5.0)
    return executor.run(job)


def _assert_its_failure(executor, code: str, tests: str, entry_point: str) -> None:
    """A wrong answer's run is its ``failed`` with nothing passed, never the excluded ``error``."""
    result = _run(executor, code, tests, entry_point)
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)
    assert result.passed == 0


HANDS_THE_ERROR_BACK = """
import unittest


class TestExplain(unittest.TestCase):
    def test_explained(self):
        try:
            load("{bad")
        except Exception as e:
            self.assertEqual(explain(e), "column 2")
        else:
            self.fail("no error")
"""

# Each a wrong answer (``explain`` says nothing right) that raises, or makes the runner raise, an exception whose class
# the wire could not carry back.
RAISES_WHAT_CANNOT_CROSS = {
    "stdlib-json": "import json\n\ndef load(s):\n    raise json.JSONDecodeError('no', s, 0)\n",
    "stdlib-binascii": "import binascii\n\ndef load(s):\n    raise binascii.Error('no')\n",
    "malformed-reply": (
        "import sys\n"
        "wire = sys.modules['rewardpipe.execution.runtime.wire']\n"
        "send = wire.send_json\n"
        "def forged(fd, obj):\n"
        "    send(fd, {'ok': {'zz': 1}} if isinstance(obj, dict) and obj.get('ok') == 'MARK' else obj)\n"
        "wire.send_json = forged\n\n"
        "def load(s):\n    return 'MARK'\n"
    ),
    "process-exits": "import os\n\ndef load(s):\n    os._exit(3)\n",
}


@pytest.mark.parametrize("case", sorted(RAISES_WHAT_CANNOT_CROSS))
def test_a_wrong_answer_cannot_make_its_zero_an_error_by_what_it_raises(executor, case):
    code = RAISES_WHAT_CANNOT_CROSS[case] + "\n\ndef explain(e):\n    return 'nothing'\n"
    _assert_its_failure(executor, code, HANDS_THE_ERROR_BACK, "load")


def test_a_right_answer_gets_back_the_standard_exception_it_raised(executor):
    code = """
    import json

    def load(s):
        return json.loads(s)

    def explain(e):
        return f"column {e.colno}" if isinstance(e, json.JSONDecodeError) else type(e).__name__
    """
    result = _run(executor, code, HANDS_THE_ERROR_BACK, "load")
    assert result.status is ExecutionStatus.PASSED, result.reason


def test_the_exception_handed_back_is_the_models_own_object(executor):
    code = """
    import binascii

    raised = []

    def load(s):
        error = binascii.Error("bad padding")
        error.seen = s
        raised.append(error)
        raise error

    def same(e):
        return e is raised[-1] and e.seen

    def last():
        return raised[-1]
    """
    tests = """
    import unittest


    class TestSame(unittest.TestCase):
        def test_same(self):
            with self.assertRaises(ValueError) as cm:
                load("ab=")
            self.assertEqual(same(cm.exception), "ab=")
            self.assertIs(last(), cm.exception)
    """
    result = _run(executor, code, tests, "load")
    assert result.status is ExecutionStatus.PASSED, result.reason


CALLS_WHAT_IT_GETS = """
import unittest


class TestShift(unittest.TestCase):
    def test_round_trip(self):
        shift = make_shift(5)
        self.assertEqual(unshift(shift("hello"), 5), "hello")
"""


@pytest.mark.parametrize("maker", ["enumerate", "iter", "reversed", "zip"])
def test_a_wrong_answer_cannot_make_its_zero_an_error_by_the_built_in_it_returns(executor, maker):
    code = f"def make_shift(k):\n    return {maker}\n\n\ndef unshift(s, k):\n    return 'nothing'\n"
    _assert_its_failure(executor, code, CALLS_WHAT_IT_GETS, "make_shift")


def test_a_bare_object_made_by_the_class_it_returns_is_its_failure_too(executor):
    tests = """
    import unittest


    class TestFactory(unittest.TestCase):
        def test_made(self):
            make = factory()
            self.assertTrue(accepts(make()))
    """
    code = "def factory():\n    return object\n\n\ndef accepts(x):\n    return False\n"
    result = _run(executor, code, tests, "factory")
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)


def test_a_right_answer_returning_its_own_function_still_passes(executor):
    code = """
    def make_shift(k):
        def shift(s):
            return "".join(chr((ord(ch) - 97 + k) % 26 + 97) for ch in s)
        return shift

    def unshift(s, k):
        return "".join(chr((ord(ch) - 97 - k) % 26 + 97) for ch in s)
    """
    result = _run(executor, code, CALLS_WHAT_IT_GETS, "make_shift")
    assert result.status is ExecutionStatus.PASSED, result.reason


def test_the_tests_own_iterator_stays_the_loud_error(executor):
    tests = """
    import unittest


    class TestIter(unittest.TestCase):
        def test_iter(self):
            self.assertEqual(total(iter([1, 2])), 3)
    """
    result = _run(executor, "def total(xs):\n    return sum(xs)\n", tests, "total")
    assert result.status is ExecutionStatus.ERROR, (result.status, result.reason)


def test_a_warning_of_a_category_made_for_the_model_handed_back_is_its_failure(executor):
    tests = """
    import unittest


    class TestWarn(unittest.TestCase):
        def test_warned(self):
            with self.assertWarns(Warning) as cm:
                old()
            self.assertTrue(is_deprecation(cm.warning))
    """
    code = """
    import warnings

    def old():
        class Odd(UserWarning):
            pass
        warnings.warn("odd", Odd)

    def is_deprecation(w):
        return False
    """
    result = _run(executor, code, tests, "old")
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)


NAMES_THE_TYPE = """
import unittest


class TestKind(unittest.TestCase):
    def test_kind(self):
        self.assertEqual(name_of(type(make())), "dict")
"""
FORGED_REPLIES = (
    "import sys\n"
    "wire = sys.modules['rewardpipe.execution.runtime.wire']\n"
    "send = wire.send_json\n"
    "def forged(fd, obj):\n"
    "    if isinstance(obj, dict):\n"
    "        {forge}\n"
    "    send(fd, obj)\n"
    "wire.send_json = forged\n\n"
    "class Thing:\n    pass\n\n"
)
RESULTS_OF_A_KIND = {
    "generator": "def make():\n    return (x for x in [])\n",
    "function": "def make():\n    return make\n",
    "standard-class": "import itertools\n\ndef make():\n    return itertools.chain()\n",
    "undescribed": FORGED_REPLIES.format(forge="obj.pop('k', None)") + "def make():\n    return Thing()\n",
    "reference-without-handle": FORGED_REPLIES.format(
        forge="[item[1].__setitem__(2, ['zz', 'itertools', 'chain']) for item in obj.get('k', []) if item[1][0] == 'o']"
    )
    + "def make():\n    return Thing()\n",
}


@pytest.mark.parametrize("case", sorted(RESULTS_OF_A_KIND))
def test_a_wrong_answer_cannot_make_its_zero_an_error_by_the_kind_of_its_result(executor, case):
    code = RESULTS_OF_A_KIND[case] + "\n\ndef name_of(kind):\n    return 'nothing'\n"
    _assert_its_failure(executor, code, NAMES_THE_TYPE, "make")


@pytest.mark.parametrize(("made", "name"), [("(x for x in [])", "generator"), ("itertools.chain()", "chain")])
def test_a_right_answer_gets_back_the_kind_of_its_result(executor, made, name):
    code = f"import itertools\n\ndef make():\n    return {made}\n\n\ndef name_of(kind):\n    return kind.__name__\n"
    result = _run(executor, code, NAMES_THE_TYPE.replace('"dict"', repr(name)), "make")
    assert result.status is ExecutionStatus.PASSED, result.reason


# Round twelve lets a generator's end through ``send``/``throw`` the tests read off it as the StopIteration it is; a
# wrong answer answered ``g.send`` with its entry point (or later handed the ``send`` it gave back as another function),
# so its StopIteration ended ``any(map(is_prime, composites))`` early: a pass.
STEPS_AND_MAPS = """
import unittest


class TestSteps(unittest.TestCase):
    def test_a_generator(self):
        g = running_total()
        self.assertEqual(next(g), 0)
        self.assertEqual(g.send(5), 5)

    def test_b_no_prime(self):
        self.assertFalse(any(map(checker(), [4, 6, 8, 9])))
"""
ALIASES_A_STEP = {
    "entry-point-as-send": "step = is_prime\n",
    "send-handed-back-later": "step = lambda n: is_prime(n)\n",
}


@pytest.mark.parametrize("case", sorted(ALIASES_A_STEP))
def test_a_wrong_answer_cannot_pass_off_its_functions_stop_iteration_as_a_generators_end(executor, case):
    code = (
        "def is_prime(n):\n    if n == 5:\n        return 5\n    raise StopIteration\n\n"
        + ALIASES_A_STEP[case]
        + "\n\nclass Running:\n    def __next__(self):\n        return 0\n\n"
        "    def __iter__(self):\n        return self\n\n"
        "    def __getattr__(self, name):\n        return step\n\n\n"
        "def running_total():\n    return Running()\n\n\n"
        "def checker():\n    return step\n"
    )
    result = _run(executor, code, STEPS_AND_MAPS, "is_prime")
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)
    assert "test_b_no_prime" in result.reason  # (its generator test passes: that ``send`` is an honest one)


def test_the_model_process_keeps_a_bounded_number_of_raised_exceptions():
    from rewardpipe.execution.runtime import untrusted

    handles = untrusted.Handles()
    described = [
        untrusted.describe_exception(ValueError("plain"), handles=handles),
        *(
            untrusted.describe_exception(json.JSONDecodeError("no", "x", 0), handles=handles)
            for _ in range(untrusted.MAX_EXCEPTIONS_KEPT + 50)
        ),
    ]
    assert "h" not in described[0]  # a built-in class crosses by value
    assert sum("h" in info for info in described) == untrusted.MAX_EXCEPTIONS_KEPT
    assert len(handles.objects) == untrusted.MAX_EXCEPTIONS_KEPT
