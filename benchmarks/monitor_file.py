"""Benchmark: `rewardpipe monitor FILE.jsonl` over records on disk, against pandas reading the same file.

    .venv/bin/python benchmarks/monitor_file.py                     # 1,000,000 records (issue 9's size)
    .venv/bin/python benchmarks/monitor_file.py --records 100000    # quicker

Both sides start from the same JSONL file of records (written once, groups of 8, about 1% errors, the
generator of benchmarks/monitor.py) and end with the same statistics:

* **rewardpipe**: the `monitor` command itself, in this process (typer's test runner, ``--json``): the
  duplicate pass over every line's ids, per-line decoding and validation, the monitor, the JSON output;
* **pandas**: ``pandas.read_json(lines=True)`` of the same file, the components flattened into columns,
  and the groupby of benchmarks/monitor.py (mean, std, per-group std, zero-variance share).

It prints both times (best of ``--repeat``) and rewardpipe/pandas; issue 9's goal is at most 3 s for
1,000,000 records. The parts of the rewardpipe side are timed too (the id pass alone, validation alone,
the monitor over already-validated records) to show where the time goes.
"""

from __future__ import annotations

import argparse
import json
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

from rewardpipe.cli import app  # noqa: E402
from rewardpipe.cli.monitor_cmd import _record_identity  # noqa: E402
from rewardpipe.models import Record  # noqa: E402
from rewardpipe.monitoring import monitor_records  # noqa: E402


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "records.jsonl"
        write_file(path, args.records)
        lines = path.read_bytes().splitlines()
        print(f"Python {platform.python_version()}: {args.records:,} records, {path.stat().st_size / 2**20:.0f} MiB")
        ours = rewardpipe_monitor(path)
        theirs = pandas_monitor(path)
        agg = ours["steps"][0]["aggregate"]
        assert abs(agg["mean"] - theirs[(0, "aggregate")]["mean"]) < 1e-9, "the two sides disagree"
        t_ours = best_time(lambda: rewardpipe_monitor(path), args.repeat)
        t_pandas = best_time(lambda: pandas_monitor(path), args.repeat)
        t_ids = best_time(lambda: [_record_identity(line) for line in lines], args.repeat)
        started = time.perf_counter()
        validated = [Record.model_validate_json(line) for line in lines]
        t_validate = time.perf_counter() - started
        t_monitor = best_time(lambda: monitor_records(validated), args.repeat)
        print(f"rewardpipe monitor FILE --json: {t_ours:6.2f} s   (goal <= 3 s at 1,000,000 records)")
        print(f"pandas read_json + groupby:     {t_pandas:6.2f} s")
        print(f"rewardpipe / pandas:            {t_ours / t_pandas:6.2f}x")
        print(f"  parts: id pass {t_ids:.2f} s, validation {t_validate:.2f} s, monitor over records {t_monitor:.2f} s")


if __name__ == "__main__":
    main()
