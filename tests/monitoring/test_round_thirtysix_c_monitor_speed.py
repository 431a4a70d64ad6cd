"""What ``monitor_records`` keeps while it reads: memory follows groups, not records, on the streaming path and
on the default (deduplicating) one beyond the input's own records; and the cheaper deduplication keeps exactly the
results of a dict of every key, hash collisions included (round thirty-six, third wave)."""

from __future__ import annotations

import gc
import random
import tracemalloc
from collections.abc import Iterator

import pytest

import rewardpipe.monitoring.statistics as statistics
from rewardpipe.models import Record
from rewardpipe.monitoring import monitor_records


def records(rollouts: int, group_size: int, seed: int = 0) -> Iterator[Record]:
    rnd = random.Random(seed)
    for i in range(rollouts):
        g = i // group_size
        comps = {"a": rnd.choice((0.0, 1.0)), "b": 1.0 if g % 2 else rnd.random(), "c": None if i % 7 == 0 else 0.5}
        yield Record(
            run_id="r",
            step=g % 2,
            group_id=f"g{g}",
            rollout_id=f"g{g}_{i % group_size}",
            task_id=f"t{g}",
            status="scored",
            components=comps,
            weights={"a": 1.0, "b": 0.5, "c": 0.1},
            aggregate=comps["a"] + 0.5 * comps["b"],
        )


def peak_of_monitor(source: object, *, dedupe: bool) -> int:
    """The most bytes allocated at once during ``monitor_records`` (the records themselves were made before):
    what it keeps while it reads, not what passes through. Each measurement starts from a collected heap: the
    cyclic garbage a call leaves for the collector, and so the peak, depend on where the collector's counts stand
    when it starts (an earlier test in the process, the first measurement): up to 150 kB apart for one input."""
    gc.collect()
    tracemalloc.start()
    try:
        monitor_records(source, dedupe=dedupe)  # type: ignore[arg-type]
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(("dedupe", "per_record"), [(False, 4), (True, 40)])
def test_what_the_monitor_keeps_follows_groups_not_records(dedupe, per_record):
    """Twice the records in the same 2,000 groups. Streaming, the monitor keeps about as much (only the first groups'
    full sample grows with their size). Deduplicating, it must hold the input's records till the end, but no more
    than a reference and a number for each: before, it kept a key tuple and an (index, record) pair per record, about
    150 bytes, which made the default path take twice the memory of the statistics themselves."""
    base, twice = list(records(16000, 8)), list(records(32000, 16))
    kept = peak_of_monitor(base if dedupe else iter(base), dedupe=dedupe)
    kept_twice = peak_of_monitor(twice if dedupe else iter(twice), dedupe=dedupe)
    assert kept_twice - kept < per_record * 16000, (kept, kept_twice)


def with_repeats(rnd: random.Random) -> list[Record]:
    base = list(records(600, 6, seed=1))
    out = list(base)
    for _ in range(150):  # re-deliveries, some with another value: the last copy counts
        r = rnd.choice(base)
        out.insert(rnd.randrange(len(out) + 1), r.model_copy(update={"aggregate": rnd.random()}))
    return out


def test_records_whose_keys_share_a_hash_are_still_told_apart(monkeypatch):
    """Every key hashing alike (the worst collision) gives the same result, duplicates and their order as the
    usual hashes: the hash only picks which records to compare by key."""
    input_ = with_repeats(random.Random(3))
    usual = monitor_records(input_)
    assert usual.duplicates, "the case must hold repeated deliveries"
    monkeypatch.setattr(statistics, "_key_hash", lambda record: 0)
    colliding = monitor_records(input_)
    assert colliding.duplicates == usual.duplicates
    assert colliding.to_dict()["steps"] == usual.to_dict()["steps"]


def test_dedupe_keeps_the_last_copies_in_input_order():
    """The kept copies are read in input order (each at the place of its last delivery), as one dict of every key,
    re-inserted on each repeat, gave them: the sums are added in that order."""
    input_ = with_repeats(random.Random(5))
    last: dict[tuple, int] = {}
    for i, r in enumerate(input_):
        last[statistics.delivery_key(r)] = i
    kept = sorted(last.values())
    expected = monitor_records([input_[i] for i in kept], dedupe=False)
    got = monitor_records(input_)
    assert sorted(got.duplicates) == sorted(set(range(len(input_))) - set(kept))
    assert got.to_dict()["steps"] == expected.to_dict()["steps"]
