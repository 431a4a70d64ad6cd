"""The Nova bridge speaks Nova Forge's BYOO contract (issue 18, item 3) and fails loudly where a failure costs a
training job (item 5).

* ``rollout_request_arn`` is the rollout-proxy Lambda Nova invokes (Nova Forge docs, "BYOO request and response
  formats": the rollout request is "sent from training infrastructure to your Proxy Lambda"; the Nova Forge SDK
  builds it as ``arn:aws:lambda:<region>:<account>:function:<rollout function>``), the training role may invoke it,
  and its resource policy names the job roles.
* The bridge has its own turn queue; a trainer's callback rollout is never forwarded to Nova.
* The sweeper never overwrites a scored record and answers a rollout whose execution succeeded with its score;
  the router marks a turn delivered only once Step Functions took it; deadlines run from the request's timestamp;
  FIFO queues in high-throughput mode; every event-source queue hides a message ≥ 6× its function's timeout.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from rewardpipe.integrations.nova.bridge import Bridge, Queues, request_time
from rewardpipe.integrations.nova.protocol import BridgeConfig
from rewardpipe.models import Record, load_tasks
from rewardpipe.rewards import get_reward
from tests.aws import harness, iam

pytestmark = pytest.mark.xdist_group("cdk")

REWARD = get_reward("ask_before_coding")
TASK = load_tasks(harness.ROOT / "rewardpipe" / "data" / "tasks.jsonl")[0]


def _of_type(template, cfn_type):
    return {k: v for k, v in template["Resources"].items() if v["Type"] == cfn_type}


def _one(template, prefix, cfn_type="AWS::Lambda::Function"):
    (found,) = [k for k in _of_type(template, cfn_type) if k.startswith(prefix)]
    return found


def _statements(template, role_logical):
    return [
        st
        for p in _of_type(template, "AWS::IAM::Policy").values()
        if {"Ref": role_logical} in p["Properties"]["Roles"]
        for st in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def _role(template, function_logical):
    return template["Resources"][function_logical]["Properties"]["Role"]["Fn::GetAtt"][0]


def _actions(statement):
    return statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]


# --------------------------------------------------------------------------------------------------
# The template


def test_rollout_request_arn_is_the_rollout_proxy_lambda_the_training_role_may_invoke(nova_synth):
    template = nova_synth.template
    proxy = _one(template, "NovaBridgeRolloutProxy")
    props = template["Resources"][proxy]["Properties"]
    assert template["Outputs"]["NovaRolloutRequestArn"]["Value"] == {"Fn::GetAtt": [proxy, "Arn"]}
    assert template["Outputs"]["NovaRolloutFunctionName"]["Value"] == {"Ref": proxy}
    assert "SageMaker" in props["FunctionName"] and len(props["FunctionName"]) <= 64
    assert (harness.asset_dir(nova_synth, proxy) / "handler.py").read_text() == (
        harness.ROOT / "functions" / "nova_rollout_proxy" / "handler.py"
    ).read_text()
    role = _one(template, "NovaBridgeTrainingJobRole", "AWS::IAM::Role")
    invoke = [st for st in _statements(template, role) if "lambda:InvokeFunction" in _actions(st)]
    assert invoke and all(json.dumps(st["Resource"]).count(proxy) >= 1 for st in invoke)
    # The function's resource policy names the stack's job role and the configured one (another account).
    permissions = [
        p["Properties"]
        for p in _of_type(template, "AWS::Lambda::Permission").values()
        if p["Properties"]["FunctionName"] == {"Fn::GetAtt": [proxy, "Arn"]}
    ]
    principals = {json.dumps(p["Principal"]) for p in permissions if p["Action"] == "lambda:InvokeFunction"}
    assert principals == {json.dumps({"Fn::GetAtt": [role, "Arn"]}), json.dumps(harness.NOVA_INVOKER_ROLE)}


def test_the_invoker_role_setting_takes_only_iam_role_arns():
    from stacks.constructs.nova_bridge import load_nova_settings

    with pytest.raises(ValueError, match="not an IAM role ARN"):
        load_nova_settings({"enabled": True, "invoker_role_arns": ["arn:aws:iam::123456789012:user/alice"]})
    assert load_nova_settings({"invoker_role_arns": [harness.NOVA_INVOKER_ROLE]}).invoker_role_arns


def test_fifo_queues_run_in_high_throughput_mode(nova_synth):
    fifo = {
        k: q["Properties"]
        for k, q in _of_type(nova_synth.template, "AWS::SQS::Queue").items()
        if q["Properties"].get("FifoQueue")
    }
    assert len(fifo) == 8  # four queues and their dead-letter queues
    for logical, props in fifo.items():
        # SQS developer guide, "High throughput for FIFO queues": both settings, per message group.
        assert props["DeduplicationScope"] == "messageGroup", logical
        assert props["FifoThroughputLimit"] == "perMessageGroupId", logical


@pytest.mark.parametrize("context", ["", harness.NOVA_BRIDGE_CONTEXT], ids=["default", "nova-bridge"])
def test_every_event_source_queue_hides_a_message_six_times_its_functions_timeout(context):
    """Lambda: "set the source queue's visibility timeout to at least six times the timeout that you configure on
    your function" (a shorter one redelivers a batch still being processed)."""
    template = harness.synthesized(context).template
    queues = _of_type(template, "AWS::SQS::Queue")
    mappings = _of_type(template, "AWS::Lambda::EventSourceMapping").values()
    for mapping in mappings:
        props = mapping["Properties"]
        queue = props["EventSourceArn"]["Fn::GetAtt"][0]
        function = props["FunctionName"]["Ref"]
        timeout = template["Resources"][function]["Properties"]["Timeout"]
        visibility = queues[queue]["Properties"].get("VisibilityTimeout", 30)
        assert visibility >= 6 * timeout, (function, queue, visibility, timeout)
    assert len(list(mappings)) == (3 if context else 0)


