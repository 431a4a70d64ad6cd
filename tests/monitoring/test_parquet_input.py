"""`rewardpipe monitor` reads the Parquet export of `rewardpipe report --parquet` as a first-class input."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

import rewardpipe.monitoring.fastread as fastread
from rewardpipe.cli import app
from rewardpipe.monitoring.statistics import AGG
from tests.monitoring.test_fast_path import COMPONENTS, varied_run, write


def monitor_json(*args):
    result = CliRunner().invoke(app, ["monitor", *map(str, args), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    data.pop("source")
    return data, result.stderr


def export(tmp_path, records):
    jsonl = write(tmp_path / "records.jsonl", records)
    out = tmp_path / "export"
    result = CliRunner().invoke(app, ["report", str(jsonl), "--json", "--parquet", str(out)])
    assert result.exit_code == 0, result.output
    return jsonl, out


def test_the_export_monitors_like_the_file_it_came_from(tmp_path, monkeypatch):
    jsonl, out = export(tmp_path, varied_run(7))
    from_jsonl, _ = monitor_json(jsonl)
    from_dir, _ = monitor_json(out)
    [file] = list(out.glob("*.parquet"))
    from_file, _ = monitor_json(file)
    monkeypatch.setattr(fastread, "read_parquet_batch", lambda files: None)
    careful, _ = monitor_json(out)
    assert from_jsonl.pop("duplicates_dropped") == 15  # the export holds each record once
    assert from_dir == from_file == careful == {**from_jsonl, "duplicates_dropped": 0}
    assert any(a["kind"] == "dead_component" for a in from_dir["alarms"])


def test_a_bad_row_is_named_and_the_rest_is_monitored(tmp_path):
    _, out = export(tmp_path, varied_run(8))
    [file] = list(out.glob("*.parquet"))
    table = pq.read_table(file)
    status = table.column("status").to_pylist()
    status[3] = "maybe"
    pq.write_table(
        table.set_column(table.schema.get_field_index("status"), "status", pa.array(status, pa.string())), file
    )
    assert fastread.read_parquet_batch([file]) is None
    data, stderr = monitor_json(file)
    assert data["unreadable"] == [{"key": f"{file}:row 4", "reason": data["unreadable"][0]["reason"]}]
    assert "status" in data["unreadable"][0]["reason"]
    assert sum(step["records"] for step in data["steps"]) == len(status) - 1


def test_a_parquet_file_of_something_else_is_one_clear_error(tmp_path):
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"x": [1, 2]}), other)
    result = CliRunner().invoke(app, ["monitor", str(other), "--json"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "not a rewardpipe records file" in result.stderr


def uniform_run(seed):
    """varied_run without the component only some records name: every row's map has the same keys."""
    return [dict(r, components={k: v for k, v in r["components"].items() if k != "judge"}) for r in varied_run(seed)]


def test_maps_with_the_same_keys_in_every_row_read_like_the_careful_path(tmp_path, monkeypatch):
    _, out = export(tmp_path, uniform_run(9))
    [file] = list(out.glob("*.parquet"))
    batch = fastread.read_parquet_batch([file])
    assert batch is not None and set(batch.values) == {*COMPONENTS, AGG}
    fast, _ = monitor_json(out)
    monkeypatch.setattr(fastread, "read_parquet_batch", lambda files: None)
    careful, _ = monitor_json(out)
    assert fast == careful
    assert any(c["missing"] for s in fast["steps"] for c in s["components"].values())  # None values survive


def test_maps_whose_keys_come_in_another_order_on_some_rows_read_like_the_careful_path(tmp_path, monkeypatch):
    _, out = export(tmp_path, uniform_run(10))
    [file] = list(out.glob("*.parquet"))
    table = pq.read_table(file)
    components = table.column("components").to_pylist()
    for row in range(0, len(components), 3):  # same keys, same count per row, another order
        components[row] = components[row][::-1]
    pq.write_table(
        table.set_column(
            table.schema.get_field_index("components"),
            "components",
            pa.array(components, table.schema.field("components").type),
        ),
        file,
    )
    reordered = fastread.read_parquet_batch([file])
    assert reordered is not None
    fast, _ = monitor_json(out)
    monkeypatch.setattr(fastread, "read_parquet_batch", lambda files: None)
    careful, _ = monitor_json(out)
    assert fast == careful


def test_a_directory_of_several_files_reads_like_the_careful_path(tmp_path, monkeypatch):
    """Each file has its own dictionary of ids (in its own order): one run's ids must still be one code."""
    _, out = export(tmp_path, uniform_run(11))
    [file] = list(out.glob("*.parquet"))
    table = pq.read_table(file)
    half = table.num_rows // 2
    file.unlink()
    pq.write_table(table.slice(0, half), out / "a.parquet")
    pq.write_table(table.slice(half), out / "b.parquet", row_group_size=7)
    batch = fastread.read_parquet_batch(fastread.parquet_files(out))
    assert batch is not None and batch.run_ids.names == ["r1"] and len(batch) == table.num_rows
    assert len(batch.group_ids.names) == len(set(table.column("group_id").to_pylist()))
    fast, _ = monitor_json(out)
    monkeypatch.setattr(fastread, "read_parquet_batch", lambda files: None)
    careful, _ = monitor_json(out)
    assert fast == careful and fast["duplicates_dropped"] == 0
