"""The fork server ("zygote"): started once per worker, forks two children per execution.

* U, the untrusted child, is hardened (own session and cgroup, rlimits, unprivileged uid, Landlock,
  seccomp, clean environment) and then runs the model's code.
* T, the trusted child, reads the hidden tests from a memfd the scorer sent, runs them against U
  through stubs, and writes the verdict to another memfd the scorer reads.

The zygote itself never reads the tests or the verdict, so a later U (a copy of the zygote's memory)
cannot find them. It enforces the wall-clock deadline and kills U's whole process tree afterwards.
"""

from __future__ import annotations

import fcntl
import gc
import importlib
import json
import os
import random
import select
import shutil
import signal
import socket
import sys
import time

from . import harness, layers, trusted, untrusted, wire  # noqa: F401 - loaded before any child can lose file access

# Imported before forking so children pay nothing for them, and so a child that can no longer read
# the interpreter's directory (Landlock, or a stdlib the sandbox uid cannot read) still has them.
PREIMPORTS = (
    "abc", "array", "ast", "base64", "binascii", "bisect", "calendar", "cmath", "collections",
    "collections.abc", "contextlib", "copy", "csv", "dataclasses", "datetime", "decimal", "difflib",
    "enum", "fractions", "functools", "hashlib", "heapq", "inspect", "io", "itertools", "json",
    "keyword", "math", "numbers", "operator", "pprint", "queue", "random", "re", "secrets", "statistics",
    "string", "struct", "textwrap", "time", "traceback", "types", "typing", "unicodedata", "unittest",
    "unittest.mock", "uuid", "weakref", "zlib", "fnmatch", "shlex", "copyreg", "locale", "zoneinfo",
)

UNTRUSTED_FDS = {"read": 3, "write": 4, "ruleset": 5}
HARDENING_FAILED_EXIT = 121


