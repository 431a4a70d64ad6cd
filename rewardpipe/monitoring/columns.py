"""Records as columns: one streaming pass keeps what the report and triage need, compactly.

Per scored record: its step, its group (a code per ``(step, group_id)``), its task (a code) and one float per
component (NaN when missing or non-finite). Error records are counted, never folded in: an infrastructure
failure is not a value. A few rollout ids per step are kept as candidate examples. Memory is
~8 bytes × (3 + components) per record, so 1M records take tens of MB, not the records themselves.

:func:`tee` feeds the same pass to the monitor, so a store or a file is read once.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain, compress
from operator import attrgetter, itemgetter, ne
from typing import Any, cast

import numpy as np

from rewardpipe.gc_pause import paused_gc  # noqa: F401 - defined once, imported from here by the readers
from rewardpipe.models import MAX_SCORE_MAGNITUDE

EXAMPLES_PER_STEP = 6  # candidate example rollouts kept per step (from distinct groups)


@dataclass
class RunColumns:
    run_id: str | None = None
    steps: array = field(default_factory=lambda: array("q"))
    groups: array = field(default_factory=lambda: array("q"))
    tasks: array = field(default_factory=lambda: array("q"))
    values: dict[str, list[np.ndarray]] = field(default_factory=dict)  # per component, chunks of float64
    weights: dict[str, float] = field(default_factory=dict)
    group_ids: dict[tuple[int, str], int] = field(default_factory=dict)
    task_ids: dict[str, int] = field(default_factory=dict)
    errors: int = 0
    # step -> [(group_id, rollout_id, {component: value})], first rollout of the first groups of the step
    examples: dict[int, list[tuple[str, str, dict[str, float | None]]]] = field(default_factory=dict)
    _last_weights: Any = field(default=None, repr=False)
    _rows: int = 0

    @property
    def rows(self) -> int:
        return self._rows

    def add(self, record: Any) -> None:
        self.add_many([record])

    def add_many(self, records: list[Any]) -> None:
        """Append a batch. Each field is extracted by one C-level ``itemgetter`` pass over the batch and
        the components converted by one numpy call: this is the hot loop of a 1M-record report. (The rollout
        id is read only for the few example candidates.)"""
        # A Record's fields live in its __dict__ under their names: one access path for both shapes.
        if not records:
            return
        kinds = set(map(type, records))
        datas = (
            records
            if kinds == {dict}
            else list(map(_DICT_OF, records))
            if dict not in kinds
            else [r if isinstance(r, dict) else r.__dict__ for r in records]
        )
        if self.run_id is None:
            self.run_id = datas[0].get("run_id")
        try:
            statuses = list(map(_STATUS, datas))
            scored_datas = (
                datas
                if statuses.count("scored") == len(datas)
                else list(compress(datas, map("scored".__eq__, statuses)))
            )
            scored = [list(map(getter, scored_datas)) for getter in _COLUMNS]
        except KeyError:  # a mapping without every field: the slow, forgiving path
            scored_datas = [d for d in datas if d.get("status") == "scored"]
            scored = [
                [d.get("step", 0) for d in scored_datas],
                [d.get("group_id") for d in scored_datas],
                [d.get("task_id") for d in scored_datas],
                [d.get("components") or {} for d in scored_datas],
            ]
        self.errors += len(datas) - len(scored_datas)
        if not scored_datas:
            return
        steps, group_names, task_names, comps = scored
        row = self.rows
        self.steps.extend(steps)
        step_column = np.frombuffer(self.steps, dtype=np.int64)[row:].copy()  # (a view would pin the array)
        known = len(self.group_ids)
        codes, starts = _run_codes(self.group_ids, group_names, steps, step_column)
        groups = _per_row(codes, starts, len(steps))
        if len(self.group_ids) > known:
            self._keep_examples(scored_datas, steps, group_names, comps, codes, starts, known)
        self.groups.frombytes(groups.tobytes())
        codes, starts = _run_codes(self.task_ids, task_names)
        self.tasks.frombytes(_per_row(codes, starts, len(steps)).tobytes())
        names = list(self.values) or list(comps[0])
        try:  # the common case: every record has exactly the components seen so far (one C-level pass)
            if set(map(len, comps)) != {len(names)}:
                raise KeyError
            per_name = (
                _float_columns(list(map(itemgetter(*names), comps)), len(names))
                if len(names) > 1
                else [[c[names[0]] for c in comps]]
                if names
                else []
            )  # a reward may have no component at all
        except KeyError:
            names += [n for n in dict.fromkeys(chain.from_iterable(comps)) if n not in names]
            per_name = [[c.get(name) for c in comps] for name in names]
        for name, values in zip(names, per_name, strict=True):
            chunks = self.values.get(name)
            if chunks is None:
                chunks = self.values[name] = [np.full(row, np.nan)] if row else []
            # cast: per_name holds, per name, a column already converted or the list of its raw values
            chunks.append(values if isinstance(values, np.ndarray) else _floats(cast(list[Any], values)))
        self._rows += len(scored_datas)
        for d in (datas[0], datas[-1]):
            weights = d.get("weights")
            if weights and weights is not self._last_weights:
                self.weights.update(weights)
                self._last_weights = weights

    def _keep_examples(
        self,
        datas: list[Any],
        steps: list[Any],
        group_ids: list[Any],
        comps: list[Any],
        run_codes: np.ndarray,
        starts: np.ndarray,
        known: int,
    ) -> None:
        """The first rollout of each new group, up to EXAMPLES_PER_STEP per step, as example candidates.
        (``run_codes``/``starts``: the group code of each run of rows with the same group, and where it starts.)"""
        new = np.flatnonzero(run_codes >= known)
        _, first = np.unique(run_codes[new], return_index=True)  # new codes are numbered in first-seen order
        for position in starts[new[first]].tolist():
            picks = self.examples.setdefault(steps[position], [])
            if len(picks) < EXAMPLES_PER_STEP:
                picks.append((group_ids[position], datas[position].get("rollout_id"), dict(comps[position])))

    def matrix(self) -> tuple[list[str], np.ndarray]:
        """(component names, N × C float matrix with NaN for missing values)."""
        names = list(self.values)
        if not names:
            return names, np.empty((self.rows, 0))
        columns = []
        for name in names:
            column = np.concatenate(self.values[name]) if self.values[name] else np.empty(0)
            if len(column) < self.rows:  # a component first seen after the others stopped: pad
                column = np.concatenate([column, np.full(self.rows - len(column), np.nan)])
            columns.append(column)
        return names, np.column_stack(columns)

    def drop_groups(self, keys: Iterable[tuple[int, str]]) -> None:
        """Leave out the scored rows of the ``(step, group_id)`` groups ``keys`` (groups the monitor set aside),
        renumbering groups and tasks in first-seen order as if those rows had never been read (their example
        candidates go too; an error record stays counted)."""
        drop = {self.group_ids[key] for key in keys if key in self.group_ids}
        if not drop:
            return
        codes = np.frombuffer(self.groups, dtype=np.int64)
        keep = ~np.isin(codes, np.fromiter(drop, dtype=np.int64, count=len(drop)))
        kept_keys = [key for key, code in self.group_ids.items() if code not in drop]
        renumber = np.full(len(self.group_ids), -1, dtype=np.int64)
        renumber[[self.group_ids[key] for key in kept_keys]] = np.arange(len(kept_keys))
        self.group_ids = dict(zip(kept_keys, range(len(kept_keys)), strict=True))
        names, matrix = self.matrix()
        task_names = self.task_names()
        tasks = np.frombuffer(self.tasks, dtype=np.int64)[keep]
        unique, first, inverse = np.unique(tasks, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        rank = np.empty(len(unique), dtype=np.int64)
        rank[order] = np.arange(len(unique))
        self.task_ids = {task_names[int(unique[i])]: n for n, i in enumerate(order.tolist())}
        self.tasks = array("q", rank[inverse.reshape(-1)].astype(np.int64).tobytes())
        self.steps = array("q", np.frombuffer(self.steps, dtype=np.int64)[keep].tobytes())
        self.groups = array("q", renumber[codes[keep]].tobytes())
        self.values = {name: [np.ascontiguousarray(matrix[keep, j])] for j, name in enumerate(names)}
        self._rows = int(keep.sum())
        dropped = set(keys)
        for step, picks in self.examples.items():
            picks[:] = [pick for pick in picks if (step, pick[0]) not in dropped]

    def task_names(self) -> list[str]:
        names = [""] * len(self.task_ids)
        for task_id, code in self.task_ids.items():
            names[code] = task_id
        return names

    def group_steps(self) -> np.ndarray:
        """The step of each group code."""
        count = len(self.group_ids)
        out = np.zeros(count, dtype=np.int64)
        out[np.fromiter(self.group_ids.values(), dtype=np.int64, count=count)] = np.fromiter(
            map(itemgetter(0), self.group_ids), dtype=np.int64, count=count
        )
        return out


def _per_row(run_codes: np.ndarray, starts: np.ndarray, rows: int) -> np.ndarray:
    """Each run's code repeated over its rows (the inverse of :func:`_run_codes`' compression)."""
    return np.repeat(run_codes, np.diff(np.append(starts, rows)))


def _run_codes(
    codebook: dict, names: list[Any], steps: list[Any] | None = None, step_column: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(a code per run of rows with the same key, the row each run starts at): :func:`_codes` of the rows'
    keys (``names``, or ``(steps, names)`` pairs), looked up once per run. Records of a group (and so of a
    task) usually arrive together, so the rest is C-level comparisons (the steps' as integers, since an
    int64 column equals the steps it was filled from)."""
    rows = len(names)
    if rows == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    changed = np.zeros(rows, dtype=bool)
    changed[0] = True
    changed[1:] = np.fromiter(map(ne, names[1:], names[:-1]), dtype=bool, count=rows - 1)
    if step_column is not None:
        changed[1:] |= step_column[1:] != step_column[:-1]
    starts = np.flatnonzero(changed)
    picked = list(map(names.__getitem__, starts.tolist()))
    keys = picked if steps is None else list(zip(map(steps.__getitem__, starts.tolist()), picked, strict=True))
    return np.asarray(_codes(codebook, keys), dtype=np.int64), starts


