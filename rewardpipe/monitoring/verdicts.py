"""Verdicts and causes: is each component (and the aggregate) still giving GRPO a signal at this step?

* ``ok``: the share of eligible groups with zero variance is below ``dead_fraction``;
* ``dead``: it reached ``dead_fraction``; the ``cause`` says how: ``constant_at_minimum``,
  ``constant_at_maximum``, ``constant_everywhere``, ``constant_within_groups`` (varies across the batch,
  constant inside groups) or, for the aggregate only, ``components_cancel``;
* ``info``: a penalty that never fired (at its maximum 0 in every group): dead in the numbers, but
  normal for a rarely triggered penalty, so it does not alarm (unless ``alarm_idle_penalties``);
* ``insufficient_data``: fewer than ``min_groups`` eligible groups (>= 2 scored values).

A component with no value at all in a step (None, NaN or inf in every scored rollout) where the rollouts make at
least ``min_groups`` eligible groups is ``dead`` too, cause ``no_values``: it gives GRPO nothing, and as
``insufficient_data`` it never alarmed (round twelve). Its sibling: a group of 2+ scored rollouts where the
component (or the aggregate) has a number in one rollout only gives GRPO no comparison either, so such a group
counts as judged and zero-variance; where those groups are most of the dead ones the cause is ``sparse_values``.
A group where it has no number at all is left out (a component only some tasks have is judged on the groups
that have it).

``dying`` (the zero-variance share rising steadily towards the dead threshold) needs the previous steps,
so :mod:`rewardpipe.monitoring.hysteresis` sets it from the state; this module judges one step alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from rewardpipe.monitoring.alarms import AGGREGATE_TARGET
from rewardpipe.monitoring.messages import dead_message, label
from rewardpipe.monitoring.statistics import AGG, StepAcc, advantage_share_means, component_figures, lone_value_mask
from rewardpipe.monitoring.thresholds import Thresholds, zero_variance_bound

Verdict = Literal["ok", "dying", "dead", "info", "insufficient_data"]


@dataclass
class ComponentStats:
    name: str
    verdict: Verdict
    cause: str | None
    message: str | None
    values: int  # scored values used
    missing: int  # None in a scored record
    non_finite: int  # NaN / inf in a scored record
    mean: float | None
    std: float | None  # batch (population) std
    min: float | None
    max: float | None
    groups: int  # groups with at least one value
    eligible_groups: int  # groups with >= 2 values
    zero_variance_groups: int
    zero_variance_group_fraction: float | None
    within_group_std_mean: float | None
    constant_value: float | None = None  # for dead verdicts with one dominant value
    alarm_active: bool = False
    #: Consecutive checked steps with verdict ``dead`` up to this one (None: not tracked, e.g. ignored
    #: components, or a replayed step).
    dead_streak: int | None = None
    #: For ``dying``: the fitted rise of the zero-variance share per step, and the step at which the fit
    #: reaches ``dead_fraction``.
    zero_fraction_slope: float | None = None
    projected_dead_step: int | None = None
    #: For ``dying``: the slope in standard errors of the binomial noise of its groups (None when unknown).
    zero_fraction_slope_z: float | None = None
    #: Mean share of the GRPO advantage this component carries, over the groups where anything varies
    #: (:mod:`rewardpipe.monitoring.advantage`); None for the aggregate and when no group has a signal.
    advantage_share: float | None = None
    #: The consecutive small steps this verdict was judged over together (rewardpipe.monitoring.pooling);
    #: None for a verdict on its own step.
    pooled_steps: list[int] | None = None
    #: Groups holding a value outside the component's declared range (``--range``, the reward's own): a
    #: scorer bug or a wrong declaration, never silent (``values_out_of_range`` in the run's warnings)
    out_of_range_groups: int = 0
    #: For a penalty with a known range: (groups where it fired on every rollout, groups where it varied) at this
    #: verdict, the evidence the state keeps across steps (``TargetState.fired``); not part of the verdict's JSON.
    fired_groups: tuple[int, int] | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("fired_groups", None)
        return data


@dataclass
class StepReport:
    step: int
    records: int
    scored: int
    errors: int
    error_rate: float
    error_kinds: dict[str, int]
    groups: int
    components: dict[str, ComponentStats]
    aggregate: ComponentStats
    error_alarm_active: bool = False
    #: Consecutive checked steps up to this one whose error rate was at or over the threshold (None: a
    #: replayed step, which does not advance it).
    error_streak: int | None = None
    replayed: bool = False
    # Records whose execution ran in the "inprocess" trust mode: a screened fallback, not a reward source.
    inprocess_records: int = 0
    #: Records whose LLM-played user was replaced by the rule-based user at least once (``llm_user_fallbacks``).
    user_fallback_records: int = 0
    #: Groups left out of every statistic because their scored records hold several tasks (named in the
    #: result's ``set_aside``), and those records (counted in ``records``, not in ``scored``).
    set_aside_groups: int = 0
    set_aside_records: int = 0
    #: Named causes seen at this step (``rewardpipe.monitoring.causes.Diagnosis``).
    diagnoses: list[Any] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "records": self.records,
            "scored": self.scored,
            "errors": self.errors,
            "error_rate": self.error_rate,
            "error_kinds": dict(self.error_kinds),
            "groups": self.groups,
            "error_alarm_active": self.error_alarm_active,
            "error_streak": self.error_streak,
            "replayed": self.replayed,
            "inprocess_records": self.inprocess_records,
            "user_fallback_records": self.user_fallback_records,
            "set_aside_groups": self.set_aside_groups,
            "set_aside_records": self.set_aside_records,
            "components": {name: stats.to_dict() for name, stats in self.components.items()},
            "aggregate": self.aggregate.to_dict(),
            "diagnoses": [diagnosis.to_dict() for diagnosis in self.diagnoses],
        }


def component_stats(
    name: str,
    acc: StepAcc,
    th: Thresholds,
    value_range: tuple[float, float] | None,
    group_sizes: dict[str, Any] | None = None,
    recent_fired: RecentFired | None = None,
) -> dict[str, Any]:
    """Figures, verdict and (for ``dead``) cause of one component at one step, as a dict. ``group_sizes``,
    if given, receives the component's per-group advantage sizes under its name. ``recent_fired``: for a penalty,
    what its recent checked steps showed (see :class:`RecentFired`), which can only make a step's few whole fired
    groups chance rather than a penalty set per prompt."""
    eps = th.epsilon
    tol = max(eps, 1e-12)
    stats, zero_values, sizes = component_figures(name, acc, eps)
    if group_sizes is not None:
        group_sizes[name] = sizes
    eligible, zero = stats["eligible_groups"], stats["zero_variance_groups"]
    table = acc.table.get(name)
    if value_range is not None and table is not None:
        with np.errstate(invalid="ignore"):  # NaN: a group without a value
            outside = (table.minimum < value_range[0] - tol) | (table.maximum > value_range[1] + tol)
        stats["out_of_range_groups"] = int(outside.sum())

    rollouts = acc.rollout_counts()
    rollout_groups = int((rollouts >= 2).sum())
    if (
        name != AGG
        and stats["values"] == 0
        and rollout_groups >= th.min_groups
        and stats["missing"] + stats["non_finite"] > 0
    ):
        # Every scored rollout has the component, and not one has a number: as dead as a constant. The groups it
        # would have been judged in are all "zero variance", so the alarm stays open while this lasts. (An
        # aggregate no record gives is not judged: a trainer's records need not carry one.)
        stats.update(
            verdict="dead",
            cause="no_values",
            eligible_groups=rollout_groups,
            zero_variance_groups=rollout_groups,
            zero_variance_group_fraction=1.0,
        )
        return stats
    # Groups of 2+ scored rollouts where the component has a number in one of them only: no comparison for GRPO
    # there, so they count with the zero-variance groups (a group where it has none at all is another task's).
    lone = lone_value_mask(acc, table)
    sparse = stats["sparse_groups"] = int(lone.sum())
    if sparse:
        low, high = int(rollouts[lone].min()), int(rollouts[lone].max())
        stats["rollouts_per_group"] = str(high) if low == high else f"{low}\u2013{high}"
        eligible, zero = eligible + sparse, zero + sparse
        stats.update(eligible_groups=eligible, zero_variance_groups=zero, zero_variance_group_fraction=zero / eligible)
    if eligible == 0 or eligible < th.min_groups:
        stats["verdict"] = "insufficient_data"
        stats["cause"] = "no_eligible_groups" if eligible == 0 else "too_few_groups"
        stats["message"] = (
            f"{label(name)}: {eligible - sparse} group(s) with at least 2 scored values"
            + (f" and {sparse} with a value in only one rollout" if sparse else "")
            + f"; need {th.min_groups} for a verdict"
        )
        return stats
    neutral_end = th.penalty_neutral_end(name, value_range) if name != AGG else None
    if neutral_end is not None and value_range is not None:
        neutral_value = value_range[1] if neutral_end == "constant_at_maximum" else value_range[0]
        whole_fired = int((abs(zero_values - neutral_value) > tol).sum())
        stats["fired_groups"] = (whole_fired, eligible - zero)
    if zero / eligible < th.dead_fraction:
        stats.update(verdict="ok", cause=None, message=None)
        return stats

    stats["verdict"] = "dead"
    # Groups where it did vary: a component dead in most groups but varying in some can vary (a rare success, a
    # rare failure, a penalty that fires rarely), which the message says instead of suspecting a scorer that
    # never runs; with the usual group size, for the chance a group of K varies at the step's rate.
    stats["varying_groups"] = eligible - zero
    sizes = rollouts[rollouts >= 2]
    stats["group_size"] = int(np.bincount(sizes).argmax()) if len(sizes) else 0
    if acc.records and acc.errors / acc.records >= th.error_rate:
        # error records are left out, never 0, so the groups they came from hold fewer rollouts to differ: part of
        # why this step is dead, which the message names beside the component's own cause
        stats["errors_left_out"] = (acc.errors, acc.records, acc.group_count)
    if sparse >= zero - sparse:
        stats["cause"] = "sparse_values"
        return stats
    lo_seen, hi_seen = stats["min"], stats["max"]
    # constant across the batch as inside groups: at the values' scale too (a reward of 1e6 whose changes are
    # rounding beside it was said to vary across the batch and to "depend on the prompt")
    weight = None if name == AGG else acc.weights.get(name)
    scale = max(abs(lo_seen), abs(hi_seen))
    batch_constant = (hi_seen - lo_seen) <= tol or stats["std"] <= zero_variance_bound(eps, weight, scale)
    range_known = value_range is not None
    if value_range is None and not batch_constant:
        value_range = (lo_seen, hi_seen)
    stats["range_known"] = range_known
    stats["range"] = value_range
    cause = "constant_everywhere" if batch_constant else "constant_within_groups"
    if value_range is not None:
        lo, hi = value_range
        at_min = int((abs(zero_values - lo) <= tol).sum())
        at_max = int((abs(zero_values - hi) <= tol).sum())
        neutral_end = th.penalty_neutral_end(name, value_range if range_known else None)
        for end_cause, end, at in (("constant_at_minimum", lo, at_min), ("constant_at_maximum", hi, at_max)):
            # A penalty at its neutral end in most groups that, off it, fires on whole groups (every rollout of a
            # group) at least as often as it varies is set per prompt, not per rollout: dead, constant within groups.
            # Called "never fires" (info) on a step where its neutral end reached dead_fraction and
            # constant_within_groups on the next where it fell short, it flapped between info and dead with the
            # binomial noise of the firing groups, an alarm raised and closed each time. One that varies more often
            # than it fires on whole groups (at this step, or over its recent steps) fires per rollout: an idle
            # penalty, info, whether or not its neutral end reached dead_fraction at this step (its whole groups and
            # its varying ones, both few, took the share over and under it from one step to the next).
            # (The doubt is for a penalty idle in most of its constant groups and firing on a few: one sitting off its
            # neutral end in most of them, on a small step whose fired groups are too few to tell, was called idle.)
            whole_off_end = len(zero_values) - at
            idle_mostly = at >= whole_off_end
            if (
                end_cause == neutral_end
                and idle_mostly
                and _fires_per_rollout(stats, recent_fired, whole_off_end, eligible - zero)
            ):
                cause, stats["constant_value"], stats["at_value_groups"] = end_cause, end, at
                break
            if at / (eligible - sparse) < th.dead_fraction:
                continue
            if end_cause != neutral_end or not whole_off_end:
                cause, stats["constant_value"], stats["at_value_groups"] = end_cause, end, at
            break
        end, at = (lo, at_min) if at_min >= at_max else (hi, at_max)
        if cause == "constant_within_groups" and at and 2 * at >= len(zero_values):
            # what the message counts: the groups at the end most sit at, and the whole groups elsewhere (said only
            # where one end holds most: a component of many values per prompt has no "other value")
            stats["per_prompt"] = (end, at, len(zero_values) - at, neutral_end is not None)
    if cause == "constant_everywhere":
        stats["constant_value"] = stats["mean"]
    neutral = th.penalty_neutral_end(name, value_range if range_known else None)  # (None for an unknown range)
    # a penalty stuck at its other end fires on every rollout: its message asked "is it ever triggered?" (or called
    # it saturated and advised lowering its weight), the opposite of what happened
    stats["penalty_fires"] = (
        neutral is not None and cause in ("constant_at_minimum", "constant_at_maximum") and (cause != neutral)
    )
    if th.is_idle_penalty(name, cause, value_range if range_known else None) and not th.alarm_idle_penalties:
        stats["verdict"], cause = "info", "penalty_never_fires"
    stats["cause"] = cause
    return stats


@dataclass(frozen=True)
class RecentFired:
    """A penalty's evidence over its recent checked steps (kept in ``TargetState.fired``): the groups where it fired
    on every rollout, the groups where it varied, and how many verdicts those were counted over."""

    whole: int
    varying: int
    verdicts: int


#: The fewest groups a penalty that never varied lately must have fired on whole (at this step and its recent ones)
#: to be judged set per prompt: one such group is as likely a per-rollout penalty's high-rate task whose every
#: rollout happened to fire (a group of K at rate r is whole with probability r^K).
PER_PROMPT_MIN_WHOLE_GROUPS = 2
#: The fewest fired groups (whole or varying, at this step and its recent ones) on which a penalty that varied lately
#: is judged set per prompt (whole groups at least as many as varying ones): the share of whole groups of a few
#: fired groups is noise (two whole and one varying is as likely of a penalty firing per rollout at 80 %).
PER_PROMPT_MIN_FIRED_GROUPS = 20


def _fires_per_rollout(stats: dict[str, Any], recent: RecentFired | None, whole_here: int, varying_here: int) -> bool:
    """Whether a penalty fires per rollout rather than being set per prompt, by its groups off its neutral end: it
    varied inside more of them than it fired on every rollout of, at this step or over its recent steps and this
    one, or the groups it fired on are too few to tell. A group of K is whole with probability rate^K, so a penalty
    firing at 30-90 % on a few hard tasks has one or two fired groups a step, often all whole: judged on one step's
    few groups it was ``constant_within_groups`` (dead) there and ``info`` on the next where it varied, an alarm and
    its closing over and over. The recent steps only ever clear a step's suspicion, never raise one: a step where it
    varies more than it fires whole is per rollout, whatever came before (the round thirty-seven recovery)."""
    if whole_here < varying_here:
        return True
    whole, varying, verdicts = whole_here, varying_here, 1
    if recent is not None:
        whole, varying, verdicts = whole + recent.whole, varying + recent.varying, verdicts + recent.verdicts
    enough = PER_PROMPT_MIN_FIRED_GROUPS if varying else PER_PROMPT_MIN_WHOLE_GROUPS
    if whole >= varying and whole + varying >= enough:
        return False
    if whole_here:  # (a step without a whole fired group is a penalty that fires rarely or not at all: nothing to add)
        stats["fired_lately"] = (whole, varying, verdicts)
    return True


def _fired_lately_note(whole: int, varying: int, verdicts: int) -> str:
    """What a penalty's info verdict adds when its whole fired groups at the step were not taken as set per prompt."""
    if not varying:
        return (
            f" (it fired on every rollout of {whole} group(s) over its last {verdicts} verdict(s) and varied in none: "
            f"too few to tell a penalty set per prompt from one firing per rollout at a high rate, whose every "
            f"rollout of a group fires by chance)"
        )
    if whole >= varying:  # more whole than varying, but too few fired groups for their share to tell
        return (
            f" (over its last {verdicts} verdict(s) it fired on every rollout of {whole} group(s) and varied inside "
            f"{varying}: too few to tell a penalty set per prompt from one firing per rollout at a high rate; one that "
            f"has varied is judged set per prompt on at least {PER_PROMPT_MIN_FIRED_GROUPS} fired groups)"
        )
    return (
        f" (its fired groups here are whole, but over its last {verdicts} verdicts it varied inside {varying} groups "
        f"and fired on every rollout of {whole}: it fires per rollout, and a group whose every rollout it fires on "
        f"is chance, not a penalty set per prompt)"
    )


