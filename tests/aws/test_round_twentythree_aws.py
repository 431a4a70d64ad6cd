"""Round twenty-three, AWS path (an independent review, "moto is not AWS"): what the real services refuse that moto
took.

* S3 takes an object key of at most 1,024 UTF-8 bytes, the prefix and its ``/`` included; moto stores any key. A
  store location ``s3://bucket/<prefix>`` (a user setting: ``run --out``, ``monitor``, TRL's ``store=``) was
  taken at any length, and the store's keys below it reach 766 bytes (a transcript:
  ``runs/<run>/transcripts/step=<n>/group=<g>/<rollout>.json`` with a 240-character run folder, group and
  rollout ids at the documented 1,024 characters, cut with a digest to 240, and step 2**31-1). A prefix of 300
  bytes worked for every short-id record and failed the first record, transcript or alarm whose ids were long
  enough (``KeyTooLongError``), far into a run. The store now refuses such a prefix when it is opened, naming
  the setting and the budget (1,024 - 766 - 1 = 257 bytes), computed from every layout's longest key
  (``rewardpipe.store.longest_keys``); a write whose key is still over the limit fails before the request. The
  harness refuses a key over 1,024 bytes as S3 does.
* SNS takes a Publish of at most 262,144 bytes, counting the message and every message attribute's name, type
  and value in UTF-8; moto counts only the message's characters. The alarm sink kept the message under 252 KiB by
  dropping examples, but a component's name (the monitor reads any name a stored record gives) is in the
  message three times (``component``, ``message``, ``dedupe_key``) and in two attributes (``component`` and the
  percent-encoded ``dedupe_key``, up to 9 bytes per character): a component named with ~90,000 characters
  failed every publish of its alarm (InvalidParameter), so the alarm that it had stopped varying never reached
  the topic. Attribute values are now cut at 1,024 bytes with a marker and a digest of the whole value, and the
  message gets what the attributes leave: long strings and lists are cut with ``...[cut: ...]`` markers and a
  ``truncated`` note (the whole alarm stays in the store). The harness refuses a Publish over the limit, and a
  subject SNS refuses (over 100 characters, not printable ASCII).
* ``RolloutClient.start`` sent StartExecution for an input the execution's first state refuses (a run id no
  store key can hold, such as 100 accented characters, 900 once percent-encoded; a group or rollout id over
  1,024 characters or with a line break; ``max_turns`` over 20; neither a task nor a task key): AWS started and
  billed the execution, and its error record went under run ``unknown``, away from the trainer's run, one per
  rollout. The client now checks the input with the execution's own model (``RolloutInput``) and raises a
  ``ValueError`` naming the field before any AWS call.
* ECS RunTask takes overrides of at most 8,192 characters, JSON formatting included; moto takes any. The Fargate
  runner's overrides are two job keys (at most ~530 characters each with ids at their limits), far inside it;
  the harness now refuses larger overrides, so a future override carrying more (a job inline) fails a test.
"""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from rewardpipe.models import MAX_ID_LENGTH, MAX_STEP
from rewardpipe.monitoring.alarms import Alarm
from rewardpipe.monitoring.sinks import SnsAlarmSink, StoreAlarmSink
from rewardpipe.store import S3_KEY_LIMIT, S3Store, StoreError, longest_key_bytes, longest_keys, open_store
from tests.aws import harness
from tests.aws.handlers import Context, load
from tests.aws.test_round_sixteen_aws import _record

pytestmark = pytest.mark.xdist_group("cdk")

BUCKET = "rewardpipe-r23"


def _violations() -> list[str]:
    found = list(harness.LIMIT_VIOLATIONS)
    harness.LIMIT_VIOLATIONS.clear()
    return found


# -- S3's 1,024-byte object keys -----------------------------------------------------------------------------


def test_the_harness_refuses_an_s3_key_over_1024_bytes(s3):
    s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key="k" * 1024, Body=b"{}")
    with pytest.raises(ClientError) as caught:
        s3.put_object(Bucket=BUCKET, Key="é" * 513, Body=b"{}")  # 1,026 bytes, 513 characters
    assert caught.value.response["Error"]["Code"] == "KeyTooLongError"
    assert _violations() != []


def test_the_longest_key_is_a_transcript_with_ids_at_their_limits():
    keys = longest_keys()
    assert longest_key_bytes() == len(keys["transcript"]) == 766
    assert all(key.isascii() for key in keys.values())  # encoded segments: characters are bytes


@pytest.mark.parametrize("prefix", ["p" * 258, "é" * 129, "a/" * 200], ids=["ascii", "utf8", "folders"])
def test_a_prefix_too_long_for_the_store_s_keys_fails_when_the_store_is_opened(prefix):
    with pytest.raises(
        StoreError, match=r"S3 store prefix .* bytes \(UTF-8\); at most 257 fit: S3 keys are at most 1024"
    ):
        open_store(f"s3://{BUCKET}/{prefix}", client=object())


