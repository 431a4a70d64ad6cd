"""Round thirty-eight (review), the sandbox: attacks on this round's runner filter, its supervisor in the fork server
and the runner's own directories, each shown failing before its fix.

* A process the tests start signalled another worker's runner or fork server through a pidfd: the filter held kill
  and its family by pid, but pidfd_send_signal takes a descriptor, and ``open("/proc/<pid>")`` is one (no pidfd_open).
* multiprocessing's managers and forkserver context failed in Lambda mode: their socket's path, under the runner's
  directory, was too long.
* A flood of notified calls kept the fork server's wait busy, and the job's disk went unmeasured meanwhile.
* A call on a pid no process had was let through, and reached the process that took the pid next.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import socket
import time

import pytest

from rewardpipe.execution.runtime import layers, zygote
from tests.security.test_round_thirtyeight_sandbox import (  # noqa: F401 - (the module's workers, as fixtures)
    FIND_THE_OTHER_WORKER,
    call_under_the_runners_filter,
    two_workers,
    worker,
)
from tests.security.test_round_thirtyseven_d_runner_reach import _passes

# After FIND_THE_OTHER_WORKER's own checks (``targets``: the other worker's runners and their fork server), each is
# signalled through its /proc directory, which pidfd_send_signal takes as a pidfd, from the runner (ctypes) and from a
# process the tests start (refused whatever the directory names: the fork server cannot see the caller's descriptors).
BY_PROC_DIRECTORY = (
    "def by_directory(pid, signum=signal.SIGCONT):\n"
    "    fd = os.open(f'/proc/{pid}', os.O_RDONLY | os.O_DIRECTORY)\n"
    "    try:\n"
    "        return libc.syscall(424, fd, signum, None, 0), ctypes.get_errno()\n"
    "    finally:\n"
    "        os.close(fd)\n"
    "for target in targets:\n"
    "    assert by_directory(target) == (-1, errno.EPERM), (target, by_directory(target))\n"
    "    child = (\n"
    "        'import ctypes, os, sys\\nlibc = ctypes.CDLL(None, use_errno=True)\\n'\n"
    "        f'fd = os.open(\"/proc/{target}\", os.O_RDONLY)\\n'\n"
    "        'sys.exit(0 if libc.syscall(424, fd, 18, None, 0) == 0 else 3)'\n"
    "    )\n"
    "    assert subprocess.run([sys.executable, '-c', child]).returncode == 3, ('signalled', target)\n"
    "mine = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
    "assert by_directory(mine.pid, signal.SIGKILL) == (-1, errno.EPERM), 'refused whatever it names'\n"
    "mine.kill()\n"
    "assert mine.wait(timeout=30) == -signal.SIGKILL\n"
)


def test_the_tests_cannot_signal_another_workers_processes_through_a_pidfd(two_workers):  # noqa: F811
    _passes(two_workers, FIND_THE_OTHER_WORKER + BY_PROC_DIRECTORY)
    _passes(two_workers, FIND_THE_OTHER_WORKER + BY_PROC_DIRECTORY)  # (the jobs go to either worker)


# The tests' own pidfd still signals their own process (signal.pidfd_send_signal, checked and sent by the runner), in
# either mode; a /proc directory is refused by the filter whatever it names.
OWN_PIDFD = (
    "import os, signal, subprocess, sys\n"
    "mine = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
    "pidfd = os.pidfd_open(mine.pid)\n"
    "signal.pidfd_send_signal(pidfd, signal.SIGKILL)\n"
    "assert mine.wait(timeout=30) == -signal.SIGKILL\n"
    "try:\n"
    "    signal.pidfd_send_signal(pidfd, signal.SIGKILL)\n"
    "except ProcessLookupError:\n"
    "    pass\n"
    "else:\n"
    "    raise AssertionError('a reaped process signalled')\n"
    "os.close(pidfd)\n"
)


def test_the_tests_own_pidfd_still_signals_their_own_process(worker):  # noqa: F811
    _passes(worker, OWN_PIDFD)


# multiprocessing's managers and its forkserver context listen on a UNIX socket under tempfile's directory, the runner's
# own (pymp-XXXXXXXX/listener-XXXXXXXX below it): the runner's directory, named past guessing, was long enough in
# Lambda mode (the scorer's temporary directory, no per-job tmpfs) to take the path past the 107 bytes a socket's
# address holds: "AF_UNIX path too long", a right answer's error.
LISTENS_ON_A_SOCKET = (
    "import multiprocessing as mp, time\n"
    "with mp.Manager() as manager:\n"
    "    shared = manager.dict()\n"
    "    shared['x'] = 1\n"
    "    assert dict(shared) == {'x': 1}\n"
    "started = mp.get_context('forkserver').Process(target=time.sleep, args=(60,))\n"
    "started.start()\n"
    "started.terminate()\n"
    "started.join(30)\n"
    "assert started.exitcode == -15, started.exitcode\n"
)


def test_the_tests_may_listen_on_a_socket_under_their_temporary_directory(worker):  # noqa: F811
    _passes(worker, LISTENS_ON_A_SOCKET)


class _EndlessCalls:
    """A supervisor whose listener is always readable: the tests' calls keep coming (a loop of kill(pid, 0))."""

    def __init__(self):
        self.read_end, self.write_end = os.pipe()
        os.write(self.write_end, b"x")
        self.answered = 0

    def fileno(self) -> int:
        return self.read_end

    def answer(self) -> None:
        self.answered += 1


