"""The fork-server sandbox behind ``rewardpipe.execution``.

The scorer (this process) keeps a pool of fork servers, one per worker, each started once with the
test runner and common modules already imported (``runtime/zygote.py``). Per execution the scorer
puts the model's code, the hidden tests and two result buffers into memfds and hands them over a
socket; the fork server forks an untrusted child for the code and a trusted child for the tests, and
answers with exit states. The verdict is read from the memfd only the trusted child wrote.

The scorer never forks (no ``preexec_fn``), so its own size and threads do not matter, and the
executor can live for hours in a runner, a Lambda warm container or a Fargate task: workers start
lazily, a dead one is replaced, and ``close()`` stops them all.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
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
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import NoReturn

from rewardpipe.execution.result import ExecutionJob, ExecutionResult, ExecutionStatus
from rewardpipe.execution.runtime import harness
from rewardpipe.execution.runtime.layers import LAYER_NAMES, empty_and_remove_cgroup, remove_tree
from rewardpipe.execution.screening import screen

BOOT_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime", "boot.py")
ENV_DISABLE = "REWARDPIPE_SANDBOX_DISABLE"
ENV_PYTHON = "REWARDPIPE_SANDBOX_PYTHON"
ENV_WORKERS = "REWARDPIPE_SANDBOX_WORKERS"
ENV_MEMORY = "REWARDPIPE_SANDBOX_MEMORY_MB"  # per-job cap, sized by the deployment to what the host has
ENV_PRIVATE_DISK = "REWARDPIPE_SANDBOX_PRIVATE_DISK"  # "1"/"0": see SandboxConfig.private_disk
MAX_WORKERS = 64  # per executor; each worker owns one sandbox uid
TRUSTED_RUNNER_DIED = "the trusted runner died"  # the fork server's word for it (runtime/zygote.py)
INPROCESS_TRUST = (
    "inprocess: the tests ran beside the model's code behind a deny-list screen that can be "
    "bypassed; not for untrusted code, not a reward source"
)


class SandboxConfigError(ValueError):
    """A sandbox setting is invalid; the message names the setting."""


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
        disable = frozenset(part.strip() for part in environ.get(ENV_DISABLE, "").split(",") if part.strip())
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
        private = environ.get(ENV_PRIVATE_DISK, "").strip()
        if private not in ("", "0", "1"):
            raise SandboxConfigError(f"{ENV_PRIVATE_DISK} must be 1 or 0, got {private!r}")
        return cls(
            disable=disable,
            interpreter=environ.get(ENV_PYTHON) or None,
            workers=worker_count,
            memory_mb=memory_mb,
            private_disk=None if not private else private == "1",
        )

    def resolved_private_disk(self, environ=None) -> bool:
        """``private_disk``, with None resolved: the deployments whose disk is the sandbox's own."""
        if self.private_disk is not None:
            return self.private_disk
        environ = os.environ if environ is None else environ
        return bool(environ.get("AWS_LAMBDA_FUNCTION_NAME")) or environ.get("AWS_EXECUTION_ENV", "").startswith(
            ("AWS_Lambda", "AWS_ECS")
        )


def _world_readable_tree(path: str) -> bool:
    """True if an unprivileged uid can traverse every ancestor of ``path`` and read ``path``."""
    path = os.path.realpath(path)
    try:
        if not os.stat(path).st_mode & stat.S_IROTH:
            return False
        while True:
            if not os.stat(path).st_mode & stat.S_IXOTH:
                return False
            parent = os.path.dirname(path)
            if parent == path:
                return True
            path = parent
    except OSError:
        return False


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


class WorkerFailure(Exception):
    """The fork server broke (died, hung or answered nonsense): an infrastructure error."""


class StartRefused(WorkerFailure):
    """The fork server started and reported why it could not go on (as opposed to hanging or dying)."""


class JobNotDelivered(WorkerFailure):
    """The fork server was gone before it received the job, so the job can safely be retried."""


