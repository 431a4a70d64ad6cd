"""`rewardpipe doctor`'s lint of hidden tests (rewardpipe/execution/shape_lint.py), after an independent review
(hA): shapes that make a correct answer score 0 or every run an error, none of which the lint flagged.

* The count of tests: the sandbox counts every test* method written in a module-level class
  (harness.count_expected_tests) and errors when unittest's loader finds another number. Duplicate method or class
  names, inherited tests, a mixin used twice, test* methods of a helper class, setattr, a test assigned rather than
  defined, a second name for a TestCase, a TestCase inside an if block and a lone runTest each make every run an
  error; the lint names the cause, and agrees with the real sandbox.
* ``async def test_*`` in an IsolatedAsyncioTestCase runs: the static checks of doctor and ``tasks validate`` count
  it as a test.
* Split trust: the model's process has a private /tmp and job directory, so a file or directory the tests create and
  hand to the model (its path, or the open file) fails a correct answer; a coroutine of the model's code cannot be
  awaited across the boundary (every run a loud error naming the in-process fallback). Both are flagged, through
  aliases of tempfile and asyncio, helpers and setUp, and checked against the real sandbox: a flagged file fails a
  correct answer there, an awaited coroutine is that error, and the safe forms (passing the content, a synchronous
  entry point) pass.
"""

from __future__ import annotations

import os
import textwrap
from types import SimpleNamespace

import pytest

from rewardpipe.cli.tasks_cmd import task_problems
from rewardpipe.doctor import static_problems
from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.shape_lint import shape_findings
from rewardpipe.models import Task
from tests.security.test_round_eight_shapes import _run

PASSED, FAILED, ERROR = ExecutionStatus.PASSED, ExecutionStatus.FAILED, ExecutionStatus.ERROR
PLUS_ONE = "def f(x):\n    return x + 1\n"
RELATIVE_FILE = "rp-lint-relative.txt"  # what a case writes relative to the runner's working directory


def _found(tests: str, text: str, **options) -> list[str]:
    return [line for line in shape_findings(textwrap.dedent(tests), **options) if text in line]


# --- the loader finds another number of tests than the source has ---------------------------------------------------

