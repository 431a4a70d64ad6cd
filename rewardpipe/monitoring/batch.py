"""Records as columns: the monitor's fast path, with no model object per record.

A :class:`RecordBatch` holds what the monitor and the report need of every record as columns (ids, step,
status, one float array per component, ...). :func:`accumulate_batch` turns it into the same per-step
:class:`~rewardpipe.monitoring.statistics.StepAcc` the record-by-record pass builds, with the per-group
sums added in record order, so every figure, verdict and alarm is identical whichever path read the records.

Readers (:mod:`rewardpipe.monitoring.fastread`) only build a batch when they can vouch for every record: a
line they cannot vouch for sends the caller back to the careful per-record path, which names the file,
line and field.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from rewardpipe.monitoring.columns import EXAMPLES_PER_STEP, RunColumns
from rewardpipe.monitoring.statistics import AGG, SAMPLE_GROUPS, GroupTable, SampledRollout, StepAcc, set_aside_entry
from rewardpipe.monitoring.thresholds import MonitorInputError


class Labels:
    """A text column as dense codes (per row) and the text of each code. ``names`` may be given as a
    callable that produces them, called only if a name is ever read (a million rollout ids are only
    ever compared by code). ``distinct``, when known, is how many names there are, every one of them
    used by some row (so codes are dense in ``range(distinct)``): set by the readers that build the
    codes, dropped by :meth:`take`, since a subset of the rows may not use every name."""

    def __init__(
        self, codes: np.ndarray, names: list[str] | Callable[[], list[str]], distinct: int | None = None
    ) -> None:
        self.codes = codes
        self._names = names
        self.distinct = distinct

    @property
    def names(self) -> list[str]:
        if callable(self._names):
            self._names = self._names()
        return self._names

    @classmethod
    def of(cls, values: Any) -> Labels:
        codebook: dict[Any, int] = {}
        for value in dict.fromkeys(values):
            codebook[value] = len(codebook)
        return cls(
            np.fromiter(map(codebook.__getitem__, values), dtype=np.int64, count=len(values)),
            list(codebook),
            len(codebook),
        )

    def take(self, rows: np.ndarray) -> Labels:
        return Labels(self.codes[rows], self._names)

    def __getitem__(self, row: int) -> str:
        return self.names[int(self.codes[row])]


@dataclass
class RecordBatch:
    """Rows in source order. ``values[name]`` is NaN where the record has no number for the component
    (absent, None, or an error record); ``nulls[name]`` is True where the record gave it as None.
    The aggregate is ``values[AGG]`` / ``nulls[AGG]``. ``weights[name]`` is NaN where a record does not
    declare that weight."""

    run_ids: Labels
    steps: np.ndarray  # int64
    group_ids: Labels
    rollout_ids: Labels
    task_ids: Labels
    scored: np.ndarray  # bool
    error_kinds: Labels  # the error's kind ("unknown" without one); read for error rows only
    inprocess: np.ndarray  # bool: metrics.exec_mode == "inprocess"
    weights: dict[str, np.ndarray]
    values: dict[str, np.ndarray]
    nulls: dict[str, np.ndarray]
    positions: np.ndarray  # where each row came from (a 1-based line or row number), for messages
    load: Callable[[int], Any]  # position -> the full Record (only for the few sampled rollouts)
    duplicates: list[int] = field(default_factory=list)  # positions of dropped repeated deliveries
    position_label: str = "line"  # what a position counts: "line" (JSONL) or "row" (Parquet)
    #: bool: the record's metrics say the rule-based user replaced the LLM-played one (None: no record does)
    user_fallbacks: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.steps)

    def take(self, rows: np.ndarray) -> RecordBatch:
        """The rows at ``rows`` (indices, ascending), same everything else."""
        return RecordBatch(
            run_ids=self.run_ids.take(rows),
            steps=self.steps[rows],
            group_ids=self.group_ids.take(rows),
            rollout_ids=self.rollout_ids.take(rows),
            task_ids=self.task_ids.take(rows),
            scored=self.scored[rows],
            error_kinds=self.error_kinds.take(rows),
            inprocess=self.inprocess[rows],
            user_fallbacks=None if self.user_fallbacks is None else self.user_fallbacks[rows],
            weights={k: v[rows] for k, v in self.weights.items()},
            values={k: v[rows] for k, v in self.values.items()},
            nulls={k: v[rows] for k, v in self.nulls.items()},
            positions=self.positions[rows],
            load=self.load,
            duplicates=self.duplicates,
            position_label=self.position_label,
        )

    def dedupe(self) -> RecordBatch:
        """Keep the last copy of each (run, step, group, rollout); the dropped copies' positions go to
        ``duplicates`` (as the store would: the key is the same, the last write wins)."""
        if self.rollout_ids.distinct == len(self):
            return self  # every row has its own rollout id: nothing can be repeated
        key = _combined(self.run_ids, self.steps, self.group_ids, self.rollout_ids)
        unique, last_reversed = np.unique(key[::-1], return_index=True)
        if len(unique) == len(self):
            return self
        keep = np.zeros(len(self), dtype=bool)
        keep[len(self) - 1 - last_reversed] = True
        out = self.take(np.flatnonzero(keep))
        out.duplicates = self.duplicates + self.positions[~keep].tolist()
        return out

    def only(self, run_id: str | None = None, step: int | None = None) -> RecordBatch:
        """The rows of one run and/or one step."""
        mask = np.ones(len(self), dtype=bool)
        if run_id is not None:
            codes = [code for code, name in enumerate(self.run_ids.names) if name == run_id]
            mask &= np.isin(self.run_ids.codes, codes)
        if step is not None:
            mask &= self.steps == step
        return self if mask.all() else self.take(np.flatnonzero(mask))

    def group_codes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(a dense code per row for its (step, group_id), first seen first; each code's step; each code's
        group_id code)."""
        codes, _ = _first_seen_codes(_combined(self.steps, self.group_ids))
        rows = np.full(int(codes.max()) + 1 if len(codes) else 0, len(codes), dtype=np.int64)
        np.minimum.at(rows, codes, np.arange(len(codes)))  # each code's first row
        return codes, self.steps[rows], self.group_ids.codes[rows]


