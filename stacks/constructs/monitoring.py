"""Monitoring: the variance-check Lambda, its schedule, alarms per reward component, SNS and a dashboard.

The Lambda reads a step's records, runs rewardpipe.monitoring, writes the verdicts to S3 and emits the
per-component statistics as CloudWatch metrics (Powertools EMF), once per newly checked step. The
dead-component alarms watch ``DeadStreak`` (consecutive dead checked steps) and the error-rate alarm
``ErrorStreak`` (consecutive checked steps with too many error records), so they count steps, not
minutes; their thresholds and the check's come from one alarm policy (``settings.alarms``). The check's own failures
(errors, throttles, undeliverable invocations, a missing heartbeat) are alarmed as well, and every alarm notifies one
KMS-encrypted SNS topic that only this stack's alarms may publish to.
"""

from __future__ import annotations

import json
from typing import Any

import jsii
from aws_cdk import Aws, CfnResource, Duration, Stack
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subs
from aws_cdk import aws_sqs as sqs
from cdk_nag import NagSuppressions

from constructs import Construct, IValidation

# The alarms watch the metric names the monitor Lambda emits: one definition, in the code that emits them.
from rewardpipe.aws.metrics import (
    CHECKS_RUN,
    COMPONENT_MEAN,
    DEAD_STREAK,
    ERROR_RATE,
    ERROR_STREAK,
    EXECUTION_MS,
    WITHIN_GROUP_STD,
    ZERO_VARIANCE,
)
from rewardpipe.aws.monitoring import RUN_METRIC_RUNS
from rewardpipe.aws.settings import alarm_policy_env
from stacks.config import DeploymentSettings
from stacks.constructs.code_runner import CodeRunner
from stacks.constructs.common import (
    METRICS_NAMESPACE,
    SERVICE_NAME,
    RewardPipeLayer,
    grant_prefix,
    python_function,
    stack_name,
)
from stacks.constructs.rollout_workflow import RolloutWorkflow
from stacks.constructs.storage import RUNS_PREFIX, Storage


def heartbeat_minutes(settings: DeploymentSettings) -> int:
    """How long rollouts may run without a completed variance check before that is alarmed."""
    return max(60, 3 * settings.monitor_schedule_minutes)


def alarm_name_prefix(scope: Construct) -> str:
    """Every alarm of this stack is named ``<stack>-...``; the topic's grants are scoped by that prefix."""
    return f"{stack_name(scope)}-"


def alarm_source_conditions(scope: Construct) -> dict:
    return {
        "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
        "ArnLike": {
            "aws:SourceArn": (
                f"arn:{Aws.PARTITION}:cloudwatch:{Aws.REGION}:{Aws.ACCOUNT_ID}:alarm:{alarm_name_prefix(scope)}*"
            )
        },
    }


# Alarms on what fails a training job when it fails: a function's errors or throttles (Nova reads a throttled
# or failed reward Lambda as a failed batch; a rollout function that fails leaves only an error record), and a
# dead-letter queue that got a message (something was given up after its retries). Every one notifies the topic.
FAILURE_PERIOD = Duration.minutes(5)


def notifying_alarm(
    scope: Construct,
    construct_id: str,
    name: str,
    *,
    description: str,
    metric: cw.IMetric,
    threshold: float,
    comparison: cw.ComparisonOperator,
    action: cw.IAlarmAction | None,
    missing: cw.TreatMissingData = cw.TreatMissingData.NOT_BREACHING,
    ok_action: bool = True,
    evaluation_periods: int = 1,
) -> cw.Alarm:
    """An alarm named ``<stack>-<name>`` (the prefix the topic's CloudWatch grant allows) notifying ``action``; over
    several ``evaluation_periods`` one breaching period of them is enough."""
    alarm = cw.Alarm(
        scope,
        construct_id,
        alarm_name=f"{alarm_name_prefix(scope)}{name}",
        alarm_description=description,
        metric=metric,
        threshold=threshold,
        comparison_operator=comparison,
        evaluation_periods=evaluation_periods,
        datapoints_to_alarm=1 if evaluation_periods > 1 else None,
        treat_missing_data=missing,
    )
    if action is not None:
        alarm.add_alarm_action(action)
        if ok_action:
            alarm.add_ok_action(action)
    return alarm


