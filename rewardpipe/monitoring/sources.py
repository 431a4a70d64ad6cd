"""Reading records from a JSONL file for the monitor (a store reads its own: ``Store.iter_records``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from pydantic import ValidationError

from rewardpipe.models import Record, field_error
from rewardpipe.store import BadObject


def record_of_line(line: bytes, where: str, on_bad: Callable[[BadObject], None] | None) -> Record | None:
    """The record one JSONL line holds, or None after reporting why it holds none (as ``where``, ``file:line``):
    a line is decoded on its own, so a byte that is not UTF-8 costs its line, never the lines after it."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        if on_bad is not None:
            on_bad(BadObject(where, f"not UTF-8 text ({exc.reason} at byte {exc.start + 1} of the line)"))
        return None
    try:
        return Record.model_validate_json(text)
    except ValidationError as exc:
        if on_bad is not None:
            first = exc.errors()[0]
            on_bad(BadObject(where, "not valid JSON" if first["type"] == "json_invalid" else field_error(first)))
        return None


def iter_jsonl_records(path: str | Path, on_bad: Callable[[BadObject], None] | None = None) -> Iterator[Record]:
    """Records from a JSONL file, one per line; a bad line (not UTF-8, not JSON, not a record) is reported as
    ``<path>:<line>`` and skipped."""
    path = Path(path)
    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            record = record_of_line(line, f"{path}:{lineno}", on_bad)
            if record is not None:
                yield record
