"""The columnar fast path of `rewardpipe monitor FILE` gives exactly the careful path's output.

Each case writes one JSONL file and runs the command three ways: as shipped (pyarrow reader), with pyarrow's
reader off (orjson reader), and with both off (the careful per-line path, a Record validated per line).
The three stdout/stderr pairs must be identical, and the fast readers must really have been used.
A file with anything the fast readers cannot vouch for must be left to the careful path.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

import rewardpipe.monitoring.fastread as fastread
from rewardpipe.cli import app

COMPONENTS = ("correctness", "asked_before_coding", "guessed_immediately", "loop_penalty")
WEIGHTS = {"correctness": 1.0, "asked_before_coding": 0.6, "guessed_immediately": 0.4, "loop_penalty": 0.2}


def record(run="r1", step=0, group="g0", rollout="g0-0", task="t0", status="scored", **over):
    components = over.pop("components", None) or {name: 0.0 for name in COMPONENTS}
    rec = {
        "schema": "rewardpipe.record/v1",
        "run_id": run,
        "step": step,
        "group_id": group,
        "rollout_id": rollout,
        "task_id": task,
        "status": status,
        "error": None,
        "components": components,
        "weights": dict(WEIGHTS),
        "aggregate": 0.0,
        "metrics": {},
    }
    rec.update(over)
    return rec


def varied_run(seed=0, run="r1", steps=6, groups=12, k=4):
    """A run that dies half-way, with errors, None components, int values, duplicates delivered again
    later, inprocess records, -0.0, and a component that only some records name."""
    rnd = random.Random(seed)
    out = []
    for step in range(steps):
        dying = step >= steps // 2
        for g in range(groups):
            for i in range(k):
                rid, gid = f"s{step}-g{g}-{i}", f"g{g}"
                if rnd.random() < 0.06:
                    error = (
                        None
                        if rnd.random() < 0.3
                        else {"kind": rnd.choice(["timeout", "sandbox"]), "message": "it \u00e9chou\u00e9 \x1b[31m"}
                    )
                    out.append(
                        record(
                            run,
                            step,
                            gid,
                            rid,
                            f"t{g % 5}",
                            "error",
                            error=error,
                            components={n: None for n in COMPONENTS},
                            aggregate=None,
                        )
                    )
                    continue
                comps = {
                    "correctness": 0.0 if dying or g % 3 == 0 else rnd.choice((0.0, 0.25, 0.5, 1)),
                    "asked_before_coding": 1 if g % 5 == 0 else rnd.choice((0.0, 0.6, 1.0, None)),
                    "guessed_immediately": -0.0 if dying else rnd.choice((0.0, -1.0)),
                    "loop_penalty": -0.5 if rnd.random() < 0.05 else 0.0,
                }
                if g % 4 == 1:
                    comps["judge"] = rnd.random()
                metrics = {
                    "exec_mode": "inprocess" if rnd.random() < 0.1 else "sandbox",
                    "tests_passed": i,
                    "committed": bool(i % 2),
                    "exec_reason": None if i else "AssertionError: 1 != 2",
                }
                out.append(
                    record(
                        run,
                        step,
                        gid,
                        rid,
                        f"t{g % 5}",
                        components=comps,
                        metrics=metrics,
                        aggregate=rnd.random() if not dying else 0.1,
                    )
                )
    for rec in rnd.sample(out, 15):  # delivered again, later in the file, with a different value
        again = dict(rec, aggregate=None if rec["status"] == "error" else 0.5)
        out.append(again)
    return out


def write(path: Path, records, *, newline="\n", blank_lines=False) -> Path:
    lines = [json.dumps(r) for r in records]
    if blank_lines:
        lines = [x for pair in zip(lines, [""] * len(lines)) for x in pair]
    path.write_text(newline.join(lines) + newline)
    return path


def run_three_ways(monkeypatch, *args):
    """(outputs, which reader served each run) for: as shipped, orjson only, careful only."""
    runner = CliRunner()
    used = []
    original = fastread.read_jsonl_batch

    def spy(path):
        batch = original(path)
        used.append(batch is not None)
        return batch

    outputs = []
    monkeypatch.setattr(fastread, "read_jsonl_batch", spy)
    outputs.append(runner.invoke(app, ["monitor", *map(str, args)]))
    monkeypatch.setattr(fastread, "_arrow_batch", lambda data: None)
    outputs.append(runner.invoke(app, ["monitor", *map(str, args)]))
    monkeypatch.setattr(fastread, "read_jsonl_batch", lambda path: None)
    outputs.append(runner.invoke(app, ["monitor", *map(str, args)]))
    return [(r.exit_code, r.stdout, r.stderr) for r in outputs], used


@pytest.mark.parametrize("variant", ["plain", "crlf", "blank_lines", "one_step", "ignore_and_ranges", "table"])
def test_fast_and_careful_paths_print_the_same(tmp_path, monkeypatch, variant):
    records = varied_run()
    path = write(
        tmp_path / "records.jsonl",
        records,
        newline="\r\n" if variant == "crlf" else "\n",
        blank_lines=variant == "blank_lines",
    )
    assert fastread._arrow_batch(path.read_bytes()) is not None, "pyarrow's reader must vouch for this file"
    args = [path, "--no-write-alarms"] + ([] if variant == "table" else ["--json"])
    if variant == "one_step":
        args += ["--step", "4"]
    if variant == "ignore_and_ranges":
        args += ["--ignore", "loop_penalty", "--range", "judge=0:1", "--consecutive", "2"]
    (shipped, orjson_only, careful), used = run_three_ways(monkeypatch, *args)
    assert used == [True, True], "both fast readers must have vouched for this file"
    assert shipped == orjson_only == careful
    assert shipped[0] == 0
    if variant != "table":
        data = json.loads(shipped[1])
        assert data["duplicates_dropped"] == 15
        assert any(a["kind"] == "dead_component" for a in data["alarms"])
        assert sum(s["inprocess_records"] for s in data["steps"]) > 0
        assert any(s["components"]["asked_before_coding"]["missing"] for s in data["steps"])
    assert "repeated record(s) dropped" in shipped[2]


def test_a_file_whose_groups_come_one_after_another_prints_the_same_on_every_path(tmp_path, monkeypatch):
    """The usual layout (each group's records together, no repeated deliveries) takes the columnar
    reader's segment-wise group statistics, which must give the record-by-record figures exactly."""
    records = varied_run(4)[:-15]  # without the repeated deliveries appended at the end
    path = write(tmp_path / "records.jsonl", records)
    (shipped, orjson_only, careful), used = run_three_ways(monkeypatch, path, "--json", "--no-write-alarms")
    assert used == [True, True] and shipped == orjson_only == careful and shipped[0] == 0
    data = json.loads(shipped[1])
    assert data["duplicates_dropped"] == 0 and any(a["kind"] == "dead_component" for a in data["alarms"])
    assert any(s["components"]["correctness"]["zero_variance_groups"] for s in data["steps"])
    assert all(s["components"]["judge"]["min"] < s["components"]["judge"]["max"] for s in data["steps"])


def test_a_file_parsed_in_several_blocks_prints_the_same_on_every_path(tmp_path, monkeypatch):
    """pyarrow parses a larger file in blocks on several threads: rows must still be the file's lines."""
    import numpy as np

    data = write(tmp_path / "records.jsonl", varied_run(6, steps=110, groups=12, k=4)).read_bytes()
    assert len(data) > 2 * fastread._block_size(len(data))
    blocks, lines = fastread._arrow_batch(data), fastread._orjson_batch(data)  # the orjson reader: line by line
    assert blocks is not None and lines is not None
    for name in ("run_ids", "group_ids", "rollout_ids", "task_ids"):
        a, b = getattr(blocks, name), getattr(lines, name)
        assert [a.names[c] for c in a.codes.tolist()] == [b.names[c] for c in b.codes.tolist()]
    assert [blocks.error_kinds[r] for r in np.flatnonzero(~blocks.scored)] == [
        lines.error_kinds[r] for r in np.flatnonzero(~lines.scored)
    ]
    for name in ("steps", "scored", "inprocess", "positions"):
        assert np.array_equal(getattr(blocks, name), getattr(lines, name))
    for name in ("values", "nulls", "weights"):
        a, b = getattr(blocks, name), getattr(lines, name)
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)


