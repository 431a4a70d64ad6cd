"""Second attack round: the classes an adversary who had read the sandbox's source got through.

Each test is written from the class description (not from the private payloads) and asserts the
behaviour the class requires: the exact verdict for a wrong or hostile solution, that a correct
solution still passes, and that the scorer (and the next job) are unharmed.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import tempfile
import textwrap
import threading
import time

import pytest
from typer.testing import CliRunner

from rewardpipe.cli import app
from rewardpipe.execution import ExecutionJob, ExecutionStatus
from rewardpipe.execution.runtime import layers, wire
from rewardpipe.execution.sandbox import make_executor
from tests.security.conftest import (
    HIDDEN_TESTS,
    RIGHT_ADD,
    WRONG_ADD,
    assert_failed,
    assert_scorer_survives,
    job,
    require_layer,
)

cli = CliRunner()


def write_batch(tmp_path, jobs: list[dict]) -> str:
    path = tmp_path / "jobs.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in jobs))
    return str(path)


def batch_job(job_id: str, code: str, tests: str = HIDDEN_TESTS) -> dict:
    return {"id": job_id, "code": code, "tests": tests, "entry_point": "add", "timeout_s": 5}


# --- 1. output encoding at every boundary ---------------------------------------------------------------

LONE_SURROGATE = WRONG_ADD.replace("return a - b", "raise ValueError('bad \\ud800 value')")
LINE_SEPARATORS = WRONG_ADD.replace("return a - b", "raise ValueError('x\\u2028y\\u2029z\\x85w')")


def test_lone_surrogate_in_an_exception_is_sanitised_in_the_result(executor):
    result = executor.run(job(LONE_SURROGATE + "print('out \\ud800')\nimport sys\nsys.stderr.write('err \\udfff')\n"))
    assert_failed(result)
    for text in (result.reason, result.stdout, result.stderr, result.model_dump_json()):
        text.encode("utf-8")  # would raise UnicodeEncodeError on a lone surrogate
    assert "bad" in result.reason and "value" in result.reason


def test_batch_json_survives_surrogates_and_line_separators(tmp_path):
    path = write_batch(
        tmp_path,
        [
            batch_job("surrogate", LONE_SURROGATE),
            batch_job("separators", LINE_SEPARATORS),
            batch_job("id-\ud800", RIGHT_ADD),
            batch_job("honest", RIGHT_ADD),
        ],
    )
    outcome = cli.invoke(app, ["exec", "--batch", path, "--workers", "2", "--json"])
    assert outcome.exit_code == 1, outcome.output  # the surrogate id is a bad line (the id rule), the rest run
    text = outcome.stdout
    assert text.isascii(), "JSON lines must be written with ensure_ascii"
    lines = text.split("\n")[:-1]
    assert len(lines) == 4 and len(text.splitlines()) == 4  # no U+2028/2029/0085 left to split on
    records = [json.loads(line) for line in lines]
    assert [r["status"] for r in records] == ["failed", "failed", "error", "passed"]
    assert records[2]["reason"].startswith(f"{path}:3: id:")
    assert records[3]["id"] == "honest"
    assert "\u2028" in records[1]["reason"] or "x" in records[1]["reason"]


def test_batch_input_is_split_on_newline_only(tmp_path):
    # U+2028 inside a JSON string is legal raw text; splitting the input with str.splitlines() would
    # break the line in two and turn one job into two malformed ones.
    code = RIGHT_ADD + "# a comment with a raw separator \u2028 inside\n"
    path = tmp_path / "jobs.jsonl"
    path.write_text(json.dumps(batch_job("raw-separator", code), ensure_ascii=False) + "\n", encoding="utf-8")
    outcome = cli.invoke(app, ["exec", "--batch", str(path), "--json"])
    records = [json.loads(line) for line in outcome.stdout.split("\n") if line]
    assert [(r["id"], r["status"]) for r in records] == [("raw-separator", "passed")]


# --- 2. model text is never markup ----------------------------------------------------------------------

MARKUP_REASON = WRONG_ADD.replace("return a - b", "raise ValueError('[/] [bold]x[/bold] \\nother-job: passed 3/3')")


def test_markup_in_ids_and_reasons_is_printed_literally(tmp_path):
    path = write_batch(
        tmp_path,
        [
            batch_job("[bold]tricky[/]", MARKUP_REASON),
            batch_job("[/]", RIGHT_ADD),
        ],
    )
    outcome = cli.invoke(app, ["exec", "--batch", path, "--workers", "1"])
    assert outcome.exception is None or isinstance(outcome.exception, SystemExit), outcome.exception
    text = outcome.output
    assert "[bold]tricky[/]" in text
    assert "[/] [bold]x[/bold]" in text
    assert not any(line.startswith("other-job: passed") for line in text.splitlines()), text
    assert "[/]: " in text  # the second job's id, not eaten as a closing tag


def test_single_job_human_output_keeps_markup_literal(tmp_path):
    code = tmp_path / "code.py"
    code.write_text(MARKUP_REASON)
    tests = tmp_path / "tests.py"
    tests.write_text(HIDDEN_TESTS)
    outcome = cli.invoke(app, ["exec", "--code", str(code), "--tests", str(tests), "--entry-point", "add"])
    assert outcome.exit_code == 1, outcome.output
    assert "[/] [bold]x[/bold]" in outcome.output


# --- 3. no host UNIX sockets ----------------------------------------------------------------------------

UNIX_CLIENT = WRONG_ADD + textwrap.dedent("""
    import socket
    for name, attempt in (
        ("path", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect(PATH)),
        ("dgram", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"x", PATH)),
        # (Named explicitly: a bare socketpair() the sandbox refuses is two ends of an eventfd since round eleven,
        # for asyncio's event loop; the system call itself stays refused.)
        ("pair", lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)),
    ):
        try:
            attempt()
            print("REACHED", name)
        except OSError as exc:
            print("DENIED", name, exc.errno)
