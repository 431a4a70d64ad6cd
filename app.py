#!/usr/bin/env python3
"""CDK entry point: ``python app.py`` (or ``cdk synth``) writes the cloud assembly offline.

Settings come from the ``rewardpipe`` context key (cdk.json; override with ``-c rewardpipe='{...}'``),
validated by stacks.config. cdk-nag's AwsSolutions checks run on every synth; an unacknowledged
finding is an error annotation, and this script exits non-zero if there is one.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stacks.config import CONTEXT_KEY, SettingsError, load_settings  # noqa: E402
from stacks.rewardpipe_stack import RewardPipeStack  # noqa: E402


def _cdk_json_context() -> dict:
    """cdk.json's context, for ``python app.py`` runs (the CLI passes it itself via CDK_CONTEXT_JSON)."""
    if os.environ.get("CDK_CONTEXT_JSON"):
        return {}
    path = Path(__file__).resolve().parent / "cdk.json"
    return json.loads(path.read_text()).get("context", {}) if path.exists() else {}


def build_app(context: dict | None = None, outdir: str | None = None) -> tuple[cdk.App, RewardPipeStack]:
    merged = {**_cdk_json_context(), **(context or {})}
    app = cdk.App(outdir=outdir or os.environ.get("CDK_OUTDIR", "cdk.out"), context=merged)
    settings = load_settings(app.node.try_get_context(CONTEXT_KEY))
    stack = RewardPipeStack(app, settings.stack_name, settings=settings)
    cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    return app, stack


def synth_errors(app: cdk.App, stack: RewardPipeStack) -> list[str]:
    """Synthesize and return every error annotation (unacknowledged cdk-nag findings among them).

    With ``@aws-cdk/core:annotationsInValidationReport`` (a flag ``cdk init`` sets) error annotations fail
    the synth itself with a validation report; each of its findings is returned as ``/<path>: <finding>``.
    """
    try:
        assembly = app.synth()
    except RuntimeError as exc:
        if "ValidationFailed" not in str(exc):
            raise
        return _report_findings(str(exc))
    messages = assembly.get_stack_artifact(stack.artifact_id).messages
    return [f"{m.id}: {m.entry.data}" for m in messages if str(m.level.value).lower() == "error"]


def _report_findings(report: str) -> list[str]:
    """``ERROR <rule>: <text>`` lines, each followed by the construct path it applies to."""
    findings: list[str] = []
    lines = [line.strip() for line in report.splitlines()]
    for i, line in enumerate(lines):
        start = line.find("ERROR ")
        if start < 0:
            continue
        path = lines[i + 1].split(" ")[0] if i + 1 < len(lines) else ""
        findings.append(f"/{path}: {line[start + len('ERROR '):]}")
    return findings


def main() -> int:
    try:
        app, stack = build_app()
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    errors = synth_errors(app, stack)
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
