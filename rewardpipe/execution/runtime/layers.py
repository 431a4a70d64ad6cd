"""Isolation layers for the untrusted child: detection at fork-server start-up, application per child.

Each layer is probed once, in the fork server, and reported as a short human-readable string
(``"on ..."``, ``"off: <why>"``). Anything expensive (the Landlock ruleset, cgroup directories, the
network namespace) is built once per fork server; the per-child work is a handful of syscalls.

Only the standard library and ctypes are used, so the same code runs on AWS Lambda (no root, no
namespaces, possibly no Landlock) and simply reports which layers it could not apply.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import resource
import signal
import stat
import struct
import sysconfig
import time

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
CLONE_NEWNET = 0x40000000
CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_RDONLY = 0x2, 0x4, 0x8, 0x1
MS_REC, MS_PRIVATE = 0x4000, 1 << 18
MNT_DETACH = 2

LAYER_NAMES = ("uid", "netns", "mountns", "seccomp", "landlock", "chroot", "cgroup", "rlimits")


def _errno_text() -> str:
    code = ctypes.get_errno()
    return f"{errno.errorcode.get(code, code)}"


def prctl(option: int, arg2: int = 0) -> None:
    if _libc.prctl(option, arg2, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed: {_errno_text()}")


# --- network namespace ------------------------------------------------------------------------------

def enter_network_namespace() -> None:
    """A fresh netns has only a down loopback: no route anywhere, not even to 127.0.0.1 of the host."""
    if _libc.unshare(CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), f"unshare(CLONE_NEWNET) failed: {_errno_text()}")


# --- mount namespace and per-job tmpfs -----------------------------------------------------------------

def enter_private_mount_namespace() -> None:
    """A mount namespace of our own whose mounts never propagate back to the host's."""
    if _libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), f"unshare(CLONE_NEWNS) failed: {_errno_text()}")
    mount(None, "/", None, MS_REC | MS_PRIVATE)


def mount(source: str | None, target: str, fstype: str | None, flags: int, options: str | None = None) -> None:
    encode = lambda text: None if text is None else text.encode()  # noqa: E731
    if _libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(options)) != 0:
        raise OSError(ctypes.get_errno(), f"mount({target}) failed: {_errno_text()}")


def mount_tmpfs(target: str, size_bytes: int, inodes: int, mode: int, uid: int = 0, read_only: bool = False) -> None:
    flags = MS_NOSUID | MS_NODEV | MS_NOEXEC | (MS_RDONLY if read_only else 0)
    mount("rewardpipe", target, "tmpfs", flags, f"size={size_bytes},nr_inodes={inodes},mode={mode:o},uid={uid},gid={uid}")


def detach_mount(target: str) -> None:
    """Lazy unmount: the kernel frees the tmpfs, however deep its tree, once nothing uses it."""
    if _libc.umount2(target.encode(), MNT_DETACH) != 0:
        raise OSError(ctypes.get_errno(), f"umount2({target}) failed: {_errno_text()}")


def remove_tree(path: str) -> bool:
    """Delete ``path`` and everything below it without recursion and with two descriptors at most, so
    a tree the model made (thousands of nested directories, names near NAME_MAX, chmod 000 directories,
    symlinks) can neither exhaust the stack nor the descriptor table. True when it is gone."""
    try:
        if not os.path.isdir(path) or os.path.islink(path):
            os.unlink(path)
            return True
    except FileNotFoundError:
        return True
    except OSError:
        return False
    names: list[str] = []  # the path from ``path`` down to the directory ``fd`` is open on
    try:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except PermissionError:  # made unlistable on purpose (zygote.py), or by a job: ours to undo
            os.chmod(path, 0o700)
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        for _ in range(10_000_000):  # a bound, in case something keeps refilling the tree
            subdir = None
            with os.scandir(fd) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            subdir = entry.name
                            break
                        os.unlink(entry.name, dir_fd=fd)
                    except FileNotFoundError:
                        pass
            if subdir is not None:
                try:
                    os.rmdir(subdir, dir_fd=fd)  # empty: no need to go in
                    continue
                except OSError:
                    pass
                try:
                    child = os.open(subdir, flags, dir_fd=fd)
                except PermissionError:  # a chmod 000 directory left by the job: make it ours again
                    os.chmod(subdir, 0o700, dir_fd=fd, follow_symlinks=False)
                    child = os.open(subdir, flags, dir_fd=fd)
                os.close(fd)
                fd = child
                names.append(subdir)
                continue
            if not names:
                break
            parent = os.open("..", flags, dir_fd=fd)
            os.close(fd)
            fd = parent
            os.rmdir(names.pop(), dir_fd=fd)
    except OSError:
        return False
    finally:
        os.close(fd)
    try:
        os.rmdir(path)
    except OSError:
        return False
    return True


