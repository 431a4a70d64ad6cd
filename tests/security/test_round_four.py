"""Fourth attack round (issue 19): nothing around one job can touch another, and no shape of test or
text games the score.

Every payload carries a wrong ``add``: its verdict must be ``failed`` (or ``timeout``), never ``passed``
and never an infrastructure ``error`` (an error drops the rollout from GRPO, so a model able to cause one
escapes the penalty for a wrong answer), and the next honest job must pass. Each class is attacked on
full isolation and on the Lambda/Fargate configuration (fork servers unprivileged, one uid for every
sandbox process, no namespaces, no Landlock), and with seccomp off to prove the second line of defence.
"""

from __future__ import annotations

import os
import textwrap
import time

import pytest

from rewardpipe.execution import ExecutionJob, ExecutionStatus
from rewardpipe.execution.sandbox import make_executor
from tests.security.conftest import RIGHT_ADD, WRONG_ADD, assert_failed, assert_scorer_survives, job
from tests.security.test_round_two import _children_of

x86_64_only = pytest.mark.skipif(os.uname().machine != "x86_64", reason="payloads use x86_64 syscall numbers")


def _degraded(server_uid: int = 65534, **overrides):
    if os.geteuid() != 0:
        pytest.skip("needs root to start the fork servers as another uid")
    return make_executor(
        workers=1,
        server_uid=server_uid,
        # file writes allowed ("files" off): the defences tested here must hold where a user allows them
        disable=frozenset({"landlock", "files", *overrides.pop("disable", ())}),
        **overrides,
    )


@pytest.fixture(scope="module")
def degraded():
    executor = _degraded()
    if not executor.isolation()["seccomp"].startswith("on"):
        executor.close()
        pytest.skip("seccomp is unavailable")
    yield executor
    executor.close()


# The tests that use the fixture below share its uid, so they run on one xdist worker: with each worker
# holding its own copy of the module's executor, one test's payload (prlimit NOFILE=8 on every nearby pid of
# the uid) reached the other worker's fork server while it started ("Too many open files"), a flake.
DEGRADED_UID_GROUP = pytest.mark.xdist_group("degraded_without_seccomp")


@pytest.fixture(scope="module")
def degraded_without_seccomp():
    """Lambda mode with the filter off: what the trusted side's own checks must still catch. A uid of its
    own, so its payloads (which reach every process of their uid) touch no other test's sandbox; its tests
    are in DEGRADED_UID_GROUP."""
    executor = _degraded(server_uid=65532, disable={"seccomp"})
    yield executor
    executor.close()


def _server(executor):
    return next(w for w in executor._workers if hasattr(w, "process"))


def _state(pid: int) -> tuple:
    """What a pid-taking call could change about a process, read from outside it."""
    with open(f"/proc/{pid}/limits") as handle:
        limits = handle.read()
    return (limits, os.sched_getscheduler(pid), os.getpriority(os.PRIO_PROCESS, pid), sorted(os.sched_getaffinity(pid)))


# --- 1. acting on other processes by pid, without a signal -------------------------------------------