class Zygote:
    def __init__(self, config: dict):
        self.config = config
        self.disabled = set(config.get("disable", []))
        self.isolation: dict[str, str] = {}
        self.uid = None
        self.cgroups = None
        self.ruleset = None
        self.seccomp_arch = None
        self.jobs = 0
        self.preimported = []
        for name in PREIMPORTS:
            try:
                importlib.import_module(name)
                self.preimported.append(name)
            except Exception:  # noqa: BLE001 - optional modules (numpy) may be absent
                pass
        self.worker_dir = config["worker_dir"]
        os.makedirs(self.worker_dir, mode=0o711, exist_ok=True)
        self._detect()
        gc.collect()
        gc.freeze()

    def _off(self, layer: str, why: str) -> None:
        self.isolation[layer] = f"off: {why}"

    def _detect(self) -> None:
        root = os.geteuid() == 0
        iso = self.isolation
        iso["trust"] = "split: tests, runner and verdict in a separate trusted process"
        # uid
        if "uid" in self.disabled:
            self._off("uid", "disabled by configuration")
        elif not root:
            self._off("uid", "fork server is not root, children keep its uid")
        else:
            self.uid = int(self.config["uid"])
            iso["uid"] = f"on: {self.uid}"
        # network
        if "netns" in self.disabled:
            self._off("netns", "disabled by configuration")
        else:
            try:
                layers.enter_network_namespace()
                iso["netns"] = "on: empty network namespace"
            except OSError as exc:
                self._off("netns", exc.strerror or str(exc))
        # cgroups
        if "cgroup" in self.disabled:
            self._off("cgroup", "disabled by configuration")
        else:
            prefix = self.config.get("cgroup_prefix", "rewardpipe-")
            try:
                layers.remove_stale_cgroups(prefix)
                name = f"{prefix}{os.getpid()}-w{self.config.get('worker_index', 0)}"
                self.cgroups = layers.CgroupSet(name, int(self.config["pids_max"]), int(self.config["memory_bytes"]))
                iso["cgroup"] = (
                    f"on: v{self.cgroups.version}, pids.max={self.config['pids_max']}, "
                    f"memory={int(self.config['memory_bytes']) >> 20} MiB for the whole tree"
                )
            except OSError as exc:
                self._off("cgroup", exc.strerror or str(exc))
        # landlock
        abi = layers.landlock_abi()
        if "landlock" in self.disabled:
            self._off("landlock", "disabled by configuration")
        elif abi <= 0:
            self._off("landlock", "kernel has no Landlock")
        else:
            try:
                self.ruleset = layers.LandlockRuleset(abi, layers.interpreter_read_paths(), [self.worker_dir])
                extras = ["fs"] + (["tcp"] if abi >= 4 else []) + (["signal+abstract-unix scope"] if abi >= 6 else [])
                iso["landlock"] = f"on: abi {abi} ({', '.join(extras)})"
            except OSError as exc:
                self._off("landlock", exc.strerror or str(exc))
        # chroot: the file-system fallback where the kernel has no Landlock (e.g. Fargate's 5.10)
        self.chroot_dir = None
        prefix = os.path.realpath(sys.base_prefix)
        if "chroot" in self.disabled:
            self._off("chroot", "disabled by configuration")
        elif self.ruleset is not None:
            self._off("chroot", "not needed, Landlock confines the file system")
        elif not root:
            self._off("chroot", "needs root (CAP_SYS_CHROOT)")
        elif prefix == "/":
            self._off("chroot", "interpreter prefix is /")
        else:
            self.chroot_dir = prefix
            iso["chroot"] = f"on: {prefix} (the child sees only the interpreter's tree, read-only, no /proc)"
        # seccomp
        arch = layers.seccomp_arch()
        if "seccomp" in self.disabled:
            self._off("seccomp", "disabled by configuration")
        elif arch is None:
            self._off("seccomp", "no syscall table for this architecture")
        else:
            self.seccomp_arch = arch
            iso["seccomp"] = "on: no exec, no new processes, AF_UNIX sockets only, no ptrace"
        # rlimits are always available
        if "rlimits" in self.disabled:
            self._off("rlimits", "disabled by configuration")
        else:
            iso["rlimits"] = (
                f"on: as={int(self.config['memory_bytes']) >> 20} MiB, nproc={self.config['pids_max']}, "
                f"fsize={int(self.config['file_size_bytes']) >> 10} KiB, cpu=timeout+1 s"
            )
        if self.cgroups is not None:
            iso["tree_kill"] = "cgroup"
        elif self.seccomp_arch is not None:
            iso["tree_kill"] = "process group (seccomp forbids new processes)"
        elif self.uid is not None:
            iso["tree_kill"] = "process group + kill(-1) as the sandbox uid"
        else:
            iso["tree_kill"] = "process group only: a setsid() orphan can survive"
        iso["env"] = "clean: PATH, HOME and TMPDIR only"
        iso["tests"] = "never in the untrusted process or on disk"
        try:
            layers.prctl(layers.PR_SET_CHILD_SUBREAPER, 1)
        except OSError:
            pass
        try:
            # Same-uid processes (e.g. on Lambda) may not read our memory, fds or environ via /proc.
            layers.prctl(layers.PR_SET_DUMPABLE, 0)
        except OSError:
            pass
        iso["interpreter"] = sys.executable
        iso["preimported_modules"] = str(len(self.preimported))

    # -- per job --------------------------------------------------------------------------------------

    def run_job(self, header: dict, fds: list[int]) -> dict:
        started = time.monotonic()
        code_fd, tests_fd, verdict_fd, out_fd, err_fd = fds
        self.jobs += 1
        try:
            os.lseek(code_fd, 0, os.SEEK_SET)
            code = _read_all(code_fd).decode("utf-8", errors="replace")
        finally:
            os.close(code_fd)
        job_dir = os.path.join(self.worker_dir, f"job{self.jobs}")
        os.mkdir(job_dir, 0o700)
        if self.uid is not None:
            os.chown(job_dir, self.uid, self.uid)
        timeout = float(header["timeout_s"])
        deadline = started + timeout
        u_read, t_write = os.pipe()
        t_read, u_write = os.pipe()
        u_pid = os.fork()
        if u_pid == 0:
            self._untrusted_child(code, u_read, u_write, out_fd, err_fd, job_dir, timeout)
        t_pid = os.fork()
        if t_pid == 0:
            self._trusted_child(t_write, t_read, tests_fd, verdict_fd, header, [u_read, u_write, out_fd, err_fd])
        for fd in (u_read, u_write, t_read, t_write, tests_fd, verdict_fd, out_fd, err_fd):
            os.close(fd)
        timed_out = not _wait_until(t_pid, deadline)
        if timed_out:
            os.kill(t_pid, signal.SIGKILL)
        _, t_raw_status, t_usage = os.wait4(t_pid, 0)
        t_status = _status_text(t_raw_status)
        done, raw_status, self._last_usage = os.wait4(u_pid, os.WNOHANG)
        # Did the model's process die on its own before the verdict?
        u_status = _status_text(raw_status) if done else None
        if u_status is None:
            os.kill(u_pid, signal.SIGKILL)
            u_usage = os.wait4(u_pid, 0)[2]
        else:
            u_usage = self._last_usage
        self._kill_untrusted_tree(u_pid)
        _reap_orphans()
        shutil.rmtree(job_dir, ignore_errors=True)
        return {
            "timed_out": timed_out,
            "model_exit": u_status,
            "harness_exit": t_status,
            "elapsed_ms": (time.monotonic() - started) * 1000,
            "cpu_ms": {"trusted": _cpu_ms(t_usage), "untrusted": _cpu_ms(u_usage)},
        }

    def _kill_untrusted_tree(self, u_pid: int) -> None:
        """Kill whatever the model's process left behind (the process itself is already reaped)."""
        try:
            os.killpg(u_pid, signal.SIGKILL)
        except OSError:
            pass
        if self.cgroups is not None:
            self.cgroups.kill_all(reap=_reap_orphans)
        elif self.uid is not None and self.seccomp_arch is None:
            sweeper = os.fork()
            if sweeper == 0:  # kill(-1) as the sandbox uid reaches every process that uid owns
                try:
                    os.setresuid(self.uid, self.uid, self.uid)
                    os.kill(-1, signal.SIGKILL)
                finally:
                    os._exit(0)
            os.waitpid(sweeper, 0)

    def _untrusted_child(self, code, u_read, u_write, out_fd, err_fd, job_dir, timeout) -> None:
        try:
            os.setsid()
            if self.cgroups is not None:
                self.cgroups.join(0)
            keep = {UNTRUSTED_FDS["read"]: u_read, UNTRUSTED_FDS["write"]: u_write, 1: out_fd, 2: err_fd}
            if self.ruleset is not None:
                keep[UNTRUSTED_FDS["ruleset"]] = self.ruleset.fd
            _arrange_fds(keep)
            os.environ.clear()
            if self.chroot_dir is not None:
                os.chroot(self.chroot_dir)
                os.chdir("/")  # the working directory must be inside the new root, or it is an escape hatch
                sys.path[:] = [_inside(self.chroot_dir, entry) for entry in sys.path if _inside(self.chroot_dir, entry)]
                os.environ.update({"PATH": "/bin", "HOME": "/", "LANG": "C.UTF-8"})
            else:
                os.chdir(job_dir)
                os.environ.update({"PATH": "/usr/bin:/bin", "HOME": job_dir, "TMPDIR": job_dir, "LANG": "C.UTF-8"})
            if "rlimits" not in self.disabled:
                layers.apply_rlimits(
                    cpu_seconds=int(timeout) + 1,
                    address_space=int(self.config["memory_bytes"]),
                    nproc=int(self.config["pids_max"]),
                    file_size=int(self.config["file_size_bytes"]),
                )
            if self.uid is not None:
                layers.drop_privileges(self.uid, self.uid)
            layers.prctl(layers.PR_SET_NO_NEW_PRIVS, 1)
            if self.ruleset is not None:
                self.ruleset.fd = UNTRUSTED_FDS["ruleset"]
                self.ruleset.restrict_self()
                os.close(UNTRUSTED_FDS["ruleset"])
            if self.seccomp_arch is not None:
                layers.load_seccomp(layers.build_seccomp_filter(self.seccomp_arch, os.getpid()))
            random.seed()
            sys.stdin = open(0, closefd=False)  # noqa: SIM115 - fd 0 is /dev/null
            sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)  # noqa: SIM115
        except BaseException as exc:  # noqa: BLE001
            try:
                os.write(2, f"sandbox hardening failed: {exc!r}\n".encode())
            finally:
                os._exit(HARDENING_FAILED_EXIT)
        status = 0
        try:
            untrusted.serve(code, UNTRUSTED_FDS["read"], UNTRUSTED_FDS["write"])
        except BaseException as exc:  # noqa: BLE001
            status = 1
            try:
                os.write(2, f"sandbox child failed: {exc!r}\n".encode())
            except OSError:
                pass
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except BaseException:  # noqa: BLE001
                pass
            os._exit(status)

    def _trusted_child(self, t_write, t_read, tests_fd, verdict_fd, header, foreign_fds) -> None:
        status = 0
        try:
            for fd in foreign_fds:
                os.close(fd)
            signal.signal(signal.SIGPIPE, signal.SIG_IGN)
            trusted.run(t_write, t_read, tests_fd, verdict_fd, header)
        except BaseException:  # noqa: BLE001
            status = 1
        finally:
            os._exit(status)

    def close(self) -> None:
        if self.cgroups is not None:
            self.cgroups.remove()
        shutil.rmtree(self.worker_dir, ignore_errors=True)


