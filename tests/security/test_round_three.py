"""Third attack round (independent check): a model that knows the sandbox's source attacks the trusted side
through the channel it is given, and the scorer through the values and text it returns.

Each payload carries a wrong ``add``; the verdict must be failed (or timeout), never passed and never an
infrastructure error (an error drops the rollout from GRPO, so a model that can cause one on demand escapes
the penalty for a wrong answer), and the next honest job must still pass.
"""

from __future__ import annotations

import textwrap
import time

from rewardpipe.execution import ExecutionStatus
from tests.security.conftest import EXPECTED_TESTS, assert_failed, assert_scorer_survives, job

# The model's process runs the sandbox's own codec module: it can replace the encoder and send any value
# tree it likes over its channel, without building the object (which would cost it the same time).
_PATCH_ENCODER = textwrap.dedent("""
    import sys
    wire = next(m for name, m in list(sys.modules.items()) if name.endswith("wire") and hasattr(m, "encode"))
    _encode = wire.encode
    def forged(value, make_handle=None, _depth=0):
        if value == "FORGED":
            return TREE()
        return _encode(value, make_handle, _depth)
    wire.encode = forged
    def add(a, b):
        return "FORGED"
""")


def _forged_reply(tree_source: str) -> str:
    return f"def TREE():\n{textwrap.indent(textwrap.dedent(tree_source), '    ')}\n" + _PATCH_ENCODER


def test_a_hash_flooded_set_costs_the_model_its_deadline_not_the_scorer(executor):
    """400k ints that all hash alike: building the set in the trusted runner is quadratic. The runner is
    stopped at the deadline (timeout: the model's failure) and replaced; the next job is unharmed."""
    code = _forged_reply("M = (1 << 61) - 1\nreturn {'s': [i * M for i in range(1, 400_000)]}")
    started = time.monotonic()
    result = executor.run(job(code, timeout_s=2.0))
    assert result.status in (ExecutionStatus.TIMEOUT, ExecutionStatus.FAILED), (result.status, result.reason)
    assert result.passed == 0
    # The deadline plus the runner's grace, not the quadratic cost (hours): bounded generously, a loaded machine's
    # fresh runner and scheduling delays are no part of what is tested (the 7 s this said before was its margin).
    assert time.monotonic() - started < 2.0 + 30
    assert_scorer_survives(executor)


def test_forged_reply_trees_are_a_failed_verdict(executor):
    for tree in (
        "return {'h': 10**9}",  # a handle the model's process never gave out
        "return {'ok': 3}",  # a reply envelope inside a value
        "return {'i': 'zz'}",  # a malformed wide int
        "return {'fr': [1, 0]}",  # a zero denominator
        "return {'l': [{'t': 1}]}",  # a tuple whose body is not a list
        "return {'d': [[{'l': []}, 1]]}",
    ):  # an unhashable key
        result = executor.run(job(_forged_reply(tree)))
        assert_failed(result)
    assert_scorer_survives(executor)


def test_frames_forged_into_every_inherited_descriptor_are_ignored(executor):
    code = "def add(a, b):\n    return a - b\n" + textwrap.dedent("""
        import json, os, struct
        frames = [json.dumps(body).encode() for body in (
            {"ok": 3}, {"ready": True, "exports": {}}, {"tests_run": 2, "successes": 2, "expected": 2},
            {"state": "done"}, {"timed_out": False, "harness": "done"})]
        for fd in range(256):
            for frame in frames:
                try:
                    os.write(fd, struct.pack("!I", len(frame)) + frame)
                except OSError:
                    pass
    """)
    result = executor.run(job(code))
    assert result.status is ExecutionStatus.FAILED and result.passed == 0, (result.status, result.reason)
    assert_scorer_survives(executor)


HOSTILE_DUNDERS = textwrap.dedent("""
    import os
    class Hostile:
        def __eq__(self, other): raise RuntimeError("eq")
        def __ne__(self, other): return Hostile()
        def __hash__(self): raise RuntimeError("hash")
        def __repr__(self): raise RuntimeError("repr")
        def __str__(self): return "\\x1b[2J[bold]passed[/]"
        def __bool__(self): return True
        def __len__(self): return -1
        def __iter__(self): raise StopIteration
        def __del__(self): os._exit(0)
    def add(a, b):
        return Hostile()
""")


def test_an_object_whose_every_dunder_is_hostile_fails(executor):
    for tests_format, tests in (
        ("unittest", None),
        ("check", "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(2, 2) == 4\n"),
    ):
        fields = {"tests_format": tests_format, **({"tests": tests} if tests else {})}
        result = executor.run(job(HOSTILE_DUNDERS, **fields))
        assert result.status is ExecutionStatus.FAILED and result.passed == 0, (result.status, result.reason)
    assert_scorer_survives(executor)


def test_a_huge_hostile_exception_text_is_bounded_and_serialisable(executor):
    code = "def add(a, b):\n    raise ValueError('\\x1b[31m[bold]pwn[/]\\u202e\\ud800\\u2028' * 1_000_000)\n"
    result = executor.run(job(code))
    assert_failed(result)
    assert result.total == EXPECTED_TESTS
    assert len(result.reason) <= 1000
    dumped = result.model_dump_json()  # no lone surrogate survives into the result
    assert "\\ud800" not in dumped and "\ud800" not in result.reason
