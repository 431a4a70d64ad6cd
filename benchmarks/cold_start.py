"""Cold-start import cost of every Lambda handler, each measured in a fresh interpreter.

For each handler (functions/<name>/handler.py) the script starts a new Python process, imports the
handler module the way the Lambda runtime does, and reports the time the import took inside that
process (interpreter start-up excluded, since Lambda pays it for every runtime alike): that is the
Lambda INIT phase, the cold start proper. Each figure is the median of --runs runs. Baselines, measured
the same way: ``pass`` (nothing) and ``import boto3`` (what any Python Lambda touching AWS pays), so the
ratio column reads "this handler costs N times a bare boto3 import".

A handler defers to its first invocation what it need not load at import, so the cold invocation also
pays what the import did not: the "+ first call" column is, in the same process right after the
handler's import, building the validators of every pydantic model the imported modules define (they
are built at first use, see rewardpipe.deferred; all of them is an upper bound of what one call builds)
then importing boto3 and creating the clients that handler's first call creates (``FIRST_CALL_CLIENTS``;
network and the call's own work excluded). "= cold" is the sum, what a cold invocation pays before it
does any work. The goal (150 ms on a quiet machine) is judged on both columns and each verdict is
printed: "import" for the INIT phase, "cold" for import + first call.

Two more baselines say what no import structure can remove: ``import boto3`` (any handler that calls
AWS pays it in its cold invocation, so where it alone is over 150 ms no such handler's "cold" can be
under it), and the floor of a handler that validates its event with pydantic and logs with Powertools
(``from pydantic import BaseModel``, one model, ``Logger()``): the least such a handler's import can be.

``--instructions`` adds what a loaded machine cannot disturb: the instructions each import executes
(valgrind's callgrind, one run each, interpreter start-up subtracted), as a ratio to ``import boto3``'s.
It takes about 40 s per handler.

``--lambda-layer`` measures as the python3.13 runtime loads the code: a real CPython 3.13
(stacks.packaging.lambda_python), no site-packages (``-S``), only the staged Lambda layer for this machine's
architecture on the path (boto3 included: the layer bundles it) and its byte code never rewritten (``/opt`` is
read-only). Without it the handlers are imported from this checkout by this virtualenv's interpreter.

    .venv/bin/python benchmarks/cold_start.py [--runs 7] [--check] [--json] [--instructions] [--lambda-layer]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
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

# The AWS clients each handler's first invocation creates (rewardpipe.aws.settings.aws_client and the
# Nova bridge): what its cold invocation pays on top of the import. An empty tuple: no AWS call at all
# (the Nova reward Lambda scores in process and reports metrics through its logs).
FIRST_CALL_CLIENTS: dict[str, tuple[str, ...]] = {
    "code_runner": (),  # the job and its result travel in the invoke payload (rewardpipe.aws.jobs)
    "converse": ("s3", "stepfunctions"),
    "error_record": ("s3",),
    "rollout_start": ("s3", "stepfunctions"),
    "score_rollout": ("s3",),
    "variance_monitor": ("s3",),
    "single_turn_reward": (),
    **{
        name: ("s3", "sqs", "stepfunctions")
        for name in (
            "nova_intake",
            "nova_forward_turn",
            "nova_route_response",
            "nova_respond",
            "nova_sweep",
            "nova_rollout_proxy",
        )
    },
}

PROBE = """
import sys, time, importlib.util
target, clients = sys.argv[1], [c for c in sys.argv[2].split(",") if c]
import_only = sys.argv[3:] == ["import-only"]
t0 = time.perf_counter()
if target == "<pass>":
    pass
elif target == "<boto3>":
    import boto3
elif target == "<floor>":
    from pydantic import BaseModel, ConfigDict
    class Event(BaseModel):
        model_config = ConfigDict(defer_build=True)
        run: str
    from aws_lambda_powertools import Logger
    Logger()
