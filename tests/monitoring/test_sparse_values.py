"""A component (or the aggregate) with a finite value in at most one rollout of a group gives GRPO no comparison
there: such groups count as judged and zero-variance, and where they make the component dead its cause is
``sparse_values``. Before, they were left out as "groups of one", so a judge that failed to NaN for all but one
rollout of each prompt stayed ``insufficient_data`` for ever, pooling "small steps" of 16 groups, and never alarmed.
"""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from rewardpipe.cli import app
from rewardpipe.monitoring import Thresholds, monitor_records
from tests.monitoring.test_fast_path import record

RANGES = Thresholds(ranges={"alive": (0.0, 1.0), "judge": (0.0, 1.0)})


def records(step: int, judge, aggregate=None, groups: int = 16, size: int = 4) -> list[dict]:
    """``alive`` alternates 0/1 inside every group (healthy); ``judge`` is ``judge(g, k)``; the aggregate is
    ``aggregate(g, k)`` (default: alive plus judge where judge is finite)."""
    out = []
    for g in range(groups):
        for k in range(size):
            value = judge(g, k)
            alive = float((g + k) % 2)
            total = (
                aggregate(g, k) if aggregate else alive + (value if value is not None and math.isfinite(value) else 0)
            )
            out.append(
                record(
                    "r",
                    step,
                    f"g{g}",
                    f"s{step}g{g}k{k}",
                    f"t{g}",
                    components={"alive": alive, "judge": value},
                    weights={"alive": 1.0, "judge": 1.0},
                    aggregate=total,
                )
            )
    return out


def first_only(bad):
    return lambda g, k: 0.5 if k == 0 else bad


def varying(g, k):
    return k / 4


def test_the_reviewers_run_alarms_on_the_judge_and_the_aggregate():
    """20 steps x 16 groups x 4 rollouts; judge and aggregate 0.5 in rollout 0 and NaN in 1-3."""
    recs = [r for step in range(20) for r in records(step, first_only(math.nan), first_only(math.nan))]
    result = monitor_records(recs, RANGES)
    for report in result.steps:
        assert report.components["alive"].verdict == "ok"
        for stats in (report.components["judge"], report.aggregate):
            assert (stats.verdict, stats.cause) == ("dead", "sparse_values"), stats.message
            assert stats.eligible_groups == stats.zero_variance_groups == 16
            assert "a finite value in at most 1 of 4 rollouts in 16 of 16 groups" in stats.message
            assert "0 None, 48 NaN or inf" in stats.message
            assert "small step" not in stats.message
    alarms = [(a.kind, a.component, a.step, a.cause) for a in result.alarms]
    assert alarms == [
        ("dead_component", "judge", 0, "sparse_values"),
        ("dead_component", "aggregate", 0, "sparse_values"),
    ]
    for alarm in result.alarms:
        reasons = [example["reason"] for example in alarm.examples]
        assert reasons and any("0.5, the only finite value of 4 in its group" in reason for reason in reasons)
        assert any("nan: no value to compare with" in reason for reason in reasons)


@pytest.mark.parametrize(
    ("bad", "counted"),
    [(None, "48 None, 0 NaN or inf"), (math.nan, "0 None, 48 NaN or inf"), (math.inf, "0 None, 48 NaN or inf")],
    ids=["None", "NaN", "inf"],
)
def test_one_value_per_group_is_dead_whatever_stands_for_the_others(bad, counted):
    result = monitor_records(records(0, first_only(bad)), RANGES)
    judge = result.steps[0].components["judge"]
    assert (judge.verdict, judge.cause) == ("dead", "sparse_values")
    assert counted in judge.message and "16 values" in judge.message
    assert judge.values == 16 and judge.zero_variance_group_fraction == 1.0
    assert [(a.component, a.cause) for a in result.alarms] == [("judge", "sparse_values")]


def test_it_recovers_when_the_values_return():
    recs = [r for step in range(7) for r in records(step, varying if step < 2 or step >= 5 else first_only(math.nan))]
    result = monitor_records(recs, RANGES)
    kinds = [(a.kind, a.step, a.cause) for a in result.alarms if a.component == "judge"]
    assert kinds == [("dead_component", 2, "sparse_values"), ("recovered", 5, "recovered")]
    assert [s.components["judge"].verdict for s in result.steps] == ["ok", "ok", "dead", "dead", "dead", "ok", "ok"]


