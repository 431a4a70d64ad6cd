"""Model- and user-written text in the human output of `run` and `monitor` (the tables, the alarms and their
example rollouts): printed as itself. An ANSI sequence or a bidi override must not reach the terminal raw, and
Rich markup in an id (``[bold]x[/]``) must not be interpreted (it would vanish from the output, or restyle it).
"""

from __future__ import annotations

import json

from tests.cli.conftest import BUNDLED_TASKS

HOSTILE = "[bold]X[/]\x1b[31m\u202e"
# Inputs refuse ids with control or format characters (the id rule, tests/cli/test_input_rules.py), so the
# rollouts carry the markup only; records from elsewhere (another writer, an older version) may still hold
# the rest, so the monitor is also fed records whose ids carry all of HOSTILE.
HOSTILE_INPUT = "[bold]X[/]"


def _hostile_inputs(tmp_path):
    task = json.loads(BUNDLED_TASKS.read_text().splitlines()[0])
    task["task_id"] = "t" + HOSTILE_INPUT
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(task) + "\n")
    # every rollout commits code that raises with hostile text: correctness is dead, so alarms carry examples
    code = "```python\nraise ValueError('\\x1b[2J[red]boom[/]\\u2028')\n```"
    rows = [
        {
            "rollout_id": f"r{g}{k}{HOSTILE_INPUT}",
            "group_id": f"g{g}{HOSTILE_INPUT}",
            "task_id": task["task_id"],
            "step": 0,
            "messages": [{"role": "user", "content": task["prompt"]}, {"role": "assistant", "content": code}],
        }
        for g in range(5)
        for k in range(3)
    ]
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return tasks, rollouts


def _assert_inert(output: str):
    assert "\x1b" not in output and "\u202e" not in output and "\u2028" not in output, output[-2000:]


def test_monitor_tables_and_alarm_examples_print_hostile_ids_as_themselves(tmp_path, cli):
    tasks, rollouts = _hostile_inputs(tmp_path)
    store = tmp_path / "store"
    scored = cli("score", rollouts, "--tasks", tasks, "--out", store, "--run-id", "run[b]x", "--json")
    assert scored.exit_code == 0, scored.output
    for source in (store, tmp_path / "records.jsonl"):
        if source != store:  # the same records with control and bidi characters in their ids
            escaped = json.dumps(HOSTILE)[1:-1]
            source.write_text(scored.stdout.replace(json.dumps(HOSTILE_INPUT)[1:-1], escaped))
        result = cli("monitor", source)
        assert result.exit_code == 0, result.output
        _assert_inert(result.output)
        assert "run run[b]x:" in result.stdout  # the title's markup is text
        expected = HOSTILE_INPUT if source == store else "[bold]X[/]\\x1b[31m\\u202e"
        assert f"example r00{expected}" in result.stdout  # the alarm's example id, escaped, not styled


def test_run_summary_prints_hostile_ids_as_themselves(tmp_path, cli):
    tasks, rollouts = _hostile_inputs(tmp_path)
    result = cli(
        "run",
        "--tasks",
        tasks,
        "--policy",
        "replay",
        "--rollouts",
        rollouts,
        "--out",
        tmp_path / "store",
        "--run-id",
        "run[b]x",
    )
    assert result.exit_code == 0, result.output
    _assert_inert(result.output)
    assert "run run[b]x:" in result.stdout
    assert "e.g. r00[bold]X[/]" in result.stdout
    assert "[2J[red]boom[/]" in result.stdout  # the model's exception text: its markup is text
    examples = [line for line in result.stdout.splitlines() if "boom" in line]
    assert examples and all(line.startswith("    e.g. r") for line in examples)  # never wrapped onto a line of its own
