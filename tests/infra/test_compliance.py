"""cdk-nag AwsSolutions and cfn-lint on the shared synth; the staged layer and container context."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from aws_cdk.assertions import Annotations, Match

from stacks import packaging
from tests.aws import harness

pytestmark = pytest.mark.xdist_group("cdk")
ROOT = Path(__file__).resolve().parents[2]


def test_cdk_nag_aws_solutions_has_no_unacknowledged_findings(synth):
    annotations = Annotations.from_stack(synth.stack)
    errors = annotations.find_error("*", Match.string_like_regexp("AwsSolutions-.*"))
    warnings = annotations.find_warning("*", Match.string_like_regexp("AwsSolutions-.*"))
    assert errors == [] and warnings == [], [e.entry.data for e in errors + warnings][:5]


def test_every_nag_suppression_states_a_reason(synth):
    reports = list(synth.outdir.glob("AwsSolutions-*NagReport.csv"))
    assert reports, "cdk-nag wrote no report: the checks did not run"
    rows = reports[0].read_text().splitlines()[1:]
    suppressed = [r for r in rows if '"Suppressed"' in r]
    compliant = [r for r in rows if '"Compliant"' in r]
    assert suppressed and compliant, "expected both compliant and suppressed rules"
    for row in suppressed:
        reason = row.split('","')[3]
        assert len(reason) >= 20 and reason != "N/A", row
    assert not [r for r in rows if '"Non-Compliant"' in r]


# cfn-lint's console script, run by this interpreter (``python -m cfnlint`` has no __main__ and exits 1).
_CFN_LINT = "import sys\nfrom cfnlint.runner import main\nsys.argv[0] = 'cfn-lint'\nsys.exit(main())"
def cfn_lint(template: Path) -> list[dict]:
    """cfn-lint's findings on ``template``; fails if cfn-lint itself did not run."""
    proc = subprocess.run([sys.executable, "-c", _CFN_LINT, "--format", "json", str(template)],
                          capture_output=True, text=True, timeout=300)
    # Exit code is a bitmask of what was found: 2 = error, 4 = warning, 8 = informational. Any other bit
    # (1: cfn-lint crashed or could not start) means nothing was checked.
    assert proc.returncode & ~(2 | 4 | 8) == 0, (proc.returncode, proc.stderr[-3000:])
    return json.loads(proc.stdout or "[]")


def test_the_cfn_lint_check_sees_an_error(tmp_path):
    broken = {"Resources": {"Queue": {"Type": "AWS::SQS::Queue", "Properties": {"VisibilityTimeout": "forever"}}}}
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    assert any(f["Level"] == "Error" for f in cfn_lint(tmp_path / "broken.json"))


@pytest.mark.parametrize("context", ["", harness.NOVA_BRIDGE_CONTEXT], ids=["default", "nova-bridge"])
def test_cfn_lint_reports_no_errors(context):
    synth = harness.synthesized(context)
    findings = cfn_lint(synth.outdir / f"{synth.stack.stack_name}.template.json")
    assert not [f for f in findings if f["Level"] == "Error"], findings
    assert not [f for f in findings if f["Rule"]["Id"] == "W3010"]  # no hard-coded AZs (environment-agnostic stack)


def test_assets_are_staged_without_docker(synth):
    import json

    manifest = json.loads((synth.outdir / f"{synth.stack.stack_name}.assets.json").read_text())
    images = manifest["dockerImages"]
    assert len(images) == 1
    (image,) = images.values()
    context = synth.outdir / image["source"]["directory"]
    assert (context / "Dockerfile").is_file() and (context / "entry.py").is_file()
    assert (context / "rewardpipe" / "aws" / "jobs.py").is_file()
    assert not list(context.rglob("__pycache__"))


