"""Deployment settings, read from the CDK context key ``rewardpipe`` (see cdk.json and docs/aws.md).

Every value has a default, so ``python app.py`` works with no context at all; anything set in cdk.json
or with ``cdk synth -c rewardpipe='{...}'`` is merged over the defaults and validated here, so a typo
fails the synth with a message naming the setting instead of producing a broken stack.

Types are strict (pydantic strict mode): ``true`` is not an integer, ``"8"`` is not a number, a float is
not an integer, NaN and infinities are not numbers. Every problem is reported as ``<setting> = <value>:
<what is allowed>`` (:func:`load_context`), never as a traceback, whatever the value: malformed JSON,
duplicate keys, values nested deeper than any setting is, or a stack name CloudFormation would refuse.
"""

from __future__ import annotations

import json
import math
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rewardpipe.aws.rollout import MAX_TURNS_LIMIT
from rewardpipe.aws.settings import POLICY_HTTP_RETRIES, POLICY_HTTP_TIMEOUT_S, llm_turn_reserve_s
from rewardpipe.monitoring.thresholds import AlarmPolicy

if TYPE_CHECKING:  # pragma: no cover
    from stacks.user_code import UserCode

CONTEXT_KEY = "rewardpipe"
# Settings are at most three objects deep (rewardpipe.alarms.email); a deeper value is refused before it is
# validated or handed to the CDK (jsii serialises context recursively and would overflow the stack).
MAX_SETTING_DEPTH = 8
# Any other context value handed to the CDK app is refused beyond this depth, for the same reason.
MAX_CONTEXT_DEPTH = 64
# CloudFormation's stack name rule (CreateStack StackName: "[a-zA-Z][-a-zA-Z0-9]*", at most 128 characters);
# the names derived from it are checked against their own limits after the synth (stacks/names.py).
STACK_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9-]*$"
STACK_NAME_MAX = 128

# Lambda can run for at most 15 minutes. A code-runner Lambda needs some headroom beyond the job's own
# time budget (cold start, S3 transfer, harness start-up), so routing keeps this margin below the
# runner's timeout.
LAMBDA_MAX_TIMEOUT_S = 900
ROUTING_MARGIN_S = 60


STRICT = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class _Strict(BaseModel):
    model_config = STRICT


# Settings the error-rate alarm had while it was M of N periods of minutes; it counts checked steps now.
REMOVED_ALARM_SETTINGS = ("datapoints_to_alarm", "evaluation_periods")


# RFC 5321: a path is at most 256 octets with its angle brackets (an address, 254), a local part at most 64.
EMAIL_MAX = 254
EMAIL_LOCAL_MAX = 64


class AlarmSettings(AlarmPolicy):
    """The alarm policy (rewardpipe.monitoring.AlarmPolicy: ``zero_variance_fraction``, ``dead_steps``,
    ``error_rate``, ``error_steps``, with their defaults and limits defined there once), which the stack
    hands to both the variance check and the CloudWatch alarms, plus what only the stack uses."""

    model_config = STRICT

    # The period of the dashboard's graphs.
    period_minutes: int = Field(default=15, ge=1, le=1440)
    email: str | None = Field(default=None, pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")

    @field_validator("email")
    @classmethod
    def _deliverable(cls, email: str | None) -> str | None:
        """An address a mail system takes (RFC 5321's limits, printable): SNS would refuse another at deploy, or
        subscribe it and its confirmation never arrive, leaving the alarms notifying nobody."""
        if email is None:
            return email
        local = email.rpartition("@")[0]
        if len(email) > EMAIL_MAX or len(local) > EMAIL_LOCAL_MAX or not email.isprintable():
            raise ValueError(
                f"an e-mail address has at most {EMAIL_MAX} characters, at most {EMAIL_LOCAL_MAX} before the @, and "
                f"no control characters (this one has {len(email)}, {len(local)} before the @)"
            )
        return email

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: Any) -> Any:
        """The removed `alarms.evaluation_periods` and `alarms.datapoints_to_alarm` are refused (set
        `alarms.error_steps`)."""
        removed = [name for name in REMOVED_ALARM_SETTINGS if isinstance(data, dict) and name in data]
        if removed:
            raise ValueError(
                f"alarms.{' and alarms.'.join(removed)} no longer exist: the error-rate alarm counts "
                f"checked steps, not periods of minutes; set alarms.error_steps (consecutive steps "
                f"with an error rate of at least alarms.error_rate) instead"
            )
        return data


