"""Baseline for benchmarks/execution.py: the harness described in the Nova Forge reward blog,
re-implemented from its description (not shared with rewardpipe's sandbox).

What it does, per execution: write one file holding the model's code, the hidden tests and a
unittest runner that prints a summary framed by a random nonce to stderr; start a fresh interpreter on
it with CPU/address-space/process rlimits applied in ``preexec_fn``, a temp working directory, a
PATH-only environment and a wall-clock timeout; then parse the nonce-framed summary and require the
number of tests run to equal the number of ``def test*`` methods counted in the test source.
"""

from __future__ import annotations

import ast
import json
import resource
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path

CHECK_WRAPPER = """
import unittest as _unittest_for_check
class _CheckAsTestCase(_unittest_for_check.TestCase):
    def test_check(self):
        check({entry_point})
"""


def expected_test_count(tests: str) -> int:
    tree = ast.parse(tests)
    return sum(
        1
        for node in tree.body
        if isinstance(node, ast.ClassDef)
        for item in node.body
        if isinstance(item, ast.FunctionDef) and item.name.startswith("test")
    )


def as_unittest(tests: str, tests_format: str, entry_point: str) -> str:
    """HumanEval ``check(candidate)`` tests become one TestCase method, as in the findings' setup."""
    if tests_format == "check":
        return tests + CHECK_WRAPPER.format(entry_point=entry_point)
    return tests


def run_tests(code: str, tests: str, timeout_s: float = 30) -> tuple[int, int]:
    """(passed, expected); (0, expected) whenever the summary is missing, forged-looking or short."""
    marker = f"__{secrets.token_hex(8)}__"
    runner = (
        'if __name__ == "__main__":\n'
        "    _outcome = unittest.TextTestRunner(stream=sys.stderr, verbosity=0).run(\n"
        "        unittest.TestLoader().loadTestsFromModule(sys.modules[__name__]))\n"
        f"    sys.stderr.write({marker!r} + json.dumps({{'total': _outcome.testsRun, "
        "'passed': _outcome.testsRun - len(_outcome.failures) - len(_outcome.errors)})"
        f" + {marker!r})\n"
    )
    program = f"import sys, unittest, json\n{code}\n\n{tests}\n\n{runner}"
    expected = expected_test_count(tests)
    limit = int(timeout_s)

    def apply_limits():
        resource.setrlimit(resource.RLIMIT_CPU, (limit, limit))
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        resource.setrlimit(resource.RLIMIT_NPROC, (64, 64))

    with tempfile.TemporaryDirectory() as workdir:
        script = Path(workdir) / "h.py"
        script.write_text(program)
        try:
            completed = subprocess.run(
                [sys.executable, str(script)],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                cwd=workdir,
                env={"PATH": "/usr/bin"},
                preexec_fn=apply_limits,
            )
        except Exception:  # noqa: BLE001 - the blog scores every failure as 0
            return 0, expected
    pieces = completed.stderr.split(marker)
    if len(pieces) != 3:
        return 0, expected
    try:
        summary = json.loads(pieces[1])
    except ValueError:
        return 0, expected
    if summary.get("total") != expected:
        return 0, expected
    return int(summary.get("passed", 0)), expected
