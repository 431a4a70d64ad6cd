"""Round twenty-five: the sandbox, attacked through the public executor as the model would, in full isolation and the
Lambda/Fargate mode, with the newest surface (``tests_format: "stdio"``) first in line.

* A counter the whole host shares, as a channel from one job to the next (round ten's and round twenty's class, by a
  way neither closed): a *private* anonymous mapping with ``MAP_HUGETLB`` is backed by a file on the kernel's internal
  hugetlbfs mount, and that file's inode takes a number from the counter pipes and sockets use (``get_next_ino``,
  batched per CPU). With ``MAP_NORESERVE`` the mapping succeeds on a host with no huge pages at all (this one). Round
  twenty refused *shared* anonymous mappings (huge ones included) and left private ones, what malloc makes. Every
  child holds two pipes made when its spare was forked (fds 3 and 4), so where the workers are pinned one per CPU
  (the production layout) a job counted out mappings from its own pipe's number until the pipes of the spares forked
  after it landed where it chose (mod 1,024), and the next job, a wrong answer with no logic, read
  ``os.fstat(3).st_ino`` and **passed** (4 of 8 here: the spares forked after the writer; the test below measures
  the move itself, which chance cannot fake). An anonymous ``MAP_HUGETLB`` mapping now answers ``ENOMEM``, as it does
  on a host that reserved no huge pages, so callers fall back to ordinary pages (glibc's malloc does).
* A right stdio program scored by the time other jobs took (both modes): each case of a stdio job is handed to a fork
  server on its own, and its budget (``timeout_s`` for all its cases) was measured from the job's start, so every wait
  between cases counted against it: for a worker another job held (more jobs than workers on a shared executor), for
  a neighbour's turn alone (the Lambda/Fargate mode where jobs may write: a job whose disk use cannot be told from its
  neighbours' runs again alone while the others wait), and a disturbed run before its own run alone. A unittest job's
  deadline starts when its fork server takes it. A wrong rollout beside it that slept, or held disk space, made the
  right program a ``timeout`` (a 0 by another rollout's doing). A stdio job's budget is now the time its cases ran,
  each from its hand-over to a fork server.
* A wrong stdio program's 0 made the excluded ``error`` by what it left (the Lambda/Fargate mode with ``files`` off and
  no Landlock, as a task whose code writes files needs): each case wrote named files outside its directory until its
  disk watch stopped it (it writes faster than one read every 10 ms) and failed over its budget, and the job went on
  to its next case; once the host was short, a failing case was ``host disk full``, an infrastructure error, every
  time. A unittest job over its budget fails whole; a stdio job now does too (``passed`` 0, no later case runs).
* A right stdio program that opened its input as ``os.open("/dev/stdin", os.O_RDONLY)`` failed (round twenty-three
  gave the names to ``open`` only; ``/proc`` stays covered): ``os.open`` gives them the stream's descriptor too.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import textwrap
import threading

import pytest

from rewardpipe.execution import ExecutionJob, ExecutionStatus
from rewardpipe.execution.runtime import layers
from rewardpipe.execution.sandbox import make_executor
from tests.infra.test_graviton import _answer, _run_filter
from tests.security.conftest import job, require_layer
from tests.security.test_host_disk import FILL_HOST_OUTSIDE_UNNAMED, host_tmp, lambda_host  # noqa: F401 - fixtures
from tests.security.test_round_nine_files import _lambda_like

# --- anonymous huge pages and the host's inode counter ----------------------------------------------------------------

MAP_PRIVATE, MAP_SHARED, MAP_ANONYMOUS, MAP_NORESERVE, MAP_HUGETLB = 0x02, 0x01, 0x20, 0x4000, 0x40000


@pytest.mark.parametrize("arch", ["aarch64", "x86_64"])
def test_the_filter_refuses_anonymous_huge_page_mappings(arch):
    """By mmap's flags (argument 3): anonymous with MAP_HUGETLB is ENOMEM (shared anonymous stays EPERM); a private
    anonymous mapping without it, and any mapping of a file, go through as before."""
    program = layers.build_seccomp_filter(arch, 4242)
    number = layers._MMAP[arch]
    for flags, answer in [
        (MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, "ENOMEM"),
        (MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_NORESERVE, "ENOMEM"),
        (MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | (21 << 26), "ENOMEM"),  # a size named in the flags (MAP_HUGE_2MB)
        (MAP_SHARED | MAP_ANONYMOUS | MAP_HUGETLB, "EPERM"),
        (MAP_PRIVATE | MAP_ANONYMOUS, "allow"),
        (MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, "allow"),
        (MAP_PRIVATE | MAP_HUGETLB, "allow"),  # a file's mapping: the kernel refuses the flag itself (EINVAL)
        (MAP_SHARED, "allow"),
    ]:
        assert _answer(_run_filter(program, arch, number, (0, 2 << 20, 3, flags, 0, 0))) == answer, hex(flags)


MAPS_HUGE_PAGES = textwrap.dedent("""
    import ctypes
    _libc = ctypes.CDLL(None, use_errno=True)
    _libc.mmap.restype = ctypes.c_void_p
    _libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    _at = _libc.mmap(None, 2 << 20, 3, 0x02 | 0x20 | 0x4000 | 0x40000, -1, 0)  # private, anonymous, huge, no reserve
    print("HUGE", "made" if _at not in (None, 2**64 - 1) else ctypes.get_errno())
    _at = _libc.mmap(None, 2 << 20, 3, 0x02 | 0x20 | 0x4000, -1, 0)
    print("PLAIN", "made" if _at not in (None, 2**64 - 1) else ctypes.get_errno())
    def add(a, b):
        return a + b
