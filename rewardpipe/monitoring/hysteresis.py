"""Hysteresis: raise an alarm once per onset, clear it only on a real recovery.

* A dead-component alarm is raised after ``raise_after`` consecutive ``dead`` steps; while it is open,
  dead steps do not raise it again; it clears (a ``recovered`` alarm) only when the zero-variance share
  drops below ``recover_fraction``; a share between the two thresholds keeps the current state, and
  ``insufficient_data`` neither raises nor clears. A component no longer judged (now an idle penalty, ``info``;
  absent from a scored step's records; ignored) has its streaks ended and an open alarm closed by a ``recovered``
  alarm whose cause says it was no recovery (:func:`stop_judging`).
* A ``dying`` warning (:mod:`rewardpipe.monitoring.trend`) is raised once per decline: it is not raised
  again until the rise stops (the fitted slope is no longer positive) or the dead alarm takes over.
* The error-rate alarm follows the same logic on the share of records with status ``error``, raised
  after ``error_raise_after`` bad steps; the error streak (consecutive bad checked steps, whatever the
  alarm's state) is kept beside it for the ErrorStreak metric.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rewardpipe.monitoring.alarms import ERRORS_TARGET, Alarm
from rewardpipe.monitoring.messages import label, pct
from rewardpipe.monitoring.state import FIRED_WINDOW, MonitorState, TargetState
from rewardpipe.monitoring.thresholds import Thresholds
from rewardpipe.monitoring.trend import (
    BASELINE_STEPS,
    CONFIRM_STEPS,
    Decline,
    StdDecay,
    detect_decline,
    detect_std_decay,
    fit_line,
    trend_reversed,
)
from rewardpipe.monitoring.verdicts import ComponentStats, RecentFired, StepReport


def alarm_figures(stats: ComponentStats, th: Thresholds) -> dict[str, Any]:
    return {
        "zero_variance_group_fraction": stats.zero_variance_group_fraction,
        "eligible_groups": stats.eligible_groups,
        "zero_variance_groups": stats.zero_variance_groups,
        "mean": stats.mean,
        "std": stats.std,
        "within_group_std_mean": stats.within_group_std_mean,
        "constant_value": stats.constant_value,
        "dead_fraction": th.dead_fraction,
        "recover_fraction": th.recover_fraction,
    }


@dataclass(frozen=True)
class Transition:
    """What one step did to a target's alarm: ``raised`` it, or ``recovered`` it (open since ``since``)."""

    kind: str  # "raised" | "recovered"
    since: int | None = None


def advance(
    target: TargetState, step: int, *, bad: bool, recovered: bool, raise_after: int, early: bool = False
) -> Transition | None:
    """The one raise/recover state machine every alarm follows.

    Closed: a ``bad`` step extends the streak and opens the alarm once the streak reaches ``raise_after``;
    any other step resets the streak. Open: only a ``recovered`` step closes it (in between, nothing
    changes: hysteresis, so an alarm does not flap at the threshold).

    An ``early`` step (one from before the open alarm's or the streak's evidence, checked late: :func:`predates`)
    tells nothing of now: it neither closes the alarm nor resets the streak. A healthy step 1 arriving after an
    alarm raised at step 3 said "recovered at step 1 after being dead since step 3", and the next dead step raised
    the same onset again.
    """
    if early and not bad:
        return None
    if target.active:
        if not recovered:
            return None
        since = target.since
        target.active, target.streak, target.since = False, 0, None
        return Transition("recovered", since)
    if not bad:
        target.streak = 0
        return None
    target.streak += 1
    if target.streak < raise_after:
        return None
    target.active, target.since = True, step
    return Transition("raised")


def predates(target: TargetState, step: int) -> bool:
    """Whether ``step`` comes before the first step of the target's open alarm or of its current streak: a step
    whose records came late (or that a resumed run re-sent) from before the onset. It may still raise (a late step
    alarms), but it says nothing of the later steps that opened the alarm. A late step after the onset is judged
    as ever (a healthy one recovers)."""
    if not (target.active or target.streak):
        return False
    start = target.streak_since if target.streak_since is not None else target.since
    return start is not None and step < start


def _record_trend(target: TargetState, step: int, fraction: float, groups: int, window: int) -> None:
    """Add this step's point and its groups; a point stored without its groups (an older state) takes this
    step's, as the fit assumed then."""
    stored = target.trend_groups[max(0, len(target.trend_groups) - len(target.trend)) :]
    known = [groups] * (len(target.trend) - len(stored)) + stored
    points = {s: (share, g) for (s, share), g in zip(target.trend, known, strict=True)}
    points[step] = (fraction, groups)
    kept = sorted(points.items())[-window:]
    target.trend = [(s, share) for s, (share, _) in kept]
    target.trend_groups = [g for _, (_, g) in kept]


