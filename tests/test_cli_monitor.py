"""`rewardpipe monitor`: directory, JSONL and S3 inputs, JSON output, exit codes, clear errors."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws
from typer.testing import CliRunner

from rewardpipe.cli import app
from rewardpipe.models import ErrorInfo, Record
from rewardpipe.store import LocalStore, S3Store
from tests.test_store import aws_env  # noqa: F401  (fixture: fake credentials for moto)


def make_records(run="demo", steps=(0, 1), dead_from=1, groups=6, k=4):
    """correctness varies at steps < dead_from and is 0.0 everywhere from dead_from on."""
    out = []
    for step in steps:
        for g in range(groups):
            for i in range(k):
                corr = 0.0 if step >= dead_from else float(i % 2)
                out.append(
                    Record(
                        run_id=run,
                        step=step,
                        group_id=f"g{g}",
                        rollout_id=f"g{g}-{i}",
                        task_id=f"t{g}",
                        status="scored",
                        components={"correctness": corr, "asked_before_coding": float(i % 2)},
                        weights={"correctness": 1.0, "asked_before_coding": 0.6},
                        aggregate=corr + 0.6 * (i % 2),
                    )
                )
    return out


@pytest.fixture
def run_cli():
    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(app, ["monitor", *[str(a) for a in args]], catch_exceptions=False)

    return invoke


@pytest.fixture
def store_dir(tmp_path):
    store = LocalStore(tmp_path / "store")
    for record in make_records():
        store.put_record(record)
    return tmp_path / "store"


@pytest.fixture
def jsonl(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text("".join(r.to_json() + "\n" for r in make_records()))
    return path


def check_payload(data):
    steps = {s["step"]: s for s in data["steps"]}
    assert steps[0]["components"]["correctness"]["verdict"] == "ok"
    dead = steps[1]["components"]["correctness"]
    assert dead["verdict"] == "dead" and dead["cause"] == "constant_at_minimum"
    assert dead["zero_variance_group_fraction"] == 1.0
    for key in ("mean", "std", "within_group_std_mean", "eligible_groups"):
        assert key in dead
    assert steps[1]["aggregate"]["verdict"] == "ok"
    assert [(a["component"], a["kind"], a["step"]) for a in data["alarms"]] == [("correctness", "dead_component", 1)]


def test_monitor_directory_json(run_cli, store_dir):
    result = run_cli(store_dir, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    check_payload(data)
    assert data["run_id"] == "demo" and data["unreadable"] == []
    # the alarm is written beside the records
    assert (
        LocalStore(store_dir).get_json("runs/demo/alarms/step=1/correctness-dead_component.json")["kind"]
        == "dead_component"
    )


def test_monitor_jsonl_json(run_cli, jsonl):
    result = run_cli(jsonl, "--json")
    assert result.exit_code == 0, result.output
    check_payload(json.loads(result.stdout))


def test_monitor_run_directory_inside_store(run_cli, store_dir):
    result = run_cli(store_dir / "runs" / "demo", "--json", "--step", 1)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [s["step"] for s in data["steps"]] == [1]


def test_fail_on_alarm_exit_code(run_cli, store_dir, jsonl):
    assert run_cli(store_dir, "--json", "--fail-on-alarm").exit_code == 2
    assert run_cli(jsonl, "--fail-on-alarm").exit_code == 2
    # no alarm -> 0 even with --fail-on-alarm
    assert run_cli(jsonl, "--fail-on-alarm", "--step", 0).exit_code == 0
    # ignoring the dead component -> 0
    assert run_cli(jsonl, "--fail-on-alarm", "--ignore", "correctness", "--ignore", "aggregate").exit_code == 0


def test_table_output(run_cli, store_dir):
    result = run_cli(store_dir)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "correctness" in out and "constant_at_minimum" in out and "100%" in out
    assert "ALARM DEAD" in out and "are the tests running the model's code" in out


def test_thresholds_from_options(run_cli, jsonl):
    # with min_groups above the groups of every step together (6 a step), nothing can be judged, even pooled
    data = json.loads(run_cli(jsonl, "--json", "--min-groups", 100).stdout)
    assert data["steps"][1]["components"]["correctness"]["verdict"] == "insufficient_data"
    assert data["alarms"] == [] and data["thresholds"]["min_groups"] == 100
    # declared as a penalty (maximum 0), a component stuck at 0 never fired: info, no alarm ...
    data = json.loads(run_cli(jsonl, "--json", "--range", "correctness=-1:0").stdout)
    stats = data["steps"][1]["components"]["correctness"]
    assert (stats["verdict"], stats["cause"]) == ("info", "penalty_never_fires")
    assert not any(a["component"] == "correctness" for a in data["alarms"])
    # ... unless idle penalties are asked to alarm
    data = json.loads(run_cli(jsonl, "--json", "--range", "correctness=-1:0", "--alarm-idle-penalties").stdout)
    stats = data["steps"][1]["components"]["correctness"]
    assert (stats["verdict"], stats["cause"]) == ("dead", "constant_at_maximum")
    assert any(a["component"] == "correctness" and a["kind"] == "dead_component" for a in data["alarms"])


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--dead-fraction", "0.3"], "recover_fraction (0.5) must not exceed dead_fraction (0.3)"),
        (["--epsilon", "-1"], "epsilon"),
        (["--range", "correctness"], "NAME=MIN:MAX"),
    ],
)
def test_bad_thresholds_are_clear(run_cli, jsonl, args, fragment):
    result = run_cli(jsonl, *args)
    assert result.exit_code == 2  # usage
    assert fragment in result.stderr


def test_bad_path_is_a_clear_error(run_cli, tmp_path):
    result = run_cli(tmp_path / "nope")
    assert result.exit_code == 1
    assert f"PATH not found: {tmp_path / 'nope'}" in result.stderr
    (tmp_path / "empty").mkdir()
    result = run_cli(tmp_path / "empty")
    assert result.exit_code == 1 and f"{tmp_path / 'empty'} is a directory but not a rewardpipe store" in result.stderr


def test_several_runs_need_run_id(run_cli, tmp_path, store_dir):
    store = LocalStore(store_dir)
    for record in make_records(run="other", steps=(0,)):
        store.put_record(record)
    result = run_cli(store_dir)
    assert result.exit_code == 1 and "--run-id" in result.stderr and "demo, other" in result.stderr
    assert run_cli(store_dir, "--run-id", "other", "--json").exit_code == 0
    result = run_cli(store_dir, "--run-id", "missing")
    assert result.exit_code == 1 and "run 'missing' not found" in result.stderr
    # same for a JSONL holding two runs
    path = tmp_path / "two.jsonl"
    path.write_text("".join(r.to_json() + "\n" for r in make_records() + make_records(run="other", steps=(0,))))
    result = run_cli(path)
    assert result.exit_code == 1 and "several runs" in result.stderr
    assert json.loads(run_cli(path, "--run-id", "other", "--json").stdout)["run_id"] == "other"


def test_bad_lines_are_reported_not_fatal(run_cli, jsonl):
    lines = jsonl.read_text().splitlines()
    lines[3] = "{oops"
    error = make_records(steps=(1,))[0].model_copy(
        update={
            "rollout_id": "err",
            "status": "error",
            "error": ErrorInfo(kind="timeout", message="t"),
            "aggregate": None,
        }
    )
    jsonl.write_text("\n".join([*lines, error.to_json()]) + "\n")
    result = run_cli(jsonl, "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert [u["key"] for u in data["unreadable"]] == [f"{jsonl}:4"]
    step1 = data["steps"][1]
    assert step1["errors"] == 1 and step1["error_kinds"] == {"timeout": 1}
    table = run_cli(jsonl)
    assert "skipped unreadable record" in table.stderr


def test_file_of_garbage_is_a_clear_error(run_cli, tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text("not json\n")
    result = run_cli(path)
    assert result.exit_code == 1 and "no readable records" in result.stderr and "1 unreadable" in result.stderr


@pytest.mark.usefixtures("aws_env")
def test_monitor_s3(run_cli):
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="scores")
        store = S3Store("scores", prefix="exp", client=client)
        for record in make_records():
            store.put_record(record)
        result = run_cli("s3://scores/exp", "--json", "--fail-on-alarm")
        assert result.exit_code == 2, result.output
        check_payload(json.loads(result.stdout))
        assert store.get_json("runs/demo/alarms/step=1/correctness-dead_component.json")["step"] == 1
        result = run_cli("s3://no-such-bucket/x")
        assert result.exit_code == 1 and "does not exist" in result.stderr


def test_table_output_names_the_causes_and_shows_examples(run_cli, store_dir):
    # step 1: correctness is 0 everywhere while asked_before_coding carries the whole advantage
    result = run_cli(store_dir)
    assert result.exit_code == 0, result.output
    assert "cause shaping_starves_outcome (step 1): asked_before_coding carries 100% of the GRPO advantage" in " ".join(
        result.stdout.split()
    )
    assert "example g" in result.stdout and "runs/demo/transcripts/step=1/group=g" in result.stdout


def test_a_dying_warning_alone_does_not_fail_the_gate(run_cli, tmp_path):
    records = []
    for step, constant_groups in enumerate([4, 8, 12, 16, 20, 24]):  # 10% .. 60% of 40 groups: dying, not dead
        for g in range(40):
            for i in range(4):
                value = 0.5 if g < constant_groups else float(i % 2)
                records.append(
                    Record(
                        run_id="d",
                        step=step,
                        group_id=f"g{g}",
                        rollout_id=f"g{g}-{i}",
                        task_id="t",
                        status="scored",
                        components={"c": value, "x": float(i % 2)},
                        weights={"c": 1.0, "x": 1.0},
                        aggregate=value + i % 2,
                    )
                )
    path = tmp_path / "dying.jsonl"
    path.write_text("".join(r.to_json() + "\n" for r in records))
    result = run_cli(path, "--json", "--fail-on-alarm")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [(a["component"], a["kind"]) for a in data["alarms"]] == [("c", "dying_component")]
    assert data["steps"][-1]["components"]["c"]["projected_dead_step"] == 8


# -- issue 9: a record delivered twice in a JSONL counts once ---------------------------------------------


def test_repeated_jsonl_records_count_once_keeping_the_last(run_cli, tmp_path):
    records = make_records(steps=(0,), k=4)
    first_copies = [
        r.model_copy(update={"components": {**r.components, "correctness": 0.5}, "aggregate": 0.0})
        for r in records
        if r.rollout_id.endswith("-0")
    ]
    path = tmp_path / "twice.jsonl"
    # a retried delivery: the first rollout of every group appears early with stale values, then again
    path.write_text("".join(r.to_json() + "\n" for r in [*first_copies, *records]))
    result = run_cli(path, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["duplicates_dropped"] == len(first_copies) == 6
    step = data["steps"][0]
    assert step["records"] == len(records)
    # the last copy won: correctness is the 0/1 pattern of make_records, mean 0.5, never the stale 0.5s
    assert step["components"]["correctness"]["within_group_std_mean"] == pytest.approx(0.5)
    assert "6 repeated record(s) dropped" in result.stderr and "line 1" in result.stderr


def test_a_group_of_one_repeated_record_is_not_a_dead_component(run_cli, tmp_path):
    records = make_records(steps=(0,), k=1)
    path = tmp_path / "repeated.jsonl"
    path.write_text("".join(r.to_json() + "\n" for r in records * 2))
    data = json.loads(run_cli(path, "--json").stdout)
    assert data["alarms"] == []  # one rollout per group: no group is eligible, so nothing can be dead
    assert data["steps"][0]["components"]["correctness"]["verdict"] == "insufficient_data"


def test_an_invalid_utf8_line_is_reported_with_its_line_and_the_rest_is_read(run_cli, tmp_path):
    records = make_records(steps=(0,))
    path = tmp_path / "bytes.jsonl"
    lines = [r.to_json().encode() for r in records]
    lines.insert(3, b'{"run_id": "demo\xff"}')
    path.write_bytes(b"\n".join(lines) + b"\n")
    result = run_cli(path, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["steps"][0]["records"] == len(records)
    assert [u["key"] for u in data["unreadable"]] == [f"{path}:4"]
    assert "UTF-8" in data["unreadable"][0]["reason"]


def test_monitor_json_is_one_ascii_line_without_non_finite_numbers(run_cli, tmp_path):
    records = make_records(steps=(0,))
    records[0] = records[0].model_copy(update={"group_id": "gr\u00fcppe \u2028 \u001b[31m"})
    path = tmp_path / "odd.jsonl"
    path.write_text("".join(r.to_json() + "\n" for r in records))
    result = run_cli(path, "--json")
    assert result.stdout.isascii() and result.stdout.count("\n") == 1 and result.stdout.endswith("\n")
    assert "NaN" not in result.stdout and "Infinity" not in result.stdout
    json.loads(result.stdout)