def _codes(codebook: dict, keys: Any) -> list[int]:
    """Dense integer codes for ``keys``, extending ``codebook`` in first-seen order (C-level maps: only the
    distinct new keys are visited in Python)."""
    for key in dict.fromkeys(keys):
        if key not in codebook:
            codebook[key] = len(codebook)
    return list(map(codebook.__getitem__, keys))


_STATUS = itemgetter("status")
_COLUMNS = tuple(map(itemgetter, ("step", "group_id", "task_id", "components")))
_DICT_OF = attrgetter("__dict__")


def _float_columns(rows: list[tuple], width: int) -> list[np.ndarray] | list[list[Any]]:
    """Per component, :func:`_floats` of its values, from one tuple of ``width`` values per row: one numpy
    conversion for the whole table when every value converts, else column by column as before."""
    try:
        table = np.array(rows, dtype=np.float64)  # None -> NaN, as _floats
    except (TypeError, ValueError):
        table = None
    if table is None or table.shape != (len(rows), width):  # a value that is not a number, or a sequence
        return [list(column) for column in zip(*rows, strict=False)]
    table[~(np.abs(table) <= MAX_SCORE_MAGNITUDE)] = np.nan
    return [np.ascontiguousarray(table[:, j]) for j in range(width)]


def _floats(values: list[Any]) -> np.ndarray:
    """Component values as float64: None, NaN, ±inf, values beyond ±MAX_SCORE_MAGNITUDE (and anything that
    is not a number) become NaN. (A boolean counts as 0/1, as a Record's float field would have made it.)"""
    try:
        out = np.array(values, dtype=np.float64)  # None -> NaN
    except (TypeError, ValueError):
        out = np.array([_number(v) for v in values], dtype=np.float64)
    out[~(np.abs(out) <= MAX_SCORE_MAGNITUDE)] = np.nan
    return out


