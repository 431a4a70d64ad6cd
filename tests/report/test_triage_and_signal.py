"""Task triage, within-group correlation and advantage shares, on records built to show each, and checked
against straightforward per-group computations (pandas) on random runs."""

import random

import numpy as np
import pandas as pd
import pytest

from rewardpipe.monitoring.columns import RunColumns, group_rows
from rewardpipe.monitoring.report import build_report
from rewardpipe.monitoring.signal import within_group_correlation
from rewardpipe.monitoring.triage import task_triage
from tests.report.conftest import rec


def _columns(records):
    columns = RunColumns()
    for record in records:
        columns.add(record)
    return columns, group_rows(columns)


def _triage(records, ranges=None):
    columns, grouped = _columns(records)
    return {(e["task_id"], e["component"]): e for e in task_triage(columns, grouped, ranges or {"a": (0.0, 1.0)})}


def test_triage_names_never_always_and_constant_tasks_and_skips_tasks_with_signal():
    records = []
    for step in range(3):
        for k in range(4):
            records.append(rec(step, f"s{step}-never", k, "never", a=0.0, b=float(k)))
            records.append(rec(step, f"s{step}-always", k, "always", a=1.0, b=float(k)))
            records.append(rec(step, f"s{step}-half", k, "half", a=0.5, b=float(k)))
            records.append(rec(step, f"s{step}-varies", k, "varies", a=float(k % 2), b=float(k)))
            # constant inside each group, different across groups: still no GRPO signal
            records.append(rec(step, f"s{step}-drifts", k, "drifts", a=step / 2, b=float(k)))
    # an infrastructure error inside a varying group must not make it look constant, nor count
    records.append(rec(0, "s0-never", 9, "never", status="error", a=None, b=None))
    entries = _triage(records)
    assert set(entries) == {("never", "a"), ("always", "a"), ("half", "a"), ("drifts", "a")}
    assert entries[("never", "a")]["verdict"] == "never" and entries[("never", "a")]["value"] == 0.0
    assert entries[("always", "a")]["verdict"] == "always"
    assert entries[("half", "a")]["verdict"] == "constant" and entries[("half", "a")]["value"] == 0.5
    assert entries[("drifts", "a")]["verdict"] == "constant" and entries[("drifts", "a")]["value"] is None
    assert all(e["groups"] == 3 and e["steps"] == 3 for e in entries.values())


def test_triage_uses_the_observed_range_for_a_component_without_a_declared_one():
    records = [rec(0, "g1", k, "t1", c=2.0) for k in range(3)] + [rec(0, "g2", k, "t2", c=float(k)) for k in range(3)]
    assert _triage(records)[("t1", "c")]["verdict"] == "always"  # 2.0 is the largest value c took


def test_single_rollout_groups_give_no_evidence_either_way():
    records = [rec(s, f"g{s}", 0, "solo", a=0.0) for s in range(5)]
    assert _triage(records) == {}


def _random_run(seed: int, steps=4, groups=6, k=5):
    rng = random.Random(seed)
    records = []
    for step in range(steps):
        for g in range(groups):
            task = f"t{rng.randrange(5)}"
            mode = rng.random()
            for i in range(k):
                a = 0.0 if mode < 0.3 else float(rng.random() < 0.5)
                b = rng.choice([0.0, 0.5, 1.0]) if mode > 0.2 else 1.0
                c = a if mode > 0.6 else rng.random()
                records.append(
                    rec(step, f"s{step}-g{g}", i, task, weights={"a": 1.0, "b": 0.5, "c": 0.2}, a=a, b=b, c=c)
                )
    return records


@pytest.mark.parametrize("seed", range(5))
def test_triage_matches_a_pandas_groupby(seed):
    records = _random_run(seed)
    frame = pd.DataFrame(
        [
            {"task": r["task_id"], "group": (r["step"], r["group_id"]), "step": r["step"], **r["components"]}
            for r in records
        ]
    )
    expected = set()
    for name in ("a", "b", "c"):
        spans = frame.groupby(["task", "group"])[name].agg(lambda s: s.max() - s.min())
        by_task = spans.groupby(level=0).max()
        expected |= {(task, name) for task, span in by_task.items() if span <= 1e-6}
    got = _triage(records, {"a": (0, 1), "b": (0, 1), "c": (0, 1)})
    assert set(got) == expected
    for (task, name), entry in got.items():
        rows = frame[frame.task == task]
        assert entry["groups"] == rows.group.nunique() and entry["steps"] == rows.step.nunique()


def test_the_report_carries_the_monitors_advantage_shares_per_step_and_their_mean():
    # a varies inside every group, b never does: a carries the whole advantage, b none of it.
    records = [
        rec(s, f"s{s}-g{g}", k, "t", a=float(k % 2), b=1.0) for s in range(2) for g in range(4) for k in range(4)
    ]
    report = build_report(records)
    assert report["series"]["a"]["advantage_share"] == [1.0, 1.0]
    assert report["series"]["b"]["advantage_share"] == [0.0, 0.0]
    assert report["advantage_share"]["run"] == {"a": 1.0, "b": 0.0}


def test_within_group_correlation_finds_redundant_components_that_batch_correlation_would_miss():
    rng = random.Random(1)
    records = []
    for g in range(20):
        offset = rng.random() * 10  # between-group differences that GRPO ignores
        for k in range(6):
            x = rng.random()
            records.append(rec(0, f"g{g}", k, "t", a=x, b=2 * x + 1, c=rng.random() + offset, d=0.5))
    names, matrix = _columns(records)[1].names, within_group_correlation(_columns(records)[1])
    corr = {(a, b): matrix[i][j] for i, a in enumerate(names) for j, b in enumerate(names)}
    assert corr[("a", "b")] == pytest.approx(1.0)
    assert abs(corr[("a", "c")]) < 0.3
    assert corr[("a", "d")] is None  # d never varies inside a group
    frame = pd.DataFrame([r["components"] | {"g": r["group_id"]} for r in records])
    centred = frame[["a", "c"]] - frame.groupby("g")[["a", "c"]].transform("mean")
    assert corr[("a", "c")] == pytest.approx(float(np.corrcoef(centred.a, centred.c)[0, 1]), abs=1e-3)


def test_report_content_for_a_collapse():
    records = [
        rec(s, f"s{s}-g{g}", k, f"t{g}", a=(float(k % 2) if s < 2 else 0.0), b=float(k % 3 == 0))
        for s in range(3)
        for g in range(5)
        for k in range(4)
    ]
    report = build_report(records)
    assert report["steps"] == [0, 1, 2] and report["scored"] == 60
    assert report["series"]["a"]["verdict"] == ["ok", "ok", "dead"]
    assert report["series"]["a"]["zero_variance_share"][-1] == 1.0
    onset = [a for a in report["alarms"] if a["component"] == "a"]
    assert [a["step"] for a in onset] == [2] and len(onset[0]["examples"]) == 3
    assert all(
        e["step"] == 2 and e["transcript_key"].startswith("runs/r/transcripts/step=2/") for e in onset[0]["examples"]
    )
    assert report["series"]["a"]["advantage_share"][-1] in (None, 0.0)