def test_every_layout_at_its_longest_fits_below_the_longest_prefix_allowed(s3):
    s3.create_bucket(Bucket=BUCKET)
    prefix = "é" * 128 + "x"  # 257 bytes: the budget exactly, counted in UTF-8
    store = S3Store(BUCKET, prefix, client=s3)
    run, long_id = "R" * 240, "I" * MAX_ID_LENGTH
    record = _record(run, 0, 0, {long_id: 0.5}).model_copy(
        update={"step": MAX_STEP, "group_id": long_id, "rollout_id": long_id}
    )
    store.put_record(record)
    assert [r.rollout_id for r in store.iter_records(run)] == [long_id]
    alarm = Alarm(kind="recovered", component=long_id, step=MAX_STEP, cause="c", message="m", run_id=run)
    StoreAlarmSink(store, run).emit(alarm)
    for layout in longest_keys().values():
        store.put_json(layout, {})
    assert max(len(f"{prefix}/{key}".encode()) for key in longest_keys().values()) == S3_KEY_LIMIT
    assert _violations() == []


def test_a_normal_prefix_is_taken_and_a_key_no_layout_builds_fails_before_the_request(s3):
    s3.create_bucket(Bucket=BUCKET)
    store = open_store(f"s3://{BUCKET}/experiments/2026-12/grpo", client=s3)
    store.put_json("runs/r/manifest.json", {})
    with pytest.raises(StoreError, match="over S3's 1024-byte key limit"):
        store.put_json("runs/" + "k" * 1000, {})
    assert _violations() == []


# -- SNS's 256 KiB per Publish, attributes included ----------------------------------------------------------


def test_the_harness_refuses_a_publish_sns_refuses(aws):
    import boto3

    sns = boto3.client("sns", region_name=harness.REGION)
    topic = sns.create_topic(Name="t")["TopicArn"]
    attribute = {"a": {"DataType": "String", "StringValue": "v" * 70_000}}
    sns.publish(TopicArn=topic, Message="m" * 190_000, MessageAttributes=attribute)
    with pytest.raises(ClientError, match="InvalidParameter"):
        sns.publish(TopicArn=topic, Message="m" * 200_000, MessageAttributes=attribute)
    with pytest.raises(ClientError, match="InvalidParameter"):
        sns.publish(TopicArn=topic, Message="é" * 140_000)  # 140,000 characters, 280,000 bytes
    with pytest.raises(ClientError, match="InvalidParameter"):
        sns.publish(TopicArn=topic, Message="m", Subject="two\nlines")
    assert len(_violations()) == 3


def _dead(component: str, run: str = "r23", **extra) -> Alarm:
    return Alarm(
        kind="dead_component",
        component=component,
        step=4,
        cause="constant_everywhere",
        message=f"{component} has not varied inside any group for 3 steps",
        run_id=run,
        **extra,
    )


def _topic_and_inbox() -> tuple[str, object, str]:
    import boto3

    sns = boto3.client("sns", region_name=harness.REGION)
    sqs = boto3.client("sqs", region_name=harness.REGION)
    topic = sns.create_topic(Name="alarms")["TopicArn"]
    queue = sqs.create_queue(QueueName="inbox", Attributes={"MaximumMessageSize": "1048576"})["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn, Attributes={"RawMessageDelivery": "true"})
    return topic, sqs, queue


def _delivered(sqs, queue) -> list[dict]:
    messages = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, MessageAttributeNames=["All"])
    return messages.get("Messages", [])


@pytest.mark.parametrize(
    "component", ["c" * 90_000, "é" * 40_000, "名" * 30_000, "a\tb" * 30_000], ids=["ascii", "latin", "cjk", "tabs"]
)
def test_an_alarm_of_a_component_with_a_very_long_name_is_published_within_sns_s_limit(aws, component):
    import boto3

    topic, sqs, queue = _topic_and_inbox()
    sink = SnsAlarmSink(topic, client=boto3.client("sns", region_name=harness.REGION))
    sink.emit(_dead(component, run="r" * 20_000))
    assert _violations() == []
    (message,) = _delivered(sqs, queue)
    body = json.loads(message["Body"])
    assert body["kind"] == "dead_component" and body["step"] == 4 and "SNS" in body["truncated"]
    assert "...[cut: " in body["component"]
    attributes = message["MessageAttributes"]
    assert len(attributes["component"]["StringValue"].encode()) <= SnsAlarmSink.ATTRIBUTE_LIMIT
    assert "...[cut: " in attributes["component"]["StringValue"]
    assert attributes["kind"]["StringValue"] == "dead_component"


def test_two_long_names_sharing_a_beginning_keep_distinct_attributes():
    first = SnsAlarmSink.attribute("x" * 5000 + "1")["StringValue"]
    second = SnsAlarmSink.attribute("x" * 5000 + "2")["StringValue"]
    assert first != second and len(first) == len(second) == SnsAlarmSink.ATTRIBUTE_LIMIT


def test_a_short_alarm_is_published_as_before():
    message = json.loads(SnsAlarmSink.message(_dead("correctness")))
    assert "truncated" not in message and message["component"] == "correctness"
    assert SnsAlarmSink.attribute("correctness") == {"DataType": "String", "StringValue": "correctness"}


