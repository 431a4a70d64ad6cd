"""Deployment settings, read from the CDK context key ``rewardpipe`` (see cdk.json and docs/aws.md).

Every value has a default, so ``python app.py`` works with no context at all; anything set in cdk.json
or with ``cdk synth -c rewardpipe='{...}'`` is merged over the defaults and validated here, so a typo
fails the synth with a message naming the setting instead of producing a broken stack.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rewardpipe.monitoring.thresholds import AlarmPolicy

CONTEXT_KEY = "rewardpipe"

# Lambda can run for at most 15 minutes. A code-runner Lambda needs some headroom beyond the job's own
# time budget (cold start, S3 transfer, harness start-up), so routing keeps this margin below the
# runner's timeout.
LAMBDA_MAX_TIMEOUT_S = 900
ROUTING_MARGIN_S = 60


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# Settings the error-rate alarm had while it was M of N periods of minutes; it counts checked steps now.
REMOVED_ALARM_SETTINGS = ("datapoints_to_alarm", "evaluation_periods")


class AlarmSettings(AlarmPolicy):
    """The alarm policy (rewardpipe.monitoring.AlarmPolicy: ``zero_variance_fraction``, ``dead_steps``,
    ``error_rate``, ``error_steps``, with their defaults and limits defined there once), which the stack
    hands to both the variance check and the CloudWatch alarms, plus what only the stack uses."""

    # The period of the dashboard's graphs.
    period_minutes: int = Field(default=15, ge=1, le=1440)
    email: str | None = Field(default=None, pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: Any) -> Any:
        removed = [name for name in REMOVED_ALARM_SETTINGS if isinstance(data, dict) and name in data]
        if removed:
            raise ValueError(f"alarms.{' and alarms.'.join(removed)} no longer exist: the error-rate alarm counts "
                             f"checked steps, not periods of minutes; set alarms.error_steps (consecutive steps "
                             f"with an error rate of at least alarms.error_rate) instead")
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
    return (f"{setting} = {memory_mb} MB cannot hold the handler ({HANDLER_HEADROOM_MB} MB) and {workers} sandbox(es) "
            f"of at least {MIN_SANDBOX_MB} MB: use at least {needed} MB (a sample needing more than its host has "
            f"would get the whole host OOM-killed instead of failing alone)")


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
    # StartEpisode and Converse mostly wait (on the policy endpoint, the trainer's queue, the code runner):
    # billed GB-seconds of waiting, so they get what their work needs, not a vCPU (docs/aws.md "Cost").
    conversation_memory_mb: int = Field(default=256, ge=128, le=10240)
    monitor_timeout_s: int = Field(default=300, ge=3, le=LAMBDA_MAX_TIMEOUT_S)

    @model_validator(mode="after")
    def _room_for_the_sandbox(self) -> "LambdaSettings":
        for problem in (too_small_for_sandbox("lambda.code_runner_memory_mb", self.code_runner_memory_mb, 1),
                        too_small_for_sandbox("lambda.single_turn_memory_mb", self.single_turn_memory_mb,
                                              MIN_SINGLE_TURN_WORKERS)):
            if problem:
                raise ValueError(problem)
        return self


class FargateSettings(_Strict):
    cpu: int = Field(default=1024)
    memory_mib: int = Field(default=2048)
    # The task's whole lifetime; the job's own budget is enforced inside by the sandbox.
    task_timeout_s: int = Field(default=3600, ge=60, le=86400)

    @model_validator(mode="after")
    def _valid_size(self) -> "FargateSettings":
        if self.cpu not in (256, 512, 1024, 2048, 4096, 8192, 16384):
            raise ValueError(f"fargate.cpu must be a Fargate CPU size (256..16384), got {self.cpu}")
        problem = too_small_for_sandbox("fargate.memory_mib", self.memory_mib, 1)
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
    def _order(self) -> "StorageSettings":
        if self.expire_runs_days <= self.transition_to_ia_days:
            raise ValueError("storage.expire_runs_days must be greater than storage.transition_to_ia_days")
        return self


class PolicySettings(_Strict):
    """Defaults for the OpenAI-compatible policy Lambda; an execution's input can override both."""

    base_url: str = ""
    model: str = ""
    # Name of a Secrets Manager secret holding the API key (optional; read access is granted to it only).
    api_key_secret_name: str = ""


