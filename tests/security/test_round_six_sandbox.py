"""Sixth attack round on the sandbox (issue 19, classes 1, 2, 4 and 9 probed again): what one job can leave in,
or learn from, the processes that outlive it (the long-lived trusted runner, the fork server its children are
copies of), on full isolation and on the Lambda/Fargate configuration.

Every payload carries a wrong ``add``: its verdict must be ``failed`` (or ``timeout``), never ``passed`` and
never an infrastructure ``error``, and what it leaves behind must not reach the next job.
"""

from __future__ import annotations

import textwrap

import pytest

from rewardpipe.execution import ExecutionJob, ExecutionStatus
from tests.security.conftest import RIGHT_ADD, WRONG_ADD, assert_failed, assert_scorer_survives, job
from tests.security.test_round_four import degraded  # noqa: F401 - the Lambda-mode fixture


def _targets(one_worker, degraded, mode):  # noqa: F811
    return one_worker if mode == "full" else degraded


# --- log records naming loggers that pile up in the long-lived runner ----------------------------------

# What the model's code logs while serving a call is replayed in the trusted runner, under the logger name
# the model chose. Replaying it with logging.getLogger(name) registered a logger, plus a placeholder for every
# dotted prefix of the name, for the life of the runner (500 jobs): about 12 KiB per name, up to 100 names per
# call. Jobs of one model could so fill the runner's 1 GiB until a later job, any model's, met a MemoryError
# (a correct answer scored 0, or an infrastructure error for a wrong one). Measured before the fix: the
# runner's RSS 17 -> 29.5 MB after 5 such jobs of 2 calls each.
LOGS_UNDER_FRESH_NAMES = WRONG_ADD.replace("return a - b", "_spam()\n    return a - b") + textwrap.dedent("""
    import logging, random
    def _spam():
        for _ in range(100):
            prefix = "poison%x" % random.getrandbits(64)
            logging.getLogger(prefix + ".a" * 90).critical("x")
""")
# Hidden tests (trusted: they run in the runner) that look at what the runner holds after the attack.
RUNNER_LOGGERS = """
import logging
import unittest

class TestAdd(unittest.TestCase):
    def test_small(self):
        self.assertEqual(add(1, 2), 3)

    def test_runner_keeps_no_model_loggers(self):
        left = [name for name in logging.Logger.manager.loggerDict if name.startswith("poison")]
        self.assertEqual(len(left), 0)
"""


@pytest.mark.parametrize("mode", ["full", "degraded"])
def test_log_records_leave_no_logger_in_the_runner(one_worker, degraded, mode):  # noqa: F811
    target = _targets(one_worker, degraded, mode)
    for _ in range(2):
        assert_failed(target.run(job(LOGS_UNDER_FRESH_NAMES)))
    after = target.run(job(RIGHT_ADD, tests=RUNNER_LOGGERS))
    assert after.status is ExecutionStatus.PASSED, (after.status, after.reason)


# The replay keeps what tests see: a record of a logger nobody registered reaches a handler of its registered
# ancestor (assertLogs("app") for "app.db.pool"), the ancestor's level decides whether it exists, and a logger
# the tests registered themselves gets it directly.
LOGS_FOR_THE_TESTS = textwrap.dedent("""
    import logging
    def add(a, b):
        logging.getLogger("app.db.pool").info("pooled %d", a)
        logging.getLogger("app").debug("debug detail")
        logging.getLogger("other").warning("elsewhere")
        return a + b
""")
CAPTURING_TESTS = """
import logging
import unittest

class TestAdd(unittest.TestCase):
    def test_ancestor_sees_the_child(self):
        with self.assertLogs("app", level="INFO") as seen:
            self.assertEqual(add(1, 2), 3)
        self.assertEqual(seen.output, ["INFO:app.db.pool:pooled 1"])

    def test_registered_logger(self):
        logging.getLogger("other")
        with self.assertLogs("other", level="WARNING") as seen:
            self.assertEqual(add(2, 2), 4)
        self.assertEqual(seen.output, ["WARNING:other:elsewhere"])

    def test_root(self):
        with self.assertLogs(level="DEBUG") as seen:
            add(3, 4)
        self.assertEqual(len(seen.output), 3)
"""


def test_replayed_log_records_reach_the_tests_capture(one_worker):
    result = one_worker.run(
        ExecutionJob(code=LOGS_FOR_THE_TESTS, tests=CAPTURING_TESTS, entry_point="add", timeout_s=5)
    )
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


# --- another process's CPU clock -------------------------------------------------------------------------