def function_failure_alarms(
    scope: Construct, fn: Any, name: str, what: str, action: cw.IAlarmAction | None
) -> list[cw.Alarm]:
    """``<name>-errors`` and ``<name>-throttles``: any in five minutes (missing data: the function was idle)."""
    cid = "".join(part.capitalize() for part in name.split("-"))
    return [
        notifying_alarm(
            scope,
            f"{cid}ErrorsAlarm",
            f"{name}-errors",
            action=action,
            description=f"The {what} Lambda failed (an unhandled error).",
            metric=fn.metric_errors(period=FAILURE_PERIOD, statistic="Sum"),
            threshold=0,
            comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
        ),
        notifying_alarm(
            scope,
            f"{cid}ThrottlesAlarm",
            f"{name}-throttles",
            action=action,
            description=f"The {what} Lambda was throttled (concurrency exhausted).",
            metric=fn.metric_throttles(period=FAILURE_PERIOD, statistic="Sum"),
            threshold=0,
            comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
        ),
    ]


def event_dead_letter_queue(scope: Construct, construct_id: str, of: str) -> sqs.Queue:
    """A dead-letter queue (SSE-SQS, TLS only, 14 days) for ``of`` (EventBridge targets) and for the asynchronous
    invokes of the functions they target; cdk-nag's SQS3 (a queue without its own dead-letter queue) is answered."""
    queue = sqs.Queue(
        scope,
        construct_id,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        retention_period=Duration.days(14),
    )
    NagSuppressions.add_resource_suppressions(
        queue,
        [
            {
                "id": "AwsSolutions-SQS3",
                "reason": f"This queue is itself a dead-letter queue: of {of} and of asynchronous invokes.",
            }
        ],
    )
    return queue


def dead_letter_alarm(scope: Construct, queue: Any, name: str, what: str, action: cw.IAlarmAction | None) -> cw.Alarm:
    """``<name>``: the dead-letter queue holds a message. SQS reports a queue's metrics only while it is active,
    up to six hours after its last API call, whether or not it holds messages; missing data keeps the state it
    has (an idle empty queue stays OK, a dead letter kept untouched stays ALARM: no all-clear for it)."""
    cid = "".join(part.capitalize() for part in name.split("-"))
    return notifying_alarm(
        scope,
        f"{cid}Alarm",
        name,
        action=action,
        description=f"A message was dead-lettered: {what}.",
        metric=queue.metric_approximate_number_of_messages_visible(period=FAILURE_PERIOD, statistic="Maximum"),
        threshold=0,
        comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
        missing=cw.TreatMissingData.IGNORE,
    )


# What the new-dead-letters alarm computes: how much the queue's count rose from one period to the next. A period
# without a point counts as an empty queue: SQS stops reporting an idle queue (even one holding messages), and a
# dead letter makes it active again, so the count it comes back with is a rise.
NEW_DEAD_LETTERS = "DIFF(FILL(visible, 0))"
# Periods the new-dead-letters alarm looks back over: DIFF needs the period before the newest in its query.
NEW_DEAD_LETTER_PERIODS = 2


def new_dead_letter_alarm(
    scope: Construct, queue: Any, name: str, what: str, action: cw.IAlarmAction | None
) -> cw.Alarm:
    """``<name>-new``: the dead-letter queue's count rose. ``<name>`` stays in ALARM while the queue holds a
    message, so it notifies of the first dead letter only; this one notifies of each later one as well (dead
    letters that arrive within one period of each other are one notification). Its OK says nothing (no action)."""
    cid = "".join(part.capitalize() for part in name.split("-"))
    return notifying_alarm(
        scope,
        f"{cid}NewAlarm",
        f"{name}-new",
        action=action,
        description=(
            f"More messages were dead-lettered: {what}. (Also sent when SQS reports a queue still holding dead "
            "letters again after six idle hours, for example when someone opens it.)"
        ),
        metric=cw.MathExpression(
            expression=NEW_DEAD_LETTERS,
            using_metrics={
                "visible": queue.metric_approximate_number_of_messages_visible(
                    period=FAILURE_PERIOD, statistic="Maximum"
                )
            },
            period=FAILURE_PERIOD,
            label="dead letters added",
        ),
        threshold=0,
        comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
        ok_action=False,
        evaluation_periods=NEW_DEAD_LETTER_PERIODS,
    )


def dead_letter_alarms(
    scope: Construct, queue: Any, name: str, what: str, action: cw.IAlarmAction | None
) -> list[cw.Alarm]:
    """:func:`dead_letter_alarm` (the queue holds a message) and :func:`new_dead_letter_alarm` (more arrived)."""
    return [
        dead_letter_alarm(scope, queue, name, what, action),
        new_dead_letter_alarm(scope, queue, name, what, action),
    ]


