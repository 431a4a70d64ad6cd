"""Round twenty-six, infrastructure (an independent review, "the deployed infrastructure as the real services would
treat it"): what the synthesized template grants or configures that a real account would treat differently from
what the stack intends, asserted on the template with the IAM evaluator of tests/aws/iam.py.

* The state machine's role could stop and describe every ECS task in the account. aws-cdk's ``EcsRunTask``
  grants ``ecs:StopTask`` and ``ecs:DescribeTasks`` on ``"*"`` (the task's ARN is unknown before RunTask), and
  the stack's cdk-nag suppression said these actions "do not support resource-level permissions". The Service
  Authorization Reference for Amazon ECS lists both with the resource type ``task*``, whose ARN is
  ``arn:<partition>:ecs:<region>:<account>:task/<cluster name>/<task id>``: the cluster is this stack's, so
  the grant can be bounded to its tasks. An explicit Deny outside them now does so (aws-cdk's statement cannot
  be narrowed in place); Step Functions' ``.sync`` polling and its stop on timeout stay allowed.
"""

from __future__ import annotations

import pytest

from tests.aws import harness, iam

pytestmark = pytest.mark.xdist_group("cdk")

ACCOUNT = "123456789012"
REGION = "eu-west-1"


def _model(template: dict) -> iam.TemplateModel:
    # Every Ref resolves to "<logical id>-ref": the cluster's name is then its logical id with that suffix.
    return iam.TemplateModel(template, lambda logical, attr: f"{logical}-{attr.lower()}", REGION, ACCOUNT)


def _decide(model: iam.TemplateModel, logical: str, action: str, resource: str) -> bool:
    return iam.evaluate(
        iam.Request(action, resource),
        identity=model.identity_policies(logical),
        resource_policies=[],
        endpoint_policy=None,
        principal_arn=model.principal_arn(logical),
        account=ACCOUNT,
        context={},
    ).allowed


@pytest.mark.parametrize("context", ["", harness.NOVA_BRIDGE_CONTEXT], ids=["default", "nova-bridge"])
def test_the_state_machine_stops_and_describes_only_the_tasks_of_its_own_cluster(context):
    template = harness.synthesized(context).template
    model = _model(template)
    (machine,) = model.of_type("AWS::StepFunctions::StateMachine")
    (cluster,) = model.of_type("AWS::ECS::Cluster")
    ours = f"arn:aws:ecs:{REGION}:{ACCOUNT}:task/{cluster}-ref/0123456789abcdef0123456789abcdef"
    for action in ("ecs:StopTask", "ecs:DescribeTasks"):
        # What Step Functions' runTask.sync does with the task it started: allowed.
        assert _decide(model, machine, action, ours), action
        # Any other cluster's task, this account's or another's: refused.
        for other in (
            f"arn:aws:ecs:{REGION}:{ACCOUNT}:task/production/0123456789abcdef0123456789abcdef",
            f"arn:aws:ecs:{REGION}:{ACCOUNT}:task/{cluster}-ref-2/0123456789abcdef0123456789abcdef",
            f"arn:aws:ecs:us-east-1:{ACCOUNT}:task/{cluster}-ref/0123456789abcdef0123456789abcdef",
        ):
            assert not _decide(model, machine, action, other), (action, other)
    # Running the task stays allowed, and nothing else of ECS is.
    (task_definition,) = model.of_type("AWS::ECS::TaskDefinition")
    assert _decide(model, machine, "ecs:RunTask", f"{task_definition}-ref")
    assert not _decide(model, machine, "ecs:StopTask", "*")
