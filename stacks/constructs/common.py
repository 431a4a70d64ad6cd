"""Small helpers shared by the constructs: the Lambda defaults every function gets."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import jsii
from aws_cdk import Aws, CfnResource, Duration, IAspect, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as _lambda
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from cdk_nag import NagSuppressions

from constructs import Construct, IConstruct
from stacks.config import HANDLER_HEADROOM_MB
from stacks.packaging import function_dir, stage_layer

# Amazon Linux 2023; its deprecation dates are data in stacks/runtimes.py, checked by tests/infra/test_runtime.py.
# The layer is built for it (stacks/packaging.py: cp313 wheels, CPython 3.13 byte code or none).
RUNTIME = _lambda.Runtime.PYTHON_3_13
ARCHITECTURES = {"arm64": _lambda.Architecture.ARM_64, "x86_64": _lambda.Architecture.X86_64}
SERVICE_NAME = "rewardpipe"
METRICS_NAMESPACE = "RewardPipe"
LOG_RETENTION = logs.RetentionDays.ONE_MONTH


def newest_python_runtime() -> str:
    """The newest Python runtime this aws-cdk-lib knows (what cdk-nag's AwsSolutions-L1 asks for)."""

    def version(name: str) -> tuple[int, ...]:
        return tuple(int(p) for p in name.removeprefix("python").split(".") if p.isdigit())

    names = [r.name for r in _lambda.Runtime.ALL if r.family == _lambda.RuntimeFamily.PYTHON]
    return max(names, key=version)


def _acknowledge_runtime(fn: _lambda.Function) -> None:
    """cdk-nag's L1 wants the newest runtime CDK knows, which is newer than the one the layer is built and
    tested for; acknowledged on this function only, and only while that is so (moving RUNTIME to the newest
    removes it). What matters for a deployment, how far the runtime is from its published block dates, is a
    test (tests/infra/test_runtime.py against stacks/runtimes.py)."""
    newest = newest_python_runtime()
    if RUNTIME.name == newest:
        return
    NagSuppressions.add_resource_suppressions(
        fn,
        [
            {
                "id": "AwsSolutions-L1",
                "reason": (
                    f"{RUNTIME.name} rather than {newest}: the newest runtime whose interpreter the layer's byte code "
                    f"is compiled with and the handlers are tested on here; a test fails 90 days before its "
                    f"published create-block date."
                ),
            }
        ],
        apply_to_children=True,
    )


class RewardPipeLayer(_lambda.LayerVersion):
    """The layer every function uses (rewardpipe + its run-time dependencies), built for one architecture;
    :func:`python_function` takes the architecture from it, so a function and its layer never disagree."""

    def __init__(self, scope: Construct, construct_id: str, *, architecture: str) -> None:
        asset_path = Path(stage_layer(architecture))
        super().__init__(
            scope,
            construct_id,
            code=_lambda.Code.from_asset(str(asset_path)),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURES[architecture]],
            description=f"rewardpipe package + Powertools, pydantic and httpx for {architecture} (pinned versions)",
        )
        self.architecture = ARCHITECTURES[architecture]
        self.architecture_name = architecture
        self.asset_path = asset_path


def s3_limits_env(timeout_s: int, environment: Mapping[str, str]) -> dict[str, str]:
    """``REWARDPIPE_S3_*`` for a function of ``timeout_s`` seconds that uses the records bucket (``BUCKET``).

    One S3 call through the store may take its deadline plus one connect and one read timeout
    (rewardpipe.store.S3Limits: 85 s by default). A function with less than twice that gets limits that fit in
    half its time, so a hung S3 endpoint ends in the store's own StoreUnreachable (TransientError: retried by the
    state machine, then an error record) rather than in the function's timeout, which RecordError's Retry does
    not cover. A function without ``BUCKET`` gets nothing (the variables count against Lambda's 4 KB)."""
    from rewardpipe.store import S3_LIMIT_ENV, S3Limits

    if "BUCKET" not in environment or any(variable in environment for variable in S3_LIMIT_ENV.values()):
        return {}
    limits = S3Limits()
    budget = timeout_s / 2
    if limits.deadline_s + limits.connect_timeout_s + limits.read_timeout_s <= budget:
        return {}
    share = max(1.0, (budget - limits.connect_timeout_s) / 2)
    return {S3_LIMIT_ENV["read_timeout_s"]: f"{share:g}", S3_LIMIT_ENV["deadline_s"]: f"{share:g}"}