def test_several_runs_need_a_run_id_on_every_path(tmp_path, monkeypatch):
    path = write(tmp_path / "two.jsonl", varied_run(1, run="a") + varied_run(2, run="b"))
    mixed, _ = run_three_ways(monkeypatch, path, "--json")
    assert mixed[0] == mixed[1] == mixed[2] and mixed[0][0] == 1 and "several runs (a, b)" in mixed[0][2]
    monkeypatch.undo()
    (a_fast, a_orjson, a_careful), used = run_three_ways(monkeypatch, path, "--json", "--run-id", "b")
    assert used == [True, True] and a_fast == a_orjson == a_careful and json.loads(a_fast[1])["run_id"] == "b"


BAD_LINES = {
    "not utf-8": b'{"run_id": "r1\xff"}',
    "truncated": b'{"run_id": "r1", ',
    "missing aggregate": json.dumps({k: v for k, v in record().items() if k != "aggregate"}).encode(),
    "string component": json.dumps(record(components={"correctness": "1.0"})).encode(),
    "bool component": json.dumps(record(components={"correctness": True})).encode(),
    "NaN literal": json.dumps(record()).replace('"aggregate": 0.0', '"aggregate": NaN').encode(),
    "overflowing number": json.dumps(record()).replace('"aggregate": 0.0', '"aggregate": 1e999').encode(),
    "null step": json.dumps(record(step=None)).encode(),
    "float step": json.dumps(record(step=1.0)).encode(),
    "null weight": json.dumps(record(weights={"correctness": None})).encode(),
    "nested metric": json.dumps(record(metrics={"exec_mode": {"x": 1}})).encode(),
    "null metrics": json.dumps(record(metrics=None)).encode(),
    "unknown status": json.dumps(record(status="maybe")).encode(),
    "wrong schema": json.dumps(record(schema="rewardpipe.record/v0")).encode(),
    "field by its own name": json.dumps(dict(record(), schema_="x")).encode(),
    "error without kind": json.dumps(record(status="error", error={"message": "m"})).encode(),
    "two records on a line": (json.dumps(record(rollout="x")) + " " + json.dumps(record(rollout="y"))).encode(),
    "record split over lines": json.dumps(record(rollout="x")).replace(", ", ",\n", 1).encode(),
    "lone surrogate": json.dumps(record(rollout="x")).replace('"x"', '"\\ud800"').encode(),
    "array": b"[1, 2]",
}


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_anything_the_fast_readers_cannot_vouch_for_goes_the_careful_way(tmp_path, monkeypatch, case):
    good = [json.dumps(r).encode() for r in varied_run(3)]
    path = tmp_path / "records.jsonl"
    path.write_bytes(b"\n".join(good[:40] + [BAD_LINES[case]] + good[40:]) + b"\n")
    assert fastread._arrow_batch(path.read_bytes()) is None
    assert fastread.read_jsonl_batch(path) is None
    (shipped, _, careful), used = run_three_ways(monkeypatch, path, "--json", "--no-write-alarms")
    assert used == [False, False] and shipped == careful


