"""Issue 22 item 0: a rollout's record and its transcript always agree. A scored record whose Lambda then
fails non-transiently (the Score state's timeout, a crash after the write) keeps ``scored``, and its
transcript too: `show` and the alarm examples see what was scored, not an error transcript."""

from __future__ import annotations

import pytest

from tests.aws.handlers import Context, load
from tests.aws.test_rollout_handlers import _failed, _started, bucket, runner  # noqa: F401 - the fixtures

# Its handlers are checked against their functions' IAM policies, read from the synthesized template.
pytestmark = pytest.mark.xdist_group("cdk")


def _transcript(bucket, run="r", rollout="x") -> dict:
    (key,) = bucket.find_transcripts(run, rollout)
    return bucket.get_json(key)


def test_a_scored_record_whose_lambda_then_fails_keeps_its_transcript(bucket, runner):
    """Before: the error record was refused (the scored one kept) but its error transcript was written over
    the scored transcript, so `show` showed an error for a scored rollout."""
    ref = _started(bucket)
    scored = load("score_rollout").lambda_handler(ref, Context())
    before = _transcript(bucket)
    assert before["status"] == "scored"

    late = load("error_record").lambda_handler(_failed(ref, "ScoreStep", "States.Timeout"), Context())
    assert late["record_key"] == scored["record_key"]
    assert bucket.get_json(scored["record_key"])["status"] == "scored"
    assert _transcript(bucket) == before  # untouched: both still say scored


def test_an_error_record_that_is_stored_gets_its_error_transcript(bucket):
    ref = _started(bucket)
    out = load("error_record").lambda_handler(_failed(ref, "ScoreStep", "States.Timeout"), Context())
    record = bucket.get_json(out["record_key"])
    transcript = _transcript(bucket)
    assert record["status"] == transcript["status"] == "error"
    assert transcript["error"]["kind"] == record["error"]["kind"] == "timeout"