class DeploymentSettings(_Strict):
    stack_name: str = "RewardPipe"
    reward_name: str = "ask_before_coding"
    reward_weights: dict[str, float] = Field(default_factory=dict)
    single_turn_reward: str = "gsm8k"
    single_turn_weights: dict[str, float] = Field(default_factory=dict)
    # What a Nova sample that could not be scored gets as its reward (Nova cannot drop a sample):
    # "neutral" = mean of the same prompt's other samples in the batch (GRPO advantage ~0), "zero",
    # or "fail_batch" (the invocation fails). See rewardpipe.single_turn.apply_error_reward.
    error_reward: str = Field(default="neutral", pattern="^(neutral|zero|fail_batch)$")
    group_size: int = Field(default=8, ge=2, le=1024)
    max_turns: int = Field(default=6, ge=1, le=50)
    # Jobs whose time budget is above this many seconds run on Fargate instead of the runner Lambda.
    execution_routing_threshold_s: int = Field(default=600, ge=1)
    monitor_schedule_minutes: int = Field(default=15, ge=1, le=1440)
    simulator: str = Field(default="rule_based", pattern="^(rule_based|openai)$")
    alarms: AlarmSettings = Field(default_factory=AlarmSettings)
    functions: LambdaSettings = Field(default_factory=LambdaSettings, alias="lambda")
    fargate: FargateSettings = Field(default_factory=FargateSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    policy: PolicySettings = Field(default_factory=PolicySettings)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _cross_checks(self) -> "DeploymentSettings":
        limit = self.functions.code_runner_timeout_s - ROUTING_MARGIN_S
        if self.execution_routing_threshold_s > limit:
            raise ValueError(
                f"execution_routing_threshold_s={self.execution_routing_threshold_s} leaves no headroom in the "
                f"code-runner Lambda (timeout {self.functions.code_runner_timeout_s}s); use at most {limit}"
            )
        if self.execution_routing_threshold_s >= self.fargate.task_timeout_s:
            raise ValueError("fargate.task_timeout_s must exceed execution_routing_threshold_s")
        return self

    # -- derived -----------------------------------------------------------------------------------

    def reward_components(self) -> list[str]:
        """Component names of the configured rollout reward (validates name and weights too)."""
        from rewardpipe.rewards import get_reward

        return list(get_reward(self.reward_name, self.reward_weights or None).component_names)

    def single_turn_components(self) -> list[str]:
        from rewardpipe.rewards import get_reward

        return list(get_reward(self.single_turn_reward, self.single_turn_weights or None).component_names)


class SettingsError(ValueError):
    """The ``rewardpipe`` context is invalid; the message names every offending setting."""


def load_settings(raw: Any) -> DeploymentSettings:
    """Validate the context value (a dict, or a JSON string when passed with ``-c``)."""
    if raw is None:
        raw = {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise SettingsError(f"context '{CONTEXT_KEY}' is not valid JSON: {exc.msg}") from None
    if not isinstance(raw, dict):
        raise SettingsError(f"context '{CONTEXT_KEY}' must be an object, got {type(raw).__name__}")
    try:
        settings = DeploymentSettings.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or CONTEXT_KEY
            problems.append(f"{CONTEXT_KEY}.{where}: {err['msg']}")
        raise SettingsError("invalid deployment settings:\n  " + "\n  ".join(problems)) from None
    try:
        settings.reward_components()
        settings.single_turn_components()
    except ValueError as exc:
        raise SettingsError(f"invalid deployment settings: {exc}") from None
    return settings
