"""Round thirty-seven (third wave): one bad sample never costs a stored step.

A record that did not validate (a rank's row whose metrics are no metric values, a task id with a lone surrogate) was
left out of the store and its whole step left unmarked: never judged by ``monitor`` on the store, and the run never
marked finished, one bad sample costing the step against the rule that one bad sample never fails a batch. A step is
whole when every rollout of it is accounted for, as a record or as an error record: such a record is now stored as
an error record (``invalid_record``, naming what was wrong), counted, and its step marked finished.
"""

from __future__ import annotations

import json

from typer.testing import CliRunner

from rewardpipe.integrations.progress import storable_record
from rewardpipe.store import LocalStore, transcript_key

PROMPTS = [f"{i}+{i}?" for i in range(4) for _ in range(2)]  # 4 groups of 2
ANSWERS = ["2"] * 8


def _monitor_json(store_dir):
    from rewardpipe.cli import app

    out = CliRunner().invoke(app, ["monitor", str(store_dir), "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def _spoils(index: int, detail: dict):
    """A gather that hands the main process one row whose details no record takes (as a rank may send)."""

    def gather(rows):
        rows = list(rows)
        values, kind, details = rows[index]
        rows[index] = (values, kind, {**details, **detail})
        return rows

    return gather


def _trl_batch(callback, completions):
    for fn in callback.reward_funcs:
        fn(prompts=PROMPTS, completions=completions, answer=ANSWERS)


def _trl_run(tmp_path, detail):
    from rewardpipe.integrations.trl import RewardPipeMonitor

    store = LocalStore(tmp_path)
    callback = RewardPipeMonitor("gsm8k", store=store, run_id="bad", gather=_spoils(3, detail))
    callback.group_size = 2
    _trl_batch(callback, ["#### 2", "#### 3"] * 4)
    return callback, store


def test_a_trl_record_whose_metrics_are_no_metric_values_is_an_error_record_and_its_step_stays_whole(tmp_path):
    callback, store = _trl_run(tmp_path, {"metrics": {"tokens": [1, 2, 3]}})
    records = {r.rollout_id: r for r in store.iter_records("bad")}
    assert len(records) == 8  # every rollout accounted for
    bad = records["c3"]
    assert bad.status == "error" and bad.error.kind == "invalid_record" and "metrics" in bad.error.message
    assert bad.group_id == "g1" and bad.aggregate is None
    transcript = store.get_transcript(transcript_key("bad", 0, "g1", "c3"))  # its evidence kept beside it
    assert transcript.status == "error" and transcript.messages
    assert all(r.status == "scored" for key, r in records.items() if key != "c3")
    progress = store.run_progress("bad")
    assert progress.unfinished == [] and progress.finished == [0]
    data = _monitor_json(tmp_path)
    assert [s["step"] for s in data["steps"]] == [0] and data["unfinished_steps"] == []
    assert data["steps"][0]["error_rate"] == 1 / 8  # counted as an error, in the live judgement too
    assert callback.reports[-1].error_rate == 1 / 8
    assert any("c3" in failure and "metrics" in failure for failure in callback.failures)  # and said


def test_a_trl_task_id_with_a_lone_surrogate_costs_its_record_only(tmp_path):
    _, store = _trl_run(tmp_path, {"task_id": "t\ud800"})
    records = {r.rollout_id: r for r in store.iter_records("bad")}
    assert len(records) == 8 and records["c3"].status == "error" and records["c3"].error.kind == "invalid_record"
    assert store.run_progress("bad").unfinished == []


def test_an_error_record_keeps_the_ids_and_names_what_was_wrong():
    raw = {
        "run_id": "r",
        "step": 4,
        "group_id": "g0",
        "rollout_id": "c1",
        "task_id": "t\ud800",
        "status": "scored",
        "error": None,
        "components": {"a": 1.0, "b": 0.5},
        "weights": {"a": 1.0, "b": "heavy"},
        "aggregate": 1.5,
        "metrics": {"x": {"nested": 1}},
    }
    record, problem = storable_record(raw)
    assert record is not None and problem is not None and "task_id" in problem
    assert (record.run_id, record.step, record.group_id, record.rollout_id) == ("r", 4, "g0", "c1")
    assert record.task_id == "t\ufffd" and record.status == "error" and record.error.kind == "invalid_record"
    assert record.components == {"a": None, "b": None} and record.weights == {"a": 1.0} and record.metrics == {}
    assert record.error.message.startswith("the rollout's record did not validate")
    valid = {**raw, "task_id": "t", "weights": {"a": 1.0, "b": 1.0}, "metrics": {}}
    assert storable_record(valid) == (storable_record(valid)[0], None) and storable_record(valid)[0].aggregate == 1.5
    assert storable_record({**raw, "rollout_id": ""})[0] is None  # no id to store it under: no record at all


def test_a_verifiers_record_that_does_not_validate_is_an_error_record_and_its_step_stays_whole(tmp_path):
    """The watch builds its records itself; one that does not validate (here a metric no record takes, as a
    record of a later shape might carry) cost its step's mark as a refused write did."""
    from rewardpipe.integrations.verifiers_watch import GroupWatch

    class Spoiling(GroupWatch):
        def _record(self, step, group_id, index, values, weights):
            record = super()._record(step, group_id, index, values, weights)
            if group_id == "g1" and index == 0:
                record["metrics"] = {"turns": {"nested": 1}}
            return record

    watch = Spoiling(groups_per_step=2, run_id="vf", store=LocalStore(tmp_path))
    for _ in range(2):
        watch.add_group(
            [{"format": 1.0, "answer_correct": r} for r in (1.0, 0.0)], {"format": 0.5, "answer_correct": 1.0}
        )
    store = LocalStore(tmp_path)
    records = {r.rollout_id: r for r in store.iter_records("vf")}
    assert len(records) == 4 and records["g1-r0"].error.kind == "invalid_record"
    assert store.run_progress("vf").unfinished == [] and store.run_progress("vf").finished == [0]
    assert watch.reports[-1].error_rate == 1 / 4
    assert any("g1-r0" in failure for failure in watch.failures)
    data = _monitor_json(tmp_path)
    assert [s["step"] for s in data["steps"]] == [0] and data["steps"][0]["error_rate"] == 1 / 4


def test_a_verl_record_that_does_not_validate_is_an_error_record_never_a_hole_in_a_step_marked_whole(
    tmp_path, monkeypatch
):
    """The import left a rollout whose record did not validate out of the store and still marked its step finished:
    the step judged whole without it, and never read again. It is now stored as its error record."""
    from rewardpipe.integrations import verl_dump

    folder = tmp_path / "dump"
    folder.mkdir()
    lines = [
        json.dumps({"input": "Q", "output": "A", "score": float(k % 2), "step": 1, "uid": f"g{g}_{k}_0"})
        for g in range(2)
        for k in range(2)
    ]
    (folder / "1.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    read_file = verl_dump._read_file

    def spoiling(file, run_id, weights, out, **kwargs):  # a record of a shape the store does not take
        read_file(file, run_id, weights, out, **kwargs)
        out.records[1]["metrics"] = {"tokens": [1, 2]}

    monkeypatch.setattr(verl_dump, "_read_file", spoiling)
    store = LocalStore(tmp_path / "store")
    read = verl_dump.import_rollout_dump(folder, store, "run")
    records = {r.rollout_id: r for r in store.iter_records("run")}
    assert len(records) == 4 and records["g0_1"].error.kind == "invalid_record"
    assert store.get_transcript(transcript_key("run", 1, "g0", "g0_1")).status == "error"
    assert any("g0_1" in line and "error record" in line for line in read.skipped)
    assert store.run_progress("run").finished == [1] and not store.run_progress("run").in_progress
