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


def _reference(env: Mapping[str, str], name: str) -> str:
    """An explicit ``package.module:ATTR`` reference in variable ``name`` ("" when unset). A deployment names
    installed code: a file reference or a bare short name (an entry-point lookup at cold start) is refused."""
    raw = (env.get(name) or "").strip()
    if not raw:
        return ""
    from rewardpipe.references import is_file_reference

    module, _, attr = raw.partition(":")
    if (
        not module
        or not attr
        or is_file_reference(raw)
        or not all(part.isidentifier() for part in (*module.split("."), *attr.split(".")))
    ):
        raise ConfigurationError(
            f"environment variable {name} must be an import reference package.module:ATTR "
            f"(the stack resolves names at synth), got {raw!r}"
        )
    return raw


COMPONENT_ROLES = ("outcome", "shaping", "penalty")


def _components(env: Mapping[str, str], name: str) -> dict[str, dict[str, Any]]:
    """REWARD_COMPONENTS: ``[{"name", "range": [lo, hi], "role", "weight"}, ...]`` as ``{name: {range, role,
    weight}}`` ({} when unset); anything else is a ConfigurationError naming the variable and the entry."""
    import math

    raw = env.get(name)
    if raw in (None, ""):
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        raise ConfigurationError(
            f"environment variable {name} must be a JSON list of components, got {raw[:200]!r}"
        ) from None
    if not isinstance(value, list):
        raise ConfigurationError(
            f"environment variable {name} must be a JSON list of components, got {type(value).__name__}"
        )
    out: dict[str, dict[str, Any]] = {}
    for i, item in enumerate(value):
        where = f"environment variable {name}[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
            raise ConfigurationError(f"{where} must be an object with a non-empty 'name'")
        bounds = item.get("range")
        if (
            not isinstance(bounds, list)
            or len(bounds) != 2
            or not all(isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b) for b in bounds)
            or bounds[0] > bounds[1]
        ):
            raise ConfigurationError(
                f"{where} ('{item['name']}'): 'range' must be [lo, hi], two finite numbers with "
                f"lo <= hi, got {bounds!r}"
            )
        if item.get("role") not in COMPONENT_ROLES:
            raise ConfigurationError(
                f"{where} ('{item['name']}'): 'role' must be one of {', '.join(COMPONENT_ROLES)}, "
                f"got {item.get('role')!r}"
            )
        weight = item.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
            raise ConfigurationError(f"{where} ('{item['name']}'): 'weight' must be a finite number, got {weight!r}")
        if item["name"] in out:
            raise ConfigurationError(f"{where}: component '{item['name']}' is listed twice")
        out[item["name"]] = {
            "range": (float(bounds[0]), float(bounds[1])),
            "role": item["role"],
            "weight": float(weight),
        }
    return out


@dataclass(frozen=True)
class JudgeSettings:
    """The LLM judge's endpoint (issue 20 item 5): Bedrock (JUDGE_BEDROCK_MODEL_ID, called with Converse), or an
    OpenAI-compatible endpoint (JUDGE_BASE_URL, JUDGE_MODEL, JUDGE_API_KEY_SECRET: a Secrets Manager name or
    ARN, read like the policy's). Unset: no judge is configured."""

    bedrock_model_id: str = ""
    base_url: str = ""
    model: str = ""
    api_key_secret: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> JudgeSettings:
        judge = cls(
            bedrock_model_id=(env.get("JUDGE_BEDROCK_MODEL_ID") or "").strip(),
            base_url=(env.get("JUDGE_BASE_URL") or "").strip(),
            model=(env.get("JUDGE_MODEL") or "").strip(),
            api_key_secret=(env.get("JUDGE_API_KEY_SECRET") or "").strip(),
        )
        if judge.bedrock_model_id and (judge.base_url or judge.model):
            raise ConfigurationError(
                "environment variables JUDGE_BEDROCK_MODEL_ID and JUDGE_BASE_URL/JUDGE_MODEL "
                "both set: configure one judge endpoint"
            )
        if bool(judge.base_url) != bool(judge.model):
            missing = "JUDGE_MODEL" if judge.base_url else "JUDGE_BASE_URL"
            raise ConfigurationError(
                f"environment variable {missing} is not set (an OpenAI-compatible judge needs "
                f"JUDGE_BASE_URL and JUDGE_MODEL)"
            )
        if judge.api_key_secret and not judge.base_url:
            raise ConfigurationError("environment variable JUDGE_API_KEY_SECRET is set without JUDGE_BASE_URL")
        return judge

    @property
    def configured(self) -> bool:
        return bool(self.bedrock_model_id or self.base_url)


