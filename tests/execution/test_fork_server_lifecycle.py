"""A fork server's start and stop, made shorter without leaving anything behind.

Its start-up probes (each layer tried in a throw-away child before it is relied on) run side by side: one after
another they kept every fork server tens of milliseconds from its first job. Each answer is read where its layer
is decided, and a probe nobody asks for is reaped. Its close kills everything before waiting for anything, and
lets the jobs' mounts go with its private mount namespace."""

from __future__ import annotations

import os
import tempfile
import time

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.forkservers import layer_names
from rewardpipe.execution.runtime import zygote
from rewardpipe.execution.sandbox import make_executor
from tests.execution.conftest import job


def _wait_for(path: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.005)


def test_probes_run_side_by_side():
    # The first probe only succeeds once the second one is running: with probes run one after another (each
    # awaited before the next starts) the first would time out and report a failure.
    with tempfile.TemporaryDirectory() as scratch:
        second_started = os.path.join(scratch, "second")
        probes = zygote._Probes()
        probes.start("first", lambda: _wait_for(second_started))
        probes.start("second", lambda: open(second_started, "w").close())
        assert probes.result("second") is None
        assert probes.result("first") is None


def test_a_failing_probe_says_why_and_the_others_still_answer():
    probes = zygote._Probes()
    probes.start("broken", lambda: (_ for _ in ()).throw(PermissionError(1, "refused by the kernel")))
    probes.start("fine", lambda: None)
    probes.start("killed", lambda: os.kill(os.getpid(), 9))
    assert "refused by the kernel" in probes.result("broken")
    assert probes.result("fine") is None
    assert probes.result("killed") == "killed by SIGKILL"


def test_probes_nobody_asks_for_are_reaped():
    probes = zygote._Probes()
    probes.start("forever", lambda: time.sleep(3600))
    pid = probes._running["forever"][0]
    probes.abandon()
    assert not probes._running
    # Reaped, not merely killed: the pid is no child of ours any more.
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    else:
        raise AssertionError("the abandoned probe was never reaped")


def test_single_probe_keeps_its_answer():
    assert zygote._probe(lambda: None) is None
    assert "ValueError('no such layer')" in zygote._probe(lambda: (_ for _ in ()).throw(ValueError("no such layer")))


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
    # With the jobs' mounts in the fork server's own mount namespace, close lets them go with it instead of
    # unmounting each: nothing may stay behind either way, neither a process nor the scorer's directory.
    executor = make_executor(workers=1, disable=layer_names(disable))
    try:
        assert executor.run(job("def add(a, b):\n    return a + b\n")).status is ExecutionStatus.PASSED
        worker = executor._workers[0]
        server = worker.process.pid
        tree = _descendants(server)
        assert len(tree) >= 3, tree  # the trusted runner, the housekeeper or no tmpfs, a spare child
        mountns = worker.isolation.get("mountns", "")
        assert mountns.startswith("off") == bool(disable), mountns
        scorer_dir = worker._dir
    finally:
        executor.close()
    deadline = time.monotonic() + 5
    while not all(_gone(pid) for pid in [server, *tree]) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [pid for pid in [server, *tree] if not _gone(pid)] == []
    assert not os.path.exists(scorer_dir)
