"""Cost per million two-question rollouts, counted from the synthesized state machine run with the real handlers.

For each policy path (replay, OpenAI-compatible endpoint, trainer callback) the script runs two-question
rollouts (question, question, commit: 3 policy turns, 2 simulator turns, one short job) through the
CDK-synthesized state machine in moto's Step Functions engine, with every Lambda running its real
handler in-process (tests/aws/harness.py). From the execution histories and the AWS calls it counts,
per rollout:

* state transitions (every state entered; what Standard workflows bill),
* Lambda invocations per function (and so GB-seconds at each function's configured memory),
* S3 requests by class (PUT/LIST vs GET) and bytes stored, SQS requests,
* history events (each is one CloudWatch Logs event at the state machine's log level ALL).

It also runs one replay rollout whose job goes to Fargate (the job's ``timeout_s`` above the routing
threshold), to count what that route adds (its Choice, Fargate and Score states, the Score invocation), and
measures each function's cold start on CPython 3.13 from the staged layer (benchmarks/cold_start.py
``--lambda-layer``; this 3.11 interpreter's imports when no 3.13 is found), billed as INIT since August 2025.

It then prices them with the list prices below (us-east-1, checked 2026-11; Lambda compute at the rate of
the architecture the stack deploys, arm64 by default) and the stated assumptions, and prints the table with the
arithmetic of each line. ``--write docs/aws.md`` replaces the generated block between the ``cost-table`` markers there.
``--root DIR`` runs another checkout (e.g. an older commit unpacked with ``git archive``) to compare transition counts.

    .venv/bin/python benchmarks/cost.py [--rollouts 1] [--write docs/aws.md] [--root DIR]

The table is followed by its sensitivity to the two assumptions that move it most: the seconds an
OpenAI-compatible endpoint keeps the conversation Lambda waiting per policy turn, and the share of jobs that
run on Fargate.

Then the cost per **built-in environment** (ask_before_coding, wordle, tool_call): for each, the stack is deployed
with that environment configured (ENVIRONMENT_REF and REWARD_REF, as the stack sets them for cdk.json's
``environment``; issue 20) and replay rollouts of the environment's own scripted reference episode (the first
bundled task; tool_call's tagged-text scenario, since replayed turns are text) walk the machine with the
environment's real handlers. An environment that never asks for execution pays for no code runner, Fargate task
or sandbox DNS query; its turns and snapshots are what it pays for. ``--no-envs`` skips this part.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # cold_start, beside this script

# -- list prices (us-east-1) -----------------------------------------------------------------------
PRICE = {
    "transition": 0.025 / 1000,  # Step Functions Standard, per state transition
    "lambda_request": 0.20 / 1e6,
    # Lambda compute per GB-second by architecture (first 6 billion GB-s a month): Graviton is 20 % cheaper.
    "lambda_gb_s": {"x86_64": 0.0000166667, "arm64": 0.0000133334},
    "fargate_vcpu_h": 0.04048,
    "fargate_gb_h": 0.004445,
    "s3_put": 0.005 / 1000,  # PUT, COPY, POST, LIST
    "s3_get": 0.0004 / 1000,  # GET and all other requests
    "s3_gb_month": 0.023,
    "sqs_request": 0.40 / 1e6,  # standard queue, per 64 KB chunk
    "logs_gb": 0.50,  # CloudWatch Logs ingestion (vended logs: first 10 TB tier)
    "xray_trace": 5.00 / 1e6,
    "metric_month": 0.30,
    "dns_firewall_query": 0.60 / 1e6,  # Route 53 Resolver DNS Firewall, per query processed
}
# -- assumptions (the same rollout shape and job mix as before, so figures compare) ------------------
# Durations are the same on either architecture: the CPU measured here (x86-64) is taken as is for arm64.
CONTROL_STEP_S = 0.2  # billed duration of a control Lambda (start, converse, score, error)
OPENAI_TURN_S = 5.0  # a Lambda waiting on an OpenAI-compatible endpoint, per policy turn
RUNNER_JOB_S, RUNNER_GB = 2.0, 1769 / 1024
FULL_VCPU_MB = 1769  # Lambda gives a function one full vCPU at 1,769 MB, proportionally less below
FARGATE_SHARE, FARGATE_MIN, FARGATE_VCPU, FARGATE_GB = 0.01, 16.0, 1.0, 2.0
RETRY_RATE = 0.01  # share of Task states retried once (throttling, 5xx); each retry is a transition + invocation
LAMBDA_LOG_BYTES = 1000  # START/END/REPORT lines plus one Powertools line per invocation
HISTORY_EVENT_LOG_BYTES = 350  # one state-machine log event (include_execution_data off)
INSIGHTS_BYTES_PER_TASK_MIN = 1000  # Container Insights performance log event per Fargate task per minute
TRACES_PER_ROLLOUT = 1.0  # upper bound: every execution traced (default sampling records fewer)
# INIT is billed for ZIP functions on managed runtimes since 1 August 2025 ("AWS Lambda standardizes billing for
# INIT phase"); the same post puts cold starts at "under 1% of invocations". A cold invocation pays the handler's
# import, the runtime's own start and what the first call still loads (boto3 clients), at the function's share of
# a vCPU (an upper bound: the measured time is for a full core).
COLD_START_SHARE = 0.01
RUNTIME_INIT_S = 0.1  # the Python runtime's start before the handler module is imported (assumption)
# Fargate bills from the start of the image pull to the task's end; the runner image (python:3.11-slim and the
# pinned requirements, ~100 MB compressed) through the VPC endpoints (assumption).
FARGATE_PULL_S = 30.0
# DNS queries the sandbox's VPC sends through the DNS Firewall: a code-runner Lambda resolves the S3 endpoint
# (A and AAAA) once per invocation, an upper bound (a warm client keeps its connection); a Fargate task resolves
# ECR's API and registry, S3 (image layers and the job) and CloudWatch Logs.
DNS_QUERIES_RUNNER = 2
DNS_QUERIES_FARGATE = 10
# The sensitivity the table is printed with.
LATENCIES_S = (1.0, 5.0, 15.0, 30.0, 60.0)
FARGATE_SHARES = (0.0, 0.01, 0.05, 0.10, 0.25)

QUESTION_1 = "Should negative durations raise an error?"
QUESTION_2 = "Which format do you want for durations over an hour?"


def _setup(root: Path):
    sys.path.insert(0, str(root))
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    from tests.aws import harness

    for key, value in harness.TEST_ENV.items():
        os.environ[key] = value
    return harness


def _answer(n_assistant: int, code: str) -> str:
    return [QUESTION_1, QUESTION_2][n_assistant] if n_assistant < 2 else f"```python\n{code}\n```"


def _own_harness():
    """This checkout's test harness (its chat endpoint), also when ``--root`` measures another checkout."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("rewardpipe_cost_harness", ROOT / "tests" / "aws" / "harness.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


