"""Round thirty-four: a new user's journey from their own environment to a deployment, as the docs tell it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "your_own_environment"
GUIDE = ROOT / "docs" / "guides" / "deploy-your-own-package.md"


def _repository_settings() -> dict:
    return json.loads((ROOT / "cdk.json").read_text())["context"]["rewardpipe"]


def _keys_named(text: str, start: str, settings: dict) -> set[str]:
    """The settings' keys named in backticks in the paragraph of ``text`` that begins with ``start``."""
    paragraph = text[text.index(start) :].split("\n\n", 1)[0]
    return {name for name in re.findall(r"`([a-z_]+)`", paragraph) if name in settings}


def test_the_guides_three_lines_set_in_the_repositorys_cdk_json_deploy_the_users_environment_as_it_runs(
    monkeypatch,
):
    # Added as the guide said to the repository's cdk.json, the three lines failed the synth (`reward` beside its
    # old name `reward_name`, then `reward_weights` naming ask_before_coding's components), and its `max_turns: 6`
    # would have ended every deployed rollout at 6 turns whatever the user's environment says. The guide said which
    # lines to delete; cdk.json now sets `reward` (not its old name), so the guide's `reward` line replaces it and
    # two lines are deleted. Done as the guide says, the settings load and the environment keeps its own turn limit.
    from stacks.config import load_settings

    settings = _repository_settings()
    added = json.loads((EXAMPLE / "cdk_settings.json").read_text())
    assert "reward_name" not in settings and set(added) & set(settings) == {"reward"}
    guide = GUIDE.read_text()
    assert _keys_named(guide, "In the `rewardpipe` object", settings) == {"reward"}  # the line it replaces
    deleted = _keys_named(guide, "and delete the two lines", settings)
    assert deleted == {"reward_weights", "max_turns"}
    readme = (ROOT / "README.md").read_text()
    assert "Replace the `reward` line" in readme  # the README says the same
    assert _keys_named(readme, "delete the ", settings) == deleted

    monkeypatch.syspath_prepend(str(EXAMPLE))
    edited = {key: value for key, value in settings.items() if key not in deleted} | added
    loaded = load_settings(edited)
    from animals_env import ENVIRONMENT

    assert loaded.user_code.environment_ref == "animals_env:ENVIRONMENT"
    assert loaded.max_turns is None  # each rollout ends at the environment's own max_turns, as locally
    assert ENVIRONMENT.max_turns <= 20

    # and each deleted line is needed: kept, it fails the synth or silently overrides the environment's limit
    with pytest.raises(ValueError):
        load_settings(edited | {"reward_weights": settings["reward_weights"]})
    assert load_settings(edited | {"max_turns": settings["max_turns"]}).max_turns == 6


def test_the_aws_page_says_which_cdk_json_lines_are_ask_before_codings():
    # docs/aws.md's "Deploy your own package" gave the three lines to add and said nothing of the lines this
    # repository's cdk.json sets for ask_before_coding: kept, they fail the synth or cap every rollout at 6 turns.
    settings = _repository_settings()
    aws = (ROOT / "docs" / "aws.md").read_text()
    section = aws[aws.index("### Deploy your own package") :].split("\n### ", 1)[0]
    named = _keys_named(section, "In this repository's `cdk.json`", settings)
    assert named >= {"reward", "reward_weights", "max_turns"}, named


def test_the_reward_guide_states_the_component_naming_rule():
    # The guide where a user first names components said nothing of the refused names (`aggregate`, `errors`) nor
    # of `reward_error`, allowed (round seventeen) but named like the single-turn answer's error flag.
    from rewardpipe.components import RESERVED_NAMES

    guide = " ".join((ROOT / "docs" / "guides" / "write-a-reward.md").read_text().split())
    concept = " ".join((ROOT / "docs" / "concepts" / "component.md").read_text().split())
    for name in RESERVED_NAMES | {"reward_error"}:
        assert f"`{name}`" in guide and f"`{name}`" in concept, name
    assert "64" in guide


CONCEPT = ROOT / "docs" / "concepts" / "environment.md"
NOT_HOOKS = {"scripted_policy", "describe", "runs_code"}  # what the platform reads, not for an environment to define


