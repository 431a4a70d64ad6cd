"""Nova Forge delegated rollouts end to end under moto, through the construct's real Lambdas.

The stack is synthesized with the ``rewardpipe_nova`` context enabled and deployed into moto from its
template (tests/aws/harness.py): the bridge's five Lambdas, its SageMaker-named FIFO queues (as declared:
names, deduplication, visibility, redrive) and the rollout state machine, which moto executes with the real
handlers in-process. Nothing calls the bridge's Python functions: ``harness.EventSources`` plays what AWS does
between the resources, from the template — the SQS event-source mappings (SQS events, batch item
failures), the EventBridge status-change rule and the one-minute sweep schedule, each with its Lambda
permission. The payload limits (SQS message size, Step Functions' 256 KiB state) are enforced by the harness
and fail a test at teardown.

The simulated Nova trainer (rewardpipe.integrations.nova.trainer_sim) is written from the documented v0
shapes only. It finds its queues in the stack's outputs (the recipe's ``rollout_request_arn`` is the request
queue's ARN), sends rollout requests, answers every generate request like a vLLM server, and collects one
rollout response per sample.

Time: the deployed bridge reads the time through ``bridge.wall_clock``; the timeout test moves it (and the
schedule) forward past the rollout budget instead of waiting minutes.
"""

from __future__ import annotations

import json
import time

import boto3
import pytest

from rewardpipe.integrations.nova import bridge as bridge_module
from rewardpipe.integrations.nova.trainer_sim import NovaQueues, SimulatedTrainer, scripted_turns
from rewardpipe.models import load_tasks
from rewardpipe.rewards import get_reward
from tests.aws import harness, iam

pytestmark = pytest.mark.xdist_group("cdk")

TASKS = load_tasks(harness.ROOT / "rewardpipe" / "data" / "tasks.jsonl")
REWARD = get_reward("ask_before_coding")
RUN_ID = "nova"  # the construct's default NovaBridgeSettings.run_id
BUDGET_S = 600 * 0.8  # NOVA_CONTEXT's rollout_timeout_s × the default budget_fraction


