"""What each side starts with now that the fork server, not each child, sets up what every child shares.

The fork server installs the children's standard streams and capture hooks in itself once, and makes each
child's job directory its working directory just before forking it; a child copies fewer pages that way. Its
trusted runner is forked from the same process, so it must take all of that off again: the hidden tests run
with the process's own streams, warnings and logging, in the fork server's own directory, whether the runner
was started first or forked later, between bursts of children."""

from __future__ import annotations

import textwrap

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.sandbox import make_executor
from tests.execution.conftest import job

# Check-format tests run in the trusted runner: each assertion is about the runner's own state.
RUNNER_STATE_TESTS = textwrap.dedent("""
    import gc, logging, os, sys, warnings

    def check(candidate):
        assert gc.isenabled(), "the fork server imports with the collector off: it must be on again here"
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
        assert "COLLECTOR True" in result.stdout  # cyclic garbage of the model's code is collected, as anywhere
