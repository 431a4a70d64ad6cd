"""Ids that differ only in letter case keep their own records on a case-insensitive file system.

macOS's default APFS and Windows' NTFS treat ``Roll-A.json`` and ``roll-a.json`` as one file (keeping the
case of whichever came first). This machine's file system is case-sensitive, so the tests run the store
over :class:`CaseInsensitiveStore`, which behaves like those file systems, and check the key encoding's
own promise: no two ids have keys that are equal up to ASCII letter case.

Stores written before the case tail existed (``Task-1.json`` rather than ``Task-1%~u8.json``) must still
read the same, resume without writing a second record, and show their transcripts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rewardpipe.store import (
    MAX_SEGMENT,
    LocalStore,
    Store,
    StoreError,
    decode_id,
    encode_id,
    legacy_key,
    legacy_record_key,
    record_key,
    rollout_key,
    transcript_key,
    windows_device_name,
)
from tests.test_store import make_record


def _fold(key: str, windows: bool) -> str:
    return "/".join(part.lower().rstrip(". ") if windows else part.lower() for part in key.split("/"))


class CaseInsensitiveStore(Store):
    """An in-memory store with the semantics of a case-insensitive, case-preserving file system: a path
    segment that equals an existing one up to ASCII case *is* that one (its first spelling is kept).
    ``windows``: also as Windows names files: a final dot or space is dropped, and a device name (``con``,
    ``nul.json``, whatever its case) is not a file (the write fails)."""

    def __init__(self, windows: bool = False) -> None:
        super().__init__()
        self.location = "mem://case-insensitive"
        self.windows = windows
        self.files: dict[str, tuple[str, bytes]] = {}  # folded key -> (key as spelt on disk, bytes)

    def lower(self, key: str) -> str:
        return _fold(key, self.windows)

    def _spelt(self, key: str) -> str:
        """``key`` with each folder spelt as it already exists on the "disk" (the file name too)."""
        parts = key.split("/")
        for depth in range(1, len(parts) + 1):
            folded = self.lower("/".join(parts[:depth]))
            for stored_folded, (spelt, _) in self.files.items():
                if stored_folded == folded or stored_folded.startswith(folded + "/"):
                    parts[:depth] = spelt.split("/")[:depth]
                    break
        return "/".join(parts)

    def _write(self, key: str, data: bytes) -> None:
        if self.windows and any(windows_device_name(part) for part in key.split("/")):
            raise StoreError(f"{key}: a device name, not a file, on Windows")
        spelt = self._spelt(key)
        self.files[self.lower(spelt)] = (spelt, data)

    def _read(self, key: str) -> bytes:
        try:
            return self.files[self.lower(key)][1]
        except KeyError:
            raise KeyError(key) from None

    def _list(self, prefix: str) -> Iterator[str]:
        folded = self.lower(prefix.rstrip("/")) + "/"
        yield from sorted(spelt for stored, (spelt, _) in self.files.items() if stored.startswith(folded))

    def _list_dirs(self, prefix: str) -> list[str]:
        folded = self.lower(prefix.rstrip("/")) + "/"
        names = {
            spelt[len(prefix) :].split("/")[0]
            for stored, (spelt, _) in self.files.items()
            if stored.startswith(folded) and "/" in spelt[len(prefix) :]
        }
        return sorted(names)

    def _delete_prefix(self, prefix: str) -> None:
        for stored in [s for s in self.files if s.startswith(self.lower(prefix.rstrip("/")) + "/")]:
            del self.files[stored]


CASE_VARIANTS = ["Roll-A", "roll-a", "ROLL-A", "rOLL-a"]


def test_the_emulated_file_system_really_folds_case():
    # guard: what the tests below rely on (before the case tail, two of these records were one file)
    disk = CaseInsensitiveStore()
    disk.put_json("runs/r/x/Roll-A.json", {"n": 1})
    disk.put_json("runs/r/x/roll-a.json", {"n": 2})
    assert disk.list_keys("runs/") == ["runs/r/x/Roll-A.json"]


def test_rollouts_whose_ids_differ_only_in_case_each_keep_their_record():
    disk = CaseInsensitiveStore()
    for value, rollout in enumerate(CASE_VARIANTS):
        disk.put_record(make_record(rollout=rollout, value=float(value)))
    records = {r.rollout_id: r.aggregate for r in disk.iter_records("run1")}
    assert records == {rollout: float(value) for value, rollout in enumerate(CASE_VARIANTS)}
    assert disk.bad_objects == []


def test_groups_whose_ids_differ_only_in_case_stay_apart():
    # one folder on such a file system would hold both groups' records, and each would be read back as a
    # record of the other group (a misplaced object, so lost to the statistics)
    disk = CaseInsensitiveStore()
    disk.put_record(make_record(group="Prompt-7", rollout="k0"))
    disk.put_record(make_record(group="prompt-7", rollout="k1"))
    assert {(r.group_id, r.rollout_id) for r in disk.iter_records("run1")} == {("Prompt-7", "k0"), ("prompt-7", "k1")}
    assert disk.bad_objects == []


def test_ids_windows_would_merge_or_refuse_each_keep_their_record():
    # "x." and "x" are one folder on Windows (it drops a final dot); "con" and "nul.txt" are devices there
    guard = CaseInsensitiveStore(windows=True)  # the emulation merges and refuses what Windows does
    guard.put_json("runs/r/x/a.json", {"n": 1})
    guard.put_json("runs/r/x./b.json", {"n": 2})
    assert guard.list_keys("runs/") == ["runs/r/x/a.json", "runs/r/x/b.json"]
    with pytest.raises(StoreError, match="device"):
        guard.put_json("runs/r/x/NUL.json", {})
    disk = CaseInsensitiveStore(windows=True)
    pairs = [
        ("x.", "k0"),
        ("x", "k1"),
        ("X.", "k2"),
        ("g", "con"),
        ("g", "CON"),
        ("g", "nul.txt"),
        ("g", "Com1."),
        ("aux", "k3"),
    ]
    for group, rollout in pairs:
        disk.put_record(make_record(group=group, rollout=rollout))
    assert sorted((r.group_id, r.rollout_id) for r in disk.iter_records("run1")) == sorted(pairs)
    assert disk.bad_objects == []


windows_heavy = st.lists(
    st.sampled_from(["con", "Nul", "com1", "LPT9", "aux", "prn", ".", "x", "X", " ", "%"]), min_size=1, max_size=6
).map("".join)


@settings(max_examples=300, deadline=None)
@given(windows_heavy, windows_heavy)
def test_no_two_ids_share_a_file_name_on_windows_and_none_is_a_device(a, b):
    assert not windows_device_name(encode_id(a)) and not encode_id(a).endswith((".", " "))
    if a != b:
        assert _fold(encode_id(a), windows=True) != _fold(encode_id(b), windows=True)


def test_transcripts_and_alarms_of_case_variants_stay_apart():
    from rewardpipe.monitoring.alarms import alarm_key

    assert transcript_key("r", 0, "g", "Roll-A").lower() != transcript_key("r", 0, "g", "roll-a").lower()
    assert (
        alarm_key("r", 0, "Correctness", "dead_component").lower()
        != alarm_key("r", 0, "correctness", "dead_component").lower()
    )


ascii_heavy = st.text(alphabet=st.sampled_from("aAbBzZ0-_.~%/é\u0301"), min_size=1, max_size=24)


@settings(max_examples=300, deadline=None)
@given(ascii_heavy, st.lists(st.booleans(), min_size=24, max_size=24))
def test_keys_are_distinct_up_to_case_for_every_pair_of_distinct_ids(value, flips):
    variant = "".join(c.swapcase() if flip else c for c, flip in zip(value, flips))
    if variant == value:
        return
    assert encode_id(value).lower() != encode_id(variant).lower()
    assert decode_id(encode_id(value)) == value and decode_id(encode_id(variant)) == variant


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=MAX_SEGMENT - 40, max_value=MAX_SEGMENT + 40), st.integers(min_value=0, max_value=200))
def test_long_ids_near_the_limit_are_distinct_up_to_case_and_fit(length, flip_at):
    value = "a" * length
    variant = value[:flip_at] + value[flip_at : flip_at + 1].upper() + value[flip_at + 1 :]
    if variant == value:
        return
    a, b = encode_id(value), encode_id(variant)
    assert a.lower() != b.lower()
    assert len(a) <= MAX_SEGMENT and len(b) <= MAX_SEGMENT


def test_readable_keys():
    # lower-case ids keep their key of before; an upper-case letter adds a short tail, the id stays readable
    assert encode_id("abc-004-parse-bool") == "abc-004-parse-bool"
    assert encode_id("Task-1") == "Task-1%~u8"
    assert encode_id("HumanEval/0") == "HumanEval%2F0%~u84"
    assert encode_id("Task-1", portable=False) == "Task-1"
    assert decode_id("Task-1%~u8") == "Task-1"


def test_a_literal_tail_in_an_id_is_encoded_and_cannot_pose_as_one():
    assert encode_id("Task-1%~u8") == "Task-1%25~u8%~u8"
    assert decode_id(encode_id("Task-1%~u8")) == "Task-1%~u8"
    assert encode_id("task-1%~u8").lower() != encode_id("Task-1").lower()


def test_the_same_layout_on_s3(aws_env):
    import boto3
    from moto import mock_aws

    from rewardpipe.store import S3Store

    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="scores")
        s3 = S3Store("scores", client=client)
        key = s3.put_record(make_record(group="G", rollout="Roll-A"))
    assert key == record_key(make_record(group="G", rollout="Roll-A"))
    assert key == "runs/run1/step=0/group=G%~u8/Roll-A%~u88.json"


@pytest.fixture
def aws_env(monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


# -- stores written before the case tail ------------------------------------------------------------


def _put_legacy(store: Store, record) -> str:
    key = legacy_record_key(record)
    store.put_bytes(key, record.to_json().encode())
    return key


def test_records_at_their_old_keys_are_read(tmp_path):
    store = LocalStore(tmp_path)
    old = [make_record(group="Grp", rollout=f"Roll-{i}") for i in range(3)]
    keys = [_put_legacy(store, r) for r in old]
    assert keys[0] == "runs/run1/step=0/group=Grp/Roll-0.json"
    assert sorted(r.rollout_id for r in store.iter_records("run1")) == ["Roll-0", "Roll-1", "Roll-2"]
    assert store.bad_objects == []


def test_a_rollout_stored_at_both_keys_is_read_once(tmp_path):
    store = LocalStore(tmp_path)
    _put_legacy(store, make_record(group="Grp", rollout="Roll-0", value=0.0))
    store.put_record(make_record(group="Grp", rollout="Roll-0", value=1.0))
    records = list(store.iter_records("run1"))
    assert [(r.rollout_id, r.aggregate) for r in records] == [("Roll-0", 1.0)]
    assert [b.key for b in store.bad_objects] == ["runs/run1/step=0/group=Grp/Roll-0.json"]
    assert "also stored at" in store.bad_objects[0].reason


def test_a_resume_recognises_records_at_their_old_keys(tmp_path):
    store = LocalStore(tmp_path)
    _put_legacy(store, make_record(group="Grp", rollout="Roll-0"))
    assert rollout_key("run1", 0, "Grp", "Roll-0") in store.stored_rollout_keys("run1")
    assert rollout_key("run1", 0, "Grp", "Roll-1") not in store.stored_rollout_keys("run1")


def test_a_transcript_at_its_old_key_is_found_and_read(tmp_path):
    from rewardpipe.transcripts import RolloutTranscript

    store = LocalStore(tmp_path)
    current = transcript_key("run1", 0, "Grp", "Roll-0")
    old = legacy_key(current)
    assert old == "runs/run1/transcripts/step=0/group=Grp/Roll-0.json" != current
    document = {
        "run_id": "run1",
        "step": 0,
        "group_id": "Grp",
        "rollout_id": "Roll-0",
        "task_id": "t1",
        "messages": [{"role": "user", "content": "hi"}],
        "verdict": {"status": "not_executed"},
    }
    store.put_json(old, RolloutTranscript.model_validate(document).to_json_dict())
    assert store.find_transcripts("run1", "Roll-0") == [old]
    assert store.get_transcript(current).rollout_id == "Roll-0"


# -- run ids: folders stay readable, a case or normalisation twin is refused --------------------------------


@pytest.mark.parametrize("stored, new", [("demo", "Demo"), ("caf\u00e9", "cafe\u0301"), ("Exp-1", "exp-1")])
def test_a_run_id_that_differs_only_in_case_or_form_clashes(tmp_path, stored, new):
    store = LocalStore(tmp_path)
    store.put_record(make_record(run=stored))
    assert store.run_id_clash(new) == stored
    assert store.run_id_clash(stored) is None
    assert store.run_id_clash("other") is None


def test_run_folders_have_no_tail():
    assert record_key(make_record(run="Demo")).startswith("runs/Demo/step=0/")


def test_the_store_written_by_an_older_rewardpipe_monitors_the_same(tmp_path):
    """`monitor --json` reads an old store (its fast path too) exactly as the same records stored today."""
    from typer.testing import CliRunner

    from rewardpipe.cli import app
    from rewardpipe.monitoring.fastread import read_store_batch

    old, new = LocalStore(tmp_path / "old"), LocalStore(tmp_path / "new")
    for k in range(4):
        record = make_record(group="Grp", rollout=f"Roll-{k}", value=float(k % 2))
        _put_legacy(old, record)
        new.put_record(record)
    assert read_store_batch(old, "run1", 0) is not None  # vouched for, not sent the careful way
    outputs = []
    for store in (old, new):
        result = CliRunner().invoke(app, ["monitor", str(store.root), "--json"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        outputs.append({k: v for k, v in json.loads(result.stdout).items() if k != "source"})
    assert outputs[0] == outputs[1]
    assert outputs[0]["steps"][0]["records"] == 4


def test_a_transcript_stored_at_both_keys_is_found_once(tmp_path):
    from rewardpipe.transcripts import RolloutTranscript

    store = LocalStore(tmp_path)
    current = transcript_key("run1", 0, "Grp", "Roll-0")
    document = RolloutTranscript.model_validate(
        {
            "run_id": "run1",
            "step": 0,
            "group_id": "Grp",
            "rollout_id": "Roll-0",
            "task_id": "t1",
            "messages": [],
            "verdict": {"status": "not_executed"},
        }
    ).to_json_dict()
    store.put_json(current, document)
    store.put_json(legacy_key(current), document)
    assert store.find_transcripts("run1", "Roll-0") == [current]


def test_a_rollout_is_found_by_its_id_in_another_normalisation(tmp_path):
    from rewardpipe.transcripts import RolloutTranscript

    store = LocalStore(tmp_path)
    stored = "cafe\u0301"
    key = store.put_transcript(
        RolloutTranscript.model_validate(
            {
                "run_id": "run1",
                "step": 0,
                "group_id": "g",
                "rollout_id": stored,
                "task_id": "t1",
                "messages": [],
                "verdict": {"status": "not_executed"},
            }
        )
    )
    assert store.find_transcripts("run1", "caf\u00e9") == [key]
