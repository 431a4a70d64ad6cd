"""A real two-process GRPOTrainer run on CPU (torch.distributed with gloo), launched by test_trl_real.py:

    python -m torch.distributed.run --standalone --nproc_per_node 2 \
        tests/integrations/trl_two_processes.py OUT [STORE [main]]

Each process holds 10 of the 20 completions of a step (5 groups of 4), so the third group is split across
the two processes. Every process writes what its RewardPipeCallback saw to OUT/rank<N>.json. With STORE, the
callback stores the run there (run id ``trl-two-processes``), and a second launch on the same STORE resumes it. With
``main`` after STORE, only the main process's callback is given the store (``store=... if RANK == 0 else None``), as a
user reading "the main process writes" may build it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from rewardpipe.integrations.trl import RewardPipeCallback
from tests.integrations.trl_toys import GROUP, PROMPTS, REWARD, char_tokenizer, tiny_model

PER_PROCESS = 10  # 2 processes x 10 = 20 completions = 5 groups of GROUP; the third is split


def main(out: Path, store: str | None = None, main_only: bool = False) -> None:
    tokenizer = char_tokenizer()
    local_rows: list[int] = []
    if main_only and os.environ.get("RANK", "0") != "0":
        store = None
    callback = RewardPipeCallback(reward=REWARD, run_id="trl-two-processes", store=store)
    gather = callback.gather

    def counting_gather(rows):
        local_rows.append(len(rows))
        return gather(rows)

    callback.gather = counting_gather
    args = GRPOConfig(
        output_dir=str(out / "trainer"),
        per_device_train_batch_size=PER_PROCESS,
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
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    dataset = Dataset.from_dict({"prompt": PROMPTS * 10, "answer": ["2", "12", "12", "100"] * 10})
    trainer = GRPOTrainer(
        model=tiny_model(tokenizer),
        reward_funcs=callback.reward_funcs,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[callback],
    )
    trainer.train()
    rank = trainer.accelerator.process_index
    summary = {
        "rank": rank,
        "processes": trainer.accelerator.num_processes,
        "local_rows": local_rows,
        "reports": [report.to_dict() for report in callback.reports],
        "alarms": [(a.component, a.kind, a.cause) for a in callback.alarms],
        "alarm_steps": [(a.component, a.kind, a.step) for a in callback.alarms],
        "alarm_examples": [list(a.examples) for a in callback.alarms],
        "state": callback.state.to_dict() if callback.state is not None else None,
        "failures": callback.failures,
        "log_history": trainer.state.log_history,
    }
    (out / f"rank{rank}.json").write_text(json.dumps(summary, default=str))
    # Exit without the interpreter's teardown: gloo's threads still running then can abort the process
    # ("terminate called without an active exception", SIGABRT), which failed a CI run after both summaries
    # were written; destroying the process group first can hang when the other rank is already gone.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None, sys.argv[3:4] == ["main"])