class SimulatedClock:
    """Real time plus an offset the test moves forward (the deployed bridge's and the schedules' clock)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


class AsTrainingJob(SimulatedTrainer):
    """The simulated trainer with its AWS calls made as the training job's role (tests/aws/iam.py)."""

    def __init__(self, *args, role, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.role = role

    def invoke_rollout_proxy(self, body):
        with iam.calling_as(self.role):
            return super().invoke_rollout_proxy(body)

    def _send(self, *args, **kwargs):
        with iam.calling_as(self.role):
            return super()._send(*args, **kwargs)

    def _receive(self, url):
        with iam.calling_as(self.role):
            return super()._receive(url)


class Nova:
    """A deployed stack with the bridge, its event sources, and Nova's side talking to its queues."""

    def __init__(self, deployment: harness.Deployment, clock: SimulatedClock) -> None:
        self.deployment, self.clock = deployment, clock
        self.sqs = boto3.client("sqs", region_name=harness.REGION)
        self.sfn = boto3.client("stepfunctions", region_name=harness.REGION)
        self.s3 = boto3.client("s3", region_name=harness.REGION)
        self.sources = harness.EventSources(deployment, prefixes=("NovaBridge",))
        self.queues = NovaQueues(
            rollout_request_arn=deployment.output("NovaRolloutRequestArn"),
            rollout_response=deployment.output("NovaRolloutResponseSqsUrl"),
            generate_request=deployment.output("NovaGenerateRequestSqsUrl"),
            generate_response=deployment.output("NovaGenerateResponseSqsUrl"),
        )
        self.request_queue = deployment.output("NovaRolloutRequestSqsUrl")  # behind the proxy (intake's)
        self.turn_queue = next(
            deployment.refs[logical]["Ref"]
            for logical in deployment.of_type("AWS::SQS::Queue")
            if logical.startswith("NovaBridgeTurnRequests") and "Dlq" not in logical
        )
        self.scripts: dict[str, list[str] | None] = {}
        # Nova's side runs as the stack's training-job role: every call it makes is authorized as that role.
        training_role = next(iter(k for k in deployment.of_type("AWS::IAM::Role") if "TrainingJobRole" in k))
        self.trainer = AsTrainingJob(
            self.sqs,
            self.queues,
            self.policy,
            lam=boto3.client("lambda", region_name=harness.REGION),
            role=deployment.caller(training_role),
        )
        from rewardpipe.store import S3Store

        self.store = S3Store(deployment.bucket, client=self.s3)

    def policy(self, sample_id: str, turn: int, messages) -> str | None:
        script = self.scripts[sample_id]
        return None if script is None else script[turn]

    def put_task(self, task) -> None:
        self.store.put_json(f"tasks/nova/{task.task_id}.json", task.model_dump(mode="json"))

    def drive(self, until, *, reverse: bool = False, timeout_s: float = 180.0, bridge_only: bool = False) -> None:
        """AWS's side (event sources) and Nova's side in turns until ``until()``; never hangs. The bound is
        generous (8 rollouts take ~15 s on an idle 2-core machine, several times that under a full parallel
        suite): it only decides how long a broken bridge takes to fail."""
        deadline = time.monotonic() + timeout_s
        while not until():
            assert time.monotonic() < deadline, "the rollouts did not finish in time"
            moved = self.sources.pump(now=self.clock())
            if not bridge_only:
                moved += self.trainer.answer_generate_requests(reverse=reverse)
                moved += self.trainer.collect_responses()
            if not moved:
                time.sleep(0.02)
        assert not self.sources.failures, self.sources.failures

    def executions(self) -> list[dict]:
        return self.sfn.list_executions(stateMachineArn=self.deployment.state_machine_arn)["executions"]

    def reports(self) -> dict[str, dict]:
        return {r["id"]: r for r in (self.store.get_json(k) for k in self.store.list_keys("nova/reports/"))}


@pytest.fixture
def nova(aws, nova_synth, monkeypatch) -> Nova:
    clock = SimulatedClock()
    monkeypatch.setattr(bridge_module, "wall_clock", clock)
    harness.install_stop_execution_patch(monkeypatch)  # the sweeper stops rollouts waiting for a turn
    deployment = harness.Deployment(nova_synth).deploy()
    stack = Nova(deployment, clock)
    for task in TASKS[:2]:
        stack.put_task(task)
    return stack


def test_two_groups_of_four_get_one_response_each_with_the_mapped_aggregate_and_components(nova):
    trainer = nova.trainer
    samples = {}
    for prompt, task in enumerate(TASKS[:2]):
        for index in range(4):
            sample_id = f"sample-{prompt:03d}_{index}"
            nova.scripts[sample_id] = scripted_turns(index, task)
            # every request of group 0 is delivered twice (SQS is at-least-once; Nova sends no dedup id we know)
            samples[sample_id] = trainer.request_rollout(sample_id, {"task_id": task.task_id}, redeliver=prompt == 0)
    # Generate responses go back in reverse order of the requests: out of order across and within rollouts.
    nova.drive(until=lambda: len(trainer.responses) == 8, reverse=True)
    nova.drive(until=lambda: not any(e["status"] == "RUNNING" for e in nova.executions()), bridge_only=True)
    trainer.collect_responses()
    assert sorted(trainer.responses) == sorted(samples) and not trainer.duplicate_responses
    assert len(nova.executions()) == 8  # the redelivered requests started nothing

    # Generate requests follow the documented shape: step_id = <sample_id>_<turn>, the messages so far.
    first = next(r for r in trainer.generate_requests if r["step_id"] == "sample-000_0_1")
    assert set(first) == {"version", "sample_id", "step_id", "messages"} and first["version"] == "v0"
    assert [m["role"] for m in first["messages"]] == ["user", "assistant", "user"]
    assert TASKS[0].tests not in json.dumps(trainer.generate_requests)  # the hidden tests never reach Nova

    records = {r.rollout_id: r for r in nova.store.iter_records(RUN_ID, 0)}
    reports = nova.reports()
    assert {r.group_id for r in records.values()} == {"sample-000", "sample-001"}
    for sample_id, response in trainer.responses.items():
        record = records[sample_id]
        assert record.status == "scored", record.error
        assert set(response) == {"version", "sample_id", "stop_reason", "rewards"}
        assert response["stop_reason"] == "end_of_conversation"
        # aggregate in [-0.5, 1.6] mapped linearly onto the advertised range [0, 1]
        assert response["rewards"]["aggregate_score"] == pytest.approx((record.aggregate + 0.5) / 2.1)
        rewards = {m["name"]: m["value"] for m in reports[sample_id]["metrics_list"] if m["type"] == "Reward"}
        assert rewards == record.components
    ask, direct, guess, slow = (records[f"sample-000_{i}"] for i in range(4))
    assert ask.components == {
        "correctness": 1.0,
        "asked_before_coding": 1.0,
        "guessed_immediately": 0.0,
        "loop_penalty": 0.0,
    }
    assert direct.components["guessed_immediately"] == -1.0 and direct.components["correctness"] == 1.0
    assert guess.components["correctness"] == 0.0
    assert slow.components["asked_before_coding"] == 1.0 and slow.metrics["assistant_turns"] == 3
    assert trainer.responses["sample-000_0"]["rewards"]["aggregate_score"] == pytest.approx(1.0)
    # Every message the bridge consumed was deleted (no batch item failed), and nothing was dead-lettered.
    # The trainers' shared turn queue never saw a Nova rollout's turn (the bridge has its own turn channel).
    for url in (nova.request_queue, nova.queues.generate_response, nova.turn_queue, nova.deployment.queue_url):
        attrs = nova.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        assert attrs["ApproximateNumberOfMessages"] == attrs["ApproximateNumberOfMessagesNotVisible"] == "0", url


def test_a_generate_response_that_never_comes_ends_in_the_error_reward_not_a_hang(nova):
    trainer = nova.trainer
    nova.scripts["lost-000_0"] = None  # the model server never answers this rollout
    nova.scripts["fine-000_0"] = scripted_turns(1, TASKS[0])
    trainer.request_rollout("lost-000_0", {"task_id": TASKS[0].task_id}, value_range=(-1.0, 3.0))
    trainer.request_rollout("fine-000_0", {"task_id": TASKS[0].task_id})
    nova.drive(until=lambda: "fine-000_0" in trainer.responses and "lost-000_0_0" in trainer.unanswered)
    assert "lost-000_0" not in trainer.responses
    # Nova's rollout.timeout would fail the training job; the bridge's budget (80 % of it) runs out first.
    # Move time past the budget and the next whole minute: the one-minute schedule fires the sweeper.
    nova.clock.offset += BUDGET_S + 120
    nova.drive(until=lambda: "lost-000_0" in trainer.responses)
    lost = trainer.responses["lost-000_0"]
    assert lost["rewards"]["aggregate_score"] == 1.0  # mid-range of [-1, 3]: neutral, and flagged below
    assert lost["stop_reason"] == "error"
    record = next(r for r in nova.store.iter_records(RUN_ID, 0) if r.rollout_id == "lost-000_0")
    assert record.status == "error" and record.error.kind == "timeout"
    flags = {k: {m["name"]: m["value"] for m in r["metrics_list"]} for k, r in nova.reports().items()}
    assert flags["lost-000_0"]["reward_error"] == 1 and flags["lost-000_0"]["error_timeout"] == 1
    assert flags["fine-000_0"]["reward_error"] == 0
    # The stopped execution's own status change reaches the responder, which does not answer twice.
    nova.drive(until=lambda: not any(e["status"] == "RUNNING" for e in nova.executions()), bridge_only=True)
    assert sorted(e["status"] for e in nova.executions()) == ["ABORTED", "SUCCEEDED"]
    nova.drive(until=lambda: len(nova.sources.delivered_statuses) == 2, bridge_only=True)
    time.sleep(0.1)
    trainer.collect_responses()
    assert not trainer.duplicate_responses
    # A generate response arriving after the cut-off is dropped, not delivered to a stopped rollout.
    trainer._send(
        nova.queues.generate_response,
        {
            "version": "v0",
            "sample_id": "lost-000_0",
            "step_id": "lost-000_0_0",
            "data": {"choices": [{"message": {"content": "late"}, "finish_reason": "stop"}]},
        },
        "lost-000_0",
    )
    nova.drive(
        until=lambda: (
            nova.sqs.get_queue_attributes(
                QueueUrl=nova.queues.generate_response, AttributeNames=["ApproximateNumberOfMessages"]
            )["Attributes"]["ApproximateNumberOfMessages"]
            == "0"
        ),
        bridge_only=True,
    )
    assert not trainer.duplicate_responses


def test_a_generate_response_too_large_for_step_functions_reaches_the_rollout_through_s3(nova):
    """A turn over the 200 KB Step Functions budget: the router writes it to the turn's reply_key (under the run's
    state, the only place its role may write) and the rollout reads it there, under the IAM harness."""
    trainer = nova.trainer
    big = f"```python\n{TASKS[0].reference_solution}\n```\n# " + "y" * 205_000  # < 256 KiB: one message
    nova.scripts["big-000_0"] = [big]
    trainer.request_rollout("big-000_0", {"task_id": TASKS[0].task_id})
    nova.drive(until=lambda: "big-000_0" in trainer.responses)
    record = next(r for r in nova.store.iter_records(RUN_ID, 0) if r.rollout_id == "big-000_0")
    assert record.status == "scored" and record.components["correctness"] == 1.0
    assert [k for k in nova.store.list_keys(f"runs/{RUN_ID}/state/") if "/reply-" in k]
    router = next(k for k in nova.deployment.functions if k.startswith("NovaBridgeRouter"))
    assert (router, "s3", "PutObject") in iam.CHECKED_CALLS


def test_bad_requests_are_answered_through_the_queue_and_unreadable_ones_are_dropped(nova):
    trainer = nova.trainer
    trainer.invoke_rollout_proxy("not a rollout request")  # a JSON string: Lambda payloads are JSON
    trainer.invoke_rollout_proxy({"version": "v0", "sample_id": "bad-000_0", "rewards": {"range": [0, 1]}, "data": {}})
    trainer.request_rollout("odd-000_0", {"task_id": "no-such-task"})
    nova.drive(until=lambda: {"bad-000_0", "odd-000_0"} <= set(trainer.responses))
    bad, odd = trainer.responses["bad-000_0"], trainer.responses["odd-000_0"]
    assert bad["stop_reason"] == "error" and bad["rewards"]["aggregate_score"] == pytest.approx(0.5)  # neutral
    assert odd["stop_reason"] == "error"  # the unknown task is found out by the rollout, which errors
    odd_record = next(r for r in nova.store.iter_records(RUN_ID, 0) if r.rollout_id == "odd-000_0")
    assert odd_record.status == "error"
    # The string has no sample_id to answer under: logged and deleted (not retried into the dead-letter queue).
    attrs = nova.sqs.get_queue_attributes(QueueUrl=nova.request_queue, AttributeNames=["All"])["Attributes"]
    assert attrs["ApproximateNumberOfMessages"] == attrs["ApproximateNumberOfMessagesNotVisible"] == "0"


def test_a_request_rejected_at_intake_leaves_its_report_envelope_and_record_like_any_answer(nova):
    """Nothing starts for a rejected request, but what Nova was told is in S3 all the same: the envelope
    under nova/reports/ (components unscored, the error flagged) and an error record for monitor/report;
    a redelivered copy is recognised and not answered twice."""
    trainer = nova.trainer
    unparsable = {"version": "v0", "sample_id": "bad-001_0", "rewards": {"range": [2, 1]}, "data": {}}
    trainer.invoke_rollout_proxy(unparsable)
    trainer.request_rollout("taskless-001_0", {"prompt": "no task_id and no inline task"})
    nova.drive(until=lambda: {"bad-001_0", "taskless-001_0"} <= set(trainer.responses))
    reports = nova.reports()
    for sample_id, kind in (("bad-001_0", "bad_request"), ("taskless-001_0", "bad_input")):
        assert trainer.responses[sample_id]["stop_reason"] == "error"
        envelope = reports[sample_id]
        metrics = {m["name"]: m for m in envelope["metrics_list"]}
        assert metrics["reward_error"]["value"] == 1 and metrics["reward_error"]["type"] == "Metric"
        assert envelope["aggregate_reward_score"] == trainer.responses[sample_id]["rewards"]["aggregate_score"]
        (record,) = [r for r in nova.store.iter_records(RUN_ID, 0) if r.rollout_id == sample_id]
        assert record.status == "error" and record.error.kind == kind
    assert not [e for e in nova.executions() if "001" in e["name"]]  # nothing was started
    # Nova redelivers the unparsable request (same body): it is known, not answered again.
    answered = len(trainer.responses)
    nova.sqs.send_message(
        QueueUrl=nova.request_queue,
        MessageGroupId="g",
        MessageBody=json.dumps(unparsable),
        MessageDeduplicationId="a-later-copy",
    )  # past SQS's 5-minute deduplication window
    nova.drive(
        until=lambda: (
            nova.sqs.get_queue_attributes(QueueUrl=nova.request_queue, AttributeNames=["ApproximateNumberOfMessages"])[
                "Attributes"
            ]["ApproximateNumberOfMessages"]
            == "0"
        ),
        bridge_only=True,
    )
    trainer.collect_responses()
    assert len(trainer.responses) == answered and not trainer.duplicate_responses
    assert len([k for k in nova.store.list_keys("nova/reports/") if "rejected-" in k]) == 1


def test_nova_simulate_command_runs_the_loop_against_the_stacks_queues(nova, tmp_path):
    import threading

    from typer.testing import CliRunner

    from rewardpipe.cli import app

    stop = threading.Event()
    failures: list[BaseException] = []

    def aws_side():  # the deployed stack's event sources, while the command plays Nova
        try:
            nova.drive(until=stop.is_set, timeout_s=300, bridge_only=True)
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)

    thread = threading.Thread(target=aws_side, daemon=True)
    thread.start()
    tasks_file = tmp_path / "tasks.jsonl"
    tasks_file.write_text(TASKS[0].model_dump_json() + "\n")
    queues = nova.queues
    try:
        out = CliRunner().invoke(
            app,
            [
                "nova",
                "simulate",
                "--rollout-request-arn",
                queues.rollout_request_arn,
                "--rollout-response-url",
                queues.rollout_response,
                "--generate-request-url",
                queues.generate_request,
                "--generate-response-url",
                queues.generate_response,
                "--tasks",
                str(tasks_file),
                "--groups",
                "1",
                "--group-size",
                "4",
                "--timeout",
                "240",
                "--json",
                "--region",
                harness.REGION,
            ],
        )
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not failures, failures
    assert out.exit_code == 0, out.output
    # the in-process Lambdas of the AWS thread log to the same captured stdout: read the command's line
    # (--json is one ASCII object per line)
    report = json.loads(next(line for line in out.output.splitlines() if line.startswith('{"ok":')))
    assert report["ok"] and len(report["responses"]) == 4 and not report["missing"]


