"""Round thirty-six, the AWS deployment: the template read again as an AWS reviewer would.

* Three roles a service assumes trusted the service for any account's resources: the code runner's task role
  (``ecs-tasks.amazonaws.com``) and the VPC flow log's delivery role (``vpc-flow-logs.amazonaws.com``). Both
  services document ``aws:SourceAccount`` and ``aws:SourceArn`` in the trust policy against the cross-service
  confused deputy (Amazon ECS Developer Guide, "Task IAM role"; Amazon VPC User Guide, "IAM role for publishing
  flow logs to CloudWatch Logs"), as the state machine's role already had them; so did the Nova bridge's training
  job role (``sagemaker.amazonaws.com``; SageMaker AI Developer Guide, "Cross-service confused deputy prevention").
  Each now names this account and the service's resources in it.
* No function could be given reserved concurrency: the variance check had no way to be kept from starving while
  scorers took the account's concurrency, and a runaway scorer had no cap. ``lambda.reserved_concurrency`` now
  reserves (and caps) it per function; every entry defaults to none, since reserving any fails stack creation in
  an account whose unreserved concurrency would drop below its minimum (round twenty-nine's test keeps that).
"""

from __future__ import annotations

import json

import pytest

from stacks.config import SettingsError, load_settings

pytestmark = pytest.mark.xdist_group("cdk")


def _of_type(resources: dict, kind: str) -> dict:
    return {name: r for name, r in resources.items() if r["Type"] == kind}


def _flat(value) -> str:
    """A template value as text, intrinsic functions spelled out (Ref X -> ${X})."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        return "".join(_flat(part) for part in value["Fn::Join"][1])
    if isinstance(value, dict) and "Ref" in value:
        return "${" + value["Ref"] + "}"
    return json.dumps(value, sort_keys=True)


def _trust(resources: dict, logical_id: str) -> list[dict]:
    return resources[logical_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]


def _assert_source_limited(statements: list[dict], service: str, arn_prefix: str) -> None:
    (statement,) = [s for s in statements if s["Principal"] == {"Service": service}]
    condition = statement.get("Condition", {})
    assert _flat(condition.get("StringEquals", {}).get("aws:SourceAccount")) == "${AWS::AccountId}", statement
    source_arn = _flat(condition.get("ArnLike", {}).get("aws:SourceArn"))
    assert source_arn.startswith(arn_prefix), statement


@pytest.mark.parametrize(
    ("owner_type", "role_property", "service", "arn_prefix"),
    [
        (
            "AWS::ECS::TaskDefinition",
            "TaskRoleArn",
            "ecs-tasks.amazonaws.com",
            "arn:${AWS::Partition}:ecs:${AWS::Region}:${AWS::AccountId}:",
        ),
        (
            "AWS::EC2::FlowLog",
            "DeliverLogsPermissionArn",
            "vpc-flow-logs.amazonaws.com",
            "arn:${AWS::Partition}:ec2:${AWS::Region}:${AWS::AccountId}:vpc-flow-log/",
        ),
    ],
    ids=["code-runner-task-role", "flow-log-role"],
)
def test_a_role_a_service_assumes_trusts_it_for_this_accounts_resources_only(
    resources, owner_type, role_property, service, arn_prefix
):
    (owner,) = _of_type(resources, owner_type).values()
    role = owner["Properties"][role_property]["Fn::GetAtt"][0]
    _assert_source_limited(_trust(resources, role), service, arn_prefix)


def test_the_nova_training_job_role_trusts_sagemaker_for_this_accounts_resources_only():
    from tests.aws import harness

    resources = harness.synthesized(harness.NOVA_BRIDGE_CONTEXT).template["Resources"]
    (role,) = [k for k in _of_type(resources, "AWS::IAM::Role") if k.startswith("NovaBridgeTrainingJobRole")]
    _assert_source_limited(
        _trust(resources, role),
        "sagemaker.amazonaws.com",
        "arn:${AWS::Partition}:sagemaker:*:${AWS::AccountId}:",
    )


# -- reserved concurrency -----------------------------------------------------------------------------------

RESERVED = {"variance_check": 3, "code_runner": 200, "score": 150, "single_turn_reward": 250}
# The logical-id prefix of each function the settings name.
FUNCTIONS = {
    "variance_check": "MonitoringVarianceCheck",
    "code_runner": "CodeRunnerFunction",
    "score": "RolloutWorkflowScore",
    "single_turn_reward": "SingleTurnRewardFunction",
}


def test_reserved_concurrency_defaults_to_none_for_every_function():
    reserved = load_settings({}).functions.reserved_concurrency.model_dump()
    assert reserved == {**dict.fromkeys(RESERVED), "account_concurrency": 1000}


def test_reserved_concurrency_reserves_each_named_function_and_no_other(tmp_path):
    from app import build_app

    context = {"rewardpipe": {"stack_name": "RewardPipeReserved", "lambda": {"reserved_concurrency": RESERVED}}}
    app, stack = build_app(context=context, outdir=str(tmp_path))
    resources = app.synth().get_stack_artifact(stack.artifact_id).template["Resources"]
    reserved = {
        logical: fn["Properties"]["ReservedConcurrentExecutions"]
        for logical, fn in _of_type(resources, "AWS::Lambda::Function").items()
        if "ReservedConcurrentExecutions" in fn["Properties"]
    }
    expected = {}
    for setting, prefix in FUNCTIONS.items():
        (logical,) = [k for k in _of_type(resources, "AWS::Lambda::Function") if k.startswith(prefix)]
        expected[logical] = RESERVED[setting]
    assert reserved == expected


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"variance_check": 0}, "lambda.reserved_concurrency.variance_check"),
        ({"code_runner": -1}, "lambda.reserved_concurrency.code_runner"),
        ({"score": 1.5}, "lambda.reserved_concurrency.score"),
        ({"scorer": 10}, "lambda.reserved_concurrency.scorer"),
    ],
)
def test_a_bad_reservation_is_refused_naming_it(value, problem):
    with pytest.raises(SettingsError) as caught:
        load_settings({"lambda": {"reserved_concurrency": value}})
    assert problem in str(caught.value)


def test_reservations_that_leave_less_than_the_unreserved_minimum_are_refused():
    """Lambda keeps 100 of an account's concurrency unreserved; the quota is 1,000 unless raised
    (``account_concurrency``). Reservations above the rest fail stack creation: refused at synth, naming the total."""
    too_much = {"code_runner": 600, "single_turn_reward": 400}
    with pytest.raises(SettingsError) as caught:
        load_settings({"lambda": {"reserved_concurrency": too_much}})
    assert "1000" in str(caught.value) and "account_concurrency" in str(caught.value)
    raised = load_settings({"lambda": {"reserved_concurrency": {**too_much, "account_concurrency": 1100}}})
    assert raised.functions.reserved_concurrency.code_runner == 600
