"""IAM in the moto tests: every AWS call a deployed function makes is authorized against that function's
policies in the synthesized template, as AWS would, and a denied call fails the test.

moto enforces no IAM at all, so a grant missing from the template (a function that reads what it may only
write, a bridge that sends to a queue it was never given) passes every moto test and breaks on the first
real deployment. This module closes that gap:

* **Who calls.** The harness knows which function is running (``calling_as``): an in-process Lambda
  invocation (tests/aws/harness.py), a handler a test calls directly (tests/aws/handlers.py), the SQS
  poller Lambda runs with the function's role, the Fargate container (a subprocess, through
  :func:`install_in_child`). A call made by nobody in particular (the test itself) is not checked.
* **What it needs.** :data:`OPERATIONS` maps each boto3 operation to the IAM action(s) it is authorized
  as, the resource ARN built from its parameters, and the condition keys it carries, each row with the
  Service Authorization Reference page (or API page) it comes from. An operation a function calls that is
  not in the table fails the test, so the table grows with the code. KMS: a call on a bucket, queue or
  topic the template encrypts with one of its own keys also needs the key's actions (:data:`KMS_NEEDS`).
* **What the function may do.** Its role's policies from the template (inline, ``AWS::IAM::Policy``,
  managed policies of the template and the two AWS-managed Lambda policies), with every
  ``Ref``/``Fn::GetAtt``/``Fn::Join``/``Fn::Sub`` resolved against the test's resources (a deployment's,
  or the names the function's environment carries); the resource policies of the template's buckets,
  queues and topics; and, for a function in the VPC, the endpoint policy of the VPC endpoint the call
  goes through (and no route at all for a service without one).
* **How.** The IAM policy evaluation logic: an explicit Deny anywhere wins, else an Allow from an identity
  or resource policy, else the implicit deny; ``Action``/``NotAction`` with wildcards (case-insensitive),
  ``Resource``/``NotResource`` ARN matching with ``*``/``?``, ``Condition`` with the operators the
  templates use (an operator it does not know fails loudly instead of guessing).

The hook is one patch of ``botocore.client.BaseClient._make_api_call`` (every client, every operation,
paginators and transfers included): a denied call raises the ClientError AWS would (403, AccessDenied)
so the code under test meets it, and is recorded in :data:`DENIALS`, which fails the test at teardown.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

SAR = "https://docs.aws.amazon.com/service-authorization/latest/reference/"
POLICY_EVALUATION = "https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html"
CONDITION_OPERATORS = (
    "https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html"
)
RESOURCE_ELEMENT = "https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_resource.html"

# --------------------------------------------------------------------------------------------------
# What each operation needs (data, with its source)


@dataclass(frozen=True)
class Auth:
    """How AWS authorizes one API operation.

    ``actions``: the IAM actions it needs (all of them); ``resource``: how its resource ARN is built from the
    parameters (a key of :data:`RESOURCES`), ``None`` when the action has no resource type (the policy must
    then grant it on ``"*"``); ``context``: condition keys the request carries, each from a parameter;
    ``kms``: what a customer-managed key on the resource adds (a key of :data:`KMS_NEEDS`).
    """

    actions: tuple[str, ...]
    resource: str | None
    source: str
    context: tuple[tuple[str, str], ...] = ()
    kms: str | None = None
    versioned: str | None = None  # the action when the request names a VersionId (s3:GetObjectVersion)
    extra: str | None = None  # further requests that depend on the template (a key of EXTRA)


S3 = SAR + "list_amazons3.html"
SQS = SAR + "list_amazonsqs.html"
STATES = SAR + "list_awsstepfunctions.html"
LAMBDA = SAR + "list_awslambda.html"
SNS = SAR + "list_amazonsns.html"
SECRETS = SAR + "list_awssecretsmanager.html"
CLOUDWATCH = SAR + "list_amazoncloudwatch.html"

OPERATIONS: dict[tuple[str, str], Auth] = {
    # S3 object operations authorize on arn:aws:s3:::<bucket>/<key>.
    ("s3", "GetObject"): Auth(("s3:GetObject",), "s3-object", S3, kms="s3-read", versioned="s3:GetObjectVersion"),
    # "To use HEAD, you must have the s3:GetObject permission" (S3 API reference, HeadObject).
    ("s3", "HeadObject"): Auth(
        ("s3:GetObject",),
        "s3-object",
        "https://docs.aws.amazon.com/AmazonS3/latest/API/API_HeadObject.html",
        kms="s3-read",
        versioned="s3:GetObjectVersion",
    ),
    # A conditional write (If-None-Match / If-Match) needs s3:PutObject only; s3:if-none-match and
    # s3:if-match are the condition keys S3 adds for it (S3 user guide, "Conditional writes").
    ("s3", "PutObject"): Auth(
        ("s3:PutObject",),
        "s3-object",
        S3,
        context=(("s3:if-none-match", "IfNoneMatch"), ("s3:if-match", "IfMatch")),
        kms="s3-write",
    ),
    ("s3", "DeleteObject"): Auth(("s3:DeleteObject",), "s3-object", S3, versioned="s3:DeleteObjectVersion"),
    # ListObjects(V2) is s3:ListBucket on the bucket; the prefix, delimiter and max-keys are condition keys
    # ("you must have permission to perform the s3:ListBucket action", S3 API reference, ListObjectsV2).
    ("s3", "ListObjectsV2"): Auth(
        ("s3:ListBucket",),
        "s3-bucket",
        "https://docs.aws.amazon.com/AmazonS3/latest/API/API_ListObjectsV2.html",
        context=(("s3:prefix", "Prefix"), ("s3:delimiter", "Delimiter"), ("s3:max-keys", "MaxKeys")),
    ),
    ("s3", "ListObjects"): Auth(
        ("s3:ListBucket",),
        "s3-bucket",
        S3,
        context=(("s3:prefix", "Prefix"), ("s3:delimiter", "Delimiter"), ("s3:max-keys", "MaxKeys")),
    ),
    # SQS authorizes on the queue's ARN (built from the queue URL); SSE-KMS with a customer key adds KMS.
    ("sqs", "SendMessage"): Auth(("sqs:SendMessage",), "sqs-queue", SQS, kms="sqs-send"),
    ("sqs", "SendMessageBatch"): Auth(("sqs:SendMessage",), "sqs-queue", SQS, kms="sqs-send"),
    ("sqs", "ReceiveMessage"): Auth(("sqs:ReceiveMessage",), "sqs-queue", SQS, kms="sqs-receive"),
    ("sqs", "DeleteMessage"): Auth(("sqs:DeleteMessage",), "sqs-queue", SQS),
    ("sqs", "DeleteMessageBatch"): Auth(("sqs:DeleteMessage",), "sqs-queue", SQS),
    ("sqs", "ChangeMessageVisibility"): Auth(("sqs:ChangeMessageVisibility",), "sqs-queue", SQS),
    ("sqs", "ChangeMessageVisibilityBatch"): Auth(("sqs:ChangeMessageVisibility",), "sqs-queue", SQS),
    ("sqs", "GetQueueAttributes"): Auth(("sqs:GetQueueAttributes",), "sqs-queue", SQS),
    ("sqs", "GetQueueUrl"): Auth(("sqs:GetQueueUrl",), "sqs-queue-name", SQS),
    # Step Functions: the state machine for starts, the execution for reads and stops. SendTask* carry only a
    # task token: no resource type, so only a grant on "*" allows them.
    ("stepfunctions", "StartExecution"): Auth(("states:StartExecution",), "sfn-state-machine", STATES),
    ("stepfunctions", "ListExecutions"): Auth(("states:ListExecutions",), "sfn-state-machine", STATES),
    ("stepfunctions", "DescribeExecution"): Auth(("states:DescribeExecution",), "sfn-execution", STATES),
    ("stepfunctions", "GetExecutionHistory"): Auth(("states:GetExecutionHistory",), "sfn-execution", STATES),
    ("stepfunctions", "StopExecution"): Auth(("states:StopExecution",), "sfn-execution", STATES),
    ("stepfunctions", "SendTaskSuccess"): Auth(("states:SendTaskSuccess",), None, STATES),
    ("stepfunctions", "SendTaskFailure"): Auth(("states:SendTaskFailure",), None, STATES),
    ("stepfunctions", "SendTaskHeartbeat"): Auth(("states:SendTaskHeartbeat",), None, STATES),
    # Lambda Invoke is lambda:InvokeFunction on the (qualified) function ARN.
    ("lambda", "Invoke"): Auth(("lambda:InvokeFunction",), "lambda-function", LAMBDA),
    ("sns", "Publish"): Auth(("sns:Publish",), "sns-topic", SNS, kms="sns-publish"),
    ("secretsmanager", "GetSecretValue"): Auth(("secretsmanager:GetSecretValue",), "secret", SECRETS),
    # PutMetricData has no resource type; cloudwatch:namespace is its condition key.
    ("cloudwatch", "PutMetricData"): Auth(
        ("cloudwatch:PutMetricData",), None, CLOUDWATCH, context=(("cloudwatch:namespace", "Namespace"),)
    ),
    # A state machine's Fargate step: RunTask on the task definition, passing its roles (iam:PassRole, "Amazon
    # ECS task IAM role"), then DescribeTasks to wait for it.
    # It carries ecs:cluster, the ARN of the cluster it runs on (CONTEXT_VALUES: from a short name, or the default).
    ("ecs", "RunTask"): Auth(
        ("ecs:RunTask",),
        "ecs-task-definition",
        SAR + "list_amazonelasticcontainerservice.html",
        context=(("ecs:cluster", "cluster"),),
        extra="ecs-pass-roles",
    ),
    ("ecs", "DescribeTasks"): Auth(("ecs:DescribeTasks",), "ecs-task", SAR + "list_amazonelasticcontainerservice.html"),
    ("ecs", "StopTask"): Auth(("ecs:StopTask",), "ecs-task", SAR + "list_amazonelasticcontainerservice.html"),
    # GetCallerIdentity needs no permission ("No permissions are required", STS API reference).
    ("sts", "GetCallerIdentity"): Auth(
        (), None, "https://docs.aws.amazon.com/STS/latest/APIReference/API_GetCallerIdentity.html"
    ),
}

# What a customer-managed KMS key on the resource adds to the call (the AWS-managed keys aws/s3, aws/sqs and
# aws/sns need no grant of the caller's own).
KMS_NEEDS: dict[str, tuple[tuple[str, ...], str]] = {
    # "To upload an object encrypted with an AWS KMS key, you need kms:GenerateDataKey"; reading needs kms:Decrypt.
    "s3-write": (
        ("kms:GenerateDataKey",),
        "https://docs.aws.amazon.com/AmazonS3/latest/userguide/UsingKMSEncryption.html",
    ),
    "s3-read": (("kms:Decrypt",), "https://docs.aws.amazon.com/AmazonS3/latest/userguide/UsingKMSEncryption.html"),
    # Producers need kms:GenerateDataKey and kms:Decrypt, consumers kms:Decrypt (SQS key management).
    "sqs-send": (
        ("kms:GenerateDataKey", "kms:Decrypt"),
        "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-key-management.html",
    ),
    "sqs-receive": (
        ("kms:Decrypt",),
        "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-key-management.html",
    ),
    # Publishers to an encrypted topic need kms:GenerateDataKey* and kms:Decrypt on its key (SNS key management).
    "sns-publish": (
        ("kms:GenerateDataKey", "kms:Decrypt"),
        "https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html",
    ),
}

# The AWS-managed policies CDK attaches to Lambda roles (AWS managed policy reference), as data.
AWS_MANAGED_POLICIES = {
    "AWSLambdaBasicExecutionRole": {
        "Statement": [
            {
                "Effect": "Allow",
                "Resource": "*",
                "Action": ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"],
            }
        ]
    },
    "AWSLambdaVPCAccessExecutionRole": {
        "Statement": [
            {
                "Effect": "Allow",
                "Resource": "*",
                "Action": [
                    "logs:CreateLogGroup",
                    "logs:CreateLogStream",
                    "logs:PutLogEvents",
                    "ec2:CreateNetworkInterface",
                    "ec2:DescribeNetworkInterfaces",
                    "ec2:DescribeSubnets",
                    "ec2:DeleteNetworkInterface",
                    "ec2:AssignPrivateIpAddresses",
                    "ec2:UnassignPrivateIpAddresses",
                ],
            }
        ]
    },
}

# The IAM service prefix of each botocore service (for VPC endpoint service names: com.amazonaws.<region>.<x>).
ENDPOINT_SERVICE = {
    "s3": "s3",
    "sqs": "sqs",
    "stepfunctions": "states",
    "lambda": "lambda",
    "sns": "sns",
    "secretsmanager": "secretsmanager",
    "cloudwatch": "monitoring",
    "sts": "sts",
    "logs": "logs",
    "kms": "kms",
}

# The error AWS answers a denied call with, per service (HTTP 403).
DENIED_CODE = {"s3": "AccessDenied", "sqs": "AccessDenied", "sns": "AuthorizationError", "cloudwatch": "AccessDenied"}


# --------------------------------------------------------------------------------------------------
# Resources: an operation's ARN from its parameters


def _queue_arn(url: str, region: str) -> str:
    parts = url.rstrip("/").split("/")
    return f"arn:aws:sqs:{region}:{parts[-2]}:{parts[-1]}"


def _function_arn(params: dict, region: str, account: str) -> str:
    name = str(params["FunctionName"])
    qualifier = params.get("Qualifier")
    if name.startswith("arn:"):
        arn = name
    elif ":function:" in name:  # partial ARN "123456789012:function:name[:qualifier]"
        arn = f"arn:aws:lambda:{region}:{name}"
    elif ":" in name:  # "name:qualifier"
        arn = f"arn:aws:lambda:{region}:{account}:function:{name}"
    else:
        arn = f"arn:aws:lambda:{region}:{account}:function:{name}"
    return f"{arn}:{qualifier}" if qualifier else arn


def _secret_arn(params: dict, region: str, account: str) -> str:
    secret = str(params["SecretId"])
    if secret.startswith("arn:"):
        return secret
    try:  # a name: the ARN (with its random suffix) is the service's; moto holds it
        from moto.backends import get_backend

        return get_backend("secretsmanager")[account][region].secrets[secret].arn
    except Exception:  # noqa: BLE001 - not stored: the ARN AWS would compute has a suffix we cannot know
        return f"arn:aws:secretsmanager:{region}:{account}:secret:{secret}-??????"


def _task_definition_arn(value: str, region: str, account: str) -> str:
    """RunTask on a family (what the state machine's ASL names) runs, and is authorized on, its latest ACTIVE
    revision: arn:aws:ecs:<region>:<account>:task-definition/<family>:<revision>."""
    family = value.rsplit("/", 1)[-1]
    if ":" in family:
        return value if value.startswith("arn:") else f"arn:aws:ecs:{region}:{account}:task-definition/{family}"
    try:
        from moto.backends import get_backend

        return get_backend("ecs")[account][region].describe_task_definition(family).arn
    except Exception:  # noqa: BLE001 - not registered: no revision to authorize on
        return f"arn:aws:ecs:{region}:{account}:task-definition/{family}"


def _cluster_arn(value: Any, region: str, account: str) -> str:
    """RunTask's ecs:cluster: the ARN of the cluster named (by ARN or short name), or of the account's default
    cluster when the request names none ("If you do not specify a cluster, the default cluster is assumed")."""
    name = str(value) if value else "default"
    return name if name.startswith("arn:") else f"arn:aws:ecs:{region}:{account}:cluster/{name}"


# Condition keys whose value AWS derives from a parameter rather than copying it.
CONTEXT_VALUES: dict[str, Callable[[Any, str, str], str | None]] = {"ecs:cluster": _cluster_arn}

RESOURCES: dict[str, Callable[[dict, str, str], str]] = {
    "s3-object": lambda p, r, a: f"arn:aws:s3:::{p['Bucket']}/{p['Key']}",
    "s3-bucket": lambda p, r, a: f"arn:aws:s3:::{p['Bucket']}",
    "sqs-queue": lambda p, r, a: _queue_arn(p["QueueUrl"], r),
    "sqs-queue-name": lambda p, r, a: f"arn:aws:sqs:{r}:{p.get('QueueOwnerAWSAccountId') or a}:{p['QueueName']}",
    "sfn-state-machine": lambda p, r, a: p["stateMachineArn"],
    "sfn-execution": lambda p, r, a: p["executionArn"],
    "lambda-function": _function_arn,
    "sns-topic": lambda p, r, a: p["TopicArn"],
    "secret": _secret_arn,
    "ecs-task-definition": lambda p, r, a: _task_definition_arn(str(p["taskDefinition"]), r, a),
    "ecs-task": lambda p, r, a: str(p["tasks"][0]) if "tasks" in p else str(p["task"]),
}


def _pass_task_roles(params: dict, resource: str, model: TemplateModel) -> list[Request]:
    """iam:PassRole on the roles of the task definition being run
    (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-iam-roles.html)."""
    out = []
    for logical, resource_def in model.of_type("AWS::ECS::TaskDefinition").items():
        if model.resolve({"Ref": logical}) != resource:
            continue
        for prop in ("TaskRoleArn", "ExecutionRoleArn"):
            role = resource_def["Properties"].get(prop)
            if role is not None:
                out.append(
                    Request(
                        "iam:PassRole", str(model.resolve(role)), {"iam:passedtoservice": ("ecs-tasks.amazonaws.com",)}
                    )
                )
    return out


EXTRA: dict[str, Callable[[dict, str, TemplateModel], list[Request]]] = {"ecs-pass-roles": _pass_task_roles}


@dataclass(frozen=True)
class Request:
    """One authorization request: an action on a resource (None: an action without resource type)."""

    action: str
    resource: str | None
    context: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def describe(self) -> str:
        return f"{self.action} on {self.resource or '*'}"


class UnmappedOperation(LookupError):
    """A function called an operation :data:`OPERATIONS` does not describe."""


def requests_for(
    service: str, operation: str, params: dict, region: str, account: str, model: TemplateModel | None = None
) -> list[Request]:
    """The authorization requests AWS makes for one API call."""
    auth = OPERATIONS.get((service, operation))
    if auth is None:
        raise UnmappedOperation(
            f"the IAM harness does not know how AWS authorizes {service}:{operation}; add it to "
            f"tests/aws/iam.py OPERATIONS from the Service Authorization Reference ({SAR})"
        )
    resource = RESOURCES[auth.resource](params, region, account) if auth.resource else None
    context: dict[str, tuple[str, ...]] = {}
    for key, param in auth.context:
        value = CONTEXT_VALUES[key](params.get(param), region, account) if key in CONTEXT_VALUES else params.get(param)
        if value is not None:
            context[key.lower()] = (str(value),)
    actions = auth.actions
    if auth.versioned and params.get("VersionId"):
        actions = (auth.versioned,)
    out = [Request(action, resource, context) for action in actions]
    if auth.kms and model is not None and resource is not None:
        key = model.kms_key_of(resource)
        if key is not None:
            out += [Request(action, key) for action in KMS_NEEDS[auth.kms][0]]
    if auth.extra and model is not None and resource is not None:
        out += EXTRA[auth.extra](params, resource, model)
    return out


# --------------------------------------------------------------------------------------------------
# Policy evaluation


def _wildcard(pattern: str, *, arn: bool) -> re.Pattern:
    """A policy wildcard as a regex. In an ARN a ``*`` stays inside its colon-separated segment unless it is
    the segment's last character ("it can expand to match beyond the colon boundaries"); ``?`` is one
    character. String conditions (StringLike) have no segments."""
    out: list[str] = []
    chunks = pattern.split(":") if arn else [pattern]
    for chunk in chunks:
        piece = ""
        for i, ch in enumerate(chunk):
            if ch == "*":
                piece += ".*" if (not arn or i == len(chunk) - 1) else "[^:]*"
            elif ch == "?":
                piece += "." if not arn else "[^:]"
            else:
                piece += re.escape(ch)
        out.append(piece)
    return re.compile(":".join(out) + r"\Z", re.DOTALL)


_COMPILED: dict[tuple[str, bool, bool], re.Pattern] = {}


def wildcard_match(pattern: str, value: str, *, arn: bool = False, ignore_case: bool = False) -> bool:
    key = (pattern, arn, ignore_case)
    regex = _COMPILED.get(key)
    if regex is None:
        regex = _wildcard(pattern.lower() if ignore_case else pattern, arn=arn)
        _COMPILED[key] = regex
    return regex.match(value.lower() if ignore_case else value) is not None


def _as_list(value: Any) -> list:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def action_matches(patterns: Iterable[str], action: str) -> bool:
    """Action names are case-insensitive; ``*`` and ``?`` are wildcards."""
    return any(wildcard_match(str(p), action, ignore_case=True) for p in patterns)


def resource_matches(patterns: Iterable[str], resource: str | None) -> bool:
    """An action without resource type is allowed only by ``"*"`` (Service Authorization Reference: "you
    must specify all resources ("*")"); an ARN matches its pattern segment by segment (RESOURCE_ELEMENT)."""
    for p in patterns:
        p = str(p)
        if p == "*":
            return True
        if resource is not None and wildcard_match(p, resource, arn=True):
            return True
    return False


class UnsupportedCondition(ValueError):
    """A policy uses a condition operator the harness does not evaluate (it refuses rather than guess)."""


def _string_op(base: str) -> Callable[[str, str], bool] | None:
    return {
        "StringEquals": lambda want, have: want == have,
        "StringEqualsIgnoreCase": lambda want, have: want.lower() == have.lower(),
        "StringLike": lambda want, have: wildcard_match(want, have),
        "ArnEquals": lambda want, have: want == have,
        "ArnLike": lambda want, have: wildcard_match(want, have, arn=True),
        "Bool": lambda want, have: want.lower() == have.lower(),
        "NumericEquals": lambda want, have: float(want) == float(have),
        "NumericLessThan": lambda want, have: float(have) < float(want),
        "NumericLessThanEquals": lambda want, have: float(have) <= float(want),
        "NumericGreaterThan": lambda want, have: float(have) > float(want),
        "NumericGreaterThanEquals": lambda want, have: float(have) >= float(want),
    }.get(base)


_NEGATED = {
    "StringNotEquals": "StringEquals",
    "StringNotEqualsIgnoreCase": "StringEqualsIgnoreCase",
    "StringNotLike": "StringLike",
    "ArnNotEquals": "ArnEquals",
    "ArnNotLike": "ArnLike",
    "NumericNotEquals": "NumericEquals",
}


def condition_matches(conditions: dict | None, context: dict[str, tuple[str, ...]]) -> bool:
    """Every operator block and every key in it must hold (CONDITION_OPERATORS):

    * a key the request does not carry makes a positive operator false and a negated one (``...Not...``)
      true; ``...IfExists`` makes a missing key true; ``Null`` tests presence;
    * a key with several request values (``ForAnyValue:``/``ForAllValues:``) compares each; several policy
      values are OR-ed.
    """
    for raw_operator, block in (conditions or {}).items():
        qualifier, _, operator = raw_operator.rpartition(":")
        if_exists = operator.endswith("IfExists")
        operator = operator.removesuffix("IfExists")
        negated = operator in _NEGATED
        compare = _string_op(_NEGATED.get(operator, operator))
        if operator != "Null" and compare is None:
            raise UnsupportedCondition(
                f"condition operator {raw_operator!r} is not implemented in tests/aws/iam.py ({CONDITION_OPERATORS})"
            )
        if qualifier not in ("", "ForAnyValue", "ForAllValues"):
            raise UnsupportedCondition(f"condition qualifier {qualifier!r} is not implemented")
        for key, wanted in block.items():
            have = context.get(key.lower())
            wanted_values = [str(v).lower() if isinstance(v, bool) else str(v) for v in _as_list(wanted)]
            if operator == "Null":
                absent = have is None or len(have) == 0
                if not any((w.lower() == "true") == absent for w in wanted_values):
                    return False
                continue
            if have is None:
                if if_exists or negated or qualifier == "ForAllValues":
                    continue
                return False

            def one(value: str, compare=compare, wanted_values=wanted_values, negated=negated) -> bool:
                hit = any(compare(w, value) for w in wanted_values)  # type: ignore[misc]
                return not hit if negated else hit

            ok = all(one(v) for v in have) if qualifier == "ForAllValues" or negated else any(one(v) for v in have)
            if not ok:
                return False
    return True


def _principal_matches(statement: dict, principal_arn: str, account: str) -> bool:
    principal = statement.get("Principal")
    if principal == "*":
        return True
    if not isinstance(principal, dict):
        return False
    for value in _as_list(principal.get("AWS")):
        value = str(value)
        if value in ("*", principal_arn, account, f"arn:aws:iam::{account}:root"):
            return True
    return False


def statement_applies(statement: dict, request: Request, context: dict[str, tuple[str, ...]]) -> bool:
    if "Action" in statement and not action_matches(_as_list(statement["Action"]), request.action):
        return False
    if "NotAction" in statement and action_matches(_as_list(statement["NotAction"]), request.action):
        return False
    if "Resource" in statement and not resource_matches(_as_list(statement["Resource"]), request.resource):
        return False
    if "NotResource" in statement and resource_matches(_as_list(statement["NotResource"]), request.resource):
        return False
    return condition_matches(statement.get("Condition"), {**context, **request.context})


def _statements(document: Any) -> list[dict]:
    if not isinstance(document, dict):
        return []
    return [s for s in _as_list(document.get("Statement")) if isinstance(s, dict)]


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str


def evaluate(
    request: Request,
    *,
    identity: list[dict],
    resource_policies: list[dict],
    endpoint_policy: dict | None,
    principal_arn: str,
    account: str,
    context: dict[str, tuple[str, ...]],
) -> Decision:
    """The IAM policy evaluation logic for one principal of the resource's own account (POLICY_EVALUATION):
    explicit Deny anywhere → denied; else an Allow in an identity policy, or in a resource policy naming the
    principal → allowed; else implicit deny. A VPC endpoint policy must allow the request as well."""
    scoped_resource = [
        s for doc in resource_policies for s in _statements(doc) if _principal_matches(s, principal_arn, account)
    ]
    identity_statements = [s for doc in identity for s in _statements(doc)]
    for statement in identity_statements + scoped_resource:
        if statement.get("Effect") == "Deny" and statement_applies(statement, request, context):
            return Decision(False, f"an explicit Deny ({statement.get('Sid') or 'no Sid'}) matches")
    if endpoint_policy is not None:
        endpoint_statements = [s for s in _statements(endpoint_policy) if _principal_matches(s, principal_arn, account)]
        if any(s.get("Effect") == "Deny" and statement_applies(s, request, context) for s in endpoint_statements):
            return Decision(False, "the VPC endpoint policy denies it")
        if not any(s.get("Effect") == "Allow" and statement_applies(s, request, context) for s in endpoint_statements):
            return Decision(False, "the VPC endpoint policy the call goes through does not allow it")
    if any(
        s.get("Effect") == "Allow" and statement_applies(s, request, context)
        for s in identity_statements + scoped_resource
    ):
        return Decision(True, "allowed")
    return Decision(False, "no identity-based or resource-based policy allows it")


# --------------------------------------------------------------------------------------------------
# The template, resolved against the test's resources


class Unresolved(str):
    """A value the test has no resource for: it equals only itself, so a grant on it matches nothing else."""


PSEUDO = {"AWS::Partition": "aws", "AWS::URLSuffix": "amazonaws.com", "AWS::NoValue": None}


@dataclass
class TemplateModel:
    """The IAM view of one synthesized template. ``lookup(logical, attribute)`` gives the test's value of a
    resource's ``Ref`` (attribute ``"Ref"``) or ``Fn::GetAtt``; a missing one resolves to an
    :class:`Unresolved` placeholder."""

    template: dict
    lookup: Callable[[str, str], str | None]
    region: str
    account: str
    stack_name: str = "RewardPipe"

    @property
    def resources(self) -> dict[str, dict]:
        return self.template["Resources"]

    def of_type(self, cfn_type: str) -> dict[str, dict]:
        return {k: v for k, v in self.resources.items() if v.get("Type") == cfn_type}

    # -- intrinsics ------------------------------------------------------------------------------

    def _attr(self, logical: str, attr: str) -> str:
        value = self.lookup(logical, attr)
        return value if value is not None else Unresolved(f"{{unresolved:{logical}.{attr}}}")

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [v for v in (self.resolve(x) for x in value) if v is not None]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref":
                if arg in ("AWS::Region",):
                    return self.region
                if arg == "AWS::AccountId":
                    return self.account
                if arg == "AWS::StackName":
                    return self.stack_name
                if arg in PSEUDO:
                    return PSEUDO[arg]
                return self._attr(arg, "Ref")
            if key == "Fn::GetAtt":
                logical, attr = arg if isinstance(arg, list) else arg.split(".", 1)
                return self._attr(logical, attr)
            if key == "Fn::Join":
                sep, parts = arg
                return sep.join(str(self.resolve(p)) for p in parts)
            if key == "Fn::Sub":
                text, names = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])

                def sub(match: re.Match) -> str:
                    name = match.group(1)
                    if name in names:
                        return str(self.resolve(names[name]))
                    if "." in name:
                        return str(self.resolve({"Fn::GetAtt": name.split(".", 1)}))
                    return str(self.resolve({"Ref": name}))

                return re.sub(r"\$\{([^}!]+)\}", sub, text)
            if key == "Fn::Select":
                index, items = arg
                items = self.resolve(items)
                return (
                    items[int(index)]
                    if isinstance(items, list) and len(items) > int(index)
                    else Unresolved(f"{{unresolved:{json.dumps(value)}}}")
                )
            if key.startswith("Fn::"):
                return Unresolved(f"{{unresolved:{key}}}")
        return {k: self.resolve(v) for k, v in value.items()}

    # -- principals ------------------------------------------------------------------------------

    def _role_of(self, logical: str) -> str | None:
        resource = self.resources[logical]
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::Lambda::Function":
            ref = props.get("Role")
        elif resource["Type"] == "AWS::ECS::TaskDefinition":
            ref = props.get("TaskRoleArn")
        elif resource["Type"] == "AWS::StepFunctions::StateMachine":
            ref = props.get("RoleArn")
        elif resource["Type"] == "AWS::IAM::Role":
            return logical
        else:
            return None
        if isinstance(ref, dict) and "Fn::GetAtt" in ref:
            return ref["Fn::GetAtt"][0]
        return None

    def identity_policies(self, logical: str) -> list[dict]:
        """Every identity policy of the principal ``logical`` (a function, task definition, state machine or
        role: its role's; a managed policy: itself), resolved."""
        resource = self.resources[logical]
        if resource["Type"] == "AWS::IAM::ManagedPolicy":
            return [self.resolve(resource["Properties"]["PolicyDocument"])]
        role = self._role_of(logical)
        if role is None:
            raise ValueError(f"{logical} ({resource['Type']}) has no role in the template")
        role_props = self.resources[role].get("Properties", {})
        docs = [p["PolicyDocument"] for p in role_props.get("Policies", [])]
        for arn in role_props.get("ManagedPolicyArns", []):
            if isinstance(arn, dict) and "Ref" in arn and arn["Ref"] in self.resources:
                docs.append(self.resources[arn["Ref"]]["Properties"]["PolicyDocument"])
            else:
                name = str(self.resolve(arn)).rsplit("/", 1)[-1]
                docs.append(AWS_MANAGED_POLICIES.get(name, {"Statement": []}))
        for cfn_type in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            for policy in self.of_type(cfn_type).values():
                if {"Ref": role} in policy["Properties"].get("Roles", []):
                    docs.append(policy["Properties"]["PolicyDocument"])
        return [self.resolve(d) for d in docs]

    def principal_arn(self, logical: str) -> str:
        role = self._role_of(logical) if self.resources[logical]["Type"] != "AWS::IAM::ManagedPolicy" else None
        return f"arn:aws:iam::{self.account}:role/{role or logical}"

    # -- resources -------------------------------------------------------------------------------

    def _arn_of(self, logical: str) -> str | None:
        cfn_type = self.resources[logical]["Type"]
        attr = {
            "AWS::S3::Bucket": "Arn",
            "AWS::SQS::Queue": "Arn",
            "AWS::SNS::Topic": "TopicArn",
            "AWS::KMS::Key": "Arn",
        }.get(cfn_type)
        if attr is None:
            return None
        value = self.lookup(logical, attr)
        if value is None and cfn_type == "AWS::SNS::Topic":
            value = self.lookup(logical, "Ref")
        return value

    def _owner(self, arn: str) -> str | None:
        """The template resource (bucket, queue, topic) an ARN is or lies in."""
        for logical in (
            list(self.of_type("AWS::S3::Bucket"))
            + list(self.of_type("AWS::SQS::Queue"))
            + list(self.of_type("AWS::SNS::Topic"))
        ):
            own = self._arn_of(logical)
            if own and (
                arn == own or (self.resources[logical]["Type"] == "AWS::S3::Bucket" and arn.startswith(own + "/"))
            ):
                return logical
        return None

    def kms_key_of(self, arn: str) -> str | None:
        """The ARN of the template's own KMS key that encrypts the resource at ``arn``, if any."""
        owner = self._owner(arn)
        if owner is None:
            return None
        props = self.resources[owner].get("Properties", {})
        key = props.get("KmsMasterKeyId")
        if self.resources[owner]["Type"] == "AWS::S3::Bucket":
            rules = props.get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration", [])
            key = next(
                (
                    r.get("ServerSideEncryptionByDefault", {}).get("KMSMasterKeyID")
                    for r in rules
                    if str(r.get("ServerSideEncryptionByDefault", {}).get("SSEAlgorithm", "")).startswith("aws:kms")
                ),
                None,
            )
        if not (isinstance(key, dict) and ("Fn::GetAtt" in key or "Ref" in key)):
            return None  # no key, or an AWS-managed alias (aws/s3, aws/sqs, aws/sns): no grant of the caller's own
        logical = key["Fn::GetAtt"][0] if "Fn::GetAtt" in key else key["Ref"]
        if self.resources.get(logical, {}).get("Type") != "AWS::KMS::Key":
            return None
        return self.resolve({"Fn::GetAtt": [logical, "Arn"]})

    def resource_policies(self, arn: str | None) -> list[dict]:
        if arn is None:
            return []
        owner = self._owner(arn)
        if owner is None:
            return []
        out = []
        for cfn_type, field_name in (
            ("AWS::S3::BucketPolicy", "Bucket"),
            ("AWS::SQS::QueuePolicy", "Queues"),
            ("AWS::SNS::TopicPolicy", "Topics"),
        ):
            for policy in self.of_type(cfn_type).values():
                targets = _as_list(policy["Properties"].get(field_name))
                if {"Ref": owner} in targets:
                    out.append(self.resolve(policy["Properties"]["PolicyDocument"]))
        return out

    # -- network ---------------------------------------------------------------------------------

    def vpc_of(self, logical: str) -> str | None:
        resource = self.resources[logical]
        if resource["Type"] == "AWS::ECS::TaskDefinition":
            vpcs = list(self.of_type("AWS::EC2::VPC"))
            return vpcs[0] if len(vpcs) == 1 else None
        subnets = resource.get("Properties", {}).get("VpcConfig", {}).get("SubnetIds", [])
        for subnet in subnets:
            if isinstance(subnet, dict) and "Ref" in subnet:
                vpc = self.resources.get(subnet["Ref"], {}).get("Properties", {}).get("VpcId")
                if isinstance(vpc, dict) and "Ref" in vpc:
                    return vpc["Ref"]
        return None

    def endpoint(self, vpc: str, service: str) -> tuple[str, dict | None] | None:
        """(endpoint id, its policy) of the VPC's endpoint for ``service``, or None."""
        prefix = ENDPOINT_SERVICE.get(service, service)
        for logical, resource in self.of_type("AWS::EC2::VPCEndpoint").items():
            props = resource["Properties"]
            if props.get("VpcId") != {"Ref": vpc}:
                continue
            name = str(self.resolve(props.get("ServiceName")))
            if name.endswith(f".{prefix}"):
                return self.resolve({"Ref": logical}), self.resolve(props.get("PolicyDocument"))
        return None

    def has_internet_route(self) -> bool:
        return bool(self.of_type("AWS::EC2::NatGateway") or self.of_type("AWS::EC2::InternetGateway"))