# clock_gettime on the clockid ((~pid) << 3) | CPUCLOCK_SCHED reads any process's CPU time, with no permission
# check, in nanoseconds; Landlock, which hides /proc, does not govern it. The model's code found its neighbours
# by pid (the fork server is its parent; the trusted runner a sibling) and read the runner's CPU time between two
# calls: ~1.9 ms after a failed assertion, ~0.3 ms after a passing one, so it knew which of its answers were
# wrong while the tests ran. Before the fix: 12 processes readable, the parent among them. The model's own CPU
# clocks keep working.
READS_OTHER_CPU_CLOCKS = WRONG_ADD + textwrap.dedent("""
    import ctypes, os, threading, time
    def clock_of(pid, kind=2):  # MAKE_PROCESS_CPUCLOCK(pid, kind): 2 is CPUCLOCK_SCHED, 0 PROF, 1 VIRT
        return ((~pid) << 3) | kind
    me = os.getpid()
    # In a pid namespace of its own (pidns, round ten) the job is pid 1 and its parent has no pid (0, which names
    # the caller): the next pid stands in for it there, as for every other process it cannot see.
    parent = os.getppid() or me + 1
    readable = []
    for pid in [parent, 1, *range(max(2, me - 300), me + 30)]:
        if pid == me:
            continue
        for kind in (0, 1, 2):
            try:
                time.clock_gettime_ns(clock_of(pid, kind))
                readable.append(pid)
            except OSError:
                pass
            try:
                time.clock_getres(clock_of(pid, kind))
                readable.append(pid)
            except OSError:
                pass
    print("OTHERS", len(readable))
    libc = ctypes.CDLL(None, use_errno=True)
    class timespec(ctypes.Structure):
        _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]
    asleep = libc.clock_nanosleep(ctypes.c_int(clock_of(parent)), 0, ctypes.byref(timespec(0, 1)), None)
    timer = ctypes.c_void_p()
    armed = libc.timer_create(ctypes.c_int(clock_of(parent)), None, ctypes.byref(timer))
    print("NANOSLEEP", asleep, "TIMER", armed)
    own = [
        time.process_time_ns() >= 0,
        time.thread_time_ns() >= 0,
        time.clock_gettime_ns(time.CLOCK_PROCESS_CPUTIME_ID) >= 0,
        time.clock_gettime_ns(clock_of(me)) >= 0,
        time.clock_gettime_ns(clock_of(0)) >= 0,
        time.clock_gettime_ns(time.pthread_getcpuclockid(threading.get_ident())) >= 0,
        time.clock_gettime_ns(time.CLOCK_MONOTONIC) >= 0,
    ]
    print("OWN", all(own))
""")


@pytest.mark.parametrize("mode", ["full", "degraded"])
def test_no_other_process_cpu_clock_is_readable(one_worker, degraded, mode):  # noqa: F811
    result = _targets(one_worker, degraded, mode).run(job(READS_OTHER_CPU_CLOCKS))
    assert_failed(result)
    assert "OTHERS 0" in result.stdout, result.stdout
    assert "NANOSLEEP 22 TIMER -1" in result.stdout, result.stdout  # EINVAL; timer_create returns -1 (errno EINVAL)
    assert "OWN True" in result.stdout, (result.stdout, result.stderr[-1000:])


# --- the hidden tests' module-level code, failing because of a name the model's code chose ----------------

# Tests that read, at module level, a name the model's namespace provides (HumanEval's prompts import ``math``
# for the tests): a wrong answer that bound it to something else (``import json as math``, an exception class)
# or left it out made the tests fail to load, reported as "hidden tests raised while loading", an
# infrastructure error excluded from GRPO, while a right answer passed: a wrong answer could opt out of its 0.
READS_A_MODEL_NAME_AT_LOAD = """
import unittest
TOLERANCE = math.ulp(1.0)

class TestAdd(unittest.TestCase):
    def test_small(self):
        self.assertEqual(add(1, 2), 3)

    def test_equal(self):
        self.assertEqual(add(2, 2), 4)
"""
SHADOWS = {
    "another module": "import json as math\n",
    "an exception class": "class math(ValueError):\n    pass\n",
    "nothing": "",
}


@pytest.mark.parametrize("shadow", sorted(SHADOWS))
def test_a_load_failure_the_model_chose_is_its_failure(one_worker, shadow):
    honest = one_worker.run(job("import math\n" + RIGHT_ADD, tests=READS_A_MODEL_NAME_AT_LOAD))
    assert honest.status is ExecutionStatus.PASSED, honest.reason
    result = one_worker.run(job(SHADOWS[shadow] + WRONG_ADD, tests=READS_A_MODEL_NAME_AT_LOAD))
    assert result.status is ExecutionStatus.FAILED and result.passed == 0, (result.status, result.reason)


