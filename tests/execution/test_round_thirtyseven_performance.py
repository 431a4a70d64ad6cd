"""Round thirty-seven, performance: the hardened floor of benchmarks/fork_per_job_floor.py.

The hardened floor claims to measure a fork per job with exactly the isolation rewardpipe's children apply (its
fork server's own code, ``Zygote.harden_untrusted``) and nothing else. Its figures mean that only if its children
really are hardened: a floor whose children silently ran unconfined would be cheaper and say nothing about issue
19's rules. These tests run a few jobs through it whose verdicts depend on the isolation being there.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sys

import pytest

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks")
)

import fork_per_job_floor

from rewardpipe.execution.forkservers import SandboxConfig, choose_interpreter

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the hardened floor's layers (uid, namespaces) need root")

CHECK = "def check(candidate):\n    assert candidate() {}\n"


def _run(tmp_path, jobs: list[tuple[str, str]]) -> int:
    """The jobs (code of a function ``f``, the condition its result must meet) through one hardened floor server."""
    path = tmp_path / "jobs.jsonl"
    path.write_text(
        "".join(
            json.dumps({"code": code, "tests": CHECK.format(condition), "entry_point": "f", "timeout_s": 5}) + "\n"
            for code, condition in jobs
        )
    )
    interpreter, _ = choose_interpreter(SandboxConfig())
    return fork_per_job_floor.hardened_floor_batch(str(path), 1, interpreter)


def test_a_plain_job_passes_through_the_hardened_floor(tmp_path):
    # (so that the refusals below are the isolation's, not a floor that fails every job)
    assert _run(tmp_path, [("def f():\n    return 41 + 1\n", "== 42")]) == 1


def test_the_hardened_floors_children_are_hardened_as_rewardpipes(tmp_path):
    # (a name of this test's own: /var/tmp is the host's, shared with the suite's other process and other runs)
    outside = f"/var/tmp/rp-floor-probe-{secrets.token_hex(6)}"
    probes = [
        # seccomp: no socket at all for the model's code
        ("import socket\ndef f():\n    return socket.socket().fileno()\n", ">= 0"),
        # the uid of its own: never root
        ("import os\ndef f():\n    return os.getuid()\n", "== 0"),
        # no new processes
        ("import os\ndef f():\n    return os.fork() >= 0\n", "is True"),
        # Landlock: nothing written outside its own directory
        (f"def f():\n    open({outside!r}, 'w').close()\n    return 1\n", "== 1"),
        # rlimits: the address space is bounded (2 GiB by default), so 8 GiB cannot be had
        ("def f():\n    return len(bytearray(8 << 30))\n", "> 0"),
    ]
    try:
        assert _run(tmp_path, probes) == 0
        assert not os.path.exists(outside)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(outside)


def test_each_job_of_the_hardened_floor_runs_in_a_fresh_process(tmp_path):
    # A module-level counter: a process that ran a second job would see 2.
    code = (
        "import builtins\nbuiltins.RP_SEEN = getattr(builtins, 'RP_SEEN', 0) + 1\n"
        "def f():\n    return builtins.RP_SEEN\n"
    )
    assert _run(tmp_path, [(code, "== 1")] * 3) == 3