""")


@pytest.fixture
def host_unix_socket():
    """A world-writable socket in a world-accessible directory, as Docker, D-Bus or a database make."""
    # (a directory of its own: a pid's name was met again by a later process of that pid after a run that crashed)
    directory = tempfile.mkdtemp(prefix="rewardpipe-host-sock-", dir="/tmp")
    os.chmod(directory, 0o777)
    path = os.path.join(directory, "service.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o777)
    server.listen(8)
    server.settimeout(0.2)
    yield path, server
    server.close()
    os.unlink(path)
    os.rmdir(directory)


def _accepted_any(server) -> bool:
    try:
        server.accept()[0].close()
        return True
    except (TimeoutError, OSError):
        return False


@pytest.mark.parametrize("disabled", [(), ("seccomp",), ("mountns",)])
def test_host_unix_socket_is_unreachable(host_unix_socket, disabled):
    """Blocked with every layer on, and still blocked with either of the two layers that stop it off."""
    path, server = host_unix_socket
    executor = make_executor(workers=1, disable=frozenset(disabled))
    try:
        other = {"seccomp": "mountns", "mountns": "seccomp"}.get(disabled[0]) if disabled else None
        if other:
            require_layer(executor, other)
        result = executor.run(job(f"PATH = {path!r}\n" + UNIX_CLIENT))
        assert_failed(result)
        assert "REACHED path" not in result.stdout and "REACHED dgram" not in result.stdout, result.stdout
        if not disabled:
            assert result.stdout.count("DENIED") == 3, result.stdout  # socket() and socketpair() both refused
        assert not _accepted_any(server)
        assert_scorer_survives(executor)
    finally:
        executor.close()


def test_private_mount_namespace_hides_host_tmp_and_run(executor):
    require_layer(executor, "mountns")
    marker = f"/tmp/rewardpipe-visible-{secrets.token_hex(6)}"
    open(marker, "w").close()
    try:
        code = WRONG_ADD + (
            f"import os\nprint('TMP', os.path.exists({marker!r}))\n"
            "print('RUN', sorted(os.listdir('/run')) if os.path.isdir('/run') else [])\n"
        )
        result = executor.run(job(code))
        assert "TMP False" in result.stdout, result.stdout
        assert "RUN []" in result.stdout or "RUN" not in result.stdout, result.stdout
    finally:
        os.unlink(marker)


# --- 4. the trusted runner's memory is bounded ----------------------------------------------------------


def _is_housekeeper(pid: int) -> bool:
    """The fork server's other trusted child (cgroup moves and unmounts), also of its uid."""
    from rewardpipe.execution.runtime.zygote import HOUSEKEEPER_NAME

    try:
        with open(f"/proc/{pid}/comm") as handle:
            return handle.read().strip() == HOUSEKEEPER_NAME
    except OSError:
        return False