class CallCounter:
    """Counts AWS API calls by (service, operation) while ``active``."""

    def __init__(self) -> None:
        from botocore.client import BaseClient

        self.calls: collections.Counter = collections.Counter()
        self.invoked: collections.Counter = collections.Counter()  # Lambda Invoke calls by function name
        self.active = False
        original = BaseClient._make_api_call
        counter = self

        def counted(client, operation_name, api_params):
            if counter.active:
                counter.calls[(client.meta.service_model.service_name, operation_name)] += 1
                if operation_name == "Invoke":
                    counter.invoked[str(api_params.get("FunctionName", "")).rsplit(":", 1)[-1]] += 1
            return original(client, operation_name, api_params)

        BaseClient._make_api_call = counted


def _history(sfn, arn: str) -> list[dict]:
    events, token = [], None
    while True:
        page = sfn.get_execution_history(executionArn=arn, maxResults=1000, **({"nextToken": token} if token else {}))
        events += page["events"]
        token = page.get("nextToken")
        if not token:
            return events


def _serve_callback(harness, deployment, sfn, s3_store, arn: str, code: str) -> None:
    import boto3

    sqs = boto3.client("sqs", region_name=harness.REGION)
    deadline = time.time() + 120
    while sfn.describe_execution(executionArn=arn)["status"] == "RUNNING":
        if time.time() > deadline:
            raise TimeoutError("callback rollout did not finish")
        for message in sqs.receive_message(QueueUrl=deployment.queue_url, WaitTimeSeconds=0).get("Messages", []):
            body = json.loads(message["Body"])
            messages = (
                body["messages"] if "messages" in body else s3_store.get_json(body["state_key"])["state"]["messages"]
            )
            n = sum(1 for m in messages if m["role"] == "assistant")
            sfn.send_task_success(taskToken=body["task_token"], output=json.dumps({"text": _answer(n, code)}))
            sqs.delete_message(QueueUrl=deployment.queue_url, ReceiptHandle=message["ReceiptHandle"])
        time.sleep(0.02)


