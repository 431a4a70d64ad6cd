"""Round fifteen: the sandbox and split trust, attacked through the public executor as the model would.

* A wrong answer escaping its 0 as an ``error``: a value the tests send back to the model's code that is nested too
  deep to cross is the model's doing (its test fails) when it holds something the model's replies built, and the
  tests' own shape (a loud ``error``) otherwise. The runner told them apart by walking the tests' value for
  containers it had recorded from the model's replies, but it recorded and walked lists, tuples, dicts and sets only.
  A deque the model's write-back made hold itself, a dict view, the items of a model iterator and a raised
  exception's args were invisible to the walk: the tests sending any of them back (wrapped, or again) made the run
  an ``error``.
* The same, by the loader: a class of the model's deriving from doctest's ``DocTestCase`` (a TestCase subclass outside
  unittest) had a stub whose ``__bases__`` named that class once doctest was loaded in the runner (by the tests, or
  by an earlier job binding a name the tests read to doctest: the runner keeps it for up to 500 jobs). unittest's
  loader took the stub for a TestCase class of the tests' and put it in the suite, and the runner crashed: ``error``.
* A right answer scored 0 silently: a member of a standard library's enum whose values are ints or strings
  (``HTTPStatus.NOT_FOUND``, ``re.IGNORECASE``) crossed as its value alone, so a right answer reading ``.phrase`` or
  ``.name`` failed, and ``assertIs(status_for(404), HTTPStatus.NOT_FOUND)`` too; doctor (which flags the tests' own
  enums since round fourteen) said nothing. They cross as themselves now, named by module, class and member.
* A forged pass from what an earlier job left: the long-lived runner imports a standard module the model's code binds
  to a name the tests read (``import pstats as math``), and kept it loaded for every later job; what a later job's
  values were depended on it (above: a ``pstats.SortKey`` member arrives as itself only where pstats is loaded; also
  the classes a stub may claim and the exceptions that arrive as themselves, and the time of the first import). A
  later wrong answer that answered only when it found pstats loaded passed. The runner is replaced after a job in
  which it imported a module for the model's code.
* A forged pass by timing what ran before: a spare child waits while the jobs before it run, and the times of what
  was made with it (its directory, the worker's directory, its pipes to the runner; its directory's birth time by
  statx) against the clock told the next job how long the last one took, to the millisecond. A job that slept 0.6 s
  before answering made the next one, a wrong answer that answered only then, pass. Those times are set to the
  moment the child gets its job, and statx (the only reader of a birth time) is refused.
* A wrong answer escaping its 0 as an ``error``: tests that read a name of the model's when they load
  (``LIMIT = MAX_SIZE + 1``) met a wrong answer that bound it to a module the runner does not load (a module object
  it made, ``types.ModuleType("x")``, or a standard one the runner refuses, ``import this as MAX_SIZE``): the run was
  the loud "need the in-process fallback" ``error`` meant for tests that rely on the model's namespace for a package
  (``import numpy as np``). Now only a refused standard module under its own name and a package this interpreter has
  outside the standard library are that; anything else is the model's failure.
"""

from __future__ import annotations

import sys

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.runtime import wire
from tests.security.test_round_eight_shapes import _run  # unittest imported, code and tests dedented
from tests.security.test_round_seven import _one_process

PASSED, FAILED, ERROR = ExecutionStatus.PASSED, ExecutionStatus.FAILED, ExecutionStatus.ERROR


# --- a value of the model's too deep to send back is the model's failure, whatever holds it --------------------------

_DEEP = """
from collections import deque

def deep():
    d = 3
    for _ in range(199):
        d = [d]
    return d

def total(xs):
    return 0
"""
DEEP_VALUES = {
    "a-dict-view": (
        "def make():\n    return {0: deep()}.values()\n",
        "self.assertEqual(total([make()]), 3)",
    ),
    "a-model-iterators-items": (
        "def gen():\n    yield deep()\n",
        "self.assertEqual(total([list(gen())]), 3)",
    ),
    "a-raised-exceptions-args": (
        "def boom():\n    raise ValueError(deep())\n",
        "with self.assertRaises(ValueError) as cm:\n            boom()\n"
        "        self.assertEqual(total([cm.exception.args]), 3)",
    ),
}