def _runner_pids(executor) -> list[int]:
    """Trusted runners: children of a fork server that kept its uid (the untrusted ones dropped theirs)."""
    servers = {w.process.pid: w for w in executor._workers if hasattr(w, "process")}
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as handle:
                ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{name}/status") as handle:
                uid = int(next(line for line in handle if line.startswith("Uid:")).split()[1])
        except (OSError, ValueError, StopIteration):
            continue
        if ppid in servers and uid == os.stat(f"/proc/{ppid}").st_uid and not _is_housekeeper(int(name)):
            found.append(int(name))
    return found


def test_trusted_runner_has_its_own_address_space_limit(executor):
    require_layer(executor, "uid")  # runners are told apart from children by uid
    executor.run(job(RIGHT_ADD))
    expected = str(executor.config.runner_memory_mb << 20)

    def limits() -> dict[int, str]:
        found = {}
        for pid in _runner_pids(executor):
            try:
                with open(f"/proc/{pid}/limits") as handle:
                    found[pid] = next(line for line in handle if line.startswith("Max address space"))
            except OSError:
                continue  # gone since it was listed
        return found

    # A freshly forked untrusted child sets its own (larger) limit a moment before it drops the server's
    # uid, so for that moment it looks like a runner: look again until such a child has moved on. A runner
    # with the wrong limit keeps it, and fails. (Looked at again for up to 30 s: a loaded machine's child may take
    # longer than the 5 s this allowed before to move on.)
    deadline = time.monotonic() + 30
    while True:
        found = limits()
        wrong = {pid: line for pid, line in found.items() if line.split()[3] != expected}
        if (found and not wrong) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert found and not wrong, wrong or "no trusted runner found"


@pytest.mark.parametrize(
    "payload, calls, passed",
    [
        ("return 'y' * (27 << 20)", 1, 1),  # 27 MiB on the wire: over the per-reply size
        ("return [0] * 2_000_000", 1, 1),  # 4 MB but two million values: over the per-reply value count
        # Under the per-reply size; six calls exceed the per-job budget, which then refuses every reply.
        ("return 'x' * (15 << 20)", 6, 0),
    ],
)
def test_huge_replies_are_a_failed_verdict_within_budget(executor, payload, calls, passed):
    tests = textwrap.dedent(f"""
        import unittest
        class TestAdd(unittest.TestCase):
            def test_a_repeated(self):  # runs first: its failure is the reason reported
                for _ in range({calls} - 1):
                    add(1, 2)
                self.assertEqual(add(1, 2), 3)
            def test_equal(self):
                self.assertEqual(add(2, 2), 4)
    """)
    # A right answer unless asked for the huge value (first argument 1): the verdict must come from the budget.
    code = f"def add(a, b):\n    if a != 1:\n        return a + b\n    {payload}\n"
    result = executor.run(job(code, tests=tests, timeout_s=30))
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)
    assert result.passed == passed, result.reason
    assert "limit" in result.reason or "exceed" in result.reason, result.reason
    assert_scorer_survives(executor)


def test_reply_budget_refuses_before_parsing():
    raw = b"[" + b"0," * 2_000_000 + b"0]"
    assert wire.value_count_bound(raw) > 2_000_000


# --- 5. cleanup the model cannot defeat; no cross-job channels ------------------------------------------

DEEP_TREE = RIGHT_ADD + textwrap.dedent("""
    import os
    start = os.getcwd()
    for _ in range(1500):
        os.mkdir("d")
        os.chdir("d")
    with open("payload", "wb") as handle:
        handle.write(b"x" * (1 << 20))
    os.mkdir("locked")
    os.chmod("locked", 0)
    os.chdir(start)
""")


def _deep_tree_round(executor):
    first = executor.run(job(DEEP_TREE, timeout_s=20))
    assert first.status is ExecutionStatus.PASSED, (first.reason, first.stderr[-300:])
    following = executor.run(job(RIGHT_ADD, timeout_s=20))  # (a budget many times its work, for a loaded host)
    assert following.status is ExecutionStatus.PASSED, following.reason
    directories = [w._dir for w in executor._workers if hasattr(w, "_dir")]
    executor.close()  # must not raise (shutil.rmtree recursed out and crashed the CLI)
    for directory in directories:
        assert not os.path.exists(directory), directory


