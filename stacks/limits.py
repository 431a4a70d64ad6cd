"""Lambda's per-function limits, checked at synth so a deployment never fails on them halfway.

* "Deployment package (.zip file archive) size: 50 MB (zipped, when uploaded through the Lambda API or SDKs),
  250 MB (unzipped). This quota applies to the combined size of all the files you upload, including layers"
  (the Lambda quotas page); the account setting behind it (GetAccountSettings ``CodeSizeUnzipped``) is
  262,144,000 bytes. Measured here on the staged folders: each function's code plus every layer it has.
* "The total size of all environment variables doesn't exceed 4 KB" (4,096 bytes). Measured here as the JSON
  object of the variables (names, values, quotes and separators: at least what Lambda counts), with every
  value CloudFormation fills in at deploy time (a queue URL, an ARN) counted at the longest it can be.

A breach fails the synth naming the function, its figure and the limit (:class:`LimitError`).

IAM's policy size quotas (IAM User Guide, "IAM and AWS STS quotas") are checked at synth too
(:class:`PolicySizeValidation`): "Role policy size cannot exceed 10,240 characters" (every inline policy of a role
together; aws-cdk puts each grant of a role in one inline DefaultPolicy, so every grant grows it), a managed policy
at most 6,144 characters and a role trust policy 2,048; "IAM does not count white space"; and at most 10 managed
policies attached to a role (the default AttachedPoliciesPerRoleQuota). aws-cdk moves what does not fit a role's
inline policy into managed "OverflowPolicy" ones, which count against those 10. Counted with every value
CloudFormation fills in at its longest, like the environment variables. A policy over its quota would fail the
deployment at that resource, halfway through.
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import jsii
from constructs import IValidation

from stacks.config import SettingsError

UNZIPPED_MAX_BYTES = 262_144_000  # 250 MB
ENVIRONMENT_MAX_BYTES = 4 * 1024  # 4 KB
MB = 1024 * 1024


class LimitError(SettingsError):
    """A function would exceed a Lambda limit; the message names the function, the figure and the limit."""


@dataclass
class FunctionAssets:
    function: Any
    code_dir: Path
    layers: list[tuple[str, Path]]
    environment: dict[str, str]


def registry(stack: Any) -> list[FunctionAssets]:
    """The functions registered on ``stack`` by stacks.constructs.common.python_function."""
    found = getattr(stack, "_rewardpipe_function_assets", None)
    if found is None:
        found = []
        stack._rewardpipe_function_assets = found
    return found


@functools.cache
def folder_bytes(path: Path, skip_bytecode: bool = False) -> int:
    """What a staged folder takes unpacked (files only, links not followed); staged folders never change within a
    process (their names carry their content), so each is measured once."""
    total = 0
    for directory, dirs, names in os.walk(path):
        if skip_bytecode:
            dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in names:
            if skip_bytecode and name.endswith(".pyc"):
                continue
            try:
                total += os.lstat(os.path.join(directory, name)).st_size
            except OSError:
                continue
    return total


def unzipped_bytes(assets: FunctionAssets) -> tuple[int, dict[str, int]]:
    parts = {"function code": folder_bytes(assets.code_dir, True)}
    for kind, path in assets.layers:
        parts[_layer_label(kind)] = folder_bytes(path)
    return sum(parts.values()), parts


def _layer_label(kind: str) -> str:
    return {"RewardPipeLayer": "rewardpipe layer", "UserLayer": "user layer"}.get(kind, kind)


# -- environment variables --------------------------------------------------------------------------------


def _longest_values() -> dict[str, int]:
    from stacks.partitions import ACCOUNT_ID_SAMPLE, supported

    parts = supported()
    region = max(len(p.longest_region) for p in parts)
    suffix = max(len(p.dns_suffix) for p in parts)
    partition = max(len(p.name) for p in parts)
    account = len(ACCOUNT_ID_SAMPLE)
    arn = len("arn:") + partition + 1 + len("states") + 1 + region + 1 + account + 1  # arn:<p>:<svc>:<r>:<acct>:
    return {
        "AWS::Region": region,
        "AWS::Partition": partition,
        "AWS::AccountId": account,
        "AWS::URLSuffix": suffix,
        "AWS::StackName": 128,
        # Ref of a resource, by type (each service's own name limit)
        "AWS::S3::Bucket": 63,
        "AWS::SQS::Queue": len("https://sqs.") + region + 1 + suffix + 1 + account + 1 + 80,
        "AWS::Lambda::Function": 64,
        "AWS::StepFunctions::StateMachine": arn + len("stateMachine:") + 80,
        "AWS::SNS::Topic": arn + 256,
        # Fn::GetAtt of a resource, by type and attribute
        "AWS::SQS::Queue.Arn": arn + 80,
        "AWS::SQS::Queue.QueueName": 80,
        "AWS::SQS::Queue.QueueUrl": len("https://sqs.") + region + 1 + suffix + 1 + account + 1 + 80,
        "AWS::Lambda::Function.Arn": arn + len("function:") + 64,
        "AWS::S3::Bucket.Arn": len("arn:") + partition + len(":s3:::") + 63,
        "AWS::StepFunctions::StateMachine.Name": 80,
        "AWS::SNS::Topic.TopicName": 256,
        "AWS::SNS::Topic.TopicArn": arn + 256,
    }


# Anything else CloudFormation fills in is counted at an ARN's documented maximum.
UNKNOWN_VALUE = 2048


def value_bound(value: Any, types: dict[str, str], longest: dict[str, int]) -> int:
    """The longest text ``value`` (a literal or a CloudFormation intrinsic) can become at deploy time."""
    if isinstance(value, str):
        return len(json.dumps(value, ensure_ascii=False)) - 2
    if isinstance(value, (int, float)):
        return len(str(value))
    if isinstance(value, dict) and len(value) == 1:
        ((fn, arg),) = value.items()
        if fn == "Ref" and isinstance(arg, str):
            return longest.get(arg) or longest.get(types.get(arg, ""), UNKNOWN_VALUE)
        if fn == "Fn::GetAtt" and isinstance(arg, list) and len(arg) == 2:
            return longest.get(f"{types.get(arg[0], '')}.{arg[1]}", UNKNOWN_VALUE)
        if fn == "Fn::Join" and isinstance(arg, list) and len(arg) == 2 and isinstance(arg[1], list):
            separator = value_bound(arg[0], types, longest)
            return sum(value_bound(v, types, longest) for v in arg[1]) + separator * max(0, len(arg[1]) - 1)
    return UNKNOWN_VALUE


def environment_bytes(variables: dict[str, Any], types: dict[str, str]) -> tuple[int, dict[str, int]]:
    """``(total, per variable)``: the JSON object's size with each value at its longest."""
    longest = _longest_values()
    per = {
        name: len(json.dumps(name)) + 1 + value_bound(value, types, longest) + 2 for name, value in variables.items()
    }
    return 2 + sum(per.values()) + max(0, len(per) - 1), per


