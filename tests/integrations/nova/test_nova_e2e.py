"""Nova Forge delegated rollouts end to end under moto.

A simulated Nova trainer (rewardpipe.integrations.nova.trainer_sim, written from the documented v0 shapes)
talks to SageMaker-named FIFO queues; the bridge roles are pumped the way their SQS event sources and the
EventBridge status-change rule would call them; the rollouts run in the real synthesized state machine
(moto's Step Functions engine with the real Lambda handlers, tests/aws/harness.py).
"""

from __future__ import annotations

import json
import time

import pytest

from rewardpipe.integrations.nova.bridge import Bridge, Queues
from rewardpipe.integrations.nova.protocol import BridgeConfig
from rewardpipe.integrations.nova.trainer_sim import NovaQueues, SimulatedTrainer, scripted_turns, simulate
from rewardpipe.models import load_tasks
from rewardpipe.rewards import get_reward
from tests.aws import harness

pytestmark = pytest.mark.xdist_group("cdk")

TASKS = load_tasks(harness.ROOT / "rewardpipe" / "data" / "tasks.jsonl")
REWARD = get_reward("ask_before_coding")


def behaviour(index: int, task) -> list[str]:
    return scripted_turns(index, task)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def make_queues(sqs) -> NovaQueues:
    def fifo(name: str) -> str:
        return sqs.create_queue(QueueName=f"rewardpipe-SageMaker-{name}.fifo",
                                Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "false"})["QueueUrl"]

    return NovaQueues(fifo("RolloutRequestQueue"), fifo("RolloutResponseQueue"), fifo("GenerateRequestQueue"),
                      fifo("GenerateResponseQueue"))


def pump(bridge: Bridge, trainer: SimulatedTrainer, sqs, sfn, queues: NovaQueues, turn_queue: str, until,
         *, reverse=False, timeout_s=120.0, clock: Clock | None = None, advance_s: float = 0.0, trainer_side=True):
    """Play the event sources until ``until()`` holds: SQS → intake / forward_turn / route_response, execution
    end → respond, plus the sweeper. Raises if it takes longer than ``timeout_s`` (the test never hangs)."""
    answered: set[str] = set()
    deadline = time.time() + timeout_s
    while not until():
        assert time.time() < deadline, "the bridge did not finish in time"
        for url, role in ((queues.rollout_request, bridge.intake), (turn_queue, bridge.forward_turn),
                          (queues.generate_response, bridge.route_response)):
            for message in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
                role(message["Body"])
                sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        if trainer_side:
            trainer.answer_generate_requests(reverse=reverse)
        for execution in sfn.list_executions(stateMachineArn=bridge.state_machine_arn)["executions"]:
            if execution["status"] != "RUNNING" and execution["name"] not in answered:
                desc = sfn.describe_execution(executionArn=execution["executionArn"])
                bridge.respond(execution["name"], desc["status"], desc.get("output"))
                answered.add(execution["name"])
        if clock is not None:
            clock.now += advance_s
        bridge.sweep()
        if trainer_side:
            trainer.collect_responses()
        time.sleep(0.02)


@pytest.fixture
def setup(deployment, sfn, tmp_path):
    import boto3

    from rewardpipe.store import S3Store

    sqs = boto3.client("sqs", region_name=harness.REGION)
    queues = make_queues(sqs)
    store = S3Store(deployment.bucket, client=boto3.client("s3", region_name=harness.REGION))
    for task in TASKS[:2]:
        store.put_json(f"tasks/nova/{task.task_id}.json", task.model_dump(mode="json"))
    tasks_file = tmp_path / "tasks.jsonl"
    tasks_file.write_text("".join(t.model_dump_json() + "\n" for t in TASKS[:1]))
    clock = Clock()

    def build(**config) -> tuple[Bridge, SimulatedTrainer]:
        bridge = Bridge(BridgeConfig(run_id="nova-e2e", **config), REWARD, store, sqs, sfn,
                        Queues(rollout_response=queues.rollout_response, generate_request=queues.generate_request,
                               turn_requests=deployment.queue_url),
                        state_machine_arn=deployment.state_machine_arn, clock=clock)
        return bridge, SimulatedTrainer(sqs, queues, policy)

    scripts: dict[str, list[str] | None] = {}

    def policy(sample_id: str, turn: int, messages):
        script = scripts[sample_id]
        return None if script is None else script[turn]

    return {"sqs": sqs, "queues": queues, "store": store, "build": build, "scripts": scripts, "clock": clock,
            "turn_queue": deployment.queue_url, "tasks_file": tasks_file}


