"""Round twenty-three: the sandbox, attacked around the job (its lifetime, what it leaves to the next job or the
worker, and the trusted side's waits) rather than through the values that cross, as the model would.

* Memory of a rollout beside it, in the Lambda/Fargate mode (one uid for every job, ``/proc`` readable, no
  Landlock): the model's process starts non-dumpable, but ``prctl(PR_SET_DUMPABLE, 1)`` made it dumpable again,
  and then any job of the same uid running at the same moment could open its ``/proc/<pid>/maps`` and
  ``/proc/<pid>/mem`` and read its memory (with ``files`` off, write into it). The K rollouts of a group run side by
  side: a rollout that made itself readable and one that searched its neighbours' memory for a sibling's source
  (and ran it) are the same policy's code, so a wrong answer with no logic could pass by a right sibling's work,
  and a rollout could write into a sibling's memory (a 0 for it, an advantage for itself under GRPO). Found by
  reading: the job beside it read the sibling's source out of its memory. ``PR_SET_DUMPABLE`` is now refused
  (``EPERM``) by the filter, whatever its argument (the child never needs it: it is non-dumpable from birth).
* A channel from one job to every later one on its worker, in every mode: each spare child's stdin (and its stdout
  until the job's file arrives) was a duplicate of one ``/dev/null`` descriptor the fork server opened once, so
  every job shared that open file description, and its status flags with it. ``fcntl(0, F_SETFL, O_APPEND |
  O_NONBLOCK)`` (``O_ASYNC`` too) in one job was what ``fcntl(0, F_GETFL)`` read in every later job: a right answer
  set a bit, and the next job, a wrong answer with no logic, returned the right sum when it found it and
  **passed** (full isolation and the Lambda/Fargate mode). Each spare now gets a ``/dev/null`` of its own, opened by
  the fork server while it makes the spare's pipes (off the job's path).
* A right answer scored 0 by what the job before it left in the long-lived trusted runner: a failed assertion keeps
  its operands (the model's value and the tests' expected one) in a reference cycle (the exception, its traceback,
  the test's frames), and the interpreter starts the full collection that frees a cycle by its count of container
  objects, not by their size (a list of 300,000 strings is one). Every failing job with a large value left it
  there (about 260 MB a job for 900,000 strings), until the runner's memory limit was reached and the next job's
  right answer failed ("the model's reply ... is too large to decode": the runner's MemoryError), here after two
  wrong answers with a 256 MiB runner. A wrong rollout could do that on purpose to the siblings after it on its
  worker. The runner now collects cycles after every job, in that job's time (~30 us when it left nothing large).
"""

from __future__ import annotations

import errno
import threading
import time

import pytest

from rewardpipe.execution import ExecutionJob, ExecutionStatus
from rewardpipe.execution.runtime import layers
from rewardpipe.execution.sandbox import make_executor
from tests.infra.test_graviton import _answer, _run_filter
from tests.security.conftest import HIDDEN_TESTS, RIGHT_ADD, assert_failed, job
from tests.security.test_round_nine_files import SANDBOX_UID, _lambda_like


def _lambda_like_pair():
    """Two workers as on Lambda: fork servers and jobs under one uid, no Landlock, no namespaces."""
    executor = make_executor(workers=2, server_uid=SANDBOX_UID, disable=frozenset({"landlock"}))
    isolation = executor.isolation()
    if not isolation["seccomp"].startswith("on"):
        executor.close()
        pytest.skip("seccomp is unavailable")
    assert isolation["landlock"].startswith("off") and isolation["uid"].startswith("off")
    return executor


# A rollout that makes itself readable and holds what a sibling wants (here: its own source, as a right answer).
READABLE = """
import ctypes, time
_libc = ctypes.CDLL(None, use_errno=True)
print("dumpable", _libc.prctl(4, 1, 0, 0, 0), ctypes.get_errno())
SOURCE = "R23" + "SOURCE:def add(a, b):\\n    return a + b\\n"
time.sleep(2.0)
def add(a, b):
    return a + b
"""
# A wrong answer with no logic: it looks for a sibling's source in the memory of every process it may read.
READER = """
import os, time
time.sleep(0.4)
FOUND = None
for name in os.listdir("/proc"):
    if not name.isdigit() or int(name) == os.getpid() or FOUND:
        continue
    try:
        maps = open(f"/proc/{name}/maps").read()
        mem = os.open(f"/proc/{name}/mem", os.O_RDONLY)
    except OSError:
        continue
    for line in maps.splitlines():
        fields = line.split()
        low, high = (int(part, 16) for part in fields[0].split("-"))
        if "rw" not in fields[1] or high - low > 64 << 20:
            continue
        try:
            data = os.pread(mem, high - low, low)
        except OSError:
            continue
        at = data.find(b"R23SOURCE:")
        if at >= 0:
            FOUND = data[at + 10 : data.index(b"\\x00", at)].decode()
            break
print("found", FOUND is not None)
if FOUND:
    exec(FOUND)
else:
    def add(a, b):
        return a - b
"""


