"""The Lambda functions run on arm64 (Graviton) by default, and everything that is architecture-specific
follows: the layer's compiled modules (tests/infra/test_layer_build.py), and the code sandbox's seccomp
filter, whose aarch64 syscall table is checked here against the kernel's own table and run through a
classic-BPF interpreter (no aarch64 machine is needed to see what the filter answers there). The
Fargate image stays linux/amd64 (tests/infra/test_real_account.py)."""

from __future__ import annotations

import errno
import json
import re
import struct
from pathlib import Path

import pytest

from rewardpipe.execution.runtime import layers
from tests.aws import harness

pytestmark = pytest.mark.xdist_group("cdk")  # it synthesizes (tests/synth_group.py)


def _functions_using_the_layer(template: dict) -> dict[str, dict]:
    resources = template["Resources"]
    (layer_id,) = [k for k, r in resources.items() if r["Type"] == "AWS::Lambda::LayerVersion"]
    return {
        k: r["Properties"]
        for k, r in resources.items()
        if r["Type"] == "AWS::Lambda::Function" and {"Ref": layer_id} in r["Properties"].get("Layers", [])
    }


def _layer(template: dict) -> dict:
    (layer,) = [r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::LayerVersion"]
    return layer


def test_every_rewardpipe_function_and_its_layer_run_on_arm64(synth):
    functions = _functions_using_the_layer(synth.template)
    assert len(functions) >= 7  # code runner, single-turn reward, 4 rollout states, variance check
    assert {tuple(p.get("Architectures", ["x86_64"])) for p in functions.values()} == {("arm64",)}
    assert _layer(synth.template)["CompatibleArchitectures"] == ["arm64"]


def test_the_nova_bridge_functions_run_on_arm64_too():
    nova = harness.synthesized(
        json.dumps({"rewardpipe_nova": {"enabled": True, "rollout_timeout_s": 600}}, sort_keys=True)
    )
    functions = _functions_using_the_layer(nova.template)
    assert sum("Nova" in k for k in functions) >= 5
    assert {tuple(p["Architectures"]) for p in functions.values()} == {("arm64",)}


def test_x86_64_is_one_setting_away():
    x86 = harness.synthesized(harness.architecture_context("x86_64"))
    functions = _functions_using_the_layer(x86.template)
    assert functions and {tuple(p["Architectures"]) for p in functions.values()} == {("x86_64",)}
    assert _layer(x86.template)["CompatibleArchitectures"] == ["x86_64"]


def test_an_unknown_architecture_fails_the_synth_naming_the_setting():
    from stacks.config import DeploymentSettings

    with pytest.raises(ValueError, match="architecture"):
        DeploymentSettings.model_validate({"lambda": {"architecture": "aarch64"}})


# -- the sandbox's seccomp filter on aarch64 ---------------------------------------------------------------

_KERNEL_TABLES = {
    "aarch64": Path("/usr/include/asm-generic/unistd.h"),
    "x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
}


@pytest.mark.parametrize("arch", ["aarch64", "x86_64"])
def test_the_filters_syscall_numbers_are_the_kernels(arch):
    header = _KERNEL_TABLES[arch]
    if not header.is_file():
        pytest.skip(f"{header} (linux-libc-dev) is not installed")
    kernel = {m[1]: int(m[2]) for m in re.finditer(r"#define __NR(?:3264)?_(\w+)\s+(\d+)\b", header.read_text())}
    kernel.pop("syscalls", None)  # __NR_syscalls: how many there are (one past the newest), not a call
    ours = {
        **layers._DENIED[arch],
        **layers._SPECIAL[arch],
        **layers._SIGNAL_SENDERS[arch],
        **layers._PID_TAKERS[arch],
        **layers._CLOCK_TAKERS[arch],
        **layers._FILE_CALLS[arch],
        **layers._FILE_CHANGES[arch],
        **layers._PAGE_CACHE_CALLS[arch],
        **layers._FUTEX2_CALLS,
        **{name: number for name, (number, _) in layers._WHICH_WHO[arch].items()},
    }
    # Headers older than a call (setxattrat, file_setattr: Linux 6.13, 6.17) do not name it: such a call must be
    # newer than every call they do name, and no newer than the filter's newest.
    newest_in_headers = max(kernel.values())
    wrong = {
        name: (number, kernel.get(name))
        for name, number in ours.items()
        if kernel.get(name) != number
        and not (name not in kernel and newest_in_headers < number <= layers.NEWEST_KNOWN_SYSCALL)
    }
    assert not wrong, f"{arch}: (ours, kernel's) {wrong}"
    assert max(ours.values()) <= layers.NEWEST_KNOWN_SYSCALL


def test_aarch64_denies_what_x86_64_denies_where_the_syscall_exists():
    """fork, vfork, mknod, iopl, ioperm, inotify_init and pipe do not exist on aarch64 (clone, mknodat,
    inotify_init1 and pipe2 do their work, and are filtered); every other denied syscall is denied on both."""
    missing = set(layers._DENIED["x86_64"]) - set(layers._DENIED["aarch64"])
    assert missing == {"fork", "vfork", "mknod", "iopl", "ioperm", "inotify_init", "pipe"}


_SECCOMP_RET_ACTION = 0xFFFF0000


def _run_filter(program: bytes, arch: str, nr: int, args: tuple[int, ...] = ()) -> int:
    """Interpret the classic-BPF program on one seccomp_data (nr, arch, ip, args[6])."""
    data = struct.pack("=iIQ6Q", nr, layers._AUDIT_ARCH[arch], 0, *(list(args) + [0] * (6 - len(args))))
    insns = [struct.unpack_from("=HBBI", program, i) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == layers._LD_ABS_W:
            acc = struct.unpack_from("=I", data, k)[0]
        elif code == layers._RET:
            return k
        elif code in (layers._JEQ, layers._JGE, layers._JSET):
            taken = {layers._JEQ: acc == k, layers._JGE: acc >= k, layers._JSET: bool(acc & k)}[code]
            pc += jt if taken else jf
        elif code == layers._JA:
            pc += k
        else:
            raise AssertionError(f"instruction {code:#x} not interpreted")
        pc += 1


def _answer(verdict: int) -> str:
    if verdict & _SECCOMP_RET_ACTION == layers._RET_ALLOW:
        return "allow"
    if verdict & _SECCOMP_RET_ACTION == layers._RET_KILL_PROCESS:
        return "kill"
    return errno.errorcode[verdict & 0xFFFF]


@pytest.mark.parametrize("arch", ["aarch64", "x86_64"])
def test_the_compiled_filter_answers_as_designed(arch):
    own = 4242
    program = layers.build_seccomp_filter(arch, own)
    numbers = {**layers._DENIED[arch], **layers._SPECIAL[arch], **layers._SIGNAL_SENDERS[arch]}
    read, write = {"aarch64": (63, 64), "x86_64": (0, 1)}[arch]
    assert _answer(_run_filter(program, arch, read)) == "allow"
    assert _answer(_run_filter(program, arch, write)) == "allow"
    for name in layers._DENIED[arch]:
        assert _answer(_run_filter(program, arch, numbers[name])) == "EPERM", name
    clone_thread = 0x00010000 | 0x00000100 | 0x00000800  # CLONE_THREAD | CLONE_VM | CLONE_SIGHAND
    assert _answer(_run_filter(program, arch, numbers["clone"], (clone_thread,))) == "allow"
    assert _answer(_run_filter(program, arch, numbers["clone"], (17,))) == "EPERM"  # fork() as clone(SIGCHLD)
    assert _answer(_run_filter(program, arch, numbers["clone3"])) == "ENOSYS"
    for name in layers._SIGNAL_SENDERS[arch]:
        assert _answer(_run_filter(program, arch, numbers[name], (own, 9))) == "allow", name
        assert _answer(_run_filter(program, arch, numbers[name], (1, 9))) == "EPERM", name
    # A syscall made under another ABI is never interpreted with this table: the process is killed.
    other = "x86_64" if arch == "aarch64" else "aarch64"
    assert _answer(_run_filter(program, other, read)) == "kill"


def _rule_answer(block: list, arch: str, own: int, nr: int, args: tuple[int, ...]) -> int:
    """What one rule's block alone answers (its pid placeholder filled in), as the reference."""
    code = [(c, jt, jf, k.value(own) if isinstance(k, layers._OwnValue) else k) for c, jt, jf, k in block]
    return _run_filter(b"".join(struct.pack("=HBBI", *insn) for insn in code), arch, nr, args)


@pytest.mark.parametrize(
    ("ignore_mode_changes", "read_only_files"), [(False, False), (True, False), (False, True), (True, True)]
)
@pytest.mark.parametrize("arch", ["aarch64", "x86_64"])
def test_the_search_answers_every_syscall_as_its_rule_does(arch, ignore_mode_changes, read_only_files):
    """The compiled filter finds each syscall's rule by a binary search: for every number (and arguments that
    reach each branch of the blocks), its answer is the rule's own, and allow where no rule names it."""
    own = 4242
    program = layers.build_seccomp_filter(
        arch, own, ignore_mode_changes=ignore_mode_changes, read_only_files=read_only_files
    )
    rules = dict(layers.seccomp_rules(arch, ignore_mode_changes, read_only_files))
    interesting = [0, 1, own, own + 1, 17, 0x00010000 | 0x00000100 | 0x00000800]
    interesting += list(layers._FCNTL_DENIED_COMMANDS.values()) + list(layers._IOCTL_DENIED_REQUESTS.values())
    interesting += list(layers._FCNTL_LOCK_COMMANDS.values())
    interesting += [0x80, 0x81, 0x89, 0x109, 0x189, 6, 9, 13]  # futex ops, private and not
    interesting += [0x00010000 | 0x00000100 | 0x00000800 | layers._CLONE_PIDFD]  # a thread with a pidfd
    interesting += list(layers._IOCTL_ALLOWED.values()) + list(layers._MADV_EVICTING.values())
    interesting += [layers._O_TMPFILE_BIT, 0o2, 0xFFFFFFFF, 0o100, 0o1000, 0o2000, 0o4000, 0o200000]
    # CPU clocks (clockid ((~pid) << 3) | type): its own and another process's, a thread's, a clock by descriptor.
    interesting += [((~pid) << 3 | kind) & 0xFFFFFFFF for pid in (0, own, own + 1, 1) for kind in (0, 2, 3, 6)]
    variants = [()] + [(value,) for value in interesting] + [(0, value) for value in interesting]
    variants += [(0, 0, value) for value in (0, 1, 4, 20, 21, 0o101, 0o2000, 0o200000, layers._O_TMPFILE_BIT)]
    variants += [(value, own) for value in (0, 1, 2, 3)]
    variants += [(0, 0, 0, 0, 0, value) for value in (0, 8, 0x80)]  # preadv2/pwritev2 flags
    variants += [(0, 0, 0, value) for value in (0x01, 0x02, 0x03, 0x21, 0x22)]  # mmap flags
    highest = 0x40000000 + 8 if arch == "x86_64" else 1100
    for nr in [*range(0, 1100), 0x40000000, highest]:
        for args in variants if nr in rules else [()]:
            expected = _rule_answer(rules[nr], arch, own, nr, args) if nr in rules else layers._RET_ALLOW
            if arch == "x86_64" and nr >= 0x40000000:
                expected = layers._RET_ERRNO | errno.EPERM  # the x32 ABI, refused before any rule
            elif nr > layers.NEWEST_KNOWN_SYSCALL:
                expected = layers._RET_ERRNO | errno.ENOSYS  # newer than the filter: unknown, refused
            assert _run_filter(program, arch, nr, args) == expected, (nr, args)
