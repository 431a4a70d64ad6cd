"""Round thirty-four, the monitor: per-run CloudWatch metrics bounded, triage's ``never``/``always`` judged by the
monitor's zero-variance rule, reserved component names in a run manifest, the LLM user's fallbacks, and model text
in what the monitor writes."""

from __future__ import annotations

import json

import pytest

import rewardpipe.monitoring.fastread as fastread
from tests.monitoring.test_round_thirtythree_followups import _emf, _records


def _task_records(values_of_group, weights, groups=4):
    """One step of one task; every rollout of group ``g`` has the components ``values_of_group(g)``."""
    return _records(values_of_group, weights, steps=1, groups=groups, by_group=True)


# -- 2. triage's never/always follow the monitor's zero-variance rule ----------------------------------------------


def _triage(records, thresholds=None):
    from rewardpipe.monitoring.report import build_report

    return {e["component"]: e for e in build_report(records, thresholds)["task_triage"]}


def test_triage_never_is_judged_at_the_values_scale():
    # values near 1e6 differing by 0.3 between groups: rounding dust at that scale (the groups' own rule calls a
    # spread of 1 zero variance there), so the task sits at its minimum
    records = _task_records(lambda g: {"huge": 1e6 + 0.3 * g, "plain": 0.5}, {"huge": 1.0, "plain": 1.0})
    entry = _triage(records)["huge"]
    assert entry["verdict"] == "never"
    assert entry["value"] == 1e6


def test_triage_never_is_judged_at_the_components_weight():
    # under weight 1e8 a difference of 1e-8 is a whole reward unit: the task's groups differ, it is not "never"
    records = _task_records(lambda g: {"tiny": 1e-8 * g, "plain": 0.5}, {"tiny": 1e8, "plain": 1.0})
    entry = _triage(records)["tiny"]
    assert entry["verdict"] == "constant"
    assert entry["value"] is None


def test_triage_labels_follow_the_monitors_epsilon():
    from rewardpipe.monitoring.thresholds import Thresholds

    records = _task_records(lambda g: {"plain": 0.02 * g}, {"plain": 1.0})
    assert _triage(records)["plain"]["verdict"] == "constant"
    assert _triage(records, Thresholds(epsilon=0.1))["plain"]["verdict"] == "never"


# -- 3. a run manifest declaring a reserved component name ---------------------------------------------------------


@pytest.mark.parametrize("name", ["aggregate", "errors"])
def test_a_manifest_cannot_declare_a_reserved_name(tmp_path, name):
    from rewardpipe.aws.monitoring import MetricComponents
    from rewardpipe.monitoring.thresholds import ManifestWarning, run_thresholds
    from rewardpipe.store import LocalStore, manifest_key

    store = LocalStore(tmp_path)
    declared = {"plain": {"range": [0, 1], "role": "shaping"}, name: {"range": [-1, 1], "role": "outcome"}}
    store.put_json(manifest_key("r1"), {"components": declared})
    with pytest.warns(ManifestWarning, match=rf"run manifest field components\.{name}: '{name}' is reserved"):
        th = run_thresholds(None, store, "r1")
    # declared the outcome, the monitor's own target replaced the reward's outcome components (correctness)
    assert name not in th.roles and name not in th.ranges and name not in th.outcome_components
    assert th.outcome_components == ("correctness",)
    assert th.roles["plain"] == "shaping"  # the rest of the manifest still applies
    with pytest.warns(ManifestWarning):
        assert MetricComponents(store).declared("r1") == {"plain"}


# -- 1. per-run CloudWatch metrics bounded -------------------------------------------------------------------------


