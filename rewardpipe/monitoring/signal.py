"""Where the GRPO signal comes from: component correlation inside groups and each component's share of the
advantage. Vectorised over :class:`~rewardpipe.monitoring.columns.Grouped` rows.

**Within-group correlation.** Each value minus its group's mean, pooled over all groups: two components
correlated at ~1 inside groups move together in every group, so one of them adds nothing to the advantage
(a batch-wide correlation would mix in differences between prompts, which GRPO ignores).

**Advantage share.** GRPO's advantage of rollout *i* in group *g* is ``A_i = (R_i - mean_g R) / std_g R``
with ``R = Σ_c w_c x_c``. It splits exactly into per-component parts ``a_ci = w_c (x_ci - mean_g x_c) /
std_g R``. A component's share in a group is ``Σ_i a_ci A_i / Σ_i A_i²`` — its covariance with the total
over the total's variance — so the shares of a group add up to 1; a negative share means the component
pulls against the total. Groups whose total is constant have no advantage and are left out. Shares are
averaged over a step's groups (and over the run's groups).
"""

from __future__ import annotations

import numpy as np

from rewardpipe.monitoring.columns import Grouped

EPSILON = 1e-6


def _centred(grouped: Grouped) -> np.ndarray:
    """Each value minus its group's mean; 0 where the value is missing."""
    centred = grouped.x - grouped.mean[grouped.group_of_row]
    return np.where(np.isnan(centred), 0.0, centred)


def within_group_correlation(grouped: Grouped) -> list[list[float | None]]:
    """C × C pooled within-group Pearson correlation; None where a component never varies in a group."""
    if grouped.x.shape[0] == 0:
        return [[None] * len(grouped.names) for _ in grouped.names]
    z = _centred(grouped)
    cross = z.T @ z
    scale = np.sqrt(np.diag(cross))
    out: list[list[float | None]] = []
    for a in range(len(grouped.names)):
        row: list[float | None] = []
        for b in range(len(grouped.names)):
            denominator = scale[a] * scale[b]
            row.append(None if denominator <= EPSILON else round(float(cross[a, b] / denominator), 4))
        out.append(row)
    return out


def advantage_shares(grouped: Grouped, weights: dict[str, float], group_steps: np.ndarray
                     ) -> tuple[dict[str, float | None], dict[int, dict[str, float | None]], int]:
    """(run-wide mean share per component, per-step mean shares, groups with an advantage)."""
    names = grouped.names
    w = np.array([weights.get(name, 0.0) for name in names], dtype=np.float64)
    groups = len(grouped.group_codes)
    if groups == 0 or not names:
        return {n: None for n in names}, {}, 0
    complete = ~np.isnan(grouped.x).any(axis=1)  # rows with every component (error-free scored rows)
    parts = _centred(grouped) * w  # w_c (x_ci - mean_g x_c), before dividing by std_g R
    parts[~complete] = 0.0
    total = parts.sum(axis=1)  # R_i - mean_g R (over complete rows)
    n = np.bincount(grouped.group_of_row, weights=complete.astype(np.float64), minlength=groups)
    var_r = np.bincount(grouped.group_of_row, weights=total * total, minlength=groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        var_r = var_r / n
    live = (n >= 2) & (np.sqrt(np.nan_to_num(var_r)) > EPSILON)
    # Σ_i a_ci A_i / Σ_i A_i² = Σ_i parts_ci total_i / Σ_i total_i² (the std_g R factors cancel).
    numerator = np.stack([np.bincount(grouped.group_of_row, weights=parts[:, c] * total, minlength=groups)
                          for c in range(len(names))], axis=1)
    denominator = np.bincount(grouped.group_of_row, weights=total * total, minlength=groups)
    share = np.zeros_like(numerator)
    share[live] = numerator[live] / denominator[live, None]
    live_count = int(live.sum())
    run_mean = share[live].mean(axis=0) if live_count else np.full(len(names), np.nan)
    run_shares = {name: (None if np.isnan(v) else round(float(v), 4)) for name, v in zip(names, run_mean)}
    steps = group_steps[grouped.group_codes]
    per_step: dict[int, dict[str, float | None]] = {}
    for step in np.unique(steps):
        mask = live & (steps == step)
        if not mask.any():
            per_step[int(step)] = {name: None for name in names}
            continue
        means = share[mask].mean(axis=0)
        per_step[int(step)] = {name: round(float(v), 4) for name, v in zip(names, means)}
    return run_shares, per_step, live_count
