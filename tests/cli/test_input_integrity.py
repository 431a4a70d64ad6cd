"""Issue 9: inputs are read line by line, ids are unique and any length, scores are finite, JSON is clean."""

import json

from rewardpipe.models import MAX_ID_LENGTH
from rewardpipe.store import LocalStore
from tests.cli.conftest import make_task, write_jsonl

CODE = "```python\ndef add(a, b):\n    return a + b\n```"


def rollout(rid, group="g0", messages=None, **extra):
    return {
        "rollout_id": rid,
        "group_id": group,
        "task_id": "add",
        "step": 0,
        "messages": messages
        if messages is not None
        else [{"role": "user", "content": "add"}, {"role": "assistant", "content": CODE}],
        **extra,
    }


def score(cli, tmp_path, rows, *extra):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_task()])
    rollouts = tmp_path / "rollouts.jsonl"
    if isinstance(rows, bytes):
        rollouts.write_bytes(rows)
    else:
        write_jsonl(rollouts, rows)
    return cli("score", rollouts, "--tasks", tasks, "--out", tmp_path / "store", "--run-id", "s", *extra), rollouts


def test_a_repeated_rollout_id_is_a_bad_line_naming_both_lines(cli, tmp_path):
    result, path = score(cli, tmp_path, [rollout("a"), rollout("b"), rollout("a", group="g1")])
    assert result.exit_code == 1
    assert f"{path}:3 (a): duplicate rollout_id (first on line 1)" in result.stderr
    assert "scored 2, errors 0, skipped lines 1" in result.stdout
    assert {r.rollout_id for r in LocalStore(tmp_path / "store").iter_records("s")} == {"a", "b"}


def test_line_one_is_named_file_colon_one(cli, tmp_path):
    result, path = score(cli, tmp_path, ["{oops", rollout("a")])
    assert f"{path}:1: not valid JSON" in result.stderr
    assert f"{path}1:" not in result.stderr


def test_an_empty_transcript_is_a_bad_input_not_a_zero(cli, tmp_path):
    result, path = score(cli, tmp_path, [rollout("empty", messages=[]), rollout("a")])
    assert result.exit_code == 1
    assert f"{path}:1 (empty): field 'messages'" in result.stderr
    assert [r.rollout_id for r in LocalStore(tmp_path / "store").iter_records("s")] == ["a"]


def test_a_transcript_without_an_assistant_message_is_a_bad_input_not_a_zero(cli, tmp_path):
    silent = [
        rollout("user-only", messages=[{"role": "user", "content": "add"}]),
        rollout("system-only", messages=[{"role": "system", "content": "be brief"}]),
        rollout(
            "empty-answer", messages=[{"role": "user", "content": "add"}, {"role": "nova_assistant", "content": ""}]
        ),
    ]
    result, path = score(cli, tmp_path, silent)
    assert result.exit_code == 1
    assert f"{path}:1 (user-only): field 'messages': no assistant message" in result.stderr
    assert f"{path}:2 (system-only): field 'messages': no assistant message" in result.stderr
    # an empty answer is something the model said: it is scored
    assert [r.rollout_id for r in LocalStore(tmp_path / "store").iter_records("s")] == ["empty-answer"]


def test_one_invalid_utf8_byte_costs_one_line(cli, tmp_path):
    good = json.dumps(rollout("a")).encode()
    bad = json.dumps(rollout("b")).encode().replace(b"add", b"ad\xe9", 1)
    result, path = score(cli, tmp_path, good + b"\n" + bad + b"\n" + json.dumps(rollout("c")).encode() + b"\n")
    assert result.exit_code == 1
    assert f"{path}:2: not UTF-8 text" in result.stderr
    assert {r.rollout_id for r in LocalStore(tmp_path / "store").iter_records("s")} == {"a", "c"}


def test_a_line_separator_inside_a_string_does_not_split_the_line(cli, tmp_path):
    # (ids may not hold them: the id rule, tests/cli/test_input_rules.py; message text may)
    def with_text(rid, text):
        return rollout(rid, messages=[{"role": "user", "content": text}, {"role": "assistant", "content": CODE}])

    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_task()])
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text(
        "".join(
            json.dumps(with_text(rid, text), ensure_ascii=False) + "\n"
            for rid, text in (("a", "x\u2028y\u2029z"), ("c", "c\x85d\rq"))
        ),
        encoding="utf-8",
    )
    result = cli("score", rollouts, "--tasks", tasks, "--out", tmp_path / "store", "--run-id", "s")
    assert result.exit_code == 0, result.output
    assert {r.rollout_id for r in LocalStore(tmp_path / "store").iter_records("s")} == {"a", "c"}


def test_ids_are_length_checked_at_the_input_and_long_ones_are_stored(cli, tmp_path):
    long_id = "\u00e9" * 400  # 2400 characters once percent-encoded: a hashed key
    too_long = "x" * (MAX_ID_LENGTH + 1)
    result, path = score(cli, tmp_path, [rollout(long_id, group=long_id), rollout(too_long)])
    assert result.exit_code == 1
    assert f"{path}:2" in result.stderr and "rollout_id" in result.stderr
    records = list(LocalStore(tmp_path / "store").iter_records("s"))
    assert [r.rollout_id for r in records] == [long_id] and records[0].group_id == long_id


