"""A stdio program has the recursion depth it has under ``python program.py``.

Its module's code runs below the fork server's own frames, which count against the same limit: a program recursing
to the default limit's depth (a memoised recursion over n = 1000, say) failed with RecursionError in the sandbox and
passed under Python. Each program below prints what it reached; the expected output is what the sandbox's own
interpreter prints running the program as a file."""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from rewardpipe.execution import ExecutionJob, ExecutionStatus
from rewardpipe.execution.sandbox import make_executor

DEPTH = """
def depth(n):
    try:
        return depth(n + 1)
    except RecursionError:
        return n
"""

PROGRAMS = {
    "default limit": DEPTH + "print(depth(0))\n",
    "a limit the program sets": "import sys\nsys.setrecursionlimit(2500)\n" + DEPTH + "print(depth(0))\n",
    "the limit read back": (
        "import sys\nprint(sys.getrecursionlimit())\nsys.setrecursionlimit(4321)\nprint(sys.getrecursionlimit())\n"
    ),
    "from main()": DEPTH + "def main():\n    print(depth(0))\n\nif __name__ == '__main__':\n    main()\n",
    "bad limits": textwrap.dedent("""
        import sys
        for bad in (0, -5, "deep", 2.5):
            try:
                sys.setrecursionlimit(bad)
            except Exception as exc:
                print(type(exc).__name__, exc)
        print(sys.getrecursionlimit())
    """),
}


@pytest.fixture(scope="module")
def executor():
    executor = make_executor(workers=1)
    yield executor
    executor.close()


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_program_recurses_as_deep_as_under_python(executor, tmp_path, name):
    program = tmp_path / "program.py"
    program.write_text(PROGRAMS[name])
    interpreter = executor.isolation()["interpreter"]
    expected = subprocess.run([interpreter, str(program)], capture_output=True, text=True, check=True).stdout
    result = executor.run(
        ExecutionJob(
            id=name,
            code=PROGRAMS[name],
            tests=json.dumps([{"input": "", "output": expected}]),
            tests_format="stdio",
            timeout_s=10,
        )
    )
    assert result.status is ExecutionStatus.PASSED, (expected, result.stdout, result.reason)
