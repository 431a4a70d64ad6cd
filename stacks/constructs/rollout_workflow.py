"""Rollout workflow: one Standard state machine execution per rollout.

::

    StartEpisode ──(trainer replied / resume)──► Converse ◄─┐ (trainer replied / resume: Next is itself)
         │                                          │  └─────┘
         ├── Rollout.Finished ──────────────────────┼──────────► Finished (end)
         └── Rollout.RunCode ─► ResumeWithJob ─► RouteJob ─► [RunCodeFargate ─►] Score (end)

StartEpisode and Converse are ``lambda:invoke.waitForTaskToken`` states running
rewardpipe.episode.converse (policy and simulator turns, the episode's own classification of each turn).
Each completes its own task token with the outcome (rewardpipe.aws.rollout): it sends the trainer's turn
request with the token (the trainer's SendTaskSuccess re-enters Converse), resumes after a time pause, or
leaves the loop with a named SendTaskFailure that the Catch routes -- ``Rollout.Finished`` after running a
short job on the code-runner Lambda and scoring in the same invocation, ``Rollout.RunCode`` for a job
for Fargate (or a Lambda job the invocation has no time left to wait for: Score runs it). Without a Choice
state after every turn a trainer turn is one state transition. The code-runner Lambda is only ever invoked
from a function with the job in its payload; it has no access to the bucket.
Only small references travel between states; the episode and its transcript live in S3.

Every Task state retries transient errors (with full jitter) and catches everything else into
RecordError, with the error under ``failed.<state name>`` so the record says which state failed.
RecordError writes an error record to S3 (never a missing record, never a 0 score). Only if RecordError
itself keeps failing does the execution end in Fail, which the ExecutionsFailed alarm watches.

No Catch may grow a large input: Step Functions fails a state whose output (or whose input after
Parameters) is over 256 KiB with ``States.DataLimitExceeded``, which ``States.ALL`` does not catch, so
the execution would end without a record. The states whose input is a small reference (Score, the Fargate
runner) keep it and add the error (a cause is at most 32 KiB); StartEpisode (the raw execution input)
and Converse (a trainer's reply) keep only the error, and RecordError finds the rollout from the context
object: the run of Converse's execution input (the episode's snapshot names the rest), or, when the
episode cannot name it (StartEpisode), the execution's input read back with DescribeExecution.
"""

from __future__ import annotations

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as _lambda
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks

from constructs import Construct
from stacks.config import DeploymentSettings
from stacks.constructs.code_runner import CodeRunner
from stacks.constructs.common import (
    RewardPipeLayer,
    grant_prefix,
    grant_secret_read,
    python_function,
    task_response_statement,
)
from stacks.constructs.storage import JOBS_PREFIX, RUNS_PREFIX, TASKS_PREFIX, Storage

# The conversation states leave their loop with these (rewardpipe.aws.rollout.FINISHED / RUN_CODE).
FINISHED = "Rollout.Finished"
RUN_CODE = "Rollout.RunCode"
# How long a conversation state waits for the trainer's turn (longer only for a longer Nova rollout.timeout).
TRAINER_TURN_TIMEOUT = Duration.hours(1)

