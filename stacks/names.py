"""Every name the stack gives a resource, checked against that service's limit at synth.

Names are derived from ``stack_name`` (and some from the region): ``<stack>-SageMaker-<queue>-dlq.fifo``,
``<stack>-SageMaker-reward``, ``<stack>-rollouts``, ``<stack>-<region>-rewards``... A stack name that makes one of
them too long used to pass the synth and fail the deployment half-way. :func:`name_problems` walks the
synthesized template instead of a list of known names, so a name a construct adds later is checked too: each
explicit name property of a resource type in :func:`rules` is rendered for every supported partition (with its
longest region name, see stacks/partitions.py) and compared with the limit and characters the service allows.

The limits come from the service models botocore ships where they state them (``min``/``max``/``pattern`` of
the API member that sets the name) and from the API references where they do not (:data:`DOCUMENTED`).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Any

from stacks.partitions import ACCOUNT_ID_SAMPLE, supported


@dataclass(frozen=True)
class NameRule:
    max_length: int
    pattern: str | None
    source: str


# (resource type, name property) -> (service, operation, member) whose model states the limit.
FROM_SERVICE_MODELS = {
    ("AWS::StepFunctions::StateMachine", "StateMachineName"): ("stepfunctions", "CreateStateMachine", "name"),
    ("AWS::CloudWatch::Alarm", "AlarmName"): ("cloudwatch", "PutMetricAlarm", "AlarmName"),
    ("AWS::Logs::LogGroup", "LogGroupName"): ("logs", "CreateLogGroup", "logGroupName"),
    ("AWS::Events::Rule", "Name"): ("events", "PutRule", "Name"),
    ("AWS::IAM::Role", "RoleName"): ("iam", "CreateRole", "RoleName"),
    ("AWS::IAM::ManagedPolicy", "ManagedPolicyName"): ("iam", "CreatePolicy", "PolicyName"),
    ("AWS::IAM::Policy", "PolicyName"): ("iam", "PutRolePolicy", "PolicyName"),
    ("AWS::KMS::Alias", "AliasName"): ("kms", "CreateAlias", "AliasName"),
    ("AWS::Route53Resolver::FirewallDomainList", "Name"): ("route53resolver", "CreateFirewallDomainList", "Name"),
    ("AWS::Route53Resolver::FirewallRuleGroup", "Name"): ("route53resolver", "CreateFirewallRuleGroup", "Name"),
    ("AWS::Route53Resolver::FirewallRuleGroupAssociation", "Name"): (
        "route53resolver",
        "AssociateFirewallRuleGroup",
        "Name",
    ),
}
# Limits the service models leave out, as the API references state them.
DOCUMENTED = {
    ("AWS::SQS::Queue", "QueueName"): NameRule(
        80,
        r"[A-Za-z0-9_-]+(\.fifo)?",
        "SQS CreateQueue: up to 80 characters, alphanumerics, hyphens and underscores; a FIFO queue's name ends "
        "in .fifo, which counts",
    ),
    ("AWS::Lambda::Function", "FunctionName"): NameRule(
        64, r"[a-zA-Z0-9_-]+", "Lambda CreateFunction: a function name alone is limited to 64 characters"
    ),
    ("AWS::CloudWatch::Dashboard", "DashboardName"): NameRule(
        255, r"[A-Za-z0-9_-]+", "CloudWatch PutDashboard: up to 255 characters, only A-Z, a-z, 0-9, - and _"
    ),
    ("AWS::SNS::Topic", "TopicName"): NameRule(
        256, r"[A-Za-z0-9_-]+(\.fifo)?", "SNS CreateTopic: up to 256 characters, alphanumerics, hyphens, underscores"
    ),
    ("AWS::ECS::Cluster", "ClusterName"): NameRule(
        255, r"[A-Za-z0-9_-]+", "ECS CreateCluster: up to 255 letters, numbers, underscores and hyphens"
    ),
    ("AWS::ECS::TaskDefinition", "Family"): NameRule(
        255, r"[A-Za-z0-9_-]+", "ECS RegisterTaskDefinition: up to 255 letters, numbers, underscores and hyphens"
    ),
    ("AWS::S3::Bucket", "BucketName"): NameRule(
        63, r"[a-z0-9][a-z0-9.-]*[a-z0-9]", "S3 bucket naming rules: 3 to 63 lowercase characters"
    ),
}


@functools.cache
def rules() -> dict[tuple[str, str], NameRule]:
    """Every checked (resource type, property) with its limit, the model-stated ones read from botocore."""
    import botocore.session

    session = botocore.session.get_session()
    out = dict(DOCUMENTED)
    for key, (service, operation, member) in FROM_SERVICE_MODELS.items():
        shape = session.get_service_model(service).operation_model(operation).input_shape.members[member]
        out[key] = NameRule(
            int(shape.metadata["max"]),
            shape.metadata.get("pattern"),
            f"{service} {operation} {member} (botocore's service model)",
        )
    return out


# Resource types whose Ref is their name: a name built from such a Ref (``/aws/lambda/<function>``) is as long as
# that resource's explicit name, or, when CloudFormation generates it, at most its type's limit.
REF_IS_NAME = {
    "AWS::Lambda::Function": "FunctionName",
    "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::IAM::Role": "RoleName",
    "AWS::ECS::Cluster": "ClusterName",
}


class Unresolvable(ValueError):
    """A name depends on something known only at deploy time other than the region or partition."""


def render(value: Any, template: dict, pseudo: dict[str, str]) -> str:
    """The string a name property becomes once deployed with the pseudo parameters ``pseudo``."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((fn, arg),) = value.items()
        if fn == "Ref" and arg in pseudo:
            return pseudo[arg]
        target = template.get("Resources", {}).get(arg) if fn == "Ref" and isinstance(arg, str) else None
        if target is not None and target["Type"] in REF_IS_NAME:
            prop = REF_IS_NAME[target["Type"]]
            explicit = (target.get("Properties") or {}).get(prop)
            if explicit is not None:
                return render(explicit, template, pseudo)
            return "g" * rules()[(target["Type"], prop)].max_length  # generated: CloudFormation keeps it in bounds
        if fn == "Fn::Join":
            separator, parts = arg
            return separator.join(render(p, template, pseudo) for p in parts)
        if fn == "Fn::FindInMap":
            mapping, top, second = (render(a, template, pseudo) for a in arg)
            try:
                return str(template["Mappings"][mapping][top][second])
            except KeyError:
                raise Unresolvable(f"mapping {mapping}[{top}][{second}] does not exist") from None
    raise Unresolvable(f"{value!r} is only known at deploy time")


