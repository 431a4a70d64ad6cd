"""Round thirty-four, part 6: the trainer integrations against the real libraries, followed as their guides say.

Each test is marked with the library it needs (``make test-trl``, ``make test-verifiers``, ``make test-verl`` run
them in their own venvs) and skips where that library is absent. Each failed before its fix (docs/changelog.md,
round thirty-four, the trainer integrations)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------------------------------
# verl


def _verl_overrides() -> list[str]:
    """The guide's config (examples/verl_reward.yaml) as the command-line overrides ``python -m
    verl.trainer.main_ppo`` takes, ``<site-packages>`` read as where rewardpipe is installed (this tree)."""
    import yaml

    import rewardpipe

    site_packages = str(Path(rewardpipe.__file__).parents[1])

    def flat(prefix: str, value: object) -> list[str]:
        if isinstance(value, dict):
            return [item for key, inner in value.items() for item in flat(f"{prefix}.{key}" if prefix else key, inner)]
        return [f"{prefix}={str(value).replace('<site-packages>', site_packages)}"]

    return flat("", yaml.safe_load((ROOT / "examples" / "verl_reward.yaml").read_text()))


@pytest.mark.verl
class TestVerlLoadsTheGuidesConfig:
    """The guide's config put ``custom_reward_function`` at the top level, where verl 0.9.1's trainer never reads it
    (``main_ppo`` reads ``reward.custom_reward_function``; only its fully-async entry point migrates the old key): a
    run configured as the guide says trained on verl's own ``default_compute_score``, rewardpipe never called."""

    @pytest.fixture(autouse=True)
    def _needs_verl(self):  # type: ignore[no-untyped-def]
        pytest.importorskip("verl")

    def _config(self, *more: str):  # type: ignore[no-untyped-def]
        from hydra import compose, initialize_config_module

        with initialize_config_module("verl.trainer.config", version_base=None):
            return compose("ppo_trainer", overrides=[*_verl_overrides(), *more])

    def test_the_guides_command_line_setting_reaches_every_call(self):
        from verl.trainer.ppo.reward import get_custom_reward_fn

        from rewardpipe.single_turn import BatchFailed

        config = self._config("+reward.custom_reward_function.reward_kwargs.error_reward=fail_batch")
        with pytest.raises(BatchFailed):  # an unreadable reference, with the guide's error_reward setting
            get_custom_reward_fn(config)(data_source="gsm8k", solution_str="#### 7", ground_truth="seven")

    def test_verls_trainer_loads_rewardpipes_compute_score_from_it(self):
        from verl.trainer.ppo.reward import get_custom_reward_fn

        import rewardpipe.integrations.verl as adapter

        config = self._config()
        loaded = get_custom_reward_fn(config)  # what verl 0.9.1's reward loop workers call
        assert loaded is not None, "verl found no custom reward function in the guide's config"
        function = loaded.args[0]  # verl's partial around the function it loaded from the file (its own module)
        assert function.__code__.co_filename == adapter.__file__ and function.__name__ == "compute_score"

    def test_verls_reward_loop_scores_a_sample_with_it(self):
        import numpy as np
        import torch
        from verl import DataProto
        from verl.trainer.ppo.reward import load_reward_manager

        class Bytes:
            def decode(self, ids, skip_special_tokens=True):
                return bytes(int(i) for i in ids if int(i)).decode()

        config = self._config()
        manager = load_reward_manager(config, Bytes())  # the reward manager verl's trainer builds from it
        prompt, response = list(b"6 * 7?"), list(b"6 * 7 = 42\n#### 42")
        data = DataProto.from_dict(
            tensors={
                "prompts": torch.tensor([prompt]),
                "responses": torch.tensor([response]),
                "attention_mask": torch.ones(1, len(prompt) + len(response), dtype=torch.long),
            },
            non_tensors={
                "data_source": np.array(["openai/gsm8k"], dtype=object),
                "reward_model": np.array([{"ground_truth": "42"}], dtype=object),
                "extra_info": np.array([{"index": 0, "question": "6 * 7?"}], dtype=object),
            },
        )
        out = manager.loop.run_until_complete(manager.run_single(data))  # on the loop it was built with
        # rewardpipe's dict (its components and reward_error), not verl's own gsm8k score (1.0, no components)
        assert out["reward_score"] == pytest.approx(1.5)
        assert out["reward_extra_info"]["reward_error"] == 0.0 and out["reward_extra_info"]["format"] == 1.0
        assert not math.isnan(out["reward_extra_info"]["answer_correct"])