class _RepliesOnceMeasured:
    """The job's disk watch: the runner's reply comes once the job's disk has been measured during the job."""

    def __init__(self, runner_end: socket.socket):
        self.runner_end = runner_end
        self.checks = 0

    def check(self) -> None:
        self.checks += 1
        if self.checks == 1:
            self.runner_end.send(b'{"state": "done"}')


def test_the_jobs_disk_is_measured_while_the_tests_calls_are_answered():
    # (Lambda mode, no per-job tmpfs: the fork server measures the job's disk while it waits for the runner; a flood of
    # notified calls kept every wait busy, and the model's process wrote past its budget, or filled the host's disk,
    # unmeasured until the tests' loop ended)
    server = zygote.Zygote.__new__(zygote.Zygote)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    calls = _EndlessCalls()
    server.runner_socket, server.runner_pidfd, server.runner_supervisor = ours, None, calls
    server.seccomp_arch, server.runner_pid = None, 0
    watch = _RepliesOnceMeasured(theirs)
    try:
        reply = server._await_trusted_runner(time.monotonic() + 30, watch)
        assert reply == {"state": "done"} and watch.checks == 1 and calls.answered > 0
    finally:
        for end in (ours, theirs):
            end.close()
        os.close(calls.read_end)
        os.close(calls.write_end)


def _free_pid() -> int:
    """A pid no process has now, well past the ones being handed out."""
    with open("/proc/sys/kernel/pid_max") as handle:
        highest = int(handle.read())
    with open("/proc/sys/kernel/ns_last_pid") as handle:
        last = int(handle.read())
    for pid in range(min(last + 100_000, highest - 1), 300, -97):
        if not os.path.exists(f"/proc/{pid}"):
            return pid
    raise AssertionError("no free pid")


def _process_at(pid: int) -> int | None:
    """Fork a process of this test's own (nothing the supervised caller started) with the pid ``pid``, or None if
    another process took it first (ns_last_pid, root only)."""
    with open("/proc/sys/kernel/ns_last_pid", "w") as handle:
        handle.write(str(pid - 1))
    child = os.fork()
    if child == 0:
        signal.pause()
        os._exit(0)
    if child != pid:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        return None
    return child


def test_a_call_on_a_pid_that_is_gone_never_reaches_the_process_that_takes_it(monkeypatch):
    # A pid no process has is "gone" to the supervisor; let through ("the kernel answers ESRCH"), the kernel made the
    # call after the check, on whatever process had the pid by then: a caller aiming at the next pid handed out (pids
    # are sequential) reached another worker's runner as it started. Here the process taking the pid is made between
    # the supervisor's check and its answer.
    if os.geteuid() != 0:
        pytest.skip("needs root to choose a pid (ns_last_pid)")
    arch = layers.seccomp_arch()
    if arch is None:
        pytest.skip("no seccomp filter for this machine")
    target = _free_pid()
    taken: list[int] = []
    lost: list[int] = []
    checked = layers.started_by

    def check_then_take(runner: int, pid: int, caller: int = 0) -> bool | None:
        answer = checked(runner, pid, caller)
        if pid == target and not taken and not lost:
            # (skipped only once the call is answered and the caller reaped: a skip raised here left the caller
            # waiting on its notification and this test waiting for the caller, forever, under load)
            victim = _process_at(target)
            (taken if victim is not None else lost).append(target if victim is None else victim)
        return answer

    monkeypatch.setattr(layers, "started_by", check_then_take)

    def program() -> bytes:  # (under the runner's filter, as the runner: a SIGKILL to the free pid)
        return layers.runner_reach_filter(arch, os.getppid(), os.getpgid(os.getppid()), runner=os.getpid())

    supervisor = None
    try:
        result, error, supervisor = call_under_the_runners_filter(
            arch, program, lambda: ctypes.CDLL(None, use_errno=True).kill(target, signal.SIGKILL)
        )
        if lost:
            pytest.skip("the pid was taken by another process first")
        assert taken, "the supervisor never checked the pid"
        assert [result, error] == [-1, errno.ESRCH], "the process that took the pid was sent the SIGKILL"
    finally:
        for victim in taken:
            os.kill(victim, signal.SIGKILL)
            os.waitpid(victim, 0)
        if supervisor is not None:
            supervisor.close()
