"""A real ``trl.GRPOTrainer`` trains a few steps on CPU with rewardpipe's reward functions and callback.

Needs the ``[trl]`` extra (``make test-trl`` installs it); skipped in the default run when it is absent.
Nothing is downloaded: the model is a tiny random-weight Llama and the tokenizer a character vocabulary
built here.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")
pytestmark = pytest.mark.trl

from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from rewardpipe.integrations.trl import RewardPipeCallback  # noqa: E402
from tests.integrations.trl_toys import GROUP, PROMPTS, REWARD, char_tokenizer, tiny_model  # noqa: E402


def train(tmp_path, **callback_kwargs):
    tokenizer = char_tokenizer()
    callback = RewardPipeCallback(reward=REWARD, run_id="trl-test", **callback_kwargs)
    weights = list(callback.reward_weights)
    weights[1] = 2.0  # the trainer's weights differ from the reward's defaults: the monitor must use these
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=len(PROMPTS) * GROUP,
        num_generations=GROUP,
        max_completion_length=8,
        max_steps=2,
        logging_steps=1,
        learning_rate=1e-3,
        beta=0.0,
        seed=0,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        reward_weights=weights,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    dataset = Dataset.from_dict({"prompt": PROMPTS * 4, "answer": ["2", "12", "12", "100"] * 4})
    trainer = GRPOTrainer(
        model=tiny_model(tokenizer),
        reward_funcs=callback.reward_funcs,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[callback],
    )
    trainer.train()
    return trainer, callback


def test_grpo_trainer_logs_within_group_figures_and_alarms_on_a_component_constant_in_every_group(tmp_path):
    store_dir = tmp_path / "store"
    trainer, callback = train(tmp_path, store=str(store_dir))

    steps = [
        entry for entry in trainer.state.log_history if "rewardpipe/prompt_parity/zero_variance_group_fraction" in entry
    ]
    assert len(steps) == 2, trainer.state.log_history
    for entry in steps:
        # TRL's own per-function std is batch-wide and shows the parity component alive...
        assert entry["rewards/toy_prompt_parity/std"] > 0.4
        # ...the within-group view shows it is constant in every group, and the varying one is not.
        assert entry["rewardpipe/prompt_parity/zero_variance_group_fraction"] == 1.0
        assert entry["rewardpipe/prompt_parity/within_group_std"] == 0.0
        assert entry["rewardpipe/char_mean/zero_variance_group_fraction"] == 0.0
        assert entry["rewardpipe/char_mean/within_group_std"] > 0.0
        assert entry["rewardpipe/format/dead"] == 1.0

    kinds = {(alarm.component, alarm.kind, alarm.cause) for alarm in callback.alarms}
    assert ("prompt_parity", "dead_component", "constant_within_groups") in kinds
    assert ("format", "dead_component", "constant_at_minimum") in kinds
    assert not any(alarm.component in ("char_mean", "aggregate") for alarm in callback.alarms)
    assert len([a for a in callback.alarms if a.component == "prompt_parity"]) == 1  # once per onset

    # The store holds the records with the weights the trainer used, and `rewardpipe monitor` reads it.
    record = json.loads(next((store_dir / "runs" / "trl-test").rglob("c0.json")).read_text())
    assert record["weights"] == {"format": 0.5, "char_mean": 2.0, "prompt_parity": 1.0}
    assert record["aggregate"] == pytest.approx(sum(record["weights"][k] * v for k, v in record["components"].items()))
    from typer.testing import CliRunner

    from rewardpipe.cli import app

    out = CliRunner().invoke(app, ["monitor", str(store_dir), "--run-id", "trl-test", "--json", "--no-write-alarms"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert [s["step"] for s in report["steps"]] == [0, 1]
    assert report["steps"][0]["components"]["prompt_parity"]["verdict"] == "dead"


def test_ignored_component_gets_figures_but_no_alarm(tmp_path):
    trainer, callback = train(tmp_path, ignore=["prompt_parity", "format"])
    assert not any(alarm.component in ("prompt_parity", "format") for alarm in callback.alarms)
    assert any("rewardpipe/prompt_parity/zero_variance_group_fraction" in e for e in trainer.state.log_history)


# --------------------------------------------------------------------------------------------------
# Multi-turn: the ask-before-coding episode as GRPOTrainer's rollout_func


def _tasks():
    from rewardpipe.models import Task

    tests = (
        "import unittest\n\nclass T(unittest.TestCase):\n    def test_sum(self):\n"
        "        self.assertEqual(add(2, 3), 5)\n"
    )
    common = {"entry_point": "add", "tests": tests, "reference_solution": "def add(a, b):\n    return a + b\n"}
    return [
        Task(task_id="add-ints", prompt="write add(a, b)", spec=["a and b are ints."], **common),
        Task(task_id="add-floats", prompt="write add(x, y)", spec=["x and y are floats."], **common),
    ]


def test_multi_turn_episodes_train_with_the_simulator_answering_and_components_logged(tmp_path):
    import string

    from rewardpipe.integrations.trl import EpisodeRollout
    from rewardpipe.integrations.trl_episodes import PLAIN_FEEDBACK

    tokenizer = char_tokenizer(string.printable)
    rollout = EpisodeRollout(_tasks(), max_turns=3, max_turn_tokens=6)
    callback = RewardPipeCallback(episodes=rollout, run_id="trl-multiturn")
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=2 * GROUP,
        num_generations=GROUP,
        max_completion_length=96,
        max_steps=2,
        logging_steps=1,
        learning_rate=1e-3,
        beta=0.0,
        seed=0,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        reward_weights=callback.reward_weights,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(
        model=tiny_model(tokenizer, positions=256),
        reward_funcs=callback.reward_funcs,
        args=args,
        train_dataset=rollout.dataset(),
        processing_class=tokenizer,
        callbacks=[callback],
        rollout_func=rollout,
    )
    trainer.train()

    assert rollout.batches == 2 and len(callback.reports) == 2
    steps = [e for e in trainer.state.log_history if "rewardpipe/episode/simulator_replies" in e]
    assert len(steps) == 2, trainer.state.log_history
    for entry in steps:
        assert entry["rewardpipe/episode/simulator_replies"] > 0  # multi-turn: the simulator answered
        assert entry["rewardpipe/episode/assistant_turns"] > 1
        assert 0 < entry["rewardpipe/episode/simulator_token_fraction"] < 1
        for name in rollout.reward.component_names:  # every component reached TRL and the within-group monitor
            assert f"rewards/ask_before_coding_{name}/mean" in entry
            assert f"rewardpipe/{name}/zero_variance_group_fraction" in entry

    episodes = rollout.last_episodes
    assert len(episodes) == 2 * GROUP and all(e.record.status == "scored" for e in episodes)
    for episode in episodes:
        tokens = episode.tokens
        replies = [m.content for m in episode.state.messages[1:] if m.role == "user"]
        masked = [t for t, m in zip(tokens.completion_ids, tokens.env_mask, strict=True) if m == 0]
        assert tokenizer.decode(masked) == "".join(PLAIN_FEEDBACK.format(reply=r) for r in replies)
        assert len(tokens.completion_ids) <= 96
    # TRL took the simulator's tokens out of the loss: its completion length counts the model's tokens only.
    model_tokens = [sum(e.tokens.env_mask) for e in episodes]
    assert steps[-1]["completions/mean_length"] == pytest.approx(sum(model_tokens) / len(model_tokens))


# --------------------------------------------------------------------------------------------------
# Several processes: a group split across processes is judged whole


def test_two_real_processes_judge_a_group_split_between_them_whole(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).with_name("trl_two_processes.py")
    launched = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            str(script),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert launched.returncode == 0, launched.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for seen in ranks:
        assert seen["processes"] == 2 and seen["failures"] == []
        assert seen["local_rows"] == [10, 10]  # each process scored half a step: 2.5 groups
        assert [r["groups"] for r in seen["reports"]] == [5, 5]  # ...and the monitor judged 5 whole groups
        parity = seen["reports"][0]["components"]["prompt_parity"]
        # Constant inside every group only if the split group was put back together in the right order.
        assert parity["zero_variance_group_fraction"] == 1.0 and parity["verdict"] == "dead"
        assert seen["reports"][0]["components"]["char_mean"]["zero_variance_group_fraction"] == 0.0
        assert ["prompt_parity", "dead_component", "constant_within_groups"] in seen["alarms"]
    assert ranks[0]["reports"] == ranks[1]["reports"] and ranks[0]["alarms"] == ranks[1]["alarms"]
    logged = [e for e in ranks[0]["log_history"] if "rewardpipe/prompt_parity/zero_variance_group_fraction" in e]
    assert len(logged) == 2 and all(e["rewardpipe/prompt_parity/dead"] == 1.0 for e in logged)