# Every call that takes a pid (or a process group, or "every process of my uid") and changes something
# about that process, aimed at every pid the payload can name: its parent (the fork server), the pids
# around its own (the trusted runner, the spare child waiting for the next job), the scorer above. A hit
# is a call that returned 0 on a pid that is not the payload's own.
PID_ATTACKS = WRONG_ADD + textwrap.dedent("""
    import ctypes, os, fcntl, signal, struct
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    me = os.getpid()
    parent = os.getppid() or me + 1  # 0 (the caller) in a pid namespace of its own: the next pid stands in for it
    targets = sorted({parent, *range(max(2, me - 40), me + 40)} - {me})
    try:
        with open(f"/proc/{parent}/stat") as handle:
            targets.append(int(handle.read().rsplit(")", 1)[1].split()[1]))  # the scorer
    except OSError:
        pass
    one = struct.pack("=QQ", 1, 1)
    cpu0 = (ctypes.c_ulong * 16)(1)
    param = ctypes.c_int(0)
    attr = struct.pack("=IIQiIQQQ", 48, 5, 0, 19, 0, 0, 0, 0)  # sched_attr: SCHED_IDLE, nice 19
    robust = (ctypes.c_void_p(), ctypes.c_size_t())
    node = ctypes.c_ulong(1)
    calls = {
        "prlimit_cpu": lambda p: libc.syscall(302, p, 0, one, None),
        "prlimit_as": lambda p: libc.syscall(302, p, 9, struct.pack("=QQ", 1 << 20, 1 << 20), None),
        "prlimit_nofile": lambda p: libc.syscall(302, p, 7, one, None),
        "prlimit_fsize": lambda p: libc.syscall(302, p, 1, one, None),
        "sched_setscheduler": lambda p: libc.syscall(144, p, 5, ctypes.byref(param)),  # SCHED_IDLE
        "sched_setparam": lambda p: libc.syscall(142, p, ctypes.byref(param)),
        "sched_setaffinity": lambda p: libc.syscall(203, p, ctypes.sizeof(cpu0), cpu0),
        "sched_setattr": lambda p: libc.syscall(314, p, attr, 0),
        "setpriority_process": lambda p: libc.syscall(141, 0, p, 19),
        "ioprio_set_process": lambda p: libc.syscall(251, 1, p, (3 << 13)),  # IOPRIO_CLASS_IDLE
        "get_robust_list": lambda p: libc.syscall(274, p, ctypes.byref(robust[0]), ctypes.byref(robust[1])),
        "migrate_pages": lambda p: libc.syscall(256, p, 64, ctypes.byref(node), ctypes.byref(node)),
        "move_pages": lambda p: libc.syscall(279, p, 0, None, None, None, 0),
        "kcmp": lambda p: libc.syscall(312, me, p, 0, 0, 0),
        "pidfd_open": lambda p: libc.syscall(434, p, 0),
        "process_vm_readv": lambda p: libc.syscall(310, p, None, 0, None, 0, 0),
        "ptrace_attach": lambda p: libc.syscall(101, 16, p, 0, 0),
        "perf_event_open": lambda p: libc.syscall(298, bytes(128), p, -1, -1, 0),
        "setpgid": lambda p: libc.syscall(109, p, me),
    }
    hits = []
    for name, call in calls.items():
        for pid in targets:
            if call(pid) >= 0:
                hits.append((name, pid))
    # "Every process of my uid / my process group": on Lambda that includes the fork server and runner.
    for name, call in {"setpriority_user": lambda: libc.syscall(141, 2, 0, 19),
                       "setpriority_pgrp": lambda: libc.syscall(141, 1, 0, 19),
                       "ioprio_set_user": lambda: libc.syscall(251, 3, 0, (3 << 13)),
                       "ioprio_set_pgrp": lambda: libc.syscall(251, 2, 0, (3 << 13))}.items():
        if call() >= 0:
            hits.append((name, 0))
    # SIGIO (or any signal F_SETSIG picks) sent by the kernel to a pid of our choosing whenever our own
    # channel to the trusted runner has I/O.
    for fd in range(3, 8):
        for name, op in {"F_SETOWN": lambda: fcntl.fcntl(fd, 8, parent),
                         "F_SETOWN_EX": lambda: fcntl.fcntl(fd, 15, struct.pack("=ii", 1, parent)),
                         "F_SETSIG": lambda: fcntl.fcntl(fd, 10, int(signal.SIGKILL)),
                         "FIOSETOWN": lambda: fcntl.ioctl(fd, 0x8901, struct.pack("=i", parent))}.items():
            try:
                op()
                hits.append((name, fd))
            except OSError:
                pass
    # Our own process still works on itself (0 and our pid): the rule is "only on itself", not "never".
    own = [libc.syscall(302, 0, 7, None, ctypes.create_string_buffer(16)), libc.syscall(145, me),
           libc.syscall(140, 0, 0), libc.syscall(252, 1, 0), libc.syscall(204, 0, ctypes.sizeof(cpu0), cpu0)]
    print("HITS", hits, "OWN", ["ok" if value >= 0 else "denied" for value in own])
""")


def _trusted_side_states(executor) -> dict[int, tuple]:
    server = _server(executor).process.pid
    return {pid: _state(pid) for pid in [server, *_children_of(server)]}


def _settled_trusted_side_states(executor, within_s: float = 10.0) -> dict[int, tuple]:
    """The trusted side's states once two readings 0.2 s apart agree: a spare still hardening changes its limits and
    scheduling, and a fixed pause for it (0.3 s) was too short on a loaded machine."""
    deadline = time.monotonic() + within_s
    states = _trusted_side_states(executor)
    while time.monotonic() < deadline:
        time.sleep(0.2)
        again = _trusted_side_states(executor)
        if again == states:
            break
        states = again
    return states


@x86_64_only
@pytest.mark.parametrize("mode", ["full", "degraded"])
def test_no_pid_taking_call_reaches_another_process(executor, degraded, mode):
    target = executor if mode == "full" else degraded
    target.run(job(RIGHT_ADD))  # the runner and the spares exist
    before = _settled_trusted_side_states(target)  # the spares have finished hardening (their limits are set)
    attack = target.run(job(PID_ATTACKS, timeout_s=20))
    assert_failed(attack)
    assert "HITS []" in attack.stdout, attack.stdout
    assert "OWN ['ok', 'ok', 'ok', 'ok', 'ok']" in attack.stdout, attack.stdout
    after = _trusted_side_states(target)
    for pid in set(before) & set(after):  # the fork server, the runner, the spares that were not used
        assert before[pid] == after[pid], pid
    nxt = target.run(job(RIGHT_ADD, timeout_s=20))  # the spare that waited runs this one (20 s: a loaded host)
    assert nxt.status is ExecutionStatus.PASSED, nxt.reason