def test_deeply_nested_directories_are_cleaned_up():
    _deep_tree_round(make_executor(workers=1))


def test_deeply_nested_directories_are_cleaned_up_without_mount_namespace():
    _deep_tree_round(make_executor(workers=1, disable=frozenset({"mountns"})))


def test_remove_tree_is_iterative_and_never_follows_links(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    root = tmp_path / "tree"
    path = str(root)
    os.makedirs(path)
    current = path
    for _ in range(1500):
        os.mkdir(os.path.join(current, "d"))
        current = os.path.join(current, "d")
    os.symlink(str(outside), os.path.join(current, "link"))
    os.mkdir(os.path.join(path, "locked"))
    os.chmod(os.path.join(path, "locked"), 0)
    assert layers.remove_tree(path)
    assert not root.exists()
    assert (outside / "keep.txt").read_text() == "keep"


PLANT_FIFOS = WRONG_ADD + textwrap.dedent("""
    import os
    planted = 0
    for n in range(1, 200):
        for base in ("..", "/tmp/rewardpipe-jobs"):
            try:
                os.mkfifo(f"{base}/job{n}/result.txt")
                planted += 1
            except OSError:
                pass
    print("PLANTED", planted)
""")
USES_A_FILE = (
    "def add(a, b):\n    with open('result.txt', 'w') as handle:\n        handle.write(str(a + b))\n    return a + b\n"
)


def test_a_job_cannot_plant_a_fifo_for_the_next_job():
    executor = make_executor(workers=1)
    try:
        executor.run(job(RIGHT_ADD))  # spares forked: the next job's directory already exists
        attack = executor.run(job(PLANT_FIFOS))
        assert_failed(attack)
        assert "PLANTED 0" in attack.stdout, attack.stdout
        victim = executor.run(job(USES_A_FILE, timeout_s=20))
        assert victim.status is ExecutionStatus.PASSED, victim.reason
    finally:
        executor.close()


XATTR_WRITER = WRONG_ADD + textwrap.dedent("""
    import os
    for target in (".", "note"):
        try:
            if target == "note":
                open(target, "w").close()
            os.setxattr(target, "user.channel", b"secret-from-the-last-job")
            print("SET", target)
        except OSError as exc:
            print("NOT SET", target, exc.errno)
""")
XATTR_READER = RIGHT_ADD + textwrap.dedent("""
    import os
    for target in (".", "note"):
        try:
            print("GOT", os.getxattr(target, "user.channel"))
        except OSError:
            pass
""")


def test_extended_attributes_are_no_channel_between_jobs():
    executor = make_executor(workers=1)
    try:
        for _ in range(3):  # the directory of any of the next jobs
            writer = executor.run(job(XATTR_WRITER))
            assert "SET ." not in writer.stdout.replace("NOT SET", ""), writer.stdout
            reader = executor.run(job(XATTR_READER))
            assert reader.status is ExecutionStatus.PASSED
            assert "GOT" not in reader.stdout, reader.stdout
    finally:
        executor.close()


# --- 6. a total disk quota per job ----------------------------------------------------------------------

FILL_BYTES = RIGHT_ADD + textwrap.dedent("""
    written = 0
    for n in range(40):
        try:
            with open(f"f{n}", "wb") as handle:
                handle.write(b"x" * (7 << 20))
            written += 7
        except OSError:
            break
    print("MIB", written)
""")
FILL_INODES = RIGHT_ADD + textwrap.dedent("""
    made = 0
    for n in range(20000):
        try:
            open(f"i{n}", "w").close()
            made += 1
        except OSError:
            break
    print("FILES", made)
""")


@pytest.mark.parametrize("code, what", [(FILL_BYTES, "bytes"), (FILL_INODES, "inodes")])
def test_disk_quota_is_enforced_and_reported(executor, code, what):
    require_layer(executor, "disk_quota")
    result = executor.run(job(code, timeout_s=20))
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)
    assert "disk quota" in result.reason and what in result.reason, result.reason
    if what == "bytes" and "(tmpfs)" in executor.isolation()["disk_quota"]:
        # A full tmpfs refuses the write and the job carries on; where the quota is measured instead (no
        # private mount namespace: e.g. the checkout under /tmp), the job is killed once over budget.
        assert int(result.stdout.split("MIB")[1].split()[0]) <= executor.config.disk_mb
    assert_scorer_survives(executor)


