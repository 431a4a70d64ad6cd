"""The one shape every state-machine step handler has, so each functions/<name>/handler.py is one line.

A step handler: Powertools Logger (Lambda context and rollout ids in every line) and Tracer, the
event validated with the step's pydantic model (a bad event raises ValidationError naming the
field, which the state machine's Catch turns into an error record), then ONE call into
rewardpipe.aws with the function's settings, whose JSON-ready result is returned.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from pydantic import BaseModel

from rewardpipe.aws.settings import Settings

_ID_FIELDS = ("run", "step", "group", "rollout", "run_id")
# AWS error codes that mean "try again" (throttling, service-side faults, timeouts).
TRANSIENT_CODES = frozenset({
    "SlowDown", "Throttling", "ThrottlingException", "TooManyRequestsException", "RequestLimitExceeded",
    "RequestTimeout", "RequestTimeoutException", "InternalError", "InternalFailure", "ServiceUnavailable",
    "ServiceUnavailableException", "500", "502", "503", "504",
})


class TransientError(RuntimeError):
    """Raised in place of a retryable fault; the state machine retries this error name with backoff."""


def is_transient(exc: BaseException) -> bool:
    """True for throttling, 5xx and network faults anywhere in the exception's cause chain."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        name = type(current).__name__
        code = getattr(current, "response", {}).get("Error", {}).get("Code") if hasattr(current, "response") else None
        if code in TRANSIENT_CODES:
            return True
        if name in ("EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ConnectionClosedError",
                    "EndpointError", "ConnectError", "ReadTimeout", "ConnectTimeout", "RemoteProtocolError"):
            return True
        current = current.__cause__ or current.__context__
    return False


def retry_transient(handler: Callable[..., Any]) -> Callable[..., Any]:
    """Re-raise retryable faults as :class:`TransientError` (the name the state machine retries)."""

    @functools.wraps(handler)
    def wrapper(event: Any, context: Any) -> Any:
        try:
            return handler(event, context)
        except TransientError:
            raise
        except Exception as exc:
            if is_transient(exc):
                raise TransientError(f"{type(exc).__name__}: {exc}") from exc
            raise

    return wrapper


def step_handler(model: type[BaseModel] | None, step: Callable[[Any, Settings], dict[str, Any]]) -> Callable[..., Any]:
    """Build ``lambda_handler`` for ``step(event, settings)``; ``model=None`` passes the raw event."""
    from aws_lambda_powertools import Logger, Tracer

    logger = Logger()
    tracer = Tracer()
    settings = Settings.from_env()

    @logger.inject_lambda_context
    @tracer.capture_lambda_handler
    @retry_transient
    def lambda_handler(raw_event: Any, context: Any) -> dict[str, Any]:
        event = model.model_validate(raw_event) if model is not None else raw_event
        ids = {name: getattr(event, name) for name in _ID_FIELDS if getattr(event, name, None) is not None}
        if ids:
            logger.append_keys(**ids)
        out = step(event, settings)
        logger.info("step done", extra={"result": {k: out[k] for k in ("status", "record_key", "execution") if k in out}})
        return out

    lambda_handler.logger = logger  # type: ignore[attr-defined]
    return lambda_handler
