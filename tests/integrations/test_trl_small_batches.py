"""Issue 19 item 10 on a real ``trl.GRPOTrainer``: two groups a step (``per_device_train_batch_size=8``,
``num_generations=4``) are fewer than the monitor's ``min_groups`` (4), so no step alone gets a verdict; the
callback pools consecutive batches and alarms on the component constant in every group.

Needs the ``[trl]`` extra (``make test-trl``); the model is a tiny random-weight Llama, nothing is downloaded.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")
pytestmark = pytest.mark.trl

from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from rewardpipe.integrations.trl import RewardPipeCallback  # noqa: E402
from rewardpipe.rewards import Reward, component  # noqa: E402
from rewardpipe.rewards.gsm8k import GSM8K  # noqa: E402

GROUP, GROUPS_PER_STEP = 4, 2
PROMPTS = ["what is 1+1?", "what is 10+2?", "what is 7+5?", "what is 99+1?"]  # lengths 12, 13, 12, 13


def _tokenizer_and_model():
    """A character tokenizer and a random-weight one-layer Llama: nothing downloaded, CPU only. (Built here,
    not taken from trl_toys, which the adapters' suite owns: this file must run whatever state that is in.)"""
    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = {"pad_token": "<pad>", "eos_token": "<eos>", "bos_token": "<bos>", "unk_token": "<unk>"}
    vocabulary = list(specials.values()) + sorted(set("abcdefghijklmnopqrstuvwxyz0123456789 +=?#.\n"))
    backend = Tokenizer(models.WordLevel({token: i for i, token in enumerate(vocabulary)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, padding_side="left", **specials)
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=64,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            bos_token_id=tokenizer.bos_token_id,
        )
    )
    return tokenizer, model


@component(range=(0.0, 1.0), role="shaping", name="char_mean", description="mean character code / 128")
def char_mean(completion: str) -> float:  # varies inside every group of a random model
    return sum(map(ord, completion)) / (128.0 * max(1, len(completion)))


@component(range=(0.0, 1.0), role="shaping", name="prompt_parity", description="length parity of the prompt")
def prompt_parity(messages) -> float:  # constant inside each group, varies across the batch
    return float(len(next((m.content for m in messages if m.role == "user"), "")) % 2)


# GSM8K's format component is dead: a random model never writes '#### N'.
REWARD = Reward("toy", [GSM8K.components[0], char_mean, prompt_parity])


def test_two_groups_a_step_are_pooled_until_the_dead_component_alarms(tmp_path):
    tokenizer, model = _tokenizer_and_model()
    store = tmp_path / "store"
    callback = RewardPipeCallback(reward=REWARD, run_id="trl-small", store=str(store))
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=GROUPS_PER_STEP * GROUP,
        num_generations=GROUP,
        max_completion_length=8,
        max_steps=4,
        logging_steps=1,
        learning_rate=1e-3,
        beta=0.0,
        seed=0,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        reward_weights=callback.reward_weights,
    )
    dataset = Dataset.from_dict({"prompt": PROMPTS * 4, "answer": ["2", "12", "12", "100"] * 4})
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=callback.reward_funcs,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[callback],
    )
    trainer.train()

    assert callback.failures == []
    assert [report.groups for report in callback.reports] == [GROUPS_PER_STEP] * 4
    assert callback.thresholds.min_groups > GROUPS_PER_STEP  # no batch alone is enough for a verdict
    first, second = callback.reports[0], callback.reports[1]
    # batch 0 alone: too few groups, the pool is open; batch 1: judged over batches 0-1 together
    assert first.components["format"].verdict == "insufficient_data"
    assert "pooling small steps: 2 of 4 groups" in first.components["format"].message
    assert second.components["format"].verdict == "dead" and second.components["format"].pooled_steps == [0, 1]
    assert second.components["prompt_parity"].verdict == "dead"
    assert second.components["char_mean"].verdict == "ok"  # varies in its groups: pooling alarms on nothing alive

    alarms = {(a.component, a.kind): a for a in callback.alarms}
    for name in ("format", "prompt_parity"):
        alarm = alarms[(name, "dead_component")]
        assert alarm.step == 1 and alarm.figures["pooled_steps"] == [0, 1]
        assert "pooled over steps 0\u20131" in alarm.message
    assert not any(a.component == "char_mean" for a in callback.alarms)
    assert len([a for a in callback.alarms if a.component == "format"]) == 1  # once per onset

    logged = [e for e in trainer.state.log_history if "rewardpipe/format/zero_variance_group_fraction" in e]
    # batch 0 got no verdict (its pool was open): no `dead` logged for it, never a 0.0 that says "alive"
    assert "rewardpipe/format/dead" not in logged[0] and logged[1]["rewardpipe/format/dead"] == 1.0
    assert logged[1]["rewardpipe/format/pooled_batches"] == 2.0

    # The stored run says the same when read back whole (`rewardpipe monitor` pools the small steps too).
    from typer.testing import CliRunner

    from rewardpipe.cli import app

    out = CliRunner().invoke(app, ["monitor", str(store), "--run-id", "trl-small", "--json", "--no-write-alarms"])
    assert out.exit_code == 0, out.output
    steps = json.loads(out.output)["steps"]
    assert steps[1]["components"]["format"]["verdict"] == "dead"
    assert steps[1]["components"]["format"]["pooled_steps"] == [0, 1]
