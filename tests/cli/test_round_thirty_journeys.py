"""Round thirty: a new user's journeys (README and docs/ followed literally): alarm examples of records read
from a file, hostile text in alarm reasons, `show` of an environment without a spec, the thresholds `monitor
--json` reports, and a sample of `score` that names no task."""

from __future__ import annotations

import json

from rewardpipe.models import ErrorInfo, Record
from rewardpipe.store import LocalStore
from tests.cli.conftest import BUNDLED_TASKS, write_jsonl

HOSTILE = "boom \x1b[2J\x1b]0;pwned\x07 done"


def _row(step: int, g: int, k: int, **fields) -> dict:
    """One record of run 'run' (group g, rollout k at ``step``) as its JSON, ``fields`` its status and scores."""
    ids = {"run_id": "run", "step": step, "group_id": f"g{g}", "rollout_id": f"s{step}-g{g}-k{k}", "task_id": f"t{g}"}
    return Record(**ids, weights={"found": 1.0}, **fields).model_dump(mode="json", by_alias=True)


def _error_records(message: str = HOSTILE) -> list[dict]:
    """Two steps of eight error records (an error-rate alarm with examples), as a JSONL of records."""
    error = ErrorInfo(kind="component_raised", message=message)
    return [
        _row(step, g, k, status="error", error=error, components={"found": None}, aggregate=None)
        for step in range(2)
        for g in range(2)
        for k in range(4)
    ]


# (a) alarm examples of records read from a file: no store to put the transcript under, and the user is told


def test_monitor_of_a_records_file_says_there_is_no_transcript_store_and_how_to_open_a_key(cli, tmp_path):
    records = write_jsonl(tmp_path / "records.jsonl", _error_records("plain failure"))
    result = cli("monitor", records)
    assert "ALARM" in result.stdout, result.output
    key = "runs/run/transcripts/step=0/group=g0/s0-g0-k0.json"
    assert key in result.stdout  # the key stays, for `show --key`
    text = " ".join(result.stdout.split())
    assert "no transcript store" in text and "rewardpipe show STORE --key" in text
    # a store's examples keep their paths under the store, with no such note
    store = LocalStore(tmp_path / "store")
    for row in _error_records("plain failure"):
        store.put_record(Record.model_validate(row))
    from_store = cli("monitor", tmp_path / "store", "--no-write-alarms")
    assert f"{tmp_path / 'store'}/{key}" in "".join(from_store.stdout.split())
    assert "no transcript store" not in " ".join(from_store.stdout.split())


# (b) alarm reasons show control characters as visible escapes, as every other output does


def test_alarm_example_reasons_escape_control_characters_visibly(cli, tmp_path):
    records = write_jsonl(tmp_path / "records.jsonl", _error_records())
    result = cli("monitor", records)
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "\\x1b[2J" in result.stdout and "\\x07" in result.stdout
    data = json.loads(cli("monitor", records, "--json").stdout)
    reasons = [e["reason"] for a in data["alarms"] for e in a["examples"]]
    assert reasons and all("\\x1b[2J" in r and "\x1b" not in r for r in reasons)


def test_cut_reasons_never_split_an_escape(cli):
    from rewardpipe.monitoring.examples import clean

    text = clean("a" * 296 + "\x1b\x1b\x1b", limit=300)
    assert len(text) <= 300 and "\x1b" not in text
    assert not text.rstrip(".").endswith("\\") and "\\x1" not in text.replace("\\x1b", "")


# (c) `show` of an environment without a spec does not report revealing none of it


def test_show_of_a_wordle_episode_says_nothing_of_spec_items(cli, tmp_path):
    from tests.cli.conftest import BUNDLED_TASKS

    wordle = BUNDLED_TASKS.parent / "wordle_tasks.jsonl"
    out = tmp_path / "store"
    run = cli(
        "run", "--env", "wordle", "--tasks", wordle, "--policy", "scripted", "--group-size", "2", "--steps", "1",
        "--out", out, "--run-id", "w",
    )  # fmt: skip
    assert run.exit_code == 0, run.output
    key = next(k for k in LocalStore(out).list_keys("runs/w/transcripts/"))
    shown = cli("show", out, "--key", key)
    assert shown.exit_code == 0, shown.output
    assert "end:" in shown.stdout and "spec item" not in shown.stdout
    assert "revealed" not in json.loads(cli("show", out, "--key", key, "--json").stdout)
    # the report's transcript of an alarm example: no spec items counted either
    from rewardpipe.monitoring.html import _transcript
    from rewardpipe.monitoring.report import _compact_transcript

    compact = _compact_transcript(LocalStore(out).get_transcript(key))
    page = _transcript({"rollout_id": "r", "group_id": "g", "reason": "x", "transcript": compact})
    assert "verdict" in page and "spec item" not in page


