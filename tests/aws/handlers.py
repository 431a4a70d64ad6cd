"""Import a handler module from functions/<name>/ the way Lambda does: fresh module, env applied first."""

from __future__ import annotations

import functools
import importlib.util
import itertools
from pathlib import Path

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"
_counter = itertools.count()


def load(name: str):
    """The handler module of ``functions/<name>``; its ``lambda_handler`` runs as that function of the
    template, so the IAM harness checks every AWS call it makes against the function's own policies."""
    path = FUNCTIONS / name / "handler.py"
    spec = importlib.util.spec_from_file_location(f"handler_{name}_{next(_counter)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    handler = getattr(module, "lambda_handler", None)
    if handler is not None:
        module.lambda_handler = _as_function(name, handler)
    return module


def _as_function(name: str, handler):
    from tests.aws import harness, iam

    @functools.wraps(handler)
    def lambda_handler(event, context):
        with iam.calling_as(harness.folder_caller(name)):
            return handler(event, context)

    return lambda_handler


class Context:
    function_name = "test-function"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:test-function"
    memory_limit_in_mb = 512
    aws_request_id = "req-1"
    log_group_name = "/aws/lambda/test-function"
    log_stream_name = "test"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000
