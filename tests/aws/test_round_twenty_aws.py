"""Round twenty, AWS path (an independent review, "moto is not AWS"): what the real services refuse that moto took.

* Step Functions counts StartExecution's ``input`` and SendTaskSuccess's ``output`` as the strings the caller
  sends (at most 262,144). The client and the Nova bridge measured the UTF-8 size of the JSON's text against
  the 200 KB budget, then sent ``json.dumps`` (every non-ASCII character a 6-character escape, an emoji 12):
  a task or a turn of ~45,000 CJK characters fitted the budget and was refused by AWS (the trainer's serve
  loop or start raised ValidationException; a Nova turn went back to its queue until it was dead-lettered).
  The harness now refuses such an output as AWS does, and counts state data as UTF-8 (moto's own check and its
  histories count the escapes, which would fail the fixed path where AWS runs it).
"""

from __future__ import annotations

import json

import pytest

from rewardpipe.aws.client import RolloutClient
from rewardpipe.aws.state import PAYLOAD_BUDGET, STATE_PAYLOAD_LIMIT, payload_size, wire_json
from rewardpipe.models import load_tasks
from rewardpipe.policies import fenced
from tests.aws import harness

pytestmark = pytest.mark.xdist_group("cdk")
TASK = load_tasks(harness.ROOT / "rewardpipe" / "data" / "tasks.jsonl")[1]
# 50,000 CJK characters: 150 KB of UTF-8 (inside the budget), 300 KB as json.dumps' escapes (over 256 KiB).
CJK = "中" * 50_000


def _start_replaying_the_reference(client: RolloutClient, run_id: str, task=TASK) -> str:
    """One rollout whose model commits the reference solution at once; its execution's ARN."""
    return client.start(
        run_id, 0, "g0", "g0-0", task=task, policy={"mode": "replay", "turns": [fenced(TASK.reference_solution)]}
    )


def test_the_wire_json_is_what_payload_size_measures():
    for value in ({"text": CJK}, {"text": '😀\ud800 \n"x'}, {"a": [1, 2.5, None, True]}):
        text = wire_json(value)
        assert json.loads(text) == json.loads(json.dumps(value))
        assert len(text.encode("utf-8")) == payload_size(value)
    assert len(json.dumps({"text": CJK})) > STATE_PAYLOAD_LIMIT > PAYLOAD_BUDGET > payload_size({"text": CJK})


def test_the_harness_refuses_a_task_result_over_256_kib_as_step_functions_does(aws, sfn):
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError, match="length less than or equal to 262144"):
        sfn.send_task_success(taskToken="t", output=json.dumps({"text": CJK}))


def test_a_task_in_cjk_within_the_budget_starts_and_scores(deployment, sfn):
    task = TASK.model_copy(update={"prompt": f"{TASK.prompt}\n{CJK}"})
    client = RolloutClient(deployment.state_machine_arn, bucket=deployment.bucket, sfn=sfn)
    arn = _start_replaying_the_reference(client, "run-cjk", task)
    assert harness.wait_execution(sfn, arn)["status"] == "SUCCEEDED"


def test_a_trainer_reply_in_cjk_within_the_budget_is_delivered_inline(deployment, sfn):
    import boto3

    client = RolloutClient(
        deployment.state_machine_arn,
        queue_url=deployment.queue_url,
        bucket=deployment.bucket,
        sfn=sfn,
        sqs=boto3.client("sqs", region_name=harness.REGION),
    )
    (arn,) = client.start_group("run-cjk-reply", 0, "g0", task=TASK, policies=[{"mode": "callback"}])

    def respond(request):
        return f"{CJK}\n{fenced(TASK.reference_solution)}"

    assert client.serve_turns(respond, until=client.all_done([arn]), poll_s=0.05) >= 1
    (result,) = client.wait([arn], poll_s=0.05)
    assert result["status"] == "scored"


def test_sqs_refuses_a_message_with_a_character_outside_its_set_as_aws_does(aws):
    import boto3
    from botocore.exceptions import ClientError

    sqs = boto3.client("sqs", region_name=harness.REGION)
    url = sqs.create_queue(QueueName="round-twenty")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody='{"ok": "\\t\\n中😀"}')
    for refused in ("a\x00b", "\x1b[31m", "\ufffe"):
        with pytest.raises(ClientError, match="InvalidMessageContents"):
            sqs.send_message(QueueUrl=url, MessageBody=refused)


