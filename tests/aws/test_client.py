"""The trainer-side RolloutClient against the deployed (moto) state machine."""

from __future__ import annotations

import json
import re

import pytest

from rewardpipe.aws.client import RolloutClient, execution_name
from rewardpipe.models import load_tasks
from tests.aws import harness, iam

pytestmark = pytest.mark.xdist_group("cdk")
TASK = load_tasks(harness.ROOT / "rewardpipe" / "data" / "tasks.jsonl")[1]


def test_execution_names_are_valid_deterministic_and_distinct():
    name = execution_name("run/with spaces" * 10, 3, "g0-1")
    assert re.fullmatch(r"[0-9A-Za-z_-]{1,80}", name)
    assert name == execution_name("run/with spaces" * 10, 3, "g0-1")
    assert name != execution_name("run/with spaces" * 10, 3, "g0-2")
    assert execution_name("a", 1, "b") != execution_name("a-s1", 0, "b")  # no collisions by concatenation


def test_a_group_through_callbacks_with_failures_reported(deployment, sfn):
    import boto3

    client = RolloutClient(
        deployment.state_machine_arn,
        queue_url=deployment.queue_url,
        sfn=sfn,
        sqs=boto3.client("sqs", region_name=harness.REGION),
    )
    arns = client.start_group("run-cl", 0, "g0", task=TASK, policies=[{"mode": "callback"}] * 3)
    assert client.start("run-cl", 0, "g0", "g0-1", task=TASK) == arns[1]  # a retried start is the same rollout

    def respond(request):
        if request["rollout"] == "g0-2":
            raise RuntimeError("model server overloaded")
        if len(request["messages"]) == 1:
            return "Could you tell me more about the expected output?"
        return f"```python\n{TASK.reference_solution}\n```"

    answered = client.serve_turns(respond, until=client.all_done(arns), poll_s=0.05)
    assert answered == 4  # two turns each for g0-0 and g0-1
    results = client.wait(arns, poll_s=0.05)
    assert [r["id"] for r in results] == ["g0-0", "g0-1", "g0-2"]
    assert [r["status"] for r in results] == ["scored", "scored", "error"]
    assert {m["name"]: m["value"] for m in results[0]["metrics_list"]}["correctness"] == 1.0
    assert {m["name"]: m["value"] for m in results[2]["metrics_list"]}["reward_error"] == 1


def test_a_rerun_never_returns_a_failed_or_differently_configured_execution(deployment, sfn):
    client = RolloutClient(deployment.state_machine_arn, bucket=deployment.bucket, sfn=sfn)
    first = client.start("run-re", 0, "g0", "g0-0", task=TASK, policy={"mode": "replay", "turns": ["hi?"]})
    assert harness.wait_execution(sfn, first)["status"] == "SUCCEEDED"
    # Same input, finished successfully: still a new attempt (a callback rollout's input holds no turns,
    # so the old success may have scored another model's answers).
    again = client.start("run-re", 0, "g0", "g0-0", task=TASK, policy={"mode": "replay", "turns": ["hi?"]})
    assert again != first and again.endswith(execution_name("run-re", 0, "g0-0", 2))
    harness.wait_execution(sfn, again)
    # A different configuration is a new attempt, not the old result.
    second = client.start("run-re", 0, "g0", "g0-0", task=TASK, policy={"mode": "replay", "turns": ["other?"]})
    assert second not in (first, again) and second.endswith(execution_name("run-re", 0, "g0-0", 3))
    harness.wait_execution(sfn, second)
    # A FAILED execution (here: its error record could not be written) is left alone; a new attempt starts.
    harness.LAMBDA_FAULTS[deployment.function_name("RolloutWorkflowStartEpisode")] = RuntimeError("down")
    harness.LAMBDA_FAULTS[deployment.function_name("RolloutWorkflowRecordError")] = RuntimeError("down")
    failed = client.start("run-re", 1, "g0", "g0-0", task=TASK, policy={"mode": "replay", "turns": ["hi?"]})
    assert harness.wait_execution(sfn, failed)["status"] == "FAILED"
    harness.LAMBDA_FAULTS.clear()
    retried = client.start("run-re", 1, "g0", "g0-0", task=TASK, policy={"mode": "replay", "turns": ["hi?"]})
    assert retried != failed and retried.endswith(execution_name("run-re", 1, "g0-0", 2))
    assert harness.wait_execution(sfn, retried)["status"] == "SUCCEEDED"