# A host that runs model code holds the handler (interpreter, layer, scorer, fork servers) beside one
# sandbox per worker, each capped at REWARDPIPE_SANDBOX_MEMORY_MB (constructs.common.sandbox_memory_mb).
HANDLER_HEADROOM_MB = 384
MIN_SANDBOX_MB = 128
# The single-turn Lambda runs at least two samples at once (one slow sample must not hold up the batch).
MIN_SINGLE_TURN_WORKERS = 2


def too_small_for_sandbox(setting: str, memory_mb: int, workers: int) -> str | None:
    """Why ``memory_mb`` cannot hold the handler and ``workers`` sandboxes of the smallest cap, or None."""
    needed = HANDLER_HEADROOM_MB + workers * MIN_SANDBOX_MB
    if memory_mb >= needed:
        return None
    return (
        f"{setting} = {memory_mb} MB cannot hold the handler ({HANDLER_HEADROOM_MB} MB) and {workers} sandbox(es) "
        f"of at least {MIN_SANDBOX_MB} MB: use at least {needed} MB (a sample needing more than its host has "
        f"would get the whole host OOM-killed instead of failing alone)"
    )


# Lambda keeps this much of an account's concurrency unreserved, whatever is reserved ("Lambda function scaling":
# reserving more fails with "decreases account's UnreservedConcurrentExecution below its minimum value of [100]").
UNRESERVED_CONCURRENCY_MIN = 100
# An account's concurrent executions quota in a Region unless raised (Service Quotas L-B99A9384).
DEFAULT_ACCOUNT_CONCURRENCY = 1000


class ReservedConcurrency(_Strict):
    """Reserved concurrency per function (``lambda.reserved_concurrency``): what the function may always run and
    the most it may run. None (every default) reserves nothing: any reservation fails stack creation in an account
    whose unreserved concurrency would drop below its minimum, and new accounts often have a quota of 10.

    ``variance_check`` keeps the check from being starved (throttled) while the scorers take the account's
    concurrency; ``code_runner``, ``score`` and ``single_turn_reward`` cap a runaway scorer (one past its cap is
    throttled: the caller retries, and the function's throttles alarm fires)."""

    # Always available to the variance check, so scorers taking the account's concurrency cannot starve it.
    variance_check: int | None = Field(default=None, ge=1)
    # The most code-runner invocations at once (and always available to it); past it a job is retried.
    code_runner: int | None = Field(default=None, ge=1)
    # The most Score invocations at once (and always available to it); past it the state machine retries.
    score: int | None = Field(default=None, ge=1)
    # The most single-turn reward invocations at once (and always available to it); Nova reads a throttle as a
    # failed batch, so a cap must hold the trainer's concurrency.
    single_turn_reward: int | None = Field(default=None, ge=1)
    # The account's quota in the Region deployed to, against which the reservations are checked.
    account_concurrency: int = Field(default=DEFAULT_ACCOUNT_CONCURRENCY, ge=UNRESERVED_CONCURRENCY_MIN)

    def reserved(self) -> dict[str, int]:
        """The functions given a reservation, by setting name."""
        return {name: value for name, value in self.model_dump().items() if name in FUNCTION_RESERVATIONS and value}

    @model_validator(mode="after")
    def _leaves_the_unreserved_minimum(self) -> ReservedConcurrency:
        """The reservations together leave at least 100 of `lambda.reserved_concurrency.account_concurrency`
        unreserved, as Lambda requires (more fails creating the functions, halfway through the deployment)."""
        total = sum(self.reserved().values())
        room = self.account_concurrency - UNRESERVED_CONCURRENCY_MIN
        if total > room:
            raise ValueError(
                f"the reservations total {total}, but an account_concurrency of {self.account_concurrency} leaves "
                f"only {room} to reserve (Lambda keeps {UNRESERVED_CONCURRENCY_MIN} unreserved and CloudFormation "
                f"would fail creating the functions): lower them, or set account_concurrency to the account's raised "
                f"quota"
            )
        return self


FUNCTION_RESERVATIONS = ("variance_check", "code_runner", "score", "single_turn_reward")


