"""The TRL adapter, driven the way GRPOTrainer drives reward functions (no TRL import needed; the real
GRPOTrainer run is tests/integrations/test_trl_real.py)."""

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


def test_monitor_batch_uses_the_trainers_weights_for_the_aggregate():
    # a and b cancel under unit weights (a + b == 1 everywhere) but not under the weights TRL trains with.
    a = [0.0, 1.0] * 8
    b = [1.0, 0.0] * 8
    unweighted = monitor_batch({"a": a, "b": b}, group_size=4).step(0)
    assert unweighted.aggregate.verdict == "dead"  # what the old weight-blind monitor reported
    weighted = monitor_batch({"a": a, "b": b}, group_size=4, weights={"a": 1.0, "b": 0.5})
    assert weighted.step(0).aggregate.verdict == "ok"
    assert not [x for x in weighted.alarms if x.component == "aggregate"]


class _FakeTrainer:
    """What RewardPipeMonitor reads from the trainer that owns the log_metric hook (GRPOTrainer attributes)."""

    def __init__(self, funcs, weights, group_size, training=True):
        self.reward_funcs, self.reward_weights, self.num_generations = funcs, weights, group_size
        self.model = type("M", (), {"training": training})()
        self.logged: list[tuple[str, float]] = []

    def _log_metric(self, name, value):
        self.logged.append((name, value))


def _drive(callback, trainer, prompts, completions, **columns):
    for fn in callback.reward_funcs:
        fn(prompts=prompts, completions=completions, log_metric=trainer._log_metric, trainer_state=None, **columns)


def _gsm8k_batch(groups=4, size=4):
    prompts = [f"q{g}" for g in range(groups) for _ in range(size)]
    completions = [f"#### {i % 2}" for i in range(groups * size)]
    return prompts, completions, {"answer": ["1"] * (groups * size)}


def test_callback_scores_identical_consecutive_batches_as_two_batches():
    from rewardpipe.integrations.trl import RewardPipeMonitor

    callback = RewardPipeMonitor(reward="gsm8k", run_id="t")
    trainer = _FakeTrainer(callback.reward_funcs, [0.5, 1.0], 4)
    batch = _gsm8k_batch()
    _drive(callback, trainer, *batch[:2], **batch[2])
    _drive(callback, trainer, *batch[:2], **batch[2])  # same content again: a new batch, not a cache hit
    assert callback.batches == 2 and callback.scorer.batches_scored == 2
    names = [name for name, _ in trainer.logged]
    assert names.count("rewardpipe/format/zero_variance_group_fraction") == 2
    assert names.count("rewardpipe/answer_correct/within_group_std") == 2
    # format is 1.0 everywhere: dead, alarmed once (hysteresis), answer_correct alternates inside groups.
    assert [(a.component, a.cause) for a in callback.alarms] == [("format", "constant_at_maximum")]


def test_callback_never_serves_a_previous_batchs_scores_to_a_new_batch():
    from rewardpipe.integrations.trl import RewardPipeMonitor

    callback = RewardPipeMonitor(reward="gsm8k")
    trainer = _FakeTrainer(callback.reward_funcs, [0.5, 1.0], 2)
    fmt, correct = callback.reward_funcs
    for answer in ("1", "2", "1", "2"):  # fresh lists each time; CPython may reuse their ids
        completions = ["#### 1", "#### 2"]
        assert fmt(
            prompts=["q", "q"], completions=completions, answer=[answer] * 2, log_metric=trainer._log_metric
        ) == [1.0, 1.0]
        expected = [1.0, 0.0] if answer == "1" else [0.0, 1.0]
        assert (
            correct(prompts=["q", "q"], completions=completions, answer=[answer] * 2, log_metric=trainer._log_metric)
            == expected
        )


def test_callback_reads_the_trainers_weights_and_skips_eval_batches(tmp_path):
    from rewardpipe.integrations.trl import RewardPipeMonitor
    from rewardpipe.store import LocalStore

    callback = RewardPipeMonitor(reward="gsm8k", store=str(tmp_path), run_id="w")
    prompts, completions, columns = _gsm8k_batch()
    _drive(
        callback, _FakeTrainer(callback.reward_funcs, [0.5, 1.0], 4, training=False), prompts, completions, **columns
    )
    assert callback.batches == 0  # evaluation batches are not training groups
    _drive(callback, _FakeTrainer(callback.reward_funcs, [3.0, 2.0], 4), prompts, completions, **columns)
    records = list(LocalStore(tmp_path).iter_records("w"))
    assert len(records) == 16 and {tuple(r.weights.values()) for r in records} == {(3.0, 2.0)}
    assert records[0].aggregate == pytest.approx(
        3.0 * records[0].components["format"] + 2.0 * records[0].components["answer_correct"]
    )


def test_callback_gathers_processes_so_a_group_split_across_them_is_judged_whole():
    from rewardpipe.integrations.trl import RewardPipeMonitor

    # Two ranks of 4 completions, groups of 4: the fake gather plays accelerate's gather_object (rank order).
    # Rank 0 must report exactly what one process holding the whole batch reports.
    prompts, completions, columns = _gsm8k_batch(groups=2, size=4)
    rank_rows = {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}  # TRL's split: contiguous slices in process order
    pending: dict[int, list] = {}

    def gather_from(rank):
        def gather(rows):
            pending[rank] = rows
            other = 1 - rank
            return (rows + pending.get(other, [])) if rank == 0 else (pending.get(other, []) + rows)

        return gather

    ranks = {r: RewardPipeMonitor(reward="gsm8k", gather=gather_from(r)) for r in (0, 1)}
    single = RewardPipeMonitor(reward="gsm8k")
    _drive(single, _FakeTrainer(single.reward_funcs, [0.5, 1.0], 4), prompts, completions, **columns)
    for rank in (1, 0):  # rank 1 finishes first; rank 0 then sees both halves
        rows = rank_rows[rank]
        cb = ranks[rank]
        _drive(
            cb,
            _FakeTrainer(cb.reward_funcs, [0.5, 1.0], 4),
            [prompts[i] for i in rows],
            [completions[i] for i in rows],
            answer=[columns["answer"][i] for i in rows],
        )
    got = ranks[0].reports[0]
    want = single.reports[0]
    assert got.groups == want.groups == 2
    assert (
        got.components["answer_correct"].within_group_std_mean
        == want.components["answer_correct"].within_group_std_mean
    )


def test_ignore_must_name_a_component():
    from rewardpipe.integrations.trl import RewardPipeMonitor

    with pytest.raises(ValueError, match="unknown component"):
        RewardPipeMonitor(reward="gsm8k", ignore=["fromat"])


def test_a_monitor_failure_is_reported_and_never_stops_training(caplog):
    from rewardpipe.integrations.trl import RewardPipeMonitor

    callback = RewardPipeMonitor(reward="gsm8k")
    prompts, completions, columns = _gsm8k_batch(groups=1, size=4)
    trainer = _FakeTrainer(callback.reward_funcs, [0.5, 1.0], 3)  # 4 completions do not split into groups of 3
    fmt, correct = callback.reward_funcs
    fmt(prompts=prompts, completions=completions, log_metric=trainer._log_metric, **columns)
    assert (
        correct(prompts=prompts, completions=completions, log_metric=trainer._log_metric, **columns) == [0.0, 1.0] * 2
    )
    assert callback.failures and "groups of 3" in callback.failures[0]
    assert "within-group monitor failed" in caplog.text
