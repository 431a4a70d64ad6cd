"""Rollout workflow: one Standard state machine execution per rollout.

::

    StartEpisode ─► NextAction? ──policy──► PolicyMode? ──callback──► AskTrainer (SQS, waitForTaskToken) ─┐
        ▲               │                        └──lambda/replay──► PolicyTurn ◄──────────────────────────┘
        │               ├──simulator──► SimulatorTurn
        └───────────────┘  (both loop back to NextAction? until the episode says execute or score)
                        ├──execute──► PrepareExecution ─► Route? ──lambda──► RunCodeLambda ──┐
                        │                                    ├──fargate─► RunCodeFargate ──┤
                        │                                    └──none─────────────────────────┤
                        └──score──────────────────────────────────────────────────────────► Score ─► Scored

Every Task state retries transient errors and catches everything else into RecordError, which writes
an error record to S3 (never a missing record, never a 0 score). Only if RecordError itself keeps
failing does the execution end in Fail, which the ExecutionsFailed alarm watches.

Each Lambda takes the whole rollout context and returns the whole new context, so the definition
carries no data-shaping logic (the same rewardpipe.episode functions do every step).
"""

from __future__ import annotations

import json

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_lambda as _lambda
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.config import DeploymentSettings
from stacks.constructs.code_runner import CodeRunner
from stacks.constructs.common import grant_prefix, python_function
from stacks.constructs.storage import JOBS_PREFIX, RUNS_PREFIX, TASKS_PREFIX, Storage

TRANSIENT_ERRORS = ["TransientError"]
LAMBDA_SERVICE_ERRORS = [
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
]