# With seccomp off (Lambda without the filter, or a kernel without it), the same calls do reach the
# trusted runner and the spare: the runner's check after the job and the fork server's check of its
# spares must turn that into the model's failure and a clean next job.
LOWER_THE_RUNNERS_LIMITS = WRONG_ADD + textwrap.dedent("""
    import os, resource
    me, parent = os.getpid(), os.getppid()
    for pid in range(max(2, me - 40), me + 40):
        if pid in (me, parent):
            continue
        for which, value in ((resource.RLIMIT_NOFILE, 8), (resource.RLIMIT_AS, 64 << 20)):
            try:
                resource.prlimit(pid, which, (value, value))
            except OSError:
                pass
        try:
            os.setpriority(os.PRIO_PROCESS, pid, 19)
        except OSError:
            pass
""")
KILL_THE_RUNNER = WRONG_ADD + textwrap.dedent("""
    import os, signal
    me, parent = os.getpid(), os.getppid()
    for pid in range(max(2, me - 40), me + 40):
        if pid not in (me, parent):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
""")

# Stopped, a waiting child keeps its limits and scheduling: only its state tells it will never run the job.
STOP_THE_OTHERS = KILL_THE_RUNNER.replace("signal.SIGKILL", "signal.SIGSTOP")


@DEGRADED_UID_GROUP
@pytest.mark.parametrize(
    "payload", [LOWER_THE_RUNNERS_LIMITS, KILL_THE_RUNNER, STOP_THE_OTHERS], ids=["limits", "kill", "stop"]
)
def test_an_attack_on_the_trusted_side_is_the_models_failure(degraded_without_seccomp, payload):
    executor = degraded_without_seccomp
    for _ in range(2):
        honest = executor.run(job(RIGHT_ADD))
        assert honest.status is ExecutionStatus.PASSED, honest.reason
        attack = executor.run(job(payload, timeout_s=3))
        # Never `error`: the model caused it. A stopped runner never answers: a timeout, also a 0 (a runner
        # whose pid is out of the payload's reach runs the tests: failed).
        stopped_runner = payload is STOP_THE_OTHERS and attack.status is ExecutionStatus.TIMEOUT
        assert_failed(attack, ExecutionStatus.TIMEOUT if stopped_runner else ExecutionStatus.FAILED)
        for _ in range(2):  # the tampered runner and spare were replaced, not used
            nxt = executor.run(job(RIGHT_ADD, timeout_s=20))
            assert nxt.status is ExecutionStatus.PASSED, nxt.reason


@DEGRADED_UID_GROUP
@pytest.mark.parametrize("sig", ["SIGKILL", "SIGSTOP"])
def test_a_job_that_kills_or_stops_its_fork_server_fails_as_the_models_doing(degraded_without_seccomp, sig):
    """With seccomp off and one uid, the job can signal its own fork server. Before, losing the fork server
    made the job an infrastructure `error`: a wrong answer excluded from GRPO instead of scored 0."""
    executor = degraded_without_seccomp
    attack = executor.run(job(WRONG_ADD + f"import os, signal\nos.kill(os.getppid(), signal.{sig})\n", timeout_s=2))
    assert_failed(attack)
    assert "fork server was lost during the job" in attack.reason, attack.reason
    for _ in range(2):  # a fresh fork server takes the next jobs
        assert executor.run(job(RIGHT_ADD)).status is ExecutionStatus.PASSED


def test_a_lost_fork_server_stays_an_error_where_the_job_cannot_signal_it():
    """Seccomp on (signals only to the job's own pid) or a uid of the job's own: the job could not have done it."""
    from rewardpipe.execution.sandbox import _job_can_signal_its_fork_server

    shared_uid = "off: fork server is not root, children keep its uid"
    assert _job_can_signal_its_fork_server({"uid": shared_uid, "seccomp": "off: disabled by configuration"})
    assert not _job_can_signal_its_fork_server({"uid": shared_uid, "seccomp": "on: no exec, ..."})
    assert not _job_can_signal_its_fork_server({"uid": "on: 19285568", "seccomp": "off: unavailable"})
    assert not _job_can_signal_its_fork_server({})


