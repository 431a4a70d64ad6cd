"""Benchmark: `rewardpipe report` and task triage over 1,000,000 records, against pandas in the same process.

    .venv/bin/python benchmarks/report.py                     # 1,000,000 records: 250 steps x 500 groups x 8
    .venv/bin/python benchmarks/report.py --records 200000    # quicker

Goals (issue 11): the report over 1M records in <= 10 s with HTML <= 5 MB (aggregated, never dumped);
triage over 1M records in <= 3 s.

What it prints, each the best of ``--repeat`` runs over the same in-memory list of Record objects:

1. **report**: ``build_report`` (one pass feeding the monitor and the column store, then correlation,
   advantage shares, triage) plus ``render_report``, and the HTML size.
2. **triage**: reading the records into columns, grouping, and ``task_triage``.
3. **from disk**: the same records written to a JSONL file, then what ``rewardpipe report FILE`` does
   with it: read straight into columns (``fastread.read_jsonl_batch``: pyarrow, no model object per
   record), duplicates dropped, then triage alone, and the whole report (monitor + triage + HTML).
4. **from Parquet on disk**: the same records exported as ``rewardpipe report --parquet`` writes them, then
   what ``rewardpipe report DIR`` does with that directory (``fastread.read_parquet_batch``), triage alone
   and the whole report.
5. **baseline**: pandas building a DataFrame from the same records and computing the same triage with a
   groupby (checked to agree with ours before any figure is printed), and the DataFrame build alone.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pandas as pd

from rewardpipe.models import Record
from rewardpipe.monitoring.batch import run_columns
from rewardpipe.monitoring.columns import RunColumns, group_rows, paused_gc
from rewardpipe.monitoring.fastread import parquet_files, read_jsonl_batch, read_parquet_batch
from rewardpipe.monitoring.html import render_report
from rewardpipe.monitoring.parquet import write_parquet
from rewardpipe.monitoring.report import build_report, build_report_from_batch
from rewardpipe.monitoring.triage import task_triage

COMPONENTS = ("correctness", "asked_before_coding", "guessed_immediately", "loop_penalty")
WEIGHTS = {"correctness": 1.0, "asked_before_coding": 0.6, "guessed_immediately": 0.4, "loop_penalty": 0.2}
RANGES = {
    "correctness": (0.0, 1.0),
    "asked_before_coding": (0.0, 1.0),
    "guessed_immediately": (-1.0, 0.0),
    "loop_penalty": (-0.5, 0.0),
}
TASKS = 2000


def synthetic(records: int, groups_per_step: int, group_size: int, seed: int = 0) -> list[Record]:
    """A run that collapses half-way: before, groups vary (some tasks never pass, some always ask);
    after, every rollout guesses. ~1% infrastructure errors."""
    rnd = random.Random(seed)
    out = []
    per_step = groups_per_step * group_size
    steps = max(1, records // per_step)
    for i in range(records):
        step, g = i // per_step, (i % per_step) // group_size
        task = (step * groups_per_step + g) % TASKS
        group_id, rollout_id = f"s{step}-g{g}", f"s{step}-g{g}-k{i % group_size}"
        if rnd.random() < 0.01:
            out.append(
                Record.model_construct(
                    run_id="bench",
                    step=step,
                    group_id=group_id,
                    rollout_id=rollout_id,
                    task_id=f"task-{task}",
                    status="error",
                    error=None,
                    components={k: None for k in COMPONENTS},
                    weights=WEIGHTS,
                    aggregate=None,
                    metrics={},
                )
            )
            continue
        collapsed = step >= steps // 2
        hard = task % 3 == 0
        comps = {
            "correctness": 0.0 if hard or collapsed else rnd.choice((0.0, 0.25, 0.5, 1.0)),
            "asked_before_coding": 0.0 if collapsed else (1.0 if task % 5 == 0 else rnd.choice((0.0, 0.6, 1.0))),
            "guessed_immediately": -1.0 if collapsed else rnd.choice((0.0, -1.0)),
            "loop_penalty": -0.5 if rnd.random() < 0.05 else 0.0,
        }
        out.append(
            Record.model_construct(
                run_id="bench",
                step=step,
                group_id=group_id,
                rollout_id=rollout_id,
                task_id=f"task-{task}",
                status="scored",
                error=None,
                components=comps,
                weights=WEIGHTS,
                aggregate=sum(WEIGHTS[k] * v for k, v in comps.items()),
                metrics={},
            )
        )
    return out


def our_triage(records: list[Record]) -> list[dict]:
    columns = RunColumns()
    with paused_gc():
        columns.add_many(records)
    return task_triage(columns, group_rows(columns), RANGES)


def read_batch(path: Path):
    """What `rewardpipe report PATH` reads: a JSONL file, or a directory of the Parquet export."""
    batch = read_parquet_batch(parquet_files(path)) if path.is_dir() else read_jsonl_batch(path)
    assert batch is not None, "the fast reader must vouch for the benchmark's own records"
    return batch.dedupe()


def triage_from_disk(path: Path) -> list[dict]:
    columns = run_columns(read_batch(path))
    return task_triage(columns, group_rows(columns), RANGES)


def report_from_disk(path: Path) -> str:
    return render_report(build_report_from_batch(read_batch(path)))


def pandas_frame(records: list[Record]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"step": r.step, "group_id": r.group_id, "task_id": r.task_id, **r.components}
            for r in records
            if r.status == "scored"
        ]
    )


def pandas_triage(records: list[Record]) -> set[tuple[str, str, str]]:
    frame = pandas_frame(records)
    out = set()
    grouped = frame.groupby(["task_id", "step", "group_id"])
    for name in COMPONENTS:
        stats = grouped[name].agg(["min", "max", "count", lambda s: s.std(ddof=0)])
        stats.columns = ["min", "max", "count", "std"]
        eligible = stats[stats["count"] >= 2]
        magnitude = np.maximum(eligible["min"].abs(), eligible["max"].abs())
        # the monitor's zero variance (thresholds.zero_variance_bound), written out
        bound = 1e-6 * np.maximum(1 / abs(WEIGHTS[name]), magnitude)
        eligible = eligible.assign(alive=(eligible["std"] > bound).astype(int))
        per_task = eligible.groupby(level=0).agg(alive=("alive", "max"), lo=("min", "min"), hi=("max", "max"))
        lo_all, hi_all = RANGES[name]
        for task, row in per_task[per_task.alive == 0].iterrows():
            verdict = (
                "never"
                if row.lo == lo_all and row.hi == lo_all
                else "always"
                if row.lo == hi_all and row.hi == hi_all
                else "constant"
            )
            out.add((task, name, verdict))
    return out


def best_of(repeat: int, fn: Callable[[], object]) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--groups-per-step", type=int, default=500)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    print(
        f"machine: {os.cpu_count()} cores, Python {platform.python_version()}, {platform.machine()}, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    records = synthetic(args.records, args.groups_per_step, args.group_size)
    steps = records[-1].step + 1
    print(
        f"input: {len(records):,} records, {steps} steps x {args.groups_per_step} groups x {args.group_size}, "
        f"{TASKS} tasks, 4 components"
    )

    mine = {(e["task_id"], e["component"], e["verdict"]) for e in our_triage(records)}
    theirs = pandas_triage(records)
    assert mine == theirs, f"triage disagrees with pandas: {len(mine ^ theirs)} entries differ"
    print(f"check: triage agrees with pandas ({len(mine):,} (task, component) entries)")

    tmp = tempfile.TemporaryDirectory()
    path = Path(tmp.name) / "records.jsonl"
    with path.open("w") as fh:
        fh.writelines(record.to_json() + "\n" for record in records)
    from_disk = {(e["task_id"], e["component"], e["verdict"]) for e in triage_from_disk(path)}
    assert from_disk == mine, "triage from disk disagrees with triage from records"
    parquet_dir = Path(tmp.name) / "parquet"
    write_parquet(records, parquet_dir, "bench")
    from_parquet = {(e["task_id"], e["component"], e["verdict"]) for e in triage_from_disk(parquet_dir)}
    assert from_parquet == mine, "triage from the Parquet export disagrees with triage from records"

    report_s, page = best_of(args.repeat, lambda: render_report(build_report(records)))
    size_mb = len(page.encode("utf-8")) / 1e6
    triage_s, _ = best_of(args.repeat, lambda: our_triage(records))
    disk_triage_s, _ = best_of(args.repeat, lambda: triage_from_disk(path))
    disk_report_s, disk_page = best_of(args.repeat, lambda: report_from_disk(path))
    parquet_triage_s, _ = best_of(args.repeat, lambda: triage_from_disk(parquet_dir))
    parquet_report_s, parquet_page = best_of(args.repeat, lambda: report_from_disk(parquet_dir))
    pandas_s, _ = best_of(args.repeat, lambda: pandas_triage(records))
    frame_s, _ = best_of(args.repeat, lambda: pandas_frame(records))
    tmp.cleanup()

    print(f"{'':34s}{'seconds':>10s}{'vs pandas':>12s}{'goal':>10s}")
    print(f"{'report (build + render HTML)':34s}{report_s:10.2f}{report_s / pandas_s:11.2f}x{'<= 10 s':>10s}")
    print(f"{'triage':34s}{triage_s:10.2f}{triage_s / pandas_s:11.2f}x{'<= 3 s':>10s}")
    print(f"{'report from JSONL on disk':34s}{disk_report_s:10.2f}{disk_report_s / pandas_s:11.2f}x{'<= 10 s':>10s}")
    print(f"{'triage from JSONL on disk':34s}{disk_triage_s:10.2f}{disk_triage_s / pandas_s:11.2f}x{'<= 3 s':>10s}")
    print(
        f"{'report from Parquet on disk':34s}{parquet_report_s:10.2f}{parquet_report_s / pandas_s:11.2f}x"
        f"{'<= 10 s':>10s}"
    )
    print(
        f"{'triage from Parquet on disk':34s}{parquet_triage_s:10.2f}{parquet_triage_s / pandas_s:11.2f}x"
        f"{'<= 3 s':>10s}"
    )
    print(f"{'pandas triage (frame + groupby)':34s}{pandas_s:10.2f}{1:11.2f}x")
    print(f"{'pandas DataFrame build alone':34s}{frame_s:10.2f}{frame_s / pandas_s:11.2f}x")
    print(
        f"HTML size: {size_mb:.2f} MB (goal <= 5 MB); load average now {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    failed = [
        name
        for name, ok in (
            ("report time", report_s <= 10),
            ("html size", size_mb <= 5),
            ("triage time", triage_s <= 3),
            ("report from disk", disk_report_s <= 10),
            ("html size from disk", len(disk_page.encode("utf-8")) <= 5e6),
            ("triage from disk", disk_triage_s <= 3),
            ("report from Parquet", parquet_report_s <= 10),
            ("html size from Parquet", len(parquet_page.encode("utf-8")) <= 5e6),
            ("triage from Parquet", parquet_triage_s <= 3),
        )
        if not ok
    ]
    print("goals: " + ("all met" if not failed else "MISSED " + ", ".join(failed)))


if __name__ == "__main__":
    main()
