"""Where the start-up of ``rewardpipe exec --batch`` goes: the scorer's steps and each fork server's, on one clock.

Copies the ``rewardpipe`` tree next to this checkout (not under /tmp: a fork server whose sandbox is there has no
private mount namespace, and setting one up is part of its start-up), inserts a time stamp after each step below
(``time.monotonic()``, one clock for the whole host, and the process's CPU time), and runs the command on a batch
of ``--jobs`` HumanEval jobs ``--runs`` times as a fresh process. It prints the median of each stamp, from the
command's start, and its process's CPU time at that point. A step whose anchor line is no longer in the tree
stops the script with its name: update ``SCORER_STEPS`` or ``FORK_SERVER_STEPS`` to the code.

The stamps cost a few microseconds each; the figures are for seeing which process the first job waits for.

    .venv/bin/python benchmarks/startup_path.py [--runs 10] [--jobs 1] [--workers 2]
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from execution import humaneval_jobs, write_jobs

ROOT = Path(__file__).resolve().parents[1]
MARKS_ENV = "REWARDPIPE_STARTUP_MARKS"  # the scorer's: where to write its stamps

# A stamp: (name, monotonic seconds, CPU seconds of this process), appended to a file named after the process.
STAMP = "__import__('rewardpipe._startup_marks', fromlist=['x']).stamp({name!r})"
MARKS_MODULE = '''"""Inserted by benchmarks/startup_path.py: time stamps of the start-up, one file per process."""
import os
import time

DIRECTORY = {directory!r}


def stamp(name):
    with open(os.path.join(DIRECTORY, "marks." + str(os.getpid())), "a") as handle:
        handle.write(f"{{name}}\\t{{time.monotonic():.6f}}\\t{{time.process_time():.6f}}\\n")
'''

# (file, the line a stamp goes after, the step it ends): "<" in front, the stamp goes before the line; "CONTEXT|" in
# front, the line is the first after the first line holding CONTEXT. Each process's first stamp of a name counts.
SCORER_STEPS = (
    ("rewardpipe/__main__.py", "plan = exec_sandbox_plan(sys.argv[1:])", "scorer: command line read"),
    ("rewardpipe/__main__.py", "_prestart(plan)", "scorer: fork servers spawned"),
    ("rewardpipe/__main__.py", "load(sys.argv[1:2])", "scorer: the command imported"),
    ("rewardpipe/cli/exec_cmd.py", "executor.warm_up(workers)", "scorer: executor made"),
    ("rewardpipe/cli/exec_cmd.py", "entries, jobs = _read_batch(batch)", "scorer: batch read and validated"),
    ("rewardpipe/execution/forkservers.py", "<socket.send_fds(self.channel,", "scorer: a job sent"),
    ("rewardpipe/cli/exec_cmd.py", "def _run_batch(|<executor.close()", "scorer: results written"),
    ("rewardpipe/cli/exec_cmd.py", "def _run_batch(|executor.close()", "scorer: fork servers closed"),
)
FORK_SERVER_STEPS = (
    (
        "rewardpipe/execution/runtime/boot.py",
        "from rewardpipe.execution.runtime import zygote",
        "fork server: imported",
    ),
    ("rewardpipe/execution/runtime/zygote.py", "<self._detect()", "fork server: pre-imports and streams"),
    ("rewardpipe/execution/runtime/zygote.py", "self._detect()", "fork server: layers detected"),
    ("rewardpipe/execution/runtime/zygote.py", "zygote = Zygote(config, oom_fd)", "fork server: set up"),
    ("rewardpipe/execution/runtime/zygote.py", "zygote.enter_job_cgroup()", "fork server: runner and housekeeper"),
    ("rewardpipe/execution/runtime/zygote.py", "zygote.after_reply()  # the first", "fork server: first spares"),
    (
        "rewardpipe/execution/runtime/zygote.py",
        "def main(|<message, fds, _, _ = socket.recv_fds(channel",
        "fork server: hello sent",
    ),
)


def instrumented_copy(marks: Path) -> Path:
    """A copy of this checkout's package, beside it, with a stamp after (or before) each step's line."""
    copy = Path(tempfile.mkdtemp(prefix=".startup-path-", dir=ROOT))
    shutil.copytree(ROOT / "rewardpipe", copy / "rewardpipe", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "rewardpipe" / "_startup_marks.py").write_text(MARKS_MODULE.format(directory=str(marks)))
    by_file: dict[str, list[tuple[str, str]]] = collections.defaultdict(list)
    for file, anchor, name in SCORER_STEPS + FORK_SERVER_STEPS:
        by_file[file].append((anchor, name))
    for file, steps in by_file.items():
        lines = (copy / file).read_text().split("\n")
        for anchor, name in steps:
            context, _, anchor = anchor.rpartition("|")
            before = anchor.startswith("<")
            text = anchor.lstrip("<")
            start = next((i for i, line in enumerate(lines) if context in line), None) if context else 0
            at = (
                next(
                    (i for i in range(start, len(lines)) if text in lines[i] and "_startup_marks" not in lines[i]), None
                )
                if start is not None
                else None
            )
            if at is None:
                raise SystemExit(f"step {name!r}: no line with {text!r} in {file} any more")
            line = lines[at]
            indent = " " * (len(line) - len(line.lstrip()))
            if before:
                lines.insert(at, indent + STAMP.format(name=name))
                continue
            while lines[at].rstrip().endswith(("(", ",")):  # a call over several lines: after its last
                at += 1
            lines.insert(at + 1, indent + STAMP.format(name=name))
        (copy / file).write_text("\n".join(lines))
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(copy / "rewardpipe")], check=True)
    return copy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=1, help="HumanEval jobs in the batch")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    marks = Path(tempfile.mkdtemp(prefix=".startup-marks-", dir=ROOT))
    os.chmod(marks, 0o777)  # (fork servers that are not root write here too)
    copy = instrumented_copy(marks)
    batch = write_jobs(humaneval_jobs()[: args.jobs], 1)
    seen: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    totals = []
    try:
        for _ in range(args.runs):
            for old in marks.iterdir():
                old.unlink()
            started = time.monotonic()
            completed = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "rewardpipe",
                    "exec",
                    "--batch",
                    batch,
                    "--workers",
                    str(args.workers),
                    "--json",
                ],
                env={**os.environ, "PYTHONPATH": str(copy)},
                cwd=copy,  # (python -m puts the working directory first: never this checkout's package)
                capture_output=True,
                check=False,
            )
            totals.append((time.monotonic() - started) * 1000)
            if completed.returncode != 0:
                raise SystemExit(f"the command failed: {completed.stderr.decode(errors='replace')[-2000:]}")
            for path in marks.iterdir():
                first: dict[str, tuple[float, float]] = {}
                for line in path.read_text().splitlines():
                    name, at, cpu = line.split("\t")
                    first.setdefault(name, ((float(at) - started) * 1000, float(cpu) * 1000))
                for name, value in first.items():
                    seen[name].append(value)
    finally:
        shutil.rmtree(copy, ignore_errors=True)
        shutil.rmtree(marks, ignore_errors=True)
        os.unlink(batch)
    print(f"rewardpipe exec --batch ({args.jobs} job(s), --workers {args.workers}): medians of {args.runs} runs")
    print(f"  {'step':44s} {'at':>8s} {'its process CPU':>16s}")
    for name, values in sorted(seen.items(), key=lambda item: statistics.median(v[0] for v in item[1])):
        at = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        print(f"  {name:44s} {at:6.0f} ms {cpu:13.0f} ms")
    print(f"  {'the command, start to exit':44s} {statistics.median(totals):6.0f} ms")
    print(f"Load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