class _FakeSfn:
    """Records task results; raises a chosen error code for chosen tokens."""

    class exceptions:  # noqa: N801 - mirrors the boto3 client attribute
        class ExecutionAlreadyExists(Exception):
            pass

    def __init__(self, stale: dict[str, str] | None = None, finish_after: dict[str, int] | None = None):
        self.stale = stale or {}
        self.finish_after = dict(finish_after or {})
        self.success, self.failure, self.describes = {}, {}, {}

    def _maybe_stale(self, token):
        from botocore.exceptions import ClientError

        if token in self.stale:
            raise ClientError({"Error": {"Code": self.stale[token], "Message": "gone"}}, "SendTaskSuccess")

    def send_task_success(self, taskToken, output):
        self._maybe_stale(taskToken)
        self.success[taskToken] = json.loads(output)

    def send_task_failure(self, taskToken, error, cause):
        self._maybe_stale(taskToken)
        self.failure[taskToken] = (error, cause)

    def describe_execution(self, executionArn):
        self.describes[executionArn] = self.describes.get(executionArn, 0) + 1
        left = self.finish_after.get(executionArn, 0)
        if self.describes[executionArn] > left:
            return {"status": "SUCCEEDED", "output": json.dumps({"id": executionArn})}
        return {"status": "RUNNING"}


class _FakeSqs:
    def __init__(self, bodies):
        self.batches = [
            [
                {"Body": b if isinstance(b, str) else json.dumps(b), "ReceiptHandle": f"h{i}"}
                for i, b in enumerate(bodies)
            ]
        ]
        self.deleted = []

    def receive_message(self, **kwargs):
        return {"Messages": self.batches.pop(0) if self.batches else []}

    def delete_message(self, QueueUrl, ReceiptHandle):
        self.deleted.append(ReceiptHandle)

    def change_message_visibility(self, QueueUrl, ReceiptHandle, VisibilityTimeout):
        self.extended = [*getattr(self, "extended", []), (ReceiptHandle, VisibilityTimeout)]


@pytest.fixture
def turn_bucket(aws):
    import boto3

    from rewardpipe.store import S3Store

    s3 = boto3.client("s3", region_name=harness.REGION)
    s3.create_bucket(Bucket="turns")
    store = S3Store("turns", client=s3)
    store.put_json("runs/r/state/a/episode-0.json", {"state": {"messages": [{"role": "user", "content": "Hi"}]}})
    return s3, store


def _turn(token: str) -> dict:
    return {
        "task_token": token,
        "run": "r",
        "step": 0,
        "group": "g",
        "rollout": token,
        "bucket": "turns",
        "state_key": "runs/r/state/a/episode-0.json",
        "reply_key": f"runs/r/state/a/reply-{token}.json",
    }


def test_serve_turns_skips_stale_tokens_and_malformed_messages_and_answers_in_parallel(turn_bucket):
    import threading

    s3, _ = turn_bucket
    sfn = _FakeSfn(stale={"t-timed-out": "TaskTimedOut", "t-answered": "InvalidToken", "t-gone": "TaskDoesNotExist"})
    sqs = _FakeSqs([_turn("t-ok"), _turn("t-timed-out"), _turn("t-answered"), _turn("t-gone"), "not json", {"x": 1}])
    client = RolloutClient(
        "arn:aws:states:us-east-1:1:stateMachine:m", queue_url="q", sfn=sfn, sqs=sqs, s3=s3, workers=4
    )
    barrier = threading.Barrier(4, timeout=10)  # four answers at once, or the barrier breaks

    def respond(request):
        assert request["messages"] == [{"role": "user", "content": "Hi"}]
        barrier.wait()
        return f"answer for {request['rollout']}"

    calls = iter([False, True])
    answered = client.serve_turns(respond, until=lambda: next(calls), poll_s=0.01)
    assert answered == 1 and sfn.success == {"t-ok": {"text": "answer for t-ok"}}
    assert sorted(sqs.deleted) == [f"h{i}" for i in range(6)]  # every message deleted, none left to redeliver


