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
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping

import numpy as np

EXAMPLES_PER_STEP = 6  # candidate example rollouts kept per step (from distinct groups)


@dataclass
class RunColumns:
    run_id: str | None = None
    steps: array = field(default_factory=lambda: array("q"))
    groups: array = field(default_factory=lambda: array("q"))
    tasks: array = field(default_factory=lambda: array("q"))
    values: dict[str, array] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)
    group_ids: dict[tuple[int, str], int] = field(default_factory=dict)
    task_ids: dict[str, int] = field(default_factory=dict)
    errors: int = 0
    # step -> [(group_id, rollout_id, {component: value})], first rollout of the first groups of the step
    examples: dict[int, list[tuple[str, str, dict[str, float | None]]]] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return len(self.steps)

    def add(self, record: Any) -> None:
        if isinstance(record, Mapping):
            get = record.get
            status, step, group_id, task_id = get("status"), get("step", 0), get("group_id"), get("task_id")
            components, weights, rollout_id, run_id = get("components") or {}, get("weights") or {}, \
                get("rollout_id"), get("run_id")
        else:
            status, step, group_id, task_id = record.status, record.step, record.group_id, record.task_id
            components, weights, rollout_id, run_id = record.components, record.weights, record.rollout_id, \
                record.run_id
        if self.run_id is None:
            self.run_id = run_id
        if status != "scored":
            self.errors += 1
            return
        key = (step, group_id)
        group = self.group_ids.get(key)
        if group is None:
            group = self.group_ids[key] = len(self.group_ids)
            picks = self.examples.setdefault(step, [])
            if len(picks) < EXAMPLES_PER_STEP:
                picks.append((group_id, rollout_id, dict(components)))
        task = self.task_ids.get(task_id)
        if task is None:
            task = self.task_ids[task_id] = len(self.task_ids)
        row = len(self.steps)
        self.steps.append(step)
        self.groups.append(group)
        self.tasks.append(task)
        for name, value in components.items():
            column = self.values.get(name)
            if column is None:
                column = self.values[name] = array("d", [math.nan]) * row
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            column.append(float(value) if ok else math.nan)
        for column in self.values.values():  # a component this record lacks
            if len(column) == row:
                column.append(math.nan)
        if weights:
            self.weights.update(weights)

    def matrix(self) -> tuple[list[str], np.ndarray]:
        """(component names, N × C float matrix with NaN for missing values)."""
        names = list(self.values)
        if not names:
            return names, np.empty((self.rows, 0))
        return names, np.column_stack([np.frombuffer(self.values[n], dtype=np.float64) for n in names])

    def task_names(self) -> list[str]:
        names = [""] * len(self.task_ids)
        for task_id, code in self.task_ids.items():
            names[code] = task_id
        return names

    def group_steps(self) -> np.ndarray:
        """The step of each group code."""
        out = np.zeros(len(self.group_ids), dtype=np.int64)
        for (step, _), code in self.group_ids.items():
            out[code] = step
        return out


def tee(records: Iterable[Any], *consumers: Any) -> Iterator[Any]:
    """Yield each record after handing it to every consumer's ``add``: one read of the source serves all."""
    adders = [consumer.add for consumer in consumers]
    for record in records:
        for add in adders:
            add(record)
        yield record


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
    order = np.argsort(codes, kind="stable")
    xs, gs = x[order], codes[order]
    if len(gs) == 0:
        empty = np.empty((0, len(names)))
        return Grouped(names, xs, np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), empty, empty, empty,
                       empty, np.empty(0, dtype=np.int64))
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
