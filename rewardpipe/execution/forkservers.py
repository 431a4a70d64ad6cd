"""The scorer's side of the fork servers: their settings, how one is started, spoken to and stopped.

Kept free of pydantic and of the job types so a command can start fork servers the moment it starts
(:func:`prestart`), while the rest of it is still being imported: a fork server takes about 0.1 s to
come up, about as long as the command line's own imports.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import itertools
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from typing import NoReturn

from rewardpipe.execution.runtime.layers import LAYER_NAMES, empty_and_remove_cgroup, remove_tree, wait_for_exit

BOOT_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime", "boot.py")
ENV_DISABLE = "REWARDPIPE_SANDBOX_DISABLE"
ENV_PYTHON = "REWARDPIPE_SANDBOX_PYTHON"
ENV_WORKERS = "REWARDPIPE_SANDBOX_WORKERS"
ENV_MEMORY = "REWARDPIPE_SANDBOX_MEMORY_MB"  # per-job cap, sized by the deployment to what the host has
ENV_PRIVATE_DISK = "REWARDPIPE_SANDBOX_PRIVATE_DISK"  # "1"/"0": see SandboxConfig.private_disk
ENV_PIN_CPUS = "REWARDPIPE_SANDBOX_PIN_CPUS"  # "1"/"0": see SandboxConfig.pin_cpus
MAX_WORKERS = 64  # per executor; each worker owns one sandbox uid


class SandboxConfigError(ValueError):
    """A sandbox setting is invalid; the message names the setting."""


def layer_names(text: str) -> frozenset[str]:
    """Isolation layers named in a comma-separated list (``REWARDPIPE_SANDBOX_DISABLE``, ``--disable``)."""
    return frozenset(part.strip() for part in text.split(",") if part.strip())


def _switch(environ, name: str) -> bool | None:
    """A ``1``/``0`` setting from the environment; None where it is unset."""
    value = environ.get(name, "").strip()
    if value not in ("", "0", "1"):
        raise SandboxConfigError(f"{name} must be 1 or 0, got {value!r}")
    return None if not value else value == "1"


@dataclass(frozen=True)
class SandboxConfig:
    workers: int | None = None  # pool size; None = one per core
    # Memory: the one place the sandbox's memory caps are configured.
    memory_mb: int = 2048  # per untrusted tree (cgroup) and per process (RLIMIT_AS)
    runner_memory_mb: int = 1024  # RLIMIT_AS of the trusted runner, which decodes the model's replies
    disk_mb: int = 64  # bytes a job may store in its working directory (its own tmpfs)
    disk_inodes: int = 4096  # files and directories a job may create there
    pids_max: int = 64  # processes per untrusted tree (cgroup) and per sandbox uid (RLIMIT_NPROC)
    file_size_bytes: int = 8 << 20  # RLIMIT_FSIZE: caps stdout/stderr and any file the code writes
    output_bytes: int = 64 << 10  # how much of stdout/stderr is returned to the caller
    disable: frozenset[str] = field(default_factory=frozenset)  # layer names from LAYER_NAMES
    interpreter: str | None = None  # fork-server interpreter; None = choose automatically
    # Worker i runs model code as uid_base + i. None derives a base from the scorer's pid, so two
    # scorers on one machine never share a sandbox uid (a shared uid would let one scorer's tree kill
    # reach the other's children where cgroups are missing).
    uid_base: int | None = None
    # Run the fork servers themselves as this uid instead of root: no root anywhere, at the price of
    # the uid, netns and cgroup layers. Also how the unprivileged (AWS Lambda) path is tested here.
    server_uid: int | None = None
    grace_s: float = 5.0  # extra wall-clock time before the scorer declares a fork server hung
    runner_recycle_jobs: int = 500  # jobs a trusted runner serves before a fresh one replaces it
    start_timeout_s: float = 60.0
    # Whether the file system holding the job directories belongs to the sandbox alone (AWS Lambda's /tmp,
    # a Fargate task's scratch volume). Where there is no tmpfs per job, only then can the host's growth
    # while a job runs (space in deleted-but-open or mapped files, files outside its directory) be charged
    # to it: on a /tmp other programs write to, their files would be. None: detected (on AWS Lambda and
    # ECS/Fargate, yes; elsewhere, no).
    private_disk: bool | None = None
    # Where the pool has a worker for every CPU this process may use, worker i's fork server, trusted runner
    # and untrusted children all run on CPU i. A job is a chain of hand-offs between those processes (job,
    # calls and replies, verdict); between two CPUs each one is a cross-CPU wake-up, which on a VM costs
    # tens of microseconds (a third of the CPU time of a short job, measured). A smaller pool is never
    # pinned: several of them, in several processes, would all crowd onto the first CPUs.
    pin_cpus: bool = True

    def __post_init__(self):
        unknown = set(self.disable) - set(LAYER_NAMES)
        if unknown:
            raise SandboxConfigError(
                f"unknown isolation layer(s) to disable: {', '.join(sorted(unknown))}; known: {', '.join(LAYER_NAMES)}"
            )
        if self.uid_base is not None and not 1 <= self.uid_base < 2**31 - MAX_WORKERS:
            raise SandboxConfigError(f"uid_base must be a positive uid, got {self.uid_base}")
        if self.workers is not None and not 1 <= self.workers <= MAX_WORKERS:
            raise SandboxConfigError(f"workers must be between 1 and {MAX_WORKERS}, got {self.workers}")
        for name in (
            "memory_mb",
            "runner_memory_mb",
            "disk_mb",
            "disk_inodes",
            "pids_max",
            "file_size_bytes",
            "output_bytes",
            "runner_recycle_jobs",
        ):
            if getattr(self, name) <= 0:
                raise SandboxConfigError(f"{name} must be positive, got {getattr(self, name)}")

    @classmethod
    def from_env(cls, environ=None) -> SandboxConfig:
        environ = os.environ if environ is None else environ
        disable = layer_names(environ.get(ENV_DISABLE, ""))
        workers = environ.get(ENV_WORKERS)
        try:
            worker_count = int(workers) if workers else None
        except ValueError:
            raise SandboxConfigError(f"{ENV_WORKERS} must be an integer, got {workers!r}") from None
        memory = environ.get(ENV_MEMORY)
        try:
            memory_mb = int(memory) if memory else cls.memory_mb
        except ValueError:
            raise SandboxConfigError(f"{ENV_MEMORY} must be an integer (MB), got {memory!r}") from None
        private = _switch(environ, ENV_PRIVATE_DISK)
        pin = _switch(environ, ENV_PIN_CPUS)
        return cls(
            pin_cpus=pin is not False,
            disable=disable,
            interpreter=environ.get(ENV_PYTHON) or None,
            workers=worker_count,
            memory_mb=memory_mb,
            private_disk=private,
        )

    def pool_size(self) -> int:
        """How many fork servers an executor with these settings runs at most (``workers``, or one per core)."""
        return min(self.workers or os.cpu_count() or 2, MAX_WORKERS)

    def cpu_for(self, index: int, workers: int) -> int | None:
        """The CPU worker ``index`` of a pool of ``workers`` runs on (see ``pin_cpus``), None for any CPU."""
        if not self.pin_cpus:
            return None
        try:
            cpus = sorted(os.sched_getaffinity(0))
        except OSError:
            return None
        if workers < len(cpus) or index >= len(cpus):
            return None
        return cpus[index]

    def resolved_private_disk(self, environ=None) -> bool:
        """``private_disk``, with None resolved: the deployments whose disk is the sandbox's own."""
        if self.private_disk is not None:
            return self.private_disk
        environ = os.environ if environ is None else environ
        return bool(environ.get("AWS_LAMBDA_FUNCTION_NAME")) or environ.get("AWS_EXECUTION_ENV", "").startswith(
            ("AWS_Lambda", "AWS_ECS")
        )


