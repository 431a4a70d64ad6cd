"""The floor under issue 19's CLI goal: the least any fork-per-job design takes for the same batch, start-up included.

Five ways to run HumanEval x2 (the 164 canonical solutions twice, 328 jobs, 2 workers), interleaved round by
round, each from a fresh process as a user runs it:

* ``blog``: the blog's harness, a new interpreter per job, 2 threads (benchmarks/blog_harness.py);
* ``floor``: two fork servers with nothing but what a fork per job needs. Each is a fresh interpreter (the
  sandbox's own, ``-I``) that imports what rewardpipe's fork servers import for the model (``PREIMPORTS``) and
  freezes its objects, then per job forks a child that runs the code and the tests in one process and reports
  one byte. No isolation of any kind, no trusted runner, no result records, no checks between jobs: a design
  nobody should run model code with, measured only as the bound under every design that forks per job;
* ``split floor``: the floor with the tests moved out of the model's process: the server runs them, and each call
  of the model's functions is one round trip to the child over a socket (marshal both ways). What keeping the
  tests apart costs at the least, whatever else a design adds;
* ``hardened floor``: the split floor with the isolation issue 19's rules make mandatory and nothing else. Its
  two servers are rewardpipe's own fork servers' code (``zygote.Zygote``, started as boot.py starts it, with the
  configuration the CLI's would get: ``forkservers.fork_server_config``), so each sets up once what a fork server
  does (network, IPC, mount and pid namespaces, the worker's cgroup, the Landlock ruleset, the seccomp template,
  the pinned CPU), and per job makes the child's directory (its own tmpfs), its Landlock layer and descriptors
  and forks it as a fork server forks a spare (``Zygote._fork_untrusted_burst``); the child applies
  ``Zygote.harden_untrusted`` (session, descriptors, rlimits, uid, no_new_privs, parent-death signal, Landlock,
  seccomp with its own pid), reseeds and sets its CPU limit, then serves the split floor's calls over the pipes
  rewardpipe's children use. After the job the server kills what the child left (``_kill_untrusted_tree``) and
  disposes of its directory. No trusted runner, no spares waiting, no checks between jobs, no records, no scorer;
  the tests run in the server as in the split floor. A bound, not a design: the tests live in the process the
  next job's child is forked from, which issue 19's rules forbid (rewardpipe keeps them in a separate runner);
* ``rewardpipe``: ``rewardpipe exec --batch --workers 2 --json``, every layer on.

It prints the median wall time of each, the ratios, and what the goal (8x the blog) leaves: the most
rewardpipe may take, as a multiple of the floor. The hardened floor needs root (as rewardpipe's layers do); as
another uid it runs with the layers that uid has, as rewardpipe would.

    .venv/bin/python benchmarks/fork_per_job_floor.py [--rounds 3] [--interpreter /usr/bin/python3.11]
        [--show-isolation]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from execution import blog_batch, cli_batch, humaneval_jobs, timed, write_jobs
from fork_floor import IMPORT_AND_FREEZE

from rewardpipe.execution import forkservers
from rewardpipe.execution.forkservers import BOOT_SCRIPT, SandboxConfig, fork_server_config
from rewardpipe.execution.runtime.zygote import PREIMPORTS

GOAL = 8.0

# One floor server: reads a job per line on stdin, answers one byte per job on stdout ("1" passed).
FLOOR_SERVER = (
    """
import gc, importlib, json, os, sys
modules = json.loads(sys.argv[1])
"""
    + IMPORT_AND_FREEZE
    + r"""
jobs, answers = os.fdopen(0, "rb"), os.fdopen(1, "wb", buffering=0)
for line in jobs:
    job = json.loads(line)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        verdict = b"0"
        try:
            namespace = {}
            exec(compile(job["code"], "<model code>", "exec"), namespace)
            exec(compile(job["tests"], "<tests>", "exec"), namespace)
            namespace["check"](namespace[job["entry_point"]])
            verdict = b"1"
        except BaseException:
            pass
        os.write(write_end, verdict)
        os._exit(0)
    os.close(write_end)
    verdict = os.read(read_end, 1)
    os.close(read_end)
    os.waitpid(pid, 0)
    answers.write(verdict)
