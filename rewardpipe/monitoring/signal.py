"""Component correlation inside groups, vectorised over :class:`~rewardpipe.monitoring.columns.Grouped` rows.

Each value minus its group's mean, pooled over all groups: two components correlated at ~1 inside groups
move together in every group, so one of them adds nothing to the advantage (a batch-wide correlation would
mix in differences between prompts, which GRPO ignores). Each component's share of the advantage is the
monitor's (:mod:`rewardpipe.monitoring.advantage`).
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