class _Worker:
    def __init__(self, index: int, config: SandboxConfig, interpreter: str, uid: int):
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
        zygote_config = {
            "worker_index": index,
            "uid": uid,
            "server_uid": config.server_uid,
            "disable": sorted(config.disable),
            "memory_bytes": config.memory_mb << 20,
            "runner_memory_bytes": config.runner_memory_mb << 20,
            "disk_bytes": config.disk_mb << 20,
            "disk_inodes": config.disk_inodes,
            "pids_max": config.pids_max,
            "file_size_bytes": config.file_size_bytes,
            "runner_recycle_jobs": config.runner_recycle_jobs,
            "private_disk": config.resolved_private_disk(),
            "worker_dir": os.path.join(self._dir, "w"),
        }
        try:
            self.process = subprocess.Popen(
                [interpreter, "-I", "-B", BOOT_SCRIPT, json.dumps(zygote_config), str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._log,
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},  # no credentials reach the sandbox
                start_new_session=True,
            )
        except OSError as exc:
            ours.close()
            raise WorkerFailure(f"cannot start the fork server with {interpreter}: {exc}") from None
        finally:
            theirs.close()
        hello = self._receive(config.start_timeout_s, "start")
        if "fatal" in hello:
            self.kill()
            raise StartRefused(str(hello["fatal"]))
        self.isolation: dict[str, str] = {str(k): str(v) for k, v in hello.get("isolation", {}).items()}
        self.cgroups: list[str] = list(hello.get("cgroups", []))

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
            code = self.process.wait(timeout=1)
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

    def execute(self, header: dict, code: str, tests: str) -> tuple[dict, bytes, bytes, int, bytes, int]:
        fds: list[int] = []
        try:
            for name in ("code", "tests", "verdict", "stdout", "stderr"):
                fds.append(os.memfd_create(f"rewardpipe-{name}", os.MFD_CLOEXEC))
            _write_all(fds[0], code.encode("utf-8", errors="surrogatepass"))
            _write_all(fds[1], tests.encode("utf-8", errors="surrogatepass"))
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
            cap = self.config.output_bytes
            out_size, err_size = os.fstat(fds[3]).st_size, os.fstat(fds[4]).st_size
            return reply, verdict, os.pread(fds[3], cap, 0), out_size, os.pread(fds[4], cap, 0), err_size
        finally:
            for fd in fds:
                os.close(fd)

    def kill(self) -> None:
        """Stop the fork server, its trusted children and every process left in its cgroups."""
        with contextlib.suppress(OSError, AttributeError):
            os.killpg(self.process.pid, 9)
        with contextlib.suppress(subprocess.TimeoutExpired, AttributeError):
            self.process.wait(timeout=5)
        self._cleanup()

    def close(self) -> None:
        try:
            self.channel.close()  # EOF makes the fork server clean up and exit
            self.process.wait(timeout=5)
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


@functools.lru_cache(maxsize=256)
def _expected_test_count(tests: str, tests_format: str) -> int:
    """The K rollouts of a group share their hidden tests: parse them once, not once per rollout."""
    return harness.count_expected_tests(tests, tests_format)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _decode_output(data: bytes, size: int) -> str:
    text = data.decode("utf-8", errors="replace")
    if size > len(data):
        text += f"\n[... {size - len(data)} more bytes not returned]"
    return text


