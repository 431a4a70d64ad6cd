"""Monitoring: the variance-check Lambda, its schedule, alarms per reward component, SNS and a dashboard.

The Lambda reads a step's records, runs rewardpipe.monitoring, writes the verdicts to S3 and emits the
per-component statistics as CloudWatch metrics (Powertools EMF). The alarms sit on those metrics, so
the alarm logic (M of N steps over a threshold) is CloudWatch's and needs no state in the Lambda.
"""

from __future__ import annotations

import json

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as _lambda
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subs
from constructs import Construct

from stacks.config import DeploymentSettings
from stacks.constructs.code_runner import CodeRunner
from stacks.constructs.common import METRICS_NAMESPACE, SERVICE_NAME, grant_list, grant_prefix, python_function, stack_name
from stacks.constructs.rollout_workflow import RolloutWorkflow
from stacks.constructs.storage import RUNS_PREFIX, Storage

# Metric names the monitor Lambda emits (rewardpipe.aws.metrics uses the same names).
ZERO_VARIANCE = "ZeroVarianceGroupFraction"
WITHIN_GROUP_STD = "WithinGroupStd"
COMPONENT_MEAN = "ComponentMean"
ERROR_RATE = "ErrorRate"
EXECUTION_MS = "ExecutionDurationMs"