def _tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def test_layer_staging_is_deterministic_and_excludes_the_cli_and_hidden_tests():
    first = Path(packaging.stage_layer.__wrapped__())
    second = Path(packaging.stage_layer.__wrapped__())
    assert _tree_digest(first) == _tree_digest(second)
    assert not (first / "python" / "rewardpipe" / "cli").exists()
    # the bundled tasks carry hidden tests: the model's code in Lambda or Fargate must find none on disk
    assert not (first / "python" / "rewardpipe" / "data").exists()
    container = Path(packaging.stage_container.__wrapped__())
    assert not list(container.rglob("tasks.jsonl"))
    # the default layer is the arm64 (Graviton) one
    assert list((first / "python" / "pydantic_core").glob("_pydantic_core.cpython-311-aarch64-linux-gnu.so"))


def test_layer_ships_hash_checked_byte_code_named_as_on_lambda():
    """/opt is read-only on Lambda: without byte code in the layer every cold start compiles pydantic,
    Powertools and rewardpipe again. Each module gets hash-checked byte code (flags 0b11: a zip keeps no
    source timestamps, and a changed source must never run stale code) naming its file under /opt/python."""
    import importlib.util
    import marshal

    layer = Path(packaging.stage_layer()) / "python"
    sources = sorted(layer.rglob("*.py"))
    assert len(sources) > 300
    for source in sources:
        cached = Path(importlib.util.cache_from_source(str(source)))
        assert cached.is_file(), f"no byte code for {source.relative_to(layer)}"
        data = cached.read_bytes()
        assert data[:4] == importlib.util.MAGIC_NUMBER
        assert int.from_bytes(data[4:8], "little") == 0b11, source
        code = marshal.loads(data[16:])
        assert code.co_filename == f"/opt/python/{source.relative_to(layer).as_posix()}"


def test_an_interpreter_lambda_cannot_load_leaves_the_layer_as_sources(monkeypatch, tmp_path):
    (tmp_path / "m.py").write_text("x = 1\n")
    monkeypatch.setattr(packaging.sys.implementation, "cache_tag", "cpython-312")
    assert packaging.compile_layer(tmp_path) is False
    assert not list(tmp_path.rglob("*.pyc"))


SIMULATED_RUNTIME = ("boto3", "botocore", "s3transfer", "dateutil", "urllib3", "six.py", "jmespath")