""")


@pytest.fixture(params=["full", "lambda"])
def either_mode(request, executor):
    """The module's executor (full isolation where this host allows it), or one in the Lambda/Fargate mode."""
    if request.param == "full":
        yield executor
        return
    chosen = _lambda_like()
    yield chosen
    chosen.close()


def test_an_anonymous_huge_page_mapping_is_refused_to_the_models_code(either_mode):
    """Before: the mapping was made in both modes (and took a number from the host's inode counter)."""
    require_layer(either_mode, "seccomp")
    result = either_mode.run(job(MAPS_HUGE_PAGES))
    assert result.status is ExecutionStatus.PASSED, result.reason  # the rest of the code runs
    assert result.stdout.split() == ["HUGE", str(errno.ENOMEM), "PLAIN", "made"], result.stdout
    assert "anonymous huge pages" in either_mode.isolation()["seccomp"]


# A right answer that moves the counter the pipes of the spares forked after it are numbered from: each huge-page
# mapping takes the next number (twenty batches of them). Before, it moved on so exactly that the next job, a wrong
# answer reading ``os.fstat(3).st_ino % 1024``, passed by a residue the writer chose (4 of 8 tries); counting out
# twenty batches makes the move plain whatever else the host numbers meanwhile.
MOVES_THE_COUNTER = textwrap.dedent("""
    import ctypes, os
    print("PIPE", os.fstat(3).st_ino)  # made when this spare was forked, numbered from the host's counter
    _libc = ctypes.CDLL(None, use_errno=True)
    _libc.mmap.restype = ctypes.c_void_p
    _libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    _libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    for _ in range(20 * 1024):
        _at = _libc.mmap(None, 2 << 20, 3, 0x02 | 0x20 | 0x4000 | 0x40000, -1, 0)
        if _at in (None, 2**64 - 1):
            break
        _libc.munmap(_at, 2 << 20)
    def add(a, b):
        return a + b
""")
READS_ITS_PIPE = textwrap.dedent("""
    import os
    print("PIPE", os.fstat(3).st_ino)
    def add(a, b):
        return a + b
""")


def test_a_job_cannot_move_the_number_of_the_next_spares_pipes():
    """Before: the spares forked after the writer had pipes numbered some 20,000 past the ones before it (a few
    dozen between bursts otherwise). The workers are pinned one per CPU, as in production: the fork server, its
    spares and the job draw from one CPU's batch of numbers."""
    cpus = len(os.sched_getaffinity(0))
    if cpus > 8:
        pytest.skip("pins a worker per CPU")
    executor = make_executor(workers=cpus)
    try:
        require_layer(executor, "seccomp")
        if not executor.isolation()["cpu"].startswith("pinned"):
            pytest.skip(f"the workers are not pinned here: {executor.isolation()['cpu']}")
        numbers = []
        for _ in range(3):  # a burst of spares is forked after every third job: some are forked after a writer
            for code in (MOVES_THE_COUNTER, READS_ITS_PIPE, READS_ITS_PIPE):
                result = executor.run(job(code, timeout_s=20.0))
                assert result.status is ExecutionStatus.PASSED, result.reason
                numbers.append(int(result.stdout.split()[1]))
        steps = [later - earlier for earlier, later in itertools.pairwise(numbers)]
        assert max(steps) < 10_000, numbers
    finally:
        executor.close()


# --- a stdio job run again alone -----------------------------------------------------------------------------------

# A right program that takes a while on each case (as a real one on a large input does).
SLOW_RIGHT_PROGRAM = textwrap.dedent("""
    import time
    a, b = map(int, input().split())
    time.sleep(0.8)
    print(a + b)
""")
FOUR_CASES = (
    '[{"input": "1 2", "output": "3"}, {"input": "2 2", "output": "4"}, {"input": "5 5", "output": "10"}, '
    '{"input": "0 7", "output": "7"}]'
)