def traversable_by_others(path: str) -> bool:
    """True if a uid that is neither the owner nor in the group can walk down to ``path`` (it and every ancestor
    executable by others)."""
    path = os.path.realpath(path)
    try:
        while True:
            if not os.stat(path).st_mode & stat.S_IXOTH:
                return False
            parent = os.path.dirname(path)
            if parent == path:
                return True
            path = parent
    except OSError:
        return False


def _world_readable_tree(path: str) -> bool:
    """True if an unprivileged uid can traverse every ancestor of ``path`` and read ``path``."""
    try:
        readable = bool(os.stat(os.path.realpath(path)).st_mode & stat.S_IROTH)
    except OSError:
        return False
    return readable and traversable_by_others(path)


def choose_interpreter(config: SandboxConfig) -> tuple[str, str]:
    """The fork server's interpreter and why.

    A child that has dropped to an unprivileged uid can only import modules whose files that uid can
    read. The venv's base interpreter here lives under /root (mode 0700), so when we will drop
    privileges we prefer a same-version interpreter with a world-readable stdlib (Debian's
    /usr/bin/python3.X); common modules are pre-imported in the fork server either way.
    """
    if config.interpreter:
        return config.interpreter, "configured"
    stdlib = sysconfig.get_paths()["stdlib"]
    dropping = os.geteuid() == 0 and ("uid" not in config.disable or config.server_uid is not None)
    if not dropping or _world_readable_tree(stdlib):
        return sys.executable, "scorer's interpreter"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for prefix in ("/usr/bin", "/usr/local/bin"):
        candidate = os.path.join(prefix, f"python{version}")
        lib = os.path.join(os.path.dirname(prefix), "lib", f"python{version}")
        if os.access(candidate, os.X_OK) and _world_readable_tree(lib) and _world_readable_tree(candidate):
            return candidate, "world-readable stdlib for the unprivileged uid"
    return sys.executable, "scorer's interpreter; stdlib unreadable by the sandbox uid, pre-imported modules only"