def _combined(*columns: np.ndarray | Labels) -> np.ndarray:
    """One int64 key per row that is equal exactly when every column is equal (dense re-coding keeps the
    product of the cardinalities small; a structured view would work too, but sorts far slower). Labels
    whose codes are known to be dense, and integer columns spanning a range no wider than the rows, are
    used as they are: only other columns need the sort that re-codes them."""
    first = columns[0]
    rows = len(first.codes if isinstance(first, Labels) else first)
    key = np.zeros(rows, dtype=np.int64)
    span = 1
    for column in columns:
        codes, size = _dense(column, rows)
        if span * max(size, 1) >= 2**62:  # re-densify the key so far before it could overflow
            _, key = np.unique(key, return_inverse=True)
            key = key.reshape(-1)
            span = int(key.max()) + 1 if len(key) else 1
        key = key * size + codes
        span *= max(size, 1)
    return key


def _dense(column: np.ndarray | Labels, rows: int) -> tuple[np.ndarray, int]:
    """(codes in ``range(size)`` that are equal exactly where the column's values are, size)."""
    if isinstance(column, Labels):
        if column.distinct is not None:
            return column.codes, column.distinct
        column = column.codes
    if rows and column.dtype.kind in "iu":
        low, high = int(column.min()), int(column.max())
        if high - low < max(rows, 1):
            return column - low, high - low + 1
    values, codes = np.unique(column, return_inverse=True)
    return codes.reshape(-1), len(values)


