"""The rewardpipe stack: environment-agnostic (no account/region, no context lookups), so it synthesizes
offline and deploys to whatever account and region the CLI's credentials point at."""

from __future__ import annotations

from aws_cdk import Aspects, Aws, CfnOutput, Stack, Tags
from aws_cdk import aws_iam as iam
from cdk_nag import NagSuppressions
from constructs import Construct

from stacks.config import DeploymentSettings
from stacks.constructs.code_runner import CodeRunner
from stacks.constructs.common import FunctionLogGroups, RewardPipeLayer, task_response_statement
from stacks.constructs.judge import JudgeAccess
from stacks.constructs.monitoring import Monitoring
from stacks.constructs.network import Network
from stacks.constructs.nova_bridge import (
    CONTEXT_KEY as NOVA_CONTEXT_KEY,
)
from stacks.constructs.nova_bridge import (
    NovaBridge,
    NovaBridgeSettings,
    load_nova_settings,
)
from stacks.constructs.rollout_workflow import RolloutWorkflow
from stacks.constructs.single_turn import SingleTurnReward
from stacks.constructs.storage import Storage
from stacks.constructs.user_layer import UserLayer, check_shipped
from stacks.limits import PolicySizeValidation, enforce_function_limits


class RewardPipeStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: DeploymentSettings,
        nova: NovaBridgeSettings | None = None,
        **kwargs,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            description="rewardpipe: GRPO reward scoring with per-component variance alarms",
            **kwargs,
        )
        self.settings = settings

        layer = RewardPipeLayer(self, "RewardPipeLayer", architecture=settings.functions.architecture)
        # The user's packages (rewardpipe.packages), for the functions that import the user's code only.
        self.user_layer = (
            UserLayer(
                self,
                "UserLayer",
                packages=settings.packages,
                architecture=settings.functions.architecture,
                rewardpipe_layer=layer,
            )
            if settings.packages
            else None
        )
        check_shipped(
            settings.user_code,
            {
                "environment": settings.environment,
                "reward": settings.reward,
                "single_turn_reward": settings.single_turn_reward,
            },
            self.user_layer,
        )
        self.storage = Storage(self, "Storage", settings=settings.storage)
        self.network = Network(self, "Network")
        # Inside the isolated VPC, S3 is only the job hand-off prefix (runner Lambda and Fargate).
        self.network.allow_bucket_prefix(self.storage.bucket.bucket_arn, "jobs/")
        # The code runner runs model code and never the user's: no user layer.
        self.runner = CodeRunner(
            self, "CodeRunner", settings=settings, storage=self.storage, network=self.network, layer=layer
        )
        self.single_turn = SingleTurnReward(
            self, "SingleTurnReward", settings=settings, network=self.network, layer=layer, user_layer=self.user_layer
        )
        # app.build_app validates the Nova settings before the CDK sees them; read the context only without it.
        if nova is None:
            nova = load_nova_settings(self.node.try_get_context(NOVA_CONTEXT_KEY))
        self.workflow = RolloutWorkflow(
            self,
            "RolloutWorkflow",
            settings=settings,
            storage=self.storage,
            runner=self.runner,
            layer=layer,
            user_layer=self.user_layer,
            # With the bridge a turn is Nova generating it, which may take up to the recipe's rollout.timeout.
            turn_timeout_s=nova.rollout_timeout_s if nova.enabled else None,
        )
        # The functions that score (the conversation states score a finished rollout in the same invocation).
        self.judge = JudgeAccess(
            self,
            "Judge",
            judge=settings.judge,
            network=self.network,
            functions=[
                self.workflow.start_fn,
                self.workflow.converse_fn,
                self.workflow.score_fn,
                self.single_turn.function,
            ],
        )
        self.monitoring = Monitoring(
            self,
            "Monitoring",
            settings=settings,
            storage=self.storage,
            workflow=self.workflow,
            runner=self.runner,
            layer=layer,
            single_turn=self.single_turn.function,
        )

        self.nova = (
            NovaBridge(
                self,
                "NovaBridge",
                settings=settings,
                nova=nova,
                storage=self.storage,
                workflow=self.workflow,
                layer=layer,
                alarm_topic=self.monitoring.topic,
                user_layer=self.user_layer,
            )
            if nova.enabled
            else None
        )
        if self.nova is not None:  # its alarms on the dashboard too
            self.monitoring.show_alarms("Nova bridge alarms", [self.nova.alarm, *self.nova.failure_alarms])

        CfnOutput(self, "BucketName", value=self.storage.bucket.bucket_name, key="BucketName")
        CfnOutput(self, "StateMachineArn", value=self.workflow.state_machine.state_machine_arn, key="StateMachineArn")
        CfnOutput(self, "TurnRequestQueueUrl", value=self.workflow.turn_requests.queue_url, key="TurnRequestQueueUrl")
        CfnOutput(
            self,
            "VarianceCheckFunctionName",
            value=self.monitoring.function.function_name,
            key="VarianceCheckFunctionName",
        )
        CfnOutput(self, "AlarmTopicArn", value=self.monitoring.topic.topic_arn, key="AlarmTopicArn")
        self.trainer_policy = self._trainer_policy()
        CfnOutput(
            self,
            "TrainerPolicyArn",
            value=self.trainer_policy.managed_policy_arn,
            key="TrainerPolicyArn",
            description="Attach to the trainer's role: start/describe rollouts, answer turns, invoke the check",
        )
        # Every taggable resource carries the project and stack, for cost allocation and clean-up.
        Tags.of(self).add("project", "rewardpipe")
        Tags.of(self).add("rewardpipe:stack", settings.stack_name)
        # Every function's logs expire, aws-cdk's custom-resource handlers' included (common.FunctionLogGroups).
        Aspects.of(self).add(FunctionLogGroups())
        self._acknowledge_nag_findings()
        # Every function within Lambda's 250 MB unzipped and 4 KB of environment variables, or the synth fails.
        enforce_function_limits(self)
        # Every IAM policy within its quota (checked once every grant is made: at synth), or the synth fails.
        self.node.add_validation(PolicySizeValidation(self))

    def _trainer_policy(self) -> iam.ManagedPolicy:
        """Exactly what a trainer needs against this stack, and nothing else."""
        machine = self.workflow.state_machine
        bucket = self.storage.bucket.bucket_arn
        executions = (
            f"arn:{Aws.PARTITION}:states:{Aws.REGION}:{Aws.ACCOUNT_ID}:execution:{machine.state_machine_name}:*"
        )
        return iam.ManagedPolicy(
            self,
            "TrainerPolicy",
            description="rewardpipe trainer: drive rollouts and checks",
            statements=[
                iam.PolicyStatement(
                    sid="StartRollouts", actions=["states:StartExecution"], resources=[machine.state_machine_arn]
                ),
                iam.PolicyStatement(sid="ReadRollouts", actions=["states:DescribeExecution"], resources=[executions]),
                task_response_statement(sid="AnswerTurns"),
                iam.PolicyStatement(
                    sid="ReadTurnQueue",
                    actions=[
                        "sqs:ReceiveMessage",
                        "sqs:DeleteMessage",
                        "sqs:ChangeMessageVisibility",
                        "sqs:GetQueueAttributes",
                        "sqs:GetQueueUrl",
                    ],
                    resources=[self.workflow.turn_requests.queue_arn],
                ),
                iam.PolicyStatement(
                    sid="InvokeVarianceCheck",
                    actions=["lambda:InvokeFunction"],
                    resources=[self.monitoring.function.function_arn],
                ),
                # The trainer reads each conversation from its state snapshot and writes replies and inputs too
                # large for Step Functions' 256 KiB payloads (rewardpipe.aws.state); nothing else in the bucket. It
                # writes no other state object: not the episode, nor the score RecordError answers with.
                iam.PolicyStatement(
                    sid="ExchangeLargeState",
                    actions=["s3:GetObject"],
                    resources=[f"{bucket}/runs/*/state/*", f"{bucket}/tasks/inline/*"],
                ),
                iam.PolicyStatement(
                    sid="WriteLargeRepliesAndInputs",
                    actions=["s3:PutObject"],
                    resources=[
                        f"{bucket}/runs/*/state/*/reply-*.json",
                        f"{bucket}/runs/*/state/inputs/*",
                        f"{bucket}/tasks/inline/*",
                    ],
                ),
            ],
        )

    def _acknowledge_nag_findings(self) -> None:
        """Every cdk-nag AwsSolutions finding we accept, each with the reason it is acceptable."""
        NagSuppressions.add_stack_suppressions(
            self,
            [
                {
                    "id": "AwsSolutions-S1",
                    "reason": (
                        "Only the access-log bucket itself has no access logging (logging it into itself would loop)."
                    ),
                },
                {
                    "id": "AwsSolutions-IAM4",
                    "reason": (
                        "Only aws-cdk's own custom-resource handlers keep AWSLambdaBasicExecutionRole (or "
                        "AWSLambdaVPCAccessExecutionRole); our functions' roles write their own log group only "
                        "(stacks/constructs/common.py: execution_role)."
                    ),
                    "appliesTo": [
                        {
                            "regex": (
                                "/^Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                                "AWSLambda(Basic|VPCAccess)ExecutionRole$/g"
                            )
                        }
                    ],
                },
                {
                    "id": "AwsSolutions-IAM5",
                    "reason": (
                        "Object access is scoped to one key prefix (tasks/, jobs/ or runs/); object keys inside "
                        "it are per-rollout and not known at deploy time."
                    ),
                    "appliesTo": [{"regex": "/^Resource::<StorageRecords[0-9A-F]+\\.Arn>/(tasks|jobs|runs)/\\*$/g"}],
                },
                {
                    "id": "AwsSolutions-IAM5",
                    "reason": (
                        "X-Ray PutTraceSegments/PutTelemetryRecords and Step Functions SendTaskSuccess/"
                        "SendTaskFailure/SendTaskHeartbeat (the request names only a task token) do not support "
                        "resource-level permissions, nor do the network-interface calls Lambda makes for a VPC "
                        "function (DescribeNetworkInterfaces works on * only; the interface has no id before it "
                        "exists). ECS DescribeTasks/StopTask do, but aws-cdk grants them on * "
                        "for runTask.sync: the state machine's explicit Deny bounds them to its cluster's tasks."
                    ),
                    "appliesTo": ["Resource::*"],
                },
                {
                    "id": "AwsSolutions-IAM5",
                    "reason": (
                        "CDK grants lambda:InvokeFunction on the function ARN and its versions (:*) so retries "
                        "of a qualified invoke work; the functions are our own."
                    ),
                    "appliesTo": [
                        {"regex": "/^Resource::<RolloutWorkflow.+\\.Arn>:\\*$/g"},
                        {"regex": "/^Resource::<CodeRunner.+\\.Arn>:\\*$/g"},
                    ],
                },
                {
                    "id": "AwsSolutions-IAM5",
                    "reason": (
                        "EcsRunTask(.sync) needs the task-definition family ARN with :* (any revision) and the "
                        "Step Functions managed EventBridge rule."
                    ),
                    "appliesTo": [
                        {"regex": "/^Resource::arn:<AWS::Partition>:(ecs|events):.*$/g"},
                        {"regex": "/^Resource::<CodeRunnerTask.*$/g"},
                    ],
                },
                {
                    "id": "AwsSolutions-IAM5",
                    "reason": (
                        "Secrets Manager ARNs end in a random suffix, so a secret referenced by name needs the "
                        "-?????? wildcard."
                    ),
                    "appliesTo": [{"regex": "/^Resource::arn:<AWS::Partition>:secretsmanager:.*$/g"}],
                },
                {
                    "id": "AwsSolutions-IAM5",
                    "reason": (
                        "Publishing to the KMS-encrypted alarm topic needs kms:GenerateDataKey* (the key is this "
                        "stack's topic key only)."
                    ),
                    "appliesTo": ["Action::kms:GenerateDataKey*"],
                },
                {
                    "id": "AwsSolutions-IAM5",
                    "reason": (
                        "The trainer describes the executions it started: execution ARNs are only known per "
                        "execution, so the state machine's execution:<name>:* pattern."
                    ),
                    "appliesTo": [
                        {
                            "regex": (
                                "/^Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:"
                                "execution:<RolloutWorkflowStateMachine.+\\.Name>:\\*$/g"
                            )
                        }
                    ],
                },
                {
                    "id": "AwsSolutions-IAM5",
                    "reason": (
                        "RecordError reads back the input of the execution whose first state failed "
                        "(DescribeExecution on this state machine's executions, named only at run time); the ARN "
                        "is built from the machine's name to avoid a dependency cycle."
                    ),
                    "appliesTo": [
                        {
                            "regex": (
                                "/^Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:"
                                "execution:[^:]+-rollouts:\\*$/g"
                            )
                        }
                    ],
                },
                {
                    "id": "AwsSolutions-IAM5",
                    "reason": (
                        "The trainer reads per-execution state objects (runs/<run>/state/<attempt>/...) and writes "
                        "its replies (reply-<n>.json), large inputs (state/inputs/) and inline tasks, whose keys are "
                        "only known per rollout; nothing else in the bucket."
                    ),
                    "appliesTo": [
                        {"regex": "/^Resource::<StorageRecords[0-9A-F]+\\.Arn>/(runs/\\*/state|tasks/inline)/\\*$/g"},
                        {
                            "regex": (
                                "/^Resource::<StorageRecords[0-9A-F]+\\.Arn>/runs/\\*/state/"
                                "(\\*/reply-\\*\\.json|inputs/\\*)$/g"
                            )
                        },
                    ],
                },
                {
                    "id": "AwsSolutions-ECS2",
                    "reason": (
                        "The container's environment holds only the bucket name, Powertools settings and TMPDIR; "
                        "no secrets."
                    ),
                },
                {
                    "id": "AwsSolutions-SF1",
                    "reason": (
                        "Logging level is ALL; include_execution_data is off so hidden tests and transcripts "
                        "stay out of logs."
                    ),
                },
            ],
        )
