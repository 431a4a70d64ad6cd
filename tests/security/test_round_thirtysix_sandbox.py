"""Round thirty-six, the sandbox: the Lambda/Fargate mode and the trusted runner's state.

* **The model's KeyboardInterrupt and GeneratorExit.** Since round thirty-five they arrive in the trusted runner as
  ``harness.ModelBaseException`` (no ``except Exception`` catches them, as in one process), but only ``SystemExit`` kept
  its class: a right answer that raises ``KeyboardInterrupt`` (or ``GeneratorExit``) on purpose **failed** tests
  doing ``with self.assertRaises(KeyboardInterrupt): f()``, which pass in one process. Each now arrives as a subclass
  of both; uncaught, it still ends the run, the model's failure.
* **What one job's tests leave in the long-lived trusted runner.** A standard class's attribute, a standard
  function's defaults, ``decimal.DefaultContext``, the thread stack size, logging's logger class, record factory and
  level names, an audit hook: each lasted for every later job of the runner (any task's) and failed right answers.
  Each is put back (an audit hook: the runner is replaced). The runner's own handler on the root logger made the
  tests' ``logging.basicConfig`` a no-op; it is gone.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from rewardpipe.execution import ExecutionStatus
from tests.security import test_round_thirtyfive_c_sandbox as thirtyfive_c
from tests.security import test_round_thirtyfive_sandbox as thirtyfive
from tests.security import test_round_thirtyfour_sandbox_followups as followups
from tests.security import test_round_thirtyone_sandbox as thirtyone

executor = thirtyone.executor
one_worker = followups.one_worker

HEADER = "import unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
RAISING = {
    "KeyboardInterrupt": "def f(x):\n    if x < 0:\n        raise KeyboardInterrupt('stop')\n    return x * x\n",
    "GeneratorExit": "def f(x):\n    if x < 0:\n        raise GeneratorExit('stop')\n    return x * x\n",
    "its own KeyboardInterrupt subclass": (
        "class Stop(KeyboardInterrupt):\n    pass\n"
        "def f(x):\n    if x < 0:\n        raise Stop('stop')\n    return x * x\n"
    ),
    "KeyboardInterrupt under another name": (
        "Stop = KeyboardInterrupt\ndef f(x):\n    if x < 0:\n        raise Stop('stop')\n    return x * x\n"
    ),
}


def _expecting(kind: str) -> str:
    return (
        HEADER + f"        with self.assertRaises({kind}):\n            f(-1)\n"
        f"        try:\n            f(-2)\n        except {kind}:\n            pass\n"
        "        else:\n            self.fail('nothing raised')\n        self.assertEqual(f(3), 9)\n"
    )


@pytest.mark.parametrize("case", sorted(RAISING))
def test_a_right_answer_raising_a_base_exception_passes_tests_expecting_it(executor, case):
    code = RAISING[case]
    kind = "GeneratorExit" if case == "GeneratorExit" else "KeyboardInterrupt"
    tests = _expecting(kind)
    assert thirtyfive_c._passes_in_one_process(code, tests)
    result = thirtyone._run(executor, "raises", code, tests, entry_point="f")
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


@pytest.mark.parametrize("case", sorted(RAISING))
def test_an_answer_raising_the_wrong_one_still_fails(executor, case):
    # (the KeyboardInterrupt answers against a GeneratorExit test and the other way round; and one that raises nothing)
    code = RAISING[case]
    kind = "KeyboardInterrupt" if case == "GeneratorExit" else "GeneratorExit"
    tests = HEADER + f"        with self.assertRaises({kind}):\n            f(-1)\n"
    result = thirtyone._run(executor, "wrong kind", code, tests, entry_point="f")
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)
    silent = thirtyone._run(executor, "silent", "def f(x):\n    return x * x\n", _expecting("KeyboardInterrupt"), "f")
    assert silent.status is ExecutionStatus.FAILED, (silent.status, silent.reason)


def test_an_uncaught_keyboard_interrupt_ends_the_run_as_the_models_failure(executor):
    tests = HEADER + "        self.assertEqual(f(-1), 1)\n\n    def test_b(self):\n        self.assertEqual(f(2), 4)\n"
    for case in ("KeyboardInterrupt", "KeyboardInterrupt under another name"):
        assert not thirtyfive_c._passes_in_one_process(RAISING[case], tests)
        result = thirtyone._run(executor, "uncaught", RAISING[case], tests, entry_point="f")
        assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)
        assert not result.is_infrastructure_error
    right = thirtyone._run(executor, "after", RAISING["KeyboardInterrupt"], _expecting("KeyboardInterrupt"), "f")
    assert right.status is ExecutionStatus.PASSED, (right.status, right.reason)


# --- a standard library class's attribute the tests change by hand --------------------------------------------------
# Round thirty-five put back a standard module's attributes after each job, but not those of its classes: a task's
# tests that set ``json.JSONEncoder.item_separator`` or ``Counter.__missing__`` at module level (without mock's undo)
# changed them for every later job of the long-lived trusted runner, any task's, whose right answers then failed; and
# the runner wrote the changing job's own verdict with the changed encoder (an ``error``: "could not run the job").
# Each case: what the first job's tests do at module level (their own check passes with it, as in one process), what
# the second job's tests import, and the second job's test body, which passes in a fresh interpreter.
CLASS_CHANGES = {
    "json's encoder separators": (
        "import json\njson.JSONEncoder.item_separator = ';'\n",
        "        self.assertEqual(json.dumps([f(1), 2]), '[1;2]')\n",
        "import json\n",
        "        self.assertEqual(json.dumps([f(1), 2]), '[1, 2]')\n",
    ),
    # (a module's function rebound: put back after the job since round thirty-five, but after its verdict was written)
    "json.dumps rebound": (
        "import json\njson.dumps = lambda *args, **kwargs: 'faked'\n",
        "        self.assertEqual(json.dumps(f(1)), 'faked')\n",
        "import json\n",
        "        self.assertEqual(json.dumps(f(1)), '1')\n",
    ),
    "a class imported by name": (
        "from collections import Counter\nCounter.__missing__ = lambda self, key: 7\n",
        "        self.assertEqual(Counter()[f('x')], 7)\n",
        "import collections\n",
        "        self.assertEqual(collections.Counter()[f('x')], 0)\n",
    ),
    "logging's classes, an attribute replaced and one added": (
        "import logging\nlogging.Formatter.default_msec_format = '%s'\nlogging.Logger.rp_mark = 1\n",
        "        self.assertEqual(logging.Formatter.default_msec_format, '%s')\n",
        "import logging\n",
        "        self.assertEqual(logging.Formatter.default_msec_format, '%s,%03d')\n"
        "        self.assertFalse(hasattr(logging.getLogger(f('rp36')), 'rp_mark'))\n",
    ),
    "setattr on a module the runner had not loaded": (
        "import graphlib, json\nsetattr(graphlib.TopologicalSorter, 'static_order', lambda self: iter('X'))\n"
        "json.rp_same_runner36 = True\n",
        "        self.assertEqual(list(graphlib.TopologicalSorter({f(1): []}).static_order()), ['X'])\n",
        "import graphlib, json\n",
        "        self.assertEqual(list(graphlib.TopologicalSorter({f(1): []}).static_order()), [1])\n"
        "        self.assertTrue(getattr(json, 'rp_same_runner36', False))  # (put back, not a runner replaced)\n",
    ),
    "a module imported and changed inside a fixture": (
        "def setUpModule():\n    import sched\n    sched.scheduler.rp_mark = 1\n",
        "",
        "import sched\n",
        "        self.assertFalse(hasattr(sched.scheduler, 'rp_mark'))\n        self.assertEqual(f(0), 0)\n",
    ),
    # (interpreter-wide defaults of the standard library, set by a call or in place: decimal.Context() takes its
    # precision from DefaultContext, and a thread's stack size is the process's)
    "decimal's default context and the thread stack size": (
        "import decimal, threading\ndecimal.DefaultContext.prec = 5\n"
        "decimal.DefaultContext.traps[decimal.Inexact] = True\nthreading.stack_size(1 << 20)\n",
        "        self.assertEqual(decimal.Context().prec, 5)\n",
        "import decimal, threading\n",
        "        self.assertEqual(decimal.Context().prec, 28)\n"
        "        self.assertFalse(decimal.Context().traps[decimal.Inexact])\n"
        "        self.assertEqual(threading.stack_size(), f(0))\n",
    ),
    # (a standard function's defaults, set through its attributes: the same for every later caller)
    "a standard function's defaults": (
        "import json, textwrap\ntextwrap.fill.__defaults__ = (5,)\n"
        "json.dumps.__kwdefaults__ = dict(json.dumps.__kwdefaults__, sort_keys=True)\n",
        "        self.assertEqual(json.dumps({'b': f(1), 'a': 2}), '{\"a\": 2, \"b\": 1}')\n",
        "import json, textwrap\n",
        "        self.assertEqual(textwrap.fill('aaa bbb ccc'), 'aaa bbb ccc')\n"
        "        self.assertEqual(json.dumps({'b': f(1), 'a': 2}), '{\"b\": 1, \"a\": 2}')\n",
    ),
    # (logging's own setters, which rebind its globals or fill its tables from inside the module)
    "logging's logger class, record factory and level names": (
        "import logging\nclass Custom(logging.Logger):\n    pass\nlogging.setLoggerClass(Custom)\n"
        "logging.addLevelName(25, 'NOTICE')\nlogging.setLogRecordFactory(lambda *args, **kwargs: None)\n",
        "        self.assertEqual(logging.getLevelName(25), 'NOTICE')\n",
        "import logging\n",
        "        self.assertIs(type(logging.getLogger('rp36-new-' + str(f(1)))), logging.Logger)\n"
        "        self.assertEqual(logging.getLevelName(25), 'Level 25')\n"
        "        self.assertIs(logging.getLogRecordFactory(), logging.LogRecord)\n",
    ),
    "random's generator class": (
        "import random as r\nr.Random.rp_mark = 1\ndel r.Random.choices\n",
        "        self.assertFalse(hasattr(r.Random, 'choices'))\n",
        "import random\n",
        "        self.assertFalse(hasattr(random.Random, 'rp_mark'))\n"
        "        self.assertEqual(len(random.Random(f(1)).choices([1, 2], k=3)), 3)\n",
    ),
}


def _passes_after(executor, first_top: str, body: str) -> None:
    """The next job's tests (``body``) pass right after a job whose tests ran ``first_top`` at module level."""
    first = thirtyfive._tests(first_top, "        self.assertEqual(f(1), 1)\n")
    second = followups._after(executor, thirtyfive.IDENTITY, first, thirtyfive._tests("", body))
    assert second.status is ExecutionStatus.PASSED, (second.status, second.reason)


