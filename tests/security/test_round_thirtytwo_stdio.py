"""Round thirty-two, part 4b, the sandbox: the model's source, and the stdio mode, attacked through the public executor
in full isolation and the Lambda/Fargate mode.

* **The model's source.** ``inspect.getsource`` of the model's function raised ``OSError`` even where the tests run
  beside it (``trust_mode="inprocess"``) and in a stdio program reading its own functions, which ``python program.py``
  allows: a right answer's 0. The model's code is now registered in ``linecache`` under its file name, as an imported
  file's would be found (never the hidden tests'). Under split trust the tests' ``inspect.getsource`` of the model's
  function and ``assertIs(iter(it), it)`` on its iterators stay a right answer's 0; ``doctor`` names both.
* **The CPU-time limit.** A program the kernel killed at the job's CPU-time limit (threads on several CPUs reach it
  before the wall-clock deadline) was a failed case, and a stdio job went on to its next cases: partial credit for an
  endless loop, where the deadline makes the job a ``timeout`` (a 0). It is now that ``timeout``.
* **Signals a program sends itself.** As pid 1 of its own namespace a stdio program ignored a signal it sent itself at
  its default (``os.kill(os.getpid(), SIGTERM)``, ``signal.alarm``) and could pass, where ``python program.py`` and
  the Lambda/Fargate mode end it. Such a signal now ends it (exit 128 + its number).
"""

from __future__ import annotations

import json
import textwrap
import time

import pytest

from rewardpipe.execution import ExecutionJob, ExecutionStatus
from rewardpipe.execution.shape_lint import shape_findings
from tests.security import test_round_thirtyone_sandbox as thirtyone

executor = thirtyone.executor  # (the fixture: every layer this host allows, then the Lambda/Fargate mode)


def _tests(body: str) -> str:
    return "import inspect, unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n" + textwrap.indent(
        body, " " * 8
    )


def _run(executor, code: str, tests: str, trust_mode: str = "split"):
    job = ExecutionJob(id="t", code=code, tests=tests, entry_point="f", timeout_s=20, trust_mode=trust_mode)
    return executor.run(job)


def _stdio(executor, code: str, cases, timeout_s: float = 10):
    tests = json.dumps(cases)
    return executor.run(ExecutionJob(id="s", code=code, tests=tests, tests_format="stdio", timeout_s=timeout_s))


# --- the model's source --------------------------------------------------------------------------------------------

PREPENDS = "def f(xs):\n    out = []\n    for x in xs:\n        out.insert(0, x)\n    return out\n"
REVERSES = "def f(xs):\n    return list(reversed(xs))\n"
NO_REVERSED = "self.assertNotIn('reversed', inspect.getsource(f))\nself.assertEqual(f([1, 2]), [2, 1])\n"


def test_tests_in_process_read_the_models_source(executor):
    """In one process ``inspect.getsource(f)`` reads the model's file: the right answer passes, the other fails on
    what its source says (before: OSError for both)."""
    right = _run(executor, PREPENDS, _tests(NO_REVERSED), "inprocess")
    assert right.status is ExecutionStatus.PASSED, right.reason
    wrong = _run(executor, REVERSES, _tests(NO_REVERSED), "inprocess")
    assert wrong.status is ExecutionStatus.FAILED and "AssertionError" in wrong.reason, wrong.reason


def test_a_stdio_program_reads_its_own_source(executor):
    program = "import inspect\ndef g():\n    return 1\nprint(inspect.getsource(g).split()[0], g())\n"
    result = _stdio(executor, program, [{"input": "", "output": "def 1"}])
    assert result.status is ExecutionStatus.PASSED, (result.reason, result.stderr)


def test_the_hidden_tests_source_is_not_in_the_models_process(executor):
    """In one process the model's code could read what linecache holds: the hidden tests' text is never there."""
    body = "import linecache, sys\nname = sys._getframe().f_code.co_filename\n"
    body += "self.assertEqual(linecache.getlines(name), [])\n"
    body += "self.assertTrue(linecache.getlines(f.__code__.co_filename))\n"
    result = _run(executor, PREPENDS, _tests(body), "inprocess")
    assert result.status is ExecutionStatus.PASSED, result.reason


def test_doctor_names_source_reads_only_under_split_trust():
    tests = _tests(NO_REVERSED)
    assert any("source or bytecode" in item for item in shape_findings(tests)), shape_findings(tests)
    assert not any("source or bytecode" in item for item in shape_findings(tests, trust_mode="inprocess"))


