"""The python3.13 runtime (issue 18 item 1) and what the layer ships for it (item 6).

* every rewardpipe function runs python3.13, and no function of the stack (CDK's Node.js ones included) is
  within 90 days of its runtime's published block dates (stacks/runtimes.py), checked against today;
* the layer holds CPython 3.13 wheels and only CPython 3.13's hash-checked byte code (or none), and no
  artifact of the synth holds another interpreter's byte code;
* with a real CPython 3.13 (this machine has pyenv's 3.13.0; stacks.packaging.lambda_python finds it), every
  handler imports from the layer alone without compiling anything, and the single-turn reward scores a batch;
* the AWS SDK is the layer's own, at the tested versions, with the S3 conditional writes the code uses.

The tests that need the interpreter skip, saying so, where no CPython 3.13 can be found.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata as md
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from stacks import packaging
from stacks.runtimes import MARGIN_DAYS, SCHEDULE, Lifecycle, cfn_lint_schedule, earliest, runtime_problems
from tests.aws import harness

pytestmark = pytest.mark.xdist_group("cdk")
ROOT = Path(__file__).resolve().parents[2]
PYTHON_313 = packaging.lambda_python()
needs_313 = pytest.mark.skipif(
    PYTHON_313 is None, reason="no CPython 3.13 on this machine (set REWARDPIPE_LAMBDA_PYTHON)"
)


def _functions(template: dict) -> dict[str, dict]:
    return {k: r["Properties"] for k, r in template["Resources"].items() if r["Type"] == "AWS::Lambda::Function"}


# -- the runtime and its deprecation dates --------------------------------------------------------------


@pytest.mark.parametrize("context", ["", harness.NOVA_BRIDGE_CONTEXT], ids=["default", "nova-bridge"])
def test_every_rewardpipe_function_and_the_layer_run_python313(context):
    template = harness.synthesized(context).template
    ours = {k: f for k, f in _functions(template).items() if f.get("Layers")}
    assert len(ours) >= 7
    assert {f["Runtime"] for f in ours.values()} == {"python3.13"}
    (layer,) = [r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::LayerVersion"]
    assert layer["CompatibleRuntimes"] == ["python3.13"]


@pytest.mark.parametrize("context", ["", harness.NOVA_BRIDGE_CONTEXT], ids=["default", "nova-bridge"])
def test_no_function_is_within_90_days_of_its_runtimes_block_date(context):
    """Today's date against the published schedule, for every function in the template: ours and the
    Node.js functions CDK adds for its custom resources."""
    template = harness.synthesized(context).template
    assert any(f["Runtime"].startswith("nodejs") for f in _functions(template).values())
    assert runtime_problems(template, dt.date.today()) == []


def _template(*runtimes: str) -> dict:
    resources = {
        f"Fn{i}": {"Type": "AWS::Lambda::Function", "Properties": {"Runtime": r}} for i, r in enumerate(runtimes)
    }
    resources["Image"] = {"Type": "AWS::Lambda::Function", "Properties": {"PackageType": "Image"}}
    return {"Resources": resources}


def test_the_check_fails_within_90_days_of_a_block_date_and_for_an_unknown_runtime():
    # python3.10 (Amazon Linux 2): function create blocked 2027-02-01 -- 61 days after the day this was written.
    assert "blocks function create on 2027-02-01" in " ".join(
        runtime_problems(_template("python3.10"), dt.date(2026, 12, 2))
    )
    assert runtime_problems(_template("python3.10"), dt.date(2026, 11, 2)) == []  # 91 days before
    create = SCHEDULE["python3.13"].block_create
    assert runtime_problems(_template("python3.13"), create - dt.timedelta(days=MARGIN_DAYS + 1)) == []
    (problem,) = runtime_problems(_template("python3.13"), create - dt.timedelta(days=MARGIN_DAYS))
    assert "Fn0" in problem and "python3.13" in problem and create.isoformat() in problem
    (unknown,) = runtime_problems(_template("python9.9"), dt.date(2026, 12, 1))
    assert "not in the deprecation schedule" in unknown
    layer = {
        "Resources": {"L": {"Type": "AWS::Lambda::LayerVersion", "Properties": {"CompatibleRuntimes": ["python3.9"]}}}
    }
    assert runtime_problems(layer, dt.date(2026, 12, 1))


def test_the_earlier_of_the_two_published_copies_wins(monkeypatch):
    """cfn-lint's copy (refreshed by cfn-lint upgrades) can only bring a deadline nearer, never hide one."""
    import stacks.runtimes as runtimes

    sooner = Lifecycle(dt.date(2027, 1, 1), dt.date(2027, 2, 1), dt.date(2027, 3, 1))
    monkeypatch.setattr(runtimes, "cfn_lint_schedule", lambda: {"python3.13": sooner})
    assert earliest("python3.13") == sooner
    assert runtime_problems(_template("python3.13"), dt.date(2026, 12, 1))
    monkeypatch.setattr(runtimes, "cfn_lint_schedule", lambda: {})
    assert earliest("python3.13") == SCHEDULE["python3.13"]


