"""Issue 22 item 2: a value a record or a task may legally hold crashes no command.

Property tests (hypothesis) draw records and tasks whose fields sit at their legal extremes (and just past
them), and push each through every command that reads them: ``monitor`` and ``report`` (a JSONL file and a
store, text and JSON, HTML and Parquet), ``show``, ``score``, ``run``, ``doctor`` and ``tasks validate``.
No run may end in "unexpected ... this is a rewardpipe bug" (or a traceback), and a value is either
accepted by every command or refused by every one that reads it, naming the file and line: one rule per
value, applied where the data enters (rewardpipe.models: ``Record.step`` and ``Rollout.step`` bounded to
``MAX_STEP``, record ids non-empty, a task's ``spec`` at most ``MAX_SPEC_ITEMS`` items).

``REWARDPIPE_EXTREMES_EXAMPLES`` raises the number of examples (the default keeps `make test` quick).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from typer.testing import CliRunner

from rewardpipe.cli import app
from rewardpipe.episode import MAX_TURNS
from rewardpipe.models import (
    MAX_ID_LENGTH,
    MAX_SCORE_MAGNITUDE,
    MAX_SPEC_ITEMS,
    MAX_STEP,
    MAX_TASK_ID_LENGTH,
    Record,
    Task,
)
from rewardpipe.store import LocalStore, record_key, transcript_key
from tests.cli.conftest import BUNDLED_TASKS

EXAMPLES = int(os.environ.get("REWARDPIPE_EXTREMES_EXAMPLES", "12"))
SLOW_EXAMPLES = max(3, EXAMPLES // 3)
SETTINGS = dict(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)


def invoke(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    output = result.output
    assert "rewardpipe bug" not in output and "Traceback" not in output, f"rewardpipe {args[0]}: {output[-3000:]}"
    assert result.exit_code in (0, 1, 2), (result.exit_code, output[-3000:], repr(result.exception))
    return result


# -- record fields -------------------------------------------------------------------------------------

EDGE_FLOATS = [
    0.0,
    -0.0,
    5e-324,
    -5e-324,
    1e-308,
    MAX_SCORE_MAGNITUDE,
    -MAX_SCORE_MAGNITUDE,
    MAX_SCORE_MAGNITUDE * (1 + 2**-50),
    1.7976931348623157e308,
    -1.7976931348623157e308,
    math.inf,
    -math.inf,
    math.nan,
]
numbers = st.one_of(
    st.floats(),
    st.sampled_from(EDGE_FLOATS),
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**53 + 1, 2**64, -(2**63)]),
)
odd_ids = st.sampled_from(
    [
        "..",
        ".",
        "a/b",
        "%2E",
        "%~u1",
        "con",
        "nul.txt",
        "x.",
        "Roll-A",
        "roll-a",
        "\u202e",
        "é",
        "e\u0301",
        "step=1",
        "group=x",
        " ",
        "\x00",
        "\x1b[2J",
        "a" * MAX_ID_LENGTH,
        "b" * (MAX_ID_LENGTH + 1),
        "日本語" * 100,
    ]
)
ids = st.one_of(odd_ids, st.text(min_size=1, max_size=12), st.text(min_size=0, max_size=3))
steps = st.one_of(
    st.sampled_from([0, 1, MAX_STEP, MAX_STEP + 1, -1, 2**63, 2**64, True, 1.0, "1"]), st.integers(0, MAX_STEP)
)
names = st.one_of(
    st.sampled_from(["aggregate", "", "a" * 5000, "\x1b[31m", "errors", "component:x", "é"]), st.text(max_size=8)
)
metric_values = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=20))


@st.composite
def record_batches(draw):
    """A small run: a few groups of a few rollouts, every field drawn from its extremes; the ids shared
    where GRPO shares them (one run, one task per group), so the statistics have groups to work on."""
    run_id = draw(ids)
    components = draw(st.lists(names, min_size=0, max_size=4, unique=True))
    weights = {name: draw(numbers) for name in components}
    out = []
    for g in range(draw(st.integers(1, 3))):
        group_id, task_id, step = draw(ids), draw(ids), draw(steps)
        for i in range(draw(st.integers(1, 4))):
            status = draw(st.sampled_from(["scored", "scored", "error"]))
            out.append(
                {
                    "schema": "rewardpipe.record/v1",
                    "run_id": run_id,
                    "step": step,
                    "group_id": group_id,
                    "rollout_id": draw(ids) + f"-{g}-{i}",
                    "task_id": task_id,
                    "status": status,
                    "error": None if status == "scored" else {"kind": draw(ids), "message": draw(st.text(max_size=50))},
                    "components": {name: draw(st.one_of(st.none(), numbers)) for name in components},
                    "weights": weights,
                    "aggregate": draw(st.one_of(st.none(), numbers)),
                    "metrics": draw(st.dictionaries(names, metric_values, max_size=3)),
                }
            )
    return out


def valid(record: dict, *, storable: bool = False) -> Record | None:
    """The record, if a Record accepts it (and, with ``storable``, a store has a key for it: a run id is never
    hashed, so one too long for a folder name is refused by a store, and reported by its readers)."""
    try:
        parsed = Record.model_validate_json(json.dumps(record))
        if storable:
            record_key(parsed)
        return parsed
    except (ValidationError, ValueError):
        return None


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))  # NaN and Infinity as JSON allows them
    return path


@settings(max_examples=EXAMPLES, **SETTINGS)
@given(batch=record_batches())
@example(
    batch=[
        {
            "schema": "rewardpipe.record/v1",
            "run_id": "r",
            "step": 2**64,
            "group_id": "g",
            "rollout_id": "x",
            "task_id": "t",
            "status": "scored",
            "components": {"c": 1.0},
            "weights": {"c": 1.0},
            "aggregate": 1.0,
        }
    ]
)
def test_any_record_through_monitor_and_report_from_a_file(tmp_path_factory, batch):
    """Before: a record whose step is 2**64 passed `monitor` and crashed `report` with "unexpected
    OverflowError ... this is a rewardpipe bug". Now it is refused where it is read, naming its line."""
    folder = tmp_path_factory.mktemp("jsonl")
    path = write_jsonl(folder / "records.jsonl", batch)
    results = [
        invoke("monitor", path, "--json"),
        invoke("monitor", path),
        invoke("report", path, "--json"),
        invoke("report", path, "--out", folder / "r.html"),
        invoke("report", path, "--parquet", folder / "parquet"),
    ]
    for line, record in enumerate(batch, start=1):
        if valid(record) is None:  # refused by each reader, at its line
            for result in results[:3]:
                assert f"{path}:{line}" in result.stderr, result.output[-2000:]
    if all(valid(record) is not None for record in batch):
        assert all(result.exit_code == 0 for result in results), [r.output[-500:] for r in results]