# --------------------------------------------------------------------------------------------------
# Who is calling, and the check


@dataclass(frozen=True)
class Caller:
    """The principal making calls: ``logical`` is a function, task definition, state machine or managed policy
    of ``model``'s template; ``model`` may be built lazily (``resolve``) on the first checked call."""

    name: str
    resolve: Callable[[], tuple[TemplateModel, str]]


_LOCAL = threading.local()
# Every denied call of the current test ("<principal>: <action> on <resource>: <why>"); fails it at teardown.
DENIALS: list[str] = []
# (principal, service, operation) of every checked call of the current test.
CHECKED_CALLS: list[tuple[str, str, str]] = []


# Callers known by the access key of the client they call with (a service's own clients, which run in threads
# of their own: moto's Step Functions interpreter calls with the key "ak"), for calls made outside calling_as.
KEY_CALLERS: dict[str, Callable[[], Caller | None]] = {}


def current_caller(client: Any = None) -> Caller | None:
    stack = getattr(_LOCAL, "stack", None)
    if stack:
        return stack[-1]
    if client is not None and KEY_CALLERS:
        credentials = getattr(getattr(client, "_request_signer", None), "_credentials", None)
        resolve = KEY_CALLERS.get(getattr(credentials, "access_key", None) or "")
        return resolve() if resolve is not None else None
    return None