def _number(value: Any) -> float:
    """A component value as a finite float, or NaN (None, bool, text, NaN and ±inf are not values)."""
    if value is None or value.__class__ is bool:
        return math.nan
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.nan
    return number if -MAX_SCORE_MAGNITUDE <= number <= MAX_SCORE_MAGNITUDE else math.nan


def tee(records: Iterable[Any], *consumers: Any, batch: int = 4096) -> Iterator[Any]:
    """Yield every record, and hand them in batches to every consumer's ``add_many``: one read of the
    source serves all. The last batch is handed over when the source is exhausted."""
    buffer: list[Any] = []
    for record in records:
        buffer.append(record)
        if len(buffer) >= batch:
            for consumer in consumers:
                consumer.add_many(buffer)
            buffer = []
        yield record
    if buffer:
        for consumer in consumers:
            consumer.add_many(buffer)


@dataclass
class Grouped:
    """Rows sorted by group, with the per-group sums every statistic below is built from."""

    names: list[str]
    x: np.ndarray  # rows sorted by group, N × C
    group_of_row: np.ndarray  # index into the per-group arrays, per sorted row
    group_codes: np.ndarray  # group code of each per-group entry
    count: np.ndarray  # G × C non-NaN values
    mean: np.ndarray  # G × C (NaN where count == 0)
    minimum: np.ndarray  # G × C
    maximum: np.ndarray  # G × C
    rows_per_group: np.ndarray  # G


def group_rows(columns: RunColumns) -> Grouped:
    names, x = columns.matrix()
    codes = np.frombuffer(columns.groups, dtype=np.int64)
    if len(codes) < 2 or (codes[1:] >= codes[:-1]).all():  # records already arrive group by group
        xs, gs = x, codes
    else:
        order = np.argsort(codes, kind="stable")
        xs, gs = x[order], codes[order]
    if len(gs) == 0:
        empty = np.empty((0, len(names)))
        return Grouped(
            names,
            xs,
            np.empty(0, dtype=np.int64),
            np.empty(0, dtype=np.int64),
            empty,
            empty,
            empty,
            empty,
            np.empty(0, dtype=np.int64),
        )
    starts = np.flatnonzero(np.r_[True, gs[1:] != gs[:-1]])
    present = ~np.isnan(xs)
    count = np.add.reduceat(present, starts, axis=0).astype(np.float64)
    total = np.add.reduceat(np.where(present, xs, 0.0), starts, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / count
    minimum = np.fmin.reduceat(xs, starts, axis=0)
    maximum = np.fmax.reduceat(xs, starts, axis=0)
    rows_per_group = np.diff(np.r_[starts, len(gs)])
    group_of_row = np.repeat(np.arange(len(starts)), rows_per_group)
    return Grouped(names, xs, group_of_row, gs[starts], count, mean, minimum, maximum, rows_per_group)
