"""The Nova bridge construct in the synthesized template (context flag rewardpipe_nova.enabled)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.xdist_group("cdk")


@pytest.fixture(scope="module")
def template(nova_synth):
    from app import synth_errors

    errors = synth_errors(nova_synth.app, nova_synth.stack)
    assert errors == []  # cdk-nag: every finding fixed or acknowledged with a reason
    return nova_synth.template


def _of_type(template, cfn_type):
    return {k: v for k, v in template["Resources"].items() if v["Type"] == cfn_type}


def test_outputs_are_exactly_the_recipe_overrides_plus_the_training_role(template):
    outputs = template["Outputs"]
    for key in (
        "NovaRolloutRequestArn",
        "NovaRolloutResponseSqsUrl",
        "NovaGenerateRequestSqsUrl",
        "NovaGenerateResponseSqsUrl",
        "NovaTrainingJobRoleArn",
    ):
        assert key in outputs
    # rollout_request_arn is a Lambda (the rollout proxy), never a queue (test_nova_contract.py has the rest).
    assert outputs["NovaRolloutRequestArn"]["Value"]["Fn::GetAtt"][0].startswith("NovaBridgeRolloutProxy")
    queues = _of_type(template, "AWS::SQS::Queue")
    fifo_names = [q["Properties"]["QueueName"] for q in queues.values() if q["Properties"].get("FifoQueue")]
    main = [n for n in fifo_names if "dlq" not in n]
    assert len(main) == 4 and all("SageMaker" in n and n.endswith(".fifo") for n in main)
    request = next(q for q in queues.values() if "RolloutRequestQueue.fifo" in str(q["Properties"].get("QueueName")))
    assert request["Properties"]["ContentBasedDeduplication"] is True  # a send without a dedup id is accepted
    assert "RedrivePolicy" in request["Properties"]
    response = next(q for q in queues.values() if "GenerateResponseQueue.fifo" in str(q["Properties"].get("QueueName")))
    assert response["Properties"]["ContentBasedDeduplication"] is True  # Nova may send without a dedup id


def test_training_job_role_reaches_the_rollout_proxy_and_three_queues_and_nothing_else(template):
    roles = {k: v for k, v in _of_type(template, "AWS::IAM::Role").items() if "TrainingJobRole" in k}
    ((role_id, role),) = roles.items()
    assert role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Service": "sagemaker.amazonaws.com"
    }
    policies = [
        p for p in _of_type(template, "AWS::IAM::Policy").values() if {"Ref": role_id} in p["Properties"]["Roles"]
    ]
    statements = [s for p in policies for s in p["Properties"]["PolicyDocument"]["Statement"]]
    actions = {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert actions - {"lambda:InvokeFunction"} and all(
        a.startswith("sqs:") for a in actions - {"lambda:InvokeFunction"}
    )
    invoke = [s for s in statements if s["Action"] == "lambda:InvokeFunction"]
    assert invoke and all("NovaBridgeRolloutProxy" in json.dumps(s["Resource"]) for s in invoke)
    queues = {
        r["Fn::GetAtt"][0]
        for s in statements
        if s["Action"] != "lambda:InvokeFunction"
        for r in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])
    }
    assert len(queues) == 3 and not any("RolloutRequestQueue" in q for q in queues)  # requests go through the proxy
    # No wildcard but the proxy's versions (":*", how CDK grants invoke).
    assert all("*" not in json.dumps(s["Resource"]).replace('":*"', "") for s in statements)


def test_rollouts_get_a_budget_below_rollout_timeout_with_an_alarm_before_it(template):
    functions = _of_type(template, "AWS::Lambda::Function")
    config = next(
        json.loads(f["Properties"]["Environment"]["Variables"]["NOVA_CONFIG"])
        for k, f in functions.items()
        if "NovaBridgeIntake" in k
    )
    assert config["rollout_budget_s"] == 480 and config["error_reward"] == "neutral"
    alarm = next(a for k, a in _of_type(template, "AWS::CloudWatch::Alarm").items() if "RolloutsNearTimeout" in k)
    # The oldest unanswered request's age (seconds), measured every minute while it waits; never ExecutionTime,
    # which Step Functions emits only when an execution ends.
    assert alarm["Properties"]["Threshold"] == 600 * 0.7
    assert alarm["Properties"]["MetricName"] == "NovaOldestUnansweredSeconds"
    rules = _of_type(template, "AWS::Events::Rule")
    assert any(r["Properties"].get("ScheduleExpression") == "rate(1 minute)" for r in rules.values())
    assert any(
        r["Properties"].get("EventPattern", {}).get("detail-type") == ["Step Functions Execution Status Change"]
        for r in rules.values()
    )
    mappings = _of_type(template, "AWS::Lambda::EventSourceMapping")
    assert len(mappings) == 3 and all(m["Properties"]["BatchSize"] == 1 for m in mappings.values())


def test_settings_refuse_an_alarm_after_the_budget():
    from stacks.constructs.nova_bridge import load_nova_settings

    with pytest.raises(ValueError, match="alarm_fraction"):
        load_nova_settings({"enabled": True, "alarm_fraction": 0.9, "budget_fraction": 0.8})
    with pytest.raises(ValueError):
        load_nova_settings({"enabled": True, "error_reward": "random"})


def test_every_nova_handler_is_a_function_of_the_bridge(template):
    from pathlib import Path

    handlers = sorted(
        p.parent.name for p in (Path(__file__).resolve().parents[3] / "functions").glob("nova_*/handler.py")
    )
    bridge = [k for k, f in _of_type(template, "AWS::Lambda::Function").items() if k.startswith("NovaBridge")]
    assert len(handlers) == 6 and len(bridge) == len(handlers)