# name -> (tests, what the finding must say)
COUNT_MISMATCH = {
    "duplicate-method": (
        """
        import unittest
        class T(unittest.TestCase):
            def test_one(self):
                self.assertEqual(f(1), 2)
            def test_one(self):
                self.assertEqual(f(2), 3)
        """,
        "T.test_one is defined again (first at line 4)",
    ),
    "duplicate-async-method": (
        """
        import unittest
        class T(unittest.IsolatedAsyncioTestCase):
            async def test_one(self):
                self.assertEqual(f(1), 2)
            def test_one(self):
                self.assertEqual(f(2), 3)
            def test_two(self):
                self.assertEqual(f(3), 4)
        """,
        "T.test_one is defined again",
    ),
    "duplicate-class": (
        """
        import unittest
        class T(unittest.TestCase):
            def test_one(self):
                self.assertEqual(f(1), 2)
        class T(unittest.TestCase):
            def test_two(self):
                self.assertEqual(f(2), 3)
        """,
        "the class name T is defined again (first at line 3)",
    ),
    "inherited-from-a-testcase": (
        """
        import unittest
        class Base(unittest.TestCase):
            value = 1
            def test_value(self):
                self.assertEqual(f(self.value), self.value + 1)
        class Sub(Base):
            value = 5
        """,
        "the test methods of Base are inherited by Sub",
    ),
    "mixin-used-twice-aliased-testcase": (
        """
        from unittest import TestCase as TC
        class Mixin:
            def test_value(self):
                self.assertEqual(f(self.value), self.value + 1)
        class A(Mixin, TC):
            value = 1
        class B(Mixin, TC):
            value = 2
        """,
        "the test methods of Mixin are inherited by A, B",
    ),
    "helper-class-with-a-test-name": (
        """
        import unittest
        class Helper:
            def test_input(self):
                return 1
        class T(unittest.TestCase):
            def test_a(self):
                self.assertEqual(f(Helper().test_input()), 2)
        """,
        "Helper is not a TestCase, yet its methods test_input are named test*",
    ),
    "setattr-f-string": (
        """
        import unittest
        class T(unittest.TestCase):
            pass
        for i, (a, b) in enumerate([(1, 2), (2, 3)]):
            def make(a, b):
                def t(self):
                    self.assertEqual(f(a), b)
                return t
            setattr(T, f"test_{i}", make(a, b))
        """,
        "setattr adds a test method to T at run time",
    ),
    "setattr-concatenated-beside-a-test": (
        """
        import unittest
        class T(unittest.TestCase):
            def test_a(self):
                self.assertEqual(f(1), 2)
        def add(name, a, b):
            setattr(T, "test_" + name, lambda self: self.assertEqual(f(a), b))
        add("two", 2, 3)
        """,
        "setattr adds a test method to T at run time",
    ),
    "attribute-assignment": (
        """
        import unittest
        class T(unittest.TestCase):
            def test_a(self):
                self.assertEqual(f(1), 2)
        T.test_b = lambda self: self.assertEqual(f(2), 3)
        """,
        "T.test_b = ... adds a test method at run time",
    ),
    "lambda-in-the-class-body": (
        """
        import unittest
        class T(unittest.TestCase):
            def test_a(self):
                self.assertEqual(f(1), 2)
            test_b = lambda self: self.assertEqual(f(2), 3)
        """,
        "T.test_b is assigned, not written with def",
    ),
    "second-name": (
        """
        import unittest
        class T(unittest.TestCase):
            def test_a(self):
                self.assertEqual(f(1), 2)
        Alias = T
        """,
        "the TestCase class T is bound to a second name",
    ),
    "class-in-an-if-block": (
        """
        import unittest
        class T(unittest.TestCase):
            def test_a(self):
                self.assertEqual(f(1), 2)
        if True:
            class U(unittest.TestCase):
                def test_b(self):
                    self.assertEqual(f(2), 3)
        """,
        "the TestCase class U is defined inside an 'if' block",
    ),
    "run-test": (
        """
        import unittest
        class T(unittest.TestCase):
            def test_a(self):
                self.assertEqual(f(1), 2)
        class U(unittest.TestCase):
            def runTest(self):
                self.assertEqual(f(2), 3)
        """,
        "U has a runTest method and no test* method",
    ),
}

# Shapes the loader counts as the source does: no finding, and the sandbox passes the right answer.
COUNT_AGREES = {
    "mixin-used-once": """
        import unittest
        class Mixin:
            def test_value(self):
                self.assertEqual(f(1), 2)
        class A(Mixin, unittest.TestCase):
            pass
        """,
    "overridden-in-a-subclass-of-a-plain-base": """
        import unittest
        class Base:
            def helper(self):
                return 1
        class T(Base, unittest.TestCase):
            def test_a(self):
                self.assertEqual(f(self.helper()), 2)
        """,
    "test-data-attribute": """
        import unittest
        class T(unittest.TestCase):
            test_cases = [(1, 2), (2, 3)]
            def test_a(self):
                for a, b in self.test_cases:
                    self.assertEqual(f(a), b)
        """,
    "async-test-methods": """
        import unittest
        class T(unittest.IsolatedAsyncioTestCase):
            async def test_a(self):
                self.assertEqual(f(1), 2)
            async def test_b(self):
                self.assertEqual(f(2), 3)
        """,
    "setattr-of-a-non-test-name": """
        import unittest
        class T(unittest.TestCase):
            def test_a(self):
                self.assertEqual(f(self.value), 2)
        setattr(T, "value", 1)
        """,
}


@pytest.mark.parametrize("name", sorted(COUNT_MISMATCH))
def test_the_lint_names_why_the_loader_finds_another_number(name):
    tests, cause = COUNT_MISMATCH[name]
    found = _found(tests, "loader finds")
    assert len(found) == 1, shape_findings(textwrap.dedent(tests))
    assert cause in found[0] and "every run is an error" in found[0], found[0]
    # Not a split-trust shape: the in-process mode counts the same way.
    assert _found(tests, cause, trust_mode="inprocess") == found


