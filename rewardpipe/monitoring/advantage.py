"""Which weighted component moves the GRPO advantage, group by group.

GRPO's advantage of rollout ``i`` in a group is ``A_i = (R_i - mean R) / (std R + eps)`` with
``R_i = sum_c w_c x_ci``. It splits exactly into one term per component:

    A_i = sum_c  w_c (x_ci - mean x_c) / (std R + eps)

:func:`rollout_advantages` returns those terms (they add up to ``A_i``). A component's *share of the
group's advantage* is the size of its term relative to the others: the root-mean-square of component
``c``'s term over the group is ``|w_c| std(x_c) / (std R + eps)``, so

    share_c = |w_c| std(x_c) / sum_c' |w_c'| std(x_c')

(:func:`advantage_shares`). Shares add up to 1 in a group where anything varies; a component constant in
the group has share 0 whatever its weight; a group where nothing varies has no shares (no advantage at all).
Shares need only each component's within-group std, so the monitor computes them in its streaming pass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

#: Added to std R in the advantage denominator, as GRPO implementations do (TRL uses 1e-4).
ADVANTAGE_EPS = 1e-4


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    return mean, math.sqrt(max(sum((v - mean) ** 2 for v in values) / n, 0.0))


def advantage_shares(stds: Mapping[str, float], weights: Mapping[str, float]) -> dict[str, float] | None:
    """Each component's share of a group's advantage from its within-group (population) std and weight.

    A component without a weight counts with weight 1. Returns None when no component varies.
    """
    sizes = {name: abs(weights.get(name, 1.0)) * std for name, std in stds.items()}
    total = sum(sizes.values())
    if total <= 0.0 or not math.isfinite(total):
        return None
    return {name: size / total for name, size in sizes.items()}


def group_advantage_shares(
    values: Mapping[str, Sequence[float]], weights: Mapping[str, float]
) -> dict[str, float] | None:
    """:func:`advantage_shares` of one group given each component's values (one per rollout)."""
    return advantage_shares({name: _mean_std(vals)[1] for name, vals in values.items() if vals}, weights)


def rollout_advantages(
    values: Mapping[str, Sequence[float]], weights: Mapping[str, float], eps: float = ADVANTAGE_EPS
) -> tuple[list[float], dict[str, list[float]]]:
    """GRPO advantages of one group's rollouts and each weighted component's exact term of them.

    ``values`` maps every component to one value per rollout (same length, finite). The terms of a
    rollout add up to its advantage.
    """
    lengths = {len(vals) for vals in values.values()}
    if len(lengths) != 1:
        raise ValueError(f"every component needs one value per rollout; got lengths {sorted(lengths)}")
    (n,) = lengths
    if n == 0:
        return [], {name: [] for name in values}
    totals = [sum(weights.get(name, 1.0) * values[name][i] for name in values) for i in range(n)]
    _, std_r = _mean_std(totals)
    scale = 1.0 / (std_r + eps)
    terms = {}
    for name, vals in values.items():
        mean, _ = _mean_std(vals)
        weight = weights.get(name, 1.0)
        terms[name] = [weight * (v - mean) * scale for v in vals]
    advantages = [sum(terms[name][i] for name in values) for i in range(n)]
    return advantages, terms
