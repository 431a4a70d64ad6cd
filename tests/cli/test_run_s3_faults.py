"""Issue 22 item 0: `run` into S3 while S3 drops connections or cuts answers short, on any PUT or GET
(record, transcript, monitor state, manifest): every object is stored or spilled, the run carries on to
its last step, exits 1 naming what is missing, and its --resume stores the rest.

Faults are injected into the client of the store the command opens, at botocore's HTTP layer
(tests/faults.py), over moto."""

from __future__ import annotations

import json

import pytest

from rewardpipe.store import S3Store
from tests.cli.conftest import BUNDLED_TASKS
from tests.faults import S3Faults, fake_aws_env, key_of

STEPS, GROUPS, K = 2, 3, 4
TOTAL = STEPS * GROUPS * K
BUCKET = "scores"


@pytest.fixture
def s3(monkeypatch):
    import boto3
    from moto import mock_aws

    fake_aws_env(monkeypatch)
    monkeypatch.setattr(S3Store, "backoff_s", 0.0)
    with mock_aws():
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=BUCKET)
        yield S3Faults().every_store(monkeypatch)


def run(cli, tmp_path, *extra):
    return cli(
        "run",
        "--tasks",
        BUNDLED_TASKS,
        "--steps",
        STEPS,
        "--group-size",
        K,
        "--groups-per-step",
        GROUPS,
        "--out",
        f"s3://{BUCKET}/team",
        "--run-id",
        "exp",
        "--spill",
        tmp_path / "spill.jsonl",
        "--json",
        *extra,
    )


def stored_records() -> list:
    import boto3

    return list(S3Store(BUCKET, "team", client=boto3.client("s3", region_name="us-east-1")).iter_records("exp"))


def alarm_keys() -> list[str]:
    import boto3

    listed = boto3.client("s3", region_name="us-east-1").list_objects_v2(Bucket=BUCKET, Prefix="team/runs/exp/alarms/")
    return [item["Key"] for item in listed.get("Contents", [])]


def is_record(request) -> bool:
    return "/step=" in key_of(request) and "/transcripts/" not in key_of(request) and "/group=" in key_of(request)


def is_transcript(request) -> bool:
    return "/transcripts/" in key_of(request)


def is_state(request) -> bool:
    return key_of(request).endswith("/monitor/state.json")


def is_manifest(request) -> bool:
    return key_of(request).endswith("/manifest.json")


def no_bug(result) -> None:
    assert "unexpected" not in result.stderr and "Traceback" not in result.output, result.output[-2000:]


@pytest.mark.parametrize("fault", ["EndpointConnectionError", "ReadTimeoutError", "ConnectionClosedError"])
def test_every_record_put_dropped_is_spilled_and_the_run_goes_to_its_last_step(cli, s3, tmp_path, fault):
    """Before: the first record PUT whose every attempt failed ended the run with "unexpected
    AttributeError: 'NoneType' object has no attribute 'get'", most records neither stored nor spilled."""
    s3.fail("PutObject", fault, when=is_record)
    result = run(cli, tmp_path)
    no_bug(result)
    assert result.exit_code == 1
    summary = json.loads(result.stdout)
    spilled = [json.loads(line) for line in (tmp_path / "spill.jsonl").read_text().splitlines()]
    assert len(spilled) == TOTAL == summary["unstored"] and stored_records() == []
    assert {r["step"] for r in spilled} == set(range(STEPS))  # carried on to the last step
    last = result.stderr.strip().splitlines()[-1]
    assert str(tmp_path / "spill.jsonl") in last and "--resume" in last and f"{TOTAL} missing rollout" in last

    s3.clear()  # S3 answers again: the resume plays the spilled rollouts and stores them
    again = run(cli, tmp_path, "--resume")
    assert again.exit_code == 0, again.output
    assert sorted(r.rollout_id for r in stored_records()) == sorted(r["rollout_id"] for r in spilled)


def test_a_record_put_dropped_now_and_then_loses_nothing(cli, s3, tmp_path):
    s3.fail("PutObject", "ConnectionClosedError", when=lambda r: is_record(r) and key_of(r).endswith("-k1.json"))
    result = run(cli, tmp_path)
    no_bug(result)
    assert result.exit_code == 1
    spilled = {json.loads(line)["rollout_id"] for line in (tmp_path / "spill.jsonl").read_text().splitlines()}
    stored = {r.rollout_id for r in stored_records()}
    assert len(spilled) == STEPS * GROUPS and not spilled & stored and len(spilled | stored) == TOTAL
    # Nor does the run check a step it stored in part: its alarms would judge groups missing a rollout.
    for step in range(STEPS):
        assert f"step {step}: not checked: {GROUPS} of its records are not in the store" in result.stderr
    assert alarm_keys() == []

    s3.clear()  # a step missing records in the store is not finished: monitor judges none of them yet
    watched = cli("monitor", f"s3://{BUCKET}/team", "--json")
    assert watched.exit_code == 1 and "no step is finished yet" in watched.stderr
    assert run(cli, tmp_path, "--resume").exit_code == 0
    done = json.loads(cli("monitor", f"s3://{BUCKET}/team", "--json").stdout)
    assert done["in_progress"] is False and sum(s["records"] for s in done["steps"]) == TOTAL