def _protect_scorer_memory() -> None:
    """Without root the model's code runs as our own uid; a non-dumpable scorer keeps its memory
    (the hidden tests), environment (credentials) and descriptors out of reach of same-uid processes
    through /proc and ptrace, even where Landlock is missing (AWS Lambda)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4


_executor_serial = itertools.count()


def _derived_uid_base() -> int:
    """A uid block of MAX_WORKERS uids unique to this executor among live processes on the machine."""
    slot = (os.getpid() % 60_000) * 16 + next(_executor_serial) % 16
    return 1_000_000 + slot * MAX_WORKERS


class _DumpableStarts:
    """Where the scorer is not root (Lambda, Fargate), its fork servers run as its uid, the uid the model's code
    runs as. From its exec until its first statement makes it non-dumpable (boot.py), a process of that uid may
    open a fork server's /proc/<pid>/mem, and the handle keeps working after that: it reads and writes the
    memory every trusted runner and child is then forked from (round five: a job got one on a fork server
    started beside it). So, process-wide, no job runs while such a fork server may be dumpable: a start waits
    for the running jobs, and a job waits until every fork server started is past that point. Root's fork
    servers start as root, out of the jobs' reach: nothing waits for them."""

    def __init__(self):
        self._condition = threading.Condition()
        self._jobs = 0
        self._spawning = 0
        self._started: dict[int, float] = {}  # fork servers that may still be dumpable: pid -> when started

    @contextlib.contextmanager
    def spawn(self):
        """Around the start of a fork server's process; yields a function to record its pid with."""
        if os.geteuid() == 0:
            yield lambda _pid: None
            return
        with self._condition:
            self._spawning += 1
            while self._jobs:
                self._condition.wait()
        try:
            yield self._record
        finally:
            with self._condition:
                self._spawning -= 1
                self._condition.notify_all()

    def _record(self, pid: int) -> None:
        with self._condition:
            self._started[pid] = time.monotonic()

    @contextlib.contextmanager
    def job(self):
        """Around a job in a fork server, from sending it to its reply."""
        if os.geteuid() == 0:
            yield
            return
        with self._condition:
            while self._spawning or self._started:
                # A fork server makes itself non-dumpable first thing; one that has not within the start
                # timeout is stuck or gone, and its pid may since be another process's: no longer waited for.
                cutoff = time.monotonic() - DUMPABLE_WAIT_S
                self._started = {pid: at for pid, at in self._started.items() if at > cutoff and _dumpable_by_us(pid)}
                if self._spawning or self._started:
                    self._condition.wait(0.001)
            self._jobs += 1
        try:
            yield
        finally:
            with self._condition:
                self._jobs -= 1
                self._condition.notify_all()


def _dumpable_by_us(pid: int) -> bool:
    """True while ``pid`` is a dumpable process of our uid (its /proc files, but not /proc/<pid> itself, are
    root's once it is not)."""
    try:
        return os.stat(f"/proc/{pid}/mem").st_uid == os.geteuid()
    except OSError:
        return False


_DUMPABLE_STARTS = _DumpableStarts()
DUMPABLE_WAIT_S = 60.0  # at most this long after its start is a fork server waited for to turn non-dumpable


def _fresh_dumpable_starts() -> None:
    """In a forked copy of the scorer: none of the parent's jobs or starts is its own (inherited counts would
    make its first start or job wait forever), nor is a lock some parent thread held at the fork."""
    global _DUMPABLE_STARTS
    _DUMPABLE_STARTS = _DumpableStarts()


os.register_at_fork(after_in_child=_fresh_dumpable_starts)


