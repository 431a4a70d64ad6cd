"""Issue 22 item 1: a store's layout is not trusted. A stray zero-padded step folder, FIFOs, sockets, links
(to files and to folders), unreadable files and folders where files should be: every reader (monitor,
report, show, resume, the fast columnar reader) applies the same rules (rewardpipe.store), names what it
skipped, never counts a step twice, never hangs, and no writer follows a link out of the store."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

import rewardpipe.monitoring.fastread as fastread
from rewardpipe.cli import app
from rewardpipe.models import Record
from rewardpipe.store import LocalStore, StoreError, UnreadableObject, UnsafePath, record_key, transcript_key
from tests.cli.conftest import BUNDLED_TASKS
from tests.monitoring.test_fast_path import varied_run

RUN = "r1"
HANG = 30.0  # seconds: a reader still busy after this is hanging (a FIFO read waits for ever)


def invoke(*args, fast: bool = True, monkeypatch=None):
    """The CLI in a daemon thread, so a reader that hangs fails the test instead of the suite."""
    if not fast:
        monkeypatch.setattr(fastread, "read_store_batch", lambda *a: None)
    box = {}
    thread = threading.Thread(
        target=lambda: box.update(result=CliRunner().invoke(app, [str(a) for a in args])), daemon=True
    )
    thread.start()
    thread.join(HANG)
    assert not thread.is_alive(), f"`rewardpipe {' '.join(map(str, args))}` still running after {HANG:.0f}s"
    if not fast:
        monkeypatch.undo()
    return box["result"]


def no_bug(result) -> None:
    assert "unexpected" not in result.output and "Traceback" not in result.output, result.output[-2000:]


@pytest.fixture
def store(tmp_path):
    store = LocalStore(tmp_path / "store")
    for rec in varied_run(3, run=RUN, steps=3, groups=6, k=4):
        store.put_record(Record.model_validate(rec))
    return store


def a_record_path(store: LocalStore, step: int = 1) -> Path:
    return next(p for p in sorted((store.root / "runs" / RUN / f"step={step}").rglob("*.json")))


def monitored(store, *extra, fast=True, monkeypatch=None) -> tuple[dict, str]:
    result = invoke("monitor", store.root, "--json", "--no-write-alarms", *extra, fast=fast, monkeypatch=monkeypatch)
    no_bug(result)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result.stderr


def records_per_step(data: dict) -> dict[int, int]:
    return {s["step"]: s["records"] for s in data["steps"]}


# -- one step folder per step ----------------------------------------------------------------------


@pytest.mark.parametrize("stray", ["step=01", "step=001", "step=+1", "step=1 ", "step=99999999999"])
def test_a_stray_step_folder_is_reported_and_never_counted(store, stray, monkeypatch):
    """Before: `step=01` beside `step=1` made monitor and report count step 1 twice."""
    clean, _ = monitored(store)
    shutil.copytree(store.root / "runs" / RUN / "step=1", store.root / "runs" / RUN / stray)
    for fast in (True, False):
        data, err = monitored(store, fast=fast, monkeypatch=monkeypatch)
        assert records_per_step(data) == records_per_step(clean)
        assert stray in err and "not a step folder" in err
    report = invoke("report", store.root, "--json", "--no-triage-file")
    no_bug(report)
    assert report.exit_code == 0 and json.loads(report.stdout)["records"] == sum(records_per_step(clean).values())


def test_a_stray_step_folder_on_s3_is_not_counted_either(store, monkeypatch):
    import boto3
    from moto import mock_aws

    from rewardpipe.store import S3Store
    from tests.faults import fake_aws_env

    fake_aws_env(monkeypatch)
    with mock_aws():
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="bkt")
        s3 = S3Store("bkt")
        for rec in store.iter_records(RUN):
            s3.put_record(rec)
        clean = invoke("monitor", "s3://bkt", "--json", "--no-write-alarms")
        for key in s3.list_keys(f"runs/{RUN}/step=1/"):
            s3.put_bytes(key.replace("/step=1/", "/step=01/"), s3.get_bytes(key))
        doubled = invoke("monitor", "s3://bkt", "--json", "--no-write-alarms")
    assert records_per_step(json.loads(doubled.stdout)) == records_per_step(json.loads(clean.stdout))
    assert "step=01" in doubled.stderr


# -- what stands where a record file should be -------------------------------------------------------


def make_fifo(path: Path) -> None:
    os.mkfifo(path)


def make_socket(path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX)
    with contextlib.chdir(path.parent):  # a socket's path is at most 108 bytes: bind it by its name
        sock.bind(path.name)
    sock.close()  # the socket file stays


def make_file_link(path: Path) -> None:
    outside = path.parents[6] / "outside.json"
    outside.write_bytes(path.read_bytes())  # a valid record, outside the store
    path.unlink()
    path.symlink_to(outside)


def make_folder(path: Path) -> None:
    data = path.read_bytes()
    path.unlink()
    path.mkdir()
    (path / "inside.json").write_bytes(data)


STRAYS = {"fifo": make_fifo, "socket": make_socket, "link to a file": make_file_link, "folder": make_folder}


@pytest.mark.parametrize("kind", list(STRAYS))
def test_what_is_not_a_file_where_a_record_should_be_is_skipped_and_named(store, kind, monkeypatch):
    """Before: a FIFO where a record file should be made `monitor` wait for ever."""
    clean, _ = monitored(store)
    victim = a_record_path(store)
    if kind in ("fifo", "socket"):
        victim.unlink()
    STRAYS[kind](victim)
    expected = {**records_per_step(clean), 1: records_per_step(clean)[1] - 1}
    for fast in (True, False):
        data, err = monitored(store, fast=fast, monkeypatch=monkeypatch)
        assert records_per_step(data) == expected
        assert victim.name in err
    report = invoke("report", store.root, "--json", "--no-triage-file")
    no_bug(report)
    assert report.exit_code == 0 and json.loads(report.stdout)["records"] == sum(expected.values())


def test_a_linked_folder_inside_a_step_is_not_followed(store, tmp_path, monkeypatch):
    outside = tmp_path / "elsewhere"
    shutil.copytree(a_record_path(store).parent, outside)
    (store.root / "runs" / RUN / "step=1" / "group=linked").symlink_to(outside, target_is_directory=True)
    clean = records_per_step(json.loads(invoke("monitor", store.root, "--json", "--no-write-alarms").stdout))
    data, err = monitored(store)
    assert records_per_step(data) == clean and "group=linked" in err and "symbolic link" in err


def test_an_unreadable_record_file_is_skipped_and_named(store, monkeypatch):
    clean, _ = monitored(store)
    victim = a_record_path(store)
    if os.geteuid() != 0:
        victim.chmod(0)
    else:  # root reads any file: make the kernel's answer the one a normal user would get
        real_open = os.open

        def refuse(path, flags, *args, **kwargs):
            if os.fspath(path) == victim.name or os.fspath(path) == str(victim):
                raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
            return real_open(path, flags, *args, **kwargs)

        monkeypatch.setattr(os, "open", refuse)
    data, err = monitored(store)
    assert victim.name in err and "Permission denied" in err
    assert records_per_step(data) == {**records_per_step(clean), 1: records_per_step(clean)[1] - 1}


# -- links: never followed, reading or writing ---------------------------------------------------------


def test_run_refuses_a_run_whose_step_folder_is_a_link_and_writes_nothing_outside(tmp_path):
    """Before: a symlinked step folder made `run` write its records outside --out (96 files elsewhere)."""
    out, outside = tmp_path / "store", tmp_path / "outside"
    outside.mkdir()
    (out / "runs" / "exp").mkdir(parents=True)
    (out / "runs" / "exp" / "step=1").symlink_to(outside, target_is_directory=True)
    result = invoke(
        "run",
        "--tasks",
        BUNDLED_TASKS,
        "--steps",
        2,
        "--group-size",
        2,
        "--groups-per-step",
        2,
        "--out",
        out,
        "--run-id",
        "exp",
        "--json",
    )
    no_bug(result)
    assert result.exit_code == 1 and "step=1" in result.stderr and "symbolic link" in result.stderr
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize(
    "linked",
    ["runs", "runs/exp", "runs/exp/step=1/group=g", "runs/exp/transcripts", "runs/exp/monitor", "runs/exp/alarms"],
)
def test_no_write_goes_through_a_link(tmp_path, linked):
    store = LocalStore(tmp_path / "store")
    outside = tmp_path / "outside"
    outside.mkdir()
    link = store.root / linked
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside, target_is_directory=True)
    writes = {
        "runs/exp/step=1/group=g/x.json": lambda key: store._write(key, b"{}"),
        "runs/exp/monitor/state.json": lambda key: store.put_json(key, {}),
        "runs/exp/alarms/step=1/a.json": lambda key: store.put_json(key, {}),
        "runs/exp/transcripts/step=1/group=g/x.json": lambda key: store.put_bytes(key, b"{}"),
    }
    for key, write in writes.items():
        if key.startswith(linked + "/"):
            with pytest.raises(UnsafePath, match="symbolic link"):
                write(key)
    if linked == "runs":
        with pytest.raises(StoreError, match="symbolic link"):
            store.lock_run("exp")
    assert list(outside.iterdir()) == []


def test_no_read_goes_through_a_link(tmp_path):
    store = LocalStore(tmp_path / "store")
    store.put_json("runs/exp/monitor/state.json", {"a": 1})
    outside = tmp_path / "outside"
    shutil.move(store.root / "runs" / "exp" / "monitor", outside)
    (store.root / "runs" / "exp" / "monitor").symlink_to(outside, target_is_directory=True)
    with pytest.raises(UnreadableObject, match="symbolic link"):
        store.get_json("runs/exp/monitor/state.json")
    assert store.list_keys("runs/exp/") == []


def test_show_and_resume_apply_the_same_rules(tmp_path):
    out = tmp_path / "store"
    args = (
        "run",
        "--tasks",
        BUNDLED_TASKS,
        "--steps",
        1,
        "--group-size",
        2,
        "--groups-per-step",
        1,
        "--out",
        out,
        "--run-id",
        "exp",
        "--json",
    )
    assert invoke(*args).exit_code == 0
    store = LocalStore(out)
    (rec,) = [r for r in store.iter_records("exp") if r.rollout_id.endswith("-k0")]
    transcript = out / transcript_key("exp", rec.step, rec.group_id, rec.rollout_id)
    transcript.unlink()
    os.mkfifo(transcript)
    shown = invoke("show", out, "--run-id", "exp", "--rollout", rec.rollout_id)
    no_bug(shown)
    assert shown.exit_code == 1 and "FIFO" in shown.stderr

    record_file = out / record_key(rec)
    outside = tmp_path / "outside.json"
    shutil.move(record_file, outside)
    record_file.symlink_to(outside)  # a link is not a stored record: --resume plays the rollout again
    resumed = invoke(*args, "--resume")
    no_bug(resumed)
    assert resumed.exit_code == 0, resumed.output
    assert (
        not record_file.is_symlink()
        and Record.model_validate_json(record_file.read_bytes()).rollout_id == rec.rollout_id
    )
    assert outside.read_bytes() == rec.to_json().encode()  # the link's target was never written to


def test_a_fifo_or_a_folder_where_the_monitor_state_should_be_costs_the_check_only(tmp_path):
    out = tmp_path / "store"
    args = (
        "run",
        "--tasks",
        BUNDLED_TASKS,
        "--steps",
        2,
        "--group-size",
        2,
        "--groups-per-step",
        2,
        "--out",
        out,
        "--run-id",
        "exp",
        "--json",
    )
    assert invoke(*args, "--steps", 1).exit_code == 0
    state = out / "runs" / "exp" / "monitor" / "state.json"
    state.unlink()
    os.mkfifo(state)
    resumed = invoke(*args, "--resume")
    no_bug(resumed)
    assert resumed.exit_code == 0 and "FIFO" in resumed.stderr  # replaced by a fresh state, and said
    assert json.loads(state.read_text())["checked"]
    state.unlink()
    state.mkdir()
    again = invoke(*args, "--steps", 3, "--resume")
    no_bug(again)
    assert again.exit_code == 1 and "folder" in again.stderr
    assert len(list(LocalStore(out).iter_records("exp"))) == 3 * 2 * 2  # every record still stored


def test_a_manifest_that_is_a_fifo_does_not_hang_monitor(store):
    os.mkfifo(store.root / "runs" / RUN / "manifest.json")
    data, _ = monitored(store)
    assert len(data["steps"]) == 3
