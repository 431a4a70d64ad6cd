"""Round twenty-nine, the sandbox: right answers that scored 0.

A source file that starts with a UTF-8 byte-order mark (as some editors and some models write one) runs under
``python program.py`` and imports as a module: Python drops the mark. The sandbox compiled the text with the mark
in front, a SyntaxError, in every mode."""

from __future__ import annotations

import json

import pytest

from rewardpipe.execution import ExecutionJob, ExecutionStatus
from rewardpipe.execution.sandbox import make_executor

BOM = "\ufeff"
ADD = "def add(a, b):\n    return a + b\n"
CHECK = "def check(candidate):\n    assert candidate(1, 2) == 3\n"
UNITTEST = (
    "import unittest\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 2), 4)\n"
)


@pytest.fixture(scope="module", params=["every layer", "chroot for Landlock"])
def executor(request):
    # (the chroot, where the kernel has no Landlock, once could not find the codec that drops a mark)
    executor = make_executor(workers=1, disable=frozenset({"landlock"} if request.param != "every layer" else ()))
    yield executor
    executor.close()


JOBS = {
    "check, split trust": {"code": BOM + ADD, "tests": CHECK, "entry_point": "add", "tests_format": "check"},
    "check, in process": {
        "code": BOM + ADD,
        "tests": CHECK,
        "entry_point": "add",
        "tests_format": "check",
        "trust_mode": "inprocess",
    },
    "unittest": {"code": BOM + ADD, "tests": UNITTEST, "entry_point": "add", "tests_format": "unittest"},
    "stdio": {
        "code": BOM + "print(sum(map(int, input().split())))\n",
        "tests": json.dumps([{"input": "1 2", "output": "3"}]),
        "tests_format": "stdio",
    },
}


@pytest.mark.parametrize("name", sorted(JOBS))
def test_a_right_answer_with_a_byte_order_mark_passes(executor, name):
    result = executor.run(ExecutionJob(id=name, timeout_s=10, **JOBS[name]))
    assert result.status is ExecutionStatus.PASSED, result.reason


def test_only_one_mark_is_dropped_as_in_python(executor):
    # A second mark is a character of the source, which Python refuses too: the model's failure, named.
    result = executor.run(ExecutionJob(id="two", timeout_s=10, **{**JOBS["check, split trust"], "code": BOM * 2 + ADD}))
    assert result.status is ExecutionStatus.FAILED
    assert "U+FEFF" in result.reason
