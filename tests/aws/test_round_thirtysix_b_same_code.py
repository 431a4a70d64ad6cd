"""Round thirty-six (second wave), the same code locally and on AWS: a differential test.

The same tasks and recorded turns run through `rewardpipe run --policy replay` (a directory store) and through the
synthesized state machine in the moto harness (the real handlers in-process, S3 records), configured as the stack
configures it from cdk.json (stacks.user_code), and the records and transcripts are compared. Only what must differ
is normalised: the timing metric, and the ``[<state name>] `` an AWS error message starts with (where an operator
looks, a published part of the AWS record). The variance-check Lambda, given the same records, reaches the local
monitor's verdicts and raises its alarms, under the same alarm policy.

Before this round, a user's environment whose ``start()`` or ``execution_job()`` raised was recorded on AWS as
``environment 'X': start failed: LookupError: ...`` (no line of the user's code) where the local run records
``environment 'X': start() raised LookupError: ... (at file:line)``; every such message on AWS also carried the
workflow's internal carrier class (``SimulatorError: ``) before it; and a rollout whose ``start()`` raised had
``assistant_turns: 0`` in its AWS metrics and none locally.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.aws import harness

pytestmark = pytest.mark.xdist_group("cdk")

USER_ENV = "tests.aws.user_faults:ENVIRONMENT"
HOSTILE = "ok\x00\x1b]0;pwn\x07\ud83d\u202e<guess>\udcff" + "y" * 2000
STATE_PREFIX = re.compile(r"^\[[A-Za-z]+\] ")


def _rollout(rollout_id: str, task_id: str, turns: list[str]) -> dict[str, Any]:
    return {
        "rollout_id": rollout_id,
        "group_id": f"g-{task_id}",
        "task_id": task_id,
        "step": 0,
        "messages": [{"role": "assistant", "content": t} for t in turns],
    }


def _run_locally(tmp_path: Path, env: str, tasks: list[dict], rollouts: list[dict]) -> Any:
    from typer.testing import CliRunner

    from rewardpipe.cli import app
    from rewardpipe.store import LocalStore

    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks), encoding="utf-8")
    (tmp_path / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rollouts), encoding="utf-8")
    args = ["run", "--env", env, "--tasks", str(tmp_path / "tasks.jsonl"), "--policy", "replay"]
    args += ["--rollouts", str(tmp_path / "rollouts.jsonl"), "--out", str(tmp_path / "out"), "--run-id", "r", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return LocalStore(str(tmp_path / "out"))


def _stack_env(env: str) -> dict[str, str]:
    """What the stack sets on the functions for ``{"environment": env}`` in cdk.json (stacks.user_code)."""
    from stacks.config import load_settings

    settings = load_settings({"environment": env})
    code = settings.user_code
    return {**code.environment_env(), **code.reward_env(settings.reward_weights), **code.components_env()}


def _run_on_aws(synth: Any, sfn: Any, env: str, tasks: list[dict], rollouts: list[dict]) -> Any:
    """The state machine, its functions given what the stack sets for ``{"environment": env}`` in cdk.json."""
    import boto3

    from rewardpipe.store import S3Store

    deployment = harness.Deployment(synth, function_env={**_stack_env(env), "MAX_TURNS": None}).deploy()
    by_id = {t["task_id"]: t for t in tasks}
    arns = []
    for rollout in rollouts:
        turns = [m["content"] for m in rollout["messages"]]
        payload = {"run": "r", "step": 0, "group": rollout["group_id"], "rollout": rollout["rollout_id"]}
        payload |= {"task": by_id[rollout["task_id"]], "policy": {"mode": "replay", "turns": turns}}
        arns.append(
            sfn.start_execution(
                stateMachineArn=deployment.state_machine_arn, name=f"x-{uuid.uuid4().hex}", input=json.dumps(payload)
            )["executionArn"]
        )
    assert [harness.wait_execution(sfn, arn)["status"] for arn in arns] == ["SUCCEEDED"] * len(arns)
    return S3Store(deployment.bucket, client=boto3.client("s3", region_name=harness.REGION))


def _without_where(text: Any) -> Any:
    return STATE_PREFIX.sub("", text) if isinstance(text, str) else text


def _record(store: Any) -> dict[str, dict]:
    out = {}
    for record in store.iter_records("r", 0):
        data = record.model_dump(mode="json")
        data["metrics"].pop("exec_ms", None)  # how long the sandbox took: differs run to run
        if data.get("error"):
            data["error"]["message"] = _without_where(data["error"]["message"])
        out[record.rollout_id] = data
    return out


def _transcripts(store: Any, rollout_ids: list[str]) -> dict[str, dict | None]:
    out: dict[str, dict | None] = {}
    for rollout_id in rollout_ids:
        keys = store.find_transcripts("r", rollout_id)
        data = store.get_transcript(keys[0]).model_dump(mode="json") if keys else None
        if data and data.get("error"):
            data["error"]["message"] = _without_where(data["error"]["message"])
        if data and data.get("verdict"):
            kind, _, reason = str(data["verdict"].get("reason") or "").partition(": ")
            data["verdict"]["reason"] = f"{kind}: {_without_where(reason)}" if reason else kind
        out[rollout_id] = data
    return out


def _assert_same(local: Any, remote: Any) -> dict[str, dict]:
    records = _record(local)
    assert records == _record(remote)
    assert _transcripts(local, sorted(records)) == _transcripts(remote, sorted(records))
    return records


FAULTS = ("none", "start", "turn", "job", "component")


def test_a_users_failing_hooks_and_component_leave_the_same_records_locally_and_on_aws(tmp_path, aws, synth, sfn):
    tasks = [{"task_id": f, "prompt": "Say done.", "fault": f} for f in FAULTS]
    rollouts = [_rollout(f"r-{f}", f, [HOSTILE, "done"]) for f in FAULTS]
    records = _assert_same(
        _run_locally(tmp_path, USER_ENV, tasks, rollouts), _run_on_aws(synth, sfn, USER_ENV, tasks, rollouts)
    )

    assert records["r-none"]["status"] == "scored" and records["r-none"]["components"]["said_done"] == 1.0
    # A component that raised: that component unknown, the rollout still scored (issue 8), in both places.
    assert records["r-component"]["components"]["fragile"] is None
    for fault, hook in (("start", "start"), ("turn", "on_policy_turn"), ("job", "execution_job")):
        error = records[f"r-{fault}"]["error"]
        assert error["kind"] == "simulator_error"
        assert error["message"].startswith(f"environment 'faulty': {hook}() raised ")
        assert "user_faults.py:" in error["message"]  # the user's own line, on AWS too
    assert records["r-start"]["metrics"] == {"assistant_turns": 0}


def _first_task(data_file: str) -> dict[str, Any]:
    import rewardpipe

    return json.loads(
        (Path(rewardpipe.__file__).parent / "data" / data_file).read_text(encoding="utf-8").splitlines()[0]
    )


def _builtin_case(env: str) -> tuple[list[dict], list[dict]]:
    """One task of the built-in environment and recorded turns: a good one, hostile text, an empty turn."""
    if env == "wordle":
        task = {"task_id": "w1", "prompt": "Play Wordle.", "answer": "crane"}
        good = ["<guess>slate</guess>", "<guess>crane</guess>"]
    elif env == "tool_call":
        task = _first_task("tool_call_tasks.jsonl")
        call = '<tool_call>{"name": "get_balance", "arguments": {"account": "checking"}}</tool_call>'
        good = [call, f"<answer>{task['expected_answer']}</answer>"]
    else:
        task = _first_task("tasks.jsonl")
        good = ["What should a negative duration do?", "```python\n" + task["reference_solution"] + "\n```"]
    rollouts = [
        _rollout("good", task["task_id"], good),
        _rollout("hostile", task["task_id"], [HOSTILE, good[-1]]),
        _rollout("silent", task["task_id"], [""]),
    ]
    return [task], rollouts


@pytest.mark.parametrize("env", ["wordle", "tool_call", "ask_before_coding"])
def test_a_builtin_environment_scores_the_same_turns_alike_locally_and_on_aws(tmp_path, aws, synth, sfn, env):
    tasks, rollouts = _builtin_case(env)
    records = _assert_same(_run_locally(tmp_path, env, tasks, rollouts), _run_on_aws(synth, sfn, env, tasks, rollouts))
    assert records["good"]["status"] == "scored" and records["good"]["aggregate"] > records["silent"]["aggregate"]


def test_the_variance_check_judges_and_alarms_as_the_local_monitor_under_the_same_policy(tmp_path, aws, synth):
    """A scripted wordle run that collapses from step 1, judged by `rewardpipe run`'s monitor and, step by step, by
    the variance-check Lambda over the same records. The two defaults differ on purpose (docs/monitor.md: the
    AWS default `alarms.dead_steps` is 3, the CLI's `--consecutive` 1), so the local run is given the stack's."""
    import boto3
    from typer.testing import CliRunner

    from rewardpipe.cli import app
    from rewardpipe.store import LocalStore

    lines = (Path(__file__).parents[2] / "rewardpipe" / "data" / "wordle_tasks.jsonl").read_text().splitlines()[:4]
    (tmp_path / "tasks.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ["run", "--env", "wordle", "--tasks", str(tmp_path / "tasks.jsonl"), "-k", "4", "--groups-per-step", "4"]
    args += ["--steps", "4", "--collapse-from-step", "1", "--consecutive", "3", "--max-error-rate", "0.05"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "out"), "--run-id", "m", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    local = LocalStore(str(tmp_path / "out"))

    from rewardpipe.store import S3Store

    deployment = harness.Deployment(synth, function_env=_stack_env("wordle")).deploy()
    remote = S3Store(deployment.bucket, client=boto3.client("s3", region_name=harness.REGION))
    for record in local.iter_records("m", None):
        remote.put_record(record)
    check = next(
        name for logical, name in deployment.functions.items() if logical.startswith("MonitoringVarianceCheck")
    )
    lambdas = boto3.client("lambda", region_name=harness.REGION)
    aws_alarms = []
    for step in summary["steps"]:
        response = lambdas.invoke(FunctionName=check, Payload=json.dumps({"run_id": "m", "step": step["step"]}))
        assert "FunctionError" not in response
        (checked,) = json.loads(response["Payload"].read())["results"]
        assert checked["verdicts"] == {name: c["verdict"] for name, c in step["components"].items()}
        aws_alarms += [(a["step"], a["component"], a["kind"]) for a in checked["alarms"]]
    local_alarms = [(a["step"], a["component"], a["kind"]) for a in summary["alarms"]]
    assert sorted(aws_alarms) == sorted(local_alarms)
    assert "dead_component" in {kind for _, _, kind in local_alarms}