def test_a_transient_fault_leaves_that_turn_for_redelivery_and_a_fatal_one_stops_after_the_batch(
    turn_bucket, monkeypatch
):
    import rewardpipe.aws.client as client_module

    monkeypatch.setattr(client_module.time, "sleep", lambda seconds: None)  # the client's own retries first
    s3, _ = turn_bucket
    sfn = _FakeSfn(stale={"t-throttled": "ThrottlingException", "t-denied": "AccessDeniedException"})
    sqs = _FakeSqs([_turn("t-ok"), _turn("t-throttled"), _turn("t-ok2")])
    client = RolloutClient("arn:aws:states:us-east-1:1:stateMachine:m", queue_url="q", sfn=sfn, sqs=sqs, s3=s3)
    calls = iter([False, True])
    assert client.serve_turns(lambda request: "fine", until=lambda: next(calls), poll_s=0.01) == 2
    assert sorted(sqs.deleted) == ["h0", "h2"]  # the throttled turn stays queued and comes back

    sqs = _FakeSqs([_turn("t-denied"), _turn("t-ok3")])
    client = RolloutClient("arn:aws:states:us-east-1:1:stateMachine:m", queue_url="q", sfn=sfn, sqs=sqs, s3=s3)
    with pytest.raises(Exception, match="gone") as info:
        client.serve_turns(lambda request: "fine", until=lambda: False, poll_s=0.01)
    assert info.value.response["Error"]["Code"] == "AccessDeniedException"
    assert sqs.deleted == ["h1"] and "t-ok3" in sfn.success  # the batch's answered turn was not left behind


def test_a_slow_turn_stays_hidden_while_it_is_generated_and_a_fast_one_is_not_touched(turn_bucket):
    """The turn queue hides a message for 5 minutes; a turn generated for longer would be delivered again and
    generated twice. The client extends the visibility of each message whose answer is still running."""
    import threading

    s3, _ = turn_bucket
    release = threading.Event()
    sqs = _FakeSqs([_turn("t-slow"), _turn("t-fast")])
    client = RolloutClient(
        "arn:aws:states:us-east-1:1:stateMachine:m", queue_url="q", sfn=_FakeSfn(), sqs=sqs, s3=s3, workers=2
    )

    def respond(request):
        if request["rollout"] == "t-slow":
            assert release.wait(10)
        return "done"

    timer = threading.Timer(0.5, release.set)
    timer.start()
    calls = iter([False, True])
    assert client.serve_turns(respond, until=lambda: next(calls), poll_s=0.01, keep_hidden_s=0.1) == 2
    timer.join()
    extended = getattr(sqs, "extended", [])
    assert extended and {handle for handle, _ in extended} == {"h0"}  # only the slow turn, several times
    assert all(seconds == 1 for _, seconds in extended) and sorted(sqs.deleted) == ["h0", "h1"]


def test_a_reply_over_the_budget_goes_through_its_reply_key(turn_bucket):
    s3, store = turn_bucket
    sfn, sqs = _FakeSfn(), _FakeSqs([_turn("t-big")])
    client = RolloutClient("arn:aws:states:us-east-1:1:stateMachine:m", queue_url="q", sfn=sfn, sqs=sqs, s3=s3)
    calls = iter([False, True])
    client.serve_turns(lambda request: "w" * 250_000, until=lambda: next(calls), poll_s=0.01)
    assert sfn.success == {"t-big": {"text_key": "runs/r/state/a/reply-t-big.json"}}
    assert store.get_json("runs/r/state/a/reply-t-big.json") == {"text": "w" * 250_000}


def test_wait_and_all_done_describe_only_pending_executions():
    sfn = _FakeSfn(finish_after={"slow": 3})
    client = RolloutClient("arn:aws:states:us-east-1:1:stateMachine:m", sfn=sfn)
    assert [r["id"] for r in client.wait(["fast", "slow"], poll_s=0.001)] == ["fast", "slow"]
    assert sfn.describes == {"fast": 1, "slow": 4}
    sfn = _FakeSfn(finish_after={"slow": 2})
    client = RolloutClient("arn:aws:states:us-east-1:1:stateMachine:m", sfn=sfn)
    done = client.all_done(["fast", "slow"], min_interval_s=0)
    assert [done(), done(), done(), done()] == [False, False, True, True]
    assert sfn.describes == {"fast": 1, "slow": 3}