@settings(max_examples=EXAMPLES, **SETTINGS)
@given(batch=record_batches())
def test_any_record_through_a_store_monitor_report_and_show(tmp_path_factory, batch):
    root = tmp_path_factory.mktemp("store")
    store = LocalStore(root)
    records = [r for r in (valid(raw, storable=True) for raw in batch) if r is not None]
    for n, raw in enumerate(r for r in batch if valid(r, storable=True) is None):  # in a store, not a record
        store._write(f"runs/r/step=0/group=g/bad-{n}.json", json.dumps(raw).encode())
    for record in records:
        store.put_record(record)
        store.put_json(
            transcript_key(record.run_id, record.step, record.group_id, record.rollout_id),
            {
                "schema": "rewardpipe.transcript/v1",
                "run_id": record.run_id,
                "step": record.step,
                "group_id": record.group_id,
                "rollout_id": record.rollout_id,
                "task_id": record.task_id,
                "messages": [
                    {"role": "user", "content": record.rollout_id},
                    {"role": "assistant", "content": "\x1b[2J"},
                ],
                "verdict": {"status": "passed"},
                "status": record.status,
                "components": {k: v if v is None or math.isfinite(v) else None for k, v in record.components.items()},
                "aggregate": record.aggregate if record.aggregate is None or math.isfinite(record.aggregate) else None,
            },
        )
    for run_id in store.list_runs():
        invoke("monitor", root, "--run-id", run_id, "--json")
        invoke("monitor", root, "--run-id", run_id)
        invoke("report", root, "--run-id", run_id, "--json")
    for record in records[:2]:
        shown = invoke("show", root, "--run-id", record.run_id, "--rollout", record.rollout_id, "--step", record.step)
        assert shown.exit_code == 0, shown.output[-2000:]
        invoke("show", root, "--run-id", record.run_id, "--rollout", record.rollout_id, "--step", record.step, "--json")