def test_the_bridge_has_its_own_turn_queue(nova_synth):
    template = nova_synth.template
    forwarder = _one(template, "NovaBridgeForwarder")
    (mapping,) = [
        m["Properties"]
        for m in _of_type(template, "AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["FunctionName"] == {"Ref": forwarder}
    ]
    queue = mapping["EventSourceArn"]["Fn::GetAtt"][0]
    assert queue.startswith("NovaBridgeTurnRequests") and "Dlq" not in queue
    shared = next(
        k
        for k in _of_type(template, "AWS::SQS::Queue")
        if k.startswith("RolloutWorkflowTurnRequests") and "Dlq" not in k
    )
    assert shared not in json.dumps(_statements(template, _role(template, forwarder)))  # cannot even read it
    for prefix in ("RolloutWorkflowStartEpisode", "RolloutWorkflowConverse"):
        fn = _one(template, prefix)
        channels = template["Resources"][fn]["Properties"]["Environment"]["Variables"]["TURN_CHANNELS"]
        parts = channels["Fn::Join"][1]
        assert parts[0] == '{"nova":"' and parts[1] == {"Ref": queue} and parts[2] == '"}'  # {"nova": <queue URL>}
        sends = [st for st in _statements(template, _role(template, fn)) if "sqs:SendMessage" in _actions(st)]
        assert any(
            {"Fn::GetAtt": [queue, "Arn"]} in (st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]])
            for st in sends
        )


