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
import collections
import contextlib
import functools
import hashlib
import itertools
import json
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from rewardpipe.execution import forkservers
from rewardpipe.execution.forkservers import (  # noqa: F401 - the settings and failures are this module's API too
    BOOT_SCRIPT,
    ENV_DISABLE,
    ENV_MEMORY,
    ENV_PIN_CPUS,
    ENV_PRIVATE_DISK,
    ENV_PYTHON,
    ENV_WORKERS,
    MAX_WORKERS,
    JobNotDelivered,
    SandboxConfig,
    SandboxConfigError,
    StartRefused,
    WorkerFailure,
    _compile_runtime,
    _derived_uid_base,
    _protect_scorer_memory,
    _Worker,
    choose_interpreter,
)
from rewardpipe.execution.result import ExecutionJob, ExecutionResult, ExecutionStatus
from rewardpipe.execution.runtime import harness, layers
from rewardpipe.execution.screening import screen

TRUSTED_RUNNER_DIED = "the trusted runner died"  # the fork server's word for it (runtime/zygote.py)
INPROCESS_TRUST = (
    "inprocess: the tests ran beside the model's code behind a deny-list screen that can be "
    "bypassed; not for untrusted code, not a reward source"
)


@functools.lru_cache(maxsize=256)
def _expected_test_count(tests: str, tests_format: str) -> int:
    """The K rollouts of a group share their hidden tests: parse them once, not once per rollout."""
    return harness.count_expected_tests(tests, tests_format)


@functools.lru_cache(maxsize=8)
def _stdio_suite(tests: str) -> harness.StdioSuite:
    """The cases of stdio tests (already validated by _expected_test_count); a group's rollouts share them."""
    return harness.parse_stdio_suite(tests)


def _stdio_verdict(
    reply: dict, out: bytes, out_size: int, expected: bytes, err: bytes, float_tolerance: float | None = None
) -> bytes:
    """One stdio case's verdict, as the trusted runner would write it for a job of one test: whether the program
    ended normally (exit 0) having printed the expected tokens. A reply with no verdict to give (timed out, fork
    server trouble) is judged by its own fields first (ForkServerExecutor._verdict)."""
    failure = ""
    if out_size > harness.MAX_STDIO_PRINTED_BYTES:
        failure = f"the program printed {out_size} bytes, over the {harness.MAX_STDIO_PRINTED_BYTES >> 20} MiB limit"
    elif reply.get("model_exit") != "exit 0":
        lines = err.decode("utf-8", "replace").strip().splitlines()
        failure = f"the program ended with {reply.get('model_exit')}" + (f" ({lines[-1][:300]})" if lines else "")
    elif not harness.stdio_output_matches(out, expected, float_tolerance):
        failure = "wrong answer (its output's whitespace-separated tokens differ from the expected output's)"
    return json.dumps({"tests_run": 1, "successes": 0 if failure else 1, "first_failure": failure}).encode()


def _cpu_time_ran_out(reply: dict, timeout_s: float, isolation: dict) -> int | None:
    """The job's CPU-time limit (seconds) if the kernel killed its program for reaching it, else None. Threads on
    several CPUs reach it before the wall-clock deadline: an endless loop spread over them was a failed case (a stdio
    job went on to its next cases, partial credit) where the deadline makes the job a timeout, a 0 (round
    thirty-two). A program killed below the limit (one that lowered its own) stays its failure, as before."""
    if not str(isolation.get("rlimits", "")).startswith("on") or reply.get("model_exit") not in _CPU_LIMIT_KILLS:
        return None
    used = (reply.get("cpu_ms") or {}).get("untrusted") if isinstance(reply.get("cpu_ms"), dict) else None
    limit = layers.job_cpu_seconds(timeout_s)
    # (the kernel checks at its tick, so the time used is at least the limit; a hundredth below it is the margin)
    return limit if isinstance(used, (int, float)) and used >= limit * 990 else None


_CPU_LIMIT_KILLS = ("killed by SIGKILL", "killed by SIGXCPU")


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


MAX_UNDECIDED = 256  # results (with their jobs) kept for a batch to settle; run() alone never settles one


