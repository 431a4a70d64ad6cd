"""Round thirty, the sandbox: right answers that scored 0, attacked through the public executor.

* **The largest recursion limit.** Round twenty-nine raised a stdio program's recursion limit by the fork server's
  own levels, and ``sys.setrecursionlimit`` added them to what the program asked for: ``sys.setrecursionlimit(2**31 -
  1)``, the C int's largest (a header some Codeforces answers carry, "no limit at all"), raised ``OverflowError`` in
  the sandbox only, and the right program failed every case. The limit is held at the largest a C int takes, and read
  back as the program set it.
"""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from rewardpipe.execution import ExecutionJob, ExecutionStatus
from rewardpipe.execution.sandbox import make_executor


@pytest.fixture(scope="module")
def executor():
    executor = make_executor(workers=1)
    yield executor
    executor.close()


def _as_python_runs_it(executor, tmp_path, code: str, stdin: str = "") -> str:
    """What the sandbox's own interpreter prints running ``code`` as a file (the expected output)."""
    program = tmp_path / "program.py"
    program.write_text(code)
    interpreter = executor.isolation()["interpreter"]
    return subprocess.run([interpreter, str(program)], input=stdin, capture_output=True, text=True, check=True).stdout


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
    code = LIMITS[name]
    expected = _as_python_runs_it(executor, tmp_path, code, "1 2\n")
    cases = json.dumps([{"input": "1 2\n", "output": expected}])
    result = executor.run(ExecutionJob(id=name, code=code, tests=cases, tests_format="stdio", timeout_s=10))
    assert result.status is ExecutionStatus.PASSED, (expected, result.stdout, result.reason)
