"""Round thirteen (issue 19, classes 3 and 5): what an independent review of split trust found. Each case runs
through the sandbox and, as the reference, through plain unittest with the code and the tests in one process.

* A wrong answer turned its 0 into an ``error`` (excluded from GRPO): by leaving out a name the tests read at module
  level or in a class body (``ORIGIN = Point(0, 0)``, ``cases = [(Color.RED, "red")]``), or by binding a standard
  module's name the tests read to a module the runner refuses (``import webbrowser as math``). One job alone cannot
  tell the first from tests broken by a typo (round six's review: an ``error``); beside an answer to the same
  tests that got past loading, it fails.
* Right answers scored 0 silently: an exception class reached through a class (``Stack.EmptyError``,
  ``Parser.Error = ParseError``), a module-level alias of one, several bases or a standard-library base, a
  standard-library exception re-exported by the model's code (``from json import JSONDecodeError``).
* The long-lived trusted runner kept what one task's tests changed of its interpreter (``logging.disable``, the
  decimal context, warning filters, the environment, built-ins...) into the next task's run: a right answer failed.
"""

from __future__ import annotations

import time

import pytest

from rewardpipe.execution import ExecutionJob, ExecutionStatus
from rewardpipe.execution.sandbox import make_executor
from tests.security.test_round_eight_shapes import _run
from tests.security.test_round_seven import _one_process

PASSED, FAILED, ERROR = ExecutionStatus.PASSED, ExecutionStatus.FAILED, ExecutionStatus.ERROR


def _same_as_one_process(executor, code: str, tests: str, expected: ExecutionStatus, entry_point: str) -> None:
    result = _run(executor, code, tests, entry_point=entry_point)
    assert _one_process(code, tests) is expected  # the reference agrees with what the case claims
    assert result.status is expected, (result.status, result.reason)


def job_of(code: str, tests: str, entry_point: str) -> ExecutionJob:
    return ExecutionJob(code=code, tests="import unittest\n" + tests, entry_point=entry_point)


# --- a wrong answer's 0 stays a 0: names the tests read at load time ------------------------------------------------

POINT = "class Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n"
RIGHT_DIST = POINT + "def dist(a, b):\n    return ((a.x - b.x) ** 2 + (a.y - b.y) ** 2) ** 0.5\n"
WRONG_DIST = "def dist(a, b):\n    return 0\n"
ORIGIN_TESTS = """
ORIGIN = Point(0, 0)
class T(unittest.TestCase):
    def test(self):
        self.assertEqual(dist(ORIGIN, Point(3, 4)), 5)
"""
ANNOTATED_TESTS = """
class T(unittest.TestCase):
    origin: Point = None
    def test(self):
        self.assertEqual(dist(Point(0, 0), Point(3, 4)), 5)
"""
COLOR = "import enum\nclass Color(enum.Enum):\n    RED = 'red'\n"
COLOR_TESTS = """
class T(unittest.TestCase):
    cases = [(Color.RED, "red")]
    def test(self):
        for color, text in self.cases:
            self.assertEqual(name(color), text)
"""
LIMIT_TESTS = """
LIMIT = MAX_SIZE + 1
class T(unittest.TestCase):
    def test(self):
        self.assertFalse(fits(LIMIT))
"""
SQRT_TESTS = """
SQ2 = math.sqrt(2)
class T(unittest.TestCase):
    def test(self):
        self.assertAlmostEqual(f(2), SQ2)
"""
LEFT_OUT = {  # (wrong answer, right answer, tests, entry point)
    "class": (WRONG_DIST, RIGHT_DIST, ORIGIN_TESTS, "dist"),
    "class-in-an-annotation": (WRONG_DIST, RIGHT_DIST, ANNOTATED_TESTS, "dist"),
    "enum-in-a-class-body": (
        "def name(c):\n    return 'red'\n",
        COLOR + "def name(c):\n    return c.value\n",
        COLOR_TESTS,
        "name",
    ),
    "constant": (
        "def fits(n):\n    return False\n",
        "MAX_SIZE = 10\ndef fits(n):\n    return n <= MAX_SIZE\n",
        LIMIT_TESTS,
        "fits",
    ),
}


