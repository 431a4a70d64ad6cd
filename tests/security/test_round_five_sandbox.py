"""Fifth attack round on the sandbox (issue 19, items 1, 2, 4 and 9 probed again): new payloads around
one job, on full isolation and on the Lambda/Fargate configuration (fork servers unprivileged, one uid
for every sandbox process, no namespaces, no cgroup, no Landlock).

Every payload carries a wrong ``add``: its verdict must be ``failed`` (or ``timeout``), never ``passed``
and never an infrastructure ``error``, the scorer must survive it, and the next honest job must pass.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import time

import pytest

from rewardpipe.execution import ExecutionStatus
from tests.security.conftest import REPO, WRONG_ADD, assert_scorer_survives, job
from tests.security.test_round_four import degraded, x86_64_only  # noqa: F401 - the Lambda-mode fixture

# --- memory that no address-space limit counts, where there is no cgroup (Lambda, Fargate) ------------

# Unmapped memfd pages count neither against RLIMIT_AS nor in the process's RSS, so the out-of-memory
# killer's choice (RSS first) is some other process. Without a memory cgroup of the worker's (Lambda), 8 MiB
# (RLIMIT_FSIZE) in each of up to 256 memfds (RLIMIT_NOFILE) per job took the scorer down with it: the
# kernel killed the scorer, then the fork server, and the batch was lost.
UNCOUNTED_MEMORY = WRONG_ADD + textwrap.dedent("""
    import os
    try:
        with open("/proc/self/oom_score_adj") as handle:
            print("OOM_SCORE_ADJ", handle.read().strip())
    except OSError:  # no /proc (Landlock, chroot)
        print("OOM_SCORE_ADJ unreadable")
    held = []
    try:
        for _ in range(400):
            fd = os.memfd_create("hoard")
            os.write(fd, b"\\1" * (8 << 20))
            held.append(fd)
    except OSError:
        pass
    print("MEMFDS", len(held))
    hoard = []
    while True:  # what is left to a job: memory its RSS shows, which makes it the OOM killer's choice anyway
        hoard.append(bytearray(b"\\1" * (16 << 20)))
""")


@pytest.mark.parametrize("mode", ["full", "degraded"])
def test_no_memory_is_held_where_no_limit_counts_it(executor, degraded, mode):  # noqa: F811
    target = executor if mode == "full" else degraded
    result = target.run(job(UNCOUNTED_MEMORY, timeout_s=10))
    # Killed at its memory limit (failed), or, on a machine loaded enough that filling 2 GiB outlasts the
    # deadline, stopped there (timeout): the model's 0 either way, never an error, nothing passed.
    assert result.status in (ExecutionStatus.FAILED, ExecutionStatus.TIMEOUT), (result.status, result.reason)
    assert result.passed == 0
    assert "MEMFDS 0" in result.stdout, result.stdout
    # Where /proc is visible (no Landlock), the model's process is the OOM killer's first choice.
    assert "OOM_SCORE_ADJ 1000" in result.stdout or "OOM_SCORE_ADJ unreadable" in result.stdout, result.stdout
    assert_scorer_survives(target)


# The same attack where the memory really runs out: the scorer, its Lambda-mode fork server and the job in one
# memory cgroup of 768 MiB (a Lambda function's whole memory). The scorer runs in a subprocess so that the
# test sees it die instead of dying with it.
OOM_SCORER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {repo!r})
    from rewardpipe.execution.sandbox import make_executor
    from tests.security.conftest import RIGHT_ADD, job
    executor = make_executor(workers=1, server_uid=65533, disable=frozenset({{"landlock"}}))
    print("HONEST", executor.run(job(RIGHT_ADD)).status.value, flush=True)
    attack = executor.run(job({attack!r}, timeout_s=20))
    print("ATTACK", attack.status.value, attack.passed, attack.reason[:200], flush=True)
    print("AFTER", executor.run(job(RIGHT_ADD)).status.value, flush=True)
    executor.close()
""")


def _memory_cgroup(limit: int) -> str | None:
    """A fresh memory cgroup (v1 or v2) limited to ``limit`` bytes, or None where this process cannot make one."""
    for root, key in (("/sys/fs/cgroup/memory", "memory.limit_in_bytes"), ("/sys/fs/cgroup", "memory.max")):
        if not os.path.exists(os.path.join(root, key if root.endswith("memory") else "cgroup.controllers")):
            continue
        path = os.path.join(root, f"rewardpipe-test-oom-{os.getpid()}")
        try:
            os.mkdir(path)
            with open(os.path.join(path, key), "w") as handle:
                handle.write(str(limit))
            return path
        except OSError:
            if os.path.isdir(path):
                os.rmdir(path)
    return None


