"""A played step is stored several objects at a time: every record and transcript lands, and one the store
refuses is spilled (records, in order) or reported (transcripts), never lost silently nor fatal."""

from __future__ import annotations

import json
import threading

from rewardpipe.cli.common import RecordWriter
from rewardpipe.models import Record
from rewardpipe.store import LocalStore, StoreError


def _record(index: int) -> Record:
    return Record(
        run_id="r",
        step=0,
        group_id=f"g{index // 4}",
        rollout_id=f"k{index}",
        task_id="t",
        status="scored",
        components={"c": 1.0},
        weights={"c": 1.0},
        aggregate=1.0,
    )


class RefusingStore(LocalStore):
    """Refuses every record whose rollout number is divisible by 5, and notes which threads wrote."""

    def __init__(self, root) -> None:
        super().__init__(root)
        self.threads: set[int] = set()

    def put_record(self, record):
        self.threads.add(threading.get_ident())
        if int(record.rollout_id[1:]) % 5 == 0:
            raise StoreError(f"refused {record.rollout_id}")
        return super().put_record(record)


def test_records_written_at_once_are_all_stored_and_the_refused_spilled_in_order(tmp_path):
    store = RefusingStore(tmp_path / "store")
    writer = RecordWriter(store, tmp_path / "spill.jsonl")
    records = [_record(i) for i in range(40)]
    writer.write(records, workers=8)
    writer.close()
    refused = [r.rollout_id for r in records if int(r.rollout_id[1:]) % 5 == 0]
    assert writer.stored == 32 and writer.spilled == 8
    assert [json.loads(line)["rollout_id"] for line in (tmp_path / "spill.jsonl").read_text().splitlines()] == refused
    stored = {r.rollout_id for r in LocalStore(tmp_path / "store").iter_records("r")}
    assert stored == {r.rollout_id for r in records} - set(refused)
    assert len(store.threads) > 1  # written by several threads, not one after the other


def test_one_at_a_time_is_still_the_default(tmp_path):
    store = RefusingStore(tmp_path / "store")
    writer = RecordWriter(store, tmp_path / "spill.jsonl")
    writer.write(iter([_record(i) for i in range(1, 5)]))
    assert writer.stored == 4 and len(store.threads) == 1


def test_a_run_stores_every_transcript_of_a_step_written_at_once(tmp_path):
    from typer.testing import CliRunner

    from rewardpipe.cli import app
    from rewardpipe.envs.wordle import BUNDLED_TASKS

    result = CliRunner().invoke(
        app,
        [
            "run",
            "--env",
            "wordle",
            "--tasks",
            str(BUNDLED_TASKS),
            "--steps",
            "2",
            "--groups-per-step",
            "16",
            "--group-size",
            "8",
            "--out",
            str(tmp_path),
            "--run-id",
            "w",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert len(list((tmp_path / "runs" / "w" / "transcripts").rglob("*.json"))) == 256
    assert len(list(LocalStore(tmp_path).iter_records("w"))) == 256
    assert not list(tmp_path.rglob("*.tmp"))  # no temporary file left behind


def _temporary_name() -> str:
    import os

    return f".w{os.getpid()}-{threading.get_ident()}.tmp"


def test_a_temporary_file_left_behind_is_overwritten_and_a_link_in_its_place_never_followed(tmp_path):
    store = LocalStore(tmp_path / "store")
    store.put_bytes("runs/x/a.json", b"{}")
    folder = tmp_path / "store" / "runs" / "x"
    (folder / _temporary_name()).write_bytes(b"half a record from a crashed write")
    store.put_bytes("runs/x/b.json", b'{"b": 1}')
    assert (folder / "b.json").read_bytes() == b'{"b": 1}' and not (folder / _temporary_name()).exists()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    (folder / _temporary_name()).symlink_to(victim)
    try:
        store.put_bytes("runs/x/c.json", b"{}")
    except StoreError:  # the store's own error, naming the key (no OSError escapes a store)
        pass
    assert victim.read_text() == "keep" and not (folder / "c.json").exists()