def _count_rollouts(
    harness, deployment, sfn, s3, store, counter, *, path: str, policy: dict, task, rollouts: int, label: str
) -> dict:
    """Run ``rollouts`` rollouts of one policy path and return what each one counted, on average."""
    totals: collections.Counter = collections.Counter()
    invocations: collections.Counter = collections.Counter()
    counter.calls.clear()
    counter.invoked.clear()
    before = {o["Key"] for o in s3.list_objects_v2(Bucket=deployment.bucket).get("Contents", [])}
    for i in range(rollouts):
        payload = {
            "run": f"cost-{label}",
            "step": 0,
            "group": "g0",
            "rollout": f"r{i}",
            "task": task.model_dump(mode="json"),
            "policy": policy,
        }
        counter.active = True
        arn = sfn.start_execution(
            stateMachineArn=deployment.state_machine_arn, name=f"cost-{label}-{i}", input=json.dumps(payload)
        )["executionArn"]
        if path == "callback":
            _serve_callback(harness, deployment, sfn, store, arn, task.reference_solution)
        desc = harness.wait_execution(sfn, arn)
        counter.active = False
        output = json.loads(desc.get("output") or "{}")
        if desc["status"] != "SUCCEEDED" or output.get("status") != "scored":
            raise RuntimeError(f"{label} rollout did not score: {desc['status']} {output}")
        events = _history(sfn, arn)
        entered = [e["stateEnteredEventDetails"]["name"] for e in events if e["type"].endswith("StateEntered")]
        totals["transitions"] += len(entered)
        totals["history_events"] += len(events)
        totals.update(f"event:{e['type']}" for e in events)
        # A rollout is scored by a control function: the Score state's, or the conversation state's
        # that ran the job itself (then it also waited for the code-runner Lambda).
        if "ScoreStep" not in entered:
            totals["inline_scores"] += 1
            if "RunCodeLambda" not in entered and "RunCodeFargate" not in entered:
                totals["inline_runs"] += 1
        for e in events:
            details = e.get("taskScheduledEventDetails") or {}
            if details.get("resourceType") == "sqs":
                totals["sqs_send"] += 1
            elif details.get("resourceType") == "ecs":
                totals["ecs_tasks"] += 1
    invocations.update(counter.invoked)
    after = s3.list_objects_v2(Bucket=deployment.bucket).get("Contents", [])
    totals["s3_bytes"] = sum(o["Size"] for o in after if o["Key"] not in before)
    for (service, op), n in counter.calls.items():
        if service == "s3":
            totals["s3_put" if op in ("PutObject", "CopyObject", "ListObjectsV2", "ListObjects") else "s3_get"] += n
        elif service == "sqs" and op == "SendMessage":
            totals["sqs_send"] += n  # the conversation state's turn request
        elif service == "sqs" and op == "DeleteMessage":
            # the trainer receives and deletes each request: counted as one ReceiveMessage per message
            # (no batching, an upper bound; the polling loop here spins and would overstate receives)
            totals["sqs_trainer"] += 2 * n
    return {
        **{k: v / rollouts for k, v in totals.items()},
        "invocations": {fn: n / rollouts for fn, n in invocations.items()},
    }


def measure(root: Path, rollouts: int) -> tuple[dict, dict]:
    """Per-path counts per rollout, and the deployment facts the prices need."""
    import boto3
    import pytest
    from moto import mock_aws

    harness = _setup(root)
    from rewardpipe.models import load_tasks
    from rewardpipe.store import S3Store

    task = next(
        t for t in load_tasks(root / "rewardpipe" / "data" / "tasks.jsonl") if not t.timeout_s or t.timeout_s <= 60
    )
    synth = harness.synthesized()
    patcher = pytest.MonkeyPatch()
    harness.install_patches(patcher)
    harness.start_server()
    counter = CallCounter()
    server, url, _ = _own_harness().chat_server(
        lambda body: _answer(sum(1 for m in body["messages"] if m["role"] == "assistant"), task.reference_solution)
    )
    results: dict[str, dict] = {}
    with mock_aws(config=harness.MOTO_CONFIG):
        deployment = harness.Deployment(synth).deploy()
        sfn = boto3.client("stepfunctions", region_name=harness.REGION)
        s3 = boto3.client("s3", region_name=harness.REGION)
        store = S3Store(deployment.bucket, client=s3)
        memory = {name: None for name in deployment.functions.values()}
        architectures = set()
        lam = boto3.client("lambda", region_name=harness.REGION)
        for name in memory:
            configuration = lam.get_function_configuration(FunctionName=name)
            memory[name] = configuration["MemorySize"]
            architectures.update(configuration.get("Architectures") or ["x86_64"])
        replay = {"mode": "replay", "turns": [QUESTION_1, QUESTION_2, _answer(2, task.reference_solution)]}
        policies = {
            "replay": replay,
            "openai": {"mode": "openai", "base_url": url, "model": "m"},
            "callback": {"mode": "callback"},
        }
        run = functools.partial(_count_rollouts, harness, deployment, sfn, s3, store, counter, rollouts=rollouts)
        for path, policy in policies.items():
            results[path] = run(path=path, policy=policy, task=task, label=path)
        # The same replay rollout with a job long enough for Fargate: what that route adds per rollout.
        fargate_task = task.model_copy(update={"timeout_s": synth.stack.settings.execution_routing_threshold_s + 100})
        fargate = run(path="replay", policy=replay, task=fargate_task, label="fargate")
    server.shutdown()
    patcher.undo()
    (architecture,) = architectures  # one layer, one architecture for every function
    handlers = _handler_of(synth, harness)
    invoked = {fn for counts in (*results.values(), fargate) for fn in counts["invocations"]}
    return results, {
        "memory_mb": memory,
        "cpu": _warm_cpu(harness.INVOCATION_CPU),
        "architecture": architecture,
        "fargate_delta": _delta(fargate, results["replay"]),
        "cold_s": _cold_seconds(root, {fn: handlers[fn] for fn in sorted(invoked) if fn in handlers}),
    }