def test_a_job_cannot_read_the_memory_of_a_rollout_beside_it():
    """Before: the reader found the sibling's source in its memory and **passed**."""
    executor = _lambda_like_pair()
    try:
        executor.warm_up(2)
        results: dict = {}

        def run(name: str, code: str, delay: float) -> None:
            time.sleep(delay)
            results[name] = executor.run(ExecutionJob(code=code, tests=HIDDEN_TESTS, entry_point="add", timeout_s=6))

        threads = [
            threading.Thread(target=run, args=("readable", READABLE, 0.0)),
            threading.Thread(target=run, args=("reader", READER, 0.1)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        readable, reader = results["readable"], results["reader"]
        assert "found False" in reader.stdout, (reader.status, reader.stdout)
        assert_failed(reader)
        assert readable.status is ExecutionStatus.PASSED, readable.reason
        assert f"dumpable -1 {errno.EPERM}" in readable.stdout, readable.stdout
    finally:
        executor.close()


@pytest.mark.parametrize("arch", ["aarch64", "x86_64"])
def test_the_filter_refuses_to_make_the_child_dumpable(arch):
    program = layers.build_seccomp_filter(arch, 4242)
    prctl = layers._SPECIAL[arch]["prctl"]
    assert _answer(_run_filter(program, arch, prctl, (layers.PR_SET_DUMPABLE, 1))) == "EPERM"
    assert _answer(_run_filter(program, arch, prctl, (layers.PR_SET_DUMPABLE, 0))) == "EPERM"
    assert _answer(_run_filter(program, arch, prctl, (3,))) == "allow"  # PR_GET_DUMPABLE


# A right answer that leaves a bit in the flags of its stdin; then a wrong answer with no logic that
# answers right only when it finds the bit.
LEAVES_A_BIT = (
    "import fcntl, os\nfcntl.fcntl(0, fcntl.F_SETFL, fcntl.fcntl(0, fcntl.F_GETFL) | os.O_APPEND | os.O_NONBLOCK)\n"
) + RIGHT_ADD
READS_THE_BIT = (
    "import fcntl, os\n"
    "SET = fcntl.fcntl(0, fcntl.F_GETFL) & (os.O_APPEND | os.O_NONBLOCK)\n"
    "print('flags', SET)\n"
    "def add(a, b):\n"
    "    return a + b if SET else a - b\n"
)


@pytest.fixture(scope="module")
def lambda_mode():
    executor = _lambda_like()
    yield executor
    executor.close()


@pytest.mark.parametrize("mode", ["full", "lambda"])
def test_a_job_cannot_leave_flags_on_a_descriptor_the_next_job_holds(one_worker, lambda_mode, mode):
    """Before: the reader found the flags the job before had set and **passed** (both modes)."""
    chosen = one_worker if mode == "full" else lambda_mode
    assert chosen.run(job(READS_THE_BIT)).stdout.startswith("flags 0")  # a fresh worker: nothing set
    for _ in range(2):
        assert chosen.run(job(LEAVES_A_BIT)).status is ExecutionStatus.PASSED
        result = chosen.run(job(READS_THE_BIT))
        assert_failed(result)
        assert result.stdout.startswith("flags 0"), result.stdout


WORDS_TESTS = """
import unittest


class TestWords(unittest.TestCase):
    def test_small(self):
        self.assertEqual(words(300000), [str(i) for i in range(300000)])

    def test_again(self):
        self.assertEqual(words(300000), [str(i) for i in range(300000)])
"""


def _words(executor, body: str):
    code = f"def words(n):\n    return {body}\n"
    return executor.run(ExecutionJob(code=code, tests=WORDS_TESTS, entry_point="words", timeout_s=20))


def test_a_failing_job_leaves_no_garbage_for_the_next_right_answer():
    """Before: the right answer after the second wrong one failed (the runner's MemoryError)."""
    executor = make_executor(workers=1, runner_memory_mb=256)
    try:
        for _ in range(4):
            wrong = _words(executor, "[str(i) for i in range(n + 1)]")
            assert wrong.status is ExecutionStatus.FAILED, wrong.reason
            right = _words(executor, "[str(i) for i in range(n)]")
            assert right.status is ExecutionStatus.PASSED, right.reason
    finally:
        executor.close()
