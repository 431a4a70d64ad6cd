"""Round thirty, the sandbox: right answers that scored 0, attacked through the public executor.

* **The largest recursion limit.** Round twenty-nine raised a stdio program's recursion limit by the fork server's
  own levels, and ``sys.setrecursionlimit`` added them to what the program asked for: ``sys.setrecursionlimit(2**31 -
  1)``, the C int's largest (a header some Codeforces answers carry, "no limit at all"), raised ``OverflowError`` in
  the sandbox only, and the right program failed every case. The limit is held at the largest a C int takes, and read
  back as the program set it.
* **Output printed before the program's last act.** ``python program.py`` flushes ``sys.stderr`` and ``sys.stdout``
  as soon as the module's code ends (``flush_io`` in CPython's ``pythonrun.c``), before it waits for the program's
  threads and runs its ``atexit`` functions; the sandbox flushed them only after both. A right program that ends
  with ``os._exit(0)`` there (an ``atexit`` function, a thread that outlives the module's code: both skip the slow
  teardown of a large program) printed its answer under Python and nothing here.
* **Line ends in the input.** Python opens a program's ``sys.stdin`` with ``newline="\\n"`` on POSIX: a carriage
  return stays in the text (``input()`` of ``"ab\\rcd"`` is that, ``sys.stdin.read()`` of CRLF lines keeps each
  ``\\r``). The sandbox's stdin translated newlines as ``open()`` does, so a lone ``\\r`` split one line into two and
  every count or position over the raw text moved: a right program's output differed from Python's.
* **``__builtins__`` of the program's module.** In ``__main__`` it is the ``builtins`` module (elsewhere a dict): the
  program's module was given the dict, so ``__builtins__.input``, the usual way to keep the real ``input`` before
  rebinding the name to a fast reader, raised ``AttributeError``.
"""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from rewardpipe.execution import ExecutionJob, ExecutionStatus
from rewardpipe.execution.sandbox import make_executor
from tests.security.test_round_nine_files import _lambda_like


@pytest.fixture(scope="module", params=["full", "lambda"])
def executor(request):
    """Every layer where this host allows it, then the Lambda/Fargate mode (no namespaces, Landlock or own uid)."""
    executor = make_executor(workers=1) if request.param == "full" else _lambda_like()
    yield executor
    executor.close()


def _as_python_runs_it(executor, tmp_path, code: str, stdin: str = "") -> str:
    """What the sandbox's own interpreter writes running ``code`` as a file, its input and output files as a judge's
    (the expected output)."""
    program, given, printed = tmp_path / "program.py", tmp_path / "input.txt", tmp_path / "output.txt"
    program.write_text(code)
    given.write_text(stdin)
    interpreter = executor.isolation()["interpreter"]
    with given.open() as source, printed.open("w") as sink:
        # (env={}: an unbuffered stdout, PYTHONUNBUFFERED as some shells set it, would hide when Python flushes)
        subprocess.run([interpreter, str(program)], stdin=source, stdout=sink, check=True, env={}, timeout=60)
    return printed.read_bytes().decode()


def _passes_as_under_python(executor, tmp_path, name: str, code: str, given: str = "1 2\n", timeout_s: float = 10):
    """The program, on ``given``, passes against what the interpreter itself prints for it (returned)."""
    expected = _as_python_runs_it(executor, tmp_path, code, given)
    cases = json.dumps([{"input": given, "output": expected}])
    result = executor.run(ExecutionJob(id=name, code=code, tests=cases, tests_format="stdio", timeout_s=timeout_s))
    assert result.status is ExecutionStatus.PASSED, (expected, result.stdout, result.reason)
    return expected


LIMITS = {
    "the largest": "import sys\nsys.setrecursionlimit(2**31 - 1)\nprint(sys.getrecursionlimit())\n",
    "near the largest": "import sys\nsys.setrecursionlimit(2**31 - 3)\nprint(sys.getrecursionlimit())\n",
    "past the largest": textwrap.dedent("""
        import sys
        try:
            sys.setrecursionlimit(2**31)
        except OverflowError as exc:
            print(type(exc).__name__, exc)
        print(sys.getrecursionlimit())
    """),
    "the largest, then deep": textwrap.dedent("""
        import sys
        sys.setrecursionlimit(2147483647)
        def depth(n):
            return n if n == 20000 else depth(n + 1)
        a, b = map(int, input().split())
        print(a + b, depth(0))
    """),
}


@pytest.mark.parametrize("name", sorted(LIMITS))
def test_a_program_may_set_the_largest_recursion_limit(executor, tmp_path, name):
    _passes_as_under_python(executor, tmp_path, name, LIMITS[name])


LAST_ACTS = {
    "os._exit in an atexit function": textwrap.dedent("""
        import atexit, os
        atexit.register(os._exit, 0)
        a, b = map(int, input().split())
        print(a + b)
    """),
    "os._exit in a thread, once the answer is out": textwrap.dedent("""
        import os, threading, time
        def finish():
            while os.fstat(1).st_size == 0:  # (the module's code has ended and its output is written)
                time.sleep(0.01)
            os._exit(0)
        threading.Thread(target=finish).start()
        a, b = map(int, input().split())
        print(a + b)
    """),
    "a traceback after the answer": "a, b = map(int, input().split())\nprint(a + b)\nraise SystemExit(0)\n",
}


@pytest.mark.parametrize("name", sorted(LAST_ACTS))
def test_what_a_program_printed_is_out_when_its_module_ends(executor, tmp_path, name):
    assert _passes_as_under_python(executor, tmp_path, name, LAST_ACTS[name], timeout_s=5).split() == ["3"]


LINE_ENDS = {
    "a carriage return inside a line": ("print(repr(input()))\nprint(repr(input()))\n", "ab\rcd\nef\n"),
    "CRLF lines, read whole": ("import sys\nprint(len(sys.stdin.read()))\n", "1 2\r\n3 4\r\n"),
    "CRLF lines, iterated": ("import sys\nprint([len(line) for line in sys.stdin])\n", "ab\r\nc\r\n"),
    "CRLF lines, readline": ("import sys\nprint(repr(sys.stdin.readline()))\n", "ab\r\nc\r\n"),
}


@pytest.mark.parametrize("name", sorted(LINE_ENDS))
def test_a_program_reads_its_input_as_python_gives_it(executor, tmp_path, name):
    code, given = LINE_ENDS[name]
    _passes_as_under_python(executor, tmp_path, name, code, given)


BUILTINS = {
    "the real input kept": textwrap.dedent("""
        import sys
        read = __builtins__.input
        def input():
            return read().strip()
        a, b = map(int, input().split())
        print(a + b)
    """),
    "its kind": "print(type(__builtins__).__name__)\n",
}


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_a_programs_builtins_are_the_module_as_in_python(executor, tmp_path, name):
    _passes_as_under_python(executor, tmp_path, name, BUILTINS[name])
