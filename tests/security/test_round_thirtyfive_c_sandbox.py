"""Round thirty-five (third wave), the sandbox: what the model's code raises that is no ``Exception``.

The model's ``SystemExit`` (``sys.exit``, argparse's exit on bad arguments), ``KeyboardInterrupt``, ``GeneratorExit``
and its own ``BaseException`` subclasses arrived in the trusted runner as an ordinary error (an ``Exception``). So a
wrong answer that called ``sys.exit()`` on bad input **passed** ``assertRaises(Exception)`` and ``except Exception``
tests, which fail it in one process (where the exit escapes them), and a right command-line answer whose argparse
exits with status 2 **failed** ``assertRaises(SystemExit)`` (a silent 0). They now arrive as
``harness.ModelBaseException`` (``ModelSystemExit`` for an exit, with its code), caught by what catches them in one
process and by nothing else; where one ends the run in one process (a class or module fixture), it ends it here, the
model's failure, never the harness's error.
"""

from __future__ import annotations

import io
import sys
import types
import unittest

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.shape_lint import shape_findings
from tests.security import test_round_thirtyone_sandbox as thirtyone

executor = thirtyone.executor

EXITS = {
    "sys.exit": "import sys\ndef f(x):\n    if x < 0:\n        sys.exit(2)\n    return x * x\n",
    "argparse": (
        "import argparse\ndef f(x):\n    if x < 0:\n        parser = argparse.ArgumentParser(prog='f')\n"
        "        parser.add_argument('n', type=int)\n        parser.parse_args(['not a number'])\n    return x * x\n"
    ),
    "KeyboardInterrupt": "def f(x):\n    if x < 0:\n        raise KeyboardInterrupt\n    return x * x\n",
    "its own BaseException": (
        "class Stop(BaseException):\n    pass\ndef f(x):\n    if x < 0:\n        raise Stop('no')\n    return x * x\n"
    ),
    "SystemExit subclass": (
        "class Done(SystemExit):\n    pass\ndef f(x):\n    if x < 0:\n        raise Done(2)\n    return x * x\n"
    ),
}
HEADER = "import sys, unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
# Tests that expect an ordinary error for bad input: in one process none of the exits above is one.
EXPECTING_AN_ERROR = {
    "assertRaises(Exception)": HEADER + "        with self.assertRaises(Exception):\n            f(-1)\n",
    "except Exception": (
        HEADER + "        try:\n            f(-1)\n        except Exception:\n            return\n"
        "        self.fail('no error')\n"
    ),
}
# Tests that expect the exit itself.
EXPECTING_THE_EXIT = {
    "assertRaises(SystemExit)": (
        HEADER + "        with self.assertRaises(SystemExit) as caught:\n            f(-1)\n"
        "        self.assertEqual(caught.exception.code, 2)\n        self.assertEqual(f(3), 9)\n"
    ),
    "except SystemExit": (
        HEADER + "        try:\n            f(-1)\n        except SystemExit as exc:\n"
        "            self.assertEqual(exc.code, 2)\n"
        "        else:\n            self.fail('no exit')\n"
    ),
    "assertRaises(BaseException)": HEADER + "        with self.assertRaises(BaseException):\n            f(-1)\n",
}
# Where an exit ends the whole run in one process (unittest's fixtures catch only Exception).
ENDING_THE_RUN = {
    "setUpClass": (
        "import unittest\n\nclass T(unittest.TestCase):\n    @classmethod\n    def setUpClass(cls):\n        f(-1)\n"
        "    def test_a(self):\n        self.assertEqual(f(2), 4)\n"
    ),
    "tearDownModule": (
        "import unittest\n\ndef tearDownModule():\n    f(-1)\n\nclass T(unittest.TestCase):\n"
        "    def test_a(self):\n        self.assertEqual(f(2), 4)\n"
    ),
    "a class cleanup": (
        "import unittest\n\nclass T(unittest.TestCase):\n    @classmethod\n    def setUpClass(cls):\n"
        "        cls.addClassCleanup(f, -1)\n    def test_a(self):\n        self.assertEqual(f(2), 4)\n"
    ),
    "module-level code": (
        "import unittest\n\nVALUE = f(-1)\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
        "        self.assertEqual(f(2), 4)\n"
    ),
    "a load_tests hook": (
        "import unittest\n\ndef load_tests(loader, tests, pattern):\n    f(-1)\n    return tests\n\n"
        "class T(unittest.TestCase):\n    def test_a(self):\n        self.assertEqual(f(2), 4)\n"
    ),
}


def _passes_in_one_process(code: str, tests: str) -> bool:
    """The verdict of ``python -m unittest`` on the tests with the model's code in their module."""
    module = types.ModuleType("rp_one_process")
    sys.modules[module.__name__] = module  # (unittest finds module fixtures there)
    try:
        exec(code, module.__dict__)
        exec(tests, module.__dict__)
        suite = unittest.defaultTestLoader.loadTestsFromModule(module)
        return unittest.TextTestRunner(stream=io.StringIO()).run(suite).wasSuccessful()
    except BaseException:  # noqa: BLE001 - the exit ended the run: nothing passed
        return False
    finally:
        del sys.modules[module.__name__]


