"""Streaming statistics: one pass over records, six numbers per (step, group, component).

Per (step, group, component) the accumulator keeps count, shift, shifted sum and sum of squares, min and
max, so memory grows with the number of groups, not records. The shift (the group's first value) keeps the
variance exact for constant groups and accurate for tiny noise, which a plain sum-of-squares would lose.

Besides the six numbers, each step keeps the first :data:`SAMPLE_GROUPS` groups' rollouts in full
(ids, component values, diagnostics): the evidence for within-group causes (redundant components) and
the candidates for alarm examples. That sample is bounded per step, so memory still does not grow with
the records of a step.

Records with ``status == "error"`` are infrastructure failures: they are excluded from every statistic and
counted per step (``errors``, ``error_kinds``); each group's scored rollouts are counted too (``rollouts``: a
component with a value in one of them gives that group no comparison). A ``None`` (or NaN/inf) component value
in a scored record is excluded for that component only (``missing`` / ``non_finite``), and so is a value beyond
±MAX_SCORE_MAGNITUDE (its square would overflow the sums).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np
from pydantic import ValidationError

from rewardpipe.models import MAX_SCORE_MAGNITUDE, Record, field_error
from rewardpipe.monitoring.thresholds import MonitorInputError, zero_variance_bound
from rewardpipe.store import BadObject


class _AggregateKey(str):
    """The internal key of the aggregate among component names: a ``str`` (it sorts and prints as one) equal to
    itself only. Any text can be a component name, ``"\\x00aggregate"`` included (JSON carries a NUL as
    ``\\u0000``): a key merely unlikely to clash merged such a component into the aggregate's numbers, where
    it was never judged (a constant component hidden, the aggregate's figures wrong)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return other is self

    def __ne__(self, other: object) -> bool:
        return other is not self

    # object's own hash, as the C slot: a Python-level __hash__ ran on every look-up of the aggregate in the per-group
    # dicts, a function call per record
    __hash__ = object.__hash__

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return _aggregate_key, ()  # unpickled (a worker process) as the one key, not a look-alike


def _aggregate_key() -> str:
    return AGG


# Internal key of the aggregate inside per-group accumulators; it never leaves the monitoring package and equals
# no component name, whatever its text.
AGG: str = _AggregateKey("\x00aggregate")


#: Groups per step whose rollouts are kept in full (for causes and alarm examples).
SAMPLE_GROUPS = 16


class SampledRollout:
    """One rollout of a sampled group, as much as causes and alarm examples need."""

    __slots__ = ("aggregate", "components", "error", "group_id", "metrics", "rollout_id", "status", "task_id")

    def __init__(self, rec: Record) -> None:
        self.rollout_id = rec.rollout_id
        self.group_id = rec.group_id
        self.task_id = rec.task_id
        self.status = rec.status
        self.components = rec.components
        self.aggregate = rec.aggregate
        self.metrics = rec.metrics
        self.error = rec.error


#: The metrics an alarm example's reason reads (rewardpipe.monitoring.examples: _execution_reason, _behaviour,
#: _gate_progress): the only ones a group's lead keeps beyond the sample.
EXAMPLE_METRICS = (
    "assistant_turns",
    "committed",
    "exec_reason",
    "exec_status",
    "questions",
    "tests_passed",
    "tests_total",
)


class Leads:
    """Each group's first scored rollout (:attr:`StepAcc.leads`), as little as an alarm example needs of it.

    A :class:`SampledRollout` per group held the record's components and metrics dicts, its float objects and
    strings: about 800 bytes a group, a third of the streaming monitor's memory (round thirty-six, fourth wave).
    A lead added with :meth:`add` keeps its rollout id, its task id (one string per task), its component names
    (one tuple per distinct set), its aggregate and component values as 8-byte floats in one array, and only the
    metrics an example reads (:data:`EXAMPLE_METRICS`); :meth:`get` rebuilds an equal :class:`SampledRollout`.
    A lead whose values are not all floats (a None, an int a caller built by hand) or that carries an error is
    kept whole, as is a sampled group's (already held) or a loader (the columnar readers read a record only when
    asked), stored with ``leads[group] = ...``.
    """

    __slots__ = ("_at", "_metrics", "_names", "_rollout_ids", "_shared", "_starts", "_task_ids", "_values")

    def __init__(self) -> None:
        # group -> its row in the arrays below, or a whole rollout, or a loader of one (first added first)
        self._at: dict[GroupKey, int | SampledRollout | Callable[[], SampledRollout]] = {}
        self._rollout_ids: list[str] = []
        self._task_ids: list[str] = []
        self._names: list[tuple[str, ...]] = []
        self._metrics: list[dict[str, Any] | None] = []
        self._starts = array("q")  # where a row's values start in _values: its aggregate, then its components
        self._values = array("d")
        self._shared: dict[Any, Any] = {}  # one copy of each task id and each tuple of component names

    def add(self, rec: Record) -> None:
        """Keep ``rec`` (a scored record) as its group's lead, compactly when its values are all floats."""
        components, aggregate = rec.components, rec.aggregate
        if (
            rec.error is not None
            or type(aggregate) is not float
            or any(type(v) is not float for v in components.values())
        ):
            self._at[rec.group_id] = SampledRollout(rec)
            return
        self._at[rec.group_id] = len(self._rollout_ids)
        self._rollout_ids.append(rec.rollout_id)
        self._task_ids.append(self._shared.setdefault(rec.task_id, rec.task_id))
        names = tuple(components)
        self._names.append(self._shared.setdefault(names, names))
        metrics = rec.metrics
        kept = {key: metrics[key] for key in EXAMPLE_METRICS if key in metrics} if metrics else None
        self._metrics.append(kept or None)
        self._starts.append(len(self._values))
        self._values.append(aggregate)
        self._values.extend(components.values())  # type: ignore[arg-type] # (each a float: checked above)

    def __setitem__(self, group: GroupKey, lead: SampledRollout | Callable[[], SampledRollout]) -> None:
        self._at[group] = lead

    def __iter__(self) -> Iterator[GroupKey]:
        return iter(self._at)

    def __contains__(self, group: object) -> bool:
        return group in self._at

    def __len__(self) -> int:
        return len(self._at)

    def pop(self, group: GroupKey) -> None:
        self._at.pop(group, None)

    def task_and_rollout(self, group: GroupKey) -> tuple[str, str] | None:
        """The task id and rollout id of ``group``'s lead (None without one), without rebuilding it."""
        at = self._at.get(group)
        if at is None:
            return None
        if isinstance(at, int):
            return self._task_ids[at], self._rollout_ids[at]
        lead = self.get(group)
        return (lead.task_id, lead.rollout_id) if lead is not None else None

    def get(self, group: GroupKey) -> SampledRollout | None:
        """The lead of ``group`` (None without one); a loader is called once and its rollout kept."""
        at = self._at.get(group)
        if at is None or isinstance(at, SampledRollout):
            return at
        if not isinstance(at, int):
            self._at[group] = loaded = at()
            return loaded
        start = self._starts[at]
        names = self._names[at]
        values = self._values[start : start + 1 + len(names)]
        lead = SampledRollout.__new__(SampledRollout)
        lead.rollout_id = self._rollout_ids[at]
        lead.group_id = group  # type: ignore[assignment] # (add keys a row by its record's group id)
        lead.task_id = self._task_ids[at]
        lead.status = "scored"
        lead.aggregate = values[0]
        lead.components = dict(zip(names, values[1:], strict=True))
        lead.metrics = dict(self._metrics[at] or {})
        lead.error = None
        return lead


@dataclass
class GroupTable:
    """One component's six numbers for every group of a step, in the step's group order (first seen first).

    ``n`` is 0 for a group where the component has no value. ``s1``/``s2`` are the sums of ``x - shift`` and
    its square, added in record order, where ``shift`` is the group's first value; ``minimum``/``maximum``
    hold +0.0 for either zero (a -0.0 and a 0.0 are the same reward).
    """

    n: np.ndarray  # int64
    shift: np.ndarray
    s1: np.ndarray
    s2: np.ndarray
    minimum: np.ndarray
    maximum: np.ndarray


_NO_VALUES = (0, 0.0, 0.0, 0.0, math.nan, math.nan)


# A group's key in an accumulator: its group id, or (step, its key in that step's accumulator) in one pooled
# across steps (pooling.merge).
GroupKey = str | tuple[int, "GroupKey"]


#: The metric an environment with an LLM-played user reports: how many of its replies the rule-based user's replaced
#: (ask_before_coding's ``llm_user_fallbacks``).
USER_FALLBACKS = "llm_user_fallbacks"


def replaced_user(metrics: Mapping[str, Any]) -> bool:
    """Whether a record's metrics say the rule-based user replaced the LLM-played one at least once (a positive
    number; a bool or text is not one)."""
    value = metrics.get(USER_FALLBACKS)
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


class StepAcc:
    """Everything the monitor keeps about one step while it reads records."""

    __slots__ = (
        "error_kinds",
        "errors",
        "groups",
        "inprocess",
        "leads",
        "missing",
        "non_finite",
        "records",
        "rollouts",
        "sample",
        "scored_in_group",
        "set_aside",
        "set_aside_records",
        "table",
        "user_fallbacks",
        "weights",
    )

    def __init__(self) -> None:
        self.records = 0
        self.inprocess = 0  # records scored from the "inprocess" trust mode (not a reward source)
        self.user_fallbacks = 0  # records where the rule-based user replaced the LLM-played user (replaced_user)
        self.errors = 0
        self.error_kinds: dict[str, int] = {}
        # group_id -> {component -> [n, shift, sum(x - shift), sum((x - shift)^2), min, max]} while reading;
        # after :meth:`freeze` only its keys (the step's groups, first seen first) are read.
        self.groups: dict[GroupKey, Any] = {}
        self.missing: dict[str, int] = {}
        self.non_finite: dict[str, int] = {}
        # component -> weight, as the records of the step declare it (read once per group: a run's
        # weights are fixed, so this costs nothing per record)
        self.weights: dict[str, float] = {}
        self.sample: dict[GroupKey, list[SampledRollout]] = {}  # group_id -> its rollouts, first SAMPLE_GROUPS groups
        # group_id -> its first scored rollout, for every group (or a loader of it: the columnar readers load a
        # record only when asked). The sample is the first groups only: an alarm on a component that those groups
        # do not show constant (another task's groups, the few that still vary) took its examples from here, or
        # had none (round thirty-six); one rollout a group keeps memory growing with groups, not records.
        # (kept compactly: :class:`Leads`).
        self.leads = Leads()
        self.table: dict[str, GroupTable] = {}  # component (and AGG) -> per-group numbers, set by freeze()
        # group_id -> its scored rollouts while reading; after :meth:`freeze`, ``rollouts`` holds them in group
        # order (what a component's count of values is compared with: a value in 1 of 4 rollouts is no comparison)
        self.scored_in_group: dict[GroupKey, int] = {}
        self.rollouts: np.ndarray | None = None
        # groups set aside (their scored records hold several tasks: :func:`set_aside_entry`), and their scored
        # records, which no statistic of the step includes
        self.set_aside: list[dict[str, Any]] = []
        self.set_aside_records = 0

    def lead(self, group: GroupKey) -> SampledRollout | None:
        """The first scored rollout of ``group`` (None when it has none, or was set aside)."""
        return self.leads.get(group)

    def drop_components(self, names: list[str]) -> None:
        """Leave ``names`` out of this step (before :meth:`freeze` or after): no figure, verdict or alarm of theirs."""
        for name in names:
            self.table.pop(name, None)
            self.missing.pop(name, None)
            self.non_finite.pop(name, None)
            self.weights.pop(name, None)
            for group in self.groups.values():
                if isinstance(group, dict):
                    group.pop(name, None)

    def rollout_counts(self) -> np.ndarray:
        """Scored rollouts of every group, in group order. An accumulator filled without them (by hand) falls back
        on the most values any component (or the aggregate) has in the group."""
        if self.rollouts is not None and len(self.rollouts) == len(self.groups):
            return self.rollouts
        counts = [table.n for table in self.table.values()]
        return np.maximum.reduce(counts) if counts else np.zeros(len(self.groups), dtype=np.int64)

    @property
    def group_count(self) -> int:
        return len(self.groups)

    def component_names(self) -> list[str]:
        """Components seen at this step (with a value, a None or a non-finite value), sorted."""
        names: set[str] = set(self.table)
        for group in self.groups.values():
            if group:
                names.update(group)
        names.update(self.missing)
        names.update(self.non_finite)
        names.discard(AGG)
        return sorted(names)

    def freeze(self) -> None:
        """Turn the streaming per-group accumulators into one :class:`GroupTable` per component."""
        names: dict[str, None] = {}
        for group in self.groups.values():
            names.update(dict.fromkeys(group))
        for name in names:
            rows = np.array([group.get(name, _NO_VALUES) for group in self.groups.values()], dtype=np.float64)
            self.table[name] = GroupTable(
                n=rows[:, 0].astype(np.int64),
                shift=rows[:, 1],
                s1=rows[:, 2],
                s2=rows[:, 3],
                minimum=rows[:, 4] + 0.0,
                maximum=rows[:, 5] + 0.0,
            )
        self.rollouts = np.array([self.scored_in_group.get(key, 0) for key in self.groups], dtype=np.int64)
        self.groups = dict.fromkeys(self.groups)


def validated_records(
    records: Iterable[Record | Mapping[str, Any]], on_bad: Callable[[BadObject], None] | None = None
) -> Iterator[tuple[int, Record]]:
    """``(index, Record)`` for each of ``records``; a plain dict that is not a valid record goes to ``on_bad`` as
    ``record #<index>`` (it raises the ``ValidationError`` when there is no ``on_bad``)."""
    for index, rec in enumerate(records):
        if not isinstance(rec, Record):
            try:
                rec = Record.model_validate(rec)
            except ValidationError as exc:
                if on_bad is None:
                    raise
                on_bad(BadObject(f"record #{index}", field_error(exc.errors()[0], "record")))
                continue
        yield index, rec


def delivery_key(record: Record | Mapping[str, Any]) -> tuple[Any, Any, Any, Any]:
    """What makes two records one delivery of the same rollout: (run, step, group, rollout), the store's key.

    A record (or a record's JSON object: ``step`` defaults to 0) delivered twice with this key counts once,
    the last copy, in :func:`last_copies` and wherever `rewardpipe monitor` and `report` read records."""
    if isinstance(record, Record):
        return (record.run_id, record.step, record.group_id, record.rollout_id)
    return (record["run_id"], record.get("step", 0), record["group_id"], record["rollout_id"])


def last_copies(numbered: Iterable[tuple[int, Record]], duplicates: list[int]) -> Iterator[Record]:
    """Each delivery once: the last copy of every :func:`delivery_key`, in the order of the kept copies, as
    the store would keep it (same key, last write wins); the dropped copies' numbers go to ``duplicates``.
    Holds every distinct record until the input ends (only the last copy is known to be the last then).

    The kept copies, each the last of its key, come in input order. A dict of every key (a tuple per record)
    cost more memory than the records' statistics and half the monitor's time (round thirty-six): the keys are
    first compared by hash, 8 bytes a record, and only records whose hash repeats (a repeated delivery, or a
    rare collision) are compared by key."""
    numbers = array("q")
    records: list[Record] = []
    for number, record in numbered:
        numbers.append(number)
        records.append(record)
    hashes = np.fromiter(map(_key_hash, records), dtype=np.int64, count=len(records))
    order = np.argsort(hashes, kind="stable")
    ordered = hashes[order]
    repeated = np.zeros(len(records), dtype=bool)
    same = ordered[1:] == ordered[:-1]
    repeated[order[1:][same]] = True
    repeated[order[:-1][same]] = True
    dropped = np.zeros(len(records), dtype=bool)
    kept: dict[tuple[Any, Any, Any, Any], int] = {}
    for i in np.flatnonzero(repeated).tolist():  # in input order, as one dict of every key would see them
        key = delivery_key(records[i])
        if key in kept:
            earlier = kept.pop(key)
            duplicates.append(numbers[earlier])
            dropped[earlier] = True
        kept[key] = i
    del kept, hashes, order, ordered, repeated
    if not dropped.any():
        yield from records
        return
    for i in np.flatnonzero(~dropped).tolist():
        yield records[i]


_RECORD_KEY = attrgetter("run_id", "step", "group_id", "rollout_id")


def _key_hash(record: Record | Mapping[str, Any]) -> int:
    """The hash of :func:`delivery_key` (equal keys, equal hashes)."""
    return hash(_RECORD_KEY(record) if isinstance(record, Record) else delivery_key(record))


#: Set-aside groups named in full in a result (the others are counted): a hostile file can hold millions.
SET_ASIDE_SHOWN = 100


#: Most entries of one list a result's JSON carries (``monitor --json``, ``report --json``, the verdict an AWS check
#: stores): its groups set aside (and the tasks of one of them), its unreadable records. A run of thousands of
#: mixed-task groups or a file of a million bad lines made a JSON of megabytes. The rest are counted
#: (``<list>_count``, a set-aside group's ``task_count``) and said to be left out (``<list>_left_out``).
MAX_LISTED = 100


def listed(name: str, entries: list[Any]) -> dict[str, Any]:
    """A list of a result's JSON under ``name``: its first :data:`MAX_LISTED` entries, their exact count
    (``<name>_count``) and how many of them are not listed (``<name>_left_out``, 0 when none is)."""
    return {
        name: entries[:MAX_LISTED],
        f"{name}_count": len(entries),
        f"{name}_left_out": max(len(entries) - MAX_LISTED, 0),
    }


def set_aside_entry(step: int, group: str, tasks: Mapping[str, tuple[str, int]]) -> dict[str, Any]:
    """What a result says of a group set aside because its scored records hold several tasks (``tasks``: each
    task -> (its first rollout in the group, its scored records there)).

    A GRPO group is the rollouts of one prompt. Two tasks' rollouts filed under one group id (group ids
    numbered per task, ``g0`` for each) would be judged as one group: a component constant inside each task's
    group but different between the tasks looked alive, and was never alarmed. Refusing the whole input for it
    stopped the monitoring of every other group, so the group is left out of every statistic (as an error
    record is: it can neither make a component look alive nor count as a group without signal) and named here.
    ``rewardpipe score`` refuses such a line for the same reason. ``tasks`` lists the first
    :data:`MAX_LISTED` tasks (``task_count`` counts them all)."""
    names = sorted(tasks)
    shown = ", ".join(f"'{task[:80]}'" for task in names[:5]) + (", ..." if len(names) > 5 else "")
    return {
        "step": step,
        "group_id": group,
        "records": sum(count for _, count in tasks.values()),
        "tasks": [{"task_id": t, "records": tasks[t][1], "first_rollout_id": tasks[t][0]} for t in names[:MAX_LISTED]],
        "task_count": len(names),
        "reason": f"group '{group[:80]}' of step {step} holds rollouts of {len(names)} tasks ({shown}): a group is "
        f"the rollouts of one prompt; give each prompt's rollouts a group_id of their own",
    }


def accumulate(
    records: Iterable[Record | Mapping[str, Any]], on_bad: Callable[[BadObject], None] | None = None
) -> tuple[str | None, dict[int, StepAcc]]:
    """Read ``records`` once (any step order) into one :class:`StepAcc` per step; refuse mixed runs.

    A plain dict that is not a valid record goes to ``on_bad`` as ``record #<index>`` (it raises the
    ``ValidationError`` when there is no ``on_bad``).
    """
    return accumulate_valid(map(itemgetter(1), validated_records(records, on_bad)))


def accumulate_valid(records: Iterable[Record]) -> tuple[str | None, dict[int, StepAcc]]:
    """:func:`accumulate` of records already checked by :func:`validated_records` (``monitor_records`` drops
    repeated deliveries from them first): checking each again cost a generator step per record for nothing."""
    steps: dict[int, StepAcc] = {}
    run_id: str | None = None
    other_runs: set[str] = set()
    # A group found holding scored records of a task other than its lead's (its first scored rollout, StepAcc.leads)
    # moves to ``mixed`` (task -> (first rollout id, scored records)) and is set aside
    mixed: dict[tuple[int, str], dict[str, list[Any]]] = {}
    # (step, group) -> {(name, "missing" or "non_finite"): values counted}, to take back if it is set aside
    gaps: dict[tuple[int, str], dict[tuple[str, str], int]] = {}
    lost_slots: dict[int, int] = {}  # step -> sample slots of groups set aside (the columnar reader's count too)
    for rec in records:
        if rec.run_id != run_id:
            if run_id is None:
                run_id = rec.run_id
            else:
                other_runs.add(rec.run_id)
        acc = steps.get(rec.step)
        if acc is None:
            acc = steps[rec.step] = StepAcc()
        acc.records += 1
        metrics = rec.metrics
        if metrics:  # (most records carry none: two look-ups saved per record)
            if metrics.get("exec_mode") == "inprocess":
                acc.inprocess += 1
            if replaced_user(metrics):
                acc.user_fallbacks += 1
        gid = rec.group_id
        key = (rec.step, gid)
        lead: tuple[str, str] | None = None  # the task id and rollout id of the group's lead
        # (an error record's task is left out, as the record is: the Nova bridge files its own as "unknown")
        if rec.status == "scored":
            if mixed and key in mixed:
                _count_task(mixed[key], rec)
                acc.set_aside_records += 1
                continue
            lead = acc.leads.task_and_rollout(gid)
            if lead is not None and lead[0] != rec.task_id:
                scored = acc.scored_in_group[gid]
                mixed[key] = {lead[0]: [lead[1], scored]}
                _count_task(mixed[key], rec)
                if _set_aside(acc, gid, scored + 1, gaps.pop(key, {})):
                    lost_slots[rec.step] = lost_slots.get(rec.step, 0) + 1
                continue
        elif mixed and key in mixed:
            acc.errors += 1
            kind = rec.error.kind if rec.error is not None else "unknown"
            acc.error_kinds[kind] = acc.error_kinds.get(kind, 0) + 1
            continue
        group = acc.groups.get(gid)
        if group is None:
            group = acc.groups[gid] = {}
            acc.weights.update(rec.weights)
            if len(acc.sample) + lost_slots.get(rec.step, 0) < SAMPLE_GROUPS:
                acc.sample[gid] = []
        sampled = acc.sample.get(gid)
        if sampled is not None:
            sampled.append(SampledRollout(rec))
        if rec.status != "scored":
            acc.errors += 1
            kind = rec.error.kind if rec.error is not None else "unknown"
            acc.error_kinds[kind] = acc.error_kinds.get(kind, 0) + 1
            continue
        acc.scored_in_group[gid] = acc.scored_in_group.get(gid, 0) + 1
        if lead is None:  # (read above: nothing since changed this group's)
            if sampled:
                acc.leads[gid] = sampled[-1]  # (held by the sample already)
            else:
                acc.leads.add(rec)
        for name, value in (*rec.components.items(), (AGG, rec.aggregate)):
            if value is None:
                acc.missing[name] = acc.missing.get(name, 0) + 1
                gap = gaps.setdefault(key, {})
                gap[name, "missing"] = gap.get((name, "missing"), 0) + 1
                continue
            if not -MAX_SCORE_MAGNITUDE <= value <= MAX_SCORE_MAGNITUDE:  # NaN, ±inf, or squares that overflow
                acc.non_finite[name] = acc.non_finite.get(name, 0) + 1
                gap = gaps.setdefault(key, {})
                gap[name, "non_finite"] = gap.get((name, "non_finite"), 0) + 1
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
    for (step, group), tasks in sorted(mixed.items()):
        steps[step].set_aside.append(set_aside_entry(step, group, {t: (r, n) for t, (r, n) in tasks.items()}))
    for acc in steps.values():
        acc.freeze()
    return run_id, steps


def _count_task(tasks: dict[str, list[Any]], rec: Record) -> None:
    entry = tasks.get(rec.task_id)
    if entry is None:
        tasks[rec.task_id] = [rec.rollout_id, 1]
    else:
        entry[1] += 1


def _set_aside(acc: StepAcc, group: str, records: int, gaps: Mapping[tuple[str, str], int]) -> bool:
    """Take a group found holding several tasks out of ``acc``: its figures, its sample and the missing or
    non-finite values its records added (its error records stay error records). True if it held a sample slot
    (which stays used, as the columnar reader counts it)."""
    acc.groups.pop(group, None)
    acc.scored_in_group.pop(group, None)
    acc.leads.pop(group)
    acc.set_aside_records += records
    for (name, kind), count in gaps.items():
        counts = acc.missing if kind == "missing" else acc.non_finite
        counts[name] -= count
        if not counts[name]:
            del counts[name]
    return acc.sample.pop(group, None) is not None


def component_figures(name: str, acc: StepAcc, epsilon: float) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """The step's figures for one component, the mean of every zero-variance group (for the cause; zero variance as
    :func:`rewardpipe.monitoring.thresholds.zero_variance_bound` says, by the component's weight and scale), and
    ``|weight| * std`` of every group of the step in group order (0.0 where the component has fewer than
    two values), for :func:`advantage_share_means`.

    Batch mean/std are combined exactly from the per-group (n, mean, var); groups with fewer than two
    values are left out of the within-group figures ("eligible" groups have at least two). Everything is
    computed from the step's :class:`GroupTable`, whichever reader filled it, so the figures do not depend
    on how the records arrived.
    """
    table = acc.table.get(name)
    groups_total = acc.group_count
    stats: dict[str, Any] = {
        "values": 0,
        "missing": acc.missing.get(name, 0),
        "non_finite": acc.non_finite.get(name, 0),
        "groups": 0,
        "eligible_groups": 0,
        "zero_variance_groups": 0,
        "mean": None,
        "std": None,
        "min": None,
        "max": None,
        "zero_variance_group_fraction": None,
        "within_group_std_mean": None,
        "constant_value": None,
    }
    if table is None:
        return stats, np.empty(0), np.zeros(groups_total)
    n = table.n
    present = n > 0
    weight = acc.weights.get(name, 1.0)
    group_mean, var, std, magnitude, zero = _group_spread(table, epsilon, weight)
    eligible = n >= 2
    with np.errstate(invalid="ignore"):
        # zero only at the values' scale: a spread that would count as varying on values within +-1 (the messages
        # say so: a large offset, not a scorer that never moves; and no weighted changes that cancel)
        at_scale = zero & (std > zero_variance_bound(epsilon, weight, 1.0))
    if at_scale.any():
        stats["scale_zero_groups"] = (int(at_scale.sum()), float(np.median(magnitude[at_scale])))
    with np.errstate(over="ignore", invalid="ignore"):  # a weight near 1e308: inf, and no share (see below)
        sizes = abs(weight) * std
    n_total = int(n[present].sum())
    stats.update(
        values=n_total,
        groups=int(present.sum()),
        eligible_groups=int(eligible.sum()),
        zero_variance_groups=int(zero.sum()),
    )
    if n_total:
        counts, means = n[present], group_mean[present]
        mean = float((counts * means).sum()) / n_total
        m2 = float((counts * (var[present] + (means - mean) ** 2)).sum())
        stats.update(
            mean=mean,
            std=math.sqrt(max(m2 / n_total, 0.0)),
            min=float(table.minimum[present].min()),
            max=float(table.maximum[present].max()),
        )
    if stats["eligible_groups"]:
        stats["zero_variance_group_fraction"] = stats["zero_variance_groups"] / stats["eligible_groups"]
        stats["within_group_std_mean"] = float(std[eligible].sum()) / stats["eligible_groups"]
    return stats, group_mean[zero], sizes


def _group_spread(
    table: GroupTable, epsilon: float, weight: float | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per group: mean, population variance, std (0.0 below two values), largest magnitude and whether it is
    zero variance (2+ values within :func:`~rewardpipe.monitoring.thresholds.zero_variance_bound`)."""
    n = table.n
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_d = table.s1 / n
        var = np.maximum(table.s2 / n - mean_d * mean_d, 0.0)
    eligible = n >= 2
    std = np.where(eligible, np.sqrt(np.where(eligible, var, 0.0)), 0.0)
    with np.errstate(invalid="ignore"):  # NaN magnitude: a group without a value, never eligible
        magnitude = np.maximum(np.abs(table.minimum), np.abs(table.maximum))
        zero = eligible & (std <= zero_variance_bound(epsilon, weight, magnitude))
    return table.shift + mean_d, var, std, magnitude, zero


def zero_variance_groups(name: str, acc: StepAcc, epsilon: float, *, varying: bool = False) -> list[GroupKey]:
    """The keys of the step's groups where ``name`` (or :data:`AGG`) is zero variance, in group order: the groups
    its figures count as giving GRPO nothing (alarm examples are taken from them); ``varying``: those of 2+ values
    where it is not."""
    table = acc.table.get(name)
    if table is None:
        return []
    zero = _group_spread(table, epsilon, acc.weights.get(name, 1.0))[4]
    chosen = (table.n >= 2) & ~zero if varying else zero
    keys = list(acc.groups)
    return [keys[i] for i in np.flatnonzero(chosen).tolist() if i < len(keys)]


def lone_value_mask(acc: StepAcc, table: GroupTable | None) -> np.ndarray:
    """Per group, whether it holds 2+ scored rollouts but a finite value of the component (``table``) in one only:
    no comparison for GRPO (counted with the zero-variance groups; cause ``sparse_values``)."""
    rollouts = acc.rollout_counts()
    return (table.n == 1) & (rollouts >= 2) if table is not None else np.zeros(len(rollouts), dtype=bool)


def lone_value_groups(name: str, acc: StepAcc) -> list[GroupKey]:
    """The keys of the groups of :func:`lone_value_mask` for ``name``, in group order."""
    keys = list(acc.groups)
    return [keys[i] for i in np.flatnonzero(lone_value_mask(acc, acc.table.get(name))).tolist() if i < len(keys)]


def advantage_share_means(group_sizes: dict[str, np.ndarray]) -> dict[str, float]:
    """Per component, its mean share of the GRPO advantage over the groups that have an advantage.

    ``group_sizes``: per component, ``|weight| * std`` in every group of the step (same group order for
    all, as :func:`component_figures` returns it). A group's shares are its sizes over their sum, as in
    :func:`rewardpipe.monitoring.advantage.advantage_shares`, computed column-wise here because a step can
    hold tens of thousands of groups.
    """
    if not group_sizes:
        return {}
    sizes = np.vstack(list(group_sizes.values()))
    with np.errstate(over="ignore", invalid="ignore"):
        totals = sizes.sum(axis=0)
    signal = (totals > 0.0) & np.isfinite(totals)  # a group whose sizes overflow has no share to give
    count = int(signal.sum())
    if not count:
        return {}
    shares = sizes[:, signal] / totals[signal]
    return {name: float(shares[i].sum()) / count for i, name in enumerate(group_sizes)}
