"""Round seventeen: the sandbox and split trust, attacked through the public executor as the model would.

* A forged pass from what an earlier job left in the long-lived runner: what the model's code warns is replayed in
  the runner (so ``assertWarns`` sees it), and the warning's category was looked up by the module and name the
  model's process reported with ``getattr``, which runs a module's own ``__getattr__``: a category claiming to be
  ``unittest.IsolatedAsyncioTestCase`` made the runner import asyncio (and ssl, socket, ... 60 modules), which stayed
  loaded for every later job. A later wrong answer that answered only where ssl was loaded in the runner (a
  ``ssl.TLSVersion`` member crosses as itself only there) passed. Round fifteen's class, by another path: the lookup
  now reads the module's own namespace, and a runner whose modules grew while it replayed is replaced.
* The same by another path: a datetime whose zone key the host lacks (``ZoneInfo`` claimed by a class of the
  model's) made zoneinfo look for the ``tzdata`` package through importlib.resources, which loaded pathlib,
  tempfile, shutil, bz2, lzma, ipaddress... into the runner for every later job. A runner whose modules grew while it
  decoded any reply of the model's is now replaced before the next job.
* Left in the runner for every later job: a replayed log record's level was checked with the root logger's
  ``isEnabledFor``, which caches each level it is asked about; a job logging at 5,000 distinct 4,000-digit levels left
  9 MB there, and 500 jobs would pass the runner's 1 GiB memory limit (a later right answer's MemoryError).
* A right answer scored 0 silently: a warning the model's code gives on every call is shown once under the default
  filter in one process (the module's ``__warningregistry__``), but was replayed with no registry, so shown on every
  call: a test counting the warnings it recorded (``catch_warnings(record=True)``) failed the right answer. The
  replay keeps one registry for the job, as the model's module would.
* A right answer scored 0 silently: what the model's code logs was captured by a handler on its root logger, which
  never sees the records of a logger with ``propagate = False`` (a library's logger with a handler of its own), so
  ``assertLogs("app")`` failed it. Records are captured as they reach their logger's handlers, with where their
  propagation ends, and replayed no further than that (``assertNoLogs()`` on the root still sees none of them).
  The same for ``log.exception(...)``: its traceback, which a formatter prints after the message (``cm.output``), was
  lost, so a test looking for the exception's name there failed a right answer. It crosses as text now, and the
  fields of ``extra={...}`` cross as plain data (``cm.records[0].user_id`` was an AttributeError).
* A right answer scored 0 silently, unflagged: tests reading the model's module from ``sys.modules``
  (``sys.modules["solution"].f(1)``, ``.get("solution")``) meet a KeyError or None in the trusted runner, where an
  import of it is a loud error. ``doctor`` flags them now.
"""

from __future__ import annotations

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.shape_lint import shape_findings
from tests.security.test_round_eight_shapes import _run  # unittest imported, code and tests dedented
from tests.security.test_round_fourteen_sandbox import _same_as_one_process
from tests.security.test_round_nine_files import _lambda_like

PASSED, FAILED, ERROR = ExecutionStatus.PASSED, ExecutionStatus.FAILED, ExecutionStatus.ERROR


def _expect(executor, code: str, tests: str, status: ExecutionStatus) -> None:
    """Run ``code`` (entry point ``answer``) against ``tests`` and require ``status``."""
    result = _run(executor, code, tests, entry_point="answer")
    assert result.status is status, (result.status, result.reason)


@pytest.fixture(scope="module", params=["full-isolation", "lambda-mode"])
def same_runner(request, one_worker):
    """One worker, so consecutive jobs meet the same long-lived trusted runner: in full isolation, and as on Lambda
    or Fargate (fork servers as an unprivileged uid the jobs share, no Landlock, no mount or pid namespace)."""
    if request.param == "full-isolation":
        yield one_worker
        return
    executor = _lambda_like()
    yield executor
    executor.close()


# --- a warning's category, named by the model, makes the runner import nothing --------------------------------------

