"""Reading records straight into columns (:class:`~rewardpipe.monitoring.batch.RecordBatch`), vouched for.

:func:`read_jsonl_batch` reads a JSONL file of records as columns, far faster than validating a model per
line, and checks every record's shape column by column: the fields a Record requires, their types, the
status and schema literals, finite numbers, one JSON object per line, UTF-8. Two readers, the first that
can vouch for the whole file wins:

1. pyarrow's JSON reader (C++, multi-threaded) with an explicit schema built from a sample of the lines,
   refusing any field the schema does not name; where pyarrow cannot tell an absent field from a null one
   (a component given as None counts as missing, an absent one does not), those few lines are re-read;
2. orjson, line by line into Python objects, then the same checks (when pyarrow is not installed, or a
   line has a field the sample did not show).

Either returns None as soon as anything is not plainly a valid record (a line that is not JSON or not
UTF-8, a missing field, a wrong type, a non-finite number, an alias, an unknown field): the caller then
takes the careful per-line path, whose messages name the file, line and field. So a file is either read
here in full, with the meaning the careful path gives it, or not at all.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import chain
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from rewardpipe.models import MAX_SCORE_MAGNITUDE, MAX_STEP, RECORD_SCHEMA, field_error
from rewardpipe.monitoring.batch import Labels, RecordBatch
from rewardpipe.monitoring.columns import paused_gc
from rewardpipe.monitoring.statistics import AGG, USER_FALLBACKS, last_copies, replaced_user

SAMPLE_LINES = 2000  # lines (from the start and the end) the pyarrow schema is built from
SAMPLE_BYTES = 1 << 22
# More distinct component, weight or metric names than this and a file is not a reward's records as
# columns would hold them (one column per name and row): the careful path, whose memory follows the
# values actually present, takes it.
MAX_NAMES = 256
_IDS = ("run_id", "group_id", "rollout_id", "task_id")
_STRINGS = (*_IDS, "status")
_REQUIRED = itemgetter(*_STRINGS, "components", "weights", "aggregate")
_NUMBER = {float, int}
_OPTIONAL_NUMBER = {float, int, type(None)}
_METRIC = {float, int, str, bool, type(None)}
_EMPTY: dict[str, Any] = {}


class _Absent:
    """A component the record does not name (neither a value nor None)."""


_ABSENT = _Absent()


class _Lines:
    """Line access into the file's bytes by 1-based line number. Line starts are found on demand, scanning
    only as far as the furthest line asked for (the sampled rollouts are the first groups of each step)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self._starts = [0]

    def __getitem__(self, number: int) -> bytes:
        starts, find, data = self._starts, self.data.find, self.data
        while len(starts) <= number and starts[-1] <= len(data):
            end = find(b"\n", starts[-1])
            starts.append(len(data) + 1 if end < 0 else end + 1)
        return data[starts[number - 1] : starts[number] - 1]


def _loader(lines: Callable[[int], bytes]) -> Callable[[int], Any]:
    def load(position: int) -> Any:
        from rewardpipe.models import Record

        return Record.model_validate_json(lines(position))

    return load


def read_jsonl_batch(path: Path) -> RecordBatch | None:
    """Every record of a JSONL file as columns (repeated deliveries not yet dropped), or None when the
    file needs the careful path."""
    return _vouched(path.read_bytes())


def _vouched(data: bytes) -> RecordBatch | None:
    """JSONL bytes as a batch: pyarrow's reader, else orjson's, else None (not UTF-8, or neither vouches)."""
    with paused_gc():
        batch = _arrow_batch(data)
        if batch is not None:
            return batch
        return _orjson_batch(data) if _utf8(data) else None


def _utf8(data: bytes) -> bool:
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# -- 1. pyarrow ---------------------------------------------------------------------------------------


def _line_numbers(data: bytes) -> np.ndarray | None:
    """The 1-based numbers of the non-blank lines, when every one of them is a single ``{...}`` (so that
    pyarrow's rows are exactly the lines); None otherwise. (No copy of the data: files are large.)"""
    if not data.startswith(b"{"):
        return None
    newlines = data.count(b"\n")
    ends_with_newline = data.endswith(b"\n")
    between = data.count(b"}\n{") + (data.count(b"}\r\n{") if b"\r" in data else 0)
    if between == newlines - ends_with_newline and data.endswith((b"}", b"}\n", b"}\r\n")):
        return np.arange(1, newlines - ends_with_newline + 2, dtype=np.int64)
    raw = np.frombuffer(data, dtype=np.uint8)
    if ends_with_newline:
        raw = raw[:-1]
    ends = np.concatenate([np.flatnonzero(raw == 10), [len(raw)]])
    starts = np.concatenate([[0], ends[:-1] + 1])
    last = ends - 1  # the last byte of each line, before a "\r"
    crlf = (last >= starts) & (raw[np.clip(last, 0, None)] == 13)
    last = last - crlf
    inner = last >= starts  # not blank
    if not ((raw[starts[inner]] == ord("{")) & (raw[last[inner]] == ord("}"))).all():
        return None
    return np.flatnonzero(inner) + 1


