"""The floor under one sandboxed job: what a fork of a process like the fork server costs, before any sandboxing.

A fresh interpreter (the fork servers' own, ``-I``) imports what a fork server imports (the runtime and its
pre-imported modules), freezes its objects as the fork server does, then forks N children with the fork server's
own fork (``layers.fork_without_interpreter_hooks``) and reaps each before the next, in two ways:

* ``bare``: the child calls ``os._exit(0)`` at once;
* ``work``: the child first compiles a two-line function and encodes a small JSON object, about the least
  Python a job runs;
* ``killed``: the child blocks reading a pipe, as a sandbox child waits for the tests' next request, and the
  parent kills it after a millisecond, as the fork server does once the tests are done (the wall time per fork
  includes that millisecond; the child's CPU is mostly tearing down its address space).

For each it prints the wall time per fork, the CPU per fork in the parent and in the child, and the child's
minor page faults (copy-on-write copies and pages faulted in again): the part of a job's cost that no change
to the sandbox's own code removes.

    .venv/bin/python benchmarks/fork_floor.py [--forks 300] [--interpreter /usr/bin/python3.11]
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# What a fork server does before its first fork, in a script with ``modules`` (names to import) defined.
IMPORT_AND_FREEZE = """
for name in modules:
    try:
        importlib.import_module(name)
    except Exception:
        pass
gc.collect()
gc.freeze()
"""

CHILD = (
    r"""
import gc, importlib, os, resource, sys, time, types
root, mode, forks = sys.argv[1], sys.argv[2], int(sys.argv[3])
for name, path in (("rewardpipe", root + "/rewardpipe"), ("rewardpipe.execution", root + "/rewardpipe/execution")):
    module = types.ModuleType(name)
    module.__path__ = [path]
    sys.modules[name] = module
from rewardpipe.execution.runtime import layers, zygote
modules = zygote.PREIMPORTS
"""
    + IMPORT_AND_FREEZE
    + r"""

def usage():
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime, children.ru_minflt

started, before = time.perf_counter(), usage()
for _ in range(forks):
    if mode == "killed":
        read_end, write_end = os.pipe()
    pid = layers.fork_without_interpreter_hooks()
    if pid == 0:
        if mode == "work":
            import json
            compile("def f(x):\n    return x + 1\n", "job", "exec")
            json.dumps({"a": [1, 2, 3]})
        if mode == "killed":
            os.read(read_end, 1)
        os._exit(0)
    if mode == "killed":
        time.sleep(0.001)
        os.kill(pid, 9)
    os.waitpid(pid, 0)
    if mode == "killed":
        os.close(read_end)
        os.close(write_end)
wall, after = time.perf_counter() - started, usage()
parent, child, faults = ((after[i] - before[i]) / forks for i in range(3))
print(f"{mode:6s}  wall {wall / forks * 1000:6.3f} ms/fork  parent CPU {parent * 1000:6.3f} ms"
      f"  child CPU {child * 1000:6.3f} ms  child minor faults {faults:5.0f}")
"""
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--forks", type=int, default=300)
    parser.add_argument("--interpreter", default="/usr/bin/python3.11", help="the fork servers' interpreter")
    args = parser.parse_args()
    for mode in ("bare", "work", "killed", "bare", "work", "killed"):
        subprocess.run([args.interpreter, "-I", "-c", CHILD, str(ROOT), mode, str(args.forks)], check=True)
    with open("/proc/loadavg") as handle:
        print("load average:", " ".join(handle.read().split()[:3]))


if __name__ == "__main__":
    main()
