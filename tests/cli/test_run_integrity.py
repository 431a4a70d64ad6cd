"""Issue 9: nothing lost, mixed or double counted by `run` (run ids, manifests, S3 faults, knobs)."""

import hashlib
import json

import boto3
import pytest
from moto import mock_aws

from rewardpipe.store import LocalStore, S3Store, StoreError
from tests.cli.conftest import BUNDLED_TASKS

SMALL = ("--steps", 2, "--group-size", 4, "--groups-per-step", 3)


def run(cli, out, run_id, *extra):
    return cli("run", "--tasks", BUNDLED_TASKS, *SMALL, "--out", out, "--run-id", run_id, "--json", *extra)


# -- 1. a run id means one experiment ---------------------------------------------------------------


def test_reusing_a_run_id_is_refused_and_mixes_nothing(cli, tmp_path):
    assert run(cli, tmp_path, "exp").exit_code == 0
    before = sorted(LocalStore(tmp_path).list_keys("runs/exp/"))
    again = run(cli, tmp_path, "exp", "--seed", "7")
    assert again.exit_code == 1
    assert "already holds records" in again.stderr and "--resume" in again.stderr and "--overwrite" in again.stderr
    assert again.stdout == ""
    assert sorted(LocalStore(tmp_path).list_keys("runs/exp/")) == before  # not one object touched
    assert len(list(LocalStore(tmp_path).iter_records("exp"))) == 2 * 3 * 4


def test_overwrite_deletes_the_old_run_first(cli, tmp_path):
    assert (
        cli(
            "run",
            "--tasks",
            BUNDLED_TASKS,
            "--steps",
            3,
            "--group-size",
            4,
            "--groups-per-step",
            3,
            "--out",
            tmp_path,
            "--run-id",
            "exp",
            "--json",
        ).exit_code
        == 0
    )
    result = run(cli, tmp_path, "exp", "--overwrite")  # two steps now, not three
    assert result.exit_code == 0, result.output
    store = LocalStore(tmp_path)
    assert store.list_steps("exp") == [0, 1]
    assert not any("step=2" in key for key in store.list_keys("runs/exp/"))
    assert [s["records"] for s in json.loads(result.stdout)["steps"]] == [12, 12]


def test_manifest_records_what_the_run_was(cli, tmp_path):
    result = run(cli, tmp_path, "exp", "--weight", "loop_penalty=0.5", "--seed", "3")
    assert result.exit_code == 0, result.output
    manifest = LocalStore(tmp_path).get_json("runs/exp/manifest.json")
    assert manifest["schema"] == "rewardpipe.run-manifest/v2" and manifest["run_id"] == "exp"
    assert manifest["environment"] == "ask_before_coding" and manifest["environment_version"] == "1"
    assert manifest["components"]["loop_penalty"] == {"range": [-0.5, 0.0], "role": "penalty", "weight": 0.5}
    assert manifest["tasks_sha256"] == hashlib.sha256(BUNDLED_TASKS.read_bytes()).hexdigest()
    assert manifest["reward"] == "ask_before_coding" and manifest["weights"]["loop_penalty"] == 0.5
    assert manifest["configuration"]["seed"] == 3 and manifest["configuration"]["group_size"] == 4
    assert set(manifest["versions"]) == {"rewardpipe", "python"}
    assert manifest["started_at"] <= manifest["finished_at"]
    assert json.loads(result.stdout)["manifest"] == manifest


def test_resume_skips_what_is_stored_and_finishes_the_rest(cli, tmp_path):
    assert run(cli, tmp_path, "exp").exit_code == 0
    store = LocalStore(tmp_path)
    complete = {r.rollout_id: r.aggregate for r in store.iter_records("exp")}
    lost = [k for k in store.list_keys("runs/exp/step=1/")][:5]  # an interrupted run: five rollouts missing
    for key in lost:
        (tmp_path / key).unlink()
    kept = {k: (tmp_path / k).stat().st_mtime_ns for k in store.list_keys("runs/exp/step=0/")}
    result = run(cli, tmp_path, "exp", "--resume")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["skipped_already_stored"] == 2 * 3 * 4 - 5
    assert {r.rollout_id: r.aggregate for r in store.iter_records("exp")} == complete  # same seed, same scores
    assert {k: (tmp_path / k).stat().st_mtime_ns for k in kept} == kept  # stored records were not redone


