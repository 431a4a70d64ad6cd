"""Round fourteen: a component the monitor never judged, because of its name.

The aggregate was kept among the component names under the key ``"\\x00aggregate"`` (a NUL, "cannot clash with
a component name that came through JSON in practice"). JSON carries a NUL as ``\\u0000``, so a component of that
name was merged into the aggregate's numbers: constant in every group, it was never judged (no alarm), and the
aggregate's figures counted its values as the aggregate's (twice the values, the wrong mean). The internal key
now equals no component name, whatever its text, on every reader (records, JSONL fast and careful paths).
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from rewardpipe.cli import app
from rewardpipe.monitoring import monitor_records
from tests.monitoring.test_fast_path import run_three_ways, write

# (A component named plainly "aggregate", the aggregate's own alarm name, is refused since round thirty-three:
# tests/monitoring/test_round_thirtythree_followups.py.)
NAMES = ["\x00aggregate", "\x00aggregate\x00", "\x00Aggregate", "Aggregate"]


def records(name: str, steps: int = 3, groups: int = 8, k: int = 4) -> list[dict]:
    """``name`` is 1.0 in every rollout (dead); ``correctness`` varies inside every group (healthy)."""
    out = []
    for step in range(steps):
        for g in range(groups):
            for i in range(k):
                right = float(i % 2)
                out.append(
                    {
                        "schema": "rewardpipe.record/v1",
                        "run_id": "r",
                        "step": step,
                        "group_id": f"g{g}",
                        "rollout_id": f"s{step}g{g}r{i}",
                        "task_id": "t",
                        "status": "scored",
                        "error": None,
                        "components": {name: 1.0, "correctness": right},
                        "weights": {name: 0.5, "correctness": 1.0},
                        "aggregate": 0.5 + right,
                        "metrics": {},
                    }
                )
    return out


@pytest.mark.parametrize("name", NAMES)
def test_a_component_named_like_the_internal_aggregate_key_is_judged(name):
    result = monitor_records(records(name))
    step = result.to_dict()["steps"][0]
    assert step["components"][name]["verdict"] == "dead"
    assert step["components"][name]["values"] == 32
    assert step["aggregate"]["values"] == 32
    assert step["aggregate"]["mean"] == pytest.approx(1.0)
    assert step["aggregate"]["verdict"] == "ok"
    assert name in {alarm.component for alarm in result.alarms}


@pytest.mark.parametrize("name", NAMES)
def test_every_reader_of_a_records_file_judges_it(tmp_path, monkeypatch, name):
    path = write(tmp_path / "records.jsonl", records(name))
    (shipped, orjson_only, careful), _ = run_three_ways(monkeypatch, path, "--no-write-alarms", "--json")
    assert shipped == orjson_only == careful
    data = json.loads(shipped[1])
    assert name in {alarm["component"] for alarm in data["alarms"]}
    assert all(step["aggregate"]["values"] == 32 for step in data["steps"])


def test_the_key_survives_pickling_as_the_one_key():
    import pickle

    from rewardpipe.monitoring.statistics import AGG

    assert pickle.loads(pickle.dumps(AGG)) is AGG
    plain = "\x00aggregate"
    assert plain != AGG  # the comparison a dict lookup of a plain name makes
    assert not AGG.__eq__(plain)
    assert {AGG: 1, "\x00aggregate": 2}[AGG] == 1


def test_the_table_output_names_it_escaped(tmp_path):
    path = write(tmp_path / "records.jsonl", records("\x00aggregate"))
    result = CliRunner().invoke(app, ["monitor", str(path), "--no-write-alarms"])
    assert "\x00" not in result.stdout + result.stderr
    assert "\\x00aggregate" in result.stdout + result.stderr
