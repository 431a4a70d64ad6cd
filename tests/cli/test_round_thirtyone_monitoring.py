"""Round thirty-one (monitoring): one bad record never stops the monitoring of a run.

(a) A group whose scored records carry two task ids (group ids numbered per task) made `monitor` and `report`
refuse the whole records file or store. Such a group is now set aside: named with its tasks, records and the
reason (stderr, --json ``set_aside``, the report's page), counted per step, and left out of every statistic, so
it can neither make a dead component look alive nor count as a group without signal; every other group is
judged as before, identically on every reader.
"""

from __future__ import annotations

import json
import random

from typer.testing import CliRunner

from rewardpipe.cli import app
from rewardpipe.monitoring import Thresholds, monitor_records
from tests.monitoring.test_fast_path import run_three_ways, write
from tests.monitoring.test_store_fast_path import both_ways, store_of

REASON = "group 'g0' of step 0 holds rollouts of 2 tasks ('t1', 't2')"


def _record(step: int, group: str, rollout: str, task: str, c: float | None, right: float) -> dict:
    return {
        "schema": "rewardpipe.record/v1",
        "run_id": "r",
        "step": step,
        "group_id": group,
        "rollout_id": rollout,
        "task_id": task,
        "status": "scored",
        "error": None,
        "components": {"c": c, "correctness": right},
        "weights": {"c": 0.5, "correctness": 1.0},
        "aggregate": 0.5 * (c or 0.0) + right,
        "metrics": {},
    }


def run_with_a_mixed_group(steps: int = 2, groups: int = 8, k: int = 4) -> list[dict]:
    """Per step: ``groups`` good groups (``c`` constant 1.0: dead; ``correctness`` varies) and group ``g0``
    holding the rollouts of tasks t1 (c = 1.0) and t2 (c = 0.0): merged, ``c`` would vary in it."""
    out = []
    for step in range(steps):
        for i in range(k):
            out.append(_record(step, "g0", f"s{step}-g0-t1-{i}", "t1", 1.0, float(i % 2)))
            out.append(_record(step, "g0", f"s{step}-g0-t2-{i}", "t2", 0.0, float(i % 2)))
        for g in range(1, groups + 1):
            for i in range(k):
                out.append(_record(step, f"g{g}", f"s{step}-g{g}-{i}", f"t{g + 2}", 1.0, float(i % 2)))
    return out


def _check_set_aside(data: dict, steps: int = 2) -> None:
    assert [(e["step"], e["group_id"]) for e in data["set_aside"]] == [(s, "g0") for s in range(steps)]
    entry = data["set_aside"][0]
    assert REASON in entry["reason"] and entry["records"] == 8
    assert entry["tasks"] == [
        {"task_id": "t1", "records": 4, "first_rollout_id": "s0-g0-t1-0"},
        {"task_id": "t2", "records": 4, "first_rollout_id": "s0-g0-t2-0"},
    ]


def test_a_group_of_two_tasks_is_set_aside_and_the_others_are_judged():
    data = monitor_records(run_with_a_mixed_group()).to_dict()
    _check_set_aside(data)
    step = data["steps"][0]
    assert step["set_aside_groups"] == 1 and step["set_aside_records"] == 8
    assert step["records"] == 40 and step["scored"] == 32 and step["groups"] == 8
    c = step["components"]["c"]
    assert c["verdict"] == "dead" and c["eligible_groups"] == 8 and c["values"] == 32
    assert "c" in {a["component"] for a in data["alarms"]}
    assert step["components"]["correctness"]["verdict"] == "ok"


def test_a_set_aside_group_makes_no_alarm_of_a_live_component():
    """Left out, not counted as a group without signal: a step of only set-aside groups judges nothing."""
    data = monitor_records(run_with_a_mixed_group(groups=0)).to_dict()
    assert data["alarms"] == [] and data["steps"][0]["set_aside_groups"] == 1
    assert all(c["verdict"] != "dead" for s in data["steps"] for c in s["components"].values())
    assert data["steps"][0]["error_rate"] == 0.0 and data["steps"][0]["aggregate"]["verdict"] != "dead"


def test_every_reader_of_a_records_file_sets_it_aside_alike(tmp_path, monkeypatch):
    path = write(tmp_path / "records.jsonl", run_with_a_mixed_group())
    (shipped, orjson_only, careful), used = run_three_ways(monkeypatch, path, "--no-write-alarms", "--json")
    assert used[0] is True and shipped == orjson_only == careful
    assert shipped[0] == 0, shipped[2]
    _check_set_aside(json.loads(shipped[1]))
    assert f"warning: set aside: {REASON}" in shipped[2]
    assert "task 't1': 4 from rollout 's0-g0-t1-0'" in shipped[2]
    monkeypatch.undo()
    table, _ = run_three_ways(monkeypatch, path, "--no-write-alarms")
    assert table[0] == table[1] == table[2] and table[0][0] == 0 and "ALARM" in table[0][1]