# The scripted episode each built-in environment's rollouts replay (replayed turns are text: tool_call's tagged form).
ENV_SCENARIOS = {"ask_before_coding": "reference", "wordle": "reference", "tool_call": "tagged"}


def env_episode(name: str) -> tuple[str, str, object, list[str]]:
    """(environment reference, reward reference, task, assistant turns) of the environment's scripted episode on
    its first bundled task: what its cost rollouts replay."""
    import importlib

    from rewardpipe.episode import converse, start_episode
    from rewardpipe.models import load_task_rows
    from rewardpipe.references import BUILTIN_ENVIRONMENTS, BUILTIN_REWARDS, resolve_environment

    env = resolve_environment(name)
    tasks = load_task_rows(importlib.import_module(env.task_model.__module__).BUNDLED_TASKS, env.task_model)
    task = next(t for t in tasks if not getattr(t, "timeout_s", None) or t.timeout_s <= 60)
    state = converse(
        start_episode(task, env=env, run_id="cost", step=0, group_id="g", rollout_id="r"),
        task,
        env.scenarios(task)[ENV_SCENARIOS[name]],
        env,
    )
    return (
        BUILTIN_ENVIRONMENTS[name],
        BUILTIN_REWARDS[name],
        task,
        [m.content for m in state.messages if m.role == "assistant"],
    )


def measure_envs(root: Path, rollouts: int) -> dict:
    """Per built-in environment, its replay rollouts' counts per rollout (the stack deployed with it configured,
    each in a fresh moto account)."""
    import boto3
    import pytest
    from moto import mock_aws

    harness = _setup(root)
    from rewardpipe.store import S3Store

    synth = harness.synthesized()
    out = {}
    for name in ENV_SCENARIOS:
        reference, reward, task, turns = env_episode(name)
        patcher = pytest.MonkeyPatch()
        harness.install_patches(patcher)
        harness.start_server()
        counter = CallCounter()
        with mock_aws(config=harness.MOTO_CONFIG):
            deployment = harness.Deployment(
                synth, function_env=harness.user_code_env(environment=reference, reward=reward)
            ).deploy()
            sfn = boto3.client("stepfunctions", region_name=harness.REGION)
            s3 = boto3.client("s3", region_name=harness.REGION)
            counts = _count_rollouts(
                harness,
                deployment,
                sfn,
                s3,
                S3Store(deployment.bucket, client=s3),
                counter,
                path="replay",
                policy={"mode": "replay", "turns": turns},
                task=task,
                rollouts=rollouts,
                label=f"env-{name.replace('_', '-')}",
            )
        patcher.undo()
        harness.DEPLOYMENTS.clear()
        counts["jobs"] = sum(n for fn, n in counts["invocations"].items() if "CodeRunner" in fn)
        counts["turns"] = len(turns)
        out[name] = counts
    return out


