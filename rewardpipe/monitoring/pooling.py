"""Small batches: consecutive steps pooled until a component has enough groups for a verdict.

A step gives a component a verdict only with at least ``min_groups`` eligible groups (>= 2 scored values).
A trainer with few groups per step never gets there: TRL's ``GRPOTrainer`` with
``per_device_train_batch_size=8`` and ``num_generations=4`` scores 2 groups a step, so a component constant
in every group stayed ``insufficient_data`` for ever and never alarmed. Here such a step is held, and the
component is judged on the groups of the consecutive small steps together as soon as they are enough:

* a target (component or aggregate) that has a verdict on its own step is judged on that step alone, as
  before; pooling changes nothing for batches large enough;
* a target short of ``min_groups`` opens a pool at that step (``TargetState.pooled_since``, saved with the
  monitor's state, so a Lambda checking one step at a time pools too); each following step joins it; when the
  pool's groups reach ``min_groups``, the verdict is reported at the pool's last step, with
  ``pooled_steps`` in its figures and "(pooled over steps 3-5 ...)" in its message and alarm, and the pool
  closes. Until then the step says how far the pool has got;
* a pool spans at most :data:`MAX_POOLED_STEPS` consecutive steps *that have records* (or ``min_groups``
  steps when that is more: one group a step must be able to reach ``min_groups``, or a constant component
  would never alarm): older evidence is dropped, so a verdict never mixes a policy with the one it was many
  batches before. Counted in steps seen,
  not in step numbers: a trainer that records every 10th step (or numbers its steps by samples seen) pools
  its batches as one that records every step does;
* the steps of an open pool come from :class:`StepHistory`: the ones the same monitor saw (a trainer
  callback, a file of many steps), or read back from the store (``monitor_step``).

Errors are judged per step as before (an error rate needs no groups).
"""

from __future__ import annotations

import itertools
import math
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from rewardpipe.monitoring.alarms import AGGREGATE_TARGET, Alarm
from rewardpipe.monitoring.hysteresis import recent_fired
from rewardpipe.monitoring.messages import label
from rewardpipe.monitoring.statistics import GroupTable, SampledRollout, StepAcc
from rewardpipe.monitoring.thresholds import Thresholds
from rewardpipe.monitoring.verdicts import ComponentStats, StepReport, step_report

#: The most consecutive steps one verdict is judged over.
MAX_POOLED_STEPS = 8


class StepHistory:
    """The accumulators of the last few steps a monitor saw, for pooling; ``load(step)`` reads one back
    (from a store) when it is not held, or returns None; ``listing()`` names the steps ``load`` can read (read
    once, when a pool first needs it). With ``load`` but no listing, only the MAX_POOLED_STEPS step numbers
    before a step are tried."""

    def __init__(
        self,
        load: Callable[[int], StepAcc | None] | None = None,
        keep: int = MAX_POOLED_STEPS,
        listing: Callable[[], Iterable[int]] | None = None,
    ) -> None:
        self._load = load
        self._keep = keep
        self._listing = listing
        self._listed: list[int] | None = None
        self._held: OrderedDict[int, StepAcc] = OrderedDict()

    def before(self, first: int, step: int, span: int = 0) -> list[tuple[int, StepAcc]]:
        """The last ``keep - 1`` steps from ``first`` up to (not including) ``step`` that have records, oldest
        first, with their accumulators; ``span`` widens ``keep`` (for this call and the steps kept after it)."""
        self._keep = max(self._keep, span)
        candidates = {s for s in self._held if first <= s < step}
        if self._load is not None:
            if self._listing is not None:
                candidates.update(s for s in self._listing_once() if first <= s < step)
            else:
                candidates.update(range(max(first, step - self._keep + 1), step))
        return list(itertools.islice(self._readable(candidates), self._keep - 1))[::-1]

    def newest_before(self, step: int, span: int) -> Iterator[tuple[int, StepAcc]]:
        """The steps before ``step`` that have records, newest first, at most ``span - 1`` of them, each read only
        when the caller asks for it (a store-backed history reads no step a verdict does not need)."""
        self._keep = max(self._keep, span)
        candidates = {s for s in self._held if s < step}
        if self._load is not None:
            if self._listing is not None:
                candidates.update(s for s in self._listing_once() if s < step)
            else:
                candidates.update(range(max(0, step - self._keep + 1), step))
        return itertools.islice(self._readable(candidates), self._keep - 1)

    def _listing_once(self) -> list[int]:
        if self._listed is None:
            try:
                self._listed = sorted(set(self._listing())) if self._listing is not None else []
            except Exception:  # noqa: BLE001 - a pool is judged on the steps that can be read
                self._listed = []
        return self._listed

    def _readable(self, candidates: set[int]) -> Iterator[tuple[int, StepAcc]]:
        for earlier in sorted(candidates, reverse=True):
            acc = self.get(earlier)
            if acc is not None:
                yield earlier, acc

    def remember(self, step: int, acc: StepAcc) -> None:
        self._held[step] = acc
        self._held.move_to_end(step)
        while len(self._held) > self._keep:
            self._held.popitem(last=False)

    def get(self, step: int) -> StepAcc | None:
        if step in self._held:
            return self._held[step]
        if self._load is None:
            return None
        acc = self._load(step)
        if acc is not None:
            self.remember(step, acc)
        return acc