def test_a_shorter_resume_keeps_the_manifest_true_to_the_steps_stored(cli, tmp_path):
    assert run(cli, tmp_path, "exp").exit_code == 0  # two steps
    result = cli(
        "run",
        "--tasks",
        BUNDLED_TASKS,
        "--steps",
        1,
        "--group-size",
        4,
        "--groups-per-step",
        3,
        "--out",
        tmp_path,
        "--run-id",
        "exp",
        "--json",
        "--resume",
    )
    assert result.exit_code == 0, result.output
    assert LocalStore(tmp_path).get_json("runs/exp/manifest.json")["steps"] == 2
    assert LocalStore(tmp_path).list_steps("exp") == [0, 1]


@pytest.mark.parametrize("flag", [None, "--resume", "--overwrite"])
def test_a_run_id_another_process_is_writing_is_refused(cli, tmp_path, flag):
    # two launches of one run id at once (a scheduler's retry while the first still runs) both found no
    # records, both ran, and the store held a mix of the two experiments under one manifest
    held = LocalStore(tmp_path).lock_run("exp")  # what the other process holds while it runs
    try:
        result = run(cli, tmp_path, "exp", *([flag] if flag else []))
        assert result.exit_code == 1
        assert "run 'exp' is being written by another rewardpipe process right now" in result.stderr
        assert not (tmp_path / "runs" / "exp").exists()
    finally:
        held.close()
    assert run(cli, tmp_path, "exp").exit_code == 0  # the lock ends with its process (or handle)
    assert run(cli, tmp_path, "exp2").exit_code == 0  # and it is per run id


def test_resume_with_a_different_configuration_is_refused(cli, tmp_path):
    assert run(cli, tmp_path, "exp").exit_code == 0
    for extra, named in (
        (("--seed", "1"), "seed"),
        (("--weight", "correctness=2"), "weights"),
        (("--group-size", "5"), "group_size"),
    ):
        args = [a for a in ("run", "--tasks", BUNDLED_TASKS, *SMALL, "--out", tmp_path, "--run-id", "exp")]
        if extra[0] == "--group-size":
            args[args.index("--group-size") + 1] = extra[1]
            extra = ()
        result = cli(*args, *extra, "--resume")
        assert result.exit_code == 1 and named in result.stderr and "different configuration" in result.stderr
    other_tasks = tmp_path / "tasks.jsonl"
    other_tasks.write_bytes(BUNDLED_TASKS.read_bytes() + b"\n")
    result = cli("run", "--tasks", other_tasks, *SMALL, "--out", tmp_path, "--run-id", "exp", "--resume")
    assert result.exit_code == 1 and "tasks_sha256" in result.stderr


def test_overwrite_and_resume_together_is_a_usage_error(cli, tmp_path):
    result = run(cli, tmp_path, "exp", "--overwrite", "--resume")
    assert result.exit_code == 2 and not any(tmp_path.iterdir())


@pytest.fixture
def aws(monkeypatch):
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="scores")
        yield client


def test_overwrite_deletes_the_run_prefix_on_s3(cli, aws):
    assert (
        cli(
            "run",
            "--tasks",
            BUNDLED_TASKS,
            "--steps",
            3,
            "--group-size",
            2,
            "--groups-per-step",
            2,
            "--out",
            "s3://scores/team",
            "--run-id",
            "exp",
            "--json",
        ).exit_code
        == 0
    )
    aws.put_object(Bucket="scores", Key="team/runs/exp-other/keep.json", Body=b"{}")
    assert run(cli, "s3://scores/team", "exp").exit_code == 1
    result = cli(
        "run",
        "--tasks",
        BUNDLED_TASKS,
        "--steps",
        1,
        "--group-size",
        2,
        "--groups-per-step",
        2,
        "--out",
        "s3://scores/team",
        "--run-id",
        "exp",
        "--json",
        "--overwrite",
    )
    assert result.exit_code == 0, result.output
    keys = [o["Key"] for o in aws.list_objects_v2(Bucket="scores")["Contents"]]
    assert not any("step=1" in k or "step=2" in k for k in keys)
    assert "team/runs/exp-other/keep.json" in keys


