"""The floor under issue 19's CLI goal: the least any fork-per-job design takes for the same batch, start-up included.

Three ways to run HumanEval x2 (the 164 canonical solutions twice, 328 jobs, 2 workers), interleaved round by
round, each from a fresh process as a user runs it:

* ``blog``: the blog's harness, a new interpreter per job, 2 threads (benchmarks/blog_harness.py);
* ``floor``: two fork servers with nothing but what a fork per job needs. Each is a fresh interpreter (the
  sandbox's own, ``-I``) that imports what rewardpipe's fork servers import for the model (``PREIMPORTS``) and
  freezes its objects, then per job forks a child that runs the code and the tests in one process and reports
  one byte. No isolation of any kind, no trusted runner, no result records, no checks between jobs: a design
  nobody should run model code with, measured only as the bound under every design that forks per job;
* ``rewardpipe``: ``rewardpipe exec --batch --workers 2 --json``, every layer on.

It prints the median wall time of each, the ratios, and what the goal (8x the blog) leaves: the most
rewardpipe may take, as a multiple of the floor.

    .venv/bin/python benchmarks/fork_per_job_floor.py [--rounds 3] [--interpreter /usr/bin/python3.11]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from execution import blog_batch, cli_batch, humaneval_jobs, timed, write_jobs
from fork_floor import IMPORT_AND_FREEZE

from rewardpipe.execution.runtime.zygote import PREIMPORTS

GOAL = 8.0

# One floor server: reads a job per line on stdin, answers one byte per job on stdout ("1" passed).
FLOOR_SERVER = (
    """
import gc, importlib, json, os, sys
modules = json.loads(sys.argv[1])
"""
    + IMPORT_AND_FREEZE
    + r"""
jobs, answers = os.fdopen(0, "rb"), os.fdopen(1, "wb", buffering=0)
for line in jobs:
    job = json.loads(line)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        verdict = b"0"
        try:
            namespace = {}
            exec(compile(job["code"], "<model code>", "exec"), namespace)
            exec(compile(job["tests"], "<tests>", "exec"), namespace)
            namespace["check"](namespace[job["entry_point"]])
            verdict = b"1"
        except BaseException:
            pass
        os.write(write_end, verdict)
        os._exit(0)
    os.close(write_end)
    verdict = os.read(read_end, 1)
    os.close(read_end)
    os.waitpid(pid, 0)
    answers.write(verdict)
"""
)


def floor_batch(path: str, workers: int, interpreter: str) -> int:
    """The batch through ``workers`` floor servers started now; returns the jobs that passed."""
    with open(path, "rb") as handle:
        lines = handle.read().splitlines(keepends=True)
    servers = [
        subprocess.Popen(
            [interpreter, "-I", "-c", FLOOR_SERVER, json.dumps(PREIMPORTS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        for _ in range(workers)
    ]
    passed = 0
    # Round robin, one job in flight per server, as each rewardpipe worker has one.
    shares = [lines[index::workers] for index in range(workers)]
    for position in range(max(len(share) for share in shares)):
        sent = []
        for server, share in zip(servers, shares, strict=True):
            if position < len(share):
                server.stdin.write(share[position])
                server.stdin.flush()
                sent.append(server)
        passed += sum(server.stdout.read(1) == b"1" for server in sent)
    for server in servers:
        server.stdin.close()
        server.wait()
    return passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--interpreter", default="/usr/bin/python3.11", help="the fork servers' interpreter")
    args = parser.parse_args()
    jobs = humaneval_jobs()
    batch = jobs * 2
    path = write_jobs(jobs, 2)
    seconds: dict[str, list[float]] = {"blog": [], "floor": [], "rewardpipe": []}
    passed: dict[str, int] = {}
    try:
        for number in range(1, args.rounds + 1):
            for name, run in (
                ("blog", lambda: blog_batch(batch, args.workers)),
                ("floor", lambda: floor_batch(path, args.workers, args.interpreter)),
                ("rewardpipe", lambda: cli_batch(path, args.workers)),
            ):
                spent, passed[name] = timed(run)
                seconds[name].append(spent)
            print(
                f"round {number}: "
                + ", ".join(f"{name} {values[-1]:.2f} s" for name, values in seconds.items())
                + f"; load average {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    finally:
        os.unlink(path)
    median = {name: statistics.median(values) for name, values in seconds.items()}
    print(f"HumanEval x2: {len(batch)} jobs, {args.workers} workers, start-up included, median of {args.rounds} rounds")
    for name in seconds:
        print(f"  {name:11s} {median[name]:6.2f} s  ({passed[name]}/{len(batch)} passed)")
    print(f"  blog / floor       : {median['blog'] / median['floor']:5.2f}x  (a fork per job and nothing else)")
    print(f"  blog / rewardpipe  : {median['blog'] / median['rewardpipe']:5.2f}x")
    print(f"  rewardpipe / floor : {median['rewardpipe'] / median['floor']:5.2f}")
    allowed = median["blog"] / GOAL
    print(
        f"  {GOAL:.0f}x the blog allows {allowed:.2f} s, {allowed / median['floor']:.2f} times the floor, for every "
        "layer, the trusted runner, the records and the checks together"
    )
    with open("/proc/loadavg") as handle:
        print("Load average at the end:", " ".join(handle.read().split()[:3]), f"on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