# --------------------------------------------------------------------------------------------------
# TRL: the callback on several processes (the trainer faked: the callback reads it through log_metric's owner)


class _Trainer:
    """What RewardPipeCallback reads of a GRPOTrainer (through ``log_metric.__self__``): its reward functions and
    weights, the group size, the model's mode and whether this is the main process; ``_log_metric`` keeps what
    the callback logged, as TRL's ``_pending_metrics`` does."""

    def __init__(self, callback, main: bool) -> None:  # type: ignore[no-untyped-def]
        from types import SimpleNamespace

        self.reward_funcs, self.reward_weights = callback.reward_funcs, callback.reward_weights
        self.num_generations = 2
        self.model = SimpleNamespace(training=True)
        self.accelerator = SimpleNamespace(is_main_process=main)
        self.logged: dict[str, list[float]] = {}

    def _log_metric(self, name: str, value: float) -> None:
        self.logged.setdefault(name, []).append(value)


def _two_ranks(callbacks, batches):  # type: ignore[no-untyped-def]
    """Each batch (one ``(prompts, completions, answers)`` a process) through the callbacks as that many processes
    run it (threads here): every reward function called on each, the gather and the main process's broadcast as
    accelerate's collectives (rank 0 is the main one)."""
    import threading

    barrier = threading.Barrier(len(callbacks))
    slots: list = [None] * len(callbacks)

    def collective(rank: int, value, combine):  # type: ignore[no-untyped-def]
        slots[rank] = value
        barrier.wait()
        out = combine(list(slots))
        barrier.wait()
        return out

    for rank, callback in enumerate(callbacks):
        callback.gather = lambda rows, rank=rank: collective(rank, rows, lambda all_: [r for rs in all_ for r in rs])
        callback.broadcast = lambda value, rank=rank: collective(rank, value, lambda all_: all_[0])
    trainers = [_Trainer(callback, main=rank == 0) for rank, callback in enumerate(callbacks)]
    failures: list[BaseException] = []

    def run(rank: int) -> None:
        try:
            for batch in batches:
                prompts, completions, answers = batch[rank]
                for fn in callbacks[rank].reward_funcs:
                    fn(prompts=prompts, completions=completions, answer=answers, log_metric=trainers[rank]._log_metric)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            failures.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(rank,)) for rank in range(len(callbacks))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    if failures:
        raise failures[0]
    return trainers


class TestEveryProcessLogsTheSameFiguresAfterAResume:
    """A run resumed from a checkpoint under its run_id: only the main process read the store back (its steps and
    its monitor state, with a pool of small batches still open), so the other processes judged the next batch from
    nothing. They logged other metrics than the main process (the main one a pooled ``.../dead`` the others did not):
    TRL averages each logged metric over the processes with one collective per name, in name order, so processes
    holding different names mismatch their collectives (values filed under the wrong name, or a wait for ever). The
    main process's figures are every process's now."""

    def test_the_main_and_the_other_process_log_the_same_names_and_values(self, tmp_path):
        from rewardpipe.integrations.trl import RewardPipeMonitor

        # 2 groups of 2 a batch, one on each process: short of min_groups (4), a pool opens
        halves = [
            (["1+1?", "1+1?"], ["#### 2", "#### 3"], ["2", "2"]),
            (["2+2?", "2+2?"], ["#### 4", "#### 4"], ["4", "4"]),
        ]
        whole = tuple(a + b for a, b in zip(*halves, strict=True))
        first = RewardPipeMonitor("gsm8k", store=str(tmp_path), run_id="resumed")
        before = _two_ranks([first], [[whole]])  # the run before its checkpoint: one batch stored, its pool open
        assert not any(name.endswith("/dead") for name in before[0].logged)

        ranks = [RewardPipeMonitor("gsm8k", store=str(tmp_path), run_id="resumed") for _ in range(2)]
        trainers = _two_ranks(ranks, [halves])  # resumed on two processes
        assert trainers[0].logged == trainers[1].logged
        assert "rewardpipe/answer_correct/dead" in trainers[0].logged  # the pool closed with the stored batch
        assert ranks[0].failures == ranks[1].failures == []