def _metric(name: str, period: Duration, statistic: str = "Maximum", **dims: str) -> cw.Metric:
    return cw.Metric(
        namespace=METRICS_NAMESPACE, metric_name=name, statistic=statistic, period=period,
        dimensions_map={"service": SERVICE_NAME, **dims},
    )


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
        layer: _lambda.ILayerVersion,
    ) -> None:
        super().__init__(scope, construct_id)
        alarms_cfg = settings.alarms
        components = settings.reward_components()
        period = Duration.minutes(alarms_cfg.period_minutes)

        # Alarm topic, encrypted with a key CloudWatch is allowed to use (the AWS-managed SNS key is not).
        key = kms.Key(self, "TopicKey", enable_key_rotation=True, description="rewardpipe alarm topic")
        key.add_to_resource_policy(iam.PolicyStatement(
            principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
            actions=["kms:Decrypt", "kms:GenerateDataKey*"],
            resources=["*"],
        ))
        self.topic = sns.Topic(self, "Alarms", master_key=key, enforce_ssl=True, display_name="rewardpipe alarms")
        if alarms_cfg.email:
            self.topic.add_subscription(subs.EmailSubscription(alarms_cfg.email))

        self.function = python_function(
            self, "VarianceCheck", name="variance_monitor", layer=layer,
            description="rewardpipe: within-group variance check per reward component",
            environment={
                "BUCKET": storage.bucket.bucket_name,
                "REWARD_NAME": settings.reward_name,
                "REWARD_WEIGHTS": json.dumps(settings.reward_weights, sort_keys=True),
                "GROUP_SIZE": str(settings.group_size),
                "ZERO_VARIANCE_FRACTION": str(alarms_cfg.zero_variance_fraction),
                "ERROR_RATE_THRESHOLD": str(alarms_cfg.error_rate),
                "ALARM_TOPIC_ARN": self.topic.topic_arn,
            },
            memory_mb=settings.functions.memory_mb,
            timeout_s=settings.functions.monitor_timeout_s,
            # One check at a time: each check reads and rewrites the run's hysteresis state in S3.
            reserved_concurrency=1,
        )
        grant_list(self.function, storage.bucket.bucket_arn, RUNS_PREFIX)
        grant_prefix(self.function, storage.bucket.bucket_arn, RUNS_PREFIX, read=True, write=True)
        self.topic.grant_publish(self.function)

        self.schedule = events.Rule(
            self, "Schedule", schedule=events.Schedule.rate(Duration.minutes(settings.monitor_schedule_minutes)),
            description="rewardpipe: check the latest step of every run",
        )
        self.schedule.add_target(targets.LambdaFunction(self.function, retry_attempts=2))

        action = cw_actions.SnsAction(self.topic)
        self.component_alarms: dict[str, cw.Alarm] = {}
        for component in components:
            alarm = cw.Alarm(
                self, f"DeadComponent-{component}",
                alarm_name=f"{stack_name(self)}-dead-component-{component}",
                alarm_description=(
                    f"Reward component '{component}' has zero within-group variance in at least "
                    f"{alarms_cfg.zero_variance_fraction:.0%} of groups in {alarms_cfg.datapoints_to_alarm} of the "
                    f"last {alarms_cfg.evaluation_periods} checks: it gives GRPO no signal."
                ),
                metric=_metric(ZERO_VARIANCE, period, component=component),
                threshold=alarms_cfg.zero_variance_fraction,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                evaluation_periods=alarms_cfg.evaluation_periods,
                datapoints_to_alarm=alarms_cfg.datapoints_to_alarm,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            )
            alarm.add_alarm_action(action)
            alarm.add_ok_action(action)
            self.component_alarms[component] = alarm

        self.error_alarm = cw.Alarm(
            self, "ErrorRateAlarm", alarm_name=f"{stack_name(self)}-error-rate",
            alarm_description=f"More than {alarms_cfg.error_rate:.0%} of a step's rollouts ended in an error record.",
            metric=_metric(ERROR_RATE, period),
            threshold=alarms_cfg.error_rate,
            comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=alarms_cfg.evaluation_periods,
            datapoints_to_alarm=alarms_cfg.datapoints_to_alarm,
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
        )
        self.error_alarm.add_alarm_action(action)
        self.error_alarm.add_ok_action(action)

        self.failed_executions_alarm = cw.Alarm(
            self, "FailedExecutionsAlarm", alarm_name=f"{stack_name(self)}-rollouts-without-record",
            alarm_description="A rollout execution failed or timed out without writing even an error record.",
            metric=cw.MathExpression(
                expression="failed + timedOut",
                using_metrics={
                    "failed": workflow.state_machine.metric_failed(period=Duration.minutes(5), statistic="Sum"),
                    "timedOut": workflow.state_machine.metric_timed_out(period=Duration.minutes(5), statistic="Sum"),
                },
                label="rollouts that ended without a record",
                period=Duration.minutes(5),
            ),
            threshold=0, comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1, treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
        )
        self.failed_executions_alarm.add_alarm_action(action)

        self.dashboard = cw.Dashboard(self, "Dashboard", dashboard_name=f"{stack_name(self)}-rewards")
        self.dashboard.add_widgets(
            cw.GraphWidget(
                title="Within-group std by component", width=12,
                left=[_metric(WITHIN_GROUP_STD, period, "Average", component=c) for c in components],
            ),
            cw.GraphWidget(
                title="Zero-variance group fraction by component", width=12,
                left=[_metric(ZERO_VARIANCE, period, component=c) for c in components],
                left_annotations=[cw.HorizontalAnnotation(value=alarms_cfg.zero_variance_fraction, label="dead")],
                left_y_axis=cw.YAxisProps(min=0, max=1),
            ),
        )
        self.dashboard.add_widgets(
            cw.GraphWidget(
                title="Component mean", width=8,
                left=[_metric(COMPONENT_MEAN, period, "Average", component=c) for c in components],
            ),
            cw.GraphWidget(
                title="Error rate (error records / rollouts)", width=8,
                left=[_metric(ERROR_RATE, period)],
                left_annotations=[cw.HorizontalAnnotation(value=alarms_cfg.error_rate, label="alarm")],
            ),
            cw.GraphWidget(
                title="Execution latency (ms)", width=8,
                left=[
                    _metric(EXECUTION_MS, Duration.minutes(5), "p50", route="lambda"),
                    _metric(EXECUTION_MS, Duration.minutes(5), "p99", route="lambda"),
                    _metric(EXECUTION_MS, Duration.minutes(5), "p50", route="fargate"),
                    _metric(EXECUTION_MS, Duration.minutes(5), "p99", route="fargate"),
                ],
                right=[runner.function.metric_duration(statistic="p99", period=Duration.minutes(5))],
            ),
        )
        self.dashboard.add_widgets(
            cw.AlarmStatusWidget(
                title="Alarms", width=24,
                alarms=[*self.component_alarms.values(), self.error_alarm, self.failed_executions_alarm],
            )
        )
