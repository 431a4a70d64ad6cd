"""Round thirty-seven (review), the trusted runner: what the round's own-state exemption and process group missed.

The runner leads its own process group since round thirty-seven, so a hidden test's ``os.setpriority(os.PRIO_PGRP,
0, ...)`` (its own group: itself and what it started) sets the runner's own priority, as ``PRIO_PROCESS`` does. That
was read as the model's code disturbing the trusted side: every rollout of such tests, a right answer too, was an
error. And a process the tests started outlived a fork server the scorer killed mid-job (below).
"""

from __future__ import annotations

import os
import secrets
import signal
import threading
import time

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.sandbox import make_executor
from tests.security import test_round_thirtyone_sandbox as thirtyone
from tests.security.test_round_nine_files import _lambda_like
from tests.security.test_round_thirtyseven_runner import BODY, HEADER, IDENTITY, worker  # noqa: F401 - fixture

OWN_GROUP_PRIORITY = {
    "its own group, as 0": "import os\nos.setpriority(os.PRIO_PGRP, 0, os.getpriority(os.PRIO_PROCESS, 0) + 1)\n",
    "its own group, by number": (
        "import os\nos.setpriority(os.PRIO_PGRP, os.getpgrp(), os.getpriority(os.PRIO_PROCESS, 0) + 1)\n"
    ),
}


@pytest.mark.parametrize("case", sorted(OWN_GROUP_PRIORITY))
def test_a_priority_the_tests_set_on_their_own_process_group_is_theirs(worker, case):  # noqa: F811 - fixture
    top = OWN_GROUP_PRIORITY[case]
    right = thirtyone._run(worker, "right", IDENTITY, top + HEADER + BODY, entry_point="f")
    assert right.status is ExecutionStatus.PASSED, (right.status, right.reason)
    wrong = thirtyone._run(worker, "wrong", "def f(n):\n    return n + 1\n", top + HEADER + BODY, entry_point="f")
    assert wrong.status is ExecutionStatus.FAILED, (wrong.status, wrong.reason)
    after = thirtyone._run(worker, "after", IDENTITY, HEADER + BODY, entry_point="f")
    assert after.status is ExecutionStatus.PASSED, (after.status, after.reason)


# --- a process the tests started, when their fork server is killed mid-job -----------------------------------------
# Round thirty-seven made the runner lead its own process group (what its tests start is killed with it when it is
# replaced). The scorer stops a fork server by killing its process group (forkservers._Worker.kill: a job past its
# deadline, a pool closed mid-job), which no longer holds the runner's: the runner died of its parent's death, but a
# process its tests had started lived on, outside any cgroup (the first runner is forked before the fork server joins
# its job cgroup), and acted after the job, the fork server and the worker were gone.
def _own_mark() -> str:
    """How long the tests' process sleeps (373 s and a fraction of the test's own): found by it in /proc. A fixed one
    was the same for this test's other mode on the suite's other xdist process at the same time (and another
    checkout's run): that sleeper was taken for this one's, and this test's clean-up killed it."""
    return f"373.{secrets.randbelow(10**6):06d}"


def _sleepers(mark: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as file:
                    arguments = file.read().split(b"\0")
                with open(f"/proc/{name}/stat", "rb") as file:
                    state = file.read().rpartition(b")")[2].split()[0]
            except OSError:
                continue
            if arguments[:2] == [b"sleep", mark.encode()] and state != b"Z":
                found.append(int(name))
    return found


def _wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.mark.parametrize("mode", ["full", "lambda"])
def test_a_process_the_tests_started_dies_with_a_fork_server_killed_mid_job(mode, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mark = _own_mark()
    assert not _sleepers(mark)
    executor = make_executor(workers=1) if mode == "full" else _lambda_like()
    try:
        tests = f"import subprocess, time\nsubprocess.Popen(['sleep', '{mark}'])\ntime.sleep(15)\n" + HEADER + BODY
        job = threading.Thread(target=thirtyone._run, args=(executor, "hangs", IDENTITY, tests, "f"), daemon=True)
        job.start()
        assert _wait_for(lambda: _sleepers(mark), 60), "the tests' process never started"  # (60 s: a loaded host)
        (worker,) = executor._workers
        worker.kill()
        assert _wait_for(lambda: not _sleepers(mark), 30), "the tests' process outlived its fork server"
    finally:
        for pid in _sleepers(mark):
            os.kill(pid, signal.SIGKILL)
        executor.close()