@pytest.mark.parametrize("name", sorted(COUNT_AGREES))
def test_shapes_the_loader_counts_as_the_source_are_not_flagged(name):
    assert shape_findings(textwrap.dedent(COUNT_AGREES[name])) == []


def test_a_check_format_helper_class_is_not_counted():
    tests = """
    class Helper:
        def test_input(self):
            return 1
    def check(candidate):
        assert candidate(Helper().test_input()) == 2
    """
    assert _found(tests, "loader finds", tests_format="check") == []


@pytest.mark.parametrize("name", sorted(COUNT_MISMATCH))
def test_every_flagged_count_shape_is_an_error_in_the_sandbox(one_worker, name):
    result = _run(one_worker, PLUS_ONE, COUNT_MISMATCH[name][0])
    assert result.status is ERROR, result.reason
    assert "loader found" in result.reason or "define no test* methods" in result.reason, result.reason


@pytest.mark.parametrize("name", sorted(COUNT_AGREES))
def test_every_unflagged_count_shape_runs_in_the_sandbox(one_worker, name):
    result = _run(one_worker, PLUS_ONE, COUNT_AGREES[name])
    assert result.status is PASSED, result.reason


# --- async test methods are tests ------------------------------------------------------------------------------------


def test_async_test_methods_count_as_tests_for_doctor_and_tasks_validate():
    tests = textwrap.dedent(COUNT_AGREES["async-test-methods"])
    code = SimpleNamespace(tests=tests, reference_solution=PLUS_ONE, entry_point="f", tests_format="unittest")
    assert static_problems(code) == []
    task = Task(task_id="t", prompt="p", spec=["s"], entry_point="f", tests=tests, reference_solution=PLUS_ONE)
    assert task_problems(task) == []


# --- split trust: files the tests create, coroutines of the model's code --------------------------------------------

READ_LINES = "def f(path):\n    with open(path) as fh:\n        return fh.read().splitlines()\n"
WRITE = "def f(path, text):\n    with open(path, 'w') as fh:\n        fh.write(text)\n"
LINES = "def f(text):\n    return text.splitlines()\n"
ASYNC_DOUBLE = "import asyncio\nasync def f(x):\n    await asyncio.sleep(0)\n    return x * 2\n"
DOUBLE = "def f(x):\n    return x * 2\n"
COUNTER = """
import asyncio
class Counter:
    def __init__(self):
        self.n = 0
    async def bump(self):
        self.n += 1
        return self.n
def f():
    return Counter()
"""

