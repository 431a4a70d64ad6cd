"""Run-time settings of a deployed function, read from its environment (the stack sets them)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any


class ConfigurationError(RuntimeError):
    """A function's environment is incomplete or invalid; the message names the variable."""


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigurationError(f"environment variable {name} must be an integer, got {raw!r}") from None


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        return float(raw)
    except ValueError:
        raise ConfigurationError(f"environment variable {name} must be a number, got {raw!r}") from None


def _json_map(env: Mapping[str, str], name: str, *, of: str, mapping: str, valid: Any) -> dict[str, Any]:
    """The JSON object in variable ``name`` (``{}`` when unset) whose values all pass ``valid``."""
    raw = env.get(name) or "{}"
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        raise ConfigurationError(f"environment variable {name} must be a JSON object of {of}, got {raw!r}") from None
    if not isinstance(value, dict) or not all(valid(v) for v in value.values()):
        raise ConfigurationError(f"environment variable {name} must map {mapping}, got {raw!r}")
    return {str(k): v for k, v in value.items()}


def _weights(env: Mapping[str, str], name: str) -> dict[str, float]:
    weights = _json_map(
        env, name, of="weights", mapping="component names to numbers", valid=lambda v: isinstance(v, (int, float))
    )
    return {k: float(v) for k, v in weights.items()}


def _channels(env: Mapping[str, str], name: str) -> dict[str, str]:
    return _json_map(
        env,
        name,
        of="queue URLs",
        mapping="channel names to queue URLs",
        valid=lambda v: isinstance(v, str) and bool(v),
    )


# The policy endpoint's HTTP client (rewardpipe.openai_client.ChatClient) as a deployment configures it:
# each attempt may wait ``POLICY_HTTP_TIMEOUT_S`` (httpx's connect/read/write timeout; a non-streaming
# completion arrives whole, so the read timeout bounds the generation), failed attempts are retried
# ``POLICY_HTTP_RETRIES`` times after this back-off. The stack sets both (stacks/config.py, policy.*).
POLICY_HTTP_TIMEOUT_S = 60.0
POLICY_HTTP_RETRIES = 2
POLICY_BACKOFF_S = 0.5
# What a conversation step needs beyond the LLM call itself: write its snapshot and answer the state machine.
TURN_WRAP_UP_S = 5.0


def llm_turn_reserve_s(http_timeout_s: float, http_retries: int) -> float:
    """The longest an LLM turn can take: every attempt timing out, the back-off between them, and the
    wrap-up. A conversation Lambda with less time left pauses instead of starting the turn (a turn cut
    off by the Lambda's own timeout would fail the rollout), so the stack checks at synth that the
    conversation functions' timeout leaves room for one (stacks/config.py)."""
    from rewardpipe.openai_client import MAX_BACKOFF_S

    backoff = sum(
        min(POLICY_BACKOFF_S * 2.0 ** min(attempt - 1, 16), MAX_BACKOFF_S) for attempt in range(1, http_retries + 1)
    )
    return (http_retries + 1) * http_timeout_s + backoff + TURN_WRAP_UP_S


