"""A handler's module import (the Lambda INIT phase, its cold start) loads only what its first call needs.

Each handler is imported in a fresh interpreter, with the environment the stack sets (tracing on), and
the modules it left in ``sys.modules`` are checked against the heavy ones that belong to a later moment:
the AWS SDK to the first call that talks to AWS, the X-Ray SDK to the first traced invocation, the LLM
clients to an LLM turn, the CLI, CDK and plotting never. benchmarks/cold_start.py measures the time;
this keeps a regression from coming back without a timed test.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests.aws import harness

HANDLERS = sorted(p.parent.name for p in (harness.ROOT / "functions").glob("*/handler.py"))

# module prefix -> when it is allowed to load instead
DEFERRED = {
    "aws_xray_sdk": "the first traced invocation (rewardpipe.aws.lambda_support creates the Tracer lazily)",
    # Imported by pydantic's plugin loader the first time any validator is built; rewardpipe's models
    # (rewardpipe.deferred.DeferredModel) build theirs at first use, so the import builds none.
    "pydantic.plugin._loader": "the first validation (a model's validator is built at first use)",
    "importlib.metadata": "the first validation, or boto3 (urllib3 reads its own metadata)",
    "email": "importlib.metadata, at the first validation",
    "ctypes.util": "never on Linux (rewardpipe.aws.hardening reads prctl from the interpreter's own libc)",
    "boto3": "the first call that talks to AWS (rewardpipe.aws.settings.aws_client)",
    "botocore.session": "the first call that talks to AWS",
    "botocore.client": "the first call that talks to AWS",
    "s3transfer": "the first call that talks to AWS",
    "urllib3": "the first call that talks to AWS",
    "httpx": "an LLM turn",
    "openai": "an LLM turn",
    "rewardpipe.openai_client": "an LLM turn",
    "rewardpipe.policies": "the first policy turn",
    "rewardpipe.simulator": "the first simulator turn",
    "rewardpipe.envs.ask_before_coding.simulator": "the first simulator turn",
    "rewardpipe.monitoring": "the variance check's first call",
    "rewardpipe.cli": "never (command line only)",
    "rewardpipe.integrations.nova.trainer_sim": "never (the simulated trainer is a client-side tool)",
    "aws_cdk": "never (synth time only)",
    "constructs": "never (synth time only)",
    "moto": "never (tests only)",
    "numpy": "never",
    "matplotlib": "never (reports only)",
}

PROBE = (
    "import importlib.util, json, sys\n"
    "spec = importlib.util.spec_from_file_location('handler', sys.argv[1])\n"
    "module = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(module)\n"
    "assert callable(module.lambda_handler)\n"
    "print(json.dumps(sorted(sys.modules)))\n"
)


def _modules_after_import(handler: str) -> list[str]:
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(harness.ROOT),
        "BUCKET": "b",
        "AWS_DEFAULT_REGION": "us-east-1",
        "POWERTOOLS_TRACE_DISABLED": "false",
        "POWERTOOLS_SERVICE_NAME": "rewardpipe",
        "PYDANTIC_DISABLE_PLUGINS": "__all__",
        "REWARD_NAME": "ask_before_coding",
    }
    proc = subprocess.run([sys.executable, "-c", PROBE, handler], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _deferred_loaded(modules: list[str]) -> dict[str, str]:
    return {m: DEFERRED[p] for m in modules for p in DEFERRED if m == p or m.startswith(p + ".")}


@pytest.mark.parametrize("name", HANDLERS)
def test_importing_a_handler_loads_nothing_its_first_call_defers(name):
    loaded = _deferred_loaded(_modules_after_import(str(harness.ROOT / "functions" / name / "handler.py")))
    assert not loaded, f"functions/{name}/handler.py imports at cold start: " + "; ".join(
        f"{m} (belongs to {when})" for m, when in sorted(loaded.items())
    )


def test_the_check_sees_a_heavy_import(tmp_path):
    """The probe is not vacuous: a handler that creates a boto3 client at import time is caught."""
    handler = tmp_path / "handler.py"
    handler.write_text(
        "import boto3\nfrom rewardpipe.aws.lambda_support import step_handler\n"
        "lambda_handler = step_handler(None, lambda event, settings: {})\n"
    )
    loaded = _deferred_loaded(_modules_after_import(str(handler)))
    assert {"boto3", "botocore.session", "botocore.client"} <= set(loaded)
    assert _deferred_loaded(["botocore", "botocore.exceptions", "rewardpipe.models"]) == {}


def test_the_check_sees_a_model_built_at_import(tmp_path):
    """A pydantic model that builds its validator when defined (a plain BaseModel) loads pydantic's plugin
    loader and importlib.metadata; the same model on DeferredModel loads neither until it validates."""
    handler = tmp_path / "handler.py"
    handler.write_text(
        "from pydantic import BaseModel\nclass Event(BaseModel):\n    run: str\n"
        "from rewardpipe.aws.lambda_support import step_handler\n"
        "lambda_handler = step_handler(Event, lambda event, settings: {})\n"
    )
    assert {"pydantic.plugin._loader", "importlib.metadata"} <= set(
        _deferred_loaded(_modules_after_import(str(handler)))
    )
    handler.write_text(
        handler.read_text().replace(
            "from pydantic import BaseModel", "from rewardpipe.deferred import DeferredModel as BaseModel"
        )
    )
    assert not _deferred_loaded(_modules_after_import(str(handler)))


def test_every_rewardpipe_model_defers_its_build():
    """Each pydantic model of the modules the handlers import is a DeferredModel (none is built at import)."""
    from pydantic import BaseModel

    from rewardpipe.deferred import DeferredModel

    modules = [
        m
        for name in HANDLERS
        for m in _modules_after_import(str(harness.ROOT / "functions" / name / "handler.py"))
        if m.startswith("rewardpipe.")
    ]
    eager = set()
    for module_name in sorted(set(modules)):
        module = importlib.import_module(module_name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseModel)
                and value.__module__ == module_name
                and not issubclass(value, DeferredModel)
            ):
                eager.add(f"{module_name}.{value.__name__}")
    assert not eager, f"models built at import (derive them from rewardpipe.deferred.DeferredModel): {sorted(eager)}"


def test_every_handler_is_in_the_cold_start_benchmark():
    """benchmarks/cold_start.py charges each handler's first call for the AWS clients it creates."""
    spec = importlib.util.spec_from_file_location("cold_start", harness.ROOT / "benchmarks" / "cold_start.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert sorted(bench.FIRST_CALL_CLIENTS) == HANDLERS


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_hardening_falls_back_to_libc_by_name_when_the_interpreter_does_not_export_prctl(monkeypatch):
    """rewardpipe.aws.hardening reads prctl from the interpreter's own symbols (no ctypes.util at import);
    an interpreter linked without it still gets the C library, found by name."""
    import ctypes

    from rewardpipe.aws import hardening

    real_cdll = ctypes.CDLL
    opened = []

    def cdll(name, *args, **kwargs):
        opened.append(name)
        return object() if name is None else real_cdll(name, *args, **kwargs)  # no prctl among "own" symbols

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    hardening._libc.cache_clear()
    try:
        assert hardening.is_dumpable() is True  # a pytest worker is dumpable; the call went through real prctl
        assert opened[0] is None and isinstance(opened[1], str) and "c" in opened[1]
    finally:
        hardening._libc.cache_clear()
