"""Round thirty-five, the sandbox: what one job's hidden tests leave in the long-lived trusted runner for the next.

Each test runs two jobs in a row on one worker (``workers=1``): the first job's tests (which pass) change a piece of
the runner's process state, and the second job's verdict is the one that would differ if that change reached it.
In one process every task's tests start in an interpreter of their own, so the second verdict must be what it is
there.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil

import pytest

from rewardpipe.execution import ExecutionStatus
from tests.security import test_round_thirtyfour_sandbox_followups as followups
from tests.security import test_round_thirtyone_sandbox as thirtyone

executor = thirtyone.executor

one_worker = followups.one_worker
IDENTITY = "def f(n):\n    return n\n"
HEADER = "import unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"


def _tests(top: str, body: str) -> str:
    return top + HEADER + body


def _second(executor, first_top: str, second_top: str, body: str, code: str = IDENTITY):
    first = _tests(first_top, "        self.assertEqual(f(1), 1)\n")
    return followups._after(executor, code, first, _tests(second_top, body))


# Each case: what the first job's tests do at module level (without mock's undo), what the second job's tests import,
# and the second job's test body, which passes in a fresh interpreter.
LEFT_BEHIND = {
    # A standard module's attribute rebound or deleted: it stayed so for every later job of the runner, whose tests
    # then compared the model's right answer with what the changed module computed.
    "module attributes": (
        "import string, unittest.util\nstring.ascii_lowercase = 'xyz'\ndel string.capwords\n"
        "unittest.util._MAX_LENGTH = 5\n",
        "import string, unittest.util\n",
        "        self.assertEqual(f('abc'), string.ascii_lowercase[:3])\n"
        "        self.assertEqual(string.capwords('a b'), 'A B')\n"
        "        self.assertEqual(unittest.util._MAX_LENGTH, 80)\n",
    ),
    # A stand-in put where an import finds it (``sys.modules["json"] = fake``, a helper module made by hand) answered
    # the next job's ``import json``.
    "modules put in sys.modules by hand": (
        "import sys, types\nfake = types.ModuleType('json')\nfake.dumps = lambda value: 'faked'\n"
        "sys.modules['json'] = fake\nsys.modules['rp_helpers'] = types.ModuleType('rp_helpers')\n",
        "import json, sys\n",
        "        self.assertEqual(json.dumps(f(1)), '1')\n        self.assertNotIn('rp_helpers', sys.modules)\n",
    ),
    "interpreter hooks and codec error handlers": (
        "import codecs, faulthandler, sys, threading\ncodecs.register_error('strict', codecs.ignore_errors)\n"
        "faulthandler.enable()\nsys.unraisablehook = print\nthreading.excepthook = print\n"
        "sys.set_coroutine_origin_tracking_depth(7)\n",
        "import codecs, faulthandler, sys, threading\n",
        "        with self.assertRaises(UnicodeDecodeError):\n            f(b'\\xff').decode('utf-8')\n"
        "        self.assertFalse(faulthandler.is_enabled())\n        self.assertIsNot(sys.unraisablehook, print)\n"
        "        self.assertIsNot(threading.excepthook, print)\n"
        "        self.assertEqual(sys.get_coroutine_origin_tracking_depth(), 0)\n",
    ),
    # A signal blocked by the tests stayed blocked (a later job's SIGALRM timeout never fired), a collector callback
    # ran in every later job, an event loop policy answered every later job's asyncio.
    "signal mask, collector callbacks and the event loop policy": (
        "import asyncio, gc, signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})\n"
        "gc.callbacks.append(lambda *args: None)\n"
        "class Policy(asyncio.DefaultEventLoopPolicy):\n    pass\nasyncio.set_event_loop_policy(Policy())\n",
        "import asyncio, gc, signal\n",
        "        self.assertEqual(signal.pthread_sigmask(signal.SIG_BLOCK, []), set())\n"
        "        self.assertEqual(gc.callbacks, [])\n"
        "        self.assertNotEqual(type(asyncio.get_event_loop_policy()).__name__, 'Policy')\n"
        "        self.assertEqual(f(2), 2)\n",
    ),
    # What cannot be taken back in the process has the runner replaced before the next job: a thread still running, a
    # descriptor left open (on a file holding what the first job's model returned, removed from the directory when
    # the job ended but readable through the descriptor).
    "a thread": (
        "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n",
        "import threading\n",
        "        self.assertEqual(threading.active_count(), 1)\n        self.assertEqual(f(2), 2)\n",
    ),
    "a descriptor": (
        "import os\nwith open('rp_kept.txt', 'w') as out:\n    out.write('rp-answer-' + str(f(41)))\n"
        "KEPT = os.open('rp_kept.txt', os.O_RDONLY)\n",
        "import os\n",
        "        found = []\n        for fd in range(3, 256):\n"
        "            try:\n                found.append(os.pread(fd, 64, 0))\n"
        "            except OSError:\n                pass\n"
        "        self.assertFalse([text for text in found if b'rp-answer-' in text])\n"
        "        self.assertEqual(f(2), 2)\n",
    ),
    # A path written outside the runner's own directories (``/tmp``: the fork server's private one, or the host's on
    # Lambda) outlived the job: the next job's tests found the last answer there, and their own ``os.mkdir`` of the
    # same name failed.
    "files at absolute paths": (
        "import os\nos.makedirs('/tmp/rp35-made/sub')\n"
        "with open('/tmp/rp35-answer.txt', 'w') as out:\n    out.write(str(f(41)))\n"
        "os.rename('/tmp/rp35-answer.txt', '/tmp/rp35-renamed.txt')\n",
        "import os\n",
        "        self.assertFalse(os.path.exists('/tmp/rp35-renamed.txt'))\n"
        "        os.mkdir('/tmp/rp35-made')\n        self.assertEqual(f(2), 2)\n",
    ),
}


@pytest.fixture
def host_prefix():
    """The names this test's jobs write under ``/tmp``, its own: on Lambda's mode the runner's /tmp is this host's,
    shared with the suite's other process, whose run of the same case (or its clean-up) would otherwise meet these
    files mid-job (seen in CI: the first job's own ``os.rename`` found its file gone). Removed afterwards."""
    prefix = f"/tmp/rp35-{secrets.token_hex(6)}-"
    yield prefix
    shutil.rmtree(prefix + "made", ignore_errors=True)
    for name in ("answer.txt", "renamed.txt"):
        with contextlib.suppress(OSError):
            os.unlink(prefix + name)


@pytest.mark.parametrize("case", sorted(LEFT_BEHIND))
def test_what_a_jobs_tests_leave_never_reaches_the_next_jobs_verdict(one_worker, case, host_prefix):
    first_top, second_top, body = (part.replace("/tmp/rp35-", host_prefix) for part in LEFT_BEHIND[case])
    second = _second(one_worker, first_top, second_top, body)
    assert second.status is ExecutionStatus.PASSED, (second.status, second.reason)


def test_a_watched_module_is_a_plain_module_to_the_tests(executor):
    # (the runner watches its modules through a subclass of the module type; the tests' ``type(m)`` sees the module
    # type, as in one process)
    body = (
        "        import json, types\n        self.assertIs(type(json), types.ModuleType)\n"
        "        self.assertIs(json.__class__, types.ModuleType)\n        self.assertEqual(f(1), 1)\n"
    )
    result = thirtyone._run(executor, "module type", IDENTITY, _tests("", body), entry_point="f")
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


def test_the_runners_own_loader_is_back_after_tests_change_its_prefix(one_worker):
    # Before: every later job of the runner (a right answer too) was an error, "the loader found 0" tests.
    changing = (
        "import unittest\nunittest.TestLoader.testMethodPrefix = 'check'\n"
        "unittest.defaultTestLoader.testMethodPrefix = 'check'\n"
    )
    first = _tests(changing, "        self.assertEqual(f(1), 1)\n    check_a = test_a\n")
    second = followups._after(one_worker, IDENTITY, first, _tests("", "        self.assertEqual(f(2), 2)\n"))
    assert second.status is ExecutionStatus.PASSED, (second.status, second.reason)


def test_a_job_that_leaves_nothing_to_undo_keeps_its_runner(one_worker):
    # Replacing the runner is for what cannot be undone: a job whose tests only ran (and added a name of their own to
    # a module, which is left) must not have it replaced, or every job would pay a runner's start. The second job
    # sees the name only in the same runner.
    # A file object the tests' module holds is closed when the job's objects are collected: no descriptor is left.
    marking = "import json\njson.rp_same_runner = True\nHELD = open('rp_held.txt', 'w')\n"
    body = "        import json\n        self.assertTrue(getattr(json, 'rp_same_runner', False))\n"
    second = _second(one_worker, marking, "", body)
    assert second.status is ExecutionStatus.PASSED, (second.status, second.reason)


# --- typing.get_type_hints of the model's code written with ``from __future__ import annotations`` --------------------
# Every annotation is then text, which get_type_hints evaluates: in the trusted runner that was text the model chose
# (the loud error naming the in-process fallback, for a right answer). It is worked out in the model's process, in the
# model's namespace, and its answer crosses back.
STRING_ANNOTATIONS = """
from __future__ import annotations
import dataclasses
from typing import Optional

@dataclasses.dataclass
class Point:
    x: int
    y: list[float]

def f(a: int, b: Optional[str] = None, *rest: tuple[int, ...]) -> dict[str, list[int]]:
    return {}
"""
HINTS_READ = (
    "        import typing\n"
    "        self.assertEqual(typing.get_type_hints(f), "
    "{'a': int, 'b': typing.Optional[str], 'rest': tuple[int, ...], 'return': dict[str, list[int]]})\n"
    "        self.assertEqual(typing.get_type_hints(Point), {'x': int, 'y': list[float]})\n"
    "        self.assertEqual(f.__annotations__['a'], 'int')\n"
)


def test_string_annotations_of_the_models_code_resolve_as_in_one_process(executor):
    result = thirtyone._run(executor, "hints", STRING_ANNOTATIONS, _tests("", HINTS_READ), entry_point="f")
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


def test_a_wrong_string_annotation_still_fails(executor):
    code = STRING_ANNOTATIONS.replace("a: int", "a: float")
    result = thirtyone._run(executor, "wrong hints", code, _tests("", HINTS_READ), entry_point="f")
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)