"""
)


# The split-trust floor: as FLOOR_SERVER, but the child runs only the model's code and the tests run in the server,
# calling the child's function through a socket (one round trip per call, marshal both ways) as a split-trust design
# must. Still no isolation, no separate trusted runner, no records: the least any design that keeps the tests out of
# the model's process pays, measured to see how much of the gap to the floor split trust alone accounts for.
SPLIT_FLOOR_SERVER = (
    """
import gc, importlib, json, marshal, os, socket, struct, sys
modules = json.loads(sys.argv[1])
"""
    + IMPORT_AND_FREEZE
    + r"""
jobs, answers = os.fdopen(0, "rb"), os.fdopen(1, "wb", buffering=0)
HEADER = struct.Struct("<I")

def send(sock, value):
    body = marshal.dumps(value)
    sock.sendall(HEADER.pack(len(body)) + body)

def receive(sock):
    header = sock.recv(4, socket.MSG_WAITALL)
    if len(header) < 4:
        return None
    size, = HEADER.unpack(header)
    return marshal.loads(sock.recv(size, socket.MSG_WAITALL) if size else b"")

for line in jobs:
    job = json.loads(line)
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        ours.close()
        try:
            namespace = {}
            exec(compile(job["code"], "<model code>", "exec"), namespace)
            # the tests may call any function the code defines (HumanEval's call helpers such as poly)
            send(theirs, [name for name, value in namespace.items() if callable(value) and name[:1] != "_"])
            while (request := receive(theirs)) is not None:
                name, args, kwargs = request
                try:
                    send(theirs, (True, namespace[name](*args, **kwargs)))
                except BaseException as exc:
                    send(theirs, (False, repr(exc)))
        except BaseException:
            pass
        os._exit(0)
    theirs.close()
    verdict = b"0"
    try:
        def stub(name):
            def call(*args, **kwargs):
                send(ours, (name, args, kwargs))
                answer = receive(ours)
                if answer is None or not answer[0]:
                    raise RuntimeError(answer)
                return answer[1]
            return call
        namespace = {name: stub(name) for name in receive(ours)}
        exec(compile(job["tests"], "<tests>", "exec"), namespace)
        namespace["check"](namespace[job["entry_point"]])
        verdict = b"1"
    except BaseException:
        pass
    ours.close()
    os.waitpid(pid, 0)
    answers.write(verdict)
"""
)


# The hardened floor: rewardpipe's fork server (zygote.Zygote, loaded as boot.py loads it) serving the split floor's
# protocol. Its children harden exactly as rewardpipe's (Zygote.harden_untrusted), then, instead of waiting for a job
# and serving the trusted runner, run the job they were forked with and answer the calls over their pipes.
HARDENED_FLOOR_SERVER = r"""
import importlib.util, json, marshal, os, random, resource, struct, sys
spec = importlib.util.spec_from_file_location("rp_boot", sys.argv[1])
boot = importlib.util.module_from_spec(spec)
spec.loader.exec_module(boot)  # non-dumpable, the runtime imported: what boot.py does before zygote.main
zygote, layers = boot.zygote, boot.zygote.layers
HEADER = struct.Struct("<I")

def send(fd, value):
    view = memoryview(HEADER.pack(len(body := marshal.dumps(value))) + body)
    while view:
        view = view[os.write(fd, view):]

def read_exact(fd, size):
    data = b""
    while len(data) < size and (chunk := os.read(fd, size - len(data))):
        data += chunk
    return data

def receive(fd):
    header = read_exact(fd, 4)
    if len(header) < 4:
        return None
    size, = HEADER.unpack(header)
    return marshal.loads(read_exact(fd, size))

