"""Issue 22 item 0: the variance check loses no alarm, metric or verdict, and delivers no alarm twice,
whatever fails when: a conditional state PUT applied whose answer was lost, a check that dies after its
commit, an SNS publish that fails, a check that dies after publishing, a truncated state.

"Exactly once", as far as SNS allows (see rewardpipe.aws.monitoring): one SNS message per alarm
(run, step, component, kind: its ``dedupe_key``) across retries, replays and concurrent checks; the only
window left is a check that dies between SNS's answer and the ledger write, which a FIFO topic's
deduplication id closes for 5 minutes. Faults are injected at botocore's HTTP layer (tests/faults.py) or
into the SNS client; moto stands in for S3, SNS and SQS (an SQS queue subscribed to the topic counts
what was delivered)."""

from __future__ import annotations

import hashlib
import json

import pytest

from rewardpipe.store import S3Store
from tests.aws import harness
from tests.aws.handlers import Context, load
from tests.aws.test_monitor_handler import BUCKET, _metric_values, world  # noqa: F401 - the fixture
from tests.faults import S3Faults, is_conditional, key_of

# Its handlers are checked against their functions' IAM policies, read from the synthesized template.
pytestmark = pytest.mark.xdist_group("cdk")


class Died(BaseException):
    """The Lambda's process ending mid-check (a timeout, an out-of-memory kill): nothing catches it."""


