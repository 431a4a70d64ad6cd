"""Fork servers started before the executor that uses them (the `rewardpipe` command starts them before
importing the rest of itself), and workers pinned one per CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import pytest

from rewardpipe.__main__ import exec_sandbox_plan
from rewardpipe.execution import ExecutionStatus, forkservers
from rewardpipe.execution.forkservers import SandboxConfig, SandboxConfigError, overrides_for
from rewardpipe.execution.sandbox import make_executor
from tests.execution.conftest import ADD_TESTS, job

RIGHT = "def add(a, b):\n    return a + b\n"
REPORTS_ITS_CPUS = (
    "import os, resource\n"
    "print(sorted(os.sched_getaffinity(0)), resource.getrlimit(resource.RLIMIT_NICE),"
    " resource.getrlimit(resource.RLIMIT_RTPRIO))\n" + RIGHT
)
CPUS = sorted(os.sched_getaffinity(0))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize(
    ("argv", "plan"),
    [
        (["exec", "--batch", "jobs.jsonl", "--workers", "3", "--json"], (None, {"workers": 3})),
        (["exec", "--batch=jobs.jsonl", "--workers=2", "--disable", "landlock, netns"], (None, {"workers": 2})),
        (["exec", "--code", "c.py", "--tests", "t.py", "--entry-point", "f"], (1, {})),
        (["exec", "--batch", "jobs.jsonl"], (None, {})),
    ],
)
def test_the_command_line_is_read_for_the_fork_servers_it_will_need(argv, plan):
    count, overrides = exec_sandbox_plan(argv)
    assert count == plan[0]
    assert overrides.get("workers") == plan[1].get("workers")
    if "--disable" in argv:
        assert overrides["disable"] == frozenset({"landlock", "netns"})


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["run", "--tasks", "x"],
        ["exec", "--isolation"],
        ["exec", "--help"],
        ["exec", "--batch"],  # the value is missing: typer says so, nothing is started
        ["exec", "--batch", "j", "--workers", "two"],
        ["exec", "--batch", "j", "--workers", "0"],
        ["exec", "--batch", "j", "--frobnicate"],
        ["--help"],
    ],
)
def test_anything_else_starts_nothing(argv):
    assert exec_sandbox_plan(argv) is None


def test_the_command_and_its_prestart_ask_for_the_same_settings():
    assert overrides_for(None, "") == {}
    assert overrides_for(2, " cgroup ,, landlock") == {"workers": 2, "disable": frozenset({"cgroup", "landlock"})}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0] != "Z"


def _gone(pids: list[int], within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(_alive(pid) for pid in pids):
            return True
        time.sleep(0.05)
    return False


def test_an_executor_with_the_same_settings_takes_the_prestarted_fork_servers_over():
    forkservers.prestart(2, workers=2)
    prestarted = forkservers._prestarted
    assert prestarted is not None and sorted(prestarted.workers) == [0, 1]
    pids = sorted(worker.process.pid for worker in prestarted.workers.values())
    executor = make_executor(workers=2)
    try:
        assert forkservers._prestarted is None  # taken, once
        results = list(executor.run_batch([job(RIGHT, id=str(i)) for i in range(4)], workers=2))
        assert [r.status for r in results] == [ExecutionStatus.PASSED] * 4
        assert sorted(worker.process.pid for worker in executor._workers) == pids
        assert executor.uid_base == prestarted.uid_base
    finally:
        executor.close()
    assert _gone(pids)


def test_a_fork_server_that_never_got_a_job_says_goodbye_cleanly():
    """One job on two prestarted fork servers: the second one's hello is never read, so closing the channel
    resets it. That is the scorer's goodbye (exit 0), not a crash (a traceback in its log and exit 1)."""
    forkservers.prestart(2, workers=2)
    executor = make_executor(workers=2)
    workers = list(executor._prestarted.values())
    try:
        assert executor.run(job(RIGHT)).status is ExecutionStatus.PASSED
    finally:
        executor.close()
    assert len(workers) == 2
    assert [worker.process.returncode for worker in workers] == [0, 0]


def test_fork_servers_closed_while_still_starting_say_goodbye_cleanly():
    """Closed at once, before either has said hello: each finds the channel gone when it sends its hello (a
    broken pipe), which is the scorer's goodbye too, not a crash."""
    forkservers.prestart(2, workers=2)
    executor = make_executor(workers=2)
    workers = list(executor._prestarted.values())
    executor.close()
    assert len(workers) == 2
    assert [worker.process.returncode for worker in workers] == [0, 0]


