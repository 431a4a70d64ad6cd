"""A user's package (tests/fixtures/user_pkg/acme_rl), installed the way pip installs one: the package and a
``.dist-info`` with ``entry_points.txt`` in a folder on ``sys.path`` (no mock of importlib.metadata)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "user_pkg"
GUESS_TASKS = FIXTURE / "data" / "guess_tasks.jsonl"
JSON_SAMPLES = FIXTURE / "data" / "json_samples.jsonl"

ENTRY_POINTS = """\
[rewardpipe.environments]
guess = acme_rl.guess:ENVIRONMENT

[rewardpipe.rewards]
json_answer = acme_rl.json_answer:JSON_ANSWER
json_flaky = acme_rl.json_answer:FLAKY
"""


def install_distribution(
    site: Path, name: str, version: str, entry_points: str, package: Path | None = None, top_level: str | None = None
) -> Path:
    """Write a distribution into ``site`` as pip leaves one: the package and ``<name>-<version>.dist-info``."""
    site.mkdir(parents=True, exist_ok=True)
    if package is not None:
        shutil.copytree(package, site / package.name, dirs_exist_ok=True)
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(entry_points)
    (info / "top_level.txt").write_text(f"{top_level or (package.name if package else name)}\n")
    return site


def _forget(prefix: str) -> None:
    for module in [m for m in sys.modules if m == prefix or m.startswith(prefix + ".")]:
        del sys.modules[module]


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder on sys.path to install distributions into (removed again after the test)."""
    folder = tmp_path / "site-packages"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    _forget("acme_rl")
    _forget("other_rl")


@pytest.fixture
def acme(site):
    """acme-rl 0.3.1 installed: its package and its entry points."""
    install_distribution(site, "acme-rl", "0.3.1", ENTRY_POINTS, FIXTURE / "acme_rl")
    _forget("acme_rl")
    return site


@pytest.fixture
def cli():
    from typer.testing import CliRunner

    from rewardpipe.cli import app

    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)

    return invoke


class CharCodec:
    """A TRL token codec for tests: a token is a character; 0 is EOS; the environment's replies are written
    ``User: <reply>`` then ``Assistant: ``."""

    eos_id = 0

    def prompt_ids(self, prompt):
        return [ord(c) for c in (prompt if isinstance(prompt, str) else prompt[-1]["content"])]

    def decode(self, ids):
        return "".join(chr(i) for i in ids if i)

    def feedback_ids(self, reply, conversational):
        return [ord(c) for c in f"\nUser: {reply}\nAssistant: "]
