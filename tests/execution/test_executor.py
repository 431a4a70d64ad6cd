"""Executor lifecycle for long-lived hosts (runner, Lambda warm container, Fargate): lazy start,
restart of a dead worker, close(), batch order and one bad job never failing a batch."""

from __future__ import annotations

import os
import signal
import time

import pytest

from rewardpipe.execution import ExecutionJob, ExecutionStatus
from rewardpipe.execution.runtime.zygote import RUNNER_NAME
from rewardpipe.execution.sandbox import make_executor
from tests.execution.conftest import job

RIGHT = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a - b\n"


def test_workers_start_lazily_and_close_stops_them():
    executor = make_executor(workers=2)
    assert executor._workers == []  # nothing started by construction
    assert executor.run(job(RIGHT)).status is ExecutionStatus.PASSED
    pids = [worker.process.pid for worker in executor._workers]
    assert len(pids) == 1
    executor.close()
    time.sleep(0.1)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    after = executor.run(job(RIGHT))
    assert after.status is ExecutionStatus.ERROR and "closed" in after.reason


def test_dead_worker_is_replaced_transparently():
    executor = make_executor(workers=1)
    try:
        assert executor.run(job(RIGHT)).status is ExecutionStatus.PASSED
        old = executor._workers[0].process
        os.kill(old.pid, signal.SIGKILL)
        old.wait(5)
        result = executor.run(job(RIGHT))
        assert result.status is ExecutionStatus.PASSED, result.reason
        assert executor._workers[0].process.pid != old.pid
    finally:
        executor.close()


def test_hung_trusted_side_is_bounded_by_the_deadline():
    # A hidden test that loops forever never reaches the model; the deadline still ends it.
    tests = (
        "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n        while True:\n            pass\n"
    )
    executor = make_executor(workers=1)
    try:
        started = time.perf_counter()
        result = executor.run(job(RIGHT, tests=tests, timeout_s=0.5))
        assert result.status is ExecutionStatus.TIMEOUT
        # deadline + the runner's wind-down grace + a fresh runner: bounded, where the hung test itself never ends
        # (generously: a loaded CI machine took longer than the 5 s this said before to start the fresh runner)
        assert time.perf_counter() - started < 0.5 + 30
        assert executor.run(job(RIGHT)).status is ExecutionStatus.PASSED
    finally:
        executor.close()


def test_batch_keeps_input_order_and_isolates_bad_jobs(executor):
    jobs = [
        job(RIGHT).model_copy(update={"id": "right"}),
        job(WRONG).model_copy(update={"id": "wrong"}),
        job(RIGHT, tests="def broken(:\n").model_copy(update={"id": "broken-tests"}),
        job("import os\nos._exit(3)\n" + WRONG).model_copy(update={"id": "exits-at-import"}),
        job("def add(a, b):\n    while True:\n        pass\n", timeout_s=0.5).model_copy(update={"id": "slow"}),
        job(RIGHT).model_copy(update={"id": "right-again"}),
    ]
    results = list(executor.run_batch(jobs, workers=2))
    assert [r.id for r in results] == [j.id for j in jobs]
    assert [r.status for r in results] == [
        ExecutionStatus.PASSED,
        ExecutionStatus.FAILED,
        ExecutionStatus.ERROR,
        ExecutionStatus.FAILED,
        ExecutionStatus.TIMEOUT,
        ExecutionStatus.PASSED,
    ]


def test_batch_runs_in_parallel_on_the_requested_workers(executor):
    # Each job prints when its work began and ended (the wall clock, the same in every sandbox): run two at a time,
    # some two overlap; one after another, none does. (The batch's elapsed time said the same until a loaded machine
    # stretched each job's start past the margin.)
    sleepy = (
        "import time\ndef add(a, b):\n    print('SPAN', time.time())\n    time.sleep(0.5)\n"
        "    print('SPAN', time.time())\n    return a + b\n"
    )
    tests = (
        "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n        self.assertEqual(add(1, 2), 3)\n"
    )
    jobs = [ExecutionJob(id=str(i), code=sleepy, tests=tests, entry_point="add") for i in range(4)]
    list(executor.run_batch(jobs[:2], workers=2))  # start both workers
    results = list(executor.run_batch(jobs, workers=2))
    assert all(r.status is ExecutionStatus.PASSED for r in results), [(r.status, r.reason) for r in results]
    spans = [[float(line.split()[1]) for line in r.stdout.splitlines() if line.startswith("SPAN")] for r in results]
    assert all(len(span) == 2 for span in spans), [r.stdout for r in results]
    overlapping = [
        (a, b)
        for a in range(4)
        for b in range(a + 1, 4)
        if max(spans[a][0], spans[b][0]) < min(spans[a][1], spans[b][1])
    ]
    assert overlapping, spans  # two at a time, not one after another


def test_isolation_report_is_attached_to_results(executor):
    result = executor.run(job(RIGHT))
    report = executor.isolation()
    # Each worker has its own sandbox uid and CPU; everything else is the same machine-wide report.
    per_worker = ("uid", "cpu")
    assert {k: v for k, v in result.isolation.items() if k not in per_worker} == {
        k: v for k, v in report.items() if k in result.isolation and k not in per_worker
    }
    for layer in ("uid", "netns", "seccomp", "landlock", "cgroup", "rlimits", "tree_kill", "tests"):
        assert layer in result.isolation


def _comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as handle:
        return handle.read().strip()


