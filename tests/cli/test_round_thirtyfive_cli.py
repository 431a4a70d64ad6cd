"""Round thirty-five, CLI: `score --json --summary` ends its records with one summary object (as `run --json` has);
without --summary the output is the records alone, as before."""

import json

from tests.cli.conftest import make_task, write_jsonl

GOOD_CODE = "Here you go:\n```python\ndef add(a, b):\n    return a + b\n```"


def rollout(rid, task_id="add", group="g0"):
    messages = [{"role": "user", "content": "combine"}, {"role": "assistant", "content": GOOD_CODE}]
    return {"rollout_id": rid, "group_id": group, "task_id": task_id, "step": 1, "messages": messages}


def _files(tmp_path):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_task()])
    long_id = "t" * 1000  # ids are refused control characters when read, not length up to 1024
    rollouts = write_jsonl(
        tmp_path / "rollouts.jsonl",
        [rollout("ok"), "{not json", rollout("orphan", task_id=long_id, group="g1"), rollout("ok2")],
    )
    return tasks, rollouts


def test_score_json_summary_is_one_last_line_counting_what_happened(cli, tmp_path):
    tasks, rollouts = _files(tmp_path)
    result = cli("score", rollouts, "--tasks", tasks, "--out", tmp_path / "s", "--run-id", "r", "--json", "--summary")
    assert result.exit_code == 1  # a bad line and an unknown task, as without --summary
    lines = result.stdout.split("\n")
    assert lines[-1] == "" and all(line.isascii() for line in lines)
    *records, last = map(json.loads, lines[:-1])
    assert [r["rollout_id"] for r in records] == ["ok", "orphan", "ok2"]  # the records, unchanged, first
    summary = last["summary"]
    assert set(last) == {"summary"}
    assert (summary["run_id"], summary["scored"], summary["errors"]) == ("r", 2, 1)
    assert summary["skipped_lines"] == 1 and summary["error_kinds"] == {"unknown_task": 1}
    assert summary["unknown_tasks"]["count"] == 1
    (named,) = summary["unknown_tasks"]["first"]
    assert named == "t" * 200  # a file of long ids keeps the summary one short line
    assert summary["unstored"] == 0 and summary["lost"] == 0 and summary["spill_file"] is None
    assert summary["first_error"].startswith("orphan: ")


def test_score_json_without_summary_is_records_only(cli, tmp_path):
    tasks, rollouts = _files(tmp_path)
    result = cli("score", rollouts, "--tasks", tasks, "--out", tmp_path / "s", "--run-id", "r", "--json")
    assert [json.loads(line).get("rollout_id") for line in result.stdout.splitlines()] == ["ok", "orphan", "ok2"]


def test_summary_without_json_is_a_usage_error_before_anything_is_written(cli, tmp_path):
    tasks, rollouts = _files(tmp_path)
    result = cli("score", rollouts, "--tasks", tasks, "--out", tmp_path / "s", "--summary")
    assert result.exit_code == 2 and "--summary" in result.stderr and "--json" in result.stderr
    assert not (tmp_path / "s").exists()