def python_function(
    scope: Construct,
    construct_id: str,
    *,
    name: str,
    layer: RewardPipeLayer,
    environment: Mapping[str, str],
    memory_mb: int,
    timeout_s: int,
    description: str,
    function_name: str | None = None,
    vpc: ec2.IVpc | None = None,
    security_groups: list[ec2.ISecurityGroup] | None = None,
    tracing: bool = True,
    reserved_concurrency: int | None = None,
    user_layer: _lambda.LayerVersion | None = None,
) -> _lambda.Function:
    """A Python 3.13 function from ``functions/<name>/handler.py`` with Powertools settings and its own log group.

    Functions in the isolated VPC run without X-Ray (there is no route to the X-Ray API and an
    endpoint for it would cost more than the traces are worth for a CPU-bound sandbox).

    ``user_layer`` (stacks/constructs/user_layer.py) is given to the functions that import the user's code only.
    Every function is registered with its code and layers for the synth's Lambda limit checks (stacks/limits.py).
    """
    code_dir = function_dir(name)
    log_group = logs.LogGroup(
        scope,
        f"{construct_id}Logs",
        retention=LOG_RETENTION,
        removal_policy=RemovalPolicy.DESTROY,
    )
    env = {
        "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
        "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
        "POWERTOOLS_LOG_LEVEL": "INFO",
        "POWERTOOLS_TRACE_DISABLED": "false" if tracing else "true",
        **s3_limits_env(timeout_s, environment),
        **environment,
    }
    fn = _lambda.Function(
        scope,
        construct_id,
        role=execution_role(scope, construct_id, log_group, in_vpc=vpc is not None),
        function_name=function_name,
        description=description,
        runtime=RUNTIME,
        architecture=layer.architecture,
        handler="handler.lambda_handler",
        code=_lambda.Code.from_asset(code_dir, exclude=list(CODE_EXCLUDES)),
        layers=[layer, *([user_layer] if user_layer is not None else [])],
        memory_size=memory_mb,
        timeout=Duration.seconds(timeout_s),
        environment=env,
        tracing=_lambda.Tracing.ACTIVE if tracing else _lambda.Tracing.DISABLED,
        log_group=log_group,
        vpc=vpc,
        vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED) if vpc else None,
        security_groups=security_groups,
        allow_public_subnet=False,
        reserved_concurrent_executions=reserved_concurrency,
    )
    _acknowledge_runtime(fn)
    register_function(fn, code_dir, [layer, *([user_layer] if user_layer is not None else [])], env)
    return fn


CODE_EXCLUDES = ("__pycache__", "*.pyc")

# What Lambda does with a VPC function's role to manage its network interfaces (the Lambda developer guide's
# VPC permissions: AWSLambdaVPCAccessExecutionRole without its logs actions). DescribeNetworkInterfaces
# works on "*" only, and the interfaces are created before their ids exist, so none of these is scoped.
VPC_INTERFACE_ACTIONS = (
    "ec2:CreateNetworkInterface",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSubnets",
    "ec2:DeleteNetworkInterface",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
)
LOG_WRITE_ACTIONS = ("logs:CreateLogStream", "logs:PutLogEvents")