def render_envs(env_results: dict, facts: dict) -> str:
    """The cost table per built-in environment (replay policy, each environment's scripted episode)."""
    priced = {name: price("replay", counts, facts) for name, counts in env_results.items()}
    items: list[str] = []
    for lines in priced.values():
        items += [item for item, _, _ in lines if item not in items]
    out = [
        "Cost per built-in environment (replay policy; each environment's own scripted episode on its first "
        "bundled task, walked through the machine with its real handlers):",
        "",
        "| item | " + " | ".join(env_results) + " |",
        "|---|" + "---|" * len(env_results),
    ]
    for item in items:
        cells = []
        for name in env_results:
            found = [c for i, _, c in priced[name] if i == item]
            cells.append(f"${found[0]:,.2f}" if found else "–")
        out.append(f"| {item} | " + " | ".join(cells) + " |")
    out.append(
        "| **total per 1M rollouts** | "
        + " | ".join(f"**${sum(c for _, _, c in priced[n]):,.0f}**" for n in env_results)
        + " |"
    )
    out.append("")
    out.append(
        "Counted per rollout: "
        + "; ".join(
            f"{n}: {c['turns']} policy turns, {c['transitions']:.0f} transitions, "
            f"{sum(c['invocations'].values()):.0f} Lambda invocations ({c['jobs']:.0f} of the code runner), "
            f"{c.get('s3_put', 0):.0f} S3 PUT/LIST + {c.get('s3_get', 0):.0f} GET, {c['history_events']:.0f} history "
            f"events, {c['s3_bytes'] / 1000:.1f} KB stored"
            for n, c in env_results.items()
        )
        + "."
    )
    return "\n".join(out)


def _delta(route: dict, base: dict) -> dict:
    keys = {k for k in route.keys() | base.keys() if k != "invocations"}
    delta = {k: route.get(k, 0) - base.get(k, 0) for k in keys}
    functions = route["invocations"].keys() | base["invocations"].keys()
    delta["invocations"] = {fn: route["invocations"].get(fn, 0) - base["invocations"].get(fn, 0) for fn in functions}
    return delta


def _handler_of(synth, harness) -> dict[str, str]:
    """Function (its logical id, which is its name in the moto deployment) -> its functions/<name> folder."""
    handlers = {p.read_text(): p.parent.name for p in (ROOT / "functions").glob("*/handler.py")}
    out = {}
    for logical, resource in synth.template["Resources"].items():
        if resource["Type"] == "AWS::Lambda::Function" and str(resource["Properties"].get("Runtime", "")).startswith(
            "python"
        ):
            name = handlers.get((harness.asset_dir(synth, logical) / "handler.py").read_text())
            if name:
                out[str(resource["Properties"].get("FunctionName") or logical)[:64]] = name
    return out


def _cold_seconds(root: Path, handlers: dict[str, str], runs: int = 5) -> dict[str, float]:
    """Each function's cold start measured on a full core: the handler's import (the fastest of ``runs`` fresh
    interpreters, the least disturbed by other load on the machine) and what its first call still loads
    (benchmarks/cold_start.py), on CPython 3.13 from the staged layer where one is found."""
    import cold_start

    try:
        cold_start.use_lambda_layer()
    except SystemExit as exc:  # no CPython 3.13 here: this interpreter, from the checkout (said in the output)
        print(f"cold starts measured with this interpreter: {exc}", file=sys.stderr)
    out = {}
    for fn, name in handlers.items():
        _median_ms, fastest_ms, first_call_ms = cold_start.measure(
            str(root / "functions" / name / "handler.py"), runs, cold_start.FIRST_CALL_CLIENTS.get(name, ())
        )
        out[fn] = RUNTIME_INIT_S + (fastest_ms + first_call_ms) / 1000
    return out


def _warm_cpu(samples: list[tuple[str, float]]) -> dict[str, float]:
    """Median CPU seconds per invocation of each function, its first (cold) invocation left out."""
    import statistics

    by_fn: dict[str, list[float]] = collections.defaultdict(list)
    for fn, cpu in samples:
        by_fn[fn].append(cpu)
    return {fn: statistics.median(v[1:] or v) for fn, v in by_fn.items()}


