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


# -- the columnar readers and a metric of any type -------------------------------------------------------------


@pytest.mark.parametrize("exec_mode", [1, 2.5, True], ids=["int", "float", "bool"])
@pytest.mark.parametrize("source", ["file", "store"])
def test_an_exec_mode_metric_that_is_no_text_is_read_as_the_careful_path_reads_it(tmp_path, source, exec_mode):
    """A metric's value is a number, a bool or text; pyarrow's reader typed an all-numeric ``exec_mode`` column as
    numbers and compared it with the text "inprocess": `monitor` ended with "unexpected ArrowNotImplementedError"
    on the whole file or store. Such a value is not "inprocess", as a Record's ``metrics.get(...)`` says."""
    import json

    from typer.testing import CliRunner

    from rewardpipe.cli import app
    from rewardpipe.store import LocalStore

    given = [{**r, "schema": "rewardpipe.record/v1", "metrics": {"exec_mode": exec_mode}} for r in _records()]
    if source == "file":
        path = tmp_path / "records.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in given))
    else:
        path = tmp_path / "store"
        store = LocalStore(path)
        for r in given:
            store.put_record(Record.model_validate(r))
    out = CliRunner().invoke(app, ["monitor", str(path), "--json", "--no-write-alarms"])
    assert out.exit_code == 0, out.output
    expected = monitor_records(given).to_dict()
    assert json.loads(out.stdout)["steps"] == json.loads(json.dumps(expected["steps"]))


def test_iter_jsonl_records_names_a_line_that_is_not_utf8_and_reads_on(tmp_path):
    """The public reader decoded the file as one text stream: one byte that is not UTF-8 raised UnicodeDecodeError
    from the middle of the iteration, losing every later record (`rewardpipe monitor` reads line by line)."""
    import json

    from rewardpipe.monitoring import iter_jsonl_records

    path = tmp_path / "records.jsonl"
    lines = [json.dumps(r).encode() for r in _records()]
    lines.insert(2, b'{"run_id": "\xff"}')
    path.write_bytes(b"\n".join(lines) + b"\n")
    bad: list = []
    assert len(list(iter_jsonl_records(path, on_bad=bad.append))) == 24
    assert [b.key for b in bad] == [f"{path}:3"] and bad[0].reason.startswith("not UTF-8 text")
    assert len(list(iter_jsonl_records(path))) == 24  # (no on_bad: skipped all the same)
