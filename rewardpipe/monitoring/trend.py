"""Early warning: is a component's zero-variance share rising steadily towards the dead threshold?

Before a component dies, its within-group std usually decays over steps, so the share of groups with zero
variance climbs. Each checked step leaves a point (step, zero-variance share, eligible groups) in the monitor
state (so the Lambda that sees one step at a time fits the same points). The rise is fitted with every group
as one observation: a least-squares line of the groups' zero-variance indicator on their step, i.e. the
shares weighted by their groups, and its slope is tested against the binomial noise of those indicators (the
Cochran-Armitage test for a trend in proportions). A share of few groups is a noisy proportion, so a short
window cannot tell a steady rise from noise; the fit is therefore tried over several windows, from
``dying_window`` points up to every stored point, and a warning needs one of them to rise fast enough, reach
``dead_fraction`` within the horizon, and stand enough standard errors above "no change" (:func:`required_z`).
The monitor (rewardpipe.monitoring.hysteresis) also needs :data:`CONFIRM_STEPS` consecutive checked steps to
find such a rise before it says ``dying``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

#: How well the points must sit on the line when the groups behind them are unknown (no noise model).
STEADY_R2 = 0.8
#: The one-sided false-warning probability of one look at the shortest window (z >= 3.09); a window k times as
#: long gets k times as much (:func:`required_z`). Tuned with benchmarks/dying.py against stationary shares.
ALPHA = 0.001
#: Consecutive checked steps that must find the rise before it is a warning: a rise found at one step only is
#: usually one noisy share at the window's end, which the next step does not confirm.
CONFIRM_STEPS = 2
#: Points kept before the shortest window (the longest window is ``dying_window`` + BASELINE_STEPS points).
BASELINE_STEPS = 20


@dataclass(frozen=True)
class Decline:
    slope: float  # rise of the zero-variance share per step
    r2: float  # of the (weighted) fit
    projected_dead_step: int  # first step at which the fitted line reaches the dead threshold
    first_step: int
    first_fraction: float
    z: float | None = None  # the slope in standard errors of binomial noise (None: groups unknown)
    points: int = 0  # the window the rise was found over
    groups: int = 0  # the groups behind those points


@dataclass(frozen=True)
class Fit:
    intercept: float
    slope: float
    r2: float
    z: float | None  # slope / its standard error under "the share does not change"; None without groups


def fit_line(points: Sequence[tuple[int, float]]) -> tuple[float, float, float] | None:
    """(intercept, slope, r^2) of the least-squares line through (step, share) points; None if degenerate."""
    fitted = fit_weighted(points, [1] * len(points), tested=False)
    return None if fitted is None else (fitted.intercept, fitted.slope, fitted.r2)


def fit_weighted(points: Sequence[tuple[int, float]], weights: Sequence[int], *, tested: bool = True) -> Fit | None:
    """The least-squares line of the zero-variance indicator of every group on its step: the shares weighted
    by their groups. ``z``: the slope over its standard error when every group is zero-variance with one
    probability p, sqrt(p(1-p) / Sxx) with Sxx = sum of w (x - mean x)^2, p estimated as (zero groups + 1) /
    (groups + 2) so a window of few groups is no certainty. None if degenerate (fewer than 2 steps)."""
    total = sum(weights)
    if len(points) < 2 or total <= 0:
        return None
    mean_x = sum(w * x for (x, _), w in zip(points, weights, strict=True)) / total
    mean_y = sum(w * y for (_, y), w in zip(points, weights, strict=True)) / total
    sxx = sum(w * (x - mean_x) ** 2 for (x, _), w in zip(points, weights, strict=True))
    if sxx == 0:
        return None
    syy = sum(w * (y - mean_y) ** 2 for (_, y), w in zip(points, weights, strict=True))
    sxy = sum(w * (x - mean_x) * (y - mean_y) for (x, y), w in zip(points, weights, strict=True))
    slope = sxy / sxx
    r2 = (sxy * sxy) / (sxx * syy) if syy > 0 else 0.0
    z = None
    if tested:
        p = (mean_y * total + 1) / (total + 2)
        z = slope / math.sqrt(p * (1 - p) / sxx)
    return Fit(mean_y - slope * mean_x, slope, r2, z)


def required_z(length: int, window: int) -> float:
    """The z a fit over ``length`` points needs: the one-sided tail ALPHA * length / window. A window is looked at
    again every step, but a long one changes little from one step to the next, so over a run it makes fewer
    independent looks than a short one (about one per ``length`` steps): each window length gets about the
    same share of false warnings per run."""
    return NormalDist().inv_cdf(1 - min(0.5, ALPHA * length / window))


def windows(count: int, window: int) -> list[int]:
    """The window lengths tried over ``count`` points: ``window``, doubled while shorter than ``count``, and
    ``count`` itself."""
    if count < window:
        return []
    lengths = [window]
    while lengths[-1] * 2 < count:
        lengths.append(lengths[-1] * 2)
    if lengths[-1] < count:
        lengths.append(count)
    return lengths


def detect_decline(
    points: Sequence[tuple[int, float]],
    window: int,
    dead_fraction: float,
    min_slope: float,
    horizon: int,
    groups: int | None = None,
    weights: Sequence[int | None] | None = None,
) -> Decline | None:
    """A steady rise, over the last ``window`` points or a longer window, that reaches ``dead_fraction`` within
    ``horizon`` steps; the shortest window that shows one.

    ``points`` are (step, zero-variance share), sorted by step; the last one is the step being judged.
    ``weights``: the eligible groups behind each point (None for a point stored before they were kept: it
    counts ``groups``, the step's); ``groups`` alone weights every point the same. With groups the slope must
    be :func:`required_z` standard errors above 0 (:func:`fit_weighted`); without any, only the fit decides
    (r^2 >= :data:`STEADY_R2`), over the last ``window`` points.
    """
    if groups is None and weights is None:
        return _decline(list(points[-window:]), None, window, dead_fraction, min_slope, horizon)
    known = [w if w is not None else groups for w in (weights or [None] * len(points))]
    filled = [w if w is not None else 1 for w in known]
    for length in windows(len(points), window):
        found = _decline(list(points[-length:]), filled[-length:], window, dead_fraction, min_slope, horizon)
        if found is not None:
            return found
    return None


def _decline(
    recent: list[tuple[int, float]],
    weights: list[int] | None,
    window: int,
    dead_fraction: float,
    min_slope: float,
    horizon: int,
) -> Decline | None:
    if len(recent) < 2:
        return None
    fitted = fit_weighted(recent, weights or [1] * len(recent), tested=weights is not None)
    if fitted is None or fitted.slope < min_slope:
        return None
    if fitted.z is None and fitted.r2 < STEADY_R2:
        return None
    if fitted.z is not None and fitted.z < required_z(len(recent), window):
        return None
    last_step = recent[-1][0]
    projected = max(last_step + 1, math.ceil((dead_fraction - fitted.intercept) / fitted.slope - 1e-9))
    if projected - last_step > horizon:
        return None
    return Decline(
        slope=fitted.slope,
        r2=fitted.r2,
        projected_dead_step=projected,
        first_step=recent[0][0],
        first_fraction=recent[0][1],
        z=fitted.z,
        points=len(recent),
        groups=sum(weights) if weights is not None else 0,
    )


def trend_reversed(points: Sequence[tuple[int, float]], window: int) -> bool:
    """The share is no longer rising over the last ``window`` points (ends a dying warning)."""
    fitted = fit_line(list(points[-window:]))
    return fitted is None or fitted[1] <= 0.0


#: The least fall of the fitted within-group std over its window, in decades (a halving), for a decay warning: a
#: component whose values sit just above the zero-variance bound would otherwise be "decaying" on its noise.
MIN_STD_FALL_DECADES = 0.3


@dataclass(frozen=True)
class StdDecay:
    """A within-group std falling steadily (a straight line in log10) towards the zero-variance bound."""

    factor: float  # the fitted std's ratio per step (< 1)
    r2: float  # of the line through log10(std)
    projected_dead_step: int  # first step at which the line reaches the bound
    first_step: int
    first_std: float
    points: int


def detect_std_decay(points: Sequence[tuple[int, float]], window: int, bound: float, horizon: int) -> StdDecay | None:
    """A steady geometric decay of a component's mean within-group std over its last ``window`` points that reaches
    ``bound`` (the std that counts as zero variance) within ``horizon`` steps.

    The zero-variance share of a continuous component (a judge's score, a length penalty) stays at 0 while its
    within-group std shrinks from 0.1 to 1e-5, and then jumps to 100 % in a step or two: the share's trend cannot
    warn of it, the std's can. A point whose std is 0 (every group constant) ends such a decay: it is not fitted."""
    recent = list(points[-window:])
    if len(recent) < window or bound <= 0 or any(not std > 0 for _, std in recent):
        return None
    fitted = fit_line([(step, math.log10(std)) for step, std in recent])
    if fitted is None:
        return None
    intercept, slope, r2 = fitted
    span = recent[-1][0] - recent[0][0]
    if slope >= 0 or r2 < STEADY_R2 or -slope * span < MIN_STD_FALL_DECADES:
        return None
    last_step = recent[-1][0]
    projected = max(last_step + 1, math.ceil((math.log10(bound) - intercept) / slope - 1e-9))
    if projected - last_step > horizon:
        return None
    return StdDecay(
        factor=10**slope,
        r2=r2,
        projected_dead_step=projected,
        first_step=recent[0][0],
        first_std=recent[0][1],
        points=len(recent),
    )