@contextlib.contextmanager
def calling_as(caller: Caller | None):
    """Calls in this block (in this thread) are made by ``caller`` (None: by nobody checked, e.g. the test)."""
    stack = _LOCAL.__dict__.setdefault("stack", [])
    stack.append(caller)
    try:
        yield
    finally:
        stack.pop()


def reset() -> None:
    DENIALS.clear()
    CHECKED_CALLS.clear()


def check_call(caller: Caller, service: str, operation: str, params: dict, region: str) -> str | None:
    """The denial message for one call, or None when AWS would allow it."""
    model, logical = caller.resolve()
    requests = requests_for(service, operation, params, region, model.account, model)
    principal_arn = model.principal_arn(logical)
    context: dict[str, tuple[str, ...]] = {
        "aws:securetransport": ("true",),
        "aws:principalaccount": (model.account,),
        "aws:principalarn": (principal_arn,),
        "aws:requestedregion": (region,),
    }
    endpoint_policy = None
    vpc = model.vpc_of(logical) if model.resources[logical]["Type"] != "AWS::IAM::ManagedPolicy" else None
    if vpc is not None and requests:
        endpoint = model.endpoint(vpc, service)
        if endpoint is None and not model.has_internet_route():
            return (
                f"{caller.name}: {service}:{operation} cannot reach the service: the function runs in an "
                f"isolated VPC with no endpoint for {ENDPOINT_SERVICE.get(service, service)}"
            )
        if endpoint is not None:
            endpoint_id, endpoint_policy = endpoint
            context["aws:sourcevpce"] = (str(endpoint_id),)
            context["aws:sourcevpc"] = (str(model.resolve({"Ref": vpc})),)
    identity = model.identity_policies(logical)
    for request in requests:
        decision = evaluate(
            request,
            identity=identity,
            resource_policies=model.resource_policies(request.resource),
            endpoint_policy=endpoint_policy,
            principal_arn=principal_arn,
            account=model.account,
            context=context,
        )
        if not decision.allowed:
            return (
                f"{caller.name} ({principal_arn}) is not authorized to perform {request.describe()} "
                f"[{service}:{operation}]: {decision.reason}"
            )
    return None


