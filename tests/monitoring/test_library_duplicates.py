"""``monitor_records`` (the library: TRL callback, trainer code) counts a repeated delivery once, the last copy,
exactly as `rewardpipe monitor` does on the same records (same key: run, step, group, rollout)."""

from __future__ import annotations

import json
import random

import pytest
from typer.testing import CliRunner

from rewardpipe.cli import app
from rewardpipe.models import Record
from rewardpipe.monitoring import monitor_records
from rewardpipe.monitoring.statistics import delivery_key


def rec(step: int, group: int, k: int, value: float, run: str = "r") -> dict:
    return {
        "run_id": run,
        "step": step,
        "group_id": f"g{group}",
        "rollout_id": f"s{step}g{group}k{k}",
        "task_id": f"t{group}",
        "status": "scored",
        "components": {"c": value},
        "weights": {"c": 1.0},
        "aggregate": value,
    }


def cli_result(tmp_path, records: list[dict]) -> dict:
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = CliRunner().invoke(app, ["monitor", str(path), "--json"])
    assert out.exit_code in (0, 1), out.output
    return json.loads(out.stdout)


def comparable(result: dict) -> dict:
    return {"steps": result["steps"], "alarms": [{**a, "alarm_id": None} for a in result["alarms"]]}


def test_one_rollout_per_group_delivered_twice_is_not_a_dead_component():
    """The review's case: six groups, each one real rollout sent twice. Before: 6 eligible zero-variance
    groups, `dead` and two dead_component alarms; the CLI said insufficient_data."""
    rnd = random.Random(0)
    records = []
    for g in range(6):
        r = rec(0, g, 0, rnd.random())
        records += [r, dict(r)]
    result = monitor_records(records)
    c = result.to_dict()["steps"][0]["components"]["c"]
    assert (c["verdict"], c["cause"], c["eligible_groups"]) == ("insufficient_data", "no_eligible_groups", 0)
    assert result.alarms == []
    assert result.duplicates == [0, 2, 4, 6, 8, 10]


def test_the_last_copy_counts():
    """A re-delivery that differs from the first copy replaces it, as the store and the CLI keep the last write."""
    records = [rec(0, g, k, 1.0) for g in range(8) for k in range(4)]  # every group constant: dead
    redelivered = [rec(0, g, 0, 0.0) for g in range(8)]  # the corrected copies: every group varies now
    result = monitor_records(records + redelivered)
    c = result.to_dict()["steps"][0]["components"]["c"]
    assert c["zero_variance_groups"] == 0 and c["verdict"] == "ok", c
    assert len(result.duplicates) == 8
    first_wins = monitor_records(redelivered + records)  # now the constant copies come last and count
    assert first_wins.to_dict()["steps"][0]["components"]["c"]["zero_variance_groups"] == 8


@pytest.mark.parametrize("seed", range(6))
def test_library_and_cli_agree_on_records_with_repeats(tmp_path, seed):
    """Random runs with random re-deliveries (some identical, some changed, some of another step or run's
    key that must NOT count as repeats): the library's steps and alarms are the CLI's."""
    rnd = random.Random(seed)
    records = [
        rec(s, g, k, float(rnd.random() < 0.5)) for s in range(rnd.randint(1, 8)) for g in range(8) for k in range(4)
    ]
    for _ in range(rnd.randint(1, 40)):
        again = dict(rnd.choice(records))
        if rnd.random() < 0.5:
            again["components"] = {"c": 1.0 - again["components"]["c"]}
            again["aggregate"] = again["components"]["c"]
        records.insert(rnd.randint(0, len(records)), again)
    repeats = len(records) - len({delivery_key(r) for r in records})
    library = monitor_records(records)
    cli = cli_result(tmp_path, records)
    assert comparable(library.to_dict()) == comparable(cli)
    assert len(library.duplicates) == cli["duplicates_dropped"] == repeats > 0


def test_same_rollout_id_in_another_step_group_or_run_is_not_a_repeat():
    base = rec(0, 0, 0, 1.0)
    others = [{**base, "step": 1}, {**base, "group_id": "g9"}, {**base, "rollout_id": "other"}]
    result = monitor_records([base, *others])
    assert result.duplicates == []
    assert sum(step["records"] for step in result.to_dict()["steps"]) == 4
    with pytest.raises(Exception, match="several runs"):  # another run is another key (and refused as a mix)
        monitor_records([base, {**base, "run_id": "r2"}])


def test_record_objects_and_dicts_share_the_key_and_bad_records_keep_their_index():
    base = rec(0, 0, 0, 1.0)
    records = [Record.model_validate(base), {"not": "a record"}, base, rec(0, 0, 1, 0.0)]
    result = monitor_records(records)
    assert result.duplicates == [0]
    assert [u["key"] for u in result.unreadable] == ["record #1"]
    assert result.to_dict()["steps"][0]["components"]["c"]["zero_variance_groups"] == 0