# --- 7. degraded mode: no namespaces, no Landlock, fork servers unprivileged ----------------------------


@pytest.fixture(scope="module")
def degraded():
    """What AWS Lambda and Fargate look like: fork servers as an unprivileged uid (so model code runs as
    the same uid as the fork server and the trusted runner), no namespaces, cgroups or Landlock; and with the
    model's file writes allowed ("files" off, not the default there), so that every other defence of that
    mode is shown to hold on its own. The read-only default: tests/security/test_round_nine_files.py."""
    if os.geteuid() != 0:
        pytest.skip("needs root to start the fork servers as another uid")
    executor = make_executor(workers=1, server_uid=65534, disable=frozenset({"landlock", "files"}))
    isolation = executor.isolation()
    if not isolation["seccomp"].startswith("on"):
        executor.close()
        pytest.skip("seccomp is unavailable")
    assert isolation["landlock"].startswith("off") and isolation["uid"].startswith("off")
    assert isolation["netns"].startswith("off") and isolation["mountns"].startswith("off")
    yield executor
    executor.close()


SIGNAL_EVERYTHING = WRONG_ADD + textwrap.dedent("""
    import ctypes, os, signal
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    NR = {"rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297, "pidfd_open": 434, "pidfd_send_signal": 424,
          "tkill": 200, "tgkill": 234}
    me = os.getpid()
    targets = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me:
            try:
                with open(f"/proc/{name}/status") as handle:
                    if any(line.split()[1:2] == [str(os.getuid())] for line in handle if line.startswith("Uid:")):
                        targets.append(int(name))
            except OSError:
                pass
    hits = []
    info = ctypes.create_string_buffer(128)
    ctypes.memmove(info, (ctypes.c_int * 3)(SIG, 0, -1), 12)  # si_signo, si_errno, si_code = SI_QUEUE
    for pid in targets:
        attempts = {
            "kill": lambda: os.kill(pid, SIG),
            "tkill": lambda: libc.syscall(NR["tkill"], pid, SIG),
            "tgkill": lambda: libc.syscall(NR["tgkill"], pid, pid, SIG),
            "rt_sigqueueinfo": lambda: libc.syscall(NR["rt_sigqueueinfo"], pid, SIG, info),
            "rt_tgsigqueueinfo": lambda: libc.syscall(NR["rt_tgsigqueueinfo"], pid, pid, SIG, info),
            "pidfd": lambda: libc.syscall(
                NR["pidfd_send_signal"], libc.syscall(NR["pidfd_open"], pid, 0), SIG, None, 0
            ),
        }
        for how, attempt in attempts.items():
            try:
                if attempt() in (None, 0):
                    hits.append((pid, how))
            except OSError:
                pass
    print("TARGETS", len(targets), "HITS", hits)
""")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP])
def test_degraded_mode_signals_reach_nothing_but_the_child(degraded, sig):
    if os.uname().machine != "x86_64":
        pytest.skip("the payload uses x86_64 syscall numbers")
    degraded.run(job(RIGHT_ADD))
    server = next(w for w in degraded._workers if hasattr(w, "process"))
    attack = degraded.run(job(f"SIG = {int(sig)}\n" + SIGNAL_EVERYTHING))
    # The wrong answer stays a model failure (a killed runner would have made it an `error`).
    assert_failed(attack)
    assert "HITS []" in attack.stdout, attack.stdout
    assert "TARGETS 0" not in attack.stdout, "the payload must see the fork server, runner and spare"
    assert server.alive() and server in degraded._workers
    # A stopped spare would make this time out (however long its budget: 20 s is many times its work on a loaded host)
    nxt = degraded.run(job(RIGHT_ADD, timeout_s=20))
    assert nxt.status is ExecutionStatus.PASSED, nxt.reason