def accumulate_batch(batch: RecordBatch) -> tuple[str | None, dict[int, StepAcc]]:
    """Per step, the :class:`StepAcc` that :func:`~rewardpipe.monitoring.statistics.accumulate` builds from
    the same records in the same order (a group whose scored records hold several tasks set aside alike);
    refuse mixed runs."""
    rows = len(batch)
    if rows == 0:
        return None, {}
    run_id = batch.run_ids[0]
    runs = {batch.run_ids.names[code] for code in np.unique(batch.run_ids.codes).tolist()}
    if len(runs) > 1:
        raise MonitorInputError(
            f"records come from several runs ({', '.join(sorted(runs))}): monitor one run at a time (--run-id)"
        )
    codes, group_step, group_name = batch.group_codes()
    groups = len(group_step)
    mixed, entries = _mixed_groups(batch, codes, group_step, group_name, groups)
    judged = batch.scored & ~mixed[codes]  # the scored rows of the groups not set aside
    first_row = np.full(groups, rows, dtype=np.int64)
    np.minimum.at(first_row, codes, np.arange(rows))
    step_values, step_of_row = np.unique(batch.steps, return_inverse=True)
    step_of_row = step_of_row.reshape(-1)
    order = np.argsort(group_step, kind="stable")  # each step's groups, first seen first
    bounds = [*np.searchsorted(group_step[order], step_values, side="left").tolist(), groups]

    fallbacks = batch.user_fallbacks if batch.user_fallbacks is not None else np.zeros(rows, dtype=bool)
    per_step = {
        name: np.bincount(step_of_row, weights=mask, minlength=len(step_values)).astype(np.int64)
        for name, mask in (
            ("records", np.ones(rows)),
            ("errors", ~batch.scored),
            ("inprocess", batch.inprocess),
            ("user_fallbacks", fallbacks),
        )
    }
    set_aside = np.bincount(step_of_row, weights=batch.scored & ~judged, minlength=len(step_values))
    tables = {name: _group_table(batch.values[name], judged, codes, groups) for name in batch.values}
    missing = {
        name: np.bincount(step_of_row, weights=judged & mask, minlength=len(step_values))
        for name, mask in batch.nulls.items()
    }
    weights_of_group = _group_weights(batch.weights, first_row)
    scored_per_group = np.bincount(codes[judged], minlength=groups).astype(np.int64)

    accs: dict[int, StepAcc] = {}
    names = batch.group_ids.names
    for s, step in enumerate(step_values.tolist()):
        acc = accs[step] = StepAcc()
        acc.records = int(per_step["records"][s])
        acc.errors = int(per_step["errors"][s])
        acc.inprocess = int(per_step["inprocess"][s])
        acc.user_fallbacks = int(per_step["user_fallbacks"][s])
        every = order[bounds[s] : bounds[s + 1]]
        acc.weights = weights_of_group(every)  # a group set aside was read first: its weights count
        mine = every[~mixed[every]]
        acc.groups = dict.fromkeys(map(names.__getitem__, group_name[mine].tolist()))
        acc.set_aside = entries.get(step, [])
        acc.set_aside_records = int(set_aside[s])
        acc.rollouts = scored_per_group[mine]
        for name, table in tables.items():
            if table is not None and table.n[mine].any():
                acc.table[name] = GroupTable(
                    *(
                        column[mine]
                        for column in (table.n, table.shift, table.s1, table.s2, table.minimum, table.maximum)
                    )
                )
        for name, counts in missing.items():
            if counts[s]:
                acc.missing[name] = int(counts[s])
        for g in every[:SAMPLE_GROUPS].tolist():
            if not mixed[g]:
                acc.sample[names[group_name[g]]] = []
    error_rows = np.flatnonzero(~batch.scored)
    for step, kind in zip(batch.steps[error_rows].tolist(), batch.error_kinds.codes[error_rows].tolist(), strict=True):
        kinds = accs[step].error_kinds
        label = batch.error_kinds.names[kind]
        kinds[label] = kinds.get(label, 0) + 1
    _fill_samples(batch, accs, codes, order, mixed, bounds, len(step_values))
    _fill_leads(batch, accs, codes, judged)
    return run_id, accs


def _mixed_groups(
    batch: RecordBatch, codes: np.ndarray, group_step: np.ndarray, group_name: np.ndarray, groups: int
) -> tuple[np.ndarray, dict[int, list[dict[str, Any]]]]:
    """Which groups (by code) hold scored records of several tasks, and per step what the result says of each
    (:func:`~rewardpipe.monitoring.statistics.set_aside_entry`, by group id). An error record's task is left
    out, as the record is: the Nova bridge files its own with the task "unknown"."""
    mixed = np.zeros(groups, dtype=bool)
    scored = np.flatnonzero(batch.scored)
    pairs = np.unique(_combined(codes[scored], batch.task_ids.codes[scored]))
    if len(pairs) == len(np.unique(codes[scored])):
        return mixed, {}
    tasks_of = np.unique(np.stack([codes[scored], batch.task_ids.codes[scored]]), axis=1)  # (group, task) codes
    mixed[np.flatnonzero(np.bincount(tasks_of[0], minlength=groups) > 1)] = True
    entries: dict[int, list[dict[str, Any]]] = {}
    rows = scored[mixed[codes[scored]]]  # the scored rows of those groups, in record order
    tasks: dict[int, dict[str, list[Any]]] = {}
    for row, code, task in zip(rows.tolist(), codes[rows].tolist(), batch.task_ids.codes[rows].tolist(), strict=True):
        of_group = tasks.setdefault(code, {})
        name = batch.task_ids.names[task]
        if name in of_group:
            of_group[name][1] += 1
        else:
            of_group[name] = [batch.rollout_ids[row], 1]
    for code, of_group in tasks.items():
        step = int(group_step[code])
        group = batch.group_ids.names[int(group_name[code])]
        entries.setdefault(step, []).append(set_aside_entry(step, group, {t: (r, n) for t, (r, n) in of_group.items()}))
    for listed in entries.values():
        listed.sort(key=lambda entry: entry["group_id"])
    return mixed, entries