def _metric(name: str, period: Duration, statistic: str = "Maximum", **dims: str) -> cw.Metric:
    return cw.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name,
        statistic=statistic,
        period=period,
        dimensions_map={"service": SERVICE_NAME, **dims},
    )


#: CloudFormation's quota: "Maximum number of resources that you can declare in your CloudFormation template: 500"
#: (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/cloudformation-limits.html).
TEMPLATE_MAX_RESOURCES = 500


@jsii.implements(IValidation)
class ResourceCountValidation:
    """Fails the synth when ``stack`` declares more resources than a template may hold. Each reward component adds
    a dead-component alarm, so a reward of ~400 components synthesized and then failed at deploy time; this names
    the count, the limit and the components instead."""

    def __init__(self, stack: Stack, components: int) -> None:
        self._stack = stack
        self._components = components

    def validate(self) -> list[str]:
        count = sum(1 for node in self._stack.node.find_all() if isinstance(node, CfnResource))
        if count <= TEMPLATE_MAX_RESOURCES:
            return []
        return [
            f"the stack declares {count} resources, over CloudFormation's {TEMPLATE_MAX_RESOURCES} a template may "
            f"hold; each of the reward's {self._components} components adds a dead-component alarm: use a reward "
            f"of fewer components (or merge some)"
        ]


#: CloudWatch's dashboard quotas ("Dashboards" in https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/
#: cloudwatch_limits.html): the metrics one widget may graph, and the metrics of a whole dashboard across its widgets
#: (metrics read by metric math included). The page has given 100 and 500, and later 500 and 2,500; the lower pair
#: is kept, so the dashboard deploys under either. A dashboard over them is refused at deploy time.
DASHBOARD_WIDGET_METRICS = 100
DASHBOARD_METRICS = 500
#: The per-component graphs: std, zero-variance fraction, mean, dead streak (one metric per component each).
COMPONENT_GRAPHS = 4
#: Components named in the note of those the dashboard leaves out.
DASHBOARD_LEFT_OUT_NAMED = 20


def _graphs(title: str, metrics: list[cw.IMetric], width: int, **props: Any) -> list[cw.GraphWidget]:
    """``metrics`` as graphs of at most DASHBOARD_WIDGET_METRICS each (titled "(2 of 3)" when split)."""
    chunks = [metrics[i : i + DASHBOARD_WIDGET_METRICS] for i in range(0, len(metrics), DASHBOARD_WIDGET_METRICS)]
    return [
        cw.GraphWidget(
            title=title if len(chunks) == 1 else f"{title} ({n} of {len(chunks)})", width=width, left=chunk, **props
        )
        for n, chunk in enumerate(chunks or [[]], 1)
    ]


