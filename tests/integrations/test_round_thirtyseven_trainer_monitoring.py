"""Round thirty-seven, trainer integrations' monitoring: the TRL callback and the verifiers GroupWatch as a GRPO user
runs them (several processes, the store given to the main process only, resumed runs, rewards that return no number,
a store that stops taking writes mid-run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rewardpipe.store import open_store, transcript_key


@pytest.mark.trl
def test_two_real_processes_with_the_store_on_the_main_process_only_store_every_transcript(tmp_path):
    """The store given to the main process's callback only (``store=... if RANK == 0 else None``): before, the other
    process kept no transcripts, so its half of every batch was stored without one and the alarms named examples
    (``rewardpipe show``, ``report``) that did not exist."""
    pytest.importorskip("trl")
    from tests.integrations.trl_toys import launch_two_processes

    store_dir = tmp_path / "store"
    main, other = launch_two_processes(tmp_path / "out", store_dir, main_only=True)
    assert main["failures"] == other["failures"] == []
    store = open_store(str(store_dir))
    records = list(store.iter_records("trl-two-processes"))
    assert len(records) == 40  # 2 steps x 20 completions, half of them the other process's
    for record in records:
        key = transcript_key(record.run_id, record.step, record.group_id, record.rollout_id)
        transcript = store.get_transcript(key)  # raises when it is missing
        assert [m.role for m in transcript.messages] == ["user", "assistant"]
    examples = [e for a in main["alarm_examples"] for e in a if e.get("transcript_key")]
    assert examples, main["alarm_steps"]
    for example in examples:
        store.get_transcript(example["transcript_key"])


# --------------------------------------------------------------------------------------------------
# verifiers: the within-group figures TRL's callback logs, as rollout metrics

VF_WEIGHTS = {"format": 0.5, "answer_correct": 1.0}


def _vf_group(right: list[float], form: float = 1.0) -> list[dict[str, float]]:
    return [{"format": form, "answer_correct": r, "reward_error": 0.0} for r in right]


def test_a_watched_groups_figures_average_over_the_batch_to_the_monitors_figures():
    """GroupWatch logged nothing a trainer sees (TRL's callback logs each component's within-group figures); each
    group's figures are now rollout metrics, whose mean over a step's rollouts is the step's figure."""
    from rewardpipe.integrations.verifiers_watch import GroupWatch

    watch = GroupWatch(groups_per_step=4)
    groups = [
        _vf_group([1.0, 0.0, 1.0, 1.0]),
        _vf_group([1.0] * 4),
        _vf_group([0.0, 1.0, 0.0, 1.0]),
        _vf_group([0.0] * 4),
    ]
    metrics = []
    for group in groups:
        figures = watch.group_metrics(group, VF_WEIGHTS)
        metrics += [figures] * len(group)
        report = watch.add_group(group, VF_WEIGHTS)
    for name in ("format", "answer_correct", "aggregate"):
        stats = report.aggregate if name == "aggregate" else report.components[name]
        fraction = sum(m[f"rewardpipe/{name}/zero_variance_group_fraction"] for m in metrics) / len(metrics)
        spread = sum(m[f"rewardpipe/{name}/within_group_std"] for m in metrics) / len(metrics)
        assert fraction == pytest.approx(stats.zero_variance_group_fraction)
        assert spread == pytest.approx(stats.within_group_std_mean)
    assert metrics[0]["rewardpipe/format/zero_variance_group_fraction"] == 1.0  # format is 1.0 everywhere


def test_a_group_with_one_scored_rollout_compares_nothing_and_an_unscorable_one_is_left_out():
    import math

    from rewardpipe.integrations.verifiers_watch import GroupWatch

    watch = GroupWatch()
    unscorable = {"format": math.nan, "answer_correct": math.nan, "reward_error": 1.0}
    lone = watch.group_metrics([_vf_group([1.0])[0], unscorable], VF_WEIGHTS)
    assert lone["rewardpipe/answer_correct/zero_variance_group_fraction"] == 1.0
    assert lone["rewardpipe/answer_correct/within_group_std"] == 0.0
    both = watch.group_metrics([*_vf_group([1.0, 0.0]), unscorable], VF_WEIGHTS)
    assert both["rewardpipe/answer_correct/within_group_std"] == pytest.approx(0.5)  # the NaN one is no value
    assert all(math.isfinite(value) for value in both.values())


