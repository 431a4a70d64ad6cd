"""Every AWS path runs the user's own code (issue 20 item 4), end to end in moto with the one user package fixture
(tests/fixtures/acme_rewards): the state machine with a multi-turn environment that needs no sandbox and with one
that asks for execution, the single-turn reward Lambda, the Nova bridge's intake, and the variance check.

The synthesized template is deployed as it is; the variables the stack sets from cdk.json's ``environment``,
``reward`` and ``single_turn_reward`` settings (ENVIRONMENT_REF, REWARD_REF, SINGLE_TURN_REWARD_REF,
REWARD_COMPONENTS) are added to the deployed functions by the test (harness.user_code_env), as the stack will set
them. The IAM harness checks every call, and the harness's AWS limits hold, as in every other AWS test.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.aws import harness

pytestmark = pytest.mark.xdist_group("cdk")

GUESS_REF = "acme_rewards.guess:ENVIRONMENT"
GUESS_REWARD_REF = "acme_rewards.guess:GUESS"
PYCHECK_REWARD_REF = "acme_rewards.pycheck:PYCHECK"
GUESS_NEXT_REF = "acme_rewards.guess:ENVIRONMENT_NEXT"
PYCHECK_REF = "acme_rewards.pycheck:ENVIRONMENT"
GUESS_TASK = {"task_id": "n42", "prompt": "Guess my number from 1 to 100.", "secret": 42}
ADD_TESTS = (
    "import unittest\nclass T(unittest.TestCase):\n"
    "    def test_small(self):\n        self.assertEqual(add(1, 2), 3)\n"
    "    def test_negative(self):\n        self.assertEqual(add(-1, 1), 0)\n"
)
ADD_TASK = {"task_id": "add", "prompt": "Write add(a, b).", "entry_point": "add", "tests": ADD_TESTS}
GOOD_ADD = "Here:\n```python\ndef add(a, b):\n    return a + b\n```"
BAD_ADD = "```python\ndef add(a, b):\n    return a - b\n```"


def _deploy(synth, **env) -> harness.Deployment:
    return harness.Deployment(synth, function_env=harness.user_code_env(**env)).deploy()


def _store(deployment):
    import boto3

    from rewardpipe.store import S3Store

    return S3Store(deployment.bucket, client=boto3.client("s3", region_name=harness.REGION))


def _records(deployment, run: str) -> dict:
    return {r.rollout_id: r for r in _store(deployment).iter_records(run, 0)}


def _input(run: str, rollout: str, task: dict, policy: dict) -> dict:
    return {"run": run, "step": 0, "group": "g0", "rollout": rollout, "task": task, "policy": policy}


def _run_all(sfn, deployment, payloads: list[dict]) -> list[dict]:
    import uuid

    arns = [
        sfn.start_execution(
            stateMachineArn=deployment.state_machine_arn, name=f"x-{uuid.uuid4().hex}", input=json.dumps(p)
        )["executionArn"]
        for p in payloads
    ]
    return [harness.wait_execution(sfn, arn) for arn in arns]


# --------------------------------------------------------------------------------------------------
# The state machine: a multi-turn environment with no sandbox


GUESS_TURNS = {
    "solver": ["50", "25", "42"],  # lower, higher, solved on turn 3
    "wanderer": ["10", "90", "60", "30", "70", "20"],  # never solves: the turn limit ends it
    "chatty": ["I think it is around forty-two", "42"],  # one turn without a number: the penalty fires
}


def test_the_machine_plays_the_users_environment_and_scores_with_its_reward(aws, synth, sfn):
    from acme_rewards.guess import ENVIRONMENT, GUESS, GuessTask

    from rewardpipe.episode import run_episode
    from rewardpipe.models import Message, Rollout
    from rewardpipe.policies import ReplayPolicy

    deployment = _deploy(synth, environment=GUESS_REF, reward=GUESS_REWARD_REF, version="1.2")
    payloads = [_input("acme", r, GUESS_TASK, {"mode": "replay", "turns": t}) for r, t in GUESS_TURNS.items()]
    results = _run_all(sfn, deployment, payloads)
    assert [r["status"] for r in results] == ["SUCCEEDED"] * len(payloads)
    stored = _records(deployment, "acme")

    task = GuessTask.model_validate(GUESS_TASK)
    policy = ReplayPolicy(
        [
            Rollout(
                rollout_id=r,
                group_id="g0",
                task_id="n42",
                messages=[Message(role="assistant", content=x) for x in turns],
            )
            for r, turns in GUESS_TURNS.items()
        ]
    )
    for rollout_id in GUESS_TURNS:
        local = run_episode(
            task, policy, ENVIRONMENT, executor=None, run_id="acme", step=0, group_id="g0", rollout_id=rollout_id
        )
        remote = stored[rollout_id]
        assert remote.status == local.status == "scored", (rollout_id, remote.error)
        assert set(remote.components) == set(GUESS.component_names)
        assert remote.components == pytest.approx(local.components), rollout_id
        assert remote.aggregate == pytest.approx(local.aggregate)
        assert remote.metrics["end_reason"] == local.metrics["end_reason"]
        assert remote.metrics["guesses"] == local.metrics["guesses"]  # the environment's own metrics
    assert stored["solver"].components["solved"] == 1.0 and stored["solver"].metrics["end_reason"] == "ended_by_env"
    assert stored["wanderer"].components["solved"] == 0.0 and stored["wanderer"].metrics["end_reason"] == "turn_limit"
    assert stored["chatty"].components["invalid_turns"] == -0.5
    # The environment spoke for itself (nothing was executed, no simulator's "Go ahead."), and the transcript
    # keeps its messages.
    transcript = _store(deployment).get_json("runs/acme/transcripts/step=0/group=g0/solver.json")
    assert [m["content"] for m in transcript["messages"] if m["role"] == "user"] == [
        GUESS_TASK["prompt"],
        "lower",
        "higher",
    ]
    # Every snapshot in S3 names the environment that wrote it.
    store = _store(deployment)
    heads = [k for k in store.list_keys("runs/acme/state/") if k.endswith("/episode.json")]
    assert heads and {store.get_json(k)["environment"] for k in heads} == {"acme_guess@1.2"}


def test_an_openai_policy_is_told_the_users_system_prompt(aws, synth, sfn):
    from acme_rewards.guess import GuessNumber

    server, url, seen = harness.chat_server(lambda body: "42")
    try:
        deployment = _deploy(synth, environment=GUESS_REF, reward=GUESS_REWARD_REF)
        (result,) = _run_all(
            sfn, deployment, [_input("acme-o", "r0", GUESS_TASK, {"mode": "openai", "base_url": url, "model": "m"})]
        )
    finally:
        server.shutdown()
    assert result["status"] == "SUCCEEDED"
    assert seen and seen[0]["body"]["messages"][0] == {"role": "system", "content": GuessNumber.system_prompt}
    assert _records(deployment, "acme-o")["r0"].components["solved"] == 1.0


def test_a_bad_task_row_is_an_error_record_naming_the_field(aws, synth, sfn):
    deployment = _deploy(synth, environment=GUESS_REF, reward=GUESS_REWARD_REF)
    bad = {"task_id": "n-bad", "prompt": "Guess.", "secret": "forty-two"}
    store = _store(deployment)
    store.put_json("tasks/acme/unknown-field.json", {**GUESS_TASK, "task_id": "n-extra", "colour": "red"})
    payloads = [
        _input("acme-b", "inline", bad, {"mode": "replay", "turns": ["42"]}),
        {
            "run": "acme-b",
            "step": 0,
            "group": "g0",
            "rollout": "stored",
            "task_key": "tasks/acme/unknown-field.json",
            "policy": {"mode": "replay", "turns": ["42"]},
        },
    ]
    assert [r["status"] for r in _run_all(sfn, deployment, payloads)] == ["SUCCEEDED"] * 2
    records = _records(deployment, "acme-b")
    for rollout, field in (("inline", "secret"), ("stored", "colour")):
        record = records[rollout]
        assert record.status == "error" and record.error.kind == "bad_input", record.error
        assert field in record.error.message and "GuessTask" in record.error.message
        assert set(record.components) == {"solved", "closeness", "invalid_turns"}
        assert set(record.components.values()) == {None}  # never a 0
    assert "tasks/acme/unknown-field.json" in records["stored"].error.message


def test_a_snapshot_of_another_environment_version_is_an_error_record_never_resumed(aws, synth, sfn):
    """A callback rollout pauses for the trainer's turn; the functions are then redeployed with the next release
    of the environment. The trainer's reply reaches a Converse that runs 1.3: the 1.2 snapshot is not resumed."""
    import boto3

    deployment = _deploy(synth, environment=GUESS_REF, reward=GUESS_REWARD_REF)
    execution = sfn.start_execution(
        stateMachineArn=deployment.state_machine_arn,
        name="x-versioned",
        input=json.dumps(_input("acme-v", "r0", GUESS_TASK, {"mode": "callback"})),
    )
    sqs = boto3.client("sqs", region_name=harness.REGION)
    deadline = time.time() + 60
    messages: list = []
    while not messages:
        assert time.time() < deadline, "no turn request"
        messages = sqs.receive_message(QueueUrl=deployment.queue_url, WaitTimeSeconds=0).get("Messages", [])
        time.sleep(0.05)
    body = json.loads(messages[0]["Body"])
    assert _store(deployment).get_json(body["state_key"])["environment"] == "acme_guess@1.2"
    lam = boto3.client("lambda", region_name=harness.REGION)
    for logical, name in deployment.functions.items():
        if logical.startswith("CodeRunner"):
            continue
        variables = lam.get_function_configuration(FunctionName=name)["Environment"]["Variables"]
        lam.update_function_configuration(
            FunctionName=name,
            Environment={"Variables": {**variables, "ENVIRONMENT_REF": GUESS_NEXT_REF, "ENVIRONMENT_VERSION": "1.3"}},
        )
    sfn.send_task_success(taskToken=body["task_token"], output=json.dumps({"text": "42"}))
    result = harness.wait_execution(sfn, execution["executionArn"])
    assert result["status"] == "SUCCEEDED"
    record = _records(deployment, "acme-v")["r0"]
    assert record.status == "error" and record.error.kind == "environment_mismatch", record.error
    assert "acme_guess@1.2" in record.error.message and "acme_guess@1.3" in record.error.message
    assert set(record.components.values()) == {None}