def test_a_message_the_bridge_cannot_handle_stays_on_its_queue_for_a_retry(nova):
    """Batch item failures as the event-source mapping applies them: a turn request the forwarder cannot
    read is reported failed, so it is not deleted (SQS redelivers it after the visibility timeout and, after
    five receives, dead-letters it); a function that raises leaves its whole batch the same way."""
    turn_queue = nova.turn_queue
    nova.sqs.send_message(QueueUrl=turn_queue, MessageBody=json.dumps({"task_token": 1}))
    assert nova.sources.poll_sqs() == 1
    attrs = nova.sqs.get_queue_attributes(QueueUrl=turn_queue, AttributeNames=["All"])["Attributes"]
    assert attrs["ApproximateNumberOfMessagesNotVisible"] == "1"  # in flight, not deleted
    assert not nova.sources.failures  # reported as a batch item failure, not a crash

    harness.LAMBDA_FAULTS["NovaBridgeIntake"] = RuntimeError("intake down")
    nova.trainer.request_rollout("retry-000_0", {"task_id": TASKS[0].task_id})
    assert nova.sources.poll_sqs() == 1
    assert nova.sources.failures and "intake down" in nova.sources.failures[0]
    attrs = nova.sqs.get_queue_attributes(QueueUrl=nova.request_queue, AttributeNames=["All"])["Attributes"]
    assert attrs["ApproximateNumberOfMessagesNotVisible"] == "1" and not nova.executions()