class RolloutWorkflow(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: DeploymentSettings,
        storage: Storage,
        runner: CodeRunner,
        layer: _lambda.ILayerVersion,
    ) -> None:
        super().__init__(scope, construct_id)
        bucket = storage.bucket
        fns = settings.functions
        common_env = {
            "BUCKET": bucket.bucket_name,
            "REWARD_NAME": settings.reward_name,
            "REWARD_WEIGHTS": json.dumps(settings.reward_weights, sort_keys=True),
            "MAX_TURNS": str(settings.max_turns),
            "ROUTING_THRESHOLD_S": str(settings.execution_routing_threshold_s),
            "SIMULATOR": settings.simulator,
        }

        def function(cid: str, name: str, description: str, *, timeout_s: int | None = None, env=None) -> _lambda.Function:
            return python_function(
                self, cid, name=name, layer=layer, description=f"rewardpipe: {description}",
                environment={**common_env, **(env or {})}, memory_mb=fns.memory_mb,
                timeout_s=timeout_s or fns.timeout_s,
            )

        policy_env = {"POLICY_BASE_URL": settings.policy.base_url, "POLICY_MODEL": settings.policy.model}
        self.start_fn = function("StartEpisode", "rollout_start", "load the task and open an episode")
        self.policy_fn = function("PolicyTurn", "policy_turn", "one assistant turn (replay, OpenAI-compatible or trainer callback)",
                                  timeout_s=fns.policy_timeout_s, env=policy_env)
        self.simulator_fn = function("SimulatorTurn", "simulator_turn", "one user-simulator turn")
        self.prepare_fn = function("PrepareExecution", "prepare_execution", "hand the committed code to a code runner")
        self.score_fn = function("Score", "score_rollout", "score the episode and write its record")
        self.error_fn = function("RecordError", "error_record", "write an error record for a failed rollout")

        # Least privilege: each function touches only the prefixes it needs.
        grant_prefix(self.start_fn, bucket.bucket_arn, TASKS_PREFIX, read=True, write=True)
        for fn in (self.policy_fn, self.simulator_fn, self.prepare_fn, self.score_fn):
            grant_prefix(fn, bucket.bucket_arn, TASKS_PREFIX, read=True, write=False)
        grant_prefix(self.prepare_fn, bucket.bucket_arn, JOBS_PREFIX, read=False, write=True)
        grant_prefix(self.score_fn, bucket.bucket_arn, JOBS_PREFIX, read=True, write=False)
        grant_prefix(self.score_fn, bucket.bucket_arn, RUNS_PREFIX, read=False, write=True)
        grant_prefix(self.error_fn, bucket.bucket_arn, RUNS_PREFIX, read=False, write=True)
        if settings.policy.api_key_secret_name:
            secret = secretsmanager.Secret.from_secret_name_v2(self, "PolicyApiKey", settings.policy.api_key_secret_name)
            secret.grant_read(self.policy_fn)
            self.policy_fn.add_environment("POLICY_API_KEY_SECRET", settings.policy.api_key_secret_name)

        # Trainer callback: each request carries a task token; the trainer answers with
        # SendTaskSuccess(output={"text": "<assistant turn>"}).
        dlq = sqs.Queue(self, "TurnRequestsDlq", encryption=sqs.QueueEncryption.SQS_MANAGED, enforce_ssl=True,
                        retention_period=Duration.days(14))
        self.turn_requests = sqs.Queue(
            self, "TurnRequests", encryption=sqs.QueueEncryption.SQS_MANAGED, enforce_ssl=True,
            visibility_timeout=Duration.minutes(5),
            dead_letter_queue=sqs.DeadLetterQueue(queue=dlq, max_receive_count=5),
        )

        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            state_machine_type=sfn.StateMachineType.STANDARD,
            definition_body=sfn.DefinitionBody.from_chainable(self._definition(settings, runner)),
            timeout=Duration.hours(24),
            tracing_enabled=True,
            logs=sfn.LogOptions(
                # Step Functions writes logs through CloudWatch vended logs; a group under
                # /aws/vendedlogs/ avoids the account-wide log resource policy size limit.
                destination=logs.LogGroup(self, "Logs", retention=logs.RetentionDays.ONE_MONTH,
                                          removal_policy=RemovalPolicy.DESTROY,
                                          log_group_name=f"/aws/vendedlogs/states/{Stack.of(self).stack_name}-rollouts"),
                level=sfn.LogLevel.ALL,
                include_execution_data=False,
            ),
        )

    # ------------------------------------------------------------------------------------------------

    def _invoke(self, cid: str, fn: _lambda.IFunction, *, transient_retries: int = 3) -> tasks.LambdaInvoke:
        task = tasks.LambdaInvoke(
            self, cid, lambda_function=fn, payload_response_only=True, retry_on_service_exceptions=False,
        )
        task.add_retry(errors=LAMBDA_SERVICE_ERRORS, interval=Duration.seconds(2), max_attempts=6, backoff_rate=2)
        task.add_retry(errors=TRANSIENT_ERRORS, interval=Duration.seconds(2), max_attempts=transient_retries,
                       backoff_rate=2)
        return task

    def _definition(self, settings: DeploymentSettings, runner: CodeRunner) -> sfn.IChainable:
        record_error = self._invoke("RecordErrorStep", self.error_fn, transient_retries=5)
        record_error.next(sfn.Succeed(self, "ErrorRecorded", comment="the record in S3 has status=error"))
        record_error.add_catch(sfn.Fail(self, "RecordWriteFailed", error="RecordWriteFailed",
                                        cause="the error record could not be written"), errors=["States.ALL"])

        def guarded(state):
            state.add_catch(record_error, errors=["States.ALL"], result_path="$.error")
            return state

        start = guarded(self._invoke("StartEpisodeStep", self.start_fn))
        policy = guarded(self._invoke("PolicyTurnStep", self.policy_fn))
        simulator = guarded(self._invoke("SimulatorTurnStep", self.simulator_fn))
        prepare = guarded(self._invoke("PrepareExecutionStep", self.prepare_fn))
        score = guarded(self._invoke("ScoreStep", self.score_fn))
        run_lambda = guarded(tasks.LambdaInvoke(
            self, "RunCodeLambda", lambda_function=runner.function, retry_on_service_exceptions=False,
            payload_response_only=True,
            payload=sfn.TaskInput.from_object({
                "job_key": sfn.JsonPath.string_at("$.execution.job_key"),
                "result_key": sfn.JsonPath.string_at("$.execution.result_key"),
            }),
            result_path=sfn.JsonPath.DISCARD,
        ))
        run_lambda.add_retry(errors=LAMBDA_SERVICE_ERRORS, interval=Duration.seconds(2), max_attempts=6, backoff_rate=2)
        run_lambda.add_retry(errors=TRANSIENT_ERRORS, interval=Duration.seconds(2), max_attempts=3, backoff_rate=2)

        run_fargate = tasks.EcsRunTask(
            self, "RunCodeFargate",
            integration_pattern=sfn.IntegrationPattern.RUN_JOB,
            cluster=runner.cluster,
            task_definition=runner.task_definition,
            launch_target=tasks.EcsFargateLaunchTarget(platform_version=ecs.FargatePlatformVersion.LATEST),
            assign_public_ip=False,
            subnets=runner.subnets,
            security_groups=[runner.security_group],
            container_overrides=[tasks.ContainerOverride(
                container_definition=runner.container,
                environment=[
                    tasks.TaskEnvironmentVariable(name="JOB_KEY", value=sfn.JsonPath.string_at("$.execution.job_key")),
                    tasks.TaskEnvironmentVariable(name="RESULT_KEY", value=sfn.JsonPath.string_at("$.execution.result_key")),
                ],
            )],
            task_timeout=sfn.Timeout.duration(Duration.seconds(settings.fargate.task_timeout_s)),
            result_path=sfn.JsonPath.DISCARD,
        )
        run_fargate.add_retry(errors=["ECS.AmazonECSException", "ECS.SdkClientException"],
                              interval=Duration.seconds(10), max_attempts=3, backoff_rate=2)
        guarded(run_fargate)

        ask_trainer = guarded(tasks.SqsSendMessage(
            self, "AskTrainer",
            queue=self.turn_requests,
            integration_pattern=sfn.IntegrationPattern.WAIT_FOR_TASK_TOKEN,
            message_body=sfn.TaskInput.from_object({
                "task_token": sfn.JsonPath.task_token,
                "run": sfn.JsonPath.string_at("$.run"),
                "step": sfn.JsonPath.number_at("$.step"),
                "group": sfn.JsonPath.string_at("$.group"),
                "rollout": sfn.JsonPath.string_at("$.rollout"),
                "messages": sfn.JsonPath.list_at("$.state.messages"),
            }),
            result_path="$.policy_reply",
            task_timeout=sfn.Timeout.duration(Duration.hours(1)),
        ))
        ask_trainer.add_retry(errors=["SQS.SdkClientException", "SQS.AmazonSQSException"],
                              interval=Duration.seconds(2), max_attempts=3, backoff_rate=2)
        ask_trainer.next(policy)

        next_action = sfn.Choice(self, "NextAction")
        policy_mode = sfn.Choice(self, "PolicyMode")
        route = sfn.Choice(self, "Route")
        unknown = sfn.Pass(self, "UnknownAction", parameters={
            "Error": "UnknownAction", "Cause": "the episode state has no recognised next_action",
        }, result_path="$.error")
        unknown.next(record_error)

        start.next(next_action)
        policy.next(next_action)
        simulator.next(next_action)
        next_action.when(sfn.Condition.and_(sfn.Condition.is_present("$.state.next_action"),
                                            sfn.Condition.string_equals("$.state.next_action", "policy")), policy_mode)
        next_action.when(sfn.Condition.and_(sfn.Condition.is_present("$.state.next_action"),
                                            sfn.Condition.string_equals("$.state.next_action", "simulator")), simulator)
        next_action.when(sfn.Condition.and_(sfn.Condition.is_present("$.state.next_action"),
                                            sfn.Condition.string_equals("$.state.next_action", "execute")), prepare)
        next_action.when(sfn.Condition.and_(sfn.Condition.is_present("$.state.next_action"),
                                            sfn.Condition.string_equals("$.state.next_action", "score")), score)
        next_action.otherwise(unknown)

        policy_mode.when(sfn.Condition.and_(sfn.Condition.is_present("$.policy.mode"),
                                            sfn.Condition.string_equals("$.policy.mode", "callback")), ask_trainer)
        policy_mode.otherwise(policy)

        prepare.next(route)
        route.when(sfn.Condition.string_equals("$.execution.route", "lambda"), run_lambda)
        route.when(sfn.Condition.string_equals("$.execution.route", "fargate"), run_fargate)
        route.otherwise(score)
        run_lambda.next(score)
        run_fargate.next(score)
        score.next(sfn.Succeed(self, "Scored"))
        return start
