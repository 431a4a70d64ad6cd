"""`rewardpipe monitor STORE` reads a local store's record files into columns, with the careful path's result."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from typer.testing import CliRunner

import rewardpipe.monitoring.fastread as fastread
from rewardpipe.cli import app
from rewardpipe.models import Record
from rewardpipe.store import LocalStore, record_key
from tests.monitoring.test_fast_path import varied_run


def store_of(tmp_path, records):
    store = LocalStore(tmp_path / "store")
    for rec in records:
        store.put_record(Record.model_validate(rec))
    return store


def both_ways(monkeypatch, *args):
    runner = CliRunner()
    used = []
    original = fastread.read_store_batch
    monkeypatch.setattr(fastread, "read_store_batch", lambda *a: used.append(original(*a) is not None) or original(*a))
    fast = runner.invoke(app, ["monitor", *map(str, args), "--json", "--no-write-alarms"])
    monkeypatch.setattr(fastread, "read_store_batch", lambda *a: None)
    careful = runner.invoke(app, ["monitor", *map(str, args), "--json", "--no-write-alarms"])
    return (fast.exit_code, fast.stdout, fast.stderr), (careful.exit_code, careful.stdout, careful.stderr), used


def test_a_store_monitors_the_same_from_columns(tmp_path, monkeypatch):
    store = store_of(tmp_path, varied_run(9))
    fast, careful, used = both_ways(monkeypatch, store.root)
    assert used == [True] and fast == careful and fast[0] == 0
    data = json.loads(fast[1])
    assert len(data["steps"]) == 6 and any(a["kind"] == "dead_component" for a in data["alarms"])
    monkeypatch.undo()
    one_step, careful_step, used = both_ways(monkeypatch, store.root, "--step", "4")
    assert used == [True] and one_step == careful_step and [s["step"] for s in json.loads(one_step[1])["steps"]] == [4]


def test_a_misplaced_record_sends_the_store_the_careful_way(tmp_path, monkeypatch):
    records = varied_run(10)
    store = store_of(tmp_path, records)
    moved = Record.model_validate(records[0])
    source = store.root / record_key(moved)
    shutil.copy(source, source.with_name("someone-else.json"))  # a copy under another rollout's key
    fast, careful, used = both_ways(monkeypatch, store.root)
    assert used == [False] and fast == careful
    assert "someone-else.json" in fast[2] and "belongs at" in fast[2]


def test_ids_that_need_encoding_are_matched_to_their_keys(tmp_path, monkeypatch):
    odd = ["a/b", "..", "é-ü", "x" * 300, "sp ace", "g-1", "g-1-2", "g.1"]
    records = []
    for g, group in enumerate(odd):
        for i in range(4):
            records.append(
                {
                    "run_id": "odd run/1",
                    "step": 0,
                    "group_id": group,
                    "rollout_id": f"{group}#{i}",
                    "task_id": "t",
                    "status": "scored",
                    "components": {"c": float((g + i) % 2)},
                    "weights": {"c": 1.0},
                    "aggregate": float((g + i) % 2),
                }
            )
    store = store_of(tmp_path, records)
    fast, careful, used = both_ways(monkeypatch, store.root)
    assert used == [True] and fast == careful and fast[0] == 0
    assert json.loads(fast[1])["steps"][0]["groups"] == len(odd)


def _walked(root, prefix):
    """What os.walk lists below ``prefix``: the listing LocalStore had before it used os.scandir itself."""
    base = root / prefix
    keys = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        rel = Path(dirpath).relative_to(root).as_posix()
        keys += [
            f"{rel}/{name}"
            for name in sorted(filenames)
            if not (name.startswith(".") and name.endswith(".tmp")) and not os.path.islink(os.path.join(dirpath, name))
        ]  # a store never follows a link
    return keys


def test_the_stores_listing_is_what_os_walk_lists(tmp_path):
    """LocalStore lists files by os.scandir (no pathlib per file, for the columnar reader): the same keys,
    in the same order, as os.walk, whatever else lies in the folders, less the links (never followed,
    reported as strays instead)."""
    store = store_of(tmp_path, varied_run(11, steps=2, groups=4, k=3))
    step = store.root / "runs" / "r1" / "step=1"
    (step / "group=g0" / ".half-written.tmp").write_text("{")
    (step / "group=g0" / ".hidden.json").write_text("{}")
    (step / "loose.json").write_text("{}")
    (step / "group=g1" / "deeper" / "still").mkdir(parents=True)
    (step / "group=g1" / "deeper" / "still" / "x.json").write_text("{}")
    (step / "group=g1" / "zz-link.json").symlink_to(step / "loose.json")
    (step / "group=g1" / "broken.json").symlink_to(tmp_path / "nowhere")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "o.json").write_text("{}")
    (step / "group=linked").symlink_to(outside, target_is_directory=True)
    (step / "group=é ü").mkdir()
    (step / "group=é ü" / "ß.json").write_text("{}")
    for prefix in ("runs/r1/step=0", "runs/r1/step=1", "runs/r1/step=9", "runs/r1"):
        assert list(store._list(prefix + "/")) == _walked(store.root, prefix), prefix
    strays: list = []
    list(store._list_checked("runs/r1/step=1/", strays.append))
    assert sorted(bad.key for bad in strays) == [
        "runs/r1/step=1/group=g1/broken.json",
        "runs/r1/step=1/group=g1/zz-link.json",
        "runs/r1/step=1/group=linked",
    ]
    assert all("symbolic link" in bad.reason for bad in strays)


def test_records_longer_than_one_read_and_many_files_are_read_whole(tmp_path, monkeypatch):
    records = varied_run(12)  # several hundred files: read by several threads
    records[5]["metrics"] = {"exec_reason": "x" * 200_000}  # one record longer than a single read
    store = store_of(tmp_path, records)
    assert len(list(store._list("runs/r1/"))) >= 256
    fast, careful, used = both_ways(monkeypatch, store.root)
    assert used == [True] and fast == careful and fast[0] == 0


def test_an_empty_or_multi_line_record_file_goes_the_careful_way(tmp_path, monkeypatch):
    for content in (b"", b"\n", b'{"run_id":\n"r1"}'):
        store = store_of(tmp_path / f"s{len(content)}", varied_run(13, steps=2))
        victim = next(iter(store._list("runs/r1/step=1/")))
        (store.root / victim).write_bytes(content)
        fast, careful, used = both_ways(monkeypatch, store.root)
        assert used == [False] and fast == careful, content
        monkeypatch.undo()


def test_the_fast_reader_keeps_one_branch_of_folders_open_however_many_groups(tmp_path):
    """A run of 25,000 group folders must not need 25,000 descriptors: with only 64 allowed, 300 groups are
    still read into columns (before, every folder stayed open, the reads failed with EMFILE, and the whole
    store went the careful way)."""
    import resource

    store = store_of(tmp_path, varied_run(21, steps=2, groups=150, k=2))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
    try:
        batch = fastread.read_store_batch(store, "r1")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert batch is not None and len(batch) == len(list(store.iter_records("r1")))
