"""Round fifteen: a dead component the monitor judged alive, because two tasks shared a group id.

A GRPO group is the rollouts of one prompt. Records whose group ids are numbered per task (``g0`` for each
task of a step) filed two tasks' rollouts under one group: a component constant inside each task's group, but
different between the tasks (1.0 for one task, 0.0 for the other), varied inside the merged "group" and was
judged ``ok``, never alarmed. ``rewardpipe score`` already refused such a line ("a group is one prompt"); the
monitor refused such records on every reader (records, JSONL fast and careful paths, a store), naming the
first such group. Since round thirty-one such a group is set aside instead (named, left out of every
statistic), so the other groups are still judged (tests/cli/test_round_thirtyone_monitoring.py). Only scored
records are read for it: an error record is left out of every statistic, and the
Nova bridge files its own with the task "unknown" in the group of the scored ones.
"""

from __future__ import annotations

import json

from rewardpipe.monitoring import monitor_records
from tests.monitoring.test_fast_path import run_three_ways, write
from tests.monitoring.test_store_fast_path import both_ways, store_of


def records(tasks: dict[str, float], steps: int = 2, groups: int = 8, k: int = 4, per_task_ids: bool = True):
    """Each task's ``c`` is its constant (dead in every real group); ``correctness`` varies (healthy)."""
    out = []
    for step in range(steps):
        for task, value in tasks.items():
            for g in range(groups):
                for i in range(k):
                    right = float(i % 2)
                    out.append(
                        {
                            "schema": "rewardpipe.record/v1",
                            "run_id": "r",
                            "step": step,
                            "group_id": f"g{g}" if per_task_ids else f"{task}-g{g}",
                            "rollout_id": f"{task}-s{step}g{g}r{i}",
                            "task_id": task,
                            "status": "scored",
                            "error": None,
                            "components": {"c": value, "correctness": right},
                            "weights": {"c": 0.5, "correctness": 1.0},
                            "aggregate": 0.5 * value + right,
                            "metrics": {},
                        }
                    )
    return out


MESSAGE = "group 'g0' of step 0 holds rollouts of 2 tasks ('t1', 't2')"


def test_two_tasks_under_one_group_id_are_set_aside_not_judged_alive():
    data = monitor_records(records({"t1": 1.0, "t2": 0.0})).to_dict()
    assert MESSAGE in data["set_aside"][0]["reason"] and len(data["set_aside"]) == 16
    assert all(c["verdict"] != "ok" for step in data["steps"] for c in step["components"].values())


def test_each_task_in_a_group_of_its_own_is_dead_and_alarmed():
    result = monitor_records(records({"t1": 1.0, "t2": 0.0}, per_task_ids=False))
    assert result.to_dict()["steps"][0]["components"]["c"]["verdict"] == "dead"
    assert "c" in {alarm.component for alarm in result.alarms}


def test_every_reader_of_a_records_file_sets_it_aside_alike(tmp_path, monkeypatch):
    path = write(tmp_path / "records.jsonl", records({"t1": 1.0, "t2": 0.0}))
    (shipped, orjson_only, careful), used = run_three_ways(monkeypatch, path, "--no-write-alarms", "--json")
    assert shipped == orjson_only == careful
    assert shipped[0] == 0 and MESSAGE in shipped[2] and MESSAGE in json.loads(shipped[1])["set_aside"][0]["reason"]
    assert used[0] is True  # the fast path served the first run


def test_a_store_sets_it_aside_alike(tmp_path, monkeypatch):
    store = store_of(tmp_path, records({"t1": 1.0, "t2": 0.0}))
    fast, careful, used = both_ways(monkeypatch, store.root)
    assert used == [True] and fast == careful
    assert fast[0] == 0 and MESSAGE in fast[2]


def _with_an_unknown_task_error(rows: list[dict]) -> list[dict]:
    """The first record made an error record of the task "unknown" (as the Nova bridge files its own)."""
    rows[0] |= {"status": "error", "error": {"kind": "timeout", "message": "x"}, "aggregate": None}
    rows[0] |= {"task_id": "unknown", "components": {"c": None, "correctness": None}}
    return rows


def test_an_error_record_of_another_task_in_a_group_is_left_out_not_refused(tmp_path, monkeypatch):
    rows = _with_an_unknown_task_error(records({"t1": 1.0}, per_task_ids=False))
    data = monitor_records(rows).to_dict()
    assert data["steps"][0]["components"]["c"]["verdict"] == "dead"
    assert data["steps"][0]["errors"] == 1
    path = write(tmp_path / "records.jsonl", rows)
    (shipped, orjson_only, careful), _ = run_three_ways(monkeypatch, path, "--no-write-alarms", "--json")
    assert shipped == orjson_only == careful and shipped[0] == 0
    assert "c" in {alarm["component"] for alarm in json.loads(shipped[1])["alarms"]}


def test_a_trl_completion_without_a_task_takes_its_groups_task():
    from rewardpipe.integrations.trl import batch_records

    details = [{"task_id": "t1"}, {}, {"task_id": "t2"}, {"task_id": "t2"}]
    rows = batch_records({"c": [1.0, 1.0, 0.0, 0.0]}, 2, details=details)
    assert [row["task_id"] for row in rows] == ["t1", "t1", "t2", "t2"]
    assert monitor_records(rows).to_dict()["steps"][0]["components"]["c"]["eligible_groups"] == 2


def test_score_refuses_a_single_turn_sample_of_another_task_in_a_group(tmp_path):
    """So `score` never writes the records `monitor` would refuse (the rollouts reader already refused them)."""
    from typer.testing import CliRunner

    from rewardpipe.cli import app

    lines = [
        {
            "rollout_id": f"r{i}",
            "group_id": "g",
            "task_id": f"t{i % 2}",
            "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "#### 4"}],
            "reference": "4",
        }
        for i in range(4)
    ]
    path = write(tmp_path / "samples.jsonl", lines)
    result = CliRunner().invoke(app, ["score", str(path), "--reward", "gsm8k", "--out", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert "samples.jsonl:2 (r1): field 'task_id': group 'g' of step 0 is task 't0' (line 1)" in result.stderr
    monitored = CliRunner().invoke(app, ["monitor", str(tmp_path / "out"), "--no-write-alarms", "--json"])
    assert monitored.exit_code == 0, monitored.stderr
