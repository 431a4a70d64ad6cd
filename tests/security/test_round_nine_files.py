"""Round nine: files as a channel between jobs where nothing confines the model's writes.

On Lambda and on Fargate's 5.10 kernels there is no Landlock, no chroot and no mount namespace, and every job runs
as the function's one uid. A file a job left anywhere that uid may write (/tmp, /dev/shm, a file of the
function's own) was there for every later job: a wrong answer whose earlier rollouts wrote down what they were
asked passed (the SysV answer table of round four, through a file). There the model's code now may not make,
change or remove any file (the ``files`` layer: EROFS from seccomp), its own directory included.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import textwrap

import pytest

from rewardpipe.execution import ExecutionJob, ExecutionStatus
from rewardpipe.execution.runtime import layers
from rewardpipe.execution.sandbox import READ_ONLY_HINT, make_executor
from tests.infra.test_graviton import _answer, _run_filter
from tests.security.conftest import RIGHT_ADD, assert_failed, job

SANDBOX_UID = 65530  # a uid of this module's own: nothing it leaves behind can reach another test's sandbox


def _lambda_like(*disable: str):
    if os.geteuid() != 0:
        pytest.skip("needs root to start the fork servers as another uid")
    executor = make_executor(workers=1, server_uid=SANDBOX_UID, disable=frozenset({"landlock", *disable}))
    isolation = executor.isolation()
    if not isolation["seccomp"].startswith("on"):
        executor.close()
        pytest.skip("seccomp is unavailable")
    assert isolation["landlock"].startswith("off") and isolation["chroot"].startswith("off")
    assert isolation["mountns"].startswith("off") and isolation["uid"].startswith("off")
    return executor


# The host-wide places a job of Lambda's mode could write (its /tmp, /dev/shm and /var/tmp are this host's).
HOST_PLACES = ("/tmp", "/dev/shm", "/var/tmp")


@pytest.fixture(scope="module")
def lambda_mode():
    executor = _lambda_like()
    yield executor
    executor.close()


@pytest.fixture
def own_name():
    """A file name of the calling test's own for what its jobs try to write in the host-wide places: those are shared
    with the suite's other xdist process and other checkouts' runs, whose files of a fixed name (or their removal)
    would meet this test's. What a regression left there is removed afterwards: never a later run's starting state."""
    name = f"rp-nine-{secrets.token_hex(6)}"
    yield name
    for place in HOST_PLACES:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(place, name))


@pytest.fixture
def planted():
    """A directory the sandbox's uid owns, outside any job's, holding one file of that uid: what a function's
    own /tmp holds on Lambda. Removed afterwards, whatever a job did to it."""
    root = tempfile.mkdtemp(prefix="rp-round-nine-")
    os.chmod(root, 0o755)
    base = os.path.join(root, "theirs")
    os.mkdir(base)
    with open(os.path.join(base, "kept.txt"), "w") as handle:
        handle.write("0123456789")
    os.mkdir(os.path.join(base, "sub"))
    for path in (base, os.path.join(base, "kept.txt"), os.path.join(base, "sub")):
        os.chown(path, SANDBOX_UID, SANDBOX_UID)
    yield base
    shutil.rmtree(root, ignore_errors=True)


def _tree_state(base: str) -> dict:
    """Everything a job could have changed under ``base``: names, contents, owners, modes and times."""
    state = {}
    for directory, subdirectories, files in os.walk(base):
        for name in [*subdirectories, *files, "."]:
            path = os.path.join(directory, name)
            info = os.lstat(path)
            content = open(path, "rb").read() if os.path.isfile(path) else None  # noqa: SIM115
            state[os.path.relpath(path, base)] = (
                content,
                info.st_mode,
                info.st_uid,
                info.st_size,
                info.st_mtime_ns,
                info.st_ctime_ns,
            )
    return state


# --- the channel ---------------------------------------------------------------------------------------

WRITES_DOWN_ITS_INPUT = textwrap.dedent("""
    import os
    def add(a, b):
        for place in ("/tmp", "/dev/shm", "/var/tmp", os.environ.get("HOME", "."), os.getcwd(), "{base}"):
            try:
                with open(os.path.join(place, "{name}"), "a") as handle:
                    handle.write(f"{{a}} {{b}}\\n")
            except OSError:
                pass
        return 0
