"""Issue 22 item 0: runs interrupted or still being written, and a disk that fills up.

* `monitor` and `report` on a run still being written judge only its finished steps (a step is finished
  once `run` wrote its completion marker, the whole run once the manifest has ``finished_at``: see
  rewardpipe.store), say the run is in progress, and write no alarm object and no triage from a partial
  step;
* killed after a step's alarms went out and before the state said so, a resumed run does not raise them
  again; killed after the state committed them and before they went out, the resumed run delivers them;
* a full disk ends in a spill file, or a count of what was lost, and a --resume hint, never in a bare
  "No space left on device" (a real tmpfs of 64 KiB in a private mount namespace where one can be made,
  else ENOSPC injected into the store's writes).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from rewardpipe.store import LocalStore
from tests.cli.conftest import BUNDLED_TASKS

CLI = [sys.executable, "-c", "import sys; from rewardpipe.cli import app; app(sys.argv[1:])"]


def run_args(out, run_id="exp", *extra, steps=3, k=4, groups=3):
    return (
        "run",
        "--tasks",
        BUNDLED_TASKS,
        "--steps",
        steps,
        "--group-size",
        k,
        "--groups-per-step",
        groups,
        "--out",
        out,
        "--run-id",
        run_id,
        "--json",
        *extra,
    )


def alarm_objects(store: LocalStore, run_id="exp") -> list[str]:
    return store.list_keys(f"runs/{run_id}/alarms/")


def alarm_step(key: str) -> int:
    return int(key.split("/step=")[1].split("/")[0])


def no_bug(result) -> None:
    assert "unexpected" not in result.output and "Traceback" not in result.output, result.output[-2000:]


# -- a run still being written -------------------------------------------------------------------------


def as_if_still_writing(store: LocalStore, run_id: str, last_step: int, keep: int) -> None:
    """The store as `run` leaves it while writing ``last_step``: the manifest not finished, no completion
    marker for that step, only ``keep`` of its record files written."""
    manifest = store.get_json(f"runs/{run_id}/manifest.json")
    manifest["finished_at"] = None
    store.put_json(f"runs/{run_id}/manifest.json", manifest)
    (store.root / "runs" / run_id / "finished" / f"step={last_step}.json").unlink()
    files = sorted((store.root / "runs" / run_id / f"step={last_step}").rglob("*.json"))
    for path in files[keep:]:
        path.unlink()
    for folder in ("alarms", "monitor"):
        shutil.rmtree(store.root / "runs" / run_id / folder, ignore_errors=True)
    (store.root / "runs" / run_id / "triage.jsonl").unlink(missing_ok=True)


def test_monitor_and_report_judge_only_the_finished_steps_of_a_run_being_written(cli, tmp_path):
    """Before: `monitor` judged the partial step and wrote dead_component alarm objects the complete run
    never raises, and `report` wrote a triage from the partial run, unwarned."""
    assert cli(*run_args(tmp_path, k=8, groups=5, steps=3)).exit_code == 0
    store = LocalStore(tmp_path)
    as_if_still_writing(store, "exp", last_step=2, keep=9)  # one rollout in most groups: "dead" everywhere

    watched = cli("monitor", tmp_path, "--json")
    no_bug(watched)
    data = json.loads(watched.stdout)
    assert watched.exit_code == 0 and [s["step"] for s in data["steps"]] == [0, 1]
    assert data["in_progress"] is True and data["unfinished_steps"] == [2]
    assert "still being written" in watched.stderr and "step(s) 2 not finished" in watched.stderr
    assert not [k for k in alarm_objects(store) if "/step=2/" in k]

    refused = cli("monitor", tmp_path, "--json", "--step", 2)
    assert refused.exit_code == 1 and "step 2 is not finished" in refused.stderr

    reported = cli("report", tmp_path, "--json")
    no_bug(reported)
    report = json.loads(reported.stdout)
    assert reported.exit_code == 0 and report["steps"] == [0, 1] and report["in_progress"] is True
    assert "triage.jsonl not written" in reported.stderr and not (tmp_path / "runs" / "exp" / "triage.jsonl").exists()
    page = cli("report", tmp_path, "--out", tmp_path / "r.html")
    assert page.exit_code == 0 and "run still being written" in (tmp_path / "r.html").read_text()


def test_a_run_with_no_finished_step_yet_is_said_to_be_in_progress_and_nothing_is_written(cli, tmp_path):
    assert cli(*run_args(tmp_path, steps=1)).exit_code == 0
    store = LocalStore(tmp_path)
    as_if_still_writing(store, "exp", last_step=0, keep=5)
    for command in (("monitor", tmp_path), ("report", tmp_path, "--json")):
        result = cli(*command)
        assert result.exit_code == 1 and "no step is finished yet" in result.stderr
    assert alarm_objects(store) == [] and not (tmp_path / "runs" / "exp" / "triage.jsonl").exists()


STEPS_KILLED = 16  # enough that the run is still playing when step 2 is marked finished


def test_a_run_killed_mid_way_is_judged_on_its_finished_steps_then_resumed_whole(cli, tmp_path):
    """A real `run`, killed (SIGKILL) while it writes: monitor judges exactly the steps with a completion
    marker; the --resume finishes the run, and monitor then judges every step."""
    args = [str(a) for a in run_args(tmp_path, steps=STEPS_KILLED, k=2, groups=2)]
    process = subprocess.Popen(CLI + args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marker = tmp_path / "runs" / "exp" / "finished" / "step=2.json"
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process.poll() is None, "the run ended before it could be killed"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    store = LocalStore(tmp_path)
    progress = store.run_progress("exp")
    assert progress.in_progress and progress.finished and len(progress.finished) < STEPS_KILLED
    data = json.loads(cli("monitor", tmp_path, "--json").stdout)
    assert [s["step"] for s in data["steps"]] == progress.finished
    # Alarms only for checked steps: the finished ones and, if the kill landed between a step's check and
    # its completion marker, that one step (its records were all stored before it was checked).
    being_checked = max(progress.finished) + 1
    before = alarm_objects(store)
    assert {alarm_step(k) for k in before} <= {*progress.finished, being_checked}

    resumed = cli(*args, "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert set(before) <= set(alarm_objects(store))  # nothing raised before the kill is lost by the resume
    final = json.loads(cli("monitor", tmp_path, "--json").stdout)
    assert final["in_progress"] is False and [s["step"] for s in final["steps"]] == list(range(STEPS_KILLED))
    assert all(s["records"] == 4 for s in final["steps"])


# -- killed between the alarms and the state ------------------------------------------------------------

KILL_AFTER_ALARMS = """
import os, sys
from rewardpipe.monitoring import sinks
from rewardpipe.store import LocalStore
written = []
emit = sinks.StoreAlarmSink.emit
def emit_and_note(self, alarm):
    emit(self, alarm)
    written.append(alarm.step)