def test_per_run_streak_metrics_are_bounded_whatever_the_number_of_runs(monkeypatch, capsys):
    import boto3
    from moto import mock_aws

    import rewardpipe.aws.monitoring as check
    from rewardpipe.aws.settings import Settings
    from rewardpipe.store import S3Store

    monkeypatch.setattr(check, "RUN_METRIC_RUNS", 2, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    runs = ["run-a", "run-b", "run-c", "run-d", "run-e"]
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="records")
        store = S3Store("records", client=s3)
        for run in runs:
            for rec in _records(
                lambda i: {"correctness": 0.0, "style": float(i % 2)}, {"correctness": 1.0, "style": 1.0}, run
            ):
                store.put_record(rec)
        settings = Settings(bucket="records")
        capsys.readouterr()
        for run in reversed(runs):  # the latest started first: the run-id order, not the order checked, decides
            out = check.run_check(check.CheckRequest(run_id=run, step=1), settings, store=store)
            assert [s["step"] for s in out["results"]] == [0, 1]
    printed = capsys.readouterr().out
    docs = _emf(printed)
    per_run = {d["run"] for d in docs if "run" in d and ("DeadStreak" in d or "ErrorStreak" in d)}
    assert per_run == {"run-e", "run-d"}  # the first two checked keep them
    # each run left out is said once in the function's log
    said = [json.loads(line) for line in printed.splitlines() if "per-run DeadStreak" in line]
    assert sorted(w["run_id"] for w in said) == ["run-a", "run-b", "run-c"]
    # the alarms' streaks (no run dimension) still count every active run: correctness is dead in each
    alarmed = [d for d in docs if "DeadStreak" in d and "run" not in d and d.get("component") == "correctness"]
    assert alarmed and alarmed[-1]["DeadStreak"][0] >= 1


# -- 4. the LLM-played user replaced by the rule-based user --------------------------------------------------------


def _user_run(fallbacks_of):
    """Two steps of varying records; rollout ``n`` (counted across the run) has ``metrics`` ``fallbacks_of(n)``."""
    records = _records(lambda i: {"correctness": float(i % 2)}, {"correctness": 1.0}, groups=5)
    for n, rec in enumerate(records):
        rec.metrics = fallbacks_of(n)
    return records


def _replaced_warnings(records):
    from rewardpipe.monitoring import monitor_records

    result = monitor_records(records)
    return result, [w for w in result.warnings if w["kind"] == "llm_user_replaced"]


def test_a_user_sees_when_the_rule_based_user_replaced_the_simulator():
    # step 0: every other rollout's user fell back at least once; step 1: one rollout (5%), by design now and then
    records = _user_run(lambda n: {"llm_user_fallbacks": (2 if n % 2 else 0) if n < 20 else int(n == 25)})
    result, warned = _replaced_warnings(records)
    assert [(r.step, r.user_fallback_records) for r in result.steps] == [(0, 10), (1, 1)]
    assert len(warned) == 1
    assert "replaced the LLM-played user in 10 of 20 rollouts (50%) of 1 step(s) (0)" in warned[0]["message"]


def test_only_a_positive_count_is_a_fallback():
    records = _user_run(lambda n: {"llm_user_fallbacks": [0, True, "3", -1, 0.0, None][n % 6]})
    result, warned = _replaced_warnings(records)
    assert [r.user_fallback_records for r in result.steps] == [0, 0] and not warned


@pytest.mark.parametrize(
    "values",
    [[0, 1, 2.0, 0.5, True, "3", -1, 1e-05], [0, 1, 2, 0, 5, 0, -1, 3]],
    ids=["mixed", "numbers"],
)
def test_every_reader_counts_the_fallbacks_alike(tmp_path, values):
    from rewardpipe.monitoring import monitor_records
    from rewardpipe.monitoring.monitor import monitor_batch
    from rewardpipe.monitoring.parquet import write_parquet

    records = _user_run(lambda n: {"llm_user_fallbacks": values[n % len(values)]})
    expected = [r.user_fallback_records for r in monitor_records(records).steps]
    positive = [type(v) in (int, float) and v > 0 for v in values]
    assert sum(expected) == sum(positive[n % len(values)] for n in range(40))
    data = "".join(r.model_dump_json(by_alias=True) + "\n" for r in records).encode()
    path, _ = write_parquet(records, tmp_path, "r1")
    batches = [fastread._arrow_batch(data), fastread._orjson_batch(data), fastread.read_parquet_batch([path])]
    if values[-1] == 3:
        assert batches[0] is not None  # a column of numbers: pyarrow's reader vouches for it
    for batch in filter(None, batches):
        assert [r.user_fallback_records for r in monitor_batch(batch).steps] == expected
    assert batches[1] is not None and batches[2] is not None