def test_an_annotation_naming_nothing_is_the_models_name_error(executor):
    # (as in one process: get_type_hints raises NameError for a name the model's module never bound)
    code = STRING_ANNOTATIONS.replace("a: int", "a: Missing")
    body = "        import typing\n        with self.assertRaises(NameError):\n            typing.get_type_hints(f)\n"
    result = thirtyone._run(executor, "unbound hint", code, _tests("", body), entry_point="f")
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


# --- a model class's __bases__, __mro__ and __base__ ---------------------------------------------------------------
# They were the stub's own (the nearest standard base, or ``(object,)``), so tests reading a class's ancestry failed a
# right answer: ``Child.__mro__[1]`` was an IndexError, ``Child.__bases__[0] is Base`` False.
CLASSES = """
import collections

class Base:
    pass

class Mixin:
    pass

class Child(Base, Mixin):
    pass

class Counter(collections.Counter):
    pass

class Table(dict):
    pass

def f(x):
    return x
"""
ANCESTRY_READ = (
    "        self.assertEqual([c.__name__ for c in Child.__mro__], ['Child', 'Base', 'Mixin', 'object'])\n"
    "        self.assertEqual(Child.__bases__, (Base, Mixin))\n"
    "        self.assertIs(Child.__mro__[0], Child)\n        self.assertIs(Child.__base__, Base)\n"
    "        self.assertIs(Child.__mro__[-1], object)\n"
    "        self.assertEqual(inspect.getmro(Child), Child.__mro__)\n"
    "        self.assertIn(collections.Counter, Counter.__mro__)\n        self.assertIs(Table.__base__, dict)\n"
    "        self.assertTrue(issubclass(Child, Mixin))\n        self.assertTrue(issubclass(Table, dict))\n"
    "        self.assertTrue(issubclass(Counter, collections.Counter))\n"
    "        self.assertFalse(issubclass(Base, Child))\n        self.assertEqual(f(1), 1)\n"
)
ANCESTRY_TESTS = _tests("import collections, inspect\n", ANCESTRY_READ)


