"""PLACEHOLDER executor: one fresh interpreter per run. Replaced by the fork-server sandbox (issue 3)."""

from __future__ import annotations

import ast
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Iterator

from rewardpipe.execution.result import ExecutionJob, ExecutionResult, ExecutionStatus


def count_expected_tests(tests: str, tests_format: str) -> int:
    if tests_format == "check":
        return 1
    tree = ast.parse(tests)
    count = 0
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            count += sum(
                1 for item in node.body if isinstance(item, ast.FunctionDef) and item.name.startswith("test")
            )
    return count


_RUNNER = """
import sys, unittest, json
def _main(nonce, expected):
    r = unittest.TextTestRunner(stream=sys.stderr, verbosity=0).run(
        unittest.TestLoader().loadTestsFromModule(sys.modules[__name__]))
    sys.stderr.write(nonce + json.dumps({"total": r.testsRun,
        "passed": r.testsRun - len(r.failures) - len(r.errors) - len(r.skipped)}) + nonce)
"""


class SubprocessExecutor:
    def run(self, job: ExecutionJob) -> ExecutionResult:
        start = time.perf_counter()
        try:
            expected = count_expected_tests(job.tests, job.tests_format)
        except SyntaxError as exc:
            return ExecutionResult(id=job.id, status=ExecutionStatus.ERROR, reason=f"test source does not parse: {exc}")
        tests = job.tests
        if job.tests_format == "check":
            tests += f"\nclass _Check(unittest.TestCase):\n    def test_check(self):\n        check({job.entry_point})\n"
        nonce = "__" + secrets.token_hex(8) + "__"
        program = f"{_RUNNER}\n{job.code}\n\n{tests}\n\n_main({nonce!r}, {expected})\n"
        with tempfile.TemporaryDirectory() as cwd:
            try:
                proc = subprocess.run(
                    [sys.executable, "-I", "-c", program], cwd=cwd, env={"PATH": "/usr/bin:/bin"},
                    capture_output=True, timeout=job.timeout_s,
                )
            except subprocess.TimeoutExpired:
                return ExecutionResult(id=job.id, status=ExecutionStatus.TIMEOUT, total=expected, reason="wall-clock timeout",
                                       mode="placeholder", duration_ms=(time.perf_counter() - start) * 1000)
        stderr = proc.stderr.decode("utf-8", errors="replace")
        parts = stderr.split(nonce)
        elapsed = (time.perf_counter() - start) * 1000
        if len(parts) != 3:
            return ExecutionResult(id=job.id, status=ExecutionStatus.FAILED, total=expected, reason="model_crash: no summary",
                                   mode="placeholder", duration_ms=elapsed, stderr=stderr[-2000:])
        summary = json.loads(parts[1])
        passed = min(summary["passed"], expected)
        status = ExecutionStatus.PASSED if summary["total"] == expected and passed == expected and expected > 0 else ExecutionStatus.FAILED
        return ExecutionResult(id=job.id, status=status, passed=passed if summary["total"] == expected else 0, total=expected,
                               reason="" if status is ExecutionStatus.PASSED else "tests failed", mode="placeholder",
                               duration_ms=elapsed, stderr=stderr[-2000:])

    def run_batch(self, jobs: Iterable[ExecutionJob], workers: int | None = None) -> Iterator[ExecutionResult]:
        with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 2) as pool:
            yield from pool.map(self.run, list(jobs))


_DEFAULT: SubprocessExecutor | None = None


def default_executor() -> SubprocessExecutor:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = SubprocessExecutor()
    return _DEFAULT