def test_an_executor_with_other_settings_stops_them_and_starts_its_own():
    forkservers.prestart(1, workers=1)
    prestarted = forkservers._prestarted
    assert prestarted is not None
    pids = [worker.process.pid for worker in prestarted.workers.values()]
    executor = make_executor(workers=1, disable=frozenset({"landlock"}))
    try:
        assert _gone(pids)
        result = executor.run(job(RIGHT))
        assert result.status is ExecutionStatus.PASSED
        assert result.isolation["landlock"].startswith("off")
        assert executor._workers[0].process.pid not in pids
    finally:
        executor.close()


def _worker_dirs(pid: int) -> list[str]:
    """The directories the fork servers of scorer ``pid`` live in (removed when each is stopped)."""
    return [name for name in os.listdir(tempfile.gettempdir()) if name.startswith(f"rewardpipe-sbx-{pid}-")]


def test_fork_servers_nobody_takes_are_stopped_at_exit():
    script = (
        "import os\n"
        "from rewardpipe.execution import forkservers\n"
        "forkservers.prestart(2, workers=2)\n"
        "print(os.getpid(), *(w.process.pid for w in forkservers._prestarted.workers.values()), flush=True)\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO, check=True
    )
    scorer, *pids = (int(pid) for pid in completed.stdout.split())
    assert len(pids) == 2
    assert _gone(pids)
    # Stopped by the scorer, not merely left to notice its end: their directories are gone with them.
    assert _worker_dirs(scorer) == []


def test_a_prestart_that_cannot_start_them_all_is_only_a_smaller_head_start(monkeypatch):
    real = forkservers._Worker
    made = []

    def second_has_no_room(*args, **kwargs):
        if made:
            raise OSError(28, "No space left on device")
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(forkservers, "_Worker", second_has_no_room)
    forkservers.prestart(2, workers=2)  # does not raise
    monkeypatch.setattr(forkservers, "_Worker", real)
    assert forkservers._prestarted is not None and list(forkservers._prestarted.workers) == [0]
    executor = make_executor(workers=2)
    try:
        results = list(executor.run_batch([job(RIGHT, id=str(i)) for i in range(4)], workers=2))
        assert [r.status for r in results] == [ExecutionStatus.PASSED] * 4
        assert made[0] in executor._workers  # the one that started was taken over, the other started anew
    finally:
        executor.close()


def test_a_forked_copy_neither_takes_nor_stops_its_parents_fork_servers():
    forkservers.prestart(2, workers=2)
    executor = make_executor(workers=2)
    try:
        list(executor.run_batch([job(RIGHT, id=str(i)) for i in range(2)], workers=2))
        forkservers.prestart(1, workers=1)  # and one more, not taken yet
        waiting = [worker.process.pid for worker in forkservers._prestarted.workers.values()]
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the copy: closing its executor and exiting must leave the parent's alone
            try:
                claimed = forkservers.claim(forkservers._prestarted.config)
                executor.close()
                forkservers._close_unclaimed()
                os.write(write, b"none" if claimed is None else b"took")
            finally:
                os._exit(0)
        os.close(write)
        answer = os.read(read, 10)
        os.close(read)
        os.waitpid(pid, 0)
        assert answer == b"none"
        results = list(executor.run_batch([job(RIGHT, id=str(i)) for i in range(4)], workers=2))
        assert [r.status for r in results] == [ExecutionStatus.PASSED] * 4
        assert all(_alive(pid) for pid in waiting)
        taken = make_executor(workers=1)
        try:
            assert taken.run(job(RIGHT)).status is ExecutionStatus.PASSED
            assert [worker.process.pid for worker in taken._workers] == waiting
        finally:
            taken.close()
    finally:
        executor.close()


CLAIM_SPY = """
import sys
from rewardpipe.execution import forkservers
real_claim = forkservers.claim
def claim(config):
    taken = real_claim(config)
    print("claimed", 0 if taken is None else len(taken.workers), file=sys.stderr, flush=True)
    return taken
forkservers.claim = claim
sys.argv = ["rewardpipe", *sys.argv[1:]]
from rewardpipe.__main__ import main
main()
"""