def test_a_dropped_monitor_state_put_costs_the_check_not_the_run(cli, s3, tmp_path):
    """Before: the same AttributeError on the state PUT ended the run after its first step."""
    s3.fail("PutObject", "ReadTimeoutError", when=is_state)
    result = run(cli, tmp_path)
    no_bug(result)
    assert result.exit_code == 1 and len(stored_records()) == TOTAL
    summary = json.loads(result.stdout)
    assert summary["unchecked_steps"] == list(range(STEPS)) and "the monitor could not check" in result.stderr


def test_dropped_transcript_puts_are_spilled_beside_the_records(cli, s3, tmp_path):
    s3.fail("PutObject", "EndpointConnectionError", when=is_transcript)
    result = run(cli, tmp_path)
    no_bug(result)
    assert result.exit_code == 1 and len(stored_records()) == TOTAL
    kept = tmp_path / "spill.transcripts.jsonl"
    transcripts = [json.loads(line) for line in kept.read_text().splitlines()]
    assert len(transcripts) == TOTAL == json.loads(result.stdout)["unstored_transcripts"]
    assert {t["rollout_id"] for t in transcripts} == {r.rollout_id for r in stored_records()}
    assert str(kept) in result.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("fault", ["ResponseStreamingError", "IncompleteRead", "ConnectionClosedError"])
def test_reads_cut_short_while_the_monitor_checks_cost_the_check_only(cli, s3, tmp_path, fault):
    s3.fail("GetObject", fault, when=lambda r: "/step=" in key_of(r) and "/transcripts/" not in key_of(r))
    result = run(cli, tmp_path)
    no_bug(result)
    assert result.exit_code == 1 and json.loads(result.stdout)["unchecked_steps"] == list(range(STEPS))
    s3.clear()
    assert len(stored_records()) == TOTAL


def test_a_dropped_manifest_put_is_named(cli, s3, tmp_path):
    s3.fail("PutObject", "ConnectionClosedError", when=is_manifest)
    result = run(cli, tmp_path)
    no_bug(result)
    assert result.exit_code == 1 and len(stored_records()) == TOTAL
    assert "could not write the run manifest (start)" in result.stderr


def test_score_spills_what_s3_drops_too(cli, s3, tmp_path):
    rollouts = tmp_path / "r.jsonl"
    rollouts.write_text(
        "".join(
            json.dumps(
                {
                    "rollout_id": f"r{i}",
                    "group_id": "g",
                    "task_id": "abc-004-parse-bool",
                    "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
                }
            )
            + "\n"
            for i in range(4)
        )
    )
    s3.fail("PutObject", "ReadTimeoutError", when=is_record)
    result = cli(
        "score",
        rollouts,
        "--tasks",
        BUNDLED_TASKS,
        "--out",
        f"s3://{BUCKET}/team",
        "--run-id",
        "exp",
        "--spill",
        tmp_path / "spill.jsonl",
    )
    no_bug(result)
    assert result.exit_code == 1 and len((tmp_path / "spill.jsonl").read_text().splitlines()) == 4
    assert "rewardpipe score" in result.stderr and "--resume" in result.stderr


def test_a_resume_whose_manifest_read_is_dropped_stops_before_playing_anything(cli, s3, tmp_path):
    assert run(cli, tmp_path).exit_code == 0
    s3.fail("GetObject", "ReadTimeoutError", when=is_manifest)
    result = run(cli, tmp_path, "--resume")
    no_bug(result)
    assert result.exit_code == 1 and "could not be reached" in result.stderr and "ReadTimeoutError" in result.stderr
    assert not (tmp_path / "spill.jsonl").exists()


@pytest.mark.parametrize("fault", ["ResponseStreamingError", "IncompleteRead", "ConnectionClosedError"])
def test_monitor_never_judges_a_step_it_could_read_only_in_part(cli, s3, tmp_path, fault):
    """A record S3 would not hand over is a store failure, not a bad object to skip: judging the rest of
    the step would report (and alarm on) a step that is not the one stored."""
    assert run(cli, tmp_path).exit_code == 0
    s3.fail("GetObject", fault, when=lambda r: is_record(r) and key_of(r).endswith("-k1.json"))
    result = cli("monitor", f"s3://{BUCKET}/team", "--json")
    no_bug(result)
    assert result.exit_code == 1 and "could not be reached" in result.stderr and result.stdout == ""
