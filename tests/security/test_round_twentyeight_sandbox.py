"""Round twenty-eight: right answers the sandbox scored 0, attacked through the public executor as the model would.

* **Writing to ``os.devnull``.** Landlock (full isolation) lets the model's process read ``/dev/null`` only, and the
  read-only file system of the Lambda/Fargate mode refuses every open for writing, so ``open(os.devnull, "w")``
  (``sys.stdout = open(os.devnull, "w")`` to silence a library, ``contextlib.redirect_stdout``) failed a right
  answer, in a ``stdio`` program and in a function the tests call alike. The name opens the child's own
  ``/dev/null`` now (a duplicate of a descriptor it holds for reading and writing).
* **``io.FileIO("/dev/stdin")``** (left open in round twenty-five): ``open``, ``io.open`` and ``os.open`` gave the
  standard streams' names their descriptors, a direct ``FileIO`` reached the covered /proc (full isolation) or the
  read-only file system (``/dev/stdout``, Lambda mode). ``io.FileIO`` does as ``open`` does now.
* **A float tolerance compared doubles.** Round twenty-seven compared two integer tokens as integers, but the same
  wrong integer printed as ``9007199254740992.0`` (or with an exponent) was a double equal to the expected
  ``9007199254740993`` and **passed** within a tolerance of 0. Where the doubles' rounding could decide, the decimal
  values the tokens spell decide now (and the tolerance as written: ``1e-06``, not its double).
"""

from __future__ import annotations

import json
import textwrap

import pytest

from rewardpipe.execution import ExecutionJob, ExecutionStatus
from rewardpipe.execution.runtime import harness
from tests.security import test_round_twentythree_stdio as round_twentythree
from tests.security.conftest import HIDDEN_TESTS, job
from tests.security.test_round_twentyfive_sandbox import either_mode as _either_mode

either_mode = _either_mode  # (full isolation, then the Lambda/Fargate mode)

CASES = [{"input": "1 2\n", "output": "3"}, {"input": "10 20\n", "output": "30"}]


def _stdio(code: str, cases: object = CASES) -> ExecutionJob:
    return ExecutionJob(code=textwrap.dedent(code), tests=json.dumps(cases), tests_format="stdio", timeout_s=10.0)


DEVNULL_PROGRAMS = {
    "open-w": """
        import os
        with open(os.devnull, "w") as quiet:
            quiet.write("noise")
        a, b = map(int, input().split())
        print(a + b)
    """,
    "stderr-to-devnull": """
        import os, sys
        sys.stderr = open(os.devnull, "w")
        a, b = map(int, input().split())
        print(a + b)
    """,
    "os-open-wronly": """
        import os
        fd = os.open(os.devnull, os.O_WRONLY)
        os.write(fd, b"noise")
        os.close(fd)
        a, b = map(int, input().split())
        print(a + b)
    """,
    "pathlib": """
        import os, pathlib
        pathlib.Path(os.devnull).write_text("noise")
        a, b = map(int, input().split())
        print(a + b)
    """,
    "fileio": """
        import io, os
        io.FileIO(os.devnull, "w").write(b"noise")
        a, b = map(int, input().split())
        print(a + b)
    """,
}


@pytest.mark.parametrize("name", sorted(DEVNULL_PROGRAMS))
def test_a_right_program_may_write_to_devnull(either_mode, name):
    """Before: ``failed`` (``PermissionError`` under Landlock, ``OSError: Read-only file system`` in Lambda mode)."""
    result = either_mode.run(_stdio(DEVNULL_PROGRAMS[name]))
    assert result.status is ExecutionStatus.PASSED, (result.reason, result.stderr[-300:])


DEVNULL_FUNCTIONS = {
    "redirect-in-call": """
        import contextlib, os

        def add(a, b):
            with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
                print("working on", a, b)
            return a + b
    """,
    "silenced-at-load": """
        import os, sys
        sys.stdout = open(os.devnull, "w")

        def add(a, b):
            print("noise")
            return a + b
    """,
}