def test_two_groups_of_four_get_one_response_each_with_the_mapped_aggregate_and_components(setup, sfn):
    bridge, trainer = setup["build"]()
    samples = {}
    for prompt, task in enumerate(TASKS[:2]):
        for index in range(4):
            sample_id = f"sample-{prompt:03d}_{index}"
            setup["scripts"][sample_id] = behaviour(index, task)
            # every request of group 0 is delivered twice (SQS is at-least-once)
            samples[sample_id] = trainer.request_rollout(sample_id, {"task_id": task.task_id}, redeliver=prompt == 0)
    pump(bridge, trainer, setup["sqs"], sfn, setup["queues"], setup["turn_queue"],
         until=lambda: len(trainer.responses) == 8, reverse=True)
    time.sleep(0.2)
    trainer.collect_responses()
    assert sorted(trainer.responses) == sorted(samples) and not trainer.duplicate_responses
    assert len(sfn.list_executions(stateMachineArn=bridge.state_machine_arn)["executions"]) == 8  # no duplicates

    # Generate requests follow the documented shape: step_id = <sample_id>_<turn>, messages so far.
    first = next(r for r in trainer.generate_requests if r["step_id"] == "sample-000_0_1")
    assert set(first) == {"version", "sample_id", "step_id", "messages"} and first["version"] == "v0"
    assert [m["role"] for m in first["messages"]] == ["user", "assistant", "user"]
    assert TASKS[0].tests not in json.dumps(trainer.generate_requests)  # the hidden tests never reach Nova

    records = {r.rollout_id: r for r in setup["store"].iter_records("nova-e2e", 0)}
    reports = {r["id"]: r for r in (setup["store"].get_json(k) for k in setup["store"].list_keys("nova/reports/"))}
    assert {r.group_id for r in records.values()} == {"sample-000", "sample-001"}
    for sample_id, response in trainer.responses.items():
        record = records[sample_id]
        assert record.status == "scored"
        assert set(response) == {"version", "sample_id", "stop_reason", "rewards"}
        # aggregate in [-0.5, 1.6] mapped linearly onto the advertised range [0, 1]
        assert response["rewards"]["aggregate_score"] == pytest.approx((record.aggregate + 0.5) / 2.1)
        report = reports[sample_id]
        rewards = {m["name"]: m["value"] for m in report["metrics_list"] if m["type"] == "Reward"}
        assert rewards == record.components
    # the four strategies give the blog's component values
    ask, direct, guess = records["sample-000_0"], records["sample-000_1"], records["sample-000_2"]
    assert ask.components == {"correctness": 1.0, "asked_before_coding": 1.0, "guessed_immediately": 0.0,
                              "loop_penalty": 0.0}
    assert direct.components["guessed_immediately"] == -1.0 and direct.components["correctness"] == 1.0
    assert guess.components["correctness"] == 0.0
    assert trainer.responses["sample-000_0"]["rewards"]["aggregate_score"] == pytest.approx(1.0)