def directory_usage(path: str, max_entries: int) -> tuple[int, int]:
    """(bytes allocated, entries) of the tree under ``path``, the directory itself excluded.

    Stops reading past ``max_entries``, so a job that made 100,000 tiny files costs no more to measure
    than one just over its budget. Iterative, never follows links, and holds two descriptors per level
    of the branch being read (a level costs an entry, so the depth is bounded too). A directory the
    job made unreadable (chmod 000) is made readable again, as its owner may; one that still cannot be
    read raises OSError, which the caller treats as over budget."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    total_bytes = entries = 0
    fds = [os.open(path, flags)]
    listings = []
    try:
        listings.append(os.scandir(fds[-1]))
        while listings and entries <= max_entries:
            entry = next(listings[-1], None)
            if entry is None:
                listings.pop().close()
                os.close(fds.pop())
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:  # removed by the job since it was listed
                continue
            entries += 1
            total_bytes += info.st_blocks * 512
            if not stat.S_ISDIR(info.st_mode):
                continue
            try:
                child = os.open(entry.name, flags, dir_fd=fds[-1])
            except PermissionError:
                os.chmod(entry.name, 0o700, dir_fd=fds[-1], follow_symlinks=False)
                child = os.open(entry.name, flags, dir_fd=fds[-1])
            fds.append(child)
            listings.append(os.scandir(child))
    finally:
        for listing in listings:
            listing.close()
        for fd in fds:
            os.close(fd)
    return total_bytes, entries


# --- Landlock -----------------------------------------------------------------------------------------

_SYS_LANDLOCK_CREATE_RULESET = 444  # same number on x86_64 and aarch64 (generic table)
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446

_FS_EXECUTE = 1 << 0
_FS_WRITE_FILE = 1 << 1
_FS_READ_FILE = 1 << 2
_FS_READ_DIR = 1 << 3
_FS_TRUNCATE = 1 << 14
_FS_IOCTL_DEV = 1 << 15
_FILE_ONLY_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
_FS_MUTATION = (1 << 1) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12)
_FS_REFER = 1 << 13
_NET_BIND_TCP = 1 << 0
_NET_CONNECT_TCP = 1 << 1
_SCOPE_ABSTRACT_UNIX = 1 << 0
_SCOPE_SIGNAL = 1 << 1


def landlock_abi() -> int:
    abi = _libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return int(abi) if abi > 0 else 0


def _all_fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1  # ABI 1: execute .. make_sym
    if abi >= 2:
        rights |= 1 << 13  # refer
    if abi >= 3:
        rights |= _FS_TRUNCATE
    if abi >= 5:
        rights |= _FS_IOCTL_DEV
    return rights


class LandlockRuleset:
    """Read-only access to the interpreter and shared libraries, read-write to the worker directory,
    no TCP (ABI >= 4), and no signals or abstract sockets outside the child's own domain (ABI >= 6).
    The repository, the datasets, /proc, /root and the rest of the host file system are invisible."""

    def __init__(self, abi: int, read_only: list[str], read_write: list[str]):
        self.abi = abi
        fs_rights = _all_fs_rights(abi)
        fields = [fs_rights]
        if abi >= 4:
            fields.append(_NET_BIND_TCP | _NET_CONNECT_TCP)
        if abi >= 6:
            fields.append(_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL)
        attr = struct.pack(f"={len(fields)}Q", *fields)
        buf = ctypes.create_string_buffer(attr, len(attr))
        fd = _libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
        if fd < 0:
            raise OSError(ctypes.get_errno(), f"landlock_create_ruleset failed: {_errno_text()}")
        self.fd = int(fd)
        read_rights = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
        self.covered: list[str] = []
        for path in read_only:
            self._allow(path, read_rights)
        for path in read_write:
            self._allow(path, fs_rights)
        os.set_inheritable(self.fd, False)

    def _allow(self, path: str, rights: int) -> None:
        try:
            path_fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return  # a path missing on this machine simply stays inaccessible
        try:
            if not os.path.isdir(path):
                rights &= _FILE_ONLY_RIGHTS
            rule = struct.pack("=Qi", rights, path_fd)  # struct landlock_path_beneath_attr is packed
            buf = ctypes.create_string_buffer(rule, len(rule))
            if _libc.syscall(_SYS_LANDLOCK_ADD_RULE, ctypes.c_int(self.fd), ctypes.c_int(1), buf, ctypes.c_uint32(0)) != 0:
                raise OSError(ctypes.get_errno(), f"landlock_add_rule({path}) failed: {_errno_text()}")
            self.covered.append(path)
        finally:
            os.close(path_fd)

    def restrict_self(self) -> None:
        _restrict_self(self.fd)


def confine_writes_to(directory: str, abi: int) -> None:
    """Stack a second Landlock layer on the calling process: every change to the file system (write,
    create, remove, rename, link, make a FIFO or socket) is allowed under ``directory`` only. The first
    layer (built once per fork server) already limits reads; this one, built per child, keeps a job out
    of the directories of the jobs before and after it, although they belong to the same uid."""
    handled = _FS_MUTATION | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    attr = struct.pack("=Q", handled)
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = _libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if fd < 0:
        raise OSError(ctypes.get_errno(), f"landlock_create_ruleset failed: {_errno_text()}")
    try:
        path_fd = os.open(directory, os.O_PATH | os.O_CLOEXEC)
        try:
            rule = struct.pack("=Qi", handled, path_fd)
            rule_buf = ctypes.create_string_buffer(rule, len(rule))
            if _libc.syscall(_SYS_LANDLOCK_ADD_RULE, ctypes.c_int(fd), ctypes.c_int(1), rule_buf, ctypes.c_uint32(0)) != 0:
                raise OSError(ctypes.get_errno(), f"landlock_add_rule({directory}) failed: {_errno_text()}")
        finally:
            os.close(path_fd)
        _restrict_self(int(fd))
    finally:
        os.close(int(fd))


def _restrict_self(fd: int) -> None:
    if _libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
        raise OSError(ctypes.get_errno(), f"landlock_restrict_self failed: {_errno_text()}")


def interpreter_read_paths() -> list[str]:
    """Directories the child may read: the interpreter's stdlib and shared libraries, nothing else."""
    paths = []
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        value = sysconfig.get_paths().get(key)
        if value:
            paths.append(os.path.realpath(value))
    paths += ["/usr", "/lib", "/lib64", "/etc/ld.so.cache", "/etc/localtime", "/dev/null", "/dev/urandom", "/dev/zero"]
    return sorted(set(paths))