WARNS_AS_A_LAZY_ATTRIBUTE = """
import warnings

class Lazy(UserWarning):
    pass

Lazy.__module__, Lazy.__name__ = "unittest", "IsolatedAsyncioTestCase"

def answer(x=None):
    warnings.warn("x", Lazy)
    return 0
"""
ANSWERS_ONLY_WHERE_SSL_IS_LOADED = """
import ssl

def probe():
    return ssl.TLSVersion.TLSv1_2

def answer(x):
    return 42 if isinstance(x, ssl.TLSVersion) else 0
"""
ASKS_FOR_42 = """
class T(unittest.TestCase):
    def test(self):
        self.assertEqual(answer(probe()), 42)
"""


def test_a_warning_category_named_by_the_model_leaves_nothing_loaded_in_the_runner(same_runner):
    _expect(same_runner, ANSWERS_ONLY_WHERE_SSL_IS_LOADED, ASKS_FOR_42, FAILED)
    _expect(same_runner, WARNS_AS_A_LAZY_ATTRIBUTE + "probe = answer\n", ASKS_FOR_42, FAILED)
    for _ in range(2):
        _expect(same_runner, ANSWERS_ONLY_WHERE_SSL_IS_LOADED, ASKS_FOR_42, FAILED)


def test_a_warning_of_a_loaded_modules_category_still_arrives_as_that_category(executor):
    code = "import warnings\n\ndef answer():\n    warnings.warn('old', DeprecationWarning)\n    return 1\n"
    tests = """
class T(unittest.TestCase):
    def test(self):
        with self.assertWarns(DeprecationWarning):
            self.assertEqual(answer(), 1)
"""
    _expect(executor, code, tests, PASSED)


# --- a time zone key the host lacks makes the runner import nothing that outlives the job ----------------------------

CLAIMS_A_ZONE_THIS_HOST_LACKS = """
import datetime

class ZoneInfo(datetime.tzinfo):  # what the wire reads off a zone: its type's name and its key
    key = "Nowhere/Atlantis"

    def utcoffset(self, dt):
        return datetime.timedelta(0)

def answer():
    return datetime.datetime(2020, 1, 1, tzinfo=ZoneInfo())
"""
SEES_WHAT_THE_RUNNER_HAS_LOADED = """
import sys

class T(unittest.TestCase):
    def test(self):
        self.assertEqual([name for name in ("ipaddress", "tempfile", "bz2", "lzma") if name in sys.modules], [])
        self.assertEqual(answer(), 42)
"""


def test_a_time_zone_key_the_host_lacks_leaves_nothing_loaded_in_the_runner(same_runner):
    """zoneinfo looks a key missing from the host's zone files up in the ``tzdata`` package, through
    importlib.resources, which loads pathlib, tempfile, shutil, bz2, lzma, ipaddress...: they stayed loaded in the
    long-lived runner for every later job, whose tests (and values: the exceptions and enum members that arrive as
    themselves) saw them. Seen here by the tests of a later job, which run in that runner."""
    _expect(same_runner, "def answer():\n    return 42\n", SEES_WHAT_THE_RUNNER_HAS_LOADED, PASSED)
    _expect(same_runner, CLAIMS_A_ZONE_THIS_HOST_LACKS, ASKS_FOR_42.replace("probe()", ""), FAILED)
    _expect(same_runner, "def answer():\n    return 42\n", SEES_WHAT_THE_RUNNER_HAS_LOADED, PASSED)


# --- what the model logs leaves nothing in the runner's loggers ------------------------------------------------------

LOGS_AT_MANY_LEVELS = """
import logging

def answer():
    for level in range(10**6, 10**6 + 100):
        logging.log(level, "x")
    return 0
"""
SEES_THE_ROOT_LOGGERS_CACHE = """
import logging

class T(unittest.TestCase):
    def test(self):
        self.assertEqual([level for level in logging.root._cache if level >= 10**6], [])
        self.assertEqual(answer(), 42)
"""


