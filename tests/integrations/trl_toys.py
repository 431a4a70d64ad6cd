"""The tiny trainer pieces the real-TRL tests share (the in-process tests and the two-process script):
a character tokenizer and a random-weight Llama, so nothing is downloaded, and a toy reward whose three
components are dead, alive, and constant within every group."""

from __future__ import annotations

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from rewardpipe.rewards import Component, Reward
from rewardpipe.rewards.gsm8k import GSM8K

GROUP = 4
PROMPTS = ["what is 1+1?", "what is 10+2?", "what is 7+5?", "what is 99+1?"]  # lengths 12, 13, 12, 13


def char_tokenizer(alphabet: str = "abcdefghijklmnopqrstuvwxyz0123456789 +=?#.\n") -> PreTrainedTokenizerFast:
    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    chars = sorted(set(alphabet))
    vocab = {token: index for index, token in enumerate(specials + chars)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        unk_token="<unk>",
        padding_side="left",
    )


def tiny_model(tokenizer, positions: int = 64) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=positions,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    return LlamaForCausalLM(config)


def _completion(data) -> str:
    texts = data.transcript.assistant_texts
    return texts[-1] if texts else ""


def _prompt(data) -> str:
    return next((m.content for m in data.transcript.messages if m.role == "user"), "")


# rewardpipe's GSM8K format component (dead: a random model never writes '#### N'), a component that varies
# inside every group (the mean character code of a random completion) and one that is constant inside each
# group yet varies across the batch (the prompt's length parity): TRL's batch std shows it alive.
REWARD = Reward(
    name="toy",
    components=(
        GSM8K.components[0],
        Component(
            "char_mean",
            1.0,
            lambda d: sum(map(ord, _completion(d))) / (128.0 * max(1, len(_completion(d)))),
            "mean character code / 128",
        ),
        Component("prompt_parity", 1.0, lambda d: float(len(_prompt(d)) % 2), "length parity of the prompt"),
    ),
)
