"""`rewardpipe init DIR`: the package it writes works as it stands (its own pytest test passes; doctor, run and
envs find it by its short name once installed), its names are checked before anything is written, and it never
writes into a directory that holds something, nor replaces a file without saying so."""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from rewardpipe.cli import init_cmd
from rewardpipe.store import LocalStore
from tests.api.conftest import install_distribution

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "rewardpipe" / "cli" / "init_template"
#: How `rewardpipe envs --json` lists the environment of the package `rewardpipe init acme-quiz` writes, installed.
LISTED = {
    "name": "acme_quiz",
    "reference": "acme_quiz.environment:ENVIRONMENT",
    "version": "0.1.0",
    "distribution": "acme-quiz 0.1.0",
    "builtin": False,
    "problem": None,
}


def _entry_points_txt(pyproject: dict) -> str:
    """entry_points.txt as pip writes it from a pyproject's [project.entry-points] tables."""
    out = []
    for group, entries in pyproject["project"]["entry-points"].items():
        out.append(f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in entries.items()))
    return "\n".join(out)


def _forget(package: str) -> None:
    for module in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
        del sys.modules[module]


@pytest.fixture
def installed(tmp_path, monkeypatch, cli):
    """``rewardpipe init`` run into a fresh folder, then installed as pip would leave it (the package's src/ on
    sys.path, a .dist-info with the entry points its pyproject.toml declares)."""
    target = tmp_path / "acme-quiz"
    result = cli("init", target)
    assert result.exit_code == 0, result.output
    pyproject = tomllib.loads((target / "pyproject.toml").read_text())
    site = install_distribution(
        tmp_path / "site",
        pyproject["project"]["name"],
        pyproject["project"]["version"],
        _entry_points_txt(pyproject),
        top_level="acme_quiz",
    )
    monkeypatch.syspath_prepend(str(target / "src"))
    monkeypatch.syspath_prepend(str(site))
    _forget("acme_quiz")
    yield target, site
    _forget("acme_quiz")


def test_the_package_init_writes_runs_its_own_test_doctor_run_and_envs(installed, cli, tmp_path):
    target, _ = installed
    assert sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file()) == [
        ".gitignore",
        "README.md",
        "pyproject.toml",
        "src/acme_quiz/__init__.py",
        "src/acme_quiz/environment.py",
        "src/acme_quiz/rewards.py",
        "tasks/train.jsonl",
        "tests/test_acme_quiz.py",
    ]
    pyproject = tomllib.loads((target / "pyproject.toml").read_text())
    assert pyproject["project"]["entry-points"] == {
        "rewardpipe.environments": {"acme_quiz": "acme_quiz.environment:ENVIRONMENT"},
        "rewardpipe.rewards": {"acme_quiz": "acme_quiz.rewards:REWARD"},
    }

    # Its own test, as its user runs it: pytest in the package's folder (pyproject puts src/ on the path).
    env = {**os.environ, "PYTHONPATH": "", "PYTHONDONTWRITEBYTECODE": "1"}
    tested = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=target,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-2000:]
    assert "3 passed" in tested.stdout

    listed = cli("envs", "--json")
    assert listed.exit_code == 0, listed.output
    found = json.loads(listed.stdout)
    mine = [row for row in found["environments"] if row["name"] == "acme_quiz"]
    assert mine == [LISTED]
    reward = next(row for row in found["rewards"] if row["name"] == "acme_quiz")
    assert reward["problem"] is None and reward["components"] == ["correct", "answer_format", "needed_a_hint"]

    doctor = cli("doctor", "--env", "acme_quiz", "--tasks", target / "tasks/train.jsonl", "--json")
    assert doctor.exit_code == 0, doctor.output
    report = json.loads(doctor.stdout)
    assert report["broken"] == [] and report["tasks"] == 4
    for diagnosis in report["diagnoses"]:
        assert diagnosis["warnings"] == []
        assert {name: len(values) for name, values in diagnosis["component_values"].items()} == {
            "correct": 2,
            "answer_format": 2,
            "needed_a_hint": 2,
        }

    store = tmp_path / "store"
    run = cli(
        "run",
        "--env",
        "acme_quiz",
        "--tasks",
        target / "tasks/train.jsonl",
        "--policy",
        "scripted",
        "--steps",
        "2",
        "-k",
        "4",
        "--groups-per-step",
        "4",
        "--out",
        store,
        "--run-id",
        "quiz",
        "--json",
    )
    assert run.exit_code == 0, run.output
    records = list(LocalStore(store).iter_records("quiz"))
    assert len(records) == 2 * 4 * 4 and all(r.status == "scored" for r in records)
    for name in ("correct", "answer_format", "needed_a_hint"):  # the scripted policy gives real variance
        assert len({r.components[name] for r in records}) == 2
    manifest = LocalStore(store).get_json("runs/quiz/manifest.json")
    assert manifest["environment"] == "acme_quiz" and manifest["packages"] == {"acme-quiz": "0.1.0"}
    assert manifest["components"]["needed_a_hint"] == {"range": [-1.0, 0.0], "role": "penalty", "weight": 0.3}


