"""Within-group monitoring of a verl run: verl writes each training step's rollouts to
`trainer.rollout_data_dir/<step>.jsonl` (with rewardpipe's `compute_score`, the legacy trainer's lines hold every
component); `rewardpipe verl import` files them as records, and the monitor judges each component inside its groups.

Here a dump is written the way verl writes it (4 prompts, 4 rollouts each, every answer well formed, half of them
right), imported, and judged: `format` is 1.0 in every rollout, so it teaches nothing and is alarmed on.
"""

import json
import tempfile
from pathlib import Path

from rewardpipe.integrations.verl import compute_score
from rewardpipe.integrations.verl_dump import import_rollout_dump
from rewardpipe.monitoring import monitor_records
from rewardpipe.store import LocalStore

if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp, "rollouts")  # trainer.rollout_data_dir
        dump.mkdir()
        with open(dump / "12.jsonl", "w") as fh:  # global step 12
            for a in range(4):
                question = f"What is {a} + 5?"
                for k in range(4):
                    answer = f"{a} + 5 = {a + 5 + k % 2}\n#### {a + 5 + k % 2}"
                    scores = compute_score("openai/gsm8k", answer, str(a + 5), {"question": question})
                    line = {"input": question, "output": answer, "gts": str(a + 5), "step": 12, **scores}
                    fh.write(json.dumps(line) + "\n")

        store = LocalStore(Path(tmp, "runs"))  # the CLI: rewardpipe verl import DUMP --out runs --reward gsm8k
        imported = import_rollout_dump(dump, store, run_id="verl-run", weights={"format": 0.5, "answer_correct": 1.0})
        print(f"imported {imported.count} rollouts, grouped by uid: {imported.grouped_by_uid}")

        result = monitor_records(store.iter_records("verl-run"))  # the CLI: rewardpipe monitor runs
        report = result.step(12)
        for name, stats in [*report.components.items(), ("aggregate", report.aggregate)]:
            print(f"{name:15} {stats.verdict:5} zero-variance groups {stats.zero_variance_group_fraction:.0%}")
        for alarm in result.alarms:
            print(f"ALARM {alarm.component}: {alarm.message}")
            example = alarm.to_dict()["examples"][0]
            transcript = store.get_transcript(example["transcript_key"])
            print(f"  example {example['rollout_id']}: {example['reason']}")
            print(f"  its answer: {transcript.messages[-1].content!r}")
