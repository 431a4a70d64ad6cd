from __future__ import annotations

import pytest

from rewardpipe.execution import ExecutionJob
from rewardpipe.execution.sandbox import make_executor

ADD_TESTS = """
import unittest

class TestAdd(unittest.TestCase):
    def test_small(self):
        self.assertEqual(add(1, 2), 3)

    def test_negative(self):
        self.assertEqual(add(-1, -1), -2)

    def test_zero(self):
        self.assertEqual(add(0, 5), 5)
"""


def job(code: str, tests: str = ADD_TESTS, entry_point: str = "add", **fields) -> ExecutionJob:
    fields.setdefault("timeout_s", 5.0)
    return ExecutionJob(code=code, tests=tests, entry_point=entry_point, **fields)


@pytest.fixture(scope="module")
def executor():
    executor = make_executor(workers=2)
    yield executor
    executor.close()