@pytest.mark.parametrize("exit_kind", sorted(EXITS))
@pytest.mark.parametrize("shape", sorted(EXPECTING_AN_ERROR))
def test_an_exit_is_no_error_the_tests_expect(executor, exit_kind, shape):
    code, tests = EXITS[exit_kind], EXPECTING_AN_ERROR[shape]
    assert not _passes_in_one_process(code, tests)
    result = thirtyone._run(executor, "exit", code, tests, entry_point="f")
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)
    assert result.passed == 0


@pytest.mark.parametrize("exit_kind", ["sys.exit", "argparse", "SystemExit subclass"])
@pytest.mark.parametrize("shape", sorted(EXPECTING_THE_EXIT))
def test_a_right_answer_that_exits_passes_tests_expecting_the_exit(executor, exit_kind, shape):
    code, tests = EXITS[exit_kind], EXPECTING_THE_EXIT[shape]
    assert _passes_in_one_process(code, tests)
    result = thirtyone._run(executor, "exit", code, tests, entry_point="f")
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


@pytest.mark.parametrize("exit_kind", ["KeyboardInterrupt", "its own BaseException"])
def test_other_base_exceptions_are_caught_only_by_base_exception(executor, exit_kind):
    code = EXITS[exit_kind]
    assert thirtyone._run(executor, "b", code, EXPECTING_THE_EXIT["assertRaises(BaseException)"], "f").status is (
        ExecutionStatus.PASSED
    )
    result = thirtyone._run(executor, "s", code, EXPECTING_THE_EXIT["assertRaises(SystemExit)"], "f")
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)


@pytest.mark.parametrize("exit_kind", ["sys.exit", "its own BaseException"])
@pytest.mark.parametrize("where", sorted(ENDING_THE_RUN))
def test_an_exit_outside_a_test_method_is_the_models_failure(executor, exit_kind, where):
    # Never an infrastructure error (excluded from GRPO: a wrong answer's way out of its 0), never a pass.
    code, tests = EXITS[exit_kind], ENDING_THE_RUN[where]
    assert not _passes_in_one_process(code, tests)
    result = thirtyone._run(executor, "fixture", code, tests, entry_point="f")
    assert result.status is not ExecutionStatus.PASSED, result.reason
    assert not result.is_infrastructure_error, (result.status, result.reason)
    assert result.fraction_passed == 0


def test_the_runner_stays_sound_after_a_run_an_exit_ended(executor):
    thirtyone._run(executor, "first", EXITS["sys.exit"], ENDING_THE_RUN["setUpClass"], entry_point="f")
    right = "def f(x):\n    return x * x\n"
    result = thirtyone._run(executor, "next", right, ENDING_THE_RUN["tearDownModule"].replace("f(-1)", "f(1)"), "f")
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


# --- a standard module's attribute the tests rebind by hand ---------------------------------------------------------
# ``time.time = fake`` (or ``setattr(math, "pi", 3)``) is what ``mock.patch("time.time")`` does, but by plain
# assignment: the model's code, with its own copy of the module in its own process, never sees it, and where the patch
# is a loud error naming the fallback, this was a right answer's silent 0 that doctor did not mention. (Not made an
# error at run time: the tests of round thirty-five's first wave rebind module attributes around calls the model's
# answer never reads, and must pass.)
REBOUND = {
    "assigned": (
        "import time\ndef f():\n    return time.time()\n",
        "import time, unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n        real = time.time\n"
        "        time.time = lambda: 5.0\n        try:\n            self.assertEqual(f(), 5.0)\n        finally:\n"
        "            time.time = real\n",
    ),
    "setattr under another name": (
        "import math\ndef f(r):\n    return math.pi * r * r\n",
        "import math as m, unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n        real = m.pi\n"
        "        setattr(m, 'pi', 3)\n        try:\n            self.assertEqual(f(2), 12)\n        finally:\n"
        "            m.pi = real\n",
    ),
}


@pytest.mark.parametrize("case", sorted(REBOUND))
def test_doctor_names_a_module_attribute_the_tests_rebind(executor, case):
    code, tests = REBOUND[case]
    assert _passes_in_one_process(code, tests)
    result = thirtyone._run(executor, "rebound", code, tests, entry_point="f")
    assert result.status is not ExecutionStatus.PASSED  # the model's process never sees the change
    findings = shape_findings(tests)
    assert any("never sees it" in finding and "in the tests' process" in finding for finding in findings), findings


def test_doctor_leaves_the_replayed_streams_and_the_models_module():
    tests = (
        "import io, sys, unittest\nimport solution\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
        "        sys.stdout = buffer = io.StringIO()\n        solution.LIMIT = 3\n        f()\n"
        "        sys.stdout = sys.__stdout__\n        self.assertEqual(buffer.getvalue(), 'x\\n')\n"
    )
    assert not [finding for finding in shape_findings(tests) if "never sees it" in finding]