# --- seccomp ------------------------------------------------------------------------------------------

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# Syscalls the model's code never needs: starting programs, new processes (threads stay allowed),
# debugging or reading other processes, namespaces, mounts, kernel modules, BPF, io_uring (which would
# bypass this filter for its own operations), and changing the system clock.
_DENIED = {
    "x86_64": {
        "execve": 59, "execveat": 322, "fork": 57, "vfork": 58, "ptrace": 101, "process_vm_readv": 310,
        "process_vm_writev": 311, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
        "unshare": 272, "setns": 308, "bpf": 321, "perf_event_open": 298, "keyctl": 250, "add_key": 248,
        "request_key": 249, "userfaultfd": 323, "kexec_load": 246, "init_module": 175, "finit_module": 313,
        "delete_module": 176, "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163,
        "settimeofday": 164, "clock_settime": 227, "personality": 135, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "open_by_handle_at": 304,
        "name_to_handle_at": 303, "pidfd_getfd": 438, "process_madvise": 440, "quotactl": 179,
        "vhangup": 153, "iopl": 172, "ioperm": 173,
        # Host UNIX sockets are reachable by path (Landlock up to ABI 7 does not govern connect()), and
        # the child needs no socket beyond the channels it inherited.
        "socket": 41, "socketpair": 53,
        # Signals through a pidfd get around the own-pid rule below.
        "pidfd_open": 434, "pidfd_send_signal": 424,
        # FIFOs and device nodes (a FIFO planted where another job will open a file hangs that job),
        # and extended attributes (a channel that outlives file contents).
        "mknod": 133, "mknodat": 259, "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190,
        "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199,
    },
    "aarch64": {
        "execve": 221, "execveat": 281, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
        "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "unshare": 97, "setns": 268,
        "bpf": 280, "perf_event_open": 241, "keyctl": 219, "add_key": 217, "request_key": 218,
        "userfaultfd": 282, "kexec_load": 104, "init_module": 105, "finit_module": 273,
        "delete_module": 106, "reboot": 142, "swapon": 224, "swapoff": 225, "acct": 89,
        "settimeofday": 170, "clock_settime": 112, "personality": 92, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "open_by_handle_at": 265,
        "name_to_handle_at": 264, "pidfd_getfd": 438, "process_madvise": 440, "quotactl": 60,
        "vhangup": 58,
        "socket": 198, "socketpair": 199, "pidfd_open": 434, "pidfd_send_signal": 424,
        "mknodat": 33, "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "removexattr": 14,
        "lremovexattr": 15, "fremovexattr": 16,
    },
}
# Changing a file's mode, made a silent no-op (the call "succeeds") where the model's code runs under the
# same uid as the other jobs' directories and Landlock is missing: their names are hidden only by
# directories their owner may not list, and the owner could otherwise just grant itself the right. A
# no-op rather than EPERM, so shutil.copy and friends keep working.
_MODE_CHANGES = {
    "x86_64": {"chmod": 90, "fchmodat": 268, "fchmodat2": 452},
    "aarch64": {"fchmodat": 53, "fchmodat2": 452},
}
_SPECIAL = {
    "x86_64": {"clone": 56, "clone3": 435},
    "aarch64": {"clone": 220, "clone3": 435},
}
# Every syscall that sends a signal, with the target pid (or tgid) in its first argument: allowed only
# when that is the child itself. kill(0, …) and kill(-pgid, …) name a group, never the own pid.
_SIGNAL_SENDERS = {
    "x86_64": {"kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297},
    "aarch64": {"kill": 129, "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240},
}
_RET_ALLOW = 0x7FFF0000
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_CLONE_THREAD = 0x00010000
_LD_ABS_W = 0x20
_JEQ = 0x15
_JGE = 0x35
_JSET = 0x45
_RET = 0x06


class _sock_fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def seccomp_arch() -> str | None:
    machine = platform.machine()
    return machine if machine in _AUDIT_ARCH else None


def build_seccomp_filter(arch: str, own_pid: int, ignore_mode_changes: bool = False) -> bytes:
    return SeccompTemplate(arch, ignore_mode_changes).for_pid(own_pid)


class SeccompTemplate:
    """The filter compiled once per fork server; each child only patches in its own pid (4 bytes)."""

    def __init__(self, arch: str, ignore_mode_changes: bool = False):
        self.program, self._pid_index = _compile_seccomp(arch, ignore_mode_changes)

    def for_pid(self, pid: int) -> bytes:
        program = bytearray(self.program)
        struct.pack_into("=I", program, self._pid_index * 8 + 4, pid & 0xFFFFFFFF)
        return bytes(program)


def _compile_seccomp(arch: str, ignore_mode_changes: bool = False) -> tuple[bytes, int]:
    """Classic BPF: allow by default, deny the list above with EPERM (no sockets at all), allow clone
    only for threads, and signals only to the child itself. clone3 answers ENOSYS so libc falls back to
    clone, whose flags the filter can inspect."""
    denied = sorted(_DENIED[arch].values())
    special = _SPECIAL[arch]
    prog: list[tuple] = []  # (code, jt_label_or_offset, jf_label_or_offset, k)

    def emit(code, k, jt=0, jf=0):
        prog.append([code, jt, jf, k])

    emit(_LD_ABS_W, 4)  # seccomp_data.arch
    emit(_JEQ, _AUDIT_ARCH[arch], 1, 0)
    emit(_RET, _RET_KILL_PROCESS)
    emit(_LD_ABS_W, 0)  # seccomp_data.nr
    if arch == "x86_64":
        emit(_JGE, 0x40000000, "deny", 0)  # x32 ABI: never legitimate here
    for number in denied:
        emit(_JEQ, number, "deny", 0)
    for number in sorted(_MODE_CHANGES[arch].values()) if ignore_mode_changes else ():
        emit(_JEQ, number, "pretend", 0)
    emit(_JEQ, special["clone"], "clone", 0)
    emit(_JEQ, special["clone3"], "enosys", 0)
    for number in sorted(_SIGNAL_SENDERS[arch].values()):
        emit(_JEQ, number, "own_pid", 0)
    labels = {}
    emit(_RET, _RET_ALLOW)
    labels["deny"] = len(prog)
    emit(_RET, _RET_ERRNO | errno.EPERM)
    labels["pretend"] = len(prog)
    emit(_RET, _RET_ERRNO | 0)  # the call returns 0 without running
    labels["enosys"] = len(prog)
    emit(_RET, _RET_ERRNO | errno.ENOSYS)
    labels["clone"] = len(prog)
    emit(_LD_ABS_W, 16)  # low 32 bits of args[0] (flags)
    emit(_JSET, _CLONE_THREAD, 0, 1)
    emit(_RET, _RET_ALLOW)
    emit(_RET, _RET_ERRNO | errno.EPERM)
    labels["own_pid"] = len(prog)
    # The kernel reads a pid_t (the low 32 bits), so that is what is compared.
    emit(_LD_ABS_W, 16)  # target pid (tgid for tgkill and rt_tgsigqueueinfo)
    pid_index = len(prog)
    emit(_JEQ, 0, 0, 1)  # k: the child's own pid, patched in by SeccompTemplate.for_pid
    emit(_RET, _RET_ALLOW)
    emit(_RET, _RET_ERRNO | errno.EPERM)
    out = bytearray()
    for index, (code, jt, jf, k) in enumerate(prog):
        jt = labels[jt] - index - 1 if isinstance(jt, str) else jt
        jf = labels[jf] - index - 1 if isinstance(jf, str) else jf
        if not (0 <= jt <= 255 and 0 <= jf <= 255):
            raise ValueError("seccomp jump out of range")
        out += struct.pack("=HBBI", code, jt, jf, k)
    return bytes(out), pid_index


def load_seccomp(program: bytes) -> None:
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _sock_fprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _libc.prctl.argtypes = None  # this call passes a pointer as arg3
    try:
        if _libc.prctl(PR_SET_SECCOMP, 2, ctypes.byref(fprog), 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"seccomp filter rejected: {_errno_text()}")
    finally:
        _libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


# --- cgroups ------------------------------------------------------------------------------------------

class CgroupSet:
    """One cgroup per worker, per controller, holding only the untrusted child and its descendants.

    pids.max bounds fork bombs for the whole tree, memory.limit bounds the tree's total memory, and
    killing every pid listed in the group kills a tree even when a member called setsid()."""

    def __init__(self, name: str, pids_max: int, memory_bytes: int):
        self.dirs: list[str] = []
        self.notes: list[str] = []
        own = _own_cgroup_paths()
        v2_root = "/sys/fs/cgroup"
        if os.path.exists(os.path.join(v2_root, "cgroup.controllers")):
            base = os.path.join(v2_root, own.get("", "/").lstrip("/"))
            path = os.path.join(base, name)
            self._make(path)
            self._write(path, "pids.max", str(pids_max))
            self._write(path, "memory.max", str(memory_bytes))
            self._write(path, "memory.swap.max", "0", required=False)
            self.version = 2
        else:
            self.version = 1
            for controller, limits in (
                ("pids", {"pids.max": str(pids_max)}),
                ("memory", {"memory.limit_in_bytes": str(memory_bytes)}),
            ):
                mount = os.path.join("/sys/fs/cgroup", controller)
                if not os.path.isdir(mount):
                    self.notes.append(f"{controller} controller not mounted")
                    continue
                nested = os.path.join(mount, own.get(controller, "/").lstrip("/"))
                base = nested if os.path.isdir(nested) else mount
                path = os.path.join(base, name)
                self._make(path)
                for key, value in limits.items():
                    self._write(path, key, value)
        if not self.dirs:
            raise OSError(errno.ENOTSUP, "no usable cgroup controller")

    def _make(self, path: str) -> None:
        try:
            os.mkdir(path, 0o755)
        except FileExistsError:
            pass
        self.dirs.append(path)

    def _write(self, path: str, key: str, value: str, required: bool = True) -> None:
        try:
            with open(os.path.join(path, key), "w") as handle:
                handle.write(value)
        except OSError:
            if required:
                raise

    def join(self, pid: int = 0) -> None:
        for path in self.dirs:
            with open(os.path.join(path, "cgroup.procs"), "w") as handle:
                handle.write(str(pid))

    def members(self) -> set[int]:
        # Every controller's group holds the same processes, so the first one is enough.
        pids: set[int] = set()
        for path in self.dirs[:1]:
            try:
                with open(os.path.join(path, "cgroup.procs")) as handle:
                    pids.update(int(line) for line in handle if line.strip())
            except OSError:
                pass
        return pids

    def kill_all(self, reap=None, attempts: int = 200) -> bool:
        """SIGKILL every member until the group is empty; True when it emptied."""
        if self.version == 2:
            try:
                with open(os.path.join(self.dirs[0], "cgroup.kill"), "w") as handle:
                    handle.write("1")
            except OSError:
                pass
        for _ in range(attempts):
            members = self.members()
            if not members:
                return True
            for pid in members:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if reap is not None:
                reap()
            time.sleep(0.0002)
        return not self.members()

    def remove(self) -> None:
        self.kill_all(attempts=20)
        for path in self.dirs:
            try:
                os.rmdir(path)
            except OSError:
                pass


def _own_cgroup_paths() -> dict[str, str]:
    paths: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup") as handle:
            for line in handle:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for controller in controllers.split(","):
                    paths[controller] = path
    except OSError:
        pass
    return paths


def remove_stale_cgroups(prefix: str) -> None:
    """Remove worker cgroups left by fork servers that died without cleaning up."""
    own = _own_cgroup_paths()
    candidates = [("/sys/fs/cgroup", own.get("", "/"))]
    for controller in ("pids", "memory"):
        candidates.append((os.path.join("/sys/fs/cgroup", controller), own.get(controller, "/")))
    for mount, rel in candidates:
        base = os.path.join(mount, rel.lstrip("/"))
        if not os.path.isdir(base):
            continue
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in names:
            if not name.startswith(prefix):
                continue
            try:
                owner = int(name[len(prefix):].split("-", 1)[0])
            except ValueError:
                continue
            if _alive(owner):
                continue
            empty_and_remove_cgroup(os.path.join(base, name))


def empty_and_remove_cgroup(path: str) -> None:
    """Kill every process in the cgroup at ``path``, then remove it (best effort)."""
    for _ in range(50):
        try:
            with open(os.path.join(path, "cgroup.procs")) as handle:
                members = [int(line) for line in handle if line.strip()]
        except OSError:
            return
        if not members:
            break
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.005)
    try:
        os.rmdir(path)
    except OSError:
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --- rlimits ------------------------------------------------------------------------------------------

def apply_rlimits(cpu_seconds: int | None, address_space: int, nproc: int, file_size: int) -> None:
    """Hard == soft, so the child cannot raise them again."""
    limits = [] if cpu_seconds is None else [(resource.RLIMIT_CPU, cpu_seconds)]
    for limit, value in limits + [
        (resource.RLIMIT_AS, address_space),
        (resource.RLIMIT_NPROC, nproc),
        (resource.RLIMIT_FSIZE, file_size),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NOFILE, 256),
    ]:
        resource.setrlimit(limit, (value, value))


def uid_is_mapped(uid: int, uid_map: str = "/proc/self/uid_map") -> bool:
    """Inside a user namespace (rootless containers) only mapped uids can be switched to."""
    try:
        with open(uid_map) as handle:
            ranges = [tuple(int(field) for field in line.split()) for line in handle if line.strip()]
    except (OSError, ValueError):
        return True  # no user-namespace information: assume the initial namespace
    return any(inside <= uid < inside + count for inside, _outside, count in ranges)


def drop_privileges(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise OSError(errno.EPERM, "uid drop did not take effect")