@pytest.mark.parametrize("case", LEFT_OUT)
def test_an_answer_that_left_out_a_name_the_tests_read_at_load_fails(executor, case):
    """Beside an answer that defines the name (a GRPO group: answers to the same tests), the one that left it out
    fails, as in one process, wherever it comes in the batch; later answers too."""
    wrong, right, tests, entry_point = LEFT_OUT[case]
    assert _one_process(wrong, tests) is FAILED and _one_process(right, tests) is PASSED  # the reference
    jobs = [job_of(wrong, tests, entry_point), job_of(right, tests, entry_point), job_of(wrong, tests, entry_point)]
    statuses = [result.status for result in executor.run_batch(jobs, workers=2)]
    assert statuses == [FAILED, PASSED, FAILED]
    later = executor.run(job_of(wrong, tests, entry_point))
    assert later.status is FAILED, later.reason
    assert "does not define" in later.reason


def test_alone_a_left_out_name_cannot_be_told_from_broken_tests():
    """One answer alone, or tests that read a name no answer defines (a typo): an ``error``, as round six's review
    asked of tests broken whatever the model writes."""
    executor = make_executor(workers=2)  # one that has seen no answer to these tests
    try:
        alone = executor.run(job_of(WRONG_DIST, ORIGIN_TESTS, "dist"))
        assert alone.status is ERROR, (alone.status, alone.reason)
        typo = "LIMIT = helpr(3)\nclass T(unittest.TestCase):\n    def test(self):\n        pass\n"
        jobs = [job_of(RIGHT_DIST, typo, "dist"), job_of(WRONG_DIST, typo, "dist")]
        assert [result.status for result in executor.run_batch(jobs, workers=2)] == [ERROR, ERROR]
    finally:
        executor.close()


SHADOWED_MATH = {
    "right-math": ("import math\ndef f(x):\n    return math.sqrt(x)\n", PASSED),
    "math-bound-to-a-refused-module": ("import webbrowser as math\ndef f(x):\n    return 0\n", FAILED),
    "math-bound-to-a-private-module": ("import _markupbase as math\ndef f(x):\n    return 0\n", FAILED),
    "math-bound-to-pydoc": ("import pydoc as math\ndef f(x):\n    return 0\n", FAILED),
}


@pytest.mark.parametrize("case", SHADOWED_MATH)
def test_a_standard_module_name_bound_to_a_refused_module_is_the_models_doing(executor, case):
    code, expected = SHADOWED_MATH[case]
    _same_as_one_process(executor, code, SQRT_TESTS, expected, "f")


def test_tests_that_use_their_own_name_before_defining_it_stay_an_error(executor):
    """The tests' own bug (a helper called above its definition) is no answer's doing, even beside answers to the
    same tests: an ``error``, as before."""
    tests = (
        "X = helper()\ndef helper():\n    return 5\nclass T(unittest.TestCase):\n    def test(self):\n        pass\n"
    )
    jobs = [job_of(RIGHT_DIST, tests, "dist"), job_of(WRONG_DIST, tests, "dist")]
    assert [result.status for result in executor.run_batch(jobs, workers=2)] == [ERROR, ERROR]


def test_a_refused_module_under_its_own_name_stays_a_loud_error(executor):
    """A right answer may import a module the runner does not load under its own name; tests reading it at load
    need the in-process fallback, whatever the answer: still the loud ``error`` naming it."""
    tests = "BROWSER = webbrowser.Error\nclass T(unittest.TestCase):\n    def test(self):\n        pass\n"
    result = _run(executor, "import webbrowser\ndef f():\n    return 1\n", tests, entry_point="f")
    assert result.status is ERROR, (result.status, result.reason)
    assert "webbrowser" in (result.reason or "")