@pytest.mark.verifiers
def test_a_real_rubric_gives_every_rollout_its_groups_figures():
    import asyncio

    vf = pytest.importorskip("verifiers")
    from openai import AsyncOpenAI
    from verifiers.clients.openai_chat_completions_client import OpenAIChatCompletionsClient

    from rewardpipe.integrations.verifiers import rubric
    from rewardpipe.integrations.verifiers_watch import GroupWatch
    from tests.integrations.test_verifiers_real import _dataset, chat_server

    watch = GroupWatch(groups_per_step=2, run_id="vf-figures")
    answers = iter(["#### 12", "#### 13"] * 4)  # well formed (format constant), right half the time
    server, url, _ = chat_server(lambda messages: next(answers))
    try:
        env = vf.SingleTurnEnv(dataset=_dataset(), rubric=rubric("gsm8k", watch=watch))
        client = OpenAIChatCompletionsClient(AsyncOpenAI(base_url=url, api_key="local"))
        group = [{"prompt": [{"role": "user", "content": "5 + 7?"}], "example_id": 0, "answer": "12"}] * 4
        outputs = asyncio.run(env.run_group(group, client, "scripted", {}))
    finally:
        server.shutdown()
    for output in outputs:
        metrics = output["metrics"]
        assert metrics["rewardpipe/format/zero_variance_group_fraction"] == 1.0
        assert metrics["rewardpipe/answer_correct/zero_variance_group_fraction"] == 0.0
        assert metrics["rewardpipe/answer_correct/within_group_std"] == pytest.approx(0.5)
        assert metrics["reward_error"] == 0.0


# --------------------------------------------------------------------------------------------------
# A store that stops taking records half-way through a step

PROMPTS = [f"{i}+{i}?" for i in range(4) for _ in range(2)]  # 4 groups of 2
ANSWERS = ["2"] * 8


def _refusing_store(path, refused_calls):
    """A local store whose put_record refuses the calls numbered in ``refused_calls`` (a disk that filled up, a bucket
    that throttles)."""
    from rewardpipe.store import LocalStore

    class Refusing(LocalStore):
        calls = 0

        def put_record(self, record):
            Refusing.calls += 1
            if Refusing.calls in refused_calls:
                raise PermissionError("read-only file system")
            return super().put_record(record)

    return Refusing(path)


def _batch(callback, completions):
    for fn in callback.reward_funcs:
        fn(prompts=PROMPTS, completions=completions, answer=ANSWERS)


def _monitor_json(store_dir):
    import json

    from typer.testing import CliRunner

    from rewardpipe.cli import app

    out = CliRunner().invoke(app, ["monitor", str(store_dir), "--json"])
    return out.exit_code, (json.loads(out.stdout) if out.exit_code == 0 else out.output)


def _trainer_state(main=True):
    from types import SimpleNamespace

    return SimpleNamespace(is_world_process_zero=main, global_step=0)


def test_a_trl_step_the_store_stopped_taking_half_way_is_never_judged_as_the_whole_batch(tmp_path):
    """Before: the store refused the records from the sixth on, and ``rewardpipe monitor`` judged step 0 from the
    five it held as if they were the batch (a group of one, figures of other groups than the ones trained on), with
    nothing said. The step is now named unfinished and not judged; the next step, stored whole, is."""
    from rewardpipe.integrations.trl import RewardPipeMonitor

    callback = RewardPipeMonitor("gsm8k", store=_refusing_store(tmp_path, {6}), run_id="cut")
    callback.group_size = 2
    _batch(callback, ["#### 2", "#### 3"] * 4)
    assert any("read-only file system" in failure for failure in callback.failures)
    assert _monitor_json(tmp_path)[0] == 1  # no step finished: nothing judged
    _batch(callback, ["#### 2", "#### 2"] * 4)
    code, data = _monitor_json(tmp_path)
    assert code == 0 and [s["step"] for s in data["steps"]] == [1]
    assert data["unfinished_steps"] == [0] and data["in_progress"] is True
    callback.on_train_end(None, _trainer_state(), None)
    assert _monitor_json(tmp_path)[1]["unfinished_steps"] == [0]  # never marked finished over a cut step


