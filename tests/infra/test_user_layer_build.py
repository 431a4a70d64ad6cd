"""The user layer's build (stacks/user_layer.py) with pip stood in for: what pip is asked, what is kept of what it
installs, what fails and how it is named, and the content cache that makes a later synth run no pip at all.
(The real pip build of tests/fixtures/one_module_pkg is what tests/infra/test_user_package.py deploys.)"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from stacks import packaging, user_layer
from stacks.config import SettingsError
from stacks.user_layer import UserLayerError, build_user_layer

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "one_module_pkg"
PINS = ["six==1.17.0", "pydantic==2.14.3"]
ELF_HEADER = {"arm64": 0xB7, "x86_64": 0x3E}
_REAL_RUN = subprocess.run


def _elf(machine: int) -> bytes:
    header = bytearray(64)
    header[:4] = b"\x7fELF"
    header[4], header[5] = 2, 1  # 64-bit, little-endian
    header[18:20] = machine.to_bytes(2, "little")
    return bytes(header)


class FakePip:
    """Records pip's commands; ``wheel`` writes a wheel, ``install`` writes what a real install of the project
    would (its module and dist-info), a distribution the rewardpipe layer ships (six), the rewardpipe stub's
    dist-info and, optionally, a compiled module or a failure."""

    def __init__(self, *, so_machine: int | None = None, fail_with: str | None = None) -> None:
        self.commands: list[list[str]] = []
        self.so_machine = so_machine
        self.fail_with = fail_with
        self.constraints = ""

    def __call__(self, command, **kwargs):
        if "pip" not in command:  # the byte-code compile runs for real
            return _REAL_RUN(command, **kwargs)
        self.commands.append(list(command))
        verb = command[command.index("pip") + 1]
        if verb == "wheel":
            out = Path(command[command.index("--wheel-dir") + 1])
            (out / "one_module_reward-0.1.0-py3-none-any.whl").write_bytes(b"wheel")
            return subprocess.CompletedProcess(command, 0, "", "")
        self.constraints = Path(command[command.index("--constraint") + 1]).read_text()
        if self.fail_with:
            return subprocess.CompletedProcess(command, 1, "", self.fail_with)
        target = Path(command[command.index("--target") + 1])
        (target / "one_module_reward.py").write_text("X = 1\n")
        self._dist(target, "one_module_reward-0.1.0", ["one_module_reward.py"])
        (target / "six.py").write_text("# six\n")
        self._dist(target, "six-1.17.0", ["six.py"])
        self._dist(target, "rewardpipe-0.1.0+rewardpipelayer", [])
        if self.so_machine is not None:
            (target / "fast.cpython-313-aarch64-linux-gnu.so").write_bytes(_elf(self.so_machine))
            (target / "libfast.so.1.2").write_bytes(_elf(self.so_machine))
            (target / "fast.socket.py").write_text("# a module, not a shared object\n")
        return subprocess.CompletedProcess(command, 0, "", "")

    @staticmethod
    def _dist(target: Path, name: str, files: list[str]) -> None:
        info = target / f"{name}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Name: {name.rsplit('-', 1)[0]}\n")
        (info / "direct_url.json").write_text('{"url": "file:///tmp/build/x.whl"}')
        record = [f"{f},," for f in files] + [
            f"{info.name}/METADATA,,",
            f"{info.name}/RECORD,,",
            f"{info.name}/direct_url.json,,",
        ]
        (info / "RECORD").write_text("\n".join(record) + "\n")

    def installs(self) -> list[list[str]]:
        return [c for c in self.commands if c[c.index("pip") + 1] == "install"]


@pytest.fixture
def project(tmp_path) -> Path:
    copy = tmp_path / "project"
    shutil.copytree(FIXTURE, copy)
    return copy


@pytest.mark.parametrize(
    "architecture, platform", [("arm64", "manylinux2014_aarch64"), ("x86_64", "manylinux2014_x86_64")]
)
def test_pip_installs_lambdas_wheels_constrained_to_the_layers_pins(tmp_path, project, architecture, platform):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "fast-1.0-cp313-cp313-manylinux2014_aarch64.whl").write_bytes(b"w")
    pip = FakePip()
    build_user_layer(
        [str(project), str(wheels), "tiny-dep==1.2"], architecture, cache=tmp_path / "cache", run=pip, pins=PINS
    )
    wheel_command, install = pip.commands
    assert wheel_command[wheel_command.index("pip") + 1 :][:2] == ["wheel", "--no-deps"]
    assert Path(wheel_command[-1]).name.endswith(project.name) and wheel_command[-1] != str(project)  # a copy
    joined = " ".join(install)
    for flag in (
        f"--platform {platform}",
        "--only-binary=:all:",
        "--python-version 3.13",
        "--implementation cp",
        "--target ",
        "--constraint ",
        f"--find-links {wheels}",
    ):
        assert flag in joined
    assert install[-2:][1] == "tiny-dep==1.2" and install[-2].endswith("one_module_reward-0.1.0-py3-none-any.whl")
    pinned = pip.constraints.splitlines()
    assert pinned[:-1] == PINS
    assert pinned[-1] == f"rewardpipe=={user_layer.rewardpipe_version()}+{user_layer.STUB_LOCAL}"


def test_what_the_rewardpipe_layer_ships_is_removed_and_the_rest_compiled(tmp_path, project):
    layer = build_user_layer(
        [str(project)], "arm64", cache=tmp_path / "cache", run=FakePip(), pins=PINS, shipped=["six"]
    )
    python = layer / "python"
    assert sorted(p.name for p in python.iterdir()) == [
        "__pycache__",
        "one_module_reward-0.1.0.dist-info",
        "one_module_reward.py",
    ]
    assert not list(python.rglob("direct_url.json"))  # a path of the build machine, not content
    if packaging.lambda_python():
        assert list((python / "__pycache__").glob("one_module_reward.cpython-313.pyc"))
    assert packaging.foreign_bytecode(python) == []
    assert user_layer.manifest(layer)["distributions"] == ["one_module_reward-0.1.0"]


def test_a_later_build_of_the_same_content_runs_no_pip(tmp_path, project):
    first = build_user_layer([str(project)], "arm64", cache=tmp_path / "cache", run=FakePip(), pins=PINS)

    def offline(command, **kwargs):
        if "pip" in command:
            raise AssertionError(f"pip ran again: {command}")
        return _REAL_RUN(command, **kwargs)

    assert build_user_layer([str(project)], "arm64", cache=tmp_path / "cache", run=offline, pins=PINS) == first
    (project / "one_module_reward.py").write_text((project / "one_module_reward.py").read_text() + "\n# changed\n")
    pip = FakePip()
    changed = build_user_layer([str(project)], "arm64", cache=tmp_path / "cache", run=pip, pins=PINS)
    assert changed != first and pip.commands
    # the platform and the pins are part of the content too
    key = user_layer.content_key
    assert key([str(project)], "arm64", PINS) != key([str(project)], "x86_64", PINS)
    assert user_layer.content_key([str(project)], "arm64", PINS) != user_layer.content_key(
        [str(project)], "arm64", ["six==1.16.0"]
    )


def test_a_compiled_module_of_another_architecture_fails_naming_it(tmp_path, project):
    with pytest.raises(UserLayerError, match=r"fast\.cpython-313-aarch64-linux-gnu\.so is not a CPython 3\.13 arm64"):
        build_user_layer(
            [str(project)], "arm64", cache=tmp_path / "cache", run=FakePip(so_machine=ELF_HEADER["x86_64"]), pins=PINS
        )
    assert not [p for p in (tmp_path / "cache").iterdir()]  # nothing half-built is cached
    layer = build_user_layer(
        [str(project)], "arm64", cache=tmp_path / "cache", run=FakePip(so_machine=ELF_HEADER["arm64"]), pins=PINS
    )
    assert (layer / "python" / "fast.cpython-313-aarch64-linux-gnu.so").is_file()
    assert (layer / "python" / "libfast.so.1.2").is_file() and (layer / "python" / "fast.socket.py").is_file()


PIP_CONFLICT = """ERROR: Cannot install one-module-reward==0.1.0 because these package versions have \
conflicting dependencies.