@pytest.mark.parametrize("case", DEEP_VALUES)
def test_a_value_of_the_models_too_deep_to_send_back_fails_the_wrong_answer(executor, case):
    code, statement = DEEP_VALUES[case]
    tests = f"""
class T(unittest.TestCase):
    def test(self):
        {statement}
"""
    result = _run(executor, _DEEP + code, tests, entry_point="total")
    assert result.status is FAILED, (result.status, result.reason)
    assert "nested more than 200 levels" in result.reason


# The model's process is the model's: it answers the write-back of a deque argument with a deque holding the caller's
# own deque (``{"a": 0}``), which the runner built; the tests pass the deque again.
FORGED_SELF_HOLDING_DEQUE = """
import collections, sys
_wire = sys.modules["rewardpipe.execution.runtime.wire"]
_encode = _wire.encode

def _forged(value, make_handle=None, _depth=0, nodes=None, refs=None):
    if type(value) is collections.deque and refs is not None and _depth == 0:
        return {"dq": [[{"a": 0}], None]}
    return _encode(value, make_handle, _depth, nodes, refs)

_wire.encode = _forged

def push(q, x):
    q.append(x + 100)
"""
DEQUE_TESTS = """
from collections import deque

class T(unittest.TestCase):
    def test(self):
        q = deque()
        push(q, 1)
        push(q, 2)
        self.assertEqual(list(q), [1, 2])
"""


def test_a_deque_the_model_made_hold_itself_fails_the_wrong_answer(executor):
    result = _run(executor, FORGED_SELF_HOLDING_DEQUE, DEQUE_TESTS, entry_point="push")
    assert result.status is FAILED, (result.status, result.reason)
    right = _run(executor, "def push(q, x):\n    q.append(x)\n", DEQUE_TESTS, entry_point="push")
    assert right.status is PASSED, right.reason


def test_a_deque_of_the_tests_own_too_deep_to_cross_stays_a_loud_error(executor):
    tests = """
from collections import deque

class T(unittest.TestCase):
    def test(self):
        q = deque()
        q.append(q)
        self.assertEqual(f(q), 0)
"""
    result = _run(executor, "def f(q):\n    return 0\n", tests)
    assert result.status is ERROR, (result.status, result.reason)


# --- no stub of the model's is a TestCase to unittest's loader -------------------------------------------------------

TESTS_READING_F = """
class T(unittest.TestCase):
    def test(self):
        self.assertEqual(f(2), 4)
"""
DOCTEST_CASES = {
    "plain": "import doctest\nclass f(doctest.DocTestCase):\n    pass\n",
    "counting-no-tests": (
        "import doctest\n"
        "class f(doctest.DocTestCase):\n"
        "    def __init__(self, name='runTest'):\n"
        "        pass\n"
        "    def countTestCases(self):\n"
        "        return 0\n"
    ),
}


@pytest.mark.parametrize("case", DOCTEST_CASES)
def test_a_model_class_deriving_from_a_testcase_outside_unittest_is_no_test_of_the_tests(one_worker, case):
    # The tests load doctest themselves ...
    result = _run(one_worker, DOCTEST_CASES[case], "import doctest\n" + TESTS_READING_F)
    assert result.status is FAILED, (result.status, result.reason)
    # ... or an earlier job made the runner load it (a name the tests read bound to it), for the jobs after it.
    earlier = _run(one_worker, "import doctest as f\n", TESTS_READING_F)
    assert earlier.status is FAILED, (earlier.status, earlier.reason)
    result = _run(one_worker, DOCTEST_CASES[case], TESTS_READING_F)
    assert result.status is FAILED, (result.status, result.reason)
    right = _run(one_worker, "def f(x):\n    return x * 2\n", TESTS_READING_F)
    assert right.status is PASSED, right.reason