def denied_error(client: Any, operation: str, message: str) -> Exception:
    """The ClientError AWS raises for a denied call (HTTP 403), as the client's own exception class."""
    service = client.meta.service_model.service_name
    code = DENIED_CODE.get(service, "AccessDeniedException")
    response = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": 403}}
    return client.exceptions.from_code(code)(response, operation)


def authorize_client_call(client: Any, operation: str, params: dict) -> None:
    """Raise what AWS would for a call ``current_caller()`` may not make (and record it)."""
    caller = current_caller(client)
    if caller is None:
        return
    service = client.meta.service_model.service_name
    region = client.meta.region_name
    try:
        message = check_call(caller, service, operation, params, region)
    except (UnmappedOperation, UnsupportedCondition) as exc:
        message = f"{caller.name}: {exc}"
    CHECKED_CALLS.append((caller.name, service, operation))
    if message is not None:
        DENIALS.append(message)
        raise denied_error(client, operation, message)


def patch_botocore() -> list[tuple[Any, str, Any]]:
    """The hook: every client's ``_make_api_call`` authorizes first (for the harness's monkeypatch). Work a
    caller hands to a thread pool (a trainer's parallel turns) runs as that caller, with the same credentials."""
    from concurrent.futures import ThreadPoolExecutor

    from botocore.client import BaseClient

    original = BaseClient._make_api_call
    original_submit = ThreadPoolExecutor.submit

    def _make_api_call(self, operation_name, api_params):
        authorize_client_call(self, operation_name, api_params)
        return original(self, operation_name, api_params)

    def submit(self, fn, /, *args, **kwargs):
        caller = current_caller()
        if caller is None:
            return original_submit(self, fn, *args, **kwargs)

        def as_caller(*a, **k):
            with calling_as(caller):
                return fn(*a, **k)

        return original_submit(self, as_caller, *args, **kwargs)

    return [(BaseClient, "_make_api_call", _make_api_call), (ThreadPoolExecutor, "submit", submit)]