def _sample(data: bytes) -> list[Any] | None:
    """Up to SAMPLE_LINES lines from the start and as many from the end, parsed."""
    head = data[:SAMPLE_BYTES].split(b"\n")
    if len(data) > SAMPLE_BYTES:
        head.pop()  # cut mid-line
        tail = data[-SAMPLE_BYTES:].split(b"\n")[1:][-SAMPLE_LINES:]
    else:
        tail = []
    try:
        return [orjson.loads(line) for line in chain(head[:SAMPLE_LINES], tail) if line.strip()]
    except orjson.JSONDecodeError:
        return None


def _arrow_schema(sample: list[Any]) -> Any:
    """The pyarrow schema of records shaped like ``sample``, or None if the sample is not plainly records."""
    import pyarrow as pa

    components: dict[str, None] = {}
    weights: dict[str, None] = {}
    metrics: dict[str, set[type]] = {}
    for record in sample:
        if type(record) is not dict:
            return None
        for name, into in (("components", components), ("weights", weights)):
            part = record.get(name)
            if type(part) is not dict:
                return None
            into.update(dict.fromkeys(part))
        for key, value in (record.get("metrics") or {}).items():
            metrics.setdefault(key, set()).add(type(value))
    if max(len(components), len(weights), len(metrics)) > MAX_NAMES:
        return None
    metric_fields = []
    for key, kinds in metrics.items():
        kinds.discard(type(None))
        if not kinds or kinds == {str}:
            metric_fields.append((key, pa.string()))
        elif kinds == {bool}:
            metric_fields.append((key, pa.bool_()))
        elif kinds <= _NUMBER:
            metric_fields.append((key, pa.float64()))
        else:
            return None
    numbers = lambda names: pa.struct([(name, pa.float64()) for name in names])  # noqa: E731
    return pa.schema(
        [
            ("schema", pa.string()),
            *[(name, pa.string()) for name in _STRINGS],
            ("step", pa.int64()),
            ("error", pa.struct([("kind", pa.string()), ("message", pa.string()), ("non_finite", pa.bool_())])),
            ("components", numbers(components)),
            ("weights", numbers(weights)),
            ("aggregate", pa.float64()),
            ("metrics", pa.struct(metric_fields)),
        ]
    )


