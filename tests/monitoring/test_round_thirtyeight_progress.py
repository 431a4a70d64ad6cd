"""Round thirty-eight, stored progress: a scheduled check lists each run's steps once.

``check_pending`` listed a run's steps (``store.list_steps``) and then asked for its progress
(``store.run_progress``), which lists them again: one more S3 LIST per run per check, on every schedule. It now
asks for the progress alone, whose ``steps`` are the listing; the variance check's ``ConditionalStateStore``, which
caps an explicit ``{"step": n}`` check's steps at n in ``list_steps``, caps ``run_progress`` the same way (its
pass-through skipped the cap).
"""

from __future__ import annotations

from collections import Counter

import pytest

from rewardpipe.store import run_prefix
from tests.test_monitor import batch, varied

BUCKET = "progress"


@pytest.fixture
def s3(monkeypatch):
    """A moto bucket with two runs of three steps each, and a count of each ListObjectsV2 call by (prefix,
    delimiter) as botocore sends it."""
    import boto3
    from moto import mock_aws

    from rewardpipe.store import S3Store

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        store = S3Store(BUCKET, client=client)
        for run in ("a", "b"):
            for step in range(3):
                for record in batch(varied, groups=4, k=2, step=step, run=run):
                    store.put_record(record)
        lists: Counter[tuple[str, str]] = Counter()

        def count(params, **_):
            lists[(params.get("Prefix", ""), params.get("Delimiter", ""))] += 1

        client.meta.events.register("before-parameter-build.s3.ListObjectsV2", count)
        yield store, lists


def _step_listings(lists: Counter, run: str) -> int:
    """LIST calls of the run's step folders (the run's prefix, by folder): what list_steps sends."""
    return lists[(run_prefix(run), "/")]


def test_a_check_of_every_run_lists_each_runs_steps_once(s3):
    from rewardpipe.monitoring import check_pending

    store, lists = s3
    checks = check_pending(store, skip_newest=True)
    assert {c.run_id: c.checked_steps for c in checks} == {"a": [0, 1], "b": [0, 1]}
    assert (_step_listings(lists, "a"), _step_listings(lists, "b")) == (1, 1)  # was 2 each
    lists.clear()
    again = check_pending(store, skip_newest=True)  # nothing new: still one listing a run
    assert all(c.checked_steps == [] for c in again)
    assert (_step_listings(lists, "a"), _step_listings(lists, "b")) == (1, 1)


def test_the_variance_checks_store_caps_run_progress_at_the_step_asked_for(s3):
    from rewardpipe.aws.monitoring import ConditionalStateStore

    store, _ = s3
    capped = ConditionalStateStore(store, upto=1)
    progress = capped.run_progress("a")
    assert progress.steps == [0, 1] and progress.finished == [0, 1] and not progress.in_progress
    assert capped.list_steps("a") == [0, 1]
    assert ConditionalStateStore(store).run_progress("a").steps == [0, 1, 2]


def test_the_cap_still_applies_to_a_run_in_progress(s3):
    """A trainer's run: its manifest in progress, steps 0 and 2 marked finished; a check of step 1 judges step 0."""
    from rewardpipe.aws.monitoring import ConditionalStateStore
    from rewardpipe.monitoring import check_pending
    from rewardpipe.store import manifest_key

    store, lists = s3
    store.put_json(manifest_key("a"), {"run_id": "a", "finished_at": None})
    store.mark_step_finished("a", 0, stored=8)
    store.mark_step_finished("a", 2, stored=8)
    capped = ConditionalStateStore(store, upto=1)
    progress = capped.run_progress("a")
    assert (progress.steps, progress.finished, progress.unfinished) == ([0, 1], [0], [1])
    lists.clear()
    (check,) = check_pending(capped, ["a"])
    assert check.checked_steps == [0] and check.problems == []  # 1 unfinished, 2 past the cap
    assert _step_listings(lists, "a") == 1


def test_an_explicit_step_check_through_the_lambdas_entry_lists_the_run_once_per_attempt(s3):
    from rewardpipe.aws.monitoring import CheckRequest, run_check
    from rewardpipe.aws.settings import Settings

    store, lists = s3
    out = run_check(CheckRequest(run_id="a", step=1), Settings(bucket=BUCKET), store=store)
    assert [r["step"] for r in out["results"]] == [0, 1]  # step 2 is past the check's step
    assert _step_listings(lists, "a") == 1