# Tests broken whatever the model writes stay an infrastructure error: a module the runner cannot import, even
# beside a module name the model provides.
BROKEN_AT_LOAD = """
import unittest
import module_that_does_not_exist_r6
X = math.pi

class TestAdd(unittest.TestCase):
    def test_small(self):
        self.assertEqual(add(1, 2), 3)
"""


def test_tests_broken_whatever_the_model_writes_stay_an_error(one_worker):
    result = one_worker.run(job("import math\n" + RIGHT_ADD, tests=BROKEN_AT_LOAD))
    assert result.status is ExecutionStatus.ERROR, (result.status, result.reason)


# --- values the model's replies build that the trusted side cannot send back --------------------------------

# The trusted side refuses to send a value nested more than 200 levels deep. Refused as a property of the tests
# ("the hidden tests need the in-process fallback", an infrastructure error excluded from GRPO), it was the
# model's to choose: a forged write-back made the caller's own list hold itself (a reference to the argument
# inside its new contents), and a result of the deepest depth the wire carries, wrapped by the tests in a list
# and sent back, is one level too deep. Both were `error` for a wrong answer; now the test that sends it fails.
FORGES_A_SELF_HOLDING_ARGUMENT = textwrap.dedent("""
    import sys
    untrusted = next(m for name, m in list(sys.modules.items()) if name.endswith("untrusted") and hasattr(m, "Server"))
    original = untrusted.Server.handle
    def handle(self, request):
        reply = original(self, request)
        if request.get("op") == "call":
            reply["wb"] = [[0, {"l": [{"a": 0}]}]]  # the caller's list, made to hold itself
        return reply
    untrusted.Server.handle = handle
    def add(a, b):
        return -1
""")
PASSES_AN_ARGUMENT_TWICE = """
import unittest

class TestAdd(unittest.TestCase):
    def test_small(self):
        data = [1, 2]
        first = add(data, 0)
        self.assertEqual(add(data, 1), 4)
        self.assertEqual(first, 3)
"""
RETURNS_THE_DEEPEST_VALUE = textwrap.dedent("""
    def add(a, b):
        value = 0
        for _ in range(200):
            value = [value]
        return value
""")
WRAPS_A_RESULT_AND_SENDS_IT = """
import unittest

class TestAdd(unittest.TestCase):
    def test_small(self):
        packed = add(1, 2)
        self.assertEqual(add([packed], 0), 3)
"""


@pytest.mark.parametrize(
    "code, tests",
    [
        (FORGES_A_SELF_HOLDING_ARGUMENT, PASSES_AN_ARGUMENT_TWICE),
        (RETURNS_THE_DEEPEST_VALUE, WRAPS_A_RESULT_AND_SENDS_IT),
    ],
    ids=["self-holding write-back", "wrapped deepest result"],
)
def test_a_value_too_deep_to_send_back_fails_the_test(one_worker, code, tests):
    result = one_worker.run(ExecutionJob(code=code, tests=tests, entry_point="add", timeout_s=5))
    assert result.status is ExecutionStatus.FAILED and result.passed == 0, (result.status, result.reason)
    assert_scorer_survives(one_worker)


# --- the thread quota where every job shares the fork servers' uid (Lambda, Fargate) -------------------------

# RLIMIT_NPROC counts every task of the uid, and there the sandbox's own processes (fork servers, runners, waiting
# children, the scorer where it shares the uid) are of that uid too: with the cap at pids_max for the whole uid, a
# job of a 12-worker executor could not start one thread, and a correct answer that used one failed ("can't start
# new thread"). A job may now hold pids_max tasks beyond the sandbox's own; the report says so.
HOLDS_ITS_THREAD_QUOTA = RIGHT_ADD + textwrap.dedent("""
    import threading
    gate = threading.Event()
    started = []
    try:
        for _ in range(63):  # pids_max (64) with its own main thread
            thread = threading.Thread(target=gate.wait, daemon=True)
            thread.start()
            started.append(thread)
    except RuntimeError:
        pass
    print("THREADS", len(started))
    gate.set()
""")


def test_a_job_gets_its_thread_quota_beside_the_sandboxs_own_processes(degraded):  # noqa: F811
    result = degraded.run(job(HOLDS_ITS_THREAD_QUOTA))
    assert "THREADS 63" in result.stdout, result.stdout
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)
    assert "for the shared uid" in degraded.isolation()["rlimits"], degraded.isolation()["rlimits"]