# --------------------------------------------------------------------------------------------------
# The state machine: an environment that asks for execution


def test_the_machine_executes_only_when_the_users_environment_asks(aws, synth, sfn):
    deployment = _deploy(synth, environment=PYCHECK_REF, reward=PYCHECK_REWARD_REF)
    turns = {
        "direct": [GOOD_ADD],
        "asks-then-wrong": ["What should add return?", BAD_ADD],
        "never-codes": ["hmm", "still thinking", "no idea"],
    }
    harness.INVOCATION_CPU.clear()
    results = _run_all(
        sfn, deployment, [_input("acme-x", r, ADD_TASK, {"mode": "replay", "turns": t}) for r, t in turns.items()]
    )
    assert [r["status"] for r in results] == ["SUCCEEDED"] * 3
    records = _records(deployment, "acme-x")
    assert all(r.status == "scored" for r in records.values()), {k: r.error for k, r in records.items()}
    assert records["direct"].components == {"tests_pass": 1.0, "first_try": 1.0}
    assert records["asks-then-wrong"].components == {"tests_pass": 0.0, "first_try": 0.0}
    assert records["never-codes"].components == {"tests_pass": 0.0, "first_try": 0.0}
    assert records["never-codes"].metrics["end_reason"] == "turn_limit"  # the environment's max_turns (3)
    runner = deployment.function_name("CodeRunner")
    # Two episodes asked for execution; the one that never wrote code ran nothing.
    assert sum(1 for name, _ in harness.INVOCATION_CPU if name == runner) == 2
    transcript = _store(deployment).get_json("runs/acme-x/transcripts/step=0/group=g0/asks-then-wrong.json")
    assert transcript["messages"][2] == {"role": "user", "content": "Please write `add` in a python code block."}