TRANSIENT_ERRORS = ["TransientError"]
MAX_RETRY_DELAY_S = 60
FARGATE_START_MARGIN_S = 600
ECS_RETRY_ERRORS = ["ECS.AmazonECSException", "ECS.SdkClientException", "AmazonECS.Unknown"]
# Step Functions' "Handle Lambda service exceptions" best practice names the first four; throttling is the fifth.
LAMBDA_SERVICE_ERRORS = [
    "Lambda.ClientExecutionTimeoutException",
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
        layer: RewardPipeLayer,
        user_layer: _lambda.LayerVersion | None = None,
        turn_timeout_s: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        # A turn a conversation state waits for (its task token): the trainer's hour, or longer when a turn is
        # Nova generating it and the recipe's rollout.timeout is longer (the bridge's sweeper cuts a rollout at
        # its budget, a fraction of that; a shorter state timeout would end it earlier, as a timeout record).
        self.turn_timeout = Duration.seconds(max(int(TRAINER_TURN_TIMEOUT.to_seconds()), turn_timeout_s or 0))
        bucket = self.bucket = storage.bucket
        fns = settings.functions
        code = settings.user_code
        common_env = {
            "BUCKET": bucket.bucket_name,
            # The environment and the reward as explicit references, resolved at synth (stacks/user_code.py).
            **code.environment_env(),
            **code.reward_env(settings.reward_weights),
            # Only when set: an unset MAX_TURNS leaves each environment its own max_turns.
            **({"MAX_TURNS": str(checked_max_turns(settings.max_turns))} if settings.max_turns is not None else {}),
            "ROUTING_THRESHOLD_S": str(settings.execution_routing_threshold_s),
            "SIMULATOR": settings.simulator,
            # pydantic scans every installed distribution's entry points for plugins at the first model
            # it builds; none are used, and the scan is a large share of a cold start.
            "PYDANTIC_DISABLE_PLUGINS": "__all__",
        }

        def function(
            cid: str,
            name: str,
            description: str,
            *,
            timeout_s: int | None = None,
            env=None,
            memory_mb: int | None = None,
            reserved_concurrency: int | None = None,
        ) -> _lambda.Function:
            # Every rollout function imports the user's environment or reward: each gets the user layer.
            return python_function(
                self,
                cid,
                name=name,
                layer=layer,
                description=f"rewardpipe: {description}",
                environment={**common_env, **(env or {})},
                memory_mb=memory_mb or fns.memory_mb,
                timeout_s=timeout_s or fns.timeout_s,
                reserved_concurrency=reserved_concurrency,
                user_layer=user_layer,
            )

        # Trainer callback: each request carries a task token; the trainer answers with
        # SendTaskSuccess(output={"text": "<assistant turn>"}).
        dlq = self.turn_requests_dlq = sqs.Queue(
            self,
            "TurnRequestsDlq",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(14),
        )
        self.turn_requests = sqs.Queue(
            self,
            "TurnRequests",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            visibility_timeout=Duration.minutes(5),
            dead_letter_queue=sqs.DeadLetterQueue(queue=dlq, max_receive_count=5),
        )

        self.turn_channels: dict[str, str] = {}
        policy_env = {
            "POLICY_BASE_URL": settings.policy.base_url,
            "POLICY_MODEL": settings.policy.model,
            # the endpoint client's timeout and retries, from which the turn reserve is derived
            "POLICY_HTTP_TIMEOUT_S": str(settings.policy.http_timeout_s),
            "POLICY_HTTP_RETRIES": str(settings.policy.http_retries),
            "TURN_QUEUE_URL": self.turn_requests.queue_url,
            "RUNNER_FUNCTION": runner.function.function_name,
        }
        # Both conversation functions may call an LLM (policy or simulator) and wait for a short job on the
        # code-runner Lambda: they get the policy timeout, and the conversation memory (they mostly wait
        # on I/O; docs/aws.md "Cost" has the measurement).
        self.start_fn = function(
            "StartEpisode",
            "rollout_start",
            "open an episode and converse up to the first pause",
            timeout_s=fns.policy_timeout_s,
            env=policy_env,
            memory_mb=fns.conversation_memory_mb,
        )
        self.converse_fn = function(
            "Converse",
            "converse",
            "apply a trainer turn, then converse up to the next pause",
            timeout_s=fns.policy_timeout_s,
            env=policy_env,
            memory_mb=fns.conversation_memory_mb,
        )
        # Score runs a Lambda-route job the conversation state had no time to wait for (inline, like the
        # conversation states do), so it may wait as long as the code runner runs.
        self.score_fn = function(
            "Score",
            "score_rollout",
            "run the committed code if needed, score, write the record",
            timeout_s=fns.code_runner_timeout_s,
            env={"RUNNER_FUNCTION": runner.function.function_name},
            reserved_concurrency=fns.reserved_concurrency.score,
        )
        self.error_fn = function("RecordError", "error_record", "write an error record for a failed rollout")

        # Least privilege: each function touches only the prefixes it needs. Episode state lives under
        # runs/<run>/state/, so the conversation functions read and write runs/. The Lambda runner gets its
        # job and returns its result inline (rewardpipe.aws.jobs): jobs/ holds only Fargate hand-offs, which
        # the conversation functions write and Score reads the results of.
        grant_prefix(self.start_fn, bucket.bucket_arn, TASKS_PREFIX, read=True, write=True)
        grant_prefix(self.converse_fn, bucket.bucket_arn, TASKS_PREFIX, read=True, write=False)
        for fn in (self.start_fn, self.converse_fn):
            grant_prefix(fn, bucket.bucket_arn, RUNS_PREFIX, read=True, write=True)
            grant_prefix(fn, bucket.bucket_arn, JOBS_PREFIX, read=False, write=True)
        grant_prefix(self.score_fn, bucket.bucket_arn, TASKS_PREFIX, read=True, write=False)
        grant_prefix(self.score_fn, bucket.bucket_arn, JOBS_PREFIX, read=True, write=False)
        grant_prefix(self.score_fn, bucket.bucket_arn, RUNS_PREFIX, read=True, write=True)
        runner.function.grant_invoke(self.score_fn)
        grant_prefix(self.error_fn, bucket.bucket_arn, RUNS_PREFIX, read=True, write=True)
        # Every read grant above comes with s3:ListBucket on its prefix (common.grant_prefix): without it S3
        # answers a GET of a missing key with 403, not 404, so the runner's missing result (executor_crash),
        # an absent earlier record or a missing task would read as AccessDenied.
        if settings.policy.api_key_secret_name:
            grant_secret_read(
                self,
                "PolicyApiKey",
                settings.policy.api_key_secret_name,
                [self.start_fn, self.converse_fn],
                "POLICY_API_KEY_SECRET",
            )

        # The conversation functions ask the trainer, run short jobs and complete their own task tokens
        # (SendTask* authorize on "*": see common.task_response_statement). The machine's execution ARNs are
        # built from its name: a reference to the resource would make the functions' policies depend on the
        # state machine, which depends on the functions.
        machine_name = f"{Stack.of(self).stack_name}-rollouts"
        for fn in (self.start_fn, self.converse_fn):
            self.turn_requests.grant_send_messages(fn)
            runner.function.grant_invoke(fn)
            fn.add_to_role_policy(task_response_statement(("states:SendTaskSuccess", "states:SendTaskFailure")))
        # RecordError reads back the input of an execution whose first state failed (that state passes on
        # only its error; see the module docstring): DescribeExecution authorizes on the execution's ARN.
        self.error_fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=["states:DescribeExecution"],
                resources=[
                    Stack.of(self).format_arn(
                        service="states",
                        resource="execution",
                        resource_name=f"{machine_name}:*",
                        arn_format=ArnFormat.COLON_RESOURCE_NAME,
                    )
                ],
            )
        )

        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            state_machine_name=machine_name,
            state_machine_type=sfn.StateMachineType.STANDARD,
            definition_body=sfn.DefinitionBody.from_chainable(self._definition(settings, runner)),
            timeout=Duration.seconds(execution_timeout_s(settings, int(self.turn_timeout.to_seconds()))),
            tracing_enabled=True,
            logs=sfn.LogOptions(
                # Step Functions writes logs through CloudWatch vended logs; a group under
                # /aws/vendedlogs/ avoids the account-wide log resource policy size limit.
                destination=logs.LogGroup(
                    self,
                    "Logs",
                    retention=logs.RetentionDays.ONE_MONTH,
                    removal_policy=RemovalPolicy.DESTROY,
                    log_group_name=f"/aws/vendedlogs/states/{Stack.of(self).stack_name}-rollouts",
                ),
                level=sfn.LogLevel.ALL,
                include_execution_data=False,
            ),
        )
        # runTask.sync describes the task it started until it stops, and stops it on a timeout. aws-cdk grants
        # both actions on "*" (the task's ARN is only known once it runs), but they authorize on the task's ARN,
        # task/<cluster name>/<task id> (Service Authorization Reference, Amazon ECS), and the cluster is ours:
        # an explicit Deny outside its tasks bounds the grant (aws-cdk's statement cannot be narrowed in place).
        self.state_machine.add_to_role_policy(
            iam.PolicyStatement(
                sid="OnlyThisClustersTasks",
                effect=iam.Effect.DENY,
                actions=["ecs:StopTask", "ecs:DescribeTasks"],
                not_resources=[
                    Stack.of(self).format_arn(
                        service="ecs", resource="task", resource_name=f"{runner.cluster.cluster_name}/*"
                    )
                ],
            )
        )
        # RunTask authorizes on the task definition only; the cluster it runs on is a request parameter. ECS
        # gives RunTask the ecs:cluster condition key (the cluster's ARN; Service Authorization Reference, Amazon
        # ECS): the task, with its role and its jobs/ access, runs on this stack's cluster or not at all. Like the
        # Deny above, it bounds aws-cdk's unconditioned grant (a request without the key is refused as well).
        self.state_machine.add_to_role_policy(
            iam.PolicyStatement(
                sid="RunTasksOnlyOnThisCluster",
                effect=iam.Effect.DENY,
                actions=["ecs:RunTask"],
                resources=["*"],
                conditions={"ArnNotEquals": {"ecs:cluster": runner.cluster.cluster_arn}},
            )
        )

    def add_turn_channel(self, name: str, queue: sqs.IQueue) -> None:
        """A named turn queue besides the trainers': a callback rollout started with ``policy.channel`` = ``name``
        asks its turns there (rewardpipe.aws.rollout.turn_queue). The conversation functions may send to it."""
        self.turn_channels[name] = queue.queue_url
        for fn in (self.start_fn, self.converse_fn):
            queue.grant_send_messages(fn)
            fn.add_environment("TURN_CHANNELS", Stack.of(self).to_json_string(self.turn_channels))

    # ------------------------------------------------------------------------------------------------

    def _retry(self, state: sfn.TaskStateBase, errors: list[str], *, interval_s: int, attempts: int) -> None:
        # Full jitter spreads the retries of many rollouts that failed together (a throttled burst);
        # the cap keeps a late retry from waiting longer than the fault usually lasts.
        state.add_retry(
            errors=errors,
            interval=Duration.seconds(interval_s),
            max_attempts=attempts,
            backoff_rate=2,
            jitter_strategy=sfn.JitterType.FULL,
            max_delay=Duration.seconds(MAX_RETRY_DELAY_S),
        )

    def _invoke(
        self,
        cid: str,
        fn: _lambda.IFunction,
        *,
        payload: sfn.TaskInput | None = None,
        transient_retries: int = 3,
        wait_for_token: bool = False,
    ) -> tasks.LambdaInvoke:
        task = tasks.LambdaInvoke(
            self,
            cid,
            lambda_function=fn,
            retry_on_service_exceptions=False,
            payload=payload,
            **(
                {
                    "integration_pattern": sfn.IntegrationPattern.WAIT_FOR_TASK_TOKEN,
                    "task_timeout": sfn.Timeout.duration(self.turn_timeout),
                }
                if wait_for_token
                else {"payload_response_only": True}
            ),
        )
        self._retry(task, LAMBDA_SERVICE_ERRORS, interval_s=2, attempts=6)
        self._retry(task, TRANSIENT_ERRORS, interval_s=2, attempts=transient_retries)
        return task

    def _definition(self, settings: DeploymentSettings, runner: CodeRunner) -> sfn.IChainable:
        record_error = self._invoke(
            "RecordErrorStep",
            self.error_fn,
            transient_retries=5,
            payload=sfn.TaskInput.from_object(
                {
                    "context": sfn.JsonPath.entire_payload,
                    "attempt": sfn.JsonPath.execution_name,
                    "execution": sfn.JsonPath.execution_id,
                }
            ),
        )
        record_error.add_catch(
            sfn.Fail(
                self, "RecordWriteFailed", error="RecordWriteFailed", cause="the error record could not be written"
            ),
            errors=["States.ALL"],
        )

        def guarded(state, name: str):
            # A state whose input is a small reference: the Catch adds the error under $.failed.<state>, so
            # RecordError knows which state failed and gets the reference.
            state.add_catch(record_error, errors=["States.ALL"], result_path=f"$.failed.{name}")
            return state

        def guarded_keeping_only_the_error(state, name: str, **ids: str):
            # A state whose input is not ours to bound: the Catch replaces the input with the error, and a
            # Pass names the state (and adds ``ids`` from the context object) before RecordError.
            failed = sfn.Pass(
                self,
                f"{name.removesuffix('Step')}Failed",
                parameters={**{f"{k}.$": v for k, v in ids.items()}, "failed": {f"{name}.$": "$"}},
            )
            failed.next(record_error)
            state.add_catch(failed, errors=["States.ALL"], result_path="$")
            return state

        # The execution's output: the rollout output a conversation state scored and left the loop with.
        finished = sfn.Pass(
            self, "Finished", parameters={"output.$": "States.StringToJson($.Cause)"}, output_path="$.output"
        )
        # The reference a conversation state left with, for the code runners and Score.
        resume_with_job = sfn.Pass(
            self, "ResumeWithJob", parameters={"ref.$": "States.StringToJson($.Cause)"}, output_path="$.ref"
        )

        start = self._invoke(
            "StartEpisodeStep",
            self.start_fn,
            wait_for_token=True,
            payload=sfn.TaskInput.from_object(
                {
                    "input": sfn.JsonPath.entire_payload,
                    "attempt": sfn.JsonPath.execution_name,
                    "task_token": sfn.JsonPath.task_token,
                }
            ),
        )
        # Converse's input is only the trainer's reply (or {"resume": true}): the ids come from the execution.
        converse = self._invoke(
            "ConverseStep",
            self.converse_fn,
            wait_for_token=True,
            payload=sfn.TaskInput.from_object(
                {
                    "run": sfn.JsonPath.string_at("$$.Execution.Input.run"),
                    "attempt": sfn.JsonPath.execution_name,
                    "task_token": sfn.JsonPath.task_token,
                    "entered": sfn.JsonPath.string_at("$$.State.EnteredTime"),
                    "retry_count": sfn.JsonPath.number_at("$$.State.RetryCount"),
                    "reply": sfn.JsonPath.entire_payload,
                }
            ),
        )
        for state in (start, converse):
            state.add_catch(finished, errors=[FINISHED])
            state.add_catch(resume_with_job, errors=[RUN_CODE])
        # StartEpisode's input is the raw execution input and Converse's a trainer's reply, each up to
        # 256 KiB: their Catches keep only the error. Converse's run is in the execution input (StartEpisode
        # validated it; the episode snapshot has the other ids); StartEpisode's ids are read back by
        # RecordError (the input may lack them, and a Pass cannot catch a missing path).
        guarded_keeping_only_the_error(start, "StartEpisodeStep")
        guarded_keeping_only_the_error(converse, "ConverseStep", run="$$.Execution.Input.run")
        start.next(converse)
        converse.next(converse)

        # Score also runs a Lambda-route job itself (the job inline in the runner's payload, rebuilt from the
        # episode): the runner never reads S3, so there is no state between RouteJob and Score for it.
        score = guarded(self._invoke("ScoreStep", self.score_fn), "ScoreStep")

        run_fargate = tasks.EcsRunTask(
            self,
            "RunCodeFargate",
            integration_pattern=sfn.IntegrationPattern.RUN_JOB,
            cluster=runner.cluster,
            task_definition=runner.task_definition,
            launch_target=tasks.EcsFargateLaunchTarget(platform_version=ecs.FargatePlatformVersion.LATEST),
            assign_public_ip=False,
            subnets=runner.subnets,
            security_groups=[runner.security_group],
            container_overrides=[
                tasks.ContainerOverride(
                    container_definition=runner.container,
                    environment=[
                        tasks.TaskEnvironmentVariable(
                            name="JOB_KEY", value=sfn.JsonPath.string_at("$.execution.job_key")
                        ),
                        tasks.TaskEnvironmentVariable(
                            name="RESULT_KEY", value=sfn.JsonPath.string_at("$.execution.result_key")
                        ),
                    ],
                )
            ],
            task_timeout=sfn.Timeout.duration(Duration.seconds(fargate_step_timeout_s(settings))),
            result_path=sfn.JsonPath.DISCARD,
        )
        # Placement failures (no Fargate capacity, ENI limits) surface as AmazonECS.Unknown (RunTask's Failures: no
        # task started). An ECS error after a task started (a failed status poll) starts a second task of the job as
        # well; it runs nothing, since each task claims its job first (rewardpipe.aws.jobs.claim_job).
        self._retry(run_fargate, ECS_RETRY_ERRORS, interval_s=10, attempts=4)
        guarded(run_fargate, "RunCodeFargate")

        route_job = sfn.Choice(self, "RouteJob")
        unknown = sfn.Pass(
            self,
            "UnknownAction",
            parameters={
                "Error": "UnknownAction",
                "Cause": "the rollout reference has no recognised 'next'",
            },
            result_path="$.failed.RouteJob",
        )
        unknown.next(record_error)
        resume_with_job.next(route_job)
        for value, target in (("run_lambda", score), ("run_fargate", run_fargate), ("score", score)):
            route_job.when(
                sfn.Condition.and_(sfn.Condition.is_present("$.next"), sfn.Condition.string_equals("$.next", value)),
                target,
            )
        route_job.otherwise(unknown)
        run_fargate.next(score)
        return start