sinks.StoreAlarmSink.emit = emit_and_note
put_json = LocalStore.put_json
def put_json_or_die(self, key, obj):
    if key.endswith("monitor/state.json") and written:
        os._exit(137)  # killed after the step's alarm objects, before the state that says they went out
    return put_json(self, key, obj)
LocalStore.put_json = put_json_or_die
from rewardpipe.cli import app
app(sys.argv[1:])
"""

KILL_AFTER_COMMIT = """
import os, sys
from rewardpipe.store import LocalStore
put_json = LocalStore.put_json
def put_json_then_die(self, key, obj):
    put_json(self, key, obj)
    if key.endswith("monitor/state.json") and obj.get("pending"):
        os._exit(137)  # killed after the state committed the step's alarms, before any went out
LocalStore.put_json = put_json_then_die
from rewardpipe.cli import app
app(sys.argv[1:])
"""


def killed_run(tmp_path, script: str, *args) -> None:
    done = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 137, done.stderr[-2000:]


COLLAPSING = ("--collapse-from-step", 1)


def test_killed_after_the_alarm_objects_a_resumed_run_does_not_raise_them_again(cli, tmp_path):
    args = run_args(tmp_path, "exp", *COLLAPSING, steps=3, k=8, groups=5)
    killed_run(tmp_path, KILL_AFTER_ALARMS, *args)
    store = LocalStore(tmp_path)
    before = {key: store.get_bytes(key) for key in alarm_objects(store)}
    assert before  # the step's alarms went out before the kill
    steps_alarmed = {json.loads(v)["step"] for v in before.values()}

    resumed = cli(*args, "--resume")
    no_bug(resumed)
    assert resumed.exit_code == 0, resumed.output
    summary = json.loads(resumed.stdout)
    assert not [a for a in summary["alarms"] if a["step"] in steps_alarmed]  # not raised again
    assert "not raised again" in resumed.stderr
    assert {k: store.get_bytes(k) for k in before} == before
    assert store.get_json("runs/exp/monitor/state.json")["pending"] == []


def test_killed_after_the_state_committed_its_alarms_the_resumed_run_delivers_them_once(cli, tmp_path):
    args = run_args(tmp_path, "exp", *COLLAPSING, steps=3, k=8, groups=5)
    killed_run(tmp_path, KILL_AFTER_COMMIT, *args)
    store = LocalStore(tmp_path)
    pending = store.get_json("runs/exp/monitor/state.json")["pending"]
    assert pending and alarm_objects(store) == []  # owed, not yet delivered
    owed = {(a["step"], a["component"], a["kind"]) for entry in pending for a in entry["alarms"]}

    resumed = cli(*args, "--resume")
    no_bug(resumed)
    assert resumed.exit_code == 0, resumed.output
    raised = [(a["step"], a["component"], a["kind"]) for a in json.loads(resumed.stdout)["alarms"]]
    assert owed <= set(raised) and len(raised) == len(set(raised))  # delivered, each once
    assert {
        (
            json.loads(store.get_bytes(k))["step"],
            json.loads(store.get_bytes(k))["component"],
            json.loads(store.get_bytes(k))["kind"],
        )
        for k in alarm_objects(store)
    } >= owed
    assert store.get_json("runs/exp/monitor/state.json")["pending"] == []


# -- a full disk ----------------------------------------------------------------------------------------


def _tmpfs_shell() -> list[str] | None:
    """``unshare`` with a private mount namespace (as root, or as a user where user namespaces are on)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    probe = subprocess.run(
        [
            unshare,
            "-rm",
            "sh",
            "-c",
            'd=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs "$d" && umount "$d"; ok=$?; rmdir "$d"; exit $ok',
        ],
        capture_output=True,
    )
    return [unshare, "-rm", "sh", "-c"] if probe.returncode == 0 else None