def _inside(root: str, path: str) -> str | None:
    """``path`` as seen from inside a chroot at ``root``, or None if it lies outside."""
    real = os.path.realpath(path)
    if real == root:
        return "/"
    if real.startswith(root + os.sep):
        return real[len(root):]
    return None


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _arrange_fds(wanted: dict[int, int]) -> None:
    """Put each source fd at its target number (targets are small) and close every other fd."""
    staged = {target: fcntl.fcntl(source, fcntl.F_DUPFD_CLOEXEC, 64) for target, source in wanted.items()}
    for target, source in staged.items():
        os.dup2(source, target, inheritable=False)
    highest = max(wanted)
    os.closerange(highest + 1, 1 << 16)
    for fd in range(0, highest + 1):
        if fd not in wanted:
            try:
                os.close(fd)
            except OSError:
                pass
    if 0 not in wanted:
        null = os.open(os.devnull, os.O_RDWR)
        if null != 0:
            os.dup2(null, 0)
            os.close(null)


def _wait_until(pid: int, deadline: float) -> bool:
    """Wait for ``pid`` to exit, at most until ``deadline``; True if it exited."""
    pidfd = os.pidfd_open(pid)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if poller.poll(remaining * 1000):
                return True
    finally:
        os.close(pidfd)


def _cpu_ms(usage) -> float | None:
    return None if usage is None else round((usage.ru_utime + usage.ru_stime) * 1000, 3)