def recent_fired(state: MonitorState, step: int) -> dict[str, RecentFired]:
    """Each penalty's evidence over its recent verdicts of the steps before ``step``, by component name, for
    :func:`rewardpipe.monitoring.verdicts.step_report`. Not ``step``'s own (a step judged again is not its own
    evidence), nor a later step's: a step replayed after later ones were judged was reported with a verdict it was
    never judged with (``dead`` where it had been ``info``), and a step's verdict depends on what came before it."""
    recent = {}
    for key, target in state.targets.items():
        points = [(whole, varying) for s, whole, varying in target.fired if s < step]
        if key.startswith("component:") and points:
            whole, varying = (sum(counts) for counts in zip(*points, strict=True))
            recent[key.removeprefix("component:")] = RecentFired(whole, varying, len(points))
    return recent


def _record_fired(target: TargetState, step: int, fired: tuple[int, int]) -> None:
    """Keep this verdict's fired groups (a pooled verdict's at its last step), the newest :data:`FIRED_WINDOW`."""
    points = {s: (whole, varying) for s, whole, varying in target.fired}
    points[step] = fired
    target.fired = [(s, whole, varying) for s, (whole, varying) in sorted(points.items())[-FIRED_WINDOW:]]


def track_component(
    key: str, stats: ComponentStats, step: int, run_id: str | None, state: MonitorState, th: Thresholds
) -> Alarm | None:
    """Advance one target's memory with this step's verdict; return the alarm it raises, if any.

    Also sets what only the history can tell: ``dying`` (with slope and projected step of death), the
    ``dead_streak`` and ``alarm_active``.
    """
    target = state.target(key)
    if stats.verdict == "insufficient_data":
        stats.alarm_active = target.active
        stats.dead_streak = target.dead_streak
        return None
    frac = stats.zero_variance_group_fraction or 0.0
    early = predates(target, step)
    # the shortest window and the longer ones tried when it is too noisy (trend.windows)
    _record_trend(target, step, frac, stats.eligible_groups, th.dying_window + BASELINE_STEPS)
    if stats.within_group_std_mean is not None and math.isfinite(stats.within_group_std_mean):
        stds = dict(target.std_trend)
        stds[step] = stats.within_group_std_mean
        target.std_trend = sorted(stds.items())[-th.dying_window :]
    if stats.fired_groups is not None:
        _record_fired(target, step, stats.fired_groups)
    if stats.verdict == "dead":
        target.dead_streak += 1
        stats.dead_streak = target.dead_streak
    else:
        stats.dead_streak = 0  # (a step from before the onset leaves the streak of the later steps as it is)
        target.dead_streak = target.dead_streak if early else 0
    if early and stats.verdict != "dead":
        stats.alarm_active = target.active  # nothing it says is news: the later steps judged the component
        return None
    if (
        stats.verdict == "info"
        and target.active
        and target.alarm_cause == "constant_within_groups"
        and stats.zero_variance_group_fraction == 1.0
    ):
        # A component set per prompt (a penalty firing on whole tasks' groups) at a step where no prompt set it off:
        # still no signal inside any group, which is no recovery and no reason to stop judging it; closing here
        # reopened the same onset at the next step where a task fired it. A step where it varies inside a group is
        # another matter: it fired per rollout there (an idle penalty's step), and the alarm is closed as for one.
        stats.alarm_active = True
        stats.message = (
            f"{stats.message} (its dead alarm, open since step {target.since}, stays open: it was set per prompt, "
            f"and a step where no prompt set it off is no recovery)"
        )
        return None
    if stats.verdict == "info" and target.active:
        # an idle penalty is not judged dead (alarm_idle_penalties off): its open alarm is closed, and said so
        alarm = stop_judging(target, stats.name, step, run_id, IDLE_PENALTY)
        stats.alarm_active = target.active
        return alarm
    alarm = None
    if not target.active and (stats.verdict != "dead" or target.streak == 0):
        # where the streak's evidence starts: a pooled verdict covers every step of its pool
        target.streak_since = (stats.pooled_steps or [step])[0] if stats.verdict == "dead" else None
    change = advance(
        target, step, bad=stats.verdict == "dead", recovered=frac < th.recover_fraction, raise_after=th.raise_after
    )
    if change is not None and change.kind == "recovered":
        target.alarm_cause = None
        alarm = Alarm(
            kind="recovered",
            component=stats.name,
            step=step,
            cause="recovered",
            recovered_from="dead_component",
            run_id=run_id,
            message=(
                f"{label(stats.name)} recovered at step {step}: zero-variance groups down to {pct(frac)} "
                f"(below {pct(th.recover_fraction)}) after being dead since step {change.since}"
            ),
            figures=alarm_figures(stats, th),
        )
    elif change is not None:
        target.alarm_cause = stats.cause
        message = stats.message or ""
        figures = {**alarm_figures(stats, th), "consecutive_dead_steps": target.streak}
        if stats.pooled_steps and target.streak_since is not None:
            # pooled verdicts: the streak counts verdicts (what raise_after counts), each over several steps
            figures["consecutive_dead_verdicts"] = target.streak
            figures["dead_since_step"] = target.streak_since
            if th.raise_after > 1:
                message += (
                    f" (dead in {target.streak} consecutive verdicts over steps {target.streak_since}\u2013{step}, "
                    f"each pool of small steps counting once)"
                )
        elif th.raise_after > 1:
            message += f" (dead for {target.streak} consecutive steps)"
        if target.dying_since is not None:
            message += f" (warned as dying since step {target.dying_since})"
            figures["dying_since"] = target.dying_since
        alarm = Alarm(
            kind="dead_component",
            component=stats.name,
            step=step,
            cause=stats.cause or "dead",
            run_id=run_id,
            message=message,
            figures=figures,
        )
    if target.active or stats.verdict == "dead":
        target.dying_active, target.dying_since, target.dying_cause = False, None, None  # the dead alarm took over
    elif stats.verdict == "ok" and alarm is None:
        alarm = _track_decline(target, stats, step, run_id, th)
    stats.alarm_active = target.active
    return alarm