def test_every_handler_imports_from_the_layer_alone(tmp_path):
    """Import each handler with only the staged layer, its own asset and the Lambda runtime's boto3
    on sys.path (no site-packages): the layer holds everything else the handlers need. The stack is
    synthesized for this machine's architecture, whose compiled modules this interpreter can load (the
    same distributions, at the same versions, as the arm64 layer: tests/infra/test_layer_build.py)."""
    import botocore

    if harness.NATIVE_ARCHITECTURE is None:
        pytest.skip("this machine is neither x86-64 nor aarch64")
    synth = harness.synthesized(harness.architecture_context(harness.NATIVE_ARCHITECTURE))

    site = Path(botocore.__file__).resolve().parents[1]
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    for name in SIMULATED_RUNTIME:
        (runtime / name).symlink_to(site / name)
    layer = next(synth.outdir / f"asset.{r['Properties']['Content']['S3Key'].split('.')[0]}"
                 for r in synth.template["Resources"].values() if r["Type"] == "AWS::Lambda::LayerVersion")
    functions = [synth.outdir / f"asset.{r['Properties']['Code']['S3Key'].split('.')[0]}"
                 for r in synth.template["Resources"].values()
                 if r["Type"] == "AWS::Lambda::Function" and str(r["Properties"].get("Runtime", "")).startswith("python")]
    # one Python function per handler folder (CDK's own custom-resource providers are Node.js); the Nova
    # bridge's nova_* handlers exist only with the rewardpipe_nova context flag (tests/integrations/nova)
    assert len(functions) == len([p for p in (ROOT / "functions").glob("*/handler.py")
                                  if not p.parent.name.startswith("nova_")])
    script = (
        "import sys, importlib.util\n"
        "for i, d in enumerate(sys.argv[3:]):\n"
        "    sys.path[:0] = [d, sys.argv[1], sys.argv[2]]\n"
        "    spec = importlib.util.spec_from_file_location(f'h{i}', d + '/handler.py')\n"
        "    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "    assert callable(m.lambda_handler)\n"
        "    del sys.path[:3]\n"
        "bad = [n for n, m in sys.modules.items() if m is not None and 'site-packages' in (getattr(m, '__file__', '') or '')\n"
        "       and not any(n == r or n.startswith(r + '.') for r in ('boto3', 'botocore', 's3transfer', 'dateutil', 'urllib3', 'six', 'jmespath'))]\n"
        "print('OUTSIDE', bad)\n"
        "assert not bad, bad\n"
    )
    env = {"PATH": os.environ["PATH"], "BUCKET": "b", "POWERTOOLS_TRACE_DISABLED": "1", "AWS_DEFAULT_REGION": "us-east-1"}
    proc = subprocess.run([sys.executable, "-S", "-c", script, str(layer / "python"), str(runtime), *map(str, functions)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_container_requirements_pin_the_same_versions_as_pyproject():
    pins = {}
    for line in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]:
        name, _, version = line.partition("==")
        pins[name.strip().lower()] = version.strip()
    for line in (ROOT / "containers" / "code_runner" / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert pins.get(name.lower()) == version, f"{name}=={version} differs from pyproject ({pins.get(name.lower())})"


def test_python_app_py_synthesizes_offline(tmp_path):
    """The real entry point, as `cdk synth` runs it: no credentials, no Docker, exit 0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(CDK_OUTDIR=str(tmp_path / "out"), JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20")
    proc = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "out" / "RewardPipe.template.json").is_file()
    assert re.search(r"manifest\.json", " ".join(p.name for p in (tmp_path / "out").iterdir()))


CONTAINER_DISTRIBUTIONS = ("pydantic", "pydantic_core", "annotated_types", "typing_extensions.py", "typing_inspection",
                           "boto3", "botocore", "s3transfer", "jmespath", "dateutil", "six.py", "urllib3")


def test_container_context_needs_only_its_requirements(synth, tmp_path):
    """The staged image context, with only what requirements.txt installs (pydantic, boto3 and their
    dependencies) and no site-packages: the entry point and the execution layer import."""
    import json

    import botocore

    site = Path(botocore.__file__).resolve().parents[1]
    deps = tmp_path / "deps"
    deps.mkdir()
    for name in CONTAINER_DISTRIBUTIONS:
        (deps / name).symlink_to(site / name)
    manifest = json.loads((synth.outdir / f"{synth.stack.stack_name}.assets.json").read_text())
    (image,) = manifest["dockerImages"].values()
    context = synth.outdir / image["source"]["directory"]
    script = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
              "import entry\n"
              "from rewardpipe.execution import get_executor\n"
              "get_executor()\n"
              "import rewardpipe.aws.jobs, rewardpipe.aws.hardening\n"
              "print('ok')\n")
    proc = subprocess.run([sys.executable, "-S", "-c", script, str(context), str(deps)], cwd=tmp_path,
                          capture_output=True, text=True, env={"PATH": os.environ["PATH"]}, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_an_unacknowledged_finding_fails_the_synth(tmp_path):
    """The CI gate works: a resource that breaks an AwsSolutions rule makes app.py report an error."""
    from aws_cdk import aws_sqs as sqs

    from app import build_app, synth_errors

    app, stack = build_app(context={"rewardpipe": {"stack_name": "RewardPipeGate"}}, outdir=str(tmp_path))
    sqs.Queue(stack, "Unencrypted", encryption=sqs.QueueEncryption.UNENCRYPTED)  # no SSE, no DLQ, no TLS policy
    errors = synth_errors(app, stack)
    assert errors and all("/RewardPipeGate/Unencrypted" in e for e in errors)
    assert any("AwsSolutions-SQS" in e for e in errors)
