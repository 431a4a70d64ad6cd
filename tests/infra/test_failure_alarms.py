"""Alarms where a failure costs a training job (issue 18, item 5), and the code runner's lack of data access
(item 2): template checks, in the default stack and in the one with the Nova bridge."""

from __future__ import annotations

import json

import pytest

from tests.aws import harness

pytestmark = pytest.mark.xdist_group("cdk")

CONTEXTS = pytest.mark.parametrize("context", ["", harness.NOVA_BRIDGE_CONTEXT], ids=["default", "nova-bridge"])


def _of_type(template, cfn_type):
    return {k: v for k, v in template["Resources"].items() if v["Type"] == cfn_type}


def _alarms_on(template, namespace, metric):
    """{resource logical id: alarm properties} of the alarms on ``metric`` of one resource."""
    out = {}
    for alarm in _of_type(template, "AWS::CloudWatch::Alarm").values():
        props = alarm["Properties"]
        if props.get("Namespace") == namespace and props.get("MetricName") == metric:
            for dimension in props.get("Dimensions", []):
                value = dimension["Value"]
                out[value.get("Ref") or value.get("Fn::GetAtt", [None])[0]] = props
    return out


@CONTEXTS
def test_every_rollout_function_the_runner_and_the_reward_lambda_alarm_on_errors_and_throttles(context):
    template = harness.synthesized(context).template
    functions = [
        k
        for k, f in _of_type(template, "AWS::Lambda::Function").items()
        if str(f["Properties"].get("Runtime", "")).startswith("python")
    ]
    must = [
        k
        for k in functions
        if k.startswith(
            ("RolloutWorkflow", "CodeRunnerFunction", "SingleTurnReward", "MonitoringVarianceCheck", "NovaBridge")
        )
    ]
    assert len(must) == (7 if not context else 13)  # 4 rollout states, runner, reward Lambda, check (+ 6 bridge)
    topic = next(iter(_of_type(template, "AWS::SNS::Topic")))
    for metric in ("Errors", "Throttles"):
        alarmed = _alarms_on(template, "AWS/Lambda", metric)
        for fn in must:
            props = alarmed.get(fn)
            assert props is not None, (fn, metric)
            assert props["Threshold"] == 0 and props["ComparisonOperator"] == "GreaterThanThreshold"
            assert props["Statistic"] == "Sum" and props["EvaluationPeriods"] == 1
            assert props["TreatMissingData"] == "notBreaching"  # an idle function is healthy
            assert props["AlarmActions"] == [{"Ref": topic}] and props["AlarmName"].startswith("RewardPipe-")


@CONTEXTS
def test_every_dead_letter_queue_alarms_on_its_first_message(context):
    template = harness.synthesized(context).template
    queues = _of_type(template, "AWS::SQS::Queue")
    dead_letter_queues = {
        q["Properties"]["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
        for q in queues.values()
        if "RedrivePolicy" in q["Properties"]
    }
    # The variance check's queue is a dead-letter queue of its schedule target and its asynchronous invokes.
    dead_letter_queues |= {k for k in queues if k.startswith("MonitoringCheckDeadLetters")}
    assert len(dead_letter_queues) == (2 if not context else 7)
    alarmed = _alarms_on(template, "AWS/SQS", "ApproximateNumberOfMessagesVisible")
    for queue in dead_letter_queues:
        props = alarmed.get(queue)
        assert props is not None, queue
        assert props["Threshold"] == 0 and props["ComparisonOperator"] == "GreaterThanThreshold"
        assert props["Statistic"] == "Maximum" and props["TreatMissingData"] == "ignore"  # see round thirty-one
        assert props["AlarmActions"], queue


def test_alarm_names_are_unique_and_within_the_topics_grant(synth):
    names = [a["Properties"]["AlarmName"] for a in _of_type(synth.template, "AWS::CloudWatch::Alarm").values()]
    assert len(names) == len(set(names)) and all(n.startswith("RewardPipe-") for n in names)
    nova = [
        a["Properties"]["AlarmName"]
        for a in _of_type(harness.synthesized(harness.NOVA_BRIDGE_CONTEXT).template, "AWS::CloudWatch::Alarm").values()
    ]
    assert len(nova) == len(set(nova))


def test_the_code_runner_lambda_has_no_data_access_and_gets_its_job_inline(synth):
    """The runner's credentials live in the VPC where model code runs: it may touch no object at all. The job
    comes in its invoke payload (rewardpipe.aws.jobs), and the conversation states and Score invoke it."""
    template = synth.template
    runner = next(k for k in _of_type(template, "AWS::Lambda::Function") if k.startswith("CodeRunnerFunction"))
    role = template["Resources"][runner]["Properties"]["Role"]["Fn::GetAtt"][0]
    statements = [
        st
        for p in _of_type(template, "AWS::IAM::Policy").values()
        if {"Ref": role} in p["Properties"]["Roles"]
        for st in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    actions = {a for st in statements for a in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])}
    assert not [a for a in actions if a.startswith(("s3:", "sqs:", "states:", "lambda:"))], actions
    variables = template["Resources"][runner]["Properties"]["Environment"]["Variables"]
    assert "BUCKET" not in variables
    for prefix in ("RolloutWorkflowStartEpisode", "RolloutWorkflowConverse", "RolloutWorkflowScore"):
        fn = next(k for k in _of_type(template, "AWS::Lambda::Function") if k.startswith(prefix))
        fn_role = template["Resources"][fn]["Properties"]["Role"]["Fn::GetAtt"][0]
        grants = [
            st
            for p in _of_type(template, "AWS::IAM::Policy").values()
            if {"Ref": fn_role} in p["Properties"]["Roles"]
            for st in p["Properties"]["PolicyDocument"]["Statement"]
        ]
        assert any(
            "lambda:InvokeFunction" in json.dumps(st["Action"]) and runner in json.dumps(st["Resource"])
            for st in grants
        ), prefix
    # Score waits for a job it runs itself: it lives as long as the runner may.
    score = next(k for k in _of_type(template, "AWS::Lambda::Function") if k.startswith("RolloutWorkflowScore"))
    assert (
        template["Resources"][score]["Properties"]["Timeout"] >= template["Resources"][runner]["Properties"]["Timeout"]
    )
