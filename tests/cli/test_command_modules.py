"""The `rewardpipe` command loads only the module of the command it runs (rewardpipe.cli.main): the same
commands, help and errors as the whole application, without the other commands' imports."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import typer.main

from rewardpipe.cli import COMMAND_MODULES, app

# A fresh interpreter each: once the whole application is loaded, every command is registered anyway.
ONE_COMMAND = "import sys; from rewardpipe.cli import main; main(sys.argv[1:])"
WHOLE_APP = "import sys; from rewardpipe.cli import app; app(sys.argv[1:])"
LOADED = (
    "import json, sys; from rewardpipe.cli import main\n"
    "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
    "print(json.dumps(sorted(m for m in sys.modules if m.startswith('rewardpipe.cli.'))), file=sys.stderr)"
)


def _run(program: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", program, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "100", "TERM": "dumb"},
    )


def test_the_map_names_every_command():
    group = typer.main.get_group(app)
    assert sorted(group.list_commands(None)) == sorted(COMMAND_MODULES)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "args",
    [
        ["exec", "--help"],
        ["exec", "--no-such-option"],
        ["exec", "--workers", "many", "--batch", "x.jsonl"],
        ["score", "--help"],
        ["tasks", "--help"],
        ["tasks", "validate", "--help"],
        ["nova", "--help"],
        ["doctor", "--help"],
    ],
)
def test_one_command_loaded_alone_reads_and_reports_as_the_whole_application(args):
    alone, whole = _run(ONE_COMMAND, *args), _run(WHOLE_APP, *args)
    assert (alone.returncode, alone.stdout, alone.stderr) == (whole.returncode, whole.stdout, whole.stderr)
    assert "Traceback" not in alone.stderr


@pytest.mark.parametrize("args", [[], ["--help"], ["no-such-command"], ["--no-such-option"]])
def test_anything_but_a_command_name_gets_every_command(args):
    alone, whole = _run(ONE_COMMAND, *args), _run(WHOLE_APP, *args)
    assert (alone.returncode, alone.stdout, alone.stderr) == (whole.returncode, whole.stdout, whole.stderr)
    if args == ["--help"]:
        assert all(name in alone.stdout for name in COMMAND_MODULES)


def test_a_command_imports_only_its_own_module():
    done = _run(LOADED, "exec", "--help")
    loaded = json.loads(done.stderr.strip().splitlines()[-1])
    assert "rewardpipe.cli.exec_cmd" in loaded
    others = {f"rewardpipe.cli.{module}" for module in COMMAND_MODULES.values()} - {"rewardpipe.cli.exec_cmd"}
    assert not others & set(loaded)


def test_exec_json_never_loads_rich(tmp_path):
    """Rich draws for people; `exec --batch --json` writes data only and starts without its import."""
    batch = tmp_path / "jobs.jsonl"
    tests = "def check(candidate):\n    assert candidate() == 1\n"
    job = {"id": "a", "code": "def f():\n    return 1\n", "tests": tests, "entry_point": "f", "tests_format": "check"}
    batch.write_text(json.dumps(job) + "\n")
    program = (
        "import json, sys; from rewardpipe.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'rich')), file=sys.stderr)"
    )
    done = _run(program, "exec", "--batch", str(batch), "--json")
    assert json.loads(done.stdout)["status"] == "passed", done.stdout + done.stderr
    assert json.loads(done.stderr.strip().splitlines()[-1]) == []


def test_help_lists_the_commands_in_one_order_whichever_module_was_imported_first():
    listing = (
        "import sys, typer.main\n{first}from rewardpipe.cli import app\n"
        "print(typer.main.get_group(app).list_commands(None))"
    )
    plain = _run(listing.format(first=""))
    reversed_first = _run(listing.format(first="import rewardpipe.cli.tasks_cmd, rewardpipe.cli.run_cmd\n"))
    assert plain.returncode == reversed_first.returncode == 0, plain.stderr + reversed_first.stderr
    assert reversed_first.stdout == plain.stdout