TMPFS = _tmpfs_shell()
SMALL_DISK = (
    "run",
    "--tasks",
    BUNDLED_TASKS,
    "--steps",
    3,
    "--group-size",
    4,
    "--groups-per-step",
    3,
    "--run-id",
    "x",
    "--json",
)
ROLLOUTS = 3 * 4 * 3


def on_a_full_disk(tmp_path, spill: str) -> tuple[int, dict, str, int]:
    """`run` into a 64 KiB tmpfs (gone with its mount namespace, so what it holds is counted inside):
    (exit code, the JSON summary, stderr, record files stored)."""
    mount = tmp_path / "mnt"
    mount.mkdir()
    quoted = " ".join(f"'{a}'" for a in [*CLI, *map(str, SMALL_DISK), "--out", f"{mount}/store", "--spill", spill])
    script = (
        f"mount -t tmpfs -o size=64k tmpfs '{mount}' && cd '{mount}' && {quoted} > '{tmp_path}/out.json' "
        f"2> '{tmp_path}/err.txt'; echo $? > '{tmp_path}/rc'; "
        f"find '{mount}/store' -path '*/step=*' -name '*.json' ! -path '*/transcripts/*' "
        f"! -path '*/finished/*' | wc -l > '{tmp_path}/stored'"
    )
    subprocess.run([*TMPFS, script], check=True, timeout=300, env={**os.environ, "PYTHONPATH": os.getcwd()})
    read = lambda name: (tmp_path / name).read_text()  # noqa: E731
    return int(read("rc")), json.loads(read("out.json")), read("err.txt"), int(read("stored"))


@pytest.mark.skipif(TMPFS is None, reason="no private mount namespace here to mount a small tmpfs in")
def test_a_full_disk_spills_elsewhere_and_says_how_to_resume(tmp_path):
    """Before: the run ended with `No space left on device` and nothing else."""
    spill = tmp_path / "spill.jsonl"
    code, summary, err, stored = on_a_full_disk(tmp_path, str(spill))
    assert code == 1 and "unexpected" not in err and "Traceback" not in err
    spilled = len(spill.read_text().splitlines())
    assert spilled and stored + spilled == ROLLOUTS == stored + summary["unstored"]
    last = err.strip().splitlines()[-1]
    assert "no space left on the device" in err and str(spill) in last and "--resume" in last


@pytest.mark.skipif(TMPFS is None, reason="no private mount namespace here to mount a small tmpfs in")
def test_a_full_disk_that_holds_the_spill_too_counts_what_is_lost_and_stops(tmp_path):
    code, summary, err, stored = on_a_full_disk(tmp_path, "spill.jsonl")  # inside the full tmpfs
    assert code == 1 and "unexpected" not in err and "Traceback" not in err
    assert summary["lost"] and stored + summary["unstored"] + summary["lost"] < ROLLOUTS  # it stopped playing
    last = err.strip().splitlines()[-1]
    assert f"{summary['lost']} record(s)" in last and "LOST" in last and "not played" in last and "--resume" in last


def test_enospc_from_the_store_is_spilled_with_a_resume_hint(cli, tmp_path, monkeypatch):
    """The same rule where no tmpfs can be mounted: ENOSPC injected into the store's own writes."""
    import errno

    real_write = os.write
    store_root = str(tmp_path / "store")

    def write(fd, data):
        target = os.readlink(f"/proc/self/fd/{fd}") if os.path.exists(f"/proc/self/fd/{fd}") else ""
        if target.startswith(store_root) and "/step=1/" in target:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    result = cli(*run_args(tmp_path / "store", "exp", "--spill", tmp_path / "spill.jsonl", steps=2))
    no_bug(result)
    assert result.exit_code == 1
    spilled = [json.loads(line) for line in (tmp_path / "spill.jsonl").read_text().splitlines()]
    assert {r["step"] for r in spilled} == {1} and len(spilled) == 12
    assert "--resume" in result.stderr.strip().splitlines()[-1]
