"""Round thirty-two, the sandbox: attacked through the public executor, in full isolation and the Lambda/Fargate mode.

* **A patch the model's code never sees.** Tests that ``mock.patch`` something of the standard library (``time.time``,
  ``builtins.input``, ``os.environ`` through ``patch.dict``) and call the model's code while it is active change what
  the model's code reads in one process only: under split trust it runs in another process, unpatched, so a right
  answer **failed silently** (a 0; ``doctor`` flagged the shape, nothing at run time did). A model call made while such
  a patch is active is now the loud ``error`` naming the in-process fallback, whatever the answer; patches that do
  cross or never concern the model's code (``sys.stdout``, replayed; the model's own objects, through the boundary;
  the tests' own classes and module) are unchanged.
"""

from __future__ import annotations

import textwrap

import pytest

from rewardpipe.execution import ExecutionStatus
from tests.security import test_round_thirtyone_sandbox as thirtyone

executor = thirtyone.executor  # (the fixture: every layer this host allows, then the Lambda/Fargate mode)


def _run(executor, name: str, code: str, tests: str):
    return thirtyone._run(executor, name, code, tests, entry_point="f")


PATCHED_READS = {
    "time.time by name": (
        "import time\ndef f():\n    return time.time()\n",
        "with mock.patch('time.time', return_value=5):\n    self.assertEqual(f(), 5)",
    ),
    "builtins.input, as a decorator": (
        "def f():\n    return input().upper()\n",
        "@mock.patch('builtins.input', return_value='ab')\ndef check(_input):\n"
        "    self.assertEqual(f(), 'AB')\ncheck()",
    ),
    "patch.object of a module, started": (
        "import os\ndef f():\n    return os.getcwd()\n",
        "import os\npatcher = mock.patch.object(os, 'getcwd', return_value='/srv')\npatcher.start()\n"
        "self.addCleanup(patcher.stop)\nself.assertEqual(f(), '/srv')",
    ),
    "patch.dict of os.environ": (
        "import os\ndef f():\n    return os.environ.get('RP_MODE')\n",
        "import os\nwith mock.patch.dict(os.environ, {'RP_MODE': 'fast'}):\n    self.assertEqual(f(), 'fast')",
    ),
}


def _tests(body: str, imports: str = "import decimal, io, os, sys, time, unittest\nfrom unittest import mock") -> str:
    return f"{imports}\n\nclass T(unittest.TestCase):\n    def test_a(self):\n" + textwrap.indent(body, " " * 8) + "\n"


def _assert_loud_errors(executor, name: str, answers, tests: str) -> None:
    """Every answer (a right one and a wrong one: the shape is the task's) is the error naming the fallback."""
    for answer in answers:
        result = _run(executor, name, answer, tests)
        assert result.status is ExecutionStatus.ERROR, (result.status, result.reason)
        assert "in-process fallback" in result.reason, result.reason
        assert not result.model_fault


@pytest.mark.parametrize("name", sorted(PATCHED_READS))
def test_a_model_call_under_a_patch_it_cannot_see_is_a_loud_error(executor, name):
    code, body = PATCHED_READS[name]
    _assert_loud_errors(executor, name, (code, "def f():\n    return None\n"), _tests(body))


PATCHES_THAT_HOLD = {
    "sys.stdout, replayed": (
        "def f():\n    print('hi')\n",
        "import io\nwith mock.patch('sys.stdout', new_callable=io.StringIO) as out:\n    f()\n"
        "self.assertEqual(out.getvalue(), 'hi\\n')",
    ),
    "the tests' own helper": (
        "def f():\n    return 3\n",
        "class Clock:\n    def now(self):\n        return 1\nwith mock.patch.object(Clock, 'now', return_value=2):\n"
        "    self.assertEqual(f() + Clock().now(), 5)",
    ),
    "a patch over before the call": (
        "import time\ndef f():\n    return time.time() > 100\n",
        "with mock.patch('time.time', return_value=5):\n    import time\n    self.assertEqual(time.time(), 5)\n"
        "self.assertTrue(f())",
    ),
}


@pytest.mark.parametrize("name", sorted(PATCHES_THAT_HOLD))
def test_patches_that_reach_the_model_or_never_concern_it_still_score(executor, name):
    code, body = PATCHES_THAT_HOLD[name]
    result = _run(executor, name, code, _tests(body))
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


# --- what the tests measure of the model's code from their own process -------------------------------------------

