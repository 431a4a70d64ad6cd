"""Rollout workflow: one Standard state machine execution per rollout.

::

    StartEpisode ─► Route? ──ask_trainer──► AskTrainer (SQS, waitForTaskToken) ─► Converse ─► Route?
                       │ ───converse─────────────────────────────────────────────► Converse ─► Route?
                       ├──run_lambda──► RunCodeLambda ──┐
                       ├──run_fargate─► RunCodeFargate ─┤
                       └──score─────────────────────────┴──► Score (end)

StartEpisode and Converse run rewardpipe.episode.converse (policy and simulator turns, the episode's
own classification of each turn) inside one invocation, and write the execution job when the episode
commits, so the state machine only branches on the ``next`` field they return. Only small references
travel between states; the episode and its transcript live in S3 (rewardpipe.aws.state).

Every Task state retries transient errors (with full jitter) and catches everything else into
RecordError, under ``$.failed.<state name>`` so the record says which state failed. RecordError writes
an error record to S3 (never a missing record, never a 0 score). Only if RecordError itself keeps
failing does the execution end in Fail, which the ExecutionsFailed alarm watches.
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
MAX_RETRY_DELAY_S = 60
FARGATE_START_MARGIN_S = 600
ECS_RETRY_ERRORS = ["ECS.AmazonECSException", "ECS.SdkClientException", "AmazonECS.Unknown"]
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
        bucket = self.bucket = storage.bucket
        fns = settings.functions
        common_env = {
            "BUCKET": bucket.bucket_name,
            "REWARD_NAME": settings.reward_name,
            "REWARD_WEIGHTS": json.dumps(settings.reward_weights, sort_keys=True),
            "MAX_TURNS": str(checked_max_turns(settings.max_turns)),
            "ROUTING_THRESHOLD_S": str(settings.execution_routing_threshold_s),
            "SIMULATOR": settings.simulator,
            # pydantic scans every installed distribution's entry points for plugins at the first model
            # it builds; none are used, and the scan is a large share of a cold start.
            "PYDANTIC_DISABLE_PLUGINS": "__all__",
        }

        def function(cid: str, name: str, description: str, *, timeout_s: int | None = None, env=None) -> _lambda.Function:
            return python_function(
                self, cid, name=name, layer=layer, description=f"rewardpipe: {description}",
                environment={**common_env, **(env or {})}, memory_mb=fns.memory_mb,
                timeout_s=timeout_s or fns.timeout_s,
            )

        policy_env = {"POLICY_BASE_URL": settings.policy.base_url, "POLICY_MODEL": settings.policy.model}
        # Both conversation functions may call an LLM (policy or simulator): they get the policy timeout.
        self.start_fn = function("StartEpisode", "rollout_start", "open an episode and converse up to the first pause",
                                 timeout_s=fns.policy_timeout_s, env=policy_env)
        self.converse_fn = function("Converse", "converse", "apply a trainer turn, then converse up to the next pause",
                                    timeout_s=fns.policy_timeout_s, env=policy_env)
        self.score_fn = function("Score", "score_rollout", "score the episode and write its record")
        self.error_fn = function("RecordError", "error_record", "write an error record for a failed rollout")

        # Least privilege: each function touches only the prefixes it needs. Episode state lives under
        # runs/<run>/state/, so the conversation functions read and write runs/ (never jobs results).
        grant_prefix(self.start_fn, bucket.bucket_arn, TASKS_PREFIX, read=True, write=True)
        grant_prefix(self.converse_fn, bucket.bucket_arn, TASKS_PREFIX, read=True, write=False)
        for fn in (self.start_fn, self.converse_fn):
            grant_prefix(fn, bucket.bucket_arn, RUNS_PREFIX, read=True, write=True)
            grant_prefix(fn, bucket.bucket_arn, JOBS_PREFIX, read=False, write=True)
        grant_prefix(self.score_fn, bucket.bucket_arn, TASKS_PREFIX, read=True, write=False)
        grant_prefix(self.score_fn, bucket.bucket_arn, JOBS_PREFIX, read=True, write=False)
        grant_prefix(self.score_fn, bucket.bucket_arn, RUNS_PREFIX, read=True, write=True)
        grant_prefix(self.error_fn, bucket.bucket_arn, RUNS_PREFIX, read=True, write=True)
        # Every read grant above comes with s3:ListBucket on its prefix (common.grant_prefix): without it S3
        # answers a GET of a missing key with 403, not 404, so the runner's missing result (executor_crash),
        # an absent earlier record or a missing task would read as AccessDenied.
        if settings.policy.api_key_secret_name:
            secret = secretsmanager.Secret.from_secret_name_v2(self, "PolicyApiKey", settings.policy.api_key_secret_name)
            for fn in (self.start_fn, self.converse_fn):
                secret.grant_read(fn)
                fn.add_environment("POLICY_API_KEY_SECRET", settings.policy.api_key_secret_name)

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

    def _retry(self, state: sfn.TaskStateBase, errors: list[str], *, interval_s: int, attempts: int) -> None:
        # Full jitter spreads the retries of many rollouts that failed together (a throttled burst);
        # the cap keeps a late retry from waiting longer than the fault usually lasts.
        state.add_retry(errors=errors, interval=Duration.seconds(interval_s), max_attempts=attempts, backoff_rate=2,
                        jitter_strategy=sfn.JitterType.FULL, max_delay=Duration.seconds(MAX_RETRY_DELAY_S))

    def _invoke(self, cid: str, fn: _lambda.IFunction, *, payload: sfn.TaskInput | None = None,
                transient_retries: int = 3) -> tasks.LambdaInvoke:
        task = tasks.LambdaInvoke(
            self, cid, lambda_function=fn, payload_response_only=True, retry_on_service_exceptions=False,
            payload=payload,
        )
        self._retry(task, LAMBDA_SERVICE_ERRORS, interval_s=2, attempts=6)
        self._retry(task, TRANSIENT_ERRORS, interval_s=2, attempts=transient_retries)
        return task

    def _definition(self, settings: DeploymentSettings, runner: CodeRunner) -> sfn.IChainable:
        record_error = self._invoke("RecordErrorStep", self.error_fn, transient_retries=5, payload=sfn.TaskInput.from_object({
            "context": sfn.JsonPath.entire_payload, "attempt": sfn.JsonPath.execution_name,
        }))
        record_error.add_catch(sfn.Fail(self, "RecordWriteFailed", error="RecordWriteFailed",
                                        cause="the error record could not be written"), errors=["States.ALL"])

        def guarded(state, name: str):
            # The Catch payload lands under $.failed.<state>, so RecordError knows which state failed.
            state.add_catch(record_error, errors=["States.ALL"], result_path=f"$.failed.{name}")
            return state

        start = guarded(self._invoke("StartEpisodeStep", self.start_fn, payload=sfn.TaskInput.from_object({
            "input": sfn.JsonPath.entire_payload, "attempt": sfn.JsonPath.execution_name,
        })), "StartEpisodeStep")
        converse = guarded(self._invoke("ConverseStep", self.converse_fn), "ConverseStep")
        score = guarded(self._invoke("ScoreStep", self.score_fn), "ScoreStep")
        run_lambda = tasks.LambdaInvoke(
            self, "RunCodeLambda", lambda_function=runner.function, retry_on_service_exceptions=False,
            payload_response_only=True,
            payload=sfn.TaskInput.from_object({
                "job_key": sfn.JsonPath.string_at("$.execution.job_key"),
                "result_key": sfn.JsonPath.string_at("$.execution.result_key"),
            }),
            result_path=sfn.JsonPath.DISCARD,
        )
        self._retry(run_lambda, LAMBDA_SERVICE_ERRORS, interval_s=2, attempts=6)
        self._retry(run_lambda, TRANSIENT_ERRORS, interval_s=2, attempts=3)
        guarded(run_lambda, "RunCodeLambda")

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
            task_timeout=sfn.Timeout.duration(Duration.seconds(fargate_step_timeout_s(settings))),
            result_path=sfn.JsonPath.DISCARD,
        )
        # Placement failures (no Fargate capacity, ENI limits) surface as AmazonECS.Unknown.
        self._retry(run_fargate, ECS_RETRY_ERRORS, interval_s=10, attempts=4)
        guarded(run_fargate, "RunCodeFargate")

        ask_trainer = guarded(tasks.SqsSendMessage(
            self, "AskTrainer",
            queue=self.turn_requests,
            integration_pattern=sfn.IntegrationPattern.WAIT_FOR_TASK_TOKEN,
            # Keys, not the transcript: RolloutClient reads the conversation from state_key and writes a
            # reply too large for SendTaskSuccess to reply_key.
            message_body=sfn.TaskInput.from_object({
                "task_token": sfn.JsonPath.task_token,
                "run": sfn.JsonPath.string_at("$.run"),
                "step": sfn.JsonPath.number_at("$.step"),
                "group": sfn.JsonPath.string_at("$.group"),
                "rollout": sfn.JsonPath.string_at("$.rollout"),
                "bucket": self.bucket.bucket_name,
                "state_key": sfn.JsonPath.string_at("$.state_key"),
                "reply_key": sfn.JsonPath.string_at("$.reply_key"),
            }),
            result_path="$.reply",
            task_timeout=sfn.Timeout.duration(Duration.hours(1)),
        ), "AskTrainer")
        self._retry(ask_trainer, ["SQS.SdkClientException", "SQS.AmazonSQSException"], interval_s=2, attempts=3)
        ask_trainer.next(converse)

        route = sfn.Choice(self, "Route")
        unknown = sfn.Pass(self, "UnknownAction", parameters={
            "Error": "UnknownAction", "Cause": "the rollout reference has no recognised 'next'",
        }, result_path="$.failed.Route")
        unknown.next(record_error)

        start.next(route)
        converse.next(route)
        for value, target in (("ask_trainer", ask_trainer), ("converse", converse), ("run_lambda", run_lambda),
                              ("run_fargate", run_fargate), ("score", score)):
            route.when(sfn.Condition.and_(sfn.Condition.is_present("$.next"),
                                          sfn.Condition.string_equals("$.next", value)), target)
        route.otherwise(unknown)
        run_lambda.next(score)
        run_fargate.next(score)
        return start


def checked_max_turns(max_turns: int) -> int:
    """The stack's turn limit, refused at synth when above the documented per-rollout limit."""
    from rewardpipe.aws.rollout import MAX_TURNS_LIMIT

    if max_turns > MAX_TURNS_LIMIT:
        raise ValueError(f"rewardpipe.max_turns: at most {MAX_TURNS_LIMIT} for the rollout workflow "
                         f"(docs/aws.md, Limits), got {max_turns}")
    return max_turns


def fargate_step_timeout_s(settings: DeploymentSettings) -> int:
    """The Fargate step may take the largest job budget a task can declare, plus time to start the task
    and move the job and result through S3, and never less than the configured task timeout."""
    from rewardpipe.models import Task

    largest_job_s = next(m.le for m in Task.model_fields["timeout_s"].metadata if hasattr(m, "le"))
    return int(max(settings.fargate.task_timeout_s, largest_job_s + FARGATE_START_MARGIN_S))