# name -> (code, tests, what the finding must say)
FILES = {
    "named-temporary-file": (
        READ_LINES,
        """
        import unittest, tempfile, os
        class T(unittest.TestCase):
            def test_a(self):
                with tempfile.NamedTemporaryFile('w', suffix='.txt', delete=False) as fh:
                    fh.write('a\\nb\\n')
                self.assertEqual(f(fh.name), ['a', 'b'])
                os.unlink(fh.name)
        """,
        "(fh.name)",
    ),
    "aliased-class": (
        READ_LINES,
        """
        import unittest
        from tempfile import NamedTemporaryFile as Tmp
        class T(unittest.TestCase):
            def test_a(self):
                with Tmp('w', delete=False) as handle:
                    handle.write('a\\n')
                path = handle.name
                self.assertEqual(f(path), ['a'])
        """,
        "(path)",
    ),
    "mkdtemp-joined-module-alias": (
        WRITE,
        """
        import unittest, os
        import tempfile as tf
        class T(unittest.TestCase):
            def test_a(self):
                d = tf.mkdtemp()
                f(os.path.join(d, 'o.txt'), 'hi')
                with open(os.path.join(d, 'o.txt')) as fh:
                    self.assertEqual(fh.read(), 'hi')
        """,
        "(os.path.join(d, 'o.txt'))",
    ),
    "temporary-directory-pathlib-in-setup": (
        READ_LINES,
        """
        import unittest, tempfile
        from pathlib import Path
        class T(unittest.TestCase):
            def setUp(self):
                self.dir = tempfile.TemporaryDirectory()
                self.path = Path(self.dir.name) / 'in.txt'
                self.path.write_text('a\\nb\\n')
            def tearDown(self):
                self.dir.cleanup()
            def test_a(self):
                self.assertEqual(f(str(self.path)), ['a', 'b'])
        """,
        "(str(self.path))",
    ),
    "mkstemp-in-a-helper-function": (
        READ_LINES,
        """
        import unittest, os
        from tempfile import mkstemp
        def make_file(text):
            fd, name = mkstemp()
            with os.fdopen(fd, 'w') as fh:
                fh.write(text)
            return name
        class T(unittest.TestCase):
            def test_a(self):
                self.assertEqual(f(make_file('x\\n')), ['x'])
        """,
        "(make_file('x\\n'))",
    ),
    "relative-path-written-with-open": (
        READ_LINES,
        """
        import unittest
        class T(unittest.TestCase):
            def test_a(self):
                with open('rp-lint-relative.txt', 'w') as fh:
                    fh.write('a\\n')
                self.assertEqual(f('rp-lint-relative.txt'), ['a'])
        """,
        "('rp-lint-relative.txt')",
    ),
    "open-file-object": (
        "def f(fh):\n    return fh.read().splitlines()\n",
        """
        import unittest, tempfile
        class T(unittest.TestCase):
            def test_a(self):
                with tempfile.TemporaryFile('w+') as fh:
                    fh.write('a\\n')
                    fh.seek(0)
                    self.assertEqual(f(fh), ['a'])
        """,
        "(fh)",
    ),
}

# Files the tests make and keep to themselves, or whose content they hand over: not flagged, and they pass.
FILES_SAFE = {
    "content-of-a-temporary-file": (
        LINES,
        """
        import unittest, tempfile
        class T(unittest.TestCase):
            def test_a(self):
                with tempfile.NamedTemporaryFile('w+') as fh:
                    fh.write('a\\nb\\n')
                    fh.flush()
                    with open(fh.name) as again:
                        self.assertEqual(f(again.read()), ['a', 'b'])
        """,
    ),
    "path-text-read-back": (
        LINES,
        """
        import unittest, tempfile
        from pathlib import Path
        class T(unittest.TestCase):
            def test_a(self):
                with tempfile.TemporaryDirectory() as d:
                    p = Path(d) / 'x.txt'
                    p.write_text('a\\n')
                    self.assertEqual(f(p.read_text()), ['a'])
        """,
    ),
    "a-file-only-the-tests-use": (
        DOUBLE,
        """
        import unittest, tempfile, os, json
        class T(unittest.TestCase):
            def test_a(self):
                d = tempfile.mkdtemp()
                out = os.path.join(d, 'r.json')
                with open(out, 'w') as fh:
                    json.dump(f(2), fh)
                with open(out) as fh:
                    self.assertEqual(json.load(fh), 4)
        """,
    ),
}

COROUTINES = {
    "await-in-an-async-test": (
        ASYNC_DOUBLE,
        """
        import unittest
        class T(unittest.IsolatedAsyncioTestCase):
            async def test_a(self):
                self.assertEqual(await f(3), 6)
        """,
        "(f(3))",
    ),
    "asyncio-run-aliased": (
        ASYNC_DOUBLE,
        """
        import unittest
        import asyncio as aio
        class T(unittest.TestCase):
            def test_a(self):
                self.assertEqual(aio.run(f(3)), 6)
        """,
        "(f(3))",
    ),
    "gather-in-a-helper": (
        ASYNC_DOUBLE,
        """
        import unittest
        from asyncio import gather, run
        async def both():
            return await gather(*[f(i) for i in range(2)])
        class T(unittest.TestCase):
            def test_a(self):
                self.assertEqual(run(both()), [0, 2])
        """,
        "(*[f(i) for i in range(2)])",
    ),
    "coroutine-kept-then-awaited": (
        ASYNC_DOUBLE,
        """
        import unittest
        class T(unittest.IsolatedAsyncioTestCase):
            async def test_a(self):
                coro = f(3)
                self.assertEqual(await coro, 6)
        """,
        "(coro)",
    ),
    "run-until-complete": (
        ASYNC_DOUBLE,
        """
        import unittest, asyncio
        class T(unittest.TestCase):
            def test_a(self):
                loop = asyncio.new_event_loop()
                try:
                    self.assertEqual(loop.run_until_complete(f(3)), 6)
                finally:
                    loop.close()
        """,
        "(f(3))",
    ),
    "method-of-a-model-object": (
        COUNTER,
        """
        import unittest
        class T(unittest.IsolatedAsyncioTestCase):
            async def test_a(self):
                c = Counter()
                self.assertEqual(await c.bump(), 1)
        """,
        "(c.bump())",
    ),
}