class PooledRollout(SampledRollout):
    """A sampled rollout that remembers its own step (a pooled verdict's examples come from several)."""

    __slots__ = ("step",)

    def __init__(self, rollout: SampledRollout, step: int) -> None:
        for name in SampledRollout.__slots__:
            setattr(self, name, getattr(rollout, name))
        self.step = step


def merge(steps: list[tuple[int, StepAcc]]) -> StepAcc:
    """One accumulator holding every group of ``steps`` (each group stays a group of its own step)."""
    merged = StepAcc()
    names: dict[str, None] = {}
    merged.rollouts = np.concatenate([acc.rollout_counts() for _, acc in steps]) if steps else None
    for step, acc in steps:
        merged.records += acc.records
        merged.errors += acc.errors
        merged.inprocess += acc.inprocess
        merged.user_fallbacks += acc.user_fallbacks
        for target, source in (
            (merged.error_kinds, acc.error_kinds),
            (merged.missing, acc.missing),
            (merged.non_finite, acc.non_finite),
        ):
            for key, count in source.items():
                target[key] = target.get(key, 0) + count
        merged.weights.update(acc.weights)
        for group in acc.groups:
            merged.groups[(step, group)] = None
        for group, rollouts in acc.sample.items():
            merged.sample[(step, group)] = [PooledRollout(r, getattr(r, "step", step)) for r in rollouts]
        for group in acc.leads:
            lead = acc.lead(group)
            if lead is not None:
                merged.leads[(step, group)] = PooledRollout(lead, getattr(lead, "step", step))
        names.update(dict.fromkeys(acc.table))
    for name in names:
        parts = [acc.table.get(name) or _absent(len(acc.groups)) for _, acc in steps]
        merged.table[name] = GroupTable(
            *(
                np.concatenate([getattr(part, field) for part in parts])
                for field in ("n", "shift", "s1", "s2", "minimum", "maximum")
            )
        )
    return merged


def _absent(groups: int) -> GroupTable:
    """The rows of a step's groups for a component the step never saw."""
    nan = np.full(groups, math.nan)
    return GroupTable(
        np.zeros(groups, dtype=np.int64), np.zeros(groups), np.zeros(groups), np.zeros(groups), nan, nan.copy()
    )


def _span(steps: list[int]) -> str:
    return f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}\u2013{steps[-1]}"


def pooled_note(steps: list[int], min_groups: int) -> str:
    """What a verdict judged over a pool says of it (its message, and an alarm's built from it)."""
    return f"(pooled over {_span(steps)}: each step alone had fewer than {min_groups} groups with 2+ values)"


class Pooling:
    """What pooling did at one step: the pooled steps of each target judged over a pool, and the accumulator
    the step's causes and alarm examples are read from."""

    def __init__(self, acc: StepAcc, min_groups: int = 0) -> None:
        self.acc = acc
        self.min_groups = min_groups
        self.pooled: dict[str, list[int]] = {}  # target name -> the steps its verdict was judged over

    def annotate(self, alarm: Alarm) -> None:
        """Say in an alarm raised from a pooled verdict which steps it was judged over, in its figures and its
        message. Every kind: a recovery's or a dying warning's figures are the pool's (groups of several steps), and
        their messages, written apart from the verdict's, read as the step's own without this."""
        steps = self.pooled.get(alarm.component)
        if not steps or "pooled_steps" in alarm.figures:
            return
        alarm.figures["pooled_steps"] = list(steps)
        note = pooled_note(steps, self.min_groups)
        if note not in alarm.message:
            alarm.message += f" {note}"