def _group_weights(weights: dict[str, np.ndarray], first_row: np.ndarray) -> Callable[[np.ndarray], dict]:
    """For a step's groups (codes, first seen first): the weights the record-by-record pass would keep,
    i.e. each group's first record's weights applied in turn (a run's weights are usually one constant)."""
    constant = {}
    for name, column in weights.items():
        if len(column) and not np.isnan(column[0]) and (column == column[0]).all():
            constant[name] = float(column[0])
    if len(constant) == len(weights):
        return lambda mine: dict(constant)  # noqa: ARG005 - the per-step weights callable's signature

    def per_step(mine: np.ndarray) -> dict[str, float]:
        out: dict[str, float] = {}
        rows = first_row[mine]
        columns = {name: column[rows].tolist() for name, column in weights.items()}
        for i in range(len(rows)):
            for name, column in columns.items():
                if column[i] == column[i]:  # not NaN: the record declares this weight
                    out[name] = column[i]
        return out

    return per_step


def _group_table(values: np.ndarray, scored: np.ndarray, codes: np.ndarray, groups: int) -> GroupTable | None:
    """Per group: count, first value, sums of (x - first) and its square in row order, min and max."""
    rows = np.flatnonzero(scored & ~np.isnan(values))
    if len(rows) == 0:
        return None
    g, x = codes[rows], values[rows]
    minimum, maximum = np.full(groups, np.nan), np.full(groups, np.nan)
    first = np.full(groups, len(values), dtype=np.int64)
    if (g[1:] >= g[:-1]).all():  # each group's rows together, groups in code order (the usual layout): segments
        starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
        present = g[starts]
        first[present] = rows[starts]
        minimum[present] = np.minimum.reduceat(x, starts)
        maximum[present] = np.maximum.reduceat(x, starts)
    else:
        np.minimum.at(first, g, rows)
        has = first < len(values)
        minimum[has], maximum[has] = np.inf, -np.inf
        np.minimum.at(minimum, g, x)
        np.maximum.at(maximum, g, x)
    has = first < len(values)
    shift = np.zeros(groups)
    shift[has] = values[first[has]]
    d = x - shift[g]
    # bincount adds each weight to its bin in row order, from 0.0: the same additions, in the same order,
    # as one record at a time
    s1 = np.bincount(g, weights=d, minlength=groups)
    s2 = np.bincount(g, weights=d * d, minlength=groups)
    return GroupTable(
        n=np.bincount(g, minlength=groups).astype(np.int64),
        shift=shift,
        s1=s1,
        s2=s2,
        minimum=minimum + 0.0,
        maximum=maximum + 0.0,
    )


def _fill_samples(
    batch: RecordBatch,
    accs: dict[int, StepAcc],
    codes: np.ndarray,
    order: np.ndarray,
    mixed: np.ndarray,
    bounds: list[int],
    steps: int,
) -> None:
    """The full records of each step's first SAMPLE_GROUPS groups (for causes and alarm examples), but those
    set aside (``mixed``), whose slots stay used as in the record-by-record pass."""
    sampled = np.zeros(len(order), dtype=bool)
    for s in range(steps):
        sampled[order[bounds[s] : min(bounds[s] + SAMPLE_GROUPS, bounds[s + 1])]] = True
    sampled &= ~mixed
    for row in np.flatnonzero(sampled[codes]).tolist():
        record = batch.load(int(batch.positions[row]))
        accs[record.step].sample[record.group_id].append(SampledRollout(record))