def checked_max_turns(max_turns: int) -> int:
    """The stack's turn limit, refused at synth when above the documented per-rollout limit."""
    from rewardpipe.aws.rollout import MAX_TURNS_LIMIT

    if max_turns > MAX_TURNS_LIMIT:
        raise ValueError(
            f"rewardpipe.max_turns: at most {MAX_TURNS_LIMIT} for the rollout workflow "
            f"(docs/aws.md, Limits), got {max_turns}"
        )
    return max_turns


# The execution's own timeout ends it without a record (no Catch sees it; the rollouts-without-record alarm does).
EXECUTION_TIMEOUT_FLOOR_S = 24 * 3600


def execution_timeout_s(settings: DeploymentSettings, turn_timeout_s: int) -> int:
    """The execution's timeout: a day, or longer when the longest path of its states' own timeouts is (a first
    attempt each: StartEpisode and a Converse per turn waiting their turn timeout, the Fargate step, Score and
    RecordError their functions' timeouts). A state's timeout is caught into an error record; the execution's is
    not, so it must never come first: a Fargate step or a Nova turn allowed a day used to be cut off by it."""
    from rewardpipe.aws.rollout import MAX_TURNS_LIMIT

    fns = settings.functions
    longest_path = (
        (MAX_TURNS_LIMIT + 1) * turn_timeout_s
        + fargate_step_timeout_s(settings)
        + fns.code_runner_timeout_s  # Score
        + fns.timeout_s  # RecordError
    )
    return max(EXECUTION_TIMEOUT_FLOOR_S, longest_path)


def fargate_step_timeout_s(settings: DeploymentSettings) -> int:
    """The Fargate step may take the largest job budget a task can declare, plus time to start the task
    and move the job and result through S3, and never less than the configured task timeout."""
    from rewardpipe.models import Task

    largest_job_s = next(m.le for m in Task.model_fields["timeout_s"].metadata if hasattr(m, "le"))
    return int(max(settings.fargate.task_timeout_s, largest_job_s + FARGATE_START_MARGIN_S))
