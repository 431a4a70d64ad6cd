"""Alarm values and sinks: console, store (JSON beside the records), SNS (moto)."""

from __future__ import annotations

import io
import json

import boto3
import pytest
from moto import mock_aws
from rich.console import Console

from rewardpipe.monitoring import (
    Alarm,
    ConsoleAlarmSink,
    SnsAlarmSink,
    StoreAlarmSink,
    alarm_key,
    dispatch,
)
from rewardpipe.store import LocalStore
from tests.test_store import aws_env  # noqa: F401  (fixture: fake credentials for moto)


def dead_alarm(**kw) -> Alarm:
    base = dict(
        kind="dead_component",
        component="correctness",
        step=4,
        cause="constant_at_minimum",
        message="correctness is 0.0 (its minimum) in every rollout of 96% of groups (24/25): are the tests running?",
        run_id="exp/1",
        figures={"zero_variance_group_fraction": 0.96, "eligible_groups": 25},
        causes=[
            {
                "cause": "shaping_starves_outcome",
                "components": ["asked_before_coding", "correctness"],
                "message": "asked_before_coding carries 91% of the GRPO advantage ...",
                "figures": {"share": 0.91},
            }
        ],
        examples=[
            {
                "rollout_id": "r7",
                "group_id": "g2",
                "step": 4,
                "transcript_key": "runs/exp%2F1/transcripts/step=4/group=g2/r7.json",
                "reason": "code ran and failed: 0/5 tests passed: [red]AssertionError[/red]",
            }
        ],
    )
    base.update(kw)
    return Alarm(**base)


def test_alarm_round_trips_through_json():
    alarm = dead_alarm()
    assert Alarm.from_dict(json.loads(json.dumps(alarm.to_dict()))) == alarm
    assert not alarm.is_recovery and dead_alarm(kind="recovered").is_recovery


def test_alarm_key_layout_and_unsafe_names():
    assert (
        alarm_key("run1", 3, "correctness", "dead_component")
        == "runs/run1/alarms/step=3/correctness-dead_component.json"
    )
    key = alarm_key("a/b", 0, "../x", "recovered")
    assert key.startswith("runs/a%2Fb/alarms/step=0/") and key.count("/") == 4 and "/../" not in key


def test_store_sink_writes_beside_records(tmp_path):
    store = LocalStore(tmp_path)
    sink = StoreAlarmSink(store)
    sink.emit(dead_alarm())
    sink.emit(dead_alarm())  # same onset written twice: overwrite, not duplicate
    assert sink.written == ["runs/exp%2F1/alarms/step=4/correctness-dead_component.json"] * 2
    assert store.list_keys("runs/") == sink.written[:1]
    assert store.get_json(sink.written[0])["figures"]["zero_variance_group_fraction"] == 0.96


def test_store_sink_needs_a_run_id(tmp_path):
    with pytest.raises(ValueError, match="run_id"):
        StoreAlarmSink(LocalStore(tmp_path)).emit(dead_alarm(run_id=None))
    sink = StoreAlarmSink(LocalStore(tmp_path), run_id="fallback")
    sink.emit(dead_alarm(run_id=None))
    assert sink.written[0].startswith("runs/fallback/alarms/")


def test_console_sink_prints_readable_line():
    buf = io.StringIO()
    sink = ConsoleAlarmSink(Console(file=buf, width=300, color_system=None))
    sink.emit(dead_alarm(message="has [brackets] that are not markup"))
    out = buf.getvalue()
    assert "ALARM DEAD" in out and "step 4" in out and "correctness" in out
    assert "[brackets]" in out
    assert "cause shaping_starves_outcome: asked_before_coding carries 91%" in out
    assert (
        "example r7 (group g2): code ran and failed: 0/5 tests passed: [red]AssertionError[/red] "
        "transcript_key runs/exp%2F1/transcripts/step=4/group=g2/r7.json"
    ) in out


def test_old_stored_alarms_without_examples_still_load():
    data = dead_alarm().to_dict()
    del data["examples"], data["causes"]
    data["a_field_from_a_newer_version"] = 1
    alarm = Alarm.from_dict(data)
    assert alarm.examples == [] and alarm.causes == []


def test_dispatch_survives_a_broken_sink(tmp_path):
    class Broken:
        def emit(self, alarm):
            raise RuntimeError("network down")

    store_sink = StoreAlarmSink(LocalStore(tmp_path))
    failures = dispatch([dead_alarm(), dead_alarm(step=5)], [Broken(), store_sink])
    assert len(store_sink.written) == 2
    assert [(f.sink, f.alarm.step) for f in failures] == [("Broken", 4), ("Broken", 5)]
    assert "network down" in failures[0].error


@pytest.mark.usefixtures("aws_env")
def test_sns_sink_publishes():
    with mock_aws():
        sns = boto3.client("sns", region_name="us-east-1")
        sqs = boto3.client("sqs", region_name="us-east-1")
        topic = sns.create_topic(Name="rewardpipe-alarms")["TopicArn"]
        queue_url = sqs.create_queue(QueueName="alarms")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn)

        sink = SnsAlarmSink(topic, client=sns)
        sink.emit(dead_alarm())
        assert len(sink.message_ids) == 1

        (msg,) = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)["Messages"]
        envelope = json.loads(msg["Body"])
        assert envelope["Subject"] == "[rewardpipe] dead_component: correctness run exp/1 step 4"
        body = json.loads(envelope["Message"])
        assert body["kind"] == "dead_component" and body["component"] == "correctness" and body["step"] == 4
        assert body["figures"]["zero_variance_group_fraction"] == 0.96
        assert body["examples"] == dead_alarm().examples and body["causes"] == dead_alarm().causes
        assert envelope["MessageAttributes"]["kind"]["Value"] == "dead_component"


@pytest.mark.usefixtures("aws_env")
def test_sns_message_stays_under_the_sns_size_limit():
    class Recorder:
        def publish(self, **kwargs):
            self.kwargs = kwargs
            return {"MessageId": "m"}

    huge = [{"rollout_id": "r" * 100_000, "group_id": "g", "step": 4, "transcript_key": "k", "reason": "x" * 300}] * 8
    client = Recorder()
    SnsAlarmSink("arn:aws:sns:us-east-1:123456789012:t", client=client).emit(dead_alarm(examples=huge))
    message = client.kwargs["Message"]
    assert len(message.encode("utf-8")) <= SnsAlarmSink.MESSAGE_LIMIT
    body = json.loads(message)
    assert body["examples_dropped"] == 6 and len(body["examples"]) == 2 and body["kind"] == "dead_component"


def test_sns_subject_is_ascii_and_short():
    subject = SnsAlarmSink.subject(dead_alarm(component="réponse_" + "x" * 200))
    assert len(subject) <= 100 and subject.isascii() and subject.endswith("...")


@pytest.mark.usefixtures("aws_env")
def test_sns_sink_rejects_a_non_arn():
    with pytest.raises(ValueError, match="topic ARN"):
        SnsAlarmSink("my-topic", client=object())


@pytest.mark.usefixtures("aws_env")
def test_sns_missing_topic_is_reported_by_dispatch():
    with mock_aws():
        sns = boto3.client("sns", region_name="us-east-1")
        sink = SnsAlarmSink("arn:aws:sns:us-east-1:123456789012:missing", client=sns)
        (failure,) = dispatch([dead_alarm()], [sink])
        assert failure.sink == "SnsAlarmSink" and "NotFound" in failure.error
