"""Round thirty-three, the CLI, the run/score pipelines, the store, doctor and the HTML report.

Each test failed before its fix (see docs/changelog.md, round thirty-three)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import cli_params, write_jsonl

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


class RespondChangesTheTask(AnimalGuess):
    def respond(self, state, task, ctx):
        task.max_guesses = 99  # every later rollout of the task plays another game
        return super().respond(state, task, ctx)


class PolicyTurnChangesTheTasksFacts(AnimalGuess):
    def on_policy_turn(self, state, task, text):
        task.facts["extra"] = True
        return super().on_policy_turn(state, task, text)


class MetricsChangesTheTask(AnimalGuess):
    def metrics(self, state, task):
        task.max_guesses = 1
        return {}


class MetricsChangesTheState(AnimalGuess):
    def metrics(self, state, task):
        state.found = True
        return {}


class StartChangesTheTask(AnimalGuess):
    def start(self, task):
        task.prompt = task.prompt + " Hurry."
        return super().start(task)
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
        "name, check, said",
        [
            ("RespondMutates", "state_mutated", "respond() changed the state it was given"),
            ("PolicyTurnMutates", "state_mutated", "on_policy_turn() changed the state it was given"),
            ("ReturnsTheSameState", "state_mutated", "respond() changed the state it was given"),
            # The task object is shared by every rollout of it (a group's K, every step's): a hook that changed it
            # changed the game of the rollouts after it, and doctor passed.
            ("RespondChangesTheTask", "task_mutated", "respond() changed the task it was given"),
            ("PolicyTurnChangesTheTasksFacts", "task_mutated", "on_policy_turn() changed the task it was given"),
            ("StartChangesTheTask", "task_mutated", "start() changed the task it was given"),
            # metrics() runs as the episode is scored: its change was blamed on the reward ("no component does
            # alone: its diagnostics or explain_error?"), and the environment's hook went unnamed
            ("MetricsChangesTheTask", "task_mutated", "metrics() changed the task it was given"),
            ("MetricsChangesTheState", "state_mutated", "metrics() changed the state it was given"),
        ],
    )
    def test_a_hook_changing_what_it_was_given_fails_doctor(self, cli, envs, name, check, said):
        result = cli("doctor", "--env", f"{envs}:{name}", "--tasks", ANIMALS / "animals.jsonl", "--json")
        assert result.exit_code == 1, result.output
        findings = [f for d in json.loads(result.stdout)["diagnoses"] for f in d["findings"]]
        mutated = [f["message"] for f in findings if f["check"] == check]
        assert mutated, findings
        assert said in mutated[0]
        assert "component_mutated_input" not in {f["check"] for f in findings}  # the reward changed nothing

    def test_a_clean_environment_still_passes(self, cli, envs):
        result = cli("doctor", "--env", f"{envs}:Clean", "--tasks", ANIMALS / "animals.jsonl", "--json")
        assert result.exit_code == 0, result.output


def _help_texts(command):
    for where, param in cli_params(command):
        text = (getattr(param, "help", None) or "").strip()
        if text:
            yield f"{where} {param.opts[0] if param.opts else param.name}", text


def test_every_help_text_is_a_sentence():
    """`show` and `report` described their options in lower case without a full stop, unlike every other
    command (the CLI reference lists them side by side)."""
    import typer.main

    from rewardpipe.cli import app

    odd = [
        f"{where}: {text!r}"
        for where, text in _help_texts(typer.main.get_command(app))
        # (a list of the option's values, `unittest | check`, begins with the first as it is written)
        if not (text[0].isupper() or " | " in text) or not text.endswith(".")
    ]
    assert odd == []


def _records(c_varies: bool, steps: int = 4, groups: int = 8, k: int = 4) -> list[dict]:
    from tests.cli.test_round_thirtyone_monitoring import _record

    return [
        _record(step, f"g{g}", f"s{step}-g{g}-{i}", f"t{g}", float(i % 2) if c_varies else 1.0, float(i % 2))
        for step in range(steps)
        for g in range(groups)
        for i in range(k)
    ]


@pytest.mark.parametrize("c_varies", [True, False])
def test_monitor_explains_the_star_only_when_a_row_has_one(cli, tmp_path, c_varies):
    """`monitor` ended every table with "* alarm active." although no row was starred."""
    records = write_jsonl(tmp_path / "records.jsonl", _records(c_varies))
    result = cli("monitor", records)
    assert result.exit_code == 0, result.output
    starred = [line for line in result.stdout.splitlines() if " * " in line]
    assert bool(starred) is (not c_varies), result.stdout
    assert ("* alarm active" in result.stdout) is bool(starred), result.stdout
    assert "zero-var groups: share of groups" in result.stdout


SLOW_REWARD = """
import time
from rewardpipe import Reward, component

