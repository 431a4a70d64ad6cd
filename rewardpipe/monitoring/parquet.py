"""Records as Parquet with an explicit schema, so pandas, DuckDB and Athena read them without guessing.

Fixed columns plus ``map<string, double>`` for components and weights (a reward's component set is open,
and a map keeps one schema for every run); ``metrics`` are heterogeneous (numbers, text, booleans), so they
travel as one JSON text column. A component that could not be computed is a null map value, never 0.
Rows are written in row groups of ``ROW_GROUP`` records, so memory stays flat however long the run.
Needs ``pyarrow`` (``pip install 'rewardpipe[parquet]'``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rewardpipe.store import encode_id

ROW_GROUP = 100_000
#: The column of ``ErrorInfo.non_finite``; files written before it lack it, and read as null (see fastread).
NONFINITE_COLUMN = "error_non_finite"


class ParquetUnavailable(RuntimeError):
    """pyarrow is not installed."""


def _pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - exercised only without the extra
        raise ParquetUnavailable("--parquet needs pyarrow: pip install 'rewardpipe[parquet]'") from None
    return pa, pq


def record_schema():
    pa, _ = _pyarrow()
    return pa.schema(
        [
            pa.field("schema", pa.string(), nullable=False),
            pa.field("run_id", pa.string(), nullable=False),
            pa.field("step", pa.int64(), nullable=False),
            pa.field("group_id", pa.string(), nullable=False),
            pa.field("rollout_id", pa.string(), nullable=False),
            pa.field("task_id", pa.string(), nullable=False),
            pa.field("status", pa.string(), nullable=False),
            pa.field("error_kind", pa.string()),
            pa.field("error_message", pa.string()),
            # ErrorInfo.non_finite (null on other kinds, and absent from files written before it: NONFINITE_COLUMN)
            pa.field(NONFINITE_COLUMN, pa.bool_()),
            pa.field("aggregate", pa.float64()),
            pa.field("components", pa.map_(pa.string(), pa.float64())),
            pa.field("weights", pa.map_(pa.string(), pa.float64())),
            pa.field("metrics_json", pa.string()),
        ]
    )


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _row(record: Any) -> dict[str, Any]:
    data = record if isinstance(record, Mapping) else record.model_dump(by_alias=True)
    error = data.get("error") or {}
    return {
        "schema": data.get("schema") or "rewardpipe.record/v1",
        "run_id": data["run_id"],
        "step": int(data.get("step", 0)),
        "group_id": data["group_id"],
        "rollout_id": data["rollout_id"],
        "task_id": data["task_id"],
        "status": data["status"],
        "error_kind": error.get("kind"),
        "error_message": error.get("message"),
        NONFINITE_COLUMN: error.get("non_finite") if isinstance(error.get("non_finite"), bool) else None,
        "aggregate": _finite(data.get("aggregate")),
        "components": [(k, _finite(v)) for k, v in (data.get("components") or {}).items()],
        "weights": [(k, _finite(v)) for k, v in (data.get("weights") or {}).items()],
        "metrics_json": json.dumps(
            {
                k: None if isinstance(v, float) and not math.isfinite(v) else v
                for k, v in (data.get("metrics") or {}).items()
            },
            sort_keys=True,
            default=str,
        ),
    }


class ParquetSink:
    """Push records in with :meth:`add` or :meth:`add_many` (e.g. through
    :func:`rewardpipe.monitoring.columns.tee`), then
    :meth:`close`: writes ``<directory>/<run_id>.parquet`` in row groups of ``ROW_GROUP``."""

    def __init__(self, directory: str | Path, run_id: str) -> None:
        self._pa, pq = _pyarrow()
        self.schema = record_schema()
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{encode_id(run_id)}.parquet"
        self.rows = 0
        self._batch: list[dict[str, Any]] = []
        self._writer = pq.ParquetWriter(self.path, self.schema)

    def add(self, record: Any) -> None:
        self.add_many([record])

    def add_many(self, records: list[Any]) -> None:
        self._batch.extend(_row(record) for record in records)
        if len(self._batch) >= ROW_GROUP:
            self._flush()

    def _flush(self) -> None:
        self._writer.write_table(self._pa.Table.from_pylist(self._batch, schema=self.schema))
        self.rows += len(self._batch)
        self._batch = []

    def close(self) -> Path:
        if self._batch or self.rows == 0:
            self._flush()
        self._writer.close()
        return self.path


def write_parquet(records: Iterable[Any], directory: str | Path, run_id: str) -> tuple[Path, int]:
    """Write ``<directory>/<run_id>.parquet``; returns (path, rows written)."""
    sink = ParquetSink(directory, run_id)
    for record in records:
        sink.add(record)
    return sink.close(), sink.rows
