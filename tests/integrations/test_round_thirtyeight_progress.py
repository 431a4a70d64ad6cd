"""Round thirty-eight, stored progress: the trainer paths' records and manifests.

1. TRL's callback and the verifiers ``GroupWatch`` validated each record of a batch three times: once to replace one
   that does not validate by its error record (``invalid_as_error_records``, which handed back plain dicts), again in
   ``monitor_records``, again in ``_persist`` (``storable_record``). The ``Record`` of the first pass is now the one
   judged and stored: one validation per record per batch (two for one replaced: its own and its error record's).
2. ``StoredProgress.start`` built the trainers' manifest field by field, as ``rewardpipe.cli.common.new_manifest``
   builds ``run``'s, and had its own copy of ``utc_now``; the manifest builder (which also records the packages the
   reward came from) now lives beside ``RunManifest``, typer-free, and every writer uses it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

from rewardpipe.models import Record
from rewardpipe.store import LocalStore, manifest_key, transcript_key
from tests.integrations.test_round_thirtyseven_d_sample_never_costs_a_step import ANSWERS, PROMPTS, _spoils


@pytest.fixture
def validations(monkeypatch):
    """Every ``Record`` validation (``model_validate`` and the constructor), by rollout id."""
    counted: Counter[str] = Counter()
    validate = Record.model_validate.__func__  # type: ignore[attr-defined]
    construct = Record.__init__

    def counting_validate(cls, obj, *args, **kwargs):
        if cls is Record:
            counted[str(obj.get("rollout_id")) if isinstance(obj, dict) else "?"] += 1
        return validate(cls, obj, *args, **kwargs)

    def counting_init(self, *args, **kwargs):
        if type(self) is Record:
            counted[str(kwargs.get("rollout_id"))] += 1
        construct(self, *args, **kwargs)

    monkeypatch.setattr(Record, "model_validate", classmethod(counting_validate))
    monkeypatch.setattr(Record, "__init__", counting_init)
    return counted


def _trl_callback(store, gather=None):
    from rewardpipe.integrations.trl import RewardPipeMonitor

    callback = RewardPipeMonitor("gsm8k", store=store, run_id="once", **({"gather": gather} if gather else {}))
    callback.group_size = 2
    return callback


def _trl_batch(callback):
    for fn in callback.reward_funcs:
        fn(prompts=PROMPTS, completions=["#### 2", "#### 3"] * 4, answer=ANSWERS)


def test_a_trl_batch_validates_each_record_once(tmp_path, validations):
    store = LocalStore(tmp_path)
    callback = _trl_callback(store)
    _trl_batch(callback)
    assert callback.failures == []
    assert validations == {f"c{i}": 1 for i in range(8)}  # was 3 each
    assert len(list(store.iter_records("once"))) == 8 and store.run_progress("once").finished == [0]
    validations.clear()
    _trl_batch(callback)  # the next batch too (the step is reopened, the manifest rewritten: no record read)
    assert validations == {f"c{i}": 1 for i in range(8)}


def test_a_trl_record_that_does_not_validate_is_still_its_error_record_counted_and_its_step_whole(
    tmp_path, validations
):
    store = LocalStore(tmp_path)
    callback = _trl_callback(store, _spoils(3, {"metrics": {"tokens": [1, 2, 3]}}))
    _trl_batch(callback)
    # the bad one: its own validation and its error record's; every other one: once
    assert validations == {**{f"c{i}": 1 for i in range(8)}, "c3": 2}
    records = {r.rollout_id: r for r in store.iter_records("once")}
    assert len(records) == 8 and records["c3"].error.kind == "invalid_record"
    assert store.run_progress("once").unfinished == [] and callback.reports[-1].error_rate == 1 / 8
    assert any("c3" in failure and "metrics" in failure for failure in callback.failures)
    assert store.get_transcript(transcript_key("once", 0, "g1", "c3")).status == "error"


def test_a_trl_record_with_no_id_to_store_it_under_is_still_lost_alone_and_said(tmp_path, monkeypatch):
    """A record the first pass could not even make an error record of keeps what it did: judged unreadable, not
    stored, its step left unfinished; the others are judged and stored."""
    from rewardpipe.integrations import trl

    built = trl.batch_records

    def without_an_id(*args, **kwargs):
        records = built(*args, **kwargs)
        records[5]["rollout_id"] = ""
        return records

    monkeypatch.setattr(trl, "batch_records", without_an_id)
    store = LocalStore(tmp_path)
    callback = _trl_callback(store)
    _trl_batch(callback)
    assert len(list(store.iter_records("once"))) == 7
    assert store.run_progress("once").unfinished == [0]
    assert any("not stored: record" in failure for failure in callback.failures)
    assert (callback.reports[-1].records, callback.reports[-1].groups) == (7, 4)  # judged without it


def _watch(store, spoil: bool = False):
    from rewardpipe.integrations.verifiers_watch import GroupWatch

    class Spoiling(GroupWatch):
        def _record(self, step, group_id, index, values, weights):
            record = super()._record(step, group_id, index, values, weights)
            if spoil and group_id == "g1" and index == 0:
                record["metrics"] = {"turns": {"nested": 1}}
            return record

    return Spoiling(groups_per_step=2, run_id="vf", store=store)


def _groups(watch):
    for _ in range(2):
        watch.add_group(
            [{"format": 1.0, "answer_correct": r} for r in (1.0, 0.0)], {"format": 0.5, "answer_correct": 1.0}
        )


def test_a_verifiers_step_validates_each_record_once(tmp_path, validations):
    store = LocalStore(tmp_path)
    watch = _watch(store)
    _groups(watch)
    assert watch.failures == [] and len(watch.reports) == 1
    assert validations == {"g0-r0": 1, "g0-r1": 1, "g1-r0": 1, "g1-r1": 1}  # was 3 each
    assert store.run_progress("vf").finished == [0]


def test_a_verifiers_record_that_does_not_validate_is_still_its_error_record(tmp_path, validations):
    store = LocalStore(tmp_path)
    watch = _watch(store, spoil=True)
    _groups(watch)
    assert validations == {"g0-r0": 1, "g0-r1": 1, "g1-r0": 2, "g1-r1": 1}
    records = {r.rollout_id: r for r in store.iter_records("vf")}
    assert len(records) == 4 and records["g1-r0"].error.kind == "invalid_record"
    assert store.run_progress("vf").unfinished == [] and watch.reports[-1].error_rate == 1 / 4
    assert any("g1-r0" in failure for failure in watch.failures)


# -- 2. one manifest builder -----------------------------------------------------------------------------------------


def test_a_trainer_manifest_has_the_fields_run_writes(tmp_path, monkeypatch):
    """The manifest TRL's callback writes is built as ``run``'s: the same fields, the packages the reward came from
    among them (it had none: the trainers' manifests did not say which package's reward was trained on)."""
    import rewardpipe.references as references
    from rewardpipe.cli.common import new_manifest
    from rewardpipe.rewards import get_reward

    monkeypatch.setattr(references, "distribution_of", lambda obj: ("acme-rewards", "1.2.3"))
    store = LocalStore(tmp_path)
    callback = _trl_callback(store)
    _trl_batch(callback)
    stored = store.get_json(manifest_key("once"))
    run = new_manifest(
        run_id="once", command="run", configuration={}, tasks_file=None, reward=get_reward("gsm8k", None)
    ).to_dict()
    assert set(stored) == set(run)
    assert stored["packages"] == run["packages"] == {"acme-rewards": "1.2.3"}
    assert stored["versions"] == run["versions"] and stored["components"] == run["components"]
    assert stored["command"] == "trl" and stored["configuration"] == {"num_generations": 2}
    assert stored["started_at"] and stored["finished_at"] >= stored["started_at"]


def test_a_trainer_manifest_is_written_when_the_package_lookup_fails(tmp_path, monkeypatch):
    """The packages are a courtesy: a lookup that raises (a distribution's broken metadata) costs them, never the
    manifest (without one, no step of the run would be marked)."""
    import rewardpipe.references as references

    def broken(obj):
        raise ValueError("bad METADATA")

    monkeypatch.setattr(references, "distribution_of", broken)
    store = LocalStore(tmp_path)
    callback = _trl_callback(store)
    _trl_batch(callback)
    stored = store.get_json(manifest_key("once"))
    assert stored["packages"] == {} and stored["finished_at"]
    assert store.run_progress("once").finished == [0]


def test_the_trainer_paths_build_their_manifest_without_loading_the_cli():
    """typer (and the CLI's shared module) is no load of a training process: the trainers' manifest builder is
    typer-free."""
    code = """
import json, sys, tempfile
from rewardpipe.integrations import progress, trl, verifiers_watch, verl_dump
from rewardpipe.store import LocalStore
from rewardpipe.rewards import get_reward
store = LocalStore(tempfile.mkdtemp())
writer = progress.StoredProgress(store, "r", "trl")
assert writer.start(reward=get_reward("gsm8k", None)) is None, "not started"
assert writer.step_stored(0, 0, True) is None
print(json.dumps(sorted(m for m in ("typer", "rewardpipe.cli", "rewardpipe.cli.common") if m in sys.modules)))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(out.stdout) == []


def test_the_cli_and_the_trainers_share_one_builder_and_one_clock():
    import rewardpipe.cli.common as common
    import rewardpipe.models as models

    assert common.new_manifest is models.new_manifest and common.utc_now is models.utc_now


def test_a_reward_rewardpipe_does_not_hold_is_still_named_with_its_weights_and_components(tmp_path):
    from rewardpipe.integrations.progress import StoredProgress

    store = LocalStore(tmp_path)
    component = {"range": [0.0, 1.0], "role": "outcome", "weight": 2.0}
    progress = StoredProgress(store, "v", "verl import")
    assert progress.start(reward="verl", weights={"acc": 2}, components={"acc": component}) is None
    stored = store.get_json(manifest_key("v"))
    assert (stored["reward"], stored["weights"], stored["components"]) == ("verl", {"acc": 2.0}, {"acc": component})
    assert stored["packages"] == {} and stored["reward_reference"] is None and stored["finished_at"] is None