def _remove_cgroup(path: str) -> None:
    for _ in range(100):
        with open(os.path.join(path, "cgroup.procs")) as handle:
            pids = [int(line) for line in handle if line.strip()]
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
        time.sleep(0.05)
    os.rmdir(path)


@x86_64_only
def test_a_job_that_exhausts_memory_without_a_cgroup_is_the_one_killed():
    if os.geteuid() != 0:
        pytest.skip("needs root to start the fork servers as another uid and to make a memory cgroup")
    cgroup = _memory_cgroup(768 << 20)
    if cgroup is None:
        pytest.skip("no memory cgroup can be made here")
    try:
        script = OOM_SCORER.format(repo=REPO, attack=UNCOUNTED_MEMORY)
        enter = f'echo $$ > {cgroup}/cgroup.procs && exec {sys.executable} -c "$0"'
        done = subprocess.run(["sh", "-c", enter, script], capture_output=True, text=True, timeout=120)
    finally:
        _remove_cgroup(cgroup)
    # Before: the scorer was killed (-9) with the fork server, before it could print the attack's verdict.
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert "HONEST passed" in done.stdout, done.stdout
    assert "ATTACK failed 0" in done.stdout, done.stdout
    assert "AFTER passed" in done.stdout, done.stdout


# --- a fork server starting beside a job, where the scorer is not root (the real Lambda configuration) ---

# A scorer that is not root runs its fork servers, and so the model's code, as its own uid. A fork server is
# dumpable from its exec until it makes itself non-dumpable; a job running meanwhile (the second worker
# started lazily, or a replacement) got a read-write handle on its /proc/<pid>/mem that kept working after
# that: the memory every trusted runner and child of that worker is forked from.
HANDLE_ON_A_STARTING_FORK_SERVER = WRONG_ADD + textwrap.dedent("""
    import os, time
    me = os.getpid()
    got = []
    end = time.time() + 3
    while time.time() < end and not got:
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == me:
                continue
            try:
                with open(f"/proc/{name}/cmdline", "rb") as handle:
                    if b"boot.py" not in handle.read():
                        continue
                got.append(os.open(f"/proc/{name}/mem", os.O_RDWR))
            except OSError:
                continue
    print("HANDLES", len(got))
""")
NON_ROOT_SCORER = textwrap.dedent("""
    import threading, time
    from rewardpipe.execution.sandbox import make_executor
    from tests.security.conftest import RIGHT_ADD, job
    executor = make_executor(workers=2, disable=frozenset({{"landlock"}}))
    print("UID", executor.isolation()["uid"], flush=True)

    def start_the_second_worker():
        time.sleep(0.5)
        executor.warm_up()

    threading.Thread(target=start_the_second_worker).start()
    attack = executor.run(job({attack!r}, timeout_s=8))
    print("ATTACK", attack.status.value, attack.passed, attack.stdout.strip(), flush=True)
    results = list(executor.run_batch([job(RIGHT_ADD) for _ in range(4)]))
    print("AFTER", sorted({{result.status.value for result in results}}), flush=True)
    executor.close()
""")