def environment_tag(env: Any) -> str:
    return f"{env.name}@{env.version}"


def load_environment(reference: str) -> Any:
    """The environment an ENVIRONMENT_REF names (imported by reference, checked); the built-in
    ask_before_coding for ""."""
    from rewardpipe.environment import check_environment
    from rewardpipe.references import BUILTIN_ENVIRONMENTS, ReferenceProblem, load_import_reference

    try:
        value = load_import_reference(reference or BUILTIN_ENVIRONMENTS["ask_before_coding"])
        return check_environment(value)
    except (ReferenceProblem, TypeError, ValueError) as exc:
        raise ConfigurationError(f"environment variable ENVIRONMENT_REF ({reference!r}): {exc}") from None


def load_reward(reference: str, weights: Mapping[str, float] | None, variable: str) -> Any:
    """The Reward ``reference`` names in ``variable``: a ``module:attr`` reference (a Reward, or a factory
    called with no arguments that returns one), imported by reference only; or a built-in name (REWARD_NAME's
    older form). REWARD_WEIGHTS overrides weights by component name."""
    from rewardpipe.components import Component
    from rewardpipe.environment import Environment
    from rewardpipe.references import BUILTIN_REWARDS, ReferenceProblem, load_import_reference
    from rewardpipe.rewards.base import Reward

    where = f"environment variable {variable} ({reference!r})"
    if ":" not in reference and reference not in BUILTIN_REWARDS:
        raise ConfigurationError(
            f"{where}: not a built-in reward ({', '.join(sorted(BUILTIN_REWARDS))}) nor a reference package.module:ATTR"
        )
    try:
        value = load_import_reference(BUILTIN_REWARDS.get(reference, reference))
    except ReferenceProblem as exc:
        raise ConfigurationError(f"{where}: {exc}") from None
    if callable(value) and not isinstance(value, (Reward, Component, type)) and not isinstance(value, Environment):
        try:
            value = value()
        except Exception as exc:  # noqa: BLE001 - the user's factory failed
            raise ConfigurationError(f"{where}: calling the factory failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(value, Reward):
        raise ConfigurationError(
            f"{where}: is {type(value).__name__}, not a rewardpipe.Reward (or a factory returning one)"
        )
    try:
        return value.with_weights(dict(weights) if weights else None)
    except ValueError as exc:
        raise ConfigurationError(f"{where} with REWARD_WEIGHTS: {exc}") from None


def _named_reward(name: str, weights: Mapping[str, float] | None) -> Any:
    """REWARD_NAME, the older setting, as it always was read: any form rewardpipe.rewards.get_reward accepts (a
    built-in name or an import reference costs no entry-point scan)."""
    from rewardpipe.rewards import get_reward

    try:
        return get_reward(name, dict(weights) if weights else None)
    except ValueError as exc:
        raise ConfigurationError(f"REWARD_NAME/REWARD_WEIGHTS: {exc}") from None


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
    # REWARD_NAME: the older way to name the reward (a built-in name, or since issue 20 any reference); the
    # fallback when REWARD_REF is absent. "" (unset): the configured environment's own reward.
    reward_name: str = ""
    reward_weights: dict[str, float] = field(default_factory=dict)
    # MAX_TURNS: the deployment's turn limit; None (unset) leaves each environment its own ``max_turns``.
    max_turns: int | None = None
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
    # The user's code (issue 20), as the stack resolved it at synth: explicit ``module:attr`` references,
    # imported with rewardpipe.references.load_import_reference only (never an entry-point scan at cold start).
    environment_ref: str = ""  # ENVIRONMENT_REF; "" is the built-in ask_before_coding
    environment_version: str = ""  # ENVIRONMENT_VERSION: the version seen at synth (informational)
    reward_ref: str = ""  # REWARD_REF; "" falls back to REWARD_NAME, then the environment's reward
    single_turn_reward_ref: str = ""  # SINGLE_TURN_REWARD_REF; "" falls back to REWARD_NAME, then gsm8k
    # REWARD_COMPONENTS: the configured reward's components as data ({name: {"range", "role", "weight"}}) for the
    # variance check, which judges with them without importing user code.
    reward_components: dict[str, dict[str, Any]] = field(default_factory=dict)
    judge: JudgeSettings = field(default_factory=lambda: JudgeSettings())

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        return cls(
            bucket=env.get("BUCKET", ""),
            reward_name=(env.get("REWARD_NAME") or "").strip(),
            reward_weights=_weights(env, "REWARD_WEIGHTS"),
            max_turns=_int(env, "MAX_TURNS", 0) or None,
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
            environment_ref=_reference(env, "ENVIRONMENT_REF"),
            environment_version=(env.get("ENVIRONMENT_VERSION") or "").strip(),
            reward_ref=_reference(env, "REWARD_REF"),
            single_turn_reward_ref=_reference(env, "SINGLE_TURN_REWARD_REF"),
            reward_components=_components(env, "REWARD_COMPONENTS"),
            judge=JudgeSettings.from_env(env),
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

    def judge_client(self, client: Any = None) -> Any:
        """The LLM judge's chat client (complete/complete_message, like rewardpipe.openai_client.ChatClient):
        Bedrock Converse for JUDGE_BEDROCK_MODEL_ID (``client``: a bedrock-runtime client to use), else the
        OpenAI-compatible JUDGE_BASE_URL/JUDGE_MODEL with the key in JUDGE_API_KEY_SECRET, read from Secrets
        Manager like the policy's, with the policy's timeout and retries. None when no judge is configured."""
        judge = self.judge
        if judge.bedrock_model_id:
            from rewardpipe.bedrock import BedrockChatClient

            return BedrockChatClient(judge.bedrock_model_id, client=client, read_timeout_s=self.policy_http_timeout_s)
        if judge.base_url:
            return self.chat_client(judge.base_url, judge.model, secret_string(judge.api_key_secret) or None)
        return None

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
    def environment(self) -> Any:
        """The configured environment (ENVIRONMENT_REF, imported; the built-in ask_before_coding without it)."""
        return load_environment(self.environment_ref)

    @cached_property
    def reward(self) -> Any:
        """The multi-turn reward: REWARD_REF, else REWARD_NAME (a built-in name or a reference), else the
        configured environment's own reward; REWARD_WEIGHTS overrides weights by component name."""
        if self.reward_ref:
            return load_reward(self.reward_ref, self.reward_weights, "REWARD_REF")
        if self.reward_name:
            return _named_reward(self.reward_name, self.reward_weights)
        try:
            return self.environment.reward.with_weights(self.reward_weights or None)
        except ValueError as exc:
            raise ConfigurationError(f"environment variable REWARD_WEIGHTS: {exc}") from None

    @cached_property
    def single_turn_reward(self) -> Any:
        """The single-turn reward Lambda's reward: SINGLE_TURN_REWARD_REF, else REWARD_NAME, else gsm8k."""
        if self.single_turn_reward_ref:
            return load_reward(self.single_turn_reward_ref, self.reward_weights, "SINGLE_TURN_REWARD_REF")
        return _named_reward(self.reward_name or "gsm8k", self.reward_weights)

    @property
    def environment_tag(self) -> str:
        """``name@version`` of the configured environment: what episode snapshots carry."""
        return environment_tag(self.environment)


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


def secret_string(secret_id: str) -> str:
    """The SecretString of a Secrets Manager secret (name or ARN); "" for no secret. How every API key a
    deployment holds is read (the policy's POLICY_API_KEY_SECRET, the judge's JUDGE_API_KEY_SECRET)."""
    if not secret_id:
        return ""
    return aws_client("secretsmanager").get_secret_value(SecretId=secret_id)["SecretString"]


def reset_clients() -> None:
    """Forget cached clients (tests start a fresh moto backend per test)."""
    _CLIENTS.clear()


def open_bucket_store(settings: Settings) -> Any:
    from rewardpipe.store import S3Store

    return S3Store(settings.require_bucket(), client=aws_client("s3"))
