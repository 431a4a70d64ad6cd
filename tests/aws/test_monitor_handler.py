"""The variance-check Lambda with moto S3 and SNS: verdicts in S3, EMF metrics, alarms to SNS."""

from __future__ import annotations

import json

import pytest

from rewardpipe.models import ErrorInfo, Record
from tests.aws import harness
from tests.aws.handlers import Context, load

# Its handlers are checked against their functions' IAM policies, read from the synthesized template.
pytestmark = pytest.mark.xdist_group("cdk")

WEIGHTS = {"correctness": 1.0, "asked_before_coding": 0.6, "guessed_immediately": 0.4, "loop_penalty": 0.2}
BUCKET = "monitor-test-records"


def _record(run: str, step: int, group: int, i: int) -> Record:
    components = {
        "correctness": [0.0, 0.5, 1.0, 1.0][i],  # varies inside every group
        # constant mid-range everywhere: dead (a penalty idle at 0 would be normal, not dead)
        "asked_before_coding": 0.6,
        "guessed_immediately": [0.0, -1.0, 0.0, 0.0][i],
        "loop_penalty": [0.0, -0.5, 0.0, 0.0][i],
    }
    aggregate = sum(WEIGHTS[k] * v for k, v in components.items())
    return Record(
        run_id=run,
        step=step,
        group_id=f"g{group}",
        rollout_id=f"s{step}-g{group}-r{i}",
        task_id="t",
        status="scored",
        components=components,
        weights=WEIGHTS,
        aggregate=aggregate,
        metrics={},
    )


def _error(run: str, step: int) -> Record:
    return Record(
        run_id=run,
        step=step,
        group_id="g0",
        rollout_id=f"s{step}-err",
        task_id="t",
        status="error",
        error=ErrorInfo(kind="executor_crash", message="boom"),
        components={k: None for k in WEIGHTS},
        weights=WEIGHTS,
        aggregate=None,
    )


@pytest.fixture
def world(aws, monkeypatch):
    import boto3

    from rewardpipe.store import S3Store

    s3 = boto3.client("s3", region_name=harness.REGION)
    s3.create_bucket(Bucket=BUCKET)
    sqs, topic, queue = harness.alarm_inbox()
    store = S3Store(BUCKET, client=s3)
    for step in (0, 1):
        for group in range(5):
            for i in range(4):
                store.put_record(_record("mon", step, group, i))
        store.put_record(_error("mon", step))
    for key, value in {
        "BUCKET": BUCKET,
        "ALARM_TOPIC_ARN": topic,
        "REWARD_NAME": "ask_before_coding",
        "REWARD_WEIGHTS": json.dumps(WEIGHTS),
        "ZERO_VARIANCE_FRACTION": "0.5",
        "ERROR_RATE_THRESHOLD": "0.05",
        "DEAD_STEPS": "1",
    }.items():
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
    assert check["verdicts"]["asked_before_coding"] == "dead"
    assert check["verdicts"]["correctness"] != "dead"
    assert check["records"] == 21 and check["error_rate"] == pytest.approx(1 / 21)

    verdict = world["store"].get_json("runs/mon/monitor/step=0.json")
    assert verdict["steps"][0]["components"]["asked_before_coding"]["zero_variance_group_fraction"] == 1.0

    docs = _emf(capsys.readouterr().out)
    zero = {d["component"]: d["ZeroVarianceGroupFraction"] for d in docs if "ZeroVarianceGroupFraction" in d}
    assert zero["asked_before_coding"] == [1.0] and zero["correctness"] == [0.0]
    assert set(zero) == set(WEIGHTS)
    error_rate = [d["ErrorRate"] for d in docs if "ErrorRate" in d]
    assert error_rate == [[pytest.approx(1 / 21)]]
    std = {d["component"]: d["WithinGroupStd"][0] for d in docs if "WithinGroupStd" in d}
    assert std["asked_before_coding"] == 0.0 and std["correctness"] > 0

    messages = world["sqs"].receive_message(QueueUrl=world["queue"], MaxNumberOfMessages=10)["Messages"]
    alarms = [json.loads(m["Body"]) for m in messages]
    dead = [a for a in alarms if a["kind"] == "dead_component"]
    assert [a["component"] for a in dead] == ["asked_before_coding"]
    assert world["store"].list_keys("runs/mon/alarms/step=0/")  # StoreAlarmSink wrote it beside the records


