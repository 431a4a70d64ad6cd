"""Round thirty-seven (second review), the trusted runner's reach: the hidden tests' legitimate shapes.

The runner's new seccomp filter (layers.runner_reach_filter) and its Python-level wrappers
(trusted._keep_the_tests_to_their_job) must refuse only calls aimed outside the job. Tests that start
subprocesses, use multiprocessing, set an alarm, signal themselves or their children, start threads or set their
own limits are ordinary hidden-test shapes: a right answer beside them passes, in full isolation and Lambda mode.
"""

from __future__ import annotations

import ctypes

import pytest

from tests.security.test_round_thirtyseven_d_runner_reach import _passes, own_sysv_key, worker  # noqa: F401

SHAPES = {
    "subprocess": (
        "import subprocess, sys\n"
        "out = subprocess.run([sys.executable, '-c', 'print(6 * 7)'], capture_output=True, text=True, timeout=30)\n"
        "assert out.stdout.strip() == '42', out\n"
    ),
    "subprocess_killed": (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "p.terminate(); assert p.wait(timeout=30) != 0\n"
        "q = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
        "q.kill(); assert q.wait(timeout=30) != 0\n"
    ),
    "multiprocessing": (
        "import multiprocessing as mp\n"
        "ctx = mp.get_context('fork')\n"
        "p = ctx.Process(target=abs, args=(1,)); p.start(); p.join(30); assert p.exitcode == 0, p.exitcode\n"
        "a, b = ctx.Pipe(); a.send(1); assert b.recv() == 1\n"
        "q = ctx.Process(target=__import__('time').sleep, args=(60,)); q.start(); q.terminate(); q.join(30)\n"
        "assert q.exitcode is not None and q.exitcode < 0, q.exitcode\n"
    ),
    "alarm": (
        "import signal\n"
        "fired = []\n"
        "signal.signal(signal.SIGALRM, lambda *a: fired.append(1))\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.01)\n"
        "import time\n"
        "deadline = time.monotonic() + 20\n"
        "while not fired and time.monotonic() < deadline:\n"
        "    time.sleep(0.01)\n"
        "assert fired\n"
        "signal.alarm(30); signal.alarm(0)\n"
    ),
    "own_signals": (
        "import os, signal, threading\n"
        "got = []\n"
        "signal.signal(signal.SIGUSR1, lambda *a: got.append(1))\n"
        "os.kill(os.getpid(), signal.SIGUSR1)\n"
        "signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)\n"
        "os.kill(os.getpid(), 0)\n"
        "os.killpg(os.getpgrp(), 0)\n"
        "assert len(got) == 2, got\n"
        "signal.signal(signal.SIGUSR1, signal.SIG_DFL)\n"
    ),
    "threads": (
        "import threading, concurrent.futures\n"
        "with concurrent.futures.ThreadPoolExecutor(4) as pool:\n"
        "    assert list(pool.map(abs, [-1, -2])) == [1, 2]\n"
        "t = threading.Timer(0.01, lambda: None); t.start(); t.join()\n"
    ),
    "own_limits": (
        "import os, resource\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 256), hard))\n"
        "resource.prlimit(0, resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))\n"
        "resource.prlimit(os.getpid(), resource.RLIMIT_CORE)\n"
        "os.sched_setaffinity(0, os.sched_getaffinity(0))\n"
        "os.nice(0)\n"
    ),
    "child_signals": (
        "import os, signal, subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "os.kill(p.pid, signal.SIGSTOP); os.kill(p.pid, signal.SIGCONT); os.kill(p.pid, signal.SIGKILL)\n"
        "assert p.wait(timeout=30) == -signal.SIGKILL\n"
    ),
    "killpg_of_a_started_session": (
        "import os, signal, subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
        "os.killpg(p.pid, signal.SIGTERM)\n"
        "assert p.wait(timeout=30) == -signal.SIGTERM\n"
        "q = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], process_group=0)\n"
        "os.killpg(os.getpgid(q.pid), signal.SIGKILL)\n"
        "assert q.wait(timeout=30) == -signal.SIGKILL\n"
    ),
    "ctypes_own_calls": (
        "import ctypes, os, signal\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "assert libc.setpriority(0, 0, os.getpriority(os.PRIO_PROCESS, 0)) == 0, ctypes.get_errno()\n"
        "assert libc.kill(os.getpid(), 0) == 0, ctypes.get_errno()\n"
        "assert libc.kill(0, 0) == 0, ctypes.get_errno()\n"
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_legitimate_test_shape_leaves_a_right_answer_passed(worker, shape):  # noqa: F811
    _passes(worker, SHAPES[shape])


# A SysV segment of a fixed key made exclusively: a task's tests that made one (and did not remove it) leave nothing
# that makes the same tests of a later task fail; and the host's own SysV objects are never touched. (The key is the
# test's own: on Lambda's mode the segment is in this host's namespace, shared with the suite's other process.)
SYSV_SEGMENT = (
    "import ctypes\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.shmget.argtypes = (ctypes.c_int, ctypes.c_size_t, ctypes.c_int)\n"
    "assert libc.shmget({key}, 4096, 0o1000 | 0o2000 | 0o600) >= 0, ('key taken', ctypes.get_errno())\n"
)


def _remove_the_segment(key: int) -> None:
    """Where the worker shares this host's IPC namespace (a fork server that is not root), the segment is the host's."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmget.argtypes = (ctypes.c_int, ctypes.c_size_t, ctypes.c_int)
    ident = libc.shmget(key, 0, 0)
    if ident >= 0:
        libc.shmctl(ident, 0, None)  # IPC_RMID


def test_a_sysv_segment_of_the_tests_outlives_no_job(worker, request):  # noqa: F811
    key = own_sysv_key()
    request.addfinalizer(lambda: _remove_the_segment(key))
    # (in Lambda mode, the host's IPC namespace: the fork server made it for the tests and removed it after the job,
    # round thirty-eight)
    _passes(worker, SYSV_SEGMENT.format(key=key))
    _passes(worker, SYSV_SEGMENT.format(key=key))