# -- task fields ---------------------------------------------------------------------------------------

BASE_TASK = json.loads(Path(BUNDLED_TASKS).read_text().splitlines()[0])
spec_items = st.one_of(st.sampled_from(["x", " ", "a" * 10_000, "\x1b[2J", "é", "Detail."]), st.text(max_size=20))
spec_counts = st.one_of(
    st.sampled_from([1, MAX_SPEC_ITEMS - 1, MAX_SPEC_ITEMS, MAX_SPEC_ITEMS + 1, MAX_TURNS + 20]), st.integers(1, 8)
)


@st.composite
def tasks(draw):
    """Mostly tasks every command should take (printable ids of any length allowed, long prompts, many spec
    items, timeouts at their bounds), now and then one just past a bound."""
    task = dict(BASE_TASK)
    legal = draw(st.integers(0, 3)) > 0
    printable = st.text(st.characters(blacklist_categories=("Cc", "Cf", "Cs", "Zl", "Zp")), min_size=1, max_size=12)
    task["task_id"] = draw(
        st.one_of(printable, st.sampled_from(["a" * MAX_TASK_ID_LENGTH, "..", "con", "é"])) if legal else odd_ids
    )
    task["prompt"] = draw(st.sampled_from(["p" * 100_000, "\x1b[2J", "x"]) if legal else st.sampled_from(["", " "]))
    count = draw(st.sampled_from([1, 98, MAX_SPEC_ITEMS]) if legal else spec_counts)
    task["spec"] = [draw(spec_items.filter(str.strip) if legal else spec_items) for _ in range(count)]
    task["timeout_s"] = draw(st.sampled_from([None, 1e-9, 0.5, 3600] if legal else [3600.5, 0, -1, math.inf]))
    task["trust_mode"] = draw(st.sampled_from(["split", "inprocess"] if legal else ["split", "other"]))
    return task


def spec_task(items: int) -> dict:
    return {**BASE_TASK, "spec": [f"Detail number {i} matters." for i in range(items)]}


def loads_everywhere(tmp_path: Path, task: dict) -> tuple[bool, str]:
    """What the task file's one rule says: (accepted, the refusal naming file:line, if refused)."""
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(task) + "\n")
    try:
        Task.model_validate(task)
        return True, ""
    except ValidationError:
        return False, f"{path}:1"