# --- a member of a standard library's enum crosses as itself --------------------------------------------------------

STANDARD_ENUM_TESTS = """
from http import HTTPStatus
import re

class T(unittest.TestCase):
    def test_handed_over(self):
        self.assertEqual(describe(HTTPStatus.NOT_FOUND), "404 Not Found")

    def test_returned(self):
        self.assertIs(status_for(404), HTTPStatus.NOT_FOUND)

    def test_a_flag(self):
        self.assertEqual(flag_name(re.IGNORECASE), "IGNORECASE")
"""
STANDARD_ENUM_ANSWERS = {
    "right": (
        """
from http import HTTPStatus

def describe(status):
    return f"{status.value} {status.phrase}"

def status_for(code):
    return HTTPStatus(code)

def flag_name(flag):
    return flag.name
""",
        PASSED,
    ),
    "wrong": (
        """
from http import HTTPStatus

def describe(status):
    return f"{status.value} {status.name}"

def status_for(code):
    return HTTPStatus(code + 1)

def flag_name(flag):
    return str(flag)
""",
        FAILED,
    ),
}


@pytest.mark.parametrize("answer", STANDARD_ENUM_ANSWERS)
def test_a_standard_librarys_enum_member_crosses_as_itself(executor, answer):
    code, expected = STANDARD_ENUM_ANSWERS[answer]
    assert _one_process(code, STANDARD_ENUM_TESTS) is expected  # the reference agrees
    result = _run(executor, code, STANDARD_ENUM_TESTS, entry_point="describe")
    assert result.status is expected, (result.status, result.reason)
    if expected is FAILED:
        assert result.passed == 0, result.reason


def test_a_member_the_runner_cannot_name_arrives_as_its_value(executor):
    code = "import pstats\ndef f():\n    return pstats.SortKey.CALLS\n"
    plain = "class T(unittest.TestCase):\n    def test(self):\n        self.assertEqual(f(), 'calls')\n"
    result = _run(executor, code, plain)  # the tests never load pstats: the value, as before
    assert result.status is PASSED, result.reason
    named = "import pstats\n" + plain.replace(
        "self.assertEqual(f(), 'calls')", "self.assertIs(f(), pstats.SortKey.CALLS)"
    )
    result = _run(executor, code, named)
    assert result.status is PASSED, result.reason


def test_the_trusted_side_never_imports_a_module_to_name_an_enum_member(monkeypatch):
    monkeypatch.delitem(sys.modules, "pstats", raising=False)
    assert wire.decode({"en": ["pstats", "SortKey", "CALLS", "calls"]}) == "calls"
    assert "pstats" not in sys.modules
    # A member named with another value than its own is that value.
    import http

    assert wire.decode({"en": ["http", "HTTPStatus", "NOT_FOUND", 404]}) is http.HTTPStatus.NOT_FOUND
    forged = wire.decode({"en": ["http", "HTTPStatus", "NOT_FOUND", 200]})
    assert forged == 200 and type(forged) is int
    with pytest.raises(wire.WireError):
        wire.decode({"en": ["http", "HTTPStatus", "NOT_FOUND", [404]]})


# --- what a job made the runner import does not outlive the job ------------------------------------------------------

READS_MATH_FROM_THE_MODEL = """
class T(unittest.TestCase):
    def test(self):
        self.assertEqual(math.floor(2.5), 2)
        self.assertEqual(answer(probe()), 42)
"""
LOADS_PSTATS = "import pstats as math\n\ndef probe():\n    return 0\n\ndef answer(x):\n    return 0\n"
ANSWERS_ONLY_WHERE_PSTATS_IS_LOADED = """
import math, pstats

def probe():
    return pstats.SortKey.CALLS

def answer(x):
    return 42 if isinstance(x, pstats.SortKey) else 0
"""


