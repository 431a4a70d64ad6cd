"""Benchmark: `rewardpipe monitor FILE.jsonl` over records on disk, against pandas reading the same file.

    .venv/bin/python benchmarks/monitor_file.py                     # 1,000,000 records (issue 9's size)
    .venv/bin/python benchmarks/monitor_file.py --records 100000    # quicker

Both sides start from the same JSONL file of records (written once, groups of 8, about 1% errors, the
generator of benchmarks/monitor.py) and end with the same statistics:

* **rewardpipe**: the `monitor` command itself, in this process (typer's test runner, ``--json``): the file
  read straight into columns (pyarrow's JSON reader with an explicit schema, every record's shape checked
  column-wise; no model object per record), repeated deliveries dropped, the monitor, the JSON output;
* **pandas**: ``pandas.read_json(lines=True)`` of the same file, the components flattened into columns,
  and the groupby of benchmarks/monitor.py (mean, std, per-group std, zero-variance share).

It prints both times (best of ``--repeat``) and rewardpipe/pandas; issue 9's goal is at most 3 s for
1,000,000 records. The parts of the rewardpipe side are timed too (reading into columns, dropping
repeats, the monitor over the columns) to show where the time goes, and so is `monitor` over the Parquet
export of the same records (``report --parquet``). ``--careful N`` also times the careful per-line path
(a Record validated per line: what runs when the fast reader cannot vouch for a file) over the first N
records, scaled to the file's size.

``--store N`` also times `rewardpipe monitor STORE` over a local store holding N records, one file per
record in the store's own layout (``runs/<run>/step=<n>/group=<g>/<rollout>.json``; 500 groups of 8 per
step, the generator of benchmarks/report.py), read straight into columns, against the careful path
(a Record validated per file) over the same store in the same run; issue 9 measured ~9 s for 200,000.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402
from monitor import COMPONENTS, best_time, pandas_stats, synthetic  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

import rewardpipe.monitoring.fastread as fastread  # noqa: E402
from rewardpipe.cli import app  # noqa: E402
from rewardpipe.monitoring.monitor import monitor_batch  # noqa: E402
from rewardpipe.store import record_key  # noqa: E402


def write_file(path: Path, records: int) -> None:
    with path.open("w") as fh:
        for record in synthetic(records, 8):
            fh.write(record.to_json() + "\n")


def rewardpipe_monitor(path: Path) -> dict:
    result = CliRunner().invoke(app, ["monitor", str(path), "--json", "--no-write-alarms"], catch_exceptions=False)
    if result.exit_code != 0:
        raise SystemExit(f"monitor failed: {result.output[-2000:]}")
    return json.loads(result.stdout)


def pandas_monitor(path: Path) -> dict:
    df = pd.read_json(path, lines=True)
    df = df[df["status"] == "scored"]
    components = pd.DataFrame.from_records(df["components"].tolist(), index=df.index)
    frame = pd.concat([df[["step", "group_id", "aggregate"]], components[list(COMPONENTS)]], axis=1)
    return pandas_stats(frame)


def careful_seconds(path: Path, records: int) -> float:
    """The careful per-line path over the first ``records`` lines (the fast readers switched off)."""
    head = path.with_name("head.jsonl")
    with path.open("rb") as src, head.open("wb") as dst:
        for _, line in zip(range(records), src):
            dst.write(line)
    original = fastread.read_jsonl_batch
    fastread.read_jsonl_batch = lambda p: None
    try:
        return best_time(lambda: rewardpipe_monitor(head), 1)
    finally:
        fastread.read_jsonl_batch = original
        head.unlink()


def write_store(root: Path, records: int) -> None:
    """A local store of ``records`` records, one file each, laid out as ``LocalStore.put_record`` lays them
    (same keys, same bytes; written directly, since a temporary file and a rename per record is only
    slower to set up)."""
    from report import synthetic as run_records

    made: set[Path] = set()
    for record in run_records(records, 500, 8):
        path = root / record_key(record)
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        path.write_text(record.to_json())


def store_seconds(root: Path, repeat: int) -> tuple[float, float]:
    """(monitor STORE as shipped, the same with the columnar store reader off), best of ``repeat``."""
    fast = rewardpipe_monitor(root)
    original = fastread.read_store_batch
    fastread.read_store_batch = lambda *args: None
    try:
        assert rewardpipe_monitor(root)["steps"] == fast["steps"], "the two store paths disagree"
        t_careful = best_time(lambda: rewardpipe_monitor(root), repeat)
    finally:
        fastread.read_store_batch = original
    return best_time(lambda: rewardpipe_monitor(root), repeat), t_careful


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--careful",
        type=int,
        default=0,
        metavar="N",
        help="also time the careful per-line path over the first N records",
    )
    parser.add_argument(
        "--store",
        type=int,
        default=0,
        metavar="N",
        help="also time monitor over a local store of N records, one file each",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "records.jsonl"
        write_file(path, args.records)
        print(
            f"Python {platform.python_version()}, {os.cpu_count()} cores, load average "
            f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}: {args.records:,} records, "
            f"{path.stat().st_size / 2**20:.0f} MiB"
        )
        ours = rewardpipe_monitor(path)
        theirs = pandas_monitor(path)
        agg = ours["steps"][0]["aggregate"]
        assert abs(agg["mean"] - theirs[(0, "aggregate")]["mean"]) < 1e-9, "the two sides disagree"
        parquet_dir = Path(tmp) / "parquet"
        export = CliRunner().invoke(app, ["report", str(path), "--json", "--parquet", str(parquet_dir)])
        assert export.exit_code == 0, export.output[-2000:]
        from_parquet = rewardpipe_monitor(parquet_dir)
        assert from_parquet["steps"] == ours["steps"], "monitor over the Parquet export disagrees"
        t_ours = best_time(lambda: rewardpipe_monitor(path), args.repeat)
        t_pandas = best_time(lambda: pandas_monitor(path), args.repeat)
        t_parquet = best_time(lambda: rewardpipe_monitor(parquet_dir), args.repeat)
        started = time.perf_counter()
        batch = fastread.read_jsonl_batch(path)
        t_read = time.perf_counter() - started
        started = time.perf_counter()
        batch = batch.dedupe()
        t_dedupe = time.perf_counter() - started
        t_monitor = best_time(lambda: monitor_batch(batch), args.repeat)
        print(f"rewardpipe monitor FILE --json: {t_ours:6.2f} s   (goal <= 3 s at 1,000,000 records)")
        print(f"pandas read_json + groupby:     {t_pandas:6.2f} s")
        print(f"rewardpipe / pandas:            {t_ours / t_pandas:6.2f}x")
        print(f"rewardpipe monitor PARQUET_DIR: {t_parquet:6.2f} s   (the report --parquet export of the same records)")
        print(
            f"  parts: read into columns {t_read:.2f} s, drop repeats {t_dedupe:.2f} s, "
            f"monitor over columns {t_monitor:.2f} s"
        )
        if args.careful:
            t_careful = careful_seconds(path, args.careful) * args.records / args.careful
            print(
                f"careful per-line path (fast readers off), scaled from {args.careful:,} records: "
                f"{t_careful:6.2f} s ({t_careful / t_ours:.1f}x the fast path)"
            )
        if args.store:
            root = Path(tmp) / "store"
            write_store(root, args.store)
            t_store, t_store_careful = store_seconds(root, args.repeat)
            print(
                f"rewardpipe monitor STORE --json, {args.store:,} records in as many files: {t_store:6.2f} s; "
                f"careful path (a Record per file) {t_store_careful:6.2f} s ({t_store_careful / t_store:.1f}x); "
                f"load average {os.getloadavg()[0]:.2f}"
            )


if __name__ == "__main__":
    main()