def test_huge_weights_give_a_clear_error_record_never_a_null_score(cli, tmp_path):
    # a guess that passes: correctness 1 and guessed_immediately -1, so 1e308 + 1e308 overflows to inf
    result, _ = score(
        cli,
        tmp_path,
        [rollout("a")],
        "--weight",
        "correctness=1e308",
        "--weight",
        "guessed_immediately=-1e308",
        "--json",
    )
    record = json.loads(result.stdout)
    assert record["status"] == "error" and record["error"]["kind"] == "non_finite_aggregate"
    assert "smaller weights" in record["error"]["message"] and record["aggregate"] is None
    monitored = tmp_path / "records.jsonl"
    monitored.write_text(result.stdout)
    assert cli("monitor", monitored, "--json").exit_code in (0, 1)  # readable, no crash


def test_weights_that_make_an_absurd_but_finite_sum_give_an_error_record(cli, tmp_path):
    # 1e200 is finite, but the monitor squares and sums rewards: it would overflow there (a crash, once)
    result, _ = score(cli, tmp_path, [rollout("a")], "--weight", "correctness=1e200", "--json")
    record = json.loads(result.stdout)
    assert record["status"] == "error" and record["error"]["kind"] == "aggregate_out_of_range"
    assert "beyond ±1e+100" in record["error"]["message"] and record["aggregate"] is None


def test_a_component_out_of_range_is_an_error_record_naming_it():
    from rewardpipe.episode import checked_score

    components, aggregate, error = checked_score({"a": 1e150, "b": 0.5}, {"a": 1.0, "b": 1.0}, 1e150, None)
    assert components == {"a": None, "b": 0.5} and aggregate is None
    assert error.kind == "component_out_of_range" and error.message.startswith("component 'a': 1e+150 is beyond")


def test_records_with_absurd_scores_are_excluded_like_nan_not_a_crash(cli, tmp_path):
    """A record file from elsewhere (a trainer, an older rewardpipe) with finite but huge numbers: the
    monitor and the report (careful, columnar and store readers alike) exclude such a value for its
    component only, as they do NaN, and check everything else."""
    from rewardpipe.models import Record

    good = [
        {
            "run_id": "x",
            "step": 0,
            "group_id": "g",
            "rollout_id": f"r{i}",
            "task_id": "t",
            "status": "scored",
            "components": {"c": float(i % 2), "d": 0.5},
            "weights": {"c": 1.0, "d": 1.0},
            "aggregate": float(i % 2) + 0.5,
        }
        for i in range(4)
    ]
    bad = {**good[0], "rollout_id": "huge", "components": {"c": 1e200, "d": 1e160}, "aggregate": 1e200}
    records = write_jsonl(tmp_path / "records.jsonl", [*good, bad])
    store = LocalStore(tmp_path / "store")
    for row in (*good, bad):
        store.put_record(Record.model_validate(row))
    for source in (records, tmp_path / "store"):
        result = cli("monitor", source, "--json")
        assert result.exit_code == 0, result.output
        step = json.loads(result.stdout)["steps"][0]
        assert step["records"] == 5
        assert step["components"]["c"]["non_finite"] == 1 and step["components"]["c"]["values"] == 4
        assert step["aggregate"]["non_finite"] == 1
        report = cli("report", source, "--json")
        assert report.exit_code == 0 and "rewardpipe bug" not in report.output, report.output


def test_a_non_finite_weight_is_a_usage_error(cli, tmp_path):
    result, _ = score(cli, tmp_path, [rollout("a")], "--weight", "correctness=inf")
    assert result.exit_code == 2 and "finite" in result.stderr


def test_score_streams_in_batches_and_prints_ascii_json_lines(cli, tmp_path):
    rows = [rollout(f"r\u00e9-{i}", group=f"g{i % 2}") for i in range(7)]
    result, _ = score(cli, tmp_path, rows, "--batch-size", "2", "--json")
    assert result.exit_code == 0, result.output
    assert result.stdout.isascii()
    lines = result.stdout.splitlines()
    assert [json.loads(line)["rollout_id"] for line in lines] == [f"r\u00e9-{i}" for i in range(7)]


def test_doctor_on_an_empty_task_file_is_an_error(cli, tmp_path):
    empty = tmp_path / "tasks.jsonl"
    empty.write_text("\n")
    result = cli("doctor", "--tasks", empty)
    assert result.exit_code == 1 and "contains no tasks" in result.stderr and "0/0" not in result.output


def test_task_file_with_a_bad_byte_names_its_line(cli, tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(
        json.dumps(make_task("a")).encode() + b"\n" + json.dumps(make_task("b")).encode()[:-2] + b'\xff"}\n'
    )
    for args in (("tasks", "validate", path), ("doctor", "--tasks", path)):
        result = cli(*args)
        assert result.exit_code == 1 and f"{path}:2: not UTF-8 text" in result.stderr


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_bare_wrong_entry_point_is_an_error_in_every_tests_format(cli, tmp_path):
    code = _write(tmp_path, "code.py", "def add(a, b):\n    return a + b\n")
    unittest_tests = _write(
        tmp_path,
        "unit.py",
        "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n        self.assertEqual(add(1, 2), 3)\n",
    )
    check_tests = _write(tmp_path, "check.py", "def check(candidate):\n    assert add(1, 2) == 3\n")
    for tests, tests_format in ((unittest_tests, "unittest"), (check_tests, "check")):
        result = cli(
            "exec",
            "--code",
            code,
            "--tests",
            tests,
            "--entry-point",
            "nonexistent",
            "--tests-format",
            tests_format,
            "--json",
        )
        verdict = json.loads(result.stdout)
        assert verdict["status"] == "error", (tests_format, verdict)
        assert "does not define the entry point 'nonexistent'" in verdict["reason"]
        ok = cli(
            "exec", "--code", code, "--tests", tests, "--entry-point", "add", "--tests-format", tests_format, "--json"
        )
        assert json.loads(ok.stdout)["status"] == "passed"
