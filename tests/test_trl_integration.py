"""The TRL adapter, driven the way GRPOTrainer drives reward functions (no TRL import needed)."""

import pytest

from rewardpipe.integrations.trl import monitor_batch, reward_functions


def test_one_function_per_component_with_rewardpipe_weights_and_none_for_unscorable():
    funcs, weights = reward_functions("gsm8k")
    assert [f.__name__ for f in funcs] == ["gsm8k_format", "gsm8k_answer_correct"]
    assert weights == [0.5, 1.0]
    prompts = ["What is 3 + 4?"] * 3 + [[{"role": "user", "content": "What is 2 + 2?"}]]
    completions = ["3 + 4 = 7\n#### 7", "The answer is 8", "#### 7", [{"role": "assistant", "content": "#### 4"}]]
    answer = ["Adding gives #### 7", "7", "not a number", "4"]
    columns = {"answer": answer, "unrelated_scalar": 3}
    fmt, correct = (f(prompts=prompts, completions=completions, **columns) for f in funcs)
    assert fmt == [1.0, 0.0, None, 1.0]  # the unreadable reference is None in every component, never 0
    assert correct == [1.0, 0.0, None, 1.0]


def test_code_is_executed_once_per_completion_whatever_the_number_of_components():
    class CountingExecutor:
        def __init__(self):
            from rewardpipe.execution import get_executor

            self.inner, self.jobs = get_executor(), 0

        def run_batch(self, jobs, workers=None):
            jobs = list(jobs)
            self.jobs += len(jobs)
            return self.inner.run_batch(jobs, workers=workers)

    executor = CountingExecutor()
    funcs, _ = reward_functions("code_correctness", executor=executor)
    tests = "def check(candidate):\n    assert candidate(2) == 4\n"
    completions = ["```python\ndef double(x):\n    return 2 * x\n```", "```python\ndef double(x):\n    return x\n```"]
    columns = {"reference_answer": [{"tests": tests, "entry_point": "double", "tests_format": "check"}] * 2}
    prompts = ["Write double."] * 2
    values = [f(prompts=prompts, completions=completions, **columns) for f in funcs]
    assert values[0] == [1.0, 0.0]
    assert executor.jobs == 2


def test_monitor_batch_sees_what_batch_statistics_hide():
    # 'bonus' differs between prompts but never inside one: a batch std > 0, yet dead for GRPO.
    bonus = [0.0] * 4 + [1.0] * 4 + [0.0] * 4 + [1.0] * 4
    correct = [0, 1, 0, 1] * 4
    result = monitor_batch({"bonus": bonus, "correct": correct}, group_size=4, step=7)
    report = result.step(7)
    assert report.components["bonus"].std > 0.4
    assert report.components["bonus"].verdict == "dead"
    assert report.components["bonus"].cause == "constant_within_groups"
    assert report.components["correct"].verdict == "ok"
    assert [(a.component, a.kind) for a in result.alarms] == [("bonus", "dead_component")]


def test_monitor_batch_counts_unscorable_completions_as_errors_and_rejects_ragged_input():
    values = {"a": [None, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0], "b": [None, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0]}
    report = monitor_batch(values, group_size=2).step(0)
    assert report.errors == 1 and report.scored == 7
    with pytest.raises(ValueError, match="groups of 3"):
        monitor_batch(values, group_size=3)
    with pytest.raises(ValueError, match="one value per completion"):
        monitor_batch({"a": [1.0], "b": [1.0, 2.0]}, group_size=1)
