"""Names derived from the stack name fit their services' limits, or the synth fails naming ``stack_name``; the
dashboard and DNS Firewall are named per stack and region; what differs between partitions resolves right
in each supported one (issue 18 items 4 and 6)."""

from __future__ import annotations

import json
import re

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_ec2 as ec2

from stacks.names import NameProblem, name_problems, render, rules, stack_name_message
from stacks.partitions import SUPPORTED_PARTITIONS, partitions, supported
from tests.aws import harness

pytestmark = pytest.mark.xdist_group("cdk")


def _of_type(template: dict, cfn_type: str) -> dict[str, dict]:
    return {k: r["Properties"] for k, r in template["Resources"].items() if r["Type"] == cfn_type}


def _env(partition: str, region: str) -> dict[str, str]:
    return {
        "AWS::Partition": partition,
        "AWS::Region": region,
        "AWS::URLSuffix": partitions()[partition].dns_suffix,
        "AWS::AccountId": "123456789012",
    }


# -- the limits --------------------------------------------------------------------------------------------


def test_limits_come_from_botocores_service_models_or_the_api_references():
    limits = {key: rule.max_length for key, rule in rules().items()}
    assert limits[("AWS::SQS::Queue", "QueueName")] == 80  # .fifo included
    assert limits[("AWS::Lambda::Function", "FunctionName")] == 64
    assert limits[("AWS::StepFunctions::StateMachine", "StateMachineName")] == 80
    assert limits[("AWS::Route53Resolver::FirewallDomainList", "Name")] == 64
    assert limits[("AWS::IAM::Role", "RoleName")] == 64
    assert limits[("AWS::Logs::LogGroup", "LogGroupName")] == 512
    assert limits[("AWS::CloudWatch::Alarm", "AlarmName")] == 255
    assert "botocore" in rules()[("AWS::Events::Rule", "Name")].source


def test_the_longest_region_of_each_supported_partition_is_botocores():
    assert [p.name for p in supported()] == list(SUPPORTED_PARTITIONS)
    assert len(partitions()["aws"].longest_region) >= len("ap-southeast-1")
    assert all(not r.endswith("-global") for p in supported() for r in p.regions)


def test_a_name_is_checked_with_the_longest_region_and_every_supported_partition():
    template = {
        "Resources": {
            "Q": {
                "Type": "AWS::SQS::Queue",
                "Properties": {"QueueName": {"Fn::Join": ["", ["s-", {"Ref": "AWS::Region"}, "-", "x" * 60, ".fifo"]]}},
            }
        }
    }
    longest = max(len(p.longest_region) for p in supported())
    fits = 80 - len("s--.fifo") - longest
    template["Resources"]["Q"]["Properties"]["QueueName"]["Fn::Join"][1][3] = "x" * fits
    assert name_problems(template, "s") == []
    template["Resources"]["Q"]["Properties"]["QueueName"]["Fn::Join"][1][3] = "x" * (fits + 1)
    (problem,) = name_problems(template, "s")
    assert "81 characters" in problem.reason and "more than 80" in problem.reason


def test_names_with_bad_characters_or_that_cannot_be_bounded_are_problems():
    template = {
        "Resources": {
            "D": {"Type": "AWS::CloudWatch::Dashboard", "Properties": {"DashboardName": "has.dot"}},
            "F": {"Type": "AWS::Lambda::Function", "Properties": {"FunctionName": {"Fn::GetAtt": ["X", "Name"]}}},
            "L": {
                "Type": "AWS::Logs::LogGroup",
                "Properties": {"LogGroupName": {"Fn::Join": ["", ["/aws/lambda/", {"Ref": "G"}]]}},
            },
            "G": {"Type": "AWS::Lambda::Function", "Properties": {}},
        }
    }
    problems = {p.logical_id: p.reason for p in name_problems(template, "s")}
    assert set(problems) == {"D", "F"}  # L: a generated function name is at most 64 characters, it fits
    assert "characters outside" in problems["D"] and "cannot be checked at synth" in problems["F"]


@pytest.mark.parametrize("context", ["", harness.NOVA_BRIDGE_CONTEXT], ids=["default", "nova-bridge"])
def test_every_name_of_the_default_stack_fits_in_every_supported_partition(context):
    synth = harness.synthesized(context)
    assert name_problems(synth.template, synth.stack.stack_name) == []


# -- the stack name ------------------------------------------------------------------------------------------


def _synth_errors(tmp_path, stack_name: str, nova: bool) -> tuple[list[str], dict]:
    from app import build_app, synth_errors

    context = {"rewardpipe": {"stack_name": stack_name}, **({"rewardpipe_nova": {"enabled": True}} if nova else {})}
    app, stack = build_app(context=context, outdir=str(tmp_path / stack_name))
    errors = synth_errors(app, stack)
    return errors, json.loads((tmp_path / stack_name / f"{stack_name}.template.json").read_text())


