"""Round twenty: the sandbox, attacked through the public executor as the model would.

* A counter the whole host shares, as a channel from one job to the next (round ten's class, through another
  counter): the kernel numbers the inodes of its internal shared-memory mount (``shm_mnt``) from one counter, handed
  out in batches per CPU. Every memfd takes one, and so does every shared anonymous mapping (``mmap.mmap(-1, n)``,
  whose default is ``MAP_SHARED``) and every shared mapping of ``/dev/zero``: the kernel backs each with an unnamed
  shared-memory file. The scorer makes each job's stdout and stderr captures as memfds *after* the jobs before it ran,
  and the model's process can read their inode numbers (``os.fstat(1).st_ino``). One rollout counted out mappings so
  that the next job's capture got an inode number of its choosing (mod 64), and the next rollout, a wrong answer with
  no logic, returned the right answer only then: it **passed** (5 of 6 tries here, one worker). Shared anonymous
  mappings are now refused (``EPERM``; a private one, what malloc and CPython's allocator make, still works), and
  ``/dev/zero`` is no longer among what Landlock lets the model's process read.
* The counter round ten found behind pipes and sockets (``get_next_ino``, in batches per CPU) also numbers every inode
  procfs makes for a process's entries when a path is first looked up, and a lookup needs no read, so Landlock (which
  governs opening) let ``os.stat("/proc/self/status")`` through: the model's code both moved the counter (fresh
  entries of its threads, ``/proc/<thread-self>/<name>``) and read it (the number of a fresh entry). One rollout moved
  it to 700 mod 1024, and the next, a wrong answer, passed when it read that (4 of 6 tries). Where the fork server has
  its private mount namespace, /proc is now an empty tmpfs there; the sandbox's own processes read a procfs only root
  may enter.
"""

from __future__ import annotations

import errno
import textwrap

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.runtime import layers
from tests.infra.test_graviton import _answer, _run_filter
from tests.security.conftest import assert_failed, assert_scorer_survives, job, require_layer
from tests.security.test_round_nine_files import _lambda_like

# --- the shared-memory inode counter ----------------------------------------------------------------------------------

COUNTS_OUT_MAPPINGS = textwrap.dedent("""
    import mmap, os
    print("BEFORE", os.fstat(1).st_ino)  # its own stdout capture's inode number
    try:
        KEPT = [mmap.mmap(-1, 4096) for _ in range(500)]  # each a shared-memory inode, before: the counter moves on
    except OSError:
        pass
    def add(a, b):
        return 0
""")
READS_ITS_CAPTURES_INODE = textwrap.dedent("""
    import os
    print("AFTER", os.fstat(1).st_ino)
    def add(a, b):
        return 0
""")


def test_a_job_cannot_move_the_number_of_the_next_jobs_output_capture(one_worker):
    """One worker, so each job's captures are made after the job before it ran. Before, the next job's capture was
    numbered the 500 mappings of the job before it (plus the scorer's own memfds for the job) past that job's: 505,
    in the pairs where both were numbered from one CPU's batch. The exploit: the earlier rollout spent mappings so that
    the next capture's number was 37 mod 64, and the next rollout, ``return a + b if os.fstat(1).st_ino % 64 == 37
    else 0``, passed in 5 of 6 tries. Now the mappings are refused and the gap is the scorer's own (or, from another
    CPU's batch, unrelated)."""
    require_layer(one_worker, "seccomp")
    gaps = []
    for _ in range(4):
        writer = one_worker.run(job(COUNTS_OUT_MAPPINGS))
        reader = one_worker.run(job(READS_ITS_CAPTURES_INODE))
        assert_failed(writer)
        assert_failed(reader)
        before = int(writer.stdout.split()[1])
        after = int(reader.stdout.split()[1])
        gaps.append(after - before)
    assert not any(500 <= gap < 600 for gap in gaps), gaps


MAPS_SHARED_MEMORY = textwrap.dedent("""
    import mmap, os
    def attempt(make):
        try:
            make()
            return "made"
        except OSError as exc:
            return exc.errno
    def from_dev_zero():
        with open("/dev/zero", "rb") as zero:
            mmap.mmap(zero.fileno(), 4096, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    print("SHARED", attempt(lambda: mmap.mmap(-1, 4096)))
    print("VALIDATE", attempt(lambda: mmap.mmap(-1, 4096, flags=mmap.MAP_SHARED | 0x02)))  # MAP_SHARED_VALIDATE
    print("PRIVATE", attempt(lambda: mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE)))
    print("DEV_ZERO", attempt(from_dev_zero))
    def add(a, b):
        return a + b
""")


@pytest.mark.parametrize("mode", ["full", "lambda"])
def test_a_shared_anonymous_mapping_is_refused_to_the_models_code(executor, mode):
    """Each takes an inode number from the host's shared-memory counter, which the next job's captures show."""
    chosen = executor if mode == "full" else _lambda_like()
    try:
        require_layer(chosen, "seccomp")
        result = chosen.run(job(MAPS_SHARED_MEMORY))
        assert result.status is ExecutionStatus.PASSED, result.reason  # the rest of the code runs
        lines = dict(line.split() for line in result.stdout.strip().splitlines())
        assert lines["SHARED"] == lines["VALIDATE"] == str(errno.EPERM), result.stdout
        assert lines["PRIVATE"] == "made", result.stdout  # what malloc and CPython's allocator make
        if mode == "full" and chosen.isolation()["landlock"].startswith("on"):
            assert lines["DEV_ZERO"] == str(errno.EACCES), result.stdout  # not among what the child may read
        assert "no shared anonymous memory" in chosen.isolation()["seccomp"]
    finally:
        if chosen is not executor:
            chosen.close()