# The bridge deployed with the built-in tool-call environment: Nova's replies carry tool calls (round thirty-one).
TOOL_CALL_CONTEXT = json.dumps(
    {**json.loads(harness.NOVA_BRIDGE_CONTEXT), "rewardpipe": {"environment": "tool_call"}}, sort_keys=True
)


@pytest.fixture
def nova_tools(aws, monkeypatch) -> Nova:
    clock = SimulatedClock()
    monkeypatch.setattr(bridge_module, "wall_clock", clock)
    harness.install_stop_execution_patch(monkeypatch)
    return Nova(harness.Deployment(harness.synthesized(TOOL_CALL_CONTEXT)).deploy(), clock)


def test_a_tool_using_environment_sees_the_models_tool_calls_through_nova(nova_tools):
    """Round thirty-one: the router read only the text of a generate response, so the tool-call environment never
    saw a call made through Nova (the model's turn was an empty text, its calls lost). The calls reach the rollout
    now (hostile ones answered as invalid, as locally), the tool answers go back to Nova in the next generate request
    with the calls they answer, and a reply with no message or a filtered one ends its rollout at once, as the local
    policy ends it."""
    from rewardpipe.envs.tool_call import BUNDLED_TASKS, ToolCallTask
    from rewardpipe.models import load_task_rows

    nova, trainer = nova_tools, nova_tools.trainer
    task = load_task_rows(BUNDLED_TASKS, ToolCallTask)[0]  # the checking account's balance: 12000
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "get_balance", "arguments": '{"account": "checking"}'}},
        {"id": "c2", "type": "function", "function": {"name": "transfer", "arguments": "{not json"}},
    ]
    replies = {
        "tools-000_0": [
            {"message": {"role": "assistant", "content": None, "tool_calls": calls}, "finish_reason": "tool_calls"},
            "The balance is <answer>12000</answer>",
        ],
        "tools-000_1": [{"message": {"role": "assistant", "content": None}, "finish_reason": "content_filter"}],
        "tools-000_2": [{"message": None, "finish_reason": "stop"}],
    }
    nova.scripts.update(replies)
    for sample_id in replies:
        trainer.request_rollout(sample_id, {"task": task.model_dump(mode="json")})
    # No time moves: every rollout is answered without waiting out its budget.
    nova.drive(until=lambda: len(trainer.responses) == 3)
    records = {r.rollout_id: r for r in nova.store.iter_records(RUN_ID, 0)}

    second = next(r for r in trainer.generate_requests if r["step_id"] == "tools-000_0_1")
    assistant = next(m for m in second["messages"] if m["role"] == "assistant")
    assert assistant["tool_calls"] == calls
    answers = {m["tool_call_id"]: m["content"] for m in second["messages"] if m["role"] == "tool"}
    assert set(answers) == {"c1", "c2"} and "12000" in answers["c1"] and "12000" not in answers["c2"]
    used = records["tools-000_0"]
    assert used.status == "scored", used.error
    assert used.components["goal_reached"] == 1.0 and used.components["valid_calls"] < 1.0  # c2 was invalid

    filtered = records["tools-000_1"]
    assert filtered.status == "scored" and filtered.metrics["end_reason"] == "content_filter"
    assert trainer.responses["tools-000_1"]["stop_reason"] == "end_of_conversation"

    broken = records["tools-000_2"]
    assert broken.status == "error" and broken.error.kind == "policy_error"
    assert "choices[0].message" in broken.error.message
    assert trainer.responses["tools-000_2"]["stop_reason"] == "error"
