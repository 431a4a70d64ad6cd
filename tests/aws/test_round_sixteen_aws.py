"""Round sixteen, AWS path (an independent review): hostile ids and names against the real services' documented rules.

* CloudWatch dimension values: a run id (any printable text is a storable run id) or a stored record's
  component name went into EMF dimensions as it was. CloudWatch refuses a non-ASCII value; Powertools drops an
  all-blank one, so that run's own DeadStreak/ErrorStreak points were filed as the alarms' aggregate series.
"""

from __future__ import annotations

import json

import pytest

from rewardpipe.models import Record
from tests.aws import harness
from tests.aws.handlers import Context, load

pytestmark = pytest.mark.xdist_group("cdk")

BUCKET = "round-sixteen-records"
WEIGHTS = {"correctness": 1.0, "asked_before_coding": 0.6}


def _record(run: str, group: int, i: int, components: dict[str, float] | None = None) -> Record:
    values = components or {"correctness": [0.0, 1.0, 0.5, 1.0][i], "asked_before_coding": 0.6}
    return Record(
        run_id=run,
        step=0,
        group_id=f"g{group}",
        rollout_id=f"g{group}-r{i}",
        task_id="t",
        status="scored",
        components=values,
        weights={name: 1.0 for name in values},
        aggregate=sum(values.values()),
        metrics={},
    )


@pytest.fixture
def monitor(aws, monkeypatch):
    import boto3

    from rewardpipe.store import S3Store

    s3 = boto3.client("s3", region_name=harness.REGION)
    s3.create_bucket(Bucket=BUCKET)
    for key, value in {
        "BUCKET": BUCKET,
        "REWARD_NAME": "ask_before_coding",
        "REWARD_WEIGHTS": json.dumps(WEIGHTS),
        "ZERO_VARIANCE_FRACTION": "0.5",
        "DEAD_STEPS": "1",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("ALARM_TOPIC_ARN", raising=False)
    return S3Store(BUCKET, client=s3), load("variance_monitor")


def _docs(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith('{"_aws"')]


@pytest.mark.parametrize("run", ["expérience-α", "   ", "run\u00a01", "50%-done"])
def test_every_metric_of_a_run_with_any_printable_id_is_one_cloudwatch_accepts(monitor, capsys, run):
    store, handler = monitor
    for group in range(4):
        for i in range(4):
            store.put_record(_record(run, group, i))
    out = handler.lambda_handler({"run_id": run, "step": 0}, Context())
    assert out["results"][0]["verdicts"]["asked_before_coding"] == "dead"
    stdout = capsys.readouterr().out
    assert harness.emf_violations(stdout) == []
    dead = [d for d in _docs(stdout) if "DeadStreak" in d and d.get("component") == "asked_before_coding"]
    # one point for the run (with its run dimension) and one aggregate the alarm watches (without)
    assert len(dead) == 2 and sum("run" in d for d in dead) == 1, dead
    (own,) = [d for d in dead if "run" in d]
    if run.isascii() and run.strip() and "%" not in run:
        assert own["run"] == run  # a valid id is its own dimension value
    else:
        from rewardpipe.store import run_folder

        assert own["run"] == run_folder(run)  # else the run's folder name in the bucket


def test_a_stored_records_component_name_cloudwatch_refuses_is_sent_encoded(monitor, capsys):
    store, handler = monitor
    for group in range(4):
        for i in range(4):
            store.put_record(_record("r16", group, i, {"correctness": [0.0, 1.0, 0.5, 1.0][i], "précision": 0.5}))
    handler.lambda_handler({"run_id": "r16", "step": 0}, Context())
    stdout = capsys.readouterr().out
    assert harness.emf_violations(stdout) == []
    assert "pr%C3%A9cision" in {d.get("component") for d in _docs(stdout)}


def test_the_harness_sees_a_dimension_cloudwatch_refuses():
    doc = {
        "_aws": {"CloudWatchMetrics": [{"Namespace": "N", "Dimensions": [["run"]], "Metrics": [{"Name": "M"}]}]},
        "run": "é",
        "M": [1.0],
    }
    assert harness.emf_violations(json.dumps(doc)) != []
    assert harness.emf_violations(json.dumps({**doc, "run": "x" * 1025})) != []
    assert harness.emf_violations(json.dumps({**doc, "run": "ok run"})) == []


# --------------------------------------------------------------------------------------------------
# A scored rollout whose reward has many diagnostics: the execution's answer must still be its score.
# SendTaskFailure's cause (how a conversation state that scored leaves its loop) is at most 32,768
# characters and a state's output at most 256 KiB; the record in S3 has no such limit.


def _many_checks(messages) -> dict[str, int]:
    return {f"turn_check_{i:04d}": 1 for i in range(1500)}  # about 70 KB as Nova metrics


def _noisy_guess():
    from acme_rewards.guess import GUESS

    from rewardpipe.rewards import Reward

    return Reward("acme_guess_noisy", list(GUESS.components), diagnostics=_many_checks)


harness.use_user_package()
NOISY_GUESS = _noisy_guess()
NOISY_GUESS_REF = f"{__name__}:NOISY_GUESS"


def test_a_scored_rollout_with_many_diagnostics_answers_its_score_not_an_error(aws, synth, sfn):
    deployment = harness.Deployment(
        synth, function_env=harness.user_code_env(environment="acme_rewards.guess:ENVIRONMENT", reward=NOISY_GUESS_REF)
    ).deploy()
    payload = {
        "run": "r16-noisy",
        "step": 0,
        "group": "g0",
        "rollout": "r0",
        "task": {"task_id": "n42", "prompt": "Guess my number from 1 to 100.", "secret": 42},
        "policy": {"mode": "replay", "turns": ["50", "42"]},
    }
    result = harness.run_execution(sfn, deployment.state_machine_arn, payload)
    assert result["status"] == "SUCCEEDED", result
    output = json.loads(result["output"])
    import boto3

    from rewardpipe.store import S3Store

    store = S3Store(deployment.bucket, client=boto3.client("s3", region_name=harness.REGION))
    (record,) = list(store.iter_records("r16-noisy", 0))
    assert record.status == "scored" and len(record.metrics) >= 1500  # the record keeps every diagnostic
    # the execution answers what the record says: scored, its aggregate, unflagged
    assert output["status"] == "scored", output
    assert output["aggregate_reward_score"] == pytest.approx(record.aggregate)
    flags = {m["name"]: m["value"] for m in output["metrics_list"] if m["name"] == "reward_error"}
    assert flags == {"reward_error": 0}
    assert {m["name"] for m in output["metrics_list"] if m["type"] == "Reward"} == set(record.components)


def test_an_execution_output_is_trimmed_of_diagnostics_never_of_its_score():
    from rewardpipe.aws import rollout
    from rewardpipe.aws.state import PAYLOAD_BUDGET, payload_size

    record = Record(
        run_id="r",
        step=0,
        group_id="g",
        rollout_id="x",
        task_id="t",
        status="scored",
        components={"correctness": 1.0},
        weights={"correctness": 1.0},
        aggregate=1.0,
        metrics={f"check_{i:05d}": 1 for i in range(10_000)},  # about 500 KB as Nova metrics
    )
    out = rollout.rollout_output(record, "runs/r/step=0/group=g/x.json")
    assert payload_size(out) <= PAYLOAD_BUDGET
    assert out["aggregate_reward_score"] == 1.0 and out["status"] == "scored"
    assert [m["name"] for m in out["metrics_list"]] == ["correctness", "reward_error"]


# --------------------------------------------------------------------------------------------------
# SNS: "Name, type, and value must not be empty or null" for a message attribute, whose String value has the
# message body's restrictions (UTF-8 text). A stored record's component may be named anything the monitor reads
# ("" included): its alarm must still be delivered, not fail every check of the run for ever.


def _raw_record(run: str, group: int, i: int, odd: str) -> dict:
    return {
        "schema": "rewardpipe.record/v1",
        "run_id": run,
        "step": 0,
        "group_id": f"g{group}",
        "rollout_id": f"g{group}-r{i}",
        "task_id": "t",
        "status": "scored",
        "components": {"correctness": [0.0, 1.0, 0.5, 1.0][i], odd: 0.5},
        "weights": {"correctness": 1.0, odd: 1.0},
        "aggregate": [0.0, 1.0, 0.5, 1.0][i] + 0.5,
        "metrics": {},
    }


@pytest.mark.parametrize("odd", ["", "tab\there"])
@pytest.mark.usefixtures("monitor")
def test_an_alarm_on_a_component_with_any_name_is_delivered_to_sns(monkeypatch, odd):
    import boto3

    from rewardpipe.store import record_key

    sns = boto3.client("sns", region_name=harness.REGION)
    sqs = boto3.client("sqs", region_name=harness.REGION)
    topic = sns.create_topic(Name="r16-alarms")["TopicArn"]
    queue = sqs.create_queue(QueueName="r16-inbox")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn)
    monkeypatch.setenv("ALARM_TOPIC_ARN", topic)
    handler = load("variance_monitor")  # its settings are read when it loads
    s3 = boto3.client("s3", region_name=harness.REGION)
    for group in range(4):
        for i in range(4):
            raw = _raw_record("r16-odd", group, i, odd)
            key = record_key(Record.model_construct(**{k: v for k, v in raw.items() if k != "schema"}))
            s3.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(raw).encode("ascii"))
    out = handler.lambda_handler({"run_id": "r16-odd", "step": 0}, Context())  # CheckFailed before
    assert out["results"][0]["verdicts"][odd] == "dead"
    messages = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages", [])
    alarms = [json.loads(json.loads(m["Body"])["Message"]) for m in messages]
    assert [a["component"] for a in alarms if a["kind"] == "dead_component"] == [odd]


