"""Round thirty-seven (review), the trusted runner: what the round's own-state exemption and process group missed.

The runner leads its own process group since round thirty-seven, so a hidden test's ``os.setpriority(os.PRIO_PGRP,
0, ...)`` (its own group: itself and what it started) sets the runner's own priority, as ``PRIO_PROCESS`` does. That
was read as the model's code disturbing the trusted side: every rollout of such tests, a right answer too, was an
error.
"""

from __future__ import annotations

import pytest

from rewardpipe.execution import ExecutionStatus
from tests.security import test_round_thirtyone_sandbox as thirtyone
from tests.security.test_round_thirtyseven_runner import BODY, HEADER, IDENTITY, worker  # noqa: F401 - fixture

OWN_GROUP_PRIORITY = {
    "its own group, as 0": "import os\nos.setpriority(os.PRIO_PGRP, 0, os.getpriority(os.PRIO_PROCESS, 0) + 1)\n",
    "its own group, by number": (
        "import os\nos.setpriority(os.PRIO_PGRP, os.getpgrp(), os.getpriority(os.PRIO_PROCESS, 0) + 1)\n"
    ),
}


@pytest.mark.parametrize("case", sorted(OWN_GROUP_PRIORITY))
def test_a_priority_the_tests_set_on_their_own_process_group_is_theirs(worker, case):  # noqa: F811 - fixture
    top = OWN_GROUP_PRIORITY[case]
    right = thirtyone._run(worker, "right", IDENTITY, top + HEADER + BODY, entry_point="f")
    assert right.status is ExecutionStatus.PASSED, (right.status, right.reason)
    wrong = thirtyone._run(worker, "wrong", "def f(n):\n    return n + 1\n", top + HEADER + BODY, entry_point="f")
    assert wrong.status is ExecutionStatus.FAILED, (wrong.status, wrong.reason)
    after = thirtyone._run(worker, "after", IDENTITY, HEADER + BODY, entry_point="f")
    assert after.status is ExecutionStatus.PASSED, (after.status, after.reason)
