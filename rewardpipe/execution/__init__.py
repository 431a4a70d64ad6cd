"""Run untrusted model code against a task's hidden tests.

This module is the stable interface the rest of rewardpipe uses. The sandbox behind it can change
(see ``rewardpipe.execution.sandbox``) without touching scoring, the CLI or the handlers.

Status semantics (the only thing callers should branch on):

* ``passed``  — every expected test ran and passed.
* ``failed``  — the tests ran and at least one failed, or fewer tests ran than expected, or the
  model's own code crashed (a model failure; ``reason`` says which).
* ``timeout`` — the model's code exceeded its wall-clock budget (a model failure).
* ``error``   — the harness itself could not produce a verdict (broken test source, executor crash,
  harness timeout). This is an infrastructure failure and must never be scored as 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rewardpipe.execution.result import ExecutionJob, ExecutionResult, ExecutionStatus

__all__ = ["ExecutionJob", "ExecutionResult", "ExecutionStatus", "execute", "execute_batch", "get_executor"]
_RESULT_TYPES = ("ExecutionJob", "ExecutionResult", "ExecutionStatus")


def __getattr__(name: str) -> Any:
    """The job and result types on first use: importing a submodule that needs neither (the fork servers'
    ``forkservers``, which a command starts before anything else) must not pay for pydantic."""
    if name in _RESULT_TYPES:
        from rewardpipe.execution import result

        for each in _RESULT_TYPES:  # from now on plain attributes, as if imported at the top
            globals()[each] = getattr(result, each)
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_RESULT_TYPES})


def get_executor():
    """The process-wide default executor (created lazily so importing this module stays cheap)."""
    from rewardpipe.execution.sandbox import default_executor

    return default_executor()


def execute(
    code: str,
    tests: str,
    entry_point: str,
    tests_format: str = "unittest",
    timeout_s: float = 10.0,
) -> ExecutionResult:
    from rewardpipe.execution.result import ExecutionJob

    job = ExecutionJob(code=code, tests=tests, entry_point=entry_point, tests_format=tests_format, timeout_s=timeout_s)
    return get_executor().run(job)


def execute_batch(jobs: Iterable[ExecutionJob], workers: int | None = None) -> Iterator[ExecutionResult]:
    """Run jobs on a worker pool; results come back in input order, one per job."""
    return get_executor().run_batch(jobs, workers=workers)