# --- right answers' exception classes arrive as the classes the tests name -----------------------------------------

NESTED_STACK = """
class Stack:
    class EmptyError(Exception):
        pass
    def __init__(self):
        self.items = []
    def pop(self):
        if not self.items:
            raise Stack.EmptyError("empty")
        return self.items.pop()
"""
NESTED_TESTS = """
class T(unittest.TestCase):
    def test_assert_raises(self):
        with self.assertRaises(Stack.EmptyError):
            Stack().pop()
    def test_except_clause(self):
        try:
            Stack().pop()
        except Stack.EmptyError:
            pass
        else:
            self.fail("no error")
"""
ALIASED_ON_A_CLASS = """
class ParseError(Exception):
    pass
class Parser:
    Error = ParseError
    def parse(self, text):
        raise ParseError(text)
"""
ALIASED_TESTS = """
class T(unittest.TestCase):
    def test(self):
        with self.assertRaises(Parser.Error):
            Parser().parse("x")
        with self.assertRaises(ParseError):
            Parser().parse("x")
"""
MODULE_ALIAS = (
    "class ParseError(ValueError):\n    pass\nError = ParseError\ndef f(s):\n    raise ParseError('bad ' + s)\n"
)
MODULE_ALIAS_TESTS = """
class T(unittest.TestCase):
    def test(self):
        with self.assertRaises(ParseError):
            f("x")
        with self.assertRaises(Error):
            f("x")
        with self.assertRaises(ValueError):
            f("x")
"""
TWO_BASES = "class InvalidMove(KeyError, ValueError):\n    pass\ndef f(s):\n    raise InvalidMove(s)\n"
TWO_BASES_TESTS = """
class T(unittest.TestCase):
    def test(self):
        for cls in (ValueError, KeyError, LookupError, InvalidMove):
            with self.assertRaises(cls):
                f("x")
"""
STANDARD_BASE = "import json\nclass ConfigError(json.JSONDecodeError):\n    pass\n"
STANDARD_BASE += "def f(s):\n    raise ConfigError('bad config', s, 0)\n"
STANDARD_BASE_TESTS = """
import json
class T(unittest.TestCase):
    def test(self):
        with self.assertRaises(json.JSONDecodeError) as caught:
            f("x")
        self.assertIn("bad config", str(caught.exception))
        for cls in (ConfigError, ValueError):
            with self.assertRaises(cls):
                f("x")
"""
REEXPORTED = "import json\nfrom json import JSONDecodeError\ndef f(s):\n    return json.loads(s)\n"
REEXPORTED_TESTS = """
class T(unittest.TestCase):
    def test(self):
        with self.assertRaises(JSONDecodeError):
            f("{")
"""
EXCEPTION_CASES = {
    "nested-class": (NESTED_STACK, NESTED_TESTS, "Stack", PASSED),
    "nested-class-never-raised": (
        NESTED_STACK.replace('raise Stack.EmptyError("empty")', "return None"),
        NESTED_TESTS,
        "Stack",
        FAILED,
    ),
    "aliased-on-a-class": (ALIASED_ON_A_CLASS, ALIASED_TESTS, "Parser", PASSED),
    "module-alias": (MODULE_ALIAS, MODULE_ALIAS_TESTS, "f", PASSED),
    "module-alias-other-error": (
        MODULE_ALIAS.replace("ParseError('bad ' + s)", "KeyError(s)"),
        MODULE_ALIAS_TESTS,
        "f",
        FAILED,
    ),
    "two-bases": (TWO_BASES, TWO_BASES_TESTS, "f", PASSED),
    "one-base-of-two": (TWO_BASES.replace("(KeyError, ValueError)", "(KeyError)"), TWO_BASES_TESTS, "f", FAILED),
    "standard-base": (STANDARD_BASE, STANDARD_BASE_TESTS, "f", PASSED),
    "reexported-standard-class": (REEXPORTED, REEXPORTED_TESTS, "f", PASSED),
    "reexported-never-raised": (REEXPORTED.replace("json.loads(s)", "None"), REEXPORTED_TESTS, "f", FAILED),
}