def test_all_done_backs_off_while_nothing_finishes_and_resets_when_something_does(monkeypatch):
    """A serve loop calls the predicate every half second here; describes must not follow that rate."""
    import rewardpipe.aws.client as client_module

    now = [0.0]
    monkeypatch.setattr(client_module.time, "monotonic", lambda: now[0])
    sfn = _FakeSfn(finish_after={"a": 3, "b": 6})  # "a" finishes at its 4th describe, "b" at its 7th
    done = RolloutClient("arn:aws:states:us-east-1:1:stateMachine:m", sfn=sfn).all_done(
        ["a", "b"], min_interval_s=1, max_interval_s=4
    )
    polls, calls = [], 0
    while True:
        before = sum(sfn.describes.values())
        finished, calls = done(), calls + 1
        if sum(sfn.describes.values()) > before:
            polls.append(now[0])
        if finished:
            break
        now[0] += 0.5
    # Waits of 2, 4, 4 s while nothing finishes; 1 s after "a" finished at t=10; then 2, 4 again for "b".
    assert polls == [0.0, 2.0, 6.0, 10.0, 11.0, 13.0, 17.0]
    assert sfn.describes == {"a": 4, "b": 7}  # "a" is not described again once finished
    assert calls == 35 and done()


# Operations whose IAM action is not "<service>:<operation>" (Service Authorization Reference).
_IAM_ACTION = {("s3", "HeadObject"): "s3:GetObject", ("s3", "ListObjectsV2"): "s3:ListBucket"}


def _trainer_policy(synth) -> list[dict]:
    (policy,) = [
        r["Properties"]["PolicyDocument"]["Statement"]
        for k, r in synth.template["Resources"].items()
        if r["Type"] == "AWS::IAM::ManagedPolicy" and k.startswith("TrainerPolicy")
    ]
    return policy


def _key_patterns(statement: dict) -> list[str]:
    resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
    return ["".join(p for p in r["Fn::Join"][1] if isinstance(p, str)).lstrip("/") for r in resources]


def test_every_call_the_client_makes_is_allowed_by_the_trainer_policy(deployment, sfn, synth):
    """moto enforces no IAM: record every AWS call a trainer's RolloutClient makes (replay and callback, a
    large input and a large reply) and check the stack's TrainerPolicy allows each action, and each S3
    key by its resource pattern, so a real trainer with only that policy attached does not fail."""
    from fnmatch import fnmatchcase

    import boto3

    calls: list[tuple[str, str, str | None]] = []

    def record(model, params, **kwargs):  # noqa: ANN001 - botocore's before-call signature
        calls.append((model.service_model.signing_name, model.name, params.get("Key")))

    clients = {name: boto3.client(name, region_name=harness.REGION) for name in ("stepfunctions", "sqs", "s3")}
    for client in clients.values():
        client.meta.events.register("before-call", record)
    client = RolloutClient(
        deployment.state_machine_arn,
        queue_url=deployment.queue_url,
        bucket=deployment.bucket,
        sfn=clients["stepfunctions"],
        sqs=clients["sqs"],
        s3=clients["s3"],
    )
    big_turn = f"```python\n{TASK.reference_solution}\n```\n# " + "z" * 210_000
    # Every call is also authorized by the IAM harness as a principal holding only the TrainerPolicy (its
    # resources and conditions too, not only its actions); the turns answered in parallel as well.
    trainer = next(k for k in deployment.of_type("AWS::IAM::ManagedPolicy") if k.startswith("TrainerPolicy"))
    with iam.calling_as(deployment.caller(trainer)):
        replay = client.start("run-iam", 0, "g0", "r0", task=TASK, policy={"mode": "replay", "turns": [big_turn]})
        callback = client.start(
            "run-iam", 0, "g0", "r1", task=TASK.model_copy(update={"prompt": TASK.prompt + " " * 210_000})
        )
        client.serve_turns(lambda request: big_turn, until=client.all_done([replay, callback]), poll_s=0.05)
        assert [r["status"] for r in client.wait([replay, callback], poll_s=0.05)] == ["scored", "scored"]
    assert {call[0] for call in iam.CHECKED_CALLS} >= {trainer}

    statements = _trainer_policy(synth)
    allowed = {a for st in statements for a in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])}
    actions = {(service, op): _IAM_ACTION.get((service, op), f"{service}:{op}") for service, op, _ in calls}
    assert {"s3:PutObject", "s3:GetObject", "states:SendTaskSuccess", "sqs:ReceiveMessage"} <= set(actions.values())
    assert not {call: action for call, action in actions.items() if action not in allowed}
    for service, op, key in calls:
        if service == "s3" and key is not None:
            action = _IAM_ACTION.get((service, op), f"s3:{op}")
            patterns = [p for st in statements if action in st["Action"] for p in _key_patterns(st)]
            assert any(fnmatchcase(key, p) for p in patterns), (op, key, patterns)