# --------------------------------------------------------------------------------------------------
# Template: one S3 call through the store may take its deadline plus a connect and a read timeout
# (rewardpipe.store.S3Limits: 85 s by default). A function with a 60 s timeout (RecordError, the Nova bridge)
# timed out inside a call to a hung endpoint instead of failing with StoreUnreachable, which the state
# machine retries as TransientError (RecordError's Retry does not cover a Lambda timeout: no record).


@pytest.mark.parametrize("context", ["", harness.NOVA_BRIDGE_CONTEXT], ids=["default", "nova"])
def test_every_function_using_the_store_fits_one_s3_call_in_half_its_timeout(context):
    from rewardpipe.store import S3Limits

    template = harness.synthesized(context).template
    checked = []
    for logical, resource in template["Resources"].items():
        if resource["Type"] != "AWS::Lambda::Function":
            continue
        env = resource["Properties"].get("Environment", {}).get("Variables", {})
        if "BUCKET" not in env:
            continue
        limits = S3Limits.from_env({k: v for k, v in env.items() if isinstance(v, str)})
        worst = limits.deadline_s + limits.connect_timeout_s + limits.read_timeout_s
        timeout = resource["Properties"]["Timeout"]
        assert worst <= timeout / 2, f"{logical}: one S3 call may take {worst:g} s, its timeout is {timeout} s"
        checked.append(logical)
    assert any("RecordError" in name for name in checked)
