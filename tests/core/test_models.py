"""Data models: JSONL errors that name line and field, message normalisation, records and the Nova shape."""

import json
import math

import pytest
from pydantic import ValidationError

from rewardpipe.models import (
    ErrorInfo,
    InputFileError,
    Message,
    Record,
    Rollout,
    Task,
    load_tasks,
    nova_output,
    parse_jsonl,
)
from tests.core.conftest import make_task


def task_line(**overrides) -> str:
    return json.dumps({**make_task().model_dump(), **overrides})


def test_parse_jsonl_reads_valid_lines_and_skips_blank_ones():
    lines = [task_line(task_id="a"), "", "   ", task_line(task_id="b")]
    assert [t.task_id for t in parse_jsonl(lines, Task, "tasks.jsonl")] == ["a", "b"]


def test_unknown_field_names_line_and_field():
    lines = [task_line(task_id="a"), task_line(task_id="b", difficulty="hard")]
    with pytest.raises(InputFileError) as caught:
        list(parse_jsonl(lines, Task, "tasks.jsonl"))
    message = str(caught.value)
    assert "tasks.jsonl:2" in message
    assert "unknown field 'difficulty'" in message
    assert "(b)" in message  # the task id helps find the line


def test_missing_field_names_line_and_field():
    raw = make_task(task_id="c").model_dump()
    del raw["entry_point"]
    lines = ["", task_line(task_id="a"), json.dumps(raw)]
    with pytest.raises(InputFileError, match=r"tasks\.jsonl:3 \(c\): missing required field 'entry_point'"):
        list(parse_jsonl(lines, Task, "tasks.jsonl"))


def test_wrong_type_names_the_field():
    with pytest.raises(InputFileError, match=r"x:1.*field 'timeout_s'"):
        list(parse_jsonl([task_line(timeout_s=-5)], Task, "x"))


def test_invalid_json_names_the_line():
    with pytest.raises(InputFileError, match=r"in\.jsonl:2: not valid JSON"):
        list(parse_jsonl([task_line(), "{not json"], Task, "in.jsonl"))


def test_non_object_line_is_rejected():
    with pytest.raises(InputFileError, match=r"in\.jsonl:1: expected a JSON object, got list"):
        list(parse_jsonl(["[1, 2]"], Task, "in.jsonl"))


def test_load_tasks_rejects_duplicate_task_ids(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join([task_line(task_id="a"), task_line(task_id="b"), task_line(task_id="a")]) + "\n")
    with pytest.raises(InputFileError, match=r"tasks\.jsonl:3: duplicate task_id 'a' \(first on line 1\)"):
        load_tasks(path)


