"""Round thirty-seven (third wave), the trusted runner's reach beyond its own process (issue 19: one job's tests never
change another job's verdict).

The hidden tests run in the trusted runner as the sandbox's uid: on Lambda the uid of every worker's fork server,
runner and rollout; with full isolation root. ``os.setpriority(os.PRIO_USER, 0, 19)`` in one task's tests reniced
every worker's fork server and runner, which then reported themselves disturbed: the job, and a job beside it, right
answers both, scored 0. ``posix.setpriority`` (the same call under another name) passed by the wrappers that note
what the tests set on their own process, with the same result for their own job. A signal, priority, CPU set or limit
the tests aim at the fork server (``os.getppid()``), a process group not theirs or every process (``kill(-1)``) is
refused; one naming every process of the uid is made for their own process group; their own subprocesses stay theirs.
"""

from __future__ import annotations

import os
import secrets

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.sandbox import make_executor
from tests.security import test_round_thirtyone_sandbox as thirtyone

IDENTITY = "def f(n):\n    return n\n"
HEADER = "import unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
BODY = "        self.assertEqual(f(1), 1)\n"
# A uid of this module's own for the fork servers of the Lambda-like worker: a call that reached every process of the
# uid (the regression tested here) reaches nothing but this module's sandbox.
OWN_UID = 65437


@pytest.fixture(scope="module", params=["full", "lambda"])
def worker(request, tmp_path_factory):
    before = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("scorer"))
    try:
        if request.param == "full":
            executor = make_executor(workers=1)
        else:
            if os.geteuid() != 0:
                pytest.skip("needs root to start the fork servers as another uid")
            executor = make_executor(workers=1, server_uid=OWN_UID, disable=frozenset({"landlock"}))
            if not executor.isolation()["seccomp"].startswith("on"):
                executor.close()
                pytest.skip("seccomp is unavailable")
        executor.mode = request.param
        yield executor
        executor.close()
    finally:
        os.chdir(before)


def _passes(executor, top: str) -> None:
    """A right answer whose tests run ``top`` at module level passes, and so does the next job on the worker."""
    first = thirtyone._run(executor, "first", IDENTITY, top + HEADER + BODY, entry_point="f")
    assert first.status is ExecutionStatus.PASSED, (first.status, first.reason)
    second = thirtyone._run(executor, "second", IDENTITY, HEADER + BODY, entry_point="f")
    assert second.status is ExecutionStatus.PASSED, (second.status, second.reason)


FORK_SERVER_NICE = (
    "import os, posix, resource, signal\nserver = os.getppid()\nbefore = os.getpriority(os.PRIO_PROCESS, server)\n"
)
UNTOUCHED = "assert os.getpriority(os.PRIO_PROCESS, server) == before, 'the fork server was reniced'\n"


def test_every_process_of_the_uid_is_the_jobs_own_group(worker):
    if worker.mode == "full":  # (root's every process is the whole host's: tried only under a uid of this module's)
        pytest.skip("PRIO_USER is tried where the sandbox's uid is this module's own")
    lowest = "os.setpriority(os.PRIO_USER, 0, 19)\nassert os.getpriority(os.PRIO_PROCESS, 0) == 19\n"
    _passes(worker, FORK_SERVER_NICE + lowest + UNTOUCHED)
    _passes(worker, FORK_SERVER_NICE + lowest.replace("os.setpriority", "posix.setpriority") + UNTOUCHED)


@pytest.mark.parametrize(
    "call",
    [
        "posix.setpriority(posix.PRIO_PROCESS, 0, 19)",
        "posix.nice(1)",
        "posix.sched_setaffinity(0, posix.sched_getaffinity(0))",
        "os.setpriority(os.PRIO_PGRP, 0, 19)",
        "os.setpriority(which=os.PRIO_PROCESS, who=0, priority=19)",
    ],
)
def test_what_the_tests_set_on_their_own_process_by_posix_names_is_theirs(worker, call):
    _passes(worker, FORK_SERVER_NICE + call + "\n" + UNTOUCHED)