@dataclass(frozen=True)
class Settings:
    bucket: str = ""
    reward_name: str = "ask_before_coding"
    reward_weights: dict[str, float] = field(default_factory=dict)
    max_turns: int = 6
    routing_threshold_s: float = 600.0
    simulator: str = "rule_based"
    policy_base_url: str = ""
    policy_model: str = ""
    policy_api_key_secret: str = ""
    policy_http_timeout_s: float = POLICY_HTTP_TIMEOUT_S
    policy_http_retries: int = POLICY_HTTP_RETRIES
    group_size: int = 8
    # variance check: the alarm policy's variables as set (parsed on first use: see alarm_policy)
    alarm_env: dict[str, str] = field(default_factory=dict)
    alarm_topic_arn: str = ""
    # rollout workflow: the trainer's turn queue, and the code-runner Lambda a conversation state may invoke
    # variance check: a run whose monitor state was written within this many minutes counts as active
    active_run_minutes: int = 60
    turn_queue_url: str = ""
    runner_function: str = ""
    # Named turn queues besides the trainers' (TURN_CHANNELS, a JSON object of name -> queue URL): a callback
    # rollout started with policy.channel "nova" asks the Nova bridge's queue, never the trainers'.
    turn_channels: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        return cls(
            bucket=env.get("BUCKET", ""),
            reward_name=env.get("REWARD_NAME") or "ask_before_coding",
            reward_weights=_weights(env, "REWARD_WEIGHTS"),
            max_turns=_int(env, "MAX_TURNS", 6),
            routing_threshold_s=_float(env, "ROUTING_THRESHOLD_S", 600.0),
            simulator=env.get("SIMULATOR") or "rule_based",
            policy_base_url=env.get("POLICY_BASE_URL", ""),
            policy_model=env.get("POLICY_MODEL", ""),
            policy_api_key_secret=env.get("POLICY_API_KEY_SECRET", ""),
            policy_http_timeout_s=_float(env, "POLICY_HTTP_TIMEOUT_S", POLICY_HTTP_TIMEOUT_S),
            policy_http_retries=_int(env, "POLICY_HTTP_RETRIES", POLICY_HTTP_RETRIES),
            group_size=_int(env, "GROUP_SIZE", 8),
            alarm_env={v: env[v] for v in ALARM_POLICY_ENV.values() if env.get(v)},
            alarm_topic_arn=env.get("ALARM_TOPIC_ARN", ""),
            active_run_minutes=_int(env, "ACTIVE_RUN_MINUTES", 60),
            turn_queue_url=env.get("TURN_QUEUE_URL", ""),
            runner_function=env.get("RUNNER_FUNCTION", ""),
            turn_channels=_channels(env, "TURN_CHANNELS"),
        )

    @property
    def llm_turn_reserve_s(self) -> float:
        return llm_turn_reserve_s(self.policy_http_timeout_s, self.policy_http_retries)

    def chat_client(self, base_url: str, model: str, api_key: str | None) -> Any:
        """The policy endpoint's client with the deployment's timeout and retries (the reserve's inputs)."""
        from rewardpipe.openai_client import ChatClient

        return ChatClient(
            base_url,
            model,
            api_key=api_key,
            timeout_s=self.policy_http_timeout_s,
            max_retries=self.policy_http_retries,
            backoff_s=POLICY_BACKOFF_S,
        )

    def require_bucket(self) -> str:
        if not self.bucket:
            raise ConfigurationError("environment variable BUCKET (the records bucket) is not set")
        return self.bucket

    @cached_property
    def alarm_policy(self) -> Any:
        """The deployment's alarm policy (rewardpipe.monitoring.AlarmPolicy): the same fields set the
        CloudWatch alarms, so the variance check and the alarms cannot disagree."""
        return alarm_policy_from_env(self.alarm_env)

    @cached_property
    def reward(self) -> Any:
        from rewardpipe.rewards import get_reward

        try:
            return get_reward(self.reward_name, self.reward_weights or None)
        except ValueError as exc:
            raise ConfigurationError(f"REWARD_NAME/REWARD_WEIGHTS: {exc}") from None


# The variance check's environment variable for each field of the alarm policy
# (rewardpipe.monitoring.AlarmPolicy); the stack sets them all with alarm_policy_env.
ALARM_POLICY_ENV = {
    "zero_variance_fraction": "ZERO_VARIANCE_FRACTION",
    "dead_steps": "DEAD_STEPS",
    "error_rate": "ERROR_RATE_THRESHOLD",
    "error_steps": "ERROR_STEPS",
}


def alarm_policy_env(policy: Any) -> dict[str, str]:
    """The environment that gives the variance check ``policy`` (an AlarmPolicy, or the stack's alarms)."""
    return {variable: str(getattr(policy, field_name)) for field_name, variable in ALARM_POLICY_ENV.items()}


def alarm_policy_from_env(env: Mapping[str, str]) -> Any:
    """The alarm policy in ``env``; a variable left unset takes the policy's own default (the stack's)."""
    from pydantic import ValidationError

    from rewardpipe.monitoring.thresholds import AlarmPolicy

    values = {field_name: env[variable] for field_name, variable in ALARM_POLICY_ENV.items() if env.get(variable)}
    try:
        return AlarmPolicy.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        variable = ALARM_POLICY_ENV.get(str(first["loc"][0]), str(first["loc"][0])) if first["loc"] else "?"
        raise ConfigurationError(f"environment variable {variable}: {first['msg']}") from None


_CLIENTS: dict[str, Any] = {}


def aws_client(service: str, *, read_timeout: int | None = None, max_attempts: int | None = None) -> Any:
    """One boto3 client per service (and client configuration) per process; warm invocations reuse it."""
    key = f"{service}:{read_timeout}:{max_attempts}" if read_timeout or max_attempts else service
    client = _CLIENTS.get(key)
    if client is None:
        import boto3

        config = None
        if read_timeout or max_attempts:
            from botocore.config import Config

            config = Config(
                read_timeout=read_timeout or 60, retries={"mode": "standard", "total_max_attempts": max_attempts or 3}
            )
        client = _CLIENTS[key] = boto3.client(service, config=config)
    return client


def reset_clients() -> None:
    """Forget cached clients (tests start a fresh moto backend per test)."""
    _CLIENTS.clear()


def open_bucket_store(settings: Settings) -> Any:
    from rewardpipe.store import S3Store

    return S3Store(settings.require_bucket(), client=aws_client("s3"))
