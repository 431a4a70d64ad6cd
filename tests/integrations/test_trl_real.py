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
from tests.integrations.trl_toys import (  # noqa: E402
    GROUP,
    PROMPTS,
    REWARD,
    char_tokenizer,
    launch_two_processes,
    tiny_model,
)


def config(tmp_path, *, batch: int, max_completion_length: int, reward_weights) -> GRPOConfig:
    """Two training steps on CPU, one batch of ``batch`` completions (groups of GROUP) per step."""
    return GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=batch,
        num_generations=GROUP,
        max_completion_length=max_completion_length,
        max_steps=2,
        logging_steps=1,
        learning_rate=1e-3,
        beta=0.0,
        seed=0,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        reward_weights=reward_weights,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )


def train(tmp_path, **callback_kwargs):
    tokenizer = char_tokenizer()
    callback = RewardPipeCallback(reward=REWARD, run_id="trl-test", **callback_kwargs)
    weights = list(callback.reward_weights)
    weights[1] = 2.0  # the trainer's weights differ from the reward's defaults: the monitor must use these
    args = config(tmp_path, batch=len(PROMPTS) * GROUP, max_completion_length=8, reward_weights=weights)
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
    record = json.loads(next((store_dir / "runs" / "trl-test").glob("step=*/group=*/c0.json")).read_text())
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
# A user's reward, by reference, with a component that raises on some rows

USER_REWARD = """
from acme_rl.json_answer import JSON_ANSWER
from rewardpipe import Reward, component


@component(range=(0.0, 1.0), role="shaping")
def length_share(completion):
    return min(1.0, len(completion) / 8)


@component(range=(0.0, 1.0), role="shaping", weight=0.5)
def refuses_boom(reference):
    if reference == "BOOM":
        raise ValueError("a reference this component cannot read: BOOM")
    return 1.0


REWARD = Reward("acme_flaky", [*JSON_ANSWER.components, length_share, refuses_boom])
"""


def test_a_user_reward_by_reference_trains_and_a_raising_component_leaves_its_rows_out(tmp_path, monkeypatch):
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "fixtures" / "user_pkg"))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "acme_flaky.py").write_text(USER_REWARD)
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))
    store_dir = tmp_path / "store"
    callback = RewardPipeCallback(reward="acme_flaky:REWARD", run_id="trl-user", store=str(store_dir))
    assert callback.reward.component_names == [
        "valid_json",
        "answer_matches",
        "too_long",
        "length_share",
        "refuses_boom",
    ]
    tokenizer = char_tokenizer()
    args = config(tmp_path, batch=len(PROMPTS) * GROUP, max_completion_length=8, reward_weights=callback.reward_weights)
    # The second prompt's reference makes a component raise: its group must be error records, never zeros.
    dataset = Dataset.from_dict({"prompt": PROMPTS * 4, "answer": ["2", "BOOM", "12", "100"] * 4})
    trainer = GRPOTrainer(
        model=tiny_model(tokenizer),
        reward_funcs=callback.reward_funcs,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[callback],
    )
    trainer.train()  # a raising component costs its rows, not the run

    records = [json.loads(p.read_text()) for p in (store_dir / "runs" / "trl-user").glob("step=*/group=*/c*.json")]
    assert len(records) == 2 * len(PROMPTS) * GROUP
    failed = [r for r in records if r["status"] == "error"]
    # The BOOM prompt's groups (TRL samples prompts at random: one or more per step), whole groups, nothing else.
    groups = {(r["step"], r["group_id"]) for r in failed}
    assert failed and len(failed) == GROUP * len(groups)
    assert [report.error_rate for report in callback.reports] == [
        sum(1 for r in failed if r["step"] == step) / (len(PROMPTS) * GROUP) for step in (0, 1)
    ]
    for record in failed:
        assert record["error"]["kind"] == "component_raised" and set(record["components"].values()) == {None}
    scored = [r for r in records if r["status"] == "scored"]
    assert all(r["components"]["refuses_boom"] == 1.0 for r in scored)
    # TRL got None from every function for those rows (NaN: left out of the group's baseline): the reward it
    # logged is the mean over the scored rows only, not one diluted by zeros.
    logged = [e for e in trainer.state.log_history if "reward" in e and "rewards/acme_flaky_length_share/mean" in e]
    assert len(logged) == 2
    for step, entry in enumerate(logged):
        step_scored = [r["aggregate"] for r in scored if r["step"] == step]
        with_zeros = sum(step_scored) / (len(PROMPTS) * GROUP)
        assert entry["reward"] == pytest.approx(sum(step_scored) / len(step_scored), rel=1e-4)
        assert entry["reward"] != pytest.approx(with_zeros, rel=1e-4)


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
    args = config(tmp_path, batch=2 * GROUP, max_completion_length=96, reward_weights=callback.reward_weights)
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


GUESS_REWARD = """
from acme_rl.guess import GUESS_REWARD
from rewardpipe import Reward, component


@component(range=(0.0, 1.0), role="shaping", weight=0.1)
def trips_on_42(task):
    if task.secret == 42:
        raise KeyError("no rule for 42")
    return 1.0


REWARD = Reward("guess_flaky", [*GUESS_REWARD.components, trips_on_42])
"""


def test_a_users_multi_turn_env_by_reference_with_groups_sharing_a_prompt(tmp_path, monkeypatch):
    import string
    from pathlib import Path

    from rewardpipe.integrations.trl import EpisodeRollout

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "user_pkg"
    monkeypatch.syspath_prepend(str(fixture))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "guess_flaky.py").write_text(GUESS_REWARD)
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))

    tokenizer = char_tokenizer(string.printable)
    # Every guess task opens with the same prompt: each group is one task, the groups take the tasks in turn.
    rollout = EpisodeRollout(
        fixture / "data" / "guess_tasks.jsonl",
        env="acme_rl.guess:ENVIRONMENT",
        reward="guess_flaky:REWARD",
        max_turns=3,
        max_turn_tokens=4,
    )
    assert len({json.dumps(row["prompt"]) for row in rollout.dataset_rows()}) == 1
    callback = RewardPipeCallback(episodes=rollout, run_id="trl-guess")
    args = config(tmp_path, batch=3 * GROUP, max_completion_length=64, reward_weights=callback.reward_weights)
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
    episodes = rollout.last_episodes
    groups = [episodes[i : i + GROUP] for i in range(0, len(episodes), GROUP)]
    assert all(len({e.task.task_id for e in group}) == 1 for group in groups)  # a group is one task
    assert sorted(group[0].task.task_id for group in groups) == ["g-07", "g-42", "g-93"]  # taken in turn
    for episode in episodes:
        assert episode.state.assistant_turns >= 1
        if episode.task.task_id == "g-42":  # the raising component: an error record, never a 0
            assert episode.record.status == "error" and episode.record.error.kind == "component_raised"
            assert "trips_on_42" in episode.record.error.message
        else:
            assert episode.record.status == "scored" and episode.record.components["trips_on_42"] == 1.0
    steps = [e for e in trainer.state.log_history if "rewardpipe/error_rate" in e]
    assert [e["rewardpipe/error_rate"] for e in steps] == [pytest.approx(1 / 3)] * 2
    assert all(e["rewardpipe/episode/simulator_replies"] > 0 for e in steps)


# --------------------------------------------------------------------------------------------------
# Several processes: a group split across processes is judged whole


def test_two_real_processes_judge_a_group_split_between_them_whole(tmp_path):
    ranks = launch_two_processes(tmp_path)
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