def delivered(world) -> list[dict]:
    """Every SNS message the topic has delivered so far (drained from the subscribed queue)."""
    sqs, queue, out = world["sqs"], world["queue"], []
    while True:
        batch = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=0).get("Messages", [])
        if not batch:
            return out
        for message in batch:
            out.append(json.loads(message["Body"]))
            sqs.delete_message(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"])


def dead(messages: list[dict]) -> list[tuple[str, int]]:
    return sorted((m["component"], m["step"]) for m in messages if m["kind"] == "dead_component")


def check(world, step: int | None = 0, store=None, sns=None):
    from rewardpipe.aws.monitoring import CheckRequest, run_check
    from rewardpipe.aws.settings import Settings

    request = CheckRequest(run_id="mon", step=step) if step is not None else CheckRequest()
    return run_check(request, Settings.from_env(), store=store, sns_client=sns)


def state(world) -> dict:
    return world["store"].get_json("runs/mon/monitor/state.json")


def is_state_commit(request) -> bool:
    return is_conditional(request) and key_of(request).endswith("/monitor/state.json")


@pytest.mark.parametrize("client", ["bounded", "botocore-retries"])
def test_a_state_commit_applied_whose_answer_was_lost_still_publishes_everything(world, capsys, client):
    """Before: the commit was sent again, S3 answered 412 (the first one had changed the ETag), the check
    took it for a lost race, and the step's alarms, metrics and verdict were never published."""
    import boto3

    s3 = (
        S3Store(BUCKET)
        if client == "bounded"  # the check's own client: the store retries
        else S3Store(BUCKET, client=boto3.client("s3", region_name=harness.REGION))
    )  # botocore retries
    faults = S3Faults(s3.client).fail("PutObject", "ConnectionClosedError", applied=True, times=1, when=is_state_commit)
    out = check(world, store=s3)
    assert faults.injected  # the answer of the first commit was lost, after S3 applied it
    assert out["checked"] == 1 and dead(delivered(world)) == [("asked_before_coding", 0)]
    assert world["store"].get_json("runs/mon/monitor/step=0.json")["steps"][0]["step"] == 0  # the verdict
    assert _metric_values(capsys.readouterr().out, "DeadStreak", "asked_before_coding", run="mon") == [1.0]
    assert state(world)["checked"] == [[0, 0]] and state(world)["pending"] == []


def test_a_check_that_dies_after_its_commit_publishes_on_its_retry_exactly_once(world, capsys):
    """Before: the retry found the step checked, called it a replay, and published nothing, ever."""
    import boto3

    sns = boto3.client("sns", region_name=harness.REGION)
    real_publish = sns.publish
    calls = {"n": 0}

    def die_on_first_publish(**kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise Died()
        return real_publish(**kwargs)

    sns.publish = die_on_first_publish
    with pytest.raises(Died):
        check(world, sns=sns)
    assert delivered(world) == [] and state(world)["checked"] == [[0, 0]]  # committed, with its outbox
    assert state(world)["pending"][0]["step"] == 0
    capsys.readouterr()

    again = check(world, sns=sns)  # Lambda's retry of the same event
    assert dead(delivered(world)) == [("asked_before_coding", 0)]
    assert [a["component"] for a in again["delivered_late"] if a["kind"] == "dead_component"] == ["asked_before_coding"]
    assert _metric_values(capsys.readouterr().out, "DeadStreak", "asked_before_coding", run="mon") == [1.0]
    assert state(world)["pending"] == []
    check(world, sns=sns)  # and a replay after that: nothing more
    assert delivered(world) == []


def test_a_failed_sns_publish_fails_the_invocation_and_is_delivered_by_the_retry(world):
    """Before: the publish error went into the summary, the invocation returned OK, the alarm was lost."""
    import boto3
    from botocore.exceptions import EndpointConnectionError

    from rewardpipe.aws.monitoring import CheckFailed

    sns = boto3.client("sns", region_name=harness.REGION)
    real_publish = sns.publish
    down = {"on": True}

    def publish(**kwargs):
        if down["on"]:
            raise EndpointConnectionError(endpoint_url="https://sns.us-east-1.amazonaws.com")
        return real_publish(**kwargs)

    sns.publish = publish
    with pytest.raises(CheckFailed, match="alarm-delivery:SnsAlarmSink"):
        check(world, sns=sns)
    assert world["store"].list_keys("runs/mon/alarms/step=0/")  # the store's copy went out
    down["on"] = False
    check(world, sns=sns)  # Lambda retries a failed asynchronous invocation
    assert dead(delivered(world)) == [("asked_before_coding", 0)]
    assert state(world)["pending"] == []


def test_a_check_that_dies_after_publishing_does_not_publish_again(world):
    """Killed after SNS took the alarm (and its ledger entry was written), before the state said so: the
    retry finds the alarm in the ledger and sends nothing."""
    import boto3

    s3 = S3Store(BUCKET)
    commits = {"n": 0}

    def die_on_second_commit(request, **kwargs):
        if is_state_commit(request):
            commits["n"] += 1
            if commits["n"] == 2:  # the first commits the step and its outbox, the second empties it
                raise Died()

    s3.client.meta.events.register_first("before-send.s3.PutObject", die_on_second_commit)
    sns = boto3.client("sns", region_name=harness.REGION)
    with pytest.raises(Died):
        check(world, store=s3, sns=sns)
    assert dead(delivered(world)) == [("asked_before_coding", 0)] and state(world)["pending"]
    check(world, sns=sns)
    check(world, step=None, sns=sns)  # and the schedule
    assert delivered(world) == [] and state(world)["pending"] == []


def test_replays_and_retries_never_deliver_an_alarm_twice(world):
    for _ in range(3):
        load("variance_monitor").lambda_handler({"run_id": "mon", "step": 0}, Context())
    scheduled = {"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}
    load("variance_monitor").lambda_handler(scheduled, Context())
    messages = delivered(world)
    keys = [m["dedupe_key"] for m in messages]
    assert len(keys) == len(set(keys)) and dead(messages) == [("asked_before_coding", 0)]


def test_alarms_carry_a_dedupe_key_and_a_fifo_topic_gets_it_as_its_deduplication_id(world, monkeypatch):
    import boto3

    sns = boto3.client("sns", region_name=harness.REGION)
    fifo = sns.create_topic(Name="alarms.fifo", Attributes={"FifoTopic": "true"})["TopicArn"]
    monkeypatch.setenv("ALARM_TOPIC_ARN", fifo)
    sent = []
    real_publish = sns.publish
    sns.publish = lambda **kwargs: sent.append(kwargs) or real_publish(**kwargs)
    check(world, sns=sns)
    (alarm,) = [json.loads(k["Message"]) for k in sent if json.loads(k["Message"])["kind"] == "dead_component"]
    assert alarm["dedupe_key"] == "mon/0/asked_before_coding/dead_component"
    (call,) = [k for k in sent if json.loads(k["Message"])["kind"] == "dead_component"]
    assert call["MessageDeduplicationId"] == hashlib.sha256(alarm["dedupe_key"].encode()).hexdigest()
    assert call["MessageAttributes"]["dedupe_key"]["StringValue"] == alarm["dedupe_key"]


@pytest.mark.parametrize("content", [b'{"schema": "rewardpipe.monitor-state/v2", "checked": [[0, ', b"", b"\xff\xfe"])
def test_a_truncated_state_is_kept_aside_once_and_no_later_check_fails(world, content):
    """Before: a truncated state.json made every later check of the run fail. Now the first check keeps it
    aside and reports it; the alarms it re-raises from a fresh state are in the ledgers, so not sent again."""
    from rewardpipe.aws.monitoring import CheckFailed

    check(world)
    assert dead(delivered(world)) == [("asked_before_coding", 0)]
    world["store"].put_bytes("runs/mon/monitor/state.json", content)
    with pytest.raises(CheckFailed, match=r"state\.corrupt-"):
        check(world, step=1)
    assert [k for k in world["store"].list_keys("runs/mon/monitor/") if "state.corrupt-" in k]
    assert (
        world["store"].get_bytes(
            next(k for k in world["store"].list_keys("runs/mon/monitor/") if "state.corrupt-" in k)
        )
        == content
    )
    assert check(world, step=1)["checked"] == 0  # the next check: fine
    assert state(world)["checked"] == [[0, 1]]
    assert dead(delivered(world)) == []  # step 0's alarm, raised again from the fresh state, was not resent


def test_a_concurrent_check_racing_a_lost_answer_still_commits_once(world):
    """The winner's commit lands between this check's applied-but-lost commit and its retry: the read-back
    finds this check's own token, so it goes on; the alarm reaches SNS once."""
    s3 = S3Store(BUCKET)
    S3Faults(s3.client).fail("PutObject", "ReadTimeoutError", applied=True, times=1, when=is_state_commit)
    out = check(world, store=s3)
    assert out["checked"] == 1 and dead(delivered(world)) == [("asked_before_coding", 0)]
    check(world)
    assert delivered(world) == []
