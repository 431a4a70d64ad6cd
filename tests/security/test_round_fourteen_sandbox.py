"""Round fourteen (issue 19): the sandbox and split trust, attacked with shapes earlier rounds did not try. Each case
runs through the sandbox and, where the claim is "as in one process", through plain unittest with the code and the
tests in one process as the reference.

* A right answer scored 0 silently: a writable ``memoryview`` the tests hand over crossed read-only, so the model's
  write through it raised "cannot modify read-only memory" (and nothing reached the tests' buffer).
* Where jobs share the fork server's uid (Lambda, Fargate) and Landlock confines their writes, Landlock does not
  govern a change of mode: a wrong answer's ``os.chmod("..", 0)`` (or ``fchmod`` of ``..`` opened read-only, or of
  the scorer's directory above it) left the worker's directory unusable, so the next job, a right answer, failed
  ("its directory could not be measured") and the one after it was an ``error``; it could also list the spares'
  directories. chmod is now a no-op there too, and the worker's directory unlistable. The same mode let a job set
  the times of the worker's and the scorer's directories (``os.utime("..", ns=...)``), which every later job read
  back with ``os.stat``: a wrong answer passed by what an earlier one wrote there. chown and utime are no-ops too.
  And Landlock older than ABI 3 (Ubuntu 22.04, Amazon Linux 2023) does not govern truncate(2): seccomp refuses it
  by path there (checked on the filter; this host's Landlock is newer).
* Tests handing the model's code an iterator, a generator or a file object of their own (``f(iter(xs))``,
  ``f(x for x in xs)``, ``f(io.StringIO(text))``) are a loud ``error`` under split trust (they cannot cross), but
  ``rewardpipe doctor`` said nothing of them: it flags them now.
* Right answers scored 0 silently under split trust, by state of the tests' process the model's code never sees,
  and ``doctor`` (which flags ``random.seed``, ``decimal.getcontext``, ``sys.setrecursionlimit``...) missed these:
  ``sys.set_int_max_str_digits(0)``, ``decimal.localcontext()``, ``builtins.input = ...`` (or ``setattr(builtins,
  ...)``). It flags them now.
* A member of an enum the tests define handed to the model's code: a plain Enum's is a loud ``error`` doctor did not
  mention; an IntEnum's crosses as its int, so a right answer reading ``.name`` failed silently. doctor flags both.
"""

from __future__ import annotations

import errno
import textwrap

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.runtime import layers
from rewardpipe.execution.sandbox import make_executor
from rewardpipe.execution.shape_lint import shape_findings
from tests.infra.test_graviton import _run_filter
from tests.security.conftest import RIGHT_ADD, job, require_layer
from tests.security.test_round_eight_shapes import _run  # unittest imported, code and tests dedented
from tests.security.test_round_seven import _one_process

PASSED, FAILED, ERROR = ExecutionStatus.PASSED, ExecutionStatus.FAILED, ExecutionStatus.ERROR


def _same_as_one_process(executor, code: str, tests: str, expected: ExecutionStatus, entry_point: str = "f"):
    assert _one_process(code, tests) is expected  # the reference agrees with what the case claims
    result = _run(executor, code, tests, entry_point=entry_point)
    assert result.status is expected, (result.status, result.reason)
    return result


# --- a writable memoryview crosses writable, and what the callee writes reaches the caller's buffer --------------

WRITES_THROUGH = """
def f(view):
    view[0] = ord("x")
"""
MEMORYVIEW_TESTS = {
    "whole": """
        class T(unittest.TestCase):
            def test(self):
                buffer = bytearray(b"abc")
                f(memoryview(buffer))
                self.assertEqual(buffer, bytearray(b"xbc"))
        """,
    "a-slice-of-one": """
        class T(unittest.TestCase):
            def test(self):
                buffer = bytearray(b"abcd")
                f(memoryview(buffer)[2:])
                self.assertEqual(buffer, bytearray(b"abxd"))
        """,
    "every-other-byte": """
        class T(unittest.TestCase):
            def test(self):
                buffer = bytearray(b"abcdef")
                f(memoryview(buffer)[1::2])
                self.assertEqual(buffer, bytearray(b"axcdef"))
        """,
}