def test_show_of_an_ask_before_coding_episode_still_counts_revealed_items(cli, tmp_path):
    from tests.cli.conftest import BUNDLED_TASKS

    out = tmp_path / "store"
    run = cli(
        "run", "--tasks", BUNDLED_TASKS, "--policy", "scripted", "--group-size", "2", "--steps", "1",
        "--out", out, "--run-id", "a", "--groups-per-step", "2",
    )  # fmt: skip
    assert run.exit_code == 0, run.output
    keys = LocalStore(out).list_keys("runs/a/transcripts/")
    assert any("revealed " in cli("show", out, "--key", k).stdout for k in keys)
    assert all("revealed" in LocalStore(out).get_transcript(k).to_json_dict() for k in keys)


# (d) `monitor --json` thresholds: the run's components only


def test_monitor_json_thresholds_list_only_the_runs_components(cli, tmp_path):
    rows = [
        _row(0, g, k, status="scored", components={"found": float(k % 2)}, aggregate=float(k % 2))
        for g in range(4)
        for k in range(2)
    ]
    records = write_jsonl(tmp_path / "records.jsonl", rows)
    thresholds = json.loads(cli("monitor", records, "--json").stdout)["thresholds"]
    assert set(thresholds["ranges"]) <= {"found"}
    assert "correctness" not in thresholds["outcome_components"]
    ranged = json.loads(cli("monitor", records, "--json", "--range", "found=0:1").stdout)["thresholds"]
    assert ranged["ranges"] == {"found": [0.0, 1.0]}


# (e) `score`: a sample with no task_id whose group is no task is said to name no task


TASK_REWARD = """
from rewardpipe import Reward, component


@component(range=(0, 1), role="outcome")
def matches(completion, task):
    return float(completion.strip() == str(task.answer))


R = Reward("r30_task_reward", [matches])
"""


def test_score_of_a_sample_without_task_id_says_it_names_no_task(cli, tmp_path, monkeypatch):
    (tmp_path / "r30_task_reward.py").write_text(TASK_REWARD)
    monkeypatch.syspath_prepend(str(tmp_path))
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [{"task_id": "t1", "prompt": "say 4", "answer": "4"}])

    def sample(answer: str, **ids: str) -> dict:
        messages = [{"role": "user", "content": f"say {answer}"}, {"role": "assistant", "content": answer}]
        return {**ids, "messages": messages}

    rows = [sample("4", task_id="t1"), sample("5"), sample("6", task_id="t9")]
    samples = write_jsonl(tmp_path / "samples.jsonl", rows)
    out = tmp_path / "store"
    result = cli("score", samples, "--reward", "r30_task_reward:R", "--tasks", tasks, "--out", out, "--run-id", "r")
    assert result.exit_code == 1, result.output
    assert "'p-" not in result.stderr  # the prompt's group id is no task the user named
    assert "1 sample(s) give no task_id" in result.stderr and "'line-2'" in result.stderr
    assert "1 rollout(s) name a task" in result.stderr and "'t9'" in result.stderr
    errors = {r.rollout_id: r.error.message for r in LocalStore(out).iter_records("r") if r.error}
    assert "no task_id" in errors["line-2"] and "p-" not in errors["line-2"]
    assert "'t9'" in errors["line-3"]


# a recorded conversation that does not open as the environment does: the replay error says where and why


def _wordle_rollouts(*openings: list[dict]) -> list[dict]:
    from tests.cli.conftest import BUNDLED_TASKS

    task = json.loads((BUNDLED_TASKS.parent / "wordle_tasks.jsonl").read_text().splitlines()[0])
    guess = {"role": "assistant", "content": f"<guess>{task['answer']}</guess>"}
    return [
        {
            "rollout_id": f"r{index}",
            "group_id": "g",
            "task_id": task["task_id"],
            "messages": [*opening, {"role": "user", "content": task["prompt"]}, guess],
        }
        for index, opening in enumerate(openings)
    ]


def test_score_of_a_conversation_opening_with_the_system_prompt_says_to_leave_it_out(cli, tmp_path):
    from rewardpipe.envs.wordle.environment import POLICY_SYSTEM_PROMPT
    from tests.cli.conftest import BUNDLED_TASKS

    rollouts = _wordle_rollouts([], [{"role": "system", "content": POLICY_SYSTEM_PROMPT}])
    rollouts.append({**rollouts[0], "rollout_id": "r2"})
    rollouts[2]["messages"] = [{"role": "user", "content": "another prompt"}, *rollouts[2]["messages"][1:]]
    path = write_jsonl(tmp_path / "rollouts.jsonl", rollouts)
    tasks = BUNDLED_TASKS.parent / "wordle_tasks.jsonl"
    result = cli("score", path, "--env", "wordle", "--tasks", tasks, "--out", tmp_path / "s", "--run-id", "r", "--json")
    status = {line["rollout_id"]: line for line in map(json.loads, result.stdout.splitlines())}
    assert status["r0"]["status"] == "scored"
    system = status["r1"]["error"]["message"]
    assert "system message" in system and "system_prompt" in system and "leave it out" in system
    other = status["r2"]["error"]["message"]
    assert "message 1 is a user message 'another prompt'" in other


