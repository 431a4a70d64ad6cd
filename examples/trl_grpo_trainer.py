"""A real TRL `GRPOTrainer` with rewardpipe's per-component reward functions and within-group monitor.

Needs the `[trl]` extra. Nothing is downloaded: the model is a tiny random-weight Llama and the tokenizer a
character vocabulary built here, so it trains one step on CPU in seconds; use your own model and dataset.
"""

# requires: trl, transformers, datasets, tokenizers, torch

import tempfile

from datasets import Dataset
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from trl import GRPOConfig, GRPOTrainer

from rewardpipe.integrations.trl import RewardPipeCallback


def toy_model_and_tokenizer():
    specials, chars = ["<pad>", "<eos>", "<bos>", "<unk>"], sorted(set("abcdefghijklmnopqrstuvwxyz0123456789 +=?#.\n"))
    backend = Tokenizer(models.WordLevel({t: i for i, t in enumerate(specials + chars)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        unk_token="<unk>",
        padding_side="left",
    )
    config = LlamaConfig(
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
    return LlamaForCausalLM(config), tokenizer


if __name__ == "__main__":
    model, tokenizer = toy_model_and_tokenizer()
    prompts, answers = ["what is 1+1?", "what is 10+2?", "what is 7+5?", "what is 99+1?"], ["2", "12", "12", "100"]
    train_dataset = Dataset.from_dict({"prompt": prompts * 4, "answer": answers * 4})
    output_dir = tempfile.mkdtemp()
    # --8<-- [start:trainer]
    monitor = RewardPipeCallback(reward="gsm8k", store=f"{output_dir}/store")  # store: optional dir or s3://
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        train_dataset=train_dataset,
        reward_funcs=monitor.reward_funcs,  # one reward function per component
        callbacks=[monitor],  # the within-group monitor on every batch
        args=GRPOConfig(
            reward_weights=monitor.reward_weights,
            num_generations=4,
            logging_steps=1,
            output_dir=output_dir,
            per_device_train_batch_size=16,
            max_completion_length=8,
            max_steps=1,
            report_to="none",
            use_cpu=True,
            save_strategy="no",
            disable_tqdm=True,
        ),
    )
    trainer.train()
    print([(alarm.component, alarm.kind, alarm.cause) for alarm in monitor.alarms])  # once per onset
    # --8<-- [end:trainer]
