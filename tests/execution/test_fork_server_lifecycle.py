"""A fork server's close leaves nothing behind: no process it started (the trusted runner, the housekeeper, the
spare children waiting for a job) and not the scorer's directory, with the jobs' tmpfs mounts in a private mount
namespace (where the machine allows one: not when the checkout is under /tmp) or without one."""

from __future__ import annotations

import os
import time

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.forkservers import layer_names
from rewardpipe.execution.sandbox import make_executor
from tests.execution.conftest import job


def _descendants(pid: int) -> set[int]:
    found: set[int] = set()
    pending = [pid]
    while pending:
        parent = pending.pop()
        try:
            threads = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for thread in threads:
            try:
                with open(f"/proc/{parent}/task/{thread}/children") as handle:
                    children = {int(number) for number in handle.read().split()}
            except OSError:
                continue
            pending.extend(children - found)
            found |= children
    return found


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


@pytest.mark.parametrize("disable", ["", "mountns"])
def test_close_leaves_no_process_and_no_directory(disable):
    executor = make_executor(workers=1, disable=layer_names(disable))
    try:
        assert executor.run(job("def add(a, b):\n    return a + b\n")).status is ExecutionStatus.PASSED
        worker = executor._workers[0]
        server = worker.process.pid
        tree = _descendants(server)
        assert len(tree) >= 3, tree  # the trusted runner, the housekeeper or no tmpfs, a spare child
        if disable:
            assert worker.isolation.get("mountns", "").startswith("off")
        scorer_dir = worker._dir
    finally:
        executor.close()
    deadline = time.monotonic() + 30  # (they go at once: 30 s bounds a stall on a loaded machine)
    while not all(_gone(pid) for pid in [server, *tree]) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [pid for pid in [server, *tree] if not _gone(pid)] == []
    assert not os.path.exists(scorer_dir)
