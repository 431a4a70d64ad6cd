"""Ids that collide on real file systems, or only to a reader's eye, never lose or mix a record.

* Ids that differ only in letter case (``Roll-A``/``roll-a``) are different ids: both are stored, under
  keys that stay distinct on case-insensitive file systems (see tests/test_store_case_insensitive.py).
* Ids that differ only in Unicode normalisation print the same: where ids must be unique (task files,
  ``score`` input, ``exec --batch``) the second is a bad line naming ``file:line`` and the field.
* A run id that differs from a stored one only in case or normalisation is refused.
"""

from __future__ import annotations

import json
import os

import pytest

from rewardpipe.store import LocalStore, legacy_key
from tests.cli.conftest import make_task, write_jsonl

NFC, NFD = "caf\u00e9", "cafe\u0301"  # the same text, two spellings


def rollout(rollout_id, group_id="g", task_id="add", answer="```python\ndef add(a, b):\n    return a + b\n```"):
    return {
        "rollout_id": rollout_id,
        "group_id": group_id,
        "task_id": task_id,
        "step": 0,
        "messages": [{"role": "user", "content": "add"}, {"role": "assistant", "content": answer}],
    }


def test_rollout_ids_that_differ_only_in_case_are_both_scored_and_kept(cli, tmp_path):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_task()])
    rollouts = write_jsonl(
        tmp_path / "r.jsonl", [rollout("Roll-A", "G"), rollout("roll-a", "g"), rollout("ROLL-A", "G")]
    )
    result = cli("score", rollouts, "--tasks", tasks, "--out", tmp_path / "store")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("scored 3,")
    store = LocalStore(tmp_path / "store")
    assert sorted(r.rollout_id for r in store.iter_records("scored")) == ["ROLL-A", "Roll-A", "roll-a"]
    keys = store.list_keys("runs/scored/")
    assert len({key.lower() for key in keys}) == len(keys), "two keys would be one file on macOS or Windows"


def test_task_ids_that_differ_only_in_normalisation_are_a_duplicate(cli, tmp_path):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_task(NFC), make_task(NFD)])
    result = cli("tasks", "validate", tasks)
    assert result.exit_code == 1
    assert f"{tasks}:2: duplicate task_id" in result.stderr
    assert "another Unicode normalisation" in result.stderr and "'cafe\\u0301'" in result.stderr
    assert "Traceback" not in result.output


def test_rollout_ids_that_differ_only_in_normalisation_are_a_bad_line(cli, tmp_path):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_task()])
    rollouts = write_jsonl(tmp_path / "r.jsonl", [rollout(NFC), rollout(NFD)])
    result = cli("score", rollouts, "--tasks", tasks, "--out", tmp_path / "store")
    assert result.exit_code == 1
    assert f"{rollouts}:2" in result.stderr and "duplicate rollout_id" in result.stderr
    assert "another Unicode normalisation" in result.stderr
    assert [r.rollout_id for r in LocalStore(tmp_path / "store").iter_records("scored")] == [NFC]


def test_group_ids_that_differ_only_in_normalisation_do_not_split_a_group(cli, tmp_path):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_task()])
    rollouts = write_jsonl(tmp_path / "r.jsonl", [rollout("k0", NFC), rollout("k1", NFD), rollout("k2", NFC)])
    result = cli("score", rollouts, "--tasks", tasks, "--out", tmp_path / "store")
    assert result.exit_code == 1
    assert f"{rollouts}:2 (k1): field 'group_id'" in result.stderr
    assert sorted(r.rollout_id for r in LocalStore(tmp_path / "store").iter_records("scored")) == ["k0", "k2"]


def test_exec_batch_ids_that_differ_only_in_normalisation_are_an_error_line(cli, tmp_path):
    job = {
        "code": "def add(a, b):\n    return a + b\n",
        "entry_point": "add",
        "tests": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
        "tests_format": "check",
    }
    batch = write_jsonl(tmp_path / "jobs.jsonl", [{**job, "id": NFC}, {**job, "id": NFD}])
    result = cli("exec", "--batch", batch, "--json")
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [row["status"] for row in rows] == ["passed", "error"]
    assert rows[1]["reason"].startswith(f"{batch}:2: field 'id': duplicate id (line 1 has")


