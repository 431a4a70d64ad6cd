"""Round twenty-eight: a new user's journeys (README, docs/ and the guides followed literally) with a reward and a
multi-turn environment of one's own, and the plausible mistakes on the way: an environment without scenarios or
without a task model, a module named where a reference was meant, a task file of one's own environment."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rewardpipe.monitoring.hysteresis import error_advice

GAME = '''
import re

from rewardpipe import Environment, EpisodeState, Reward, ScriptedPolicy, TaskRow, component


class GuessTask(TaskRow):
    secret: int


class GuessState(EpisodeState):
    solved: bool = False


@component(range=(0, 1), role="outcome")
def solved(state):
    return float(state.solved)


GUESS = Reward("guess", [solved])


class Guess(Environment):
    name = "guess"
    version = "1"
    task_model = GuessTask
    state_model = GuessState
    max_turns = 3
    reward = GUESS

    def on_policy_turn(self, state, task, text):
        if text.strip() == str(task.secret):
            return state.evolve(solved=True, next_action="score")
        return state.evolve(next_action="env")

    def respond(self, state, task, ctx):
        return state.append({"role": "user", "content": "No."}, next_action="policy")

    def scenarios(self, task):
        return {"reference": ScriptedPolicy([str(task.secret)]), "wrong": ScriptedPolicy(["0", "0", "0"])}


class Unscripted(Guess):
    """The environment written before its scenarios: only an LLM (or a recording) can play it."""

    name = "unscripted"

    def scenarios(self, task):
        return {}


class Untyped(Environment):
    """The task_model forgotten: the rows are read as bare TaskRows (task_id and prompt)."""

    name = "untyped"
    version = "1"
    state_model = GuessState
    max_turns = 3
    reward = GUESS


class Stateless(Guess):
    """The state_model forgotten: the states are bare EpisodeStates, without the fields the hooks set and read."""

    name = "stateless"
    state_model = EpisodeState


ENVIRONMENT = Guess()
UNSCRIPTED = Unscripted()
UNTYPED = Untyped()
STATELESS = Stateless()
'''


@pytest.fixture
def game(tmp_path, monkeypatch):
    """A user's module ``guess_game`` (importable, as under ``PYTHONPATH=.``) and its task file."""
    (tmp_path / "guess_game.py").write_text(GAME)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "guess_game", raising=False)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"task_id": f"t{i}", "prompt": "Guess.", "secret": i}) + "\n" for i in (1, 2)))
    return tmp_path, tasks


def test_run_scripted_refuses_an_environment_without_scenarios_before_writing_anything(game, cli):
    # `run --policy scripted` (the default) of an environment with no scenarios made every rollout a
    # policy_error, and the error alarm said "check the policy's endpoint": there is none.
    tmp_path, tasks = game
    store = tmp_path / "store"
    result = cli("run", "--env", "guess_game:UNSCRIPTED", "--tasks", tasks, "--out", store, "--steps", "1")
    assert result.exit_code == 2, result.output
    assert "scenarios(task)" in result.output and "unscripted" in result.output
    assert "--policy openai" in result.output
    assert not store.exists()
    ok = cli("run", "--env", "guess_game:ENVIRONMENT", "--tasks", tasks, "--out", store, "--steps", "1", "-k", "2")
    assert ok.exit_code == 0, ok.output


def test_an_error_alarm_of_policy_errors_does_not_send_a_scripted_run_to_an_endpoint():
    advice = error_advice({"policy_error": 8})
    assert "scenario" in advice and "endpoint" in advice


def test_a_module_named_without_its_object_is_told_the_reference_it_holds(game, cli):
    # `--env guess_game` (the module, importable under PYTHONPATH=.) or `--env guess_game.ENVIRONMENT` (Python's
    # dotted spelling) said "unknown environment" and advised registering an entry point under that name.
    _, tasks = game
    for given in ("guess_game", "guess_game.ENVIRONMENT"):
        result = cli("doctor", "--env", given, "--tasks", tasks)
        assert result.exit_code == 2
        assert "guess_game:ENVIRONMENT" in result.output, result.output
        assert "entry-points" not in result.output
    result = cli("doctor", "--env", "guess_game:ENVIRONMENT", "--reward", "guess_game.GUESS", "--tasks", tasks)
    assert result.exit_code == 2 and "guess_game:GUESS" in result.output, result.output
    # a module that is there but fails to import says why, rather than "unknown reward"
    (tasks.parent / "broken_reward.py").write_text("raise RuntimeError('component table missing')\n")
    result = cli("doctor", "--env", "guess_game:ENVIRONMENT", "--reward", "broken_reward", "--tasks", tasks)
    assert result.exit_code == 2 and "RuntimeError: component table missing" in result.output, result.output
    # a name that is no importable module keeps the advice of old
    result = cli("doctor", "--env", "no_such_module_here", "--tasks", tasks)
    assert result.exit_code == 2 and "entry-points" in result.output


def test_tasks_validate_checks_a_task_file_of_ones_own_environment(game, cli):
    # `rewardpipe tasks validate tasks.jsonl` read every file as ask-before-coding tasks ("missing required field
    # 'spec' ... unknown field 'secret'"), with no way to name the environment the file is for.
    _, tasks = game
    result = cli("tasks", "validate", tasks, "--env", "guess_game:ENVIRONMENT")
    assert result.exit_code == 0, result.output
    assert "2 tasks OK" in result.output
    bad = tasks.parent / "bad.jsonl"
    bad.write_text(json.dumps({"task_id": "t1", "prompt": "Guess.", "secrett": 1}) + "\n")
    result = cli("tasks", "validate", bad, "--env", "guess_game:ENVIRONMENT")
    assert result.exit_code == 1 and "secrett" in result.output


