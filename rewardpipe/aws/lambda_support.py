"""The one shape every state-machine step handler has, so each functions/<name>/handler.py is one line.

A step handler: Powertools Logger (Lambda context and rollout ids in every line) and Tracer, the
event validated with the step's pydantic model (a bad event raises ValidationError naming the
field, which the state machine's Catch turns into an error record), then ONE call into
rewardpipe.aws with the function's settings, whose JSON-ready result is returned.
"""

from __future__ import annotations

import contextvars
import functools
import os
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from rewardpipe.aws.settings import Settings

_ID_FIELDS = ("run", "step", "group", "rollout", "run_id", "attempt")
_LOGGED = ("status", "record_key", "next", "version", "execution")
# AWS error codes that mean "try again" (throttling, service-side faults, timeouts).
TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "InternalFailure",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "500",
        "502",
        "503",
        "504",
        # Lambda Invoke (the code runner, invoked from the conversation states and Score): the service's own
        # faults, each documented as "try again": ServiceException (500); and, while Lambda sets up the VPC
        # connection of a function in a VPC (the code runner is one, and goes Inactive when idle),
        # ResourceNotReadyException, ENINotReadyException, EC2ThrottledException, EC2UnexpectedException (502).
        "ServiceException",
        "ResourceNotReadyException",
        "ENINotReadyException",
        "EC2ThrottledException",
        "EC2UnexpectedException",
    }
)


class TransientError(RuntimeError):
    """Raised in place of a retryable fault; the state machine retries this error name with backoff."""


def is_transient(exc: BaseException) -> bool:
    """True for throttling, 5xx and network faults anywhere in the exception's cause chain."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        name = type(current).__name__
        response = getattr(current, "response", None)  # None on a requests-style ReadTimeoutError
        code = (response.get("Error") or {}).get("Code") if isinstance(response, dict) else None
        if code in TRANSIENT_CODES:
            return True
        if name in (
            "EndpointConnectionError",
            "ConnectTimeoutError",
            "ReadTimeoutError",
            "ConnectionClosedError",
            "ResponseStreamingError",
            "IncompleteReadError",
            "StoreUnreachable",
            "EndpointError",
            "ConnectError",
            "ReadTimeout",
            "ConnectTimeout",
            "RemoteProtocolError",
        ):
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


_DEADLINE: contextvars.ContextVar[Any] = contextvars.ContextVar("rewardpipe_lambda_context", default=None)


def remaining_s() -> float:
    """Seconds left in the current Lambda invocation (infinite outside one)."""
    context = _DEADLINE.get()
    getter = getattr(context, "get_remaining_time_in_millis", None)
    return getter() / 1000.0 if callable(getter) else float("inf")


class _LazyTracer:
    """Powertools Tracer, created at the first invocation instead of at import.

    Creating a Tracer imports the X-Ray SDK (about 100 ms), which would otherwise be paid by every
    cold start before the runtime even hands over the first event; with tracing disabled it is
    never imported at all.
    """

    def __init__(self) -> None:
        self._tracer: Any = None

    def capture_lambda_handler(self, handler: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(handler)
        def wrapper(event: Any, context: Any) -> Any:
            if os.environ.get("POWERTOOLS_TRACE_DISABLED", "").lower() in ("1", "true"):
                return handler(event, context)
            if self._tracer is None:
                from aws_lambda_powertools import Tracer

                self._tracer = Tracer().capture_lambda_handler(handler)
            return self._tracer(event, context)

        return wrapper


def step_handler(model: type[BaseModel] | None, step: Callable[[Any, Settings], dict[str, Any]]) -> Callable[..., Any]:
    """Build ``lambda_handler`` for ``step(event, settings)``; ``model=None`` passes the raw event.

    The step can read the time left in the invocation with :func:`remaining_s`.
    """
    from aws_lambda_powertools import Logger

    logger = Logger()
    tracer = _LazyTracer()
    settings = Settings.from_env()

    @logger.inject_lambda_context
    @tracer.capture_lambda_handler
    @retry_transient
    def lambda_handler(raw_event: Any, context: Any) -> dict[str, Any]:
        token = _DEADLINE.set(context)
        try:
            logger.remove_keys(list(_ID_FIELDS))  # a warm container must not log the previous rollout's ids
            event = model.model_validate(raw_event) if model is not None else raw_event
            ids = {name: getattr(event, name) for name in _ID_FIELDS if getattr(event, name, None) is not None}
            if ids:
                logger.append_keys(**ids)
            out = step(event, settings)
        finally:
            _DEADLINE.reset(token)
        logger.info("step done", extra={"result": {k: out[k] for k in _LOGGED if k in out}})
        return out

    lambda_handler.logger = logger  # type: ignore[attr-defined]
    return lambda_handler
