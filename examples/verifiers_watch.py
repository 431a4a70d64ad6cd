"""Within-group monitoring of a verifiers run: the rubric scores each GRPO group together, hands it to a
`GroupWatch`, and every `groups_per_step` groups (one training batch's prompts) are judged as a step by
rewardpipe's monitor. Needs the `verifiers` package (`make test-verifiers` runs this example in `.venv-verifiers`).

Here 4 groups of 4 completions are scored the way verifiers scores a group (`Rubric.score_group`): every answer is
well formed, half of them right, so `format` is 1.0 in every rollout, teaches nothing, and is alarmed on.
"""

# requires: verifiers

import asyncio
import logging

import verifiers as vf

from rewardpipe.integrations.verifiers import GroupWatch, rubric

if __name__ == "__main__":
    logging.basicConfig(format="%(levelname)s %(message)s")  # the watch logs each alarm (rewardpipe.verifiers)
    watch = GroupWatch(groups_per_step=4, run_id="vf-run")
    rub = rubric("gsm8k", watch=watch)

    for a in range(4):  # in training, verifiers' env.run_group / generate call score_group for each group
        question = [{"role": "user", "content": f"What is {a} + 5?"}]
        states = [
            vf.State(
                prompt=question,
                completion=[{"role": "assistant", "content": f"#### {a + 5 + k % 2}"}],
                answer=str(a + 5),
                task="gsm8k",
                info={},
                trajectory=[],
                timing={},
            )
            for k in range(4)
        ]
        asyncio.run(rub.score_group(states))

    (report,) = watch.reports
    for name, stats in [*report.components.items(), ("aggregate", report.aggregate)]:
        print(f"{name:15} {stats.verdict:5} zero-variance groups {stats.zero_variance_group_fraction:.0%}")
    for alarm in watch.alarms:
        example = alarm.to_dict()["examples"][0]
        print(f"ALARM {alarm.component}; example {example['rollout_id']}: {watch.transcript(example)[-1]['content']!r}")
