"""Stores: local directory and S3 (moto) share one key layout and one behaviour."""

from __future__ import annotations

import errno
import json
import os

import boto3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from moto import mock_aws

from rewardpipe.models import ErrorInfo, Record
from rewardpipe.store import (
    LocalStore,
    S3Store,
    StoreError,
    StoreFull,
    decode_id,
    encode_id,
    open_store,
    parse_record_key,
    record_key,
)


def make_record(run="run1", step=0, group="g0", rollout="r0", value=1.0, **kw) -> Record:
    base = dict(
        run_id=run,
        step=step,
        group_id=group,
        rollout_id=rollout,
        task_id="t1",
        status="scored",
        components={"correctness": value, "loop_penalty": None},
        weights={"correctness": 1.0, "loop_penalty": 0.2},
        aggregate=value,
    )
    base.update(kw)
    return Record(**base)


@pytest.fixture
def aws_env(monkeypatch):
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(params=["local", "s3", "s3-prefix"])
def store(request, tmp_path, aws_env):
    if request.param == "local":
        yield LocalStore(tmp_path / "store")
        return
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="scores")
        prefix = "team/a" if request.param == "s3-prefix" else ""
        yield S3Store("scores", prefix=prefix, client=client)


def raw_put(store, key: str, data: bytes) -> None:
    """Write bytes behind the store's back (a corrupt or misplaced object)."""
    store._write(key, data)


# -- key layout ---------------------------------------------------------------------------------


def test_record_key_layout():
    rec = make_record(run="exp-7", step=12, group="prompt_3", rollout="prompt_3_5")
    assert record_key(rec) == "runs/exp-7/step=12/group=prompt_3/prompt_3_5.json"
    assert parse_record_key(record_key(rec)) == ("exp-7", 12, "prompt_3", "prompt_3_5")


@pytest.mark.parametrize(
    "value", ["a/b", "../../etc/passwd", "..", ".", "x=y", "100%", "sp ace", "ünï", "a\\b", "a?b#c", "%2F"]
)
def test_unsafe_ids_are_encoded_reversibly(value):
    segment = encode_id(value)
    assert "/" not in segment and "\\" not in segment
    assert segment not in (".", "..")
    assert "=" not in segment
    assert decode_id(segment) == value


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=20))
def test_any_id_round_trips_as_one_segment(value):
    segment = encode_id(value)
    assert decode_id(segment) == value
    assert "/" not in segment and segment not in (".", "..") and "\x00" not in segment


@settings(max_examples=30, deadline=None)
@given(st.text(min_size=1, max_size=12), st.text(min_size=1, max_size=12))
def test_any_ids_round_trip_through_a_local_store(tmp_path_factory, run, rollout):
    store = LocalStore(tmp_path_factory.mktemp("s"))
    key = store.put_record(make_record(run=run, group=rollout, rollout=rollout))
    assert parse_record_key(key) == (run, 0, rollout, rollout)
    assert store.list_runs() == [run]
    assert [r.rollout_id for r in store.iter_records(run)] == [rollout]


def test_a_long_id_gets_a_hashed_key_and_keeps_its_record(tmp_path):
    store = LocalStore(tmp_path)
    long_a, long_b = "\u4e2d" * 100, "\u4e2d" * 99 + "x"  # same 240-character encoded prefix
    keys = [store.put_record(make_record(rollout=rid, group=rid)) for rid in (long_a, long_b, "x" * 240)]
    assert len(set(keys)) == 3
    assert all(len(part.encode()) <= 250 for key in keys for part in key.split("/"))
    assert "%~" in keys[0] and "%~" not in keys[2]
    assert {r.rollout_id for r in store.iter_records("run1")} == {long_a, long_b, "x" * 240}
    assert store.bad_objects == []


def test_a_hashed_key_cannot_collide_with_a_short_id():
    long_id = "y" * 300
    hashed = record_key(make_record(rollout=long_id)).rsplit("/", 1)[1][: -len(".json")]
    # an attacker who sends the hashed segment as a literal id gets it percent-encoded, never the same key
    assert record_key(make_record(rollout=hashed)) != record_key(make_record(rollout=long_id))


def test_a_run_id_is_never_hashed():
    with pytest.raises(ValueError, match="too long for a store key"):
        record_key(make_record(run="r" * 300))


def test_distinct_ids_give_distinct_keys():
    # "%2F" literally and "/" must not collide after encoding.
    a = record_key(make_record(rollout="a/b"))
    b = record_key(make_record(rollout="a%2Fb"))
    assert a != b


def test_empty_id_rejected():
    with pytest.raises(ValueError, match="non-empty"):
        encode_id("")


