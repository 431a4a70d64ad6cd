"""Round ten: what one job can signal to another running at the same moment, through a file both may read.

Rollouts of one prompt are scored side by side, one per worker. Every job may read the interpreter's tree, and
two kernel objects are keyed by the file rather than by the process: advisory locks (flock, POSIX and OFD
locks on a file opened read-only) and futexes on a page of a file (a shared mapping of os.py, or libc's own
code, mapped privately and never written). One job held a lock on os.py, or waited on such a futex; the other
saw the lock, or woke the waiter, and answered by it: a wrong answer decided by another job, in full isolation
as on Lambda. Taking a lock now succeeds without effect, and only private futexes work.

Here the test process stands in for the other job: it holds or probes the same file while the job runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import mmap
import os
import platform
import struct
import subprocess
import textwrap
import threading
import time

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.runtime import layers
from tests.execution.test_fork_server_lifecycle import _descendants
from tests.infra.test_graviton import _answer, _run_filter
from tests.security.conftest import assert_failed, job
from tests.security.test_round_nine_files import _lambda_like

# One worker runs this module's tests one after another: each holds or probes locks on the same stdlib file.
pytestmark = pytest.mark.xdist_group("round_ten_side_by_side")

_FUTEX = {"x86_64": 202, "aarch64": 98}
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1
_F_OFD_GETLK, _F_OFD_SETLK = 36, 37
_FLOCK = "hhqqi4x"  # struct flock: l_type, l_whence, l_start, l_len, l_pid (x86_64 and aarch64)
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)


@pytest.fixture(scope="module", params=["full", "lambda"])
def side_by_side(request, executor):
    """The executor the jobs run on: full isolation (the suite's), or Lambda-like (one uid, no Landlock, no
    mount namespace)."""
    if request.param == "full":
        yield executor
        return
    lambda_mode = _lambda_like()
    yield lambda_mode
    lambda_mode.close()


def _stdlib_file(executor) -> str:
    """os.py of the fork servers' interpreter: a file every job may read."""
    interpreter = executor.isolation()["interpreter"]
    found = subprocess.run([interpreter, "-I", "-c", "import os; print(os.__file__)"], capture_output=True, text=True)
    return found.stdout.strip()


def _while_running(executor, code: str, probe) -> tuple[object, list]:
    """Run ``code`` as a job and call ``probe()`` over and over until it is done: (result, what probe saw)."""
    outcome = {}
    runner = threading.Thread(target=lambda: outcome.update(result=executor.run(job(code, timeout_s=10))))
    runner.start()
    seen = []
    while runner.is_alive():
        seen.append(probe())
        time.sleep(0.01)
    runner.join()
    return outcome["result"], seen


# --- locks ------------------------------------------------------------------------------------------------

PROBES_A_LOCK = textwrap.dedent("""
    import fcntl, os
    def add(a, b):
        with open(os.__file__, "rb") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return a + b  # another job holds it: the bit it sent says "right"
        return 0
""")


def test_a_lock_another_process_holds_is_not_seen(side_by_side):
    with open(_stdlib_file(side_by_side), "rb") as held:
        fcntl.flock(held, fcntl.LOCK_SH)  # what the other job did
        try:
            assert_failed(side_by_side.run(job(PROBES_A_LOCK)))  # it passed before
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)


HOLDS_EVERY_KIND_OF_LOCK = textwrap.dedent("""
    import fcntl, os, struct, time
    handle = open(os.__file__, "rb")
    fcntl.flock(handle, fcntl.LOCK_SH)
    fcntl.lockf(handle, fcntl.LOCK_SH)  # a POSIX read lock (F_SETLKW)
    ofd = open(os.__file__, "rb")
    fcntl.fcntl(ofd, {ofd_setlk}, struct.pack("{flock}", fcntl.F_RDLCK, 0, 0, 0, 0))
    LOCKED = True  # as far as the model's code can tell, every call succeeded
    def add(a, b):
        time.sleep(1.5)  # held meanwhile, for whoever looks
        return a + b
""").format(ofd_setlk=_F_OFD_SETLK, flock=_FLOCK)


