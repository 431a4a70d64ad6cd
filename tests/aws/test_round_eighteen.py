"""Round eighteen, AWS: one bad message costs only itself (the Nova bridge's SQS handlers)."""

from __future__ import annotations

import pytest


def _records(arn: str, bodies: list[str]) -> dict:
    return {
        "Records": [
            {"messageId": f"m{i}", "body": body, "eventSourceARN": arn, "attributes": {}}
            for i, body in enumerate(bodies)
        ]
    }


@pytest.fixture
def handler(monkeypatch):
    from rewardpipe.integrations.nova import aws

    monkeypatch.setattr(aws, "bridge_from_env", lambda: "bridge")
    seen: list[str] = []

    def role(bridge, body):
        if body == "poison":
            raise ValueError("malformed turn request")
        seen.append(body)

    return aws.sqs_batch(role), seen


def test_a1_a_bad_message_on_a_standard_queue_holds_back_none_of_the_others(handler):
    run, seen = handler
    out = run(_records("arn:aws:sqs:us-east-1:123456789012:stack-TurnRequests", ["a", "poison", "b", "c"]), None)
    assert out == {"batchItemFailures": [{"itemIdentifier": "m1"}]}
    assert seen == ["a", "b", "c"]  # before: b and c came back unprocessed, a receive counted against each


def test_a1_on_a_fifo_queue_the_messages_after_a_bad_one_still_wait_for_it(handler):
    run, seen = handler
    out = run(_records("arn:aws:sqs:us-east-1:123456789012:stack-SageMaker-X.fifo", ["a", "poison", "b"]), None)
    assert out == {"batchItemFailures": [{"itemIdentifier": "m1"}, {"itemIdentifier": "m2"}]}
    assert seen == ["a"]


# -- A2: the TRL callback's store on S3 (moto): a bucket gone mid-run never stops training -----------------


def test_a2_a_trl_run_whose_bucket_is_deleted_keeps_training_and_says_what_was_not_stored(aws):
    import boto3

    from rewardpipe.integrations.trl import RewardPipeMonitor
    from rewardpipe.store import S3Store
    from tests.aws import harness
    from tests.test_trl_integration import _FakeTrainer, _gsm8k_batch

    s3 = boto3.client("s3", region_name=harness.REGION)
    s3.create_bucket(Bucket="r18-trl-records")
    store = S3Store("r18-trl-records", client=s3)
    callback = RewardPipeMonitor(reward="gsm8k", store=store, run_id="r18")
    prompts, completions, columns = _gsm8k_batch(groups=4, size=4)
    trainer = _FakeTrainer(callback.reward_funcs, [0.5, 1.0], 4)

    def batch():
        return [
            fn(prompts=prompts, completions=completions, log_metric=trainer._log_metric, **columns)
            for fn in callback.reward_funcs
        ]

    batch()
    assert callback.failures == [] and len(list(store.iter_records("r18"))) == 16
    for obj in s3.list_objects_v2(Bucket="r18-trl-records").get("Contents", []):
        s3.delete_object(Bucket="r18-trl-records", Key=obj["Key"])
    s3.delete_bucket(Bucket="r18-trl-records")
    assert batch()[1] == [0.0, 1.0] * 8  # the rewards still reach TRL
    assert callback.batches == 2 and len(callback.reports) == 2
    assert any("NoSuchBucket" in f or "does not exist" in f for f in callback.failures), callback.failures
    assert any("monitor state" in f for f in callback.failures)