def test_parse_record_key_rejects_other_keys():
    assert parse_record_key("runs/r/alarms/step=1/x-dead_component.json") is None
    assert parse_record_key("runs/r/step=x/group=g/a.json") is None
    assert parse_record_key("runs/r/step=1/g/a.json") is None


# -- behaviour shared by both backends ------------------------------------------------------------


def test_round_trip(store):
    records = [
        make_record(step=s, group=f"g{g}", rollout=f"g{g}-{k}", value=k / 4)
        for s in (0, 1)
        for g in range(2)
        for k in range(3)
    ]
    keys = [store.put_record(r) for r in records]
    assert len(set(keys)) == len(records)
    back = list(store.iter_records("run1"))
    assert sorted(r.model_dump_json() for r in back) == sorted(r.model_dump_json() for r in records)
    assert [r.step for r in back] == sorted(r.step for r in back)  # step order
    step1 = list(store.iter_records("run1", step=1))
    assert len(step1) == 6 and {r.step for r in step1} == {1}
    assert store.bad_objects == []


def test_error_record_round_trip(store):
    rec = make_record(
        status="error",
        error=ErrorInfo(kind="sandbox_timeout", message="boom"),
        components={"correctness": None},
        aggregate=None,
    )
    store.put_record(rec)
    (back,) = store.iter_records("run1")
    assert back.status == "error" and back.error.kind == "sandbox_timeout" and back.aggregate is None


def test_same_rollout_twice_overwrites(store):
    k1 = store.put_record(make_record(value=0.0))
    k2 = store.put_record(make_record(value=1.0))
    assert k1 == k2
    back = list(store.iter_records("run1"))
    assert len(back) == 1 and back[0].components["correctness"] == 1.0
    assert store.list_keys("runs/") == [k1]


def test_unsafe_ids_stay_inside_layout(store, tmp_path):
    rec = make_record(run="../evil", group="../../g", rollout="x/../../y")
    key = store.put_record(rec)
    assert key.startswith("runs/")
    assert parse_record_key(key) == ("../evil", 0, "../../g", "x/../../y")
    assert store.list_runs() == ["../evil"]
    (back,) = store.iter_records("../evil")
    assert back.rollout_id == "x/../../y"
    if isinstance(store, LocalStore):
        # Nothing was written outside the store root.
        outside = [p for p in tmp_path.rglob("*") if p.is_file() and "store" not in p.relative_to(tmp_path).parts[:1]]
        assert outside == []


def test_list_runs_and_steps(store):
    for step in (10, 2, 1):
        store.put_record(make_record(step=step))
    store.put_record(make_record(run="other", step=5))
    store.put_json("runs/run1/alarms/step=2/correctness-dead_component.json", {"kind": "dead_component"})
    store.put_json("runs/run1/monitor/state.json", {"v": 1})
    assert store.list_runs() == ["other", "run1"]
    assert store.list_steps("run1") == [1, 2, 10]  # numeric, not lexicographic
    assert store.list_steps("other") == [5]
    assert store.list_steps("missing") == []
    # alarms and state are not records
    assert len(list(store.iter_records("run1"))) == 3
    assert store.bad_objects == []


def test_corrupt_objects_are_reported_not_fatal(store):
    good = make_record(group="g0", rollout="ok")
    store.put_record(good)
    raw_put(store, "runs/run1/step=0/group=g0/broken.json", b"{not json")
    raw_put(store, "runs/run1/step=0/group=g0/wrong.json", json.dumps({"run_id": "run1"}).encode())
    # a valid record in the wrong place (its own key is different)
    misplaced = make_record(group="g9", rollout="elsewhere")
    raw_put(store, "runs/run1/step=0/group=g0/moved.json", misplaced.to_json().encode())
    raw_put(store, "runs/run1/step=0/stray.json", b"{}")
    seen = []
    back = list(store.iter_records("run1", on_bad=seen.append))
    assert [r.rollout_id for r in back] == ["ok"]
    reasons = {b.key.rsplit("/", 1)[-1]: b.reason for b in store.bad_objects}
    assert set(reasons) == {"broken.json", "wrong.json", "moved.json", "stray.json"}
    assert "not valid JSON" in reasons["broken.json"]
    assert "missing" in reasons["wrong.json"].lower() or "field" in reasons["wrong.json"]
    assert "belongs at" in reasons["moved.json"]
    assert "not a record key" in reasons["stray.json"]
    assert seen == store.bad_objects
    # a fresh iteration resets the list
    list(store.iter_records("run1", step=0))
    assert len(store.bad_objects) == 4


