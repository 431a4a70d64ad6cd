"""Round thirty-seven (second wave), a new user's tool-use environment: what a model's hostile tool calls did
to the CLI paths a user takes (`run --policy replay`, `score --env`, `show`, `report`)."""

import json
from pathlib import Path

import pytest

from rewardpipe import Message

TOOL_TASKS = Path(__file__).resolve().parents[2] / "rewardpipe" / "data" / "tool_call_tasks.jsonl"
# A lone surrogate in the KEY of a call's arguments object: JSON's "\ud800" decodes to one, and a recording, Nova
# or a user's own policy may hand arguments over as an object. (A value holding one was always kept and stored.)
HOSTILE_KEY = "amount\ud800</script><img src=x onerror=alert(1)>"


def tool_task() -> dict:
    return json.loads(TOOL_TASKS.read_text().splitlines()[0])


def recorded_call(rollout_id: str, arguments) -> dict:
    call = {"id": "c1", "type": "function", "function": {"name": "get_balance", "arguments": arguments}}
    return {
        "rollout_id": rollout_id,
        "group_id": "g",
        "task_id": tool_task()["task_id"],
        "messages": [
            {"role": "user", "content": tool_task()["prompt"]},
            {"role": "assistant", "content": "", "tool_calls": [call]},
        ],
    }


def test_a_tool_call_key_holding_a_lone_surrogate_is_text_every_store_can_write():
    message = Message(
        role="assistant", content="", tool_calls=[{"id": "c", "function": {"name": "f", "arguments": {HOSTILE_KEY: 1}}}]
    )
    # How a transcript and a state are written (model_dump(mode="json")): a value's lone surrogate is kept and
    # escaped by the store, a key's raised, failing the whole run
    written = message.model_dump(mode="json")
    (key,) = written["tool_calls"][0]["function"]["arguments"]
    assert key.encode("utf-8") and "\ud800" not in key and key.startswith("amount")


def test_a_key_of_a_nested_list_of_objects_is_made_writable_too():
    calls = [{"id": "c", "function": {"name": "f", "arguments": {"rows": [{"k\udc00": {"\ud83d": 2}}]}}}]
    message = Message(role="assistant", content="", tool_calls=calls)
    (row,) = message.model_dump(mode="json")["tool_calls"][0]["function"]["arguments"]["rows"]
    assert json.dumps(row, ensure_ascii=False).encode("utf-8")
    assert calls[0]["function"]["arguments"] == {"rows": [{"k\udc00": {"\ud83d": 2}}]}  # the caller's own untouched


@pytest.mark.parametrize("command", ["score", "run"])
def test_one_recorded_call_with_such_a_key_does_not_fail_the_run(cli, tmp_path, command):
    rollouts = tmp_path / "rollouts.jsonl"
    rows = [recorded_call("hostile", {HOSTILE_KEY: 1}), recorded_call("plain", {"account": "checking"})]
    rollouts.write_text("".join(json.dumps(row) + "\n" for row in rows))
    tasks = ["--tasks", str(TOOL_TASKS), "--env", "tool_call", "--out", str(tmp_path / "store")]
    if command == "score":
        args = ["score", str(rollouts), *tasks, "--run-id", "r"]
    else:
        args = ["run", *tasks, "--policy", "replay", "--rollouts", str(rollouts), "--run-id", "r", "-k", "2"]
        args += ["--steps", "1", "--groups-per-step", "1"]
    result = cli(*args)
    assert "rewardpipe bug" not in result.output, result.output
    shown = cli("show", str(tmp_path / "store"), "--run-id", "r", "--rollout", "hostile", "--json")
    assert shown.exit_code == 0, shown.output
    assert "amount" in shown.output
    report = cli("report", str(tmp_path / "store"), "--run-id", "r", "--out", str(tmp_path / "report.html"))
    assert report.exit_code == 0, report.output
    assert "<img src=x" not in (tmp_path / "report.html").read_text()
