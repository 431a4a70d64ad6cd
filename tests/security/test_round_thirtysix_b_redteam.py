"""Round thirty-six (second wave), red team: payloads no earlier round tried, kept as regressions.

Each was run against the public executor in full isolation and the Lambda/Fargate mode, and held; these tests keep
them holding.

* **Errors at every fixture level, raised by what the model's value decides.** A failed assertion in a class or
  module cleanup (``addClassCleanup``, ``unittest.addModuleCleanup``) or in the exit of a class or module context
  (``enterClassContext``, ``unittest.enterModuleContext``) is reported by unittest as an error of the run: a wrong
  answer fails, a right one passes.
* **unittest's own control-flow exceptions raised by the model's code**, re-exported under their names or
  subclassed (``from unittest import SkipTest``, ``class S(ValueError, unittest.SkipTest)``,
  ``unittest.case._ShouldStop``): never a skip or a stop of the run, the model's failure.
* **A model object that lies to the comparison with the expected value** (``__eq__`` and ``__hash__`` of a
  constant, ``__contains__`` answering True, ``__le__``/``__ge__`` answering True): the plain expected value is never
  handed to the model's code, so none passes.
* **A model object whose ``__repr__`` ends its process or raises** ``KeyboardInterrupt``/``SystemExit`` while the
  runner formats a failure (``subTest`` parameters, ``assertEqual``'s message): the model's failure, never an error.

One got through, fixed: **a file the hidden tests write at an absolute path, read by the model's code, where the jobs
run under a uid of their own but neither Landlock, a mount namespace nor chroot confines their reads** (a host
lacking them). The runner created it with the default mode (0644), so a wrong answer that returned what the tests
had written to ``/tmp`` before calling it **passed**, and a job running beside it could read it the same way. The
runner now creates what the tests make as its own uid's alone (umask 077), wherever the jobs run under another.
"""

from __future__ import annotations

import os
import secrets

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.sandbox import make_executor
from tests.security import test_round_thirtyfive_c_sandbox as thirtyfive_c
from tests.security import test_round_thirtyone_sandbox as thirtyone

executor = thirtyone.executor

RIGHT = "def f(x):\n    return x * x\n"
WRONG = "def f(x):\n    return 0\n"
_CONTEXT = (
    "import contextlib, unittest\n@contextlib.contextmanager\ndef ctx():\n    yield\n    assert f(2) == 4, 'bad'\n"
)
_PLAIN_TEST = "    def test_a(self):\n        self.assertTrue(True)\n"
FIXTURE_LEVEL = {
    "addClassCleanup": (
        "import unittest\ndef check():\n    assert f(2) == 4, 'bad'\nclass T(unittest.TestCase):\n"
        "    @classmethod\n    def setUpClass(cls):\n        cls.addClassCleanup(check)\n" + _PLAIN_TEST
    ),
    "addModuleCleanup": (
        "import unittest\ndef check():\n    assert f(2) == 4, 'bad'\ndef setUpModule():\n"
        "    unittest.addModuleCleanup(check)\nclass T(unittest.TestCase):\n" + _PLAIN_TEST
    ),
    "enterClassContext": (
        _CONTEXT + "class T(unittest.TestCase):\n    @classmethod\n    def setUpClass(cls):\n"
        "        cls.enterClassContext(ctx())\n" + _PLAIN_TEST
    ),
    "enterModuleContext": (
        _CONTEXT
        + "def setUpModule():\n    unittest.enterModuleContext(ctx())\nclass T(unittest.TestCase):\n"
        + _PLAIN_TEST
    ),
}


@pytest.mark.parametrize("shape", sorted(FIXTURE_LEVEL))
def test_a_fixture_level_error_decided_by_the_models_value_fails_the_run(executor, shape):
    tests = FIXTURE_LEVEL[shape]
    assert thirtyfive_c._passes_in_one_process(RIGHT, tests)
    assert not thirtyfive_c._passes_in_one_process(WRONG, tests)
    wrong = thirtyone._run(executor, "wrong", WRONG, tests, entry_point="f")
    assert wrong.status is ExecutionStatus.FAILED, (wrong.status, wrong.reason)
    right = thirtyone._run(executor, "right", RIGHT, tests, entry_point="f")
    assert right.status is ExecutionStatus.PASSED, (right.status, right.reason)


TWO_TESTS = (
    "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n        self.assertEqual(f(2), 4)\n"
    "    def test_b(self):\n        self.assertEqual(f(3), 9)\n"
)
CONTROL_FLOW = {
    "SkipTest re-exported": "from unittest import SkipTest\ndef f(x):\n    raise SkipTest('no')\n",
    "SkipTest under another name": "from unittest import SkipTest as Later\ndef f(x):\n    raise Later('no')\n",
    "a SkipTest subclass": "import unittest\nclass S(unittest.SkipTest):\n    pass\ndef f(x):\n    raise S('no')\n",
    "a SkipTest in the bases": (
        "import unittest\nclass S(ValueError, unittest.SkipTest):\n    pass\ndef f(x):\n    raise S('no')\n"
    ),
    "_ShouldStop": "from unittest.case import _ShouldStop\ndef f(x):\n    raise _ShouldStop()\n",
    "_UnexpectedSuccess": "from unittest.case import _UnexpectedSuccess\ndef f(x):\n    raise _UnexpectedSuccess()\n",
}