@pytest.mark.parametrize("case", sorted(CLASS_CHANGES))
def test_a_standard_class_the_tests_change_is_back_for_the_next_job(one_worker, case):
    first_top, first_body, second_top, body = CLASS_CHANGES[case]
    first = thirtyfive._tests(first_top, first_body + "        self.assertEqual(f(1), 1)\n")
    second = followups._after(one_worker, thirtyfive.IDENTITY, first, thirtyfive._tests(second_top, body))
    assert second.status is ExecutionStatus.PASSED, (second.status, second.reason)


def test_a_name_the_tests_add_to_a_standard_module_is_kept(one_worker):
    # (only classes are put back: a module's new name stays for the runner's life, as round thirty-four's tests need)
    marking = "import json\njson.rp_kept36 = True\njson.JSONDecoder.rp_mark = 1\n"
    body = "        import json\n        self.assertTrue(getattr(json, 'rp_kept36', False))\n"
    _passes_after(one_worker, marking, body)


CHANGING_SOURCES = {
    "import json\njson.JSONEncoder.item_separator = ';'\n": (("json", True),),
    "from collections import Counter as C\ndef setUpModule():\n    C.__missing__ = None\n": (("collections", True),),
    "import xml.etree.ElementTree as ET\nsetattr(ET.Element, 'x', 1)\n": (("xml.etree.ElementTree", True),),
    "from json import encoder\ndel encoder.JSONEncoder.default\n": (("json", True),),
}
PLAIN_SOURCES = (
    "import json\njson.rp_kept = 1\n",  # a module's own attribute (WatchedModule's)
    "import unittest\nclass T(unittest.TestCase):\n    def setUp(self):\n        self.x = 1\n",
    "obj = f()\nobj.x = 1\nsetattr(obj, 'y', 2)\n",  # the model's object, not a module's class
    "import numpy\nnumpy.ndarray.x = 1\n",  # (not a standard module)
)