def test_a_trl_run_is_finished_after_each_whole_step_and_in_progress_while_a_step_is_written(tmp_path):
    """A training killed between steps (as most end) leaves a finished run, every step counted (``report`` writes its
    triage, as before the manifest); while a step's records are written the run is in progress, so one killed or
    refused half-way leaves that step unfinished; a resumed run whose step was cut is never marked finished."""
    from rewardpipe.integrations.trl import RewardPipeMonitor
    from rewardpipe.store import LocalStore, manifest_key

    seen: list = []

    class Watching(LocalStore):
        def put_record(self, record):  # what the manifest says while each record is written
            seen.append(self.get_json(manifest_key("whole"), default={}).get("finished_at"))
            return super().put_record(record)

    store = Watching(tmp_path)
    callback = RewardPipeMonitor("gsm8k", store=store, run_id="whole")
    callback.group_size = 2
    for _ in range(2):
        _batch(callback, ["#### 2", "#### 3"] * 4)
        manifest = store.get_json(manifest_key("whole"))
        assert manifest["finished_at"] and manifest["command"] == "trl"
    assert seen == [None] * 16  # in progress while every record was written, the second step's too
    assert manifest["components"]["answer_correct"]["weight"] == 1.0
    assert callback.failures == []

    resumed = RewardPipeMonitor("gsm8k", store=_refusing_store(tmp_path, {3}), run_id="whole")
    resumed.group_size = 2
    _batch(resumed, ["#### 2", "#### 3"] * 4)  # step 2, cut
    code, data = _monitor_json(tmp_path)
    assert code == 0 and [s["step"] for s in data["steps"]] == [0, 1] and data["unfinished_steps"] == [2]
    _batch(resumed, ["#### 2", "#### 3"] * 4)  # step 3, whole: the run still holds a cut step
    resumed.on_train_end(None, _trainer_state(), None)
    assert store.get_json(manifest_key("whole"))["finished_at"] is None
    again = RewardPipeMonitor("gsm8k", store=store, run_id="whole")  # resumed again: the cut step is read back
    again.group_size = 2
    _batch(again, ["#### 2", "#### 3"] * 4)
    assert store.get_json(manifest_key("whole"))["finished_at"] is None
    assert _monitor_json(tmp_path)[1]["unfinished_steps"] == [2]


def test_a_run_stored_before_without_a_manifest_keeps_every_step_counted(tmp_path):
    """A run an earlier release stored (no manifest: every step counted) and resumed now is left as it was: a
    manifest now would make every earlier step unfinished."""
    from rewardpipe.integrations.trl import RewardPipeMonitor
    from rewardpipe.store import LocalStore, manifest_key

    store = LocalStore(tmp_path)
    first = RewardPipeMonitor("gsm8k", store=store, run_id="old")
    first.group_size = 2
    _batch(first, ["#### 2", "#### 3"] * 4)
    Path(store.path_of(manifest_key("old"))).unlink()  # as an earlier release stored it
    again = RewardPipeMonitor("gsm8k", store=store, run_id="old")
    again.group_size = 2
    _batch(again, ["#### 2", "#### 3"] * 4)
    code, data = _monitor_json(tmp_path)
    assert code == 0 and [s["step"] for s in data["steps"]] == [0, 1] and data["in_progress"] is False


def test_a_verifiers_step_the_store_stopped_taking_half_way_is_named_unfinished(tmp_path):
    from rewardpipe.integrations.verifiers_watch import GroupWatch

    watch = GroupWatch(groups_per_step=2, run_id="vf", store=_refusing_store(tmp_path, {3}))
    for _ in range(4):
        watch.add_group(_vf_group([1.0, 0.0]), VF_WEIGHTS)
    assert any("read-only file system" in failure for failure in watch.failures)
    code, data = _monitor_json(tmp_path)
    assert code == 0 and [s["step"] for s in data["steps"]] == [1] and data["unfinished_steps"] == [0]
    watch.flush()
    assert _monitor_json(tmp_path)[1]["unfinished_steps"] == [0]

    whole = GroupWatch(groups_per_step=2, run_id="vf-whole", store=str(tmp_path / "b"))
    for _ in range(2):
        whole.add_group(_vf_group([1.0, 0.0]), VF_WEIGHTS)
    progress = open_store(str(tmp_path / "b")).run_progress("vf-whole")
    assert progress.in_progress is False and progress.finished == [0]  # a run killed here is every step counted
    assert whole.failures == []


