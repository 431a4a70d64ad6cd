"""A chat client for Amazon Bedrock's Converse API behind the local client's interface.

:class:`BedrockChatClient` answers ``complete(messages, **params) -> str`` and ``complete_message(messages,
**params) -> {"content", "tool_calls"}`` like :class:`rewardpipe.openai_client.ChatClient`, so a judge (or an
environment's ``ctx.chat``) written against the local client runs unchanged on AWS with the deployment's
``JUDGE_BEDROCK_MODEL_ID`` (rewardpipe.aws.settings.JudgeSettings).

* Messages in the OpenAI shape (``{"role", "content"}``) become Converse's: ``system`` messages go to the
  ``system`` blocks, ``user``/``assistant`` turns to ``messages`` (consecutive turns of one role merged:
  Converse wants them alternating, starting with the user), a ``tool`` message is passed as user text. A
  message with no text but whitespace is left out: Converse refuses a blank text block ("is blank"). A
  conversation that ends with an assistant turn gets a ``(continue)`` user turn after it, so it is answered as an
  OpenAI-compatible endpoint answers it (Anthropic's models would take it for a prefill, which their current
  models refuse, and the older ones refuse when it ends with whitespace).
* ``temperature``, ``max_tokens``, ``top_p`` and ``stop`` map onto ``inferenceConfig``; other parameters are
  refused (ValueError), so a typo is not silently ignored, and so are values Converse refuses (a ``temperature``
  over 1; for an Anthropic model, a stop sequence of whitespace only such as ``"\n"``).
* Throttling and service faults (``ThrottlingException``, ``ServiceUnavailableException``,
  ``InternalServerException``, ``ModelNotReadyException``, any HTTP 5xx, connection errors and timeouts) are
  retried ``max_retries`` times with full-jitter exponential backoff capped at ``max_backoff_s``; botocore's own
  retries are switched off so this is the only retry loop. Anything else, or a fault that outlives the retries,
  raises :class:`rewardpipe.openai_client.EndpointError`, the same error the local client raises: a component
  that calls the judge then raises, which rewardpipe records as an error with the component ``None``, never 0.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rewardpipe.openai_client import MAX_BACKOFF_S, ContentFiltered, EndpointError

#: Converse's stop reasons of a reply a content filter or guardrail withheld.
_FILTERED_STOPS = frozenset({"content_filtered", "guardrail_intervened"})

RETRYABLE_CODES = frozenset(
    {
        "ThrottlingException",
        "Throttling",
        "TooManyRequestsException",
        "ServiceUnavailableException",
        "ServiceUnavailable",
        "InternalServerException",
        "InternalFailure",
        "ModelNotReadyException",
    }
)
RETRYABLE_NETWORK = ("EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ConnectionClosedError")
#: The user's turn Converse needs where the conversation has none: before a first assistant turn, after a last one.
CONTINUE = "(continue)"
_PARAMS = {"temperature": "temperature", "max_tokens": "maxTokens", "top_p": "topP", "stop": "stopSequences"}


def converse_request(model_id: str, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> dict[str, Any]:
    """The Converse request for OpenAI-shaped ``messages`` and sampling ``params``."""
    unknown = sorted(set(params) - set(_PARAMS))
    if unknown:
        raise ValueError(f"Bedrock Converse takes {', '.join(sorted(_PARAMS))}; got {', '.join(unknown)}")
    system: list[dict[str, str]] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        role, text = str(message.get("role", "")), _text(message.get("content"))
        if role == "system":
            if text.strip():
                system.append({"text": text})
            continue
        role = "assistant" if role == "assistant" else "user"
        if not text.strip():
            continue  # Converse refuses a blank text block, whitespace-only included (a model's " " or "\n")
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].append({"text": text})
        else:
            turns.append({"role": role, "content": [{"text": text}]})
    if not turns or turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": [{"text": CONTINUE}]})
    if turns[-1]["role"] == "assistant":
        # A conversation that ends with a model's turn (a judge or an environment passing the rollout as it is) is
        # answered after that turn, as an OpenAI-compatible endpoint answers it. Sent as it is, Anthropic's models
        # take it for a prefill to continue: their current ones refuse it ("This model does not support assistant
        # message prefill"), the older ones refuse one ending with whitespace, as a model's answer often does.
        turns.append({"role": "user", "content": [{"text": CONTINUE}]})
    request: dict[str, Any] = {"modelId": model_id, "messages": turns}
    if system:
        request["system"] = system
    config = {_PARAMS[name]: value for name, value in params.items() if value is not None}
    if isinstance(config.get("stopSequences"), str):
        config["stopSequences"] = [config["stopSequences"]]
    problem = inference_config_problem(config, model_id)
    if problem:
        raise ValueError(f"Bedrock Converse refuses this request: {problem}")
    if config:
        request["inferenceConfig"] = config
    return request


# Converse's InferenceConfiguration: temperature and topP "Valid Range: Minimum value of 0. Maximum value of 1",
# maxTokens "Minimum value of 1", stopSequences "Maximum number of 2500 items", each of "Minimum length of 1".
# https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_InferenceConfiguration.html
STOP_SEQUENCES_LIMIT = 2500


def inference_config_problem(config: Mapping[str, Any], model_id: str = "") -> str | None:
    """Why Bedrock would refuse ``config`` (Converse's names) for ``model_id``, or None. botocore checks only the
    types and minimums, so an OpenAI-style ``temperature`` of 1.5 (OpenAI takes up to 2) went out on every call,
    each refused with a ValidationException: every judged sample an error record, and the reason in none of them.
    Anthropic's models also refuse a stop sequence of whitespace only (``stop="\n"``, which OpenAI takes)."""
    for name in ("temperature", "topP"):
        value = config.get(name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1
        ):
            return f"{name} must be a number from 0 to 1, got {value!r}"
    tokens = config.get("maxTokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
        return f"maxTokens (max_tokens) must be a whole number of at least 1, got {tokens!r}"
    stops = config.get("stopSequences")
    if stops is not None:
        if not isinstance(stops, (list, tuple)) or len(stops) > STOP_SEQUENCES_LIMIT:
            return f"stopSequences (stop) must be a list of at most {STOP_SEQUENCES_LIMIT} texts"
        if not all(isinstance(stop, str) and stop for stop in stops):
            return "every stop sequence must be non-empty text"
        if _is_anthropic(model_id) and any(not stop.strip() for stop in stops):
            return (
                f"{model_id} (an Anthropic model) refuses a stop sequence of whitespace only "
                f"(stop {[stop for stop in stops if not stop.strip()]!r}): each must contain non-whitespace"
            )
    return None


def _is_anthropic(model_id: str) -> bool:
    """A Bedrock model id (or inference profile id, ``us.anthropic.claude-...``) of Anthropic's."""
    return "anthropic." in model_id


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return "" if content is None else str(content)


def reply_text(response: Mapping[str, Any], model_id: str) -> str:
    try:
        blocks = response["output"]["message"]["content"]
    except (KeyError, TypeError):
        raise EndpointError(f"Bedrock {model_id} answered without output.message.content") from None
    texts = [b["text"] for b in blocks if isinstance(b, dict) and isinstance(b.get("text"), str)]
    if not texts:
        stop = response.get("stopReason")
        problem = f"Bedrock {model_id} answered with no text (stopReason {stop!r})"
        if stop in _FILTERED_STOPS:  # what was sent decided it (which side, Converse does not say)
            raise ContentFiltered(problem, on_prompt=True)
        raise EndpointError(problem)
    return "".join(texts)


def is_retryable(exc: BaseException) -> bool:
    if type(exc).__name__ in RETRYABLE_NETWORK:
        return True
    response = getattr(exc, "response", None)
    if not isinstance(response, Mapping):
        return False
    code = str(response.get("Error", {}).get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code in RETRYABLE_CODES or (isinstance(status, int) and status >= 500)


class BedrockChatClient:
    """Bedrock Converse with the local chat client's interface (see the module docstring)."""

    def __init__(
        self,
        model_id: str,
        *,
        client: Any = None,
        region: str | None = None,
        max_retries: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 20.0,
        read_timeout_s: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        if not model_id:
            raise ValueError("model_id is required for a Bedrock judge (JUDGE_BEDROCK_MODEL_ID)")
        self.model_id = model_id
        self.max_retries, self.backoff_s = max_retries, backoff_s
        self.max_backoff_s = min(max_backoff_s, MAX_BACKOFF_S)
        self._sleep, self._jitter = sleep, jitter
        if client is None:
            import boto3
            from botocore.config import Config

            # One retry loop (ours, jittered): botocore's own retries off.
            client = boto3.client(
                "bedrock-runtime",
                region_name=region,
                config=Config(read_timeout=read_timeout_s, retries={"mode": "standard", "total_max_attempts": 1}),
            )
        self.client = client

    def backoff(self, attempt: int) -> float:
        """Full jitter: a uniform wait up to the capped exponential step (attempt 1 is the first retry)."""
        return self._jitter() * min(self.max_backoff_s, self.backoff_s * 2.0 ** min(attempt - 1, 16))

    def _converse(self, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> Mapping[str, Any]:
        request = converse_request(self.model_id, messages, params)
        last = "no attempt made"
        for attempt in range(self.max_retries + 1):
            if attempt:
                self._sleep(self.backoff(attempt))
            try:
                return self.client.converse(**request)
            except Exception as exc:  # classified: retried, or one EndpointError
                last = f"{type(exc).__name__}: {str(exc)[:300]}"
                if not is_retryable(exc):
                    raise EndpointError(f"Bedrock {self.model_id}: {last}") from exc
        raise EndpointError(f"Bedrock {self.model_id} failed after {self.max_retries + 1} attempts: {last}")

    def complete(self, messages: Sequence[Mapping[str, Any]], **params: Any) -> str:
        return reply_text(self._converse(messages, params), self.model_id)

    def complete_message(self, messages: Sequence[Mapping[str, Any]], **params: Any) -> dict[str, Any]:
        return {"content": self.complete(messages, **params), "tool_calls": None}

    def close(self) -> None:
        pass
