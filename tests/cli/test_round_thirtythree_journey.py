"""Round thirty-three: a new user's journey through the README, the guides and the CLI reference, run as written.

Each test failed before its fix (see docs/changelog.md, round thirty-three)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from rewardpipe import testing
from tests.cli import test_init_cmd
from tests.cli.conftest import cli_params, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
installed = test_init_cmd.installed  # the fixture: `rewardpipe init` run and the package installed
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
                {"rollout_id": "null", "reference": None, "messages": ANSWER},  # said to have none
            ],
        )
        result = cli("score", samples, "--reward", MY_REWARD, "--out", tmp_path / "store", "--json")
        assert result.exit_code == 1, result.output
        records = {r["rollout_id"]: r for r in map(json.loads, result.stdout.splitlines())}
        assert list(records) == ["with", "null"]
        # said to have none: the example's outcome returns None, as the guide says a component should, not a 0
        assert records["null"]["error"]["kind"] == "component_unavailable"
        assert records["null"]["components"]["answer_correct"] is None
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


def _options_without_help(command):
    for where, param in cli_params(command):
        if param.param_type_name == "option" and not (param.help or "").strip():
            yield f"{where} {param.opts[0]}"


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


def _commands(text: str) -> list[list[str]]:
    return [shlex.split(line.strip()) for line in text.splitlines() if line.strip().startswith("rewardpipe ")]


def test_the_scaffolds_commands_run_as_written_and_file_the_run_where_they_say(installed, cli, monkeypatch):
    """`rewardpipe init` printed, and its README and extending.md gave, `rewardpipe run ... --out runs`: the records
    went to `runs/runs/<run>/` ("records and alarms written under runs/runs/..."), a path that looks like a bug.
    The commands leave `--out` out (records under `runs/<run>/`, which the package's .gitignore holds), and the
    README's `report` reads the store they make. Every `rewardpipe` line of the README and of init's output runs."""
    target, _ = installed
    printed = cli("init", target, "--force").stdout  # what `init` printed for this package, again
    readme = (target / "README.md").read_text()
    monkeypatch.chdir(target)
    commands = _commands(readme.split("```", 2)[1]) + [c for c in _commands(printed) if c[1] == "run"]
    assert [c[1] for c in commands] == ["envs", "doctor", "run", "report", "run"]
    for command in commands:
        result = cli(*command[1:])
        assert result.exit_code == 0, (command, result.output)
        if command[1] == "run":
            assert "written under runs/runs" not in " ".join(result.output.split())
    runs = sorted(p.name for p in (target / "runs").iterdir() if not p.name.startswith("."))
    assert len(runs) == 2 and all((target / "runs" / run / "manifest.json").is_file() for run in runs)
    assert (target / "report.html").is_file()
    assert "runs/" in (target / ".gitignore").read_text().split()


def test_extending_md_shows_the_commands_init_prints(cli, tmp_path, monkeypatch):
    """The guide's quickest start is what `rewardpipe init my-quiz` tells its user to do next, line for line."""
    monkeypatch.chdir(tmp_path)
    printed = cli("init", "my-quiz").stdout
    steps = [line.strip() for line in printed.split("Next, in this Python environment:", 1)[1].splitlines()]
    guide = (ROOT / "docs/extending.md").read_text().split("## The quickest start", 1)[1].split("```console\n", 1)[1]
    shown = [line.removeprefix("$ ") for line in guide.split("```", 1)[0].splitlines()]
    assert shown == ["rewardpipe init my-quiz", *filter(None, steps)]


@pytest.mark.parametrize(
    ("source", "line", "said"),
    [
        ("import json\nimport acme_not_installed\n", 2, "No module named 'acme_not_installed'"),
        ("import json\n\nDATA = json.load(open('weights.json'))\n", 3, "No such file or directory: 'weights.json'"),
        ("assert False, 'set ACME_KEY first'\n", 1, "AssertionError: set ACME_KEY first"),
    ],
)
def test_a_module_that_fails_on_import_is_named_with_its_line(tmp_path, cli, source, line, said):
    """A user's module that failed on import (a dependency not installed, a weights file missing, an assert)
    was reported as "importing 'x' failed: FileNotFoundError: ..." and nothing on which file or line of theirs
    raised it. The CLI adds the line of the user's code that raised it (`--reward`, `--env`)."""
    module = tmp_path / "acme_reward.py"
    module.write_text(source)
    samples = ROOT / "examples/your_own_reward/samples.jsonl"
    reference = f"{module}:REWARD"
    for args in (
        ["score", samples, "--reward", reference, "--out", tmp_path / "store"],
        ["doctor", "--tasks", samples, "--env", reference],
    ):
        result = cli(*args)
        assert result.exit_code == 2, result.output
        text = " ".join(result.stderr.split())
        assert said in text and f"(at {module}:{line})" in text, text


def test_a_message_that_names_the_line_already_is_left_as_it_is(tmp_path, cli):
    module = tmp_path / "acme_reward.py"
    module.write_text(
        "from rewardpipe import component\n\n@component(range=(0, 1), role='outcome')\ndef f(completon):\n    return 1"
    )
    samples = ROOT / "examples/your_own_reward/samples.jsonl"
    result = cli("score", samples, "--reward", f"{module}:R", "--out", tmp_path / "store")
    text = " ".join(result.stderr.split())
    assert f"component 'f' ({module}:3): parameter 'completon' is not an input" in text
    assert "(at " not in text
