"""Per-component within-group variance monitoring: is every reward component still teaching?

GRPO learns only from differences between the K rollouts of one prompt (a group). A component whose
value is the same for every rollout of a group gives that group no advantage, however much it varies
across the batch and whatever its weight. The monitor measures, per step and per component (and for
the aggregate reward):

* ``mean`` and ``std`` over the batch (population std, every scored value);
* ``within_group_std_mean``: the mean of the per-group population std over *eligible* groups
  (groups with at least two scored values of that component);
* ``zero_variance_group_fraction``: the share of eligible groups whose std is at most ``epsilon``
  (1e-6 by default, so float noise such as 1e-9 still counts as constant);
* a ``verdict``: ``ok``, ``dead`` (the fraction reached ``dead_fraction``) or ``insufficient_data``
  (fewer than ``min_groups`` eligible groups), and for ``dead`` a ``cause``:
  ``constant_at_minimum``, ``constant_at_maximum``, ``constant_everywhere``, ``constant_within_groups``
  (varies across the batch, constant inside groups) or, for the aggregate only, ``components_cancel``.

Records with ``status == "error"`` are infrastructure failures: they are excluded from every
statistic and counted per step (``errors``, ``error_rate``, ``error_kinds``). A ``None`` (or NaN/inf)
component value in a scored record is excluded for that component only (``missing`` / ``non_finite``).

Computation is one streaming pass: per (step, group, component) the monitor keeps six numbers (count,
shift, shifted sum and sum of squares, min, max), so memory grows with the number of groups, not
records. The shift (the group's first value) keeps the variance exact for constant groups and accurate
for tiny noise, which a plain sum-of-squares would lose.

Alarms are raised once per onset with hysteresis (see :class:`Thresholds`); the hysteresis state is a
small JSON object (:class:`MonitorState`) that a caller running one step at a time (the AWS
variance-check Lambda) stores with ``Store.put_json`` and passes back as ``previous_state``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rewardpipe.alarms import AGGREGATE_TARGET, ERRORS_TARGET, Alarm, AlarmSink, dispatch
from rewardpipe.models import Record
from rewardpipe.store import BadObject, Store, run_prefix

Verdict = Literal["ok", "dead", "insufficient_data"]

#: Value ranges of the components of the blog's reward (contracts.md), used to tell "constant at its
#: minimum" from "constant at its maximum". Components not listed fall back to the values seen.
DEFAULT_RANGES: dict[str, tuple[float, float]] = {
    "correctness": (0.0, 1.0),
    "asked_before_coding": (0.0, 1.0),
    "guessed_immediately": (-1.0, 0.0),
    "loop_penalty": (-0.5, 0.0),
}

STATE_SCHEMA = "rewardpipe.monitor-state/v1"

# Internal key of the aggregate inside per-group accumulators; a NUL cannot clash with a component name
# that came through JSON in practice, and it never leaves this module.
_AGG = "\x00aggregate"


class MonitorInputError(ValueError):
    """The records handed to the monitor cannot be monitored as one run (message says why)."""


class Thresholds(BaseModel):
    """When a component is dead, when it has recovered, and when to alarm.

    * ``epsilon``: a group whose std is at most this is "zero variance" (default 1e-6).
    * ``dead_fraction``: verdict ``dead`` when at least this share of eligible groups has zero variance.
    * ``recover_fraction``: an active dead alarm clears only when the share drops *below* this
      (hysteresis band between the two, so a component hovering at the threshold does not flap).
    * ``min_groups``: fewer eligible groups (>= 2 scored values) than this gives ``insufficient_data``,
      which neither raises nor clears an alarm.
    * ``raise_after``: consecutive dead steps needed before the alarm is raised (1 = at once).
    * ``error_rate`` / ``error_recover_rate``: the same for the share of records with status "error".
    * ``ranges``: known (min, max) per component, to name the at-minimum / at-maximum causes.
    * ``ignore``: components that get statistics and verdicts but never alarms (e.g. a penalty that
      is meant to be 0 almost always).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    epsilon: float = Field(default=1e-6, ge=0)
    dead_fraction: float = Field(default=0.9, gt=0, le=1)
    recover_fraction: float = Field(default=0.5, ge=0, le=1)
    min_groups: int = Field(default=4, ge=1)
    raise_after: int = Field(default=1, ge=1)
    error_rate: float = Field(default=0.1, gt=0, le=1)
    error_recover_rate: float = Field(default=0.05, ge=0, le=1)
    ranges: dict[str, tuple[float, float]] = Field(default_factory=lambda: dict(DEFAULT_RANGES))
    ignore: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> "Thresholds":
        if self.recover_fraction > self.dead_fraction:
            raise ValueError(
                f"recover_fraction ({self.recover_fraction}) must not exceed dead_fraction ({self.dead_fraction})"
            )
        if self.error_recover_rate > self.error_rate:
            raise ValueError(
                f"error_recover_rate ({self.error_recover_rate}) must not exceed error_rate ({self.error_rate})"
            )
        for name, (lo, hi) in self.ranges.items():
            if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
                raise ValueError(f"range of '{name}' must be finite with min <= max, got ({lo}, {hi})")
        return self


