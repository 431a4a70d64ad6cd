"""Round thirty-five (second wave): the TRL callback's default run id.

Two trainings started in the same second against one store (a sweep's jobs) both took ``trl-<that second>``: the
second went on in the first one's run, its steps after the other's and its monitor state taken over. The default
id is unique to the callback; a run resumes only under a ``run_id`` the user passes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from unittest import mock

from rewardpipe.integrations.trl import RewardPipeMonitor
from rewardpipe.store import run_id_problem


def test_two_callbacks_built_in_the_same_second_get_runs_of_their_own():
    with mock.patch("rewardpipe.integrations.trl.datetime") as clock:
        clock.now.return_value = datetime(2026, 12, 5, 23, 59, 59, tzinfo=UTC)
        first, second = RewardPipeMonitor("gsm8k").run_id, RewardPipeMonitor("gsm8k").run_id
    assert first != second
    for run_id in (first, second):
        assert run_id.startswith("trl-20261205T235959") and run_id_problem(run_id, "run_id") is None


def test_a_run_id_given_is_kept_as_it_is():
    assert RewardPipeMonitor("gsm8k", run_id="sweep-3").run_id == "sweep-3"