def test_the_schedule_checks_the_newest_complete_step_once(world, capsys):
    scheduled = {
        "version": "0",
        "id": "e",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": harness.ACCOUNT,
        "time": "2026-11-30T00:00:00Z",
        "region": harness.REGION,
        "resources": [],
        "detail": {},
    }
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


def test_emitted_metrics_match_the_alarm_dimensions_in_the_template(synth, world, capsys):
    world["handler"].lambda_handler({"run_id": "mon", "step": 0}, Context())
    docs = _emf(capsys.readouterr().out)
    alarms = [
        r["Properties"]
        for r in synth.template["Resources"].values()
        if r["Type"] == "AWS::CloudWatch::Alarm" and r["Properties"].get("Namespace") == "RewardPipe"
    ]
    assert alarms
    for alarm in alarms:
        wanted = {d["Name"]: d["Value"] for d in alarm["Dimensions"]}
        matching = [
            d
            for d in docs
            for directive in d["_aws"]["CloudWatchMetrics"]
            if directive["Namespace"] == alarm["Namespace"]
            and any(m["Name"] == alarm["MetricName"] for m in directive["Metrics"])
            and sorted(directive["Dimensions"][0]) == sorted(wanted)
            and all(d.get(k) == v for k, v in wanted.items())
        ]
        assert matching, f"no EMF document feeds alarm {alarm['AlarmName']}"


# -- steps, not minutes; every unchecked step in order; no re-emission ---------------------------------


def _metric_values(stdout: str, name: str, component: str | None = None, run: str | None = "*") -> list[float]:
    """Values of metric ``name``; ``run``: "*" any, None only documents without a run dimension, else that run."""
    return [
        v
        for d in _emf(stdout)
        if name in d and (component is None or d.get("component") == component) and (run == "*" or d.get("run") == run)
        for v in d[name]
    ]


def _add_steps(store, run: str, steps) -> None:
    for step in steps:
        for group in range(5):
            for i in range(4):
                store.put_record(_record(run, step, group, i))


def test_every_unchecked_step_is_checked_in_order_and_the_dead_streak_counts_steps(world, capsys, monkeypatch):
    monkeypatch.setenv("DEAD_STEPS", "3")
    _add_steps(world["store"], "mon", (2, 3))
    handler = load("variance_monitor")
    out = handler.lambda_handler({"run_id": "mon", "step": 3}, Context())
    assert [r["step"] for r in out["results"]] == [0, 1, 2, 3]  # all unchecked steps up to 3, in order
    stdout = capsys.readouterr().out
    assert _metric_values(stdout, "DeadStreak", "asked_before_coding", run="mon") == [1.0, 2.0, 3.0, 4.0]
    assert _metric_values(stdout, "DeadStreak", "correctness", run="mon") == [0.0, 0.0, 0.0, 0.0]
    # what the alarm watches: once per check, the longest streak of the active runs
    assert _metric_values(stdout, "DeadStreak", "asked_before_coding", run=None) == [4.0]
    alarms = [
        json.loads(m["Body"])
        for m in world["sqs"].receive_message(QueueUrl=world["queue"], MaxNumberOfMessages=10)["Messages"]
    ]
    # raise_after = DEAD_STEPS: the core monitor alarms on the third dead step, like the CloudWatch alarm.
    assert [(a["component"], a["step"]) for a in alarms if a["kind"] == "dead_component"] == [
        ("asked_before_coding", 2)
    ]


def test_a_replayed_step_emits_no_metrics_again(world, capsys):
    world["handler"].lambda_handler({"run_id": "mon", "step": 0}, Context())
    capsys.readouterr()
    again = world["handler"].lambda_handler({"run_id": "mon", "step": 0}, Context())
    stdout = capsys.readouterr().out
    assert again["checked"] == 0 and again["results"][0]["replayed"] is True
    for name in ("DeadStreak", "ZeroVarianceGroupFraction", "ErrorRate", "WithinGroupStd"):
        assert _metric_values(stdout, name) == [], name
    assert _metric_values(stdout, "ChecksRun") == [1.0]  # the heartbeat still beats