@DEGRADED_UID_GROUP
def test_a_correct_answer_after_an_attack_on_the_runner_is_not_scored_by_a_poisoned_runner(degraded_without_seccomp):
    """The attack comes with a *right* answer; the runner it lowered is gone before the next job."""
    executor = degraded_without_seccomp
    executor.run(job(LOWER_THE_RUNNERS_LIMITS.replace(WRONG_ADD, RIGHT_ADD)))
    for _ in range(3):
        assert executor.run(job(RIGHT_ADD)).status is ExecutionStatus.PASSED


# --- 2. SysV IPC and POSIX message queues -------------------------------------------------------------

IPC_ATTACKS = WRONG_ADD + textwrap.dedent("""
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    IPC_CREAT = 0o1000
    made = []
    for name, call in {
        "shmget": lambda: libc.syscall(29, 0x5EED, 420 << 20, IPC_CREAT | 0o666),
        "shmget_private": lambda: libc.syscall(29, 0, 4096, IPC_CREAT | 0o600),
        "msgget": lambda: libc.syscall(68, 0x5EED, IPC_CREAT | 0o666),
        "semget": lambda: libc.syscall(64, 0x5EED, 1, IPC_CREAT | 0o666),
        "mq_open": lambda: libc.syscall(240, b"rewardpipe-token", os.O_CREAT | os.O_RDWR, 0o666, None),
        "shmat_existing": lambda: libc.syscall(30, 0, None, 0),
        "msgsnd_existing": lambda: libc.syscall(69, 0, b"\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00x", 1, 0),
        "semop_existing": lambda: libc.syscall(65, 0, None, 0),
        "mq_timedsend": lambda: libc.syscall(242, 3, b"x", 1, 0, None),
    }.items():
        if call() >= 0:
            made.append(name)
    print("IPC", made)
    print("UID", os.getuid())
""")


def _host_ipc_objects() -> set[tuple[str, int, int]]:
    """The SysV objects of this host's IPC namespace: (kind, id, creator's uid) each."""
    found = set()
    for kind, id_column in (("shm", "shmid"), ("msg", "msqid"), ("sem", "semid")):
        try:
            with open(f"/proc/sysvipc/{kind}") as handle:
                header, *rows = (line.split() for line in handle)
        except OSError:
            continue
        ident, cuid = header.index(id_column), header.index("cuid")
        found |= {(kind, int(row[ident]), int(row[cuid])) for row in rows}
    return found


def _left_on_the_host(before: set, result) -> set:
    """The host's SysV objects made since ``before`` by the uid the job ran as (IPC_ATTACKS prints it). Only those:
    the suite's other process (a Lambda-mode test shares this namespace) or another program may make and remove
    objects of their own meanwhile, which a count of every object took for the job's (a flake)."""
    uid = int(result.stdout.split("UID ", 1)[1].split()[0])
    return {made for made in _host_ipc_objects() - before if made[2] == uid}


@x86_64_only
@pytest.mark.parametrize("mode", ["full", "degraded"])
def test_sysv_ipc_and_message_queues_are_denied(executor, degraded, mode):
    target = executor if mode == "full" else degraded
    before = _host_ipc_objects()
    attack = target.run(job(IPC_ATTACKS))
    assert_failed(attack)
    assert "IPC []" in attack.stdout, attack.stdout
    assert _left_on_the_host(before, attack) == set()
    assert_scorer_survives(target)


@x86_64_only
def test_without_seccomp_a_private_ipc_namespace_is_emptied_after_each_job():
    if os.geteuid() != 0:
        pytest.skip("the IPC namespace needs root")
    executor = make_executor(workers=1, disable=frozenset({"seccomp"}))
    try:
        assert "private IPC namespace" in executor.isolation()["ipc"], executor.isolation()["ipc"]
        before = _host_ipc_objects()
        writer = executor.run(job(IPC_ATTACKS))
        assert "shmget" in writer.stdout, writer.stdout  # without the filter the call works...
        assert _left_on_the_host(before, writer) == set()  # ...inside the worker's own namespace only
        reader = executor.run(
            job(
                RIGHT_ADD
                + textwrap.dedent("""
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            libc.syscall.restype = ctypes.c_long
            print("FOUND", [libc.syscall(29, 0x5EED, 0, 0) >= 0, libc.syscall(68, 0x5EED, 0) >= 0])
        """)
            )
        )
        assert reader.status is ExecutionStatus.PASSED
        assert "FOUND [False, False]" in reader.stdout, reader.stdout  # gone before the next job
    finally:
        executor.close()


# --- 3. every error unittest reports, at any fixture level, fails the run ------------------------------

