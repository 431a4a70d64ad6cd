"""Round thirty-seven (third wave), AWS steps judged before they are whole: a scheduled check judges step N once
step N+1 has a record, though some of N's executions may still run. Records landing in N afterwards are judged: the
next scheduled check judges N again from the state it was first judged from, while no later step has been judged."""

from __future__ import annotations

import json

import pytest

from rewardpipe.models import Record
from tests.aws import harness
from tests.aws.handlers import Context, load

pytestmark = pytest.mark.xdist_group("cdk")

WEIGHTS = {"correctness": 1.0, "style": 0.5}
BUCKET = "late-records"
SCHEDULED = {
    "version": "0",
    "id": "e",
    "detail-type": "Scheduled Event",
    "source": "aws.events",
    "account": harness.ACCOUNT,
    "time": "2026-12-06T00:00:00Z",
    "region": harness.REGION,
    "resources": [],
    "detail": {},
}


def _record(step: int, group: str, i: int, *, varied: bool = True) -> Record:
    components = {"correctness": [0.0, 0.5, 1.0, 1.0][i] if varied else 1.0, "style": [0.1, 0.2, 0.3, 0.4][i]}
    return Record(
        run_id="late",
        step=step,
        group_id=group,
        rollout_id=f"s{step}-{group}-r{i}",
        task_id="t",
        status="scored",
        components=components,
        weights=WEIGHTS,
        aggregate=sum(WEIGHTS[k] * v for k, v in components.items()),
        metrics={},
    )


def _groups(store, step: int, names, *, varied: bool = True) -> None:
    for group in names:
        for i in range(4):
            store.put_record(_record(step, group, i, varied=varied))


@pytest.fixture
def world(aws, monkeypatch):
    import boto3

    from rewardpipe.store import S3Store

    s3 = boto3.client("s3", region_name=harness.REGION)
    s3.create_bucket(Bucket=BUCKET)
    sqs, topic, queue = harness.alarm_inbox()
    # dead when over half the groups never vary, at the first such step
    thresholds = {"ZERO_VARIANCE_FRACTION": "0.5", "DEAD_STEPS": "1", "ERROR_RATE_THRESHOLD": "0.05"}
    deployment = {"BUCKET": BUCKET, "ALARM_TOPIC_ARN": topic, "REWARD_NAME": "late"}
    deployment["REWARD_WEIGHTS"] = json.dumps(WEIGHTS)
    for key, value in {**deployment, **thresholds}.items():
        monkeypatch.setenv(key, value)
    store = S3Store(BUCKET, client=s3)
    return {"store": store, "sqs": sqs, "queue": queue, "handler": load("variance_monitor")}


def _alarms(world) -> list[dict]:
    messages = world["sqs"].receive_message(QueueUrl=world["queue"], MaxNumberOfMessages=10).get("Messages", [])
    return [json.loads(m["Body"]) for m in messages]


def _schedule(world) -> list[tuple[int, int, bool]]:
    out = world["handler"].lambda_handler(SCHEDULED, Context())
    return [(r["step"], r["records"], r["replayed"]) for r in out["results"]]


def test_records_landing_in_a_judged_step_are_judged_by_the_next_scheduled_check(world):
    store = world["store"]
    _groups(store, 0, [f"g{n}" for n in range(5)])
    _groups(store, 1, ["g0"])  # the trainer started step 1 while step 0's last executions still ran
    assert _schedule(world) == [(0, 20, False)]
    assert _alarms(world) == []

    _groups(store, 0, [f"late{n}" for n in range(6)], varied=False)  # they end: correctness constant in 6 of 11
    assert _schedule(world) == [(0, 44, False)]  # judged again, whole
    verdict = store.get_json("runs/late/monitor/step=0.json")
    assert verdict["steps"][0]["records"] == 44
    dead = [(a["step"], a["component"], a["kind"]) for a in _alarms(world)]
    assert dead == [(0, "correctness", "dead_component")]

    assert _schedule(world) == []  # nothing new: neither judged nor alarmed again
    assert _alarms(world) == []


def test_a_step_is_judged_again_only_while_no_later_step_was_judged(world):
    store = world["store"]
    _groups(store, 0, [f"g{n}" for n in range(5)])
    _groups(store, 1, [f"g{n}" for n in range(5)])
    _groups(store, 2, ["g0"])
    assert _schedule(world) == [(0, 20, False), (1, 20, False)]
    _groups(store, 0, [f"late{n}" for n in range(6)], varied=False)
    # step 1's judgement continued the state step 0's made: step 0 stays as judged (docs/aws.md says so)
    assert _schedule(world) == []
    assert store.get_json("runs/late/monitor/step=0.json")["steps"][0]["records"] == 20

    _groups(store, 1, [f"late{n}" for n in range(6)], varied=False)  # step 1 is the newest judged: judged again
    assert _schedule(world) == [(1, 44, False)]
    assert [(a["step"], a["component"]) for a in _alarms(world)] == [(1, "correctness")]


def test_a_step_whose_judgement_raised_an_alarm_is_not_judged_again(world):
    store = world["store"]
    _groups(store, 0, [f"g{n}" for n in range(5)], varied=False)
    _groups(store, 1, ["g0"])
    assert _schedule(world) == [(0, 20, False)]
    assert [(a["step"], a["component"]) for a in _alarms(world)] == [(0, "correctness")]
    _groups(store, 0, [f"late{n}" for n in range(6)])
    # judging it again could contradict an alarm already sent: the step stays as judged, its alarm stands
    assert _schedule(world) == []
    assert _alarms(world) == []


def test_a_state_that_keeps_no_step_for_a_new_judgement_reads_and_writes_as_before():
    from rewardpipe.monitoring import MonitorState

    state = MonitorState(run_id="r")
    state.mark_checked(3)
    assert "provisional" not in state.to_dict()
    assert MonitorState.from_dict(state.to_dict()) == state