def _client_error(code: str, operation: str = "Call"):
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": "rate exceeded" if "Throttl" in code else "no"}}, operation)


class _ThrottledSfn(_FakeSfn):
    """Step Functions throttles per account with a token bucket: every third call here is refused even
    after botocore's own retries."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.calls = 0

    def _throttle(self, operation):
        self.calls += 1
        if self.calls % 3 == 0:
            raise _client_error("ThrottlingException", operation)

    def describe_execution(self, executionArn):
        self._throttle("DescribeExecution")
        return super().describe_execution(executionArn)

    def start_execution(self, stateMachineArn, name, input):
        self._throttle("StartExecution")
        return {"executionArn": f"{stateMachineArn}:{name}"}


def test_a_throttled_api_slows_start_wait_and_all_done_down_but_never_ends_them(monkeypatch):
    import rewardpipe.aws.client as client_module

    monkeypatch.setattr(client_module.time, "sleep", lambda seconds: None)
    sfn = _ThrottledSfn(finish_after={"a": 2, "b": 4})
    client = RolloutClient("arn:aws:states:us-east-1:1:stateMachine:m", sfn=sfn)
    arns = [client.start("run", 0, "g", f"r{i}", task_key="tasks/t.json") for i in range(5)]
    assert len(set(arns)) == 5 and sfn.calls > 5  # some starts were throttled and tried again
    assert [r["id"] for r in client.wait(["a", "b", "c"], poll_s=0.001)] == ["a", "b", "c"]
    sfn = _ThrottledSfn(finish_after={"a": 2, "b": 4})
    done = RolloutClient("arn:aws:states:us-east-1:1:stateMachine:m", sfn=sfn).all_done(
        ["a", "b"], min_interval_s=0, max_interval_s=0
    )
    answers = [done() for _ in range(12)]
    assert answers[0] is False and answers[-1] is True and sfn.calls >= 3  # throttled polls on the way


class _FlakySqs(_FakeSqs):
    """ReceiveMessage throttled once; DeleteMessage of chosen handles answered with chosen error codes."""

    def __init__(self, bodies, delete_errors):
        super().__init__(bodies)
        self.delete_errors, self.receives = delete_errors, 0

    def receive_message(self, **kwargs):
        self.receives += 1
        if self.receives == 1:
            raise _client_error("ThrottlingException", "ReceiveMessage")
        return super().receive_message(**kwargs)

    def delete_message(self, QueueUrl, ReceiptHandle):
        if ReceiptHandle in self.delete_errors:
            raise _client_error(self.delete_errors[ReceiptHandle], "DeleteMessage")
        super().delete_message(QueueUrl, ReceiptHandle)


def test_serve_turns_outlives_queue_faults_expired_receipts_and_malformed_turn_requests(turn_bucket, monkeypatch):
    """A throttled receive, a delete whose receipt handle expired (the turn took longer than its visibility)
    and turn requests with a token that is not text: none may end the trainer's loop."""
    import rewardpipe.aws.client as client_module

    monkeypatch.setattr(client_module.time, "sleep", lambda seconds: None)
    s3, _ = turn_bucket
    sfn = _FakeSfn()
    bodies = [
        _turn("t-ok"),
        _turn("t-slow"),
        {**_turn("x"), "task_token": None},
        {**_turn("y"), "task_token": 7},
        {**_turn("z"), "state_key": ["not", "a", "key"]},
        "[" * 100_000,
    ]
    sqs = _FlakySqs(bodies, {"h1": "InvalidParameterValue", "h2": "ReceiptHandleIsInvalid"})
    client = RolloutClient("arn:aws:states:us-east-1:1:stateMachine:m", queue_url="q", sfn=sfn, sqs=sqs, s3=s3)
    calls = iter([False, False, True])
    assert client.serve_turns(lambda request: "fine", until=lambda: next(calls), poll_s=0.01) == 2
    assert set(sfn.success) == {"t-ok", "t-slow"} and not sfn.failure
    assert sorted(sqs.deleted) == ["h0", "h3", "h4", "h5"]  # h1 and h2 come back and are answered as stale

    sqs = _FlakySqs([_turn("t-denied")], {"h0": "AccessDenied"})
    sqs.receives = 1
    client = RolloutClient("arn:aws:states:us-east-1:1:stateMachine:m", queue_url="q", sfn=sfn, sqs=sqs, s3=s3)
    with pytest.raises(Exception, match="no"):  # a misconfigured queue policy is not hidden
        client.serve_turns(lambda request: "fine", until=lambda: False, poll_s=0.01)