HARD_CODED_ADD = "def add(a, b):\n    return {(1, 2): 3, (2, 2): 4}.get((a, b), 0)\n"
_TWO_TESTS = """
    def test_small(self):
        self.assertEqual(add(1, 2), 3)
    def test_equal(self):
        self.assertEqual(add(2, 2), 4)
"""
FIXTURE_CHECKS = {
    "tearDownClass": "class TestAdd(unittest.TestCase):\n    @classmethod\n    def tearDownClass(cls):\n"
    "        assert add(7, 8) == 15\n" + _TWO_TESTS,
    "setUpClass": "class TestAdd(unittest.TestCase):\n    @classmethod\n    def setUpClass(cls):\n"
    "        assert add(7, 8) == 15\n" + _TWO_TESTS,
    "tearDownModule": "def tearDownModule():\n    assert add(7, 8) == 15\n\nclass TestAdd(unittest.TestCase):"
    + _TWO_TESTS,
    "setUpModule": "def setUpModule():\n    assert add(7, 8) == 15\n\nclass TestAdd(unittest.TestCase):" + _TWO_TESTS,
    "addClassCleanup": "def check():\n    assert add(7, 8) == 15\n\nclass TestAdd(unittest.TestCase):\n"
    "    @classmethod\n    def setUpClass(cls):\n        cls.addClassCleanup(check)\n" + _TWO_TESTS,
    "addModuleCleanup": "def check():\n    assert add(7, 8) == 15\n\ndef setUpModule():\n"
    "    unittest.addModuleCleanup(check)\n\nclass TestAdd(unittest.TestCase):" + _TWO_TESTS,
    "addCleanup": "class TestAdd(unittest.TestCase):\n    def setUp(self):\n"
    "        self.addCleanup(lambda: self.assertEqual(add(7, 8), 15))\n" + _TWO_TESTS,
    "subTest": "class TestAdd(unittest.TestCase):\n    def test_small(self):\n"
    "        for a, b, want in ((1, 2, 3), (7, 8, 15)):\n            with self.subTest(a=a, b=b):\n"
    "                self.assertEqual(add(a, b), want)\n    def test_equal(self):\n"
    "        self.assertEqual(add(2, 2), 4)\n",
    "module state": "STATE = {}\n\ndef setUpModule():\n    STATE['seven'] = add(3, 4)\n\n"
    "class TestAdd(unittest.TestCase):\n    def test_small(self):\n"
    "        self.assertEqual(add(1, 2), 3)\n    def test_equal(self):\n"
    "        self.assertEqual(STATE['seven'], 7)\n",
}


@pytest.mark.parametrize("fixture", sorted(FIXTURE_CHECKS))
def test_a_failure_at_any_fixture_level_fails_the_run(executor, fixture):
    tests = "import unittest\n\n" + FIXTURE_CHECKS[fixture]
    honest = executor.run(job(RIGHT_ADD, tests=tests))
    assert honest.status is ExecutionStatus.PASSED, (fixture, honest.reason)  # the fixtures really ran
    forged = executor.run(job(HARD_CODED_ADD, tests=tests))
    assert forged.status is ExecutionStatus.FAILED, (fixture, forged.status, forged.reason)
    # A class or module fixture failing fails the whole run; a subtest, a cleanup or shared state one test.
    assert forged.passed == (1 if fixture in ("subTest", "module state") else 0), (fixture, forged.reason)
    inprocess = executor.run(job(HARD_CODED_ADD, tests=tests, trust_mode="inprocess"))
    assert inprocess.status is ExecutionStatus.FAILED, (fixture, inprocess.reason)


# --- 5. correct code is never scored 0 for the shape of its tests ---------------------------------------


def _unit(body: str) -> str:
    return (
        "import contextlib, io, logging, math, unittest, warnings\nfrom unittest import mock\n\n"
        "class T(unittest.TestCase):\n" + textwrap.indent(textwrap.dedent(body), "    ")
    )