@pytest.mark.parametrize("name", sorted(DEVNULL_FUNCTIONS))
def test_a_right_function_may_write_to_devnull(either_mode, name):
    """Before: ``failed`` ("T.test_small: PermissionError: ... '/dev/null'"), both modes."""
    result = either_mode.run(job(textwrap.dedent(DEVNULL_FUNCTIONS[name]), HIDDEN_TESTS, 10.0))
    assert result.status is ExecutionStatus.PASSED, (result.reason, result.stderr[-300:])
    assert (result.passed, result.total) == (2, 2)


def test_a_wrong_function_writing_to_devnull_still_fails(either_mode):
    code = DEVNULL_FUNCTIONS["redirect-in-call"].replace("return a + b", "return a - b")
    result = either_mode.run(job(textwrap.dedent(code), HIDDEN_TESTS, 10.0))
    assert result.status is ExecutionStatus.FAILED, result.reason
    assert result.passed == 0
    assert not result.is_infrastructure_error


def test_what_is_written_to_devnull_is_not_output(either_mode):
    code = """
        import os
        with open(os.devnull, "w") as quiet:
            quiet.write("30")
        print(3)
    """
    result = either_mode.run(_stdio(code))
    assert result.status is ExecutionStatus.FAILED, result.reason
    assert (result.passed, result.total) == (1, 2)


FILEIO_PROGRAMS = {
    "dev-stdin": """
        import io
        a, b = map(int, io.FileIO("/dev/stdin").read().split())
        print(a + b)
    """,
    "proc-self-fd-0": """
        import io
        a, b = map(int, io.FileIO("/proc/self/fd/0", "r").read().split())
        print(a + b)
    """,
    "dev-stdout": """
        import io
        a, b = map(int, input().split())
        io.FileIO("/dev/stdout", "w").write(f"{a + b}\\n".encode())
    """,
    "buffered-over-fileio": """
        import io
        data = io.BufferedReader(io.FileIO(b"/dev/fd/0")).read()
        a, b = map(int, data.split())
        print(a + b)
    """,
}


@pytest.mark.parametrize("name", sorted(FILEIO_PROGRAMS))
def test_a_right_program_may_open_its_streams_with_fileio(either_mode, name):
    """Before: ``FileNotFoundError`` (full isolation) or ``Read-only file system`` (``/dev/stdout``, Lambda mode)."""
    result = either_mode.run(_stdio(FILEIO_PROGRAMS[name]))
    assert result.status is ExecutionStatus.PASSED, (result.reason, result.stderr[-300:])


def test_fileio_is_still_the_class_of_the_programs_files(executor):
    code = """
        import io, sys
        raw = sys.stdin.buffer.raw
        made = io.FileIO(0, closefd=False)
        checks = [isinstance(raw, io.FileIO), isinstance(made, io.FileIO), issubclass(type(raw), io.FileIO),
                  isinstance(open(0, "rb", buffering=0, closefd=False), io.FileIO)]
        a, b = map(int, raw.read().split())
        print(a + b if all(checks) else checks)
    """
    result = executor.run(_stdio(code))
    assert result.status is ExecutionStatus.PASSED, (result.reason, result.stdout[-300:], result.stderr[-300:])


def test_other_paths_still_open_as_before_with_fileio(either_mode):
    code = """
        import io
        try:
            io.FileIO("/no/such/file")
        except FileNotFoundError:
            a, b = map(int, input().split())
            print(a + b)
    """
    result = either_mode.run(_stdio(code))
    assert result.status is ExecutionStatus.PASSED, (result.reason, result.stderr[-300:])


# Round twenty-seven made two integer tokens equal only as integers (as doubles, a wrong answer past 2**53 matched
# within any tolerance); the same integer printed with ".0" or an exponent was still compared as doubles.
BIG = 2**53 + 1


