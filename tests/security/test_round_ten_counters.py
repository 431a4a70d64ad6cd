"""Round ten: counters the whole host shares, as a channel from one job to the next.

A job cannot leave a file, an IPC object or a lock for the next one (rounds four and nine). It could still move
a counter the next job reads: the host's pid counter (every thread takes a pid) and the inode counter that
numbers pipes and sockets. The next job, pre-forked before the last one ran, compares a number it was born with
(its own pid, the inode of a pipe it inherited) with a new one (a thread's id, a new pipe's inode): the gap is
what the job before it counted out, exactly for pids. Each job now has a pid namespace of its own where the
fork server is root (layer ``pidns``), and pipes are refused to the model's code.
"""

from __future__ import annotations

import errno
import os
import platform
import textwrap

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.runtime import layers
from tests.infra.test_graviton import _answer, _run_filter
from tests.security.conftest import assert_failed, job, require_layer
from tests.security.test_round_nine_files import _lambda_like

COUNTS_OUT_THREADS = textwrap.dedent("""
    import threading
    for _ in range(1000):  # each thread takes a pid from the counter, and gives it back when it ends
        worker = threading.Thread(target=lambda: None)
        worker.start()
        worker.join()
    def add(a, b):
        return 0
""")
READS_THE_PID_GAP = textwrap.dedent("""
    import os, threading
    ids = []
    worker = threading.Thread(target=lambda: ids.append(threading.get_native_id()))
    worker.start()
    worker.join()
    GAP = ids[0] - os.getpid()  # pids taken since this process was forked
    print(f"PID {os.getpid()} PARENT {os.getppid()} GAP {GAP}")
    def add(a, b):
        return a + b if GAP > 500 else 0  # "the rollout before me was right"
""")


def test_the_pid_counter_tells_a_job_nothing_of_the_ones_before(executor):
    if os.geteuid() != 0:  # (not the report's word for it: this ran, and the reader passed, before pidns)
        pytest.skip("a pid namespace per job needs a root fork server")
    assert_failed(executor.run(job(COUNTS_OUT_THREADS)))
    reader = executor.run(job(READS_THE_PID_GAP))
    assert_failed(reader)  # it passed before: the gap was the thousand threads of the job before it
    assert reader.stdout.strip() == "PID 1 PARENT 0 GAP 1", reader.stdout  # alone in its namespace


def test_a_job_alone_in_its_pid_namespace_still_behaves_as_before(executor):
    require_layer(executor, "pidns")
    crashes = "import ctypes\ndef add(a, b):\n    return ctypes.string_at(0)\n"
    crashed = executor.run(job(crashes))
    assert_failed(crashed)
    assert "SIGSEGV" in crashed.reason, crashed.reason  # a crash still ends it, as the namespace's first process
    exits = "import os\ndef add(a, b):\n    os._exit(3)\n"
    assert "exit 3" in executor.run(job(exits)).reason
    threads = textwrap.dedent("""
        from concurrent.futures import ThreadPoolExecutor
        def add(a, b):
            with ThreadPoolExecutor(4) as pool:
                return sum(pool.map(lambda n: n, [a, b]))
    """)
    assert executor.run(job(threads)).status is ExecutionStatus.PASSED


def test_the_report_names_the_pid_namespace(executor):
    require_layer(executor, "pidns")
    assert executor.isolation()["pidns"].startswith("on: each job's process alone in a pid namespace")


def test_without_root_the_report_says_the_pid_counter_is_shared():
    lambda_mode = _lambda_like()
    try:
        assert lambda_mode.isolation()["pidns"] == "off: fork server is not root"
    finally:
        lambda_mode.close()


MAKES_A_PIPE = textwrap.dedent("""
    import os
    try:
        os.pipe()
        OUTCOME = "made"
    except OSError as exc:
        OUTCOME = exc.errno
    print("PIPE", OUTCOME)
    def add(a, b):
        return a + b
""")


