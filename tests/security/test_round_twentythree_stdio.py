"""Round twenty-three on the stdio test format (``tests_format="stdio"``): the model's whole program, one hardened
child per case, its stdout compared in the scorer.

* **The program could unwind its child into the fork server's code.** ``run_program`` ended with
  ``os._exit(run_program(...))``: anything that escaped it (a program that deleted ``sys.stdout``, which the final
  flush then read) unwound the hardened child back through the fork server's frames that had forked it, so the
  model's process ran the fork server's own error paths (its ``main`` tried to send a "fatal" reply on the fork
  server's channel) and a right program failed with the fork server's traceback on its stderr. The child now ends
  where the program ends, whatever escapes (exit 1), and the final flush reads ``sys.stdout``/``sys.stderr`` only
  if they still exist.
* **A right program failed for how it ends, where ``python program.py`` passes** (the honest side: a 0 for a right
  answer is a wrong reward). Interpreter exit was imitated in part only: ``atexit`` functions never ran (output
  printed from one was lost), ``sys.__stdout__`` was not the program's stdout (what it wrote there was never
  flushed), a file object on fd 1 the program never closed was never finalized (its buffer was lost), non-daemon
  threads started by another thread while the first ones were waited for were not waited for, a
  ``ThreadPoolExecutor`` never shut down kept its idle workers (a right answer ran into the deadline: ``timeout``;
  interpreter exit tells them to end first), ``__file__`` was
  undefined (a local-testing template that reads it raised ``NameError``), and ``sys.exit``'s
  status differed from Python's (``sys.exit(False)`` was 1, ``sys.exit(2**70)`` 0 instead of 255). The child now
  does what interpreter exit does, in its order: waits until no non-daemon thread is left, runs the program's
  ``atexit`` functions (never the fork server's: they are cleared first), finalizes ``__main__``'s objects, then
  flushes; exit statuses are Python's.
* **A right program that opened its streams by name failed** (the honest side). ``open("/dev/stdin")``,
  ``sys.stdin = open("/dev/stdin")``, ``open("/dev/stdout", "w")``, ``/dev/fd/N``, ``/proc/self/fd/N`` and
  ``pathlib.Path("/dev/stdin")`` are links into /proc/self/fd, which the child cannot see (/proc is covered): a
  ``FileNotFoundError``, so the model's 0 for a right answer. In the stdio child ``open`` (``builtins.open`` and
  ``io.open``) gives these names a duplicate of the stream's descriptor; any other path opens as before. /proc
  stays covered.
"""

from __future__ import annotations

import json

import pytest

from rewardpipe.execution import ExecutionJob, ExecutionStatus

SUM_CASES = json.dumps([{"input": "1 2\n", "output": "3\n"}, {"input": "10 20", "output": "30"}])
ANSWER = "import sys\nprint(sum(map(int, sys.stdin.read().split())))\n"


def stdio_job(code: str, tests: str = SUM_CASES) -> ExecutionJob:
    return ExecutionJob(code=code, tests=tests, tests_format="stdio", timeout_s=10.0)


@pytest.mark.parametrize(
    "tail",
    ["del sys.stdout\n", "sys.stdout.flush()\ndel sys.stdout, sys.stderr\n"],
    ids=["stdout-deleted", "both-deleted"],
)
def test_nothing_the_program_does_unwinds_its_child_into_the_fork_server(executor, tail):
    result = executor.run(stdio_job(ANSWER + tail))
    assert result.status is ExecutionStatus.PASSED, (result.reason, result.stderr)
    assert "zygote" not in result.stderr and "boot.py" not in result.stderr


