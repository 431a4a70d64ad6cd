"""How the scorer waits for a fork server to exit (forkservers._wait_for_exit): as Popen.wait with a timeout."""

import subprocess
import sys

import pytest

from rewardpipe.execution.forkservers import _wait_for_exit


def test_returns_the_exit_status_once_the_process_exits():
    process = subprocess.Popen([sys.executable, "-c", "import time, sys; time.sleep(0.2); sys.exit(7)"])
    assert _wait_for_exit(process, 10) == 7
    assert process.returncode == 7


def test_a_process_still_running_at_the_timeout_raises_as_popen_wait_does():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            _wait_for_exit(process, 0.2)
        assert process.poll() is None
    finally:
        process.kill()
        process.wait()


def test_a_process_already_reaped_gives_its_status():
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    process.wait()
    assert _wait_for_exit(process, 1) == 3
