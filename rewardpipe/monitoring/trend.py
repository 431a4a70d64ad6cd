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
#: A share of G groups is binomial noise: on a stationary component the 5-point fit alone finds a steep, steady
#: "rise" by chance every ~100 steps (the review: 3-8 warnings per 600 healthy steps). Once at least a window of
#: earlier steps is known (the baseline: up to BASELINE_STEPS of them, restarted when a warning ends), a warning
#: also needs, given the step's number of eligible groups, the slope SLOPE_Z standard errors above 0 (one-sided
#: p ~ 0.023) and the fitted share at the last step BASELINE_Z standard errors above the baseline's share
#: (p ~ 2e-4): a real decline leaves the level it held. Without a baseline (a run's first steps, just after a
#: warning ended) only the fit decides, as before.
SLOPE_Z = 2.0
BASELINE_Z = 3.5
BASELINE_STEPS = 20


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
    points: Sequence[tuple[int, float]],
    window: int,
    dead_fraction: float,
    min_slope: float,
    horizon: int,
    groups: int | None = None,
) -> Decline | None:
    """A steady rise over the last ``window`` points that reaches ``dead_fraction`` within ``horizon`` steps.

    ``points`` are (step, zero-variance share), sorted by step; the last one is the step being judged, and the
    points before the last ``window`` are the baseline. ``groups``: the eligible groups behind a share (the
    step's), for the significance tests (:func:`significant_rise`), made once the baseline has ``window`` points;
    None skips them.
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
    before = list(points[:-window])
    if groups is not None and len(before) >= window and not significant_rise(recent, before, intercept, slope, groups):
        return None
    return Decline(
        slope=slope, r2=r2, projected_dead_step=projected, first_step=recent[0][0], first_fraction=recent[0][1]
    )


def trend_reversed(points: Sequence[tuple[int, float]], window: int) -> bool:
    """The share is no longer rising over the last ``window`` points (ends a dying warning)."""
    fitted = fit_line(list(points[-window:]))
    return fitted is None or fitted[1] <= 0.0


def significant_rise(
    recent: Sequence[tuple[int, float]],
    before: Sequence[tuple[int, float]],
    intercept: float,
    slope: float,
    groups: int,
) -> bool:
    """Whether the fitted rise is more than the binomial noise of shares of ``groups`` groups each.

    Under "nothing changes" every share is (zero-variance groups) / ``groups`` with one probability p, so the
    least-squares slope has variance p(1-p) / (groups * Sxx). The slope must be :data:`SLOPE_Z` of its standard
    errors above 0, with p the window's mean share. The fitted share at the last step must also be
    :data:`BASELINE_Z` standard errors above the share of ``before`` (the earlier checked steps; p estimated as
    (zero groups + 1) / (groups + 2), so an all-zero baseline is not certainty).
    """
    n = len(recent)
    mean_x = sum(x for x, _ in recent) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in recent)
    p = min(max(sum(y for _, y in recent) / n, 0.0), 1.0)
    slope_var = p * (1 - p) / (groups * sxx)
    if slope_var > 0 and slope < SLOPE_Z * math.sqrt(slope_var):
        return False
    base_groups = groups * len(before)
    base = (sum(y for _, y in before) * groups + 1) / (base_groups + 2)
    last = recent[-1][0]
    leverage = 1 / n + (last - mean_x) ** 2 / sxx  # variance of the fitted end value, in units of one share's
    spread = math.sqrt(base * (1 - base) * (leverage / groups + 1 / base_groups))
    return intercept + slope * last - base >= BASELINE_Z * spread
