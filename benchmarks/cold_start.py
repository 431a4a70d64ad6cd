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

``--user-package`` measures instead what a user's package costs a cold start (issue 20: at most 1.1x): for each
handler that imports user code, the import plus resolving the function's configured environment and reward
(what its first call does; the single-turn reward Lambda does it at import) with a user package of one module
(written to a temporary directory: an environment and a reward, ENVIRONMENT_REF/REWARD_REF/SINGLE_TURN_REWARD_REF
naming it) against the same without it (the built-in ask_before_coding and gsm8k). The two are measured
alternately, fresh interpreters each; the probe fails if anything reads the installed entry points (no scan at
cold start).

    .venv/bin/python benchmarks/cold_start.py [--runs 7] [--check] [--json] [--instructions] [--lambda-layer]
    .venv/bin/python benchmarks/cold_start.py --user-package [--runs 15] [--check]
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
    import os
    if os.environ.get("RESOLVE_USER_CODE"):  # --user-package: reading entry points is a scan at cold start
        import importlib.metadata
        def _refuse(*args, **kwargs):
            raise SystemExit("entry points were read at cold start")
        importlib.metadata.entry_points = _refuse
    spec = importlib.util.spec_from_file_location("handler", target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if os.environ.get("RESOLVE_USER_CODE"):  # what the first call resolves: the configured environment and reward
        from rewardpipe.aws.settings import Settings
        settings = Settings.from_env()
        if os.environ["RESOLVE_USER_CODE"] == "single_turn":
            settings.single_turn_reward
        else:
            settings.environment, settings.reward
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


def instructions(target: str, extra_env: dict[str, str] | None = None) -> float:
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
        env={**probe_env(), **(extra_env or {})},
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


# The handlers that import user code (the stack attaches the user layer to them), and what each resolves.
USER_CODE_HANDLERS = {
    "rollout_start": "multi_turn",
    "converse": "multi_turn",
    "score_rollout": "multi_turn",
    "error_record": "multi_turn",
    "nova_intake": "multi_turn",
    "single_turn_reward": "single_turn",
}
USER_GOAL_RATIO = 1.1
ONE_MODULE = '''"""A user's package of one module: an environment and its reward (cold_start.py --user-package)."""
from rewardpipe import EpisodeState, Environment, Reward, TaskRow, component


class NumberTask(TaskRow):
    secret: int


class NumberState(EpisodeState):
    guesses: list[int] = []


@component(range=(0.0, 1.0), role="outcome")
def solved(state) -> float:
    return 1.0 if state.guesses and state.guesses[-1] == 7 else 0.0


@component(range=(-1.0, 0.0), role="penalty", weight=0.5)
def long_answers(completion: str) -> float:
    return -1.0 if len(completion) > 200 else 0.0


REWARD = Reward("one_module", [solved, long_answers])


class Numbers(Environment):
    name = "one_module"
    version = "1"
    task_model = NumberTask
    state_model = NumberState
    reward = REWARD

    def respond(self, state, task, ctx):
        return state.append({"role": "user", "content": "again"}, next_action="policy")


ENVIRONMENT = Numbers()
'''


def user_package_ratios(runs: int, count_instructions: bool = False) -> dict[str, dict[str, float]]:
    """Per handler: (median and min) import + resolve in ms without and with the one-module user package (and,
    with ``count_instructions``, the instructions each executes beyond the interpreter's start, by callgrind)."""
    import tempfile

    global PYTHONPATH
    base_path = PYTHONPATH
    out: dict[str, dict[str, float]] = {}
    start = instructions("<pass>") if count_instructions else 0.0
    with tempfile.TemporaryDirectory(prefix="rewardpipe-user-pkg-") as pkg:
        Path(pkg, "acme_one.py").write_text(ONE_MODULE)
        user_env = {
            "ENVIRONMENT_REF": "acme_one:ENVIRONMENT",
            "REWARD_REF": "acme_one:REWARD",
            "SINGLE_TURN_REWARD_REF": "acme_one:REWARD",
            "REWARD_NAME": "",
        }
        for name, kind in USER_CODE_HANDLERS.items():
            target = str(ROOT / "functions" / name / "handler.py")
            samples: dict[str, list[float]] = {"without": [], "with": []}
            for i in range(runs + 1):
                for label in ("without", "with"):
                    extra = {"RESOLVE_USER_CODE": kind}
                    if label == "with":
                        extra.update(user_env)
                        PYTHONPATH = os.pathsep.join([pkg, base_path])
                    else:
                        PYTHONPATH = base_path
                    out_text = subprocess.run(
                        [*PYTHON, "-c", PROBE, target, "", "import-only"],
                        env={**probe_env(), **extra},
                        capture_output=True,
                        text=True,
                        check=True,
                    )
                    if i:  # the first round warms the byte-code caches
                        samples[label].append(float(out_text.stdout.strip().splitlines()[-1].split()[0]))
            PYTHONPATH = base_path
            out[name] = {
                f"{label}_{stat}": fn(values)
                for label, values in samples.items()
                for stat, fn in (("median_ms", statistics.median), ("min_ms", min))
            }
            if count_instructions:
                out[name]["without_minstr"] = instructions(target, {"RESOLVE_USER_CODE": kind}) - start
                PYTHONPATH = os.pathsep.join([pkg, base_path])
                out[name]["with_minstr"] = instructions(target, {"RESOLVE_USER_CODE": kind, **user_env}) - start
                PYTHONPATH = base_path
    return out


def main_user_package(args: argparse.Namespace) -> int:
    figures = user_package_ratios(args.runs, args.instructions)
    print(
        f"Handler import + resolving the configured environment and reward, {args.runs} alternating fresh "
        f"interpreters each (Python {sys.version.split()[0]}): without a user package (built-in ask_before_coding "
        f"/ gsm8k) and with a user package of one module; goal <= {USER_GOAL_RATIO}x"
    )
    print(
        f"{'handler':<22}{'without ms':>12}{'with ms':>10}{'ratio':>8}{'min without':>13}{'min with':>10}{'ratio':>8}"
    )
    worst = 0.0
    for name, f in figures.items():
        median_ratio = f["with_median_ms"] / f["without_median_ms"]
        min_ratio = f["with_min_ms"] / f["without_min_ms"]
        worst = max(worst, min(median_ratio, min_ratio))
        print(
            f"{name:<22}{f['without_median_ms']:>12.1f}{f['with_median_ms']:>10.1f}{median_ratio:>8.3f}"
            f"{f['without_min_ms']:>13.1f}{f['with_min_ms']:>10.1f}{min_ratio:>8.3f}"
        )
    if args.instructions:
        print("\ninstructions executed (millions, callgrind, interpreter start-up subtracted; load-independent):")
        for name, f in figures.items():
            worst_ir = f["with_minstr"] / f["without_minstr"]
            print(f"  {name:<22}{f['without_minstr']:>9.1f} without {f['with_minstr']:>9.1f} with   {worst_ir:.3f}x")
    print(
        f"\nworst ratio (the better of median and min per handler): {worst:.3f} "
        f"({'ok' if worst <= USER_GOAL_RATIO else 'OVER'} against {USER_GOAL_RATIO}x)"
    )
    print(f"load average during the run: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    if args.json:
        print(json.dumps(figures, indent=2))
    return 1 if args.check and worst > USER_GOAL_RATIO else 0


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
    parser.add_argument(
        "--user-package",
        action="store_true",
        help=f"a user package of one module against none: import + resolve, goal <= {USER_GOAL_RATIO}x",
    )
    args = parser.parse_args()
    if args.user_package:
        if args.instructions and shutil.which("valgrind") is None:
            parser.error("--instructions needs valgrind on PATH")
        if args.lambda_layer:
            use_lambda_layer()
        return main_user_package(args)
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