def _children_of(pid: int) -> list[int]:
    """Live children of ``pid``: a finished job's child that the kernel is still tearing down (reaped after
    the reply) is dead already and does not count."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid and fields[0] not in "ZX":
                    found.append(int(name))
            except (OSError, ValueError):
                pass
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_degraded_mode_children_die_with_their_fork_server():
    if os.geteuid() != 0:
        pytest.skip("needs root to start the fork servers as another uid")
    executor = make_executor(workers=1, server_uid=65534, disable=frozenset({"landlock"}))
    try:
        executor.run(job(RIGHT_ADD))
        server = next(w for w in executor._workers if hasattr(w, "process"))
        sleeper = threading.Thread(
            target=executor.run, args=(job("import time\ntime.sleep(60)\n" + WRONG_ADD, timeout_s=60),)
        )
        sleeper.start()
        time.sleep(1.5)
        children = _children_of(server.process.pid)
        assert len(children) >= 3  # trusted runner, the sleeping job, a spare
        os.kill(server.process.pid, signal.SIGKILL)  # what a model did with rt_sigqueueinfo
        sleeper.join(20)
        deadline = time.monotonic() + 30  # (they go at once: 30 s bounds a stall on a loaded machine)
        while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(pid) for pid in children), [p for p in children if _alive(p)]
    finally:
        executor.close()


def test_degraded_mode_keeps_files_and_fifos_out_of_other_jobs(degraded):
    attack = degraded.run(job(PLANT_FIFOS))
    assert "PLANTED 0" in attack.stdout, attack.stdout
    victim = degraded.run(job(USES_A_FILE, timeout_s=20))
    assert victim.status is ExecutionStatus.PASSED, victim.reason


def test_degraded_mode_cleans_up_deep_trees(degraded):
    first = degraded.run(job(DEEP_TREE, timeout_s=20))
    assert first.status is ExecutionStatus.PASSED, (first.reason, first.stderr[-300:])
    assert degraded.run(job(RIGHT_ADD, timeout_s=20)).status is ExecutionStatus.PASSED


# --- 8. correct solutions returning standard value types pass -----------------------------------------

VALUE_CASES = {
    "big int": ("return 7 ** 6000", "return 7 ** 6000 + 1", "7 ** 6000"),
    "negative big int": ("return -(3 ** 10000)", "return 3 ** 10000", "-(3 ** 10000)"),
    "datetime": (
        "import datetime\n    return datetime.datetime(2024, 2, 29, 13, 5, 7, 123456)",
        "import datetime\n    return datetime.datetime(2024, 2, 29, 13, 5, 8)",
        "datetime.datetime(2024, 2, 29, 13, 5, 7, 123456)",
    ),
    "aware datetime": (
        (
            "import datetime\n    return datetime.datetime(2024, 1, 1, 12, "
            "tzinfo=datetime.timezone(datetime.timedelta(hours=2)))"
        ),
        "import datetime\n    return datetime.datetime(2024, 1, 1, 12, tzinfo=datetime.timezone.utc)",
        "datetime.datetime(2024, 1, 1, 10, tzinfo=datetime.timezone.utc)",
    ),
    "date": (
        "import datetime\n    return datetime.date(1999, 12, 31)",
        "import datetime\n    return datetime.date(2000, 1, 1)",
        "datetime.date(1999, 12, 31)",
    ),
    "time": (
        "import datetime\n    return datetime.time(23, 59, 1)",
        "import datetime\n    return datetime.time(23, 59)",
        "datetime.time(23, 59, 1)",
    ),
    "timedelta": (
        "import datetime\n    return datetime.timedelta(days=-2, seconds=5)",
        "import datetime\n    return datetime.timedelta(days=2)",
        "datetime.timedelta(days=-2, seconds=5)",
    ),
    "Decimal": (
        "import decimal\n    return decimal.Decimal('1.10')",
        "import decimal\n    return decimal.Decimal('1.2')",
        "decimal.Decimal('1.1')",
    ),
    "Fraction": (
        "import fractions\n    return fractions.Fraction(1, 3)",
        "import fractions\n    return fractions.Fraction(1, 4)",
        "fractions.Fraction(2, 6)",
    ),
    "big Fraction": (
        "import fractions\n    return fractions.Fraction(10 ** 5000 + 1, 3)",
        "import fractions\n    return fractions.Fraction(10 ** 5000, 3)",
        "fractions.Fraction(10 ** 5000 + 1, 3)",
    ),
    "complex": ("return complex(1.5, -2)", "return complex(1.5, 2)", "complex(1.5, -2)"),
    "bytes": ("return bytes(range(256))", "return bytes(range(255))", "bytes(range(256))"),
    "bytearray": ("return bytearray(b'ab')", "return bytearray(b'ba')", "bytearray(b'ab')"),
    "set": ("return {1, 'two', (3, 4)}", "return {1, 'two'}", "{1, 'two', (3, 4)}"),
    "frozenset": (
        "return frozenset({frozenset({1}), 2})",
        "return frozenset({1, 2})",
        "frozenset({frozenset({1}), 2})",
    ),
    "nested": (
        (
            "import decimal, datetime\n    return {(1, 'a'): [decimal.Decimal('2.5'), {datetime.date(2020, 1, "
            "1)}], 'n': 2 ** 20000}"
        ),
        (
            "import decimal, datetime\n    return {(1, 'a'): [decimal.Decimal('2.5'), {datetime.date(2020, 1, "
            "2)}], 'n': 2 ** 20000}"
        ),
        "{(1, 'a'): [decimal.Decimal('2.5'), {datetime.date(2020, 1, 1)}], 'n': 2 ** 20000}",
    ),
}


def _value_tests(expected: str) -> str:
    return textwrap.dedent(f"""
        import datetime, decimal, fractions, unittest
        class TestValue(unittest.TestCase):
            def test_value(self):
                got = solve()
                expected = {expected}
                self.assertEqual(got, expected)
                self.assertIs(type(got), type(expected))
    """)


@pytest.mark.parametrize("name", sorted(VALUE_CASES))
def test_correct_solution_returning_a_standard_value_passes(executor, name):
    right, wrong, expected = VALUE_CASES[name]
    tests = _value_tests(expected)
    good = executor.run(ExecutionJob(code=f"def solve():\n    {right}\n", tests=tests, entry_point="solve"))
    assert good.status is ExecutionStatus.PASSED, (name, good.reason)
    bad = executor.run(ExecutionJob(code=f"def solve():\n    {wrong}\n", tests=tests, entry_point="solve"))
    assert (bad.status, bad.passed) == (ExecutionStatus.FAILED, 0), (name, bad.reason)


def test_standard_values_cross_into_the_model_too(executor):
    tests = textwrap.dedent("""
        import datetime, decimal, fractions, unittest
        class TestArgs(unittest.TestCase):
            def test_args(self):
                self.assertEqual(double(decimal.Decimal("1.25")), decimal.Decimal("2.50"))
                self.assertEqual(double(fractions.Fraction(1, 3)), fractions.Fraction(2, 3))
                self.assertEqual(double(10 ** 5000), 2 * 10 ** 5000)
                self.assertEqual(double(datetime.timedelta(hours=1)), datetime.timedelta(hours=2))
    """)
    result = executor.run(ExecutionJob(code="def double(x):\n    return x * 2\n", tests=tests, entry_point="double"))
    assert result.status is ExecutionStatus.PASSED, result.reason


# --- 9. weak test shapes: loop-control exceptions from the model ---------------------------------------

TABLE_CHECK = textwrap.dedent("""
    def check(candidate):
        table = [((1, 2), 3), ((2, 2), 4)]
        assert all(map(lambda row: candidate(*row[0]) == row[1], table))