@settings(max_examples=SLOW_EXAMPLES, **SETTINGS)
@given(task=tasks())
@example(task=spec_task(98))  # before: passed `tasks validate`, crashed `doctor` (EpisodeState.max_turns)
@example(task=spec_task(MAX_SPEC_ITEMS))
@example(task=spec_task(MAX_SPEC_ITEMS + 1))
def test_any_task_is_valid_everywhere_or_refused_by_every_command(tmp_path_factory, task):
    folder = tmp_path_factory.mktemp("tasks")
    accepted, where = loads_everywhere(folder, task)
    tasks_file = folder / "tasks.jsonl"
    rollouts = folder / "rollouts.jsonl"
    rollouts.write_text(
        json.dumps(
            {
                "rollout_id": "r",
                "group_id": "g",
                "task_id": str(task["task_id"]),
                "messages": [
                    {"role": "user", "content": "x"},
                    {"role": "assistant", "content": "```python\nx = 1\n```"},
                ],
            }
        )
        + "\n"
    )
    results = {
        "tasks validate": invoke("tasks", "validate", tasks_file),
        "doctor": invoke("doctor", "--tasks", tasks_file, "--json"),
        "run": invoke(
            "run",
            "--tasks",
            tasks_file,
            "--steps",
            1,
            "--group-size",
            2,
            "--groups-per-step",
            1,
            "--out",
            folder / "store",
            "--run-id",
            "x",
            "--json",
            "--max-turns",
            MAX_TURNS,
        ),
        "score": invoke("score", rollouts, "--tasks", tasks_file, "--out", folder / "store", "--run-id", "y"),
    }
    for command, result in results.items():
        if accepted:  # a loaded task is never refused as input (doctor may still find it broken: exit 1)
            assert f"{tasks_file}:1" not in result.stderr, (command, result.output[-2000:])
        else:
            assert result.exit_code == 1 and where in result.stderr, (command, result.output[-2000:])


def test_a_task_of_as_many_spec_items_as_allowed_passes_doctor(tmp_path):
    """Before: 98 items passed `tasks validate` and crashed `doctor` (its scenarios asked for more turns than an
    episode may take); a doctor that caught that would still report the task broken. The most items a task may
    hold leave room for one question each and the commit: every scenario plays, the task is healthy."""
    for count in (98, MAX_SPEC_ITEMS):
        tasks_file = tmp_path / f"tasks-{count}.jsonl"
        tasks_file.write_text(json.dumps(spec_task(count)) + "\n")
        result = invoke("doctor", "--tasks", tasks_file, "--json")
        (diagnosis,) = json.loads(result.stdout)["diagnoses"]
        assert result.exit_code == 0 and diagnosis["ok"], (count, diagnosis)
        assert diagnosis["component_values"]["asked_before_coding"][-1] == 1.0  # every item asked about


@st.composite
def rollout_lines(draw):
    """Recorded rollouts of a bundled task, their ids and steps at their extremes (a few just past them)."""
    task_id = BASE_TASK["task_id"]
    rows = []
    for i in range(draw(st.integers(1, 3))):
        rows.append(
            {
                "rollout_id": draw(ids) + f"-{i}",
                "group_id": draw(ids),
                "task_id": task_id,
                "step": draw(steps),
                "messages": [
                    {"role": "user", "content": draw(st.text(max_size=20))},
                    {
                        "role": draw(st.sampled_from(["assistant", "model", "nova_assistant"])),
                        "content": draw(st.sampled_from(["```python\nx = 1\n```", "", "\x1b[2J", "?" * 20_000])),
                    },
                ],
            }
        )
    return rows


@settings(max_examples=SLOW_EXAMPLES, **SETTINGS)
@given(rows=rollout_lines())
def test_any_recorded_rollout_through_score_then_monitor_and_show(tmp_path_factory, rows):
    folder = tmp_path_factory.mktemp("score")
    path = write_jsonl(folder / "rollouts.jsonl", rows)
    scored = invoke("score", path, "--tasks", BUNDLED_TASKS, "--out", folder / "store", "--run-id", "s", "--json")
    store = LocalStore(folder / "store")
    if store.list_runs():
        invoke("monitor", folder / "store", "--json")
        invoke("report", folder / "store", "--json")
        for record in list(store.iter_records("s"))[:2]:
            shown = invoke(
                "show", folder / "store", "--run-id", "s", "--rollout", record.rollout_id, "--step", record.step
            )
            assert shown.exit_code == 0, shown.output[-2000:]
    assert scored.exit_code in (0, 1)