@pytest.mark.parametrize("case", EXCEPTION_CASES)
def test_exception_classes_arrive_as_the_classes_the_tests_name(executor, case):
    code, tests, entry_point, expected = EXCEPTION_CASES[case]
    _same_as_one_process(executor, code, tests, expected, entry_point)


HTTP_ERRORS = """
class HTTPError(Exception):
    status = 500
class NotFound(HTTPError):
    status = 404
    kind = "missing"
def get(path):
    raise NotFound(path)
"""
HTTP_TESTS = """
class T(unittest.TestCase):
    def test(self):
        with self.assertRaises(HTTPError) as caught:
            get("/x")
        self.assertEqual(caught.exception.status, 404)
        self.assertEqual(caught.exception.kind, "missing")
        self.assertEqual(HTTPError.status, 500)
        self.assertEqual(caught.exception.args, ("/x",))
"""


@pytest.mark.parametrize(
    "code, expected",
    [
        pytest.param(HTTP_ERRORS, PASSED, id="class-level-data"),
        pytest.param(HTTP_ERRORS.replace("raise NotFound", "raise HTTPError"), FAILED, id="the-parent-raised"),
    ],
)
def test_an_exception_class_carries_its_class_level_data(executor, code, expected):
    _same_as_one_process(executor, code, HTTP_TESTS, expected, "get")


def test_an_exception_class_handed_back_to_the_model_is_its_own(executor):
    code = "class E(Exception):\n    pass\nclass Box:\n    class Inner(Exception):\n        pass\n"
    code += "def f(cls):\n    return cls is E or cls is Box.Inner\n"
    tests = "class T(unittest.TestCase):\n    def test(self):\n        self.assertTrue(f(E))\n"
    tests += "        self.assertTrue(f(Box.Inner))\n"
    _same_as_one_process(executor, code, tests, PASSED, "f")


# --- the trusted runner starts every job from the interpreter settings it started with ------------------------------

# Run first on one worker: module-level changes of the kind tests make, none of them undone.
LEAVING_TESTS = """
import builtins, decimal, logging, os, signal, socket, sys, time, warnings
logging.disable(logging.CRITICAL)
logging.getLogger("inventory").disabled = True
logging.getLogger("inventory").setLevel(logging.CRITICAL)
decimal.getcontext().prec = 6
warnings.simplefilter("error")
os.environ["TZ"] = "XYZ+07"
time.tzset()
sys.set_int_max_str_digits(640)
builtins.input = lambda *args: "5"
unittest.TestCase.maxDiff = 3
socket.setdefaulttimeout(0.001)
signal.signal(signal.SIGALRM, lambda *args: None)
signal.setitimer(signal.ITIMER_REAL, 60)
class T(unittest.TestCase):
    def test(self):
        self.assertEqual(f(1), 1)
"""
# Then another task's right answer, whose tests assume a fresh interpreter.
AFTER_CODE = """
import logging, warnings
from decimal import Decimal
def f(x):
    logging.getLogger("inventory").warning("low stock %s", x)
    warnings.warn("deprecated", DeprecationWarning)
    return x
def seventh():
    return Decimal(1) / Decimal(7)
"""
AFTER_TESTS = """
import builtins, os, socket, time
from decimal import Decimal
class T(unittest.TestCase):
    def test_logs(self):
        with self.assertLogs("inventory", "WARNING"):
            f(3)
    def test_decimal(self):
        self.assertEqual(seventh(), Decimal(1) / Decimal(7))
        self.assertEqual(len(str(seventh())), 30)
    def test_environment(self):
        self.assertNotIn("TZ", os.environ)
        self.assertNotEqual(time.tzname[0], "XYZ")
        self.assertEqual(len(str(10 ** 700)), 701)
        self.assertIsNone(socket.getdefaulttimeout())
    def test_builtins_and_unittest(self):
        self.assertEqual(type(builtins.input).__name__, "builtin_function_or_method")
        self.assertEqual(self.maxDiff, 640)
    def test_warnings_are_not_errors(self):
        self.assertEqual(f(2), 2)
"""