def _arrow_batch(data: bytes) -> RecordBatch | None:
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.json  # present in this build (it is optional in pyarrow's own)
    except ImportError:  # pragma: no cover - pyarrow is the optional "parquet" extra
        return None
    sample = _sample(data)
    schema = _arrow_schema(sample) if sample else None
    if schema is None:
        return None
    # pyarrow parses without the GIL (on every core it can get); the checks of the bytes that must hold
    # before its rows can be trusted as the file's lines hold the GIL, so they run beside it, on the time
    # its threads leave idle, instead of before it.
    with ThreadPoolExecutor(1) as pool:
        parsing = pool.submit(_read_json, data, schema)
        positions = _line_numbers(data) if _utf8(data) else None
        aggregates_named = data.count(b'"aggregate":') if positions is not None else -1
        table = parsing.result()
    if positions is None or table is None or table.num_rows != len(positions):
        return None
    table = table.combine_chunks()
    column = {
        name: table.column(name).chunk(0)
        if table.column(name).num_chunks
        else pa.array([], type=schema.field(name).type)
        for name in schema.names
    }
    if any(column[name].null_count for name in (*_STRINGS, "schema", "step", "components", "weights")):
        return None  # a required field absent or null (or a step not given: rare, left to the careful path)
    if len(column["step"]) and not _steps_in_bounds(column["step"].to_numpy(zero_copy_only=False)):
        return None  # a Record refuses the step: the careful path names the line
    if any(pc.min(pc.utf8_length(column[name])).as_py() == 0 for name in _IDS if len(column[name])):
        return None  # an empty id: refused by a Record too
    if not pc.all(pc.equal(column["schema"], RECORD_SCHEMA)).as_py():
        return None
    status = column["status"]
    scored = pc.equal(status, "scored").to_numpy(zero_copy_only=False)
    if not (scored | pc.equal(status, "error").to_numpy(zero_copy_only=False)).all():
        return None
    lines = _Lines(data)
    recheck = _Recheck(lines, positions)

    values: dict[str, np.ndarray] = {}
    nulls: dict[str, np.ndarray] = {}
    components = column["components"]
    for name in [components.type.field(i).name for i in range(components.type.num_fields)]:
        got = _numbers(components.field(name))
        if got is None:
            return None
        values[name], null = got
        # None counts as missing in a scored record, an absent component does not: ask the line
        nulls[name] = null & scored
    aggregate = _numbers(column["aggregate"])
    if aggregate is None:
        return None
    values[AGG], agg_null = aggregate
    nulls[AGG] = agg_null & scored
    # Every row names "aggregate" exactly when the key occurs once per row: it cannot occur inside a JSON
    # string (a quote there is escaped), a row cannot hold it twice (pyarrow refuses repeated keys), and no
    # nested field may contain the word (pyarrow refuses fields the schema does not name).
    nested = [f.name for name in ("components", "weights", "metrics", "error") for f in schema.field(name).type]
    agg_given = aggregates_named == len(positions) and not any("aggregate" in n for n in nested)
    if not recheck.nulls(nulls, agg_null, agg_given):
        return None

    weights: dict[str, np.ndarray] = {}
    weight_struct = column["weights"]
    for i in range(weight_struct.type.num_fields):
        name = weight_struct.type.field(i).name
        got = _numbers(weight_struct.field(name))
        if got is None:
            return None
        weights[name], null = got
        if null.any() and not recheck.absent(np.flatnonzero(null), "weights", name):
            return None  # an explicit null weight is not a number

    error = column["error"]
    present = ~error.is_null().to_numpy(zero_copy_only=False)
    kind, message = error.field("kind"), error.field("message")
    if (
        present & (kind.is_null().to_numpy(zero_copy_only=False) | message.is_null().to_numpy(zero_copy_only=False))
    ).any():
        return None
    kinds = pc.if_else(error.is_null(), "unknown", kind)

    metrics = column["metrics"]
    if metrics.null_count and not recheck.absent(
        np.flatnonzero(metrics.is_null().to_numpy(zero_copy_only=False)), "metrics", None
    ):
        return None  # "metrics": null is not a mapping
    for i in range(metrics.type.num_fields):
        field = metrics.field(i)
        if pa.types.is_floating(field.type) and not _finite_or_null(field):
            return None
    names = [metrics.type.field(i).name for i in range(metrics.type.num_fields)]
    if "exec_mode" in names and pa.types.is_string(metrics.field("exec_mode").type):
        inprocess = pc.fill_null(pc.equal(metrics.field("exec_mode"), "inprocess"), False).to_numpy(
            zero_copy_only=False
        )
    else:  # none, or a number or a bool (a metric's value is any of them): never "inprocess", as for a Record
        inprocess = np.zeros(len(positions), dtype=bool)
    user_fallbacks = _struct_fallbacks(metrics)

    run_ids, group_ids, rollout_ids, task_ids, error_kinds = _labels_of(
        column["run_id"], column["group_id"], column["rollout_id"], column["task_id"], kinds
    )
    return RecordBatch(
        run_ids=run_ids,
        steps=column["step"].to_numpy(zero_copy_only=False).astype(np.int64),
        group_ids=group_ids,
        rollout_ids=rollout_ids,
        task_ids=task_ids,
        scored=scored,
        error_kinds=error_kinds,
        inprocess=inprocess,
        weights=weights,
        values=values,
        nulls=nulls,
        positions=positions,
        load=_loader(lines.__getitem__),
        user_fallbacks=user_fallbacks,
    )


def _read_json(data: bytes, schema: Any) -> Any:
    """pyarrow's table of the JSONL bytes under ``schema`` (no field it does not name), or None."""
    import pyarrow as pa
    import pyarrow.json as pj

    try:
        return pj.read_json(
            pa.BufferReader(data),
            read_options=pj.ReadOptions(block_size=_block_size(len(data))),
            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error"),
        )
    except (pa.ArrowInvalid, ValueError):
        return None


MAX_BLOCK = 16 << 20


def _block_size(size: int) -> int:
    """pyarrow's JSON block: large blocks cost less CPU per byte (``read_json`` alone on the 391 MiB file of
    benchmarks/monitor_file.py, idle: 5.7 CPU-s with its default 1 MiB blocks, 4.7 with 16 MiB), but each
    block is one thread's work, so a file still gets a few blocks per core. A line longer than the block
    makes pyarrow refuse the file (the careful path reads it), so never less than the 1 MiB default."""
    import os

    return max(1 << 20, min(MAX_BLOCK, size // (4 * (os.cpu_count() or 1))))


def _labels_of(*arrays: Any) -> list[Labels]:
    """:func:`_labels` of each text column, two at a time (pyarrow hashes them without the GIL)."""
    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(_labels, arrays))


def _labels(array: Any) -> Labels:
    encoded = array.dictionary_encode()
    return Labels(
        encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64),
        encoded.dictionary.to_pylist,
        len(encoded.dictionary),
    )


def _finite_or_null(array: Any) -> bool:
    values = array.to_numpy(zero_copy_only=False)  # nulls become NaN
    return bool(np.isfinite(values[~array.is_null().to_numpy(zero_copy_only=False)]).all())