def test_a_45_character_stack_name_fails_the_synth_and_the_longest_allowed_one_fits_exactly(tmp_path):
    """The reported case: 45 characters made 85-character SQS names (limit 80, .fifo included) and cut
    "SageMaker" out of the reward function's name. Now the synth fails naming rewardpipe.stack_name, its value,
    the longest value every derived name allows and each name too long; and that longest value synthesizes,
    with one derived name exactly at its limit (one character more would be refused)."""
    name = "A" + "b" * 44
    errors, template = _synth_errors(tmp_path, name, nova=True)
    (message,) = [e for e in errors if "rewardpipe.stack_name" in e]
    assert (
        f"'{name}' (45 characters)" in message and "AWS::SQS::Queue QueueName" in message and "more than 80" in message
    )
    (reward,) = [
        f
        for f in _of_type(template, "AWS::Lambda::Function").values()
        if str(f.get("FunctionName", "")).endswith("-SageMaker-reward")
    ]
    assert reward["FunctionName"] == f"{name}-SageMaker-reward"  # never truncated
    longest = int(re.search(r"use at most (\d+) characters", message).group(1))
    # "-SageMaker-GenerateResponseQueue-dlq.fifo" takes 41 of an SQS name's 80 characters
    assert longest <= 39

    fits = "A" + "b" * (longest - 1)
    errors, template = _synth_errors(tmp_path, fits, nova=True)
    assert not [e for e in errors if "stack_name" in e], errors
    tight = [
        len(render(props[prop], template, env)) - limit
        for (cfn_type, prop), rule in rules().items()
        for props in _of_type(template, cfn_type).values()
        if prop in props
        for env, limit in ((e, rule.max_length) for e in _envs(fits))
    ]
    assert max(tight) == 0
    (reward,) = [
        f["FunctionName"]
        for f in _of_type(template, "AWS::Lambda::Function").values()
        if str(f.get("FunctionName", "")).endswith("-SageMaker-reward")
    ]
    assert reward == f"{fits}-SageMaker-reward" and len(reward) <= 64


def _envs(stack_name: str) -> list[dict[str, str]]:
    from stacks.names import environments

    return environments(stack_name)


def test_the_message_computes_the_longest_stack_name_each_name_allows():
    problems = [
        NameProblem("Q", "AWS::SQS::Queue", "QueueName", "x" * 85, "too long", 40),
        NameProblem("F", "AWS::Lambda::Function", "FunctionName", "x" * 70, "too long", 39),
    ]
    assert "use at most 39 characters" in stack_name_message("x" * 45, problems)


# -- per stack and region; partitions -------------------------------------------------------------------------


def test_dashboard_and_dns_firewall_names_carry_the_stack_and_the_region(synth):
    names = [
        (_of_type(synth.template, t), p)
        for t, p in (
            ("AWS::CloudWatch::Dashboard", "DashboardName"),
            ("AWS::Route53Resolver::FirewallDomainList", "Name"),
            ("AWS::Route53Resolver::FirewallRuleGroup", "Name"),
            ("AWS::Route53Resolver::FirewallRuleGroupAssociation", "Name"),
        )
    ]
    rendered = []
    for resources, prop in names:
        assert resources
        for props in resources.values():
            east = render(props[prop], synth.template, _env("aws", "us-east-1"))
            west = render(props[prop], synth.template, _env("aws", "eu-west-1"))
            assert east.startswith("RewardPipe-us-east-1-") and west.startswith("RewardPipe-eu-west-1-")
            rendered.append(east)
    assert len(set(rendered)) == len(rendered) - 1  # the rule group and its association share a name


@pytest.mark.parametrize(
    "partition, region",
    [("aws", "us-east-1"), ("aws-cn", "cn-north-1"), ("aws-cn", "cn-northwest-1"), ("aws-us-gov", "us-gov-west-1")],
)
def test_dns_firewall_and_endpoint_names_resolve_for_each_partition(synth, partition, region):
    """The DNS Firewall allows the partition's own AWS domain (botocore's dnsSuffix: amazonaws.com.cn in China),
    and each interface endpoint's service name is the one CDK itself uses for that region (the oracle: an
    endpoint service resolved in a stack pinned to the region)."""
    env = _env(partition, region)
    suffix = partitions()[partition].dns_suffix
    allowed = [
        render(d, synth.template, env)
        for props in _of_type(synth.template, "AWS::Route53Resolver::FirewallDomainList").values()
        for d in props["Domains"]
        if d != "*"
    ]
    assert allowed == [suffix, f"*.{suffix}"]
    endpoints = sorted(
        render(e["ServiceName"], synth.template, env)
        for e in _of_type(synth.template, "AWS::EC2::VPCEndpoint").values()
    )
    pinned = Stack(App(), "Pinned", env={"region": region, "account": "123456789012"})
    services = (
        ec2.GatewayVpcEndpointAwsService.S3,
        ec2.InterfaceVpcEndpointAwsService.ECR,
        ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER,
        ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
    )
    expected = sorted(render(pinned.resolve(s.name), {}, env) for s in services)
    assert endpoints == expected


def test_the_partition_mapping_covers_exactly_the_supported_partitions(synth):
    mappings = [m for m in synth.template.get("Mappings", {}).values() if "aws-cn" in m]
    (mapping,) = mappings
    assert sorted(mapping) == sorted(SUPPORTED_PARTITIONS)
    assert {v["DnsSuffix"] for v in mapping.values()} == {"amazonaws.com", "amazonaws.com.cn"}
