"""Round twenty-nine: a new user's journeys (README and docs/ followed literally) and the mistakes on the way: a
rollouts file scored against the wrong task file, a module named where a reference was meant through the Python
API, and the store's paths as the commands print them."""

from __future__ import annotations

import json

from rewardpipe.store import LocalStore
from tests.cli.conftest import make_task, write_jsonl

GOOD_CODE = "Here you go:\n```python\ndef add(a, b):\n    return a + b\n```"


def _rollout(rid: str, task_id: str) -> dict:
    return {
        "rollout_id": rid,
        "group_id": f"g-{task_id}",
        "task_id": task_id,
        "step": 0,
        "messages": [{"role": "user", "content": "combine"}, {"role": "assistant", "content": GOOD_CODE}],
    }


# (a) every rollout naming a task the task file does not hold: error records, and an exit status that says so


def test_score_against_the_wrong_task_file_reports_and_exits_1_keeping_the_error_records(cli, tmp_path):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_task("add")])
    rollouts = write_jsonl(tmp_path / "rollouts.jsonl", [_rollout("r0", "mul"), _rollout("r1", "[bold]sub")])
    out = tmp_path / "store"
    result = cli("score", rollouts, "--tasks", tasks, "--out", out, "--run-id", "r")
    assert result.exit_code == 1, result.output
    assert "2 rollout(s) name a task" in result.stderr and "'mul'" in result.stderr
    assert "'[bold]sub'" in result.stderr
    records = list(LocalStore(out).iter_records("r"))
    assert sorted(r.error.kind for r in records if r.error) == ["unknown_task", "unknown_task"]


def test_score_with_some_unknown_tasks_scores_the_rest_and_exits_1_like_a_bad_line(cli, tmp_path):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_task("add")])
    rollouts = write_jsonl(tmp_path / "rollouts.jsonl", [_rollout("ok", "add"), _rollout("orphan", "mul")])
    out = tmp_path / "store"
    result = cli("score", rollouts, "--tasks", tasks, "--out", out, "--run-id", "r", "--json")
    assert result.exit_code == 1
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert {line["rollout_id"]: line["status"] for line in lines} == {"ok": "scored", "orphan": "error"}
    assert "1 rollout(s) name a task" in result.stderr


def test_replaying_rollouts_of_tasks_not_in_the_task_file_exits_1(cli, tmp_path):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_task("add")])
    rollouts = write_jsonl(tmp_path / "rollouts.jsonl", [_rollout("r0", "mul")])
    out = tmp_path / "store"
    result = cli("run", "--policy", "replay", "--rollouts", rollouts, "--tasks", tasks, "--out", out, "--run-id", "r")
    assert result.exit_code == 1, result.output
    assert "name a task" in result.stderr and "'mul'" in result.stderr
    assert [r.error.kind for r in LocalStore(out).iter_records("r")] == ["unknown_task"]
