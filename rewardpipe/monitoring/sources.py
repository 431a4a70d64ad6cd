"""Reading records from a JSONL file for the monitor (a store reads its own: ``Store.iter_records``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from pydantic import ValidationError

from rewardpipe.models import Record, field_error
from rewardpipe.store import BadObject


def iter_jsonl_records(path: str | Path, on_bad: Callable[[BadObject], None] | None = None) -> Iterator[Record]:
    """Records from a JSONL file, one per line; a bad line is reported as ``<path>:<line>`` and skipped."""
    path = Path(path)
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                yield Record.model_validate_json(line)
            except ValidationError as exc:
                if on_bad is not None:
                    first = exc.errors()[0]
                    reason = "not valid JSON" if first["type"] == "json_invalid" else field_error(first)
                    on_bad(BadObject(f"{path}:{lineno}", reason))
