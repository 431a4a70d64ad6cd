import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rewardpipe.cli import app

BUNDLED_TASKS = Path(__file__).resolve().parents[2] / "rewardpipe" / "data" / "tasks.jsonl"

ADD_TESTS = (
    "import unittest\n"
    "class TestAdd(unittest.TestCase):\n"
    "    def test_small(self):\n        self.assertEqual(add(1, 2), 3)\n"
    "    def test_negative(self):\n        self.assertEqual(add(-1, -2), -3)\n"
)


def make_task(task_id: str = "add", **overrides) -> dict:
    task = {
        "task_id": task_id,
        "prompt": "Write a function that combines two numbers.",
        "spec": ["The two numbers are added together.", "Negative numbers are allowed."],
        "entry_point": "add",
        "tests": ADD_TESTS,
        "reference_solution": "def add(a, b):\n    return a + b\n",
    }
    task.update(overrides)
    return task


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


@pytest.fixture
def cli():
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)

    return invoke


def cli_params(command, path=()):
    """Every (``rewardpipe <command path>``, parameter) of a click command and its subcommands."""
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from cli_params(sub, (*path, name))
        return
    for param in command.params:
        yield f"rewardpipe {' '.join(path)}", param
