"""Cold-start import cost of every Lambda handler, each measured in a fresh interpreter.

For each handler (functions/<name>/handler.py) the script starts a new Python process, imports the
handler module the way the Lambda runtime does, and reports the time the import took inside that
process (interpreter start-up excluded, since Lambda pays it for every runtime alike). Each figure
is the median of --runs runs. Baselines, measured the same way: ``pass`` (nothing) and
``import boto3`` (what any Python Lambda touching AWS pays), so the ratio column reads "this
handler costs N times a bare boto3 import". Every handler's first invocation calls AWS, so its cold
start also pays for boto3 if the import did not: the "+ first call" column adds what importing boto3
still costs after the handler's import (the two shown together are what a cold invocation pays before
it does any work). Goal: every handler under 150 ms on a quiet machine.

    .venv/bin/python benchmarks/cold_start.py [--runs 7] [--check] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL_MS = 150.0
ENV = {
    "BUCKET": "bench-bucket",
    "AWS_DEFAULT_REGION": "us-east-1",
    "POWERTOOLS_SERVICE_NAME": "rewardpipe",
    "POWERTOOLS_METRICS_NAMESPACE": "RewardPipe",
    # Tracing on, as the stack sets it for the functions outside the VPC: the X-Ray SDK must still not be
    # imported before the first invocation (rewardpipe.aws.lambda_support creates the Tracer lazily).
    "POWERTOOLS_TRACE_DISABLED": "false",
    "REWARD_NAME": "ask_before_coding",
    # As the stack sets it for the rollout functions and the code runner (no pydantic plugin scan).
    "PYDANTIC_DISABLE_PLUGINS": "__all__",
}

PROBE = """
import sys, time, importlib.util
target = sys.argv[1]
t0 = time.perf_counter()
if target == "<pass>":
    pass
elif target == "<boto3>":
    import boto3
else:
    spec = importlib.util.spec_from_file_location("handler", target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
t1 = time.perf_counter()
import boto3  # what the first invocation still pays if the handler's import did not
print((t1 - t0) * 1000, (time.perf_counter() - t1) * 1000)
"""


def measure(target: str, runs: int) -> tuple[float, float, float]:
    """(median, min) import time in ms over ``runs`` fresh interpreters, and the median of the boto3 import
    still left for the first call."""
    samples, rest = [], []
    env = {**os.environ, **ENV, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "0"}
    for _ in range(runs + 1):  # the first run warms the byte-code cache and is dropped
        out = subprocess.run([sys.executable, "-c", PROBE, target], env=env, capture_output=True, text=True, check=True)
        handler_ms, boto3_ms = out.stdout.strip().splitlines()[-1].split()
        samples.append(float(handler_ms))
        rest.append(float(boto3_ms))
    return statistics.median(samples[1:]), min(samples[1:]), statistics.median(rest[1:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    parser.add_argument("--check", action="store_true", help=f"exit 1 if any handler's median is over {GOAL_MS:.0f} ms")
    args = parser.parse_args()

    baseline_pass, _, _ = measure("<pass>", args.runs)
    baseline_boto3, _, _ = measure("<boto3>", args.runs)
    rows = []
    for handler in sorted((ROOT / "functions").glob("*/handler.py")):
        rows.append((handler.parent.name, measure(str(handler), args.runs)))

    print(f"Handler import time, median of {args.runs} fresh interpreters (Python {sys.version.split()[0]})")
    print(f"baselines: pass = {baseline_pass:.2f} ms, import boto3 = {baseline_boto3:.1f} ms\n")
    print(f"{'handler':<22}{'median ms':>11}{'min ms':>9}{'x boto3':>9}{'+ first call':>14}{'= cold':>9}"
          f"   goal: cold <= {GOAL_MS:.0f} ms")
    worst = 0.0
    for name, (ms, fastest, first_call) in rows:
        worst = max(worst, ms + first_call)
        verdict = "ok" if ms + first_call <= GOAL_MS else "OVER"
        print(f"{name:<22}{ms:>11.1f}{fastest:>9.1f}{ms / baseline_boto3:>9.2f}{first_call:>14.1f}{ms + first_call:>9.1f}"
              f"   {verdict}")
    print(f"\nload average during the run: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores "
          "(a busy machine inflates the medians; the min column is the least disturbed run)")
    if args.json:
        print(json.dumps({"pass_ms": baseline_pass, "boto3_ms": baseline_boto3,
                          "handlers": {name: {"median_ms": m, "min_ms": lo, "first_call_boto3_ms": b}
                                       for name, (m, lo, b) in rows}}, indent=2))
    return 1 if args.check and worst > GOAL_MS else 0


if __name__ == "__main__":
    sys.exit(main())