@pytest.mark.parametrize("case", MEMORYVIEW_TESTS)
def test_a_writable_memoryview_is_written_through_as_in_one_process(executor, case):
    _same_as_one_process(executor, WRITES_THROUGH, MEMORYVIEW_TESTS[case], PASSED)


def test_a_read_only_memoryview_stays_read_only_and_a_wrong_write_still_fails(executor):
    code = """
    def f(view):
        try:
            view[0] = ord("x")
        except TypeError:
            return "read-only"
        return "writable"
    """
    tests = """
    class T(unittest.TestCase):
        def test(self):
            self.assertEqual(f(memoryview(b"abc")), "read-only")
            self.assertEqual(f(memoryview(bytearray(b"abc"))), "writable")
    """
    _same_as_one_process(executor, code, tests, PASSED)
    wrong = "def f(view):\n    view[0] = ord('y')\n"
    _same_as_one_process(executor, wrong, MEMORYVIEW_TESTS["whole"], FAILED)


# --- Lambda/Fargate with Landlock: a job's chmod reaches nothing outside its own directory -------------------------


@pytest.fixture(scope="module")
def shared_uid_with_landlock():
    """One worker whose fork server runs unprivileged (jobs keep its uid, as on Lambda or Fargate), Landlock on."""
    executor = make_executor(workers=1, server_uid=65534)
    require_layer(executor, "landlock")
    assert executor.isolation()["uid"].startswith("off"), executor.isolation()["uid"]
    yield executor
    executor.close()


TAKES_THE_WORKERS_DIRECTORY = {
    "chmod-parent": "os.chmod('..', 0)",
    "chmod-scorer-directory": "os.chmod('../..', 0)",
    "fchmod-parent": "os.fchmod(os.open('..', os.O_RDONLY), 0)",
    "chmod-the-spares": (
        "[os.chmod(os.path.join('..', name), 0) for name in os.listdir('..')"
        " if os.path.realpath(os.path.join('..', name)) != os.getcwd()]"
    ),
}


@pytest.mark.parametrize("case", TAKES_THE_WORKERS_DIRECTORY)
def test_a_job_that_changes_the_sandboxs_directories_harms_no_later_job(shared_uid_with_landlock, case):
    attack = (
        "import os\ntry:\n    "
        + TAKES_THE_WORKERS_DIRECTORY[case]
        + "\nexcept OSError:\n    pass\ndef add(a, b):\n    return a - b\n"
    )
    result = shared_uid_with_landlock.run(job(attack))
    assert result.status is FAILED, (result.status, result.reason)
    for _ in range(3):  # the next job runs in the spare forked before the attack, the later ones in new spares
        honest = shared_uid_with_landlock.run(job(RIGHT_ADD))
        assert honest.status is PASSED, (honest.status, honest.reason)


PLANTED_NS = 123_456_789_012_345_678
PLANTS_TIMES = f"""
import os
for path in ("..", "../.."):
    try:
        os.utime(path, ns=({PLANTED_NS}, {PLANTED_NS}))
    except OSError:
        pass
def add(a, b):
    return a - b
"""
READS_TIMES = f"""
import os
SEEN = any({PLANTED_NS} in (os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns) for path in ("..", "../.."))
def add(a, b):
    return a + b if SEEN else a - b
"""


def test_the_times_of_the_sandboxs_directories_carry_nothing_to_a_later_job(shared_uid_with_landlock):
    writer = shared_uid_with_landlock.run(job(PLANTS_TIMES))
    assert writer.status is FAILED, (writer.status, writer.reason)
    reader = shared_uid_with_landlock.run(job(READS_TIMES))  # passes only by what the writer left
    assert reader.status is FAILED, (reader.status, reader.reason)


def test_the_workers_directory_is_not_listable_by_a_job_of_its_uid(shared_uid_with_landlock):
    code = (
        "import os\ntry:\n    SEEN = len(os.listdir('..'))\nexcept OSError:\n    SEEN = -1\n"
        "def add(a, b):\n    return SEEN\n"
    )
    tests = (
        "import unittest\nclass T(unittest.TestCase):\n    def test(self):\n        self.assertEqual(add(1, 2), -1)\n"
    )
    result = shared_uid_with_landlock.run(job(code, tests=tests))
    assert result.status is PASSED, (result.status, result.reason)  # the listing was refused


