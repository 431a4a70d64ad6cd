"""Nova Forge multi-turn bridge ("bring your own orchestration", ``rollout.delegate: true``).

Enabled by the context key ``rewardpipe_nova`` (``{"enabled": true, ...}``, see :class:`NovaBridgeSettings`
and docs/aws.md "Nova Forge multi-turn"). It adds the four SageMaker-named FIFO queues Nova talks to, the
bridge Lambdas (rewardpipe.integrations.nova.bridge), a least-privilege role for the training job, an
alarm when rollouts approach Nova's ``rollout.timeout``, and outputs the four recipe overrides.

The rollouts themselves run in the rollout state machine in its ``callback`` policy mode: the forwarder
consumes the workflow's turn-request queue (task tokens never leave AWS) and the router resumes the
waiting execution. No change to the state machine is needed.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from aws_cdk import CfnOutput, Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as _lambda
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from cdk_nag import NagSuppressions
from constructs import Construct
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from stacks.config import DeploymentSettings
from stacks.constructs.common import RewardPipeLayer, grant_list, grant_prefix, python_function, task_response_statement
from stacks.constructs.monitoring import alarm_name_prefix
from stacks.constructs.rollout_workflow import RolloutWorkflow
from stacks.constructs.storage import RUNS_PREFIX, Storage

CONTEXT_KEY = "rewardpipe_nova"
NOVA_PREFIX = "nova/"


class NovaBridgeSettings(BaseModel):
    """``rollout_timeout_s`` is the recipe's ``rollout.timeout``; each rollout gets ``budget_fraction`` of it
    before the bridge stops it and answers with ``error_reward``, and the alarm fires at ``alarm_fraction``."""

    # Strict like the stack's own settings (stacks.config): "true" or 1 is not a bool, "600" not an integer.
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    enabled: bool = False
    rollout_timeout_s: int = Field(default=600, ge=60, le=86400)
    budget_fraction: float = Field(default=0.8, gt=0, lt=1)
    alarm_fraction: float = Field(default=0.7, gt=0, lt=1)
    error_reward: Literal["neutral", "zero", "fail_batch"] = "neutral"
    task_field: str = "task_id"
    inline_task_field: str = "task"
    group_pattern: str = r"^(?P<group>.+)_(?P<index>\d+)$"
    range_mapping: Literal["linear", "clip"] = "linear"
    run_id: str = Field(default="nova", pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,30}$")
    bookkeeping_days: int = Field(default=3, ge=1, le=365)

    @field_validator("group_pattern")
    @classmethod
    def _group_pattern(cls, value: str) -> str:
        try:  # checked at synth: the bridge would otherwise fail every rollout at run time
            compiled = re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        if "group" not in compiled.groupindex:
            raise ValueError("needs a named group (?P<group>...)")
        return value

    @model_validator(mode="after")
    def _alarm_before_budget(self) -> "NovaBridgeSettings":
        if self.alarm_fraction >= self.budget_fraction:
            raise ValueError("alarm_fraction must be below budget_fraction (warn before rollouts are cut off)")
        return self

    @property
    def budget_s(self) -> float:
        return self.rollout_timeout_s * self.budget_fraction

    def bridge_config(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "task_field": self.task_field, "inline_task_field": self.inline_task_field,
                "group_pattern": self.group_pattern, "range_mapping": self.range_mapping,
                "error_reward": self.error_reward, "rollout_budget_s": self.budget_s}


def load_nova_settings(raw: Any) -> NovaBridgeSettings:
    """The ``rewardpipe_nova`` context (an object or a JSON string); a bad value is a SettingsError naming it."""
    from stacks.config import load_context

    return load_context(CONTEXT_KEY, raw, NovaBridgeSettings)


class NovaBridge(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, settings: DeploymentSettings,
                 nova: NovaBridgeSettings, storage: Storage, workflow: RolloutWorkflow,
                 layer: RewardPipeLayer, alarm_topic: Any = None) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self).stack_name
        bucket = storage.bucket
        # Bookkeeping objects are tiny and only needed while a rollout is in flight.
        bucket.add_lifecycle_rule(id="NovaBookkeeping", prefix=NOVA_PREFIX, expiration=Duration.days(nova.bookkeeping_days))

        def fifo(name: str, *, nova_sends: bool, visibility_s: int = 60) -> sqs.Queue:
            # Queue names must contain "SageMaker" for the training job's service role to reach them.
            dlq = sqs.Queue(self, f"{name}Dlq", queue_name=f"{stack}-SageMaker-{name}-dlq.fifo", fifo=True,
                            encryption=sqs.QueueEncryption.SQS_MANAGED, enforce_ssl=True,
                            retention_period=Duration.days(14))
            return sqs.Queue(
                self, name, queue_name=f"{stack}-SageMaker-{name}.fifo", fifo=True,
                content_based_deduplication=nova_sends, encryption=sqs.QueueEncryption.SQS_MANAGED,
                enforce_ssl=True, visibility_timeout=Duration.seconds(visibility_s),
                retention_period=Duration.hours(4),
                dead_letter_queue=sqs.DeadLetterQueue(queue=dlq, max_receive_count=5),
            )

        fns = settings.functions
        self.rollout_requests = fifo("RolloutRequestQueue", nova_sends=True, visibility_s=fns.timeout_s * 6)
        self.rollout_responses = fifo("RolloutResponseQueue", nova_sends=False)
        self.generate_requests = fifo("GenerateRequestQueue", nova_sends=False)
        self.generate_responses = fifo("GenerateResponseQueue", nova_sends=True, visibility_s=fns.timeout_s * 6)

        env = {
            "BUCKET": bucket.bucket_name,
            "REWARD_NAME": settings.reward_name,
            "REWARD_WEIGHTS": json.dumps(settings.reward_weights, sort_keys=True),
            "NOVA_CONFIG": json.dumps(nova.bridge_config(), sort_keys=True),
            "STATE_MACHINE_ARN": workflow.state_machine.state_machine_arn,
            "ROLLOUT_RESPONSE_QUEUE_URL": self.rollout_responses.queue_url,
            "GENERATE_REQUEST_QUEUE_URL": self.generate_requests.queue_url,
        }

        def function(cid: str, name: str, description: str) -> _lambda.Function:
            fn = python_function(self, cid, name=name, layer=layer, environment=env, memory_mb=fns.memory_mb,
                                 timeout_s=fns.timeout_s, description=f"rewardpipe nova bridge: {description}")
            grant_prefix(fn, bucket.bucket_arn, NOVA_PREFIX, read=True, write=True)
            grant_list(fn, bucket.bucket_arn, NOVA_PREFIX)
            return fn

        self.intake = function("Intake", "nova_intake", "rollout request -> one rollout execution")
        self.forwarder = function("Forwarder", "nova_forward_turn", "policy turn -> generate request")
        self.router = function("Router", "nova_route_response", "generate response -> waiting rollout")
        self.responder = function("Responder", "nova_respond", "finished rollout -> rollout response")
        self.sweeper = function("Sweeper", "nova_sweep", "stop and answer rollouts past their budget")

        workflow.state_machine.grant_start_execution(self.intake)
        # Not grant_task_response (the state machine's ARN): SendTask* authorize on "*" (common.task_response_statement).
        self.forwarder.add_to_role_policy(task_response_statement())
        self.router.add_to_role_policy(task_response_statement())
        self.sweeper.add_to_role_policy(iam.PolicyStatement(
            actions=["states:StopExecution"],
            resources=[Stack.of(self).format_arn(service="states", resource="execution",
                                                 resource_name=f"{workflow.state_machine.state_machine_name}:{_name_prefix(nova.run_id)}-*",
                                                 arn_format=_colon())],
        ))
        for fn in (self.responder, self.sweeper):
            self.rollout_responses.grant_send_messages(fn)
        grant_prefix(self.sweeper, bucket.bucket_arn, RUNS_PREFIX, read=False, write=True)  # timeout records
        self.generate_requests.grant_send_messages(self.forwarder)

        for fn, queue in ((self.intake, self.rollout_requests), (self.forwarder, workflow.turn_requests),
                          (self.router, self.generate_responses)):
            fn.add_event_source(sources.SqsEventSource(queue, batch_size=1, report_batch_item_failures=True))

        events.Rule(self, "RolloutEnded", event_pattern=events.EventPattern(
            source=["aws.states"], detail_type=["Step Functions Execution Status Change"],
            detail={"stateMachineArn": [workflow.state_machine.state_machine_arn],
                    "status": ["SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"]},
        )).add_target(targets.LambdaFunction(self.responder, retry_attempts=4))
        events.Rule(self, "Sweep", schedule=events.Schedule.rate(Duration.minutes(1))).add_target(
            targets.LambdaFunction(self.sweeper, retry_attempts=2))

        # The training job: sends rollout requests and generate responses, receives the other two. Nothing else.
        self.training_role = iam.Role(self, "TrainingJobRole", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
                                      description="Nova Forge training job: the four delegated-rollout queues only")
        self.rollout_requests.grant_send_messages(self.training_role)
        self.generate_responses.grant_send_messages(self.training_role)
        self.generate_requests.grant_consume_messages(self.training_role)
        self.rollout_responses.grant_consume_messages(self.training_role)

        self.alarm = cloudwatch.Alarm(
            self, "RolloutsNearTimeout",
            # Named with the stack's alarm prefix: the alarm topic lets CloudWatch publish only for those.
            alarm_name=f"{alarm_name_prefix(self)}nova-rollouts-near-timeout",
            alarm_description=(f"A rollout took more than {nova.alarm_fraction:.0%} of Nova's rollout.timeout "
                               f"({nova.rollout_timeout_s}s); at {nova.budget_fraction:.0%} the bridge cuts it off "
                               "with the error reward"),
            metric=cloudwatch.Metric(namespace="AWS/States", metric_name="ExecutionTime", statistic="Maximum",
                                     period=Duration.minutes(1),
                                     dimensions_map={"StateMachineArn": workflow.state_machine.state_machine_arn}),
            threshold=nova.rollout_timeout_s * nova.alarm_fraction * 1000, evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        if alarm_topic is not None:
            self.alarm.add_alarm_action(cw_actions.SnsAction(alarm_topic))

        outputs = {
            "NovaRolloutRequestArn": self.rollout_requests.queue_arn,
            "NovaRolloutResponseSqsUrl": self.rollout_responses.queue_url,
            "NovaGenerateRequestSqsUrl": self.generate_requests.queue_url,
            "NovaGenerateResponseSqsUrl": self.generate_responses.queue_url,
            "NovaTrainingJobRoleArn": self.training_role.role_arn,
            # Not a recipe key: the URL `rewardpipe nova simulate --rollout-request-url` takes.
            "NovaRolloutRequestSqsUrl": self.rollout_requests.queue_url,
        }
        for key, value in outputs.items():
            CfnOutput(Stack.of(self), key, value=value, key=key)
        NagSuppressions.add_resource_suppressions(self, [
            {"id": "AwsSolutions-IAM5", "reason": "Bridge bookkeeping is scoped to the nova/ prefix; keys are per rollout.",
             "appliesTo": [{"regex": "/^Resource::<StorageRecords[0-9A-F]+\\.Arn>/nova/\\*$/g"}]},
            {"id": "AwsSolutions-IAM5", "reason": "StopExecution is limited to this state machine's executions of the Nova run (names start with the run id).",
             "appliesTo": [{"regex": "/^Resource::arn:<AWS::Partition>:states:.*-\\*$/g"}]},
            {"id": "AwsSolutions-IAM5", "reason": "Timeout records go under runs/ like every other record.",
             "appliesTo": [{"regex": "/^Resource::<StorageRecords[0-9A-F]+\\.Arn>/runs/\\*$/g"}]},
        ], apply_to_children=True)


def _name_prefix(run_id: str) -> str:
    """Execution names of a run start with its sanitized id (rewardpipe.aws.client.execution_name)."""
    import re

    return re.sub(r"[^0-9A-Za-z_-]+", "-", run_id).strip("-")


def _colon() -> Any:
    from aws_cdk import ArnFormat

    return ArnFormat.COLON_RESOURCE_NAME
