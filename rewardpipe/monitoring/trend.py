"""Early warning: is a component's zero-variance share rising steadily towards the dead threshold?

Before a component dies, its within-group std usually decays over steps, so the share of groups with zero
variance climbs. A least-squares line through the last few checked steps' shares (kept in the monitor
state, so the Lambda that sees one step at a time computes the same fit) tells how fast, how steadily
(r^2), and at which step the line reaches ``dead_fraction``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: How well the points must sit on the line for the rise to count as steady rather than noise.
STEADY_R2 = 0.8


@dataclass(frozen=True)
class Decline:
    slope: float  # rise of the zero-variance share per step
    r2: float
    projected_dead_step: int  # first step at which the fitted line reaches the dead threshold
    first_step: int
    first_fraction: float


def fit_line(points: Sequence[tuple[int, float]]) -> tuple[float, float, float] | None:
    """(intercept, slope, r^2) of the least-squares line through (step, share) points; None if degenerate."""
    n = len(points)
    if n < 2:
        return None
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    syy = sum((y - mean_y) ** 2 for _, y in points)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
    if sxx == 0:
        return None
    slope = sxy / sxx
    r2 = (sxy * sxy) / (sxx * syy) if syy > 0 else 0.0
    return mean_y - slope * mean_x, slope, r2


def detect_decline(
    points: Sequence[tuple[int, float]], window: int, dead_fraction: float, min_slope: float, horizon: int
) -> Decline | None:
    """A steady rise over the last ``window`` points that reaches ``dead_fraction`` within ``horizon`` steps.

    ``points`` are (step, zero-variance share), sorted by step; the last one is the step being judged.
    """
    recent = list(points[-window:])
    if len(recent) < window:
        return None
    fitted = fit_line(recent)
    if fitted is None:
        return None
    intercept, slope, r2 = fitted
    if slope < min_slope or r2 < STEADY_R2:
        return None
    last_step = recent[-1][0]
    projected = max(last_step + 1, math.ceil((dead_fraction - intercept) / slope - 1e-9))
    if projected - last_step > horizon:
        return None
    return Decline(
        slope=slope, r2=r2, projected_dead_step=projected, first_step=recent[0][0], first_fraction=recent[0][1]
    )


def trend_reversed(points: Sequence[tuple[int, float]], window: int) -> bool:
    """The share is no longer rising over the last ``window`` points (ends a dying warning)."""
    fitted = fit_line(list(points[-window:]))
    return fitted is None or fitted[1] <= 0.0