def test_a_watch_going_on_in_a_stored_run_says_so(tmp_path, caplog):
    """Every GroupWatch's run id is "verifiers" unless given: a second training on the same store went on in the
    first one's run (its steps, its hysteresis) without a word. It still goes on (a restart resumes), and says so."""
    import logging

    from rewardpipe.integrations.verifiers_watch import GroupWatch

    first = GroupWatch(groups_per_step=1, store=str(tmp_path))
    first.add_group(_vf_group([1.0, 0.0]), VF_WEIGHTS)
    with caplog.at_level(logging.WARNING, logger="rewardpipe.verifiers"):
        second = GroupWatch(groups_per_step=1, store=str(tmp_path))
    assert second.step == 1
    assert "run verifiers already holds steps up to 0" in caplog.text and "run_id=" in caplog.text


def test_a_trainer_resumed_from_a_checkpoint_before_the_stored_batches_is_said_to_have_rolled_back(tmp_path, caplog):
    """Resumed from checkpoint-1 after the run had stored the batches of global steps 1 and 2: the trainer's global
    step went back in the records (the callback's steps go on) and nothing said that the stored batches after the
    checkpoint were trained by a run since rolled back. Now a warning says it, once, on every process."""
    import logging
    from types import SimpleNamespace

    from rewardpipe.integrations.trl import RewardPipeMonitor

    def batch(callback, global_step):
        for fn in callback.reward_funcs:
            fn(
                prompts=PROMPTS,
                completions=["#### 2", "#### 3"] * 4,
                answer=ANSWERS,
                trainer_state=SimpleNamespace(global_step=global_step),
            )

    first = RewardPipeMonitor("gsm8k", store=str(tmp_path), run_id="rb")
    first.group_size = 2
    for global_step in (0, 1, 2):
        batch(first, global_step)
    assert [w["kind"] for w in first.warnings if w["kind"] == "resumed_before_stored_steps"] == []

    resumed = RewardPipeMonitor("gsm8k", store=str(tmp_path), run_id="rb")
    resumed.group_size = 2
    with caplog.at_level(logging.WARNING, logger="rewardpipe.trl"):
        batch(resumed, 1)
        batch(resumed, 2)
    (said,) = [w for w in resumed.warnings if w["kind"] == "resumed_before_stored_steps"]
    assert said["batch"] == 3 and "global step 1" in said["message"] and "step 2, global step 2" in said["message"]
    assert caplog.text.count("rolled back") == 1

    later = RewardPipeMonitor("gsm8k", store=str(tmp_path), run_id="rb")  # resumed from its last checkpoint
    later.group_size = 2
    batch(later, 3)
    assert not [w for w in later.warnings if w["kind"] == "resumed_before_stored_steps"]


def test_an_episodes_metric_that_is_no_number_never_costs_the_batchs_episode_figures(caplog):
    """An environment's metric NaN in one episode made its batch mean NaN (TRL's curve of it NaN); a text where the
    other episodes report a number raised, and every episode figure of the batch was logged as 0. Such a value now
    counts as not reported, and a warning names the metric."""
    import logging
    import math

    from rewardpipe.integrations.trl_episodes import episode_metrics

    def row(turns, **extra):
        base = {"assistant_turns": turns, "simulator_replies": 1, "committed": True}
        return {**base, "completion_tokens": 10, "simulator_tokens": 2, **extra}

    with caplog.at_level(logging.WARNING, logger="rewardpipe.trl"):
        figures = episode_metrics([row(1, spec=math.nan), row(3, spec=1.0), row(2, spec="n/a"), row(2, spec=math.inf)])
    assert "spec of some episodes is no finite number (NaN or an infinity, str)" in caplog.text
    assert figures["rewardpipe/episode/assistant_turns"] == 2.0
    assert figures["rewardpipe/episode/spec"] == 0.25  # only the finite 1.0 reported, over the 4 episodes
    assert figures["rewardpipe/episode/committed"] == 1.0
    assert all(math.isfinite(value) for value in figures.values())