# -- 4. S3 faults do not abort or lose -------------------------------------------------------------------


def test_records_the_store_refuses_are_spilled_to_a_named_file(cli, aws, tmp_path, monkeypatch):
    real_write = S3Store._write

    def refuse_records(self, key, data):
        if "/group=" in key and key.endswith("-k1.json"):  # every second rollout of each group
            raise StoreError("S3 error SlowDown on s3://scores while trying to write (after retries)")
        return real_write(self, key, data)

    monkeypatch.setattr(S3Store, "_write", refuse_records)
    spill = tmp_path / "spill.jsonl"
    result = run(cli, "s3://scores", "exp", "--spill", spill)
    assert result.exit_code == 1
    assert str(spill) in result.stderr.splitlines()[-1]  # the final message names the file
    spilled = [json.loads(line) for line in spill.read_text().splitlines()]
    assert len(spilled) == 2 * 3 and all(r["rollout_id"].endswith("-k1") for r in spilled)
    stored = S3Store("scores", client=aws)
    assert len(list(stored.iter_records("exp"))) + len(spilled) == 2 * 3 * 4
    assert json.loads(result.stdout)["unstored"] == 6


def refuse_json_writes(monkeypatch, refused) -> None:
    """The local store's put_json fails (as S3 does after its retries) for every key ``refused(key)`` picks."""
    real_put_json = LocalStore.put_json

    def put_json(self, key, obj):
        if refused(key):
            raise StoreError(f"S3 error InternalError writing {key} (after retries)")
        return real_put_json(self, key, obj)

    monkeypatch.setattr(LocalStore, "put_json", put_json)


def test_every_failed_alarm_write_is_reported(cli, tmp_path, monkeypatch):
    refuse_json_writes(monkeypatch, lambda key: "/alarms/" in key)
    result = cli(
        "run",
        "--tasks",
        BUNDLED_TASKS,
        "--steps",
        2,
        "--group-size",
        8,
        "--groups-per-step",
        5,
        "--collapse-from-step",
        1,
        "--out",
        tmp_path,
        "--run-id",
        "c",
        "--json",
    )
    assert result.exit_code == 1
    summary = json.loads(result.stdout)
    assert summary["alarms"] and summary["alarm_failures"] == len(summary["alarms"])
    for alarm in summary["alarms"]:
        assert "alarm not delivered" in result.stderr and alarm["component"] in result.stderr
    assert result.stderr.count("alarm not delivered") == len(summary["alarms"])


def test_a_failing_state_write_does_not_abort_the_run(cli, tmp_path, monkeypatch):
    refuse_json_writes(monkeypatch, lambda key: key.endswith("monitor/state.json"))
    result = run(cli, tmp_path, "exp")
    assert "Traceback" not in result.output
    assert result.exit_code == 1 and "monitor" in result.stderr
    assert len(list(LocalStore(tmp_path).iter_records("exp"))) == 2 * 3 * 4  # every record still stored


def test_a_step_the_monitor_cannot_check_is_named_as_such_not_as_an_alarm(cli, tmp_path, monkeypatch):
    def unreachable(store, run_id, step, *args, **kwargs):
        raise StoreError(f"S3 error InternalError reading step {step} (after retries)")

    monkeypatch.setattr("rewardpipe.monitoring.monitor_step", unreachable)  # where `run` imports it from
    result = run(cli, tmp_path, "exp")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["unchecked_steps"] == [0, 1]
    assert "the monitor could not check step(s) 0, 1" in result.stderr
    assert "alarm(s) could not be delivered" not in result.stderr