#: ``cause`` of the ``recovered`` alarm that closes a dead alarm whose target is no longer judged (no recovery):
#: the component is now an idle penalty (``info``), is absent from a scored step's records (renamed, removed), or
#: is ignored.
IDLE_PENALTY = "no_longer_judged_idle_penalty"
ABSENT = "no_longer_judged_absent"
IGNORED = "no_longer_judged_ignored"
_NOT_JUDGED = {
    IDLE_PENALTY: (
        "it is now an idle penalty (verdict info: a penalty that never fires), which is not alarmed as dead unless "
        "alarm_idle_penalties is set"
    ),
    ABSENT: (
        "it is absent from every scored record of this step (renamed or removed from the reward?); should it come "
        "back dead, it is alarmed again"
    ),
    IGNORED: "it is ignored by the alarm policy (ignore)",
}


def stop_judging(target: TargetState, name: str, step: int, run_id: str | None, cause: str) -> Alarm | None:
    """The target is no longer judged at ``step`` (``cause``: one of :data:`_NOT_JUDGED`): its streaks end (the
    DeadStreak metric stops counting it) and an open dead alarm is closed by a ``recovered`` alarm whose cause
    says it was not a recovery. Returns that alarm, or None when no alarm was open."""
    since, was_active = target.since, target.active
    target.active, target.streak, target.since, target.streak_since = False, 0, None, None
    target.dead_streak, target.alarm_cause = 0, None
    target.dying_active, target.dying_since, target.dying_seen, target.dying_cause = False, None, 0, None
    if not was_active:
        return None
    return Alarm(
        kind="recovered",
        component=name,
        step=step,
        cause=cause,
        recovered_from="dead_component",
        run_id=run_id,
        message=(
            f"{label(name)}'s dead alarm (open since step {since}) is closed at step {step} without a recovery: "
            f"{_NOT_JUDGED[cause]}"
        ),
        figures={"dead_since_step": since, "closed_because": cause},
    )


def since_last_dead(target: TargetState, dead_fraction: float) -> tuple[list[tuple[int, float]], list[int]]:
    """The trend's points (and their groups) after its last dead one: a component coming back from a dead stretch
    is no component rising towards death, and a line fitted through the stretch and the recovery after it rises
    (round twenty-seven: ``dying`` at a share of 0 % four steps after a recovery). The state keeps every point."""
    points = list(target.trend)
    start = next((i + 1 for i in range(len(points) - 1, -1, -1) if points[i][1] >= dead_fraction), 0)
    kept = len(points) - start
    # groups align with the points from the end (points stored before their groups were kept have none)
    return points[start:], target.trend_groups[max(0, len(target.trend_groups) - kept) :] if kept else []