def test_a_throttled_read_of_the_conversation_leaves_the_turn_for_redelivery_not_a_policy_error(
    turn_bucket, monkeypatch
):
    from rewardpipe.store import S3Store

    s3, _ = turn_bucket
    monkeypatch.setattr(S3Store, "backoff_s", 0.0)

    class ThrottledGets:
        def __init__(self, client):
            self.client, self.refused = client, 0

        def __getattr__(self, name):
            return getattr(self.client, name)

        def get_object(self, **kwargs):  # refused through all of the store's own retries
            self.refused += 1
            raise _client_error("SlowDown", "GetObject")

    sfn, sqs = _FakeSfn(), _FakeSqs([_turn("t-1")])
    client = RolloutClient(
        "arn:aws:states:us-east-1:1:stateMachine:m", queue_url="q", sfn=sfn, sqs=sqs, s3=ThrottledGets(s3)
    )
    calls = iter([False, True])
    assert client.serve_turns(lambda request: "fine", until=lambda: next(calls), poll_s=0.01) == 0
    assert not sfn.failure and sqs.deleted == []  # left on the queue, answered when it comes back


def test_two_copies_of_a_turn_in_one_batch_are_generated_once(turn_bucket):
    """SQS standard queues deliver at least once; both copies may arrive in one receive."""
    s3, _ = turn_bucket
    sfn, sqs = _FakeSfn(), _FakeSqs([_turn("t-1"), _turn("t-1"), _turn("t-2")])
    client = RolloutClient("arn:aws:states:us-east-1:1:stateMachine:m", queue_url="q", sfn=sfn, sqs=sqs, s3=s3)
    generated = []
    calls = iter([False, True])
    assert (
        client.serve_turns(
            lambda request: generated.append(request["rollout"]) or "fine", until=lambda: next(calls), poll_s=0.01
        )
        == 2
    )
    assert sorted(generated) == ["t-1", "t-2"] and sorted(sqs.deleted) == ["h0", "h1", "h2"]


def test_a_throttled_answer_is_sent_again_not_generated_again(turn_bucket, monkeypatch):
    import rewardpipe.aws.client as client_module

    monkeypatch.setattr(client_module.time, "sleep", lambda seconds: None)
    s3, _ = turn_bucket
    sfn = _ThrottledSfn()
    original = _FakeSfn.send_task_success

    def throttled_success(taskToken, output):
        sfn._throttle("SendTaskSuccess")
        original(sfn, taskToken, output)

    sfn.calls = 2  # the first SendTaskSuccess is throttled even after botocore's retries
    sfn.send_task_success = throttled_success
    sqs = _FakeSqs([_turn("t-1")])
    client = RolloutClient("arn:aws:states:us-east-1:1:stateMachine:m", queue_url="q", sfn=sfn, sqs=sqs, s3=s3)
    generated = []
    calls = iter([False, True])
    assert (
        client.serve_turns(lambda request: generated.append(1) or "fine", until=lambda: next(calls), poll_s=0.01) == 1
    )
    assert generated == [1] and sfn.success == {"t-1": {"text": "fine"}} and sqs.deleted == ["h0"]