class WorkerFailure(Exception):
    """The fork server broke (died, hung or answered nonsense): an infrastructure error."""


class StartRefused(WorkerFailure):
    """The fork server started and reported why it could not go on (as opposed to hanging or dying)."""


class JobNotDelivered(WorkerFailure):
    """The fork server was gone before it received the job, so the job can safely be retried."""


def fork_server_config(index: int, config: SandboxConfig, uid: int, cpu: int | None, worker_dir: str) -> dict:
    """What fork server ``index`` is started with (boot.py's CONFIG_JSON, read by zygote.Zygote): its uid for the
    model's code, its CPU and its limits. Also what benchmarks/fork_per_job_floor.py starts its hardened floor with."""
    return {
        "worker_index": index,
        "cpu": cpu,
        "uid": uid,
        "server_uid": config.server_uid,
        "disable": sorted(config.disable),
        "memory_bytes": config.memory_mb << 20,
        "runner_memory_bytes": config.runner_memory_mb << 20,
        "disk_bytes": config.disk_mb << 20,
        "disk_inodes": config.disk_inodes,
        "pids_max": config.pids_max,
        "max_workers": MAX_WORKERS,
        "file_size_bytes": config.file_size_bytes,
        "runner_recycle_jobs": config.runner_recycle_jobs,
        "private_disk": config.resolved_private_disk(),
        "worker_dir": worker_dir,
    }


def _process_groups_of_session(session: int | None) -> set[int]:
    """The process groups of every process in ``session`` (read from /proc; none where it cannot be read)."""
    groups: set[int] = set()
    if session is None:
        return groups
    try:
        names = os.listdir("/proc")
    except OSError:
        return groups
    for name in names:
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as file:
                    # after the command's closing parenthesis: state, ppid, pgrp, session
                    fields = file.read().rpartition(b")")[2].split()
            except OSError:
                continue
            if len(fields) > 3 and int(fields[3]) == session:
                groups.add(int(fields[2]))
    return groups