def test_interleaved_records_set_aside_alike_on_every_reader(tmp_path, monkeypatch):
    """Records in any order, more groups than the monitor samples: the readers still agree exactly."""
    rows = run_with_a_mixed_group(steps=3, groups=30)
    random.Random(7).shuffle(rows)
    rows[3] = dict(rows[3], components={"c": None, "correctness": 1.0})  # a missing value, maybe in g0
    rows += [dict(r, components={"c": None, "correctness": 0.0}) for r in rows if r["group_id"] == "g0"][:2]
    path = write(tmp_path / "records.jsonl", rows)
    (shipped, orjson_only, careful), used = run_three_ways(monkeypatch, path, "--no-write-alarms", "--json")
    assert used[0] is True and shipped == orjson_only == careful and shipped[0] == 0
    data = json.loads(shipped[1])
    assert [s["set_aside_groups"] for s in data["steps"]] == [1, 1, 1]
    assert all(s["components"]["c"]["eligible_groups"] == 30 for s in data["steps"])


def test_a_store_sets_it_aside_alike(tmp_path, monkeypatch):
    store = store_of(tmp_path, run_with_a_mixed_group())
    fast, careful, used = both_ways(monkeypatch, store.root)
    assert used == [True] and fast == careful and fast[0] == 0, fast[2]
    _check_set_aside(json.loads(fast[1]))


def test_report_sets_it_aside_and_names_it_on_every_reader(tmp_path, monkeypatch):
    from rewardpipe.monitoring import fastread

    path = write(tmp_path / "records.jsonl", run_with_a_mixed_group())
    runner = CliRunner()
    out = tmp_path / "report.html"
    fast = runner.invoke(app, ["report", str(path), "--json", "--out", str(out)])
    assert fast.exit_code == 0, fast.stderr
    page = out.read_text()
    monkeypatch.setattr(fastread, "read_jsonl_batch", lambda path: None)
    careful = runner.invoke(app, ["report", str(path), "--json"])
    assert careful.exit_code == 0 and careful.stdout == fast.stdout
    data = json.loads(fast.stdout)
    _check_set_aside(data)
    assert data["groups"] == 16 and data["scored"] == 64 and data["tasks"] == 8
    assert "set aside" in page and "holds rollouts of 2 tasks" in page
    assert f"warning: set aside: {REASON}" in fast.stderr


# (b) test files of one directory given apart on the command line kept that directory's conftest fixtures


def test_paths_are_grouped_by_directory_in_the_order_they_first_appear():
    from tests.collection_order import grouped

    args = ["tests/cli/b.py", "tests/x.py::test_one", "tests/cli/a.py", "tests/x.py::test_two", "tests/core"]
    expected = ["tests/cli/b.py", "tests/cli/a.py", "tests/x.py::test_one", "tests/x.py::test_two", "tests/core"]
    assert grouped(args) == expected
    assert grouped(["tests/x.py", "tests/cli/a.py"]) == ["tests/x.py", "tests/cli/a.py"]