# --------------------------------------------------------------------------------------------------
# A child process (the Fargate container): the same check, from a resolved principal


def frozen_principal(model: TemplateModel, logical: str, name: str) -> dict:
    """Everything :func:`install_in_child` needs to check a principal's calls in another process, resolved
    now (the child has no template and no deployment)."""
    resources = {}
    for cfn_type in ("AWS::S3::Bucket", "AWS::SQS::Queue", "AWS::SNS::Topic"):
        for owner in model.of_type(cfn_type):
            arn = model._arn_of(owner)
            if arn:
                resources[arn] = {
                    "policies": model.resource_policies(arn),
                    "kms": model.kms_key_of(arn),
                    "bucket": cfn_type == "AWS::S3::Bucket",
                }
    vpc = model.vpc_of(logical)
    endpoints = {}
    if vpc is not None:
        for service in ENDPOINT_SERVICE:
            found = model.endpoint(vpc, service)
            if found is not None:
                endpoints[service] = [str(found[0]), found[1], str(model.resolve({"Ref": vpc}))]
    return {
        "name": name,
        "arn": model.principal_arn(logical),
        "account": model.account,
        "identity": model.identity_policies(logical),
        "resources": resources,
        "vpc": vpc is not None,
        "endpoints": endpoints,
        "internet": model.has_internet_route(),
    }