def test_the_command_runs_a_batch_on_fork_servers_it_started_first(tmp_path):
    batch = tmp_path / "jobs.jsonl"
    right = {"code": RIGHT, "tests": ADD_TESTS, "entry_point": "add"}
    lines = [{**right, "id": f"r{i}"} for i in range(3)]
    lines.append({**right, "id": "wrong", "code": "def add(a, b):\n    return a - b\n"})
    batch.write_text("".join(json.dumps(line) + "\n" for line in lines))
    completed = subprocess.run(
        [sys.executable, "-c", CLAIM_SPY, "exec", "--batch", str(batch), "--workers", "2", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert completed.returncode == 0, completed.stderr
    assert "claimed 2" in completed.stderr  # the executor took both over
    statuses = {json.loads(line)["id"]: json.loads(line)["status"] for line in completed.stdout.splitlines()}
    assert statuses == {"r0": "passed", "r1": "passed", "r2": "passed", "wrong": "failed"}


GC_SPY = """
import gc, sys
import rewardpipe.cli
def command_line(args):
    print("collector on:", gc.isenabled(), "command module imported:", "rewardpipe.cli.exec_cmd" in sys.modules)
rewardpipe.cli.main = command_line
sys.argv = ["rewardpipe", *sys.argv[1:]]
from rewardpipe.__main__ import main
main()
"""


def test_the_collector_is_off_only_while_the_command_starts(tmp_path):
    """Start-up runs with the garbage collector off (it would find nothing); the command itself, which
    may make cyclic garbage for hours, runs with it on."""
    completed = subprocess.run(
        [sys.executable, "-c", GC_SPY, "exec", "--batch", str(tmp_path / "jobs.jsonl"), "--workers", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert completed.returncode == 0, completed.stderr
    assert "collector on: True command module imported: True" in completed.stdout


def test_a_command_that_fails_before_its_jobs_leaves_no_fork_server(tmp_path):
    command = [sys.executable, "-m", "rewardpipe", "exec", "--batch", str(tmp_path / "missing.jsonl"), "--workers", "2"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO) as process:
        _, stderr = process.communicate(timeout=120)
    assert process.returncode == 1
    assert "batch file not found" in stderr
    assert _worker_dirs(process.pid) == []


def test_a_command_with_a_bad_option_value_leaves_no_fork_server():
    command = [sys.executable, "-m", "rewardpipe", "exec", "--batch", "x.jsonl", "--workers", "2", "--timeout", "soon"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO) as process:
        _, stderr = process.communicate(timeout=120)
    assert process.returncode == 2, stderr  # typer's usage error, before the command ran
    assert _worker_dirs(process.pid) == []


def test_pin_cpus_setting_is_read_from_the_environment():
    assert SandboxConfig.from_env({}).pin_cpus is True
    assert SandboxConfig.from_env({"REWARDPIPE_SANDBOX_PIN_CPUS": "0"}).pin_cpus is False
    with pytest.raises(SandboxConfigError, match="REWARDPIPE_SANDBOX_PIN_CPUS"):
        SandboxConfig.from_env({"REWARDPIPE_SANDBOX_PIN_CPUS": "yes"})


def test_a_pool_smaller_than_the_cpus_is_never_pinned():
    config = SandboxConfig()
    assert [config.cpu_for(i, len(CPUS)) for i in range(len(CPUS))] == CPUS
    assert config.cpu_for(len(CPUS), len(CPUS) + 1) is None  # beyond one per CPU: any CPU
    if len(CPUS) > 1:
        assert config.cpu_for(0, len(CPUS) - 1) is None
    assert SandboxConfig(pin_cpus=False).cpu_for(0, len(CPUS)) is None


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as fh:
        return [int(child) for child in fh.read().split()]


def _affinity_and_name(pid: int) -> tuple[set[int], str] | None:
    """None for a child that ended meanwhile (the fork server reaps the last job's between our reads)."""
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return os.sched_getaffinity(pid), fh.read().strip()
    except (ProcessLookupError, FileNotFoundError):
        return None


@pytest.mark.skipif(len(CPUS) < 2, reason="one CPU: pinned and unpinned cannot be told apart")
@pytest.mark.parametrize("pin", [True, False])
def test_a_pinned_workers_jobs_run_on_its_cpu_and_cannot_raise_their_priority(pin):
    executor = make_executor(workers=len(CPUS), pin_cpus=pin)
    try:
        results = list(executor.run_batch([job(REPORTS_ITS_CPUS, id=str(i)) for i in range(len(CPUS) * 2)]))
        assert all(r.status is ExecutionStatus.PASSED for r in results), [r.reason for r in results]
        for result in results:
            cpus_text, limits = result.stdout.strip().split("]", 1)
            cpus = json.loads(cpus_text + "]")
            assert limits.split() == ["(0,", "0)", "(0,", "0)"]  # RLIMIT_NICE, RLIMIT_RTPRIO: no raising priority
            if pin:
                assert result.isolation["cpu"] == (
                    f"pinned: CPU {cpus[0]}, for the fork server, its trusted runner and its children"
                )
                assert len(cpus) == 1
            else:
                assert result.isolation["cpu"].startswith("any")
                assert cpus == CPUS
        for worker in executor._workers:
            fork_server = worker.process.pid
            expected = {CPUS[worker.index]} if pin else set(CPUS)
            assert os.sched_getaffinity(fork_server) == expected
            for child in _children(fork_server):  # the trusted runner, the spares, the housekeeper
                seen = _affinity_and_name(child)
                if seen is None:
                    continue
                affinity, name = seen
                # The housekeeper waits on the kernel beside the jobs: any CPU.
                assert affinity == (set(CPUS) if name == "rp-housekeeper" else expected)
    finally:
        executor.close()


MOVES_ITSELF = (
    "import os\n"
    "try:\n"
    "    os.sched_setaffinity(0, set(range(os.cpu_count())))\n"
    "    print('moved')\n"
    "except PermissionError:\n"
    "    print('refused')\n" + RIGHT
)


@pytest.mark.skipif(len(CPUS) < 2, reason="one CPU: there is nowhere to move to")
def test_a_job_cannot_move_onto_another_workers_cpu():
    """A job free to change its own affinity could move its threads onto another worker's CPU and take it from
    the jobs pinned there (they cannot move away): seccomp refuses the call outright."""
    executor = make_executor(workers=len(CPUS))
    try:
        result = executor.run(job(MOVES_ITSELF))
        assert result.status is ExecutionStatus.PASSED
        assert result.isolation["cpu"].startswith("pinned")
        assert result.stdout.strip() == "refused"
    finally:
        executor.close()


@pytest.mark.skipif(len(CPUS) < 2, reason="one CPU: pinned and unpinned cannot be told apart")
def test_without_seccomp_the_workers_are_not_pinned():
    """Without seccomp nothing keeps a job from moving itself, so pinning would only trap its neighbours."""
    executor = make_executor(workers=len(CPUS), disable=frozenset({"seccomp"}))
    try:
        result = executor.run(job(REPORTS_ITS_CPUS))
        assert result.status is ExecutionStatus.PASSED
        assert (
            result.isolation["cpu"]
            == "any: not pinned (seccomp is off, so a job could move itself onto another worker's CPU)"
        )
        assert json.loads(result.stdout.split("]")[0] + "]") == CPUS
    finally:
        executor.close()


class _PinnedZygote:
    """What Zygote.keep_pinned reads and writes."""

    def __init__(self, cpu: int):
        self.cpu = cpu
        self.own_state = {"affinity": frozenset({cpu})}
        self.child_state = {"affinity": frozenset({cpu})}
        self.isolation = {"cpu": f"pinned: CPU {cpu}"}


def test_a_cgroup_join_that_resets_the_affinity_is_pinned_again_or_recorded(monkeypatch):
    from rewardpipe.execution.runtime import zygote

    # The join left the CPU set alone: nothing to do.
    state = _PinnedZygote(0)
    monkeypatch.setattr(zygote.os, "sched_getaffinity", lambda pid: {0})
    zygote.Zygote.keep_pinned(state)
    assert state.cpu == 0 and state.own_state["affinity"] == {0}
    # Reset to every CPU (older kernels, cgroup v2 cpuset): pinned again.
    calls = []
    monkeypatch.setattr(zygote.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(zygote.os, "sched_setaffinity", lambda pid, cpus: calls.append(set(cpus)))
    zygote.Zygote.keep_pinned(state)
    assert calls == [{0}] and state.cpu == 0

    # Its CPU is not allowed there: the children will run where the cgroup allows, and the checks expect that.
    def refuse(pid, cpus):
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(zygote.os, "sched_setaffinity", refuse)
    zygote.Zygote.keep_pinned(state)
    assert state.cpu is None
    assert state.own_state["affinity"] == state.child_state["affinity"] == {0, 1}
    assert state.isolation["cpu"].startswith("any")


def test_a_forked_copy_of_the_scorer_starts_with_its_own_dumpable_gate():
    """A non-root scorer's gate (jobs against fork servers still dumpable) counted the parent's jobs in a
    forked copy too, where nothing would ever end them: its first fork-server start waited forever."""
    gate = forkservers._DUMPABLE_STARTS
    with gate._condition:
        gate._jobs += 1  # a job in flight in another thread at the fork
        gate._spawning += 1
        try:
            child = os.fork()
            if child == 0:
                fresh = forkservers._DUMPABLE_STARTS
                os._exit(0 if (fresh is not gate and fresh._jobs == 0 and fresh._spawning == 0) else 1)
        finally:
            gate._jobs -= 1
            gate._spawning -= 1
    assert os.waitpid(child, 0)[1] == 0


def test_a_fork_server_that_never_turns_non_dumpable_is_not_waited_for_forever(monkeypatch):
    gate = forkservers._DumpableStarts()
    monkeypatch.setattr(forkservers.os, "geteuid", lambda: 65534)  # the gate only acts for a non-root scorer
    monkeypatch.setattr(forkservers, "_dumpable_by_us", lambda pid: True)  # still dumpable (or its pid reused)
    gate._started[12345] = time.monotonic() - forkservers.DUMPABLE_WAIT_S - 1
    with gate.job():
        assert gate._jobs == 1
    assert gate._started == {}