def _locks_seen(path: str, executor) -> set[str]:
    """Which locks on ``path`` this process finds held by someone else: by one of ``executor``'s processes (see
    _held_by)."""
    seen = set()
    with open(path, "rb") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(handle, fcntl.LOCK_UN)
        except OSError:
            seen.add("flock")
        wanted = struct.pack(_FLOCK, fcntl.F_WRLCK, 0, 0, 0, 0)
        if struct.unpack(_FLOCK, fcntl.fcntl(handle, fcntl.F_GETLK, wanted))[0] != fcntl.F_UNLCK:
            seen.add("posix")
        if struct.unpack(_FLOCK, fcntl.fcntl(handle, _F_OFD_GETLK, wanted))[0] != fcntl.F_UNLCK:
            seen.add("ofd")
    if seen:
        seen &= _held_by(executor, path)
    return seen


_LOCK_KINDS = {"FLOCK": "flock", "POSIX": "posix", "OFDLCK": "ofd"}


def _held_by(executor, path: str) -> set[str]:
    """The kinds of lock on ``path`` that a process of ``executor`` (a fork server or anything under it: runner, job)
    holds, from each descriptor's fdinfo. The stdlib file is this machine's: another checkout's run of this module
    (its probe's own LOCK_EX, the lock its test above holds) takes real locks on it at any moment, which the probe
    alone took for the job's (a flake on a machine shared by several runs; xdist_group orders one run only)."""
    target = os.stat(path)
    servers = {w.process.pid for w in executor._workers if hasattr(w, "process")}
    tree = servers.union(*map(_descendants, servers))
    held = set()
    for pid in tree:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    opened = os.stat(f"/proc/{pid}/fd/{fd}")
                    if (opened.st_dev, opened.st_ino) != (target.st_dev, target.st_ino):
                        continue
                    with open(f"/proc/{pid}/fdinfo/{fd}") as info:
                        lines = [line.split() for line in info if line.startswith("lock:")]
                    held |= {_LOCK_KINDS.get(line[2], line[2]) for line in lines if len(line) > 2}
    return held


def test_a_lock_a_job_takes_is_never_seen_by_another_process(side_by_side):
    path = _stdlib_file(side_by_side)
    result, seen = _while_running(side_by_side, HOLDS_EVERY_KIND_OF_LOCK, lambda: _locks_seen(path, side_by_side))
    assert result.status is ExecutionStatus.PASSED, result.reason  # taking the locks raised nothing
    assert len(seen) > 10  # looked all along the job
    assert set().union(*seen) == set()  # flock, POSIX and OFD locks were each seen before


def test_code_that_locks_its_own_files_still_works(executor):
    """sqlite3 locks its database file with fcntl: in the job's own directory it works as before."""
    uses_sqlite = textwrap.dedent("""
        import fcntl, sqlite3
        def add(a, b):
            with open("lockfile", "w") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX)
                fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            db = sqlite3.connect("scratch.db")
            db.execute("create table if not exists t (v integer)")
            db.execute("insert into t values (?)", (a + b,))
            db.commit()
            return db.execute("select v from t order by rowid desc").fetchone()[0]
    """)
    if not executor.isolation()["files"].startswith("confined"):
        pytest.skip("the job's directory is not writable here")
    result = executor.run(job(uses_sqlite))
    assert result.status is ExecutionStatus.PASSED, result.reason


# --- futexes on a page of a file ------------------------------------------------------------------------------

# Two pages every job has: a shared mapping of os.py, and libc's own code (mapped privately, never written).
WAKES_A_WAITER = textwrap.dedent("""
    import ctypes, mmap, os, time
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
    if "{page}" == "shared":
        handle = open(os.__file__, "rb")
        address = libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_SHARED, handle.fileno(), 0)
    else:
        address = (ctypes.cast(libc.getpid, ctypes.c_void_p).value + 64) & ~3
    WOKEN = 0
    for _ in range(300):
        WOKEN += max(0, libc.syscall({futex}, ctypes.c_void_p(address), {wake}, 1000, 0, 0, 0))
        if WOKEN:
            break
        time.sleep(0.01)
    def add(a, b):
        return a + b if WOKEN else 0
""")