@pytest.mark.parametrize("printed", [f"{BIG - 1}.0", f"{BIG - 1}e0", f"{BIG - 1}.000", "9.007199254740992e15"])
@pytest.mark.parametrize("tolerance", [0, 1e-18])
def test_a_wrong_big_integer_printed_as_a_decimal_fails_within_a_tiny_tolerance(executor, printed, tolerance):
    """Before: **passed** (both are 9007199254740992.0 as doubles)."""
    cases = {"cases": [{"input": "", "output": str(BIG)}], "float_tolerance": tolerance}
    result = executor.run(_stdio(f"print({printed!r})", cases))
    assert result.status is ExecutionStatus.FAILED, result.reason
    assert result.passed == 0


@pytest.mark.parametrize(
    ("printed", "expected", "tolerance", "matches"),
    [
        (f"{BIG - 1}.0", str(BIG), 0.0, False),
        (f"{BIG}.0", str(BIG), 0.0, True),
        (f"{BIG - 1}.0", str(BIG), 1e-15, True),  # within the tolerance as written: 1 <= 1e-15 * 9.007e15
        ("0.30000000000000001", "0.3", 0.0, False),  # one double, two numbers
        ("0.300", "0.3", 0.0, True),
        ("1.000001", "1", 1e-6, True),  # on the boundary: the tolerance as written, not its double
        ("0.300001", "0.3", 1e-6, True),  # (as doubles 1.0000000000287557e-06 > 1e-06: a right answer failed)
        ("0.3000011", "0.3", 1e-6, False),
        ("1.5", "1", 0.5, True),
        ("1.5000000000000001", "1", 0.5, False),
        ("2.5", "1e-3", 0.5, False),
        ("0.5", "0.50000001", 1e-6, True),
    ],
)
def test_numbers_are_compared_as_the_decimals_they_spell(printed, expected, tolerance, matches):
    assert harness.stdio_output_matches(printed.encode(), expected.encode(), tolerance) is matches


# What a right answer prints besides its answer: debug lines, many of them. RLIMIT_FSIZE (8 MiB) caps the files its
# standard streams are, and a write past it raised ``OSError: [Errno 27] File too large`` in the answer's own code.
CHATTY_FUNCTIONS = {
    "stdout": "def add(a, b):\n    for i in range(300_000):\n        print('debug line', i)\n    return a + b\n",
    "stderr": "import sys\n\ndef add(a, b):\n    sys.stderr.write('x' * 9_000_000)\n    return a + b\n",
}


@pytest.mark.parametrize("stream", sorted(CHATTY_FUNCTIONS))
def test_a_right_function_printing_past_the_file_size_limit_passes(either_mode, stream):
    """Before: ``failed`` ("T.test_large: OSError: [Errno 27] File too large": output grows over the calls)."""
    result = either_mode.run(job(CHATTY_FUNCTIONS[stream], HIDDEN_TESTS, 30.0))
    assert result.status is ExecutionStatus.PASSED, result.reason
    assert (result.passed, result.total) == (2, 2)


def test_a_right_program_writing_past_the_limit_on_stderr_passes(either_mode):
    """Before: ``failed`` ("the program ended with exit 1"): on stderr, as a judge ignores it."""
    code = """
        import sys
        for i in range(100):
            print(f"debug {i}: " + "x" * 100_000, file=sys.stderr)
        a, b = map(int, input().split())
        print(a + b)
    """
    result = either_mode.run(_stdio(code))
    assert result.status is ExecutionStatus.PASSED, result.reason


def test_a_program_printing_past_the_limit_on_stdout_still_ends_there(executor):
    code = "import sys\nwhile True:\n    sys.stdout.write('7 ' * 65536)\n"
    result = executor.run(_stdio(code))
    assert result.status is ExecutionStatus.FAILED, result.reason
    assert "over the 2 MiB limit" in result.reason