def test_put_get_json(store):
    key = store.put_json("runs/run1/monitor/state.json", {"a": [1, 2.5, None]})
    assert key == "runs/run1/monitor/state.json"
    assert store.get_json(key) == {"a": [1, 2.5, None]}
    store.put_json(key, {"a": 2})
    assert store.get_json(key) == {"a": 2}
    with pytest.raises(KeyError, match="no object"):
        store.get_json("runs/run1/monitor/nothing.json")
    assert store.get_json("runs/run1/monitor/nothing.json", default=None) is None


def test_get_json_not_json(store):
    raw_put(store, "x/y.json", b"\xff\xfe")
    with pytest.raises(StoreError, match="not valid JSON"):
        store.get_json("x/y.json")


@pytest.mark.parametrize("key", ["../escape.json", "/abs.json", "a//b.json", "a/./b", "a\\b", ""])
def test_unsafe_json_keys_rejected(store, key):
    with pytest.raises(StoreError, match="key"):
        store.put_json(key, {})


def test_nan_rejected_by_put_json(store):
    with pytest.raises(ValueError):
        store.put_json("a.json", {"x": float("nan")})


# -- backend specifics ----------------------------------------------------------------------------


def test_local_write_is_atomic_and_leaves_no_temp(tmp_path, monkeypatch):
    store = LocalStore(tmp_path)
    key = store.put_record(make_record())
    assert (tmp_path / key).is_file()

    def fail_replace(src, dst, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", fail_replace)
    with pytest.raises(StoreFull, match="no space left on the device"):  # a StoreError: spilled, never a crash
        store.put_record(make_record(value=0.0))
    monkeypatch.undo()
    # old content intact, no temp file left behind
    (back,) = store.iter_records("run1")
    assert back.components["correctness"] == 1.0
    assert [p.name for p in (tmp_path / key).parent.iterdir()] == [os.path.basename(key)]


def test_local_ignores_stray_temp_files(tmp_path):
    store = LocalStore(tmp_path)
    key = store.put_record(make_record())
    (tmp_path / key).parent.joinpath(".abc.tmp").write_text("partial")
    assert len(list(store.iter_records("run1"))) == 1
    assert store.bad_objects == []


def test_local_root_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(StoreError, match="not a directory"):
        LocalStore(f)


def test_local_missing_root_reads_empty(tmp_path):
    store = LocalStore(tmp_path / "nope")
    assert store.list_runs() == [] and list(store.iter_records("r")) == []


def test_s3_layout_and_prefix(aws_env):
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="bkt")
        store = S3Store("bkt", prefix="/exp/one/", client=client)
        key = store.put_record(make_record())
        listed = [o["Key"] for o in client.list_objects_v2(Bucket="bkt")["Contents"]]
        assert listed == [f"exp/one/{key}"]
        body = json.loads(client.get_object(Bucket="bkt", Key=f"exp/one/{key}")["Body"].read())
        assert body["schema"] == "rewardpipe.record/v1"


def test_s3_missing_bucket_is_clear_error(aws_env):
    with mock_aws():
        store = S3Store("does-not-exist", client=boto3.client("s3", region_name="us-east-1"))
        with pytest.raises(StoreError, match="does not exist"):
            store.list_runs()
        with pytest.raises(StoreError, match="does not exist"):
            store.put_json("a.json", {})


def test_s3_paginates(aws_env):
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="bkt")
        store = S3Store("bkt", client=client)
        store.page_size = 2
        for i in range(7):
            store.put_record(make_record(run="r", step=i % 3, group=f"g{i % 2}", rollout=f"x{i}"))
        for s in range(5):
            store.put_record(make_record(run=f"run{s}"))
        assert sum(1 for _ in store.iter_records("r")) == 7
        assert store.list_steps("r") == [0, 1, 2]
        assert len(store.list_runs()) == 6


def test_open_store(tmp_path, aws_env):
    assert isinstance(open_store(tmp_path), LocalStore)
    with mock_aws():
        s = open_store("s3://bucket/some/prefix", client=boto3.client("s3", region_name="us-east-1"))
        assert isinstance(s, S3Store) and s.bucket == "bucket" and s.prefix == "some/prefix"
        s = open_store("s3://bucket")
        assert isinstance(s, S3Store) and s.prefix == ""
    with pytest.raises(StoreError, match="no bucket"):
        open_store("s3:///x")
    with pytest.raises(StoreError, match="unsupported"):
        open_store("gs://bucket/x")


# -- one run id, one experiment: deleting a run (run --overwrite) ---------------------------------------