@pytest.mark.parametrize("mode", ["full", "lambda"])
def test_a_pipe_is_refused_to_the_models_code(executor, mode):
    """Its inode number comes from the host's shared counter: one job made a thousand pipes and the next read
    the gap from a pipe it inherited."""
    chosen = executor if mode == "full" else _lambda_like()
    try:
        require_layer(chosen, "seccomp")
        result = chosen.run(job(MAKES_A_PIPE))
        assert result.status is ExecutionStatus.PASSED, result.reason  # the rest of the code runs
        assert result.stdout.strip() == f"PIPE {errno.EPERM}", result.stdout
        assert "no pipes, FIFOs or xattrs" in chosen.isolation()["seccomp"]
    finally:
        if chosen is not executor:
            chosen.close()


@pytest.mark.parametrize("arch", ["aarch64", "x86_64"])
def test_the_kernel_log_is_refused_where_a_crash_writes_its_address(arch):
    """A segfault at an address the model chose is logged with that address; where kernel.dmesg_restrict is 0,
    syslog(2) read it back in the next job. Refused by the filter, whatever the host's setting."""
    number = layers._DENIED[arch]["syslog"]
    assert _answer(_run_filter(layers.build_seccomp_filter(arch, 4242), arch, number, (3, 0, 1 << 20))) == "EPERM"


# A thread's pidfd: its inode number counts every pid the host made, which no pid namespace hides. The writer of
# the channel started throwaway threads until that counter held its answer; the next job read it back.
TAKES_A_THREADS_PIDFD = textwrap.dedent("""
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    libc.clone.restype = ctypes.c_int
    libc.clone.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_int] + [ctypes.c_void_p] * 4
    stack = ctypes.create_string_buffer(1 << 16)
    exit_now = ctypes.cast(libc.syscall, ctypes.c_void_p)  # the thread runs syscall(SYS_exit)
    pidfd = ctypes.c_int(-1)
    flags = 0x100 | 0x200 | 0x400 | 0x800 | 0x10000 | 0x40000 | 0x1000  # a thread, with CLONE_PIDFD
    tid = libc.clone(exit_now, ctypes.c_void_p(ctypes.addressof(stack) + (1 << 16) - 64), flags,
                     ctypes.c_void_p({exit}), ctypes.byref(pidfd), None, None)
    print("CLONE", tid if tid < 0 else "made", ctypes.get_errno() if tid < 0 else "", "PIDFD", pidfd.value)
    def add(a, b):
        return a + b
""")
SPENDS_HOST_WIDE_COUNTS = textwrap.dedent("""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    info = ctypes.create_string_buffer(256)
    context = ctypes.c_ulong(0)
    print("SYSINFO", libc.syscall({sysinfo}, info), ctypes.get_errno())
    print("IO_SETUP", libc.syscall({io_setup}, 1, ctypes.byref(context)), ctypes.get_errno())
    def add(a, b):
        return a + b
""")


@pytest.mark.parametrize("mode", ["full", "lambda"])
def test_no_pidfd_and_no_host_wide_count(executor, mode):
    """sysinfo()'s task count moved by fifty threads, and the host's AIO contexts all taken by one job, each
    answered the job beside it; a thread's pidfd told the next job the host's pid count."""
    arch = platform.machine()
    if arch not in ("x86_64", "aarch64"):
        pytest.skip(f"no syscall table for {arch}")
    chosen = executor if mode == "full" else _lambda_like()
    try:
        require_layer(chosen, "seccomp")
        exit_number = {"x86_64": 60, "aarch64": 93}[arch]
        result = chosen.run(job(TAKES_A_THREADS_PIDFD.format(exit=exit_number)))
        assert result.status is ExecutionStatus.PASSED, result.reason
        assert result.stdout.strip() == f"CLONE -1 {errno.EPERM} PIDFD -1", result.stdout
        numbers = layers._DENIED[arch]
        result = chosen.run(
            job(SPENDS_HOST_WIDE_COUNTS.format(sysinfo=numbers["sysinfo"], io_setup=numbers["io_setup"]))
        )
        assert result.status is ExecutionStatus.PASSED, result.reason
        assert result.stdout.split("\n")[:2] == [f"SYSINFO -1 {errno.EPERM}", f"IO_SETUP -1 {errno.EPERM}"], (
            result.stdout
        )
    finally:
        if chosen is not executor:
            chosen.close()