class _Worker:
    def __init__(self, index: int, config: SandboxConfig, interpreter: str, uid: int, cpu: int | None = None):
        self.index = index
        self.config = config
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - open for the worker's life, closed in close()
        self._dir = tempfile.mkdtemp(prefix=f"rewardpipe-sbx-{os.getpid()}-w{index}-")
        # Traversable but not listable: the sandbox uid must reach its own job directory by absolute
        # path (tempfile does), and nothing else in here.
        os.chmod(self._dir, 0o711)
        if config.server_uid is not None and os.geteuid() == 0:
            os.chown(self._dir, config.server_uid, config.server_uid)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.channel = ours
        zygote_config = fork_server_config(index, config, uid, cpu, os.path.join(self._dir, "w"))
        try:
            with _DUMPABLE_STARTS.spawn() as record:
                self.process = subprocess.Popen(
                    [interpreter, "-I", "-B", BOOT_SCRIPT, json.dumps(zygote_config), str(theirs.fileno())],
                    pass_fds=[theirs.fileno()],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=self._log,
                    env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},  # no credentials reach the sandbox
                    start_new_session=True,
                )
                record(self.process.pid)
        except OSError as exc:
            ours.close()
            raise WorkerFailure(f"cannot start the fork server with {interpreter}: {exc}") from None
        finally:
            theirs.close()
        self.isolation: dict[str, str] = {}
        self.cgroups: list[str] = []

    def ready(self) -> _Worker:
        """Wait for the fork server's hello (it starts in about 0.1 s); raises if it could not start."""
        hello = self._receive(self.config.start_timeout_s, "start")
        if "fatal" in hello:
            self.kill()
            raise StartRefused(str(hello["fatal"]))
        self.isolation = {str(k): str(v) for k, v in hello.get("isolation", {}).items()}
        self.cgroups = list(hello.get("cgroups", []))
        return self

    def alive(self) -> bool:
        return self.process.poll() is None

    def _receive(self, timeout: float, what: str) -> dict:
        self.channel.settimeout(timeout)
        try:
            message = self.channel.recv(1 << 20)
        except TimeoutError:
            self._fail(f"fork server did not answer ({what}) within {timeout:.1f} s")
        except OSError as exc:
            self._fail(f"fork server channel failed ({what}): {exc}")
        if not message:
            self._fail(f"fork server exited ({what}{self._exit_status()})")
        try:
            reply = json.loads(message)
        except ValueError:
            reply = None
        if type(reply) is not dict:
            self._fail("fork server sent a malformed reply", with_log=False)
        return reply

    def _fail(self, why: str, with_log: bool = True) -> NoReturn:
        """Kill the fork server and raise, with what it last wrote to its log (read before the kill closes it)."""
        tail = self._log_tail() if with_log else ""
        self.kill()
        raise WorkerFailure(f"{why}{tail}") from None

    def _exit_status(self) -> str:
        try:
            code = _wait_for_exit(self.process, 1)
        except subprocess.TimeoutExpired:
            return ""
        if code < 0:
            with contextlib.suppress(ValueError):
                return f", killed by {signal.Signals(-code).name}"
        return f", status {code}"

    def _log_tail(self) -> str:
        try:
            self._log.seek(0)
            text = self._log.read()[-1500:].decode("utf-8", errors="replace").strip()
        except (OSError, ValueError):  # ValueError: already closed
            return ""
        return f": {text}" if text else ""

    def execute(
        self, header: dict, code: str, tests: str | bytes, output_cap: int | None = None
    ) -> tuple[dict, bytes, bytes, int, bytes, int]:
        """Run one job. For ``stdio`` ``tests`` is one case's input, which the model's program reads as its stdin
        (sealed: it cannot be written); ``output_cap``: how much of stdout and stderr to return (default
        ``config.output_bytes``)."""
        fds: list[int] = []
        stdio = header.get("tests_format") == "stdio"
        try:
            for name in ("code", "tests", "verdict", "stdout", "stderr"):
                flags = os.MFD_CLOEXEC | (os.MFD_ALLOW_SEALING if stdio and name == "tests" else 0)
                fds.append(os.memfd_create(f"rewardpipe-{name}", flags))
            _write_all(fds[0], code.encode("utf-8", errors="surrogatepass"))
            _write_all(fds[1], tests if isinstance(tests, bytes) else tests.encode("utf-8", errors="surrogatepass"))
            if stdio:
                seals = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL
                fcntl.fcntl(fds[1], fcntl.F_ADD_SEALS, seals)
            with _DUMPABLE_STARTS.job():
                sent = time.monotonic()
                try:
                    socket.send_fds(self.channel, [json.dumps(header).encode()], fds)
                except OSError as exc:
                    self.kill()
                    raise JobNotDelivered(f"cannot send the job to the fork server: {exc}") from None
                reply = self._receive(float(header["timeout_s"]) + self.config.grace_s, "job")
            if isinstance(reply.get("marks"), dict):
                reply["marks"].update(s_send=sent, s_recv=time.monotonic())
            verdict = os.pread(fds[2], 1 << 20, 0)
            cap = output_cap or self.config.output_bytes
            out_size, err_size = os.fstat(fds[3]).st_size, os.fstat(fds[4]).st_size
            return reply, verdict, os.pread(fds[3], cap, 0), out_size, os.pread(fds[4], cap, 0), err_size
        finally:
            for fd in fds:
                os.close(fd)

    def kill(self) -> None:
        """Stop the fork server, its trusted children and every process left in its cgroups."""
        with contextlib.suppress(OSError, AttributeError):
            os.killpg(self.process.pid, 9)
        # The trusted runner leads a process group of its own in the fork server's session (round thirty-seven), with
        # what its tests started: the runner dies with its parent, a process its tests started would live on.
        for group in _process_groups_of_session(getattr(getattr(self, "process", None), "pid", None)):
            with contextlib.suppress(OSError):
                os.killpg(group, 9)
        with contextlib.suppress(subprocess.TimeoutExpired, AttributeError):
            _wait_for_exit(self.process, 5)
        self._cleanup()

    def close(self) -> None:
        try:
            self.channel.close()  # EOF makes the fork server clean up and exit
            _wait_for_exit(self.process, 5)
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    def _cleanup(self) -> None:
        for path in getattr(self, "cgroups", []):
            empty_and_remove_cgroup(path)  # children of a killed fork server may linger there
        remove_tree(self._dir)  # the model may have left a tree too deep for shutil.rmtree
        try:
            self.channel.close()
            self._log.close()
        except OSError:
            pass


def _wait_for_exit(process: subprocess.Popen, timeout: float) -> int:
    """``process.wait(timeout)``, told of the exit by a pidfd: ``Popen.wait`` with a timeout polls with sleeps
    that double up to 50 ms, so a fork server that took 20 ms to clean up and exit was heard of after 32 ms (on
    every command's way out). Raises ``subprocess.TimeoutExpired`` as ``Popen.wait`` does."""
    if process.returncode is not None:  # reaped already: its pid may be another process's now
        return process.returncode
    if wait_for_exit(process.pid, time.monotonic() + timeout) is None:  # no pidfd here
        return process.wait(timeout=timeout)
    return process.wait(timeout=0)


