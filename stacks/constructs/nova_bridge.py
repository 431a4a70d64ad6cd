"""Nova Forge multi-turn bridge ("bring your own orchestration", ``rollout.delegate: true``).

Enabled by the context key ``rewardpipe_nova`` (``{"enabled": true, ...}``, see :class:`NovaBridgeSettings`
and docs/aws.md "Nova Forge multi-turn"). It adds the four SageMaker-named FIFO queues Nova talks to, the
bridge Lambdas (rewardpipe.integrations.nova.bridge), a least-privilege role for the training job, an
alarm when rollouts approach Nova's ``rollout.timeout``, and outputs the four recipe overrides.

Nova invokes the rollout proxy Lambda (``rollout_request_arn``; the Nova Forge BYOO docs and SDK build it as
``arn:aws:lambda:...:function:<rollout function>``) with each rollout request; the proxy queues it for intake.
The rollouts themselves run in the rollout state machine in its ``callback`` policy mode on the bridge's own
turn channel: the forwarder consumes the bridge's turn queue (task tokens never leave AWS) and the router
resumes the waiting execution. Alarms: every bridge function's errors and throttles, every dead-letter queue,
and the oldest unanswered request's age against ``rollout.timeout``.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from aws_cdk import Aws, CfnOutput, Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as _lambda
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_sqs as sqs
from cdk_nag import NagSuppressions
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from constructs import Construct
from rewardpipe.aws.metrics import NOVA_OLDEST_UNANSWERED
from rewardpipe.integrations.nova.bridge import ROUNDS_PREFIX, TURN_CHANNEL
from rewardpipe.store import encode_id, run_prefix
from stacks.config import DeploymentSettings
from stacks.constructs.common import (
    METRICS_NAMESPACE,
    SERVICE_NAME,
    RewardPipeLayer,
    grant_prefix,
    limit_trust_to_this_account,
    python_function,
    task_response_statement,
)
from stacks.constructs.monitoring import (
    dead_letter_alarms,
    event_dead_letter_queue,
    function_failure_alarms,
    notifying_alarm,
)
from stacks.constructs.rollout_workflow import RolloutWorkflow
from stacks.constructs.storage import Storage

CONTEXT_KEY = "rewardpipe_nova"
NOVA_PREFIX = "nova/"
# An event-source mapping's queue hides a message for at least this many times the function's timeout.
CONSUMED_VISIBILITY_FACTOR = 6
# What an SQS event source mapping's ScalingConfig.MaximumConcurrency accepts (AWS Lambda API reference).
MIN_EVENT_SOURCE_CONCURRENCY = 2
MAX_EVENT_SOURCE_CONCURRENCY = 1000


class NovaBridgeSettings(BaseModel):
    """``rollout_timeout_s`` is the recipe's ``rollout.timeout``; each rollout gets ``budget_fraction`` of it
    before the bridge stops it and answers with ``error_reward``, and the alarm fires at ``alarm_fraction``."""

    # Strict like the stack's own settings (stacks.config): "true" or 1 is not a bool, "600" not an integer.
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    enabled: bool = False
    rollout_timeout_s: int = Field(default=600, ge=60, le=86400)
    budget_fraction: float = Field(default=0.8, gt=0, lt=1)
    alarm_fraction: float = Field(default=0.7, gt=0, lt=1)
    error_reward: Literal["neutral", "zero", "fail_batch"] = Field(
        default="neutral",
        description=(
            "What an unscorable rollout answers: `neutral` (the mean of its group's scores, sent once its running "
            "group-mates are answered or at its budget; mid-range when none is scored), `zero`, or `fail_batch` "
            "(answer nothing)."
        ),
    )
    task_field: str = "task_id"
    inline_task_field: str = "task"
    group_pattern: str = r"^(?P<group>.+)_(?P<index>\d+)$"
    range_mapping: Literal["linear", "clip"] = "linear"
    run_id: str = Field(default="nova", pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,30}$")
    bookkeeping_days: int = Field(default=3, ge=1, le=365)
    # Lambda's SQS event source scales a consumer up to the account's concurrency (a FIFO queue up to its active
    # message groups: one per sample here) unless its mapping sets a maximum concurrency (2-1000), which reserves
    # nothing. Each of intake, forwarder and router takes at most this many at once; the rest wait in the queue.
    max_concurrency: int = Field(
        default=100,
        ge=MIN_EVENT_SOURCE_CONCURRENCY,
        le=MAX_EVENT_SOURCE_CONCURRENCY,
        description=(
            "Most concurrent invocations of each bridge queue consumer (intake, forwarder, router): their event "
            "source mappings' maximum concurrency, which reserves nothing; more requests wait in their queue."
        ),
    )
    model_finish_reasons: list[str] = Field(
        default_factory=list,
        description=(
            "`finish_reason` values of Nova's generate responses, besides the known ones, that end a turn the model "
            "wrote (scored); any other unknown one ends its rollout as a `policy_error` (docs/guides/nova-forge.md)."
        ),
    )
    # Job roles (besides the stack's TrainingJobRole) the rollout proxy's resource policy lets invoke it.
    invoker_role_arns: list[str] = Field(
        default_factory=list, description="IAM role ARNs of training jobs that may invoke the rollout proxy"
    )

    @model_validator(mode="after")
    def _role_arns(self) -> NovaBridgeSettings:
        import re

        for arn in self.invoker_role_arns:
            if not re.fullmatch(r"arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}", arn):
                raise ValueError(f"invoker_role_arns: {arn!r} is not an IAM role ARN")
        return self

    @field_validator("model_finish_reasons")
    @classmethod
    def _finish_reasons(cls, value: list[str]) -> list[str]:
        for reason in value:
            if not 0 < len(reason.strip()) <= 80:
                raise ValueError(f"model_finish_reasons: {reason[:100]!r} is not a reason of 1 to 80 characters")
        return value

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
    def _alarm_before_budget(self) -> NovaBridgeSettings:
        if self.alarm_fraction >= self.budget_fraction:
            raise ValueError("alarm_fraction must be below budget_fraction (warn before rollouts are cut off)")
        return self

    @property
    def budget_s(self) -> float:
        return self.rollout_timeout_s * self.budget_fraction

    def bridge_config(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "task_field": self.task_field,
            "inline_task_field": self.inline_task_field,
            "group_pattern": self.group_pattern,
            "range_mapping": self.range_mapping,
            "error_reward": self.error_reward,
            "rollout_budget_s": self.budget_s,
            "model_finish_reasons": list(self.model_finish_reasons),
        }


def load_nova_settings(raw: Any) -> NovaBridgeSettings:
    """The ``rewardpipe_nova`` context (an object or a JSON string); a bad value is a SettingsError naming it."""
    from stacks.config import load_context

    return load_context(CONTEXT_KEY, raw, NovaBridgeSettings)


def _check_range_mapping(settings: DeploymentSettings, nova: NovaBridgeSettings) -> None:
    """The ``linear`` mapping of a reward whose weights × ranges overflow a float is refused at synth: the bridge
    would refuse to start (and, before, answered every rollout with the bottom of Nova's range)."""
    from rewardpipe.integrations.nova.protocol import check_linear_bounds, weighted_bounds
    from stacks.config import SettingsError

    if nova.range_mapping != "linear":
        return
    components = settings.user_code.reward_components
    try:
        check_linear_bounds(weighted_bounds((c["weight"], *c["range"]) for c in components))
    except ValueError as exc:
        raise SettingsError(f"{CONTEXT_KEY}.range_mapping: {exc}") from None


class NovaBridge(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: DeploymentSettings,
        nova: NovaBridgeSettings,
        storage: Storage,
        workflow: RolloutWorkflow,
        layer: RewardPipeLayer,
        alarm_topic: Any = None,
        user_layer: Any = None,
    ) -> None:
        super().__init__(scope, construct_id)
        _check_range_mapping(settings, nova)
        stack = Stack.of(self).stack_name
        bucket = storage.bucket
        # Bookkeeping objects are tiny and only needed while a rollout is in flight. A sample's round markers are
        # needed as long as the run (a round counted short reuses an earlier round's step): kept with its records.
        bucket.add_lifecycle_rule(
            id="NovaBookkeeping", prefix=NOVA_PREFIX, expiration=Duration.days(nova.bookkeeping_days)
        )
        bucket.add_lifecycle_rule(
            id="NovaRounds", prefix=ROUNDS_PREFIX, expiration=Duration.days(settings.storage.expire_runs_days)
        )
        fns = settings.functions
        self.dead_letter_queues: dict[str, sqs.Queue] = {}

        # SQS deletes a message older than the queue's retention, received or not: each queue keeps one as long
        # as a rollout may wait for it (rollout.timeout; Nova has failed the job after that), and 4 hours at least.
        retention = Duration.seconds(max(int(Duration.hours(4).to_seconds()), nova.rollout_timeout_s))

        def fifo(name: str, *, content_dedup: bool, visibility_s: int = 60) -> sqs.Queue:
            # Queue names must contain "SageMaker" for the training job's service role to reach them. High-throughput
            # FIFO (deduplication and throughput per message group): every sample is its own group, so a training
            # job's thousands of concurrent rollouts are not held to a queue-wide 300 messages per second.
            throughput: dict[str, Any] = {
                "deduplication_scope": sqs.DeduplicationScope.MESSAGE_GROUP,
                "fifo_throughput_limit": sqs.FifoThroughputLimit.PER_MESSAGE_GROUP_ID,
            }
            dlq = sqs.Queue(
                self,
                f"{name}Dlq",
                queue_name=f"{stack}-SageMaker-{name}-dlq.fifo",
                fifo=True,
                encryption=sqs.QueueEncryption.SQS_MANAGED,
                enforce_ssl=True,
                retention_period=Duration.days(14),
                **throughput,
            )
            self.dead_letter_queues[name] = dlq
            return sqs.Queue(
                self,
                name,
                queue_name=f"{stack}-SageMaker-{name}.fifo",
                fifo=True,
                # A queue Nova (or a user) may send to without a deduplication id needs content-based deduplication
                # (SQS refuses such a send otherwise); an explicit id, which the bridge always sends, wins over it.
                content_based_deduplication=content_dedup,
                encryption=sqs.QueueEncryption.SQS_MANAGED,
                enforce_ssl=True,
                visibility_timeout=Duration.seconds(visibility_s),
                retention_period=retention,
                dead_letter_queue=sqs.DeadLetterQueue(queue=dlq, max_receive_count=5),
                **throughput,
            )

        # A queue a function consumes through an event-source mapping keeps a message hidden for at least six
        # times the function's timeout (AWS Lambda: "set the source queue's visibility timeout to at least six
        # times the timeout that you configure on your function"), so a retried batch is not delivered twice.
        consumed_visibility_s = fns.timeout_s * CONSUMED_VISIBILITY_FACTOR
        self.rollout_requests = fifo("RolloutRequestQueue", content_dedup=True, visibility_s=consumed_visibility_s)
        self.rollout_responses = fifo("RolloutResponseQueue", content_dedup=False)
        self.generate_requests = fifo("GenerateRequestQueue", content_dedup=False)
        self.generate_responses = fifo("GenerateResponseQueue", content_dedup=True, visibility_s=consumed_visibility_s)
        # The bridge's own turn queue: its rollouts ask their turns here (the workflow's "nova" turn channel), so a
        # trainer's callback rollout on the shared queue is never forwarded to Nova under a foreign sample id.
        turn_dlq = sqs.Queue(
            self,
            "TurnRequestsDlq",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(14),
        )
        self.dead_letter_queues["TurnRequests"] = turn_dlq
        self.turn_requests = sqs.Queue(
            self,
            "TurnRequests",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            visibility_timeout=Duration.seconds(consumed_visibility_s),
            dead_letter_queue=sqs.DeadLetterQueue(queue=turn_dlq, max_receive_count=5),
        )
        workflow.add_turn_channel(TURN_CHANNEL, self.turn_requests)

        env = {
            "BUCKET": bucket.bucket_name,
            # The environment (whose task model validates Nova's task rows) and the reward, resolved at synth.
            **settings.user_code.environment_env(),
            **settings.user_code.reward_env(settings.reward_weights),
            "NOVA_CONFIG": json.dumps(nova.bridge_config(), sort_keys=True),
            "STATE_MACHINE_ARN": workflow.state_machine.state_machine_arn,
            "ROLLOUT_RESPONSE_QUEUE_URL": self.rollout_responses.queue_url,
            "GENERATE_REQUEST_QUEUE_URL": self.generate_requests.queue_url,
        }

        def function(
            cid: str, name: str, description: str, *, extra_env: dict | None = None, function_name: str | None = None
        ) -> _lambda.Function:
            fn = python_function(
                self,
                cid,
                name=name,
                layer=layer,
                environment={**env, **(extra_env or {})},
                memory_mb=fns.memory_mb,
                timeout_s=fns.timeout_s,
                function_name=function_name,
                description=f"rewardpipe nova bridge: {description}",
                user_layer=user_layer,
            )
            grant_prefix(fn, bucket.bucket_arn, NOVA_PREFIX, read=True, write=True)
            return fn

        # The function the recipe's rollout_request_arn names: Nova invokes it with every rollout request. Its name
        # contains "SageMaker" like every resource the training job reaches (and like the SDK's rollout function).
        self.rollout_proxy = function(
            "RolloutProxy",
            "nova_rollout_proxy",
            "Nova's rollout request -> request queue",
            extra_env={"ROLLOUT_REQUEST_QUEUE_URL": self.rollout_requests.queue_url},
            function_name=f"{stack}-SageMaker-rollout-proxy"[:64],
        )
        self.intake = function("Intake", "nova_intake", "rollout request -> one rollout execution")
        self.forwarder = function("Forwarder", "nova_forward_turn", "policy turn -> generate request")
        self.router = function("Router", "nova_route_response", "generate response -> waiting rollout")
        self.responder = function("Responder", "nova_respond", "finished rollout -> rollout response")
        self.sweeper = function("Sweeper", "nova_sweep", "stop and answer rollouts past their budget")

        # What each one touches beyond nova/: the Nova run's records (runs/<run>/), its episodes' state
        # snapshots (runs/<run>/state/), its large inline tasks (tasks/inline/<run>/), and the executions of its
        # run (names start with the run id).
        run_records = run_prefix(nova.run_id)
        executions = Stack.of(self).format_arn(
            service="states",
            resource="execution",
            arn_format=_colon(),
            resource_name=f"{workflow.state_machine.state_machine_name}:{_name_prefix(nova.run_id)}-*",
        )
        self.rollout_requests.grant_send_messages(self.rollout_proxy)
        grant_objects(self.rollout_proxy, bucket.bucket_arn, f"{NOVA_PREFIX}inbox/", ["s3:PutObject"])
        workflow.state_machine.grant_start_execution(self.intake)
        # A retried start finds the running execution and compares its input (rewardpipe.aws.client).
        self.intake.add_to_role_policy(
            iam.PolicyStatement(actions=["states:DescribeExecution"], resources=[executions])
        )
        grant_objects(self.intake, bucket.bucket_arn, f"tasks/inline/{encode_id(nova.run_id)}/", ["s3:PutObject"])
        grant_prefix(self.intake, bucket.bucket_arn, ROUNDS_PREFIX, read=True, write=True)  # numbers the rounds
        self.forwarder.add_to_role_policy(task_response_statement())
        grant_objects(self.forwarder, bucket.bucket_arn, f"{run_records}state/", ["s3:GetObject"])
        self.generate_requests.grant_send_messages(self.forwarder)
        self.router.add_to_role_policy(task_response_statement())
        # Large replies only, at their turn's reply_key (rewardpipe.aws.rollout): no other state object of a rollout
        # (its episode, the score RecordError answers with) is the router's to write.
        self.router.add_to_role_policy(
            iam.PolicyStatement(
                actions=["s3:PutObject"], resources=[f"{bucket.bucket_arn}/{run_records}state/*/reply-*.json"]
            )
        )
        self.sweeper.add_to_role_policy(
            iam.PolicyStatement(actions=["states:StopExecution", "states:DescribeExecution"], resources=[executions])
        )
        # An execution's output left out of its status-change event (over 248 KB escaped) is read back.
        self.responder.add_to_role_policy(
            iam.PolicyStatement(actions=["states:DescribeExecution"], resources=[executions])
        )
        # Answers: an error record (a conditional write that reads back what it lost to), the response, the
        # in-flight marker removed (nova/due/), the answer's claim (nova/answers/) released when its write or
        # send failed, so that the retry answers at once rather than after the claim goes stale, and a held error
        # answer's marker (nova/deferred/) removed once it is sent.
        for fn in (self.intake, self.responder, self.sweeper):
            self.rollout_responses.grant_send_messages(fn)
            for removed in ("due/", "answers/", "deferred/"):
                grant_objects(fn, bucket.bucket_arn, f"{NOVA_PREFIX}{removed}", ["s3:DeleteObject"])
        for fn in (self.intake, self.sweeper):
            grant_prefix(fn, bucket.bucket_arn, run_records, read=True, write=True)

        for fn, queue in (
            (self.intake, self.rollout_requests),
            (self.forwarder, self.turn_requests),
            (self.router, self.generate_responses),
        ):
            # A maximum concurrency per mapping: without it a Nova step's burst (every sample its own message
            # group) may take all of the account's unreserved concurrency, throttling the rollout functions (their
            # turns end in error records after their retries) and the single-turn reward Lambda Nova calls, and a
            # consumer throttled past its queue's receives dead-letters the message. Reserved concurrency would
            # fail stack creation in accounts with little unreserved concurrency; this reserves nothing.
            fn.add_event_source(
                sources.SqsEventSource(
                    queue, batch_size=1, report_batch_item_failures=True, max_concurrency=nova.max_concurrency
                )
            )

        # What EventBridge could not deliver (after its retries) and what the functions failed on (after Lambda's
        # asynchronous retries) is kept here, not dropped: an execution's end the responder never took is answered
        # only at its budget by the sweeper otherwise, with nothing to say why. The queue is alarmed below. The
        # rollout proxy too: Nova may invoke it asynchronously (not documented either way), and a request it could
        # not queue was then discarded after Lambda's two retries, its sample waiting out Nova's timeout.
        self.event_dead_letters = event_dead_letter_queue(
            self, "EventDeadLetters", "the bridge's rule targets and the rollout proxy"
        )
        for fn in (self.rollout_proxy, self.responder, self.sweeper):
            fn.configure_async_invoke(on_failure=destinations.SqsDestination(self.event_dead_letters))
        events.Rule(
            self,
            "RolloutEnded",
            event_pattern=events.EventPattern(
                source=["aws.states"],
                detail_type=["Step Functions Execution Status Change"],
                detail={
                    "stateMachineArn": [workflow.state_machine.state_machine_arn],
                    "status": ["SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"],
                },
            ),
        ).add_target(
            targets.LambdaFunction(self.responder, retry_attempts=4, dead_letter_queue=self.event_dead_letters)
        )
        events.Rule(self, "Sweep", schedule=events.Schedule.rate(Duration.minutes(1))).add_target(
            targets.LambdaFunction(self.sweeper, retry_attempts=2, dead_letter_queue=self.event_dead_letters)
        )

        # The training job: invokes the rollout proxy, sends generate responses, receives generate requests and
        # rollout responses. Nothing else.
        self.training_role = iam.Role(
            self,
            "TrainingJobRole",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description="Nova Forge training job: the rollout proxy and the delegated-rollout queues only",
        )
        # SageMaker may assume it for this account's SageMaker resources only (SageMaker AI Developer Guide,
        # "Cross-service confused deputy prevention": any SageMaker ARN of the account, so a customization that
        # runs as another kind of resource than a training job, or in another Region, still may).
        limit_trust_to_this_account(
            self.training_role,
            "sagemaker.amazonaws.com",
            f"arn:{Aws.PARTITION}:sagemaker:*:{Aws.ACCOUNT_ID}:*",
        )
        self.rollout_proxy.grant_invoke(self.training_role)
        # The function's own resource policy names the roles that may invoke it: ours, and any job role the
        # settings list (an existing role, or one in another account, which an identity policy alone cannot reach).
        for i, principal in enumerate([self.training_role.role_arn, *nova.invoker_role_arns]):
            self.rollout_proxy.add_permission(
                f"TrainingJobInvokes{i}", principal=iam.ArnPrincipal(principal), action="lambda:InvokeFunction"
            )
        self.generate_responses.grant_send_messages(self.training_role)
        self.generate_requests.grant_consume_messages(self.training_role)
        self.rollout_responses.grant_consume_messages(self.training_role)

        action = cw_actions.SnsAction(alarm_topic) if alarm_topic is not None else None
        # Nova fails the training job when a rollout is not answered within rollout.timeout. The sweeper measures,
        # every minute, how long the oldest unanswered request has waited (an execution's duration is only known
        # once it ends, too late to warn); at alarm_fraction of the timeout this fires, before the budget cuts off.
        self.alarm = notifying_alarm(
            self,
            "RolloutsNearTimeout",
            "nova-rollouts-near-timeout",
            action=action,
            description=(
                f"A Nova rollout request has waited more than {nova.alarm_fraction:.0%} of rollout.timeout "
                f"({nova.rollout_timeout_s}s) without an answer; at {nova.budget_fraction:.0%} the bridge "
                "cuts it off with the error reward"
            ),
            metric=cloudwatch.Metric(
                namespace=METRICS_NAMESPACE,
                metric_name=NOVA_OLDEST_UNANSWERED,
                statistic="Maximum",
                period=Duration.minutes(1),
                dimensions_map={"service": SERVICE_NAME, "run": nova.run_id},
            ),
            threshold=nova.rollout_timeout_s * nova.alarm_fraction,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            # The sweeper emits the age every minute it works (0 with nothing in flight), so a minute without a
            # point is a sweep that failed, not a rollout answered: the alarm keeps its state rather than send an
            # all-clear just as nothing cuts rollouts at their budget any more (its own errors alarm says why).
            missing=cloudwatch.TreatMissingData.IGNORE,
        )
        self.failure_alarms: list[cloudwatch.Alarm] = []
        for fn, name, what in (
            (self.rollout_proxy, "rollout-proxy", "rollout proxy (rollout_request_arn)"),
            (self.intake, "intake", "intake"),
            (self.forwarder, "forwarder", "turn forwarder"),
            (self.router, "router", "response router"),
            (self.responder, "responder", "responder"),
            (self.sweeper, "sweeper", "budget sweeper"),
        ):
            self.failure_alarms += function_failure_alarms(self, fn, f"nova-{name}", f"Nova bridge {what}", action)
        for queue_name, queue in self.dead_letter_queues.items():
            self.failure_alarms += dead_letter_alarms(
                self,
                queue,
                f"nova-{_kebab(queue_name)}-dead-letters",
                f"the Nova bridge gave up on a message of {queue_name} after 5 receives",
                action,
            )

        self.failure_alarms += dead_letter_alarms(
            self,
            self.event_dead_letters,
            "nova-event-dead-letters",
            "an execution's end (responder) or a sweep was not delivered, or failed after its retries, or a "
            "rollout request invoked asynchronously could not be queued (rollout proxy)",
            action,
        )

        outputs = {
            # rollout_request_arn: the rollout proxy Lambda Nova invokes (not a queue).
            "NovaRolloutRequestArn": self.rollout_proxy.function_arn,
            "NovaRolloutFunctionName": self.rollout_proxy.function_name,
            "NovaRolloutResponseSqsUrl": self.rollout_responses.queue_url,
            "NovaGenerateRequestSqsUrl": self.generate_requests.queue_url,
            "NovaGenerateResponseSqsUrl": self.generate_responses.queue_url,
            "NovaTrainingJobRoleArn": self.training_role.role_arn,
            # Not a recipe key: the queue behind the proxy (what intake consumes).
            "NovaRolloutRequestSqsUrl": self.rollout_requests.queue_url,
        }
        for key, value in outputs.items():
            CfnOutput(Stack.of(self), key, value=value, key=key)
        NagSuppressions.add_resource_suppressions(
            self,
            [
                {
                    "id": "AwsSolutions-IAM5",
                    "reason": "Bridge bookkeeping is scoped to the nova/ and nova-rounds/ prefixes (per-rollout keys).",
                    "appliesTo": [{"regex": "/^Resource::<StorageRecords[0-9A-F]+\\.Arn>/nova(-rounds)?/.*\\*$/g"}],
                },
                {
                    "id": "AwsSolutions-IAM5",
                    "reason": (
                        "StopExecution/DescribeExecution are limited to this state machine's executions of the "
                        "Nova run (names start with the run id)."
                    ),
                    "appliesTo": [{"regex": "/^Resource::arn:<AWS::Partition>:states:.*-\\*$/g"}],
                },
                {
                    "id": "AwsSolutions-IAM5",
                    "reason": (
                        "The bridge reads and writes only its own run's records, episode state and inline tasks "
                        "(runs/<run>/, tasks/inline/<run>/); keys are per rollout."
                    ),
                    "appliesTo": [
                        {"regex": "/^Resource::<StorageRecords[0-9A-F]+\\.Arn>/(runs|tasks/inline)/.*\\*$/g"},
                        {"regex": "/^Resource::<StorageRecords[0-9A-F]+\\.Arn>/runs/.*/state/\\*/reply-\\*\\.json$/g"},
                    ],
                },
                {
                    "id": "AwsSolutions-IAM5",
                    "reason": "CDK grants lambda:InvokeFunction on the rollout proxy's ARN and its versions (:*).",
                    "appliesTo": [{"regex": "/^Resource::<NovaBridgeRolloutProxy.+\\.Arn>:\\*$/g"}],
                },
            ],
            apply_to_children=True,
        )


def grant_objects(grantee: iam.IGrantable, bucket_arn: str, prefix: str, actions: list[str]) -> None:
    """Object ``actions`` on keys under ``prefix`` only (no listing: these keys are never looked up absent)."""
    grantee.grant_principal.add_to_principal_policy(
        iam.PolicyStatement(actions=actions, resources=[f"{bucket_arn}/{prefix}*"])
    )


def _kebab(name: str) -> str:
    import re

    return re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()


def _name_prefix(run_id: str) -> str:
    """Execution names of a run start with its sanitized id (rewardpipe.aws.client.execution_name)."""
    import re

    return re.sub(r"[^0-9A-Za-z_-]+", "-", run_id).strip("-")


def _colon() -> Any:
    from aws_cdk import ArnFormat

    return ArnFormat.COLON_RESOURCE_NAME