def test_bridge_functions_reach_only_their_runs_state_and_records(nova_synth):
    template = nova_synth.template

    def resources(prefix, action):
        return {
            json.dumps(st["Resource"])
            for st in _statements(template, _role(template, _one(template, prefix)))
            if action in _actions(st)
        }

    assert any('"/runs/nova/state/*"' in r for r in resources("NovaBridgeForwarder", "s3:GetObject"))
    assert not any('"/runs/*"' in r for r in resources("NovaBridgeForwarder", "s3:GetObject"))
    # the router writes large replies only (round thirty-two), no other state object
    assert any('"/runs/nova/state/*/reply-*.json"' in r for r in resources("NovaBridgeRouter", "s3:PutObject"))
    assert not any('"/runs/nova/state/*"' in r for r in resources("NovaBridgeRouter", "s3:PutObject"))
    for prefix in ("NovaBridgeIntake", "NovaBridgeSweeper"):
        assert any('"/runs/nova/*"' in r for r in resources(prefix, "s3:PutObject")), prefix
        assert any(":nova-*" in r for r in resources(prefix, "states:DescribeExecution")), prefix


def test_nova_alarms_watch_the_oldest_unanswered_request_every_function_and_every_dead_letter_queue(nova_synth):
    template = nova_synth.template
    alarms = {
        a["Properties"]["AlarmName"]: a["Properties"] for a in _of_type(template, "AWS::CloudWatch::Alarm").values()
    }
    budget = alarms["RewardPipe-nova-rollouts-near-timeout"]
    assert budget["MetricName"] == "NovaOldestUnansweredSeconds" and budget["Namespace"] == "RewardPipe"
    assert budget["Threshold"] == 600 * 0.7 and budget["Period"] == 60 and budget["Statistic"] == "Maximum"
    assert {d["Name"]: d["Value"] for d in budget["Dimensions"]} == {"service": "rewardpipe", "run": "nova"}
    for name in ("rollout-proxy", "intake", "forwarder", "router", "responder", "sweeper"):
        for kind, metric in (("errors", "Errors"), ("throttles", "Throttles")):
            alarm = alarms[f"RewardPipe-nova-{name}-{kind}"]
            assert alarm["MetricName"] == metric and alarm["Namespace"] == "AWS/Lambda" and alarm["Threshold"] == 0
    dlqs = [k for k, q in _of_type(template, "AWS::SQS::Queue").items() if k.startswith("NovaBridge") and "Dlq" in k]
    watched = {
        d["Value"]["Fn::GetAtt"][0]
        for a in alarms.values()
        if a.get("MetricName") == "ApproximateNumberOfMessagesVisible"
        for d in a["Dimensions"]
    }
    assert len(dlqs) == 5 and set(dlqs) <= watched
    topic = _one(template, "MonitoringAlarms", "AWS::SNS::Topic")
    for name, alarm in alarms.items():
        if name.startswith("RewardPipe-nova-"):
            assert alarm["AlarmActions"] == [{"Ref": topic}], name


# --------------------------------------------------------------------------------------------------
# The bridge's rules, against fakes


class MemoryStore:
    def __init__(self) -> None:
        self.objects: dict[str, object] = {}

    def put_json(self, key, obj):
        self.objects[key] = json.loads(json.dumps(obj))
        return key

    def get_json(self, key, default=None):
        return self.objects.get(key, default)

    def list_keys(self, prefix=""):
        return sorted(k for k in self.objects if k.startswith(prefix))

    def delete(self, key):
        self.objects.pop(key, None)

    def put_record(self, record):
        from rewardpipe.store import record_key

        self.objects[record_key(record)] = json.loads(record.to_json())
        return record_key(record)


class FakeSqs:
    def __init__(self) -> None:
        self.sent: list[dict] = []

    def send_message(self, **kwargs):
        self.sent.append(kwargs)


class FakeSfn:
    """Records starts; answers describe/stop as told."""

    class exceptions:  # noqa: N801 - the boto3 client's attribute
        class ExecutionAlreadyExists(Exception):
            pass

    def __init__(self, status: str = "RUNNING", output: str | None = None, fail_sends: list[Exception] | None = None):
        self.status, self.output, self.fail_sends = status, output, list(fail_sends or [])
        self.started: list[dict] = []
        self.successes: list[dict] = []
        self.failures: list[dict] = []

    def start_execution(self, **kwargs):
        self.started.append(kwargs)
        return {"executionArn": f"arn:aws:states:us-east-1:1:execution:m:{kwargs['name']}"}

    def stop_execution(self, **kwargs):
        if self.status == "RUNNING":
            self.status = "ABORTED"

    def describe_execution(self, **kwargs):
        return {"status": self.status, **({"output": self.output} if self.output else {})}

    def send_task_success(self, **kwargs):
        if self.fail_sends:
            raise self.fail_sends.pop(0)
        self.successes.append(kwargs)

    def send_task_failure(self, **kwargs):
        self.failures.append(kwargs)


