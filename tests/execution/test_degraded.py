"""The degraded path (what AWS Lambda looks like: no root, no namespaces, maybe no Landlock):
layers forced off must be reported off, and verdicts must stay right, because the split between the
trusted test runner and the model's process does not depend on any OS layer."""

from __future__ import annotations

import os
import textwrap

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.runtime.layers import LAYER_NAMES
from rewardpipe.execution.sandbox import make_executor
from tests.execution.conftest import job


@pytest.fixture(scope="module")
def bare():
    executor = make_executor(workers=1, disable=frozenset(LAYER_NAMES))
    yield executor
    executor.close()


def test_every_disabled_layer_is_reported_off(bare):
    isolation = bare.isolation()
    for layer in LAYER_NAMES:
        assert isolation[layer] == "off: disabled by configuration"
    assert isolation["tree_kill"].startswith("process group only")
    assert isolation["trust"].startswith("split")


def test_verdicts_are_unchanged_without_os_layers(bare):
    assert bare.run(job("def add(a, b):\n    return a + b\n")).status is ExecutionStatus.PASSED
    wrong = bare.run(job("def add(a, b):\n    return abs(a) + b\n"))
    assert (wrong.status, wrong.passed) == (ExecutionStatus.FAILED, 2)  # only the negative case fails
    slow = bare.run(job("def add(a, b):\n    while True:\n        pass\n", timeout_s=0.5))
    assert slow.status is ExecutionStatus.TIMEOUT


def test_in_process_reward_hacks_still_fail_without_os_layers(bare):
    hacks = [
        "import unittest\nunittest.TestResult.addFailure = lambda *a: None\n",
        "import unittest\ndef _run(self, result=None):\n    result.startTest(self); result.addSuccess(self); result.stopTest(self)\nunittest.TestCase.run = _run\n",
        'import sys\nsys.stderr.write(\'__0000000000000000__{"total": 3, "passed": 3}__0000000000000000__\')\nimport os\nos._exit(0)\n',
    ]
    for hack in hacks:
        result = bare.run(job("def add(a, b):\n    return a - b\n" + hack))
        assert result.status is ExecutionStatus.FAILED, hack
        assert result.passed <= 1


def test_model_code_runs_as_the_servers_uid_when_uid_layer_is_off(bare):
    code = "import os\nprint('UID', os.getuid())\ndef add(a, b):\n    return a + b\n"
    result = bare.run(job(code))
    assert f"UID {os.geteuid()}" in result.stdout


def test_each_layer_can_be_disabled_alone_and_the_rest_stay_on():
    if os.geteuid() != 0:
        pytest.skip("the full set of layers needs root")
    executor = make_executor(workers=1, disable=frozenset({"seccomp"}))
    try:
        isolation = executor.isolation()
        assert isolation["seccomp"] == "off: disabled by configuration"
        assert isolation["uid"].startswith("on")
        code = textwrap.dedent("""
            import os
            try:
                pid = os.fork()
                if pid == 0:
                    os._exit(0)
                os.waitpid(pid, 0)
                print("FORK OK")
            except OSError:
                print("FORK DENIED")
            def add(a, b):
                return a + b
        """)
        result = executor.run(job(code))
        assert result.status is ExecutionStatus.PASSED
        assert "FORK OK" in result.stdout  # seccomp really is off: forking works
    finally:
        executor.close()


@pytest.fixture(scope="module")
def unprivileged():
    """Fork servers running as nobody: no uid drop, no namespaces, no cgroups, as on AWS Lambda."""
    if os.geteuid() != 0:
        pytest.skip("needs root to start the fork server as another uid")
    executor = make_executor(workers=1, server_uid=65534)
    if not executor.isolation()["seccomp"].startswith("on"):
        executor.close()
        pytest.skip("seccomp, the layer that protects an unprivileged fork server, is unavailable")
    yield executor
    executor.close()


def test_unprivileged_fork_server_reports_what_it_cannot_do(unprivileged):
    isolation = unprivileged.isolation()
    assert isolation["uid"].startswith("off: fork server is not root")
    assert isolation["netns"].startswith("off")
    assert isolation["cgroup"].startswith("off")
    assert isolation["seccomp"].startswith("on")  # needs no privilege: this is what protects Lambda
    assert isolation["tree_kill"] == "process group (seccomp forbids new processes)"


def test_unprivileged_fork_server_gives_right_verdicts_and_blocks_the_basics(unprivileged):
    assert unprivileged.run(job("def add(a, b):\n    return a + b\n")).status is ExecutionStatus.PASSED
    hostile = textwrap.dedent("""
        import os, signal, socket
        for target in (os.getppid(), -1):
            try:
                os.kill(target, signal.SIGKILL)
                print("KILLED", target)
            except OSError:
                print("DENIED", target)
        try:
            socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            print("SOCKET")
        except OSError:
            print("NO SOCKET")
        try:
            os.fork()
            print("FORKED")
        except OSError:
            print("NO FORK")
        def add(a, b):
            return a - b
    """)
    result = unprivileged.run(job(hostile))
    assert (result.status, result.passed) == (ExecutionStatus.FAILED, 0)
    lines = result.stdout.splitlines()
    assert lines[2:] == ["NO SOCKET", "NO FORK"]
    assert all(line.startswith("DENIED") for line in lines[:2]), lines
    assert unprivileged.run(job("def add(a, b):\n    return a + b\n")).status is ExecutionStatus.PASSED


def test_chroot_confines_the_file_system_where_landlock_is_missing(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("chroot needs root")
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text("TOP-SECRET-TESTS")
    os.chmod(tmp_path, 0o755)
    os.chmod(secret_file, 0o644)  # world-readable: only the chroot keeps it out of reach
    executor = make_executor(workers=1, disable=frozenset({"landlock"}))
    try:
        assert executor.isolation()["chroot"].startswith("on")
        code = textwrap.dedent(f"""
            import os
            for path in ({str(secret_file)!r}, "/etc/passwd", "/proc/self/environ", "../../../etc/passwd"):
                try:
                    print("READ", open(path).read()[:40])
                except OSError:
                    print("UNREACHABLE")
            import xml.dom.minidom  # not pre-imported: the stdlib stays importable inside the chroot
            try:
                open("/pwned.txt", "w")
                print("WROTE")
            except OSError:
                print("READ-ONLY")
            def add(a, b):
                return a + b
        """)
        result = executor.run(job(code))
        assert result.status is ExecutionStatus.PASSED, result.reason + result.stderr
        assert result.stdout.splitlines() == ["UNREACHABLE"] * 4 + ["READ-ONLY"]
    finally:
        executor.close()
