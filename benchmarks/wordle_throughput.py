"""Benchmark: `rewardpipe run --env wordle --policy scripted` throughput, records and transcripts stored.

    .venv/bin/python benchmarks/wordle_throughput.py                      # 4 steps x 64 groups x 8, 3 rounds
    .venv/bin/python benchmarks/wordle_throughput.py --store-dir /dev/shm  # where the store is written
    .venv/bin/python benchmarks/wordle_throughput.py --profile            # where the run's time goes

After a short warm-up run (not counted), each round runs the `run` command itself, in this process (typer's runner over the real CLI: task loading,
the scripted policy, the environment, scoring, the local store writing every record and every transcript,
the monitor after each step), into a fresh run folder under ``--store-dir``. No sandbox is in the loop (the
environment runs no code). Issue 17 asks for >= 1,000 rollouts/s on this 2-core machine.

The machine is shared, so a wall-clock figure says as much about the other processes as about rewardpipe.
Printed for every round, with the load average beside them:

* **wall**: rollouts per second of elapsed time;
* **cpu**: rollouts per CPU-second of this process (all its threads, user + system: ``time.process_time``):
  what the run costs, whatever else the machine is doing;
* **main**: rollouts per CPU-second of the main thread alone (the turn loop and scoring; the store writes and
  the monitor run on a second thread, overlapped with the next step). On an idle 2-core machine the run's
  wall time is about the larger of the main thread's CPU time and half the process's.

Beside them, the **store's file-creation time**: the same store code (``LocalStore``'s atomic write: a
temporary file, then a rename) writing 2,000 transcript-sized files into ``--store-dir``, per file in wall and
CPU time, and how many files each run created (two a rollout). A disk whose file creation costs 200 us a
file cannot store 2,000 rollouts a second, whatever the loop does.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from typer.testing import CliRunner  # noqa: E402

import rewardpipe.monitoring  # noqa: E402,F401 - imported before the clock starts, as a long-lived process has
from rewardpipe.cli import app  # noqa: E402
from rewardpipe.envs.wordle import BUNDLED_TASKS  # noqa: E402
from rewardpipe.store import LocalStore  # noqa: E402

GOAL = 1000.0
SAMPLE_FILE = b'{"messages": [' + b'{"role": "user", "content": "Guess 1 of 6: CRANE"}, ' * 24 + b"]}"


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def file_creation(store_dir: Path, count: int = 2000) -> tuple[float, float]:
    """``(wall us, cpu us)`` per file of the store's own atomic write, 8 files a folder like a run's groups."""
    root = Path(tempfile.mkdtemp(prefix="file-creation-", dir=store_dir))
    try:
        store = LocalStore(root)
        wall, cpu = time.perf_counter(), time.process_time()
        for index in range(count):
            store.put_bytes(f"runs/bench/step=0/group=g{index // 8:04d}/k{index % 8}.json", SAMPLE_FILE)
        return (time.perf_counter() - wall) / count * 1e6, (time.process_time() - cpu) / count * 1e6
    finally:
        shutil.rmtree(root, ignore_errors=True)


class MainThreadClock:
    """CPU time of the thread that creates it (the CLI's turn loop runs on the calling thread)."""

    def __init__(self) -> None:
        self.ident = threading.get_ident()
        self.start = time.thread_time()

    def elapsed(self) -> float:
        assert threading.get_ident() == self.ident
        return time.thread_time() - self.start


def one_run(store: Path, run_id: str, steps: int, groups: int, k: int, profile: bool) -> dict:
    args = [
        "run",
        "--env",
        "wordle",
        "--policy",
        "scripted",
        "--tasks",
        str(BUNDLED_TASKS),
        "--steps",
        str(steps),
        "--groups-per-step",
        str(groups),
        "--group-size",
        str(k),
        "--out",
        str(store),
        "--run-id",
        run_id,
        "--json",
    ]
    profiler = cProfile.Profile() if profile else None
    main = MainThreadClock()
    wall, cpu = time.perf_counter(), time.process_time()
    if profiler:
        profiler.enable()
    result = CliRunner().invoke(app, args)
    if profiler:
        profiler.disable()
    wall, cpu, main_cpu = time.perf_counter() - wall, time.process_time() - cpu, main.elapsed()
    if result.exit_code != 0:
        raise SystemExit(f"rewardpipe {' '.join(args)} exited {result.exit_code}:\n{result.output[-2000:]}")
    rollouts = steps * groups * k
    files = sum(len(names) for _, _, names in os.walk(store / "runs" / run_id))
    if profiler:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(30)
        print(text.getvalue())
    return {"rollouts": rollouts, "wall": wall, "cpu": cpu, "main": main_cpu, "files": files}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--groups", type=int, default=64)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--store-dir",
        type=Path,
        default=None,
        help="Where the runs are stored (default: a temporary folder under the system's).",
    )
    parser.add_argument("--keep", action="store_true", help="Keep the stored runs.")
    parser.add_argument("--profile", action="store_true", help="Profile the main thread of the last round.")
    args = parser.parse_args()

    base = args.store_dir or Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    store = Path(tempfile.mkdtemp(prefix="wordle-throughput-", dir=base))
    print(
        f"rewardpipe run --env wordle --policy scripted: {args.steps} steps x {args.groups} groups x "
        f"{args.group_size}, store {store}"
    )
    print(f"before: {load()}, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    try:
        file_wall, file_cpu = file_creation(base)
        print(f"store file creation: {file_wall:.0f} us wall, {file_cpu:.0f} us cpu per file (2,000 files, {base})")
        # A short run first, not counted: what a long-lived process has paid once (validators built on first
        # use, modules imported by the first step, caches filled).
        one_run(store, "warm-up", 1, 8, args.group_size, False)
        rows = []
        for index in range(args.rounds):
            row = one_run(
                store,
                f"bench-{index}",
                args.steps,
                args.groups,
                args.group_size,
                args.profile and index == args.rounds - 1,
            )
            rows.append(row)
            n = row["rollouts"]
            print(
                f"round {index}: {n} rollouts, {row['files']} files | wall {n / row['wall']:7.0f}/s | "
                f"cpu {n / row['cpu']:7.0f}/s | main {n / row['main']:7.0f}/s | {load()}"
            )
        n = rows[0]["rollouts"]
        best_cpu = max(n / r["cpu"] for r in rows)
        median_cpu = statistics.median(n / r["cpu"] for r in rows)
        best_wall = max(n / r["wall"] for r in rows)
        idle_estimate = max(n / max(r["main"], r["cpu"] / 2) for r in rows)
        print(
            f"rollouts/s: wall best {best_wall:.0f}; cpu best {best_cpu:.0f}, median {median_cpu:.0f}; "
            f"idle 2-core estimate {idle_estimate:.0f} (goal >= {GOAL:.0f}); store file creation "
            f"{file_wall:.0f} us wall / {file_cpu:.0f} us cpu per file, {rows[0]['files'] / n:.1f} files a rollout"
        )
        print(f"after: {load()}")
    finally:
        if not args.keep:
            shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()
