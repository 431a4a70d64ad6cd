"""Round thirty-three, the CLI, the run/score pipelines, the store, doctor and the HTML report.

Each test failed before its fix (see docs/changelog.md, round thirty-three)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ANIMALS = ROOT / "examples" / "your_own_environment"

MUTATING_HOOKS = """
from animals_env import AnimalGuess


class RespondMutates(AnimalGuess):
    def respond(self, state, task, ctx):
        state.questions = 99  # the state it was given, changed
        return super().respond(state, task, ctx)


class PolicyTurnMutates(AnimalGuess):
    def on_policy_turn(self, state, task, text):
        state.wrong_guesses = 7
        return super().on_policy_turn(state, task, text)


class ReturnsTheSameState(AnimalGuess):
    def respond(self, state, task, ctx):
        new = super().respond(state, task, ctx)
        state.answered = 5
        return new


class Clean(AnimalGuess):
    pass
"""


class TestDoctorSeesAHookChangeTheStateItWasGiven:
    """`state_mutated` compared only the state doctor paused on before each turn; the hooks get a copy of it, so
    a respond() or on_policy_turn() setting a field of the state it was given passed doctor OK."""

    @pytest.fixture
    def envs(self, tmp_path, monkeypatch):
        monkeypatch.syspath_prepend(str(ANIMALS))
        path = tmp_path / "mutating_hooks.py"
        path.write_text(MUTATING_HOOKS)
        return path

    @pytest.mark.parametrize(
        "name, hook",
        [("RespondMutates", "respond"), ("PolicyTurnMutates", "on_policy_turn"), ("ReturnsTheSameState", "respond")],
    )
    def test_a_hook_setting_a_field_fails_doctor(self, cli, envs, name, hook):
        result = cli("doctor", "--env", f"{envs}:{name}", "--tasks", ANIMALS / "animals.jsonl", "--json")
        assert result.exit_code == 1, result.output
        findings = [f for d in json.loads(result.stdout)["diagnoses"] for f in d["findings"]]
        mutated = [f["message"] for f in findings if f["check"] == "state_mutated"]
        assert mutated, findings
        assert f"{hook}()" in mutated[0]

    def test_a_clean_environment_still_passes(self, cli, envs):
        result = cli("doctor", "--env", f"{envs}:Clean", "--tasks", ANIMALS / "animals.jsonl", "--json")
        assert result.exit_code == 0, result.output