def pool_small_steps(report: StepReport, acc: StepAcc, state: Any, th: Thresholds, history: StepHistory) -> Pooling:
    """Judge every target of ``report`` short of ``min_groups`` over its open pool (see the module docstring);
    ``report``'s statistics are replaced where the pool gives a verdict. ``state``: the MonitorState."""
    step = report.step
    pooling = Pooling(acc, th.min_groups)
    merged: dict[int, tuple[StepReport, StepAcc]] = {}  # first step -> the pool's report
    recent = recent_fired(state, step)

    def pooled_report(steps: list[tuple[int, StepAcc]]) -> tuple[StepReport, StepAcc]:
        first = steps[0][0]
        if first not in merged:
            pooled_acc = merge(steps)
            merged[first] = (step_report(step, pooled_acc, th, recent), pooled_acc)
        return merged[first]

    targets = [(f"component:{name}", name) for name in report.components] + [(AGGREGATE_TARGET, AGGREGATE_TARGET)]
    widest: tuple[int, StepAcc] | None = None
    # A step checked after a later one (its records came late) is judged alone and leaves the pools as they are:
    # opening a pool there pooled again, at the next step, the later steps already judged (their groups counted in
    # two verdicts), and joining or closing the open pool of the later steps dropped its evidence.
    late = state.last_step is not None and step < state.last_step
    for key, name in targets:
        target = state.target(key)
        alone = report.aggregate if name == AGGREGATE_TARGET else report.components[name]
        if late:
            if alone.verdict == "insufficient_data":
                alone.message = f"{alone.message}; a late step (checked after step {state.last_step}): not pooled"
            continue
        if alone.verdict != "insufficient_data":
            target.pooled_since = None
            continue
        recovery = _trailing_recovery(target, step, acc, name, th, history, pooled_report)
        if recovery is not None:
            window, recovered, pool_acc = recovery
            first = window[0]
            _use_pooled(report, pooling, name, recovered, window, th)
            target.pooled_since = None
            if widest is None or first < widest[0]:
                widest = (first, pool_acc)
            continue
        first = target.pooled_since if target.pooled_since is not None else step
        earlier = history.before(first, step, pool_span(th)) if first < step else []
        if not earlier:
            target.pooled_since = step  # a pool of this step alone: open it for the next
            _say_pending(alone, [step], th, acc)
            continue
        first = earlier[0][0]
        pool = [*earlier, (step, acc)]
        pool_report, pool_acc = pooled_report(pool)
        steps = _given_at(pool, name)
        pooled = pool_report.aggregate if name == AGGREGATE_TARGET else pool_report.components.get(name)
        if pooled is None or pooled.verdict == "insufficient_data":
            target.pooled_since = first
            _say_pending(alone, steps, th, acc, pooled)
            continue
        target.pooled_since = None
        _use_pooled(report, pooling, name, pooled, steps, th)
        if widest is None or first < widest[0]:
            widest = (first, pool_acc)
    if widest is not None:
        pooling.acc = widest[1]
    return pooling


def _use_pooled(
    report: StepReport, pooling: Pooling, name: str, pooled: ComponentStats, steps: list[int], th: Thresholds
) -> None:
    """Report ``pooled`` (judged over ``steps``) as the target's verdict at this step."""
    pooled.pooled_steps = steps
    pooled.message = (pooled.message + " " if pooled.message else "") + pooled_note(steps, th.min_groups)
    if name == AGGREGATE_TARGET:
        report.aggregate = pooled
    else:
        report.components[name] = pooled
    pooling.pooled[name] = steps