def _numbers(array: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """(float64 with NaN for null, null mask), or None if a non-null value is not finite (pyarrow reads
    the non-JSON NaN literal; a Record would not count it as a value)."""
    null = array.is_null().to_numpy(zero_copy_only=False)
    values = array.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    if not (np.abs(values[~null]) <= MAX_SCORE_MAGNITUDE).all():  # NaN, inf or beyond a Record's bound
        return None
    return values, null


class _Recheck:
    """Re-read the few lines where pyarrow's null could be an absent field or an explicit null."""

    def __init__(self, lines: _Lines, positions: np.ndarray) -> None:
        self.lines, self.positions = lines, positions

    def _parsed(self, rows: np.ndarray) -> list[Any]:
        return [orjson.loads(self.lines[int(self.positions[row])]) for row in rows.tolist()]

    def nulls(self, nulls: dict[str, np.ndarray], agg_null: np.ndarray, agg_given: bool) -> bool:
        """Keep ``nulls`` only where the line says None (not absent); the aggregate must be given (known
        already when ``agg_given``)."""
        names = [name for name in nulls if name != AGG]
        rows = np.flatnonzero(
            np.logical_or.reduce(
                [nulls[name] for name in names] + [np.zeros(len(agg_null), dtype=bool) if agg_given else agg_null]
            )
        )
        parsed = self._parsed(rows)
        for row, record in zip(rows.tolist(), parsed, strict=True):
            if "aggregate" not in record:
                return False  # required: the careful path names it
            for name in names:
                if nulls[name][row] and name not in record["components"]:
                    nulls[name][row] = False
        return True

    def absent(self, rows: np.ndarray, part: str, name: str | None) -> bool:
        """True when every one of ``rows`` leaves the field out rather than giving null."""
        parsed = self._parsed(rows)
        if name is None:
            return all(part not in record for record in parsed)
        return all(name not in record[part] for record in parsed)


# -- 2. orjson ----------------------------------------------------------------------------------------


def _orjson_batch(data: bytes) -> RecordBatch | None:
    lines = data.split(b"\n")
    if lines and not lines[-1].strip():
        lines.pop()
    got = _parse(lines)
    if got is None:
        return None
    parsed, positions = got
    if not parsed or _types(parsed) != {dict}:
        return None
    try:
        fields = list(map(_REQUIRED, parsed))
    except KeyError:
        return None
    run_ids, group_ids, rollout_ids, task_ids, statuses, comps, weights, aggregates = map(
        list, zip(*fields, strict=True)
    )
    steps = [d.get("step", 0) for d in parsed]
    errors = [d.get("error") for d in parsed]
    metrics = [d.get("metrics", _EMPTY) for d in parsed]
    schemas = {d.get("schema", RECORD_SCHEMA) for d in parsed}
    if (
        schemas != {RECORD_SCHEMA}
        or any("schema_" in d for d in parsed)  # the field's own name is accepted too: leave it to the model
        or not all(
            _types(column) <= {str} and "" not in column for column in (run_ids, group_ids, rollout_ids, task_ids)
        )
        or not set(statuses) <= {"scored", "error"}
        or not _types(steps) <= {int}
        or not (_types(comps) | _types(weights) | _types(metrics)) <= {dict}
        or not _types(chain.from_iterable(map(dict.values, metrics))) <= _METRIC
        or not _types(errors) <= {dict, type(None)}
    ):
        return None
    error_kinds = _error_kinds(statuses, errors)
    weight_columns = _named_columns(weights, _NUMBER | {_Absent})
    values = _named_columns(comps, _OPTIONAL_NUMBER | {_Absent})
    aggregate = _floats(aggregates, _OPTIONAL_NUMBER)
    if error_kinds is None or weight_columns is None or values is None or aggregate is None:
        return None
    values[AGG] = aggregate
    try:
        step_column = np.array(steps, dtype=np.int64)
    except OverflowError:
        return None
    if not _steps_in_bounds(step_column):
        return None
    scored = np.fromiter((s == "scored" for s in statuses), dtype=bool, count=len(statuses))
    inprocess = np.fromiter((m.get("exec_mode") == "inprocess" for m in metrics), dtype=bool, count=len(metrics))
    user_fallbacks = np.fromiter(map(replaced_user, metrics), dtype=bool, count=len(metrics))
    return RecordBatch(
        run_ids=Labels.of(run_ids),
        steps=step_column,
        group_ids=Labels.of(group_ids),
        rollout_ids=Labels.of(rollout_ids),
        task_ids=Labels.of(task_ids),
        scored=scored,
        error_kinds=Labels.of(error_kinds),
        inprocess=inprocess,
        weights={k: v for k, (v, _) in weight_columns.items()},
        values={k: v for k, (v, _) in values.items()},
        nulls={k: n & scored for k, (_, n) in values.items()},
        positions=positions,
        load=_loader(lambda number: lines[number - 1]),
        user_fallbacks=user_fallbacks,
    )


def _struct_fallbacks(metrics: Any) -> np.ndarray:
    """:func:`replaced_user` of each row of a metrics struct column: its numeric ``llm_user_fallbacks`` field > 0."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = [metrics.type.field(i).name for i in range(metrics.type.num_fields)]
    if USER_FALLBACKS not in names:
        return np.zeros(len(metrics), dtype=bool)
    field = metrics.field(USER_FALLBACKS)
    if not (pa.types.is_integer(field.type) or pa.types.is_floating(field.type)):
        return np.zeros(len(metrics), dtype=bool)  # a bool or text is not a count, as for a Record
    return np.asarray(pc.fill_null(pc.greater(field, 0), False).to_numpy(zero_copy_only=False), dtype=bool)


#: What json.dumps writes for a positive ``llm_user_fallbacks`` (3, 2.0, 0.5, 1e-05; true and "3" are not counts).
#: A metric's value is a number, a bool or text (a Record refuses any other), and a quote inside text is escaped: the
#: pattern cannot come from a value.
_FALLBACKS_JSON = f'"{USER_FALLBACKS}": (?:[1-9]|0\\.[0-9]*[1-9])'


def _json_fallbacks(metrics_json: Any) -> np.ndarray:
    """:func:`replaced_user` of each row's ``metrics_json`` text (json.dumps(sort_keys=True) of the metrics)."""
    import pyarrow.compute as pc

    found = pc.fill_null(pc.match_substring_regex(metrics_json, _FALLBACKS_JSON), False)
    return np.asarray(found.to_numpy(zero_copy_only=False), dtype=bool)


def _steps_in_bounds(steps: np.ndarray) -> bool:
    """Every step is one a Record accepts (0 to MAX_STEP)."""
    return not len(steps) or (int(steps.min()) >= 0 and int(steps.max()) <= MAX_STEP)


def _parse(lines: list[bytes]) -> tuple[list[Any], np.ndarray] | None:
    """(parsed objects, their 1-based line numbers), skipping blank lines; None if a line is not JSON."""
    loads = orjson.loads
    try:
        return list(map(loads, lines)), np.arange(1, len(lines) + 1)
    except orjson.JSONDecodeError:
        pass
    parsed, numbers = [], []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            parsed.append(loads(line))
        except orjson.JSONDecodeError:
            return None
        numbers.append(number)
    return parsed, np.asarray(numbers, dtype=np.int64)


def _types(values: Any) -> set[type]:
    return set(map(type, values))


def _error_kinds(statuses: list[str], errors: list[Any]) -> list[str] | None:
    """Per row, the error's kind ("unknown" without an error object; "" for scored rows); None if an
    error object is not ``{"kind": str, "message": str, ...}``."""
    kinds = [""] * len(statuses)
    for row, error in enumerate(errors):
        if error is None:
            if statuses[row] == "error":
                kinds[row] = "unknown"
            continue
        kind, message = error.get("kind"), error.get("message")
        if type(kind) is not str or type(message) is not str:
            return None
        if statuses[row] == "error":
            kinds[row] = kind
    return kinds


def _floats(column: list[Any], allowed: set[type]) -> tuple[np.ndarray, np.ndarray] | None:
    """(values with NaN for None/absent, None mask); None if a value is not allowed or not finite."""
    kinds = _types(column)
    if not kinds <= allowed:
        return None
    if kinds <= _NUMBER:
        values, nulls = np.array(column, dtype=np.float64), np.zeros(len(column), dtype=bool)
    else:
        nulls = np.fromiter((v is None for v in column), dtype=bool, count=len(column))
        if _Absent in kinds:
            column = [None if v is _ABSENT else v for v in column]
        values = np.array(column, dtype=np.float64)  # None -> NaN
    if (np.abs(values) > MAX_SCORE_MAGNITUDE).any():  # NaN cannot come out of orjson, but 1e999 is inf
        return None
    return values, nulls


def _named_columns(dicts: list[dict], allowed: set[type]) -> dict[str, tuple[np.ndarray, np.ndarray]] | None:
    """Per key (first seen first), its column; None if a value is not of an ``allowed`` type or not finite."""
    names = list(dicts[0]) if dicts else []
    columns: list[list[Any]]
    try:  # the common case: every record names the same keys
        if set(map(len, dicts)) != {len(names)}:
            raise KeyError
        columns = (
            list(map(list, zip(*map(itemgetter(*names), dicts), strict=True)))
            if len(names) > 1
            else [[d[names[0]] for d in dicts]]
            if names
            else []
        )
    except KeyError:
        names = list(dict.fromkeys(chain.from_iterable(dicts)))
        if len(names) > MAX_NAMES:
            return None
        columns = [[d.get(name, _ABSENT) for d in dicts] for name in names]
    out = {}
    for name, column in zip(names, columns, strict=True):
        floats = _floats(column, allowed)
        if floats is None:
            return None
        out[name] = floats
    return out


# -- Parquet (the files `rewardpipe report --parquet DIR` writes) ------------------------------------------


def parquet_files(path: Path) -> list[Path]:
    """The Parquet files PATH stands for: itself, or the ``*.parquet`` files of a directory (sorted)."""
    return [path] if path.is_file() else sorted(p for p in path.glob("*.parquet") if p.is_file())


def _parquet_table(files: list[Path], as_codes: tuple[str, ...] = ()) -> Any:
    """The files' rows as one table; the ``as_codes`` text columns read as dictionary arrays (codes and the
    distinct values, which Parquet already stores that way), with one dictionary across the files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rewardpipe.monitoring.parquet import NONFINITE_COLUMN, record_schema

    schema = record_schema()
    tables = [pq.read_table(f, read_dictionary=list(as_codes)) for f in files]
    where = schema.get_field_index(NONFINITE_COLUMN)
    for i, table in enumerate(tables):
        if NONFINITE_COLUMN not in table.schema.names and len(table.schema) == len(schema) - 1:
            # written before the column: every error's non_finite is unknown (None), as in an older record
            tables[i] = table.add_column(where, schema.field(where), pa.nulls(table.num_rows, pa.bool_()))
    for f, table in zip(files, tables, strict=True):
        if [(f.name, f.type.value_type if pa.types.is_dictionary(f.type) else f.type) for f in table.schema] != [
            (f.name, f.type) for f in schema
        ]:
            raise ValueError(
                f"{f}: not a rewardpipe records file (columns {', '.join(table.schema.names)}; "
                f"expected {', '.join(schema.names)})"
            )
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    return table.unify_dictionaries() if as_codes else table


def parquet_rows(files: list[Path], on_bad: Callable[[Any], None], duplicates: list[int]) -> Any:
    """The careful path for Parquet: one Record per row, validated; a bad row is reported as
    ``<file>:row <n>`` with the field, and skipped. A record given more than once (same run, step, group
    and rollout) counts once, the last copy, as for JSONL; the dropped rows' numbers go to ``duplicates``."""
    from pydantic import ValidationError

    from rewardpipe.models import Record
    from rewardpipe.store import BadObject

    def numbered() -> Iterator[tuple[int, Any]]:
        number = 0
        for f in files:
            for row in _parquet_table([f]).to_pylist():
                number += 1
                try:
                    yield number, Record.model_validate(_record_dict(row))
                except ValidationError as exc:
                    on_bad(BadObject(f"{f}:row {number}", field_error(exc.errors()[0])))
                except ValueError as exc:  # metrics_json is not JSON
                    on_bad(BadObject(f"{f}:row {number}", f"field 'metrics_json': {exc}"))

    yield from last_copies(numbered(), duplicates)


def _record_dict(row: dict[str, Any]) -> dict[str, Any]:
    import json

    from rewardpipe.monitoring.parquet import NONFINITE_COLUMN

    kind, message, non_finite = row.pop("error_kind"), row.pop("error_message"), row.pop(NONFINITE_COLUMN)
    metrics = row.pop("metrics_json")
    row["error"] = None if kind is None else {"kind": kind, "message": message or "", "non_finite": non_finite}
    row["metrics"] = json.loads(metrics) if metrics else {}
    row["components"] = dict(row["components"] or [])
    row["weights"] = dict(row["weights"] or [])
    return row


def read_parquet_batch(files: list[Path]) -> RecordBatch | None:
    """Every record of rewardpipe's Parquet export as columns, or None when a row needs the careful path
    (a required value missing, an unknown status). Raises ValueError for a file that is not such an export."""
    import pyarrow.compute as pc

    chunked = _parquet_table(files, as_codes=_CODED)
    rows = chunked.num_rows
    if rows == 0:
        return None
    maybe_coded = {name: _coded_labels(chunked.column(name)) for name in _CODED}
    coded = {name: labels for name, labels in maybe_coded.items() if labels is not None}
    table = chunked.drop_columns(list(_CODED)).combine_chunks()
    column = {name: table.column(name).chunk(0) for name in table.schema.names}
    if len(coded) < len(maybe_coded) or any(
        column[name].null_count for name in ("rollout_id", "step", "components", "weights")
    ):
        return None
    status, schema = coded["status"], coded["schema"]
    if not set(schema.names) <= {RECORD_SCHEMA} or not set(status.names) <= {"scored", "error"}:
        return None
    if not _steps_in_bounds(column["step"].to_numpy(zero_copy_only=False)):
        return None
    if any("" in coded[name].names for name in ("run_id", "group_id", "task_id")) or (
        pc.min(pc.utf8_length(column["rollout_id"])).as_py() == 0
    ):
        return None  # an empty id: the careful path names the row
    scored = np.asarray(status.codes == (status.names.index("scored") if "scored" in status.names else -1))
    values, nulls = _map_columns(column["components"], rows)
    weights, _ = _map_columns(column["weights"], rows)
    aggregate = column["aggregate"]
    values[AGG] = aggregate.to_numpy(zero_copy_only=False).astype(np.float64)
    nulls[AGG] = aggregate.is_null().to_numpy(zero_copy_only=False) & scored
    for name in nulls:
        nulls[name] &= scored
    # json.dumps(sort_keys=True) writes the key and its value like this; a quote inside a metric's text is
    # escaped, so the pattern cannot come from a value
    inprocess = pc.fill_null(pc.match_substring(column["metrics_json"], '"exec_mode": "inprocess"'), False)
    user_fallbacks = _json_fallbacks(column["metrics_json"])
    kinds = pc.if_else(column["error_kind"].is_null(), "unknown", column["error_kind"])

    def load(position: int) -> Any:
        from rewardpipe.models import Record

        return Record.model_validate(_record_dict(chunked.slice(position - 1, 1).to_pylist()[0]))

    return RecordBatch(
        run_ids=coded["run_id"],
        steps=column["step"].to_numpy(zero_copy_only=False).astype(np.int64),
        group_ids=coded["group_id"],
        rollout_ids=_labels(column["rollout_id"]),
        task_ids=coded["task_id"],
        scored=scored,
        error_kinds=_labels(kinds),
        inprocess=inprocess.to_numpy(zero_copy_only=False),
        user_fallbacks=user_fallbacks,
        weights=weights,
        values=values,
        nulls=nulls,
        positions=np.arange(1, rows + 1, dtype=np.int64),
        load=load,
        position_label="row",
    )


# The required text columns with few distinct values, read as codes (see _parquet_table). Not the rollout
# ids: all distinct, so one dictionary across the files costs more than encoding the column once.
_CODED = ("schema", "run_id", "group_id", "task_id", "status")


def _coded_labels(chunked: Any) -> Labels | None:
    """Labels of a dictionary column whose chunks share one dictionary; None if a value is null."""
    if chunked.null_count:
        return None
    chunks = chunked.chunks
    dictionary = chunks[0].dictionary
    codes = np.concatenate([chunk.indices.to_numpy(zero_copy_only=False) for chunk in chunks]).astype(np.int64)
    used = np.bincount(codes, minlength=len(dictionary)).all()  # Labels.distinct promises every name is used
    return Labels(codes, dictionary.to_pylist, len(dictionary) if used else None)


def _map_columns(array: Any, rows: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """A ``map<string, double>`` column as one float column per key (NaN where absent or null) and a null
    mask per key (True where the map gives the key with a null value)."""
    offsets = array.offsets.to_numpy(zero_copy_only=False)
    sizes = np.diff(offsets)
    items = array.items
    item_values = items.to_numpy(zero_copy_only=False).astype(np.float64)
    item_nulls = items.is_null().to_numpy(zero_copy_only=False)
    values, nulls = {}, {}
    width = int(sizes[0]) if rows else 0
    names = _same_keys_on_every_row(array.keys, int(offsets[0]), rows, width) if (sizes == width).all() else None
    if names is not None:
        # The common case: every row's map names the same distinct keys in the same order (one writer, one
        # reward): each key's items are every width-th item, no scatter per key.
        for j, name in enumerate(names):
            column = slice(offsets[0] + j, offsets[0] + rows * width, width)
            values[name] = np.ascontiguousarray(item_values[column])
            nulls[name] = np.ascontiguousarray(item_nulls[column])
        return values, nulls
    keys = _labels(array.keys)
    parents = np.repeat(np.arange(rows), sizes)
    for code, name in enumerate(keys.names):
        mine = keys.codes == code
        values[name] = np.full(rows, np.nan)
        values[name][parents[mine]] = item_values[mine]
        nulls[name] = np.zeros(rows, dtype=bool)
        nulls[name][parents[mine]] = item_nulls[mine]
    return values, nulls


def _same_keys_on_every_row(keys: Any, start: int, rows: int, width: int) -> list[str] | None:
    """The keys of the first of ``rows`` maps of ``width`` keys each (their keys from ``start`` in ``keys``)
    when every map names the same distinct keys in the same order, else None. Compared as bytes: the
    lengths of each row's keys and the bytes they span repeat the first row's (no text decoded or hashed)."""
    import pyarrow as pa

    if not width or keys.type != pa.string():
        return None
    keys = keys.slice(start, rows * width)
    if len(keys) != rows * width or keys.null_count:
        return None
    bounds = np.frombuffer(keys.buffers()[1], dtype=np.int32)[keys.offset : keys.offset + len(keys) + 1]
    lengths = np.diff(bounds).reshape(rows, width)
    if not (lengths == lengths[0]).all():
        return None
    span = int(lengths[0].sum())
    data = np.frombuffer(keys.buffers()[2], dtype=np.uint8)[bounds[0] : bounds[0] + rows * span]
    # as fixed-width byte strings, one per row: equal lengths, so equal exactly when the bytes are
    if len(data) != rows * span or (span and not (data.view(f"S{span}") == data[:span].view(f"S{span}")).all()):
        return None
    names = keys.slice(0, width).to_pylist()
    return names if len(set(names)) == width else None


# -- a local store's record files ------------------------------------------------------------------------


def read_store_batch(
    store: Any, run_id: str, step: int | None = None, steps: list[int] | None = None, progress: Any = None
) -> RecordBatch | None:
    """A local store's records of one run (or of one step, or of ``steps``) as columns, in the order
    ``Store.iter_records`` yields them (step order, then the store's listing order), or None when anything
    needs the careful path: an object that is not where its record belongs (which covers every key that
    is not a record key), anything the store's layout rules report (a stray step folder, a link, a FIFO:
    see rewardpipe.store), or a file the JSONL readers cannot vouch for (the careful path reports each of
    those by key). ``progress(files read, files)`` is called as the files are read (a progress bar)."""
    from rewardpipe.store import LocalStore, step_prefix

    if not isinstance(store, LocalStore):
        return None  # one request per object on S3: the careful path is no slower there
    strays: list[Any] = []
    if step is not None:
        chosen = [step]
    else:
        stored = store.list_steps(run_id, on_stray=strays.append)
        chosen = stored if steps is None else sorted(set(steps) & set(stored))
    keys = [key for n in chosen for key in store._list_checked(step_prefix(run_id, n), strays.append)]
    if strays or not keys:
        return None
    blobs = _read_files(store, keys, progress)
    if blobs is None or not all(blobs):  # changed while we read, or an empty object: the careful path copes
        return None
    data = b"\n".join(blobs) + b"\n"
    if data.count(b"\n") != len(blobs):  # an object of several lines
        return None
    batch = _vouched(data)
    if batch is None or len(batch) != len(keys) or not _stored_where_they_belong(batch, keys):
        return None
    return batch


_READERS = 4  # threads reading record files: open and read wait in the kernel without the GIL


_PROGRESS_CHUNK = 4096  # files read between two reports to a progress callback


def _read_files(store: Any, keys: list[str], progress: Any = None) -> list[bytes] | None:
    """Each file's bytes less its trailing line ends, in order (read by the store's own rules: no link
    followed, regular files only); None if one cannot be read. With ``progress``, the files are read in
    chunks and ``progress(files read, files)`` called after each."""
    done = [0]
    lock = threading.Lock()

    def some(part: list[str]) -> list[bytes] | None:
        blobs = store.read_many(part)
        if progress is not None and blobs is not None:
            with lock:
                done[0] += len(part)
                progress(done[0], len(keys))
        return None if blobs is None else [blob.rstrip(b"\r\n") for blob in blobs]

    if len(keys) < 256:
        return some(keys)
    share = -(-len(keys) // _READERS)
    if progress is not None:
        share = min(share, _PROGRESS_CHUNK)
    with ThreadPoolExecutor(_READERS) as pool:
        parts = list(pool.map(some, [keys[i : i + share] for i in range(0, len(keys), share)]))
    read = [part for part in parts if part is not None]
    return None if len(read) < len(parts) else [blob for part in read for blob in part]


_PLAIN_ID = re.compile(r"[a-z0-9_.~-]{1,240}")  # ids encode_id leaves as they are (but a final dot, a device name)


def _stored_where_they_belong(batch: RecordBatch, keys: list[str]) -> bool:
    """Every row's key is the one its own run, step, group and rollout give (``record_key``), or every
    row's key is the one of before the case tail (``legacy_record_key``: a store an older rewardpipe
    wrote). A mix of both goes the careful way, which reads a rollout stored under both keys once."""
    from rewardpipe.store import encode_id, step_prefix, windows_device_name

    if len(batch.run_ids.names) != 1:
        return False  # a store's run folder holds one run: the careful path reports the strays
    prefixes = {step: step_prefix(batch.run_ids.names[0], step) for step in np.unique(batch.steps).tolist()}

    def encoded(names: list[str], portable: bool) -> list[str]:
        return [
            name
            if _PLAIN_ID.fullmatch(name) and name[-1] != "." and not windows_device_name(name)
            else encode_id(name, portable=portable)
            for name in names
        ]

    for portable in (True, False):
        groups, rollouts = encoded(batch.group_ids.names, portable), encoded(batch.rollout_ids.names, portable)
        expected = map(
            "{}group={}/{}.json".format,
            map(prefixes.__getitem__, batch.steps.tolist()),
            map(groups.__getitem__, batch.group_ids.codes.tolist()),
            map(rollouts.__getitem__, batch.rollout_ids.codes.tolist()),
        )
        if all(map(str.__eq__, expected, keys)):
            return True
    return False