# --------------------------------------------------------------------------------------------------
# verifiers


@pytest.mark.verifiers
class TestAnUnscorableRolloutOfAGroupIsAnErroredRollout:
    """``rubric(reward).score_group`` (verifiers' group scoring, what ``vf-eval -r K`` and the trainers use) settled an
    unscorable rollout at its group's mean with nothing but a ``reward_error`` metric: verifiers took it for a scored
    rollout (vf-eval counted no error, and its average reward held the made-up value as a score), where the same
    rollout scored alone carried verifiers' failure mark. It carries ``state["error"]`` (a ``vf.Error``) in a group
    too; its reward stays the settled mean (advantage 0) and the scored rollouts are not marked."""

    def test_the_settled_rollout_carries_verifiers_failure_mark(self):
        vf = pytest.importorskip("verifiers")
        import asyncio

        from rewardpipe.integrations.verifiers import REWARD_ERROR, rubric
        from tests.integrations.test_round_thirtythree_verifiers import _state as state  # a vf.State for "5 + 7?"

        states = [state("#### 12", "12"), state("#### 11", "12"), state("#### 12", "twelve")]  # the last: unreadable
        asyncio.run(rubric("gsm8k").score_group(states))
        assert [s["metrics"][REWARD_ERROR] for s in states] == [1.0 * (i == 2) for i in range(3)]
        assert states[0].get("error") is None and states[1].get("error") is None
        assert isinstance(states[2].get("error"), vf.Error) and "gsm8k" in str(states[2]["error"])
        assert states[2]["reward"] == pytest.approx((states[0]["reward"] + states[1]["reward"]) / 2)
        assert states[2]["advantage"] == pytest.approx(0.0)

    def test_a_rollout_cut_by_an_infrastructure_error_is_settled_never_scored_as_its_partial_answer(self):
        """verifiers scores every rollout of a group, one whose model call failed (``vf.ModelError``: the server
        unreachable) or whose sandbox failed (``vf.InfraError``) too: rewardpipe scored the cut conversation (no
        answer: 0.0 in every component), a 0 in the group's baseline for an infrastructure failure. Such a rollout is
        unscorable now (settled: advantage 0, ``reward_error`` 1, its own error kept); a tool call the model wrote
        badly (``vf.ToolParseError``) is the model's own, and scored."""
        vf = pytest.importorskip("verifiers")
        import asyncio

        from rewardpipe.integrations.verifiers import REWARD_ERROR, rubric
        from tests.integrations.test_round_thirtythree_verifiers import _state as state

        states = [state("#### 12", "12"), state("#### 11", "12"), state("", "12"), state("", "12"), state("", "12")]
        cut, sandbox, badly = vf.ModelError("connection reset"), vf.InfraError("sandbox gone"), vf.ToolParseError("x")
        states[2]["error"], states[3]["error"], states[4]["error"] = cut, sandbox, badly
        asyncio.run(rubric("gsm8k").score_group(states))
        assert [s["metrics"][REWARD_ERROR] for s in states] == [0.0, 0.0, 1.0, 1.0, 0.0]
        assert states[2]["error"] is cut and states[3]["error"] is sandbox  # verifiers' own error, kept
        scored = [states[0]["reward"], states[1]["reward"], states[4]["reward"]]
        assert states[4]["reward"] == 0.0  # the model's malformed tool call: its empty answer scores 0
        assert states[2]["reward"] == pytest.approx(sum(scored) / 3) and states[2]["advantage"] == pytest.approx(0.0)
        alone = state("", "12")
        alone["error"] = cut
        asyncio.run(rubric("gsm8k").score_rollout(alone))  # no group to settle from: NaN, never its 0
        assert math.isnan(alone["reward"]) and alone["metrics"][REWARD_ERROR] == 1.0 and alone["error"] is cut