def _children(pid: int) -> list[int]:
    """The fork server's live trusted runner and untrusted children (not its housekeeper helper, and not a
    finished job's child that the kernel is still tearing down: it is reaped after the reply)."""
    from rewardpipe.execution.runtime.zygote import HOUSEKEEPER_NAME

    with open(f"/proc/{pid}/task/{pid}/children") as handle:
        children = [int(child) for child in handle.read().split()]

    def name_and_state(child: int) -> tuple[str, str]:
        try:
            with open(f"/proc/{child}/stat") as handle:
                text = handle.read()
        except OSError:
            return "", "X"
        return text[text.index("(") + 1 : text.rindex(")")], text.rsplit(")", 1)[1].split()[0]

    return [
        child
        for child in children
        if name_and_state(child)[0] != HOUSEKEEPER_NAME and name_and_state(child)[1] not in "ZX"
    ]


def test_dead_trusted_runner_is_replaced_by_its_fork_server():
    executor = make_executor(workers=1)
    try:
        assert executor.run(job(RIGHT)).status is ExecutionStatus.PASSED
        zygote_pid = executor._workers[0].process.pid
        for child in _children(zygote_pid):  # the trusted runner and the waiting untrusted child
            os.kill(child, signal.SIGKILL)
        time.sleep(0.05)
        result = executor.run(job(RIGHT))
        assert result.status is ExecutionStatus.PASSED, result.reason
        assert executor._workers[0].process.pid == zygote_pid  # repaired in place, not restarted
        assert executor.run(job(WRONG)).status is ExecutionStatus.FAILED
    finally:
        executor.close()


def test_child_wait_works_without_pidfd(monkeypatch):
    from rewardpipe.execution.runtime import zygote

    def no_pidfd(pid):
        raise OSError("pidfd_open unavailable")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    quick = os.fork()
    if quick == 0:
        time.sleep(0.05)
        os._exit(0)
    assert zygote._wait_until(quick, time.monotonic() + 60) is True  # (returns once it exits: 60 s bounds a stall)
    os.waitpid(quick, 0)
    slow = os.fork()
    if slow == 0:
        time.sleep(600)  # (killed below: it must still be there whenever the 0.1 s wait ends, however loaded the host)
        os._exit(0)
    try:
        assert zygote._wait_until(slow, time.monotonic() + 0.1) is False
    finally:
        os.kill(slow, signal.SIGKILL)
        os.waitpid(slow, 0)


@pytest.mark.parametrize("quota, runner_changes", [(500, False), (2, True)])
def test_trusted_runner_persists_until_its_job_quota(quota, runner_changes):
    executor = make_executor(workers=1, runner_recycle_jobs=quota)
    try:
        assert executor.run(job(RIGHT)).status is ExecutionStatus.PASSED
        zygote_pid = executor._workers[0].process.pid
        before = set(_children(zygote_pid))  # the runner and the waiting untrusted child
        for _ in range(3):
            assert executor.run(job(RIGHT)).status is ExecutionStatus.PASSED
        assert zygote_pid == executor._workers[0].process.pid
        # The untrusted child is new every job; the runner survives unless its quota ran out.
        after = set(_children(zygote_pid))
        survivors = before & after
        assert len(survivors) == (0 if runner_changes else 1)
        # One runner, under its own name (ps and benchmarks/cpu_by_process.py tell it apart by it), fresh or not.
        runners = [pid for pid in after if _comm(pid) == RUNNER_NAME]
        assert len(runners) == 1
        assert runner_changes or runners == list(survivors)
    finally:
        executor.close()


def test_unexpected_sandbox_failure_is_an_error_result_not_an_exception(monkeypatch):
    executor = make_executor(workers=1)
    try:

        def out_of_descriptors(*args, **kwargs):
            raise OSError(24, "Too many open files")

        monkeypatch.setattr(os, "memfd_create", out_of_descriptors)
        results = list(executor.run_batch([job(RIGHT), job(WRONG)], workers=1))
        assert [r.status for r in results] == [ExecutionStatus.ERROR, ExecutionStatus.ERROR]
        assert "Too many open files" in results[0].reason
        monkeypatch.undo()
        assert executor.run(job(RIGHT)).status is ExecutionStatus.PASSED
    finally:
        executor.close()


def test_a_job_reuses_the_process_wide_executor_only_when_it_matches(monkeypatch):
    """`run` keeps the process's fork servers when they are what it asks for, and never runs a job under
    settings the environment no longer gives (a memory cap changed since they started)."""
    from rewardpipe.execution import sandbox
    from rewardpipe.execution.sandbox import ENV_MEMORY, ForkServerExecutor, default_executor, executor_for

    # A process-wide executor made under this environment (another test may have left one made under
    # another; it starts no fork server until it gets a job).
    monkeypatch.setattr(sandbox, "_DEFAULT", ForkServerExecutor())
    shared = default_executor()
    assert executor_for(None) == (shared, False)
    assert executor_for(shared.workers) == (shared, False)
    other, owned = executor_for(shared.workers + 1)
    try:
        assert owned and other is not shared and other.workers == shared.workers + 1
    finally:
        other.close()
    monkeypatch.setenv(ENV_MEMORY, str(shared.config.memory_mb + 64))
    changed, owned = executor_for(None)
    try:
        assert owned and changed is not shared and changed.config.memory_mb == shared.config.memory_mb + 64
    finally:
        changed.close()