@pytest.mark.parametrize("page", ["shared", "libc"])
def test_a_futex_on_a_page_of_a_file_reaches_no_other_process(side_by_side, page):
    arch = platform.machine()
    if arch not in _FUTEX:
        pytest.skip(f"no futex number for {arch}")
    if page == "shared":
        with open(_stdlib_file(side_by_side), "rb") as handle:  # the page the job maps too, by libc as it does
            address = _libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_SHARED, handle.fileno(), 0)
        assert address not in (None, ctypes.c_void_p(-1).value)
    else:  # the same libc file as the jobs' interpreter: Debian's, or any linked with the system's libc
        address = (ctypes.cast(_libc.getpid, ctypes.c_void_p).value + 64) & ~3
    value = struct.unpack("=i", ctypes.string_at(address, 4))[0]
    wakes = []
    stop = threading.Event()

    def wait_for_a_wake():  # what the other job did: wait on the futex, a little at a time
        pause = struct.pack("=qq", 0, 50_000_000)
        while not stop.is_set():
            if _libc.syscall(_FUTEX[arch], ctypes.c_void_p(address), _FUTEX_WAIT, value, pause, 0, 0) == 0:
                wakes.append(time.monotonic())

    waiter = threading.Thread(target=wait_for_a_wake)
    waiter.start()
    try:
        code = WAKES_A_WAITER.format(page=page, futex=_FUTEX[arch], wake=_FUTEX_WAKE)
        assert_failed(side_by_side.run(job(code)))  # it passed before: it woke this process's wait
    finally:
        stop.set()
        waiter.join()
        if page == "shared":
            _libc.munmap(ctypes.c_void_p(address), ctypes.c_size_t(4096))
    assert wakes == []


def test_mappings_threads_and_locks_of_its_own_still_work(side_by_side):
    """Shared and private mappings of a file, private anonymous ones, threads, a condition variable: as before. (A
    shared anonymous mapping, ``mmap.mmap(-1, n)``'s default, is refused since round twenty: see
    tests/security/test_round_twenty_sandbox.py.)"""
    uses_them = textwrap.dedent("""
        import mmap, os, threading
        def add(a, b):
            with open(os.__file__, "rb") as handle:
                shared = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
                copy = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
                assert shared[:64] == copy[:64] == handle.read(64)
            anonymous = mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE)
            anonymous[:1] = b"x"
            ready, out = threading.Condition(), []
            def work():
                with ready:
                    out.append(a + b)
                    ready.notify()
            with ready:
                worker = threading.Thread(target=work)
                worker.start()
                ready.wait_for(lambda: out, timeout=5)
            worker.join()
            return out[0]
    """)
    result = side_by_side.run(job(uses_them))
    assert result.status is ExecutionStatus.PASSED, result.reason


# --- the filter, call by call -----------------------------------------------------------------------------


def _returns_zero(verdict: int) -> bool:
    return verdict == layers._RET_ERRNO  # SECCOMP_RET_ERRNO with errno 0: the call "succeeds" without running


@pytest.mark.parametrize("arch", ["aarch64", "x86_64"])
def test_the_filter_takes_locks_without_effect_and_keeps_futexes_private(arch):
    program = layers.build_seccomp_filter(arch, 4242)
    calls = layers._FILE_CALLS[arch]
    for command in (6, 7, 37, 38):  # F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW
        assert _returns_zero(_run_filter(program, arch, calls["fcntl"], (3, command))), command
    for command in (0, 1, 2, 3, 4, 5, 36, 1030):  # F_DUPFD ... F_GETLK, F_OFD_GETLK, F_DUPFD_CLOEXEC
        assert _answer(_run_filter(program, arch, calls["fcntl"], (3, command))) == "allow", command
    for command in layers._FCNTL_DENIED_COMMANDS.values():
        assert _answer(_run_filter(program, arch, calls["fcntl"], (3, command))) == "EPERM", command
    assert _returns_zero(_run_filter(program, arch, calls["flock"], (3, fcntl.LOCK_EX)))
    for op in (0, 9, 0x109, 6, 8, 11, 13):  # waits and locks that are not private: "the value changed"
        assert _answer(_run_filter(program, arch, calls["futex"], (0, op))) == "EAGAIN", op
    for op in (1, 3, 4, 5, 7, 10, 12):  # wakes and requeues that are not private: no one woken
        assert _returns_zero(_run_filter(program, arch, calls["futex"], (0, op))), op
    for op in (0x80, 0x81, 0x89, 0x189, 0x86):  # private: through
        assert _answer(_run_filter(program, arch, calls["futex"], (0, op))) == "allow", op
    for number in layers._FUTEX2_CALLS.values():
        assert _answer(_run_filter(program, arch, number)) == "ENOSYS", number


def test_the_report_says_so(side_by_side):
    assert "locks taken without effect, only private futexes, no pidfds" in side_by_side.isolation()["seccomp"]