def test_the_nova_proxy_queues_every_request_of_a_batch_whatever_characters_one_holds(aws):
    """A rollout request that is a string but not JSON was queued as its own text: SQS refuses a control character
    (InvalidMessageContents), so the proxy's invocation failed and Nova saw the whole batch fail. It is queued as
    a JSON string (intake rejects it, as it did) and the batch's other requests are queued."""
    import boto3

    from rewardpipe.integrations.nova.bridge import Bridge, Queues
    from rewardpipe.integrations.nova.protocol import BridgeConfig
    from rewardpipe.rewards import get_reward
    from tests.integrations.nova.test_nova_contract import MemoryStore

    sqs = boto3.client("sqs", region_name=harness.REGION)
    url = sqs.create_queue(
        QueueName="requests.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "false"}
    )["QueueUrl"]
    bridge = Bridge(
        BridgeConfig(rollout_budget_s=480.0),
        get_reward("ask_before_coding"),
        MemoryStore(),
        sqs,
        None,
        Queues("resp.fifo", "gen.fifo", rollout_request=url),
    )
    good = {"version": "v0", "timestamp": 1.0, "sample_id": "s-000_0", "data": {"task_id": "t"}}
    out = bridge.accept(["not json \x00\x1b[2J", json.dumps(good)])
    assert out == {"status": "accepted", "sample_ids": ["", "s-000_0"]}
    bodies = [m["Body"] for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]]
    assert len(bodies) == 2 and json.loads(bodies[1]) == good
    assert json.loads(bodies[0]) == "not json \x00\x1b[2J"
    assert bridge.intake(bodies[0])["status"] == "rejected"


# Lambda Invoke's server-side answers that say "wait and try again" (botocore's Lambda model documents each):
# ServiceException (500) "encountered an internal error"; ResourceNotReadyException (502) "The function is inactive
# and its VPC connection is no longer available. Wait for the VPC connection to reestablish and try again" (the code
# runner lives in a VPC and goes Inactive when idle); ENINotReadyException (502) "Wait a few moments and try the
# request again"; EC2ThrottledException and EC2UnexpectedException (502) while Lambda sets up the VPC connection.
LAMBDA_RETRY_LATER = {
    "ServiceException": 500,
    "ResourceNotReadyException": 502,
    "ENINotReadyException": 502,
    "EC2ThrottledException": 502,
    "EC2UnexpectedException": 502,
}


@pytest.mark.parametrize("code", sorted(LAMBDA_RETRY_LATER))
def test_a_lambda_invoke_the_service_asks_to_retry_is_transient(code):
    import botocore.session
    from botocore.exceptions import ClientError

    from rewardpipe.aws.lambda_support import is_transient

    model = botocore.session.get_session().get_service_model("lambda")
    shape = next(e for e in model.operation_model("Invoke").error_shapes if e.name == code)
    assert shape.metadata["error"]["httpStatusCode"] == LAMBDA_RETRY_LATER[code]
    error = {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": LAMBDA_RETRY_LATER[code]}}
    assert is_transient(ClientError(error, "Invoke"))


def test_a_code_runner_woken_from_inactive_costs_a_retry_not_the_rollout(deployment, sfn):
    client = RolloutClient(deployment.state_machine_arn, bucket=deployment.bucket, sfn=sfn)
    runner = deployment.function_name("CodeRunnerFunction")
    harness.LAMBDA_SERVICE_FAULTS[runner] = [("ResourceNotReadyException", 502)]
    arn = _start_replaying_the_reference(client, "run-inactive")
    output = json.loads(harness.wait_execution(sfn, arn)["output"])
    assert not harness.LAMBDA_SERVICE_FAULTS[runner]  # the fault was met
    assert output["status"] == "scored"
    assert {m["name"]: m["value"] for m in output["metrics_list"]}["correctness"] == 1.0


# Step Functions, "Handle Lambda service exceptions" (https://docs.aws.amazon.com/step-functions/latest/dg/
# bp-lambda-serviceexception.html): Lambda "can occasionally experience transient service errors ... such as
# ClientExecutionTimeoutException, ServiceException, AWSLambdaException, or SdkClientException"; the page's Retry
# names these four. moto never raises them, so only the template can show they are retried.
DOCUMENTED_LAMBDA_SERVICE_ERRORS = {
    "Lambda.ClientExecutionTimeoutException",
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
}


def test_every_lambda_state_retries_the_lambda_service_errors_step_functions_documents(synth):
    (machine,) = [r for r in synth.template["Resources"].values() if r["Type"] == "AWS::StepFunctions::StateMachine"]
    parts = machine["Properties"]["DefinitionString"]["Fn::Join"][1]
    states = json.loads("".join(p if isinstance(p, str) else "ARN" for p in parts))["States"]
    # A state with payload_response_only names the function's ARN (an intrinsic here) instead of lambda:invoke.
    lambda_states = {
        name: s
        for name, s in states.items()
        if s["Type"] == "Task" and (":lambda:invoke" in s["Resource"] or s["Resource"] == "ARN")
    }
    assert {"StartEpisodeStep", "ConverseStep", "ScoreStep", "RecordErrorStep"} <= set(lambda_states)
    for name, state in lambda_states.items():
        retried = {error for retry in state.get("Retry", []) for error in retry["ErrorEquals"]}
        assert retried >= DOCUMENTED_LAMBDA_SERVICE_ERRORS, (name, DOCUMENTED_LAMBDA_SERVICE_ERRORS - retried)