# --------------------------------------------------------------------------------------------------
# The single-turn reward Lambda (reward_lambda_arn)


def _sample(sample_id: str, text: str, reference: str = "42") -> dict:
    return {
        "id": sample_id,
        "messages": [{"role": "user", "content": "What is 6 * 7?"}, {"role": "assistant", "content": text}],
        "metadata": {"reference_answer": reference},
    }


def test_the_single_turn_lambda_scores_with_the_users_reward(aws, synth):
    import boto3

    deployment = _deploy(synth, single_turn_reward="acme_rewards.single:EXACT")
    client = boto3.client("lambda", region_name=harness.REGION)
    samples = [_sample("right", "six times seven\n42"), _sample("wrong", "41"), _sample("raises", "EXPLODE\n42")]
    response = client.invoke(FunctionName=deployment.function_name("SingleTurnReward"), Payload=json.dumps(samples))
    assert "FunctionError" not in response, response["Payload"].read()
    results = {r["id"]: r for r in json.loads(response["Payload"].read())}
    metrics = {k: {m["name"]: m["value"] for m in r["metrics_list"]} for k, r in results.items()}
    assert metrics["right"] == {"exact": 1.0, "rambling": 0.0, "explodes": 1.0, "reward_error": 0}
    assert results["right"]["aggregate_reward_score"] == pytest.approx(1.1)
    assert metrics["wrong"]["exact"] == 0.0 and results["wrong"]["aggregate_reward_score"] == pytest.approx(0.1)
    # A user component that raises: flagged, never scored 0 on its own account, and the batch survives.
    assert metrics["raises"]["reward_error"] == 1 and metrics["raises"]["error_component_raised"] == 1
    assert "exact" not in metrics["raises"]