HONEST_ENDINGS = {
    "atexit": "import atexit, sys\nanswer = []\natexit.register(lambda: print(*answer))\n"
    "answer.append(sum(map(int, sys.stdin.read().split())))\n",
    "sys.__stdout__": "import sys\nsys.__stdout__.write(str(sum(map(int, sys.stdin.read().split()))) + '\\n')\n",
    "unclosed fd-1 writer": (
        "import os, sys\nout = os.fdopen(1, 'w')\nout.write(str(sum(map(int, sys.stdin.read().split()))))\n"
    ),
    "a thread started by a thread": (
        "import sys, threading, time\n"
        "def late():\n    time.sleep(0.2)\n    print(sum(map(int, sys.stdin.read().split())))\n"
        "def spawner():\n    time.sleep(0.1)\n    threading.Thread(target=late).start()\n"
        "threading.Thread(target=spawner).start()\n"
    ),
    "a ThreadPoolExecutor never shut down": (
        "import sys\nfrom concurrent.futures import ThreadPoolExecutor\npool = ThreadPoolExecutor(2)\n"
        "print(pool.submit(lambda: sum(map(int, sys.stdin.read().split()))).result())\n"
    ),
    "sys.exit(False)": ANSWER + "sys.exit(False)\n",
    "sys.exit(256)": ANSWER + "sys.exit(256)\n",
    "__file__ (a local-testing template)": (
        "import os, sys\nhere = os.path.dirname(os.path.abspath(__file__))\n"
        "if os.path.exists(os.path.join(here, 'input.txt')):\n    sys.stdin = open(os.path.join(here, 'input.txt'))\n"
        "print(sum(map(int, sys.stdin.read().split())))\n"
    ),
    "recursion in a big-stack thread": (
        "import sys, threading\nsys.setrecursionlimit(10**6)\nthreading.stack_size(1 << 27)\n"
        "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\n"
        "def main():\n    depth(50000)\n    print(sum(map(int, sys.stdin.read().split())))\n"
        "threading.Thread(target=main).start()\n"
    ),
}


@pytest.mark.parametrize("ending", sorted(HONEST_ENDINGS))
def test_a_right_program_passes_however_it_ends_as_python_would(executor, ending, programs=HONEST_ENDINGS):
    result = executor.run(stdio_job(programs[ending]))
    assert (result.status, result.passed) == (ExecutionStatus.PASSED, 2), (result.reason, result.stderr)


@pytest.mark.parametrize(
    ("ending", "status"),
    [("sys.exit(True)", "exit 1"), ("sys.exit(2**70)", "exit 255"), ("sys.exit(-1)", "exit 255")],
)
def test_exit_statuses_are_pythons(executor, ending, status):
    result = executor.run(stdio_job(ANSWER + ending + "\n"))
    assert result.status is ExecutionStatus.FAILED and not result.is_infrastructure_error
    assert f"the program ended with {status}" in result.reason, result.reason


def test_the_fork_servers_atexit_functions_are_not_the_programs(executor):
    code = "import atexit\nprint(atexit._ncallbacks())\n"
    result = executor.run(stdio_job(code, json.dumps([{"input": "", "output": "0"}])))
    assert result.status is ExecutionStatus.PASSED, (result.reason, result.stdout)


OPENED_BY_NAME = {
    "open('/dev/stdin')": "print(sum(map(int, open('/dev/stdin').read().split())))\n",
    "sys.stdin = open('/dev/stdin')": (
        "import sys\nsys.stdin = open('/dev/stdin', 'r')\nprint(sum(map(int, sys.stdin.read().split())))\n"
    ),
    "/proc/self/fd/0 in binary": "print(sum(map(int, open('/proc/self/fd/0', 'rb').read().split())))\n",
    "pathlib /dev/stdin": "import pathlib\nprint(sum(map(int, pathlib.Path('/dev/stdin').read_text().split())))\n",
    "open('/dev/stdout', 'w')": (
        "import sys\nwith open('/dev/stdout', 'w') as out:\n"
        "    out.write(str(sum(map(int, sys.stdin.read().split()))))\n"
    ),
}


@pytest.mark.parametrize("idiom", sorted(OPENED_BY_NAME))
def test_a_right_program_may_open_its_streams_by_name(executor, idiom):
    test_a_right_program_passes_however_it_ends_as_python_would(executor, idiom, OPENED_BY_NAME)


def test_other_paths_open_as_before(executor):
    code = "try:\n    open('/dev/stdin-not')\nexcept OSError as exc:\n    print(type(exc).__name__)\n"
    result = executor.run(stdio_job(code, json.dumps([{"input": "", "output": "FileNotFoundError"}])))
    assert result.status is ExecutionStatus.PASSED, (result.reason, result.stdout, result.stderr)