def _client_error(code: str) -> Exception:
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": code}}, "SendTaskSuccess")


def _bridge(store=None, sfn=None, now: float = 1_000_000.0):
    clock = {"now": now}
    bridge = Bridge(
        BridgeConfig(rollout_budget_s=480.0),
        REWARD,
        store or MemoryStore(),
        FakeSqs(),
        sfn or FakeSfn(),
        Queues("resp.fifo", "gen.fifo", rollout_request="req.fifo"),
        state_machine_arn="arn:aws:states:us-east-1:1:stateMachine:m",
        clock=lambda: clock["now"],
    )
    return bridge, clock


def test_request_time_reads_nova_timestamps_and_never_runs_ahead_of_the_clock():
    now = 1_800_000_000.0
    iso = datetime.fromtimestamp(now - 90, tz=UTC).isoformat().replace("+00:00", "Z")
    assert request_time(iso, now) == pytest.approx(now - 90)
    assert request_time(now - 30, now) == now - 30
    assert request_time((now - 30) * 1000, now) == pytest.approx(now - 30)  # milliseconds
    assert request_time(str(now - 5), now) == now - 5
    assert request_time(now + 3600, now) == now  # a clock ahead of ours: not more time than Nova gives
    for garbage in (None, "", "yesterday", float("nan"), True, {"t": 1}):
        assert request_time(garbage, now) == now


def test_a_rollouts_deadline_runs_from_the_requests_timestamp():
    bridge, clock = _bridge()
    sent = clock["now"] - 100  # the request waited 100 s in the queue before intake saw it
    out = bridge.intake({"version": "v0", "timestamp": sent, "sample_id": "s-000_0", "data": {"task_id": "t"}})
    entry = bridge.store.get_json(f"nova/requests/{out['execution']}.json")
    assert entry["deadline"] == pytest.approx(sent + 480.0) and entry["sent_at"] == pytest.approx(sent)
    (start,) = bridge.sfn.started
    assert json.loads(start["input"])["policy"] == {"mode": "callback", "channel": "nova"}  # the bridge's own queue


def test_a_request_whose_start_failed_is_started_by_its_redelivery_not_taken_for_a_duplicate():
    class Interrupted(FakeSfn):
        """The first start never completes (the function timed out, or throttling outlasted every retry)."""

        def start_execution(self, **kwargs):
            if not self.started:
                self.started.append(None)
                raise RuntimeError("intake timed out before StartExecution returned")
            return super().start_execution(**kwargs)

    bridge, clock = _bridge(sfn=Interrupted())
    request = {"version": "v0", "timestamp": clock["now"], "sample_id": "s-000_0", "data": {"task_id": "t"}}
    with pytest.raises(RuntimeError, match="timed out"):
        bridge.intake(request)  # the message stays on its queue
    (path,) = bridge.store.list_keys("nova/requests/")
    assert bridge.store.get_json(path)["started"] is False
    assert bridge.intake(request)["status"] == "started" and bridge.store.get_json(path)["started"] is True
    assert bridge.intake(request)["status"] == "duplicate" and len(bridge.sfn.started) == 2


