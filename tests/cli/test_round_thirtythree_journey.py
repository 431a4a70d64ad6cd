"""Round thirty-three: a new user's journey through the README, the guides and the CLI reference, run as written.

Each test failed before its fix (see docs/changelog.md, round thirty-three)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rewardpipe import testing
from tests.cli.conftest import write_jsonl

ROOT = Path(__file__).resolve().parents[2]
MY_REWARD = f"{ROOT / 'examples/your_own_reward/my_reward.py'}:json_answer"
ANSWER = [{"role": "user", "content": "6 * 7? Answer as JSON."}, {"role": "assistant", "content": '{"answer": "41"}'}]


class TestASampleWithoutItsReference:
    """The README's reward compares the answer with the sample's `reference`. A sample that gave none was scored
    with None: `answer_correct` 0.0, a record that looked like the model's wrong answer (by `rewardpipe score`,
    `testing.check_reward` and `testing.score` alike). A reward that reads `reference` now refuses a sample that
    gives none, naming the line (or sample), the components that read it and what to write."""

    def test_score_skips_the_line_and_says_why(self, tmp_path, cli):
        samples = write_jsonl(
            tmp_path / "samples.jsonl",
            [
                {"rollout_id": "with", "reference": "42", "messages": ANSWER},
                {"rollout_id": "without", "messages": ANSWER},
                {"rollout_id": "null", "reference": None, "messages": ANSWER},  # said to have none: scored
            ],
        )
        result = cli("score", samples, "--reward", MY_REWARD, "--out", tmp_path / "store", "--json")
        assert result.exit_code == 1, result.output
        ids = [json.loads(line)["rollout_id"] for line in result.stdout.splitlines()]
        assert ids == ["with", "null"]
        assert "samples.jsonl:2 (without): no 'reference', which reward 'json_answer' reads (answer_correct)" in (
            result.stderr
        )

    def test_a_reward_that_reads_no_reference_needs_none(self, tmp_path, cli, monkeypatch):
        (tmp_path / "no_ref.py").write_text(
            "from rewardpipe import Reward, component\n\n"
            "@component(range=(0, 1), role='outcome')\n"
            "def short(completion):\n    return float(len(completion) < 10)\n\n"
            "REWARD = Reward('no_ref', [short])\n"
        )
        samples = write_jsonl(tmp_path / "samples.jsonl", [{"messages": ANSWER}])
        result = cli("score", samples, "--reward", f"{tmp_path / 'no_ref.py'}:REWARD", "--out", tmp_path / "store")
        assert result.exit_code == 0, result.output
        assert testing.score(f"{tmp_path / 'no_ref.py'}:REWARD", completion="x").aggregate == 1.0

    def test_check_reward_and_score_refuse_it_too(self):
        with pytest.raises(ValueError, match=r"sample 1: no 'reference', which reward 'json_answer' reads"):
            testing.check_reward(MY_REWARD, [{"completion": '{"answer": "1"}', "reference": "1"}, {"completion": "x"}])
        with pytest.raises(ValueError, match=r"answer_correct.*pass reference="):
            testing.score(MY_REWARD, completion='{"answer": "42"}')
        assert testing.score(MY_REWARD, completion='{"answer": "42"}', reference="42").aggregate == 1.2
        assert testing.score(MY_REWARD, completion='{"answer": "42"}', reference=None).components["valid_json"] == 1


def _options_without_help(command, path=()):
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from _options_without_help(sub, (*path, name))
        return
    for param in command.params:
        if param.param_type_name == "option" and not (param.help or "").strip():
            yield f"rewardpipe {' '.join(path)} {param.opts[0]}"


def test_every_option_says_what_it_does():
    """The CLI reference (generated from `--help`) listed `run --sim-model`, `doctor --workers` and `doctor --json`
    with no word on what they do. Every option of every command now has its help text."""
    import typer.main

    from rewardpipe.cli import app

    assert list(_options_without_help(typer.main.get_command(app))) == []
    cli_md = (ROOT / "docs/reference/cli.md").read_text()
    assert "* `--sim-model <str>`: The model" in cli_md


def test_doctor_says_the_tasks_fail_its_checks_not_that_they_cannot_be_scored(cli, monkeypatch):
    """extending.md's doctor run with `WITH_PLEASE` ended "animals.jsonl: 3 of 3 task(s) cannot be scored": every task
    was scored, one component of the reward never moves, and the line sent the user to the task file. It now says
    the tasks fail doctor's checks, where their problems are, and what may be at fault."""
    example = ROOT / "examples/your_own_environment"
    monkeypatch.syspath_prepend(str(example))
    result = cli(
        "doctor", "--env", "animals_env:ENVIRONMENT", "--tasks", example / "animals.jsonl",
        "--reward", "animals_reward:WITH_PLEASE",
    )  # fmt: skip
    assert result.exit_code == 1
    assert "component 'says_please' takes only the value(s) [0.0]: it would be dead" in result.stdout
    assert "cannot be scored" not in result.stderr
    assert "3 of 3 task(s) fail doctor's checks: otter, owl, tortoise (each task's problems are on stdout" in (
        " ".join(result.stderr.split())
    )


def test_show_without_a_rollout_names_some_to_give(tmp_path, cli):
    """`rewardpipe show STORE` without `--rollout` answered "give --rollout ID" and nothing on where a new user would
    find one. It names the run and a few of its rollout ids."""
    samples = ROOT / "examples/your_own_reward/samples.jsonl"
    assert cli("score", samples, "--reward", MY_REWARD, "--out", tmp_path / "store").exit_code == 0
    result = cli("show", tmp_path / "store")
    assert result.exit_code == 2
    assert "give --rollout ID (or --key TRANSCRIPT_KEY): run 'scored' holds 3 rollout(s), e.g. 'r1', 'r2', 'r3'" in (
        " ".join(result.stderr.split())
    )
    assert "r2" in cli("show", tmp_path / "store", "--rollout", "r2").stdout