def test_only_tests_that_change_a_standard_class_have_classes_recorded():
    import ast

    from rewardpipe.execution.runtime import runner_globals

    for source, modules in CHANGING_SOURCES.items():
        assert runner_globals.class_changing_imports(ast.parse(source)) == modules, source
    nested = "def setUpModule():\n    import sched\n    sched.scheduler.x = 1\n"
    assert runner_globals.class_changing_imports(ast.parse(nested)) == (("sched", False),)
    for source in PLAIN_SOURCES:
        assert runner_globals.class_changing_imports(ast.parse(source)) == (), source


def test_an_audit_hook_the_tests_add_never_runs_in_the_next_job(one_worker):
    # An audit hook cannot be taken out of a process: one a task's tests added ran during every later job of the
    # runner (here refusing the next task's tests their own file). The runner is replaced before the next job.
    hooking = (
        "import sys\ndef refuse(event, args):\n    if event == 'open' and 'rp36' in str(args[0]):\n"
        "        raise PermissionError('refused by an earlier task')\nsys.addaudithook(refuse)\n"
    )
    body = (
        "        with open('rp36.txt', 'w') as out:\n            out.write(str(f(1)))\n"
        "        with open('rp36.txt') as back:\n            self.assertEqual(back.read(), '1')\n"
    )
    _passes_after(one_worker, hooking, body)