def is_penalty(value_range: tuple[float, float] | None) -> bool:
    """A component whose best (neutral) value is 0 and whose other values are negative."""
    return value_range is not None and value_range[1] == 0.0 and value_range[0] < 0.0


def finish(name: str, stats: dict[str, Any], cancelling: list[str] | None = None) -> ComponentStats:
    """Turn a :func:`component_stats` dict into :class:`ComponentStats`, writing the dead message."""
    if stats["verdict"] in ("dead", "info"):
        at_scale, _ = stats.get("scale_zero_groups") or (0, None)
        # Constant only at its scale (a large offset drowns the components' changes) is no cancelling: that cause
        # sent a user looking for opposite signs or zero weights that were not there.
        drowned = 2 * at_scale >= stats["zero_variance_groups"]
        if cancelling and stats["cause"] not in ("no_values", "sparse_values") and not drowned:
            stats["cause"] = "components_cancel"
        stats["message"] = dead_message(name, stats["cause"], stats, cancelling or [])
        if stats.get("fired_lately"):
            stats["message"] += _fired_lately_note(*stats["fired_lately"])
    for internal in (
        "range_known",
        "range",
        "at_value_groups",
        "sparse_groups",
        "rollouts_per_group",
        "weight",
        "varying_groups",
        "group_size",
        "errors_left_out",
        "scale_zero_groups",
        "penalty_fires",
        "per_prompt",
        "fired_lately",
    ):
        stats.pop(internal, None)
    return ComponentStats(name=name, **stats)