""")


@pytest.mark.parametrize(
    "raiser",
    [
        "raise StopIteration",
        "raise StopAsyncIteration",
        "class Done(StopIteration):\n        pass\n    raise Done()",
    ],
)
def test_stop_iteration_from_the_model_cannot_end_a_table_test(executor, raiser):
    code = f"def add(a, b):\n    {raiser}\n"
    result = executor.run(ExecutionJob(code=code, tests=TABLE_CHECK, entry_point="add", tests_format="check"))
    assert (result.status, result.passed) == (ExecutionStatus.FAILED, 0), result.reason
    assert "RuntimeError" in result.reason, result.reason


def test_a_forged_stop_reply_to_a_call_cannot_end_a_table_test(executor):
    code = textwrap.dedent("""
        import sys
        server = sys.modules["rewardpipe.execution.runtime.untrusted"].Server
        server.handle = lambda self, request: {"stop": True}
        def add(a, b):
            return a - b
    """)
    result = executor.run(ExecutionJob(code=code, tests=TABLE_CHECK, entry_point="add", tests_format="check"))
    assert (result.status, result.passed) == (ExecutionStatus.FAILED, 0), result.reason


def test_model_generators_still_iterate_to_their_end(executor):
    tests = "def check(candidate):\n    assert list(candidate(3)) == [0, 1, 2]\n"
    result = executor.run(
        ExecutionJob(
            code="def count(n):\n    yield from range(n)\n", tests=tests, entry_point="count", tests_format="check"
        )
    )
    assert result.status is ExecutionStatus.PASSED, result.reason


# --- 10. the in-process trust mode is loud --------------------------------------------------------------


def test_inprocess_results_say_so_in_json_and_human_output(tmp_path):
    path = write_batch(tmp_path, [{**batch_job("inproc", RIGHT_ADD), "trust_mode": "inprocess"}])
    outcome = cli.invoke(app, ["exec", "--batch", path, "--json"])
    record = json.loads(outcome.stdout.split("\n")[0])
    assert record["mode"] == "inprocess" and record["status"] == "passed"
    human = cli.invoke(app, ["exec", "--batch", path])
    assert "inprocess" in human.output and "not for untrusted code" in human.output, human.output


def test_inprocess_mode_is_in_every_record_and_flagged_by_the_monitor(executor):
    from rewardpipe.envs.ask_before_coding.environment import ENVIRONMENT as ENV
    from rewardpipe.episode import converse, execution_job, finish_episode, start_episode
    from rewardpipe.models import Task
    from rewardpipe.monitoring import monitor_records
    from rewardpipe.policies import fenced
    from rewardpipe.rewards import ASK_BEFORE_CODING

    class Commit:
        def next_turn(self, state, task):
            return fenced(RIGHT_ADD)

    records = []
    for trust_mode in ("inprocess", "split", "inprocess"):
        task = Task(
            task_id=f"t-{trust_mode}",
            prompt="Write add(a, b).",
            spec=["It adds."],
            entry_point="add",
            tests=HIDDEN_TESTS,
            reference_solution=RIGHT_ADD,
            trust_mode=trust_mode,
        )
        state = start_episode(
            task,
            env=ENV,
            run_id="r",
            step=0,
            group_id=f"g-{trust_mode}",  # a group is one task's rollouts (the monitor refuses a group of two tasks)
            rollout_id=f"{trust_mode}-{len(records)}",
            max_turns=3,
        )
        state = converse(state, task, Commit(), ENV)
        job = execution_job(state, task, ENV)
        assert job is not None and job.trust_mode == trust_mode
        record = finish_episode(state, task, executor.run(job), ASK_BEFORE_CODING, ENV)
        assert record.metrics["exec_mode"] == trust_mode
        records.append(record)
    report = monitor_records(records).steps[0]
    assert report.inprocess_records == 2
    assert report.to_dict()["inprocess_records"] == 2


def test_a_record_scored_from_a_surrogate_reason_can_be_written(executor):
    """`score` lost the record: the reason reaches Record.metrics, which must serialise as UTF-8 JSON."""
    from rewardpipe.envs.ask_before_coding.environment import ENVIRONMENT as ENV
    from rewardpipe.episode import converse, execution_job, finish_episode, start_episode
    from rewardpipe.models import Task
    from rewardpipe.policies import fenced
    from rewardpipe.rewards import ASK_BEFORE_CODING

    class Commit:
        def next_turn(self, state, task):
            return fenced(LONE_SURROGATE)

    task = Task(
        task_id="surrogate",
        prompt="Write add(a, b).",
        spec=["It adds."],
        entry_point="add",
        tests=HIDDEN_TESTS,
        reference_solution=RIGHT_ADD,
    )
    state = converse(
        start_episode(task, env=ENV, run_id="r", step=0, group_id="g", rollout_id="x", max_turns=3), task, Commit(), ENV
    )
    record = finish_episode(state, task, executor.run(execution_job(state, task, ENV)), ASK_BEFORE_CODING, ENV)
    text = record.to_json()
    text.encode("utf-8")
    assert json.loads(text)["metrics"]["exec_status"] == "failed"
