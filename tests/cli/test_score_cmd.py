import pytest

from rewardpipe.store import LocalStore
from tests.cli.conftest import make_task, write_jsonl

GOOD_CODE = "Here you go:\n```python\ndef add(a, b):\n    return a + b\n```"


def rollout(rid, messages, task_id="add", group="g0"):
    return {"rollout_id": rid, "group_id": group, "task_id": task_id, "step": 2, "messages": messages}


def test_score_writes_one_record_per_good_line_and_reports_bad_lines(cli, tmp_path):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_task()])
    rollouts = write_jsonl(
        tmp_path / "rollouts.jsonl",
        [
            rollout(
                "asked",
                [
                    {"role": "user", "content": "combine"},
                    {"role": "assistant", "content": "Should negatives be allowed?"},
                    {"role": "user", "content": "Yes."},
                    {"role": "nova_assistant", "content": [{"type": "text", "text": GOOD_CODE}]},
                ],
            ),
            "{not json",
            rollout("guessed", [{"role": "user", "content": "combine"}, {"role": "assistant", "content": GOOD_CODE}]),
            rollout("orphan", [{"role": "assistant", "content": GOOD_CODE}], task_id="no-such-task", group="g-orphan"),
        ],
    )
    out = tmp_path / "store"
    result = cli("score", rollouts, "--tasks", tasks, "--out", out, "--run-id", "r1", "--json")
    assert result.exit_code == 1  # one line was rejected, the rest were scored
    assert "rollouts.jsonl:2" in result.output
    records = {r.rollout_id: r for r in LocalStore(out).iter_records("r1")}
    assert set(records) == {"asked", "guessed", "orphan"}
    assert records["asked"].components == {
        "correctness": 1.0,
        "asked_before_coding": 1.0,
        "guessed_immediately": 0.0,
        "loop_penalty": 0.0,
    }
    assert records["asked"].aggregate == pytest.approx(1.0 + 0.6)
    assert records["guessed"].components["guessed_immediately"] == -1.0
    assert records["guessed"].step == 2
    assert records["orphan"].status == "error" and records["orphan"].error.kind == "unknown_task"
    assert records["orphan"].aggregate is None


def test_scoring_into_a_used_run_id_needs_overwrite_or_resume(cli, tmp_path):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_task()])
    rollouts = write_jsonl(
        tmp_path / "rollouts.jsonl",
        [rollout("only", [{"role": "user", "content": "x"}, {"role": "assistant", "content": GOOD_CODE}])],
    )
    out = tmp_path / "store"
    assert cli("score", rollouts, "--tasks", tasks, "--out", out, "--run-id", "r").exit_code == 0
    refused = cli("score", rollouts, "--tasks", tasks, "--out", out, "--run-id", "r")
    assert refused.exit_code == 1 and "--overwrite" in refused.stderr and "--resume" in refused.stderr
    again = cli("score", rollouts, "--tasks", tasks, "--out", out, "--run-id", "r", "--overwrite")
    assert again.exit_code == 0, again.output
    resumed = cli("score", rollouts, "--tasks", tasks, "--out", out, "--run-id", "r", "--resume")
    assert resumed.exit_code == 0 and "scored 0" in resumed.stdout and "already stored 1" in resumed.stdout
    assert len(list(LocalStore(out).iter_records("r"))) == 1


def test_score_rejects_a_missing_task_file_clearly(cli, tmp_path):
    rollouts = write_jsonl(tmp_path / "rollouts.jsonl", [])
    result = cli("score", rollouts, "--tasks", tmp_path / "absent.jsonl", "--out", tmp_path)
    assert result.exit_code == 1
    assert "task file not found" in result.output
