"""Round thirty-five, the trainer integrations: the TRL callback on several processes after a resume (every process
takes the main process's judgement), and what it says once. Each failed before its fix (docs/changelog.md, round
thirty-five, the trainer integrations and the monitor)."""

from __future__ import annotations

import logging

import pytest

from tests.integrations.test_round_thirtyfour_trainers import _Trainer, _two_ranks

# 4 groups of 2 a batch, 2 on each process: enough groups for a verdict; answer_correct and format are constant
# inside every group (each group repeats one completion), so the first batch raises dead alarms.
HALVES = [
    (["1+1?"] * 2 + ["2+2?"] * 2, ["#### 2", "#### 2", "#### 5", "#### 5"], ["2", "2", "4", "4"]),
    (["3+3?"] * 2 + ["4+4?"] * 2, ["#### 6", "#### 6", "#### 1", "#### 1"], ["6", "6", "8", "8"]),
]
WHOLE = tuple(a + b for a, b in zip(*HALVES, strict=True))


def _alarms(callback):  # type: ignore[no-untyped-def]
    return [(a.component, a.kind, a.step) for a in callback.alarms]


class TestEveryProcessTakesTheMainProcesssJudgementAfterAResume:
    """A run resumed under its run_id on two processes: only the main process read the store back (its steps, its
    monitor state with the alarms open at the checkpoint), and the other judged the same rows from nothing. The
    logged figures were the main one's (broadcast), but the other process's ``callback.alarms`` raised again, at step
    0, the alarms the run had raised before its checkpoint, and its reports had other step numbers."""

    def test_the_alarms_reports_and_state_of_every_process_agree(self, tmp_path):
        from rewardpipe.integrations.trl import RewardPipeMonitor

        first = RewardPipeMonitor("gsm8k", store=str(tmp_path), run_id="resumed")
        _two_ranks([first], [[WHOLE]])  # the run before its checkpoint: its dead alarms raised at batch 0
        assert ("answer_correct", "dead_component", 0) in _alarms(first)

        ranks = [RewardPipeMonitor("gsm8k", store=str(tmp_path), run_id="resumed") for _ in range(2)]
        trainers = _two_ranks(ranks, [HALVES, HALVES])  # resumed on two processes, two more batches
        main, other = ranks
        assert _alarms(main) == []  # still dead: the alarms open at the checkpoint are not raised again
        assert _alarms(other) == _alarms(main)
        assert [r.step for r in other.reports] == [r.step for r in main.reports] == [1, 2]
        assert [r.to_dict() for r in other.reports] == [r.to_dict() for r in main.reports]
        assert other.state.to_dict() == main.state.to_dict()
        assert other.batches == main.batches == 3
        assert trainers[0].logged == trainers[1].logged
        assert main.failures == other.failures == []

    def test_a_new_alarm_reaches_every_process_once_at_the_main_processs_step(self, tmp_path):
        from rewardpipe.integrations.trl import RewardPipeMonitor

        first = RewardPipeMonitor("gsm8k", store=str(tmp_path), run_id="again")
        _two_ranks([first], [[WHOLE]])
        # after the resume the answers vary inside every group: the open dead alarms recover, at the main's step 1
        varied = [
            (HALVES[0][0], ["#### 2", "#### 9", "#### 4", "#### 0"], HALVES[0][2]),
            (HALVES[1][0], ["#### 6", "#### 9", "#### 8", "#### 0"], HALVES[1][2]),
        ]
        ranks = [RewardPipeMonitor("gsm8k", store=str(tmp_path), run_id="again") for _ in range(2)]
        _two_ranks(ranks, [varied])
        recovered = [(c, k, s) for c, k, s in _alarms(ranks[0]) if k == "recovered"]
        assert ("answer_correct", "recovered", 1) in recovered
        assert _alarms(ranks[1]) == _alarms(ranks[0])


class TestWhatTheCallbackSaysOnce:
    """The callback's two say-once sets (why the aggregate is not the reward trained on, at most 10 reasons; the run
    warnings, once per kind) are one now: the same lines are said, each once."""

    def test_the_aggregate_reason_is_said_once_over_many_batches(self, caplog):
        from rewardpipe.integrations.trl import RewardPipeMonitor

        callback = RewardPipeMonitor("gsm8k")
        trainer = _Trainer(callback, main=True)
        trainer.multi_objective_aggregation = "normalize_then_sum"
        prompts, completions, answers = WHOLE
        with caplog.at_level(logging.WARNING, logger="rewardpipe.trl"):
            for _ in range(3):
                for fn in callback.reward_funcs:
                    fn(prompts=prompts, completions=completions, answer=answers, log_metric=trainer._log_metric)
        assert caplog.text.count("normalize_then_sum") == 1
        assert callback.batches == 3

    def test_at_most_ten_reasons_are_said(self, caplog):
        from rewardpipe.integrations.trl import SAID_ONCE_LIMIT, RewardPipeMonitor

        callback = RewardPipeMonitor("gsm8k")
        with caplog.at_level(logging.WARNING, logger="rewardpipe.trl"):
            for n in range(SAID_ONCE_LIMIT + 5):
                if callback._first_time("aggregate_apart", f"reason {n}"):
                    logging.getLogger("rewardpipe.trl").warning("said %s", n)
            # another topic is counted apart
            assert callback._first_time("warning", "llm_user_replaced")
            assert not callback._first_time("warning", "llm_user_replaced")
        assert caplog.text.count("said ") == SAID_ONCE_LIMIT


@pytest.mark.trl
def test_two_real_processes_resumed_hold_the_main_processs_alarms(tmp_path):
    """The real GRPOTrainer on two processes, stored, then resumed from the store on two processes: the other process
    raised again, at step 0, the dead alarm the run had open (prompt_parity, constant in every group)."""
    pytest.importorskip("trl")
    from tests.integrations.trl_toys import launch_two_processes

    store = tmp_path / "store"
    first = launch_two_processes(tmp_path / "first", store)
    assert ("prompt_parity", "dead_component", 0) in [tuple(a) for a in first[0]["alarm_steps"]]
    resumed = launch_two_processes(tmp_path / "resumed", store)
    main, other = resumed
    assert main["failures"] == other["failures"] == []
    assert ("prompt_parity", "dead_component") not in [tuple(a[:2]) for a in main["alarm_steps"]]  # still open
    assert other["alarm_steps"] == main["alarm_steps"]
    assert [r["step"] for r in other["reports"]] == [r["step"] for r in main["reports"]] == [2, 3]
    assert other["state"] == main["state"]
