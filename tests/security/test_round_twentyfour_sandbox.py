"""Round twenty-four: the Lambda/Fargate mode (one uid for every job, the fork servers and, on Lambda, the scorer; no
Landlock, no namespaces, no cgroups; the ``files`` layer in Landlock's place), attacked for what a job can do to a
job beside it or after it, the trusted runner, the fork server or the scorer through what their shared uid gives it.

* A count the kernel keeps per uid, readable without privilege: ``quotactl_fd`` (Linux 5.14, quotactl by a
  descriptor instead of a device path) was allowed while ``quotactl`` itself was denied. On a file system with user
  quotas, ``Q_GETQUOTA`` for the caller's own uid needs no privilege and returns the space and inodes that uid holds
  there: every job of the shared uid moves that count and every job beside it or after it reads it, round nineteen's
  free-space channel (``statfs``), per uid instead of per file system. Found by listing what the filter lets
  through, syscall by syscall; this host has no file system with quotas (the call reached the kernel and answered
  ``ESRCH``), so the channel itself is argued from the kernel's rules, not reproduced. ``quotactl_fd`` is now denied
  (``EPERM``) everywhere, as ``quotactl`` is.
* A hint kept on an inode: ``fcntl(F_SET_RW_HINT)`` sets a file's write-lifetime hint for its owner on a descriptor
  opened read-only, and the hint stays on the inode for any later process to read (``F_GET_RW_HINT``). Where the
  jobs run as the uid that owns a directory they may open (a non-root scorer's own ``TMPDIR``, as the code runner
  image's ``/scratch``, or a Lambda ``/tmp`` owned by the function's user), one job's right answer set it and the
  next job, a wrong answer with no logic, read it and **passed**. ``F_SET_RW_HINT`` is now refused (``EPERM``), and
  ``F_SET_FILE_RW_HINT`` (the same on the open file description, Linux before 5.19) with it.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import textwrap

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.runtime import layers
from tests.infra.test_graviton import _answer, _run_filter
from tests.security.conftest import RIGHT_ADD, assert_failed, job
from tests.security.test_round_nine_files import SANDBOX_UID, _lambda_like

QUOTACTL_FD = 443  # the same number on every architecture (added after the tables were unified)


@pytest.mark.parametrize("arch", ["aarch64", "x86_64"])
@pytest.mark.parametrize("read_only_files", [False, True])
def test_the_filter_refuses_quotactl_by_descriptor(arch, read_only_files):
    program = layers.build_seccomp_filter(arch, 4242, read_only_files=read_only_files, refuse_disk_counts=True)
    q_getquota_usrquota = 0x800007 << 8
    assert _answer(_run_filter(program, arch, QUOTACTL_FD, (3, q_getquota_usrquota, 65530))) == "EPERM"


# What the uid holds on the file system of the job's own directory, as the job beside it would read it.
READS_THE_UIDS_QUOTA = textwrap.dedent("""
    import ctypes, os
    _libc = ctypes.CDLL(None, use_errno=True)
    _usage = ctypes.create_string_buffer(72)  # struct if_dqblk
    _fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    _answer = _libc.syscall(443, _fd, 0x800007 << 8, os.getuid(), _usage)  # Q_GETQUOTA, USRQUOTA
    print("quotactl_fd", _answer, ctypes.get_errno())
    def add(a, b):
        return a + b
""")


def test_a_job_cannot_read_its_uids_quota():
    """Before: the call reached the kernel (``ESRCH`` here, no quotas; the uid's usage where there are)."""
    executor = _lambda_like()
    try:
        result = executor.run(job(READS_THE_UIDS_QUOTA))
    finally:
        executor.close()
    assert result.status is ExecutionStatus.PASSED, result.reason
    assert f"quotactl_fd -1 {errno.EPERM}" in result.stdout, result.stdout


# A right answer that leaves a write-lifetime hint on a directory its uid owns; then a wrong answer with no logic that
# answers right only when it finds the hint.
SETS_A_HINT = (
    """
import ctypes, os
_libc = ctypes.CDLL(None, use_errno=True)
_fd = os.open({path!r}, os.O_RDONLY | os.O_DIRECTORY)
_hint = ctypes.c_uint64(4)  # RWH_WRITE_LIFE_LONG
print("set", _libc.fcntl(_fd, 1036, ctypes.byref(_hint)), ctypes.get_errno())  # F_SET_RW_HINT
"""
    + RIGHT_ADD
)
READS_THE_HINT = """
import ctypes, os
_libc = ctypes.CDLL(None, use_errno=True)
_fd = os.open({path!r}, os.O_RDONLY | os.O_DIRECTORY)
_hint = ctypes.c_uint64(0)
_libc.fcntl(_fd, 1035, ctypes.byref(_hint))  # F_GET_RW_HINT
print("hint", _hint.value)
def add(a, b):
    return a + b if _hint.value == 4 else 0
"""


def test_a_job_cannot_leave_a_hint_on_an_inode_for_the_next_job():
    """Before: the writer set the hint (0), the reader found 4 and **passed**."""
    shared = tempfile.mkdtemp(prefix="rewardpipe-r24-")
    os.chmod(shared, 0o755)
    executor = _lambda_like()
    try:
        os.chown(shared, SANDBOX_UID, SANDBOX_UID)  # the jobs' uid owns it, as a non-root scorer owns its TMPDIR
        writer = executor.run(job(SETS_A_HINT.format(path=shared)))
        reader = executor.run(job(READS_THE_HINT.format(path=shared)))
    finally:
        executor.close()
        shutil.rmtree(shared)
    assert writer.status is ExecutionStatus.PASSED, writer.reason
    assert f"set -1 {errno.EPERM}" in writer.stdout, writer.stdout
    assert "hint 0" in reader.stdout, reader.stdout
    assert_failed(reader)


@pytest.mark.parametrize("arch", ["aarch64", "x86_64"])
def test_the_filter_refuses_write_lifetime_hints_only(arch):
    program = layers.build_seccomp_filter(arch, 4242)
    fcntl = layers._FILE_CALLS[arch]["fcntl"]
    assert _answer(_run_filter(program, arch, fcntl, (3, 1036, 0))) == "EPERM"  # F_SET_RW_HINT
    assert _answer(_run_filter(program, arch, fcntl, (3, 1038, 0))) == "EPERM"  # F_SET_FILE_RW_HINT
    assert _answer(_run_filter(program, arch, fcntl, (3, 1035, 0))) == "allow"  # F_GET_RW_HINT