def test_the_single_turn_lambda_fails_its_start_naming_a_bad_reference(aws, synth):
    import boto3

    deployment = _deploy(synth, single_turn_reward="acme_rewards.single:nothing_here")
    response = boto3.client("lambda", region_name=harness.REGION).invoke(
        FunctionName=deployment.function_name("SingleTurnReward"), Payload=json.dumps([_sample("a", "42")])
    )
    error = json.loads(response["Payload"].read())
    assert response.get("FunctionError") and error["errorType"] == "ConfigurationError"
    assert "SINGLE_TURN_REWARD_REF" in error["errorMessage"] and "nothing_here" in error["errorMessage"]


# --------------------------------------------------------------------------------------------------
# The Nova BYOO bridge


@pytest.fixture
def nova_guess(aws, monkeypatch):
    from rewardpipe.integrations.nova import bridge as bridge_module
    from tests.integrations.nova.test_nova_e2e import Nova, SimulatedClock

    clock = SimulatedClock()
    monkeypatch.setattr(bridge_module, "wall_clock", clock)
    deployment = _deploy(
        harness.synthesized(harness.NOVA_BRIDGE_CONTEXT), environment=GUESS_REF, reward=GUESS_REWARD_REF
    )
    return Nova(deployment, clock)


def test_the_nova_bridge_validates_task_rows_with_the_users_task_model(nova_guess):
    nova = nova_guess
    trainer = nova.trainer
    nova.store.put_json(
        "tasks/nova/n7.json", {"task_id": "n7", "prompt": "Guess from 1 to 10.", "secret": 7, "high": 10}
    )
    nova.store.put_json("tasks/nova/broken.json", {"task_id": "broken", "prompt": "Guess.", "secret": "seven"})
    nova.scripts.update(
        {"inline-000_0": ["50", "42"], "stored-000_0": ["5", "7"], "broken-000_0": ["1"], "bad-inline-000_0": ["1"]}
    )
    trainer.request_rollout("inline-000_0", {"task": GUESS_TASK})
    trainer.request_rollout("stored-000_0", {"task_id": "n7"})
    trainer.request_rollout("broken-000_0", {"task_id": "broken"})
    trainer.request_rollout("bad-inline-000_0", {"task": {"task_id": "n-x", "prompt": "Guess."}})
    wanted = {"inline-000_0", "stored-000_0", "broken-000_0", "bad-inline-000_0"}
    nova.drive(until=lambda: wanted <= set(trainer.responses))
    records = {r.rollout_id: r for r in nova.store.iter_records("nova", 0)}
    for sample in ("inline-000_0", "stored-000_0"):
        assert records[sample].status == "scored", records[sample].error
        assert records[sample].components["solved"] == 1.0
        assert trainer.responses[sample]["stop_reason"] == "end_of_conversation"
    # The guessing game's own messages reached Nova's generate requests (no coding simulator in between).
    second = next(r for r in trainer.generate_requests if r["step_id"] == "inline-000_0_1")
    assert second["messages"][-1] == {"role": "user", "content": "lower"}
    # A stored row the environment's task model refuses: the rollout's error record names the field.
    assert records["broken-000_0"].status == "error" and records["broken-000_0"].error.kind == "bad_input"
    assert "secret" in records["broken-000_0"].error.message and "GuessTask" in records["broken-000_0"].error.message
    # An inline row is refused at intake: nothing starts, the answer and the record name the field.
    assert trainer.responses["bad-inline-000_0"]["stop_reason"] == "error"
    assert records["bad-inline-000_0"].error.kind == "bad_input"
    assert "data.task" in records["bad-inline-000_0"].error.message
    assert "secret" in records["bad-inline-000_0"].error.message
    assert not [e for e in nova.executions() if "bad-inline" in e["name"]]