class HardenedFloor(zygote.Zygote):
    job = None  # set before each fork: the child runs the job it is forked with

    def _untrusted_child(self, fd_plan, confine):
        self.harden_untrusted(fd_plan, confine)
        random.seed()  # (rewardpipe's child too: nothing of the fork server's random state reaches a job)
        if "rlimits" not in self.disabled:
            cpu = layers.job_cpu_seconds(self.job["timeout_s"])
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        calls, replies = zygote.UNTRUSTED_FDS["read"], zygote.UNTRUSTED_FDS["write"]
        try:
            namespace = {}
            exec(compile(self.job["code"], "<model code>", "exec"), namespace)
            send(replies, [name for name, value in namespace.items() if callable(value) and name[:1] != "_"])
            while (request := receive(calls)) is not None:
                name, args, kwargs = request
                try:
                    send(replies, (True, namespace[name](*args, **kwargs)))
                except BaseException as exc:
                    send(replies, (False, repr(exc)))
        except BaseException:
            pass
        os._exit(0)

server = HardenedFloor(json.loads(sys.argv[2]), boot.OOM_SCORE_ADJ_FD)
server.runner_pid = 0  # none: the tree kill spares no runner
server.start_housekeeper()
server.enter_job_cgroup()
if sys.argv[3:] == ["show"]:  # what the layers are, as the CLI's isolation report gives them
    sys.stderr.write(json.dumps(server.isolation, indent=1) + "\n")
jobs, answers = os.fdopen(0, "rb"), os.fdopen(1, "wb", buffering=0)
try:
    for line in jobs:
        server.job = job = json.loads(line)
        child = server._fork_untrusted_burst(1)[0]
        child.control.close()  # its job came with the fork
        verdict = b"0"
        try:
            def stub(name):
                def call(*args, **kwargs):
                    send(child.runner_write, (name, args, kwargs))
                    answer = receive(child.runner_read)
                    if answer is None or not answer[0]:
                        raise RuntimeError(answer)
                    return answer[1]
                return call
            namespace = {name: stub(name) for name in receive(child.runner_read)}
            exec(compile(job["tests"], "<tests>", "exec"), namespace)
            namespace["check"](namespace[job["entry_point"]])
            verdict = b"1"
        except BaseException:
            pass
        child.release_runner_ends()
        os.waitpid(child.pid, 0)
        server._kill_untrusted_tree(child.pid)  # nothing the job left runs into the next one
        server._dispose_job_dir(child.job_dir)
        answers.write(verdict)
finally:
    server.close()