else:
    spec = importlib.util.spec_from_file_location("handler", target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
t1 = time.perf_counter()
if target not in ("<pass>", "<boto3>", "<floor>") and not import_only:
    # The validators the import deferred (rewardpipe.deferred.DeferredModel): every model the handler's modules
    # define is built here, an upper bound of what a first call builds, so deferring moves no cost out of sight.
    from pydantic import BaseModel
    for mod in [module] + [m for name, m in list(sys.modules.items()) if name.startswith("rewardpipe.")]:
        for value in list(vars(mod).values()):
            if (isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == mod.__name__
                    and not value.__pydantic_complete__):
                value.model_rebuild()
# What the first invocation still pays: boto3 (unless the import loaded it) and its clients.
if clients and not import_only:
    import boto3
    for service in clients:
        boto3.client(service)
print((t1 - t0) * 1000, (time.perf_counter() - t1) * 1000)
"""


# The interpreter and module path of the probes: this virtualenv and checkout, or (``--lambda-layer``) CPython
# 3.13 with the staged layer only (use_lambda_layer).
PYTHON = [sys.executable]
PYTHONPATH = str(ROOT)
WRITE_BYTECODE = "0"


def use_lambda_layer() -> str:
    """Measure as the python3.13 runtime would run the handlers; returns the interpreter's version."""
    global PYTHON, PYTHONPATH, WRITE_BYTECODE
    import platform

    sys.path.insert(0, str(ROOT))
    from stacks import packaging

    python = packaging.lambda_python()
    if python is None:
        raise SystemExit(f"no CPython {packaging.LAMBDA_PYTHON_VERSION} found; set {packaging.LAMBDA_PYTHON_ENV}")
    architecture = {"x86_64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine())
    if architecture is None:
        raise SystemExit(f"no Lambda architecture matches this machine ({platform.machine()})")
    PYTHON, PYTHONPATH, WRITE_BYTECODE = [python, "-S"], str(Path(packaging.stage_layer(architecture)) / "python"), "1"
    return subprocess.run(
        [python, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True, text=True, check=True
    ).stdout.strip()


def probe_env() -> dict[str, str]:
    # Dummy credentials: creating a client needs none, but keeps botocore from probing the instance metadata.
    return {
        **os.environ,
        **ENV,
        "PYTHONPATH": PYTHONPATH,
        "PYTHONDONTWRITEBYTECODE": WRITE_BYTECODE,
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def instructions(target: str) -> float:
    """Millions of instructions a fresh interpreter executes to start and import ``target`` (callgrind).
    The byte-code cache is warm: ``measure`` ran the same import first."""
    out = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            *PYTHON,
            "-c",
            PROBE,
            target,
            "",
            "import-only",
        ],
        env=probe_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return int(re.search(r"Collected : (\d+)", out.stderr).group(1)) / 1e6


def measure(target: str, runs: int, clients: tuple[str, ...] = ()) -> tuple[float, float, float]:
    """(median, min) import time in ms over ``runs`` fresh interpreters, and the median of what the first
    call still pays (boto3 and ``clients``)."""
    samples, rest = [], []
    env = probe_env()
    for _ in range(runs + 1):  # the first run warms the byte-code cache and is dropped
        out = subprocess.run(
            [*PYTHON, "-c", PROBE, target, ",".join(clients)], env=env, capture_output=True, text=True, check=True
        )
        handler_ms, boto3_ms = out.stdout.strip().splitlines()[-1].split()
        samples.append(float(handler_ms))
        rest.append(float(boto3_ms))
    return statistics.median(samples[1:]), min(samples[1:]), statistics.median(rest[1:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    parser.add_argument(
        "--check",
        action="store_true",
        help=f"exit 1 if any handler's cold invocation (import + first call) is over {GOAL_MS:.0f} ms",
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="also count each import's instructions with valgrind (load-independent; ~40 s a handler)",
    )
    parser.add_argument(
        "--lambda-layer",
        action="store_true",
        help="CPython 3.13 with the staged layer only, as the python3.13 runtime loads the handlers",
    )
    args = parser.parse_args()
    version = use_lambda_layer() if args.lambda_layer else sys.version.split()[0]
    if args.instructions and shutil.which("valgrind") is None:
        parser.error("--instructions needs valgrind on PATH")

    baseline_pass, _, _ = measure("<pass>", args.runs)
    baseline_boto3, _, _ = measure("<boto3>", args.runs)
    baseline_floor, _, _ = measure("<floor>", args.runs)
    rows = []
    for handler in sorted((ROOT / "functions").glob("*/handler.py")):
        name = handler.parent.name
        if name not in FIRST_CALL_CLIENTS:
            parser.error(f"functions/{name}: add the clients its first call creates to FIRST_CALL_CLIENTS")
        rows.append((name, measure(str(handler), args.runs, FIRST_CALL_CLIENTS[name])))

    where = "the staged Lambda layer only" if args.lambda_layer else "this checkout"
    print(f"Handler import time, median of {args.runs} fresh interpreters (Python {version}, {where})")
    print(
        f"baselines: pass = {baseline_pass:.2f} ms, import boto3 = {baseline_boto3:.1f} ms, "
        f"floor (pydantic BaseModel + one model + Powertools Logger) = {baseline_floor:.1f} ms\n"
    )
    print(
        f"{'handler':<22}{'import ms':>11}{'min ms':>9}{'x boto3':>9}{'+ first call':>14}{'= cold':>9}"
        f"   goal {GOAL_MS:.0f} ms: import / cold   first call creates"
    )
    worst = 0.0

    def verdict(ms: float) -> str:
        return "ok" if ms <= GOAL_MS else "OVER"

    for name, (ms, fastest, first_call) in rows:
        worst = max(worst, ms + first_call)
        clients = ", ".join(FIRST_CALL_CLIENTS[name]) or "(no AWS client)"
        print(
            f"{name:<22}{ms:>11.1f}{fastest:>9.1f}{ms / baseline_boto3:>9.2f}{first_call:>14.1f}{ms + first_call:>9.1f}"
            f"   {verdict(ms):>4} / {verdict(ms + first_call):<4}      {clients}"
        )
    print(
        f"\nunder {GOAL_MS:.0f} ms: import {sum(ms <= GOAL_MS for _, (ms, _, _) in rows)}/{len(rows)} handlers, "
        f"cold (import + first call) {sum(ms + fc <= GOAL_MS for _, (ms, _, fc) in rows)}/{len(rows)}"
    )
    if args.instructions:
        start = instructions("<pass>")
        ir = {t: instructions(t) - start for t in ("<boto3>", "<floor>")}
        ir.update({name: instructions(str(ROOT / "functions" / name / "handler.py")) - start for name, _ in rows})
        print(
            "\ninstructions executed by the import (millions, callgrind, interpreter start-up "
            f"of {start:.0f} subtracted; "
            "the same on a busy machine):"
        )
        for name, value in ir.items():
            print(f"  {name:<22}{value:>9.1f}   {value / ir['<boto3>']:.2f}x import boto3")
    if baseline_boto3 > GOAL_MS:
        print(
            f"import boto3 alone takes {baseline_boto3:.0f} ms here: no handler whose first call talks to AWS can "
            f"have a cold invocation under {GOAL_MS:.0f} ms on this machine, whatever its import does."
        )
    if baseline_floor > GOAL_MS:
        print(
            f"pydantic + the Powertools Logger alone take {baseline_floor:.0f} ms here: no handler that validates "
            f"with pydantic and logs with Powertools can import in under {GOAL_MS:.0f} ms on this machine."
        )
    print(
        f"\nload average during the run: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores "
        "(a busy machine inflates the medians; the min column is the least disturbed run)"
    )
    if args.json:
        print(
            json.dumps(
                {
                    "pass_ms": baseline_pass,
                    "boto3_ms": baseline_boto3,
                    "floor_ms": baseline_floor,
                    **({"instructions_millions": ir} if args.instructions else {}),
                    "handlers": {
                        name: {
                            "import_median_ms": m,
                            "import_min_ms": lo,
                            "first_call_ms": b,
                            "first_call_clients": list(FIRST_CALL_CLIENTS[name]),
                        }
                        for name, (m, lo, b) in rows
                    },
                },
                indent=2,
            )
        )
    return 1 if args.check and worst > GOAL_MS else 0


if __name__ == "__main__":
    sys.exit(main())