def _status_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = str(number)
        return f"killed by {name}"
    return f"exit {os.WEXITSTATUS(status)}"


def _reap_orphans() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main(argv: list[str]) -> int:
    config = json.loads(argv[1])
    channel = socket.socket(fileno=int(argv[2]))
    try:
        server_uid = config.get("server_uid")
        if server_uid is not None and os.geteuid() == 0:
            layers.drop_privileges(int(server_uid), int(server_uid))
        zygote = Zygote(config)
    except BaseException as exc:  # noqa: BLE001
        channel.send(json.dumps({"fatal": f"fork server failed to start: {exc!r}"}).encode())
        return 1
    channel.send(json.dumps({"hello": True, "pid": os.getpid(), "isolation": zygote.isolation,
                             "cgroups": zygote.cgroups.dirs if zygote.cgroups else []}).encode())
    try:
        while True:
            message, fds, _, _ = socket.recv_fds(channel, 1 << 16, 8)
            if not message:
                return 0
            try:
                header = json.loads(message)
                if len(fds) != 5:
                    raise ValueError(f"expected 5 descriptors, got {len(fds)}")
                reply = zygote.run_job(header, fds)
            except Exception as exc:  # noqa: BLE001 - report and keep serving
                for fd in fds:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
                reply = {"fatal": f"fork server could not run the job: {type(exc).__name__}: {exc}"}
            channel.send(json.dumps(reply).encode())
    finally:
        zygote.close()