def test_the_levels_the_model_logs_at_are_not_kept_by_the_runner(same_runner):
    """A replayed record's level was checked with the root logger's ``isEnabledFor``, which caches every level it
    is asked about, for the life of the long-lived runner (500 jobs): a job logging 5,000 distinct 4,000-digit
    levels left 9 MB there, every such job more, until the runner's memory limit failed later right answers.
    The later job's tests (which run in that runner) look at that cache."""
    _expect(same_runner, LOGS_AT_MANY_LEVELS, ASKS_FOR_42.replace("probe()", ""), FAILED)
    _expect(same_runner, "def answer():\n    return 42\n", SEES_THE_ROOT_LOGGERS_CACHE, PASSED)


def test_a_replayed_record_still_reaches_assert_logs_at_its_level(executor):
    code = "import logging\n\ndef answer():\n    logging.getLogger('app').log(25, 'between')\n    return 1\n"
    tests = """
class T(unittest.TestCase):
    def test(self):
        with self.assertLogs('app', level=21) as cm:
            self.assertEqual(answer(), 1)
        self.assertEqual(cm.output, ['Level 25:app:between'])
        with self.assertRaises(AssertionError):
            with self.assertLogs('app', level=30):
                answer()
"""
    _expect(executor, code, tests, PASSED)


# --- a warning given on every call is shown once under the default filter, as in one process -------------------------

WARNS_ON_EVERY_CALL = "import warnings\n\ndef answer():\n    warnings.warn('old')\n    return 1\n"
WARNS_FROM_TWO_LINES = (
    "import warnings\n\ndef answer():\n    warnings.warn('old')\n    warnings.warn('old')\n    return 1\n"
)
COUNTS_THE_WARNINGS = """
import warnings

class T(unittest.TestCase):
    def test(self):
        with warnings.catch_warnings(record=True) as caught:
            self.assertEqual(answer(), 1)
            self.assertEqual(answer(), 1)
        self.assertEqual([str(w.message) for w in caught], ["old"] * {count})
"""


def test_a_warning_given_on_every_call_is_shown_once_under_the_default_filter(executor):
    _same_as_one_process(executor, WARNS_ON_EVERY_CALL, COUNTS_THE_WARNINGS.format(count=1), PASSED, "answer")
    _same_as_one_process(executor, WARNS_FROM_TWO_LINES, COUNTS_THE_WARNINGS.format(count=2), PASSED, "answer")
    _same_as_one_process(
        executor, "def answer():\n    return 1\n", COUNTS_THE_WARNINGS.format(count=1), FAILED, "answer"
    )


def test_a_warning_given_for_the_caller_is_shown_once_for_each_line_of_the_tests_that_calls(executor):
    """``stacklevel=2`` names the caller's line: in one process the tests' two calls are two lines, so two warnings.
    The model's process only sees its own server calling, so the runner gives the warning the tests' line."""
    for_the_caller = WARNS_ON_EVERY_CALL.replace("warnings.warn('old')", "warnings.warn('old', stacklevel=2)")
    _same_as_one_process(executor, for_the_caller, COUNTS_THE_WARNINGS.format(count=2), PASSED, "answer")
    _same_as_one_process(executor, for_the_caller, COUNTS_THE_WARNINGS.format(count=1), FAILED, "answer")


# --- records of a logger that does not propagate reach the tests' capture on it, and only there ----------------------

LOGS_WITHOUT_PROPAGATING = """
import logging, sys

log = logging.getLogger("app")
log.propagate = False
log.addHandler(logging.StreamHandler(sys.stderr))

def answer():
    log.info("hello")
    return 1
"""
LOGS_ON_APP = """
class T(unittest.TestCase):
    def test(self):
        with self.assertLogs("app", level="INFO") as cm:
            self.assertEqual(answer(), 1)
        self.assertEqual(cm.output, ["INFO:app:hello"])
"""
LOGS_NOTHING_ON_THE_ROOT = """
class T(unittest.TestCase):
    def test(self):
        with self.assertNoLogs(level="INFO"):
            self.assertEqual(answer(), 1)
"""


def test_a_logger_that_does_not_propagate_is_captured_where_the_tests_look(executor):
    _same_as_one_process(executor, LOGS_WITHOUT_PROPAGATING, LOGS_ON_APP, PASSED, "answer")
    _same_as_one_process(executor, LOGS_WITHOUT_PROPAGATING, LOGS_NOTHING_ON_THE_ROOT, PASSED, "answer")
    propagating = LOGS_WITHOUT_PROPAGATING.replace("log.propagate = False", "")
    _same_as_one_process(executor, propagating, LOGS_NOTHING_ON_THE_ROOT, FAILED, "answer")
    _same_as_one_process(executor, "def answer():\n    return 1\n", LOGS_ON_APP, FAILED, "answer")


