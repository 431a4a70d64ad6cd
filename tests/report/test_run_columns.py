"""`RunColumns.add_many` (the report's and triage's pass over records) against a plain record-by-record
reading of the same records, and against the columnar builder (`batch.run_columns`) that reads files.

The reference below is written for clarity, one record at a time: what every row, code, value and example
of the columns must be. The records mix everything the fast extraction has to get right: errors, None and
missing components, a component first named late, values that are not numbers (text, inf, NaN), ints,
a group whose records are not together, a group id reused in another step, repeated deliveries, Record
objects and plain dicts, and batch boundaries inside a group.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from rewardpipe.models import Record
from rewardpipe.monitoring import fastread
from rewardpipe.monitoring.batch import run_columns
from rewardpipe.monitoring.columns import EXAMPLES_PER_STEP, RunColumns, group_rows
from rewardpipe.monitoring.triage import task_triage

WEIGHTS = {"a": 1.0, "b": 0.5, "c": 0.25}


def records(seed: int) -> list[dict]:
    rnd = random.Random(seed)
    out = []
    for step in range(4):
        for g in range(9):
            for k in range(rnd.choice((1, 3, 4))):
                comps = {"a": rnd.choice((0.0, 1, 0.5, None)), "b": rnd.choice((-1.0, 0.0)), "c": 0.25}
                if g % 4 == 3:
                    del comps["b"]  # a component some records do not name
                if step >= 2 and g % 3 == 0:
                    comps["late"] = rnd.random()  # first named half-way
                status = "error" if rnd.random() < 0.1 else "scored"
                out.append(
                    {
                        "schema": "rewardpipe.record/v1",
                        "run_id": "r",
                        "step": step,
                        "group_id": f"g{g}",
                        "rollout_id": f"s{step}-g{g}-{k}",
                        "task_id": f"t{g % 4}",
                        "status": status,
                        "error": {"kind": "timeout", "message": "m"} if status == "error" else None,
                        "components": {n: None for n in comps} if status == "error" else comps,
                        "weights": dict(WEIGHTS),
                        "aggregate": None if status == "error" else 0.5,
                        "metrics": {},
                    }
                )
    rnd.shuffle(out[10:30])  # some groups' records apart from each other
    out += [dict(r) for r in rnd.sample(out, 5)]  # repeated deliveries
    return out


def odd_values(rows: list[dict]) -> list[dict]:
    """The same rows with values a Record would refuse but a plain mapping may carry."""
    rows = [dict(r, components=dict(r["components"])) for r in rows]
    for r, value in zip(rows[3::11], ("high", math.inf, -math.inf, math.nan, 7)):
        if r["status"] == "scored":
            r["components"]["a"] = value
    return rows


def number(value):
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value) if math.isfinite(value) else math.nan


def reference(rows: list[dict]):
    """One record at a time: (steps, group codes, task codes, group ids, task ids, names, matrix, examples,
    errors)."""
    steps, groups, tasks, matrix, names = [], [], [], [], []
    group_ids: dict = {}
    task_ids: dict = {}
    examples: dict = {}
    errors = 0
    for r in rows:
        if r["status"] != "scored":
            errors += 1
            continue
        key = (r["step"], r["group_id"])
        if key not in group_ids:
            group_ids[key] = len(group_ids)
            picks = examples.setdefault(r["step"], [])
            if len(picks) < EXAMPLES_PER_STEP:
                picks.append((r["group_id"], r["rollout_id"], dict(r["components"])))
        task_ids.setdefault(r["task_id"], len(task_ids))
        names += [n for n in r["components"] if n not in names]
        steps.append(r["step"])
        groups.append(group_ids[key])
        tasks.append(task_ids[r["task_id"]])
        matrix.append(r["components"])
    table = np.array([[number(c.get(n)) for n in names] for c in matrix]).reshape(len(matrix), len(names))
    return steps, groups, tasks, group_ids, task_ids, names, table, examples, errors


def columns_of(rows, batch: int) -> RunColumns:
    columns = RunColumns()
    for i in range(0, len(rows), batch):
        columns.add_many(rows[i : i + batch])
    return columns


def assert_columns_are(columns: RunColumns, rows: list[dict]) -> None:
    steps, groups, tasks, group_ids, task_ids, names, table, examples, errors = reference(rows)
    assert list(columns.steps) == steps and list(columns.groups) == groups and list(columns.tasks) == tasks
    assert columns.group_ids == group_ids and columns.task_ids == task_ids
    assert columns.group_steps().tolist() == [step for step, _ in group_ids]  # codes are first-seen order
    got_names, got = columns.matrix()
    assert got_names == names and np.array_equal(got, table, equal_nan=True)
    assert columns.examples == examples and columns.errors == errors and columns.rows == len(steps)
    assert columns.run_id == "r" and columns.weights == WEIGHTS


@pytest.mark.parametrize("batch", [1, 3, 7, 10_000])
@pytest.mark.parametrize("seed", [0, 1])
def test_add_many_keeps_what_a_record_by_record_reading_keeps(seed, batch):
    rows = records(seed)
    assert_columns_are(columns_of(rows, batch), rows)
    as_records = [Record.model_validate(r) if i % 2 else r for i, r in enumerate(rows)]  # both shapes mixed
    assert_columns_are(columns_of(as_records, batch), rows)


@pytest.mark.parametrize("batch", [1, 5, 10_000])
def test_values_that_are_not_numbers_are_missing_in_every_batch_shape(batch):
    rows = odd_values(records(2))
    columns = columns_of(rows, batch)
    assert_columns_are(columns, rows)
    assert np.isnan(columns.matrix()[1]).any()


def test_a_single_component_and_a_batch_of_errors_only():
    rows = [dict(r, components={"a": r["components"].get("a")}) for r in records(3)]
    assert_columns_are(columns_of(rows, 4), rows)
    errors = [r for r in records(3) if r["status"] == "error"]
    columns = columns_of(errors, 100)
    assert columns.rows == 0 and columns.errors == len(errors)


def test_triage_from_the_file_reader_is_triage_from_records(tmp_path):
    """What `report FILE` builds (columns from the file reader, repeated deliveries dropped) gives the same
    triage as the records one by one, once the repeats are dropped the same way (last copy kept)."""
    import json

    rows = records(4)
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    batch = fastread.read_jsonl_batch(path)
    assert batch is not None
    from_file = run_columns(batch.dedupe())
    last = {}
    for position, r in enumerate(rows):
        last[(r["run_id"], r["step"], r["group_id"], r["rollout_id"])] = position
    kept = [
        r
        for position, r in enumerate(rows)
        if last[(r["run_id"], r["step"], r["group_id"], r["rollout_id"])] == position
    ]
    from_records = columns_of(kept, 16)
    assert_columns_are(from_records, kept)
    assert_columns_are(from_file, kept)  # the columnar builder keeps the same rows, codes, values and examples
    assert task_triage(from_file, group_rows(from_file)) == task_triage(from_records, group_rows(from_records))
    assert task_triage(from_records, group_rows(from_records))