def test_the_router_marks_a_turn_used_only_after_step_functions_took_it():
    sfn = FakeSfn(fail_sends=[_client_error("ThrottlingException")])
    bridge, _ = _bridge(sfn=sfn)
    step = bridge._step_path("s-000_0_0")
    bridge.store.put_json(step, {"task_token": "tok", "sample_id": "s-000_0", "step_id": "s-000_0_0", "used": False})
    response = {
        "version": "v0",
        "sample_id": "s-000_0",
        "step_id": "s-000_0_0",
        "data": {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]},
    }
    with pytest.raises(Exception, match="ThrottlingException"):
        bridge.route_response(json.dumps(response))
    assert bridge.store.get_json(step)["used"] is False  # the queue redelivers it, and it is delivered then
    assert bridge.route_response(json.dumps(response))["status"] == "delivered"
    assert bridge.store.get_json(step)["used"] is True and len(sfn.successes) == 1
    assert bridge.route_response(json.dumps(response))["status"] == "duplicate"
    # A token Step Functions no longer takes (the rollout ended): marked, reported as expired.
    sfn.fail_sends = [_client_error("TaskTimedOut")]
    bridge.store.put_json(step, {"task_token": "tok2", "sample_id": "s-000_0", "step_id": "s-000_0_0", "used": False})
    assert bridge.route_response(json.dumps(response))["status"] == "expired"
    assert bridge.store.get_json(step)["used"] is True


def _in_flight(bridge, clock, sample_id: str = "s-000_0") -> dict:
    out = bridge.intake({"version": "v0", "timestamp": clock["now"], "sample_id": sample_id, "data": {"task_id": "t"}})
    return bridge.store.get_json(f"nova/requests/{out['execution']}.json")


def _scored_output(record_key: str) -> str:
    components = {"correctness": 1.0, "asked_before_coding": 1.0, "guessed_immediately": 0.0, "loop_penalty": 0.0}
    return json.dumps(
        {
            "id": "s-000_0",
            "aggregate_reward_score": 1.6,
            "status": "scored",
            "record_key": record_key,
            "metrics_list": [{"name": k, "value": v, "type": "Reward"} for k, v in components.items()],
        }
    )


def test_the_sweeper_answers_with_the_score_when_the_execution_already_succeeded():
    sfn = FakeSfn()
    bridge, clock = _bridge(sfn=sfn)
    entry = _in_flight(bridge, clock)
    sfn.status, sfn.output = "SUCCEEDED", _scored_output("runs/nova/step=0/group=s-000/s-000_0.json")
    clock["now"] += 481 + 60
    out = bridge.sweep()
    (answer,) = out["answered"]
    assert answer["status"] == "answered" and answer["response"]["stop_reason"] == "end_of_conversation"
    assert answer["response"]["rewards"]["aggregate_score"] == pytest.approx(1.0)  # 1.6 mapped onto [0, 1]
    assert not [k for k in bridge.store.objects if k.startswith("runs/")]  # no timeout record written
    assert not bridge.store.list_keys("nova/due/") and out["in_flight"] == 0  # answered: no longer in flight
    assert bridge.respond(entry["execution"], "SUCCEEDED", sfn.output)["status"] == "already_answered"


def test_the_sweeper_never_overwrites_a_scored_record(aws):
    """Conditional writes as on S3 (moto enforces If-None-Match/If-Match): a scored record written by the
    rollout a moment before the sweeper cuts it off stays scored."""
    import boto3

    from rewardpipe.store import S3Store

    s3 = boto3.client("s3", region_name=harness.REGION)
    s3.create_bucket(Bucket="nova-sweep")
    store = S3Store("nova-sweep", client=s3)
    sfn = FakeSfn()  # stopped: ABORTED, no output (the score came too late for the execution's own answer)
    bridge, clock = _bridge(store=store, sfn=sfn)
    _in_flight(bridge, clock)
    scored = Record(
        run_id="nova",
        step=0,
        group_id="s-000",
        rollout_id="s-000_0",
        task_id="t",
        status="scored",
        components={"correctness": 1.0, "asked_before_coding": 1.0, "guessed_immediately": 0.0, "loop_penalty": 0.0},
        weights=REWARD.weights,
        aggregate=1.6,
    )
    store.put_record(scored)
    clock["now"] += 600
    (answer,) = bridge.sweep()["answered"]
    assert answer["response"]["stop_reason"] == "error"  # Nova is told it timed out ...
    (kept,) = list(store.iter_records("nova", 0))
    assert kept.status == "scored" and kept.aggregate == 1.6  # ... but the scored record is never replaced