def test_an_alarm_with_thousands_of_causes_is_cut_to_its_identity_at_worst():
    causes = [{"cause": "redundant_components", "components": [f"c{i}" for i in range(50)], "message": "m" * 50}]
    text = SnsAlarmSink.message(_dead("c", causes=causes * 3000), limit=2000)
    assert len(text.encode()) <= 2000
    assert json.loads(text)["kind"] == "dead_component"


def test_the_variance_check_delivers_the_alarm_of_a_component_named_with_a_whole_paragraph(aws, monkeypatch):
    import boto3

    s3 = boto3.client("s3", region_name=harness.REGION)
    s3.create_bucket(Bucket=BUCKET)
    topic, sqs, queue = _topic_and_inbox()
    store = S3Store(BUCKET, client=s3)
    name = "shaping: " + "the answer restates the question before it answers; " * 2000  # ~104,000 characters
    for group in range(4):
        for i in range(4):
            store.put_record(_record("r23", group, i, {"correctness": [0.0, 1.0, 0.5, 1.0][i], name: 0.6}))
    for key, value in {
        "BUCKET": BUCKET,
        "ALARM_TOPIC_ARN": topic,
        "REWARD_NAME": "ask_before_coding",
        "REWARD_WEIGHTS": json.dumps({"correctness": 1.0}),
        "ZERO_VARIANCE_FRACTION": "0.5",
        "DEAD_STEPS": "1",
    }.items():
        monkeypatch.setenv(key, value)
    out = load("variance_monitor").lambda_handler({"run_id": "r23", "step": 0}, Context())
    assert out["results"][0]["verdicts"][name] == "dead"
    delivered = [json.loads(m["Body"]) for m in _delivered(sqs, queue)]
    assert [(a["kind"], a["component"].startswith("shaping: ")) for a in delivered] == [("dead_component", True)]
    assert _violations() == []


# -- StartExecution of an input the execution refuses ------------------------------------------------------------


class _Sfn:
    def __init__(self) -> None:
        self.started: list[dict] = []

    def start_execution(self, **kwargs):
        self.started.append(kwargs)
        return {"executionArn": f"arn:aws:states:us-east-1:1:execution:m:{kwargs['name']}"}


@pytest.mark.parametrize(
    ("args", "extra", "said"),
    [
        (("é" * 100, 0, "g", "r"), {}, "run: Value error, a run id must fit a store key"),
        (("run", 0, "g", "x" * 1025), {}, "rollout: String should have at most 1024 characters"),
        (("run", 0, "g\n", "r"), {}, "group: Value error, must not contain control"),
        (("run", 0, "g", "r"), {"max_turns": 50}, "max_turns: Input should be less than or equal to 20"),
        (("run", 0, "g", "r"), {"task": None}, "give exactly one of 'task'"),
    ],
    ids=["run", "long-rollout", "group-line-break", "max-turns", "no-task"],
)
def test_the_client_refuses_an_input_the_execution_would_refuse_before_starting_it(args, extra, said):
    from rewardpipe.aws.client import RolloutClient

    sfn = _Sfn()
    client = RolloutClient("arn:aws:states:us-east-1:1:stateMachine:m", sfn=sfn)
    with pytest.raises(ValueError, match="cannot be started") as caught:
        client.start(*args, **{"task": {"task_id": "t"}, **extra})
    assert said in str(caught.value)
    assert sfn.started == []
    client.start("run", 0, "g", "r", task={"task_id": "t"}, max_turns=20)
    assert len(sfn.started) == 1


# -- ECS RunTask's 8,192-character overrides ---------------------------------------------------------------------


def test_the_harness_refuses_ecs_overrides_over_8192_characters(aws):
    import boto3

    ecs = boto3.client("ecs", region_name=harness.REGION)
    ecs.create_cluster(clusterName="c")
    ecs.register_task_definition(family="f", containerDefinitions=[{"name": "runner", "image": "i", "memory": 512}])
    overrides = {"containerOverrides": [{"name": "runner", "environment": [{"name": "JOB_KEY", "value": "k" * 8200}]}]}
    with pytest.raises(ClientError, match="InvalidParameterException"):
        ecs.run_task(cluster="c", taskDefinition="f", overrides=overrides)
    assert _violations() != []


def test_the_fargate_job_s_overrides_fit_with_ids_at_their_limits():
    from rewardpipe.aws.jobs import job_keys

    job, result = job_keys("R" * 240, "I" * MAX_ID_LENGTH, "a" * 32)  # a run folder's longest, a hashed rollout id
    environment = [{"name": "JOB_KEY", "value": job}, {"name": "RESULT_KEY", "value": result}]
    overrides = {"containerOverrides": [{"name": "c" * 255, "environment": environment}]}  # the longest container name
    assert len(json.dumps(overrides, separators=(",", ":"))) <= harness.LIMITS["ecs_overrides_chars"]