def test_an_absent_component_is_not_counted_as_missing(tmp_path, monkeypatch):
    """pyarrow reads an absent field and a null alike; the reader must tell them apart as a Record does."""
    records = []
    for g in range(6):
        for i in range(4):
            comps = {"correctness": float(i % 2)}
            if i == 0:
                comps["judge"] = None  # given as None: missing
            elif i == 1:
                comps["judge"] = 0.5 * g
            records.append(record(group=f"g{g}", rollout=f"g{g}-{i}", components=comps))
    path = write(tmp_path / "records.jsonl", records)
    assert fastread._arrow_batch(path.read_bytes()) is not None
    (shipped, orjson_only, careful), used = run_three_ways(monkeypatch, path, "--json")
    assert used == [True, True] and shipped == orjson_only == careful
    judge = json.loads(shipped[1])["steps"][0]["components"]["judge"]
    assert (judge["missing"], judge["values"]) == (6, 6)


def test_a_field_a_record_ignores_is_ignored_by_the_orjson_reader(tmp_path, monkeypatch):
    """A Record ignores unknown top-level fields; pyarrow's reader refuses them (it reads only what the
    schema names), so orjson's reader serves such a file, with the careful path's result."""
    lines = [json.dumps(dict(r, note="hand-edited")) for r in varied_run(4)]
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert fastread._arrow_batch(path.read_bytes()) is None
    (shipped, orjson_only, careful), used = run_three_ways(monkeypatch, path, "--json")
    assert used == [True, True] and shipped == orjson_only == careful


def test_report_is_the_same_from_columns_as_from_records(tmp_path, monkeypatch):
    """`rewardpipe report FILE --json` (monitor, correlation, advantage shares, triage, examples) reads the
    file into columns when it can; the content must be exactly what the record-by-record build gives."""
    path = write(tmp_path / "records.jsonl", varied_run(5, steps=8))
    runner = CliRunner()
    used = []
    original = fastread.read_jsonl_batch
    monkeypatch.setattr(fastread, "read_jsonl_batch", lambda p: used.append(1) or original(p))
    fast = runner.invoke(app, ["report", str(path), "--json"])
    monkeypatch.setattr(fastread, "read_jsonl_batch", lambda p: None)
    careful = runner.invoke(app, ["report", str(path), "--json"])
    assert used and fast.exit_code == careful.exit_code == 0
    assert fast.stdout == careful.stdout
    data = json.loads(fast.stdout)
    assert data["task_triage"] and data["alarms"] and data["correlation"]["matrix"]
    assert set(data["components"]) == {*COMPONENTS, "judge"}


def test_a_file_with_a_new_component_name_on_every_line_goes_the_careful_way(tmp_path, monkeypatch):
    """Columns would cost one float per name and row; the careful path's memory follows what is there."""
    names = fastread.MAX_NAMES + 50
    records = [record(group=f"g{i // 4}", rollout=f"r{i}", components={f"c{i}": 1.0}) for i in range(names)]
    path = write(tmp_path / "records.jsonl", records)
    assert fastread.read_jsonl_batch(path) is None
    (shipped, _, careful), used = run_three_ways(monkeypatch, path, "--json")
    assert used == [False, False] and shipped == careful and shipped[0] == 0
