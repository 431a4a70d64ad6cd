"""TRL `GRPOTrainer` reward functions: one per component of a built-in reward, called the way TRL calls them.

`GRPOTrainer(reward_funcs=funcs, args=GRPOConfig(reward_weights=weights, ...))` calls every function with
the batch's prompts and completions and each dataset column as a keyword list. This example makes that
call itself for one batch of 4 prompts x 2 generations, then runs the within-group monitor on it: the
`format` component is 1.0 in every completion, so it gives GRPO nothing to learn from.
"""

from rewardpipe.integrations.trl import monitor_batch, reward_functions

funcs, weights = reward_functions("gsm8k")  # GRPOTrainer(reward_funcs=funcs, ...reward_weights=weights)

questions = {"What is 6 * 7?": "42", "What is 9 + 10?": "19", "What is 2 ** 5?": "32", "What is 7 - 9?": "-2"}
prompts = [q for q in questions for _ in range(2)]  # num_generations=2: a group's completions are adjacent
answers = [questions[q] for q in prompts]  # a dataset column: TRL passes it as a keyword list
completions = ["#### 42", "#### 41", "#### 19", "#### 19", "#### 32", "#### 64", "#### -2", "#### 2"]

if __name__ == "__main__":
    values = {}
    for func in funcs:
        name = func.rewardpipe_component  # TRL logs it as rewards/<func.__name__>/mean
        values[name] = func(prompts=prompts, completions=completions, answer=answers)
        print(f"{func.__name__}: {values[name]}")

    result = monitor_batch(values, group_size=2, weights=dict(zip(values, weights, strict=True)))
    for name, stats in result.steps[0].components.items():
        print(
            f"{name}: within-group std {stats.within_group_std_mean:.3f}, verdict {stats.verdict}"
            + (f" ({stats.cause})" if stats.cause else "")
        )