# rewardpipe.testing.check_reward given the samples file (as check_environment takes a task file)

EXAMPLE_REWARD = BUNDLED_TASKS.parents[2] / "examples" / "your_own_reward"


def test_check_reward_reads_a_samples_file_and_names_a_sample_that_is_no_dict(tmp_path, monkeypatch):
    import pytest

    from rewardpipe.testing import check_reward

    monkeypatch.syspath_prepend(str(EXAMPLE_REWARD))  # README's my_reward.py

    def sample(answer: str) -> dict:
        messages = [{"role": "user", "content": "6 * 7?"}, {"role": "assistant", "content": answer}]
        return {"rollout_id": answer, "group_id": "g", "reference": "42", "messages": messages}

    path = write_jsonl(tmp_path / "samples.jsonl", [sample('{"answer": "42"}'), sample('{"answer": "41"}')])
    scores = check_reward("my_reward:json_answer", path, require_variation=False)
    assert [s.components["answer_correct"] for s in scores] == [1.0, 0.0]
    assert len(check_reward("my_reward:json_answer", str(path), require_variation=False)) == 2
    bad = write_jsonl(tmp_path / "bad.jsonl", [sample('{"answer": "42"}'), "[1, 2]", "{not json"])
    with pytest.raises(ValueError, match=r"bad.jsonl:2: .*not a JSON object"):
        check_reward("my_reward:json_answer", bad)
    with pytest.raises(ValueError, match=r"sample 1 is a str, not a dict"):
        check_reward("my_reward:json_answer", [sample('{"answer": "42"}'), "completion"])


def test_report_of_a_records_file_says_there_is_no_transcript_store(cli, tmp_path):
    import html

    records = write_jsonl(tmp_path / "records.jsonl", _error_records("plain failure"))
    result = cli("report", records, "--out", tmp_path / "r.html")
    assert result.exit_code == 0, result.output
    page = " ".join(html.unescape((tmp_path / "r.html").read_text()).split())
    assert "transcripts were not loaded" not in page
    assert "no transcript store" in page and "runs/run/transcripts/step=0/group=g0/" in page


# a command that scored nothing at all (every rollout an error record) says so and exits 1


def test_a_run_whose_every_rollout_failed_on_the_endpoint_exits_1(cli, tmp_path):
    out = tmp_path / "store"
    result = cli(
        "run", "--tasks", BUNDLED_TASKS, "--policy", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
        "--steps", "1", "--group-size", "2", "--groups-per-step", "2", "--endpoint-retries", "0",
        "--out", out, "--run-id", "o",
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "no rollout was scored" in result.stderr and "policy_error 4" in result.stderr
    assert [r.error.kind for r in LocalStore(out).iter_records("o")] == ["policy_error"] * 4  # kept as evidence


def test_score_whose_every_sample_is_an_error_record_exits_1(cli, tmp_path):
    from rewardpipe.envs.wordle.environment import POLICY_SYSTEM_PROMPT

    system = [{"role": "system", "content": POLICY_SYSTEM_PROMPT}]
    path = write_jsonl(tmp_path / "rollouts.jsonl", _wordle_rollouts(system, system))
    tasks = BUNDLED_TASKS.parent / "wordle_tasks.jsonl"
    result = cli("score", path, "--env", "wordle", "--tasks", tasks, "--out", tmp_path / "s", "--run-id", "r")
    assert result.exit_code == 1, result.output
    assert "no rollout was scored" in result.stderr and "replay_failed 2" in result.stderr
    # one scored rollout among the errors is a run that measured something: it does not say "no rollout was
    # scored" (round thirty-one: the rollout that failed replay still makes the exit status 1, and is named)
    path = write_jsonl(tmp_path / "mixed.jsonl", _wordle_rollouts([], system))
    mixed = cli("score", path, "--env", "wordle", "--tasks", tasks, "--out", tmp_path / "m", "--run-id", "r")
    assert "no rollout was scored" not in mixed.stderr and "1 of 2 recorded rollout(s)" in mixed.stderr


def test_show_of_a_single_turn_sample_does_not_speak_of_an_environment(cli, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE_REWARD))
    samples = EXAMPLE_REWARD / "samples.jsonl"
    out = tmp_path / "store"
    assert cli("score", samples, "--reward", "my_reward:json_answer", "--out", out, "--run-id", "s").exit_code == 0
    shown = cli("show", out, "--rollout", "r1")
    assert "not_executed" in shown.stdout and "environment" not in shown.stdout
    assert "the reward runs no code" in shown.stdout