""")
READS_THE_ANSWERS = textwrap.dedent("""
    import os
    def add(a, b):
        for place in ("/tmp", "/dev/shm", "/var/tmp", "{base}"):
            try:
                with open(os.path.join(place, "{name}")) as handle:
                    if handle.read():
                        return a + b  # what a table of earlier rollouts' answers would give
            except OSError:
                pass
        return 0
""")


def test_a_file_one_job_writes_never_reaches_a_later_one(lambda_mode, planted, own_name):
    writer = lambda_mode.run(job(WRITES_DOWN_ITS_INPUT.format(base=planted, name=own_name)))
    assert_failed(writer)
    reader = lambda_mode.run(job(READS_THE_ANSWERS.format(base=planted, name=own_name)))
    assert_failed(reader)  # it passed before: every one of its answers came from the file
    for place in (*HOST_PLACES, planted):
        assert not os.path.exists(os.path.join(place, own_name)), place


# --- every way to change the file system ------------------------------------------------------------------

# Each attempt through the calls Python itself makes (so the same on x86_64 and aarch64), on a file and a
# directory of the sandbox's own uid, through a descriptor opened read-only too.
TRIES_EVERY_CHANGE = textwrap.dedent("""
    import json, os
    base = "{base}"
    kept, sub = os.path.join(base, "kept.txt"), os.path.join(base, "sub")
    tries = {{
        "open w": lambda: open(kept, "w"),
        "open a": lambda: open(kept, "a"),
        "open r+": lambda: open(kept, "r+"),
        "create": lambda: os.open(os.path.join(base, "new"), os.O_CREAT | os.O_RDONLY, 0o600),
        "create exclusive": lambda: open(os.path.join(base, "new"), "x"),
        "truncate": lambda: os.truncate(kept, 1),
        "chmod": lambda: os.chmod(kept, 0o777),
        "chown": lambda: os.chown(kept, os.getuid(), 0),
        "utime": lambda: os.utime(kept, (0, 0)),
        "rename": lambda: os.rename(kept, os.path.join(base, "moved")),
        "unlink": lambda: os.unlink(kept),
        "link": lambda: os.link(kept, os.path.join(base, "hard")),
        "symlink": lambda: os.symlink(kept, os.path.join(base, "soft")),
        "mkdir": lambda: os.mkdir(os.path.join(base, "made")),
        "rmdir": lambda: os.rmdir(sub),
        "mkfifo": lambda: os.mkfifo(os.path.join(base, "fifo")),
        "own directory": lambda: open("mine.txt", "w"),
        "home": lambda: open(os.path.join(os.environ["HOME"], "h.txt"), "w"),
    }}
    fd = os.open(kept, os.O_RDONLY)
    tries["fchmod"] = lambda: os.fchmod(fd, 0o777)
    tries["fchown"] = lambda: os.fchown(fd, os.getuid(), 0)
    tries["futime"] = lambda: os.utime(fd, (0, 0))
    outcome = {{}}
    for name, attempt in tries.items():
        try:
            attempt()
            outcome[name] = "done"
        except OSError as exc:
            outcome[name] = exc.errno
    print("OUTCOME " + json.dumps(outcome))
    def add(a, b):
        return a + b
""")


def test_every_way_to_change_a_file_is_refused_as_on_a_read_only_file_system(lambda_mode, planted):
    before = _tree_state(planted)
    result = lambda_mode.run(job(TRIES_EVERY_CHANGE.format(base=planted)))
    assert result.status is ExecutionStatus.PASSED, result.reason  # reading, computing and printing still work
    outcome = json.loads(result.stdout.split("OUTCOME ", 1)[1].splitlines()[0])
    refused = {name: code for name, code in outcome.items() if code in (errno.EROFS, errno.EPERM)}
    assert refused == outcome, {name: code for name, code in outcome.items() if name not in refused}
    assert outcome["mkfifo"] == errno.EPERM  # mknod: denied everywhere
    assert {code for name, code in outcome.items() if name != "mkfifo"} == {errno.EROFS}
    assert _tree_state(planted) == before


def test_a_right_answer_reading_files_passes(lambda_mode):
    reads = "import json, os\nPATH = os.__file__\ndef add(a, b):\n    open(PATH).read(10)\n    return a + b\n"
    assert lambda_mode.run(job(reads)).status is ExecutionStatus.PASSED
    assert lambda_mode.run(job(RIGHT_ADD)).status is ExecutionStatus.PASSED


def test_the_report_says_what_confines_the_models_files(lambda_mode, executor):
    assert lambda_mode.isolation()["files"].startswith("on: read-only"), lambda_mode.isolation()["files"]
    assert "no file made, changed or removed" in lambda_mode.isolation()["seccomp"]
    assert lambda_mode.isolation()["disk_quota"].endswith("none: the model's code may not write files (see files)")
    full = executor.isolation()
    assert full["files"].startswith("confined:") if full["landlock"].startswith("on") else True, full["files"]


def test_files_off_restores_writes_and_says_so(planted):
    """Who needs the model's code to write files there turns the layer off, and the report says it is off."""
    writable = _lambda_like("files")
    try:
        assert writable.isolation()["files"] == "off: disabled by configuration"
        writes = "def add(a, b):\n    with open('mine.txt', 'w') as f:\n        f.write('x')\n    return a + b\n"
        assert writable.run(job(writes)).status is ExecutionStatus.PASSED
    finally:
        writable.close()