# --------------------------------------------------------------------------------------------------
# The variance check


def _guess_record(run: str, step: int, group: int, i: int):
    from rewardpipe.models import Record

    components = {
        "solved": [0.0, 1.0, 1.0, 0.0][i],
        "closeness": [0.2, 1.0, 1.0, 0.5][i],
        "invalid_turns": 0.0,
    }  # the penalty never fires: the policy always answers with a number
    weights = {"solved": 1.0, "closeness": 0.5, "invalid_turns": 0.5}
    return Record(
        run_id=run,
        step=step,
        group_id=f"g{group}",
        rollout_id=f"s{step}-g{group}-r{i}",
        task_id="n42",
        status="scored",
        components=components,
        weights=weights,
        aggregate=sum(weights[k] * v for k, v in components.items()),
        metrics={},
    )


@pytest.mark.parametrize("declared", [True, False])
def test_the_variance_check_judges_with_the_users_ranges_and_roles(aws, synth, declared):
    import boto3
    from acme_rewards.guess import GUESS

    deployment = _deploy(synth, environment=GUESS_REF, reward=GUESS_REWARD_REF, components=GUESS if declared else None)
    store = _store(deployment)
    for group in range(5):
        for i in range(4):
            store.put_record(_guess_record("acme-m", 0, group, i))
    monitor = next(
        name for logical, name in deployment.functions.items() if logical.startswith("MonitoringVarianceCheck")
    )
    response = boto3.client("lambda", region_name=harness.REGION).invoke(
        FunctionName=monitor, Payload=json.dumps({"run_id": "acme-m", "step": 0})
    )
    assert "FunctionError" not in response, response["Payload"].read()
    (check,) = json.loads(response["Payload"].read())["results"]
    assert check["verdicts"]["solved"] == check["verdicts"]["closeness"] == "ok"
    # Declared a penalty of range [-1, 0], a penalty that never fires is normal (info); without the
    # declaration the check cannot know, and a constant component is dead.
    assert check["verdicts"]["invalid_turns"] == ("info" if declared else "dead")


def test_an_environment_that_cannot_be_imported_still_ends_every_rollout_in_an_error_record(aws, synth, sfn):
    """A deployment whose ENVIRONMENT_REF does not import (a package missing from the layer): every rollout fails
    at its start, and RecordError, which cannot load it either, still writes the record naming the variable."""
    deployment = _deploy(synth, environment="acme_rewards.not_shipped:ENVIRONMENT", reward=GUESS_REWARD_REF)
    (result,) = _run_all(sfn, deployment, [_input("acme-c", "r0", GUESS_TASK, {"mode": "replay", "turns": ["42"]})])
    assert result["status"] == "SUCCEEDED"
    record = _records(deployment, "acme-c")["r0"]
    assert record.status == "error" and record.aggregate is None
    assert "ENVIRONMENT_REF" in record.error.message and "acme_rewards.not_shipped" in record.error.message
    assert set(record.components) == {"solved", "closeness", "invalid_turns"}
    assert set(record.components.values()) == {None}
