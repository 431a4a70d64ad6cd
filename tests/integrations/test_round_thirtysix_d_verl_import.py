"""Round thirty-six (fourth wave): ``rewardpipe verl import`` red-teamed with hostile dump lines.

A dump's uids, prompts, responses and numbers come from the trainer's data and the model; one hostile line must cost
that line only, named, and never write an id the rest of rewardpipe refuses at every other input.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rewardpipe.integrations.verl_dump import import_rollout_dump, read_rollout_dump
from rewardpipe.models import MAX_ID_LENGTH, MAX_STEP, id_problem
from rewardpipe.store import LocalStore


def _line(uid: str | None, step: int = 1, **extra: object) -> str:
    line: dict[str, object] = {"input": "Q", "output": "A", "score": 1.0, "step": step, **extra}
    if uid is not None:
        line["uid"] = uid
    return json.dumps(line)


def _dump(tmp_path: Path, lines: list[str], name: str = "1.jsonl") -> Path:
    folder = tmp_path / "dump"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text("".join(line + "\n" for line in lines))
    return folder


def test_a_number_too_large_for_a_float_costs_its_line_only(tmp_path):
    """json reads 1e400 as inf but a 400-digit integer as an int, which float() refuses with OverflowError."""
    huge = 10**400
    lines = [_line("g_0_0", acc=1.0), _line("g_1_0", score=huge), _line("g_2_0", acc=huge)]
    read = read_rollout_dump(_dump(tmp_path, lines))
    assert len(read.records) == 2 and len(read.skipped) == 1 and ":2: no finite numeric score" in read.skipped[0]
    by_rollout = {record["rollout_id"]: record for record in read.records}
    assert by_rollout["g_2"]["components"] == {"acc": None}  # not a number a float holds: missing, as NaN is


@pytest.mark.parametrize(
    "uid",
    [
        "g\x1b[31m_0_0",  # a terminal escape
        "g\u202e_0_0",  # a bidi override: the id prints reversed
        "g\u200b_0_0",  # zero-width: two ids print the same
        "g\ud800_0_0",  # a lone surrogate
        "g" * (MAX_ID_LENGTH + 1),  # longer than any id rewardpipe takes
    ],
    ids=["escape", "bidi", "zero-width", "surrogate", "too-long"],
)
def test_a_uid_no_input_accepts_as_an_id_is_named_and_skipped(tmp_path, uid):
    """Every other input refuses such an id (models.InputId): shown escaped, it could never be typed back to `show`."""
    store = LocalStore(tmp_path / "store")
    read = import_rollout_dump(_dump(tmp_path, [_line("fine_0_0"), _line(uid)]), store, "run")
    assert read.count == 1 and len(read.skipped) == 1 and ":2: uid " in read.skipped[0]
    assert all(id_problem(r.group_id) is None and id_problem(r.rollout_id) is None for r in store.iter_records("run"))


def test_a_step_file_named_with_control_characters_gives_no_such_rollout_id(tmp_path):
    """Without a uid the rollout id is made from the file's name, which the user (or a script) chose."""
    folder = tmp_path / "dump"
    folder.mkdir()
    path = folder / "run\x1b[2J.jsonl"
    path.write_text(_line(None) + "\n")
    read = read_rollout_dump(path)
    assert read.records and all(id_problem(r["rollout_id"]) is None for r in read.records)


def test_a_step_beyond_the_largest_is_named_in_one_line(tmp_path):
    read = read_rollout_dump(_dump(tmp_path, [_line("a_0_0"), _line("b_0_0", step=MAX_STEP + 1)]))
    assert len(read.records) == 1 and len(read.skipped) == 1
    assert ":2: step" in read.skipped[0] and "\n" not in read.skipped[0] and "pydantic" not in read.skipped[0]


def test_a_step_imported_while_verl_was_still_writing_it_is_completed_by_the_next_import(tmp_path):
    """verl writes a step file line by line through a buffer that is flushed between lines: a file caught mid-write
    most often ends in a newline, so it was imported on part of its rollouts and, held by the run, never again."""
    lines = [_line(f"g{g}_{k}_0", acc=float(k % 2)) for g in range(3) for k in range(4)]
    folder = _dump(tmp_path, lines[:5])  # caught after its fifth line
    store = LocalStore(tmp_path / "store")
    assert import_rollout_dump(folder, store, "run").count == 5
    _dump(tmp_path, lines)  # verl finished the step
    _dump(tmp_path, [_line(f"h_{k}_0", step=2) for k in range(2)], name="2.jsonl")
    again = import_rollout_dump(folder, store, "run")
    assert again.steps == {1, 2} and again.count == 7 + 2 and again.already_stored == []
    assert sum(record.step == 1 for record in store.iter_records("run")) == 12
    third = import_rollout_dump(folder, store, "run")  # nothing new: both steps held whole
    assert third.count == 0 and third.already_stored == [1, 2] and not third.skipped


def test_a_held_step_rewritten_by_a_resumed_run_is_not_mixed_into_it(tmp_path):
    """Read again to complete it, a step verl wrote anew (resumed from an earlier checkpoint: other uids) would have
    been added to the rollouts the run holds: two batches judged as one step."""
    store = LocalStore(tmp_path / "store")
    folder = _dump(tmp_path, [_line(f"old{g}_{k}_0") for g in range(2) for k in range(2)])
    assert import_rollout_dump(folder, store, "run").count == 4
    _dump(tmp_path, [_line(f"new{g}_{k}_0") for g in range(2) for k in range(2)])
    again = import_rollout_dump(folder, store, "run")
    assert again.count == 0 and again.already_stored == [1] and "rewritten" in again.skipped[0]
    assert {record.group_id for record in store.iter_records("run")} == {"old0", "old1"}


def test_only_ascii_digits_name_a_step_file(tmp_path):
    """``\\d`` matched any script's digits: "١.jsonl" (an Arabic-Indic one) or a full-width "１.jsonl" was read as step
    1 beside verl's own 1.jsonl, its lines filed in that step under other rollout ids."""
    folder = _dump(tmp_path, [_line(None, step=None)])  # type: ignore[arg-type]
    (folder / "\u0661.jsonl").write_text(_line(None) + "\n")
    (folder / "\uff11.jsonl").write_text(_line(None) + "\n")
    read = read_rollout_dump(folder)
    assert [record["rollout_id"] for record in read.records] == ["1-l1"]