def price(
    path: str, counts: dict, facts: dict, *, openai_turn_s: float = OPENAI_TURN_S, fargate_share: float = FARGATE_SHARE
) -> list[tuple[str, str, float]]:
    """Lines of (item, arithmetic, $ per 1M rollouts); the two keyword arguments are the sensitivity's knobs.
    ``counts["jobs"]`` (default 1: every rollout of the coding task runs one job) scales what jobs cost: an
    environment that never asks for execution (jobs 0) pays for no code runner, Fargate task or sandbox query."""
    M = 1e6  # noqa: N806 - M for a million, as in the prices it scales
    jobs = counts.get("jobs", 1.0)
    lines = []
    gb_s = PRICE["lambda_gb_s"][facts["architecture"]]
    rate = f" × 1M × ${gb_s:.10f}/GB-s ({facts['architecture']})"

    def mb(fn: str) -> int:
        return facts["memory_mb"].get(fn, 512)

    t = counts["transitions"]
    retried = RETRY_RATE * sum(counts["invocations"].values())
    lines.append(
        (
            "Step Functions transitions",
            f"({t:.0f} + {retried:.2f} retries) × 1M × $0.025/1000",
            (t + retried) * M * PRICE["transition"],
        )
    )
    inv = counts["invocations"]
    n_inv = sum(inv.values()) * (1 + RETRY_RATE)
    lines.append(("Lambda requests", f"{n_inv:.2f} × 1M × $0.20/M", n_inv * M * PRICE["lambda_request"]))
    control_gb_s, parts = 0.0, []
    conversation_gb = max((mb(fn) for fn in inv if "Start" in fn or "Converse" in fn), default=512) / 1024
    for fn, n in sorted(inv.items()):
        if "CodeRunner" in fn:
            continue
        # 0.2 s, or longer if the measured CPU work needs it at this memory's share of a vCPU
        seconds = max(CONTROL_STEP_S, facts["cpu"].get(fn, 0.0) * FULL_VCPU_MB / mb(fn))
        control_gb_s += n * seconds * mb(fn) / 1024
        parts.append(f"{n:.0f}×{seconds:.2f}s×{mb(fn) / 1024:.2f}GB")
    inline = counts.get("inline_scores", 0)
    if inline:
        control_gb_s += inline * CONTROL_STEP_S * conversation_gb
        parts.append(f"{inline:.0f} scoring in the conversation state ×{CONTROL_STEP_S}s×{conversation_gb:.2f}GB")
    lines.append(
        (
            "Lambda compute, control steps",
            " + ".join(parts) + f" = {control_gb_s:.3f} GB-s" + rate,
            control_gb_s * M * gb_s,
        )
    )
    cold = facts.get("cold_s", {})
    if cold:
        # every invocation of the rollout (the runner's on the Lambda route only) is cold COLD_START_SHARE of the time
        billed, terms = 0.0, []
        for fn, n in sorted(inv.items()):
            n = n * (1 - fargate_share) if "CodeRunner" in fn else n
            if fn in cold and n:
                seconds = cold[fn] * max(1.0, FULL_VCPU_MB / mb(fn))
                billed += COLD_START_SHARE * n * seconds * mb(fn) / 1024
                terms.append(f"{n:.2f}×{seconds:.2f}s×{mb(fn) / 1024:.2f}GB")
        lines.append(
            (
                "Lambda cold starts (INIT, billed since Aug 2025)",
                f"{COLD_START_SHARE:.0%} of invocations × (" + " + ".join(terms) + f") = {billed:.4f} GB-s" + rate,
                billed * M * gb_s,
            )
        )
    if counts.get("inline_runs", 0) and jobs:
        waiting = counts["inline_runs"] * (1 - fargate_share) * RUNNER_JOB_S * conversation_gb
        lines.append(
            (
                "Lambda waiting on the code runner",
                f"{1 - fargate_share:.2f} × {RUNNER_JOB_S}s × {conversation_gb:.2f}GB = {waiting:.3f} GB-s" + rate,
                waiting * M * gb_s,
            )
        )
    if path == "openai":
        llm = 3 * openai_turn_s * conversation_gb
        lines.append(
            (
                "Lambda waiting on the endpoint",
                f"3 turns × {openai_turn_s:g}s × {conversation_gb:.2f}GB = {llm:g} GB-s" + rate,
                llm * M * gb_s,
            )
        )
    if not jobs:
        return lines + _request_lines(counts, n_inv, M)
    share_lambda = (1 - fargate_share) * jobs
    fargate_share = fargate_share * jobs
    runner = share_lambda * RUNNER_JOB_S * RUNNER_GB
    lines.append(
        (
            "Lambda code runner",
            f"{share_lambda:.2f} × {RUNNER_JOB_S}s × {RUNNER_GB:.3f}GB = {runner:.2f} GB-s" + rate,
            runner * M * gb_s,
        )
    )
    task_h = (FARGATE_MIN + FARGATE_PULL_S / 60) / 60
    per_task = task_h * (FARGATE_VCPU * PRICE["fargate_vcpu_h"] + FARGATE_GB * PRICE["fargate_gb_h"])
    lines.append(
        (
            "Fargate (long jobs, image pull included)",
            f"{fargate_share:.0%} × ({FARGATE_MIN:.0f} min + "
            f"{FARGATE_PULL_S:.0f} s pull)/60 h × ({FARGATE_VCPU:.0f} × $0.04048 + {FARGATE_GB:.0f} × $0.004445) = "
            f"${per_task:.5f} per task",
            fargate_share * M * per_task,
        )
    )
    delta = facts.get("fargate_delta")
    if delta:
        extra = {fn: n for fn, n in delta["invocations"].items() if n > 0 and "CodeRunner" not in fn}
        requests = sum(extra.values())
        compute = sum(n * CONTROL_STEP_S * mb(fn) / 1024 for fn, n in extra.items())
        per_rollout = (
            delta["transitions"] * PRICE["transition"]
            + requests * PRICE["lambda_request"]
            + compute * gb_s
            + delta.get("s3_put", 0) * PRICE["s3_put"]
            + delta.get("s3_get", 0) * PRICE["s3_get"]
            + delta["history_events"] * HISTORY_EVENT_LOG_BYTES / 1e9 * PRICE["logs_gb"]
        )
        lines.append(
            (
                "Fargate route's extra states",
                f"{fargate_share:.0%} × ({delta['transitions']:+.0f} transitions, "
                f"{requests:+.0f} Lambda invocation at {CONTROL_STEP_S}s, {delta.get('s3_put', 0):+.0f} PUT/LIST "
                f"{delta.get('s3_get', 0):+.0f} GET, {delta['history_events']:+.0f} history events) = "
                f"${per_rollout * M:,.2f} per 1M Fargate rollouts",
                fargate_share * M * per_rollout,
            )
        )
    lines.append(
        (
            "Container Insights (long jobs)",
            f"{fargate_share:.0%} × {FARGATE_MIN:.0f} min × {INSIGHTS_BYTES_PER_TASK_MIN} B × $0.50/GB",
            fargate_share * M * FARGATE_MIN * INSIGHTS_BYTES_PER_TASK_MIN / 1e9 * PRICE["logs_gb"],
        )
    )
    queries = share_lambda * DNS_QUERIES_RUNNER + fargate_share * DNS_QUERIES_FARGATE
    lines.append(
        (
            "DNS Firewall queries",
            f"({share_lambda:.2f} × {DNS_QUERIES_RUNNER} + {fargate_share:.2f} × "
            f"{DNS_QUERIES_FARGATE}) queries × 1M × $0.60/M",
            queries * M * PRICE["dns_firewall_query"],
        )
    )
    return lines + _request_lines(counts, n_inv, M)


