"""Round thirty-three, the monitor's follow-ups: ``error.non_finite`` in Parquet exports, the CloudWatch metrics a
step emits bounded by the run's declared components, triage judging zero variance as the monitor does, and a
component named ``aggregate``."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

import rewardpipe.monitoring.fastread as fastread
from rewardpipe.models import Record
from rewardpipe.monitoring.parquet import NONFINITE_COLUMN, write_parquet
from tests.monitoring.test_fast_path import record

# -- 1. ErrorInfo.non_finite in the Parquet export -------------------------------------------------------------


def _errors():
    """A NaN component, a huge one, another kind of error, and a scored record, as Records."""

    def failed(rollout, kind, non_finite):
        error = {"kind": kind, "message": "the model said: is not a finite number"}
        if non_finite is not None:
            error["non_finite"] = non_finite
        return record(rollout=rollout, status="error", error=error, aggregate=None, components={"correctness": None})

    raw = [
        failed("a", "component_out_of_range", True),
        failed("b", "component_out_of_range", False),
        failed("c", "timeout", None),
        record(rollout="d"),
    ]
    return [Record.model_validate(r) for r in raw]


def _read_back(files):
    careful = {r.rollout_id: r for r in fastread.parquet_rows(files, on_bad=pytest_fail, duplicates=[])}
    batch = fastread.read_parquet_batch(files)
    assert batch is not None
    fast = [batch.load(int(position)) for position in batch.positions]
    assert {r.rollout_id: r.error for r in fast} == {k: r.error for k, r in careful.items()}
    return careful


def pytest_fail(bad):
    raise AssertionError(f"unreadable: {bad}")


def test_the_export_keeps_whether_an_out_of_range_component_was_nan(tmp_path):
    records = _errors()
    path, rows = write_parquet(records, tmp_path, "r1")
    assert rows == 4
    column = pq.read_table(path).column(NONFINITE_COLUMN).to_pylist()
    assert column == [True, False, None, None]
    back = _read_back([path])
    assert back["a"].error.non_finite is True
    assert back["b"].error.non_finite is False  # its message ends like a NaN's: the field, not the text, says
    assert back["c"].error.non_finite is None
    assert back["d"].error is None
    assert [back[r.rollout_id].model_dump_json() for r in records] == [r.model_dump_json() for r in records]


def test_a_file_written_before_the_column_still_reads(tmp_path):
    path, _ = write_parquet(_errors(), tmp_path / "new", "r1")
    table = pq.read_table(path)
    old = tmp_path / "old"
    old.mkdir()
    old_file = old / "r2.parquet"
    pq.write_table(
        table.drop_columns([NONFINITE_COLUMN]).set_column(1, table.schema.field(1), pa.array(["r2"] * 4)), old_file
    )
    assert NONFINITE_COLUMN not in pq.read_schema(old_file).names
    back = _read_back([old_file])
    assert {k: (r.error.kind, r.error.non_finite) if r.error else None for k, r in back.items()} == {
        "a": ("component_out_of_range", None),
        "b": ("component_out_of_range", None),
        "c": ("timeout", None),
        "d": None,
    }
    # an old file beside a new one: both read, each with what it holds
    both = fastread.read_parquet_batch([old_file, path])
    assert both is not None and len(both) == 8
    assert [both.load(n).error.non_finite if both.load(n).error else "-" for n in (1, 5)] == [None, True]
