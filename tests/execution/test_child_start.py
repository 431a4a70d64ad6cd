"""What each side starts with now that the fork server, not each child, sets up what every child shares.

The fork server installs the children's standard streams and capture hooks in itself once, and makes each
child's job directory its working directory just before forking it; a child copies fewer pages that way. Its
trusted runner is forked from the same process, so it must take all of that off again: the hidden tests run
with the process's own streams, warnings and logging, in the fork server's own directory, whether the runner
was started first or forked later, between bursts of children."""

from __future__ import annotations

import textwrap
import time

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.sandbox import make_executor
from tests.execution.conftest import job

# Check-format tests run in the trusted runner: each assertion is about the runner's own state.
RUNNER_STATE_TESTS = textwrap.dedent("""
    import ctypes, gc, logging, os, sys, warnings

    def check(candidate):
        assert gc.isenabled(), "the fork server imports with the collector off: it must be on again here"
        # TMPDIR is the runner's own directory (round thirty-four), never a child's job directory
        tmpdir = os.environ.get("TMPDIR")
        assert "HOME" not in os.environ, "a child's job directory reached the runner"
        assert tmpdir is None or not any(p.startswith("job") for p in tmpdir.split(os.sep)), tmpdir
        libc = ctypes.CDLL(None)
        libc.getenv.restype = ctypes.c_char_p
        assert libc.getenv(b"HOME") is None and libc.getenv(b"TMPDIR") == (tmpdir and tmpdir.encode())
        assert type(sys.stdout).__name__ != "_Tee", "the runner writes through the children's capture"
        assert type(sys.stderr).__name__ != "_Tee", "the runner writes through the children's capture"
        assert not any(type(h).__name__ == "_LogCapture" for h in logging.root.handlers), logging.root.handlers
        assert logging.root.level == logging.WARNING, logging.root.level
        assert ("always", None, Warning, None, 0) not in warnings.filters, warnings.filters[:3]
        assert not os.path.basename(os.getcwd()).startswith("job"), os.getcwd()
        assert candidate() == 1
""")

MODEL_STATE_CODE = textwrap.dedent("""
    import logging, os, sys
    here = os.getcwd()
    print("PLACE", os.path.basename(here).startswith("job"), here == os.environ["HOME"] == os.environ["TMPDIR"])
    print("FRESH", not os.path.exists("scratch.txt"))  # no child before it worked here
    with open("scratch.txt", "w") as handle:
        handle.write("x")
    print("WRITABLE", os.path.exists(os.path.join(here, "scratch.txt")))
    print("HOOKS", type(sys.stdout).__name__, logging.root.level)
    import ctypes
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    print("LIBC_ENV", libc.getenv(b"HOME") == libc.getenv(b"TMPDIR") == here.encode())  # what C code reads
    import gc
    print("COLLECTOR", gc.isenabled())

    def one():
        return 1
""")


@pytest.fixture(scope="module")
def recycling_executor():
    # A runner replaced after every second job: most runners are forked after bursts of children.
    executor = make_executor(workers=1, runner_recycle_jobs=2)
    yield executor
    executor.close()


def test_the_runner_has_none_of_the_childrens_setup_first_or_forked_later(recycling_executor):
    jobs = [job("def one():\n    return 1\n", RUNNER_STATE_TESTS, "one", tests_format="check") for _ in range(7)]
    results = list(recycling_executor.run_batch(jobs))
    assert [result.status for result in results] == [ExecutionStatus.PASSED] * 7, [r.reason for r in results]


def test_each_child_starts_in_its_own_directory_with_the_capture_installed(recycling_executor):
    results = list(
        recycling_executor.run_batch(
            [
                job(MODEL_STATE_CODE, "def check(c):\n    assert c() == 1\n", "one", tests_format="check")
                for _ in range(5)
            ]
        )
    )
    for result in results:
        assert result.status is ExecutionStatus.PASSED, result.reason
        assert "PLACE True True" in result.stdout
        assert "FRESH True" in result.stdout
        assert "WRITABLE True" in result.stdout
        assert "HOOKS _Tee 1" in result.stdout
        assert "LIBC_ENV True" in result.stdout
        assert "COLLECTOR True" in result.stdout  # cyclic garbage of the model's code is collected, as anywhere


OOM_CODE = textwrap.dedent("""
    with open("/proc/self/oom_score_adj") as handle:
        print("OOM_SCORE_ADJ", handle.read().strip())

    def one():
        return 1
""")


def test_children_are_the_oom_killers_first_choice_and_the_fork_server_is_not():
    """Each child inherits oom_score_adj 1000 from the fork server, which raises its own only while it forks
    them: after bursts of children, and between them, it is back at its own value. (Landlock and its
    fallback, chroot, are off here: they hide /proc from the child; so is the private mount namespace, which covers
    /proc since round twenty.)"""
    executor = make_executor(workers=1, disable=frozenset({"landlock", "chroot", "mountns"}))
    try:
        results = list(
            executor.run_batch(
                [job(OOM_CODE, "def check(c):\n    assert c() == 1\n", "one", tests_format="check") for _ in range(9)]
            )
        )
        assert all(result.status is ExecutionStatus.PASSED for result in results), [r.reason for r in results]
        assert all("OOM_SCORE_ADJ 1000" in result.stdout for result in results), [r.stdout for r in results]
        # Read while it idles: after the last reply it may be forking the next burst (raised meanwhile).
        server = executor._workers[0].process.pid
        deadline = time.monotonic() + 10
        while True:
            with open(f"/proc/{server}/oom_score_adj") as handle:
                own = handle.read().strip()
            if own != "1000" or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert own != "1000", "the fork server stayed the OOM killer's first choice"
    finally:
        executor.close()