def _request_lines(counts: dict, n_inv: float, M: float) -> list[tuple[str, str, float]]:  # noqa: N803 - M: a million
    """S3, SQS, logs and traces: what every rollout pays, whether it runs code or not."""
    lines = []
    puts, gets = counts.get("s3_put", 0), counts.get("s3_get", 0)
    lines.append(
        (
            "S3 requests",
            f"{puts:.0f} PUT/LIST × $0.005/1000 + {gets:.0f} GET × $0.0004/1000, × 1M",
            M * (puts * PRICE["s3_put"] + gets * PRICE["s3_get"]),
        )
    )
    sqs = counts.get("sqs_send", 0) + counts.get("sqs_trainer", 0)
    if sqs:
        lines.append(
            (
                "SQS requests",
                f"{counts.get('sqs_send', 0):.0f} send + {counts.get('sqs_trainer', 0):.0f} "
                f"receive/delete = {sqs:.0f} × $0.40/M",
                sqs * M * PRICE["sqs_request"],
            )
        )
    events = counts["history_events"]
    log_gb = (events * HISTORY_EVENT_LOG_BYTES + n_inv * LAMBDA_LOG_BYTES) / 1e9
    lines.append(
        (
            "CloudWatch Logs",
            f"({events:.0f} state-machine events × {HISTORY_EVENT_LOG_BYTES} B + "
            f"{n_inv:.1f} invocations × {LAMBDA_LOG_BYTES} B) × 1M × $0.50/GB",
            log_gb * M * PRICE["logs_gb"],
        )
    )
    lines.append(
        ("X-Ray", f"{TRACES_PER_ROLLOUT:.0f} trace × $5/M (upper bound)", TRACES_PER_ROLLOUT * M * PRICE["xray_trace"])
    )
    return lines


def total(path: str, counts: dict, facts: dict, **assume: float) -> float:
    return sum(cost for _item, _how, cost in price(path, counts, facts, **assume))


def sensitivity(results: dict, facts: dict) -> list[str]:
    """The totals as the policy endpoint's latency per turn and the Fargate share of jobs change."""
    out = [
        "| seconds the endpoint takes per policy turn (openai path) | "
        + " | ".join(f"{s:g} s" for s in LATENCIES_S)
        + " |",
        "|---|" + "---|" * len(LATENCIES_S),
    ]
    if "openai" in results:
        out.append(
            "| openai, $ per 1M rollouts | "
            + " | ".join(f"${total('openai', results['openai'], facts, openai_turn_s=s):,.0f}" for s in LATENCIES_S)
            + " |"
        )
    out += [
        "",
        "| share of jobs on Fargate | " + " | ".join(f"{f:.0%}" for f in FARGATE_SHARES) + " |",
        "|---|" + "---|" * len(FARGATE_SHARES),
    ]
    for path, counts in results.items():
        out.append(
            f"| {path}, $ per 1M rollouts | "
            + " | ".join(f"${total(path, counts, facts, fargate_share=f):,.0f}" for f in FARGATE_SHARES)
            + " |"
        )
    return out


