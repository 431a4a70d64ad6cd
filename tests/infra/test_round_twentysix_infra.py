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
* A Nova rollout could end as a ``timeout`` error record long before its budget. The conversation states wait for
  their turn's task token at most an hour (``TimeoutSeconds`` 3600, then ``States.Timeout``, caught into an
  error record); with the bridge, a turn is Nova generating it, and ``rollout_timeout_s`` may be up to a day, each
  rollout getting ``budget_fraction`` of it (the sweeper stops it then). With ``rollout_timeout_s`` 7,200 (a
  5,760 s budget), a turn Nova took 61 minutes to generate ended the rollout with the error reward after 61
  minutes instead of 96. The conversation states now wait up to ``rollout_timeout_s`` when the bridge's is longer
  than the hour (Nova has failed the training job by then anyway, so it never cuts a turn the budget allows).
* The same rollouts could lose a message: the bridge's four FIFO queues kept a message 4 hours
  (``MessageRetentionPeriod`` 14,400; SQS deletes a message older than that, received or not), whatever
  ``rollout_timeout_s``. A generate request Nova had not yet taken after 4 hours of a 12-hour rollout was deleted,
  and the rollout waited for a turn that never came until the sweeper answered it with the error reward. Each queue
  now keeps a message at least ``rollout_timeout_s``.
"""

from __future__ import annotations

import json

import pytest

from tests.aws import harness, iam

pytestmark = pytest.mark.xdist_group("cdk")

ACCOUNT = "123456789012"
REGION = "eu-west-1"


def _model(template: dict) -> iam.TemplateModel:
    # Every Ref resolves to "<logical id>-ref": the cluster's name is then its logical id with that suffix.
    return iam.TemplateModel(template, lambda logical, attr: f"{logical}-{attr.lower()}", REGION, ACCOUNT)


def _decide(model: iam.TemplateModel, logical: str, action: str, resource: str, keys: dict | None = None) -> bool:
    return iam.evaluate(
        iam.Request(action, resource, keys or {}),
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
    assert _decide(model, machine, "ecs:RunTask", f"{task_definition}-ref", {"ecs:cluster": (f"{cluster}-arn",)})
    assert not _decide(model, machine, "ecs:StopTask", "*")


def _turn_timeouts(template: dict) -> dict[str, int]:
    (machine,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::StepFunctions::StateMachine"]
    body = machine["Properties"]["DefinitionString"]
    text = "".join(p if isinstance(p, str) else "0" for p in body["Fn::Join"][1]) if isinstance(body, dict) else body
    states = json.loads(text)["States"]
    return {
        name: state["TimeoutSeconds"]
        for name, state in states.items()
        if "waitForTaskToken" in state.get("Resource", "")
    }


def test_a_nova_turn_may_wait_as_long_as_the_rollout_timeout_when_that_is_over_an_hour():
    long = json.loads(harness.NOVA_BRIDGE_CONTEXT)
    long["rewardpipe_nova"]["rollout_timeout_s"] = 7200
    timeouts = _turn_timeouts(harness.synthesized(json.dumps(long, sort_keys=True)).template)
    assert set(timeouts) == {"StartEpisodeStep", "ConverseStep"}
    assert all(t == 7200 for t in timeouts.values()), timeouts
    # The bridge's default (600 s) and no bridge at all keep the trainer's hour.
    for context in ("", harness.NOVA_BRIDGE_CONTEXT):
        assert set(_turn_timeouts(harness.synthesized(context).template).values()) == {3600}, context


def _nova_queue_retention(template: dict) -> dict[str, int]:
    return {
        r["Properties"]["QueueName"]: r["Properties"]["MessageRetentionPeriod"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::SQS::Queue"
        and r["Properties"].get("FifoQueue")
        and not str(r["Properties"].get("QueueName", "")).endswith("-dlq.fifo")
    }


def test_a_nova_queue_keeps_a_message_as_long_as_a_rollout_may_wait_for_it():
    long = json.loads(harness.NOVA_BRIDGE_CONTEXT)
    long["rewardpipe_nova"]["rollout_timeout_s"] = 43_200
    retention = _nova_queue_retention(harness.synthesized(json.dumps(long, sort_keys=True)).template)
    assert len(retention) == 4 and all(seconds >= 43_200 for seconds in retention.values()), retention
    # A short rollout.timeout keeps the 4 hours.
    assert set(_nova_queue_retention(harness.synthesized(harness.NOVA_BRIDGE_CONTEXT).template).values()) == {14_400}