SHAPES = {
    # name: (tests, entry point, right code, wrong code)
    "assertWarns": (
        _unit("""
        def test_warns(self):
            with self.assertWarns(DeprecationWarning):
                self.assertEqual(old(2), 4)
            self.assertWarns(DeprecationWarning, old, 3)
        def test_regex(self):
            with self.assertWarnsRegex(UserWarning, "careful"):
                old(-1)
    """),
        "old",
        "import warnings\ndef old(x):\n    if x < 0:\n        warnings.warn('be careful')\n"
        "    else:\n        warnings.warn('old is deprecated', DeprecationWarning)\n    return 2 * x\n",
        "def old(x):\n    return 2 * x\n",
    ),
    "model warning class": (
        _unit("""
        def test_warns(self):
            with self.assertWarns(Loud):
                shout()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                shout()
            self.assertEqual([type(w.message).__name__ for w in caught], ["Loud"])
    """),
        "shout",
        "import warnings\nclass Loud(RuntimeWarning):\n    pass\ndef shout():\n    warnings.warn('hey', Loud)\n",
        "class Loud(RuntimeWarning):\n    pass\ndef shout():\n    return None\n",
    ),
    "assertLogs": (
        _unit("""
        def test_logs(self):
            with self.assertLogs("solution", level="INFO") as logs:
                self.assertEqual(work(3), 3)
            self.assertEqual(logs.output, ["INFO:solution:working on 3"])
        def test_root(self):
            with self.assertLogs(level="WARNING"):
                work(-1)
        def test_quiet(self):
            with self.assertNoLogs("solution", level="WARNING"):
                work(1)
    """),
        "work",
        "import logging\nlog = logging.getLogger(__name__)\ndef work(x):\n    if x < 0:\n"
        "        logging.warning('negative')\n    else:\n        log.info('working on %s', x)\n    return x\n",
        "import logging\ndef work(x):\n    logging.getLogger(__name__).warning('working on %s', x)\n    return x\n",
    ),
    "redirect_stdout": (
        _unit("""
        def test_prints(self):
            buffer = io.StringIO()
            with contextlib.redirect_stdout(buffer):
                greet("Ada")
            self.assertEqual(buffer.getvalue(), "Hello, Ada!\\n")
        def test_patched(self):
            with mock.patch("sys.stdout", new_callable=io.StringIO) as out:
                greet("Bo")
            self.assertIn("Bo", out.getvalue())
        def test_stderr(self):
            buffer = io.StringIO()
            with contextlib.redirect_stderr(buffer):
                greet("")
            self.assertEqual(buffer.getvalue(), "no name\\n")
    """),
        "greet",
        "import sys\ndef greet(name):\n    if not name:\n        print('no name', file=sys.stderr)\n"
        "    else:\n        print(f'Hello, {name}!')\n",
        "def greet(name):\n    return f'Hello, {name}!'\n",
    ),
    "assertIs argument": (
        _unit("""
        def test_same_list(self):
            data = [3, 1, 2]
            self.assertIs(sort_in_place(data), data)
            self.assertEqual(data, [1, 2, 3])
        def test_same_string(self):
            word = "".join(["lo", "ng"])
            self.assertIs(sort_in_place(word), word)
    """),
        "sort_in_place",
        "def sort_in_place(xs):\n    if isinstance(xs, list):\n        xs.sort()\n    return xs\n",
        "def sort_in_place(xs):\n    return sorted(xs) if isinstance(xs, list) else ''.join(xs)\n",
    ),
    "NaN in a list": (
        _unit("""
        def test_nan_passed_through(self):
            missing = float("nan")
            self.assertEqual(keep([1.0, missing]), [1.0, missing])
        def test_math_nan(self):
            self.assertEqual(gaps(), [0.0, math.nan])
    """),
        "keep",
        "import math\ndef keep(xs):\n    return list(xs)\ndef gaps():\n    return [0.0, math.nan]\n",
        "def keep(xs):\n    return [0.0 for x in xs]\ndef gaps():\n    return [0.0, 0.0]\n",
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_test_shape_works_across_the_boundary(executor, shape):
    tests, entry_point, right, wrong = SHAPES[shape]
    good = executor.run(ExecutionJob(code=right, tests=tests, entry_point=entry_point))
    assert good.status is ExecutionStatus.PASSED, (shape, good.reason)
    bad = executor.run(ExecutionJob(code=wrong, tests=tests, entry_point=entry_point))
    assert bad.status is ExecutionStatus.FAILED, (shape, bad.status, bad.reason)
    assert bad.passed < bad.total


@pytest.mark.parametrize(
    "tests",
    [
        _unit("""
        def test_patched(self):
            with mock.patch("solution.helper", return_value=10):
                self.assertEqual(twice(), 20)
    """),
        "from solution import twice\nimport unittest\n\nclass T(unittest.TestCase):\n"
        "    def test_it(self):\n        self.assertEqual(twice(), 2)\n",
        _unit("""
        def test_patched_object(self):
            import solution
            self.assertEqual(solution.twice(), 2)
    """),
    ],
    ids=["mock.patch", "import at load", "import in a test"],
)
def test_tests_that_reach_into_the_models_module_are_a_loud_error(executor, tests):
    code = "def helper():\n    return 1\ndef twice():\n    return 2 * helper()\n"
    result = executor.run(ExecutionJob(code=code, tests=tests, entry_point="twice"))
    assert result.status is ExecutionStatus.ERROR and not result.model_fault, (result.status, result.reason)
    assert "solution" in result.reason and "inprocess" in result.reason, result.reason
    inprocess = executor.run(ExecutionJob(code=code, tests=tests, entry_point="twice", trust_mode="inprocess"))
    assert inprocess.status is not ExecutionStatus.ERROR or "solution" not in inprocess.reason


def test_doctor_flags_weak_assertions_and_shapes_split_trust_cannot_run():
    from rewardpipe.doctor import weak_test_shapes
    from rewardpipe.models import Task

    def findings(tests: str, trust_mode: str = "split") -> list[str]:
        return weak_test_shapes(
            Task(
                task_id="t",
                prompt="p",
                spec=["s"],
                entry_point="add",
                tests=tests,
                reference_solution=RIGHT_ADD,
                trust_mode=trust_mode,
            )
        )

    weak = _unit("""
        def test_a(self):
            self.assertTrue(add(1, 2), 3)
            self.assertFalse(add(1, 1), 0)
            self.assertIsNotNone(add(0, 0), [0])
        def test_b(self):
            assert add(2, 2), 4
            assert (add(2, 2) == 4, "message")
    """)
    found = findings(weak)
    assert len(found) == 5 and all("tests line" in item for item in found), found
    assert sum("assertEqual" in item for item in found) == 3 and sum("always true" in item for item in found) == 1
    fine = _unit("""
        def test_a(self):
            self.assertTrue(add(1, 2) == 3, "add(1, 2) should be 3")
            self.assertTrue(add(1, 2) == 3, f"got {add(1, 2)}")
            assert add(2, 2) == 4, "two and two"
            self.assertEqual(add(2, 2), 4)
    """)
    assert findings(fine) == []
    reaching = _unit("""
        def test_a(self):
            with mock.patch("solution.helper", return_value=1):
                self.assertEqual(add(1, 2), 3)
            import solution
            from solution import add as plus
    """)
    assert len(findings(reaching)) == 3 and all("trust_mode='inprocess'" in item for item in findings(reaching))
    assert findings(reaching, trust_mode="inprocess") == []


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x0c", "\x0b", "\x85", "\x1c", "\x1d", "\x1e"])
def test_a_raw_line_separator_inside_a_string_literal_in_a_code_fence_is_kept(executor, separator):
    from rewardpipe.parsing import extract_code

    turn = (
        'Here it is:\n```python\ndef add(a, b):\n    marker = "x' + separator + 'y"\n'
        "    return a + b if len(marker) == 3 else 0\n```\n"
    )
    code = extract_code(turn)
    assert separator in code
    assert executor.run(job(code)).status is ExecutionStatus.PASSED


# --- 4. what the model hands over is materialised before the trusted side compares it -------------------

# The model yields candidates and records, in its own process, how far the tests iterated; the tests stop
# at the hidden value. It then answers a later question about the same hidden value from that record.
ITERATION_ORACLE = textwrap.dedent("""
    seen = []
    def candidates(n):
        for value in range(100):
            seen.append(value)
            yield value
    def add(a, b):
        return seen[-1] if seen else -1
""")
ORACLE_TESTS = textwrap.dedent("""
    import unittest
    class T(unittest.TestCase):
        def test_1_membership(self):
            self.assertIn(37, candidates(0))
        def test_2_value(self):
            self.assertEqual(add(30, 7), 37)
""")


def test_where_the_tests_stop_iterating_tells_the_model_nothing(executor):
    result = executor.run(ExecutionJob(code=ITERATION_ORACLE, tests=ORACLE_TESTS, entry_point="add"))
    assert result.status is ExecutionStatus.FAILED and result.passed == 1, result.reason  # membership only


@pytest.mark.parametrize(
    "code, tests",
    [
        ("def gen(n):\n    yield from range(n)\n", "assert list(gen(5000)) == list(range(5000))"),
        (
            "import itertools\ndef gen(n):\n    return itertools.count()\n",
            "import itertools\nassert list(itertools.islice(gen(0), 3)) == [0, 1, 2]",
        ),
        (
            "def gen(n):\n    yield 1\n    raise ValueError('boom')\n",
            "got = []\ntry:\n    for x in gen(0):\n        got.append(x)\nexcept ValueError:\n"
            "    got.append('raised')\n"
            "assert got == [1, 'raised']",
        ),
        (
            "class Bag:\n    def __iter__(self):\n        return iter([3, 1, 2])\ndef gen(n):\n    return Bag()\n",
            "assert sorted(gen(0)) == [1, 2, 3] and 2 in gen(0) and 9 not in gen(0)",
        ),
    ],
)
def test_model_iterables_still_iterate_as_in_one_process(executor, code, tests):
    check = "def check(candidate):\n" + textwrap.indent(tests, "    ") + "\n"
    result = executor.run(ExecutionJob(code=code, tests=check, entry_point="gen", tests_format="check"))
    assert result.status is ExecutionStatus.PASSED, result.reason


@x86_64_only
@pytest.mark.parametrize("mode", ["full", "degraded"])
def test_no_file_system_watch_can_be_set(executor, degraded, mode):
    target = executor if mode == "full" else degraded
    code = WRONG_ADD + textwrap.dedent("""
        import ctypes, fcntl, os
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        made = [name for name, call in {
            "inotify_init": lambda: libc.syscall(253), "inotify_init1": lambda: libc.syscall(294, 0),
            "fanotify_init": lambda: libc.syscall(300, 0, 0)}.items() if call() >= 0]
        try:
            fd = os.open(".", os.O_RDONLY)
            fcntl.fcntl(fd, 1026, 0x80000001)  # F_NOTIFY: DN_ACCESS | DN_MULTISHOT
            made.append("dnotify")
        except OSError:
            pass
        print("WATCHES", made)
    """)
    result = target.run(job(code))
    assert_failed(result)
    assert "WATCHES []" in result.stdout, result.stdout


# --- 6. Nova single-turn: a sample that hangs is the model's timeout, never the group mean ---------------


def test_a_hanging_sample_scores_zero_under_the_neutral_error_reward(executor):
    import time as clock

    from rewardpipe.single_turn import score_samples

    tests = (
        "import unittest\nclass T(unittest.TestCase):\n    def test_it(self):\n        self.assertEqual(add(1, 2), 3)\n"
    )

    def sample(sample_id: str, code: str) -> dict:
        return {
            "id": sample_id,
            "messages": [
                {"role": "user", "content": "Write add."},
                {"role": "assistant", "content": f"```python\n{code}```\n"},
            ],
            "metadata": {"reference_answer": {"tests": tests, "entry_point": "add", "timeout_s": 1.2}},
        }

    hang = "def add(a, b):\n    while True:\n        pass\n"
    batch = [sample("hang-1", hang), sample("right", RIGHT_ADD), sample("wrong", WRONG_ADD), sample("hang-2", hang)]
    # Two lanes and time for each hang's own 1.2 s limit: the second hang must run all of it (not be cut
    # short where a first wave's hang used the time, and then excused as an infrastructure error).
    outputs = score_samples(
        batch,
        "code_correctness",
        executor=executor,
        workers=2,
        deadline=clock.monotonic() + 2.6,
        error_reward="neutral",
    )
    scores = {out["id"]: out["aggregate_reward_score"] for out in outputs}
    flags = {out["id"]: {m["name"]: m["value"] for m in out["metrics_list"]}.get("reward_error") for out in outputs}
    for hung in ("hang-1", "hang-2"):
        assert scores[hung] == 0.0 and flags[hung] == 0, outputs
    assert scores["right"] > scores["wrong"]


# --- 9. disk space no walk of the job's directory sees ------------------------------------------------

HIDDEN_SPACE = WRONG_ADD + textwrap.dedent("""
    import ctypes, errno, os
    libc = ctypes.CDLL(None, use_errno=True)
    held = []
    fd = os.open("reserve", os.O_CREAT | os.O_RDWR)
    if libc.fallocate(fd, 1, ctypes.c_long(0), ctypes.c_long(512 << 20)) == 0:  # FALLOC_FL_KEEP_SIZE
        held.append("fallocate-keep-size")
    if libc.fallocate(fd, 0, ctypes.c_long(0), ctypes.c_long(512 << 20)) == 0:
        held.append("fallocate")
    os.unlink("reserve")
    try:
        os.close(os.open(".", os.O_TMPFILE | os.O_WRONLY))
        held.append("O_TMPFILE")
    except OSError:
        pass
    try:
        os.posix_fallocate(os.open("emulated", os.O_CREAT | os.O_RDWR), 0, 512 << 20)
        held.append("posix_fallocate")
    except OSError:
        pass
    import tempfile
    with tempfile.TemporaryFile() as handle:  # still works: falls back to a named, unlinked file
        handle.write(b"ok")
    print("HELD", held, "SIZE", os.path.getsize("emulated"))
""")


@pytest.mark.parametrize("mode", ["full", "degraded"])
def test_no_preallocated_or_unnamed_space(executor, degraded, mode):
    target = executor if mode == "full" else degraded
    result = target.run(job(HIDDEN_SPACE, timeout_s=20))
    assert result.status is ExecutionStatus.FAILED and result.passed == 0, (result.status, result.reason)
    assert "HELD []" in result.stdout, result.stdout  # posix_fallocate's fallback hit RLIMIT_FSIZE instead
    assert_scorer_survives(target)


def test_the_degraded_attack_loop_script_runs_and_counts_no_wrong_verdict():
    """scripts/degraded_attack_loop.py (the loop behind the closing note's race figures) still runs."""
    import subprocess
    import sys
    from pathlib import Path

    if os.geteuid() != 0:
        pytest.skip("needs root to start the fork servers as another uid")
    script = Path(__file__).resolve().parents[2] / "scripts" / "degraded_attack_loop.py"
    done = subprocess.run([sys.executable, str(script), "--rounds", "1"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "8 jobs, 0 wrong verdicts" in done.stdout