def test_the_sweeper_reports_the_oldest_unanswered_request_and_skips_answered_ones():
    bridge, clock = _bridge()
    start = clock["now"]
    _in_flight(bridge, clock, "a-000_0")
    clock["now"] += 200
    second = _in_flight(bridge, clock, "b-000_0")
    clock["now"] += 100
    out = bridge.sweep()
    assert out == {"answered": [], "in_flight": 2, "oldest_unanswered_s": pytest.approx(clock["now"] - start)}
    bridge.respond(
        next(
            e for k, e in bridge.store.objects.items() if k.startswith("nova/requests/") and e["sample_id"] == "a-000_0"
        )["execution"],
        "FAILED",
        None,
    )
    assert bridge.sweep()["oldest_unanswered_s"] == pytest.approx(clock["now"] - second["sent_at"])


def test_a_rollout_filed_by_an_earlier_bridge_version_is_still_swept():
    bridge, clock = _bridge()
    entry = _in_flight(bridge, clock)
    new_key = bridge._due_key(entry, entry["execution"])
    legacy = f"nova/due/{int(entry['deadline'] // 60) + 1:010d}/{entry['execution']}.json"
    bridge.store.objects[legacy] = bridge.store.objects.pop(new_key)
    clock["now"] += 100
    assert bridge.sweep()["oldest_unanswered_s"] == pytest.approx(100)
    clock["now"] += 500
    (answer,) = bridge.sweep()["answered"]
    assert answer["status"] == "answered" and not bridge.store.list_keys("nova/due/")


def test_the_sweeper_metric_is_emitted_for_the_alarm(capsys, monkeypatch):
    from rewardpipe.integrations.nova import aws as nova_aws

    bridge, clock = _bridge()
    _in_flight(bridge, clock)
    clock["now"] += 123
    monkeypatch.setattr(nova_aws, "bridge_from_env", lambda env=None: bridge)
    assert nova_aws.sweep({}, None) == {"answered": 0, "in_flight": 1, "oldest_unanswered_s": 123.0}
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if "NovaOldestUnansweredSeconds" in line]
    assert emf and emf[-1]["NovaOldestUnansweredSeconds"] in ([123.0], 123.0)
    assert emf[-1]["run"] == "nova" and emf[-1]["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "RewardPipe"


def test_the_proxy_queues_each_request_once_per_identity_and_parks_a_large_one():
    bridge, _clock = _bridge()
    request = {"version": "v0", "timestamp": "2026-12-01T00:00:00Z", "sample_id": "s-000_0", "data": {"task_id": "t"}}
    assert bridge.accept(request) == {"status": "accepted", "sample_ids": ["s-000_0"]}
    assert bridge.accept([request, {**request, "sample_id": "s-000_1"}])["sample_ids"] == ["s-000_0", "s-000_1"]
    first, again, other = bridge.sqs.sent
    assert first["QueueUrl"] == "req.fifo" and json.loads(first["MessageBody"]) == request
    assert first["MessageDeduplicationId"] == again["MessageDeduplicationId"] != other["MessageDeduplicationId"]
    assert first["MessageGroupId"] == again["MessageGroupId"] != other["MessageGroupId"]
    # Larger than a queue message: parked under nova/inbox/, queued by key, read back by intake.
    big = {**request, "sample_id": "s-001_0", "data": {"task_id": "t", "notes": "#" * 300_000}}
    bridge.accept(big)
    pointer = json.loads(bridge.sqs.sent[-1]["MessageBody"])
    assert set(pointer) == {"version", "sample_id", "request_key"} and pointer["request_key"].startswith("nova/inbox/")
    assert len(bridge.sqs.sent[-1]["MessageBody"]) < 1000
    assert bridge.intake(bridge.sqs.sent[-1]["MessageBody"])["status"] == "started"
    started = json.loads(bridge.sfn.started[-1]["input"])
    assert started["rollout"] == "s-001_0"


# --------------------------------------------------------------------------------------------------
# End to end, under the IAM harness


def test_a_trainer_callback_rollout_is_never_forwarded_to_nova(aws, nova_synth):
    import boto3

    from rewardpipe.aws.client import RolloutClient

    deployment = harness.Deployment(nova_synth).deploy()
    sources = harness.EventSources(deployment, prefixes=("NovaBridge",))
    client = RolloutClient(
        deployment.state_machine_arn,
        queue_url=deployment.queue_url,
        bucket=deployment.bucket,
        sfn=boto3.client("stepfunctions", region_name=harness.REGION),
        sqs=boto3.client("sqs", region_name=harness.REGION),
    )
    client.start("trainer", 0, "g", "g-0", task=TASK, policy={"mode": "callback"})
    sqs = boto3.client("sqs", region_name=harness.REGION)

    def waiting(url):
        return int(
            sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"][
                "ApproximateNumberOfMessages"
            ]
        )

    import time

    deadline = time.monotonic() + 60
    while waiting(deployment.queue_url) == 0:
        assert time.monotonic() < deadline
        sources.pump()
        time.sleep(0.05)
    for _ in range(3):
        sources.pump()
    assert waiting(deployment.output("NovaGenerateRequestSqsUrl")) == 0  # nothing reached Nova
    assert waiting(deployment.queue_url) == 1  # the turn waits for the trainer on its own queue
    assert not sources.failures


