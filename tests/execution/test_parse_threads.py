"""The scorer parses Python on many threads at once; CPython 3.11's AST builder is not safe for that
(python/cpython#106905: a spurious "SystemError: AST constructor recursion depth mismatch" that turned
an innocent rollout into an infrastructure error in CI). Every parse in the scorer takes one lock."""

from __future__ import annotations

import ast
import threading
import time

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.screening import screen
from tests.execution.conftest import ADD_TESTS, job

ADD = "def add(a, b):\n    return a + b\n"


class OverlapSpy:
    """Stands in for ast.parse: counts how many threads are inside it at the same moment."""

    def __init__(self, real):
        self.real, self.inside, self.most, self.calls = real, 0, 0, 0
        self.lock = threading.Lock()

    def __call__(self, *args, **kwargs):
        with self.lock:
            self.inside += 1
            self.calls += 1
            self.most = max(self.most, self.inside)
        try:
            time.sleep(0.005)  # long enough that two unserialised parses overlap
            return self.real(*args, **kwargs)
        finally:
            with self.lock:
                self.inside -= 1


def test_the_executor_never_parses_on_two_threads_at_once(executor, monkeypatch):
    spy = OverlapSpy(ast.parse)
    monkeypatch.setattr(ast, "parse", spy)
    jobs = [job(ADD, tests=ADD_TESTS + f"\n# variant {i}\n") for i in range(8)]
    jobs += [job(ADD, trust_mode="inprocess") for _ in range(4)]  # screened before they run
    results = list(executor.run_batch(jobs, workers=4))
    assert [r.status for r in results] == [ExecutionStatus.PASSED] * len(jobs), [r.reason for r in results]
    assert spy.calls >= len(jobs)
    assert spy.most == 1


def test_screening_rejects_code_that_breaks_the_parser_instead_of_crashing():
    nested = "x = " + "(" * 200 + "1" + ")" * 200 + "\n"  # within the tokenizer's limit, not the parser's
    deep = "x = " + "-" * 100_000 + "1\n"  # unary chains recurse in the AST builder
    for code in (nested, deep, "x = 1\0\n"):
        findings = screen(code)
        assert isinstance(findings, list)
    assert screen(deep), "code too deep to parse must be rejected, not waved through"