# --------------------------------------------------------------------------------------------------
# Hysteresis state


class TargetState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    active: bool = False  # an alarm has been raised and not yet cleared
    streak: int = Field(default=0, ge=0)  # consecutive dead (or high-error) steps seen while inactive
    since: int | None = None  # step at which the active alarm was raised


class MonitorState(BaseModel):
    """What the monitor must remember between steps. Keys of ``targets``: ``component:<name>``,
    ``aggregate`` and ``errors``. ``last_step`` makes a replayed step (a retried Lambda) harmless:
    its statistics are computed again but it does not advance the hysteresis or re-raise alarms."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: Literal["rewardpipe.monitor-state/v1"] = Field(default=STATE_SCHEMA, alias="schema")
    run_id: str | None = None
    last_step: int | None = None
    targets: dict[str, TargetState] = Field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "MonitorState":
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise MonitorInputError(f"invalid monitor state: {exc.errors()[0]['msg']} at "
                                    f"{'.'.join(str(p) for p in exc.errors()[0]['loc'])}") from None

    def target(self, key: str) -> TargetState:
        return self.targets.setdefault(key, TargetState())


def state_key(run_id: str) -> str:
    """Where the hysteresis state of a run is kept in a store."""
    return f"{run_prefix(run_id)}monitor/state.json"


# --------------------------------------------------------------------------------------------------
# Results


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    replayed: bool = False
    # Records whose execution ran in the "inprocess" trust mode: a screened fallback, not a reward source.
    inprocess_records: int = 0

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
            "replayed": self.replayed,
            "inprocess_records": self.inprocess_records,
            "components": {name: stats.to_dict() for name, stats in self.components.items()},
            "aggregate": self.aggregate.to_dict(),
        }


@dataclass
class MonitorResult:
    run_id: str | None
    thresholds: Thresholds
    steps: list[StepReport]
    alarms: list[Alarm]
    state: MonitorState
    unreadable: list[dict[str, Any]] = field(default_factory=list)  # filled by callers reading a source

    def step(self, n: int) -> StepReport:
        for report in self.steps:
            if report.step == n:
                return report
        raise KeyError(f"no step {n} in this result (steps: {[r.step for r in self.steps]})")

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "thresholds": self.thresholds.model_dump(mode="json"),
            "steps": [report.to_dict() for report in self.steps],
            "alarms": [alarm.to_dict() for alarm in self.alarms],
            "unreadable": list(self.unreadable),
            "state": self.state.to_dict(),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)


# --------------------------------------------------------------------------------------------------
# Accumulation (the hot path)


class _StepAcc:
    __slots__ = ("records", "errors", "error_kinds", "groups", "missing", "non_finite", "inprocess")

    def __init__(self) -> None:
        self.records = 0
        self.inprocess = 0
        self.errors = 0
        self.error_kinds: dict[str, int] = {}
        # group_id -> {component -> [n, shift, sum(x - shift), sum((x - shift)^2), min, max]}
        self.groups: dict[str, dict[str, list]] = {}
        self.missing: dict[str, int] = {}
        self.non_finite: dict[str, int] = {}


def _accumulate(records: Iterable[Record | Mapping[str, Any]]) -> tuple[str | None, dict[int, _StepAcc]]:
    steps: dict[int, _StepAcc] = {}
    run_id: str | None = None
    other_runs: set[str] = set()
    isfinite = math.isfinite
    for rec in records:
        if not isinstance(rec, Record):
            rec = Record.model_validate(rec)
        if rec.run_id != run_id:
            if run_id is None:
                run_id = rec.run_id
            else:
                other_runs.add(rec.run_id)
        acc = steps.get(rec.step)
        if acc is None:
            acc = steps[rec.step] = _StepAcc()
        acc.records += 1
        if rec.metrics.get("exec_mode") == "inprocess":
            acc.inprocess += 1
        group = acc.groups.get(rec.group_id)
        if group is None:
            group = acc.groups[rec.group_id] = {}
        if rec.status != "scored":
            acc.errors += 1
            kind = rec.error.kind if rec.error is not None else "unknown"
            acc.error_kinds[kind] = acc.error_kinds.get(kind, 0) + 1
            continue
        for name, value in (*rec.components.items(), (_AGG, rec.aggregate)):
            if value is None:
                acc.missing[name] = acc.missing.get(name, 0) + 1
                continue
            if not isfinite(value):
                acc.non_finite[name] = acc.non_finite.get(name, 0) + 1
                continue
            st = group.get(name)
            if st is None:
                group[name] = [1, value, 0.0, 0.0, value, value]
            else:
                d = value - st[1]
                st[0] += 1
                st[2] += d
                st[3] += d * d
                if value < st[4]:
                    st[4] = value
                elif value > st[5]:
                    st[5] = value
    if other_runs:
        names = ", ".join(sorted(other_runs | {run_id or ""}))
        raise MonitorInputError(f"records come from several runs ({names}): monitor one run at a time (--run-id)")
    return run_id, steps


# --------------------------------------------------------------------------------------------------
# Statistics and verdicts


def _fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    if abs(value) < 1e-12:
        value = 0.0  # float noise (a std of 5.6e-17) reads as a real spread in a message
    return f"{value:.4g}" if value != int(value) or abs(value) >= 1e6 else f"{value:.1f}"


def _pct(fraction: float) -> str:
    return f"{100 * fraction:.0f}%"


def _label(name: str) -> str:
    return "the aggregate reward" if name in (AGGREGATE_TARGET, _AGG) else name


#: Extra advice for known (component, cause) pairs; the generic text covers everything else.
_HINTS: dict[tuple[str, str], str] = {
    ("correctness", "constant_at_minimum"): "are the tests running the model's code? (entry-point name mismatch, "
    "an import that fails, or a harness set-up error makes every test fail before its assertion)",
    ("asked_before_coding", "constant_at_minimum"): "no rollout asks and then commits code: is the bonus "
    "gated on something the policy cannot reach?",
    ("asked_before_coding", "constant_at_maximum"): "every rollout already asks first and commits; consider "
    "lowering its weight so the sparse correctness signal can move the policy",
    ("guessed_immediately", "constant_at_minimum"): "every rollout commits code on its first turn without "
    "asking: the policy has collapsed to guessing",
}


def _dead_message(name: str, cause: str, s: dict[str, Any], th: Thresholds, cancelling: list[str]) -> str:
    label = _label(name)
    frac = s["zero_variance_group_fraction"]
    share = f"{_pct(frac)} of groups ({s['zero_variance_groups']}/{s['eligible_groups']})"
    value = _fmt(s["constant_value"])
    hint = _HINTS.get((name, cause))
    if cause in ("constant_at_minimum", "constant_at_maximum"):
        at = s["at_value_groups"]
        share = f"{_pct(at / s['eligible_groups'])} of groups ({at}/{s['eligible_groups']})"
        if at < s["zero_variance_groups"]:
            share += f"; {_pct(frac)} of groups are constant"
    if cause == "constant_at_minimum":
        where = "its minimum" if s["range_known"] else "the lowest value seen at this step"
        text = f"{label} is {value} ({where}) in every rollout of {share}: it gives GRPO no signal there; "
        return text + (hint or "is it ever triggered? A scorer that never runs, or a gate nothing reaches, looks like this")
    if cause == "constant_at_maximum":
        where = "its maximum" if s["range_known"] else "the highest value seen at this step"
        text = f"{label} constant at {where} {value} in every rollout of {share}: "
        if hint:
            return text + "saturated; " + hint
        if s["range_known"] and s["range"][1] == 0.0 and s["range"][0] < 0.0:
            return text + ("the penalty never fires, so it contributes nothing to learning; fine for a rarely "
                           "triggered penalty (ignore it to silence this)")
        return text + "saturated: it no longer separates rollouts; consider lowering its weight or raising the bar"
    if cause == "constant_everywhere":
        return (f"{label} is {value} in every scored rollout ({s['values']} values, std {_fmt(s['std'])}): it varies "
                f"neither inside nor across groups and only shifts every reward by a constant; is it computed "
                f"from the rollout at all?")
    if cause == "components_cancel":
        return (f"{label} is constant inside {share} although {', '.join(cancelling)} still vary inside groups: "
                f"their weighted changes cancel (opposite signs with equal weights) or their weights are 0, so "
                f"the whole reward gives no gradient")
    # constant_within_groups
    return (f"{label} is constant inside {share} although it varies across the batch (batch std "
            f"{_fmt(s['std'])}, mean within-group std {_fmt(s['within_group_std_mean'])}): it depends on the "
            f"prompt, not on the response, so GRPO learns nothing from it; batch std hides this, group std shows it")


def _component_stats(
    name: str,
    acc: _StepAcc,
    th: Thresholds,
    value_range: tuple[float, float] | None,
) -> dict[str, Any]:
    eps = th.epsilon
    tol = max(eps, 1e-12)
    n_total = 0
    sum_total = 0.0
    lo_seen = math.inf
    hi_seen = -math.inf
    groups = 0
    per_group: list[tuple[int, float, float]] = []  # (n, mean, var) for the batch combine
    eligible = zero = 0
    std_sum = 0.0
    zero_values: list[float] = []
    for group in acc.groups.values():
        st = group.get(name)
        if st is None:
            continue
        n, shift, s1, s2, mn, mx = st
        groups += 1
        mean_d = s1 / n
        var = s2 / n - mean_d * mean_d
        if var < 0.0:
            var = 0.0
        mean = shift + mean_d
        per_group.append((n, mean, var))
        n_total += n
        sum_total += n * mean
        if mn < lo_seen:
            lo_seen = mn
        if mx > hi_seen:
            hi_seen = mx
        if n >= 2:
            eligible += 1
            std = math.sqrt(var)
            std_sum += std
            if std <= eps:
                zero += 1
                zero_values.append(mean)
    stats: dict[str, Any] = {
        "values": n_total,
        "missing": acc.missing.get(name, 0),
        "non_finite": acc.non_finite.get(name, 0),
        "groups": groups,
        "eligible_groups": eligible,
        "zero_variance_groups": zero,
        "mean": None,
        "std": None,
        "min": None,
        "max": None,
        "zero_variance_group_fraction": None,
        "within_group_std_mean": None,
        "constant_value": None,
    }
    if n_total:
        mean = sum_total / n_total
        m2 = sum(n * (var + (gm - mean) ** 2) for n, gm, var in per_group)
        stats.update(mean=mean, std=math.sqrt(max(m2 / n_total, 0.0)), min=lo_seen, max=hi_seen)
    if eligible:
        stats["zero_variance_group_fraction"] = zero / eligible
        stats["within_group_std_mean"] = std_sum / eligible

    # Verdict
    if eligible == 0 or eligible < th.min_groups:
        stats["verdict"] = "insufficient_data"
        stats["cause"] = "no_eligible_groups" if eligible == 0 else "too_few_groups"
        stats["message"] = (
            f"{_label(name)}: {eligible} group(s) with at least 2 scored values; need {th.min_groups} for a verdict"
        )
        return stats
    if zero / eligible < th.dead_fraction:
        stats.update(verdict="ok", cause=None, message=None)
        return stats

    stats["verdict"] = "dead"
    batch_constant = (hi_seen - lo_seen) <= tol or stats["std"] <= eps
    range_known = value_range is not None
    if value_range is None and not batch_constant:
        value_range = (lo_seen, hi_seen)
    stats["range_known"] = range_known
    stats["range"] = value_range
    cause = "constant_everywhere" if batch_constant else "constant_within_groups"
    if value_range is not None:
        lo, hi = value_range
        at_min = sum(1 for v in zero_values if abs(v - lo) <= tol)
        at_max = sum(1 for v in zero_values if abs(v - hi) <= tol)
        if at_min / eligible >= th.dead_fraction:
            cause, stats["constant_value"], stats["at_value_groups"] = "constant_at_minimum", lo, at_min
        elif at_max / eligible >= th.dead_fraction:
            cause, stats["constant_value"], stats["at_value_groups"] = "constant_at_maximum", hi, at_max
    if cause == "constant_everywhere":
        stats["constant_value"] = stats["mean"]
    stats["cause"] = cause
    return stats


def _finish(name: str, stats: dict[str, Any], th: Thresholds, cancelling: list[str] | None = None) -> ComponentStats:
    if stats["verdict"] == "dead":
        if cancelling:
            stats["cause"] = "components_cancel"
        stats["message"] = _dead_message(name, stats["cause"], stats, th, cancelling or [])
    for internal in ("range_known", "range", "at_value_groups"):
        stats.pop(internal, None)
    return ComponentStats(name=name, **stats)


def _step_report(step: int, acc: _StepAcc, th: Thresholds) -> StepReport:
    names: list[str] = []
    seen: set[str] = set()
    for group in acc.groups.values():
        for name in group:
            if name not in seen and name != _AGG:
                seen.add(name)
                names.append(name)
    for name in list(acc.missing) + list(acc.non_finite):
        if name not in seen and name != _AGG:
            seen.add(name)
            names.append(name)
    components = {
        name: _finish(name, _component_stats(name, acc, th, th.ranges.get(name)), th) for name in sorted(names)
    }
    agg_stats = _component_stats(_AGG, acc, th, None)
    cancelling = [n for n, c in components.items() if c.verdict == "ok"] if agg_stats["verdict"] == "dead" else []
    aggregate = _finish(AGGREGATE_TARGET, agg_stats, th, cancelling)
    scored = acc.records - acc.errors
    return StepReport(
        step=step,
        records=acc.records,
        scored=scored,
        errors=acc.errors,
        error_rate=acc.errors / acc.records if acc.records else 0.0,
        error_kinds=dict(sorted(acc.error_kinds.items(), key=lambda kv: (-kv[1], kv[0]))),
        groups=len(acc.groups),
        components=components,
        aggregate=aggregate,
        inprocess_records=acc.inprocess,
    )


# --------------------------------------------------------------------------------------------------
# Hysteresis and alarms


def _figures(stats: ComponentStats, th: Thresholds) -> dict[str, Any]:
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


def _track_component(
    key: str, stats: ComponentStats, step: int, run_id: str | None, state: MonitorState, th: Thresholds
) -> Alarm | None:
    target = state.target(key)
    if stats.verdict == "insufficient_data":
        stats.alarm_active = target.active
        return None
    alarm = None
    if target.active:
        frac = stats.zero_variance_group_fraction or 0.0
        if frac < th.recover_fraction:
            since = target.since
            target.active, target.streak, target.since = False, 0, None
            alarm = Alarm(
                kind="recovered",
                component=stats.name,
                step=step,
                cause="recovered",
                recovered_from="dead_component",
                run_id=run_id,
                message=(
                    f"{_label(stats.name)} recovered at step {step}: zero-variance groups down to {_pct(frac)} "
                    f"(below {_pct(th.recover_fraction)}) after being dead since step {since}"
                ),
                figures=_figures(stats, th),
            )
    elif stats.verdict == "dead":
        target.streak += 1
        if target.streak >= th.raise_after:
            target.active, target.since = True, step
            message = stats.message or ""
            if th.raise_after > 1:
                message += f" (dead for {target.streak} consecutive steps)"
            alarm = Alarm(
                kind="dead_component",
                component=stats.name,
                step=step,
                cause=stats.cause or "dead",
                run_id=run_id,
                message=message,
                figures={**_figures(stats, th), "consecutive_dead_steps": target.streak},
            )
    else:
        target.streak = 0
    stats.alarm_active = target.active
    return alarm


def _track_errors(report: StepReport, run_id: str | None, state: MonitorState, th: Thresholds) -> Alarm | None:
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
    if target.active:
        if rate < th.error_recover_rate:
            since = target.since
            target.active, target.streak, target.since = False, 0, None
            alarm = Alarm(
                kind="recovered",
                component=ERRORS_TARGET,
                step=report.step,
                cause="recovered",
                recovered_from="error_rate",
                run_id=run_id,
                message=(
                    f"error rate recovered at step {report.step}: {_pct(rate)} of records "
                    f"(below {_pct(th.error_recover_rate)}) after being high since step {since}"
                ),
                figures=figures,
            )
    elif rate >= th.error_rate:
        target.streak += 1
        if target.streak >= th.raise_after:
            target.active, target.since = True, report.step
            kinds = ", ".join(f"{k} {v}" for k, v in report.error_kinds.items())
            alarm = Alarm(
                kind="error_rate",
                component=ERRORS_TARGET,
                step=report.step,
                cause="error_rate",
                run_id=run_id,
                message=(
                    f"{_pct(rate)} of records at step {report.step} could not be scored ({report.errors}/"
                    f"{report.records}: {kinds}); they are excluded from the statistics, not counted as 0, "
                    f"but groups that lose rollouts lose signal; check the executor/sandbox"
                ),
                figures=figures,
            )
    else:
        target.streak = 0
    report.error_alarm_active = target.active
    return alarm


# --------------------------------------------------------------------------------------------------
# Entry points


def monitor_records(
    records: Iterable[Record | Mapping[str, Any]],
    thresholds: Thresholds | None = None,
    previous_state: MonitorState | Mapping[str, Any] | None = None,
) -> MonitorResult:
    """Compute every step's statistics and verdicts in one pass, then advance the alarm state.

    ``records`` may span several steps (of one run) in any order. ``previous_state`` is the ``state`` of
    an earlier result (object or its ``to_dict()``); the returned ``state`` continues it. Steps at or
    before ``previous_state.last_step`` are reported but marked ``replayed`` and raise no alarms.
    """
    th = thresholds or Thresholds()
    if previous_state is None:
        state = MonitorState()
    elif isinstance(previous_state, MonitorState):
        state = previous_state.model_copy(deep=True)
    else:
        state = MonitorState.from_dict(previous_state)
    run_id, accs = _accumulate(records)
    if run_id is not None and state.run_id is not None and run_id != state.run_id:
        raise MonitorInputError(f"records are from run '{run_id}' but the monitor state is for run '{state.run_id}'")
    state.run_id = state.run_id or run_id
    ignored = set(th.ignore)

    reports: list[StepReport] = []
    alarms: list[Alarm] = []
    for step in sorted(accs):
        report = _step_report(step, accs.pop(step), th)
        reports.append(report)
        if state.last_step is not None and step <= state.last_step:
            report.replayed = True
            continue
        for name, stats in report.components.items():
            if name in ignored:
                continue
            alarm = _track_component(f"component:{name}", stats, step, run_id, state, th)
            if alarm:
                alarms.append(alarm)
        if AGGREGATE_TARGET not in ignored:
            alarm = _track_component(AGGREGATE_TARGET, report.aggregate, step, run_id, state, th)
            if alarm:
                alarms.append(alarm)
        alarm = _track_errors(report, run_id, state, th)
        if alarm:
            alarms.append(alarm)
        state.last_step = step
    return MonitorResult(run_id=run_id, thresholds=th, steps=reports, alarms=alarms, state=state)


def monitor_step(
    store: Store,
    run_id: str,
    step: int,
    thresholds: Thresholds | None = None,
    sinks: Iterable[AlarmSink] = (),
    *,
    persist_state: bool = True,
) -> MonitorResult:
    """Monitor one step of a run stored in ``store``, continuing the run's saved hysteresis state.

    The local runner calls this after each step, and so can the variance-check Lambda: it reads the
    state from :func:`state_key`, reads the step's records (unreadable objects are listed in
    ``result.unreadable``), sends the alarms to ``sinks`` and saves the new state.
    """
    key = state_key(run_id)
    previous = store.get_json(key, default=None)
    bad: list[BadObject] = []
    result = monitor_records(store.iter_records(run_id, step, on_bad=bad.append), thresholds, previous)
    result.unreadable = [b.to_dict() for b in bad]
    failures = dispatch(result.alarms, sinks)
    if failures:
        result.unreadable.extend(
            {"key": f"alarm-delivery:{f.sink}", "reason": f"{f.alarm.component}/{f.alarm.kind}: {f.error}"}
            for f in failures
        )
    if persist_state:
        if result.state.run_id is None:
            result.state.run_id = run_id
        store.put_json(key, result.state.to_dict())
    return result


def iter_jsonl_records(path: str | Path, on_bad: Callable[[BadObject], None] | None = None) -> Iterator[Record]:
    """Records from a JSONL file, one per line; a bad line is reported as ``<path>:<line>`` and skipped."""
    path = Path(path)
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                yield Record.model_validate_json(line)
            except ValidationError as exc:
                if on_bad is not None:
                    first = exc.errors()[0]
                    loc = ".".join(str(p) for p in first["loc"])
                    reason = "not valid JSON" if first["type"] == "json_invalid" else f"field '{loc}': {first['msg']}"
                    on_bad(BadObject(f"{path}:{lineno}", reason))