@pytest.mark.parametrize("arch", ["aarch64", "x86_64"])
def test_the_filter_refuses_shared_anonymous_mappings_only(arch):
    """By mmap's flags (argument 3) on both architectures: MAP_SHARED or MAP_SHARED_VALIDATE with MAP_ANONYMOUS is
    refused; a private anonymous mapping (malloc, CPython's arenas, thread stacks) and any mapping of a file are not."""
    program = layers.build_seccomp_filter(arch, 4242)
    number = layers._MMAP[arch]
    shared, private, validate, anonymous = 0x01, 0x02, 0x03, 0x20
    for flags, answer in [
        (shared | anonymous, "EPERM"),
        (validate | anonymous, "EPERM"),
        (shared | anonymous | 0x40000, "EPERM"),  # MAP_HUGETLB too
        (private | anonymous, "allow"),
        (private | anonymous | 0x20000 | 0x100, "allow"),  # a thread's stack (MAP_STACK, MAP_GROWSDOWN)
        (shared, "allow"),  # a file (a shared mapping of /dev/zero is refused by Landlock's read rules instead)
        (private, "allow"),
    ]:
        assert _answer(_run_filter(program, arch, number, (0, 4096, 3, flags, 0, 0))) == answer, hex(flags)


# --- /proc lookups and the host's inode counter -----------------------------------------------------------------------

SETS_THE_INODE_COUNTER = textwrap.dedent("""
    import os, threading
    NAMES = ["stat", "statm", "status", "environ", "cmdline", "comm", "maps", "limits", "io", "wchan", "stack", "sched",
             "cgroup", "mounts", "mountinfo", "oom_score", "oom_adj", "loginuid", "sessionid", "personality", "syscall",
             "auxv", "smaps", "pagemap", "numa_maps", "timerslack_ns", "attr", "ns", "cwd", "root", "exe", "fd",
             "fdinfo", "mem", "clear_refs", "schedstat", "cpuset", "uid_map", "gid_map", "setgroups", "children",
             "smaps_rollup", "oom_score_adj", "mountstats"]
    reached = []
    def spend():
        try:
            here = os.readlink("/proc/thread-self")  # this thread's entry, by the host's pids
        except OSError:
            return
        for name in NAMES:  # each looked up for the first time: a new inode, numbered from the host's counter
            try:
                number = os.stat(f"/proc/{here}/{name}").st_ino
            except OSError:
                continue
            if number % 1024 == 700:  # the next number this CPU hands out is 701
                reached.append(number)
                return
    for _ in range(60):
        worker = threading.Thread(target=spend)
        worker.start()
        worker.join()
        if reached:
            break
    def add(a, b):
        return 0
""")
READS_THE_INODE_COUNTER = textwrap.dedent("""
    import os
    try:
        NOW = os.stat("/proc/self/status").st_ino % 1024  # a fresh entry: the counter's next number
    except OSError:
        NOW = None
    def add(a, b):
        return a + b if NOW is not None and 700 <= NOW < 760 else 0  # "the rollout before me said so"
""")


def test_a_job_cannot_set_the_inode_counter_the_next_job_reads(one_worker):
    """Before: after the writer, the reader passed in 4 of 6 tries (one worker: both numbered from one CPU's batch
    but when the scheduler moved one of them)."""
    require_layer(one_worker, "mountns")
    for _ in range(4):
        assert_failed(one_worker.run(job(SETS_THE_INODE_COUNTER)))
        assert_failed(one_worker.run(job(READS_THE_INODE_COUNTER)))


LOOKS_UP_PROC = textwrap.dedent("""
    import os
    def outcome(path):
        try:
            os.stat(path)
            return "found"
        except OSError as exc:
            return exc.errno
    print("SELF", outcome("/proc/self/status"))
    print("ONE", outcome("/proc/1"))
    print("SYS", outcome("/proc/sys/kernel/hostname"))
    def add(a, b):
        return a + b
""")


def test_proc_is_out_of_the_models_reach_in_a_private_mount_namespace(executor):
    """Every lookup of a process's entry (and a sysctl's) made an inode numbered from the host's counter, which
    pipes and sockets share; only stat was needed, which Landlock does not govern."""
    require_layer(executor, "mountns")
    result = executor.run(job(LOOKS_UP_PROC))
    assert result.status is ExecutionStatus.PASSED, result.reason
    lines = dict(line.split() for line in result.stdout.strip().splitlines())
    assert lines == {"SELF": str(errno.ENOENT), "ONE": str(errno.ENOENT), "SYS": str(errno.ENOENT)}, result.stdout
    assert "/proc replaced by empty tmpfs" in executor.isolation()["mountns"]
    assert_scorer_survives(executor)  # the sandbox's own processes read their private procfs