def _resource_types(stack: Any) -> dict[str, str]:
    from aws_cdk import CfnResource

    types = {}
    for node in stack.node.find_all():
        if isinstance(node, CfnResource):
            types[stack.resolve(node.logical_id)] = node.cfn_resource_type
    return types


def function_variables(stack: Any, assets: FunctionAssets) -> dict[str, Any]:
    """The function's variables as CloudFormation will hold them (tokens resolved to intrinsics)."""
    return {name: stack.resolve(value) for name, value in assets.environment.items()}


def check_function_limits(stack: Any) -> list[str]:
    """One line per function over a limit (empty: every function fits)."""
    problems = []
    types: dict[str, str] | None = None
    for assets in registry(stack):
        path = assets.function.node.path
        total, parts = unzipped_bytes(assets)
        if total > UNZIPPED_MAX_BYTES:
            detail = ", ".join(f"{k} {v / MB:,.1f} MB" for k, v in parts.items())
            problems.append(
                f"{path}: code and layers take {total / MB:,.1f} MB ({total:,} bytes) unzipped ({detail}); "
                f"Lambda allows 250 MB ({UNZIPPED_MAX_BYTES:,} bytes) for a function and its layers"
            )
        variables = function_variables(stack, assets)
        if types is None:
            types = _resource_types(stack)
        size, per = environment_bytes(variables, types)
        if size > ENVIRONMENT_MAX_BYTES:
            largest = ", ".join(f"{k} {v:,}" for k, v in sorted(per.items(), key=lambda kv: -kv[1])[:3])
            problems.append(
                f"{path}: environment variables take up to {size:,} bytes (largest: {largest}); Lambda "
                f"allows 4 KB ({ENVIRONMENT_MAX_BYTES:,} bytes) per function"
            )
    return problems