def test_full_isolation_still_lets_a_job_write_its_own_directory(executor):
    writes = "def add(a, b):\n    with open('mine.txt', 'w') as f:\n        f.write('x')\n    return a + b\n"
    assert executor.run(job(writes)).status is ExecutionStatus.PASSED


# --- the filter, instruction by instruction ------------------------------------------------------------------

OPEN_FLAGS = {
    "read only": (os.O_RDONLY, "allow"),
    "directory": (os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, "allow"),
    "write": (os.O_WRONLY, "EROFS"),
    "read and write": (os.O_RDWR, "EROFS"),
    "create": (os.O_RDONLY | os.O_CREAT, "EROFS"),
    "truncate": (os.O_RDONLY | os.O_TRUNC, "EROFS"),
    "append": (os.O_RDONLY | os.O_APPEND, "EROFS"),
    "unnamed file": (0o20000000 | os.O_DIRECTORY | os.O_RDWR, errno.errorcode[errno.EOPNOTSUPP]),
}


@pytest.mark.parametrize("arch", ["aarch64", "x86_64"])
def test_the_read_only_filter_answers_each_call(arch):
    own = 4242
    program = layers.build_seccomp_filter(arch, own, read_only_files=True)
    plain = layers.build_seccomp_filter(arch, own)
    calls = layers._FILE_CALLS[arch]
    for name, number in layers._FILE_CHANGES[arch].items():
        assert _answer(_run_filter(program, arch, number)) == "EROFS", name
        assert _answer(_run_filter(plain, arch, number)) == "allow", name  # only where nothing else confines
    for name, (flags, answer) in OPEN_FLAGS.items():
        assert _answer(_run_filter(program, arch, calls["openat"], (0xFFFFFF9C, 0, flags))) == answer, name
        if "open" in calls:
            assert _answer(_run_filter(program, arch, calls["open"], (0, flags))) == answer, name
        plain_answer = answer if name == "unnamed file" else "allow"
        assert _answer(_run_filter(plain, arch, calls["openat"], (0xFFFFFF9C, 0, flags))) == plain_answer, name
    assert _answer(_run_filter(program, arch, calls["openat2"])) == "ENOSYS"  # its flags are out of the filter's reach


IOCTLS = {
    "terminal check": (0x5401, "allow"),
    "window size": (0x5413, "allow"),
    "close on exec": (0x5451, "allow"),
    "read the flags": (0x80086601, "allow"),
    "read the generation": (0x80087601, "allow"),
    "set the generation": (0x40087602, "ENOTTY"),  # FS_IOC_SETVERSION
    "enable fs-verity": (0x40806685, "ENOTTY"),
    "clone a file": (0x40049409, "ENOTTY"),  # FICLONE
    "async I/O owner": (0x5452, "ENOTTY"),  # FIOASYNC
}


@pytest.mark.parametrize("read_only_files", [False, True])
@pytest.mark.parametrize("arch", ["aarch64", "x86_64"])
def test_the_filter_keeps_only_ioctls_that_read(arch, read_only_files):
    """In every mode: a file of the uid's own is opened read-only wherever it can be read (Landlock lets a
    user's own interpreter tree be read), and an ioctl on it may change it."""
    program = layers.build_seccomp_filter(arch, 4242, read_only_files=read_only_files)
    ioctl = layers._FILE_CALLS[arch]["ioctl"]
    for name, (request, answer) in IOCTLS.items():
        assert _answer(_run_filter(program, arch, ioctl, (1, request))) == answer, name
        assert _answer(_run_filter(program, arch, ioctl, (1, request | (1 << 40)))) == answer, name  # cmd: 32 bits
    for name, request in layers._IOCTL_DENIED_REQUESTS.items():  # refused as before, with EPERM
        assert _answer(_run_filter(program, arch, ioctl, (1, request))) == "EPERM", name


