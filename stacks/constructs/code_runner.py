"""Code runner: where committed model code meets the hidden tests.

Two back ends share one job format and one result format (rewardpipe.aws.jobs):

* a Lambda for short jobs (time budget up to the routing threshold), in the isolated VPC; the job comes in
  its invoke payload and the result goes back in the response, so its role has no S3 access at all;
* an ECS Fargate task for long jobs (and jobs too large for a synchronous invoke), from
  containers/code_runner/, in the same isolated subnets; the job and result go through S3 under ``jobs/``,
  and its role may read and write ``jobs/*`` only, through the VPC's S3 endpoint. Inside either, the untrusted child
process gets a clean environment (no credentials) from the rewardpipe execution layer, and the parent makes itself
non-dumpable so the child cannot read the parent's environment through /proc.
"""

from __future__ import annotations

from aws_cdk import Aws, RemovalPolicy
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_logs as logs

from constructs import Construct
from stacks.config import DeploymentSettings
from stacks.constructs.common import (
    METRICS_NAMESPACE,
    SERVICE_NAME,
    RewardPipeLayer,
    grant_prefix,
    limit_trust_to_this_account,
    python_function,
    sandbox_memory_mb,
)
from stacks.constructs.network import Network
from stacks.constructs.storage import JOBS_PREFIX, Storage
from stacks.packaging import stage_container

CONTAINER_NAME = "runner"
# The image's runtime user (containers/code_runner/Dockerfile: useradd --uid 10001, USER 10001). The task
# definition names it too: ECS then runs the container as this uid whatever the image says (an image rebuilt
# without USER would otherwise run the model's code as root), and AWS Config's
# ecs-task-definition-linux-user-non-root rule finds a user in the definition, as it requires.
RUNTIME_USER = "10001:10001"


class CodeRunner(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: DeploymentSettings,
        storage: Storage,
        network: Network,
        layer: RewardPipeLayer,
    ) -> None:
        super().__init__(scope, construct_id)
        bucket = storage.bucket

        self.function = python_function(
            self,
            "Function",
            name="code_runner",
            layer=layer,
            description="rewardpipe: run a committed program against its hidden tests (short jobs)",
            environment={
                "EXECUTION_ROUTE": "lambda",
                "PYDANTIC_DISABLE_PLUGINS": "__all__",
                # One job per invocation: the sandboxed tree may use what the handler leaves free.
                "REWARDPIPE_SANDBOX_MEMORY_MB": str(sandbox_memory_mb(settings.functions.code_runner_memory_mb, 1)),
            },
            memory_mb=settings.functions.code_runner_memory_mb,
            timeout_s=settings.functions.code_runner_timeout_s,
            reserved_concurrency=settings.functions.reserved_concurrency.code_runner,
            vpc=network.vpc,
            security_groups=[network.sandbox_sg],
            tracing=False,
        )
        # No S3 grant: the job arrives in the invoke payload and the result leaves in the response
        # (rewardpipe.aws.jobs), so credentials leaked to model code can read no rollout's hidden tests.

        self.cluster = ecs.Cluster(
            self, "Cluster", vpc=network.vpc, container_insights_v2=ecs.ContainerInsights.ENABLED
        )
        self.task_definition = ecs.FargateTaskDefinition(
            self,
            "Task",
            cpu=settings.fargate.cpu,
            memory_limit_mib=settings.fargate.memory_mib,
            runtime_platform=ecs.RuntimePlatform(
                cpu_architecture=ecs.CpuArchitecture.X86_64,
                operating_system_family=ecs.OperatingSystemFamily.LINUX,
            ),
        )
        self.task_definition.add_volume(name="scratch")
        log_group = logs.LogGroup(
            self, "TaskLogs", retention=logs.RetentionDays.ONE_MONTH, removal_policy=RemovalPolicy.DESTROY
        )
        self.container = self.task_definition.add_container(
            CONTAINER_NAME,
            # Fargate runs x86_64 (runtime_platform above); pin the build so an arm64 laptop builds the same.
            image=ecs.ContainerImage.from_asset(stage_container(), platform=ecr_assets.Platform.LINUX_AMD64),
            # Container-level memory is set explicitly (the task size alone would do on AWS; moto needs it).
            memory_limit_mib=settings.fargate.memory_mib,
            readonly_root_filesystem=True,
            user=RUNTIME_USER,
            # No Linux capabilities at all, and an init process that reaps the sandbox's orphans and
            # forwards SIGTERM when the task is stopped.
            linux_parameters=self._linux_parameters(),
            logging=ecs.LogDriver.aws_logs(stream_prefix="runner", log_group=log_group),
            environment={
                "BUCKET": bucket.bucket_name,
                "EXECUTION_ROUTE": "fargate",
                "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
                "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
                "TMPDIR": "/scratch",
                "REWARDPIPE_SANDBOX_MEMORY_MB": str(sandbox_memory_mb(settings.fargate.memory_mib, 1)),
            },
        )
        self.container.add_mount_points(
            ecs.MountPoint(container_path="/scratch", source_volume="scratch", read_only=False)
        )
        grant_prefix(
            self.task_definition.task_role,
            bucket.bucket_arn,
            JOBS_PREFIX,
            read=True,
            write=True,
            source_vpce=network.s3_endpoint.vpc_endpoint_id,
        )
        # The task role trusts ECS for this account's tasks only (Amazon ECS Developer Guide, "Task IAM role").
        limit_trust_to_this_account(
            self.task_definition.task_role,
            "ecs-tasks.amazonaws.com",
            f"arn:{Aws.PARTITION}:ecs:{Aws.REGION}:{Aws.ACCOUNT_ID}:*",
        )
        self.security_group = network.sandbox_sg
        self.subnets = network.subnets

    def _linux_parameters(self) -> ecs.LinuxParameters:
        params = ecs.LinuxParameters(self, "RunnerLinux", init_process_enabled=True)
        params.drop_capabilities(ecs.Capability.ALL)
        return params