def enforce_function_limits(stack: Any) -> None:
    problems = check_function_limits(stack)
    if problems:
        raise LimitError("a function exceeds a Lambda limit:\n  " + "\n  ".join(problems))


# -- IAM policy sizes -----------------------------------------------------------------------------------------------

ROLE_POLICY_CHARS = 10_240
MANAGED_POLICY_CHARS = 6_144
TRUST_POLICY_CHARS = 2_048
ROLE_MANAGED_POLICIES = 10


def policy_longest_values() -> dict[str, int]:
    """:func:`_longest_values` with the ids and ARNs a policy names (each service's documented longest)."""
    longest = _longest_values()
    arn = longest["AWS::SQS::Queue.Arn"] - 80  # arn:<partition>:<service>:<region>:<account>:
    return {
        **longest,
        "AWS::EC2::VPCEndpoint": len("vpce-") + 17,
        "AWS::EC2::VPC": len("vpc-") + 17,
        "AWS::EC2::VPC.DefaultSecurityGroup": len("sg-") + 17,
        "AWS::EC2::SecurityGroup.GroupId": len("sg-") + 17,
        "AWS::Logs::LogGroup.Arn": arn + len("log-group:") + 512 + len(":*"),
        "AWS::ECS::TaskDefinition": arn + len("task-definition/") + 255 + 1 + 10,
        "AWS::ECS::Cluster": 255,
        "AWS::ECS::Cluster.Arn": arn + len("cluster/") + 255,
        "AWS::IAM::Role.Arn": arn + len("role/") + 512 + 64,
        "AWS::KMS::Key.Arn": arn + len("key/") + 36,
        "AWS::DynamoDB::Table.Arn": arn + len("table/") + 255,
        "AWS::SecretsManager::Secret": arn + len("secret:") + 512 + 7,
    }


def policy_chars(node: Any, types: dict[str, str], longest: dict[str, int]) -> int:
    """Non-whitespace characters of a policy document as IAM counts them, each intrinsic at its longest value
    (one CloudFormation cannot bound, at :data:`UNKNOWN_VALUE`)."""
    if isinstance(node, str):
        return len(re.sub(r"\s", "", json.dumps(node)))
    if isinstance(node, list):
        return 2 + sum(policy_chars(x, types, longest) for x in node) + max(0, len(node) - 1)
    if isinstance(node, dict) and len(node) == 1 and next(iter(node)) == "Fn::Sub":
        text, variables = node["Fn::Sub"], cast("dict[str, Any]", {})
        if isinstance(text, list):
            text, variables = text[0], text[1] if len(text) > 1 else {}
        bound = {name: value_bound(value, types, longest) for name, value in variables.items()}
        names = re.findall(r"\$\{([^}]+)\}", text)
        return (
            2
            + len(re.sub(r"\$\{[^}]+\}", "", text))
            + sum(bound.get(n) or value_bound({"Ref": n}, types, longest) for n in names)
        )
    if isinstance(node, dict) and len(node) == 1 and next(iter(node)) == "Fn::Join":
        separator, parts = node["Fn::Join"]
        return 2 + sum(policy_chars(p, types, longest) - 2 for p in parts) + len(separator) * max(0, len(parts) - 1)
    if isinstance(node, dict) and len(node) == 1 and next(iter(node)) in ("Ref", "Fn::GetAtt"):
        return 2 + value_bound(node, types, longest)
    if isinstance(node, dict):
        items = node.items()
        return 2 + sum(len(json.dumps(k)) + 1 + policy_chars(v, types, longest) for k, v in items) + len(node) - 1
    return len(str(node).lower())


