"""Round thirty-three (part 4): the variance monitor as an adversary and an RL engineer would read it.

* The zero-variance test was an absolute ``std <= epsilon`` (1e-6): a component varying by 1e-8 inside its groups
  with weight 1e8 moves the reward (and so GRPO's advantage) by a whole unit, yet was called dead; a component on a
  1e6 scale varying by 1e-3 (relative noise of 1e-9, lost as soon as a trainer holds the reward in float32) was
  alive. The rule is now scale-aware (``thresholds.zero_variance_bound``), the same for the figures, the alarm
  examples and the redundancy cause, so the Lambda check (``monitor_step``) and the local monitor agree.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rewardpipe.monitoring import Thresholds, monitor_records
from tests.monitoring.test_round_twentyseven_monitor import record


def weighted(step: int, group: int, rollout: int, components: dict[str, float], weights: dict[str, float]) -> dict:
    out = record(step, group, rollout, components)
    out["weights"] = dict(weights)
    out["aggregate"] = sum(weights[name] * value for name, value in components.items())
    return out


def step_of(component: Callable[[int, int], float], weight: float, groups: int = 16, k: int = 4) -> list[dict]:
    """``c`` takes ``component(g, i)`` in rollout ``i`` of group ``g``; ``b`` varies everywhere."""
    return [
        weighted(0, g, i, {"c": component(g, i), "b": i / k}, {"c": weight, "b": 1.0})
        for g in range(groups)
        for i in range(k)
    ]


def test_a_tiny_spread_with_a_huge_weight_moves_the_advantage_and_is_alive():
    result = monitor_records(step_of(lambda g, i: 1e-8 * (i % 2), 1e8), Thresholds())
    s = result.step(0).components["c"]
    assert s.zero_variance_group_fraction == 0.0
    assert s.verdict == "ok"


def test_a_tiny_spread_with_weight_one_is_still_dead():
    result = monitor_records(step_of(lambda g, i: 1e-8 * (i % 2), 1.0), Thresholds())
    s = result.step(0).components["c"]
    assert (s.verdict, s.zero_variance_group_fraction) == ("dead", 1.0)


def test_rounding_noise_on_a_huge_scale_is_dead():
    result = monitor_records(step_of(lambda g, i: 1e6 + g + 1e-3 * (i % 2), 1.0), Thresholds())
    s = result.step(0).components["c"]
    assert (s.verdict, s.zero_variance_group_fraction) == ("dead", 1.0)
    assert s.cause == "constant_within_groups"


def test_a_real_spread_on_a_huge_scale_is_alive():
    result = monitor_records(step_of(lambda g, i: 1e6 + 100.0 * (i % 2), 1.0), Thresholds())
    assert result.step(0).components["c"].verdict == "ok"


def test_unit_components_keep_the_documented_absolute_epsilon():
    # weight 1 and values within +-1: a constant plus noise below epsilon is dead, above it alive (docs/monitor.md)
    dead = monitor_records(step_of(lambda g, i: 0.5 + 1e-7 * (i % 2), 1.0), Thresholds())
    alive = monitor_records(step_of(lambda g, i: 0.5 + 1e-5 * (i % 2), 1.0), Thresholds())
    assert dead.step(0).components["c"].verdict == "dead"
    assert alive.step(0).components["c"].verdict == "ok"
    # and --epsilon still moves the line
    raised = monitor_records(step_of(lambda g, i: 0.5 + 1e-5 * (i % 2), 1.0), Thresholds(epsilon=1e-4))
    assert raised.step(0).components["c"].verdict == "dead"


def test_an_exact_constant_is_dead_with_epsilon_zero_and_any_weight():
    for weight in (0.0, 1e-300, 5e-324, 1.0, -3.0):
        result = monitor_records(step_of(lambda g, i: float(g % 2), weight), Thresholds(epsilon=0.0))
        assert result.step(0).components["c"].zero_variance_group_fraction == 1.0, weight


def test_the_bound_is_one_function_over_arrays_and_scalars():
    from rewardpipe.monitoring.thresholds import zero_variance_bound

    eps = 1e-6
    assert zero_variance_bound(eps, 1.0, 0.5) == eps
    assert zero_variance_bound(eps, 1e8, 1e-8) == eps * 1e-8
    assert zero_variance_bound(eps, 1.0, 1e6) == eps * 1e6
    assert zero_variance_bound(0.0, 5e-324, 1e6) == 0.0
    assert zero_variance_bound(eps, None, 0.5) == eps  # an unweighted component is judged on its own spread
    assert zero_variance_bound(eps, 0.0, 0.5) == eps
    bounds = zero_variance_bound(eps, -2.0, np.array([0.0, 1.0, 4e6]))
    assert bounds.tolist() == [eps / 2, eps, eps * 4e6]


def test_alarm_examples_follow_the_same_rule():
    # weight 1e8: the 1e-8 spread is alive, so the dead groups' examples must not be ones that vary by 1e-8
    def c(g: int, i: int) -> float:
        return 0.0 if g > 0 else 1e-8 * (i % 2)

    records = [weighted(0, g, i, {"c": c(g, i), "b": i / 4}, {"c": 1e8, "b": 1.0}) for g in range(16) for i in range(4)]
    result = monitor_records(records, Thresholds())
    s = result.step(0).components["c"]
    assert s.verdict == "dead" and s.zero_variance_groups == 15
    (alarm,) = [a for a in result.alarms if a.component == "c"]
    assert alarm.examples and all(e["group_id"] != "g0" for e in alarm.examples)


def test_a_records_metric_texts_are_bounded_in_total_across_sources():
    # Each source (a reward's diagnostics, an environment's metrics()) kept up to 200,000 characters of names and
    # texts: two full sources made a record of 400,000 and more. The record now keeps 200,000 in all, the longest
    # texts left out first (the platform's short ones, end_reason, stay) and said so.
    from rewardpipe.episode import record_from_score
    from rewardpipe.models import MAX_METRICS_TEXT_CHARS, recordable_metrics
    from rewardpipe.rewards.base import Score

    def text_size(metrics: dict) -> int:
        return sum(len(k) + (len(v) if isinstance(v, str) else 0) for k, v in metrics.items())

    diagnostics, _ = recordable_metrics({f"d{i}": "x" * 1990 for i in range(100)}, "diagnostics")
    env, _ = recordable_metrics({f"e{i}": "y" * 1990 for i in range(100)}, "metrics()")
    assert text_size(diagnostics) > MAX_METRICS_TEXT_CHARS * 0.99 and text_size(env) > MAX_METRICS_TEXT_CHARS * 0.99
    score = Score({"c": 1.0}, {"c": 1.0}, 1.0, diagnostics)
    ids = {"run_id": "r", "step": 0, "group_id": "g", "rollout_id": "x", "task_id": "t"}
    rec = record_from_score(score, **ids, extra_metrics={"end_reason": "done", "turns": 3, **env})
    assert text_size(rec.metrics) <= MAX_METRICS_TEXT_CHARS + 200  # (the note of what was left out)
    assert rec.metrics["end_reason"] == "done" and rec.metrics["turns"] == 3
    assert "metrics left out" in str(rec.metrics["metrics_left_out"])
    # a record within the bound is untouched, in its order
    small = record_from_score(Score({"c": 1.0}, {"c": 1.0}, 1.0, {"a": "1"}), **ids, extra_metrics={"b": 2})
    assert list(small.metrics.items()) == [("a", "1"), ("b", 2)]


def test_every_reader_judges_with_the_weighted_rule(tmp_path, monkeypatch):
    # `rewardpipe monitor` reads a JSONL file column-wise (fastread) or record by record; both build the tables the
    # one rule reads, with the weights the records declare
    import json

    from tests.monitoring.test_fast_path import run_three_ways

    records = step_of(lambda g, i: 1e-8 * (i % 2), 1e8) + [
        {**r, "step": 1, "rollout_id": "1" + r["rollout_id"]} for r in step_of(lambda g, i: 1e-8 * (i % 2), 1.0)
    ]
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    outputs, used = run_three_ways(monkeypatch, path, "--json")
    assert used[0] is True  # the column-wise reader served the first run
    verdicts = []
    for code, stdout, _ in outputs:
        assert code in (0, 1, 2)
        steps = json.loads(stdout)["steps"]
        verdicts.append([step["components"]["c"]["verdict"] for step in steps])
    assert verdicts == [["ok", "dead"]] * 3


def test_the_redundancy_cause_does_not_compare_every_pair_of_many_components(monkeypatch):
    # every pair of components was compared: quadratic in the components (400 took 2.4 s of CPU, thousands timed the
    # check out). Only components varying in the same sampled groups are paired now, at most REDUNDANT_MAX_PAIRS.
    import random

    import rewardpipe.monitoring.causes as causes

    calls = []
    original = causes._correlation
    monkeypatch.setattr(causes, "_correlation", lambda xs, ys: calls.append(1) or original(xs, ys))
    rng = random.Random(0)
    components = 300
    records = []
    for g in range(8):
        for i in range(4):
            values = {f"c{j:03d}": rng.random() for j in range(components)}
            values["dead"] = float(g % 2)  # constant inside its groups: paired with nothing
            values["dup"] = 2 * values["c000"] + 1  # the same signal as c000
            records.append(record(0, g, i, values))
    result = monitor_records(records, Thresholds())
    # (a pair is compared in its next group only while it correlates: in groups of 4, 1 in 1,000 random pairs does)
    assert len(calls) <= causes.REDUNDANT_MAX_PAIRS * 1.01 < components * (components + 1) // 2
    (found,) = [d for d in result.step(0).diagnoses if d.cause == "redundant_components"]
    assert found.components == ["c000", "dup"]