def test_intake_starts_a_new_attempt_when_the_interrupted_start_already_ended(aws, nova_synth):
    """The start went through but intake never heard back, and that execution has ended since (here: it failed
    into an error record at once). The redelivered request finds it (StartExecution: ExecutionAlreadyExists, then
    DescribeExecution) and starts a new attempt instead of answering from an old one. Both calls are authorized
    as the Intake function's role: DescribeExecution is one of the grants the harness found missing."""
    import boto3

    from rewardpipe.aws.client import RolloutClient
    from rewardpipe.integrations.nova.bridge import TURN_CHANNEL
    from rewardpipe.store import S3Store

    deployment = harness.Deployment(nova_synth).deploy()
    s3 = boto3.client("s3", region_name=harness.REGION)
    store = S3Store(deployment.bucket, client=s3)
    store.put_json(f"tasks/nova/{TASK.task_id}.json", TASK.model_dump(mode="json"))
    request = {
        "version": "v0",
        "timestamp": 1_800_000_000.0,
        "sample_id": "late-000_0",
        "data": {"task_id": TASK.task_id},
    }
    # What the interrupted intake left: the request filed (not started), and an execution of that name, ended.
    sfn = boto3.client("stepfunctions", region_name=harness.REGION)
    arn = RolloutClient(deployment.state_machine_arn, bucket=deployment.bucket, sfn=sfn, s3=s3).start(
        "nova",
        0,
        "late-000",
        "late-000_0",
        task_key="tasks/nova/gone.json",
        policy={"mode": "callback", "channel": TURN_CHANNEL},
    )
    assert harness.wait_execution(sfn, arn)["status"] == "SUCCEEDED"  # an error record (no such task)
    name = arn.rsplit(":", 1)[-1]
    store.put_json(
        f"nova/requests/{name}.json",
        {
            "sample_id": "late-000_0",
            "group": "late-000",
            "range": [0, 1],
            "sent_at": 1_800_000_000.0,
            "deadline": 1_800_000_480.0,
            "execution": name,
            "answered": False,
            "step": 0,
            "started": False,
        },
    )
    sqs = boto3.client("sqs", region_name=harness.REGION)
    sqs.send_message(
        QueueUrl=deployment.output("NovaRolloutRequestSqsUrl"),
        MessageBody=json.dumps(request),
        MessageGroupId="g",
        MessageDeduplicationId="redelivered",
    )
    sources = harness.EventSources(deployment, prefixes=("NovaBridgeIntake",))
    assert sources.poll_sqs() == 1 and not sources.failures
    executions = {e["name"] for e in sfn.list_executions(stateMachineArn=deployment.state_machine_arn)["executions"]}
    assert executions == {name, f"{name}-a2"}
    assert store.get_json(f"nova/requests/{name}.json")["execution"] == f"{name}-a2"
    assert store.get_json(f"nova/requests/{name}-a2.json")["started"] is True
    intake = next(k for k in deployment.functions if k.startswith("NovaBridgeIntake"))
    assert (intake, "stepfunctions", "DescribeExecution") in iam.CHECKED_CALLS


