"""The row keys the columnar path groups and de-duplicates by: equal exactly when every column is equal,
whichever way each column is coded (dense reader codes, a narrow integer range, or neither)."""

from __future__ import annotations

import numpy as np
import pytest

from rewardpipe.monitoring.batch import Labels, RecordBatch, _combined


def _rows_equal(columns, i, j):
    return all(
        (c.codes if isinstance(c, Labels) else c)[i] == (c.codes if isinstance(c, Labels) else c)[j] for c in columns
    )


@pytest.mark.parametrize("seed", range(6))
def test_keys_are_equal_exactly_when_rows_are(seed):
    rnd = np.random.default_rng(seed)
    rows = 400
    names = [f"id-{i}" for i in range(7)]
    dense = Labels(rnd.integers(0, 7, rows), names)
    dense = Labels(dense.codes, names, len(np.unique(dense.codes))) if len(np.unique(dense.codes)) == 7 else dense
    sparse_codes = Labels(rnd.choice([3, 90, 2**40], rows), names)  # codes of a subset: not dense
    narrow = rnd.integers(-5, 3, rows)  # a few steps, some negative
    wide = rnd.choice([0, 10**12, -(10**15)], rows)  # far apart: re-coded by sorting
    columns = (dense, narrow, sparse_codes, wide)
    key = _combined(*columns)
    pairs = rnd.integers(0, rows, (3000, 2))
    for i, j in pairs.tolist():
        assert (key[i] == key[j]) == _rows_equal(columns, i, j)


def test_keys_do_not_overflow_when_the_codes_span_more_than_an_int64():
    rnd = np.random.default_rng(7)
    rows = 300
    huge = [Labels(rnd.integers(0, 3, rows), ["a", "b", "c"], 2**31) for _ in range(3)]  # 2**93 combinations
    columns = (*huge, rnd.integers(0, 4, rows))
    key = _combined(*columns)
    assert key.min() >= 0
    for i, j in rnd.integers(0, rows, (3000, 2)).tolist():
        assert (key[i] == key[j]) == _rows_equal(columns, i, j)


def _batch(rollouts: Labels, steps: np.ndarray) -> RecordBatch:
    rows = len(steps)
    one = Labels(np.zeros(rows, dtype=np.int64), ["r"], 1)
    return RecordBatch(
        run_ids=one,
        steps=steps,
        group_ids=Labels(np.zeros(rows, dtype=np.int64), ["g"], 1),
        rollout_ids=rollouts,
        task_ids=one,
        scored=np.ones(rows, dtype=bool),
        error_kinds=one,
        inprocess=np.zeros(rows, dtype=bool),
        weights={},
        values={"c": np.arange(rows, dtype=float)},
        nulls={"c": np.zeros(rows, dtype=bool)},
        positions=np.arange(1, rows + 1),
        load=lambda p: None,
    )


def test_distinct_rollout_ids_need_no_search_for_repeats_and_repeats_are_still_found():
    unique = _batch(Labels(np.arange(5), [f"x{i}" for i in range(5)], 5), np.zeros(5, dtype=np.int64))
    assert unique.dedupe() is unique
    # the same rollout at two steps is two records; the same rollout twice at one step is a repeat
    repeated = _batch(Labels(np.array([0, 1, 0, 0]), ["a", "b"], 2), np.array([0, 0, 1, 0]))
    out = repeated.dedupe()
    assert out.duplicates == [1] and out.values["c"].tolist() == [1.0, 2.0, 3.0]
    # after a take, the codes may not use every name: the shortcut must not be trusted
    taken = _batch(Labels(np.array([0, 1, 1]), ["a", "b", "c"], None), np.zeros(3, dtype=np.int64))
    assert taken.rollout_ids.take(np.arange(3)).distinct is None
    assert taken.dedupe().duplicates == [2]