QUADRATIC = (
    "def f(n):\n    s = 0\n    for i in range(n):\n        for j in range(n):\n            s += 1\n    return s\n"
)
LINEAR = "def f(n):\n    return n * n\n"
LIST_BUILDER = "def f(n):\n    xs = list(range(n))\n    return len(xs)\n"
COUNTING = "def f(n):\n    return n\n"
EXPONENTIAL = "def f(n):\n    return n if n < 2 else f(n - 1) + f(n - 2)\n"
MEMOIZED = "import functools\n@functools.lru_cache(None)\ndef f(n):\n    return n if n < 2 else f(n - 1) + f(n - 2)\n"

# (tests body, a wrong answer that one process fails and split trust passed, a right answer)
MEASURED = {
    "CPU time by time.process_time": (
        "start = time.process_time()\nself.assertEqual(f(2500), 6250000)\n"
        "self.assertLess(time.process_time() - start, 0.05)",
        QUADRATIC,
        LINEAR,
    ),
    "CPU time by resource.getrusage": (
        "import resource\nbefore = resource.getrusage(resource.RUSAGE_SELF).ru_utime\n"
        "self.assertEqual(f(2500), 6250000)\n"
        "self.assertLess(resource.getrusage(resource.RUSAGE_SELF).ru_utime - before, 0.05)",
        QUADRATIC,
        LINEAR,
    ),
    "allocations by tracemalloc": (
        "import tracemalloc\ntracemalloc.start()\ntry:\n    self.assertEqual(f(10**6), 10**6)\n"
        "    peak = tracemalloc.get_traced_memory()[1]\nfinally:\n    tracemalloc.stop()\n"
        "self.assertLess(peak, 100_000)",
        LIST_BUILDER,
        COUNTING,
    ),
    "calls counted by sys.setprofile": (
        "calls = []\nsys.setprofile(lambda frame, event, arg: calls.append(1) if event == 'call' else None)\n"
        "try:\n    self.assertEqual(f(20), 6765)\nfinally:\n    sys.setprofile(None)\nself.assertLess(len(calls), 100)",
        EXPONENTIAL,
        MEMOIZED,
    ),
}


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_tests_measuring_the_models_code_in_their_own_process_are_a_loud_error(executor, name):
    """The runner's CPU time, allocations and calls are not the model's code's: a wrong answer passed a test of its
    cost that one process fails."""
    body, wrong, right = MEASURED[name]
    _assert_loud_errors(executor, name, (wrong, right), _tests(body))


def test_measuring_only_the_tests_own_work_still_scores(executor):
    body = (
        "self.assertEqual(f(3), 9)\nstart = time.process_time()\nsum(range(1000))\n"
        "self.assertGreaterEqual(time.process_time() - start, 0)\nsys.setprofile(None)"
    )
    result = _run(executor, "after the calls", LINEAR, _tests(body))
    assert result.status is ExecutionStatus.PASSED, result.reason


def _findings(tests: str) -> list[str]:
    from rewardpipe.execution.shape_lint import shape_findings

    return shape_findings(tests)


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_doctor_names_tests_that_measure_the_models_code(name):
    found = _findings(_tests(MEASURED[name][0]))
    assert any("measures" in item and "another process" in item for item in found), found


@pytest.mark.parametrize(
    "line",
    [
        "from time import process_time as cpu\nstart = cpu()",
        "import cProfile\ncProfile.run('f(3)')",
        "import threading\nthreading.setprofile(print)",
        "import os\nused = os.times().user",
        "used = time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID)",
    ],
)
def test_doctor_names_every_way_of_measuring(line):
    found = _findings(_tests(line + "\nself.assertEqual(f(3), 9)"))
    assert any("measures" in item for item in found), found


def test_doctor_leaves_wall_clock_timing_alone():
    found = _findings(_tests("start = time.perf_counter()\nself.assertEqual(f(3), 9)\ntime.monotonic()"))
    assert not any("measures" in item for item in found), found


# --- state of the tests' process that the model's code reads in one process ----------------------------------------

# (tests body, a right answer that one process passes): each was a right answer's silent 0 under split trust
SET_STATE = [
    pytest.param(
        "import builtins\nsaved = builtins.input\nbuiltins.input = lambda prompt='': '3 4'\n"
        "self.addCleanup(setattr, builtins, 'input', saved)\nself.assertEqual(f(), 7)",
        "def f():\n    a, b = input().split()\n    return int(a) + int(b)\n",
        id="a built-in replaced",
    ),
    pytest.param(
        "sys.stdin = io.StringIO('3 4')\nself.assertEqual(f(), 7)",
        "def f():\n    a, b = input().split()\n    return int(a) + int(b)\n",
        id="sys.stdin replaced",
    ),
    pytest.param(
        "os.environ['RP_UNIT'] = 'ms'\nself.addCleanup(os.environ.pop, 'RP_UNIT')\nself.assertEqual(f(), 'ms')",
        "import os\ndef f():\n    return os.environ.get('RP_UNIT', 's')\n",
        id="os.environ set",
    ),
    pytest.param(
        "old = os.getcwd()\nos.chdir('/')\nself.addCleanup(os.chdir, old)\nself.assertEqual(f(), '/')",
        "import os\ndef f():\n    return os.getcwd()\n",
        id="working directory",
    ),
    pytest.param(
        "sys.setrecursionlimit(20000)\nself.assertEqual(f(5000), 5000)",
        "def f(n):\n    return 0 if n == 0 else 1 + f(n - 1)\n",
        id="recursion limit",
    ),
    pytest.param(
        "with decimal.localcontext() as context:\n    context.prec = 5\n    self.assertEqual(str(f()), '0.33333')",
        "import decimal\ndef f():\n    return decimal.Decimal(1) / 3\n",
        id="decimal precision",
    ),
]