def test_groups_with_two_varying_values_keep_it_alive():
    """Half the groups vary (two finite values of four, NaN in the others), half have one value: judged on
    all 16, 8 without a comparison, so ok; a group of 2+ finite values that differ is healthy."""
    result = monitor_records(
        records(0, lambda g, k: (k / 4 if k < 2 else math.nan) if g % 2 else first_only(math.nan)(g, k)), RANGES
    )
    judge = result.steps[0].components["judge"]
    assert judge.verdict == "ok"
    assert (judge.eligible_groups, judge.zero_variance_groups) == (16, 8)
    assert not [a for a in result.alarms if a.component == "judge"]


def test_a_component_only_some_tasks_have_is_judged_on_their_groups():
    """None in every rollout of the other tasks' groups: those groups are not counted at all."""
    result = monitor_records(records(0, lambda g, k: varying(g, k) if g < 8 else None), RANGES)
    judge = result.steps[0].components["judge"]
    assert (judge.verdict, judge.eligible_groups, judge.zero_variance_groups) == ("ok", 8, 0)


def test_mostly_single_values_is_dead_even_with_a_varying_group():
    result = monitor_records(records(0, lambda g, k: varying(g, k) if g == 0 else first_only(None)(g, k)), RANGES)
    judge = result.steps[0].components["judge"]
    assert (judge.verdict, judge.cause) == ("dead", "sparse_values")
    assert "in 15 of 16 groups" in judge.message


def test_constant_groups_beside_single_values_keep_their_cause_and_say_the_rest():
    """12 groups at the minimum, 4 with one value: the constant groups are most of the dead ones."""
    result = monitor_records(records(0, lambda g, k: 0.0 if g < 12 else first_only(None)(g, k)), RANGES)
    judge = result.steps[0].components["judge"]
    assert (judge.verdict, judge.cause) == ("dead", "constant_at_minimum")
    assert "4 of those 16 groups have a finite value in only one rollout" in judge.message


def test_really_small_steps_still_pool_and_say_so():
    """Two groups a step (min_groups 4): the first step says it is pooling small steps; the second gets the
    verdict over both."""
    recs = [r for step in range(2) for r in records(step, first_only(math.nan), groups=2)]
    first, second = (report.components["judge"] for report in monitor_records(recs, RANGES).steps)
    assert first.verdict == "insufficient_data"
    assert "0 group(s) with at least 2 scored values and 2 with a value in only one rollout" in first.message
    assert "pooling small steps: 2 of 4 groups so far over step 0" in first.message
    assert (second.verdict, second.cause, second.pooled_steps) == ("dead", "sparse_values", [0, 1])
    assert "in 4 of 4 groups" in second.message and "(pooled over steps 0\u20131" in second.message


def test_a_large_step_short_of_values_is_not_called_small():
    """16 groups of four rollouts, but judge has values in two groups only: pooled, never "small steps"."""
    recs = [r for step in range(2) for r in records(step, lambda g, k: varying(g, k) if g < 2 else None)]
    first = monitor_records(recs, RANGES).steps[0].components["judge"]
    assert first.verdict == "insufficient_data"
    assert "small steps" not in first.message
    assert "not a small step (16 groups of 2+ scored rollouts)" in first.message
    assert "pooling steps: 2 of 4 groups so far over step 0" in first.message


def test_the_cli_agrees(tmp_path):
    """None goes through the column reader (the fast path); the verdicts, alarm and examples are the same."""
    rows = [r for step in range(2) for r in records(step, first_only(None))]
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = CliRunner().invoke(app, ["monitor", str(path), "--json", "--range", "judge=0:1"])
    assert out.exit_code in (0, 1), out.output
    report = json.loads(out.stdout)
    assert [step["components"]["judge"]["cause"] for step in report["steps"]] == ["sparse_values"] * 2
    library = monitor_records(rows, RANGES)
    assert [a.cause for a in library.alarms] == [a["cause"] for a in report["alarms"]] == ["sparse_values"]
    assert [a.message for a in library.alarms] == [a["message"] for a in report["alarms"]]