def test_delete_run_removes_only_that_run(store):
    for run in ("old", "other"):
        for i in range(3):
            store.put_record(make_record(run=run, step=i, rollout=f"x{i}"))
        store.put_json(f"runs/{run}/monitor/state.json", {"x": 1})
    assert store.run_has_records("old")
    store.delete_run("old")
    assert not store.run_has_records("old") and list(store.iter_records("old")) == []
    assert sum(1 for _ in store.iter_records("other")) == 3 and store.run_has_records("other")


def test_s3_delete_run_spans_more_than_one_delete_call(aws_env):
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="bkt")
        store = S3Store("bkt", client=client)
        for i in range(1003):  # DeleteObjects takes 1000 keys at most
            client.put_object(Bucket="bkt", Key=f"runs/big/step=0/group=g/r{i}.json", Body=b"{}")
        store.delete_run("big")
        assert client.list_objects_v2(Bucket="bkt").get("KeyCount") == 0


# -- S3 faults: retried with backoff, never a lost page ---------------------------------------------


class FlakyClient:
    """A real (moto) S3 client whose chosen calls fail ``failures`` times first, as S3 does when it
    throttles (503 SlowDown) or a connection drops (botocore's EndpointConnectionError)."""

    def __init__(self, client, method: str, failures: int, error: str = "SlowDown"):
        self._client, self._method, self.failures, self.error, self.calls = client, method, failures, error, 0

    def __getattr__(self, name):
        real = getattr(self._client, name)
        if name != self._method:
            return real

        def flaky(**kwargs):
            self.calls += 1
            if self.failures > 0:
                self.failures -= 1
                if self.error == "connection":
                    from botocore.exceptions import EndpointConnectionError

                    raise EndpointConnectionError(endpoint_url="https://s3.amazonaws.com")
                from botocore.exceptions import ClientError

                raise ClientError(
                    {"Error": {"Code": self.error, "Message": "injected"}, "ResponseMetadata": {"HTTPStatusCode": 503}},
                    name,
                )
            return real(**kwargs)

        return flaky


@pytest.mark.parametrize(
    "method, error",
    [
        ("put_object", "SlowDown"),
        ("put_object", "connection"),
        ("get_object", "InternalError"),
        ("list_objects_v2", "503"),
    ],
)
def test_s3_transient_faults_are_retried(aws_env, method, error):
    with mock_aws():
        real = boto3.client("s3", region_name="us-east-1")
        real.create_bucket(Bucket="bkt")
        flaky = FlakyClient(real, method, failures=3, error=error)
        waits: list[float] = []
        store = S3Store("bkt", client=flaky, sleep=waits.append)
        store.put_record(make_record(rollout="a"))
        assert [r.rollout_id for r in store.iter_records("run1")] == ["a"]
        assert flaky.failures == 0 and len(waits) == 3
        assert all(0 <= w <= store.backoff_s * 4 for w in waits)


def test_s3_gives_up_after_its_attempts_with_a_store_error(aws_env):
    with mock_aws():
        real = boto3.client("s3", region_name="us-east-1")
        real.create_bucket(Bucket="bkt")
        flaky = FlakyClient(real, "put_object", failures=99)
        store = S3Store("bkt", client=flaky, sleep=lambda _: None)
        with pytest.raises(StoreError, match="SlowDown"):
            store.put_record(make_record())
        assert flaky.calls == store.attempts


def test_s3_access_denied_is_not_retried(aws_env):
    with mock_aws():
        real = boto3.client("s3", region_name="us-east-1")
        real.create_bucket(Bucket="bkt")
        flaky = FlakyClient(real, "put_object", failures=99, error="AccessDenied")
        store = S3Store("bkt", client=flaky, sleep=lambda _: pytest.fail("must not wait"))
        with pytest.raises(StoreError, match="access denied"):
            store.put_record(make_record())
        assert flaky.calls == 1


def test_a_listing_retried_mid_way_yields_every_key_once(aws_env):
    with mock_aws():
        real = boto3.client("s3", region_name="us-east-1")
        real.create_bucket(Bucket="bkt")
        store = S3Store("bkt", client=real, sleep=lambda _: None)
        store.page_size = 2
        for i in range(7):
            store.put_record(make_record(rollout=f"x{i}"))
        flaky = FlakyClient(real, "list_objects_v2", failures=0)
        store.client = flaky

        original = flaky.__getattr__("list_objects_v2")
        pages = {"n": 0}

        def fail_third_page(**kwargs):
            pages["n"] += 1
            if pages["n"] == 3:
                flaky.failures = 1  # the third page fails once, then succeeds on retry
            return original(**kwargs)

        flaky.list_objects_v2 = fail_third_page
        assert sorted(r.rollout_id for r in store.iter_records("run1")) == [f"x{i}" for i in range(7)]
        assert flaky.failures == 0  # the injected failure happened, and the listing went on after it