def install_in_child(principal_file: str, denials_file: str) -> None:
    """In the child: patch botocore so every call is checked as the frozen principal; denials are appended
    to ``denials_file`` (one JSON string per line) for the parent to fail the test with."""
    with open(principal_file, encoding="utf-8") as fh:
        spec = json.load(fh)

    class Frozen(TemplateModel):
        def _owner_entry(self, arn: str) -> dict | None:
            for own, entry in spec["resources"].items():
                if arn == own or (entry["bucket"] and arn.startswith(own + "/")):
                    return entry
            return None

        def kms_key_of(self, arn: str) -> str | None:
            entry = self._owner_entry(arn)
            return entry["kms"] if entry else None

        def resource_policies(self, arn: str | None) -> list[dict]:
            entry = self._owner_entry(arn) if arn else None
            return entry["policies"] if entry else []

        def principal_arn(self, logical: str) -> str:
            return spec["arn"]

        def identity_policies(self, logical: str) -> list[dict]:
            return spec["identity"]

        def vpc_of(self, logical: str) -> str | None:
            return "vpc" if spec["vpc"] else None

        def endpoint(self, vpc: str, service: str):
            found = spec["endpoints"].get(service)
            return (found[0], found[1]) if found else None

        def has_internet_route(self) -> bool:
            return spec["internet"]

        def resolve(self, value: Any) -> Any:
            if value == {"Ref": "vpc"}:
                found = next(iter(spec["endpoints"].values()), None)
                return found[2] if found else "vpc"
            return value

        @property
        def resources(self) -> dict[str, dict]:
            return {"principal": {"Type": "Frozen"}}

    model = Frozen(template={"Resources": {}}, lookup=lambda *_: None, region="", account=spec["account"])
    caller = Caller(spec["name"], lambda: (model, "principal"))
    _LOCAL.__dict__["stack"] = [caller]
    from botocore.client import BaseClient

    original = BaseClient._make_api_call

    def _make_api_call(self, operation_name, api_params):
        try:
            authorize_client_call(self, operation_name, api_params)
        except Exception:
            with open(denials_file, "a", encoding="utf-8") as out:
                out.write(json.dumps(DENIALS[-1] if DENIALS else "denied") + "\n")
            raise
        return original(self, operation_name, api_params)

    BaseClient._make_api_call = _make_api_call