# -- model text in the report: a stored transcript's every text is cut ---------------------------------------------


def test_a_stored_transcripts_huge_texts_are_cut_in_the_report(tmp_path):
    from rewardpipe.models import Message
    from rewardpipe.monitoring.html import _transcript
    from rewardpipe.monitoring.report import MESSAGE_CHARS, REVEALED_ITEMS, attach_transcripts
    from rewardpipe.store import LocalStore
    from rewardpipe.transcripts import RevealedItem, RolloutTranscript, Verdict

    huge = "\u202e<script>alert(1)</script>" + "x" * 1_000_000
    ids = {"run_id": "run", "step": 0, "group_id": "g", "rollout_id": "r", "task_id": "t"}
    transcript = RolloutTranscript(
        **ids,
        messages=[Message(role="user", content="q"), Message(role="assistant", content="a")],
        verdict=Verdict(status=huge, reason=huge),
        turn_kinds=[huge],
        revealed=[RevealedItem(index=i, text=huge, turn=0) for i in range(REVEALED_ITEMS + 7)],
    )
    store = LocalStore(tmp_path)
    key = store.put_transcript(transcript)
    report = {"alarms": [{"examples": [{"rollout_id": "r", "group_id": "g", "step": 0, "transcript_key": key}]}]}
    attach_transcripts(report, store)
    shown = report["alarms"][0]["examples"][0]["transcript"]
    assert len(json.dumps(shown)) < (REVEALED_ITEMS + 4) * (MESSAGE_CHARS + 100)
    assert shown["revealed_count"] == REVEALED_ITEMS + 7 and len(shown["revealed"]) == REVEALED_ITEMS
    page = _transcript(report["alarms"][0]["examples"][0])
    assert "<script>" not in page and "\u202e" not in page
    assert f"revealed spec items:</b> {REVEALED_ITEMS + 7}" in page and "… 7 more" in page


def test_a_grant_that_cannot_be_written_costs_the_check_nothing(capsys):
    from types import SimpleNamespace

    from rewardpipe.aws.monitoring import RunMetricRuns
    from rewardpipe.aws.settings import Settings

    def refused(**_):
        raise RuntimeError("SlowDown")

    def put_json(key, obj):
        raise RuntimeError(f"SlowDown writing {key}")

    store = SimpleNamespace(
        list_runs=lambda: [], client=SimpleNamespace(head_object=refused), bucket="b", _full=str, put_json=put_json
    )
    runs = RunMetricRuns(store, Settings(bucket="b"))
    assert runs.allows("r1") is False and runs.allows("r1") is False
    said = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(said) == 1 and "could not be written (RuntimeError: SlowDown" in said[0]["message"]


def test_an_unreadable_transcripts_error_is_cut_in_the_report():
    """The store's error for an unreadable transcript went whole into the report (a decoder's message may quote
    the object it could not read, written by whatever wrote the store)."""
    from rewardpipe.monitoring.report import MESSAGE_CHARS, attach_transcripts

    class Store:
        def get_transcript(self, key):
            raise ValueError("cannot read " + "x" * 1_000_000)

    report = {"alarms": [{"examples": [{"rollout_id": "r", "group_id": "g", "step": 0, "transcript_key": "k"}]}]}
    attach_transcripts(report, Store())
    missing = report["alarms"][0]["examples"][0]["transcript_missing"]
    assert missing.startswith("unreadable: cannot read x") and len(missing) < MESSAGE_CHARS + 100