def test_a_run_id_that_differs_from_a_stored_one_only_in_case_is_refused(cli, tmp_path):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_task()])
    rollouts = write_jsonl(tmp_path / "r.jsonl", [rollout("k0")])
    assert cli("score", rollouts, "--tasks", tasks, "--out", tmp_path / "store", "--run-id", "demo").exit_code == 0
    for twin in ("Demo", "DEMO"):
        result = cli("score", rollouts, "--tasks", tasks, "--out", tmp_path / "store", "--run-id", twin)
        assert result.exit_code == 1
        assert f"run id '{twin}' differs from the stored run 'demo' only in letter case" in result.stderr
    folders = [name for name in os.listdir(tmp_path / "store" / "runs") if not name.startswith(".")]
    assert folders == ["demo"]  # no run folder for the twins


def test_a_run_id_in_another_normalisation_than_a_stored_one_is_refused(cli, tmp_path):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_task()])
    rollouts = write_jsonl(tmp_path / "r.jsonl", [rollout("k0")])
    assert cli("score", rollouts, "--tasks", tasks, "--out", tmp_path / "store", "--run-id", NFC).exit_code == 0
    result = cli("score", rollouts, "--tasks", tasks, "--out", tmp_path / "store", "--run-id", NFD)
    assert result.exit_code == 1
    assert "in another Unicode normalisation ('caf\\xe9' there, 'cafe\\u0301' here)" in result.stderr


def test_a_run_written_before_the_case_tail_resumes_without_a_second_record(cli, tmp_path):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_task("Add-Numbers")])
    args = (
        "run",
        "--tasks",
        tasks,
        "--steps",
        1,
        "--group-size",
        3,
        "--groups-per-step",
        2,
        "--out",
        tmp_path,
        "--run-id",
        "exp",
        "--json",
    )
    assert cli(*args).exit_code == 0
    store = LocalStore(tmp_path)
    keys = store.list_keys("runs/exp/")
    assert any("%~u" in key for key in keys)
    for key in keys:  # what an older rewardpipe wrote: the same keys without the case tail
        (tmp_path / legacy_key(key)).parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp_path / key, tmp_path / legacy_key(key))
    resumed = cli(*args, "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["skipped_already_stored"] == 6
    assert not any("%~u" in key for key in store.list_keys("runs/exp/step=0/")), "a rollout was stored twice"
    assert len(list(store.iter_records("exp"))) == 6 and store.bad_objects == []
    show = cli("show", tmp_path, "--run-id", "exp", "--rollout", "s0-g000-Add-Numbers-k0", "--json")
    assert show.exit_code == 0, show.output


@pytest.mark.parametrize("run_id", ["con", "NUL", "com1.old", "exp."])
def test_a_run_id_windows_cannot_use_as_a_folder_is_a_usage_error(cli, tmp_path, run_id):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_task()])
    rollouts = write_jsonl(tmp_path / "r.jsonl", [rollout("k0")])
    result = cli("score", rollouts, "--tasks", tasks, "--out", tmp_path / "store", "--run-id", run_id)
    assert result.exit_code == 2
    assert f"--run-id {run_id!r} cannot name a folder on Windows" in result.stderr
    assert not (tmp_path / "store").exists()


def test_rollout_ids_windows_would_merge_or_refuse_are_stored_apart(cli, tmp_path):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_task()])
    rows = [rollout("con", "x."), rollout("k1", "x"), rollout("nul.txt", "x"), rollout("k3.", "x")]
    result = cli("score", write_jsonl(tmp_path / "r.jsonl", rows), "--tasks", tasks, "--out", tmp_path / "store")
    assert result.exit_code == 0, result.output
    keys = LocalStore(tmp_path / "store").list_keys("runs/scored/step=0/")
    names = [part for key in keys for part in key.split("/")[-2:]]
    assert not any(part.lower().split(".")[0] in ("con", "nul") or part.endswith(".") for part in names), names


def test_show_names_a_rollout_that_differs_only_in_case_when_the_id_is_not_found(cli, tmp_path):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_task()])
    assert (
        cli(
            "score", write_jsonl(tmp_path / "r.jsonl", [rollout("Roll-A")]), "--tasks", tasks, "--out", tmp_path
        ).exit_code
        == 0
    )
    assert cli("show", tmp_path, "--run-id", "scored", "--rollout", "Roll-A", "--json").exit_code == 0
    result = cli("show", tmp_path, "--run-id", "scored", "--rollout", "roll-a")
    assert result.exit_code == 1
    assert "no transcript of rollout 'roll-a'" in result.stderr
    assert "ids are case-sensitive: did you mean 'Roll-A'?" in result.stderr
