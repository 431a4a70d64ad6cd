"""Streaming statistics: one pass over records, six numbers per (step, group, component).

Per (step, group, component) the accumulator keeps count, shift, shifted sum and sum of squares, min and
max, so memory grows with the number of groups, not records. The shift (the group's first value) keeps the
variance exact for constant groups and accurate for tiny noise, which a plain sum-of-squares would lose.

Records with ``status == "error"`` are infrastructure failures: they are excluded from every statistic and
counted per step (``errors``, ``error_kinds``). A ``None`` (or NaN/inf) component value in a scored record
is excluded for that component only (``missing`` / ``non_finite``).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping

from pydantic import ValidationError

from rewardpipe.models import Record
from rewardpipe.monitoring.advantage import advantage_shares
from rewardpipe.monitoring.thresholds import MonitorInputError
from rewardpipe.store import BadObject

# Internal key of the aggregate inside per-group accumulators; a NUL cannot clash with a component name
# that came through JSON in practice, and it never leaves the monitoring package.
AGG = "\x00aggregate"


class StepAcc:
    """Everything the monitor keeps about one step while it reads records."""

    __slots__ = ("records", "errors", "error_kinds", "groups", "missing", "non_finite", "weights", "inprocess")

    def __init__(self) -> None:
        self.records = 0
        self.inprocess = 0  # records scored from the "inprocess" trust mode (not a reward source)
        self.errors = 0
        self.error_kinds: dict[str, int] = {}
        # group_id -> {component -> [n, shift, sum(x - shift), sum((x - shift)^2), min, max]}
        self.groups: dict[str, dict[str, list]] = {}
        self.missing: dict[str, int] = {}
        self.non_finite: dict[str, int] = {}
        # component -> weight, as the records of the step declare it (read once per group: a run's
        # weights are fixed, so this costs nothing per record)
        self.weights: dict[str, float] = {}

    def component_names(self) -> list[str]:
        """Components seen at this step (with a value, a None or a non-finite value), sorted."""
        names: set[str] = set()
        for group in self.groups.values():
            names.update(group)
        names.update(self.missing)
        names.update(self.non_finite)
        names.discard(AGG)
        return sorted(names)


def accumulate(
    records: Iterable[Record | Mapping[str, Any]], on_bad: Callable[[BadObject], None] | None = None
) -> tuple[str | None, dict[int, StepAcc]]:
    """Read ``records`` once (any step order) into one :class:`StepAcc` per step; refuse mixed runs.

    A plain dict that is not a valid record goes to ``on_bad`` as ``record #<index>`` (it raises the
    ``ValidationError`` when there is no ``on_bad``).
    """
    steps: dict[int, StepAcc] = {}
    run_id: str | None = None
    other_runs: set[str] = set()
    isfinite = math.isfinite
    for index, rec in enumerate(records):
        if not isinstance(rec, Record):
            try:
                rec = Record.model_validate(rec)
            except ValidationError as exc:
                if on_bad is None:
                    raise
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"]) or "record"
                on_bad(BadObject(f"record #{index}", f"field '{where}': {first['msg']}"))
                continue
        if rec.run_id != run_id:
            if run_id is None:
                run_id = rec.run_id
            else:
                other_runs.add(rec.run_id)
        acc = steps.get(rec.step)
        if acc is None:
            acc = steps[rec.step] = StepAcc()
        acc.records += 1
        if rec.metrics.get("exec_mode") == "inprocess":
            acc.inprocess += 1
        group = acc.groups.get(rec.group_id)
        if group is None:
            group = acc.groups[rec.group_id] = {}
            acc.weights.update(rec.weights)
        if rec.status != "scored":
            acc.errors += 1
            kind = rec.error.kind if rec.error is not None else "unknown"
            acc.error_kinds[kind] = acc.error_kinds.get(kind, 0) + 1
            continue
        for name, value in (*rec.components.items(), (AGG, rec.aggregate)):
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


def component_figures(name: str, acc: StepAcc, epsilon: float) -> tuple[dict[str, Any], list[float]]:
    """The step's figures for one component, and the mean of every zero-variance group (for the cause).

    Batch mean/std are combined exactly from the per-group (n, mean, var); groups with fewer than two
    values are left out of the within-group figures ("eligible" groups have at least two).
    """
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
            if std <= epsilon:
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
    return stats, zero_values


def advantage_share_means(acc: StepAcc) -> dict[str, float]:
    """Per component, its mean share of the GRPO advantage over the groups that have an advantage.

    See :mod:`rewardpipe.monitoring.advantage`; a component absent from a group counts as share 0 there.
    """
    totals: dict[str, float] = {}
    groups_with_signal = 0
    for group in acc.groups.values():
        stds = {}
        for name, st in group.items():
            if name == AGG or st[0] < 2:
                continue
            n, _, s1, s2 = st[0], st[1], st[2], st[3]
            mean_d = s1 / n
            stds[name] = math.sqrt(max(s2 / n - mean_d * mean_d, 0.0))
        shares = advantage_shares(stds, acc.weights)
        if shares is None:
            continue
        groups_with_signal += 1
        for name, share in shares.items():
            totals[name] = totals.get(name, 0.0) + share
    if not groups_with_signal:
        return {}
    return {name: total / groups_with_signal for name, total in totals.items()}