SETS_THE_GENERATION = textwrap.dedent("""
    import array, fcntl, os
    def add(a, b):
        fd = os.open("{path}", os.O_RDONLY)
        try:
            fcntl.ioctl(fd, 0x40087602, array.array("l", [a * 1000 + b]))  # FS_IOC_SETVERSION
        except OSError as exc:
            print("REFUSED", exc.errno)
        return 0
""")


def _generation(path: str) -> int:
    import array
    import fcntl

    fd = os.open(path, os.O_RDONLY)
    try:
        value = array.array("l", [0])
        fcntl.ioctl(fd, 0x80087601, value)  # FS_IOC_GETVERSION
        return value[0]
    finally:
        os.close(fd)


def test_a_file_of_the_uids_own_keeps_its_generation(lambda_mode, planted):
    """The inode generation (ext4, among others) is set through a descriptor opened read-only, by its owner, and
    outlives the job: 32 bits for the next one to read."""
    kept = os.path.join(planted, "kept.txt")
    try:
        before = _generation(kept)
    except OSError:
        pytest.skip("this file system has no inode generation")
    result = lambda_mode.run(job(SETS_THE_GENERATION.format(path=kept)))
    assert_failed(result)
    assert f"REFUSED {errno.ENOTTY}" in result.stdout, result.stdout
    assert _generation(kept) == before


def test_every_call_that_changes_a_file_is_known_on_both_architectures():
    """aarch64 has only the *at forms (and no creat, utime, utimes or futimesat): each x86_64 call missing there
    does its work through one that is listed."""
    missing = set(layers._FILE_CHANGES["x86_64"]) - set(layers._FILE_CHANGES["aarch64"])
    assert missing == {
        "rename", "mkdir", "rmdir", "creat", "link", "unlink", "symlink", "chmod", "chown", "lchown", "utime",
        "utimes", "futimesat",
    }  # fmt: skip


def test_inprocess_mode_is_read_only_there_too(lambda_mode, own_name):
    """The fallback runs the tests beside the model's code in the same hardened child: the same filter. (Its
    static screen refuses the name ``open``, not a write through pathlib.)"""
    path = f"/tmp/{own_name}"
    code = f"import pathlib\ndef add(a, b):\n    pathlib.Path({path!r}).write_text('1')\n    return a + b\n"
    result = lambda_mode.run(ExecutionJob(**{**job(code).model_dump(), "trust_mode": "inprocess"}))
    assert result.status is ExecutionStatus.FAILED and "Read-only file system" in result.reason, result.reason
    assert not os.path.exists(path)


def test_a_refused_write_is_still_the_models_failure_and_the_reason_says_why(lambda_mode, executor):
    writes = "import tempfile\ndef add(a, b):\n    tempfile.TemporaryFile()\n    return a + b\n"
    refused = lambda_mode.run(job(writes))
    assert_failed(refused)  # never an error: the model's own code could make this happen on purpose
    assert READ_ONLY_HINT in refused.reason, refused.reason
    says_so = "def add(a, b):\n    raise OSError(30, 'Read-only file system')\n"
    assert READ_ONLY_HINT not in executor.run(job(says_so)).reason  # only where the layer is on


# --- the page cache ----------------------------------------------------------------------------------------------

# Whether a page of a file every job may read is cached outlives the job. The writer reads the pages of some
# stdlib files and evicts the others (one bit each: 10a + b); the reader, with no logic of its own, asks each
# file whether its first page is cached without waiting for it (RWF_NOWAIT) and answers from the bits.
CACHE_FILES = ["this", "antigravity", "tabnanny", "sndhdr", "imghdr", "mailcap", "nntplib", "telnetlib"]
CACHE_WRITER = textwrap.dedent("""
    import os, sys
    FILES = {files!r}
    STDLIB = os.path.dirname(os.__file__)
    def add(a, b):
        for bit, name in enumerate(FILES):
            fd = os.open(os.path.join(STDLIB, name + ".py"), os.O_RDONLY)
            if (a * 10 + b) >> bit & 1:
                os.pread(fd, 1 << 20, 0)
            else:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # no error: advice may be ignored
            os.close(fd)
        return 0
""")
CACHE_READER = textwrap.dedent("""
    import os
    FILES = {files!r}
    STDLIB = os.path.dirname(os.__file__)
    def add(a, b):
        value, page = 0, bytearray(4096)
        for bit, name in enumerate(FILES):
            fd = os.open(os.path.join(STDLIB, name + ".py"), os.O_RDONLY)
            try:
                os.preadv(fd, [page], 0, os.RWF_NOWAIT)
                value |= 1 << bit
            except BlockingIOError:
                pass
            except OSError as exc:
                print("REFUSED", exc.errno)
                return None
            finally:
                os.close(fd)
        return value // 10 + value % 10
""")