def test_a_module_an_earlier_job_made_the_runner_import_tells_a_later_job_nothing(one_worker):
    alone = _run(one_worker, ANSWERS_ONLY_WHERE_PSTATS_IS_LOADED, READS_MATH_FROM_THE_MODEL, entry_point="answer")
    assert alone.status is FAILED, (alone.status, alone.reason)
    earlier = _run(one_worker, LOADS_PSTATS, READS_MATH_FROM_THE_MODEL, entry_point="answer")
    assert earlier.status is FAILED, (earlier.status, earlier.reason)
    for _ in range(2):
        later = _run(one_worker, ANSWERS_ONLY_WHERE_PSTATS_IS_LOADED, READS_MATH_FROM_THE_MODEL, entry_point="answer")
        assert later.status is FAILED, (later.status, later.reason)


# --- what a spare child can stat tells it nothing of how long the jobs before it took ------------------------------

SLEEPS_BEFORE_ANSWERING = "import time\n\ndef answer():\n    time.sleep(0.6)\n    return 0\n"
ANSWERS_BY_THE_LAST_JOBS_DURATION = """
import ctypes, os, struct, time

def _ages():
    now = time.time()
    ages = []
    for target in (".", "..", 3, 4):
        try:
            st = os.stat(target)
        except OSError:
            continue
        ages += [now - st.st_atime, now - st.st_mtime, now - st.st_ctime]
    buffer = ctypes.create_string_buffer(256)
    number = {"x86_64": 332, "aarch64": 291}.get(os.uname().machine)
    if number and ctypes.CDLL(None).syscall(number, -100, b".", 0, 0x800, buffer) == 0:  # statx, STATX_BTIME
        ages.append(now - struct.unpack_from("q", buffer, 0x50)[0])
    return ages

def answer():
    return 42 if any(0.4 < age < 5 for age in _ages()) else 0
"""
ANSWER_TESTS = """
class T(unittest.TestCase):
    def test(self):
        self.assertEqual(answer(), 42)
"""


def test_a_spare_cannot_time_the_job_before_it(one_worker):
    for _ in range(2):
        earlier = _run(one_worker, SLEEPS_BEFORE_ANSWERING, ANSWER_TESTS, entry_point="answer")
        assert earlier.status is FAILED, (earlier.status, earlier.reason)
        later = _run(one_worker, ANSWERS_BY_THE_LAST_JOBS_DURATION, ANSWER_TESTS, entry_point="answer")
        assert later.status is FAILED, (later.status, later.reason)


# --- a name the tests read at load, bound to a module of the model's making, is the model's failure -----------------

READS_MAX_SIZE_AT_LOAD = """
LIMIT = MAX_SIZE + 1

class T(unittest.TestCase):
    def test(self):
        self.assertEqual(f(1), LIMIT)
"""
MODULES_OF_THE_MODELS_MAKING = {
    "a-module-object": "import types\nMAX_SIZE = types.ModuleType('x')\n",
    "a-refused-standard-module-under-another-name": "import this as MAX_SIZE\n",
    "a-module-it-wrote": (
        "import os, sys\n"
        "with open('limits.py', 'w') as out:\n"
        "    out.write('X = 1\\n')\n"
        "sys.path.insert(0, os.getcwd())\n"
        "import limits as MAX_SIZE\n"
    ),
}


@pytest.mark.parametrize("case", MODULES_OF_THE_MODELS_MAKING)
def test_a_name_read_at_load_bound_to_a_module_of_the_models_making_fails(executor, case):
    wrong = MODULES_OF_THE_MODELS_MAKING[case] + "\ndef f(x):\n    return 0\n"
    result = _run(executor, wrong, READS_MAX_SIZE_AT_LOAD)
    assert result.status is FAILED, (result.status, result.reason)
    right = _run(executor, "MAX_SIZE = 100\n\ndef f(x):\n    return 101\n", READS_MAX_SIZE_AT_LOAD)
    assert right.status is PASSED, right.reason
