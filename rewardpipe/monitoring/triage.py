"""Task triage: which prompts give a component no signal at all.

A (task, component) pair is listed when, in every group of that task with at least two values of the
component, the component did not vary: zero variance as the monitor judges it
(:func:`rewardpipe.monitoring.thresholds.zero_variance_bound`: the group's std against ``epsilon``, scaled by
the component's weight and the values' magnitude). Those prompts teach GRPO nothing through it.
``verdict`` says how: ``never`` (always at the component's minimum — e.g. the tests never pass),
``always`` (always at its maximum — saturated), ``constant`` (some other value, or constant inside groups but
different across them). ``groups`` and ``steps`` count what was seen. Feed the list back to the data loader to
drop or re-weight prompts (DAPO's "dynamic sampling"). Written as ``runs/<run>/triage.jsonl``, one entry per
line, sorted by task then component.

A component's minimum and maximum are its declared range (the monitor's known ranges, ``--range``) or, when
unknown, the smallest and largest value it took anywhere in the run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from rewardpipe.monitoring.columns import Grouped, RunColumns
from rewardpipe.monitoring.thresholds import zero_variance_bound
from rewardpipe.store import run_prefix

#: The default ``epsilon`` (the monitor's default, ``Thresholds.epsilon``). A quiet task's values count as one value
#: for its verdict (``never``, ``always``) by the same rule, :func:`zero_variance_bound` at their magnitude.
EPSILON = 1e-6


def triage_key(run_id: str) -> str:
    return f"{run_prefix(run_id)}triage.jsonl"


def task_triage(
    columns: RunColumns,
    grouped: Grouped,
    ranges: Mapping[str, tuple[float, float]] | None = None,
    epsilon: float = EPSILON,
    weights: Mapping[str, float] | None = None,
) -> list[dict[str, Any]]:
    """The (task, component) pairs with no signal; ``epsilon`` and ``weights`` (default: the run's, from
    ``columns``) judge a group's zero variance as the monitor does."""
    names = grouped.names
    if not names or len(grouped.group_codes) == 0:
        return []
    ranges = dict(ranges or {})
    weights = columns.weights if weights is None else weights
    spread = _group_std(grouped)
    task_of_group = _task_of_groups(columns, grouped)
    step_of_group = columns.group_steps()[grouped.group_codes]
    task_names = columns.task_names()
    tasks = len(task_names)
    entries: list[dict[str, Any]] = []
    for c, name in enumerate(names):
        count, low, high = grouped.count[:, c], grouped.minimum[:, c], grouped.maximum[:, c]
        seen = count >= 1
        eligible = count >= 2
        with np.errstate(invalid="ignore"):  # NaN where a group has no value: never eligible
            bound = zero_variance_bound(epsilon, weights.get(name, 1.0), np.maximum(np.abs(low), np.abs(high)))
            varies = eligible & (spread[:, c] > bound)
        per_task_varies = np.bincount(task_of_group, weights=varies, minlength=tasks) > 0
        per_task_eligible = np.bincount(task_of_group, weights=eligible, minlength=tasks)
        per_task_groups = np.bincount(task_of_group, weights=seen, minlength=tasks)
        quiet = (~per_task_varies) & (per_task_eligible > 0)
        if not quiet.any():
            continue
        lo_all, hi_all = ranges.get(name, (float(np.nanmin(low)), float(np.nanmax(high))))
        task_low = np.full(tasks, np.inf)
        task_high = np.full(tasks, -np.inf)
        np.minimum.at(task_low, task_of_group[seen], low[seen])
        np.maximum.at(task_high, task_of_group[seen], high[seen])
        steps_seen = _distinct_steps_per_task(task_of_group[seen], step_of_group[seen], tasks)
        weight = weights.get(name, 1.0)
        for task in np.flatnonzero(quiet):
            lo, hi = float(task_low[task]), float(task_high[task])
            one_value = _same(lo, hi, epsilon, weight)
            if one_value and _same(lo, lo_all, epsilon, weight):
                verdict = "never"
            elif one_value and _same(hi, hi_all, epsilon, weight):
                verdict = "always"
            else:
                verdict = "constant"
            entries.append(
                {
                    "task_id": task_names[task],
                    "component": name,
                    "verdict": verdict,
                    "value": round(lo, 6) if one_value else None,
                    "groups": int(per_task_groups[task]),
                    "steps": int(steps_seen[task]),
                }
            )
    entries.sort(key=lambda e: (e["task_id"], e["component"]))
    return entries


def _same(a: float, b: float, epsilon: float, weight: float | None) -> bool:
    """Whether ``a`` and ``b`` count as one value of a component of ``weight``: their difference is no more than
    the spread :func:`zero_variance_bound` calls zero variance at their magnitude (the rule of the groups' figures)."""
    return abs(a - b) <= zero_variance_bound(epsilon, weight, max(abs(a), abs(b)))


def _group_std(grouped: Grouped) -> np.ndarray:
    """G × C population std of each group's values (0 where it has fewer than two), as the monitor's figures."""
    if not len(grouped.x):
        return np.zeros_like(grouped.count)
    groups = len(grouped.group_codes)
    deviation = grouped.x - grouped.mean[grouped.group_of_row]
    squares = np.where(np.isnan(deviation), 0.0, deviation * deviation)
    total = np.stack(
        [np.bincount(grouped.group_of_row, weights=squares[:, c], minlength=groups) for c in range(squares.shape[1])],
        axis=1,
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(grouped.count >= 2, np.sqrt(total / grouped.count), 0.0)


def judged_tasks(columns: RunColumns, grouped: Grouped) -> int:
    """How many tasks triage could judge: those with a group where some component has 2+ values. A task
    without one (one rollout per group, or its groups' others errors) is neither listed nor known to teach."""
    if not grouped.names or len(grouped.group_codes) == 0:
        return 0
    eligible = (grouped.count >= 2).any(axis=1)
    return len(np.unique(_task_of_groups(columns, grouped)[eligible]))


def _task_of_groups(columns: RunColumns, grouped: Grouped) -> np.ndarray:
    """The task code of each per-group entry (a group has one task; its first row says which)."""
    tasks = np.frombuffer(columns.tasks, dtype=np.int64)
    codes = np.frombuffer(columns.groups, dtype=np.int64)
    first_task = np.zeros(len(columns.group_ids), dtype=np.int64)
    first_task[codes[::-1]] = tasks[::-1]  # the last write wins, i.e. each group's first row
    return first_task[grouped.group_codes]


def _distinct_steps_per_task(task_of: np.ndarray, step_of: np.ndarray, tasks: int) -> np.ndarray:
    if not len(task_of):
        return np.zeros(tasks, dtype=np.int64)
    step_codes = np.unique(step_of, return_inverse=True)[1].reshape(-1)
    span = int(step_codes.max()) + 1
    pairs = np.unique(task_of.astype(np.int64) * span + step_codes)  # one int per (task, step): a 1-D sort
    return np.bincount(pairs // span, minlength=tasks)


def triage_jsonl(entries: Iterable[Mapping[str, Any]]) -> str:
    return "".join(json.dumps(entry, sort_keys=True, allow_nan=False) + "\n" for entry in entries)


def write_triage(store: Any, run_id: str, entries: list[dict[str, Any]]) -> str:
    """Write ``runs/<run>/triage.jsonl`` into the store (local directory or S3); returns the key."""
    return store.put_bytes(triage_key(run_id), triage_jsonl(entries).encode("utf-8"))