@pytest.mark.parametrize("mode", ["full", "lambda"])
def test_the_page_cache_carries_nothing_to_the_next_job(mode, executor, lambda_mode):
    sandbox = executor if mode == "full" else lambda_mode
    writer = sandbox.run(job(CACHE_WRITER.format(files=CACHE_FILES)))
    assert_failed(writer)
    assert "Error" not in writer.reason or "AssertionError" in writer.reason, writer.reason  # fadvise: no error
    reader = sandbox.run(job(CACHE_READER.format(files=CACHE_FILES)))
    assert_failed(reader)  # it passed before: 10a + b came back from the cache, bit by bit
    assert f"REFUSED {errno.EOPNOTSUPP}" in reader.stdout, reader.stdout


@pytest.mark.parametrize("arch", ["aarch64", "x86_64"])
def test_the_filter_neither_evicts_nor_probes_the_page_cache(arch):
    program = layers.build_seccomp_filter(arch, 4242)
    calls = layers._PAGE_CACHE_CALLS[arch]
    no_op = layers._RET_ERRNO | 0
    assert _run_filter(program, arch, calls["fadvise64"], (3, 0, 0, 4)) == no_op  # POSIX_FADV_DONTNEED
    for advice, answer in ((4, layers._RET_ALLOW), (20, no_op), (21, no_op), (3, layers._RET_ALLOW)):
        assert _run_filter(program, arch, calls["madvise"], (0, 4096, advice)) == answer, advice
    for name in ("mincore", "cachestat"):
        assert _answer(_run_filter(program, arch, calls[name])) == "EPERM", name
    for name in ("preadv2", "pwritev2"):
        assert _answer(_run_filter(program, arch, calls[name], (3, 0, 1, 0, 0, 0))) == "allow", name
        for flags in (0x8, 0x80, 0x1):  # RWF_NOWAIT, RWF_DONTCACHE, RWF_HIPRI
            answer = _answer(_run_filter(program, arch, calls[name], (3, 0, 1, 0, 0, flags)))
            assert answer == errno.errorcode[errno.EOPNOTSUPP], (name, flags)


# --- access times -------------------------------------------------------------------------------------------

READS_A_FILE = "import os\nPATH = {path!r}\ndef add(a, b):\n    open(PATH, 'rb').read(1)\n    return 0\n"


def test_a_read_sets_no_access_time_a_later_job_could_stat(executor):
    """Under relatime a read sets a file's access time once it is older than its change time (or a day old): a
    bit per readable file that outlives the job, read back exactly with stat. The fork server's mounts are
    noatime in its own namespace (where it has one)."""
    if not executor.isolation()["mountns"].startswith("on"):
        pytest.skip("needs the private mount namespace")
    interpreter = executor.isolation()["interpreter"]  # the children's, whose standard library they may read
    stdlib = subprocess.run(
        [interpreter, "-I", "-c", "import os; print(os.path.dirname(os.__file__))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    real_path = os.path.realpath(os.path.join(stdlib, "this.py"))
    if not os.path.exists(real_path):
        pytest.skip(f"{real_path} is missing")
    info = os.stat(real_path)
    stale = info.st_mtime_ns - 10**9  # older than the last change: the next read would set it
    os.utime(real_path, ns=(stale, info.st_mtime_ns))
    try:
        assert_failed(executor.run(job(READS_A_FILE.format(path=real_path))))
        assert os.stat(real_path).st_atime_ns == stale
    finally:
        os.utime(real_path, ns=(info.st_atime_ns, info.st_mtime_ns))
    # Said either way (a mount that refused noatime is named); the stdlib's, checked above, did not refuse.
    atimes = executor.isolation()["mountns"].rsplit("; ", 1)[-1]
    assert atimes == "no access times set (noatime)" or atimes.startswith("access times still set under "), atimes
