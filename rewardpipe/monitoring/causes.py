"""Named causes, with figures, that explain why a component stopped (or never started) teaching.

A verdict's ``cause`` (``constant_at_minimum`` ...) says what the numbers of one component look like.
The diagnoses here name the mechanism, often across components, from the step's statistics and its
sample of full groups (:data:`rewardpipe.monitoring.statistics.SAMPLE_GROUPS`):

* ``saturation``: a component stuck at its maximum; it no longer separates rollouts.
* ``shaping_starves_outcome``: a shaping component carries most of the GRPO advantage while the outcome
  component is constant inside groups: the policy is optimised for the shaping signal alone.
* ``unreachable_gate``: a bonus that no rollout of the step earned at all (every value at its minimum),
  typical of a bonus awarded only past a condition nothing reaches.
* ``redundant_components``: two components perfectly correlated inside every sampled group where either
  varies: one adds nothing the other does not say; together they act as one signal.

Diagnoses never raise alarms by themselves: they are listed per step and attached to the alarms of the
components they name.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from itertools import combinations
from typing import Any

from rewardpipe.models import is_score
from rewardpipe.monitoring.messages import fmt, pct
from rewardpipe.monitoring.statistics import StepAcc
from rewardpipe.monitoring.thresholds import Thresholds, varies
from rewardpipe.monitoring.verdicts import ComponentStats

#: "Most of the advantage": the share a shaping component must carry to starve the outcome.
SHAPING_MAJORITY = 0.5
#: |correlation| inside a group at or above which two components count as the same signal.
REDUNDANT_CORRELATION = 0.999
#: Sampled groups where either component varies needed before calling two components redundant.
REDUNDANT_MIN_GROUPS = 3


@dataclass
class Diagnosis:
    cause: str
    components: list[str]
    message: str
    figures: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def diagnose(components: dict[str, ComponentStats], acc: StepAcc, th: Thresholds) -> list[Diagnosis]:
    """Every named cause visible at one step (``components``: the step's per-component verdicts)."""
    found: list[Diagnosis] = []
    found += _saturation(components, acc, th)
    found += _shaping_starves_outcome(components, acc, th)
    found += _unreachable_gates(components, th)
    found += _redundant_components(components, acc, th)
    return found


def _saturation(components: dict[str, ComponentStats], acc: StepAcc, th: Thresholds) -> list[Diagnosis]:
    found = []
    for name, stats in components.items():
        weight = acc.weights.get(name)
        if stats.verdict != "dead" or stats.cause != "constant_at_maximum" or name not in th.ranges or weight == 0:
            continue  # (weighted 0 it lifts no reward: its dead message says so)
        if th.penalty_neutral_end(name, th.ranges[name]) is not None:
            continue  # a penalty at its maximum is idle or always fires, never a bonus to "raise the bar" on
        maximum = th.ranges[name][1]
        found.append(
            Diagnosis(
                "saturation",
                [name],
                f"{name} is saturated: constant at its maximum {fmt(maximum)} "
                f"in {pct(stats.zero_variance_group_fraction)} "
                f"of groups (batch mean {fmt(stats.mean)}); it no longer separates rollouts, so its weight "
                f"{fmt(weight)} only lifts every reward by the same amount; raise the bar or lower the weight",
                {
                    "maximum": maximum,
                    "mean": stats.mean,
                    "zero_variance_group_fraction": stats.zero_variance_group_fraction,
                    "weight": weight,
                },
            )
        )
    return found


def _shaping_starves_outcome(components: dict[str, ComponentStats], acc: StepAcc, th: Thresholds) -> list[Diagnosis]:
    found = []
    for outcome in th.outcome_components:
        stats = components.get(outcome)
        if stats is None or stats.verdict not in ("dead", "dying") or stats.zero_variance_group_fraction is None:
            continue
        for name, shaping in components.items():
            share = shaping.advantage_share
            if name in th.outcome_components or share is None or share < SHAPING_MAJORITY:
                continue
            found.append(
                Diagnosis(
                    "shaping_starves_outcome",
                    [name, outcome],
                    f"{name} carries {pct(share)} of the GRPO advantage while {outcome} is constant in "
                    f"{pct(stats.zero_variance_group_fraction)} of groups (mean {fmt(stats.mean)}): the policy is "
                    f"being optimised for the shaping signal, not for the outcome; lower {name}'s weight "
                    f"({fmt(acc.weights.get(name))}) or give {outcome} room to vary (easier tasks, partial credit)",
                    {
                        "shaping_component": name,
                        "outcome_component": outcome,
                        "shaping_advantage_share": share,
                        "outcome_advantage_share": stats.advantage_share or 0.0,
                        "outcome_zero_variance_group_fraction": stats.zero_variance_group_fraction,
                        "outcome_mean": stats.mean,
                        "shaping_weight": acc.weights.get(name),
                        "outcome_weight": acc.weights.get(outcome),
                    },
                )
            )
    return found


def _unreachable_gates(components: dict[str, ComponentStats], th: Thresholds) -> list[Diagnosis]:
    found = []
    for name, stats in components.items():
        value_range = th.ranges.get(name)
        if (
            name in th.outcome_components
            or value_range is None
            or value_range[0] != 0.0
            or value_range[1] <= 0.0
            or stats.verdict != "dead"
            or stats.max is None
            or stats.max > value_range[0]
        ):
            continue
        found.append(
            Diagnosis(
                "unreachable_gate",
                [name],
                f"{name} was never earned: all {stats.values} scored rollouts in {stats.groups} groups sit at its "
                f"minimum {fmt(value_range[0])} (its maximum is {fmt(value_range[1])}); if it is awarded only past a "
                f"condition (a gate), no rollout gets through it; the examples are the closest misses",
                {
                    "rollouts": stats.values,
                    "groups": stats.groups,
                    "minimum": value_range[0],
                    "maximum": value_range[1],
                },
            )
        )
    return found


def _correlation(xs: list[float], ys: list[float]) -> float | None:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx <= 0 or syy <= 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / math.sqrt(sxx * syy)


#: Most pairs of components one step compares for redundancy (past it, the rest are not compared).
REDUNDANT_MAX_PAIRS = 20_000


def _redundant_candidates(names: list[str], acc: StepAcc, tol: float) -> list[tuple[str, str]]:
    """The pairs of ``names`` that can be redundant, in the order of ``combinations(names, 2)``: two components
    that vary in the same sampled groups (on their own finite values), at least ``REDUNDANT_MIN_GROUPS`` of them,
    since a group where one varies and the other does not breaks the pair. Comparing every pair made the check
    quadratic in the components (400 took 2.4 s, thousands timed the step out); bucketed, the work grows with the
    components, and a bucket of thousands (random components that all vary) gives at most ``REDUNDANT_MAX_PAIRS``."""
    samples = list(acc.sample.values())
    buckets: dict[tuple[int, ...], list[str]] = {}
    for name in names:
        weight = acc.weights.get(name)
        varying = []
        for index, rollouts in enumerate(samples):
            values = [r.components.get(name) for r in rollouts if r.status == "scored"]
            if varies([x for x in values if is_score(x)], tol, weight):
                varying.append(index)
        if len(varying) >= REDUNDANT_MIN_GROUPS:
            buckets.setdefault(tuple(varying), []).append(name)
    pairs: list[tuple[str, str]] = []
    for bucket in buckets.values():
        for pair in combinations(bucket, 2):
            if len(pairs) >= REDUNDANT_MAX_PAIRS:
                break
            pairs.append(pair)
    return sorted(pairs)


def _redundant_components(components: dict[str, ComponentStats], acc: StepAcc, th: Thresholds) -> list[Diagnosis]:
    found = []
    names = sorted(components)
    tol = th.epsilon
    for a, b in _redundant_candidates(names, acc, tol):
        correlations: list[float] = []
        disagree = 0
        for rollouts in acc.sample.values():
            values = [(r.components.get(a), r.components.get(b)) for r in rollouts if r.status == "scored"]
            pairs = [(x, y) for x, y in values if is_score(x) and is_score(y)]
            if len(pairs) < 2:
                continue
            xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
            varies_a, varies_b = varies(xs, tol, acc.weights.get(a)), varies(ys, tol, acc.weights.get(b))
            if not varies_a and not varies_b:
                continue
            r = _correlation(xs, ys) if varies_a and varies_b else None
            if r is None or abs(r) < REDUNDANT_CORRELATION:
                disagree += 1
                break
            correlations.append(r)
        if disagree or len(correlations) < REDUNDANT_MIN_GROUPS:
            continue
        same_sign = all(r > 0 for r in correlations) or all(r < 0 for r in correlations)
        direction = "together" if all(r > 0 for r in correlations) else "against each other"
        weakest = min(abs(r) for r in correlations)
        found.append(
            Diagnosis(
                "redundant_components",
                [a, b],
                f"{a} and {b} move {direction if same_sign else 'in lockstep'} inside every sampled group where either "
                f"varies ({len(correlations)} groups, |correlation| >= {weakest:.4f}): within a group one is a linear "
                f"function of the other, so {b} adds nothing {a} does not already say; together they act as one signal "
                f"(weights {fmt(acc.weights.get(a))} and {fmt(acc.weights.get(b))}); drop or merge one",
                {
                    "groups_compared": len(correlations),
                    "min_abs_correlation": weakest,
                    "mean_correlation": sum(correlations) / len(correlations),
                    "weights": {a: acc.weights.get(a), b: acc.weights.get(b)},
                },
            )
        )
    return found
