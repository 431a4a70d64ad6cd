"""The last writes of a rollout: its record is written whatever ids the input held, and an error record
never replaces a scored one, even when two attempts of the rollout write at the same moment."""

from __future__ import annotations

import json

import pytest

from tests.aws import harness
from tests.aws.test_state_machine import TASK, _input, _records

pytestmark = pytest.mark.xdist_group("cdk")


@pytest.mark.parametrize(
    "field, value",
    [
        ("rollout", "\ud800"),  # a lone surrogate: valid JSON escape, not encodable as UTF-8
        ("group", "g\udcff"),
        ("rollout", "r\u2028x"),  # a line separator: refused by the id rule like the rest
    ],
)
def test_an_input_id_a_record_cannot_carry_still_ends_in_an_error_record(deployment, sfn, field, value):
    """StartEpisode refuses the id (bad_input); RecordError used to put that very id into the record, whose
    serialisation then failed, so the execution ended FAILED with no record at all."""
    payload = {**_input("run-ids", "r0", ["hi?"]), field: value}
    result = harness.run_execution(sfn, deployment.state_machine_arn, payload)
    assert result["status"] == "SUCCEEDED", result.get("cause")
    (record,) = [r for r in _records(deployment, "run-ids").values() if r.status == "error"]
    assert record.error.kind == "bad_input"
    assert value not in (record.group_id, record.rollout_id)


def test_a_task_id_a_record_cannot_carry_falls_back_to_unknown(deployment, sfn):
    task = {**TASK.model_dump(mode="json"), "task_id": "t\ud800"}
    payload = {**_input("run-tid", "r0", ["hi?"]), "task": task}
    result = harness.run_execution(sfn, deployment.state_machine_arn, payload)
    assert result["status"] == "SUCCEEDED", result.get("cause")
    record = _records(deployment, "run-tid")["r0"]
    assert record.status == "error" and record.task_id == "unknown"


class _WriterInBetween:
    """An S3 client through which, right after the record is read, the other attempt's record lands: the
    moment between a read and a replace where two writers race."""

    def __init__(self, client, key: str, other: bytes):
        self.client, self.key, self.other, self.fired = client, key, other, False

    def __getattr__(self, name):
        return getattr(self.client, name)

    def get_object(self, **kwargs):
        response = self.client.get_object(**kwargs)
        if kwargs["Key"] == self.key and not self.fired:
            self.fired = True
            self.client.put_object(Bucket=kwargs["Bucket"], Key=self.key, Body=self.other)
        return response


def _records_of_one_rollout():
    from rewardpipe.episode import failure_record
    from rewardpipe.rewards import get_reward

    ids = dict(run_id="run-race", step=0, group_id="g0", rollout_id="r0", task_id=TASK.task_id)
    old_error = failure_record(
        **ids, kind="executor_crash", message="attempt 1", reward=get_reward("ask_before_coding")
    )
    late_error = failure_record(
        **ids, kind="timeout", message="attempt 1, late", reward=get_reward("ask_before_coding")
    )
    scored = old_error.model_copy(update={"status": "scored", "error": None, "aggregate": 1.0})
    return old_error, late_error, scored


@pytest.mark.parametrize("writing, landing", [("late_error", "scored"), ("scored", "late_error")])
def test_the_scored_record_wins_whichever_attempt_writes_while_the_other_lands(s3, writing, landing):
    """A late error record written while a re-run's scored record lands must not replace it (it did: the
    replace was unconditional after the read); a scored record written while an error lands still wins."""
    from rewardpipe.aws.rollout import put_record_once
    from rewardpipe.store import S3Store, record_key

    old_error, late_error, scored = _records_of_one_rollout()
    records = {"late_error": late_error, "scored": scored}
    s3.create_bucket(Bucket="records")
    key = record_key(old_error)
    s3.put_object(Bucket="records", Key=key, Body=old_error.to_json().encode())
    racing = _WriterInBetween(s3, key, records[landing].to_json().encode())
    assert put_record_once(S3Store("records", client=racing), records[writing]) == key
    assert racing.fired
    assert json.loads(s3.get_object(Bucket="records", Key=key)["Body"].read())["status"] == "scored"