class _SharedDiskJobs:
    """The jobs of this process whose fork servers share one host file system with no tmpfs per job (no
    mount namespace: AWS Lambda, Fargate). The host's growth while a job runs is charged to it; that is
    exact only while no other such job runs, so this records which jobs overlapped another, and gives a
    job a turn alone (no other such job runs, none starts) when its disk use has to be told apart from
    its neighbours'. Process-wide: every executor of the process may share the file system."""

    def __init__(self):
        self._condition = threading.Condition()
        self._running: dict[int, bool] = {}  # job -> another job overlapped it
        self._tokens = itertools.count()
        self._alone_waiting = 0
        self._alone_running = False

    def started(self, alone: bool = False) -> int:
        """Register a job about to be handed to a fork server (a turn alone holds the others back)."""
        with self._condition:
            while not alone and (self._alone_running or self._alone_waiting):
                self._condition.wait()
            token = next(self._tokens)
            for other in self._running:
                self._running[other] = True
            self._running[token] = bool(self._running)
            return token

    def finished(self, token: int) -> bool:
        """True if another job ran at any moment of this one's run."""
        with self._condition:
            overlapped = self._running.pop(token)
            self._condition.notify_all()
            return overlapped

    @contextlib.contextmanager
    def alone(self):
        """Wait until no other job runs, and keep new ones back meanwhile."""
        with self._condition:
            self._alone_waiting += 1
            try:
                while self._running or self._alone_running:
                    self._condition.wait()
            finally:
                self._alone_waiting -= 1
            self._alone_running = True
        try:
            yield
        finally:
            with self._condition:
                self._alone_running = False
                self._condition.notify_all()


_SHARED_DISK_JOBS = _SharedDiskJobs()


class _RunAlone(Exception):
    """The job's verdict cannot be trusted from a run beside other jobs (its disk use could not be told
    apart from theirs): it is run again, alone."""