def add_dashboard_graphs(
    dashboard: cw.Dashboard, components: list[str], period: Duration, alarms_cfg: Any, runner_duration: cw.IMetric
) -> list[str]:
    """The dashboard's graphs: per component (split into graphs of DASHBOARD_WIDGET_METRICS), the error rate and
    streak, and the execution latency; the components past what DASHBOARD_METRICS leaves room for are not graphed,
    and a note says which (their alarms and metrics are unchanged). Returns the components left out."""
    latency = [
        _metric(EXECUTION_MS, Duration.minutes(5), stat, route=route)
        for route in ("lambda", "fargate")
        for stat in ("p50", "p99")
    ]
    fixed = [_metric(ERROR_RATE, period), _metric(ERROR_STREAK, period), *latency, runner_duration]
    room = max(0, (DASHBOARD_METRICS - len(fixed)) // COMPONENT_GRAPHS)
    shown, left_out = components[:room], components[room:]
    dashboard.add_widgets(
        *_graphs(
            "Within-group std by component",
            [_metric(WITHIN_GROUP_STD, period, "Average", component=c) for c in shown],
            12,
        ),
        *_graphs(
            "Zero-variance group fraction by component",
            [_metric(ZERO_VARIANCE, period, component=c) for c in shown],
            12,
            left_annotations=[cw.HorizontalAnnotation(value=alarms_cfg.zero_variance_fraction, label="dead")],
            left_y_axis=cw.YAxisProps(min=0, max=1),
        ),
    )
    dashboard.add_widgets(
        *_graphs("Component mean", [_metric(COMPONENT_MEAN, period, "Average", component=c) for c in shown], 8),
        cw.GraphWidget(
            title="Error rate (error records / rollouts)",
            width=8,
            left=[fixed[0]],
            left_annotations=[cw.HorizontalAnnotation(value=alarms_cfg.error_rate, label="alarm")],
        ),
        cw.GraphWidget(title="Execution latency (ms)", width=8, left=latency, right=[runner_duration]),
    )
    dashboard.add_widgets(
        *_graphs(
            "Dead streak (consecutive dead checked steps) by component",
            [_metric(DEAD_STREAK, period, component=c) for c in shown],
            16,
            left_annotations=[cw.HorizontalAnnotation(value=alarms_cfg.dead_steps, label="alarm")],
        ),
        cw.GraphWidget(
            title="Error streak (consecutive checked steps with too many errors)",
            width=8,
            left=[fixed[1]],
            left_annotations=[cw.HorizontalAnnotation(value=alarms_cfg.error_steps, label="alarm")],
        ),
    )
    if left_out:
        named = ", ".join(left_out[:DASHBOARD_LEFT_OUT_NAMED])
        more = (
            f" and {len(left_out) - DASHBOARD_LEFT_OUT_NAMED} more" if len(left_out) > DASHBOARD_LEFT_OUT_NAMED else ""
        )
        dashboard.add_widgets(
            cw.TextWidget(
                width=24,
                height=2,
                markdown=(
                    f"{len(left_out)} of the reward's {len(components)} components are not graphed here "
                    f"(CloudWatch graphs at most {DASHBOARD_METRICS} metrics a dashboard): {named}{more}. "
                    "Their metrics and dead-component alarms are as for the others."
                ),
            )
        )
    return left_out


class Monitoring(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: DeploymentSettings,
        storage: Storage,
        workflow: RolloutWorkflow,
        runner: CodeRunner,
        layer: RewardPipeLayer,
        single_turn: Any = None,
    ) -> None:
        super().__init__(scope, construct_id)
        alarms_cfg = settings.alarms
        components = settings.reward_components()
        period = Duration.minutes(alarms_cfg.period_minutes)
        self.alarms: list[cw.Alarm] = []

        # Alarm topic, encrypted with a key CloudWatch is allowed to use (the AWS-managed SNS key is not).
        # enforce_ssl writes an explicit topic policy, which replaces SNS's default one, so CloudWatch's
        # right to publish must be granted there too; both grants are limited to this stack's alarms
        # (aws:SourceArn) in this account (aws:SourceAccount) against the confused-deputy problem.
        key = kms.Key(self, "TopicKey", enable_key_rotation=True, description="rewardpipe alarm topic")
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsUseTheKey",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],
                conditions=alarm_source_conditions(self),
            )
        )
        self.topic = sns.Topic(self, "Alarms", master_key=key, enforce_ssl=True, display_name="rewardpipe alarms")
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions=alarm_source_conditions(self),
            )
        )
        if alarms_cfg.email:
            self.topic.add_subscription(subs.EmailSubscription(alarms_cfg.email))

        self.function = python_function(
            self,
            "VarianceCheck",
            name="variance_monitor",
            layer=layer,
            description="rewardpipe: within-group variance check per reward component",
            environment={
                "BUCKET": storage.bucket.bucket_name,
                # The reward's components (names, ranges, roles, weights) as data: the check judges with them and
                # imports no user code (it has no user layer).
                **settings.user_code.components_env(),
                **({"REWARD_NAME": settings.user_code.reward_name} if settings.user_code.reward_name else {}),
                "REWARD_WEIGHTS": json.dumps(settings.reward_weights, sort_keys=True),
                "GROUP_SIZE": str(settings.group_size),
                # The same alarm policy as the alarms below: the check's streaks and the alarms'
                # thresholds come from one setting each.
                **alarm_policy_env(alarms_cfg),
                "ALARM_TOPIC_ARN": self.topic.topic_arn,
                # A run whose monitor state was written this recently counts in the dead-streak alarms
                # (the heartbeat alarm's window: a running training job is checked at least that often).
                "ACTIVE_RUN_MINUTES": str(heartbeat_minutes(settings)),
            },
            memory_mb=settings.functions.memory_mb,
            timeout_s=settings.functions.monitor_timeout_s,
            # No reserved concurrency unless lambda.reserved_concurrency.variance_check asks for it: any fails
            # stack creation in accounts whose unreserved concurrency would drop below 100. Concurrent checks of
            # one run are serialised by a conditional write of the run's core monitor state either way
            # (rewardpipe.aws.monitoring).
            reserved_concurrency=settings.functions.reserved_concurrency.variance_check,
        )
        grant_prefix(self.function, storage.bucket.bucket_arn, RUNS_PREFIX, read=True, write=True)
        self.topic.grant_publish(self.function)

        # Failed deliveries of the check (schedule target after its retries, asynchronous invokes by the
        # trainer after Lambda's retries) land here instead of vanishing; the queue depth is alarmed.
        self.dead_letters = event_dead_letter_queue(self, "CheckDeadLetters", "the schedule target")
        self.schedule = events.Rule(
            self,
            "Schedule",
            schedule=events.Schedule.rate(Duration.minutes(settings.monitor_schedule_minutes)),
            description="rewardpipe: check every unchecked complete step of every run",
        )
        self.schedule.add_target(
            targets.LambdaFunction(
                self.function,
                retry_attempts=2,
                max_event_age=Duration.hours(1),
                dead_letter_queue=self.dead_letters,
            )
        )
        self.function.configure_async_invoke(
            on_failure=destinations.SqsDestination(self.dead_letters),
            retry_attempts=2,
            max_event_age=Duration.hours(6),
        )

        action = cw_actions.SnsAction(self.topic)
        self._action = action
        self.component_alarms: dict[str, cw.Alarm] = {}
        self.node.add_validation(ResourceCountValidation(Stack.of(self), len(components)))
        for component in components:
            # Counted in checked steps, not minutes: the check emits DeadStreak (consecutive dead checked
            # steps) once per newly checked step, so one datapoint is enough and a pause in training
            # (no datapoints) leaves the alarm where it is instead of "recovering" it.
            self.component_alarms[component] = self._alarm(
                f"DeadComponent-{component}",
                f"dead-component-{component}",
                description=(
                    f"Reward component '{component}' had zero within-group variance in at least "
                    f"{alarms_cfg.zero_variance_fraction:.0%} of groups for {alarms_cfg.dead_steps} consecutive "
                    f"checked steps of one active run: it gives GRPO no signal. DeadStreak with the run "
                    f"dimension names the run (for the first {RUN_METRIC_RUNS} active runs; the check's log names "
                    f"the others)."
                ),
                metric=_metric(DEAD_STREAK, Duration.minutes(1), component=component),
                threshold=alarms_cfg.dead_steps,
                comparison=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                missing=cw.TreatMissingData.IGNORE,
            )

        # Counted in checked steps like the dead-component alarms: ErrorStreak is the number of consecutive
        # checked steps whose error rate was at least alarms.error_rate, emitted once per newly checked step.
        self.error_alarm = self._alarm(
            "ErrorRateAlarm",
            "error-rate",
            description=(
                f"At least {alarms_cfg.error_rate:.0%} of a step's rollouts ended in an error record for "
                f"{alarms_cfg.error_steps} consecutive checked steps of one active run. ErrorStreak with the run "
                f"dimension names the run (for the first {RUN_METRIC_RUNS} active runs; the check's log names the "
                f"others)."
            ),
            metric=_metric(ERROR_STREAK, Duration.minutes(1)),
            threshold=alarms_cfg.error_steps,
            comparison=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            missing=cw.TreatMissingData.IGNORE,
        )

        self.failed_executions_alarm = self._alarm(
            "FailedExecutionsAlarm",
            "rollouts-without-record",
            description="A rollout execution failed or timed out without writing even an error record.",
            # Step Functions publishes ExecutionsFailed and ExecutionsTimedOut only for a period that had one: a sum
            # of the bare metrics has no value (missing data, not breaching) unless both happened in the same period.
            metric=cw.MathExpression(
                expression="FILL(failed, 0) + FILL(timedOut, 0)",
                using_metrics={
                    "failed": workflow.state_machine.metric_failed(period=Duration.minutes(5), statistic="Sum"),
                    "timedOut": workflow.state_machine.metric_timed_out(period=Duration.minutes(5), statistic="Sum"),
                },
                label="rollouts that ended without a record",
                period=Duration.minutes(5),
            ),
            threshold=0,
            comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            ok_action=False,
        )

        # The check itself must not fail silently: its errors, its throttles, undeliverable invocations,
        # and a missing heartbeat while rollouts are running.
        self.check_errors_alarm = self._alarm(
            "CheckErrorsAlarm",
            "variance-check-errors",
            description="The variance check failed (a run's state or records could not be checked).",
            metric=self.function.metric_errors(period=Duration.minutes(5), statistic="Sum"),
            threshold=0,
            comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
        )
        self.check_throttles_alarm = self._alarm(
            "CheckThrottlesAlarm",
            "variance-check-throttles",
            description="The variance check was throttled (account concurrency exhausted).",
            metric=self.function.metric_throttles(period=Duration.minutes(5), statistic="Sum"),
            threshold=0,
            comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
        )
        self.dead_letter_alarm = self._alarm(
            "CheckDeadLettersAlarm",
            "variance-check-undelivered",
            description="A variance check invocation was given up after its retries (see the dead-letter queue).",
            metric=self.dead_letters.metric_approximate_number_of_messages_visible(
                period=Duration.minutes(5), statistic="Maximum"
            ),
            threshold=0,
            comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            missing=cw.TreatMissingData.IGNORE,  # as every dead-letter alarm (dead_letter_alarm)
        )
        self.alarms.append(
            new_dead_letter_alarm(
                self,
                self.dead_letters,
                "variance-check-undelivered",
                "a variance check invocation was given up after its retries",
                self._action,
            )
        )
        # Every function a rollout or a Nova reward depends on, and the trainers' dead-lettered turn requests.
        self.failure_alarms: list[cw.Alarm] = []
        watched = [
            (workflow.start_fn, "start-episode", "StartEpisode"),
            (workflow.converse_fn, "converse", "Converse"),
            (workflow.score_fn, "score", "Score"),
            (workflow.error_fn, "record-error", "RecordError"),
            (runner.function, "code-runner", "code-runner"),
        ]
        if single_turn is not None:
            watched.append((single_turn, "reward-lambda", "Nova single-turn reward"))
        for fn, name, what in watched:
            self.failure_alarms += function_failure_alarms(self, fn, name, what, action)
        self.failure_alarms += dead_letter_alarms(
            self,
            workflow.turn_requests_dlq,
            "turn-requests-dead-letters",
            "a trainer turn request was received 5 times without being answered",
            action,
        )
        self.alarms += self.failure_alarms
        heartbeat = Duration.minutes(heartbeat_minutes(settings))
        self.heartbeat_alarm = self._alarm(
            "CheckHeartbeatAlarm",
            "variance-check-silent",
            description=(
                f"Rollouts ran in the last {heartbeat.to_minutes()} minutes but the variance check did not "
                f"complete once (schedule disabled, function broken or never invoked)."
            ),
            metric=cw.MathExpression(
                expression="IF(FILL(started, 0) > 0 AND FILL(checks, 0) == 0, 1, 0)",
                using_metrics={
                    "started": workflow.state_machine.metric_started(period=heartbeat, statistic="Sum"),
                    "checks": _metric(CHECKS_RUN, heartbeat, "Sum"),
                },
                label="rollouts running while no check completed",
                period=heartbeat,
            ),
            threshold=0,
            comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
        )

        # Dashboards are global to the account: the region keeps two regions' stacks of one name apart.
        self.dashboard = cw.Dashboard(self, "Dashboard", dashboard_name=f"{stack_name(self)}-{Aws.REGION}-rewards")
        add_dashboard_graphs(
            self.dashboard,
            components,
            period,
            alarms_cfg,
            runner_duration=runner.function.metric_duration(statistic="p99", period=Duration.minutes(5)),
        )
        self.dashboard.add_widgets(
            cw.AlarmStatusWidget(
                title="Alarms",
                width=24,
                alarms=self.alarms,
            )
        )

    def show_alarms(self, title: str, alarms: list[cw.Alarm]) -> None:
        """A row of the dashboard with the status of ``alarms``: those of a construct built after this one (the Nova
        bridge's), which the dashboard's own alarm widget cannot list."""
        self.dashboard.add_widgets(cw.AlarmStatusWidget(title=title, width=24, alarms=alarms))

    def _alarm(
        self,
        construct_id: str,
        name: str,
        *,
        description: str,
        metric: cw.IMetric,
        threshold: float,
        comparison: cw.ComparisonOperator,
        missing: cw.TreatMissingData = cw.TreatMissingData.NOT_BREACHING,
        ok_action: bool = True,
    ) -> cw.Alarm:
        """An alarm named ``<stack>-<name>`` (the prefix the topic's CloudWatch grant allows) notifying the topic."""
        alarm = notifying_alarm(
            self,
            construct_id,
            name,
            description=description,
            metric=metric,
            threshold=threshold,
            comparison=comparison,
            action=self._action,
            missing=missing,
            ok_action=ok_action,
        )
        self.alarms.append(alarm)
        return alarm
