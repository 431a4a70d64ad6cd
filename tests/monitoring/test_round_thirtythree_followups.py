"""Round thirty-three, the monitor's follow-ups: ``error.non_finite`` in Parquet exports, the CloudWatch metrics a
step emits bounded by the run's declared components, triage judging zero variance as the monitor does, and a
component named ``aggregate``."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rewardpipe.monitoring.fastread as fastread
from rewardpipe.models import Record
from rewardpipe.monitoring.parquet import NONFINITE_COLUMN, write_parquet
from tests.monitoring.test_fast_path import record

# -- 1. ErrorInfo.non_finite in the Parquet export -------------------------------------------------------------


def _errors():
    """A NaN component, a huge one, another kind of error, and a scored record, as Records."""

    def failed(rollout, kind, non_finite):
        error = {"kind": kind, "message": "the model said: is not a finite number"}
        if non_finite is not None:
            error["non_finite"] = non_finite
        return record(rollout=rollout, status="error", error=error, aggregate=None, components={"correctness": None})

    raw = [
        failed("a", "component_out_of_range", True),
        failed("b", "component_out_of_range", False),
        failed("c", "timeout", None),
        record(rollout="d"),
    ]
    return [Record.model_validate(r) for r in raw]


def _read_back(files):
    careful = {r.rollout_id: r for r in fastread.parquet_rows(files, on_bad=pytest_fail, duplicates=[])}
    batch = fastread.read_parquet_batch(files)
    assert batch is not None
    fast = [batch.load(int(position)) for position in batch.positions]
    assert {r.rollout_id: r.error for r in fast} == {k: r.error for k, r in careful.items()}
    return careful


def pytest_fail(bad):
    raise AssertionError(f"unreadable: {bad}")


def test_the_export_keeps_whether_an_out_of_range_component_was_nan(tmp_path):
    records = _errors()
    path, rows = write_parquet(records, tmp_path, "r1")
    assert rows == 4
    column = pq.read_table(path).column(NONFINITE_COLUMN).to_pylist()
    assert column == [True, False, None, None]
    back = _read_back([path])
    assert back["a"].error.non_finite is True
    assert back["b"].error.non_finite is False  # its message ends like a NaN's: the field, not the text, says
    assert back["c"].error.non_finite is None
    assert back["d"].error is None
    assert [back[r.rollout_id].model_dump_json() for r in records] == [r.model_dump_json() for r in records]


def test_a_file_written_before_the_column_still_reads(tmp_path):
    path, _ = write_parquet(_errors(), tmp_path / "new", "r1")
    table = pq.read_table(path)
    old = tmp_path / "old"
    old.mkdir()
    old_file = old / "r2.parquet"
    pq.write_table(
        table.drop_columns([NONFINITE_COLUMN]).set_column(1, table.schema.field(1), pa.array(["r2"] * 4)), old_file
    )
    assert NONFINITE_COLUMN not in pq.read_schema(old_file).names
    back = _read_back([old_file])
    assert {k: (r.error.kind, r.error.non_finite) if r.error else None for k, r in back.items()} == {
        "a": ("component_out_of_range", None),
        "b": ("component_out_of_range", None),
        "c": ("timeout", None),
        "d": None,
    }
    # an old file beside a new one: both read, each with what it holds
    both = fastread.read_parquet_batch([old_file, path])
    assert both is not None and len(both) == 8
    assert [both.load(n).error.non_finite if both.load(n).error else "-" for n in (1, 5)] == [None, True]


# -- 2. CloudWatch metrics only for the run's declared components, plus a few others ------------------------------

JUNK = [f"junk{i:03d}" for i in range(40)]


def _records(values_of, weights, run="r1", steps=2, groups=3, k=4, by_group=False):
    """``steps`` steps of ``groups`` groups of ``k`` scored records; rollout ``i``'s components are ``values_of(i)``
    (``by_group``: ``values_of(g)`` for every rollout of group ``g``, constant inside groups)."""
    return [
        Record.model_validate(
            record(
                run,
                step,
                f"s{step}-g{group}",
                f"s{step}-g{group}-{i}",
                components=values_of(group if by_group else i),
                weights=weights,
                aggregate=sum(weights[name] * value for name, value in values_of(group if by_group else i).items()),
            )
        )
        for step in range(steps)
        for group in range(groups)
        for i in range(k)
    ]


def _wide_records(run):
    """A run whose records name its declared components and 40 more (a bad writer), every one varying."""
    names = ["correctness", "style", *JUNK]
    return _records(
        lambda i: {name: float((i + n) % 3) for n, name in enumerate(names)}, dict.fromkeys(names, 1.0), run
    )


def _emf(stdout):
    return [json.loads(line) for line in stdout.splitlines() if line.startswith('{"_aws"')]


def test_metrics_are_emitted_for_declared_components_and_a_few_others(monkeypatch, capsys):
    import boto3
    from moto import mock_aws

    from rewardpipe.aws.monitoring import EXTRA_METRIC_COMPONENTS, CheckRequest, run_check
    from rewardpipe.aws.settings import Settings
    from rewardpipe.store import S3Store, manifest_key

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="records")
        store = S3Store("records", client=s3)
        for rec in _wide_records("wide"):
            store.put_record(rec)
        # the run's manifest declares "style" besides the deployed reward's "correctness"
        # (a finished run's manifest: since round thirty-seven the check judges only the finished steps of a run whose
        # manifest says it is still being written, as monitor and report do)
        store.put_json(
            manifest_key("wide"),
            {"components": {"style": {"range": [0, 2], "role": "shaping"}}, "finished_at": "2026-12-01T00:00:00Z"},
        )
        deployed = {"correctness": {"range": [0, 2], "role": "outcome", "weight": 1.0}}
        # a deployment synthesized before REWARD_COMPONENTS names its reward's components by REWARD_WEIGHTS only
        settings = Settings(bucket="records", reward_components=deployed, reward_weights={"junk039": 1.0})
        capsys.readouterr()
        out = run_check(CheckRequest(run_id="wide", step=1), settings, store=store)
    printed = capsys.readouterr().out
    docs = _emf(printed)
    # said in the function's log as well (a scheduled check's result is read by nobody)
    warnings = [json.loads(line) for line in printed.splitlines() if line.startswith('{"level": "WARNING"')]
    assert [(w["step"], w["metrics_left_out"]["count"]) for w in warnings] == [(0, 34), (1, 34)]
    named = {d["component"] for d in docs if "component" in d}
    undeclared = sorted(JUNK)[:-1]
    extras = undeclared[:EXTRA_METRIC_COMPONENTS]
    assert named == {"correctness", "style", "junk039", *extras}
    # per run and for the alarms alike: no DeadStreak of a name left out
    alarmed = {d["component"] for d in docs if "DeadStreak" in d and "run" not in d}
    assert alarmed == named
    assert [s["step"] for s in out["results"]] == [0, 1]
    for summary in out["results"]:
        left_out = summary["metrics_left_out"]
        assert left_out["count"] == len(undeclared) - EXTRA_METRIC_COMPONENTS
        assert left_out["components"] == undeclared[EXTRA_METRIC_COMPONENTS:][:20]
        # the verdicts themselves still judge every component
        assert set(summary["verdicts"]) == {"correctness", "style", *JUNK}


# -- 3. triage judges zero variance as the monitor does -----------------------------------------------------------


def _scaled_records():
    """One task; ``tiny`` spreads 1e-8 under weight 1e8 (a whole reward unit: alive), ``huge`` spreads 1e-3 on
    values near 1e6 (relative noise of 1e-9: dead), ``plain`` is constant (dead)."""
    return _records(
        lambda i: {"tiny": 1e-8 * (i % 2), "huge": 1e6 + 1e-3 * (i % 2), "plain": 0.5},
        {"tiny": 1e8, "huge": 1.0, "plain": 1.0},
    )


def test_triage_calls_dead_what_the_monitor_calls_dead():
    from rewardpipe.monitoring.report import build_report

    report = build_report(_scaled_records())
    fraction = {
        name: [v for v in report["series"][name]["zero_variance_share"] if v is not None]
        for name in ("tiny", "huge", "plain")
    }
    assert fraction == {"tiny": [0.0, 0.0], "huge": [1.0, 1.0], "plain": [1.0, 1.0]}
    triaged = {e["component"] for e in report["task_triage"]}
    assert triaged == {"huge", "plain"}  # dead for the monitor in every group of the task, and only those


def test_triage_follows_the_monitors_epsilon():
    from rewardpipe.monitoring.report import build_report
    from rewardpipe.monitoring.thresholds import Thresholds

    report = build_report(_scaled_records(), Thresholds(epsilon=0.0))
    assert report["task_triage"] == [e for e in report["task_triage"] if e["component"] == "plain"]
    assert {e["component"] for e in report["task_triage"]} == {"plain"}


# -- 4. a component named "aggregate" (or "errors") ----------------------------------------------------------------


def test_a_reward_cannot_name_a_component_like_the_monitors_own_targets():
    from rewardpipe.components import RESERVED_NAMES, ComponentDefinitionError, check_name
    from rewardpipe.monitoring.alarms import AGGREGATE_TARGET, ERRORS_TARGET, RESERVED_COMPONENT_NAMES

    assert RESERVED_COMPONENT_NAMES == RESERVED_NAMES == {AGGREGATE_TARGET, ERRORS_TARGET}
    for name in RESERVED_NAMES:
        with pytest.raises(ComponentDefinitionError, match="reserved"):
            check_name(name)


@pytest.mark.parametrize("reserved", ["aggregate", "errors"])
def test_records_naming_a_reserved_component_have_it_left_out_said_and_the_rest_judged(tmp_path, monkeypatch, reserved):
    """Such a component's alarms shared the aggregate's (or the error rate's) name and dedupe key; one writer's mistake
    must not stop the run's check either (it is one bad column, not a bad run): left out of its step, listed with the
    unreadable objects, every other component judged."""
    from typer.testing import CliRunner

    from rewardpipe.cli import app
    from rewardpipe.monitoring import monitor_records

    # the reserved one is constant (dead) and so is "x": only "x" and the aggregate may alarm
    records = _records(lambda i: {reserved: 0.5, "x": 0.3}, {reserved: 1.0, "x": 1.0})
    result = monitor_records(records)
    assert all(reserved not in step.components for step in result.steps)
    assert {(a.component, a.kind) for a in result.alarms} >= {("x", "dead_component")}
    assert all(a.component != reserved or reserved == "aggregate" for a in result.alarms)
    assert [u for u in result.unreadable if f"'{reserved}'" in u["reason"] and "rename the component" in u["reason"]]
    path = tmp_path / "records.jsonl"
    path.write_text("".join(r.model_dump_json(by_alias=True) + "\n" for r in records))
    for fast in (True, False):
        if not fast:
            monkeypatch.setattr(fastread, "read_jsonl_batch", lambda path: None)
        shown = CliRunner().invoke(app, ["monitor", str(path), "--json"])
        assert "Traceback" not in shown.output, shown.output
        body = json.loads(shown.stdout)
        assert any(f"'{reserved}'" in u["reason"] for u in body["unreadable"]), body["unreadable"]
        assert all(reserved not in step["components"] for step in body["steps"])
