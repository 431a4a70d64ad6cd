"""Isolation layer building blocks and configuration, checked without running model code."""

from __future__ import annotations

import ctypes
import os
import signal
import struct
import time

import pytest

from rewardpipe.execution.runtime import layers
from rewardpipe.execution.sandbox import SandboxConfig, SandboxConfigError, choose_interpreter


def decode_bpf(program: bytes):
    return [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_seccomp_program_checks_arch_first_and_jumps_stay_in_range(arch):
    program = decode_bpf(layers.build_seccomp_filter(arch, own_pid=4242))
    assert program[0] == (0x20, 0, 0, 4)  # load seccomp_data.arch
    assert program[1][0] == 0x15 and program[1][3] == layers._AUDIT_ARCH[arch]
    assert program[2] == (0x06, 0, 0, layers._RET_KILL_PROCESS)  # wrong arch: kill
    for index, (code, jt, jf, k) in enumerate(program):
        if code == layers._JA:  # a long jump, by k
            assert index + 1 + k < len(program)
        elif code & 0x07 == 0x05:  # jumps must land inside the program
            assert index + 1 + max(jt, jf) < len(program)
    assert program[-1][0] == 0x06  # every path ends in a return
    assert any(k == 4242 for _, _, _, k in program)  # signals allowed only to the child itself


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_the_filter_a_child_installs_is_the_program_for_its_pid(arch):
    """A child patches its pid into a buffer built by the fork server (load_for_pid); what it installs must
    be exactly the program build_seccomp_filter checks for that pid, for one child after another."""
    template = layers.SeccompTemplate(arch)
    for pid in (2, 4242, 65_535, 4_194_303, 77):  # up to the kernel's pid_max
        template.patch(pid)
        installed = ctypes.string_at(template._fprog.filter, template._fprog.len * 8)
        assert installed == layers.build_seccomp_filter(arch, own_pid=pid)
        assert installed != layers.build_seccomp_filter(arch, own_pid=pid + 1)


def test_seccomp_denies_execve_with_eperm():
    program = decode_bpf(layers.build_seccomp_filter("x86_64", own_pid=1))
    execve = [i for i, (code, _, _, k) in enumerate(program) if code == 0x15 and k == 59]
    assert execve, "execve must be matched"
    index = execve[0]
    target = program[index + 1 + program[index][1]]
    assert target == (0x06, 0, 0, layers._RET_ERRNO | 1)


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_mode_changes_succeed_without_effect_only_when_asked(arch):
    def outcome(program, number):
        matches = [i for i, (code, _, _, k) in enumerate(program) if code == 0x15 and k == number]
        return program[matches[0] + 1 + program[matches[0]][1]] if matches else None

    plain = decode_bpf(layers.build_seccomp_filter(arch, own_pid=1))
    hidden = decode_bpf(layers.build_seccomp_filter(arch, own_pid=1, ignore_mode_changes=True))
    for number in layers._MODE_CHANGES[arch].values():
        assert outcome(plain, number) is None  # allowed by default
        assert outcome(hidden, number) == (0x06, 0, 0, layers._RET_ERRNO | 0)  # returns 0, does nothing


def test_unknown_layer_name_is_rejected_by_name():
    with pytest.raises(SandboxConfigError, match="seccom"):
        SandboxConfig(disable=frozenset({"seccom"}))


def test_env_configuration_is_parsed_and_validated():
    config = SandboxConfig.from_env(
        {"REWARDPIPE_SANDBOX_DISABLE": "netns, landlock", "REWARDPIPE_SANDBOX_WORKERS": "3"}
    )
    assert config.disable == frozenset({"netns", "landlock"}) and config.workers == 3
    with pytest.raises(SandboxConfigError, match="REWARDPIPE_SANDBOX_WORKERS"):
        SandboxConfig.from_env({"REWARDPIPE_SANDBOX_WORKERS": "many"})
    with pytest.raises(SandboxConfigError, match="workers"):
        SandboxConfig(workers=0)
    with pytest.raises(SandboxConfigError, match="memory_mb"):
        SandboxConfig(memory_mb=0)


def test_interpreter_choice_respects_configuration_and_uid_layer():
    assert choose_interpreter(SandboxConfig(interpreter="/opt/python")) == ("/opt/python", "configured")
    _path, why = choose_interpreter(SandboxConfig(disable=frozenset({"uid"})))
    assert why == "scorer's interpreter"


def test_landlock_abi_probe_is_an_integer():
    assert layers.landlock_abi() >= 0


def test_uid_mapping_check_reads_the_namespace_map(tmp_path):
    rootless = tmp_path / "uid_map"
    rootless.write_text("         0       1000          1\n         1     100000      65536\n")
    assert layers.uid_is_mapped(0, str(rootless))
    assert layers.uid_is_mapped(65536, str(rootless))
    assert not layers.uid_is_mapped(1_000_000, str(rootless))


def test_probe_reports_success_exceptions_and_deaths():
    import os

    from rewardpipe.execution.runtime import zygote

    assert zygote._probe(lambda: None) is None
    assert "ZeroDivisionError" in zygote._probe(lambda: 1 / 0)
    assert zygote._probe(lambda: os.kill(os.getpid(), 9)) == "killed by SIGKILL"


def test_seccomp_self_test_passes_on_this_machine():
    from rewardpipe.execution.runtime import zygote

    arch = layers.seccomp_arch()
    if arch is None:
        pytest.skip("no seccomp syscall table for this architecture")
    assert zygote._probe(lambda: zygote._seccomp_self_test(arch)) is None


def test_a_process_that_cannot_run_its_next_job_is_doomed_whatever_its_limits_say():
    """A waiting sandbox child stopped, killed (not yet reaped) or gone keeps the limits and scheduling it
    was given until it is reaped: only its state tells the fork server not to hand it a job."""
    child = os.fork()
    if child == 0:
        time.sleep(30)
        os._exit(0)
    try:
        assert layers.doomed(child) is None
        os.kill(child, signal.SIGSTOP)
        # Seen from the moment the signal is queued, before the child acts on it.
        assert _queued_or(_eventually(lambda: layers.doomed(child)), "state T")
        os.kill(child, signal.SIGKILL)
        assert _queued_or(_eventually(lambda: layers.doomed(child)), "state Z", "exiting")
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
    assert layers.doomed(child) == "gone"


def test_a_limit_changed_after_the_same_limits_were_read_before_is_seen():
    """The fork server reads a sandbox process's limits around every job and reuses what it parsed from the
    same text: a lowered limit (another text) is still a change, and what one check returns is its own."""
    import resource

    child = os.fork()
    if child == 0:
        time.sleep(30)
        os._exit(0)
    try:
        expected = layers.process_state(child)
        for _ in range(3):  # the same text, read again
            assert layers.disturbed(expected, child) is None
        layers.process_state(child)["rlimits"].clear()  # the caller's copy, not the parsed one
        assert layers.disturbed(expected, child) is None
        soft, hard = resource.prlimit(child, resource.RLIMIT_NOFILE)
        resource.prlimit(child, resource.RLIMIT_NOFILE, (soft // 2, hard))
        assert "max open files" in (layers.disturbed(expected, child) or "")
        resource.prlimit(child, resource.RLIMIT_NOFILE, (soft, hard))
        assert layers.disturbed(expected, child) is None
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


def _queued_or(why: str | None, *states: str) -> bool:
    return why is not None and (why.endswith("has a kill or stop signal queued") or why in states)


def _eventually(probe, seconds: float = 5.0):
    """The probe's first non-None answer (signals act when their target is next scheduled)."""
    deadline = time.monotonic() + seconds
    while (answer := probe()) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return answer


def test_fd_plan_arranges_every_descriptor_even_through_cycles():
    """A forked child only runs the moves the fork server worked out: whatever numbers the sources have
    (a source on another's target, cycles, /dev/null among them), each target ends up with its source."""
    import random

    from rewardpipe.execution.runtime import zygote

    rng = random.Random(7)
    for _ in range(500):
        targets = rng.sample(range(2, 9), rng.randint(1, 5))
        sources = rng.sample(range(0, 12), len(targets) + 1)
        wanted, null_fd = dict(zip(targets, sources[:-1], strict=True)), sources[-1]
        table = {fd: f"file{fd}" for fd in range(0, 12)}  # what each number refers to before the moves
        expected = {target: table[source] for target, source in wanted.items()}
        expected.update({fd: table[null_fd] for fd in (0, 1) if fd not in wanted})
        moves, highest, gaps = zygote._fd_plan(wanted, null_fd)
        for source, target in moves:
            table[target] = table[source]
        assert {fd: table[fd] for fd in expected} == expected, (wanted, null_fd, moves)
        assert highest == max(wanted) and all(target > highest for _, target in moves if target not in expected)
        assert set(gaps) == set(range(2, highest)) - set(wanted)