def environments(stack_name: str) -> list[dict[str, str]]:
    """The pseudo parameters of the longest names per supported partition."""
    return [
        {
            "AWS::Region": p.longest_region,
            "AWS::Partition": p.name,
            "AWS::URLSuffix": p.dns_suffix,
            "AWS::AccountId": ACCOUNT_ID_SAMPLE,
            "AWS::StackName": stack_name,
        }
        for p in supported()
    ]


@dataclass(frozen=True)
class NameProblem:
    logical_id: str
    resource_type: str
    prop: str
    name: str
    reason: str
    stack_name_max: int | None = None  # the longest stack name this name allows (None: not derived from it)

    def __str__(self) -> str:
        return f"{self.resource_type} {self.prop} {self.name!r} ({self.logical_id}): {self.reason}"


def name_problems(template: dict, stack_name: str) -> list[NameProblem]:
    """Every explicit resource name of ``template`` that some supported partition would refuse."""
    problems = []
    for logical_id, resource in template.get("Resources", {}).items():
        for prop, value in (resource.get("Properties") or {}).items():
            rule = rules().get((resource["Type"], prop))
            if rule is None:
                continue
            for env in environments(stack_name):
                try:
                    name = render(value, template, env)
                except Unresolvable as exc:
                    problems.append(
                        NameProblem(logical_id, resource["Type"], prop, "?", f"cannot be checked at synth: {exc}")
                    )
                    break
                too_long = len(name) > rule.max_length
                bad_chars = rule.pattern is not None and not re.fullmatch(rule.pattern, name)
                if too_long or bad_chars:
                    uses = name.count(stack_name) if stack_name else 0
                    # each use of the stack name must give up its share of the excess
                    allowed = (
                        len(stack_name) - math.ceil((len(name) - rule.max_length) / uses) if uses and too_long else None
                    )
                    reason = (
                        f"{len(name)} characters in {env['AWS::Partition']} ({env['AWS::Region']}), more than "
                        f"{rule.max_length}"
                        if too_long
                        else f"characters outside {rule.pattern}"
                    )
                    problems.append(
                        NameProblem(logical_id, resource["Type"], prop, name, f"{reason} ({rule.source})", allowed)
                    )
                    break
    return problems


def stack_name_message(stack_name: str, problems: list[NameProblem], setting: str = "rewardpipe.stack_name") -> str:
    """One error naming the setting, its value, the longest value every derived name allows, and each name."""
    limits = [p.stack_name_max for p in problems if p.stack_name_max is not None]
    head = f"{setting} = {stack_name!r} ({len(stack_name)} characters)"
    if limits:
        head += f" is too long for the names derived from it: use at most {max(0, min(limits))} characters"
    else:
        head += " gives resource names AWS refuses"
    return head + ":\n  " + "\n  ".join(str(p) for p in problems)