"""


def floor_batch(
    path: str,
    workers: int,
    interpreter: str,
    server: str = FLOOR_SERVER,
    command: Callable[[int], list[str]] | None = None,
) -> int:
    """The batch through ``workers`` floor servers (``server``'s code, or ``command(index)``) started now; returns
    the jobs that passed."""
    with open(path, "rb") as handle:
        lines = handle.read().splitlines(keepends=True)
    processes = [
        subprocess.Popen(
            command(index) if command else [interpreter, "-I", "-c", server, json.dumps(PREIMPORTS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        for index in range(workers)
    ]
    passed = 0
    # Round robin, one job in flight per server, as each rewardpipe worker has one.
    shares = [lines[index::workers] for index in range(workers)]
    for position in range(max(len(share) for share in shares)):
        sent = []
        for process, share in zip(processes, shares, strict=True):
            if position < len(share):
                process.stdin.write(share[position])
                process.stdin.flush()
                sent.append(process)
        passed += sum(process.stdout.read(1) == b"1" for process in sent)
    for process in processes:
        process.stdin.close()
        process.wait()
    return passed


def hardened_floor_batch(path: str, workers: int, interpreter: str, show: bool = False) -> int:
    """The batch through ``workers`` hardened floor servers, configured as the CLI's fork servers would be (``show``:
    the first prints its isolation report to stderr)."""
    config = SandboxConfig.from_env()
    uid_base = config.uid_base or forkservers._derived_uid_base()
    directories = [tempfile.mkdtemp(prefix=f"rewardpipe-floor-{os.getpid()}-w{index}-") for index in range(workers)]
    for directory in directories:
        os.chmod(directory, 0o711)  # as forkservers._Worker: traversable by the jobs' uid, not listable

    def command(index: int) -> list[str]:
        settings = fork_server_config(
            index, config, uid_base + index, config.cpu_for(index, workers), os.path.join(directories[index], "w")
        )
        shown = ["show"] if show and index == 0 else []
        return [interpreter, "-I", "-B", "-c", HARDENED_FLOOR_SERVER, BOOT_SCRIPT, json.dumps(settings), *shown]

    try:
        return floor_batch(path, workers, interpreter, command=command)
    finally:
        for directory in directories:
            shutil.rmtree(directory, ignore_errors=True)


def cpu_seconds() -> float:
    """CPU time of this process and of every process it and its children waited for (the servers, the CLI and
    what each reaped: children, runners): what a design costs the machine, which varies less with the load than
    its wall time does."""
    own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--interpreter", default="/usr/bin/python3.11", help="the fork servers' interpreter")
    parser.add_argument("--show-isolation", action="store_true", help="the hardened floor's layers, once")
    args = parser.parse_args()
    jobs = humaneval_jobs()
    batch = jobs * 2
    path = write_jobs(jobs, 2)
    forkservers._compile_runtime()  # the fork servers' bytecode, as the CLI writes it before its first start
    designs: dict[str, Callable[[], int]] = {
        "blog": lambda: blog_batch(batch, args.workers),
        "floor": lambda: floor_batch(path, args.workers, args.interpreter),
        "split floor": lambda: floor_batch(path, args.workers, args.interpreter, SPLIT_FLOOR_SERVER),
        "hardened floor": lambda: hardened_floor_batch(path, args.workers, args.interpreter, args.show_isolation),
        "rewardpipe": lambda: cli_batch(path, args.workers),
    }
    seconds: dict[str, list[float]] = {name: [] for name in designs}
    cpu: dict[str, list[float]] = {name: [] for name in designs}
    passed: dict[str, int] = {}
    try:
        for number in range(1, args.rounds + 1):
            for name, run in designs.items():
                before = cpu_seconds()
                spent, passed[name] = timed(run)
                seconds[name].append(spent)
                cpu[name].append(cpu_seconds() - before)
            print(
                f"round {number}: "
                + ", ".join(f"{name} {values[-1]:.2f} s" for name, values in seconds.items())
                + f"; load average {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    finally:
        os.unlink(path)
    median = {name: statistics.median(values) for name, values in seconds.items()}
    print(f"HumanEval x2: {len(batch)} jobs, {args.workers} workers, start-up included, median of {args.rounds} rounds")
    for name in seconds:
        per_job = statistics.median(cpu[name]) / len(batch) * 1000
        print(f"  {name:14s} {median[name]:6.2f} s  ({passed[name]}/{len(batch)} passed; CPU {per_job:.2f} ms a job)")
    print(f"  blog / floor          : {median['blog'] / median['floor']:5.2f}x  (a fork per job and nothing else)")
    print(
        f"  blog / hardened floor : {median['blog'] / median['hardened floor']:5.2f}x  (a fork per job with the "
        "mandatory isolation and nothing else)"
    )
    print(f"  blog / rewardpipe     : {median['blog'] / median['rewardpipe']:5.2f}x")
    split = median["split floor"] / median["floor"]
    print(f"  split floor / floor   : {split:5.2f}  (the tests out of the model's process)")
    hardened = median["hardened floor"] / median["floor"]
    print(f"  hardened floor / floor: {hardened:5.2f}  (and the isolation every child and fork server applies)")
    print(f"  rewardpipe / floor    : {median['rewardpipe'] / median['floor']:5.2f}")
    print(
        f"  rewardpipe / hardened : {median['rewardpipe'] / median['hardened floor']:5.2f}  (the trusted runner, "
        "spares, checks between jobs, records and the scorer)"
    )
    allowed = median["blog"] / GOAL
    print(
        f"  {GOAL:.0f}x the blog allows {allowed:.2f} s, {allowed / median['floor']:.2f} times the floor, "
        f"{allowed / median['hardened floor']:.2f} times the hardened floor, for every layer, the trusted runner, "
        "the records and the checks together"
    )
    with open("/proc/loadavg") as handle:
        print("Load average at the end:", " ".join(handle.read().split()[:3]), f"on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
