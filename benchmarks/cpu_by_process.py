"""Where the CPU of ``rewardpipe exec --batch`` goes, by process and by kernel path, sampled with Linux perf.

Runs the CLI on the 164 HumanEval canonical solutions ``--copies`` times (328 jobs by default, ``--workers 2``,
as benchmarks/execution.py does) under ``perf record -a -g``, then gives every sample to

* a process role: the scorer (the CLI and its threads), the fork servers (the CLI's children), the trusted
  runners (``rp-runner``), the housekeepers (``rp-housekeeper``), the untrusted children (every other process
  a fork server forked: one per job, plus the spares still waiting at the end), and everything else on the
  host (idle included);
* what the sample was doing: Python and libraries in user space, ``fork`` (the kernel copying page tables),
  ``exit`` (tearing an address space down), a copy-on-write page fault, another page fault, or another system
  call, named.

It prints CPU per job (milliseconds, all the run's samples divided by the jobs, start-up included) for each
role and, within each role, each kind of work. Sampling at 2 kHz on both CPUs, so a figure under ~0.05 ms per
job is noise. Needs ``perf`` (Debian: ``linux-perf``) and the right to sample the whole host (root, or
``kernel.perf_event_paranoid`` at -1).

    .venv/bin/python benchmarks/cpu_by_process.py [--copies 2] [--workers 2] [--keep perf.data]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from execution import humaneval_jobs, write_jobs

from rewardpipe.execution.runtime.zygote import HOUSEKEEPER_NAME, RUNNER_NAME

ROLES = ("scorer", "fork servers", "trusted runners", "housekeepers", "untrusted children", "rest of the host")
FORK = re.compile(r"PERF_RECORD_FORK\((\d+):(\d+)\):\((\d+):(\d+)\)")
COMM = re.compile(r"PERF_RECORD_COMM(?: exec)?: (.*):(\d+)/(\d+)")
SAMPLE = re.compile(r"^\s*(\S.*?)\s+(\d+)/(\d+)\s*$")
SYSCALL = re.compile(r"^__(?:x64|do|se|ia32)_sys_(\w+)")


def record(jobs_path: str, workers: int, data: str) -> int:
    cli = os.path.join(os.path.dirname(sys.executable), "rewardpipe")
    command = ["perf", "record", "-a", "-g", "-F", "2000", "-o", data, "--", cli, "exec", "--batch", jobs_path]
    completed = subprocess.run(
        [*command, "--workers", str(workers), "--json"], capture_output=True, text=True, check=False
    )
    if completed.returncode != 0 and not completed.stdout:
        sys.exit(f"perf record failed: {completed.stderr.strip()[-500:]}")
    return sum(1 for line in completed.stdout.splitlines() if '"status": "passed"' in line)


def kind(frames: list[str]) -> str:
    """What one sample was doing, from its call chain (innermost frame first)."""
    if not frames or not frames[0].endswith("[kernel.kallsyms])"):
        return "user space"
    names = [frame.split(" ", 1)[0] for frame in frames]
    if "do_exit" in names:
        return "exit (address space torn down)"
    if "copy_process" in names:
        return "fork (page tables copied)"
    if "asm_exc_page_fault" in names:
        return "page fault: copy on write" if "do_wp_page" in names else "page fault: other"
    calls = [match.group(1) for name in names if (match := SYSCALL.match(name))]
    return f"syscall {calls[-1]}" if calls else "kernel, other"


def attribute(data: str) -> tuple[dict[str, collections.Counter], int]:
    """Samples per role and kind, and the sampling frequency's total (samples)."""
    script = subprocess.run(
        ["perf", "script", "-i", data, "--show-task-events", "-F", "comm,pid,tid,ip,sym,dso"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    parent: dict[int, int] = {}
    name: dict[int, str] = {}
    scorer: int | None = None
    samples: list[tuple[int, list[str]]] = []
    current: list[str] | None = None
    for line in script.splitlines():
        if "PERF_RECORD_" in line:
            if match := FORK.search(line):
                child, _, father, _ = (int(group) for group in match.groups())
                if child != father:  # a new process, not a thread
                    parent[child] = father
            elif match := COMM.search(line):
                pid = int(match.group(2))
                name[pid] = match.group(1)
                if match.group(1) == "rewardpipe" and scorer is None:
                    scorer = pid
            continue
        if not line.strip():
            current = None
            continue
        if current is None and (match := SAMPLE.match(line)):
            current = []
            samples.append((int(match.group(2)), current))
        elif current is not None:
            current.append(line.strip().split(" ", 1)[1] if " " in line.strip() else line.strip())
    servers = {pid for pid, father in parent.items() if father == scorer}

    def role(pid: int) -> str:
        if pid == scorer:
            return "scorer"
        if pid in servers:
            return "fork servers"
        ancestor, seen = parent.get(pid), 0
        while ancestor is not None and ancestor not in servers and seen < 64:
            ancestor, seen = parent.get(ancestor), seen + 1
        if ancestor is None or ancestor not in servers:
            return "rest of the host"
        if name.get(pid) == RUNNER_NAME:
            return "trusted runners"
        if name.get(pid) == HOUSEKEEPER_NAME:
            return "housekeepers"
        return "untrusted children"

    by_role: dict[str, collections.Counter] = {r: collections.Counter() for r in ROLES}
    for pid, frames in samples:
        by_role[role(pid)][kind(frames)] += 1
    return by_role, len(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=2, help="times each HumanEval task is in the batch")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--keep", help="keep perf's data file here")
    parser.add_argument("--top", type=int, default=6, help="kinds of work shown per role")
    args = parser.parse_args()
    if shutil.which("perf") is None:
        sys.exit("perf is not installed (Debian: apt-get install linux-perf)")
    jobs = humaneval_jobs()
    jobs_path = write_jobs(jobs, args.copies)
    count = len(jobs) * args.copies
    with tempfile.TemporaryDirectory() as scratch:
        data = args.keep or os.path.join(scratch, "perf.data")
        passed = record(jobs_path, args.workers, data)
        by_role, total = attribute(data)
    os.unlink(jobs_path)
    ms_per_sample = 1000 / 2000  # -F 2000
    print(f"rewardpipe exec --batch: {count} jobs ({passed} passed), {args.workers} workers; {total} samples")
    print(f"CPU per job in ms (all samples / {count}), by process role and kind of work:")
    for role_name in ROLES:
        kinds = by_role[role_name]
        role_total = sum(kinds.values())
        print(f"  {role_name:20s} {role_total * ms_per_sample / count:6.2f}")
        for what, samples in kinds.most_common(args.top):
            print(f"      {what:38s} {samples * ms_per_sample / count:6.2f}")
    with open("/proc/loadavg") as handle:
        print("Load average at the end:", " ".join(handle.read().split()[:3]), f"on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