LOGS_THE_EXCEPTION = """
import logging

log = logging.getLogger("app")

def answer(text):
    try:
        return int(text)
    except ValueError:
        log.exception("bad input")
        return None
"""
LOOKS_FOR_THE_EXCEPTION_IN_THE_OUTPUT = """
class T(unittest.TestCase):
    def test(self):
        with self.assertLogs("app", "ERROR") as cm:
            self.assertIsNone(answer("x"))
        self.assertTrue(cm.output[0].startswith("ERROR:app:bad input\\nTraceback"), cm.output)
        self.assertIn("ValueError: invalid literal for int()", cm.output[0])
"""


def test_the_traceback_of_a_logged_exception_reaches_the_tests_capture(executor):
    tests = LOOKS_FOR_THE_EXCEPTION_IN_THE_OUTPUT
    _same_as_one_process(executor, LOGS_THE_EXCEPTION, tests, PASSED, "answer")
    without_it = LOGS_THE_EXCEPTION.replace("log.exception(", "log.error(")
    _same_as_one_process(executor, without_it, tests, FAILED, "answer")


LOGS_WITH_EXTRA_FIELDS = """
import logging

def answer(user):
    logging.getLogger("app").warning("login", extra={"user_id": user, "tags": ["a", 1]})
    return 1
"""
READS_THE_EXTRA_FIELDS = """
class T(unittest.TestCase):
    def test(self):
        with self.assertLogs("app") as cm:
            self.assertEqual(answer(7), 1)
        record = cm.records[0]
        self.assertEqual((record.user_id, record.tags, record.levelno, record.getMessage()), (7, ["a", 1], 30, "login"))
"""


def test_the_extra_fields_of_a_record_reach_the_tests_capture(executor):
    _same_as_one_process(executor, LOGS_WITH_EXTRA_FIELDS, READS_THE_EXTRA_FIELDS, PASSED, "answer")
    wrong = LOGS_WITH_EXTRA_FIELDS.replace('"user_id": user', '"user_id": user + 1')
    _same_as_one_process(executor, wrong, READS_THE_EXTRA_FIELDS, FAILED, "answer")


# --- doctor flags the tests reading the model's module from sys.modules ----------------------------------------------

READS_THE_MODELS_MODULE = {
    "subscript": ("import sys\n", 'sys.modules["solution"].answer()'),
    "get": ("import sys\n", 'sys.modules.get("solution").answer()'),
    "imported-under-another-name": ("import sys as system\n", 'system.modules["solution"].answer()'),
    "modules-imported-itself": ("from sys import modules\n", 'modules["solution"].answer()'),
}
READS_ANOTHER_MODULE = {
    "json": ("import sys\n", 'sys.modules["json"].loads("1")'),
    "its-own": ("import sys\n", "sys.modules[__name__].answer()"),
    "a-dict-of-its-own": ("modules = {'solution': None}\n", 'modules["solution"] or answer()'),
}


def _calls_through(imports: str, expression: str) -> str:
    test = f"class T(unittest.TestCase):\n    def test(self):\n        self.assertEqual({expression}, 1)\n"
    return f"import unittest\n{imports}{test}"


@pytest.mark.parametrize("case", READS_THE_MODELS_MODULE)
def test_doctor_flags_the_tests_reading_the_models_module_from_sys_modules(case):
    tests = _calls_through(*READS_THE_MODELS_MODULE[case])
    assert [finding for finding in shape_findings(tests) if "from sys.modules" in finding], tests


@pytest.mark.parametrize("case", READS_ANOTHER_MODULE)
def test_doctor_leaves_other_reads_of_sys_modules_alone(case):
    tests = _calls_through(*READS_ANOTHER_MODULE[case])
    assert not [finding for finding in shape_findings(tests) if "from sys.modules" in finding], tests