class ForkServerExecutor:
    """Runs jobs on a lazily started pool of fork servers. Thread-safe; ``close()`` when done."""

    def __init__(self, config: SandboxConfig | None = None):
        self.config = config or SandboxConfig.from_env()
        self._condition = threading.Condition()
        self._idle: list[_Worker] = []
        self._workers: list[_Worker | _Placeholder] = []
        self._limit = min(self.config.workers or os.cpu_count() or 2, MAX_WORKERS)
        self.uid_base = self.config.uid_base or _derived_uid_base()
        if os.geteuid() != 0:
            _protect_scorer_memory()
        self._interpreter: tuple[str, str] | None = None
        self._owner_pid = os.getpid()
        self._closed = False
        self._isolation: dict[str, str] = {}
        self._starters: list[threading.Thread] = []  # warm_up() threads
        # Set to a list to record, per job, when each step happened in the scorer, fork server and runner
        # (time.monotonic(); benchmarks/execution.py prints the breakdown). None: nothing is recorded.
        self.phase_log: list[dict] | None = None

    # -- pool -----------------------------------------------------------------------------------------

    def _reset_after_fork(self) -> None:
        """A forked copy of the scorer must not share fork servers with its parent."""
        if os.getpid() != self._owner_pid:
            self._owner_pid = os.getpid()
            self._idle, self._workers = [], []
            self._condition = threading.Condition()

    def _acquire(self) -> _Worker:
        with self._condition:
            while True:
                if self._closed:
                    raise WorkerFailure("the executor is closed")
                while self._idle:
                    # The longest idle: it has most likely finished the clean-up and pre-fork that follow
                    # each reply, which the one just released may still be doing.
                    worker = self._idle.pop(0)
                    if worker.alive():
                        return worker
                    self._workers.remove(worker)
                    worker.kill()
                if len(self._workers) < self._limit:
                    used = {w.index for w in self._workers}
                    index = next(i for i in range(len(self._workers) + 1) if i not in used)
                    placeholder = _Placeholder(index)
                    self._workers.append(placeholder)
                    break
                self._condition.wait()
        try:
            if self._interpreter is None:
                self._interpreter = choose_interpreter(self.config)
                _compile_runtime()
            worker = self._start_worker(index)
        except BaseException:
            with self._condition:
                self._workers.remove(placeholder)
                self._condition.notify()
            raise
        with self._condition:
            if self._closed or placeholder not in self._workers:  # closed while this one was starting
                abandoned = True
            else:
                abandoned = False
                self._workers[self._workers.index(placeholder)] = worker
                self._isolation = {**worker.isolation, "interpreter_choice": self._interpreter[1]}
        if abandoned:
            worker.close()
            raise WorkerFailure("the executor is closed")
        return worker

    def _start_worker(self, index: int) -> _Worker:
        assert self._interpreter is not None
        try:
            return _Worker(index, self.config, self._interpreter[0], self.uid_base + index)
        except StartRefused:
            # Once more: once its uid is dropped, a starting fork server is within reach of whatever of its
            # uid still runs (a job of the fork server it replaces, being killed), which may have changed
            # its limits. A configuration that cannot start fails the same way twice.
            return _Worker(index, self.config, self._interpreter[0], self.uid_base + index)

    def _release(self, worker: _Worker, healthy: bool) -> None:
        with self._condition:
            if healthy and worker.alive() and not self._closed:
                self._idle.append(worker)
            else:
                if worker in self._workers:
                    self._workers.remove(worker)
                worker.kill()
            self._condition.notify()

    def isolation(self) -> dict[str, str]:
        """The isolation layers detected by the fork servers (starts one if none is running)."""
        self._reset_after_fork()
        if not self._isolation:
            worker = self._acquire()
            self._release(worker, True)
        return dict(self._isolation)

    @property
    def workers(self) -> int:
        """How many fork servers this executor runs at most."""
        return self._limit

    def warm_up(self, workers: int | None = None) -> None:
        """Start fork servers in the background, so their start-up overlaps whatever the caller does
        next (reading and validating a batch, say). Failures surface on the first job instead."""
        self._reset_after_fork()
        count = min(workers or self._limit, MAX_WORKERS)
        with self._condition:
            self._limit = max(self._limit, count)
            missing = count - len(self._workers)

        def start_one():
            with contextlib.suppress(Exception):  # reported by the job that needs the worker
                self._release(self._acquire(), True)

        for _ in range(max(missing, 0)):
            starter = threading.Thread(target=start_one, name="rewardpipe-warm-up", daemon=True)
            self._starters.append(starter)
            starter.start()

    def close(self) -> None:
        with self._condition:
            self._closed = True
            workers, self._workers, self._idle = list(self._workers), [], []
            self._condition.notify_all()
        # In parallel: each fork server tears down its children, cgroups and directories on its own.
        closers = [threading.Thread(target=worker.close) for worker in workers if isinstance(worker, _Worker)]
        for closer in closers:
            closer.start()
        for closer in closers:
            closer.join()
        for starter in self._starters:  # a fork server still starting closes itself when it is up
            starter.join()
        self._starters = []

    # -- jobs -----------------------------------------------------------------------------------------

    def run(self, job: ExecutionJob) -> ExecutionResult:
        """Never raises for a job: anything that goes wrong in the sandbox is an ``error`` result."""
        started = time.perf_counter()
        try:
            try:
                return self._run(job, started)
            except _RunAlone:
                # Its disk use and its neighbours' could not be told apart. The run beside them is not
                # scored (neither a 0 nor a pass for space another job may have held): it runs again with
                # the host file system to itself, where whatever it holds is its own.
                with _SHARED_DISK_JOBS.alone():
                    return self._run(job, started, alone=True)
        except _RunAlone:  # cannot happen while it runs alone; an error, never a score, if it does
            return self._result(
                job,
                started,
                ExecutionStatus.ERROR,
                reason="its use of the shared disk could not be told apart from other jobs'",
            )
        except Exception as exc:  # noqa: BLE001 - e.g. out of descriptors; one job must not sink a batch
            return self._result(
                job, started, ExecutionStatus.ERROR, reason=f"sandbox failure: {type(exc).__name__}: {exc}"[:1000]
            )

    def _measures_shared_disk(self) -> bool:
        """True if this executor's jobs share the host file system, each measured (no tmpfs of its own)."""
        # Before any fork server has reported (a mount namespace may be refused even to root): assume so.
        return not self._isolation or "measured" in self._isolation.get("disk_quota", "")

    def _run(self, job: ExecutionJob, started: float, alone: bool = False) -> ExecutionResult:
        started_monotonic = time.monotonic()
        self._reset_after_fork()
        if not job.entry_point.isidentifier():
            return self._result(
                job,
                started,
                ExecutionStatus.ERROR,
                reason=f"entry_point {job.entry_point!r} is not a Python identifier",
            )
        try:
            expected = _expected_test_count(job.tests, job.tests_format)
        except harness.HarnessError as exc:
            return self._result(job, started, ExecutionStatus.ERROR, reason=str(exc))
        if job.trust_mode == "inprocess":
            findings = screen(job.code)
            if findings:
                return self._result(
                    job,
                    started,
                    ExecutionStatus.FAILED,
                    total=expected,
                    reason="static screening rejected the code for in-process testing: " + "; ".join(findings),
                )
        header = {
            "id": job.id,
            "entry_point": job.entry_point,
            "tests_format": job.tests_format,
            "timeout_s": job.timeout_s,
            "mode": job.trust_mode,
        }
        if self.phase_log is not None:
            header["phases"] = True
        for attempt in (1, 2):
            # Registered before a fork server is taken: a job waiting for another's turn alone holds none.
            shared = self._measures_shared_disk()
            running = _SHARED_DISK_JOBS.started(alone) if shared else None
            try:
                try:
                    worker = self._acquire()
                except WorkerFailure as exc:
                    return self._result(job, started, ExecutionStatus.ERROR, total=expected, reason=str(exc))
                try:
                    reply, verdict, out, out_size, err, err_size = worker.execute(header, job.code, job.tests)
                except BaseException as exc:
                    if not isinstance(exc, WorkerFailure):
                        # Failed on our side (e.g. no descriptors left) before the worker was involved,
                        # so it stays usable.
                        self._release(worker, worker.alive())
                        raise
                    self._release(worker, False)
                    if attempt == 1 and isinstance(exc, JobNotDelivered):
                        continue  # the worker died between jobs; the job never started
                    if _job_can_signal_its_fork_server(worker.isolation):
                        # Killed or stopped by a process of its own uid, and only the job's code ran: as for
                        # the trusted runner, a failure the model could cause is the model's, never an error.
                        lost = (
                            f"the sandbox's fork server was lost during the job ({exc}); the job's code shares "
                            "its uid with seccomp off, so it could do that: scored as the model's failure"
                        )
                        return self._result(
                            job,
                            started,
                            ExecutionStatus.FAILED,
                            total=expected,
                            passed=0,
                            reason=lost[:1000],
                            isolation=worker.isolation,
                        )
                    return self._result(
                        job, started, ExecutionStatus.ERROR, total=expected, reason=str(exc), isolation=worker.isolation
                    )
            finally:
                overlapped = _SHARED_DISK_JOBS.finished(running) if running is not None else False
            self._release(worker, "fatal" not in reply and not reply.get("retire"))
            if attempt == 1 and reply.get("not_run"):
                continue  # the fork server refused the job before it started (it was tampered with)
            result = self._judge(
                job,
                started,
                expected,
                reply,
                verdict,
                _decode_output(out, out_size),
                _decode_output(err, err_size),
                worker.isolation,
                ran_alone=not overlapped,
            )
            if self.phase_log is not None and isinstance(reply.get("marks"), dict):
                self.phase_log.append({**reply["marks"], "s_start": started_monotonic, "s_end": time.monotonic()})
            return result
        raise AssertionError("unreachable")

    def _result(self, job, started, status, isolation=None, **fields) -> ExecutionResult:
        isolation = dict(isolation or {})
        if job.trust_mode == "inprocess":
            isolation["trust"] = INPROCESS_TRUST
        return ExecutionResult(
            id=job.id,
            status=status,
            mode=job.trust_mode,
            isolation=isolation,
            duration_ms=(time.perf_counter() - started) * 1000,
            **fields,
        )

    def _judge(
        self, job, started, expected, reply, verdict_bytes, stdout, stderr, isolation, ran_alone: bool = False
    ) -> ExecutionResult:
        """The verdict, then the disk rules where jobs share the host file system (no tmpfs of their own):
        whatever the host held because of a job counts against its budget. Alone, that is exact: over the
        budget it fails. Beside other jobs the growth may be theirs: the job is run again alone
        (:class:`_RunAlone`), so neither it nor a neighbour is scored from a run another job disturbed."""
        result = self._verdict(job, started, expected, reply, verdict_bytes, stdout, stderr, isolation)
        if reply.get("disk_quota_exceeded") or result.is_infrastructure_error:
            return result  # over in its own directory (exact), or no verdict at all
        host_over = reply.get("host_disk_over")
        if host_over:
            if not ran_alone:
                raise _RunAlone
            return result.model_copy(
                update={
                    "status": ExecutionStatus.FAILED,
                    "passed": 0,
                    "model_fault": False,
                    "reason": f"disk quota exceeded: {host_over}, while no other job ran"[:1000],
                }
            )
        host_low = reply.get("host_disk_low")
        if not host_low or result.status is ExecutionStatus.PASSED:
            return result
        if reply.get("host_disk_low_at_start"):
            # Space taken before it started (by an earlier job, or outside the sandbox): it may have failed
            # for want of space that was never its to use. An infrastructure error, never a score of 0.
            return result.model_copy(
                update={
                    "status": ExecutionStatus.ERROR,
                    "passed": 0,
                    "model_fault": False,
                    "reason": f"host disk full: {host_low} during the run, so this result cannot be trusted "
                    f"(the sandbox reported: {result.reason})"[:1000],
                }
            )
        if not ran_alone:
            raise _RunAlone  # a neighbour may have taken the space it needed
        return result  # alone, with its budget free when it started: the space it lacked was not its own

    def _verdict(self, job, started, expected, reply, verdict_bytes, stdout, stderr, isolation) -> ExecutionResult:
        common = {"total": expected, "stdout": stdout, "stderr": stderr, "isolation": isolation}
        if "fatal" in reply:
            return self._result(job, started, ExecutionStatus.ERROR, reason=str(reply["fatal"]), **common)
        if reply.get("timed_out"):
            return self._result(
                job,
                started,
                ExecutionStatus.TIMEOUT,
                reason=f"wall-clock deadline of {job.timeout_s:g} s exceeded",
                **common,
            )
        if reply.get("trusted_tampered") or reply.get("harness") == TRUSTED_RUNNER_DIED:
            # Only the model's code ran during the job; where the sandbox runs as one uid (Lambda, Fargate)
            # it is what could reach the trusted side, so the failure is the model's, never an excluded error.
            what = reply.get("trusted_tampered") or "the trusted runner died during the job"
            return self._result(
                job,
                started,
                ExecutionStatus.FAILED,
                passed=0,
                reason=f"the sandbox's trusted side was disturbed during the job ({what}); "
                "scored as the model's failure"[:1000],
                **common,
            )
        if reply.get("disk_quota_exceeded"):
            # Whatever the tests said: a job that filled its disk quota broke a limit of the sandbox.
            return self._result(
                job,
                started,
                ExecutionStatus.FAILED,
                passed=0,
                reason=f"disk quota exceeded: {reply['disk_quota_exceeded']}",
                **common,
            )
        try:
            verdict = json.loads(verdict_bytes.rstrip(b"\0").decode()) if verdict_bytes else None
        except ValueError:
            verdict = None
        if type(verdict) is not dict:
            return self._result(
                job,
                started,
                ExecutionStatus.ERROR,
                reason=f"the trusted harness wrote no verdict ({reply.get('harness')})",
                **common,
            )
        if verdict.get("harness_error"):
            return self._result(
                job,
                started,
                ExecutionStatus.ERROR,
                reason=str(verdict["harness_error"]),
                model_fault=verdict.get("model_fault") is True,
                **common,
            )
        tests_run = int(verdict.get("tests_run", 0))
        successes = int(verdict.get("successes", 0))
        fixture_problems = int(verdict.get("fixture_problems", 0))
        if tests_run == expected and successes == expected and expected > 0 and not fixture_problems:
            return self._result(job, started, ExecutionStatus.PASSED, passed=expected, reason="", **common)
        reasons = []
        if fixture_problems:
            # A class- or module-level fixture (or cleanup) failed: the run failed, as plain unittest says.
            reasons.append(
                f"{fixture_problems} error(s) outside the test methods (setUpClass, tearDownClass, "
                "setUpModule, tearDownModule or a cleanup)"
            )
            successes = 0
        elif tests_run != expected:
            reasons.append(f"{tests_run} of {expected} expected tests ran")
        else:
            reasons.append(f"{successes} of {expected} tests passed")
        if verdict.get("model_died") and reply.get("model_exit"):
            reasons.append(f"the model's process ended early ({reply['model_exit']})")
        if verdict.get("first_failure"):
            reasons.append(str(verdict["first_failure"]))
        passed = min(successes, expected) if tests_run == expected else 0
        return self._result(
            job, started, ExecutionStatus.FAILED, passed=passed, reason="; ".join(reasons)[:1000], **common
        )

    def run_batch(self, jobs: Iterable[ExecutionJob], workers: int | None = None) -> Iterator[ExecutionResult]:
        jobs = list(jobs)
        if not jobs:
            return iter(())
        threads = workers or self.config.workers or os.cpu_count() or 2
        if threads < 1:
            raise SandboxConfigError(f"workers must be at least 1, got {threads}")
        if threads > MAX_WORKERS:
            raise SandboxConfigError(f"workers must be at most {MAX_WORKERS}, got {threads}")
        with self._condition:
            self._limit = max(self._limit, threads)
        return self._batch(jobs, threads)

    def _batch(self, jobs, threads) -> Iterator[ExecutionResult]:
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rewardpipe-exec") as pool:
            yield from pool.map(self.run, jobs)