def test_both_copies_of_the_schedule_agree_on_the_runtime_we_deploy():
    assert cfn_lint_schedule().get("python3.13") == SCHEDULE["python3.13"]


def test_runtime_acknowledged_only_on_our_functions_and_never_stack_wide(synth):
    """cdk-nag's L1 asks for the newest runtime CDK knows; the stack-wide suppression (whose reason said 3.11
    was pinned deliberately) is gone: Node.js functions must pass L1, and only our Python functions carry an
    acknowledgement, which disappears once RUNTIME is CDK's newest."""
    from stacks.constructs.common import RUNTIME, newest_python_runtime

    assert "AwsSolutions-L1" not in (ROOT / "stacks" / "rewardpipe_stack.py").read_text()
    # one row per (rule, resource): the report gains a copy of each row every time the shared app is synthesized
    rows = sorted(
        {
            r
            for p in synth.outdir.glob("AwsSolutions-*NagReport.csv")
            for r in p.read_text().splitlines()
            if '"AwsSolutions-L1"' in r
        }
    )
    compliant = [r for r in rows if '"Compliant"' in r]
    suppressed = [r for r in rows if '"Suppressed"' in r]
    assert not [r for r in rows if '"Non-Compliant"' in r]
    assert compliant and all("Custom" in r or "AWS679f53" in r for r in compliant)  # CDK's Node.js functions
    if RUNTIME.name == newest_python_runtime():
        assert not suppressed
    else:
        assert len(suppressed) == len([f for f in _functions(synth.template).values() if f.get("Layers")])
        assert all(RUNTIME.name in r for r in suppressed)


# -- what the layer ships ----------------------------------------------------------------------------------


def test_pip_fetches_cp313_wheels_and_the_layer_holds_only_cpython_313_modules():
    for architecture, (_tag, suffix, _machine) in packaging.LAMBDA_PLATFORMS.items():
        assert "--python-version 3.13" in " ".join(packaging.lambda_pip_platform(architecture))
        python_dir = Path(packaging.stage_layer(architecture)) / "python"
        modules = [p.name for p in python_dir.rglob("*.so")]
        assert modules and all(suffix in name or ".abi3." in name for name in modules), modules


def test_the_sdk_is_the_layers_own_at_the_tested_versions_with_s3_conditional_writes():
    """boto3/botocore/s3transfer (and their dependencies) are bundled at the pinned versions: the runtime's
    SDK version depends on the runtime version and region, and the code's conditional writes need PutObject's
    IfNoneMatch and IfMatch in botocore's S3 model."""
    import botocore.loaders

    python_dir = Path(packaging.stage_layer()) / "python"
    for name in ("boto3", "botocore", "s3transfer", "urllib3", "python-dateutil", "six", "jmespath"):
        assert name in packaging.LAYER_DISTRIBUTIONS
        normalized = name.replace("-", "_")
        assert list(python_dir.glob(f"{normalized}-{md.version(name)}.dist-info")), name
    loader = botocore.loaders.Loader(
        extra_search_paths=[str(python_dir / "botocore" / "data")], include_default_search_paths=False
    )
    model = loader.load_service_model("s3", "service-2")
    members = model["shapes"][model["operations"]["PutObject"]["input"]["shape"]]["members"]
    assert {"IfNoneMatch", "IfMatch"} <= set(members)