@pytest.mark.parametrize(("body", "right"), SET_STATE)
def test_a_model_call_after_the_tests_set_state_it_reads_is_a_loud_error(executor, body, right):
    _assert_loud_errors(executor, "set state", (right, "def f(*args):\n    return None\n"), _tests(body))


def test_state_set_and_put_back_before_the_call_still_scores(executor):
    body = (
        "os.environ['RP_UNIT'] = 'ms'\ndel os.environ['RP_UNIT']\nold = sys.getrecursionlimit()\n"
        "sys.setrecursionlimit(old + 1)\nsys.setrecursionlimit(old)\nself.assertEqual(f(), decimal.Decimal('0.5'))"
    )
    result = _run(executor, "put back", "import decimal\ndef f():\n    return decimal.Decimal(1) / 2\n", _tests(body))
    assert result.status is ExecutionStatus.PASSED, result.reason


# --- what the tests read of their own process as a sign of what the model's code did ------------------------------

OWN_PROCESS_READS = {
    "sys.modules": "self.assertEqual(f(3), 9)\nself.assertNotIn('bisect', sys.modules)",
    "threading.active_count": (
        "before = threading.active_count()\nf(3)\nself.assertEqual(threading.active_count(), before)"
    ),
    "threading.enumerate": "f(3)\nself.assertEqual(len(threading.enumerate()), 1)",
    "signal.getsignal": (
        "import signal\nf(3)\nself.assertIs(signal.getsignal(signal.SIGINT), signal.default_int_handler)"
    ),
}


@pytest.mark.parametrize("name", sorted(OWN_PROCESS_READS))
def test_doctor_names_tests_that_read_their_own_process_for_what_the_model_did(name):
    """A wrong answer that imports a forbidden module or leaves a thread running passed such a check under split
    trust (the runner's process is unchanged), and a right one that installs a handler failed it."""
    found = _findings(_tests("import threading\n" + OWN_PROCESS_READS[name]))
    assert any("what the model's code did" in item and name in item for item in found), found


def test_doctor_leaves_the_tests_own_module_alone():
    found = _findings(_tests("module = sys.modules[__name__]\nself.assertEqual(f(3), 9)"))
    assert not any("what the model's code did" in item for item in found), found


# --- the code of the model's function, read by the tests -----------------------------------------------------------

PREPENDS = "def f(xs):\n    out = []\n    for x in xs:\n        out.insert(0, x)\n    return out\n"


@pytest.mark.parametrize(
    "check",
    ["self.assertIn('insert', f.__code__.co_names)", "self.assertEqual(f.__code__.co_argcount, 1)"],
    ids=["co_names", "co_argcount"],
)
def test_reading_the_code_object_of_the_models_function_is_a_loud_error(executor, check):
    """One process passes the right answer; under split trust the code object is the model's process's, and the
    right answer failed on an AttributeError of the runner's placeholder."""
    tests = _tests(check + "\nself.assertEqual(f([1, 2]), [2, 1])")
    _assert_loud_errors(executor, "code object", (PREPENDS, "def f(xs):\n    return xs\n"), tests)


@pytest.mark.parametrize(
    "line",
    [
        "import inspect\nself.assertNotIn('reversed', inspect.getsource(f))",
        "from inspect import getsourcelines\nlines, _ = getsourcelines(f)",
        "import dis\ndis.dis(f)",
        "self.assertIn('insert', f.__code__.co_names)",
    ],
    ids=["getsource", "getsourcelines", "dis", "co_names"],
)
def test_doctor_names_tests_that_read_the_models_source_or_bytecode(line):
    found = _findings(_tests(line))
    assert any("source or bytecode" in item for item in found), found


def test_doctor_leaves_the_tests_own_functions_source_alone():
    found = _findings(_tests("import inspect\ndef helper():\n    return 1\ninspect.getsource(helper)\nf([1])"))
    assert not any("source or bytecode" in item for item in found), found