class LambdaSettings(_Strict):
    # Every function runs on this architecture. arm64 (Graviton) is 20 % cheaper per GB-second; every
    # dependency in the layer has a manylinux2014 aarch64 wheel and the sandbox's seccomp filter has its
    # aarch64 syscall table (docs/aws.md "Architecture"). x86_64 remains available.
    architecture: Literal["arm64", "x86_64"] = "arm64"
    memory_mb: int = Field(default=512, ge=128, le=10240)
    timeout_s: int = Field(default=60, ge=3, le=LAMBDA_MAX_TIMEOUT_S)
    # 1769 MB is one full vCPU; model code is CPU-bound, so the runner gets at least that.
    code_runner_memory_mb: int = Field(default=1769, ge=128, le=10240)
    code_runner_timeout_s: int = Field(default=LAMBDA_MAX_TIMEOUT_S, ge=30, le=LAMBDA_MAX_TIMEOUT_S)
    single_turn_memory_mb: int = Field(default=1769, ge=128, le=10240)
    # Nova Forge waits up to 15 minutes for a reward batch; the handler stops starting samples in time
    # to answer every one of them before this runs out.
    single_turn_timeout_s: int = Field(default=LAMBDA_MAX_TIMEOUT_S, ge=30, le=LAMBDA_MAX_TIMEOUT_S)
    policy_timeout_s: int = Field(default=300, ge=3, le=LAMBDA_MAX_TIMEOUT_S)
    # StartEpisode and Converse: they call the policy endpoint, so their timeout must hold at least one LLM
    # turn (policy.http_timeout_s and http_retries; checked in DeploymentSettings).
    # StartEpisode and Converse mostly wait (on the policy endpoint, the trainer's queue, the code runner):
    # billed GB-seconds of waiting, so they get what their work needs, not a vCPU (docs/aws.md "Cost").
    conversation_memory_mb: int = Field(default=256, ge=128, le=10240)
    monitor_timeout_s: int = Field(default=300, ge=3, le=LAMBDA_MAX_TIMEOUT_S)
    reserved_concurrency: ReservedConcurrency = Field(default_factory=ReservedConcurrency)

    @model_validator(mode="after")
    def _room_for_the_sandbox(self) -> LambdaSettings:
        """`lambda.code_runner_memory_mb` and `lambda.single_turn_memory_mb` leave the sandbox room for its jobs
        (one job in the code runner, the single-turn reward's workers in its function)."""
        for problem in (
            too_small_for_sandbox("lambda.code_runner_memory_mb", self.code_runner_memory_mb, 1),
            too_small_for_sandbox("lambda.single_turn_memory_mb", self.single_turn_memory_mb, MIN_SINGLE_TURN_WORKERS),
        ):
            if problem:
                raise ValueError(problem)
        return self


# The task CPU units Fargate offers (ECS task definition "cpu"); memory is checked against the sandbox below.
FARGATE_CPU_UNITS = (256, 512, 1024, 2048, 4096, 8192, 16384)
# The task memory sizes (MiB) each of them takes. "For task definitions that specify FARGATE ...
# you must use one of the values in the following table" (Amazon ECS Developer Guide, "Troubleshoot Amazon ECS task
# definition invalid CPU or memory errors"); any other pair synthesizes, and RegisterTaskDefinition refuses it at
# deploy time ("ClientException: Invalid 'cpu' setting for task"), halfway through the deployment.
FARGATE_MEMORY_MIB: dict[int, tuple[int, ...]] = {
    256: (512, 1024, 2048),
    512: tuple(range(1024, 4096 + 1, 1024)),
    1024: tuple(range(2048, 8192 + 1, 1024)),
    2048: tuple(range(4096, 16384 + 1, 1024)),
    4096: tuple(range(8192, 30720 + 1, 1024)),
    8192: tuple(range(16384, 61440 + 1, 4096)),  # 16 to 60 GB in 4 GB steps
    16384: tuple(range(32768, 122880 + 1, 8192)),  # 32 to 120 GB in 8 GB steps
}


def fargate_size_problem(cpu: int, memory_mib: int) -> str | None:
    """Why Fargate refuses a task of ``cpu`` units and ``memory_mib``, or None."""
    allowed = FARGATE_MEMORY_MIB[cpu]
    if memory_mib in allowed:
        return None
    step = allowed[1] - allowed[0]
    sizes = ", ".join(map(str, allowed)) if len(allowed) <= 4 else f"{allowed[0]} to {allowed[-1]} in steps of {step}"
    return (
        f"fargate.memory_mib = {memory_mib} is not a Fargate task size with fargate.cpu = {cpu}: it takes "
        f"{sizes} MiB (ECS refuses any other pair when the stack is deployed)"
    )