def _role_logical_id(ref: Any) -> str | None:
    return ref.get("Ref") if isinstance(ref, dict) and isinstance(ref.get("Ref"), str) else None


def check_policy_sizes(stack: Any) -> list[str]:
    """One line per policy over its IAM quota (empty: every policy fits)."""
    from aws_cdk import aws_iam as iam

    types, longest = _resource_types(stack), policy_longest_values()
    per_role: dict[str, int] = {}
    attached: dict[str, int] = {}
    names: dict[str, str] = {}
    problems = []
    for node in stack.node.find_all():
        if isinstance(node, iam.CfnPolicy):
            size = policy_chars(stack.resolve(node.policy_document), types, longest)
            for role in stack.resolve(node.roles) or []:
                logical = _role_logical_id(role)
                if logical:
                    per_role[logical] = per_role.get(logical, 0) + size
        elif isinstance(node, iam.CfnManagedPolicy):
            for role in stack.resolve(node.roles) or []:
                logical = _role_logical_id(role)
                if logical:
                    attached[logical] = attached.get(logical, 0) + 1
            size = policy_chars(stack.resolve(node.policy_document), types, longest)
            if size > MANAGED_POLICY_CHARS:
                problems.append(
                    f"{node.node.path}: the managed policy takes up to {size:,} characters; IAM allows "
                    f"{MANAGED_POLICY_CHARS:,}"
                )
        elif isinstance(node, iam.CfnRole):
            logical = stack.resolve(node.logical_id)
            names[logical] = node.node.path
            size = policy_chars(stack.resolve(node.assume_role_policy_document), types, longest)
            if size > TRUST_POLICY_CHARS:
                problems.append(
                    f"{node.node.path}: the trust policy takes up to {size:,} characters; IAM allows "
                    f"{TRUST_POLICY_CHARS:,}"
                )
            attached[logical] = attached.get(logical, 0) + len(stack.resolve(node.managed_policy_arns) or [])
            for policy in stack.resolve(node.policies) or []:
                document = policy.get("PolicyDocument", policy.get("policyDocument"))
                per_role[logical] = per_role.get(logical, 0) + policy_chars(document, types, longest)
    for logical, size in per_role.items():
        if size > ROLE_POLICY_CHARS:
            problems.append(
                f"{names.get(logical, logical)}: the role's inline policies take up to {size:,} characters together; "
                f"IAM allows {ROLE_POLICY_CHARS:,} per role (each grant to the role adds to its DefaultPolicy)"
            )
    for logical, count in attached.items():
        if count > ROLE_MANAGED_POLICIES:
            problems.append(
                f"{names.get(logical, logical)}: {count} managed policies attached to the role (aws-cdk's "
                f"OverflowPolicy ones included); IAM allows {ROLE_MANAGED_POLICIES} by default"
            )
    return problems


@jsii.implements(IValidation)
class PolicySizeValidation:
    """Fails the synth when a role's inline policies, a managed policy or a trust policy is over its IAM quota,
    naming the role or policy, its size and the quota (the deployment would fail at that resource)."""

    def __init__(self, stack: Any) -> None:
        self._stack = stack

    def validate(self) -> list[str]:
        return check_policy_sizes(self._stack)