def _short(function_name: str) -> str:
    """``RolloutWorkflowConverse1A2B3C`` -> ``Converse``"""
    return re.sub(r"^RolloutWorkflow|[0-9A-F]{8}$", "", function_name)


def render(results: dict, facts: dict) -> str:
    out = []
    out.append("| item | " + " | ".join(results) + " |")
    out.append("|---|" + "---|" * len(results))
    priced = {path: price(path, counts, facts) for path, counts in results.items()}
    items = []
    for lines in priced.values():
        for item, _, _ in lines:
            if item not in items:
                items.append(item)
    for item in items:
        cells = []
        for path in results:
            found = [c for i, _, c in priced[path] if i == item]
            cells.append(f"${found[0]:,.2f}" if found else "–")
        out.append(f"| {item} | " + " | ".join(cells) + " |")
    out.append(
        "| **total per 1M rollouts** | "
        + " | ".join(f"**${sum(c for _, _, c in priced[p]):,.0f}**" for p in results)
        + " |"
    )
    out.append("")
    out.append(
        "Counted per rollout (`benchmarks/cost.py`, moto, real handlers): "
        + "; ".join(
            f"{p}: {c['transitions']:.0f} transitions, {sum(c['invocations'].values()):.0f} Lambda invocations, "
            f"{c.get('s3_put', 0):.0f} S3 PUT/LIST + {c.get('s3_get', 0):.0f} GET, {c['history_events']:.0f} "
            "history events, "
            f"{c['s3_bytes'] / 1000:.1f} KB stored"
            for p, c in results.items()
        )
        + "."
    )
    out.append("")
    out.append(
        "Measured CPU per warm invocation (median of the handler's own thread, without moto's serving of its "
        "AWS calls), and the time it needs at the function's share of a vCPU: "
        + "; ".join(
            f"{_short(fn)} {cpu * 1000:.0f} ms → {cpu * FULL_VCPU_MB / facts['memory_mb'].get(fn, 512) * 1000:.0f} ms "
            f"at {facts['memory_mb'].get(fn, 512)} MB"
            for fn, cpu in sorted(facts["cpu"].items())
            if "CodeRunner" not in fn
        )
        + "."
    )
    out.append("")
    out.append("Arithmetic, per path:")
    out.append("")
    for path, lines in priced.items():
        out.append(f"* **{path}**: " + "; ".join(f"{item}: {how} = ${cost:,.2f}" for item, how, cost in lines) + ".")
    storage = {p: c["s3_bytes"] / 1e9 * 1e6 * PRICE["s3_gb_month"] for p, c in results.items()}
    out.append("")
    out.append(
        "S3 storage accrues on top, per month kept: "
        + ", ".join(f"{p} ${v:,.2f}" for p, v in storage.items())
        + " per 1M rollouts (the runs lifecycle expires them)."
    )
    if facts.get("cold_s"):
        out.append("")
        out.append(
            "Cold start measured per function (handler import + what the first call loads + "
            f"{RUNTIME_INIT_S} s runtime start, on a full core): "
            + "; ".join(f"{_short(fn)} {s * 1000:.0f} ms" for fn, s in sorted(facts["cold_s"].items()))
            + "."
        )
    out.append("")
    out.append("Sensitivity (every other assumption as above):")
    out.append("")
    out.extend(sensitivity(results, facts))
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=1, help="rollouts per path (the counts are per rollout)")
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout to measure (default: this one)")
    parser.add_argument("--write", type=Path, help="replace the cost-table block in this markdown file")
    parser.add_argument("--json", action="store_true", help="print the raw counts as JSON too")
    parser.add_argument("--no-envs", action="store_true", help="skip the cost per built-in environment")
    args = parser.parse_args()
    results, facts = measure(args.root.resolve(), args.rollouts)
    table = render(results, facts)
    if not args.no_envs:
        env_results = measure_envs(args.root.resolve(), args.rollouts)
        table += "\n\n" + render_envs(env_results, facts)
        if args.json:
            print(json.dumps(env_results, indent=2))
    print(table)
    if args.json:
        print(json.dumps(results, indent=2))
    if args.write:
        text = args.write.read_text()
        begin, end = "<!-- cost-table:begin (benchmarks/cost.py --write) -->", "<!-- cost-table:end -->"
        if begin not in text or end not in text:
            raise SystemExit(f"{args.write} has no {begin} ... {end} block")
        pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
        args.write.write_text(pattern.sub(lambda _: f"{begin}\n{table}\n{end}", text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