def test_the_written_package_is_named_after_dir_or_as_asked(cli, tmp_path):
    result = cli("init", tmp_path / "My.Quiz-RL")
    assert result.exit_code == 0, result.output
    pyproject = tomllib.loads((tmp_path / "My.Quiz-RL/pyproject.toml").read_text())
    assert pyproject["project"]["name"] == "My.Quiz-RL"
    assert (tmp_path / "My.Quiz-RL/src/my_quiz_rl/environment.py").is_file()
    assert 'name = "my_quiz_rl"' in (tmp_path / "My.Quiz-RL/src/my_quiz_rl/environment.py").read_text()

    result = cli("init", tmp_path / "x", "--name", "acme-rl", "--package", "acme_rl2", "--env-name", "trivia")
    assert result.exit_code == 0, result.output
    pyproject = tomllib.loads((tmp_path / "x/pyproject.toml").read_text())
    assert pyproject["project"]["name"] == "acme-rl"
    assert pyproject["project"]["entry-points"]["rewardpipe.environments"] == {
        "trivia": "acme_rl2.environment:ENVIRONMENT"
    }
    assert pyproject["project"]["dependencies"] == [f"rewardpipe{init_cmd.rewardpipe_requirement()}"]
    assert "--env trivia" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--name", "my quiz"], "'my quiz' is not a valid distribution name"),
        (["--name", "-quiz"], "'-quiz' is not a valid distribution name"),
        (["--package", "2fast"], "'2fast' cannot be an import name"),
        (["--package", "class"], "'class' cannot be an import name"),
        (["--package", "quiz-rl"], "'quiz-rl' cannot be an import name"),
        (["--package", "café"], "'café' cannot be an import name"),
        (["--package", "json"], "standard-library module"),
        (["--package", "rewardpipe"], "belongs to rewardpipe"),
        (["--package", "numpy"], "a module named 'numpy' is already importable"),
        (["--env-name", "ask_before_coding"], "a built-in name"),
        (["--env-name", "gsm8k"], "a built-in name"),
        (["--env-name", "a:b"], "cannot be a short name"),
    ],
)
def test_a_bad_name_is_a_usage_error_naming_it_and_nothing_is_written(cli, tmp_path, args, message):
    target = tmp_path / "pkg"
    result = cli("init", target, *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and "error:" in result.stderr
    assert not target.exists()


def test_a_name_derived_from_dir_is_checked_too(cli, tmp_path):
    result = cli("init", tmp_path / "my quiz!")
    assert result.exit_code == 2 and "--name" in result.stderr and "'my quiz!'" in result.stderr
    assert not (tmp_path / "my quiz!").exists()
    result = cli("init", tmp_path / "os")  # a standard-library name as the import name
    assert result.exit_code == 2 and "--package" in result.stderr


def test_a_non_empty_dir_is_refused_unless_forced_and_no_file_is_replaced_silently(cli, tmp_path):
    target = tmp_path / "quiz"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    refused = cli("init", target)
    assert refused.exit_code == 1 and "is not empty" in refused.stderr and "--force" in refused.stderr
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt"]

    (target / "pyproject.toml").write_text("[project]\nname = 'mine'\n")
    forced = cli("init", target, "--force")
    assert forced.exit_code == 0, forced.output
    assert f"replaced {target / 'pyproject.toml'}" in forced.stderr
    assert forced.stderr.count("replaced ") == 1  # the files that did not exist were simply written
    assert (target / "notes.txt").read_text() == "mine"  # what init does not write is left alone
    assert "rewardpipe.environments" in (target / "pyproject.toml").read_text()

    again = cli("init", target, "--force")
    assert again.exit_code == 0 and "replaced" not in again.stderr and "unchanged" in again.stderr


def test_init_refuses_a_file_as_dir_a_symlink_inside_it_and_a_file_or_folder_in_the_way(cli, tmp_path):
    plain = tmp_path / "file"
    plain.write_text("x")
    result = cli("init", plain, "--name", "quiz")
    assert result.exit_code == 1 and "is not a directory" in result.stderr

    target, elsewhere = tmp_path / "quiz", tmp_path / "elsewhere"
    target.mkdir()
    elsewhere.mkdir()
    (target / "tasks").symlink_to(elsewhere, target_is_directory=True)
    result = cli("init", target, "--force")
    assert result.exit_code == 1 and "symbolic link" in result.stderr
    assert list(elsewhere.iterdir()) == [] and not (target / "pyproject.toml").exists()

    (target / "tasks").unlink()
    (target / "src").write_text("a file where the package's folder goes")
    result = cli("init", target, "--force", "--name", "quiz")
    assert result.exit_code == 1 and "is a file where init needs a folder" in result.stderr
    assert not (target / "pyproject.toml").exists()  # nothing written before the check
    (target / "src").unlink()
    (target / "README.md").mkdir()
    result = cli("init", target, "--force", "--name", "quiz")
    assert result.exit_code == 1 and "is a folder where init writes a file" in result.stderr
    assert not (target / "pyproject.toml").exists()


def test_every_template_is_written_filled_in_and_shipped_as_package_data():
    names = init_cmd.Names("acme-quiz", "acme_quiz", "acme_quiz")
    files = init_cmd.planned_files(names)
    assert sorted(init_cmd.LAYOUT.values()) == sorted(p.name for p in TEMPLATES.iterdir())
    for path, content in files.items():
        assert "{{" not in content and "}}" not in content, path
        if path.endswith(".py"):
            compile(content, path, "exec")
    for line in files["tasks/train.jsonl"].splitlines():
        json.loads(line)
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["rewardpipe"]
    for template in TEMPLATES.iterdir():
        relative = str(template.relative_to(ROOT / "rewardpipe"))
        assert any(fnmatch.fnmatch(relative, glob) for glob in globs), f"{relative} is not package data"
    with pytest.raises(KeyError, match="no value"):
        init_cmd.render("{{nope}}", {})


def test_the_rewardpipe_requirement_is_this_version_up_to_the_next_compatible_one():
    from packaging.specifiers import SpecifierSet

    from rewardpipe import __version__

    assert init_cmd.rewardpipe_requirement("0.1.0") == ">=0.1.0,<0.2"
    assert init_cmd.rewardpipe_requirement("0.4") == ">=0.4.0,<0.5"
    assert init_cmd.rewardpipe_requirement("1.2.3") == ">=1.2.3,<2"
    spec = SpecifierSet(init_cmd.rewardpipe_requirement())
    assert __version__ in spec and "0.0.1" not in spec


@pytest.mark.slow
def test_pip_installs_the_package_and_rewardpipe_finds_it(tmp_path, cli):
    """A real build and install (pip, isolated build, into a folder of its own; not the venv's site-packages)."""
    target, site = tmp_path / "acme-quiz", tmp_path / "site"
    assert cli("init", target).exit_code == 0
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(target)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pip.returncode == 0, pip.stderr[-3000:]
    env = {**os.environ, "PYTHONPATH": str(site)}
    rewardpipe = str(Path(sys.executable).with_name("rewardpipe"))
    listed = subprocess.run([rewardpipe, "envs", "--json"], env=env, capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0, listed.stderr
    assert LISTED in json.loads(listed.stdout)["environments"]
    doctor = subprocess.run(
        [rewardpipe, "doctor", "--env", "acme_quiz", "--tasks", "tasks/train.jsonl"],
        cwd=target,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert doctor.returncode == 0 and "4/4 tasks OK" in doctor.stdout, doctor.stdout + doctor.stderr