def execution_role(scope: Construct, construct_id: str, log_group: logs.ILogGroup, *, in_vpc: bool) -> iam.Role:
    """A function's role before any grant: writing its own log group, and (in the VPC) its network interfaces.

    aws-cdk's default attaches AWSLambdaBasicExecutionRole (and AWSLambdaVPCAccessExecutionRole in a VPC), which
    allow logs:CreateLogGroup and logs:PutLogEvents on every log group of the account. The code-runner and
    reward functions run model code: credentials that leak from them must not write into another system's logs
    (forging its records) or create log groups without end. Each function has its own group (LoggingConfig), so
    Lambda never needs to create one."""
    statements = [iam.PolicyStatement(actions=list(LOG_WRITE_ACTIONS), resources=[log_group.log_group_arn])]
    if in_vpc:
        statements.append(iam.PolicyStatement(actions=list(VPC_INTERFACE_ACTIONS), resources=["*"]))
    return iam.Role(
        scope,
        f"{construct_id}ServiceRole",
        assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
        inline_policies={"Execution": iam.PolicyDocument(statements=statements)},
    )


@jsii.implements(IAspect)
class FunctionLogGroups:
    """Every Lambda function of the stack logs to a group that expires (``LOG_RETENTION``).

    Without a LoggingConfig a function logs to ``/aws/lambda/<name>``, which Lambda creates on first use with no
    retention and CloudFormation never deletes. :func:`python_function` gives each of ours its group; aws-cdk's
    own custom-resource handlers (a provider's ``CfnResource`` or a singleton's ``CfnFunction``) get one here."""

    def visit(self, node: IConstruct) -> None:
        if not isinstance(node, CfnResource) or node.cfn_resource_type != "AWS::Lambda::Function":
            return
        if isinstance(node, _lambda.CfnFunction) and node.logging_config is not None:
            return
        scope, cid = node.node.scope, f"{node.node.id}Logs"
        if not isinstance(scope, Construct) or scope.node.try_find_child(cid) is not None:  # (a second synth: done)
            return
        group = logs.LogGroup(scope, cid, retention=LOG_RETENTION, removal_policy=RemovalPolicy.DESTROY)
        node.add_property_override("LoggingConfig.LogGroup", group.log_group_name)


def register_function(fn: _lambda.Function, code_dir: str, layers: list, environment: Mapping[str, str]) -> None:
    """Remember what ``fn`` unpacks on Lambda (its code folder and each layer's staged folder) and its environment
    (kept current through ``add_environment``), for stacks.limits.check_function_limits."""
    from stacks.limits import FunctionAssets, registry

    assets = FunctionAssets(
        fn, Path(code_dir), [(type(lay).__name__, Path(lay.asset_path)) for lay in layers], dict(environment)
    )
    add = fn.add_environment

    def add_environment(key: str, value: str, *args, **kwargs):  # CDK's signature
        assets.environment[key] = value
        return add(key, value, *args, **kwargs)

    fn.add_environment = add_environment  # type: ignore[method-assign]
    registry(Stack.of(fn)).append(assets)


def grant_secret_read(scope: Construct, construct_id: str, secret: str, functions: list, variable: str) -> None:
    """Read access to one Secrets Manager secret, named or given by its ARN, for ``functions``, each of which
    gets the name in ``variable`` (the policy endpoint's key and an OpenAI-compatible judge's share this)."""
    if secret.startswith("arn:"):
        handle = secretsmanager.Secret.from_secret_complete_arn(scope, construct_id, secret)
    else:
        handle = secretsmanager.Secret.from_secret_name_v2(scope, construct_id, secret)
    for fn in functions:
        handle.grant_read(fn)
        fn.add_environment(variable, secret)


def s3_prefix_arn(bucket_arn: str, prefix: str) -> str:
    return f"{bucket_arn}/{prefix}*"


def sandbox_memory_mb(host_memory_mb: int, workers: int) -> int:
    """The per-job memory cap (REWARDPIPE_SANDBOX_MEMORY_MB) that keeps ``workers`` jobs inside the host.

    Without it the sandbox's default cap can exceed what a Lambda or task has, and a memory-hungry
    sample gets the whole host OOM-killed (every sample of the batch lost) instead of failing alone.
    The settings refuse a host too small for the smallest cap (stacks.config.too_small_for_sandbox).
    """
    return (host_memory_mb - HANDLER_HEADROOM_MB) // max(1, workers)


def _source_conditions(source_vpce: str | None) -> dict | None:
    return {"StringEquals": {"aws:SourceVpce": source_vpce}} if source_vpce else None