@component(range=(0, 1), role="outcome")
def short(completion):
    time.sleep(0.005)
    return float(len(completion) < 3)

REWARD = Reward("slow", [short])
"""


class TestStoppedMidWay:
    """`score` (and `run`) stopped by Ctrl-C ended with exit 130 and not a word, and stopped by the reader of its
    output going away (`score --json | head`) with a bare "error: Broken pipe": nothing said what was kept or that
    `--resume` continues. Both now say how many records are stored and give the command that continues."""

    @pytest.fixture
    def scoring(self, tmp_path):
        import os
        import signal
        import subprocess
        import sys

        (tmp_path / "slow.py").write_text(SLOW_REWARD)
        samples = tmp_path / "samples.jsonl"
        answers = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "ok"}]
        write_jsonl(samples, [{"rollout_id": f"r{i}", "messages": answers} for i in range(3000)])
        args = ["score", samples, "--reward", f"{tmp_path / 'slow.py'}:REWARD", "--out", tmp_path / "store"]
        args += ["--run-id", "exp", "--batch-size", "8"]
        command = [sys.executable, "-m", "rewardpipe", *map(str, args)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}

        def start(*extra):
            return subprocess.Popen(
                [*command, *extra],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as a terminal's Ctrl-C finds it
            )

        return start, command, env

    @staticmethod
    def _stored(tmp_path):
        return len([p for p in (tmp_path / "store/runs/exp").glob("step=0/*/*.json")])

    def test_ctrl_c_says_what_is_kept_and_how_to_continue(self, scoring, tmp_path):
        import signal
        import subprocess

        start, command, env = scoring
        process = start("--json")
        assert process.stdout.readline().startswith(b"{")  # scoring is under way
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
        err = err.decode()
        assert process.returncode == 130, err
        assert "interrupted" in err and "Traceback" not in err, err
        assert "record(s) stored by this command are kept" in err and "--run-id exp --resume" in err, err
        assert 0 < self._stored(tmp_path) < 3000
        resumed = subprocess.run([*command, "--resume"], env=env, capture_output=True, timeout=300)
        assert resumed.returncode == 0, resumed.stderr
        assert self._stored(tmp_path) == 3000

    def test_a_reader_that_goes_away_is_said_so(self, scoring, tmp_path):
        start, _, _ = scoring
        process = start("--json")
        assert process.stdout.readline().startswith(b"{")
        process.stdout.close()  # `| head -n 1`
        err = process.stderr.read().decode()
        process.wait(timeout=120)
        assert process.returncode == 1, err
        assert "the reader of the output closed it" in err and "--run-id exp --resume" in err, err
        assert "Exception ignored" not in err and "Traceback" not in err, err
        assert 0 < self._stored(tmp_path) < 3000


def test_two_runs_started_in_the_same_second_get_two_run_ids(tmp_path, cli, monkeypatch):
    """The default run id is the UTC time to the second: a second `rewardpipe run` into the same store within that
    second was refused ("run id '...' already holds records ... use another --run-id"), a script's second experiment
    lost (and a CI flake of the journey test that runs init's commands back to back). A default id already taken
    becomes ``<timestamp>-2``; a run id the user gave is still refused as before."""
    from datetime import datetime

    import rewardpipe.cli.run_cmd as run_cmd

    class Frozen(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime(2026, 12, 5, 18, 0, 59, tzinfo=tz)

    monkeypatch.setattr(run_cmd, "datetime", Frozen)
    tasks = ROOT / "rewardpipe/data/tasks.jsonl"
    args = ("run", "--tasks", tasks, "--policy", "scripted", "--group-size", "2", "--steps", "1", "--out", tmp_path)
    first, second = cli(*args, "--json"), cli(*args, "--json")
    assert first.exit_code == 0 and second.exit_code == 0, second.output
    ids = [json.loads(result.stdout)["run_id"] for result in (first, second)]
    assert ids == ["20261205T180059Z", "20261205T180059Z-2"]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")) == ids
    given = cli(*args, "--run-id", "20261205T180059Z")
    assert given.exit_code == 1 and "already holds records" in given.output
