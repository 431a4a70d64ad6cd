"""The Lambda layer builds on any laptop: on a machine whose Python is not CPython 3.11 x86-64 Linux
(macOS, arm64) the layer's dependencies come from pip's Lambda-platform wheels, without Docker."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from stacks import packaging


def test_pip_fetches_the_lambda_platform_wheels_at_the_pinned_versions(tmp_path):
    requirements = packaging.layer_requirements()
    assert "pydantic-core==" + __import__("importlib.metadata").metadata.version("pydantic-core") in requirements
    command = packaging.pip_layer_command(tmp_path, requirements)
    joined = " ".join(command)
    for flag in ("--platform manylinux2014_x86_64", "--only-binary=:all:", "--python-version 3.11",
                 "--implementation cp", f"--target {tmp_path}", "--no-deps"):
        assert flag in joined
    assert command[-len(requirements):] == requirements


@pytest.mark.parametrize("setting, native, expected", [
    ("auto", True, False), ("auto", False, True), ("pip", True, True), ("venv", False, False)])
def test_pip_is_used_exactly_when_this_interpreter_cannot_supply_the_lambda_build(monkeypatch, setting, native, expected):
    monkeypatch.setattr(packaging, "matches_lambda_platform", lambda: native)
    assert packaging.use_pip({packaging.LAYER_BUILD_ENV: setting}) is expected


def test_an_unknown_layer_build_setting_is_named():
    with pytest.raises(packaging.PackagingError, match="REWARDPIPE_LAYER_BUILD"):
        packaging.use_pip({packaging.LAYER_BUILD_ENV: "docker"})


def _fake_pip(calls: list):
    """Stands in for pip: 'downloads' by copying the installed distributions' files into --target."""

    def run(command, **_kwargs):
        calls.append(command)
        target = Path(command[command.index("--target") + 1])
        for requirement in command[command.index("--target") + 2:]:
            packaging.copy_distribution(requirement.split("==")[0], target)
        return subprocess.CompletedProcess(command, 0, "", "")

    return run


def test_wheels_are_fetched_once_per_version_set_and_reused(tmp_path):
    calls: list = []
    first = packaging.pip_layer_dependencies(["pydantic-core==2.0", "jmespath==1.0"], cache=tmp_path, run=_fake_pip(calls))
    again = packaging.pip_layer_dependencies(["jmespath==1.0", "pydantic-core==2.0"], cache=tmp_path, run=_fake_pip(calls))
    assert first == again and len(calls) == 1
    assert list(first.glob("pydantic_core/_pydantic_core*.so"))


def test_a_pip_failure_fails_the_synth_with_pips_message(tmp_path):
    def failing(command, **_kwargs):
        return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution found for pydantic-core==9")

    with pytest.raises(packaging.PackagingError, match="No matching distribution"):
        packaging.pip_layer_dependencies(["pydantic-core==9"], cache=tmp_path, run=failing)
    assert not [p for p in tmp_path.iterdir() if (p / ".complete").exists()]


def test_a_laptop_that_is_not_linux_x86_64_stages_the_layer_from_pip(monkeypatch, tmp_path):
    calls: list = []
    monkeypatch.setattr(packaging, "matches_lambda_platform", lambda: False)
    monkeypatch.delenv(packaging.LAYER_BUILD_ENV, raising=False)
    monkeypatch.setattr(packaging, "LAYER_CACHE", tmp_path)
    monkeypatch.setattr(packaging.subprocess, "run", _fake_pip(calls))
    layer = Path(packaging.stage_layer.__wrapped__()) / "python"
    assert len(calls) == 1
    assert (layer / "rewardpipe" / "single_turn.py").is_file() and not (layer / "rewardpipe" / "cli").exists()
    assert list(layer.glob("pydantic_core/_pydantic_core.cpython-311-x86_64-linux-gnu.so"))
    assert not (layer / ".complete").exists()
