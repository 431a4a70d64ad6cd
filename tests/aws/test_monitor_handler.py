"""The variance-check Lambda with moto S3 and SNS: verdicts in S3, EMF metrics, alarms to SNS."""

from __future__ import annotations

import json

import pytest

from rewardpipe.models import ErrorInfo, Record
from tests.aws import harness
from tests.aws.handlers import Context, load

WEIGHTS = {"correctness": 1.0, "asked_before_coding": 0.6, "guessed_immediately": 0.4, "loop_penalty": 0.2}
BUCKET = "monitor-test-records"


def _record(run: str, step: int, group: int, i: int) -> Record:
    components = {
        "correctness": [0.0, 0.5, 1.0, 1.0][i],   # varies inside every group
        "asked_before_coding": [0.0, 0.6, 1.0, 0.0][i],
        "guessed_immediately": -1.0,             # every rollout guesses: dead at its minimum
        "loop_penalty": [0.0, -0.5, 0.0, 0.0][i],
    }
    aggregate = sum(WEIGHTS[k] * v for k, v in components.items())
    return Record(run_id=run, step=step, group_id=f"g{group}", rollout_id=f"s{step}-g{group}-r{i}", task_id="t",
                  status="scored", components=components, weights=WEIGHTS, aggregate=aggregate, metrics={})


def _error(run: str, step: int) -> Record:
    return Record(run_id=run, step=step, group_id="g0", rollout_id=f"s{step}-err", task_id="t", status="error",
                  error=ErrorInfo(kind="executor_crash", message="boom"), components={k: None for k in WEIGHTS},
                  weights=WEIGHTS, aggregate=None)


@pytest.fixture
def world(aws, monkeypatch):
    import boto3

    from rewardpipe.store import S3Store

    s3 = boto3.client("s3", region_name=harness.REGION)
    s3.create_bucket(Bucket=BUCKET)
    sns = boto3.client("sns", region_name=harness.REGION)
    sqs = boto3.client("sqs", region_name=harness.REGION)
    topic = sns.create_topic(Name="alarms")["TopicArn"]
    queue = sqs.create_queue(QueueName="alarm-inbox")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn, Attributes={"RawMessageDelivery": "true"})
    store = S3Store(BUCKET, client=s3)
    for step in (0, 1):
        for group in range(5):
            for i in range(4):
                store.put_record(_record("mon", step, group, i))
        store.put_record(_error("mon", step))
    for key, value in {"BUCKET": BUCKET, "ALARM_TOPIC_ARN": topic, "REWARD_NAME": "ask_before_coding",
                       "REWARD_WEIGHTS": json.dumps(WEIGHTS), "ZERO_VARIANCE_FRACTION": "0.5",
                       "ERROR_RATE_THRESHOLD": "0.05"}.items():
        monkeypatch.setenv(key, value)
    return {"store": store, "sqs": sqs, "queue": queue, "handler": load("variance_monitor")}


def _emf(stdout: str) -> list[dict]:
    docs = []
    for line in stdout.splitlines():
        if line.startswith('{"_aws"'):
            docs.append(json.loads(line))
    return docs


def test_a_dead_component_is_measured_recorded_and_alarmed(world, capsys):
    out = world["handler"].lambda_handler({"run_id": "mon", "step": 0}, Context())
    (check,) = out["results"]
    assert check["verdicts"]["guessed_immediately"] == "dead"
    assert check["verdicts"]["correctness"] != "dead"
    assert check["records"] == 21 and check["error_rate"] == pytest.approx(1 / 21)

    verdict = world["store"].get_json("runs/mon/monitor/step=0.json")
    assert verdict["steps"][0]["components"]["guessed_immediately"]["zero_variance_group_fraction"] == 1.0

    docs = _emf(capsys.readouterr().out)
    zero = {d["component"]: d["ZeroVarianceGroupFraction"] for d in docs if "ZeroVarianceGroupFraction" in d}
    assert zero["guessed_immediately"] == [1.0] and zero["correctness"] == [0.0]
    assert set(zero) == set(WEIGHTS)
    error_rate = [d["ErrorRate"] for d in docs if "ErrorRate" in d]
    assert error_rate == [[pytest.approx(1 / 21)]]
    std = {d["component"]: d["WithinGroupStd"][0] for d in docs if "WithinGroupStd" in d}
    assert std["guessed_immediately"] == 0.0 and std["correctness"] > 0

    messages = world["sqs"].receive_message(QueueUrl=world["queue"], MaxNumberOfMessages=10)["Messages"]
    alarms = [json.loads(m["Body"]) for m in messages]
    dead = [a for a in alarms if a["kind"] == "dead_component"]
    assert [a["component"] for a in dead] == ["guessed_immediately"]
    assert world["store"].list_keys("runs/mon/alarms/step=0/")  # StoreAlarmSink wrote it beside the records


def test_the_schedule_checks_the_newest_complete_step_once(world, capsys):
    scheduled = {"version": "0", "id": "e", "detail-type": "Scheduled Event", "source": "aws.events",
                 "account": harness.ACCOUNT, "time": "2026-11-30T00:00:00Z", "region": harness.REGION,
                 "resources": [], "detail": {}}
    first = world["handler"].lambda_handler(scheduled, Context())
    assert [(r["run_id"], r["step"]) for r in first["results"]] == [("mon", 0)]  # step 1 may still be running
    second = world["handler"].lambda_handler(scheduled, Context())
    assert second["checked"] == 0


def test_a_replayed_step_does_not_alarm_twice(world):
    world["handler"].lambda_handler({"run_id": "mon", "step": 0}, Context())
    world["sqs"].purge_queue(QueueUrl=world["queue"])
    again = world["handler"].lambda_handler({"run_id": "mon", "step": 0}, Context())
    assert again["results"][0]["replayed"] is True and again["results"][0]["alarms"] == []
    assert world["sqs"].receive_message(QueueUrl=world["queue"]).get("Messages", []) == []


@pytest.mark.parametrize("event", [{"run_id": "", "step": 0}, {"run_id": "mon", "step": -1}, {"step": "x"}])
def test_a_malformed_request_is_rejected_with_the_field_named(world, event):
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as info:
        world["handler"].lambda_handler(event, Context())
    assert ("run_id" in str(info.value)) or ("step" in str(info.value))


@pytest.mark.xdist_group("cdk")
def test_emitted_metrics_match_the_alarm_dimensions_in_the_template(synth, world, capsys):
    world["handler"].lambda_handler({"run_id": "mon", "step": 0}, Context())
    docs = _emf(capsys.readouterr().out)
    alarms = [r["Properties"] for r in synth.template["Resources"].values()
              if r["Type"] == "AWS::CloudWatch::Alarm" and r["Properties"].get("Namespace") == "RewardPipe"]
    assert alarms
    for alarm in alarms:
        wanted = {d["Name"]: d["Value"] for d in alarm["Dimensions"]}
        matching = [d for d in docs
                    for directive in d["_aws"]["CloudWatchMetrics"]
                    if directive["Namespace"] == alarm["Namespace"]
                    and any(m["Name"] == alarm["MetricName"] for m in directive["Metrics"])
                    and sorted(directive["Dimensions"][0]) == sorted(wanted)
                    and all(d.get(k) == v for k, v in wanted.items())]
        assert matching, f"no EMF document feeds alarm {alarm['AlarmName']}"