def _job_can_signal_its_fork_server(isolation: dict[str, str]) -> bool:
    """True where a job's code could kill or stop its fork server: it runs as the fork server's uid (no uid
    of its own) and seccomp, which limits signals to the job's own pid, is off."""
    return isolation.get("uid", "").startswith("off") and isolation.get("seccomp", "").startswith("off")


class _Placeholder:
    """Reserves a worker slot (and its index, hence its uid) while the fork server starts."""

    def __init__(self, index: int):
        self.index = index

    def alive(self) -> bool:
        return True

    def kill(self) -> None:
        pass


_DEFAULT: ForkServerExecutor | None = None
_DEFAULT_LOCK = threading.Lock()


def default_executor() -> ForkServerExecutor:
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None or _DEFAULT._closed:
            _DEFAULT = ForkServerExecutor()
            atexit.register(_DEFAULT.close)
        return _DEFAULT


def make_executor(**overrides) -> ForkServerExecutor:
    """An executor with settings overridden on top of the environment's (tests, CLI, benchmarks)."""
    return ForkServerExecutor(replace(SandboxConfig.from_env(), **overrides))


def executor_for(workers: int | None) -> tuple[ForkServerExecutor, bool]:
    """``(executor, owned)``: the process-wide executor when it runs ``workers`` fork servers (or
    ``workers`` is None) under the environment's current settings, so a process running several jobs keeps
    its fork servers; otherwise a new one, which the caller owns and closes."""
    shared = default_executor()
    same_settings = replace(shared.config, workers=None) == replace(SandboxConfig.from_env(), workers=None)
    if same_settings and workers in (None, shared.workers):
        return shared, False
    return make_executor(**({"workers": workers} if workers else {})), True
