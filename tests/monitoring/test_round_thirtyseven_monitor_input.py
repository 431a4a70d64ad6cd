"""Round thirty-seven: the monitor's input path (records given to ``monitor_records``, a JSONL file, a store).

``monitor_records`` checks each record once: a plain dict is validated into a Record, a Record is taken as it is.
On its default path (dropping repeated deliveries) every record went through that check twice, once before the
deduplication and once in the accumulation, a generator step per record for nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from rewardpipe.models import Record
from rewardpipe.monitoring import monitor, monitor_records, statistics
from tests.monitoring.test_library_duplicates import rec


def _records() -> list[dict[str, Any]]:
    return [rec(1, g, k, float((g + k) % 2)) for g in range(6) for k in range(4)]


@pytest.fixture
def checked(monkeypatch) -> list[int]:
    """How many records went through ``validated_records`` (wherever the monitor calls it from)."""
    seen: list[int] = []
    original = statistics.validated_records

    def counting(records: Any, on_bad: Any = None) -> Iterator[tuple[int, Record]]:
        for item in original(records, on_bad):
            seen.append(item[0])
            yield item

    monkeypatch.setattr(statistics, "validated_records", counting)
    monkeypatch.setattr(monitor, "validated_records", counting)
    return seen


@pytest.mark.parametrize("as_records", [False, True], ids=["dicts", "records"])
def test_each_record_is_checked_once_on_the_default_path(checked, as_records):
    given: list[Any] = _records()
    if as_records:
        given = [Record.model_validate(r) for r in given]
    result = monitor_records(given)
    assert len(checked) == len(given)
    assert result.step(1).scored == 24 and result.step(1).components["c"].verdict == "ok"


def test_checked_once_and_still_refused_when_bad(checked):
    """Validation is not weakened: a bad dict is reported and left out, on either path."""
    given: list[Any] = _records()
    given.insert(3, {**_records()[0], "status": "maybe"})
    given.insert(7, {**_records()[1], "step": -1})
    for dedupe in (True, False):
        checked.clear()
        result = monitor_records(given, dedupe=dedupe)
        assert len(checked) == len(given) - 2  # (the two refused are never yielded)
        assert [bad["key"] for bad in result.unreadable] == ["record #3", "record #7"]
        assert result.step(1).scored == 24


def test_the_default_path_gives_what_the_streaming_path_gives_without_repeats():
    streamed = monitor_records(_records(), dedupe=False).to_dict()
    deduped = monitor_records(_records()).to_dict()
    assert deduped == streamed


def test_a_repeated_delivery_still_counts_once():
    given = _records()
    again = {**given[5], "aggregate": 9.0, "components": {"c": 9.0}}
    result = monitor_records([*given, again])
    assert result.duplicates == [5] and result.step(1).scored == 24