# --- the runner's own handler on the root logger ----------------------------------------------------------------------
# The runner put a NullHandler on the root logger (so that replayed records went nowhere): with a handler there,
# ``logging.basicConfig`` does nothing, so tests that configure logging to a stream of theirs and read the model's log
# from it failed a right answer, and a warning logged with no configuration never reached the stderr they redirected.
LOGGING = "import logging\ndef f(x):\n    logging.getLogger('app').info('hello %s', x)\n    return x\n"
LOGGING_TESTS = {
    "basicConfig to a stream": (
        LOGGING,
        "import io, logging, unittest\nbuf = io.StringIO()\n"
        "logging.basicConfig(level=logging.INFO, stream=buf, format='%(name)s:%(message)s')\n\n"
        "class T(unittest.TestCase):\n    def test_a(self):\n        self.assertEqual(f(1), 1)\n"
        "        self.assertEqual(buf.getvalue(), 'app:hello 1\\n')\n"
        "        self.assertEqual(logging.getLogger().level, logging.INFO)\n",
    ),
    "an unconfigured warning on the redirected stderr": (
        "import logging\ndef f(x):\n    logging.getLogger('app').warning('careful %s', x)\n    return x\n",
        "import contextlib, io, unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
        "        buf = io.StringIO()\n        with contextlib.redirect_stderr(buf):\n"
        "            self.assertEqual(f(2), 2)\n"
        "        self.assertEqual(buf.getvalue(), 'careful 2\\n')\n",
    ),
}


ONE_PROCESS = (
    "import io, sys, types, unittest\nmodule = types.ModuleType('rp_one_process')\n"
    "sys.modules[module.__name__] = module\n"
    "exec(sys.argv[1], module.__dict__)\nexec(sys.argv[2], module.__dict__)\n"
    "suite = unittest.defaultTestLoader.loadTestsFromModule(module)\n"
    "sys.exit(0 if unittest.TextTestRunner(stream=io.StringIO()).run(suite).wasSuccessful() else 1)\n"
)


def _passes_in_a_fresh_interpreter(code: str, tests: str) -> bool:
    """(pytest's own log capture puts handlers on this process's root logger: the tests' logging needs a fresh one)"""
    return subprocess.run([sys.executable, "-I", "-c", ONE_PROCESS, code, tests], capture_output=True).returncode == 0


@pytest.mark.parametrize("case", sorted(LOGGING_TESTS))
def test_the_tests_configure_logging_as_in_one_process(executor, case):
    code, tests = LOGGING_TESTS[case]
    assert _passes_in_a_fresh_interpreter(code, tests)
    result = thirtyone._run(executor, "logging", code, tests, entry_point="f")
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)
    wrong = thirtyone._run(executor, "silent", "def f(x):\n    return x\n", tests, entry_point="f")
    assert wrong.status is ExecutionStatus.FAILED, (wrong.status, wrong.reason)


def test_a_module_first_loaded_by_a_job_keeps_what_its_own_loading_set(one_worker):
    # (asyncio's ``@types.coroutine`` replaces a function's ``__code__`` as it loads: a change the runner must not put
    # back as if the tests had made it, or every later ``await asyncio.sleep(0)`` fails)
    body = (
        "        async def main():\n            await asyncio.sleep(0)\n            return f(1)\n"
        "        self.assertEqual(asyncio.run(main()), 1)\n"
    )
    _passes_after(one_worker, "import asyncio\n", "        import asyncio\n" + body)
