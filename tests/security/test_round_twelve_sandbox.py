"""Round twelve (issue 19, classes 2 and 4): the directories of the spare children waiting for the next jobs.

In full isolation a job runs as the uid that owns the directories of the spares behind it on its worker. Their
names are unguessable and their parent cannot be listed, but the mount list (``listmount``/``statmount``: no path,
no privilege, neither Landlock nor the mount namespace hides it) named them, and Landlock does not govern a
directory's times or mode. A right answer wrote its answers into their timestamps and the wrong answer of the next
job read them back from ``os.stat(".")`` and passed; ``chmod 0`` on them made the next right answer that used
``tempfile`` fail. The mount list is now denied, and a spare whose directory changed in any way is discarded.
"""

from __future__ import annotations

import os
import time

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.runtime.zygote import RUNNER_NAME
from tests.execution.test_executor import _children, _comm
from tests.security.conftest import HIDDEN_TESTS, RIGHT_ADD, assert_failed, job, require_layer

PASSED = ExecutionStatus.PASSED

MOUNT_LIST = """
import ctypes, struct
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
def add(a, b):
    request = ctypes.create_string_buffer(struct.pack("=IIQQQ", 32, 0, 0xFFFFFFFFFFFFFFFF, 0, 0), 32)
    ids = (ctypes.c_uint64 * 64)()
    found = _libc.syscall({number}, request, ids, ctypes.c_size_t(64), ctypes.c_uint(0))
    print((found, ctypes.get_errno()))
    return a + b
"""


@pytest.mark.parametrize("name, number", [("listmount", 458), ("statmount", 457)])
def test_the_mount_list_is_denied(one_worker, name, number):
    require_layer(one_worker, "seccomp")
    result = one_worker.run(job(MOUNT_LIST.format(number=number)))
    assert result.status is PASSED, result.reason
    assert set(result.stdout.split("\n")) == {"(-1, 1)", ""}, result.stdout  # EPERM, not a count of mounts


def _spare_directories(executor) -> list[str]:
    """Where the spares waiting on the one worker will run their jobs, as a job that found them would name them
    (inside the fork server's mount namespace), once the fork server is done making them: it makes more after
    its reply, so the same list twice, 50 ms apart."""
    previous: list[str] = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        current = _waiting_children_directories(executor)
        if current and current == previous:
            return current
        previous = current
        time.sleep(0.05)
    raise AssertionError(f"the spares never settled: {previous}")


def _waiting_children_directories(executor) -> list[str]:
    directories = []
    for pid in _children(executor._workers[0].process.pid):  # the trusted runner and the waiting children
        try:
            if _comm(pid) != RUNNER_NAME:
                directories.append(os.readlink(f"/proc/{pid}/cwd"))
        except OSError:
            continue  # a child that just ended
    return directories


WRITE_ANSWERS = """
import os
def add(a, b):
    for directory in {directories!r}:
        os.utime(directory, ns=(1234567, 4 << 8 | 3))  # the next job's answers, in its directory's times
        os.chmod(directory, 0o751)
    return a + b
"""
READ_ANSWERS = """
import os
_own = os.stat(".")
_answers = {}
if _own.st_atime_ns == 1234567:
    _answers = {(1, 2): _own.st_mtime_ns & 0xFF, (2, 2): _own.st_mtime_ns >> 8 & 0xFF}
def add(a, b):
    return _answers.get((a, b), a - b)
"""
LOCK_OUT = """
import os
def add(a, b):
    for directory in {directories!r}:
        os.chmod(directory, 0)
    return a + b
"""
RIGHT_WITH_A_SCRATCH_FILE = """
import tempfile
def add(a, b):
    with tempfile.TemporaryFile() as scratch:
        scratch.write(str(a + b).encode())
        scratch.seek(0)
        return int(scratch.read())
"""


def _after_tampering(executor, attack: str, then: str):
    require_layer(executor, "landlock")
    assert executor.run(job(RIGHT_ADD)).status is PASSED  # spares are waiting
    directories = _spare_directories(executor)
    assert directories
    attacked = executor.run(job(attack.format(directories=directories), tests=HIDDEN_TESTS))
    assert attacked.status is PASSED, attacked.reason  # the attack itself is a right answer
    return executor.run(job(then))


def test_a_spare_whose_directory_was_changed_never_runs_a_job(one_worker):
    assert_failed(_after_tampering(one_worker, WRITE_ANSWERS, READ_ANSWERS))


def test_a_locked_out_spare_never_costs_a_right_answer(one_worker):
    result = _after_tampering(one_worker, LOCK_OUT, RIGHT_WITH_A_SCRATCH_FILE)
    assert result.status is PASSED, result.reason


def test_spares_are_kept_when_nothing_touched_them(one_worker):
    """The check discards only what was changed: in a plain run every spare serves its job (the job numbers in
    the directories' names grow by one a job, plus the spares made ahead)."""
    one_worker.run(job(RIGHT_ADD))
    first = max(int(os.path.basename(d)[3:].split("-")[0]) for d in _spare_directories(one_worker))
    for _ in range(12):
        assert one_worker.run(job(RIGHT_ADD)).status is PASSED
    last = max(int(os.path.basename(d)[3:].split("-")[0]) for d in _spare_directories(one_worker))
    assert last - first <= 12