REFUSED = {
    "the fork server's priority": "os.setpriority(os.PRIO_PROCESS, server, 19)",
    "the fork server's priority, by posix": "posix.setpriority(posix.PRIO_PROCESS, server, 19)",
    "the fork server's group's priority": "os.setpriority(os.PRIO_PGRP, os.getpgid(server), 19)",
    "the fork server's priority, by name": "os.setpriority(which=os.PRIO_PROCESS, who=server, priority=19)",
    "the fork server's CPUs": "os.sched_setaffinity(server, os.sched_getaffinity(server))",
    "the fork server's CPUs, by posix": "posix.sched_setaffinity(server, posix.sched_getaffinity(server))",
    "the fork server's scheduling": "os.sched_setparam(server, os.sched_getparam(server))",
    "the fork server's limits": "resource.prlimit(server, resource.RLIMIT_NOFILE, resource.prlimit(server, "
    "resource.RLIMIT_NOFILE))",
    "a signal to the fork server": "os.kill(server, signal.SIGCONT)",
    "a signal to the fork server, by posix": "posix.kill(server, signal.SIGCONT)",
    "a signal to the fork server's group": "os.killpg(os.getpgid(server), signal.SIGCONT)",
    "a signal to the fork server's group, by kill": "os.kill(-os.getpgid(server), signal.SIGCONT)",
    "a move into the fork server's group": "os.setpgid(0, os.getpgid(server))",
    "a signal to every process": "os.kill(-1, signal.SIGCONT)",
    "a signal to the fork server, by a pidfd": "signal.pidfd_send_signal(os.pidfd_open(server), signal.SIGCONT)",
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_call_on_a_process_outside_the_job_is_refused(worker, case):
    # (SIGCONT and settings equal to the current ones: harmless to the fork server were the refusal to regress)
    call = REFUSED[case]
    top = f"try:\n    {call}\nexcept PermissionError:\n    pass\nelse:\n    raise AssertionError('not refused')\n"
    _passes(worker, FORK_SERVER_NICE + top + UNTOUCHED)


def test_processes_the_tests_start_stay_theirs_to_manage(worker):
    top = (
        "import os, signal, subprocess, sys, resource\n"
        "sleeper = [sys.executable, '-c', 'import time; time.sleep(60)']\n"
        "child = subprocess.Popen(sleeper)\n"
        "os.setpriority(os.PRIO_PROCESS, child.pid, 19)\n"
        "assert os.getpriority(os.PRIO_PROCESS, child.pid) == 19\n"
        "os.sched_setaffinity(child.pid, os.sched_getaffinity(0))\n"
        "resource.prlimit(child.pid, resource.RLIMIT_NOFILE, resource.prlimit(child.pid, resource.RLIMIT_NOFILE))\n"
        "child.kill()\n"
        "assert child.wait() == -signal.SIGKILL\n"
        "leader = subprocess.Popen(sleeper, start_new_session=True)\n"  # (a session and group of its own)
        "os.killpg(leader.pid, signal.SIGKILL)\n"
        "assert leader.wait() == -signal.SIGKILL\n"
        "gone = subprocess.Popen([sys.executable, '-c', 'pass'])\n"
        "gone.wait()\n"
        "try:\n    os.kill(gone.pid, signal.SIGKILL)\nexcept ProcessLookupError:\n    pass\n"
        # a process they forked acts on the runner (and on itself) as the runner does
        "runner = os.getpid()\n"
        "forked = os.fork()\n"
        "if forked == 0:\n"
        "    try:\n"
        "        os.kill(runner, 0)\n"
        "        os.setpriority(os.PRIO_PROCESS, runner, os.getpriority(os.PRIO_PROCESS, runner))\n"
        "        os.kill(os.getpid(), 0)\n"
        "    except BaseException:\n"
        "        os._exit(1)\n"
        "    os._exit(0)\n"
        "assert os.waitpid(forked, 0)[1] == 0\n"
    )
    _passes(worker, top)


# The same calls past the runner's Python checks (ctypes; a process the tests start, which has no audit hook of the
# runner's): refused by the kernel, by the runner's own seccomp filter, where the worker has seccomp.
LIBC = (
    "import ctypes, errno\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "def refused(result):\n"
    "    assert result == -1 and ctypes.get_errno() == errno.EPERM, (result, ctypes.get_errno())\n"
)
PAST_PYTHON = {
    "the fork server's priority, by libc": "refused(libc.setpriority(0, server, 19))",
    "the fork server's group's priority, by libc": "refused(libc.setpriority(1, os.getpgid(server), 19))",
    "a signal to the fork server, by libc": "refused(libc.kill(server, signal.SIGCONT))",
    "a signal to the fork server's group, by libc": "refused(libc.kill(-os.getpgid(server), signal.SIGCONT))",
    "the fork server's limits, by libc": "refused(libc.prlimit(server, resource.RLIMIT_NOFILE, None, None))",
    "the fork server, in a process the tests start": (
        "import subprocess, sys\n"
        "ran = subprocess.run([sys.executable, '-c', f'import os\\nos.setpriority(os.PRIO_PROCESS, {server}, 19)'])\n"
        "assert ran.returncode == 1, ran.returncode"
    ),
}
# (every process of the uid, or every process: tried only where the uid is this module's own)
PAST_PYTHON_EVERYWHERE = {
    "every process of the uid, by libc": "refused(libc.setpriority(2, 0, 19))",
    "a signal to every process, by libc": "refused(libc.kill(-1, signal.SIGCONT))",
    "every process of the uid, in a process the tests start": (
        "import subprocess, sys\n"
        "ran = subprocess.run([sys.executable, '-c', 'import os\\nos.setpriority(os.PRIO_USER, 0, 19)'])\n"
        "assert ran.returncode == 1, ran.returncode"
    ),
}


@pytest.mark.parametrize("case", sorted({**PAST_PYTHON, **PAST_PYTHON_EVERYWHERE}))
def test_a_call_past_the_runners_python_checks_is_refused_by_the_kernel(worker, case):
    if not worker.isolation()["seccomp"].startswith("on"):
        pytest.skip("seccomp is off")
    if case in PAST_PYTHON_EVERYWHERE and worker.mode == "full":
        pytest.skip("tried where the sandbox's uid is this module's own")
    call = {**PAST_PYTHON, **PAST_PYTHON_EVERYWHERE}[case]
    _passes(worker, FORK_SERVER_NICE + LIBC + call + "\n" + UNTOUCHED)


SHMGET = "shmget = ctypes.CDLL(None, use_errno=True).shmget\n"


def own_sysv_key() -> int:
    """A SysV key of the calling test's own (never IPC_PRIVATE's 0): a fixed one is the same for every process that
    uses it, on this host (the suite's other xdist process, another checkout's run) whenever a namespace is shared."""
    return 1 + secrets.randbelow(0x7FFFFFFE)


def test_a_sysv_segment_the_tests_make_is_gone_for_the_next_job(worker):
    # Where the worker has an IPC namespace of its own (full isolation): the tests' segment outlived their job, and a
    # later task's tests found the key taken. (On Lambda the runner shares the host's IPC namespace: not removed.)
    if not worker.isolation()["seccomp"].startswith("on") or worker.mode != "full":
        pytest.skip("needs the worker's own IPC namespace")
    key = own_sysv_key()
    make = f"import ctypes\n{SHMGET}assert shmget({key}, 4096, 0o1600) >= 0, ctypes.get_errno()\n"
    find = f"import ctypes, errno\n{SHMGET}assert shmget({key}, 0, 0) == -1 and ctypes.get_errno() == errno.ENOENT\n"
    first = thirtyone._run(worker, "first", IDENTITY, make + HEADER + BODY, entry_point="f")
    assert first.status is ExecutionStatus.PASSED, (first.status, first.reason)
    second = thirtyone._run(worker, "second", IDENTITY, find + HEADER + BODY, entry_point="f")
    assert second.status is ExecutionStatus.PASSED, (second.status, second.reason)