def grant_prefix(
    role: iam.IGrantable, bucket_arn: str, prefix: str, *, read: bool, write: bool, source_vpce: str | None = None
) -> None:
    """Object-level access to one key prefix only (no bucket-wide wildcards).

    A reader also gets ListBucket on that prefix: without it S3 answers a missing key with 403
    AccessDenied instead of 404 NoSuchKey, and "not there yet" becomes indistinguishable from "not
    allowed". ``source_vpce`` limits the grant to requests through that VPC endpoint.
    """
    actions: list[str] = []
    if read:
        actions.append("s3:GetObject")
    if write:
        actions.append("s3:PutObject")
    role.grant_principal.add_to_principal_policy(
        iam.PolicyStatement(
            actions=actions, resources=[s3_prefix_arn(bucket_arn, prefix)], conditions=_source_conditions(source_vpce)
        )
    )
    if read:
        grant_list(role, bucket_arn, prefix, source_vpce=source_vpce)


def grant_list(role: iam.IGrantable, bucket_arn: str, prefix: str, *, source_vpce: str | None = None) -> None:
    """ListBucket restricted to keys under ``prefix`` by the s3:prefix condition."""
    conditions: dict = {"StringLike": {"s3:prefix": [f"{prefix}*"]}}
    conditions.update(_source_conditions(source_vpce) or {})
    role.grant_principal.add_to_principal_policy(
        iam.PolicyStatement(actions=["s3:ListBucket"], resources=[bucket_arn], conditions=conditions)
    )


# Completing a task token: what a trainer, the conversation functions and the Nova bridge call.
TASK_RESPONSE_ACTIONS = ("states:SendTaskSuccess", "states:SendTaskFailure", "states:SendTaskHeartbeat")


def task_response_statement(
    actions: tuple[str, ...] = TASK_RESPONSE_ACTIONS, sid: str = "CompleteTaskTokens"
) -> iam.PolicyStatement:
    """Permission to complete (or heartbeat) task tokens, on ``"*"``.

    The Service Authorization Reference lists no resource type for states:SendTaskSuccess,
    SendTaskFailure and SendTaskHeartbeat, and "if there is no value for this column, you must specify
    all resources ("*")": the request names only a task token, no ARN. aws-cdk's grantTaskResponse
    grants them on the state machine's ARN, which callers report works for callback tokens, but that is
    undocumented, and if IAM evaluated such a call against "*" the scoped grant would deny every trainer
    turn and every conversation state's own completion. A task token is itself the capability (opaque,
    issued per task to whoever the state machine hands it), and the statement holds these actions only
    (its Sid keeps CDK from merging other "*" actions into it).
    """
    unknown = set(actions) - set(TASK_RESPONSE_ACTIONS)
    if unknown:
        raise ValueError(f"not a task-token action: {sorted(unknown)}")
    return iam.PolicyStatement(sid=sid, actions=list(actions), resources=["*"])


def limit_trust_to_this_account(role: iam.IRole, service: str, source_arn: str) -> None:
    """Make ``role``'s trust in ``service`` hold only for requests on behalf of ``source_arn`` (ArnLike) in this
    account: the ``aws:SourceArn`` and ``aws:SourceAccount`` conditions a service documents against the
    cross-service confused deputy, added to the statement aws-cdk wrote (its logical id and principal stay)."""
    cfn = role.node.default_child
    if not isinstance(cfn, iam.CfnRole):
        raise TypeError(f"{role.node.path} is not a role this stack defines: its trust policy cannot be limited")
    document = Stack.of(role).resolve(cfn.assume_role_policy_document)
    (index,) = [i for i, s in enumerate(document["Statement"]) if s.get("Principal") == {"Service": service}]
    cfn.add_property_override(
        f"AssumeRolePolicyDocument.Statement.{index}.Condition",
        {"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}, "ArnLike": {"aws:SourceArn": source_arn}},
    )


def stack_name(scope: Construct) -> str:
    return Stack.of(scope).stack_name
