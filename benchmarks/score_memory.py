"""Benchmark: `rewardpipe score` memory against the number of rollouts, streaming vs reading everything.

    .venv/bin/python benchmarks/score_memory.py                    # 20,000 and 200,000 rollouts
    .venv/bin/python benchmarks/score_memory.py --sizes 2000 20000  # quicker

What it measures, in one process, for each size:

* **streaming**: the `score` command itself (`rewardpipe.cli.run_cmd.score`, through typer), which reads,
  executes, scores, writes and forgets ``--batch-size`` rollouts at a time;
* **baseline**: the way `score` worked before issue 9, built from the same library calls: the whole file
  read into a list of rollouts, all of them scored into a list of records, then all written.

Peak traced memory (tracemalloc: Python allocations made during the call) is printed for both, and the
ratio between sizes: a flat pipeline stays near 1x when the input grows 10x. The only per-rollout state
the streaming path keeps is each rollout id and its line number (to refuse a repeated id), which the
figures include.

What it leaves out on purpose, so the figures are the pipeline's own: the sandbox (an instant stand-in
executor answers "passed" for every job; the real sandbox runs in separate processes whose memory does
not grow with the file) and the store (a store that discards what it is given; the local and S3 stores
hold nothing per record).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from typer.testing import CliRunner  # noqa: E402

import rewardpipe.execution as execution  # noqa: E402
import rewardpipe.store as store_module  # noqa: E402
from rewardpipe.cli import app  # noqa: E402
from rewardpipe.execution.result import ExecutionResult, ExecutionStatus  # noqa: E402
from rewardpipe.models import load_rollouts, load_tasks  # noqa: E402
from rewardpipe.rewards import get_reward  # noqa: E402
from rewardpipe.runner import score_rollouts  # noqa: E402

TASK = {
    "task_id": "add",
    "prompt": "Write a function that combines two numbers.",
    "spec": ["The two numbers are added together."],
    "entry_point": "add",
    "tests": "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n        self.assertEqual(add(1, 2), 3)\n",
    "reference_solution": "def add(a, b):\n    return a + b\n",
}
CODE = "Here it is:\n```python\ndef add(a, b):\n    return a + b\n```"


class InstantExecutor:
    """Answers every job at once: the sandbox's own cost is measured by benchmarks/execution.py."""

    def run(self, job: Any) -> ExecutionResult:
        return ExecutionResult(id=job.id, status=ExecutionStatus.PASSED, passed=1, total=1)

    def run_batch(self, jobs: Any, workers: int | None = None) -> Iterator[ExecutionResult]:
        return (self.run(job) for job in jobs)


class DiscardingStore(store_module.Store):
    location = "discard://"

    def _write(self, key: str, data: bytes) -> None:
        pass

    def _read(self, key: str) -> bytes:
        raise KeyError(key)

    def _list(self, prefix: str) -> Iterator[str]:
        return iter(())

    def _list_dirs(self, prefix: str) -> list[str]:
        return []


def write_inputs(directory: Path, rollouts: int) -> tuple[Path, Path]:
    tasks = directory / "tasks.jsonl"
    tasks.write_text(json.dumps(TASK) + "\n")
    path = directory / f"rollouts-{rollouts}.jsonl"
    with path.open("w") as fh:
        for i in range(rollouts):
            # Each rollout's own wording (as a model's would be), so no cache can serve one rollout's turns to
            # the next: the time is what scoring distinct rollouts costs.
            messages = [
                {"role": "user", "content": TASK["prompt"]},
                {"role": "assistant", "content": f"Should negative numbers such as -{i} be allowed?"},
                {"role": "user", "content": "Yes, negatives are allowed."},
                {"role": "assistant", "content": CODE.replace("Here it is", f"Here it is (draft {i})")},
            ]
            fh.write(
                json.dumps(
                    {
                        "rollout_id": f"step0-group{i // 8:06d}-k{i % 8}",
                        "group_id": f"group{i // 8:06d}",
                        "task_id": "add",
                        "step": 0,
                        "messages": messages,
                    }
                )
                + "\n"
            )
    return tasks, path


def streaming(tasks: Path, rollouts: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["score", str(rollouts), "--tasks", str(tasks), "--out", "discard", "--run-id", "bench", "--overwrite"],
        catch_exceptions=False,
    )
    if result.exit_code != 0:
        raise SystemExit(f"score failed: {result.output}")


def baseline(tasks: Path, rollouts: Path) -> None:
    by_id = {t.task_id: t for t in load_tasks(tasks)}
    from rewardpipe.envs.ask_before_coding import ENVIRONMENT

    records = score_rollouts(
        load_rollouts(rollouts),
        by_id,
        executor=InstantExecutor(),
        env=ENVIRONMENT,
        reward=get_reward("ask_before_coding"),
        run_id="bench",
    )
    store = DiscardingStore()
    for record in records:
        store.put_record(record)


def measure(fn: Any, *args: Any) -> tuple[float, float]:
    """(seconds, peak traced MiB) of one call."""
    gc.collect()
    tracemalloc.start()
    started = time.perf_counter()
    fn(*args)
    elapsed = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return elapsed, peak / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20_000, 200_000])
    args = parser.parse_args()
    execution.get_executor = InstantExecutor  # the CLI imports it from here at call time
    store_module.open_store = lambda location, client=None: DiscardingStore()
    print(
        f"Python {platform.python_version()} on {platform.machine()}, load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, rollouts per size: {args.sizes}"
    )
    results: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            tasks, rollouts = write_inputs(Path(tmp), size)
            stream_s, stream_mib = measure(streaming, tasks, rollouts)
            base_s, base_mib = measure(baseline, tasks, rollouts)
            results[size] = {"stream": stream_mib, "base": base_mib}
            print(
                f"{size:>8,} rollouts  streaming {stream_mib:8.1f} MiB ({stream_s:6.1f} s)   "
                f"baseline {base_mib:8.1f} MiB ({base_s:6.1f} s)   baseline/streaming {base_mib / stream_mib:5.1f}x"
            )
            rollouts.unlink()
    small, large = min(results), max(results)
    if small != large:
        growth = large / small
        print(
            f"input grew {growth:.0f}x: streaming peak grew {results[large]['stream'] / results[small]['stream']:.2f}x, "
            f"baseline peak grew {results[large]['base'] / results[small]['base']:.2f}x; "
            f"per extra rollout: streaming "
            f"{(results[large]['stream'] - results[small]['stream']) * 2**20 / (large - small):.0f} B, baseline "
            f"{(results[large]['base'] - results[small]['base']) * 2**20 / (large - small):.0f} B"
        )


if __name__ == "__main__":
    main()