def test_a_model_classs_ancestry_reads_as_in_one_process(executor):
    result = thirtyone._run(executor, "ancestry", CLASSES, ANCESTRY_TESTS, entry_point="f")
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


def test_a_wrong_ancestry_still_fails(executor):
    code = CLASSES.replace("class Child(Base, Mixin):", "class Child(Mixin, Base):")
    result = thirtyone._run(executor, "wrong ancestry", code, ANCESTRY_TESTS, "f")
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)


def test_a_model_class_deriving_from_unittests_is_never_a_testcase_to_the_loader(executor):
    # (round fifteen's rule for the stub's own bases, kept for the model's: the loader would run its stub as tests)
    code = "import unittest\n\nclass Sneaky(unittest.TestCase):\n    def test_x(self):\n        pass\n\n" + CLASSES
    body = "        self.assertEqual(Sneaky.__mro__[0], Sneaky)\n        self.assertEqual(f(1), 1)\n"
    result = thirtyone._run(executor, "unittest base", code, _tests("", body), entry_point="f")
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)
    assert (result.passed, result.total) == (1, 1), result


# inspect.get_annotations(f, eval_str=True) of the model's function evaluated the model's annotation text in the trusted
# runner (with inspect's globals: a stub has no ``__globals__``), which the text-run guard let through as inspect's own
# code: text the model chose ran beside the verdict.
PLANTING = """
def f(a: "__import__('builtins').__dict__.setdefault('RP_PLANTED', 1) and int") -> int:
    return a
"""