def test_a_subdirectory_file_given_after_a_file_of_its_parent_finds_its_fixtures():
    """pytest 9.1.1 said "fixture 'cli' not found" for the last file here (each file passed alone)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    files = ["tests/cli/test_command_modules.py", "tests/test_alarms.py", "tests/cli/test_round_thirty_journeys.py"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "cut_reasons_never_split", *files],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-2000:]


HOSTILE = "\x1b[2J<script>x</script>\u202e[bold]y[/]"


def test_hostile_ids_of_a_set_aside_group_print_escaped_everywhere(tmp_path):
    rows = run_with_a_mixed_group(steps=1)
    for row in rows:
        if row["group_id"] == "g0":
            row.update(group_id=f"g0{HOSTILE}" + "G" * 5000, task_id=row["task_id"] + HOSTILE)
    path = write(tmp_path / "records.jsonl", rows)
    runner = CliRunner()
    table = runner.invoke(app, ["monitor", str(path), "--no-write-alarms"])
    page = tmp_path / "report.html"
    report = runner.invoke(app, ["report", str(path), "--out", str(page), "--json"])
    assert table.exit_code == report.exit_code == 0
    for text in (table.stdout, table.stderr, report.stdout, report.stderr, page.read_text()):
        assert "\x1b" not in text and "\u202e" not in text
    assert "\\x1b[2J<script>" in table.stderr and "\\u202e[bold]y[/]" in table.stderr
    assert len(table.stderr) < 2000  # an id is cut to 80 characters in a message
    assert json.loads(report.stdout)["set_aside"][0]["tasks"][0]["task_id"] == "t1" + HOSTILE
    assert "&lt;script&gt;" in page.read_text() and "<script>" not in page.read_text()


# (c) a value outside the component's declared range was used silently


def test_a_value_outside_the_declared_range_is_named_not_silent(tmp_path, monkeypatch):
    """``c`` is declared 0..1 and is 1.0 everywhere but one 7.0 in group g1: before, no word of it."""
    rows = [r for r in run_with_a_mixed_group() if r["group_id"] != "g0"]
    for row in rows:
        if row["rollout_id"] in ("s0-g1-0", "s1-g2-3"):
            row["components"] = {"c": 7.0, "correctness": row["components"]["correctness"]}
    data = monitor_records(rows, Thresholds(ranges={"c": (0.0, 1.0)})).to_dict()
    assert [s["components"]["c"]["out_of_range_groups"] for s in data["steps"]] == [1, 1]
    assert data["steps"][0]["components"]["correctness"]["out_of_range_groups"] == 0
    (warning,) = [w for w in data["warnings"] if w["kind"] == "values_out_of_range"]
    assert (
        "c has values outside its declared range in 2 group(s) at 2 step(s) (0, 1; seen 1 to 7)" in (warning["message"])
    )
    path = write(tmp_path / "records.jsonl", rows)
    (shipped, orjson_only, careful), used = run_three_ways(monkeypatch, path, "--range", "c=0:1", "--json")
    assert used[0] is True and shipped == orjson_only == careful and shipped[0] == 0
    assert "warning: values_out_of_range: c has values outside" in shipped[2]
    monkeypatch.undo()
    inside, _ = run_three_ways(monkeypatch, path, "--range", "c=0:10", "--json")
    assert "values_out_of_range" not in inside[0][1] + inside[0][2]


# (d) a saved state whose outbox holds something that is not an alarm


def test_a_state_with_a_pending_entry_that_is_no_alarm_is_set_aside_not_a_crash(tmp_path):
    """Before: ``TypeError: Alarm.__init__() missing ... 'kind'`` on every later check of the run."""
    from rewardpipe.models import Record
    from rewardpipe.monitoring import StoreAlarmSink
    from rewardpipe.monitoring.monitor import monitor_step
    from rewardpipe.monitoring.state import STATE_SCHEMA, state_key
    from rewardpipe.store import LocalStore

    store = LocalStore(tmp_path / "store")
    for row in run_with_a_mixed_group(steps=1):
        if row["group_id"] != "g0":
            store.put_record(Record.model_validate(row))
    raised = []
    for pending in ([{}], [{"kind": "dead_component", "component": "c", "step": "x", "cause": "c", "message": "m"}]):
        state = {"schema": STATE_SCHEMA, "run_id": "r", "checked": [], "pending": [{"step": 3, "alarms": pending}]}
        store.put_json(state_key("r"), state)
        result = monitor_step(store, "r", 0, sinks=[StoreAlarmSink(store, "r")])
        (problem,) = result.unreadable
        assert "pending alarm #0 is not an alarm" in problem["reason"] and "kept at" in problem["reason"]
        raised += [alarm.component for alarm in result.alarms]
    assert raised == ["c"]  # the step is checked afresh; the stored alarm is not delivered twice


# (e) an error-rate alarm listed every kind of error in full: a writer's huge or countless kinds made it megabytes


def test_an_error_rate_alarm_names_a_few_kinds_each_cut():
    rows = run_with_a_mixed_group(steps=1)
    for n, row in enumerate(rows):
        kind = "timeout" if n % 2 else f"k{n}\x1b" + "K" * 10000
        row.update(status="error", error={"kind": kind, "message": "m"}, aggregate=None)
    (alarm,) = [a for a in monitor_records(rows).alarms if a.kind == "error_rate"]
    assert len(alarm.message) < 1500 and "timeout 20" in alarm.message and "more kinds" in alarm.message
    assert len(alarm.figures["error_kinds"]) == 21  # the figures keep every kind


# (f) a component left out of every record of a step vanished without a word (given as null, it is alarmed)


def test_a_component_absent_from_a_whole_step_is_warned_about(tmp_path, monkeypatch):
    rows = [r for r in run_with_a_mixed_group(steps=3) if r["group_id"] != "g0"]
    for row in rows:
        if row["step"] == 1:
            row["components"] = {"correctness": row["components"]["correctness"]}
    data = monitor_records(rows).to_dict()
    assert "c" not in data["steps"][1]["components"]
    (warning,) = [w for w in data["warnings"] if w["kind"] == "component_absent"]
    assert warning["message"].startswith("c is absent from every scored record of 1 step(s) (1)")
    path = write(tmp_path / "records.jsonl", rows)
    (shipped, orjson_only, careful), _ = run_three_ways(monkeypatch, path, "--no-write-alarms")
    assert shipped == orjson_only == careful and "warning: component_absent: c is absent" in shipped[2]
    assert not [w for w in monitor_records(run_with_a_mixed_group()).to_dict()["warnings"] if "absent" in w["kind"]]