class TestAnotherRewardFunctionBesideRewardpipesSilencesTheAggregatesAlarm:
    """A trainer given rewardpipe's functions and one of the user's own (a length penalty) trains on their sum, which
    the monitor cannot see: its aggregate (rewardpipe's components only) was alarmed dead while the reward trained on
    varied inside every group. With such a function beside ours the aggregate keeps its figures but raises no alarm
    (said once in a warning); each component is still judged."""

    def test_no_aggregate_alarm_and_the_components_still_judged(self, caplog):
        from rewardpipe.integrations.trl import RewardPipeMonitor

        callback = RewardPipeMonitor("gsm8k")
        trainer = _Trainer(callback, main=True)

        def length_penalty(completions, **_):  # type: ignore[no-untyped-def]
            return [-len(c) / 100 for c in completions]

        trainer.reward_funcs = [*callback.reward_funcs, length_penalty]
        trainer.reward_weights = [*callback.reward_weights, 1.0]
        prompts = [p for p in ("1+1?", "2+2?", "3+3?", "4+4?") for _ in range(2)]
        completions = ["#### 2", "#### 2", "#### 5", "#### 5", "#### 6", "#### 6", "#### 1", "#### 1"]
        for fn in callback.reward_funcs:  # every group answers alike: rewardpipe's sum is constant in each
            fn(prompts=prompts, completions=completions, answer=["2"] * 8, log_metric=trainer._log_metric)
        kinds = {alarm.component for alarm in callback.alarms}
        assert "aggregate" not in kinds and "answer_correct" in kinds  # the component's own verdict stays
        assert "rewardpipe/aggregate/within_group_std" in trainer.logged
        assert "length_penalty" in caplog.text

    def test_with_normalize_then_sum_the_aggregate_raises_no_alarm(self, caplog):
        """``multi_objective_aggregation="normalize_then_sum"``: each component is normalized inside its group
        before the weighted sum, so a weighted sum of the raw values that is constant in every group (here 1.0:
        ``a + 0.5 * b`` with ``b = 2 - 2a``) is no dead reward: the trainer's is ``z(a) - 0.5 z(a)``, which varies.
        The aggregate was alarmed dead all the same."""
        from rewardpipe import Reward, component
        from rewardpipe.integrations.trl import RewardPipeMonitor

        @component(range=(0, 1), role="outcome")
        def said_yes(completion):  # type: ignore[no-untyped-def]
            return 1.0 if "yes" in completion else 0.0

        @component(range=(0, 2), role="shaping", weight=0.5)
        def said_no(completion):  # type: ignore[no-untyped-def]
            return 0.0 if "yes" in completion else 2.0

        callback = RewardPipeMonitor(Reward("yes_no", [said_yes, said_no]))
        trainer = _Trainer(callback, main=True)
        trainer.multi_objective_aggregation = "normalize_then_sum"
        prompts = [p for p in ("a", "b", "c", "d") for _ in range(2)]
        for fn in callback.reward_funcs:  # each group: one yes, one no
            fn(prompts=prompts, completions=["yes", "no"] * 4, log_metric=trainer._log_metric)
        assert callback.reports[0].aggregate.verdict == "dead"  # the raw weighted sum is constant in every group
        assert callback.alarms == []
        assert "normalize_then_sum" in caplog.text


class TestTheCallbackSaysTheRunsWarnings:
    """`rewardpipe monitor` and `report` warn about the run as a whole (``llm_user_replaced``: the LLM-played user
    replaced by the rule-based one in many rollouts; values out of their declared range...); the TRL callback judged
    the same batches and never said them."""

    def test_each_kind_is_logged_once_and_every_batchs_kept(self, caplog, monkeypatch):
        from rewardpipe.integrations.trl import RewardPipeMonitor
        from rewardpipe.monitoring import monitor

        said = {"kind": "llm_user_replaced", "message": "the rule-based user replaced the LLM user in 40% of step 0"}
        monkeypatch.setattr(monitor, "run_warnings", lambda steps: [dict(said)])
        callback = RewardPipeMonitor("gsm8k")
        trainer = _Trainer(callback, main=True)
        prompts = [p for p in ("1+1?", "2+2?", "3+3?", "4+4?") for _ in range(2)]
        for _ in range(2):  # two batches
            for fn in callback.reward_funcs:
                fn(
                    prompts=prompts,
                    completions=["#### 2", "#### 3"] * 4,
                    answer=["2"] * 8,
                    log_metric=trainer._log_metric,
                )
        assert [w["kind"] for w in callback.warnings] == ["llm_user_replaced"] * 2
        assert caplog.text.count("rule-based user replaced the LLM user") == 1