_runtime_compiled = False


def _compile_runtime() -> None:
    """Write bytecode for the fork server's modules once: it runs with -B (so a sandbox uid never
    writes into the tree) and would otherwise compile them at every start."""
    global _runtime_compiled
    if _runtime_compiled:
        return
    _runtime_compiled = True
    try:
        import compileall

        compileall.compile_dir(os.path.dirname(BOOT_SCRIPT), quiet=2, workers=1)
    except Exception:  # noqa: BLE001 - a read-only tree simply starts a little slower
        pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def overrides_for(workers: int | None = None, disable: str = "") -> dict:
    """The settings a command line changes on top of the environment's: ``--workers`` and a comma-separated
    ``--disable``. One function, so that fork servers started ahead (:func:`prestart`) match the executor
    the command makes."""
    overrides: dict = {"workers": workers} if workers else {}
    layers = layer_names(disable)
    if layers:
        overrides["disable"] = layers
    return overrides


@dataclass
class Prestarted:
    """Fork servers started before the executor that will use them exists, and what they were started with."""

    config: SandboxConfig
    interpreter: tuple[str, str]
    uid_base: int
    workers: dict[int, _Worker]  # by worker index (its uid is uid_base + index)
    owner_pid: int  # a forked copy of this process must neither use nor stop them

    def close(self) -> None:
        workers, self.workers = list(self.workers.values()), {}
        close_all(workers)


def close_all(workers: list[_Worker]) -> None:
    """Stop fork servers side by side: each tears down its children, cgroups and directories on its own."""
    closers = [threading.Thread(target=worker.close) for worker in workers]
    for closer in closers:
        closer.start()
    for closer in closers:
        closer.join()


_prestarted: Prestarted | None = None
_prestarted_lock = threading.Lock()


def prestart(count: int | None, **overrides) -> None:
    """Start ``count`` fork servers (None: as many as the executor runs) now, for the executor that
    ``make_executor(**overrides)`` makes later: they come up while the caller goes on (a command line
    importing the rest of itself), and that executor takes them over (:func:`claim`). An executor with
    other settings never gets them, and whatever is not taken is stopped at exit. Never raises: where the
    settings are invalid or a fork server cannot be started, the executor starts (and reports) it itself."""
    global _prestarted
    try:
        config = replace(SandboxConfig.from_env(), **overrides)
    except SandboxConfigError:
        return
    atexit.register(_close_unclaimed)  # first: whatever starts below is stopped at exit if nobody takes it
    try:
        if os.geteuid() != 0:
            _protect_scorer_memory()
        interpreter = choose_interpreter(config)
        _compile_runtime()
        started = Prestarted(config, interpreter, config.uid_base or _derived_uid_base(), {}, os.getpid())
    except Exception:  # noqa: BLE001 - only ever a head start; the executor meets the same problem and says so
        return
    with _prestarted_lock:
        replaced, _prestarted = _prestarted, started
    if replaced is not None:
        replaced.close()
    for index in range(min(count or config.pool_size(), MAX_WORKERS)):
        try:
            cpu = config.cpu_for(index, config.pool_size())  # as the executor that takes them over decides
            worker = _Worker(index, config, started.interpreter[0], started.uid_base + index, cpu)
        except Exception:  # noqa: BLE001 - e.g. no space for its directory: the executor starts it itself
            break
        with _prestarted_lock:
            if _prestarted is started:
                started.workers[index] = worker
                continue
        worker.close()  # taken or replaced meanwhile, from another thread: stopped, never leaked
        break


def claim(config: SandboxConfig) -> Prestarted | None:
    """The fork servers :func:`prestart` started in this process, if they were started with ``config``; taken
    at most once. Prestarted ones with other settings are stopped: nothing else will use them."""
    global _prestarted
    with _prestarted_lock:
        if _prestarted is None or _prestarted.owner_pid != os.getpid():
            return None  # none, or a forked copy's view of its parent's: those are the parent's to use
        taken, _prestarted = _prestarted, None
    if taken.config != config:
        taken.close()
        return None
    return taken


def _close_unclaimed() -> None:
    global _prestarted
    with _prestarted_lock:
        if _prestarted is None or _prestarted.owner_pid != os.getpid():
            return
        unclaimed, _prestarted = _prestarted, None
    unclaimed.close()
