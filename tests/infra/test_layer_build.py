"""The Lambda layer builds on any laptop: on a machine whose Python is not CPython 3.13 Linux of the
functions' architecture (macOS, or x86-64 building the default arm64 layer) the layer's dependencies come
from pip's Lambda-platform wheels, without Docker, and every compiled module is checked for that architecture."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from stacks import packaging


@pytest.mark.parametrize(
    "architecture, platform",
    [(None, "manylinux2014_aarch64"), ("arm64", "manylinux2014_aarch64"), ("x86_64", "manylinux2014_x86_64")],
)
def test_pip_fetches_the_lambda_platform_wheels_at_the_pinned_versions(tmp_path, architecture, platform):
    requirements = packaging.layer_requirements()
    assert "pydantic-core==" + __import__("importlib.metadata").metadata.version("pydantic-core") in requirements
    arch = {} if architecture is None else {"architecture": architecture}
    command = packaging.pip_layer_command(tmp_path, requirements, **arch)
    joined = " ".join(command)
    for flag in (
        f"--platform {platform}",
        "--only-binary=:all:",
        "--python-version 3.13",
        "--implementation cp",
        f"--target {tmp_path}",
        "--no-deps",
    ):
        assert flag in joined
    assert command[-len(requirements) :] == requirements


def test_an_unknown_architecture_is_named(tmp_path):
    with pytest.raises(packaging.PackagingError, match="'sparc'"):
        packaging.pip_layer_command(tmp_path, [], "sparc")


def test_this_interpreter_matches_exactly_one_lambda_architecture_or_none():
    import platform
    import sys

    matches = [a for a in packaging.LAMBDA_PLATFORMS if packaging.matches_lambda_platform(a)]
    expected = {"x86_64": ["x86_64"], "aarch64": ["arm64"]}.get(platform.machine(), [])
    if sys.implementation.cache_tag != packaging.LAMBDA_CACHE_TAG:
        expected = []  # only a CPython 3.13 can supply the python3.13 runtime's compiled modules
    assert matches == expected


@pytest.mark.parametrize(
    "setting, native, expected",
    [("auto", True, False), ("auto", False, True), ("pip", True, True), ("venv", False, False)],
)
def test_pip_is_used_exactly_when_this_interpreter_cannot_supply_the_lambda_build(
    monkeypatch, setting, native, expected
):
    monkeypatch.setattr(packaging, "matches_lambda_platform", lambda architecture=None: native)
    assert packaging.use_pip({packaging.LAYER_BUILD_ENV: setting}) is expected


def test_an_unknown_layer_build_setting_is_named():
    with pytest.raises(packaging.PackagingError, match="REWARDPIPE_LAYER_BUILD"):
        packaging.use_pip({packaging.LAYER_BUILD_ENV: "docker"})


_REAL_RUN = subprocess.run


def _fake_pip(calls: list):
    """Stands in for pip: 'downloads' by copying the installed distributions' files into --target, this
    interpreter's compiled modules renamed as CPython 3.13's (what a cp313 wheel of this machine holds)."""

    def run(command, **kwargs):
        if "pip" not in command:  # the layer's byte-code compile is not pip's: let it run
            return _REAL_RUN(command, **kwargs)
        calls.append(command)
        target = Path(command[command.index("--target") + 1])
        for requirement in command[command.index("--target") + 2 :]:
            packaging.copy_distribution(requirement.split("==")[0], target)
        for module in target.rglob("*.cpython-311-*.so"):
            module.rename(module.with_name(module.name.replace(".cpython-311-", ".cpython-313-")))
        return subprocess.CompletedProcess(command, 0, "", "")

    return run


def test_wheels_are_fetched_once_per_version_set_and_reused(tmp_path):
    calls: list = []
    first = packaging.pip_layer_dependencies(
        ["pydantic-core==2.0", "jmespath==1.0"], cache=tmp_path, run=_fake_pip(calls)
    )
    again = packaging.pip_layer_dependencies(
        ["jmespath==1.0", "pydantic-core==2.0"], cache=tmp_path, run=_fake_pip(calls)
    )
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
    monkeypatch.setattr(packaging, "matches_lambda_platform", lambda architecture=None: False)
    monkeypatch.delenv(packaging.LAYER_BUILD_ENV, raising=False)
    monkeypatch.setattr(packaging, "LAYER_CACHE", tmp_path)
    monkeypatch.setattr(packaging.subprocess, "run", _fake_pip(calls))
    # The fake pip copies this machine's x86-64 files, so this stages the x86_64 layer.
    layer = Path(packaging.stage_layer.__wrapped__("x86_64")) / "python"
    assert len(calls) == 1
    assert (layer / "rewardpipe" / "single_turn.py").is_file() and not (layer / "rewardpipe" / "cli").exists()
    assert list(layer.glob("pydantic_core/_pydantic_core.cpython-313-x86_64-linux-gnu.so"))
    assert not (layer / ".complete").exists()


def _stage_with_this_machines_binaries(monkeypatch, tmp_path, architecture: str) -> Path:
    monkeypatch.setattr(packaging, "LAYER_CACHE", tmp_path)
    monkeypatch.setattr(packaging.subprocess, "run", _fake_pip([]))
    monkeypatch.setenv(packaging.LAYER_BUILD_ENV, "pip")
    return Path(packaging.stage_layer.__wrapped__(architecture))


def test_a_compiled_module_of_the_wrong_architecture_fails_the_synth_naming_it(monkeypatch, tmp_path):
    """This machine's x86-64 pydantic-core or wrapt in the arm64 layer would be an ImportError at the first
    cold start on AWS; the synth refuses it and names the file."""
    import platform

    if platform.machine() != "x86_64":
        pytest.skip("stages this machine's own (x86-64) binaries as the arm64 layer")
    with pytest.raises(packaging.PackagingError, match=r"_pydantic_core\.cpython-313-x86_64.*not a CPython 3.13 arm64"):
        _stage_with_this_machines_binaries(monkeypatch, tmp_path, "arm64")


def test_an_abi3_module_is_judged_by_its_elf_header(tmp_path):
    """A stable-ABI module's name carries no architecture; its ELF e_machine does."""
    python_dir = tmp_path / "python"
    (python_dir / "pydantic_core").mkdir(parents=True)
    elf = bytearray(64)
    elf[:4], elf[4], elf[5] = b"\x7fELF", 2, 1
    elf[18:20] = (0xB7).to_bytes(2, "little")
    (python_dir / "pydantic_core" / "_pydantic_core.cpython-313-aarch64-linux-gnu.so").write_bytes(elf)
    (python_dir / "native.abi3.so").write_bytes(elf)
    packaging._check_platform(python_dir, "arm64")
    elf[18:20] = (0x3E).to_bytes(2, "little")
    (python_dir / "native.abi3.so").write_bytes(elf)
    with pytest.raises(packaging.PackagingError, match="native.abi3.so"):
        packaging._check_platform(python_dir, "arm64")


@pytest.mark.parametrize("architecture, machine", [("arm64", 0xB7), ("x86_64", 0x3E)])
def test_the_real_layer_holds_only_modules_for_its_architecture(architecture, machine):
    """Both layers as the synth builds them (arm64 from the wheel cache `make install-dev` fills)."""
    python_dir = Path(packaging.stage_layer(architecture)) / "python"
    binaries = sorted(python_dir.rglob("*.so"))
    assert {b.name.split(".")[0] for b in binaries} >= {"_pydantic_core", "_wrappers"}
    assert {packaging.elf_machine(b) for b in binaries} == {machine}