@pytest.mark.parametrize(
    "line",
    ["self.assertIs(iter(it), it)", "self.assertTrue(iter(it) is it)", "assert it.__iter__() is it"],
    ids=["assertIs", "is", "__iter__"],
)
def test_doctor_names_tests_that_check_a_model_iterator_is_its_own(line):
    tests = _tests(f"it = f(3)\n{line}\nself.assertEqual(list(it), [0, 1, 2])\n")
    found = shape_findings(tests)
    assert any("its own iterator" in item for item in found), found
    assert not any("its own iterator" in item for item in shape_findings(tests, trust_mode="inprocess"))


def test_doctor_leaves_the_tests_own_iterators_alone():
    tests = _tests("xs = iter([1])\nself.assertIs(iter(xs), xs)\nself.assertEqual(f(3), 3)\n")
    assert not any("its own iterator" in item for item in shape_findings(tests))


def test_a_model_iterator_that_is_its_own_fails_the_identity_check_under_split_trust(executor):
    """The shape doctor names, as it stands (left: the runner's fetch is chunked, round eleven)."""
    code = "class It:\n    def __iter__(self):\n        return self\n"
    code += "    def __next__(self):\n        raise StopIteration\ndef f(n):\n    return It()\n"
    result = _run(executor, code, _tests("it = f(3)\nself.assertIs(iter(it), it)\n"))
    assert result.status is ExecutionStatus.FAILED, result.reason


# --- the CPU-time limit: the job's time running out on several CPUs ------------------------------------------------
# The kernel kills a program at the CPU-time limit (the timeout and a second, all its threads together). Threads on
# several CPUs reach it before the wall-clock deadline (on a host whose CPUs are shared, not reliably enough for a
# test), so the kill is simulated here: the reply of a real run is changed to what the fork server reports then.


@pytest.fixture
def killed_at_the_cpu_limit(monkeypatch):
    """Every job whose program prints ``spin`` is reported killed by the kernel at its CPU-time limit."""
    from rewardpipe.execution import forkservers

    execute = forkservers._Worker.execute

    def execute_then_kill(self, header, code, tests, *args):
        reply, *rest = execute(self, header, code, tests, *args)
        if rest[1].startswith(b"spin"):  # (its stdout)
            limit_ms = (int(float(header["timeout_s"])) + 1) * 1000  # (the timeout and a second, docs/sandbox.md)
            reply = {**reply, "model_exit": "killed by SIGKILL", "cpu_ms": {"untrusted": limit_ms + 3}}
        return (reply, *rest)

    monkeypatch.setattr(forkservers._Worker, "execute", execute_then_kill)


SPINS_ON_ZERO = "n = int(input())\nprint('spin' if n == 0 else n)\n"
TWO_CASES = [{"input": "0", "output": "0"}, {"input": "1", "output": "1"}]


def test_a_stdio_program_killed_at_the_cpu_time_limit_is_a_timeout(executor, killed_at_the_cpu_limit):
    """Before: case 0 failed and the job went on, 1 of 2 cases passed (partial credit for an endless loop)."""
    result = _stdio(executor, SPINS_ON_ZERO, TWO_CASES)
    assert result.status is ExecutionStatus.TIMEOUT, (result.status, result.reason)
    assert "CPU-time limit" in result.reason and not result.model_fault


def test_a_function_killed_at_the_cpu_time_limit_is_a_timeout(executor, killed_at_the_cpu_limit):
    """Before: the model's process dying failed the test (partial credit for the tests before it)."""
    code = "import os\ndef f(n):\n    print('spin', flush=True)\n    os._exit(9)\n"
    result = _run(executor, code, _tests("self.assertEqual(f(1), 1)\n"))
    assert result.status is ExecutionStatus.TIMEOUT, (result.status, result.reason)


def test_a_program_that_lowered_its_own_cpu_limit_fails_that_case_only(executor):
    """Killed below the job's limit by a limit of its own: its failure on that case, the others still scored."""
    program = "import resource\nresource.setrlimit(resource.RLIMIT_CPU, (1, 1))\nn = int(input())\n"
    program += "while n == 0:\n    pass\nprint(n)\n"
    result = _stdio(executor, program, TWO_CASES)
    assert result.status is ExecutionStatus.FAILED and result.passed == 1, (result.status, result.reason)
    assert "SIGKILL" in result.reason and not result.model_fault


# --- signals a program sends itself ---------------------------------------------------------------------------------
# Where the sandbox gives each job a pid namespace (root), the program is its first process, which ignored a signal it
# sent itself at its default: it went on and passed, where python program.py (and the Lambda/Fargate mode) ends.


ENDINGS = {
    "SIGTERM": "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)",
    "timer": "import signal, time\nsignal.setitimer(signal.ITIMER_REAL, 0.01)\ntime.sleep(5)",
    "SIGUSR1 reset": "import os, signal\nsignal.signal(signal.SIGUSR1, signal.SIG_DFL)\n"
    "os.kill(os.getpid(), signal.SIGUSR1)",
}