# --- an iterator, a generator or a file of the tests' own: a loud error at run time, and a doctor finding ----------

COUNTS_ITEMS = "def f(items):\n    return sum(1 for _ in items)\n"
ITERATOR_ARGUMENTS = {
    "iter": ("", "iter([1, 2])"),
    "generator-expression": ("", "x for x in [1, 2]"),
    "map": ("", "map(int, '12')"),
    "zip": ("", "zip([1, 2], 'ab')"),
    "enumerate": ("", "enumerate('ab')"),
    "reversed": ("", "reversed([1, 2])"),
    "string-io": ("from io import StringIO\n", "StringIO('a\\nb\\n')"),
    "itertools": ("import itertools\n", "itertools.islice(itertools.count(), 2)"),
    "through-a-name": ("PAIRS = zip('ab', 'cd')\n", "PAIRS"),
}


def _iterator_tests(imports: str, argument: str) -> str:
    return f"{imports}class T(unittest.TestCase):\n    def test(self):\n        self.assertEqual(f({argument}), 2)\n"


@pytest.mark.parametrize("case", ITERATOR_ARGUMENTS)
def test_doctor_flags_an_iterator_of_the_tests_handed_to_the_model(case):
    tests = "import unittest\n" + _iterator_tests(*ITERATOR_ARGUMENTS[case])
    assert any("iterator, generator or file object" in finding for finding in shape_findings(tests)), tests


@pytest.mark.parametrize("case", ["iter", "generator-expression", "string-io", "itertools"])
def test_an_iterator_of_the_tests_is_a_loud_error_under_split_trust(executor, case):
    assert _one_process(COUNTS_ITEMS, _iterator_tests(*ITERATOR_ARGUMENTS[case])) is PASSED
    result = _run(executor, COUNTS_ITEMS, _iterator_tests(*ITERATOR_ARGUMENTS[case]))
    assert result.status is ERROR and "in-process fallback" in result.reason, (result.status, result.reason)


def test_doctor_leaves_plain_data_built_from_an_iterator_alone():
    tests = (
        "import unittest\nclass T(unittest.TestCase):\n    def test(self):\n"
        "        it = iter([3, 1])\n"
        "        self.assertEqual(f(list(map(int, '12'))), 2)\n"
        "        self.assertEqual(f(sorted(it)), 2)\n"
        "        self.assertEqual(f(range(2)), 2)\n"
        "        self.assertEqual(f([x for x in 'ab']), 2)\n"
        "        self.assertEqual(f(tuple(x for x in 'ab')), 2)\n"
    )
    assert not [finding for finding in shape_findings(tests) if "iterator, generator" in finding]


# --- state of the tests' process the model's code reads in one process: doctor flags it ---------------------------

PROCESS_STATE = {
    "int-digits": (
        "import math\ndef f(n):\n    return str(math.factorial(n))\n",
        """
        import sys
        sys.set_int_max_str_digits(0)
        class T(unittest.TestCase):
            def test(self):
                self.assertEqual(len(f(2000)), 5736)
        """,
    ),
    "localcontext": (
        "from decimal import Decimal\ndef f(a, b):\n    return Decimal(a) / Decimal(b)\n",
        """
        from decimal import localcontext
        class T(unittest.TestCase):
            def test(self):
                with localcontext() as context:
                    context.prec = 40
                    self.assertEqual(len(str(f(1, 7))), 42)
        """,
    ),
    "builtins-assigned": (
        "def f():\n    return int(input()) * 2\n",
        """
        import builtins
        class T(unittest.TestCase):
            def test(self):
                builtins.input = lambda *args: "21"
                self.assertEqual(f(), 42)
        """,
    ),
    "builtins-setattr": (
        "def f():\n    return int(input()) * 2\n",
        """
        import builtins
        class T(unittest.TestCase):
            def test(self):
                setattr(builtins, "input", lambda *args: "21")
                self.assertEqual(f(), 42)
        """,
    ),
}


