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


def test_the_guides_three_lines_added_to_the_repositorys_cdk_json_deploy_the_users_environment_as_it_runs(
    monkeypatch,
):
    # Added as the guide said to the repository's cdk.json, the three lines failed the synth (`reward` beside its
    # old name `reward_name`, then `reward_weights` naming ask_before_coding's components), and its `max_turns: 6`
    # would have ended every deployed rollout at 6 turns whatever the user's environment says. The guide now says
    # which lines to delete; done as it says, the settings load and the environment keeps its own turn limit.
    from stacks.config import load_settings

    settings = _repository_settings()
    deleted = _keys_named(GUIDE.read_text(), "and delete the three lines", settings)
    assert deleted == {"reward_name", "reward_weights", "max_turns"}
    readme = (ROOT / "README.md").read_text()
    assert _keys_named(readme, "Delete the ", settings) == deleted  # the README says the same

    monkeypatch.syspath_prepend(str(EXAMPLE))
    added = json.loads((EXAMPLE / "cdk_settings.json").read_text())
    edited = {key: value for key, value in settings.items() if key not in deleted} | added
    loaded = load_settings(edited)
    from animals_env import ENVIRONMENT

    assert loaded.user_code.environment_ref == "animals_env:ENVIRONMENT"
    assert loaded.max_turns is None  # each rollout ends at the environment's own max_turns, as locally
    assert ENVIRONMENT.max_turns <= 20

    # and each deleted line is needed: kept, it fails the synth or silently overrides the environment's limit
    for key in sorted(deleted - {"max_turns"}):
        with pytest.raises(ValueError):
            load_settings(edited | {key: settings[key]})
    assert load_settings(edited | {"max_turns": settings["max_turns"]}).max_turns == 6