def _unprivileged_python() -> str | None:
    """An interpreter of the scorer's version that uid 65534 can run, with this venv's packages importable."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def test_no_job_gets_a_handle_on_a_fork_server_starting_beside_it():
    python = _unprivileged_python()
    if os.geteuid() != 0 or python is None:
        pytest.skip("needs root (to run the scorer as another uid) and a system interpreter of this version")
    import site

    paths = [REPO, *site.getsitepackages()]
    script = NON_ROOT_SCORER.format(attack=HANDLE_ON_A_STARTING_FORK_SERVER)
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "REWARDPIPE_SANDBOX_PYTHON": python, "PYTHONPATH": ":".join(paths)}
    probe = subprocess.run([python, "-c", "import pydantic"], user=65534, group=65534, extra_groups=[], env=env)
    if probe.returncode != 0:
        pytest.skip("this venv's packages do not import in the system interpreter")
    done = subprocess.run(
        [python, "-c", script],
        user=65534,
        group=65534,
        extra_groups=[],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/tmp",
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    assert "UID off" in done.stdout, done.stdout  # the model's code runs as the scorer's uid
    assert "ATTACK failed 0 HANDLES 0" in done.stdout, done.stdout
    assert "AFTER ['passed']" in done.stdout, done.stdout


# --- file attribute flags -----------------------------------------------------------------------------

# chattr +D (or +S) on its own directories makes every later change there synchronous: the clean-up of the job's
# tree, which its verdict waits for, then pays a disk sync per entry, and on a disk slow to sync it outlasts the
# scorer's grace (an infrastructure error for a wrong answer). Every way to set those flags is refused.
SETS_FILE_FLAGS = WRONG_ADD + textwrap.dedent("""
    import array, fcntl, os
    os.mkdir("d")
    fd = os.open("d", os.O_RDONLY | os.O_DIRECTORY)
    for name, request, value in (
        ("SETFLAGS", 0x40086602, array.array("l", [0x00010000])),  # FS_DIRSYNC_FL
        ("SETFLAGS32", 0x40046602, array.array("i", [0x00010000])),
        ("FSSETXATTR", 0x401C5820, array.array("I", [0x20, 0, 0, 0, 0, 0, 0])),  # FS_XFLAG_SYNC
    ):
        try:
            fcntl.ioctl(fd, request, value)
            print(name, "SET")
        except OSError as exc:
            print(name, "REFUSED", exc.errno)
""")


# PR_SCHED_CORE shares a core-scheduling cookie with a pid the caller names: refused by the filter (EPERM), where
# a kernel without core scheduling would only say EINVAL.
SHARES_A_SCHEDULING_COOKIE = WRONG_ADD + textwrap.dedent("""
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    for command in (0, 1, 2, 3):  # PR_SCHED_CORE_GET, _CREATE, _SHARE_TO, _SHARE_FROM
        result = libc.prctl(62, command, os.getppid(), 0, 0)
        print("SCHED_CORE", command, result, ctypes.get_errno())
""")


# The newer calls that do what older refused ones do, by path: file_setattr (Linux 6.17, the fsxattr flags
# FS_IOC_FSSETXATTR sets) and setxattrat/removexattrat (6.13, the xattr calls). Refused by the filter (EPERM) on
# every kernel; a kernel without them would say ENOSYS.
NEWER_CALLS = WRONG_ADD + textwrap.dedent("""
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    os.mkdir("d")
    attr = (ctypes.c_uint32 * 6)(0x20, 0, 0, 0, 0, 0)  # FS_XFLAG_SYNC
    for name, number, args in (
        ("file_setattr", 469, (-100, b"d", ctypes.byref(attr), 24, 0)),
        ("setxattrat", 463, (-100, b"d", 0, b"user.x", None, 0)),
        ("removexattrat", 466, (-100, b"d", 0, b"user.x")),
    ):
        result = libc.syscall(number, *args)
        print(name, result, ctypes.get_errno())
""")
REFUSED_BY_THE_FILTER = {
    "newer calls": (NEWER_CALLS, [f"{name} -1 1\n" for name in ("file_setattr", "setxattrat", "removexattrat")]),
    "file attribute flags": (
        SETS_FILE_FLAGS,
        [f"{name} REFUSED 1\n" for name in ("SETFLAGS", "SETFLAGS32", "FSSETXATTR")],
    ),
    "core scheduling cookies": (SHARES_A_SCHEDULING_COOKIE, [f"SCHED_CORE {command} -1 1\n" for command in range(4)]),
}


@x86_64_only
@pytest.mark.parametrize("mode", ["full", "degraded"])
@pytest.mark.parametrize("what", sorted(REFUSED_BY_THE_FILTER))
def test_a_job_is_refused_by_the_filter(executor, degraded, mode, what):  # noqa: F811
    """EPERM (1) from seccomp, where the kernel alone would answer otherwise (EOPNOTSUPP on tmpfs, EINVAL
    without core scheduling) or let it through (chattr +D on the host's file system)."""
    payload, lines = REFUSED_BY_THE_FILTER[what]
    target = executor if mode == "full" else degraded
    result = target.run(job(payload))
    assert result.status is ExecutionStatus.FAILED and result.passed == 0, (result.status, result.reason)
    for line in lines:
        assert line in result.stdout, result.stdout
    assert_scorer_survives(target)