def _track_decline(
    target: TargetState, stats: ComponentStats, step: int, run_id: str | None, th: Thresholds
) -> Alarm | None:
    """Mark a steady rise of the zero-variance share as ``dying``; warn once per decline."""
    points, weights = since_last_dead(target, th.dead_fraction)
    decline = detect_decline(
        points,
        th.dying_window,
        th.dead_fraction,
        th.dying_min_slope,
        th.dying_horizon,
        groups=stats.eligible_groups or None,
        weights=weights or None,
    )
    if decline is None:
        return _track_std_decay(target, stats, step, run_id, th)
    target.dying_seen += 1
    if target.dying_seen < CONFIRM_STEPS and not target.dying_active:
        return None  # one step's rise may be a noisy share at its end: the next step confirms it or not
    target.dying_cause = None
    frac = stats.zero_variance_group_fraction or 0.0
    stats.verdict, stats.cause = "dying", "zero_variance_rising"
    stats.zero_fraction_slope = decline.slope
    stats.projected_dead_step = decline.projected_dead_step
    stats.zero_fraction_slope_z = decline.z
    stats.message = (
        f"{label(stats.name)} is dying: zero-variance groups rose from {pct(decline.first_fraction)} at step "
        f"{decline.first_step} to {pct(frac)} at step {step} (+{100 * decline.slope:.1f} points per step, "
        f"{_significance(decline)}); at this rate it reaches the dead threshold {pct(th.dead_fraction)} around step "
        f"{decline.projected_dead_step}. Within-group std is decaying: check what the policy converges to"
    )
    figures = {
        "zero_fraction_slope": decline.slope,
        "fit_r2": decline.r2,
        "slope_z": decline.z,
        "projected_dead_step": decline.projected_dead_step,
        "window": decline.points,
        "window_groups": decline.groups,
    }
    return _warn_dying(target, stats, step, run_id, th, figures)


def _warn_dying(
    target: TargetState, stats: ComponentStats, step: int, run_id: str | None, th: Thresholds, figures: dict[str, Any]
) -> Alarm | None:
    """The ``dying_component`` alarm of a decline found at ``step``, once per decline (None while one is open)."""
    if target.dying_active:
        return None
    target.dying_active, target.dying_since = True, step
    target.dying_cause = stats.cause if stats.cause == "within_group_std_decaying" else None
    return Alarm(
        kind="dying_component",
        component=stats.name,
        step=step,
        cause=stats.cause or "zero_variance_rising",
        run_id=run_id,
        message=stats.message or "",
        figures={**alarm_figures(stats, th), **figures},
    )


def _track_std_decay(
    target: TargetState, stats: ComponentStats, step: int, run_id: str | None, th: Thresholds
) -> Alarm | None:
    """No rise of the zero-variance share: a steady geometric decay of the within-group std towards the zero-variance
    bound is the other way a component dies (a continuous one: its share stays 0 until the step its spread falls under
    epsilon, and the share's trend warned one step before the dead alarm, five decades of decay too late). Warned
    once per decay, as ``dying`` with cause ``within_group_std_decaying``."""
    magnitude = max(abs(stats.min or 0.0), abs(stats.max or 0.0))
    bound = th.epsilon * max(1.0, magnitude)  # (the bound at weight 1: thresholds.zero_variance_bound)
    decay = detect_std_decay(target.std_trend, th.dying_window, bound, th.dying_horizon)
    target.dying_seen = 0 if decay is None else target.dying_seen + 1
    if decay is None:
        if target.dying_active and _warning_over(target, th):
            target.dying_active, target.dying_since, target.dying_cause = False, None, None
            # the trend restarts here: a decline and its reversal are no baseline
            target.trend, target.trend_groups = target.trend[-1:], target.trend_groups[-1:]
        return None
    if target.dying_seen < CONFIRM_STEPS and not target.dying_active:
        return None  # as for the share: the next step confirms it or not
    stats.verdict, stats.cause = "dying", "within_group_std_decaying"
    stats.projected_dead_step = decay.projected_dead_step
    stats.message = _decay_message(stats.name, decay, stats.within_group_std_mean or 0.0, step, bound)
    figures = {
        "std_factor_per_step": decay.factor,
        "fit_r2": decay.r2,
        "projected_dead_step": decay.projected_dead_step,
        "window": decay.points,
        "zero_variance_std_bound": bound,
    }
    return _warn_dying(target, stats, step, run_id, th, figures)


def _warning_over(target: TargetState, th: Thresholds) -> bool:
    """Whether the open dying warning's decline has stopped: the share no longer rises, or for a std decay, the
    std no longer falls."""
    if target.dying_cause == "within_group_std_decaying":
        stds = [(s, math.log10(v)) for s, v in target.std_trend[-th.dying_window :] if v > 0]
        fitted = fit_line(stds) if len(stds) >= 2 else None
        return fitted is None or fitted[1] >= 0.0
    return trend_reversed(target.trend, th.dying_window)


