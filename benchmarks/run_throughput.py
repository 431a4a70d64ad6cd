"""Benchmark: local `rewardpipe run` throughput against the sandbox's own throughput on the same tasks.

    .venv/bin/python benchmarks/run_throughput.py                 # 4 steps x 12 groups x 8 rollouts
    .venv/bin/python benchmarks/run_throughput.py --steps 2       # quicker

In one process, with the same sandbox executor (the process-wide default, ``--workers`` workers):

* **sandbox alone**: every job the run will execute (the committed code of each rollout, against its
  task's hidden tests) is first collected from a dry run, then executed through ``run_batch``: executions
  per second, the ceiling for a pipeline that must execute those jobs;
* **run**: the `run` command itself (scripted policy, rule-based simulator, local store in a temporary
  directory, monitor after each step), rollouts per second, and executions per second (rollouts that
  committed code);

and prints run/sandbox, the goal being >= 0.8 (issue 9). ``--profile`` also prints where the run's own
process spends its time (cProfile, top functions), to see whether the turn loop, the simulator, scoring
or the store is the bottleneck.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import platform
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from typer.testing import CliRunner  # noqa: E402

from rewardpipe.cli import app  # noqa: E402
from rewardpipe.envs.ask_before_coding import ENVIRONMENT  # noqa: E402
from rewardpipe.episode import converse, execution_job, start_episode  # noqa: E402
from rewardpipe.execution import get_executor  # noqa: E402
from rewardpipe.models import load_tasks  # noqa: E402
from rewardpipe.runner import plan_step  # noqa: E402

TASKS = Path(__file__).resolve().parents[1] / "rewardpipe" / "data" / "tasks.jsonl"


def planned_jobs(steps: int, groups: int, k: int, max_turns: int) -> tuple[list[Any], int]:
    """The jobs `run` will execute (same seed, same plan), and the number of rollouts."""
    tasks = load_tasks(TASKS)
    policy = ENVIRONMENT.scripted_policy(seed=0)
    jobs, rollouts = [], 0
    for step in range(steps):
        for slot in plan_step(tasks, step, groups, k):
            rollouts += 1
            state = start_episode(
                slot.task,
                env=ENVIRONMENT,
                run_id="bench",
                step=slot.step,
                group_id=slot.group_id,
                rollout_id=slot.rollout_id,
                max_turns=max_turns,
            )
            job = execution_job(converse(state, slot.task, policy, ENVIRONMENT), slot.task, ENVIRONMENT)
            if job is not None:
                jobs.append(job)
    return jobs, rollouts


def file_creation_ms(directory: Path, files: int = 200) -> float:
    """Median time to create (and write) one small file in ``directory``, as the store does."""
    times = []
    with tempfile.TemporaryDirectory(dir=directory, prefix=".rewardpipe-bench-fs-") as tmp:
        for index in range(files):
            started = time.perf_counter()
            with open(Path(tmp) / f"{index}.json", "wb") as fh:
                fh.write(b"{}" * 500)
            times.append(time.perf_counter() - started)
    return 1000 * sorted(times)[len(times) // 2]


def run_command(out: Path, steps: int, groups: int, k: int, workers: int, run_id: str) -> None:
    result = CliRunner().invoke(
        app,
        [
            "run",
            "--tasks",
            str(TASKS),
            "--steps",
            str(steps),
            "--groups-per-step",
            str(groups),
            "-k",
            str(k),
            "--workers",
            str(workers),
            "--out",
            str(out),
            "--run-id",
            run_id,
            "--json",
        ],
        catch_exceptions=False,
    )
    if result.exit_code != 0:
        raise SystemExit(f"run failed: {result.output[-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--groups", type=int, default=12)
    parser.add_argument("-k", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds; the best of each is kept")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--store-dir",
        type=Path,
        default=Path.cwd(),
        help="where the run's temporary store goes (default: the current directory, as run's own "
        "default --out; on some machines /tmp is far slower at creating files)",
    )
    args = parser.parse_args()

    jobs, rollouts = planned_jobs(args.steps, args.groups, args.k, 6)
    executor = get_executor()
    list(executor.run_batch(jobs[: 2 * args.workers], workers=args.workers))  # start the fork servers
    print(
        f"Python {platform.python_version()}, {args.workers} workers: {rollouts} rollouts per run, "
        f"{len(jobs)} of them execute code"
    )
    create_ms = file_creation_ms(args.store_dir)
    best_sandbox = best_run = run_cpu = float("inf")
    with tempfile.TemporaryDirectory(dir=args.store_dir, prefix=".rewardpipe-bench-") as tmp:
        for round_ in range(args.rounds):  # interleaved, so machine load affects both alike
            started = time.perf_counter()
            results = list(executor.run_batch(jobs, workers=args.workers))
            best_sandbox = min(best_sandbox, time.perf_counter() - started)
            assert len(results) == len(jobs)
            started, cpu = time.perf_counter(), time.process_time()
            run_command(Path(tmp), args.steps, args.groups, args.k, args.workers, f"bench-{round_}")
            best_run = min(best_run, time.perf_counter() - started)
            run_cpu = min(run_cpu, time.process_time() - cpu)
        sandbox_eps = len(jobs) / best_sandbox
        run_eps = len(jobs) / best_run
        print(f"sandbox alone: {sandbox_eps:7.1f} exec/s ({best_sandbox:.2f} s for {len(jobs)} jobs)")
        print(f"run:           {run_eps:7.1f} exec/s, {rollouts / best_run:7.1f} rollouts/s ({best_run:.2f} s)")
        print(f"run / sandbox: {run_eps / sandbox_eps:.2f}x (goal >= 0.8)")
        print(
            f"run's own process (turn loop, simulator, scoring, store, monitor): {run_cpu:.2f} CPU-s, "
            f"{1000 * run_cpu / rollouts:.2f} ms per rollout"
        )
        print(
            f"store under {args.store_dir}: creating a file there takes {create_ms:.3f} ms (the run creates two "
            f"per rollout; a slow file system shows up in the run's CPU time and wall time)"
        )
        if args.profile:
            profiler = cProfile.Profile()
            profiler.enable()
            run_command(Path(tmp), args.steps, args.groups, args.k, args.workers, "bench-profile")
            profiler.disable()
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(15)
            print(text.getvalue())


if __name__ == "__main__":
    main()