def _trailing_recovery(
    target: Any,
    step: int,
    acc: StepAcc,
    name: str,
    th: Thresholds,
    history: StepHistory,
    judge: Callable[[list[tuple[int, StepAcc]]], tuple[StepReport, StepAcc]],
) -> tuple[list[int], ComponentStats, StepAcc] | None:
    """For a target whose dead alarm is open, at a small step: the latest steps up to this one that together make a
    verdict (the fewest, newest first), when that verdict is a recovery (share below ``recover_fraction``), as
    (their steps, the verdict, their accumulator); else None.

    Pools are cut where they happen to open: a healthy stretch of small steps that straddles two pools, each half
    dead, left both at about half zero-variance, above ``recover_fraction``, and the alarm open (or cleared a pool
    late) although the stretch alone, enough groups for a verdict, had recovered. Only a recovery is judged over
    such a window: a dead verdict is still judged over disjoint pools, each counting once towards ``raise_after``."""
    if not target.active:
        return None
    window = [(step, acc)]
    for earlier in history.newest_before(step, pool_span(th)):
        window.insert(0, earlier)
        window_report, window_acc = judge(window)
        stats = window_report.aggregate if name == AGGREGATE_TARGET else window_report.components.get(name)
        if stats is None or stats.verdict == "insufficient_data":
            continue
        if (stats.zero_variance_group_fraction or 0.0) >= th.recover_fraction or stats.verdict == "info":
            return None
        return _given_at(window, name), stats, window_acc
    return None


def _given_at(pool: list[tuple[int, StepAcc]], name: str) -> list[int]:
    """The steps of ``pool`` whose records give ``name`` (a value, a None or a NaN; the aggregate: every step). A step
    that leaves a component out adds no group to its verdict: named among the pooled steps (a component renamed and
    back, absent for a while), it made a verdict of two steps read "pooled over steps 4-11"."""
    if name == AGGREGATE_TARGET:
        return [step for step, _ in pool]
    return [step for step, acc in pool if name in acc.component_names()]


def pool_span(th: Thresholds) -> int:
    """The most consecutive steps one pool spans: :data:`MAX_POOLED_STEPS`, or ``min_groups`` when that is
    more (a step with records gives a pool one group at least)."""
    return max(MAX_POOLED_STEPS, th.min_groups)


def _say_pending(
    stats: ComponentStats, steps: list[int], th: Thresholds, acc: StepAcc, pooled: ComponentStats | None = None
) -> None:
    """Say how far the pool has got. The steps are "small" only when this step has fewer than ``min_groups``
    groups of 2+ scored rollouts; otherwise the target has a value in too few of its groups' rollouts."""
    groups = pooled.eligible_groups if pooled is not None else stats.eligible_groups
    rollout_groups = int((acc.rollout_counts() >= 2).sum())
    if not rollout_groups and acc.group_count >= th.min_groups:
        # Not a small step: many groups, none with two scored rollouts. Pooling such steps never gives a verdict,
        # and "pooling small steps: 0 of 4 groups" hid why (a group id per rollout, one rollout per prompt).
        why = (
            f"{acc.errors} of its {acc.records} records are errors, left out (see the error rate)"
            if acc.errors
            else "does each rollout get a group id of its own, or is the number of rollouts per prompt 1?"
        )
        stats.message = (
            f"{stats.message}; not a small step: each of its {acc.group_count} groups holds at most one scored "
            f"rollout, so GRPO compares nothing in them and no pool of such steps reaches a verdict; {why}"
        )
        return
    if rollout_groups < th.min_groups:
        stats.message = (
            f"{stats.message}; pooling small steps: {groups} of {th.min_groups} groups so far over {_span(steps)}"
        )
        return
    stats.message = (
        f"{stats.message}; not a small step ({rollout_groups} groups of 2+ scored rollouts), but "
        f"{label(stats.name)} has 2+ values in too few of them ({stats.missing + stats.non_finite} None, NaN or inf "
        f"at this step); pooling steps: {groups} of {th.min_groups} groups so far over {_span(steps)}"
    )


def stored_step(store: Any, run_id: str) -> Callable[[int], StepAcc | None]:
    """``StepHistory(load=...)`` for a run in a store: one earlier step's records read back. A step that
    cannot be read is left out of the pool (its own check reported it)."""

    def load(step: int) -> StepAcc | None:
        from rewardpipe.monitoring.statistics import accumulate

        try:
            _, accs = accumulate(store.iter_records(run_id, step, on_bad=lambda _bad: None))
        except Exception:  # noqa: BLE001 - a pool is judged on the steps that can be read
            return None
        return accs.get(step)

    return load