class FargateSettings(_Strict):
    # CPU units of the long-job runner task: a Fargate size (256, 512, 1024, 2048, 4096, 8192 or 16384); its
    # memory must be one Fargate pairs with it (below).
    cpu: int = Field(default=1024, json_schema_extra={"enum": list(FARGATE_CPU_UNITS)})
    memory_mib: int = Field(default=2048)
    # The task's whole lifetime; the job's own budget is enforced inside by the sandbox.
    task_timeout_s: int = Field(default=3600, ge=60, le=86400)

    @field_validator("cpu")
    @classmethod
    def _cpu_size(cls, cpu: int) -> int:
        # An int checked against the sizes (a Literal of ints would take 1024.0 and True-like values in pydantic).
        if cpu not in FARGATE_CPU_UNITS:
            raise ValueError(f"must be one of {', '.join(map(str, FARGATE_CPU_UNITS))} (Fargate's task CPU units)")
        return cpu

    @model_validator(mode="after")
    def _valid_size(self) -> FargateSettings:
        """`fargate.cpu` and `fargate.memory_mib` are a task size Fargate offers (ECS refuses any other pair when the
        stack is deployed); the memory sizes, in MiB, of each CPU size: 256: 512, 1024, 2048; 512: 1024, 2048, 3072,
        4096; 1024: 2048 to 8192 in steps of 1024; 2048: 4096 to 16384 in steps of 1024; 4096: 8192 to 30720 in steps
        of 1024; 8192: 16384 to 61440 in steps of 4096; 16384: 32768 to 122880 in steps of 8192. `fargate.memory_mib`
        also leaves the sandbox room for a job."""
        problem = too_small_for_sandbox("fargate.memory_mib", self.memory_mib, 1) or fargate_size_problem(
            self.cpu, self.memory_mib
        )
        if problem:
            raise ValueError(problem)
        return self


class StorageSettings(_Strict):
    # Records of old runs move to Infrequent Access, then expire; old object versions expire sooner.
    transition_to_ia_days: int = Field(default=30, ge=30)
    expire_runs_days: int = Field(default=365, ge=1)
    noncurrent_version_days: int = Field(default=30, ge=1)
    job_objects_days: int = Field(default=7, ge=1)

    @model_validator(mode="after")
    def _order(self) -> StorageSettings:
        """`storage.expire_runs_days` is greater than `storage.transition_to_ia_days`."""
        if self.expire_runs_days <= self.transition_to_ia_days:
            raise ValueError("storage.expire_runs_days must be greater than storage.transition_to_ia_days")
        return self


class PolicySettings(_Strict):
    """Defaults for the OpenAI-compatible policy Lambda; an execution's input can override both."""

    base_url: str = ""
    model: str = ""
    # Name of a Secrets Manager secret holding the API key (optional; read access is granted to it only).
    api_key_secret_name: str = ""
    # Each request to the endpoint may wait this long (a non-streaming completion arrives whole, so this
    # bounds the generation: 16,384 tokens at 40 tokens/s take about 410 s), and a failed one is retried
    # this many times. Both size the time a conversation Lambda keeps for an LLM turn
    # (rewardpipe.aws.settings.llm_turn_reserve_s), which must fit in lambda.policy_timeout_s.
    http_timeout_s: int = Field(default=int(POLICY_HTTP_TIMEOUT_S), ge=1, le=LAMBDA_MAX_TIMEOUT_S)
    http_retries: int = Field(
        default=POLICY_HTTP_RETRIES,
        ge=0,
        le=5,
        description="How many times a failed request to the policy endpoint is retried.",
    )

    @property
    def llm_turn_reserve_s(self) -> float:
        return llm_turn_reserve_s(self.http_timeout_s, self.http_retries)


class SettingsError(ValueError):
    """A deployment setting is invalid; the message names every offending setting, its value and what is allowed."""


# A reference (package.module:ATTR) or short name; also bounds what reaches a function's environment.
REFERENCE_MAX = 512
REWARD_ALIAS = "reward_name"
MAX_PACKAGES = 64
# Bedrock's geographic and global cross-region inference profiles prefix a model id with one of these; the
# judge's grant is one foundation model's ARN, which such a profile is not (it routes to several regions).
INFERENCE_PROFILE_PREFIXES = ("us", "us-gov", "eu", "apac", "jp", "au", "ca", "global")
BEDROCK_MODEL_ID_PATTERN = r"^[a-z0-9-]+\.[A-Za-z0-9._:-]+$"