# (without a namespace of the tests', evaluated in the model's process, as in one process: its own builtins; with one,
# the model's text evaluated here: refused, loudly, as the other text runs are)
ANNOTATION_CALLS = {
    "inspect.get_annotations(f, eval_str=True)": ExecutionStatus.PASSED,
    "inspect.get_annotations(f, globals={}, eval_str=True)": ExecutionStatus.ERROR,
}


@pytest.mark.parametrize("call", sorted(ANNOTATION_CALLS))
def test_the_models_annotation_text_never_runs_in_the_trusted_runner(executor, call):
    body = (
        f"        import builtins, inspect\n        try:\n            {call}\n        except NameError:\n"
        "            pass\n        self.assertNotIn('RP_PLANTED', vars(builtins))\n"
    )
    result = thirtyone._run(executor, "planting", PLANTING, _tests("", body), entry_point="f")
    assert result.status is ANNOTATION_CALLS[call], (result.status, result.reason)
    if result.status is ExecutionStatus.ERROR:
        assert "text that is not their own" in (result.reason or ""), result.reason


def test_inspect_get_annotations_of_the_models_code_resolves_as_in_one_process(executor):
    body = (
        "        import inspect\n"
        "        self.assertEqual(inspect.get_annotations(f, eval_str=True)['a'], int)\n"
        "        self.assertEqual(inspect.get_annotations(f)['a'], 'int')\n"
        "        self.assertIs(inspect.signature(f, eval_str=True).parameters['a'].annotation, int)\n"
        "        self.assertEqual(inspect.signature(f).parameters['a'].annotation, 'int')\n"
    )
    result = thirtyone._run(executor, "annotations", STRING_ANNOTATIONS, _tests("", body), entry_point="f")
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)