@needs_313
def test_the_byte_code_magic_number_is_the_real_interpreters():
    proc = subprocess.run(
        [
            PYTHON_313,
            "-c",
            "import importlib.util, sys; print(importlib.util.MAGIC_NUMBER.hex(), sys.implementation.cache_tag)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.split() == [packaging.LAMBDA_BYTECODE_MAGIC.hex(), packaging.LAMBDA_CACHE_TAG]


@needs_313
def test_the_layer_ships_cpython_313_hash_checked_byte_code_named_as_on_lambda():
    """/opt is read-only on Lambda: every module of the layer has CPython 3.13's byte code, hash-checked (a zip
    keeps no timestamps; a changed source never runs stale code), naming its file under /opt/python."""
    layer = Path(packaging.stage_layer()) / "python"
    sources = sorted(layer.rglob("*.py"))
    assert len(sources) > 900  # rewardpipe, pydantic, Powertools, httpx and the SDK (967 on 2 Dec 2026)
    assert packaging.foreign_bytecode(layer) == []
    missing = [
        s for s in sources if not (s.parent / "__pycache__" / f"{s.stem}.{packaging.LAMBDA_CACHE_TAG}.pyc").is_file()
    ]
    assert missing == []
    probe = (
        "import marshal, sys\n"
        "bad = []\n"
        "for line in sys.stdin:\n"
        "    pyc, expected = line.rstrip('\\n').split('\\t')\n"
        "    code = marshal.loads(open(pyc, 'rb').read()[16:])\n"
        "    if code.co_filename != expected: bad.append((pyc, code.co_filename))\n"
        "print(len(bad), bad[:3])\n"
    )
    lines = "".join(
        f"{s.parent / '__pycache__' / f'{s.stem}.{packaging.LAMBDA_CACHE_TAG}.pyc'}\t"
        f"/opt/python/{s.relative_to(layer).as_posix()}\n"
        for s in sources
    )
    proc = subprocess.run([PYTHON_313, "-c", probe], input=lines, capture_output=True, text=True, check=True)
    assert proc.stdout.startswith("0 "), proc.stdout


def test_no_artifact_of_the_synth_holds_byte_code_of_another_interpreter(synth):
    """The layer, every function's asset and the container's build context."""
    assets = [p for p in synth.outdir.iterdir() if p.is_dir() and p.name.startswith("asset.")]
    assert len(assets) >= 3
    for asset in assets:
        assert packaging.foreign_bytecode(asset) == [], asset.name
        if not (asset / "python").is_dir():  # only the layer ships byte code
            assert not list(asset.rglob("*.pyc")), asset.name


def test_byte_code_of_another_interpreter_fails_the_layer_naming_it(tmp_path):
    cache = tmp_path / "python" / "pkg" / "__pycache__"
    cache.mkdir(parents=True)
    (cache / "mod.cpython-311.pyc").write_bytes(bytes.fromhex("a70d0d0a") + (3).to_bytes(4, "little") + bytes(8))
    (cache / "ok.cpython-313.pyc").write_bytes(packaging.LAMBDA_BYTECODE_MAGIC + (3).to_bytes(4, "little") + bytes(8))
    with pytest.raises(packaging.PackagingError, match=r"mod\.cpython-311\.pyc"):
        packaging._check_bytecode(tmp_path / "python")
    (cache / "mod.cpython-311.pyc").unlink()
    (cache / "stale.cpython-313.pyc").write_bytes(
        packaging.LAMBDA_BYTECODE_MAGIC + (0).to_bytes(4, "little") + bytes(8)
    )
    assert packaging.foreign_bytecode(tmp_path / "python") == [
        "pkg/__pycache__/stale.cpython-313.pyc"
    ]  # not hash-checked


def test_without_a_cpython_313_the_layer_ships_sources_only_and_says_so(monkeypatch, tmp_path):
    (tmp_path / "m.py").write_text("x = 1\n")
    monkeypatch.setattr(packaging, "lambda_python", lambda: None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert packaging.compile_layer(tmp_path) is False
    assert [w.category for w in caught] == [packaging.LayerWithoutBytecode]
    assert not list(tmp_path.rglob("*.pyc"))


def test_this_interpreter_never_writes_the_layers_byte_code(monkeypatch, tmp_path):
    """A 3.11 named explicitly is refused, not used: its byte code would be ignored by python3.13 (a wasted
    compile at every cold start) and the layer would look compiled."""
    if sys.implementation.cache_tag == packaging.LAMBDA_CACHE_TAG:
        pytest.skip("this interpreter is CPython 3.13")
    packaging.lambda_python.cache_clear()
    monkeypatch.setenv(packaging.LAMBDA_PYTHON_ENV, sys.executable)
    try:
        with pytest.raises(packaging.PackagingError, match=packaging.LAMBDA_PYTHON_ENV):
            packaging.lambda_python()
    finally:
        monkeypatch.delenv(packaging.LAMBDA_PYTHON_ENV)
        packaging.lambda_python.cache_clear()


# -- the handlers on a real CPython 3.13 -------------------------------------------------------------------

# Imports every handler given on the command line with only the layer and its own folder on sys.path, counting
# every module compiled from source: with valid byte code in the layer nothing from it should be.
_IMPORT_ALL = """
import importlib.util, sys
from importlib import _bootstrap_external as external
layer = sys.argv[1]
compiled = []
original = external.SourceLoader.source_to_code
def counting(self, data, path, *args, **kwargs):
    compiled.append(path)
    return original(self, data, path, *args, **kwargs)
external.SourceLoader.source_to_code = counting
sys.path.insert(0, layer)
for i, folder in enumerate(sys.argv[2:]):
    sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(f"h{i}", folder + "/handler.py")
    module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
    assert callable(module.lambda_handler)
    del sys.path[0]
import boto3, botocore, pydantic_core
outside = sorted(n for n, m in sys.modules.items() if (getattr(m, "__file__", None) or "").find("site-packages") >= 0)
from_layer = [p for p in compiled if p.startswith(layer)]
print(sys.version_info[:2], botocore.__file__.startswith(layer), pydantic_core.__file__.startswith(layer),
      len(from_layer), outside[:5])
"""


def _layer_and_functions(synth: harness.Synth) -> tuple[Path, list[Path]]:
    resources = synth.template["Resources"].values()
    layer = next(
        synth.outdir / f"asset.{r['Properties']['Content']['S3Key'].split('.')[0]}"
        for r in resources
        if r["Type"] == "AWS::Lambda::LayerVersion"
    )
    functions = [
        synth.outdir / f"asset.{r['Properties']['Code']['S3Key'].split('.')[0]}"
        for r in resources
        if r["Type"] == "AWS::Lambda::Function" and str(r["Properties"].get("Runtime", "")).startswith("python")
    ]
    return layer / "python", functions


LAMBDA_ENV = {
    "BUCKET": "b",
    "POWERTOOLS_TRACE_DISABLED": "1",
    "AWS_DEFAULT_REGION": "us-east-1",
    "PYDANTIC_DISABLE_PLUGINS": "__all__",
}


@needs_313
@pytest.mark.parametrize("context", ["default", "nova-bridge"])
def test_every_handler_imports_from_the_layer_alone_on_cpython_313_without_compiling(context):
    """As Lambda's python3.13 runtime would: the layer and the function's folder only (``-S``: no
    site-packages, so boto3 comes from the layer too), the stack synthesized for this machine's architecture."""
    if harness.NATIVE_ARCHITECTURE is None:
        pytest.skip("this machine is neither x86-64 nor aarch64")
    extra = json.loads(harness.NOVA_BRIDGE_CONTEXT) if context == "nova-bridge" else {}
    synth = harness.synthesized(
        json.dumps({**json.loads(harness.architecture_context(harness.NATIVE_ARCHITECTURE)), **extra}, sort_keys=True)
    )
    layer, functions = _layer_and_functions(synth)
    handlers = {p.parent.name for p in (ROOT / "functions").glob("*/handler.py")}
    expected = handlers if context == "nova-bridge" else {h for h in handlers if not h.startswith("nova_")}
    assert len(functions) == len(expected)
    env = {"PATH": os.environ["PATH"], **LAMBDA_ENV}
    proc = subprocess.run(
        [PYTHON_313, "-S", "-c", _IMPORT_ALL, str(layer), *map(str, functions)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[0] == "(3, 13) True True 0 []", proc.stdout


_SCORE = """
import importlib.util, json, sys
sys.path[:0] = [sys.argv[2], sys.argv[1]]
spec = importlib.util.spec_from_file_location("handler", sys.argv[2] + "/handler.py")
module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
class Context:
    function_name = "reward"; memory_limit_in_mb = 1769; aws_request_id = "r"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:reward"
    def get_remaining_time_in_millis(self): return 60_000
samples = [{"id": i, "messages": [{"role": "user", "content": "What is 6 * 7? End with #### <answer>."},
            {"role": "nova_assistant", "content": [{"type": "text", "text": f"#### {answer}"}]}],
            "metadata": {"reference_answer": "42"}} for i, answer in enumerate((42, 41))]
print(json.dumps([(r["id"], r["aggregate_reward_score"]) for r in module.lambda_handler(samples, Context())]))
"""


@needs_313
def test_the_single_turn_reward_scores_a_batch_on_cpython_313_from_the_layer(synth):
    """One real invocation of a handler on 3.13 (gsm8k: pydantic, Powertools logging and metrics, the reward)."""
    if harness.NATIVE_ARCHITECTURE is None:
        pytest.skip("this machine is neither x86-64 nor aarch64")
    native = harness.synthesized(harness.architecture_context(harness.NATIVE_ARCHITECTURE))
    layer, functions = _layer_and_functions(native)
    (folder,) = [f for f in functions if (f / "handler.py").read_text().startswith('"""Nova Forge single-turn')]
    env = {"PATH": os.environ["PATH"], **LAMBDA_ENV, "REWARD_NAME": "gsm8k", "POWERTOOLS_METRICS_NAMESPACE": "T"}
    proc = subprocess.run(
        [PYTHON_313, "-S", "-c", _SCORE, str(layer), str(folder)], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    scores = dict(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert scores[0] > scores[1]  # the right answer scores above the wrong one


_CODE = """
import importlib.util, json, sys
sys.path[:0] = [sys.argv[2], sys.argv[1]]
spec = importlib.util.spec_from_file_location("handler", sys.argv[2] + "/handler.py")
module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
class Context:
    function_name = "reward"; memory_limit_in_mb = 1769; aws_request_id = "r"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:reward"
    def get_remaining_time_in_millis(self): return 120_000
tests = "import unittest\\nclass T(unittest.TestCase):\\n    def test_a(self):\\n        self.assertEqual(add(1, 2), 3)\\n"
answers = ["def add(a, b):\\n    return a + b", "def add(a, b):\\n    return a - b", "import os\\nos.fork()"]
samples = [{"id": i, "messages": [{"role": "user", "content": "Write add(a, b)."},
            {"role": "nova_assistant", "content": [{"type": "text", "text": "```python\\n" + code + "\\n```"}]}],
            "metadata": {"tests": tests, "entry_point": "add"}} for i, code in enumerate(answers)]
print(json.dumps([(r["id"], r["aggregate_reward_score"], {m["name"]: m["value"] for m in r["metrics_list"]})
                  for r in module.lambda_handler(samples, Context())]))
"""


@needs_313
def test_the_single_turn_reward_runs_model_code_in_the_sandbox_on_cpython_313(synth):
    """code_correctness on 3.13 from the layer: the sandbox runs each answer's tests (on this machine's kernel and
    architecture; the sandbox's own checks for 3.13 are tests/security's)."""
    if harness.NATIVE_ARCHITECTURE is None:
        pytest.skip("this machine is neither x86-64 nor aarch64")
    layer, functions = _layer_and_functions(
        harness.synthesized(harness.architecture_context(harness.NATIVE_ARCHITECTURE))
    )
    (folder,) = [f for f in functions if (f / "handler.py").read_text().startswith('"""Nova Forge single-turn')]
    env = {
        "PATH": os.environ["PATH"],
        **LAMBDA_ENV,
        "REWARD_NAME": "code_correctness",
        "POWERTOOLS_METRICS_NAMESPACE": "T",
        "REWARDPIPE_SANDBOX_WORKERS": "2",
        "REWARDPIPE_SANDBOX_MEMORY_MB": "512",
    }
    proc = subprocess.run(
        [PYTHON_313, "-S", "-c", _CODE, str(layer), str(folder)], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {i: metrics for i, _score, metrics in json.loads(proc.stdout.strip().splitlines()[-1])}
    assert results[0]["tests_passed"] == 1 and results[0]["reward_error"] == 0
    assert results[1]["tests_passed"] == 0 and results[1]["reward_error"] == 0
    assert results[2]["tests_passed"] == 0  # no add(): the fork attempt scores nothing and breaks nothing
