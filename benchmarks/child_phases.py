"""Where an untrusted child's own CPU goes, phase by phase, from its fork to its code being loaded.

The runtime has no timing of its own inside the child (every statement there costs page copies), so this
copies the ``rewardpipe`` tree to a temporary directory, inserts a mark after each step of
``Zygote._untrusted_child`` (its own CPU clock and its minor page faults, ``getrusage().ru_minflt``), and runs
empty jobs and the HumanEval canonical solutions through that copy with every isolation layer on. The child
writes its marks to the job's stderr once its code is loaded. A step whose anchor line is no longer in the
runtime stops the script with its name: update ``STEPS`` to the code.

The marks cost a few microseconds and page faults of their own (one getrusage and one clock read each); the
figures are for comparing steps and trees, not absolute. What comes after loading (the tests' calls, the exit)
is the child's total CPU minus these, from ``cpu_ms`` of each result.

    .venv/bin/python benchmarks/child_phases.py [--jobs 150] [--tree OTHER_CHECKOUT]

``--tree`` measures another checkout's runtime (an earlier commit, say: ``git worktree add /tmp/before <rev>``)
with this script's steps; a step that checkout does not have is left out.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ZYGOTE = Path("rewardpipe/execution/runtime/zygote.py")
UNTRUSTED = Path("rewardpipe/execution/runtime/untrusted.py")
# Before the child waits for each request of the tests (a line of Prepared.serve_forever): the CPU it has used
# so far, written at once (it is killed while it waits for the next one, the tests done).
SERVE_ANCHOR = "request = wire.recv_json(self.rfd)"
SERVE_MARK = (
    "__import__('os').write(2, ('SERVED %d %d\\n' % (__import__('time').clock_gettime_ns("
    "__import__('time').CLOCK_PROCESS_CPUTIME_ID), "
    "__import__('resource').getrusage(__import__('resource').RUSAGE_SELF).ru_minflt)).encode())"
)

# (a line of _untrusted_child, the name of the step it ends): a mark goes right after the line.
STEPS = (
    ("_apply_fd_plan(fd_plan)", "descriptors"),
    ("layers.prefer_for_oom_kill()", "oom_score_adj"),  # trees before 5fbbb37 (now inherited)
    ('os.environ["TMPDIR"] = job_dir', "environment"),  # trees before df27480 (now inherited)
    ("layers.apply_rlimits(cpu_seconds=None", "rlimits"),
    ("layers.drop_privileges(self.uid, self.uid)", "uid"),
    ("layers.prctl(layers.PR_SET_NO_NEW_PRIVS, 1)", "no_new_privs"),
    ("_die_with_parent(", "parent-death signal"),
    ('os.close(UNTRUSTED_FDS["confine"])', "landlock"),
    ("self.seccomp_template.load_for_pid(os.getpid())", "seccomp"),
    ("random.seed()", "random seed"),
    ("server = self.child_server.start()", "capture on"),
    ('control.send(b"R")', "ready sent"),
    ("message, fds, _, _ = socket.recv_fds(control, 1 << 16, 4)", "job received (waiting included: not CPU)"),
    ("control.close()", "job unpacked"),
    ("server.load(code)", "code loaded"),
)
MARK = (
    "_rp_marks.append(({name!r}, __import__('time').clock_gettime_ns(__import__('time').CLOCK_PROCESS_CPUTIME_ID), "
    "__import__('resource').getrusage(__import__('resource').RUSAGE_SELF).ru_minflt))"
)


OPTIONAL = {"oom_score_adj", "environment"}  # steps only some trees have


def instrumented_copy(tree: Path = ROOT) -> Path:
    """A copy of ``tree``'s package with the marks in the child's path; stops naming a step without its line."""
    copy = Path(tempfile.mkdtemp(prefix="rewardpipe-phases-"))
    shutil.copytree(tree / "rewardpipe", copy / "rewardpipe", ignore=shutil.ignore_patterns("__pycache__"))
    source = (copy / ZYGOTE).read_text().split("\n")
    child = next(i for i, line in enumerate(source) if "def _untrusted_child(" in line)
    # From the hardening (its own method, harden_untrusted, right before _untrusted_child since round thirty-seven)
    # to the end of _untrusted_child.
    start = next((i for i, line in enumerate(source) if "def harden_untrusted(" in line), child)
    end = next(i for i in range(child + 1, len(source)) if source[i].startswith("    def "))
    body = source[start:end]
    first = next(i for i, line in enumerate(body) if line.strip() == "try:")
    indent = " " * (len(body[first]) - len(body[first].lstrip()))
    body.insert(first, indent + "_rp_marks.clear()")  # a module-level list: the marks span two methods
    body.insert(first + 1, indent + MARK.format(name="forked"))
    for anchor, name in STEPS:
        at = next((i for i, line in enumerate(body) if anchor in line), None)
        if at is None and name in OPTIONAL:
            continue
        if at is None:
            raise SystemExit(f"step {name!r}: no line with {anchor!r} in _untrusted_child any more")
        while body[at].rstrip().endswith(("(", ",")):  # a call over several lines: mark after its last
            at += 1
        line = body[at]
        body.insert(at + 1, " " * (len(line) - len(line.lstrip())) + MARK.format(name=name))
    loaded = next(i for i, line in enumerate(body) if "_rp_marks.append(('code loaded'" in line)
    line = body[loaded]
    body.insert(
        loaded + 1,
        " " * (len(line) - len(line.lstrip())) + "os.write(2, ('PHASES ' + json.dumps(_rp_marks) + '\\n').encode())",
    )
    (copy / ZYGOTE).write_text("\n".join([*source[:start], *body, *source[end:], "_rp_marks = []", ""]))
    serving = (copy / UNTRUSTED).read_text().split("\n")
    at = next((i for i, line in enumerate(serving) if SERVE_ANCHOR in line), None)
    if at is None:
        raise SystemExit(f"no line with {SERVE_ANCHOR!r} in {UNTRUSTED} any more")
    # Inside the loop's try: the same indentation as the line above it.
    serving.insert(at, " " * (len(serving[at]) - len(serving[at].lstrip())) + SERVE_MARK)
    (copy / UNTRUSTED).write_text("\n".join(serving))
    return copy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=150, help="empty jobs (HumanEval: its 164 tasks)")
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout to measure (default: this one)")
    args = parser.parse_args()
    copy = instrumented_copy(args.tree.resolve())
    try:
        # The copy, not the installed tree, is what the executor and its fork servers run.
        sys.meta_path[:] = [finder for finder in sys.meta_path if "editable" not in repr(finder)]
        sys.path[:0] = [str(copy), str(ROOT / "benchmarks")]
        for name in [name for name in sys.modules if name == "rewardpipe" or name.startswith("rewardpipe.")]:
            del sys.modules[name]
        # From the copy, before benchmarks/execution.py (the jobs and executor the other figures use) puts
        # the installed tree first on the path.
        sandbox = importlib.import_module("rewardpipe.execution.sandbox")
        execution = importlib.import_module("execution")
        assert sandbox.__file__.startswith(str(copy)), sandbox.__file__
        executor = execution.make_executor(workers=1)
        empty = execution.ExecutionJob(code=execution.EMPTY_CODE, tests=execution.EMPTY_TESTS, entry_point="nothing")
        try:
            list(executor.run_batch(execution.humaneval_jobs()[:4], workers=1))  # fork server up, spares warm
            for label, jobs in (("empty job", [empty] * args.jobs), ("HumanEval", execution.humaneval_jobs())):
                executor.phase_log = log = []
                results = [executor.run(job) for job in jobs]
                report(label, results, [entry.get("cpu_ms") or {} for entry in log])
        finally:
            executor.close()
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def report(label: str, results: list, cpu_by_side: list[dict]) -> None:
    runs = []
    for result in results:
        if result.status.value != "passed":
            raise SystemExit(f"{label}: a job did not pass: {result.status} {result.reason}")
        line = next((line for line in result.stderr.splitlines() if line.startswith("PHASES ")), None)
        if line is not None:  # None: tests that never call the model's code can end before the child writes
            runs.append(json.loads(line[len("PHASES ") :]))
    if not runs:
        raise SystemExit(f"{label}: no child wrote its marks (is the instrumented copy in use?)")
    print(f"{label}: median over the {len(runs)} of {len(results)} children that wrote their marks before the end")
    names = [name for name, _, _ in runs[0]]
    for index in range(1, len(names)):
        cpu = statistics.median((run[index][1] - run[index - 1][1]) / 1000 for run in runs)
        faults = statistics.median(run[index][2] - run[index - 1][2] for run in runs)
        print(f"  {names[index]:42s} {cpu:7.1f} us {faults:5.0f} faults")
    cpu = statistics.median((run[-1][1] - run[0][1]) / 1000 for run in runs)
    faults = statistics.median(run[-1][2] - run[0][2] for run in runs)
    print(f"  {'fork to code loaded':42s} {cpu:7.1f} us {faults:5.0f} faults")
    # The tests' requests: from the code loaded to the last wait for a request (the first wait follows the
    # marks' own write, which this counts).
    served = []
    for result in results:
        waits = [line.split()[1:] for line in result.stderr.splitlines() if line.startswith("SERVED ")]
        marks = next((line for line in result.stderr.splitlines() if line.startswith("PHASES ")), None)
        if waits and marks:
            loaded = json.loads(marks[len("PHASES ") :])[-1]
            served.append((len(waits), (int(waits[-1][0]) - loaded[1]) / 1000, int(waits[-1][1]) - loaded[2]))
    if served:
        requests = statistics.median(count for count, _, _ in served)
        cpu = statistics.median(spent for _, spent, _ in served)
        faults = statistics.median(copied for _, _, copied in served)
        print(f"  {f'serving the tests ({requests:.0f} requests)':42s} {cpu:7.1f} us {faults:5.0f} faults")
    # The fork server's wait4() figure for the child (the runner's own is os.times(), in 10 ms ticks: not shown).
    known = [entry["untrusted"] for entry in cpu_by_side if isinstance(entry.get("untrusted"), (int, float))]
    if known:
        print(f"  {'the whole child, its exit included':42s} {statistics.median(known) * 1000:7.1f} us")


if __name__ == "__main__":
    main()