def test_a_generate_response_that_never_comes_ends_in_the_error_reward_not_a_hang(setup, sfn):
    bridge, trainer = setup["build"](rollout_budget_s=30, error_reward="neutral")
    setup["scripts"]["lost-000_0"] = None  # the model server never answers
    setup["scripts"]["fine-000_0"] = behaviour(1, TASKS[0])
    trainer.request_rollout("lost-000_0", {"task_id": TASKS[0].task_id}, value_range=(-1.0, 3.0))
    trainer.request_rollout("fine-000_0", {"task_id": TASKS[0].task_id})
    pump(bridge, trainer, setup["sqs"], sfn, setup["queues"], setup["turn_queue"],
         until=lambda: len(trainer.responses) == 2, clock=setup["clock"], advance_s=1.0)
    lost = trainer.responses["lost-000_0"]
    assert lost["rewards"]["aggregate_score"] == 1.0  # mid-range of [-1, 3]: neutral, and flagged below
    assert lost["stop_reason"] == "error"
    record = next(r for r in setup["store"].iter_records("nova-e2e", 0) if r.rollout_id == "lost-000_0")
    assert record.status == "error" and record.error.kind == "timeout"
    reports = [setup["store"].get_json(k) for k in setup["store"].list_keys("nova/reports/")]
    flags = {r["id"]: {m["name"]: m["value"] for m in r["metrics_list"]} for r in reports}
    assert flags["lost-000_0"]["reward_error"] == 1 and flags["lost-000_0"]["error_timeout"] == 1
    assert flags["fine-000_0"]["reward_error"] == 0
    assert trainer.responses["fine-000_0"]["stop_reason"] == "end_of_conversation"


def test_bad_requests_are_answered_at_once_and_fail_batch_answers_nothing(setup, sfn):
    bridge, trainer = setup["build"](error_reward="zero")
    out = bridge.intake(json.dumps({"version": "v0", "sample_id": "odd-000_0", "rewards": {"range": [0, 1]},
                                    "data": {"task_id": "no-such-field-here"} | {"x": 1}}))
    assert out["status"] == "started"  # an unknown task id is found out by the rollout, which errors
    out = bridge.intake(json.dumps({"version": "v0", "sample_id": "bad-000_0", "data": {}}))
    assert out["status"] == "rejected_answered" and out["response"]["rewards"]["aggregate_score"] == pytest.approx(0.5 / 2.1)
    assert bridge.intake("not json")["status"] == "rejected"
    failing, _ = setup["build"](error_reward="fail_batch")
    assert failing.intake(json.dumps({"sample_id": "bad-001_0", "data": {}}))["status"] == "rejected_unanswered"


def test_nova_simulate_command_runs_the_loop_against_the_stacks_queues(setup, sfn):
    import threading

    from typer.testing import CliRunner

    from rewardpipe.cli import app

    bridge, trainer = setup["build"]()
    queues = setup["queues"]
    stop = threading.Event()
    failures: list[BaseException] = []

    def bridge_side():  # the deployed bridge: event sources and the status-change rule
        try:
            pump(bridge, trainer, setup["sqs"], sfn, NovaQueues(queues.rollout_request, "", "", queues.generate_response),
                 setup["turn_queue"], until=stop.is_set, timeout_s=300, trainer_side=False)
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)

    thread = threading.Thread(target=bridge_side, daemon=True)
    thread.start()
    tasks_file = setup["tasks_file"]
    try:
        out = CliRunner().invoke(app, [
            "nova", "simulate", "--rollout-request-url", queues.rollout_request,
            "--rollout-response-url", queues.rollout_response, "--generate-request-url", queues.generate_request,
            "--generate-response-url", queues.generate_response, "--tasks", str(tasks_file), "--groups", "1",
            "--group-size", "4", "--timeout", "240", "--json", "--region", harness.REGION])
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not failures, failures
    assert out.exit_code == 0, out.output
    # the in-process Lambdas of the bridge thread log to the same captured stdout: read the command's object
    report, _ = json.JSONDecoder().raw_decode(out.output[out.output.index('{\n  "ok"'):])
    assert report["ok"] and len(report["responses"]) == 4 and not report["missing"]
