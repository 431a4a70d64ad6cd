"""The tiny trainer pieces the real-TRL tests share (the in-process tests and the two-process script):
a character tokenizer and a random-weight Llama, so nothing is downloaded, and a toy reward whose three
components are dead, alive, and constant within every group."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from rewardpipe import Reward, component
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


@component(range=(0.0, 1.0), role="shaping", description="mean character code / 128")
def char_mean(completion: str) -> float:
    return sum(map(ord, completion)) / (128.0 * max(1, len(completion)))


@component(range=(0.0, 1.0), role="shaping", description="length parity of the prompt")
def prompt_parity(messages) -> float:
    prompt = next((m.content for m in messages if m.role == "user"), "")
    return float(len(prompt) % 2)


# rewardpipe's GSM8K format component (dead: a random model never writes '#### N'), a component that varies
# inside every group (the mean character code of a random completion) and one that is constant inside each
# group yet varies across the batch (the prompt's length parity): TRL's batch std shows it alive.
REWARD = Reward("toy", [GSM8K.components[0], char_mean, prompt_parity])


def launch_two_processes(out: Path, store: Path | None = None, *, main_only: bool = False) -> list[dict]:
    """tests/integrations/trl_two_processes.py on two real processes (torch.distributed with gloo), storing the run
    in ``store`` when given (``main_only``: given to the main process's callback only); what each rank's callback
    saw."""
    out.mkdir(exist_ok=True)
    script = Path(__file__).with_name("trl_two_processes.py")
    launched = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script), str(out)]
        + ([str(store)] if store is not None else [])
        + (["main"] if store is not None and main_only else []),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert launched.returncode == 0, launched.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
