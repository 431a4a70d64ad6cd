"""Round twenty-eight, infrastructure: what the synthesized template grants or configures that the real services
would treat differently from what the stack intends (moto enforces no IAM and drops no event).

* The state machine's role could run the code-runner task on any cluster of the account. aws-cdk's ``EcsRunTask``
  grants ``ecs:RunTask`` on the task definition with no condition, and RunTask's cluster is a request parameter:
  whoever could steer the role (or a later edit of the definition) could place the sandbox task, with its role
  and its access to ``jobs/``, on another cluster (another VPC, other instances). The Service Authorization
  Reference lists the ``ecs:cluster`` condition key for RunTask (the cluster's ARN), and the Amazon ECS
  identity-based policy examples bound RunTask to one cluster with ``ArnEquals`` on it. An explicit Deny now
  refuses RunTask whenever ``ecs:cluster`` is not this stack's cluster; the moto harness carries the key as ECS
  does (the cluster's ARN, the default cluster when none is named), so the state machine's real runs stay allowed.
* The Nova bridge's EventBridge targets had no dead-letter queue and its functions no failure destination. An
  execution's status-change event the responder could not take (EventBridge gave up delivering it, or Lambda's
  asynchronous retries all failed) was dropped without a trace: the scored rollout was answered only when the
  sweeper reached its budget, and nothing said why. Every EventBridge target of the stack now has a dead-letter
  queue, every function an EventBridge rule invokes sends failed asynchronous invocations to one as well, and each
  such queue is alarmed.
"""

from __future__ import annotations

import json

import pytest

from tests.aws import harness, iam
from tests.infra.test_round_twentysix_infra import ACCOUNT, REGION, _decide, _model

pytestmark = pytest.mark.xdist_group("cdk")

CONTEXTS = pytest.mark.parametrize("context", ["", harness.NOVA_BRIDGE_CONTEXT], ids=["default", "nova-bridge"])


# -- ecs:RunTask only on the stack's own cluster ------------------------------------------------------------------


@CONTEXTS
def test_the_state_machine_runs_the_task_only_on_its_own_cluster(context):
    template = harness.synthesized(context).template
    model = _model(template)
    (machine,) = model.of_type("AWS::StepFunctions::StateMachine")
    (cluster,) = model.of_type("AWS::ECS::Cluster")
    (task_definition,) = model.of_type("AWS::ECS::TaskDefinition")
    ours = model.resolve({"Fn::GetAtt": [cluster, "Arn"]})

    def run_on(cluster_arn: str | None) -> bool:
        keys = {} if cluster_arn is None else {"ecs:cluster": (cluster_arn,)}
        return _decide(model, machine, "ecs:RunTask", f"{task_definition}-ref", keys)

    assert run_on(ours)
    for other in (
        f"arn:aws:ecs:{REGION}:{ACCOUNT}:cluster/default",
        f"arn:aws:ecs:{REGION}:{ACCOUNT}:cluster/production",
        f"{ours}-2",
        None,  # a request that does not carry the key is refused too (ArnEquals would not match it)
    ):
        assert not run_on(other), other


def test_the_harness_carries_ecs_cluster_on_run_task_as_ecs_does():
    """RunTask's ecs:cluster is the cluster's ARN whether the request names it or its short name, and the
    default cluster's when it names none."""
    arn = f"arn:aws:ecs:{REGION}:{ACCOUNT}:cluster/runner"
    for params, expected in (
        ({"cluster": arn}, arn),
        ({"cluster": "runner"}, arn),
        ({}, f"arn:aws:ecs:{REGION}:{ACCOUNT}:cluster/default"),
    ):
        (run, *_) = iam.requests_for("ecs", "RunTask", {"taskDefinition": "f:1", **params}, REGION, ACCOUNT)
        assert run.action == "ecs:RunTask" and run.context == {"ecs:cluster": (expected,)}, params


# -- EventBridge targets and their failures -----------------------------------------------------------------------


def _of_type(resources: dict, cfn_type: str) -> dict[str, dict]:
    return {k: v for k, v in resources.items() if v["Type"] == cfn_type}


def _queue_of(value: dict) -> str:
    (logical, attr) = value["Fn::GetAtt"]
    assert attr == "Arn"
    return logical


def _alarmed_queues(resources: dict) -> set[str]:
    out = set()
    for alarm in _of_type(resources, "AWS::CloudWatch::Alarm").values():
        props = alarm["Properties"]
        if props.get("Namespace") != "AWS/SQS" or props.get("MetricName") != "ApproximateNumberOfMessagesVisible":
            continue
        if props["Threshold"] != 0 or props["ComparisonOperator"] != "GreaterThanThreshold":
            continue
        if not props.get("AlarmActions"):
            continue
        for dimension in props.get("Dimensions", []):
            out.add(dimension["Value"]["Fn::GetAtt"][0])
    return out


@CONTEXTS
def test_every_eventbridge_target_and_its_function_keep_what_they_could_not_deliver(context):
    resources = harness.synthesized(context).template["Resources"]
    rules = _of_type(resources, "AWS::Events::Rule")
    assert len(rules) == (3 if context else 1)
    configs = {
        c["Properties"]["FunctionName"]["Ref"]: c["Properties"]
        for c in _of_type(resources, "AWS::Lambda::EventInvokeConfig").values()
    }
    alarmed = _alarmed_queues(resources)
    for name, rule in rules.items():
        for target in rule["Properties"]["Targets"]:
            # EventBridge's own failures (the invoke refused or throttled past its retries) ...
            assert "DeadLetterConfig" in target, (name, target["Id"])
            queue = _queue_of(target["DeadLetterConfig"]["Arn"])
            assert queue in alarmed, (name, queue)
            # ... and the function's (Lambda's asynchronous retries exhausted): a target is invoked asynchronously.
            function = target["Arn"]["Fn::GetAtt"][0]
            assert function in configs, (name, function)
            on_failure = configs[function]["DestinationConfig"]["OnFailure"]["Destination"]
            assert _queue_of(on_failure) in alarmed, (name, function)


def test_the_bridge_event_queue_takes_messages_only_from_the_bridge_rules():
    resources = harness.synthesized(harness.NOVA_BRIDGE_CONTEXT).template["Resources"]
    rules = {k for k, v in _of_type(resources, "AWS::Events::Rule").items() if k.startswith("NovaBridge")}
    assert len(rules) == 2
    text = json.dumps(list(_of_type(resources, "AWS::SQS::QueuePolicy").values()))
    for rule in rules:
        assert rule in text, rule


# -- every function's log group expires ---------------------------------------------------------------------------


@CONTEXTS
def test_every_function_of_the_stack_logs_to_a_group_that_expires(context):
    """A function with no LoggingConfig logs to /aws/lambda/<name>, which Lambda creates on first use with no
    retention (kept, and billed, forever) and CloudFormation never deletes. The stack's own functions had their
    groups; aws-cdk's custom-resource handlers (the default security group's restriction, the S3 prefix-list
    lookup) did not, and every deploy that ran them wrote logs there."""
    resources = harness.synthesized(context).template["Resources"]
    groups = _of_type(resources, "AWS::Logs::LogGroup")
    functions = _of_type(resources, "AWS::Lambda::Function")
    assert len(functions) >= 9
    for name, function in functions.items():
        group = function["Properties"].get("LoggingConfig", {}).get("LogGroup")
        assert isinstance(group, dict) and group.get("Ref") in groups, name
        assert groups[group["Ref"]]["Properties"].get("RetentionInDays"), name
    # and no group of the stack keeps its logs forever
    assert all(group["Properties"].get("RetentionInDays") for group in groups.values()), groups
