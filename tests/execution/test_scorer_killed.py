"""A scorer killed outright (SIGKILL, the OOM killer) cannot remove the directory it made for each fork
server; the fork servers, seeing it gone, remove them (empty) as they stop."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time

import pytest

KILLED_AFTER_A_BATCH = """
import os, signal, sys
sys.path.insert(0, {repo!r})
from tests.execution.conftest import job
from rewardpipe.execution.sandbox import make_executor

executor = make_executor(workers=2)
results = list(executor.run_batch([job("def add(a, b):\\n    return a + b\\n")] * 4, workers=2))
assert all(result.status.value == "passed" for result in results), [result.reason for result in results]
print(sorted(os.listdir(os.environ["TMPDIR"])), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("disable", ["", "mountns"])
def test_a_killed_scorer_leaves_no_directory_behind(tmp_path, disable):
    env = {**os.environ, "TMPDIR": str(tmp_path), "REWARDPIPE_SANDBOX_DISABLE": disable}
    done = subprocess.run(
        [sys.executable, "-c", KILLED_AFTER_A_BATCH.format(repo=REPO)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    made = [name for name in ast.literal_eval(done.stdout.strip()) if name.startswith("rewardpipe-sbx-")]
    assert len(made) == 2, made  # one per fork server, there while the scorer lived
    deadline = time.monotonic() + 60  # the fork servers notice the scorer is gone, clean up, then stop
    while time.monotonic() < deadline and any((tmp_path / name).exists() for name in made):
        time.sleep(0.05)
    assert [name for name in made if (tmp_path / name).exists()] == []