@pytest.mark.parametrize("name", sorted(ENDINGS))
def test_a_program_ended_by_a_signal_it_sent_itself_fails(executor, name):
    result = _stdio(executor, f"print(input())\n{ENDINGS[name]}\n", [{"input": "7", "output": "7"}])
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)
    assert "the program ended with" in result.reason and not result.model_fault, result.reason


def test_signals_a_program_handles_or_reads_are_as_in_an_ordinary_process(executor):
    program = (
        "import os, signal\nprint(signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)\n"
        "signal.signal(signal.SIGTERM, lambda *a: print('handled'))\nos.kill(os.getpid(), signal.SIGTERM)\n"
        "print(signal.signal(signal.SIGALRM, signal.SIG_IGN) == signal.SIG_DFL)\nos.kill(os.getpid(), signal.SIGALRM)\n"
        "print(input())\n"
    )
    result = _stdio(executor, program, [{"input": "7", "output": "True handled True 7"}])
    assert result.status is ExecutionStatus.PASSED, (result.reason, result.stdout, result.stderr)


# --- the scorer's own time ------------------------------------------------------------------------------------------


def test_the_scorers_comparison_is_not_charged_to_the_programs_time(executor, monkeypatch):
    """The outputs are compared in the scorer (up to about a second for 2 MiB of numbers under a float tolerance, and
    longer while its other threads hold the interpreter): that time counted against the job's ``timeout_s``, so a right
    program became a ``timeout``, the model's 0, for the scorer's own slowness. Simulated by a slow comparison."""
    from rewardpipe.execution.runtime import harness

    compare = harness.stdio_output_matches

    def slow_compare(*args, **kwargs):
        time.sleep(1.0)
        return compare(*args, **kwargs)

    monkeypatch.setattr(harness, "stdio_output_matches", slow_compare)
    cases = [{"input": f"{n} {n}", "output": str(2 * n)} for n in range(4)]
    # 4 s of comparison against a 3 s budget, which the program's own four runs fit many times over even on a loaded
    # machine (0.4 s each against 1 s left the runs themselves too little)
    result = _stdio(executor, "a, b = map(int, input().split())\nprint(a + b)\n", cases, timeout_s=3)
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


def test_the_comparisons_own_work_is_still_charged(executor, monkeypatch):
    """What the program prints sets the comparison's work: uncharged, 2 MiB of numbers per case would cost the scorer
    about a second each beyond the job's budget. Its CPU time (simulated here) counts."""
    from rewardpipe.execution.runtime import harness

    compare = harness.stdio_output_matches

    def costly_compare(*args, **kwargs):
        spun = time.thread_time()
        while time.thread_time() - spun < 0.4:
            pass
        return compare(*args, **kwargs)

    monkeypatch.setattr(harness, "stdio_output_matches", costly_compare)
    cases = [{"input": f"{n} {n}", "output": str(2 * n)} for n in range(4)]
    result = _stdio(executor, "a, b = map(int, input().split())\nprint(a + b)\n", cases, timeout_s=1)
    assert result.status is ExecutionStatus.TIMEOUT, (result.status, result.reason)


def test_a_function_ended_by_a_signal_it_sent_itself_fails(executor):
    """In one process the signal ends the tests' process too; under split trust the model's process went on (pid 1)."""
    code = "import os, signal\ndef f(n):\n    os.kill(os.getpid(), signal.SIGTERM)\n    return n\n"
    result = _run(executor, code, _tests("self.assertEqual(f(1), 1)\n"))
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)


def test_the_hidden_tests_see_the_standard_signal_senders_and_the_model_its_own(executor):
    """The senders are wrapped once in the fork server for the model's side (lead, round thirty-two: installing the
    handlers in every child cost each job ~0.4 ms); the trusted runner puts the standard ones back before any tests
    run, and a model's function that sets its own handler, then sends, is handled as in one process."""
    code = (
        "import os, signal\nseen = []\n"
        "def f(n):\n    signal.signal(signal.SIGUSR1, lambda *a: seen.append(n))\n"
        "    os.kill(os.getpid(), signal.SIGUSR1)\n    return list(seen)\n"
    )
    tests = _tests(
        "import os, signal\nself.assertEqual(type(os.kill).__name__, 'builtin_function_or_method')\n"
        "self.assertEqual(type(signal.alarm).__name__, 'builtin_function_or_method')\n"
        "self.assertEqual(f(2), [2])\n"
    )
    result = _run(executor, code, tests)
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)