def test_load_tasks_reads_a_file(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(task_line(task_id="a") + "\n" + task_line(task_id="b", tests_format="check") + "\n")
    tasks = load_tasks(path)
    assert [t.task_id for t in tasks] == ["a", "b"]
    assert tasks[1].tests_format == "check"


def test_task_rejects_unknown_tests_format():
    with pytest.raises(ValidationError):
        make_task(tests_format="pytest")


# --- Message -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content, text",
    [
        ("plain", "plain"),
        (None, ""),
        ([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "ab"),
        (["x", {"type": "text", "text": "y"}], "xy"),
        ([{"type": "image", "url": "http://img"}, {"type": "text", "text": "only"}], "only"),
        ({"type": "text", "text": "wrapped"}, "wrapped"),
        ([], ""),
    ],
)
def test_message_content_is_normalised_to_text(content, text):
    assert Message(role="user", content=content).content == text


@pytest.mark.parametrize("content", [42, 1.5, True, {"no": "text"}])
def test_message_content_of_other_types_is_rejected(content):
    with pytest.raises(ValidationError, match="content"):
        Message(role="user", content=content)


@pytest.mark.parametrize("role", ["nova_assistant", "model", "assistant"])
def test_assistant_role_aliases(role):
    assert Message(role=role, content="x").role == "assistant"


@pytest.mark.parametrize("role", ["", None, 3])
def test_role_must_be_a_non_empty_string(role):
    with pytest.raises(ValidationError, match="role"):
        Message(role=role, content="x")


def test_rollout_parses_nova_messages():
    rollout = Rollout.model_validate(
        {
            "rollout_id": "r",
            "group_id": "g",
            "task_id": "t",
            "messages": [{"role": "user", "content": "hi"}, {"role": "nova_assistant", "content": [{"text": "yo"}]}],
        }
    )
    assert [(m.role, m.content) for m in rollout.messages] == [("user", "hi"), ("assistant", "yo")]


# --- Record and Nova output --------------------------------------------------------------------------------


def make_record(**overrides) -> Record:
    fields = dict(
        run_id="run",
        step=3,
        group_id="g",
        rollout_id="r1",
        task_id="t",
        status="scored",
        components={"correctness": 0.5, "loop_penalty": -0.5},
        weights={"correctness": 1.0, "loop_penalty": 0.2},
        aggregate=0.4,
        metrics={"turns": 4, "committed": True, "exec_status": "passed", "exec_ms": 12.5},
    )
    fields.update(overrides)
    return Record(**fields)


def test_record_json_round_trip_uses_the_schema_alias():
    record = make_record()
    data = json.loads(record.to_json())
    assert data["schema"] == "rewardpipe.record/v1"
    assert "schema_" not in data
    again = Record.model_validate_json(record.to_json())
    assert again == record


def test_record_round_trip_of_an_error_record():
    record = make_record(
        status="error",
        error=ErrorInfo(kind="execution_error", message="boom"),
        components={"correctness": None, "loop_penalty": 0.0},
        aggregate=None,
    )
    again = Record.model_validate(json.loads(record.to_json()))
    assert again.error == ErrorInfo(kind="execution_error", message="boom")
    assert again.components["correctness"] is None
    assert again.aggregate is None


def test_record_rejects_a_different_schema_version():
    data = json.loads(make_record().to_json())
    data["schema"] = "rewardpipe.record/v2"
    with pytest.raises(ValidationError):
        Record.model_validate(data)


def test_to_nova_for_a_scored_record():
    out = make_record().to_nova()
    assert out["id"] == "r1"
    assert out["aggregate_reward_score"] == 0.4
    by_name = {m["name"]: m for m in out["metrics_list"]}
    assert by_name["correctness"] == {"name": "correctness", "value": 0.5, "type": "Reward"}
    assert by_name["loop_penalty"]["type"] == "Reward"
    assert by_name["turns"] == {"name": "turns", "value": 4, "type": "Metric"}
    assert by_name["committed"]["value"] == 1  # bools become ints
    assert "exec_status" not in by_name  # strings are not numbers: left out
    assert by_name["reward_error"]["value"] == 0


def test_to_nova_omits_none_components_and_flags_the_error():
    record = make_record(
        status="error",
        error=ErrorInfo(kind="x", message="y"),
        components={"correctness": None, "loop_penalty": 0.0},
        aggregate=None,
    )
    out = record.to_nova()
    names = [m["name"] for m in out["metrics_list"]]
    assert "correctness" not in names
    assert "loop_penalty" in names
    assert out["aggregate_reward_score"] == 0.0
    assert {"name": "reward_error", "value": 1, "type": "Metric"} in out["metrics_list"]


def test_nova_output_never_emits_non_finite_numbers():
    out = nova_output("s", float("nan"), {"a": float("inf"), "b": 1.0}, {"m": float("-inf"), "n": 2})
    assert math.isfinite(out["aggregate_reward_score"])
    assert all(math.isfinite(m["value"]) for m in out["metrics_list"])
    names = {m["name"]: m["value"] for m in out["metrics_list"]}
    assert "a" not in names and "m" not in names
    assert names["b"] == 1.0 and names["n"] == 2
    assert names["reward_error"] == 1  # a non-finite aggregate is flagged, not passed off as a 0


@pytest.mark.parametrize("sample_id", ["abc", 7, None, {"k": 1}])
def test_nova_output_echoes_the_id_unchanged(sample_id):
    assert nova_output(sample_id, 1.0, {}, {})["id"] == sample_id


@pytest.mark.parametrize(
    "content",
    [
        [{"type": "text", "text": 5}],
        [{"type": "text", "text": None}],
        [{"type": "text"}],
        ["a", ["nested"]],
        ["a", 7],
        {"type": "text", "text": ["x"]},
    ],
    ids=["int-text", "null-text", "no-text", "nested-list", "int-part", "dict-list-text"],
)
def test_a_malformed_text_part_is_refused_not_read_as_empty(content):
    """Round thirty-three: such parts were skipped, so a malformed answer read as '' and was scored (0.0, unflagged)
    where it should be a malformed sample."""
    with pytest.raises(ValidationError, match="content"):
        Message(role="assistant", content=content)