def test_a_task_file_read_as_another_environments_rows_says_which_environment_read_it(game, cli):
    # `doctor --tasks tasks.jsonl` with --env forgotten (or `tasks validate`) listed the built-in's missing fields
    # and the file's own as unknown, never saying the rows were read as ask_before_coding's.
    _, tasks = game
    for command in (["doctor", "--tasks", tasks], ["tasks", "validate", tasks], ["run", "--tasks", tasks]):
        result = cli(*command)
        assert result.exit_code == 1
        assert "unknown field 'secret'" in result.output
        assert "environment 'ask_before_coding'" in result.output and "--env" in result.output, result.output


@pytest.mark.parametrize(
    ("env", "failure", "said"),
    [
        # `task_model` forgotten: the rows were read as bare TaskRows, and "unknown field 'secret'" blamed the file
        ("UNTYPED", "unknown field 'secret'", "environment 'untyped' sets no task_model"),
        # `state_model` forgotten: every scenario failed with "'EpisodeState' object has no attribute 'solved'"
        ("STATELESS", "'EpisodeState' object has no attribute", "environment 'stateless' sets no state_model"),
    ],
)
def test_an_environment_that_forgot_its_task_or_state_model_is_told_so(game, cli, env, failure, said):
    _, tasks = game
    result = cli("doctor", "--env", f"guess_game:{env}", "--tasks", tasks)
    assert result.exit_code == 1
    assert failure in result.output and said in result.output, result.output
    assert "sets no" not in cli("doctor", "--env", "guess_game:ENVIRONMENT", "--tasks", tasks).output


def test_monitor_alarm_examples_give_a_transcript_path_that_opens(game, cli):
    # Each example ended with its transcript_key, relative to the store root: with `--out runs` (the guides' own
    # spelling), "runs/<run>/transcripts/..." named no file; the transcript was at runs/runs/<run>/transcripts/...
    tmp_path, tasks = game
    store = tmp_path / "runs"
    result = cli(
        "run", "--env", "guess_game:ENVIRONMENT", "--tasks", tasks, "--out", store, "--run-id", "r",
        "--steps", "1", "-k", "2", "--groups-per-step", "4", "--weight", "solved=0",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    result = cli("monitor", store, "--min-groups", "1", "--range", "solved=0:1")
    lines = [line for line in result.output.splitlines() if line.lstrip().startswith("example ")]
    assert lines, result.output
    for line in lines:
        path = Path(line.rsplit(" ", 1)[-1])
        assert path.is_file(), line
    shown = cli("show", store, "--key", path)  # the path printed is also what `show --key` takes
    assert shown.exit_code == 0, shown.output
    assert path.stem in shown.output


def test_monitor_warns_of_a_range_for_no_component_as_it_does_of_an_ignore(game, cli):
    # `monitor STORE --range solvd=0:1` (a typo) was silently dropped, so `solved` was judged by no range given;
    # `--ignore solvd` already warned.
    tmp_path, tasks = game
    store = tmp_path / "store"
    ran = cli("run", "--env", "guess_game:ENVIRONMENT", "--tasks", tasks, "--out", store, "--steps", "1", "-k", "2")
    assert ran.exit_code == 0, ran.output
    result = cli("monitor", store, "--range", "solvd=0:1")
    assert result.exit_code == 0
    assert "--range 'solvd' names no component" in result.output, result.output
    assert "--range 'solved'" not in cli("monitor", store, "--range", "solved=0:1").output


def test_a_bundled_task_file_named_outside_a_clone_says_where_the_installed_copy_is(tmp_path, monkeypatch, cli):
    # The environment pages give `--tasks rewardpipe/data/wordle_tasks.jsonl`, a path of the source tree: run
    # anywhere else (rewardpipe pip-installed), it was "task file not found" with no word of the copy installed.
    import rewardpipe

    monkeypatch.chdir(tmp_path)
    result = cli("doctor", "--env", "wordle", "--tasks", "rewardpipe/data/wordle_tasks.jsonl")
    assert result.exit_code == 1
    installed = Path(rewardpipe.__file__).parent / "data" / "wordle_tasks.jsonl"
    assert str(installed) in result.output.replace("\n", ""), result.output


def test_doctor_of_an_environment_without_scenarios_says_so_once_a_task(game, cli):
    # Each task read "names no 'reference' scenario" and then, per component, "took no value in any scenario (each
    # ended in an error or failed)": no scenario had been played, none had failed.
    _, tasks = game
    result = cli("doctor", "--env", "guess_game:UNSCRIPTED", "--tasks", tasks)
    assert result.exit_code == 1
    assert "gives no scenarios" in result.output and "scenarios(task)" in result.output, result.output
    assert "took no value" not in result.output and "each ended in an error" not in result.output


def test_collapse_from_step_is_described_for_any_environment(cli):
    # Its help said "every rollout guesses", the built-in ask_before_coding's collapse; a user's environment plays
    # its own collapse_scenario.
    result = cli("run", "--help")
    text = " ".join(result.output.split())
    assert "collapse_scenario" in text and "every rollout guesses" not in text