The conflict is caused by:
    one-module-reward 0.1.0 depends on pydantic<2
    The user requested (constraint) pydantic==2.14.3

To fix this you could try to:
1. loosen the range of package versions you've specified
"""


def test_a_conflict_with_the_layers_pins_names_both(tmp_path, project):
    with pytest.raises(UserLayerError) as caught:
        build_user_layer(
            [str(project)], "arm64", cache=tmp_path / "cache", run=FakePip(fail_with=PIP_CONFLICT), pins=PINS
        )
    message = str(caught.value)
    assert isinstance(caught.value, SettingsError)  # app.py prints it as an error line and exits 2
    assert "one-module-reward 0.1.0 depends on pydantic<2" in message
    assert "the rewardpipe layer ships pydantic==2.14.3" in message


def test_a_dependency_without_a_lambda_wheel_says_how_to_provide_one(tmp_path, project):
    missing = (
        "ERROR: Could not find a version that satisfies the requirement fastthing==1.0 (from versions: none)\n"
        "ERROR: No matching distribution found for fastthing==1.0\n"
    )
    with pytest.raises(UserLayerError) as caught:
        build_user_layer([str(project)], "arm64", cache=tmp_path / "cache", run=FakePip(fail_with=missing), pins=PINS)
    assert "no manylinux2014_aarch64 CPython 3.13 wheel for fastthing==1.0" in str(caught.value)
    assert "add that directory to rewardpipe.packages" in str(caught.value)


def test_a_project_pip_cannot_build_fails_naming_the_entry(tmp_path, project):
    def broken(command, **kwargs):
        return subprocess.CompletedProcess(command, 1, "", "error: invalid pyproject.toml")

    with pytest.raises(UserLayerError, match=r"entry '.*project'.*could not build the project into a wheel"):
        build_user_layer([str(project)], "arm64", cache=tmp_path / "cache", run=broken, pins=PINS)


def test_names_in_both_layers_are_found(tmp_path):
    ours, theirs = tmp_path / "u", tmp_path / "r"
    for d in (ours, theirs):
        (d / "__pycache__").mkdir(parents=True)
    (ours / "six.py").write_text("")
    (ours / "mine.py").write_text("")
    (theirs / "six.py").write_text("")
    assert user_layer.duplicates(ours, theirs) == ["six.py"]


@pytest.mark.parametrize(
    "entry, kind",
    [
        (str(FIXTURE), "project"),
        ("acme-rl==1.2.0", "requirement"),
        ("acme_rl[judge]==1.2.0", "requirement"),
        ("acme-rl", "invalid"),
        ("acme-rl>=1", "invalid"),
        ("./missing", "invalid"),
    ],
)
def test_entries_are_classified(entry, kind):
    assert user_layer.classify(entry)[0] == kind