@pytest.mark.parametrize("command", ["run", "score"])
def test_a_manifest_that_cannot_be_written_makes_exit_1(cli, tmp_path, monkeypatch, command):
    refuse_json_writes(monkeypatch, lambda key: key.endswith("/manifest.json"))
    if command == "run":
        result = run(cli, tmp_path, "exp")
    else:
        rollouts = tmp_path / "r.jsonl"
        rollouts.write_text(
            json.dumps(
                {
                    "rollout_id": "r",
                    "group_id": "g",
                    "task_id": "abc-004-parse-bool",
                    "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
                }
            )
            + "\n"
        )
        result = cli("score", rollouts, "--tasks", BUNDLED_TASKS, "--out", tmp_path, "--run-id", "exp")
    assert result.exit_code == 1, result.output
    assert "could not write the run manifest (start)" in result.stderr
    assert result.stderr.rstrip().endswith(
        "could not write the run manifest (start), the run manifest (end) (see above)"
    )
    assert list(LocalStore(tmp_path).iter_records("exp"))  # the records themselves are stored


# -- 7/10. options: workers cap, endpoint knobs, the monitor's knobs ----------------------------------


def test_workers_above_the_limit_are_capped_and_said(cli, tmp_path):
    result = run(cli, tmp_path, "w", "--workers", "65")
    assert result.exit_code == 0, result.output
    assert "--workers 65" in result.stderr and "64" in result.stderr


def test_endpoint_timeout_and_retries_are_options(cli, tmp_path):
    result = cli(
        "run",
        "--tasks",
        BUNDLED_TASKS,
        "--policy",
        "openai",
        "--base-url",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--endpoint-timeout",
        "0",
        "--out",
        tmp_path,
    )
    assert result.exit_code == 2 and "--endpoint-timeout" in result.stderr
    result = cli(
        "run",
        "--tasks",
        BUNDLED_TASKS,
        "--policy",
        "openai",
        "--base-url",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--endpoint-timeout",
        "0.2",
        "--endpoint-retries",
        "0",
        "--steps",
        1,
        "--group-size",
        2,
        "--groups-per-step",
        1,
        "--out",
        tmp_path,
        "--run-id",
        "e",
        "--json",
    )
    records = list(LocalStore(tmp_path).iter_records("e"))
    assert len(records) == 2 and all(r.status == "error" and r.error.kind == "policy_error" for r in records)
    assert all("1 attempts" in r.error.message for r in records)


def test_run_takes_the_monitors_ignore_and_thresholds(cli, tmp_path):
    args = (
        "run",
        "--tasks",
        BUNDLED_TASKS,
        "--steps",
        2,
        "--group-size",
        8,
        "--groups-per-step",
        5,
        "--collapse-from-step",
        1,
        "--json",
    )
    plain = json.loads(cli(*args, "--out", tmp_path / "a", "--run-id", "c").stdout)
    assert "asked_before_coding" in {a["component"] for a in plain["alarms"]}
    ignored = json.loads(
        cli(
            *args,
            "--out",
            tmp_path / "b",
            "--run-id",
            "c",
            "--ignore",
            "asked_before_coding",
            "--epsilon",
            "1e-3",
            "--range",
            "correctness=0:1",
        ).stdout
    )
    assert "asked_before_coding" not in {a["component"] for a in ignored["alarms"]}
    assert {a["component"] for a in ignored["alarms"]} == {a["component"] for a in plain["alarms"]} - {
        "asked_before_coding"
    }
    assert cli(*args, "--out", tmp_path / "c", "--epsilon", "-1").exit_code == 2


# -- 8. stdout for data, one ASCII JSON object per line ----------------------------------------------------


def test_run_json_is_one_ascii_line_on_stdout(cli, tmp_path):
    result = run(cli, tmp_path, "r\u00e9sum\u00e9")
    assert result.exit_code == 0, result.output
    assert result.stdout.endswith("\n") and result.stdout.count("\n") == 1
    assert result.stdout.isascii()
    assert json.loads(result.stdout)["run_id"] == "r\u00e9sum\u00e9"