def _fill_leads(batch: RecordBatch, accs: dict[int, StepAcc], codes: np.ndarray, judged: np.ndarray) -> None:
    """Each judged group's first scored rollout (:attr:`StepAcc.leads`), as a loader: a record is read only for the
    alarm example that asks for it."""
    rows = np.flatnonzero(judged)
    first = np.full(int(codes.max()) + 1 if len(codes) else 0, len(batch), dtype=np.int64)
    np.minimum.at(first, codes[rows], rows)
    for row in first[first < len(batch)].tolist():
        step, group = int(batch.steps[row]), batch.group_ids.names[batch.group_ids.codes[row]]
        accs[step].leads[group] = partial(_load_rollout, batch.load, int(batch.positions[row]))


def _load_rollout(load: Callable[[int], Any], position: int) -> SampledRollout:
    return SampledRollout(load(position))


def run_columns(batch: RecordBatch) -> RunColumns:
    """The report's :class:`~rewardpipe.monitoring.columns.RunColumns` of a batch, built column-wise: what
    ``RunColumns.add_many`` builds from the same records one by one (the scored rows, a code per
    (step, group) and per task in first-seen order, one float column per component, the example
    candidates), without touching a record."""
    columns = RunColumns()
    if len(batch) == 0:
        return columns
    columns.run_id = batch.run_ids[0]
    columns.errors = int((~batch.scored).sum())
    scored = batch.take(np.flatnonzero(batch.scored))
    rows = len(scored)
    if rows == 0:
        return columns
    codes, group_step, group_name = scored.group_codes()
    names = scored.group_ids.names
    columns.group_ids = dict(
        zip(
            zip(group_step.tolist(), map(names.__getitem__, group_name.tolist()), strict=True),
            range(len(group_step)),
            strict=True,
        )
    )
    task_codes, task_first = _first_seen_codes(scored.task_ids.codes)
    columns.task_ids = dict(
        zip(map(scored.task_ids.names.__getitem__, task_first.tolist()), range(len(task_first)), strict=True)
    )
    columns.steps.frombytes(scored.steps.astype(np.int64).tobytes())
    columns.groups.frombytes(codes.astype(np.int64).tobytes())
    columns.tasks.frombytes(task_codes.astype(np.int64).tobytes())
    first_named = {
        name: np.flatnonzero(~np.isnan(values) | scored.nulls[name])[:1]
        for name, values in scored.values.items()
        if name != AGG
    }
    named = sorted((name for name, first in first_named.items() if len(first)), key=lambda n: first_named[n][0])
    columns.values = {name: [scored.values[name]] for name in named}  # a stable sort: record order for ties
    columns._rows = rows
    for row in (0, rows - 1):
        columns.weights.update(
            {name: float(column[row]) for name, column in scored.weights.items() if not np.isnan(column[row])}
        )
    first_row = np.full(len(group_step), rows, dtype=np.int64)
    np.minimum.at(first_row, codes, np.arange(rows))
    # Only each step's first EXAMPLES_PER_STEP groups can give an example: rank the groups within their step
    # (first seen first) and visit just those, in first-seen order, as a loop over every group would.
    by_step = np.argsort(group_step, kind="stable")
    bounds = np.flatnonzero(np.r_[True, group_step[by_step][1:] != group_step[by_step][:-1]])
    rank = np.empty(len(by_step), dtype=np.int64)
    rank[by_step] = np.arange(len(by_step)) - np.repeat(bounds, np.diff(np.r_[bounds, len(by_step)]))
    for g in np.flatnonzero(rank < EXAMPLES_PER_STEP).tolist():  # groups in first-seen order
        row = int(first_row[g])
        picks = columns.examples.setdefault(int(group_step[g]), [])
        if len(picks) < EXAMPLES_PER_STEP:
            components = {
                name: None if scored.nulls[name][row] else float(column[row])
                for name, column in ((n, scored.values[n]) for n in columns.values)
                if scored.nulls[name][row] or not np.isnan(column[row])
            }
            picks.append((names[group_name[g]], scored.rollout_ids[row], components))
    return columns


def _first_seen_codes(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes renumbered by first appearance, and the original code of each new one."""
    unique, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(unique), dtype=np.int64)
    rank[order] = np.arange(len(unique))
    return rank[inverse.reshape(-1)], unique[order]
