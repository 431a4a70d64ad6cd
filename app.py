#!/usr/bin/env python3
"""CDK entry point: ``python app.py`` (or ``cdk synth``) writes the cloud assembly offline.

Settings come from the ``rewardpipe`` context key (cdk.json; override with ``-c rewardpipe='{...}'``) and the
Nova bridge's from ``rewardpipe_nova``, both validated by stacks.config in Python *before* the CDK sees them
(a bad value exits 2 with one line per problem, naming the setting, its value and what is allowed). After the
synth, cdk-nag's AwsSolutions findings and every resource name the stack derived (stacks/names.py) are checked;
this script exits non-zero if one fails.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stacks.config import (  # noqa: E402
    CONTEXT_KEY,
    MAX_CONTEXT_DEPTH,
    SettingsError,
    check_values,
    load_context,
    load_settings,
    parse_context_json,
)
from stacks.constructs.nova_bridge import CONTEXT_KEY as NOVA_CONTEXT_KEY  # noqa: E402
from stacks.constructs.nova_bridge import NovaBridgeSettings
from stacks.names import name_problems, stack_name_message  # noqa: E402
from stacks.rewardpipe_stack import RewardPipeStack  # noqa: E402

CLI_CONTEXT_ENV = "CDK_CONTEXT_JSON"


def _cdk_json_context() -> dict:
    """cdk.json's context, for ``python app.py`` runs (the CLI passes it itself via CDK_CONTEXT_JSON)."""
    if os.environ.get(CLI_CONTEXT_ENV):
        return {}
    path = Path(__file__).resolve().parent / "cdk.json"
    if not path.exists():
        return {}
    context = parse_context_json("cdk.json", path.read_text()).get("context", {})
    if not isinstance(context, dict):
        raise SettingsError("cdk.json: 'context' must be a JSON object")
    return context


def _cli_context() -> dict:
    """What the CDK CLI passes (cdk.json's context and every ``-c``), read here as the app will read it."""
    raw = os.environ.get(CLI_CONTEXT_ENV)
    if not raw:
        return {}
    context = parse_context_json(CLI_CONTEXT_ENV, raw)
    if not isinstance(context, dict):
        raise SettingsError(f"{CLI_CONTEXT_ENV} must hold a JSON object of context values")
    return context


def build_app(context: dict | None = None, outdir: str | None = None) -> tuple[cdk.App, RewardPipeStack]:
    """The app and its stack. Our settings are read and validated in Python from the same context the CDK
    gets (cdk.json or the CLI's, then ``context``), before any of it crosses into jsii: a bad or deeply
    nested value is a :class:`SettingsError` naming it, not a jsii or recursion traceback."""
    merged = {**_cdk_json_context(), **(context or {})}
    for key, value in merged.items():
        check_values(key, value, MAX_CONTEXT_DEPTH)
    # The CLI's context wins over the constructor's in the CDK app, so it does here.
    effective = {**merged, **_cli_context()}
    settings = load_settings(effective.get(CONTEXT_KEY))
    nova = load_context(NOVA_CONTEXT_KEY, effective.get(NOVA_CONTEXT_KEY), NovaBridgeSettings)
    app = cdk.App(outdir=outdir or os.environ.get("CDK_OUTDIR", "cdk.out"), context=merged)
    stack = RewardPipeStack(app, settings.stack_name, settings=settings, nova=nova)
    cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    return app, stack


def synth_errors(app: cdk.App, stack: RewardPipeStack) -> list[str]:
    """Synthesize and return every error: error annotations (unacknowledged cdk-nag findings among them) and
    the resource names the stack derived that AWS would refuse (stacks/names.py).

    With ``@aws-cdk/core:annotationsInValidationReport`` (a flag ``cdk init`` sets) error annotations fail
    the synth itself with a validation report; each of its findings is returned as ``/<path>: <finding>``.
    """
    try:
        assembly = app.synth()
    except RuntimeError as exc:
        if "ValidationFailed" not in str(exc):
            raise
        return _report_findings(Path(app.outdir) / "validation-report.json", str(exc))
    artifact = assembly.get_stack_artifact(stack.artifact_id)
    errors = [f"{m.id}: {m.entry.data}" for m in artifact.messages if str(m.level.value).lower() == "error"]
    problems = name_problems(artifact.template, stack.settings.stack_name)
    if problems:
        errors.append(stack_name_message(stack.settings.stack_name, problems))
    return errors


def _report_findings(report: Path, message: str) -> list[str]:
    """``/<construct path>: <rule>: <text>`` for every violation in the synth's validation report (the
    exception only says where the report is)."""
    import json

    try:
        data = json.loads(report.read_text())
    except (OSError, ValueError):
        return [f"the synth's validation failed and its report could not be read: {message}"]
    findings = [
        f"/{construct['constructPath']}: {violation['description'].strip().splitlines()[0]}"
        for plugin in data.get("pluginReports", [])
        for violation in plugin.get("violations", [])
        for construct in violation.get("violatingConstructs", [])
    ]
    return findings or [f"the synth's validation failed: {message}"]


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