class _TestsThatLoad:
    """Hidden tests (by a digest of their source, and their format) that an answer got past loading: every name
    their module-level code reads was there. Then a later answer whose load fails on a name that neither the tests
    nor its code defines (``ORIGIN = Point(0, 0)`` without a class ``Point``: ``harness.UndefinedName``) left it
    out, and fails, as in one process; before any answer loaded, one job cannot tell that from broken tests (a
    typo), which stay an ``error``. Round thirteen: a wrong answer made its 0 an excluded ``error`` that way.
    Thread-safe; the most recent ``LIMIT`` tests are kept."""

    LIMIT = 4096

    def __init__(self) -> None:
        self._seen: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _key(job: ExecutionJob) -> bytes:
        source = job.tests.encode("utf-8", "surrogatepass")
        return hashlib.blake2b(source, digest_size=16, person=job.tests_format.encode()[:16]).digest()

    def add(self, job: ExecutionJob) -> None:
        key = self._key(job)
        with self._lock:
            self._seen[key] = None
            self._seen.move_to_end(key)
            while len(self._seen) > self.LIMIT:
                self._seen.popitem(last=False)

    def __contains__(self, job: ExecutionJob) -> bool:
        key = self._key(job)
        with self._lock:
            return key in self._seen


class ForkServerExecutor:
    """Runs jobs on a lazily started pool of fork servers. Thread-safe; ``close()`` when done."""

    def __init__(self, config: SandboxConfig | None = None):
        self.config = config or SandboxConfig.from_env()
        self._condition = threading.Condition()
        self._idle: list[_Worker] = []
        self._workers: list[_Worker | _Placeholder] = []
        self._limit = self.config.pool_size()
        self._interpreter: tuple[str, str] | None = None
        # Fork servers a command started for this executor before it existed (forkservers.prestart).
        self._prestarted: dict[int, _Worker] = {}
        claimed = forkservers.claim(self.config)
        if claimed is not None:
            self.uid_base = claimed.uid_base
            self._interpreter = claimed.interpreter
            self._prestarted = claimed.workers
        else:
            self.uid_base = self.config.uid_base or _derived_uid_base()
        if os.geteuid() != 0:
            _protect_scorer_memory()
        self._owner_pid = os.getpid()
        self._closed = False
        self._isolation: dict[str, str] = {}
        self._starters: list[threading.Thread] = []  # warm_up() threads
        # Set to a list to record, per job, when each step happened in the scorer, fork server and runner
        # (time.monotonic(); benchmarks/execution.py prints the breakdown). None: nothing is recorded.
        self.phase_log: list[dict] | None = None
        self._tests_that_load = _TestsThatLoad()
        # Results still undecided (harness.UndefinedName, no answer to those tests loaded yet), by id: a batch
        # settles its own once it has run every job (_batch), a caller running jobs one by one with settle().
        self._undecided: dict[int, tuple[ExecutionResult, ExecutionJob, str]] = {}
        self._undecided_lock = threading.Lock()

    # -- pool -----------------------------------------------------------------------------------------

    def _reset_after_fork(self) -> None:
        """A forked copy of the scorer must not share fork servers with its parent."""
        if os.getpid() != self._owner_pid:
            self._owner_pid = os.getpid()
            self._idle, self._workers = [], []
            self._prestarted = {}  # the parent's, as its workers are: never used or stopped from here
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
        with self._condition:
            prestarted = self._prestarted.pop(index, None)
            cpu = self.config.cpu_for(index, self._limit)
        try:
            if prestarted is not None:
                return prestarted.ready()
            return _Worker(index, self.config, self._interpreter[0], self.uid_base + index, cpu).ready()
        except StartRefused:
            # Once more: once its uid is dropped, a starting fork server is within reach of whatever of its
            # uid still runs (a job of the fork server it replaces, being killed), which may have changed
            # its limits. A configuration that cannot start fails the same way twice.
            return _Worker(index, self.config, self._interpreter[0], self.uid_base + index, cpu).ready()

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
        self._reset_after_fork()  # a forked copy must not stop its parent's fork servers
        with self._condition:
            self._closed = True
            workers, self._workers, self._idle = list(self._workers), [], []
            workers += self._prestarted.values()  # started for this executor, never needed
            self._prestarted = {}
            self._condition.notify_all()
        forkservers.close_all([worker for worker in workers if isinstance(worker, _Worker)])
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
        if job.tests_format != "stdio" and not job.entry_point.isidentifier():
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
        if job.tests_format == "stdio":
            return self._run_stdio(job, started, alone, header, _stdio_suite(job.tests))
        return self._exchange(job, started, alone, header, expected, started_monotonic)

    def _run_stdio(self, job, started, alone: bool, header: dict, suite: harness.StdioSuite) -> ExecutionResult:
        """Every case in a fresh hardened child of its own (the same job, with the case's input as its stdin), all
        within the job's ``timeout_s``; its output is compared here (harness.stdio_output_matches), so the expected
        outputs never leave this process. Every case runs (partial credit) unless the time runs out."""
        cases = suite.cases
        total, passed = len(cases), 0
        shown: dict[str, Any] = {}  # the output of the first failing case (else of the last one)
        first_failure = ""
        # The budget is the time its cases ran (from each one's hand-over to a fork server to its reply), as a
        # unittest job's deadline starts when its fork server takes it: never the waits for a worker or for another
        # job's turn alone between cases, nor a disturbed run before a run again alone (round twenty-five: a
        # neighbour's turn alone made a right program a timeout).
        spent = 0.0
        for index, case in enumerate(cases):
            remaining = job.timeout_s - spent
            if remaining <= 0:
                return self._result(
                    job,
                    started,
                    ExecutionStatus.TIMEOUT,
                    passed=passed,
                    total=total,
                    reason=f"wall-clock deadline of {job.timeout_s:g} s exceeded before case {index} of {total}",
                    **shown,
                )
            handed: list[float] = []  # when a fork server took the case, and when its reply came (_exchange)
            budget = {**header, "timeout_s": remaining}
            judged = (*case, suite.float_tolerance)
            result = self._exchange(job, started, alone, budget, 1, time.monotonic(), judged, handed)
            # (and the CPU time of its comparison here, never the clock's: the scorer's other threads stretched it, and
            # made a right program a timeout, round thirty-two)
            spent += handed[-1] - handed[-2] if len(handed) >= 2 else 0.0
            common = {"stdout": result.stdout, "stderr": result.stderr, "isolation": result.isolation}
            if result.status is ExecutionStatus.PASSED:
                passed += 1
                shown = shown if first_failure else common
                continue
            reason = f"case {index} of {total}: {result.reason.removeprefix('0 of 1 tests passed; ')}"
            if result.status is not ExecutionStatus.FAILED:  # the job's time ran out (timeout), or no verdict (error)
                return self._result(job, started, result.status, passed=passed, total=total, reason=reason, **common)
            if not first_failure:
                first_failure, shown = reason, common
            if result.reason.startswith("disk quota exceeded"):
                # Over its disk budget (_verdict, _judge; a case the program failed reads "0 of 1 tests passed; ..."):
                # the job broke a limit of the sandbox and fails whole, as a unittest job does, running no more cases.
                # Where nothing keeps its writes in its directory, what each case left made a later failing case the
                # excluded "host disk full" error: a wrong program's 0 became an error (round twenty-five).
                reason = f"0 of {total} cases passed (a case over the disk budget fails the job); {reason}"[:1000]
                return self._result(
                    job, started, ExecutionStatus.FAILED, passed=0, total=total, reason=reason, **common
                )
        if passed == total:
            return self._result(job, started, ExecutionStatus.PASSED, passed=passed, total=total, **shown)
        reason = f"{passed} of {total} cases passed; first failure: {first_failure}"[:1000]
        return self._result(job, started, ExecutionStatus.FAILED, passed=passed, total=total, reason=reason, **shown)

    def _exchange(
        self,
        job,
        started,
        alone: bool,
        header: dict,
        expected: int,
        started_monotonic: float,
        case=None,
        handed: list[float] | None = None,
    ) -> ExecutionResult:
        """Hand the job to a fork server (a second one if the first was lost before it started) and judge its
        reply. ``case``: a stdio case's ``(input, expected output, float tolerance)``, judged here from the program's
        output; ``handed``: appended with the moment a fork server was taken for it (after any wait), then with the
        moment its reply came, or the fork server failed, plus the CPU time its comparison took here."""
        for attempt in (1, 2):
            # Registered before a fork server is taken: a job waiting for another's turn alone holds none.
            shared = self._measures_shared_disk()
            running = _SHARED_DISK_JOBS.started(alone) if shared else None
            try:
                try:
                    worker = self._acquire()
                except WorkerFailure as exc:
                    return self._result(job, started, ExecutionStatus.ERROR, total=expected, reason=str(exc))
                if handed is not None:
                    handed.append(time.perf_counter())
                try:
                    try:
                        reply, verdict, out, out_size, err, err_size = (
                            worker.execute(header, job.code, job.tests)
                            if case is None
                            else worker.execute(header, job.code, case[0], harness.MAX_STDIO_PRINTED_BYTES)
                        )
                    finally:
                        if handed is not None:
                            handed.append(time.perf_counter())  # (a lost fork server's case is charged too)
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
            cpu_limit = _cpu_time_ran_out(reply, header["timeout_s"], worker.isolation)
            if cpu_limit is not None:
                reply = {**reply, "cpu_time_ran_out": cpu_limit}
            if case is not None:
                judging = time.thread_time()
                verdict = _stdio_verdict(reply, out, out_size, case[1], err, case[2])
                if handed is not None:
                    # The comparison's own work is charged (what the program printed sets it, and uncharged, 2 MiB of
                    # numbers a case cost the scorer a second each beyond the budget), never the scorer's other
                    # threads' turns meanwhile: this thread's CPU time, not the clock's.
                    handed[-1] += time.thread_time() - judging
                out, err = out[: self.config.output_bytes], err[: self.config.output_bytes]
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
                self.phase_log.append(
                    {
                        **reply["marks"],
                        "s_start": started_monotonic,
                        "s_end": time.monotonic(),
                        "cpu_ms": reply.get("cpu_ms"),  # the runner's and the child's own, for benchmarks
                    }
                )
            return result
        raise AssertionError("unreachable")

    def _left_out(self, job, started, load_error: str, name: str, **common) -> ExecutionResult:
        """The model's ``failed`` for an answer that does not define a name the tests read at load, which answers
        to the same tests did define (:class:`_TestsThatLoad`)."""
        reason = (
            f"{load_error} (the model's code does not define {name!r}, which the hidden tests read when they load; "
            "answers to these tests that define it got past loading)"
        )
        return self._result(job, started, ExecutionStatus.FAILED, passed=0, reason=reason[:1000], **common)

    def settle(self, result: ExecutionResult) -> ExecutionResult:
        """``result`` (one of this executor's) as it stands now that more jobs have run: one left undecided (an
        answer whose tests failed to load on a name it does not define, see :class:`_TestsThatLoad`) is the model's
        ``failed`` once another answer to the same tests got past loading, else it is returned as it was. A batch
        settles its own results; a caller that runs a group's jobs one by one settles them when the group is done."""
        with self._undecided_lock:
            entry = self._undecided.get(id(result))
            if entry is None or entry[0] is not result or entry[1] not in self._tests_that_load:
                return result
            del self._undecided[id(result)]
        _, job, name = entry
        settled = self._left_out(job, time.perf_counter(), result.reason, name, total=result.total)
        return settled.model_copy(
            update={
                "duration_ms": result.duration_ms,
                "stdout": result.stdout,
                "stderr": result.stderr,
                "isolation": result.isolation,
            }
        )

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
        if reply.get("cpu_time_ran_out"):
            limit = reply["cpu_time_ran_out"]
            return self._result(
                job,
                started,
                ExecutionStatus.TIMEOUT,
                reason=f"CPU-time limit of {limit} s exceeded (the timeout and a second, all its threads together)",
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
            undefined = verdict.get("undefined_name")
            if type(undefined) is str and job in self._tests_that_load:
                return self._left_out(job, started, str(verdict["harness_error"]), undefined, **common)
            result = self._result(
                job,
                started,
                ExecutionStatus.ERROR,
                reason=str(verdict["harness_error"]),
                model_fault=verdict.get("model_fault") is True,
                **common,
            )
            if type(undefined) is str:
                with self._undecided_lock:
                    self._undecided[id(result)] = (result, job, undefined)
                    while len(self._undecided) > MAX_UNDECIDED:
                        self._undecided.pop(next(iter(self._undecided)))
            return result
        if verdict.get("tests_loaded") is True:
            self._tests_that_load.add(job)
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
            first_failure = str(verdict["first_failure"])
            if isolation.get("files", "").startswith("on") and _READ_ONLY_SIGNS.search(first_failure):
                # Still the model's failure (its own text could say this): the hint is for whoever reads it,
                # before the failure, which the reason's length limit may cut.
                reasons.append(READ_ONLY_HINT)
            reasons.append(first_failure)
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
        # In order, as they finish. An undecided result (an answer that may have left out a name the tests read at
        # load, see _TestsThatLoad) holds back itself and every result after it until it is settled: as soon as
        # another answer to its tests loaded (in a GRPO group, the next right answer), else at the batch's end.
        # Before, one such answer early in a batch held back the output of the whole batch until its end.
        held: collections.deque[ExecutionResult] = collections.deque()
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rewardpipe-exec") as pool:
            for result in pool.map(self.run, jobs):
                held.append(result)
                while held:
                    settled = self.settle(held[0])
                    if settled is held[0] and id(settled) in self._undecided:
                        break  # still undecided: it and everything after it wait
                    held.popleft()
                    yield settled
        for result in held:
            yield self.settle(result)


# What a write refused by the "files" layer looks like in a failure: the errno's text, or tempfile finding no
# directory it may write in.
_READ_ONLY_SIGNS = re.compile(r"Read-only file system|No usable temporary directory")
READ_ONLY_HINT = (
    "the file system is read-only for the model's code here (isolation 'files': no Landlock or chroot to confine "
    "its writes); code that writes files fails"
)


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
