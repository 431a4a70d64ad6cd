"""Shared fixtures for the attack suite: one sandbox executor per test module, and the blog's
harness as a control that shows each reward hack is real (it wins there)."""

from __future__ import annotations

import os
import sys

import pytest

from rewardpipe.execution import ExecutionJob, ExecutionStatus
from rewardpipe.execution.sandbox import MAX_WORKERS, make_executor

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

HIDDEN_TESTS = """
import unittest

class TestAdd(unittest.TestCase):
    def test_small(self):
        self.assertEqual(add(1, 2), 3)

    def test_equal(self):
        self.assertEqual(add(2, 2), 4)
"""
EXPECTED_TESTS = 2
WRONG_ADD = "def add(a, b):\n    return a - b\n"
RIGHT_ADD = "def add(a, b):\n    return a + b\n"


def job(code: str, tests: str = HIDDEN_TESTS, timeout_s: float = 5.0, **fields) -> ExecutionJob:
    return ExecutionJob(code=code, tests=tests, entry_point="add", timeout_s=timeout_s, **fields)


def assert_failed(result, status=ExecutionStatus.FAILED):
    """A wrong ``add`` got the verdict it deserves: no test passed, every expected test was counted."""
    assert result.status is status, (result.status, result.reason, result.stderr[-500:])
    assert result.passed == 0
    assert result.total == EXPECTED_TESTS


def assert_scorer_survives(executor):
    """After an attack, an honest solution still passes: the scorer and the next job are unharmed."""
    honest = executor.run(job(RIGHT_ADD))
    assert honest.status is ExecutionStatus.PASSED, honest.reason


@pytest.fixture(scope="module")
def executor():
    executor = make_executor(workers=2)
    yield executor
    executor.close()


@pytest.fixture(scope="module")
def one_worker():
    """One worker, so consecutive jobs meet the same fork server and trusted runner (it serves up to 500 jobs)."""
    executor = make_executor(workers=1)
    yield executor
    executor.close()


def layer_on(executor, layer: str) -> bool:
    return executor.isolation().get(layer, "").startswith("on")


def require_layer(executor, layer: str) -> None:
    if not layer_on(executor, layer):
        pytest.skip(f"isolation layer {layer!r} unavailable here: {executor.isolation().get(layer)}")


def require_any_layer(executor, *layers: str) -> None:
    """Skip (with the reason) unless at least one of the layers that block this attack is on."""
    if not any(layer_on(executor, layer) for layer in layers):
        report = ", ".join(f"{layer}: {executor.isolation().get(layer)}" for layer in layers)
        pytest.skip(f"none of the layers that block this attack is available here ({report})")


def process_alive_as_sandbox_uid(pid: int, executor) -> bool:
    """True if ``pid`` is a live (non-zombie) process running as one of the executor's sandbox uids."""
    base = executor.uid_base
    try:
        with open(f"/proc/{pid}/status") as handle:
            status = handle.read()
    except OSError:
        return False
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    uid = int(fields["Uid"].split()[0])
    return base <= uid < base + MAX_WORKERS and not fields["State"].strip().startswith("Z")
