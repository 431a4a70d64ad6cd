"""Round thirty-seven (second wave): a step half-written is never judged as whole, on every path that writes a store.

``rewardpipe verl import`` wrote a run with no manifest and no step marks, so ``monitor`` / ``report`` running while it
wrote (or after it was killed half-way) counted the newest step whole and judged part of its groups. The import now
keeps the run's manifest and marks each step once every rollout of it is stored, as ``rewardpipe run`` and the
trainer integrations do (:class:`rewardpipe.integrations.progress.StoredProgress`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rewardpipe.integrations.verl_dump import import_rollout_dump
from rewardpipe.store import LocalStore, StoreError


def _step(step: int) -> list[str]:
    """A v1 step: 3 groups of 4 rollouts, the score alternating inside each group."""
    return [
        json.dumps({"input": "Q", "output": "A", "score": float(k % 2), "step": step, "uid": f"g{g}_{k}_0"})
        for g in range(3)
        for k in range(4)
    ]


def _dump(tmp_path: Path, *steps: int) -> Path:
    folder = tmp_path / "dump"
    folder.mkdir(exist_ok=True)
    for step in steps:
        (folder / f"{step}.jsonl").write_text("".join(line + "\n" for line in _step(step)), encoding="utf-8")
    return folder


class _Killed(BaseException):
    """The import stopped half-way (a kill, a Ctrl-C): nothing after it runs."""


class _StopsInStep(LocalStore):
    """A store whose writer is stopped after ``after`` records of ``step``; ``seen`` calls ``watch`` at that point
    (what a ``monitor`` running beside the import reads)."""

    def __init__(self, root: Path, step: int, after: int, watch=None) -> None:
        super().__init__(root)
        self.stop_step, self.after, self.watch, self.written = step, after, watch, 0

    def put_record(self, record):  # type: ignore[override]
        if record.step == self.stop_step:
            if self.written == self.after:
                if self.watch is None:
                    raise _Killed
                self.watch()
            self.written += 1
        return super().put_record(record)


def test_a_step_being_imported_is_not_finished_until_every_rollout_of_it_is_stored(tmp_path):
    """monitor judged step 2 from 5 of its 12 rollouts while the import was writing it."""
    folder = _dump(tmp_path, 1, 2)
    seen = []
    store = _StopsInStep(
        tmp_path / "store", 2, 5, watch=lambda: seen.append(LocalStore(tmp_path / "store").run_progress("run"))
    )
    import_rollout_dump(folder, store, "run")
    assert len(seen) == 1
    assert seen[0].in_progress and seen[0].finished == [1] and seen[0].unfinished == [2]
    after = store.run_progress("run")
    assert not after.in_progress and after.unfinished == []  # every step whole: the run is finished


def test_an_import_killed_half_way_leaves_the_step_unfinished_and_the_next_import_writes_it_whole(tmp_path):
    from rewardpipe.cli import app

    folder = _dump(tmp_path, 1, 2, 3)
    with pytest.raises(_Killed):
        import_rollout_dump(folder, _StopsInStep(tmp_path / "store", 2, 5), "run")
    store = LocalStore(tmp_path / "store")
    progress = store.run_progress("run")
    assert progress.in_progress and progress.finished == [1] and progress.unfinished == [2]
    judged = CliRunner().invoke(app, ["monitor", str(tmp_path / "store"), "--json"])
    assert judged.exit_code == 0, judged.output
    assert [s["step"] for s in json.loads(judged.stdout)["steps"]] == [1]
    assert "step(s) 2 not finished" in judged.output
    again = import_rollout_dump(folder, store, "run")
    assert again.steps == {2, 3} and again.count == 7 + 12
    progress = store.run_progress("run")
    assert not progress.in_progress and progress.finished == [1, 2, 3]
    assert sum(1 for r in store.iter_records("run") if r.step == 2) == 12


def test_an_unfinished_step_older_than_the_newest_is_read_again_and_completed(tmp_path):
    """A step left half-written by a killed ``--again`` (or any step the run holds unmarked) is completed by the
    next import, not left as it is because it is not the newest."""
    folder = _dump(tmp_path, 1, 2, 3)
    store = LocalStore(tmp_path / "store")
    import_rollout_dump(folder, store, "run")
    # the marker of step 2 lost (an import killed before it marked step 2, then step 3 imported by hand)
    (tmp_path / "store/runs/run/finished/step=2.json").unlink()
    manifest = json.loads((tmp_path / "store/runs/run/manifest.json").read_text())
    (tmp_path / "store/runs/run/manifest.json").write_text(json.dumps({**manifest, "finished_at": None}))
    assert store.run_progress("run").unfinished == [2]
    import_rollout_dump(folder, store, "run")
    assert store.run_progress("run").unfinished == [] and not store.run_progress("run").in_progress


def test_a_store_that_refuses_a_rollout_leaves_its_step_unfinished(tmp_path):
    folder = _dump(tmp_path, 1, 2)

    class Refuses(LocalStore):
        def put_record(self, record):  # type: ignore[override]
            if record.step == 2 and record.rollout_id == "g1_0":
                raise StoreError("disk full")
            return super().put_record(record)

    store = Refuses(tmp_path / "store")
    with pytest.raises(StoreError):
        import_rollout_dump(folder, store, "run")
    progress = LocalStore(tmp_path / "store").run_progress("run")
    assert progress.in_progress and progress.unfinished == [2]


# --------------------------------------------------------------------------------------------------
# verifiers: evaluation groups scored by the watched rubric are no training step's

VF_WEIGHTS = {"format": 0.2, "answer_correct": 0.8}


def _vf_group(correct: list[float]) -> list[dict[str, float]]:
    return [{"format": 1.0, "answer_correct": value} for value in correct]


def test_groups_scored_while_evaluating_are_kept_out_of_training_steps():
    """verifiers 0.2.1 and 0.3.1 call the same ``Rubric.score_group`` for ``env.evaluate`` as for training, with
    nothing in the states telling them apart: an evaluation between two training batches was counted in the training
    steps (its groups completed a step, which was judged on groups not trained on). Groups scored inside
    ``watch.evaluating()`` are counted apart."""
    from rewardpipe.integrations.verifiers_watch import GroupWatch

    watch = GroupWatch(groups_per_step=2, run_id="vf-eval")
    watch.add_group(_vf_group([1.0, 0.0]), VF_WEIGHTS)
    with watch.evaluating():
        for _ in range(3):
            assert watch.add_group(_vf_group([1.0]), VF_WEIGHTS) is None
    assert watch.reports == [] and watch.evaluation_groups == 3
    report = watch.add_group(_vf_group([0.0, 1.0]), VF_WEIGHTS)
    assert report is not None and report.step == 0
    assert {r for r in report.to_dict()["components"]} >= {"answer_correct"}
    assert watch.add_group(_vf_group([1.0, 0.0]), VF_WEIGHTS) is None  # the step after: one group so far


def test_a_group_of_another_size_is_warned_of_once(caplog):
    """When the watch cannot tell (an evaluation not wrapped in ``evaluating()``), a group of a size the run's groups
    did not have (vf-eval's default is one rollout per example) is said, once, with the switch to use."""
    from rewardpipe.integrations.verifiers_watch import GroupWatch

    watch = GroupWatch(groups_per_step=4, run_id="vf-eval")
    with caplog.at_level("WARNING", logger="rewardpipe.verifiers"):
        watch.add_group(_vf_group([1.0, 0.0]), VF_WEIGHTS)
        watch.add_group(_vf_group([1.0, 0.0]), VF_WEIGHTS)
        assert not caplog.records
        watch.add_group(_vf_group([1.0]), VF_WEIGHTS)
        watch.add_group(_vf_group([1.0, 0.0, 1.0]), VF_WEIGHTS)
    warned = [r.getMessage() for r in caplog.records if "evaluating()" in r.getMessage()]
    assert len(warned) == 1 and "1 rollout" in warned[0] and "2 rollouts" in warned[0]


@pytest.mark.verifiers
def test_a_real_evaluation_between_training_groups_is_not_a_training_step():
    import asyncio

    vf = pytest.importorskip("verifiers")
    from openai import AsyncOpenAI

    try:
        from verifiers.clients.openai_chat_completions_client import OpenAIChatCompletionsClient
    except ImportError:  # verifiers 0.3: the classic API under verifiers.legacy
        from verifiers.legacy.clients.openai_chat_completions_client import OpenAIChatCompletionsClient

    from rewardpipe.integrations.verifiers import rubric
    from rewardpipe.integrations.verifiers_watch import GroupWatch
    from tests.integrations.test_verifiers_real import _dataset, chat_server

    legacy = getattr(vf, "legacy", vf) if not hasattr(vf, "SingleTurnEnv") else vf
    watch = GroupWatch(groups_per_step=2, run_id="vf-eval")
    server, url, _ = chat_server(lambda messages: "#### 12")
    try:
        env = legacy.SingleTurnEnv(dataset=_dataset(), rubric=rubric("gsm8k", watch=watch))
        client = OpenAIChatCompletionsClient(AsyncOpenAI(base_url=url, api_key="local"))
        group = [{"prompt": [{"role": "user", "content": "5 + 7?"}], "example_id": 0, "answer": "12"}] * 2
        asyncio.run(env.run_group(group, client, "scripted", {}))
        with watch.evaluating():
            asyncio.run(env.evaluate(client, "scripted", {}, num_examples=1, rollouts_per_example=2))
        assert watch.reports == [] and watch.evaluation_groups == 1
        asyncio.run(env.run_group(group, client, "scripted", {}))
    finally:
        server.shutdown()
    assert len(watch.reports) == 1 and watch.reports[0].step == 0


def test_a_live_import_leaves_the_newest_step_file_unmarked_until_a_later_one_exists(tmp_path):
    """verl writes its step files one at a time, in order (one dump thread), and a file caught mid-write most often
    ends in a newline (whole lines, not all of them): imported during training, the newest step was marked finished
    on part of its groups. With ``live`` the newest step file is stored but left unfinished until a later step's file
    exists; an import without it (the training ended) marks it."""
    folder = _dump(tmp_path, 1)
    partial = _step(2)[:5]  # verl caught after 5 of its 12 lines
    (folder / "2.jsonl").write_text("".join(line + "\n" for line in partial), encoding="utf-8")
    store = LocalStore(tmp_path / "store")
    first = import_rollout_dump(folder, store, "run", live=True)
    assert first.steps == {1, 2} and first.count == 12 + 5
    progress = store.run_progress("run")
    assert progress.in_progress and progress.finished == [1] and progress.unfinished == [2]
    _dump(tmp_path, 2, 3)  # verl finished step 2 and wrote step 3
    second = import_rollout_dump(folder, store, "run", live=True)
    assert second.count == 7 + 12
    progress = store.run_progress("run")
    assert progress.finished == [1, 2] and progress.unfinished == [3]
    import_rollout_dump(folder, store, "run")  # the training ended: every file is whole
    progress = store.run_progress("run")
    assert not progress.in_progress and progress.finished == [1, 2, 3]


def test_the_command_takes_live_and_says_the_step_left_unfinished(tmp_path):
    from rewardpipe.cli import app

    folder = _dump(tmp_path, 1, 2)
    out = CliRunner().invoke(app, ["verl", "import", str(folder), "--out", str(tmp_path / "store"), "--live"])
    assert out.exit_code == 0, out.output
    assert "step 2" in out.output and "unfinished" in out.output
    assert LocalStore(tmp_path / "store").run_progress("verl").unfinished == [2]


# --------------------------------------------------------------------------------------------------
# The scheduled check (check_pending) reads the same marks as monitor and report


def test_the_scheduled_check_never_judges_an_unfinished_step(tmp_path):
    """``check_pending`` (the variance-check Lambda, a catch-up) judged every stored step but the newest, marks
    unread: a step the store took only part of (a writer stopped or refused half-way through it, a ``rewardpipe
    run`` step whose records were spilled, which it leaves unchecked) was judged on part of its groups and recorded
    as checked, never judged again once completed. Written here as every writer keeps its marks (StoredProgress)."""
    from rewardpipe.integrations.progress import StoredProgress
    from rewardpipe.integrations.verl_dump import read_rollout_dump
    from rewardpipe.models import Record
    from rewardpipe.monitoring import check_pending

    read = read_rollout_dump(_dump(tmp_path, 0, 1, 2), "run")
    store = LocalStore(tmp_path / "store")
    progress = StoredProgress(store, "run", "test")
    assert progress.start(reward="verl", weights={}) is None
    for step in (0, 1, 2):
        records = [r for r in read.records if r["step"] == step]
        kept = records[:5] if step == 1 else records  # the store stopped taking step 1's records after 5
        for record in kept:
            store.put_record(Record.model_validate(record))
        assert progress.before_step() is None
        assert progress.step_stored(step, len(kept), whole=step != 1) is None
    assert store.run_progress("run").unfinished == [1]
    (check,) = check_pending(store, ["run"], skip_newest=True)
    assert check.checked_steps == [0]
    (check,) = check_pending(store, ["run"])
    assert check.checked_steps == [2]
    for record in [r for r in read.records if r["step"] == 1][5:]:  # completed (a resume): judged then
        store.put_record(Record.model_validate(record))
    store.mark_step_finished("run", 1, stored=7)
    (check,) = check_pending(store, ["run"])
    assert check.checked_steps == [1] and check.results[0].steps[0].records == 12