# PyRival's fast input/output template (a common header of Python solutions on Codeforces): sys.stdout becomes an
# object whose flush writes through ``os``, a global of the program's module.
FAST_IO = r"""
import os, sys
from io import BytesIO, IOBase
BUFSIZE = 8192
class FastIO(IOBase):
    newlines = 0
    def __init__(self, file):
        self._fd = file.fileno()
        self.buffer = BytesIO()
        self.writable = "x" in file.mode or "r" not in file.mode
        self.write = self.buffer.write if self.writable else None
    def read(self):
        while True:
            b = os.read(self._fd, max(os.fstat(self._fd).st_size, BUFSIZE))
            if not b:
                break
            ptr = self.buffer.tell()
            self.buffer.seek(0, 2), self.buffer.write(b), self.buffer.seek(ptr)
        self.newlines = 0
        return self.buffer.read()
    def readline(self):
        while self.newlines == 0:
            b = os.read(self._fd, max(os.fstat(self._fd).st_size, BUFSIZE))
            self.newlines = b.count(b"\n") + (not b)
            ptr = self.buffer.tell()
            self.buffer.seek(0, 2), self.buffer.write(b), self.buffer.seek(ptr)
        self.newlines -= 1
        return self.buffer.readline()
    def flush(self):
        if self.writable:
            os.write(self._fd, self.buffer.getvalue())
            self.buffer.truncate(0), self.buffer.seek(0)
class IOWrapper(IOBase):
    def __init__(self, file):
        self.buffer = FastIO(file)
        self.flush = self.buffer.flush
        self.writable = self.buffer.writable
        self.write = lambda s: self.buffer.write(s.encode("ascii"))
        self.read = lambda: self.buffer.read().decode("ascii")
        self.readline = lambda: self.buffer.readline().decode("ascii")
sys.stdin, sys.stdout = IOWrapper(sys.stdin), IOWrapper(sys.stdout)
input = lambda: sys.stdin.readline().rstrip("\r\n")
a, b = map(int, input().split())
print(a + b)
"""

ENDINGS = {
    "fast-io-template": FAST_IO,
    "closes-stdout": "a, b = map(int, input().split())\nprint(a + b)\nimport sys\nsys.stdout.close()\n",
    "closes-a-replacement": "import sys\nsys.stdout = open(1, 'w', closefd=False)\n"
    + round_twentythree.ANSWER
    + "sys.stdout.close()\n",
}


@pytest.mark.parametrize("name", sorted(ENDINGS))
def test_a_right_program_ends_as_python_flushes_its_streams(executor, name):
    """Before: ``failed`` ("the program ended with exit 120"): the streams were flushed after ``__main__`` was cleared
    (the template's flush raised ``NameError``), and a closed stdout was flushed (``ValueError``). Python flushes
    ``sys.stdout`` and ``sys.stderr`` before it clears the modules, puts the original streams back, and skips a closed
    one."""
    round_twentythree.test_a_right_program_passes_however_it_ends_as_python_would(executor, name, ENDINGS)


def test_text_left_in_a_replaced_stdout_is_lost_as_in_python(executor):
    """``python program.py > out`` exits 0 having written only the new file's text: the other file on fd 1 closed it
    before the original stream, finalized last, could write what it held."""
    code = "import sys\nprint(sum(map(int, input().split())), end=' ')\nsys.stdout = open(1, 'w')\nprint()\n"
    result = executor.run(_stdio(code))
    assert result.status is ExecutionStatus.FAILED, result.reason
    assert "wrong answer" in result.reason


def test_output_that_cannot_be_written_still_fails_the_program(executor):
    code = """
        import sys
        class Broken:
            def write(self, text):
                return len(text)
            def flush(self):
                raise OSError("no space left")
        sys.stdout = Broken()
        a, b = map(int, input().split())
        sys.__stdout__.write(str(a + b))
    """
    result = executor.run(_stdio(code))
    assert result.status is ExecutionStatus.FAILED, result.reason
    assert "exit 120" in result.reason
