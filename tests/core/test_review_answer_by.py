"""The review of round six: ``answer_by`` bounds the scoring of samples whose code already ran (a short grace after
it, never the whole batch however slow its components)."""

from __future__ import annotations


def test_scoring_executed_samples_does_not_run_far_past_answer_by(monkeypatch):
    import rewardpipe.single_turn as single_turn
    from rewardpipe.rewards import get_reward
    from rewardpipe.rewards.base import Component
    from rewardpipe.single_turn import score_samples
    from tests.core.conftest import ADD_SOLUTION, result
    from tests.core.test_single_turn import REFERENCE, FakeClock, code_sample

    clock = FakeClock()
    monkeypatch.setattr(single_turn, "time", clock)

    class Executor:
        def run_batch(self, jobs, workers=None):
            jobs = list(jobs)
            clock.now += 0.1
            return [result("passed", 2, 2) for _ in jobs]

    def slow_component(data):  # e.g. a heavy sync check on the executed code
        clock.now += 10.0
        return 1.0

    base = get_reward("code_correctness")
    reward = base._copy((*base.components, Component("slow", 0.0, slow_component)))
    batch = [code_sample(ADD_SOLUTION, f"s{i}", reference_answer=REFERENCE) for i in range(5)]
    start = clock.now
    score_samples(batch, reward, executor=Executor(), answer_by=start + 25.0, error_reward="zero")
    # s0..s2 start before +25; s3, s4 must be answered flagged at once: the batch ends by about +30.
    assert clock.now - start <= 31.0, clock.now - start