class JudgeSettings(_Strict):
    """The LLM judge reward components call: a Bedrock model (Converse), or an OpenAI-compatible endpoint."""

    # A Bedrock foundation-model id (``anthropic.claude-3-5-haiku-20241022-v1:0``): the functions that score may
    # call bedrock:InvokeModel on that model's ARN and nothing else.
    bedrock_model_id: str = Field(default="", max_length=2048)
    # An OpenAI-compatible judge endpoint (with judge.model and, optionally, judge.api_key_secret).
    base_url: str = Field(default="", max_length=2048)
    model: str = Field(default="", max_length=256)
    api_key_secret: str = Field(default="", max_length=2048)

    @field_validator("bedrock_model_id")
    @classmethod
    def _model_id(cls, value: str) -> str:
        import re

        if not value:
            return value
        if value.startswith("arn:"):
            raise ValueError(
                "give the model id (e.g. anthropic.claude-3-5-haiku-20241022-v1:0), not an ARN: the "
                "stack builds the foundation-model ARN for the region it is deployed to"
            )
        if not re.fullmatch(BEDROCK_MODEL_ID_PATTERN, value):
            raise ValueError("must be a Bedrock model id, provider.model (e.g. amazon.nova-lite-v1:0)")
        if value.split(".", 1)[0] in INFERENCE_PROFILE_PREFIXES:
            raise ValueError(
                f"'{value.split('.', 1)[0]}.' makes it a cross-region inference profile, which routes to "
                f"several regions' models; give the foundation model id ({value.split('.', 1)[1]}), "
                f"which the judge's permission is scoped to"
            )
        return value

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if value and not value.startswith(("https://", "http://")):
            raise ValueError("must be an http(s) URL of an OpenAI-compatible endpoint")
        return value

    @model_validator(mode="after")
    def _one_judge(self) -> JudgeSettings:
        """One judge: `judge.bedrock_model_id`, or `judge.base_url` with `judge.model` (and optionally
        `judge.api_key_secret`), not both."""
        if self.bedrock_model_id and (self.base_url or self.model or self.api_key_secret):
            raise ValueError("judge.bedrock_model_id and judge.base_url/model/api_key_secret name two judges: keep one")
        if bool(self.base_url) != bool(self.model):
            raise ValueError("judge.base_url and judge.model go together (an OpenAI-compatible judge needs both)")
        if self.api_key_secret and not self.base_url:
            raise ValueError(
                "judge.api_key_secret is the key of an OpenAI-compatible judge: set judge.base_url and judge.model too"
            )
        return self

    @property
    def kind(self) -> str | None:
        return "bedrock" if self.bedrock_model_id else "openai" if self.base_url else None


# What a conversation step does besides its LLM turns (load the episode, run the rule-based turns, write
# the snapshot): the policy Lambda's timeout must exceed one LLM turn's reserve by at least this.
CONVERSATION_HEADROOM_S = 30


