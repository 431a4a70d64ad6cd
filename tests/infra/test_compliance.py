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
    proc = subprocess.run(
        [sys.executable, "-c", _CFN_LINT, "--format", "json", str(template)],
        capture_output=True,
        text=True,
        timeout=300,
    )
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
    assert not list(container.rglob("*tasks.jsonl")) and not (container / "rewardpipe" / "data").exists()
    # the default layer is the arm64 (Graviton) one
    assert list((first / "python" / "pydantic_core").glob("_pydantic_core.cpython-313-aarch64-linux-gnu.so"))


# The layer's byte code and the handlers' imports from the layer alone are checked for the python3.13 runtime,
# with a real CPython 3.13, in tests/infra/test_runtime.py.


def test_container_requirements_pin_the_same_versions_as_pyproject():
    pins = {}
    for line in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]:
        name, _, version = line.partition("==")
        pins[name.strip().lower()] = version.strip()
    for line in (ROOT / "containers" / "code_runner" / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert pins.get(name.lower()) == version, (
                f"{name}=={version} differs from pyproject ({pins.get(name.lower())})"
            )


def test_python_app_py_synthesizes_offline(tmp_path):
    """The real entry point, as `cdk synth` runs it: no credentials, no Docker, exit 0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(CDK_OUTDIR=str(tmp_path / "out"), JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20")
    proc = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "out" / "RewardPipe.template.json").is_file()
    assert re.search(r"manifest\.json", " ".join(p.name for p in (tmp_path / "out").iterdir()))


CONTAINER_DISTRIBUTIONS = (
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "typing_extensions.py",
    "typing_inspection",
    "boto3",
    "botocore",
    "s3transfer",
    "jmespath",
    "dateutil",
    "six.py",
    "urllib3",
)


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
    script = (
        "import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
        "import entry\n"
        "from rewardpipe.execution import get_executor\n"
        "get_executor()\n"
        "import rewardpipe.aws.jobs, rewardpipe.aws.hardening\n"
        "print('ok')\n"
    )
    # -B: importing from the shared synth's staged context must leave no byte code in it (test_runtime checks
    # that no asset holds byte code of another interpreter).
    proc = subprocess.run(
        [sys.executable, "-S", "-B", "-c", script, str(context), str(deps)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"]},
        timeout=120,
    )
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
