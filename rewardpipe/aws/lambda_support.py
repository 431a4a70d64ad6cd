"""The one shape every state-machine step handler has, so each functions/<name>/handler.py is one line.

A step handler: Powertools Logger (Lambda context and rollout ids in every line) and Tracer, the
event validated with the step's pydantic model (a bad event raises ValidationError naming the
field, which the state machine's Catch turns into an error record), then ONE call into
rewardpipe.aws with the function's settings, whose JSON-ready result is returned.
"""

from __future__ import annotations

from typing import Any, Callable

from pydantic import BaseModel

from rewardpipe.aws.settings import Settings

_ID_FIELDS = ("run", "step", "group", "rollout", "run_id")


def step_handler(model: type[BaseModel] | None, step: Callable[[Any, Settings], dict[str, Any]]) -> Callable[..., Any]:
    """Build ``lambda_handler`` for ``step(event, settings)``; ``model=None`` passes the raw event."""
    from aws_lambda_powertools import Logger, Tracer

    logger = Logger()
    tracer = Tracer()
    settings = Settings.from_env()

    @logger.inject_lambda_context
    @tracer.capture_lambda_handler
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