class DeploymentSettings(_Strict):
    # Also the prefix of the names the stack gives resources (queues, functions, alarms, the dashboard...):
    # each of those has its own limit, checked against the synthesized template (stacks/names.py).
    stack_name: str = Field(default="RewardPipe", min_length=1, max_length=STACK_NAME_MAX, pattern=STACK_NAME_PATTERN)
    # The environment of the rollout workflow and the Nova bridge: a built-in name, a short name an installed
    # distribution registers, or an import reference package.module:ATTR (resolved at synth to an explicit
    # reference, stacks/user_code.py).
    environment: str = Field(default="ask_before_coding", min_length=1, max_length=REFERENCE_MAX)
    # The rollout reward, in the same forms; null: the environment's own reward. One reading 'reference' (gsm8k) is
    # refused: an episode has no reference answer (it belongs in single_turn_reward). reward_name is its old name.
    reward: str | None = Field(default=None, min_length=1, max_length=REFERENCE_MAX)
    reward_weights: dict[str, float] = Field(default_factory=dict)
    single_turn_reward: str = Field(default="gsm8k", min_length=1, max_length=REFERENCE_MAX)
    single_turn_weights: dict[str, float] = Field(default_factory=dict)
    # What the user layer installs (stacks/user_layer.py): project directories, wheel files, pinned requirements
    # name==version, or directories of pre-built wheels pip may take dependencies from; relative paths are taken
    # from the directory of cdk.json.
    packages: list[str] = Field(default_factory=list, max_length=MAX_PACKAGES)
    judge: JudgeSettings = Field(default_factory=JudgeSettings)
    # What a Nova sample that could not be scored gets as its reward (Nova cannot drop a sample):
    # "neutral" = mean of the same prompt's other samples in the batch (GRPO advantage ~0), "zero",
    # or "fail_batch" (the invocation fails). See rewardpipe.single_turn.apply_error_reward.
    error_reward: Literal["neutral", "zero", "fail_batch"] = "neutral"
    group_size: int = Field(default=8, ge=2, le=1024)
    # At most the rollout workflow's documented limit (rewardpipe.aws.rollout.MAX_TURNS_LIMIT, docs/aws.md "Limits").
    # Unset: each rollout ends at its environment's own max_turns (capped at that limit), as it does locally.
    max_turns: int | None = Field(default=None, ge=1, le=MAX_TURNS_LIMIT)
    # Jobs whose time budget is above this many seconds run on Fargate instead of the runner Lambda.
    execution_routing_threshold_s: int = Field(default=600, ge=1)
    monitor_schedule_minutes: int = Field(default=15, ge=1, le=1440)
    simulator: Literal["rule_based", "openai"] = "rule_based"
    alarms: AlarmSettings = Field(default_factory=AlarmSettings)
    functions: LambdaSettings = Field(default_factory=LambdaSettings, alias="lambda")
    fargate: FargateSettings = Field(default_factory=FargateSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    policy: PolicySettings = Field(default_factory=PolicySettings)

    model_config = ConfigDict(**STRICT, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _reward_name_alias(cls, data: Any) -> Any:
        """`reward_name` is the old name of `reward`: either is accepted, not both."""
        if isinstance(data, dict) and REWARD_ALIAS in data:
            if "reward" in data:
                raise ValueError(
                    f"reward and {REWARD_ALIAS} are the same setting ({REWARD_ALIAS} is its old name): keep only reward"
                )
            data = {("reward" if key == REWARD_ALIAS else key): value for key, value in data.items()}
        return data

    @field_validator("packages")
    @classmethod
    def _packages(cls, packages: list[str]) -> list[str]:
        from stacks.user_layer import check_package_entry

        for index, entry in enumerate(packages):
            problem = check_package_entry(entry)
            if problem:
                raise ValueError(f"packages[{index}] = {show_value(entry)}: {problem}")
        return packages

    @property
    def reward_name(self) -> str | None:
        """The old name of :attr:`reward` (None: the environment's own reward)."""
        return self.reward

    @model_validator(mode="after")
    def _cross_checks(self) -> DeploymentSettings:
        """`execution_routing_threshold_s` leaves the code-runner Lambda headroom (at most
        `lambda.code_runner_timeout_s` less 60 s) and is below `fargate.task_timeout_s`; `lambda.policy_timeout_s`
        holds one LLM turn, as long as `policy.http_timeout_s` and `policy.http_retries` let it take, and the rest of
        the step."""
        limit = self.functions.code_runner_timeout_s - ROUTING_MARGIN_S
        if self.execution_routing_threshold_s > limit:
            raise ValueError(
                f"execution_routing_threshold_s={self.execution_routing_threshold_s} leaves no headroom in the "
                f"code-runner Lambda (timeout {self.functions.code_runner_timeout_s}s); use at most {limit}"
            )
        if self.execution_routing_threshold_s >= self.fargate.task_timeout_s:
            raise ValueError("fargate.task_timeout_s must exceed execution_routing_threshold_s")
        reserve = self.policy.llm_turn_reserve_s
        needed = math.ceil(reserve) + CONVERSATION_HEADROOM_S
        if self.functions.policy_timeout_s < needed:
            raise ValueError(
                f"lambda.policy_timeout_s = {self.functions.policy_timeout_s} cannot hold one LLM turn: with "
                f"policy.http_timeout_s = {self.policy.http_timeout_s} and policy.http_retries = "
                f"{self.policy.http_retries} a turn may take {reserve:g} s, plus {CONVERSATION_HEADROOM_S} s for the "
                f"rest of the step; set lambda.policy_timeout_s to at least {needed} (at most "
                f"{LAMBDA_MAX_TIMEOUT_S}) or lower policy.http_timeout_s or policy.http_retries"
            )
        return self

    # -- derived -----------------------------------------------------------------------------------

    @cached_property
    def user_code(self) -> UserCode:
        """The environment and rewards resolved to explicit references, with their metadata
        (stacks/user_code.py); raises :class:`SettingsError` naming the setting that cannot be resolved."""
        from stacks.user_code import resolve_user_code

        return resolve_user_code(self)

    def reward_components(self) -> list[str]:
        """Component names of the configured rollout reward (validates name and weights too)."""
        return [c["name"] for c in self.user_code.reward_components]

    def single_turn_components(self) -> list[str]:
        return list(self.user_code.single_turn_components)


# -- reading and explaining settings ---------------------------------------------------------------

_JSON_TYPE = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    type(None): "null",
    list: "array",
    tuple: "array",
    dict: "object",
}
_SHOWN_CHARS = 80


def show_value(value: Any) -> str:
    """``value`` as JSON (ASCII only, so no control or bidi character reaches a terminal), cut to a short
    length, with its JSON type: ``"8" (string)``, ``true (boolean)``."""
    if isinstance(value, str) and len(value) > _SHOWN_CHARS:
        value = value[:_SHOWN_CHARS] + "..."
    try:
        text = json.dumps(value, ensure_ascii=True, default=repr, allow_nan=True)
    except (ValueError, TypeError, RecursionError):
        text = ascii(value)
    if len(text) > _SHOWN_CHARS:
        text = text[:_SHOWN_CHARS] + "..."
    return f"{text} ({_JSON_TYPE.get(type(value), type(value).__name__)})"


def parse_context_json(key: str, text: str) -> Any:
    """A context value given as a JSON string (``cdk synth -c key='{...}'``), strictly: no NaN or Infinity
    (not JSON), no key given twice (the last would silently win), no nesting Python cannot parse."""

    def no_constant(name: str) -> Any:
        raise SettingsError(f"context '{key}': {name} is not a JSON number (use a finite number)")

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in pairs:
            if name in out:
                raise SettingsError(f"context '{key}': the key {json.dumps(name)} is given twice (keep one)")
            out[name] = value
        return out

    try:
        return json.loads(text, parse_constant=no_constant, object_pairs_hook=unique)
    except json.JSONDecodeError as exc:
        raise SettingsError(
            f"context '{key}' is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno}); "
            f"give a JSON object, e.g. -c {key}='{{\"group_size\": 16}}'"
        ) from None
    except RecursionError:
        raise SettingsError(
            f"context '{key}' is nested too deeply to parse (settings are at most {MAX_SETTING_DEPTH} levels deep)"
        ) from None


def check_values(key: str, value: Any, max_depth: int) -> None:
    """Refuse a value nested deeper than ``max_depth`` and non-finite numbers, naming where (iteratively: the
    check itself never recurses)."""
    pending: list[tuple[Any, tuple[str, ...]]] = [(value, ())]
    while pending:
        item, path = pending.pop()
        where = ".".join((key, *path))
        if len(path) > max_depth:
            shown = ".".join((key, *path[:4])) + (".…" if len(path) > 4 else "")
            raise SettingsError(
                f"{shown}: nested more than {max_depth} levels deep; no setting is (see docs/aws.md, Settings)"
            )
        if isinstance(item, float) and not math.isfinite(item):
            raise SettingsError(f"{where} = {show_value(item)}: must be a finite number")
        if isinstance(item, dict):
            pending.extend((v, (*path, str(k))) for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            pending.extend((v, (*path, str(i))) for i, v in enumerate(item))


def _resolve(node: dict, defs: dict) -> dict:
    while "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[-1]]
    return node


def _schema_at(schema: dict, loc: tuple) -> dict | None:
    """The JSON schema of the setting at ``loc`` (None if the path leaves the schema)."""
    defs = schema.get("$defs", {})
    node = _resolve(schema, defs)
    for part in loc:
        options = [_resolve(n, defs) for n in node.get("anyOf", [node])]
        for option in options:
            if str(part) in option.get("properties", {}):
                node = _resolve(option["properties"][str(part)], defs)
                break
            if isinstance(option.get("additionalProperties"), dict):
                node = _resolve(option["additionalProperties"], defs)
                break
            if isinstance(option.get("items"), dict):
                node = _resolve(option["items"], defs)
                break
        else:
            return None
    return node


def _bounds(node: dict) -> str:
    low = (
        ("at least", node["minimum"])
        if "minimum" in node
        else (("greater than", node["exclusiveMinimum"]) if "exclusiveMinimum" in node else None)
    )
    high = (
        ("at most", node["maximum"])
        if "maximum" in node
        else (("less than", node["exclusiveMaximum"]) if "exclusiveMaximum" in node else None)
    )
    if low and high and low[0] == "at least" and high[0] == "at most":
        return f" from {low[1]} to {high[1]}"
    parts = [f"{bound[0]} {bound[1]}" for bound in (low, high) if bound]
    return (" " + " and ".join(parts)) if parts else ""


def describe_allowed(schema: dict, node: dict | None) -> str:
    """What a setting accepts, in words, from its JSON schema."""
    if node is None:
        return "no such setting"
    defs = schema.get("$defs", {})
    node = _resolve(node, defs)
    if "anyOf" in node:
        return " or ".join(describe_allowed(schema, option) for option in node["anyOf"])
    if "enum" in node:
        return "one of " + ", ".join(json.dumps(v) for v in node["enum"])
    if "const" in node:
        return json.dumps(node["const"])
    kind = node.get("type")
    if kind == "integer":
        return "an integer (not a string, boolean or decimal)" + _bounds(node)
    if kind == "number":
        return "a number (not a string or boolean)" + _bounds(node)
    if kind == "boolean":
        return "true or false"
    if kind == "null":
        return "null"
    if kind == "string":
        text = "a string"
        if "pattern" in node:
            text += f" matching {node['pattern']}"
        if "minLength" in node or "maxLength" in node:
            text += f" of {node.get('minLength', 0)} to {node.get('maxLength', 'any number of')} characters"
        return text
    if kind == "object":
        if "properties" in node:
            return "an object with the keys " + ", ".join(sorted(node["properties"]))
        values = node.get("additionalProperties")
        return "an object" + (
            f" whose values are {describe_allowed(schema, values)}" if isinstance(values, dict) else ""
        )
    if kind == "array":
        return "a list"
    return "a valid value"


def validation_problems(key: str, model: type[BaseModel], exc: ValidationError) -> list[str]:
    """One line per error: ``<key>.<setting> = <value>: <what is allowed> (<pydantic's reason>)``."""
    schema = model.model_json_schema(by_alias=True)
    problems = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        name = ".".join((key, *map(str, loc)))
        reason = str(err["msg"])
        if err["type"] == "value_error":  # a validator's own sentence; a model validator's names the settings
            value = err.get("input")
            shown = "" if isinstance(value, dict) else f" = {show_value(value)}"
            problems.append(f"{name}{shown}: {reason.removeprefix('Value error, ')}")
        elif err["type"] == "extra_forbidden":
            parent = _schema_at(schema, loc[:-1])
            known = sorted((parent or {}).get("properties", {}))
            problems.append(
                f"{name} = {show_value(err.get('input'))}: not a setting; the settings here are "
                f"{', '.join(known) or 'none'}"
            )
        else:
            allowed = describe_allowed(schema, _schema_at(schema, loc))
            problems.append(f"{name} = {show_value(err.get('input'))}: must be {allowed} ({reason})")
    return problems


def load_context(key: str, raw: Any, model: type[BaseModel]) -> Any:
    """Validate one context value (an object, or a JSON string as ``-c`` passes it) against ``model`` in
    strict mode; every problem becomes one line of a :class:`SettingsError`, never a traceback."""
    if raw is None:
        raw = {}
    if isinstance(raw, str):
        raw = parse_context_json(key, raw)
    if not isinstance(raw, dict):
        raise SettingsError(f"context '{key}' = {show_value(raw)}: must be a JSON object of settings")
    check_values(key, raw, MAX_SETTING_DEPTH)
    try:
        return model.model_validate(raw, strict=True)
    except ValidationError as exc:
        raise SettingsError(
            f"invalid deployment settings in '{key}':\n  " + "\n  ".join(validation_problems(key, model, exc))
        ) from None


def load_settings(raw: Any) -> DeploymentSettings:
    """Validate the ``rewardpipe`` context value (a dict, or a JSON string when passed with ``-c``), and resolve
    what it names (the environment and the rewards must import here, as they will on AWS)."""
    settings = load_context(CONTEXT_KEY, raw, DeploymentSettings)
    settings.user_code  # noqa: B018 - resolved now, so a bad reference fails before the CDK sees anything
    return settings
