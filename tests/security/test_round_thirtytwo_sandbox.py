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


def _patch_tests(body: str) -> str:
    return "import unittest\nfrom unittest import mock\n\nclass T(unittest.TestCase):\n    def test_a(self):\n" + (
        textwrap.indent(body, " " * 8) + "\n"
    )


@pytest.mark.parametrize("name", sorted(PATCHED_READS))
def test_a_model_call_under_a_patch_it_cannot_see_is_a_loud_error(executor, name):
    code, body = PATCHED_READS[name]
    tests = _patch_tests(body)
    for answer in (code, "def f():\n    return None\n"):  # a right answer and a wrong one: the task's property
        result = _run(executor, name, answer, tests)
        assert result.status is ExecutionStatus.ERROR, (result.status, result.reason)
        assert "in-process fallback" in result.reason and "patch" in result.reason, result.reason
        assert not result.model_fault


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
    result = _run(executor, name, code, _patch_tests(body))
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


def _measuring_tests(body: str) -> str:
    return "import sys, time, unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n" + (
        textwrap.indent(body, " " * 8) + "\n"
    )


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_tests_measuring_the_models_code_in_their_own_process_are_a_loud_error(executor, name):
    """The runner's CPU time, allocations and calls are not the model's code's: a wrong answer passed a test of its
    cost that one process fails."""
    body, wrong, right = MEASURED[name]
    for answer in (wrong, right):
        result = _run(executor, name, answer, _measuring_tests(body))
        assert result.status is ExecutionStatus.ERROR, (result.status, result.reason)
        assert "in-process fallback" in result.reason, result.reason


def test_measuring_only_the_tests_own_work_still_scores(executor):
    body = (
        "self.assertEqual(f(3), 9)\nstart = time.process_time()\nsum(range(1000))\n"
        "self.assertGreaterEqual(time.process_time() - start, 0)\nsys.setprofile(None)"
    )
    result = _run(executor, "after the calls", LINEAR, _measuring_tests(body))
    assert result.status is ExecutionStatus.PASSED, result.reason


def _findings(tests: str) -> list[str]:
    from rewardpipe.execution.shape_lint import shape_findings

    return shape_findings(tests)


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_doctor_names_tests_that_measure_the_models_code(name):
    found = _findings(_measuring_tests(MEASURED[name][0]))
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
    found = _findings(_measuring_tests(line + "\nself.assertEqual(f(3), 9)"))
    assert any("measures" in item for item in found), found


def test_doctor_leaves_wall_clock_timing_alone():
    found = _findings(_measuring_tests("start = time.perf_counter()\nself.assertEqual(f(3), 9)\ntime.monotonic()"))
    assert not any("measures" in item for item in found), found