def test_a_neighbours_turn_alone_does_not_take_a_stdio_jobs_time(lambda_host):  # noqa: F811 - the fixture
    """Before: the right program was a ``timeout`` ("case 3 of 4: wall-clock deadline of 5 s exceeded", or "case 1 of
    4" when it was disturbed too and ran again alone): the neighbour's turn alone (2 s) came out of its budget."""
    neighbour = job(
        "import time\ntime.sleep(1.8)\nHOLD = 0.5\n" + FILL_HOST_OUTSIDE_UNNAMED + "def add(a, b):\n    return 0\n",
        timeout_s=8.0,
    )
    victim = ExecutionJob(code=SLOW_RIGHT_PROGRAM, tests=FOUR_CASES, tests_format="stdio", timeout_s=5.0)
    held, right = list(lambda_host.run_batch([neighbour, victim], workers=2))
    assert held.status is ExecutionStatus.FAILED and "disk quota exceeded" in held.reason, (held.status, held.reason)
    assert right.status is ExecutionStatus.PASSED, (right.status, right.reason)
    assert right.passed == right.total == 4


def test_a_job_holding_the_only_worker_does_not_take_a_stdio_jobs_time(one_worker):
    """Full isolation, two rollouts scored at once on one worker: the neighbour (a wrong answer that sleeps) took the
    worker between the stdio job's cases. Before: the right program was a ``timeout`` after two cases.
    (Its four cases take 3.2 s of its 9 s, a wide margin for a loaded machine, the 5 s before left 1.8 s; the
    neighbour's 7 s taken between them would still put it past its deadline.)"""
    victim = ExecutionJob(code=SLOW_RIGHT_PROGRAM, tests=FOUR_CASES, tests_format="stdio", timeout_s=9.0)
    neighbour = job("import time\ntime.sleep(7)\ndef add(a, b):\n    return 0\n", timeout_s=10.0)
    results = {}
    threads = [
        threading.Thread(target=lambda name=name, one=one: results.update({name: one_worker.run(one)}))
        for name, one in (("victim", victim), ("neighbour", neighbour))
    ]
    threads[0].start()
    threads[0].join(0.3)  # its first case holds the worker when the neighbour asks for it
    threads[1].start()
    for thread in threads:
        thread.join()
    assert results["victim"].status is ExecutionStatus.PASSED, (results["victim"].status, results["victim"].reason)
    assert results["victim"].passed == 4


# --- a stdio job's own leftovers -------------------------------------------------------------------------------------

# Named files outside its directory (2 MiB each) until it is stopped or the host is full, then a wrong answer: space
# that stays on the host (without Landlock, with ``files`` off as a task that writes files needs, nothing keeps its
# writes in its directory).
LEAVES_FILES_BEHIND = textwrap.dedent("""
    import os
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.getcwd())))
    n = 0
    while True:
        try:
            with open(os.path.join(root, f"left{os.getpid()}-{n}"), "wb") as handle:
                handle.write(b"x" * (2 << 20))
        except OSError:
            break
        n += 1
    print(0)
""")


def test_a_stdio_job_cannot_make_its_own_zero_an_error_by_what_it_leaves(lambda_host):  # noqa: F811 - the fixture
    """Before: ``error`` ("case 2 of 6: host disk full: 0 MiB ... free ... during the run, so this result cannot be
    trusted"): each case failed over its budget and left what it wrote before the watch stopped it (it writes faster
    than one read every 10 ms), the job went on to its next case, and once the host was short a failing case was the
    excluded infrastructure error. A wrong program's 0 became an error, every time."""
    cases = json.dumps([{"input": "", "output": "1"}] * 6)
    result = lambda_host.run(ExecutionJob(code=LEAVES_FILES_BEHIND, tests=cases, tests_format="stdio", timeout_s=20.0))
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)
    assert (result.passed, result.total) == (0, 6)
    assert result.reason.startswith("0 of 6 cases passed"), result.reason
    assert "case 0 of 6: disk quota exceeded" in result.reason, result.reason


def test_a_right_program_may_open_its_streams_by_name_with_os_open(either_mode):
    """Before: ``FileNotFoundError`` (the link into the covered /proc), the right program's 0, in both modes."""
    code = textwrap.dedent("""
        import os
        source = os.open("/dev/stdin", os.O_RDONLY)
        total = sum(map(int, os.read(source, 1 << 16).split()))
        sink = os.open(b"/dev/stdout", os.O_WRONLY)
        os.write(sink, str(total).encode())
    """)
    cases = json.dumps([{"input": "1 2", "output": "3"}, {"input": "40 2", "output": "42"}])
    result = either_mode.run(ExecutionJob(code=code, tests=cases, tests_format="stdio", timeout_s=10.0))
    assert result.status is ExecutionStatus.PASSED, (result.reason, result.stderr)