def _fails_every_test(executor, code: str, tests: str) -> None:
    result = thirtyone._run(executor, "model", code, tests, entry_point="f")
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)
    assert result.passed == 0, result.reason


@pytest.mark.parametrize("name", sorted(CONTROL_FLOW))
def test_unittests_control_flow_raised_by_the_model_is_its_failure(executor, name):
    _fails_every_test(executor, CONTROL_FLOW[name], TWO_TESTS)


_LIAR = "class X:\n{methods}def f(x):\n    return X()\n"
LIARS = {
    "__eq__ and __hash__ of the expected value": (
        "    def __eq__(s, o):\n        return True\n    def __hash__(s):\n        return hash(4)\n",
        "self.assertIn(f(2), {4})\nself.assertEqual({4: 'a'}[f(2)], 'a')",
    ),
    "__contains__ always True": (
        "    def __contains__(s, o):\n        return True\n",
        "self.assertIn(4, f(2))\nself.assertIn(9, f(3))",
    ),
    "orderings always True": (
        "    def __le__(s, o):\n        return True\n    def __ge__(s, o):\n        return True\n",
        "self.assertLessEqual(f(2), 4)\nself.assertGreaterEqual(f(2), 4)",
    ),
}


@pytest.mark.parametrize("name", sorted(LIARS))
def test_a_model_object_lying_to_the_expected_value_never_passes(executor, name):
    methods, body = LIARS[name]
    tests = "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n" + "".join(
        f"        {line}\n" for line in body.split("\n")
    )
    _fails_every_test(executor, _LIAR.format(methods=methods), tests)


_HOSTILE_REPR = (
    "import os\nclass X:\n    def __repr__(s):\n        {action}\n    def __eq__(s, o):\n        return False\n"
    "    __hash__ = object.__hash__\ndef f(x):\n    return X()\n"
)
REPRS = {
    "ends its process": "os._exit(0)",
    "raises KeyboardInterrupt": "raise KeyboardInterrupt",
    "raises SystemExit": "raise SystemExit(0)",
    "raises an error": "raise RuntimeError('no')",
    "returns no string": "return 5",
}
FORMATTING_TESTS = (
    "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n        for i in range(2):\n"
    "            with self.subTest(r=f(i)):\n                self.assertEqual(f(i), 4)\n"
    "    def test_b(self):\n        self.assertEqual(f(3), f(5))\n"
)


@pytest.mark.parametrize("name", sorted(REPRS))
def test_a_hostile_repr_while_the_runner_formats_a_failure_is_the_models_failure(executor, name):
    _fails_every_test(executor, _HOSTILE_REPR.format(action=REPRS[name]), FORMATTING_TESTS)


WRITES_THE_ANSWER = (
    "import json, unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n"
    "        with open({path!r}, 'w') as fh:\n            json.dump(4, fh)\n"
    "        with open({path!r}) as fh:\n            self.assertEqual(json.load(fh), 4)  # (the tests read it back)\n"
    "        self.assertEqual(f(2), 4)\n"
)
READS_THE_TESTS_FILE = "import json\ndef f(x):\n    with open({path!r}) as fh:\n        return json.load(fh)\n"


@pytest.fixture(scope="module")
def own_uid_unconfined():
    """Jobs under a uid of their own, with nothing else confining what they read (a host without Landlock, mount
    namespaces or chroot)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run the jobs under a uid of their own")
    executor = make_executor(workers=1, disable=frozenset({"landlock", "mountns", "chroot"}))
    if not executor.isolation()["uid"].startswith("on"):
        executor.close()
        pytest.skip("no uid per job on this host")
    yield executor
    executor.close()


def test_a_file_the_tests_write_at_an_absolute_path_is_not_the_models_to_read(own_uid_unconfined):
    path = f"/tmp/rp-thirtysix-b-{secrets.token_hex(6)}.json"  # (the host's /tmp: a name of this test's own)
    tests = WRITES_THE_ANSWER.format(path=path)
    try:
        wrong = thirtyone._run(own_uid_unconfined, "reader", READS_THE_TESTS_FILE.format(path=path), tests, "f")
        assert wrong.status is ExecutionStatus.FAILED, (wrong.status, wrong.reason)
        assert "Permission" in wrong.reason, wrong.reason
        right = thirtyone._run(own_uid_unconfined, "right", RIGHT, tests, entry_point="f")
        assert right.status is ExecutionStatus.PASSED, (right.status, right.reason)
    finally:
        if os.path.lexists(path):
            os.unlink(path)
    assert not os.path.lexists(path)  # (removed by the runner when the job ended, as before)
