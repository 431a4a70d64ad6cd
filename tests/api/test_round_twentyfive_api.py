"""Round twenty-five, public API (an independent review): input a caller gets wrong is refused when it is given,
naming what was wrong, not found out hours into a training run.

* ``RewardPipeCallback(run_id=...)`` took any text. A run id no store can hold (over 240 characters once
  percent-encoded, ``"é" * 100`` among them) let the trainer start and then stored nothing of the run: every
  batch logged "not stored: ... the run's stored steps could not be read". A run id with a line break or
  another control character was stored, under a folder ``rewardpipe monitor --run-id`` and ``report`` refuse to
  name. The callback now refuses such a run id when it is built, by the rule ``--run-id`` follows
  (:func:`rewardpipe.store.run_id_problem`), naming it.
"""

from __future__ import annotations

import pytest

from rewardpipe.integrations.trl import RewardPipeMonitor
from rewardpipe.store import MAX_RUN_ID, run_id_problem


@pytest.mark.parametrize(
    ("run_id", "says"),
    [
        ("x" * 300, f"must be 1 to {MAX_RUN_ID} characters, got 300"),
        ("é" * 100, "at most 240"),
        ("run\n2", "must not contain control"),
        ("nul", "cannot name a folder on Windows"),
    ],
)
def test_the_trl_callback_refuses_a_run_id_no_store_can_hold_naming_it(tmp_path, run_id, says):
    with pytest.raises(ValueError, match="run_id") as caught:
        RewardPipeMonitor("gsm8k", run_id=run_id, store=tmp_path)
    assert says in str(caught.value)


def test_the_trl_callback_refuses_a_run_id_that_is_not_text():
    with pytest.raises(ValueError, match="run_id must be text"):
        RewardPipeMonitor("gsm8k", run_id=7)  # type: ignore[arg-type]


def test_a_usable_run_id_and_the_generated_one_are_taken(tmp_path):
    assert RewardPipeMonitor("gsm8k", run_id="exp/é-1", store=tmp_path).run_id == "exp/é-1"
    assert RewardPipeMonitor("gsm8k").run_id.startswith("trl-")


def test_the_rule_is_the_one_the_cli_applies():
    from rewardpipe.cli import common

    assert common.MAX_RUN_ID == MAX_RUN_ID
    assert run_id_problem("ok", "--run-id") is None
    assert run_id_problem("", "--run-id") == f"--run-id must be 1 to {MAX_RUN_ID} characters, got 0"