def test_the_schedule_catches_up_on_steps_a_late_check_skipped(world, capsys):
    _add_steps(world["store"], "mon", (2, 3))
    world["handler"].lambda_handler({"run_id": "mon", "step": 0}, Context())
    scheduled = {"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}
    out = world["handler"].lambda_handler(scheduled, Context())
    assert [r["step"] for r in out["results"]] == [1, 2]  # 3 is the newest step and may still be written
    state = world["store"].get_json("runs/mon/monitor/state.json")  # the core monitor's state, schema v2
    assert state["checked"] == [[0, 2]] and state["targets"]["component:asked_before_coding"]["dead_streak"] == 3


def test_one_corrupt_run_state_does_not_stop_the_other_runs(world, capsys):
    _add_steps(world["store"], "other", (0, 1))
    world["store"].put_json("runs/mon/monitor/state.json", {"schema": "something-else", "checked": "x"})
    scheduled = {"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}
    from rewardpipe.aws.monitoring import CheckFailed

    with pytest.raises(CheckFailed) as info:
        world["handler"].lambda_handler(scheduled, Context())
    assert "run 'mon'" in str(info.value) and "runs/mon/monitor/state.corrupt-" in str(info.value)
    assert "run 'other'" not in str(info.value)
    assert world["store"].get_json("runs/other/monitor/step=0.json")["steps"][0]["step"] == 0
    assert world["store"].get_json("runs/other/monitor/state.json")["checked"] == [[0, 0]]
    # The corrupt state is kept aside (by the core monitor) and the run checked again from a fresh state.
    assert world["store"].get_json("runs/mon/monitor/state.json")["checked"] == [[0, 0]]
    assert [k for k in world["store"].list_keys("runs/mon/monitor/") if "state.corrupt-" in k]
    assert _metric_values(capsys.readouterr().out, "ChecksRun") == [1.0]  # one of two runs checked cleanly


def test_the_lambdas_old_check_state_is_migrated_into_the_core_state(world, capsys):
    from rewardpipe.monitoring import MonitorState

    # What the Lambda kept before it used the core state: step 0 checked, asked_before_coding 1 step dead.
    old = MonitorState(run_id="mon")
    old.target("component:asked_before_coding").dead_streak = 1
    world["store"].put_json(
        "runs/mon/monitor/check-state.json",
        {
            "schema": "rewardpipe.check-state/v1",
            "monitor": old.to_dict(),
            "checked": [0],
            "dead_streak": {"asked_before_coding": 1},
        },
    )
    out = world["handler"].lambda_handler({"run_id": "mon", "step": 1}, Context())
    assert [(r["step"], r["replayed"]) for r in out["results"]] == [(1, False)]  # step 0 is not checked again
    assert _metric_values(capsys.readouterr().out, "DeadStreak", "asked_before_coding", run="mon") == [2.0]
    assert world["store"].get_json("runs/mon/monitor/state.json")["checked"] == [[0, 1]]


def test_two_concurrent_runs_keep_their_own_dead_streaks(world, capsys):
    """A healthy run checked after a dead one must not "recover" the dead-component alarm."""
    for step in (0, 1, 2):
        for group in range(5):
            for i in range(4):
                record = _record("fine", step, group, i)
                # asked_before_coding varies inside every group of this run: alive
                components = {**record.components, "asked_before_coding": [0.0, 0.6, 0.6, 0.0][i]}
                world["store"].put_record(
                    record.model_copy(
                        update={
                            "components": components,
                            "aggregate": sum(WEIGHTS[k] * v for k, v in components.items()),
                        }
                    )
                )
    _add_steps(world["store"], "mon", (2,))
    for step in (0, 1, 2):
        world["handler"].lambda_handler({"run_id": "mon", "step": step}, Context())
        world["handler"].lambda_handler({"run_id": "fine", "step": step}, Context())
    stdout = capsys.readouterr().out
    assert _metric_values(stdout, "DeadStreak", "asked_before_coding", run="mon") == [1.0, 2.0, 3.0]
    assert _metric_values(stdout, "DeadStreak", "asked_before_coding", run="fine") == [0.0, 0.0, 0.0]
    # the alarm's series: the longest streak among the active runs after every check, never reset by "fine"
    assert _metric_values(stdout, "DeadStreak", "asked_before_coding", run=None) == [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]


class RacingS3:
    """Wraps the S3 client: just before this check commits the run's state, a concurrent check of the same
    run commits first (optionally answering with a 409 ConditionalRequestConflict once, as S3 can)."""

    def __init__(self, client, on_first_commit):
        self._client, self._on_first_commit, self.conditional_puts = client, on_first_commit, 0

    def __getattr__(self, name):
        return getattr(self._client, name)

    def put_object(self, **kwargs):
        if "IfMatch" in kwargs or "IfNoneMatch" in kwargs:
            self.conditional_puts += 1
            if self.conditional_puts == 1:
                self._on_first_commit()
        return self._client.put_object(**kwargs)


def test_concurrent_checks_of_a_run_commit_once_and_alarm_once(world, capsys):
    """The S3 conditional write (If-None-Match / If-Match) serialises checks; moto enforces both headers
    like S3 (412 on a failed precondition, 404 for If-Match on a missing object)."""
    import boto3

    from rewardpipe.aws.monitoring import CheckRequest, run_check
    from rewardpipe.aws.settings import Settings
    from rewardpipe.store import S3Store

    settings = Settings.from_env()
    plain = world["store"]
    racer = RacingS3(plain.client, lambda: run_check(CheckRequest(run_id="mon", step=0), settings, store=plain))
    out = run_check(
        CheckRequest(run_id="mon", step=0),
        settings,
        store=S3Store(BUCKET, client=racer),
        sns_client=boto3.client("sns", region_name=harness.REGION),
    )
    assert racer.conditional_puts == 1 and out["checked"] == 0  # lost the race, found the step checked
    stdout = capsys.readouterr().out
    assert _metric_values(stdout, "DeadStreak", "asked_before_coding", run="mon") == [1.0]  # by the winner only
    alarms = [
        json.loads(m["Body"])
        for m in world["sqs"].receive_message(QueueUrl=world["queue"], MaxNumberOfMessages=10)["Messages"]
    ]
    assert [a["component"] for a in alarms if a["kind"] == "dead_component"] == ["asked_before_coding"]
    assert plain.get_json("runs/mon/monitor/state.json")["checked"] == [[0, 0]]


def test_a_409_conditional_request_conflict_is_retried(world):
    from botocore.exceptions import ClientError

    from rewardpipe.aws.monitoring import CheckRequest, run_check
    from rewardpipe.aws.settings import Settings
    from rewardpipe.store import S3Store

    def conflict():
        raise ClientError(
            {
                "Error": {"Code": "ConditionalRequestConflict", "Message": "conflict"},
                "ResponseMetadata": {"HTTPStatusCode": 409},
            },
            "PutObject",
        )

    racer = RacingS3(world["store"].client, conflict)  # S3's answer to a concurrent conditional write
    out = run_check(CheckRequest(run_id="mon", step=0), Settings.from_env(), store=S3Store(BUCKET, client=racer))
    # the 409, the commit that follows it, and the commit that empties the step's outbox once its alarm is out
    assert racer.conditional_puts == 3 and out["checked"] == 1


def test_the_error_streak_counts_checked_steps_and_is_never_re_emitted(world, capsys, monkeypatch):
    """ErrorStreak (what the error-rate alarm watches) is the number of consecutive checked steps with an
    error rate of at least ERROR_RATE_THRESHOLD, emitted once per newly checked step; the check's own
    error-rate alarm is raised at ERROR_STEPS, independently of DEAD_STEPS."""
    monkeypatch.setenv("ERROR_RATE_THRESHOLD", "0.04")  # 1 error record in 21 (4.8 %) is too many
    monkeypatch.setenv("ERROR_STEPS", "3")
    store = world["store"]
    _add_steps(store, "mon", (2, 3))
    store.put_record(_error("mon", 2))  # steps 0, 1 and 2 have too many errors; step 3 has none
    handler = load("variance_monitor")  # settings are read when the function is loaded
    for step in (0, 1, 2):
        handler.lambda_handler({"run_id": "mon", "step": step}, Context())
    stdout = capsys.readouterr().out
    assert _metric_values(stdout, "ErrorStreak", run="mon") == [1.0, 2.0, 3.0]
    assert _metric_values(stdout, "ErrorStreak", run=None) == [1.0, 2.0, 3.0]  # the alarm's series
    alarms = [
        json.loads(m["Body"])
        for m in world["sqs"].receive_message(QueueUrl=world["queue"], MaxNumberOfMessages=10)["Messages"]
    ]
    assert [a["step"] for a in alarms if a["kind"] == "error_rate"] == [2]  # ERROR_STEPS, not DEAD_STEPS (1)

    again = handler.lambda_handler({"run_id": "mon", "step": 2}, Context())  # a replay
    assert again["checked"] == 0
    assert _metric_values(capsys.readouterr().out, "ErrorStreak") == []

    handler.lambda_handler({"run_id": "mon", "step": 3}, Context())
    stdout = capsys.readouterr().out
    assert _metric_values(stdout, "ErrorStreak", run="mon") == [0.0]
    assert _metric_values(stdout, "ErrorStreak", run=None) == [0.0]
    assert store.get_json("runs/mon/monitor/state.json")["targets"]["errors"]["error_streak"] == 0
