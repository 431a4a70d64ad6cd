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
