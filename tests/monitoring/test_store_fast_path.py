"""`rewardpipe monitor STORE` reads a local store's record files into columns, with the careful path's result."""

from __future__ import annotations

import json
import shutil

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
            records.append({"run_id": "odd run/1", "step": 0, "group_id": group, "rollout_id": f"{group}#{i}",
                            "task_id": "t", "status": "scored", "components": {"c": float((g + i) % 2)},
                            "weights": {"c": 1.0}, "aggregate": float((g + i) % 2)})
    store = store_of(tmp_path, records)
    fast, careful, used = both_ways(monkeypatch, store.root)
    assert used == [True] and fast == careful and fast[0] == 0
    assert json.loads(fast[1])["steps"][0]["groups"] == len(odd)