def test_one_tasks_tests_leave_nothing_for_the_next_ones(one_worker):
    before = _run(one_worker, AFTER_CODE, AFTER_TESTS)
    assert before.status is PASSED, before.reason  # alone, on this runner
    leaving = _run(one_worker, "def f(x):\n    return x\n", LEAVING_TESTS)
    # (calling the model's code with these settings changed is an error naming the fallback since round thirty-two)
    assert leaving.status is ERROR and "in-process fallback" in leaving.reason, leaving.reason
    after = _run(one_worker, AFTER_CODE, AFTER_TESTS)
    assert after.status is PASSED, after.reason
    assert after.passed == after.total == 5


def test_what_cannot_be_put_back_has_the_runner_replaced(one_worker):
    """Tests that break logging's own machinery: the runner cannot restore it, so a fresh one runs the next job."""
    breaking = "import logging\nlogging.Logger.manager = None\nlogging.root.manager = None\n"
    breaking += "class T(unittest.TestCase):\n    def test(self):\n        self.assertEqual(f(1), 1)\n"
    assert _run(one_worker, "def f(x):\n    return x\n", breaking).status is PASSED
    logs = 'class T(unittest.TestCase):\n    def test(self):\n        with self.assertLogs("inventory", "WARNING"):\n'
    logs += "            f(3)\n"
    after = _run(one_worker, AFTER_CODE, logs)
    assert after.status is PASSED, after.reason


def test_jobs_run_one_by_one_are_settled_when_their_group_is_done(executor):
    """The reward Lambda runs a batch's samples one by one on lanes (each within the invocation's deadline): an
    answer that left the name out and ran before any answer loaded is settled once the lanes are done."""
    from rewardpipe.single_turn import _run_before_deadline

    tests = ORIGIN_TESTS.replace("ORIGIN", "START")  # tests no answer of this executor has loaded yet
    jobs = {0: job_of(WRONG_DIST, tests, "dist"), 1: job_of(RIGHT_DIST, tests, "dist")}
    out = _run_before_deadline(executor, jobs, workers=1, deadline=time.monotonic() + 120)
    assert [out[0].status, out[1].status] == [FAILED, PASSED], out[0]


def test_an_undecided_answer_holds_back_the_batch_only_until_an_answer_to_its_tests_loads(executor):
    """A batch's results stream in order: an answer that left out a name the tests read at load is settled as soon
    as another answer to the same tests got past loading, and it and the results behind it go out then, not when
    the whole batch is done (one such answer early in a large ``exec --batch`` held back all of its output)."""
    import threading

    tests = ORIGIN_TESTS.replace("ORIGIN", "HOME")  # tests no answer of this executor has loaded yet
    later = job_of("def f():\n    return 1\n", "class T(unittest.TestCase):\n    def test(self):\n        pass\n", "f")
    jobs = [job_of(WRONG_DIST, tests, "dist"), job_of(RIGHT_DIST, tests, "dist"), later, later, later]
    released = threading.Event()
    waited_out = []
    run = executor.run

    def gated(job):  # the jobs behind the first two wait until the first result is out (or 10 s)
        if job is later and not released.wait(10):
            waited_out.append(job)
        return run(job)

    executor.run = gated
    try:
        results = executor.run_batch(jobs, workers=1)
        first = next(results)
        released.set()
        rest = list(results)
    finally:
        del executor.run
    assert first.status is FAILED, (first.status, first.reason)
    assert not waited_out, "the first result came out only after every job had run"
    assert [result.status for result in rest] == [PASSED] * 4