@pytest.mark.parametrize("case", PROCESS_STATE)
def test_doctor_flags_state_of_the_tests_process_a_right_answer_would_read(executor, case):
    code, tests = PROCESS_STATE[case]
    assert _one_process(code, tests) is PASSED
    result = _run(executor, code, tests)
    # The right answer's silent 0 under split trust until round thirty-two, which is why doctor must say so; since
    # then a loud error naming the fallback (tests/security/test_round_thirtytwo_sandbox.py).
    assert result.status is ERROR and "in-process fallback" in result.reason, (result.status, result.reason)
    findings = shape_findings("import unittest\n" + textwrap.dedent(tests))
    assert any("never sees it" in finding for finding in findings), findings


# --- truncate(2) where Landlock is older than ABI 3 and the job has the sandbox's uid ------------------------------


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_truncate_by_path_is_refused_only_where_asked(arch):
    number = layers._TRUNCATE[arch]
    plain = layers.build_seccomp_filter(arch, own_pid=7)
    refused = layers.build_seccomp_filter(arch, own_pid=7, ignore_mode_changes=True, refuse_truncate=True)
    assert _run_filter(plain, arch, number) == layers._RET_ALLOW
    assert _run_filter(refused, arch, number) == layers._RET_ERRNO | errno.EACCES
    for chmod in layers._MODE_CHANGES[arch].values():  # the mode no-ops still answer 0 beside it
        assert _run_filter(refused, arch, chmod) == layers._RET_ERRNO | 0
    read_only = layers.build_seccomp_filter(arch, own_pid=7, read_only_files=True, refuse_truncate=True)
    assert _run_filter(read_only, arch, number) == layers._RET_ERRNO | errno.EROFS  # (read-only says more)


def test_truncate_is_refused_for_landlock_older_than_abi_three_and_a_shared_uid_only():
    from rewardpipe.execution.runtime.zygote import Zygote

    class Ruleset:
        def __init__(self, abi):
            self.abi = abi

    def ungoverned(uid, abi):
        zygote = Zygote.__new__(Zygote)  # (only the attributes the decision reads)
        zygote.uid, zygote.ruleset = uid, (Ruleset(abi) if abi else None)
        return zygote._truncate_ungoverned()

    assert ungoverned(None, 1) and ungoverned(None, 2)
    assert not ungoverned(None, 3) and not ungoverned(None, 7)
    assert not ungoverned(1000, 2)  # a uid of its own: the sandbox's files are not its to truncate
    assert not ungoverned(None, 0)  # no Landlock: the files layer makes everything read-only instead


# --- a member of the tests' own enum: doctor flags it ---------------------------------------------------------------

ENUM_TESTS = """
import enum
class Color(enum.{base}):
    RED = 1
class T(unittest.TestCase):
    def test(self):
        self.assertEqual(f(Color.RED), "red")
"""
NAMES_IT = "def f(color):\n    return color.name.lower()\n"


@pytest.mark.parametrize(("base", "status"), [("Enum", ERROR), ("IntEnum", FAILED)])
def test_doctor_flags_a_member_of_the_tests_own_enum_handed_to_the_model(executor, base, status):
    tests = ENUM_TESTS.format(base=base)
    assert _one_process(NAMES_IT, tests) is PASSED
    assert _run(executor, NAMES_IT, tests).status is status  # a loud error, or the right answer's silent 0
    findings = shape_findings("import unittest\n" + textwrap.dedent(tests))
    assert any("a member of an enum of their own" in finding for finding in findings), findings


def test_doctor_leaves_the_models_own_enum_and_plain_values_alone():
    tests = (
        "import unittest, enum\nclass Kind(enum.Enum):\n    A = 1\n"
        "class T(unittest.TestCase):\n    def test(self):\n"
        "        self.assertEqual(f(Color.RED), 1)\n"  # the model's Color: a stub of its member crosses back
        "        self.assertEqual(f(Kind.A.value), 1)\n"  # the plain value
        "        self.assertEqual(f(Kind.A.name), 1)\n"
    )
    assert not [finding for finding in shape_findings(tests) if "enum of their own" in finding]