def step_report(
    step: int, acc: StepAcc, th: Thresholds, recent_fired: Mapping[str, RecentFired] | None = None
) -> StepReport:
    """Every component's and the aggregate's verdict for one step, plus the step's error counts. ``recent_fired``:
    each penalty's evidence over its recent checked steps, by component name (from the monitor's state)."""
    group_sizes: dict[str, Any] = {}
    recent_fired = recent_fired or {}
    components = {
        name: finish(
            name,
            {
                **component_stats(name, acc, th, th.ranges.get(name), group_sizes, recent_fired.get(name)),
                "weight": acc.weights.get(name),
            },
        )
        for name in acc.component_names()
    }
    shares = advantage_share_means(group_sizes)
    if shares:
        for name, stats in components.items():
            stats.advantage_share = shares.get(name, 0.0)
    agg_stats = component_stats(AGG, acc, th, None)
    cancelling = [n for n, c in components.items() if c.verdict == "ok"] if agg_stats["verdict"] == "dead" else []
    aggregate = finish(AGGREGATE_TARGET, agg_stats, cancelling)
    scored = acc.records - acc.errors - acc.set_aside_records
    return StepReport(
        step=step,
        records=acc.records,
        scored=scored,
        errors=acc.errors,
        error_rate=acc.errors / acc.records if acc.records else 0.0,
        error_kinds=dict(sorted(acc.error_kinds.items(), key=lambda kv: (-kv[1], kv[0]))),
        groups=acc.group_count,
        components=components,
        aggregate=aggregate,
        inprocess_records=acc.inprocess,
        user_fallback_records=acc.user_fallbacks,
        set_aside_groups=len(acc.set_aside),
        set_aside_records=acc.set_aside_records,
    )