def _decay_message(name: str, decay: StdDecay, std: float, step: int, bound: float) -> str:
    return (
        f"{label(name)} is dying: its mean within-group std fell from {decay.first_std:.3g} at step "
        f"{decay.first_step} to {std:.3g} at step {step}, a steady x{decay.factor:.2f} per step (r^2 {decay.r2:.2f} "
        f"in log scale, over {decay.points} checked steps), while no group is constant yet; at this rate it falls "
        f"under the zero-variance bound (about {bound:.3g}) around step {decay.projected_dead_step}, and then every "
        f"group at once. Check what the policy converges to"
    )


def _significance(decline: Decline) -> str:
    if decline.z is None:
        return f"r^2 {decline.r2:.2f}"
    return f"{decline.z:.1f} standard errors above no change, fitted over {decline.points} checked steps"


# Whose failure each kind of error record is, for the error-rate alarm's advice: "check the executor/sandbox"
# for a user's component that returned a string sent them to the one part they never touched.
_REWARD_ERRORS = frozenset(
    {
        "component_raised",
        "component_unavailable",
        "component_timeout",
        "component_out_of_range",
        "aggregate_out_of_range",
        "non_finite_aggregate",
        "non_finite_score",
        "bad_reference",
        "executed_code_failed",
    }
)
_ENVIRONMENT_ERRORS = frozenset({"simulator_error", "prompt_render_error", "unknown_task"})
_POLICY_ERRORS = frozenset({"policy_error"})


def error_advice(error_kinds: dict[str, int]) -> str:
    """Where to look, by the step's most common kind of error record (the reward's components, the
    environment's hooks, the policy (its endpoint, or a scripted run's scenarios), else the executor/sandbox)."""
    if not error_kinds:
        return "check the executor/sandbox"
    kind = max(error_kinds.items(), key=lambda item: item[1])[0]
    if kind in _REWARD_ERRORS:
        return "check the reward's components (each example names the component and what it did)"
    if kind in _ENVIRONMENT_ERRORS:
        return "check the environment's hooks (each example names the hook and its exception)"
    if kind in _POLICY_ERRORS:
        return (
            "check the policy: its endpoint, or with --policy scripted the environment's scenarios "
            "(the examples give its error)"
        )
    return "check the executor/sandbox"


def track_errors(report: StepReport, run_id: str | None, state: MonitorState, th: Thresholds) -> Alarm | None:
    target = state.target(ERRORS_TARGET)
    rate = report.error_rate
    figures = {
        "error_rate": rate,
        "errors": report.errors,
        "records": report.records,
        "error_kinds": dict(report.error_kinds),
        "threshold": th.error_rate,
        "recover_rate": th.error_recover_rate,
    }
    alarm = None
    bad = rate >= th.error_rate
    early = predates(target, report.step)
    target.error_streak = target.error_streak + 1 if bad else (target.error_streak if early else 0)
    report.error_streak = target.error_streak if bad else 0
    change = advance(
        target,
        report.step,
        bad=bad,
        recovered=rate < th.error_recover_rate,
        raise_after=th.errors_raise_after,
        early=early,
    )
    if change is not None and change.kind == "recovered":
        target.alarm_cause = None
        alarm = Alarm(
            kind="recovered",
            component=ERRORS_TARGET,
            step=report.step,
            cause="recovered",
            recovered_from="error_rate",
            run_id=run_id,
            message=(
                f"error rate recovered at step {report.step}: {pct(rate)} of records "
                f"(below {pct(th.error_recover_rate)}) after being high since step {change.since}"
            ),
            figures=figures,
        )
    elif change is not None:
        # a record's error kind is its writer's text: a few kinds, each cut, keep the message a sentence
        listed = list(report.error_kinds.items())
        kinds = ", ".join(f"{k[:80]}{'...' if len(k) > 80 else ''} {v}" for k, v in listed[:5]) + (
            f", and {len(listed) - 5} more kinds" if len(listed) > 5 else ""
        )
        alarm = Alarm(
            kind="error_rate",
            component=ERRORS_TARGET,
            step=report.step,
            cause="error_rate",
            run_id=run_id,
            message=(
                f"{pct(rate)} of records at step {report.step} could not be scored ({report.errors}/"
                f"{report.records}: {kinds}); they are excluded from the statistics, not counted as 0, "
                f"but groups that lose rollouts lose signal; {error_advice(report.error_kinds)}"
            ),
            figures=figures,
        )
    report.error_alarm_active = target.active
    return alarm