def test_a_generate_response_in_cjk_within_the_budget_is_sent_as_step_functions_counts_it():
    """Round twenty: 50,000 CJK characters are 150 KB of UTF-8 (under the 200 KB budget, so sent inline) but
    300 KB as ``json.dumps``' escapes, which SendTaskSuccess refuses (its output: at most 262,144). The router
    sends the JSON it measured."""
    bridge, _ = _bridge()
    step = bridge._step_path("s-000_0_0")
    bridge.store.put_json(step, {"task_token": "tok", "sample_id": "s-000_0", "step_id": "s-000_0_0", "used": False})
    text = "中" * 50_000
    response = {
        "version": "v0",
        "sample_id": "s-000_0",
        "step_id": "s-000_0_0",
        "data": {"choices": [{"message": {"content": text}, "finish_reason": "stop"}]},
    }
    assert bridge.route_response(json.dumps(response))["status"] == "delivered"
    (sent,) = bridge.sfn.successes
    assert len(sent["output"].encode("utf-8")) <= 262_144
    assert json.loads(sent["output"])["text"] == text


def test_a_status_change_event_without_its_output_is_answered_with_the_executions_output():
    """Round twenty: Step Functions leaves the output out of a status-change event when its escaped form exceeds
    248 KB (``"output": null``, ``"outputDetails": {"included": false}``; Step Functions developer guide,
    "EventBridge payloads"): the responder answered such a scored rollout as an error. It reads the output with
    DescribeExecution, which the same page names for Standard workflows."""
    record_key = "runs/nova/step=0/group=s-000/s-000_0.json"
    sfn = FakeSfn(status="SUCCEEDED", output=_scored_output(record_key))
    bridge, clock = _bridge(sfn=sfn)
    entry = _in_flight(bridge, clock)
    detail = {
        "executionArn": f"arn:aws:states:us-east-1:1:execution:m:{entry['execution']}",
        "name": entry["execution"],
        "status": "SUCCEEDED",
        "output": None,
        "outputDetails": {"included": False},
    }
    out = bridge.respond_to_status_change(detail)
    assert out["status"] == "answered" and out["response"]["stop_reason"] == "end_of_conversation"
    metrics = {m["name"]: m["value"] for m in out["envelope"]["metrics_list"]}
    assert metrics["reward_error"] == 0 and metrics["raw_aggregate"] == pytest.approx(1.6)
    # Before: the event's missing output answered the scored rollout as an error.
    bridge.store.put_json(f"nova/requests/{entry['execution']}.json", entry)
    bridge.store.objects.pop(f"nova/answers/{entry['execution']}.json")  # and its answer unclaimed
    assert bridge.respond(entry["execution"], "SUCCEEDED", None)["response"]["stop_reason"] == "error"


def test_the_responder_may_read_back_only_its_runs_executions(nova_synth):
    template = nova_synth.template
    responder = _one(template, "NovaBridgeResponder")
    statements = [
        st for st in _statements(template, _role(template, responder)) if "states:DescribeExecution" in _actions(st)
    ]
    (statement,) = statements
    assert _actions(statement) == ["states:DescribeExecution"]
    resource = json.dumps(statement["Resource"])
    assert ":execution:" in resource and "-*" in resource
