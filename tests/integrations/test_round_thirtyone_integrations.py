"""Round thirty-one: the trainer adapters.

Each test failed before its fix (see docs/changelog.md, round thirty-one)."""

from __future__ import annotations

from types import SimpleNamespace

from rewardpipe.store import LocalStore


def _train(callback, batches: int, completions: list[str]) -> None:
    """``batches`` training batches of one group of four through the callback's reward functions, as TRL calls
    them (the trainer is ``log_metric``'s owner): small batches, each short of ``min_groups`` (4)."""

    class Trainer:
        reward_funcs, reward_weights, num_generations = callback.reward_funcs, [0.5, 1.0], 4
        model = SimpleNamespace(training=True)

        def log(self, name, value):
            pass

    trainer = Trainer()
    for _ in range(batches):
        for fn in callback.reward_funcs:
            fn(prompts=["q"] * 4, completions=completions, answer=["1"] * 4, log_metric=trainer.log, trainer_state=None)


class TestResumedCallbackKeepsItsPool:
    """A TRL callback resumed from a checkpoint under its ``run_id`` carried on the saved monitor state (its open
    pools of small batches included) but held none of the batches of that pool: the pool started over at the
    first resumed batch, so a component constant in every group since before the checkpoint waited another
    ``min_groups`` batches for its verdict (and never got one with checkpoints that often). The pool's earlier
    batches are read back from the store now, as ``monitor_step`` reads them."""

    def test_the_pool_goes_on_over_the_stored_batches(self, tmp_path):
        from rewardpipe.integrations.trl import RewardPipeMonitor

        store = LocalStore(tmp_path)
        dead = ["#### 1", "#### 2", "#### 3", "#### 4"]  # format always 1.0, correctness varies
        first = RewardPipeMonitor(reward="gsm8k", run_id="run", store=store)
        _train(first, 2, dead)
        assert [r.components["format"].verdict for r in first.reports] == ["insufficient_data"] * 2

        resumed = RewardPipeMonitor(reward="gsm8k", run_id="run", store=store)
        _train(resumed, 2, dead)
        assert [r.step for r in resumed.reports] == [2, 3] and not resumed.failures
        last = resumed.reports[-1].components["format"]
        assert last.verdict == "dead" and last.pooled_steps == [0, 1, 2, 3]
        assert [(a.component, a.step) for a in resumed.alarms] == [("format", 3)]
        # the same four batches in one process: the same verdict at the same step
        whole = RewardPipeMonitor(reward="gsm8k", run_id="whole", store=LocalStore(tmp_path / "w"))
        _train(whole, 4, dead)
        assert whole.reports[-1].components["format"].pooled_steps == [0, 1, 2, 3]


def _call(callback, prompts: list[str], **columns) -> None:
    """One batch of groups of four (one prompt each) through every reward function of the callback."""

    class Trainer:
        reward_funcs, reward_weights, num_generations = callback.reward_funcs, [0.5, 1.0], 4
        model = SimpleNamespace(training=True)

        def log(self, name, value):
            pass

    batch = [p for p in prompts for _ in range(4)]
    completions = [f"#### {i % 3}" for i in range(len(batch))]
    for fn in callback.reward_funcs:
        fn(prompts=batch, completions=completions, answer=["1"] * len(batch), log_metric=Trainer().log, **columns)


class TestStoredTrlRecordsNameTheirPrompt:
    """The TRL callback stored a single-turn batch's records under the task id of the group's position in the
    batch (``p0``, ``p1``...): group 0 of every batch was "task p0", whatever its prompt, so ``report``'s task
    triage and task counts mixed unrelated prompts (and split one prompt seen at two positions). A record's
    task is now the dataset's ``task_id`` column when it holds a valid id, else the prompt's id as `score` gives it."""

    def test_task_ids_follow_the_prompt_not_its_position(self, tmp_path):
        from rewardpipe.integrations.trl import RewardPipeMonitor

        store = LocalStore(tmp_path)
        callback = RewardPipeMonitor(reward="gsm8k", run_id="run", store=store)
        _call(callback, ["what is 1?", "what is 2?"])
        _call(callback, ["what is 3?", "what is 1?"])
        assert not callback.failures
        tasks = {(r.step, r.group_id): r.task_id for r in store.iter_records("run")}
        assert tasks[(0, "g0")] == tasks[(1, "g1")]  # one prompt, one task, at any position
        assert tasks[(0, "g0")] != tasks[(1, "g0")] and tasks[(0, "g0")] != tasks[(0, "g1")]
        assert all(task.startswith("p-") for task in tasks.values())
        # the id `rewardpipe score` gives a sample of the same prompt without a task_id
        from rewardpipe.models import Message
        from rewardpipe.single_turn import _prompt_group

        asked = [Message(role="user", content="what is 1?"), Message(role="assistant", content="#### 1")]
        assert tasks[(0, "g0")] == _prompt_group(asked)

    def test_a_task_id_column_names_the_task_when_it_is_a_valid_id(self, tmp_path):
        from rewardpipe.integrations.trl import RewardPipeMonitor

        store = LocalStore(tmp_path)
        callback = RewardPipeMonitor(reward="gsm8k", run_id="run", store=store)
        _call(callback, ["what is 1?", "what is 2?"], task_id=["t-one"] * 4 + ["bad\x1b[2J"] * 4)
        assert not callback.failures
        tasks = {r.group_id: r.task_id for r in store.iter_records("run")}
        assert tasks["g0"] == "t-one" and tasks["g1"].startswith("p-")  # a hostile id is not stored
        assert len(list(store.iter_records("run"))) == 8

    def test_a_prompt_no_message_holds_still_gets_an_id(self):
        from rewardpipe.integrations.trl import prompt_task_id

        looped: list = []
        looped.append(looped)  # neither a message list nor JSON
        assert prompt_task_id(looped, {}, 0).startswith("p-")
        assert prompt_task_id(b"\xff", {}, 0) == prompt_task_id(b"\xff", {}, 3)  # bytes: its text, at any position
