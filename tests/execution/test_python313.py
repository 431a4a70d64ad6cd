"""The sandbox on Python 3.13, the Lambda functions' runtime (issue 18 item 1).

It runs where a 3.13 interpreter is found (REWARDPIPE_TEST_PYTHON313=/path/to/python3.13, a pyenv
~/.pyenv/versions/3.13*, or python3.13 on PATH) and skips with that reason otherwise. It runs the fork servers on that
interpreter: start-up, a right and a wrong answer, and the filter's own-pid rule under the new version's runtime.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

import pytest

from rewardpipe.execution import ExecutionJob, ExecutionStatus
from rewardpipe.execution.sandbox import make_executor

TESTS = (
    "import unittest\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
)


def _python313() -> str:
    installed = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.13*/bin/python3.13")))
    path = os.environ.get("REWARDPIPE_TEST_PYTHON313") or (installed[-1] if installed else shutil.which("python3.13"))
    if not path:
        pytest.skip("no Python 3.13 interpreter here (set REWARDPIPE_TEST_PYTHON313)")
    probe = subprocess.run(
        [path, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:  # e.g. a pyenv shim with no 3.13 installed behind it
        pytest.skip(f"{path} does not run a Python 3.13 here: {probe.stderr.strip()[:200]}")
    assert probe.stdout.strip() == "(3, 13)", f"{path} is Python {probe.stdout.strip()}"
    return path


def test_the_sandbox_runs_on_python_3_13():
    executor = make_executor(workers=1, interpreter=_python313())
    try:
        assert executor.isolation()["interpreter"].endswith("3.13") or "3.13" in executor.isolation()["interpreter"]
        right = executor.run(ExecutionJob(code="def add(a, b):\n    return a + b\n", tests=TESTS, entry_point="add"))
        assert right.status is ExecutionStatus.PASSED, right.reason
        wrong = executor.run(ExecutionJob(code="def add(a, b):\n    return a - b\n", tests=TESTS, entry_point="add"))
        assert wrong.status is ExecutionStatus.FAILED, wrong.reason
        probe = (
            "import os\ndef add(a, b):\n    return a + b\n"
            "print('AFFINITY', len(os.sched_getaffinity(0)) > 0)\n"
            "try:\n    os.setpriority(os.PRIO_PROCESS, os.getppid() or os.getpid() + 1, 19)\n    print('RENICED')\n"
            "except OSError:\n    print('DENIED')\n"
        )
        result = executor.run(ExecutionJob(code=probe, tests=TESTS, entry_point="add"))
        assert result.status is ExecutionStatus.PASSED and "DENIED" in result.stdout, (result.reason, result.stdout)
        assert "AFFINITY True" in result.stdout
    finally:
        executor.close()