COROUTINES_SAFE = {
    "sync-entry-point-in-an-async-test": (
        DOUBLE,
        """
        import unittest, asyncio
        class T(unittest.IsolatedAsyncioTestCase):
            async def test_a(self):
                await asyncio.sleep(0)
                self.assertEqual(f(3), 6)
        """,
    ),
    "the-tests-own-coroutine": (
        DOUBLE,
        """
        import unittest, asyncio
        async def twice(x):
            await asyncio.sleep(0)
            return f(x)
        class T(unittest.TestCase):
            def test_a(self):
                self.assertEqual(asyncio.run(twice(3)), 6)
        """,
    ),
}


@pytest.mark.parametrize("name", sorted(FILES))
def test_the_lint_flags_a_file_the_tests_create_and_hand_to_the_model(name):
    _, tests, handed = FILES[name]
    found = _found(tests, "a file or directory they create")
    assert len(found) == 1, shape_findings(textwrap.dedent(tests))
    assert handed in found[0] and "cannot read files the tests write" in found[0], found[0]
    assert "pass the content" in found[0]
    assert _found(tests, "a file or directory they create", trust_mode="inprocess") == []


@pytest.mark.parametrize("name", sorted(COROUTINES))
def test_the_lint_flags_awaiting_the_models_coroutine(name):
    _, tests, awaited = COROUTINES[name]
    found = _found(tests, "await a coroutine of the model's code")
    assert len(found) == 1, shape_findings(textwrap.dedent(tests))
    assert awaited in found[0] and "cannot drive a coroutine across the process" in found[0], found[0]


@pytest.mark.parametrize("name", sorted(FILES_SAFE) + sorted(COROUTINES_SAFE))
def test_the_safe_forms_are_not_flagged(name):
    _, tests = {**FILES_SAFE, **COROUTINES_SAFE}[name]
    assert shape_findings(textwrap.dedent(tests)) == []


@pytest.mark.parametrize("name", sorted(FILES) + sorted(COROUTINES))
def test_every_flagged_split_shape_fails_a_correct_answer_in_the_sandbox(one_worker, name):
    code, tests, _ = {**FILES, **COROUTINES}[name]
    # The trusted runner writes a relative path in its working directory, which is this process's: remove it after.
    writes_relative = RELATIVE_FILE in tests and not os.path.exists(RELATIVE_FILE)
    relative = os.path.abspath(RELATIVE_FILE) if writes_relative else None
    try:
        result = _run(one_worker, code, tests)
    finally:
        if relative is not None and os.path.exists(relative):
            os.unlink(relative)
    if name in COROUTINES:  # a loud error naming the fallback (round eleven), never a correct answer's 0
        assert result.status is ERROR, result.reason
        assert "await a coroutine of the model's code" in result.reason and "inprocess" in result.reason
        return
    assert result.status in (FAILED, ERROR), result.reason
    symptoms = ("PermissionError", "FileNotFoundError", "cannot be passed")
    assert any(symptom in result.reason for symptom in symptoms), result.reason


@pytest.mark.parametrize("name", sorted(FILES_SAFE) + sorted(COROUTINES_SAFE))
def test_every_safe_form_passes_a_correct_answer_in_the_sandbox(one_worker, name):
    code, tests = {**FILES_SAFE, **COROUTINES_SAFE}[name]
    result = _run(one_worker, code, tests)
    assert result.status is PASSED, result.reason