def _hook_rows() -> dict[str, list[str]]:
    """The hook table of docs/concepts/environment.md: each hook's name and its parameter names, from
    ``| `name(a: A, b: B) -> R` | ... |``."""
    rows = {}
    for line in CONCEPT.read_text().splitlines():
        found = re.match(r"\| `(\w+)\((.*?)\) -> [^`]+` \|", line)
        if found:
            flat = re.sub(r"\[[^\]]*\]", "", found.group(2))  # Mapping[str, X]'s comma is not a parameter's
            params = [p.split(":")[0].strip().lstrip("*") for p in flat.split(",") if p.strip()]
            rows[found.group(1)] = params
    return rows


def test_every_hook_of_the_environment_protocol_is_in_the_table_with_its_types_and_parameters():
    # The optional hooks were a sentence of names (no types, not when they are called) and tool_schemas, which the
    # policy asks before each turn, was in none of the lists. The table now has every one; a hook added to
    # Environment without a row, or a row whose parameters are not the method's, fails here.
    import inspect

    from rewardpipe import Environment

    hooks = {
        name
        for name, value in vars(Environment).items()
        if inspect.isfunction(value) and not name.startswith("_") and name not in NOT_HOOKS
    } | {"tool_schemas"}
    rows = _hook_rows()
    assert set(rows) == hooks
    for name in hooks - {"tool_schemas"}:
        params = [p for p in inspect.signature(getattr(Environment, name)).parameters if p != "self"]
        assert rows[name] == params, name
    assert rows["tool_schemas"] == ["task"]  # a function of the task, as the policy calls it


def test_the_turn_level_reward_example_is_in_the_guide():
    # A user with a per-turn reward found nothing on how to write one: the guide now includes an example that
    # tests/docs/test_examples.py runs (examples/your_own_environment/turn_level.py and its output).
    page = (ROOT / "docs" / "guides" / "write-an-environment.md").read_text()
    section = page.split("## A turn-level reward", 1)[1].split("\n## ", 1)[0]
    assert '--8<-- "examples/your_own_environment/turn_level.py"' in section
    assert '--8<-- "examples/your_own_environment/turn_level.out"' in section
    assert (EXAMPLE / "turn_level.out").read_text().splitlines()[0] == "[1, 0, 1, 1] {'moves_closer': 0.75}"


def test_the_guides_example_environment_bounds_its_hooks_and_the_guide_says_why(monkeypatch):
    # The environment a user copies from the guide had no hook_timeout_s (default: none), so one hook that hung
    # hung the whole run; `rewardpipe init`'s template had one. The example declares it and the guide lists it.
    monkeypatch.syspath_prepend(str(EXAMPLE))
    from animals_env import ENVIRONMENT

    assert ENVIRONMENT.hook_timeout_s is not None
    parts = (ROOT / "docs" / "guides" / "write-an-environment.md").read_text().split("## The parts", 1)[1]
    assert "`hook_timeout_s`" in parts.split("## ", 1)[0]


def test_the_component_doctor_finds_dead_is_caught_by_the_monitor_in_the_journeys_own_run(tmp_path):
    # The guide's run (run_it.py) shows the collapse; the component no scenario moves (WITH_PLEASE's says_please,
    # which doctor fails) must be caught by the same run's monitor from its first step, before any collapse.
    import os
    import subprocess
    import sys

    command = [
        sys.executable, "-m", "rewardpipe", "run", "--env", "animals_env:ENVIRONMENT", "--reward",
        "animals_reward:WITH_PLEASE", "--tasks", str(EXAMPLE / "animals.jsonl"), "--policy", "scripted",
        "--steps", "1", "--groups-per-step", "4", "-k", "4", "--out", str(tmp_path), "--run-id", "please", "--json",
    ]  # fmt: skip
    path = os.pathsep.join([str(EXAMPLE), str(ROOT)])
    done = subprocess.run(
        command, cwd=tmp_path, env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    alarms = sorted(path.name for path in (tmp_path / "runs" / "please" / "alarms" / "step=0").iterdir())
    assert "says_please-dead_component.json" in alarms
    assert "says_please" in done.stdout  # and the run's own summary says so
