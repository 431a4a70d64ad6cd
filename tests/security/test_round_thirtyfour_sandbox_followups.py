# ruff: noqa: UP006, UP007, UP045  (typing's aliases are what these tests are about)
"""Round thirty-four, the sandbox, follow-ups.

``typing``'s aliases (``typing.List[int]``, ``typing.Optional[int]``, ``typing.Dict[str, int]``, a bare
``typing.Any``...) in a model function's annotations crossed as stubs, so ``typing.get_type_hints(f)`` on a right
answer differed from one process. They now cross as the ``typing`` form's name and its arguments when every argument
is itself a plain type expression (or, for ``Literal``, a plain scalar); the receiver subscripts its own ``typing``
form: no code of the sender's runs. Any other (a user generic, a TypeVar, an argument that is the model's class)
crosses as a handle, as before.
"""

from __future__ import annotations

import collections.abc
import typing

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.runtime import runner_globals, wire
from tests.security import test_round_thirtyfour_sandbox as thirtyfour
from tests.security import test_round_thirtyone_sandbox as thirtyone

executor = thirtyone.executor

TYPING_VALUES = [
    typing.List[int],
    typing.Optional[int],
    typing.Dict[str, int],
    typing.Union[int, str, None],
    typing.Tuple[int, ...],
    typing.Tuple[()],
    typing.Tuple[int, str],
    typing.Set[typing.FrozenSet[bytes]],
    typing.Callable[[int, str], bool],
    typing.Callable[..., int],
    typing.Callable[[], None],
    typing.Literal[1, "a", None, True, b"x"],
    typing.Type[int],
    typing.Iterable[typing.Optional[typing.List[int]]],
    typing.Mapping[str, typing.Any],
    typing.DefaultDict[str, list[int]],
    list[typing.Optional[int]],
    dict[str, typing.List[int]] | None,
    typing.Any,
    typing.List,
    typing.NoReturn,
]


@pytest.mark.parametrize("value", TYPING_VALUES, ids=repr)
def test_typing_aliases_cross_as_themselves(value):
    assert wire.decode(wire.encode(value)) == value
    assert repr(wire.decode(wire.encode(value))) == repr(value)


T = typing.TypeVar("T")


class _Model:
    pass


@pytest.mark.parametrize(
    "value",
    [
        typing.List[T],
        typing.Optional[_Model],
        typing.Dict[str, _Model],
        typing.Literal[_Model],
        typing.Optional[collections.abc.Iterable],
    ],
    ids=["a TypeVar", "a model class in a union", "a model class in a dict", "a model class in a Literal", "an ABC"],
)
def test_other_typing_aliases_still_cross_as_handles(value):
    made = []
    tree = wire.encode(value, lambda obj: made.append(obj) or len(made) - 1)
    assert tree == {"h": 0} and made == [value]


@pytest.mark.parametrize(
    "tree",
    [
        {"ta": ["os", [{"bi": "int"}]]},
        {"ta": ["List", [{"h": 0}]]},
        {"ta": ["Optional", [{"ga": [{"bi": "list"}, [{"h": 0}]]}]]},
        {"ta": ["Literal", [{"h": 0}]]},
        {"ta": ["List", [{"bi": "int"}, {"bi": "str"}]]},
        {"ta": ["Callable", [{"h": 0}, {"bi": "int"}]]},
        {"ta": ["Callable", [[{"h": 0}], {"bi": "int"}]]},
        {"ta": []},
        {"ta": "List"},
    ],
    ids=[
        "not a typing form",
        "a model object",
        "a model object in a generic",
        "a model object in a Literal",
        "wrong arity",
        "callable parameters not a list",
        "a model object in callable parameters",
        "empty",
        "not a list",
    ],
)
def test_a_malformed_typing_alias_is_refused_without_asking_the_model(tree):
    with pytest.raises(wire.WireError):
        wire.decode(tree, lambda _handle: _Asks())


class _Asks:
    """A stub that fails the test if anything asks it a question (hash, equality, its type's attributes)."""

    def __hash__(self):
        raise AssertionError("asked its hash")

    def __eq__(self, other):
        raise AssertionError("asked its equality")

    def __getattr__(self, name):
        raise AssertionError(f"asked {name}")


TYPING_MODEL = """
import typing
from typing import Any, Callable, Dict, List, Literal, Optional, Tuple, Union
def f(a: List[int], b: Optional[int], c: Dict[str, List[int]], d: Union[int, str] = 0,
      e: Tuple[int, ...] = (), g: Callable[[int], str] = str, h: Literal["x", 1] = 1, i: Any = None,
      j: typing.Iterable[Optional[int]] = ()) -> Optional[Dict[str, Any]]:
    return None
def make(x):
    return x
"""
TYPING_READ = (
    "import typing\nfrom typing import Any, Callable, Dict, List, Literal, Optional, Tuple, Union\n"
    "hints = typing.get_type_hints(f)\n"
    "self.assertEqual(hints, {'a': List[int], 'b': Optional[int], 'c': Dict[str, List[int]], 'd': Union[int, str], "
    "'e': Tuple[int, ...], 'g': Callable[[int], str], 'h': Literal['x', 1], 'i': Any, "
    "'j': typing.Iterable[Optional[int]], 'return': Optional[Dict[str, Any]]})\n"
    "self.assertIs(hints['i'], Any)"
)


def test_type_hints_written_with_typing_are_as_in_one_process(executor):
    result = thirtyone._run(executor, "typing hints", TYPING_MODEL, thirtyfour._tests(TYPING_READ), entry_point="make")
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


def test_a_wrong_typing_annotation_still_fails(executor):
    code = TYPING_MODEL.replace("b: Optional[int]", "b: Optional[str]")
    result = thirtyone._run(executor, "wrong typing", code, thirtyfour._tests(TYPING_READ), entry_point="make")
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)


# --- what one job leaves in the long-lived trusted runner for the next ----------------------------------------------
# Every job of a worker runs its tests in one trusted runner (replaced after ``runner_recycle_jobs`` jobs). These run
# two jobs in a row on one worker (``workers=1``); the second is the one whose verdict the first tries to set.
@pytest.fixture(params=["full", "lambda"])
def one_worker(request, tmp_path, monkeypatch):
    # The fork server starts in the scorer's working directory: a scratch one here, so that what a test's hidden
    # tests do to the directory they find themselves in never reaches this checkout (as it did before this round).
    monkeypatch.chdir(tmp_path)
    executor = thirtyone.make_executor(workers=1) if request.param == "full" else thirtyone._lambda_like()
    yield executor
    executor.close()


def _after(executor, code: str, first_tests: str, tests: str, entry_point: str = "f"):
    """The verdict of ``tests`` run right after ``first_tests`` (which pass) on the same worker."""
    first = thirtyone._run(executor, "first", code, first_tests, entry_point=entry_point)
    assert first.status is ExecutionStatus.PASSED, (first.status, first.reason)
    return thirtyone._run(executor, "next", code, tests, entry_point=entry_point)


COUNTING = "def f(n):\n    return n\n"
# The first job's tests seed the generator (as many do at module level) and draw as many numbers as the model's
# answer says (a loop that stops at its first failure draws as many as the answer chooses).
SEEDING_TESTS = (
    "import random, unittest\nrandom.seed(12345)\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
    "        for _ in range(f(3)):\n            random.random()\n"
)
# The next job's tests draw unseeded, as a fresh interpreter's would, from the operating system's randomness.
UNSEEDED_TESTS = (
    "import random, unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
    "        chosen = random.Random(12345)\n        for _ in range(3):\n            chosen.random()\n"
    "        self.assertNotEqual(random.random(), chosen.random())\n"
)


def test_a_jobs_random_generator_does_not_carry_over_to_the_next_job(one_worker):
    # Before: the runner's generator went on from where the previous job left it, so the job before chose (by its
    # seed and its count of draws, which its model's answer set) every "random" input of the next job's tests, and
    # the next model read them: a wrong answer that fails on few inputs passed when the inputs avoided them.
    second = _after(one_worker, COUNTING, SEEDING_TESTS, UNSEEDED_TESTS)
    assert second.status is ExecutionStatus.PASSED, (second.status, second.reason)


def test_a_seeded_generator_still_reaches_the_models_code_within_its_job(one_worker):
    code = "import random\ndef f(n):\n    return [random.random() for _ in range(n)]\n"
    tests = (
        "import random, unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n        random.seed(5)\n"
        "        mine = random.Random(5)\n        self.assertEqual(f(3), [mine.random() for _ in range(3)])\n"
    )
    for name in ("once", "again"):
        result = thirtyone._run(one_worker, name, code, tests, entry_point="f")
        assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


# A model's object the tests keep where the job's end does not reach (an attribute of a standard module, a cache of
# a helper module the runner keeps loaded), called by a later job's tests: its stub wrote its request on the
# descriptors the next job's channel got (the same numbers), and the next model's process answered it with the object
# of its own that had the handle number.
KEEPING_TESTS = (
    "import json, unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
    "        json.rp_kept = make(1)\n        self.assertEqual(json.rp_kept.value(), 1)\n"
)
CALLING_TESTS = (
    "import json, unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
    "        mine = make(2)\n"  # (the next model's object, with the handle number the kept one had)
    "        kept = getattr(json, 'rp_kept', None)\n"
    "        self.assertIsNotNone(kept)\n"
    "        with self.assertRaises(Exception) as caught:\n            kept.value()\n"
    "        self.assertIn('earlier job', str(caught.exception))\n"
    "        self.assertEqual(mine.value(), 2)\n"
)
HOLDER = "class Holder:\n    def __init__(self, v):\n        self.v = v\n    def value(self):\n        return self.v\n"


def test_a_model_object_kept_past_its_job_never_reaches_the_next_jobs_process(one_worker):
    code = HOLDER + "def make(v):\n    return Holder(v)\n"
    second = _after(one_worker, code, KEEPING_TESTS, CALLING_TESTS, entry_point="make")
    assert second.status is ExecutionStatus.PASSED, (second.status, second.reason)


def test_typing_forms_a_job_sent_are_forgotten_before_the_next_job():
    # typing keeps each form it subscripts in a cache (finding one takes no time, making one tens of microseconds):
    # forms a job's replies made the runner subscript (``Literal`` of any text the model chose) would be read back by
    # the next job timing its requests, as the namedtuple classes were (round twenty-two).
    made = wire.decode({"ta": ["Literal", ["rp-probe-34"]]})
    assert made is typing.Literal["rp-probe-34"]  # (typing's cache, within the job)
    wire.forget_classes()
    assert made is not typing.Literal["rp-probe-34"]


def test_numpys_global_generator_is_reseeded_with_randoms():
    # The same for numpy's module-level generator, where the runner's interpreter has numpy (not this host's sandbox
    # interpreter, so asked of the part of the runner's baseline that reseeds, in this process).
    numpy = pytest.importorskip("numpy")
    numpy.random.seed(12345)
    numpy.random.random(3)
    chosen = numpy.random.RandomState(12345)
    chosen.random_sample(3)
    runner_globals.Baseline._random()
    assert numpy.random.random() != chosen.random_sample()


# Files the tests write where they are (the runner's working directory, tempfile's): the runner worked in the fork
# server's directory (the scorer's, on the host) and tempfile's was the fork server's, so what one job's tests wrote
# (what its model's answer returned) was there for the next job's tests to read.
WRITING_TESTS = (
    "import os, tempfile, unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
    "        with open('rp_answer.txt', 'w') as out:\n            out.write(str(f(41)))\n"
    "        with open(os.path.join(tempfile.gettempdir(), 'rp_answer.txt'), 'w') as out:\n"
    "            out.write(str(f(42)))\n"
    "        os.makedirs('rp_tree/a/b')\n"
    "        self.assertEqual(open('rp_answer.txt').read(), '41')\n"
)
READING_TESTS = (
    "import os, tempfile, unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
    "        left = [os.path.exists(name) for name in ('rp_answer.txt', 'rp_tree')]\n"
    "        left.append(os.path.exists(os.path.join(tempfile.gettempdir(), 'rp_answer.txt')))\n"
    "        self.assertEqual(left, [False, False, False], os.getcwd())\n"
)


def test_files_a_jobs_tests_write_are_gone_before_the_next_job(one_worker, tmp_path):
    second = _after(one_worker, COUNTING, WRITING_TESTS, READING_TESTS)
    assert second.status is ExecutionStatus.PASSED, (second.status, second.reason)
    assert list(tmp_path.iterdir()) == []  # (the scorer's working directory: nothing of the tests' landed there)


def test_tests_that_remove_their_working_directory_leave_the_next_job_one(one_worker):
    removing = (
        "import os, shutil, tempfile, unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
        "        shutil.rmtree(tempfile.gettempdir())\n        shutil.rmtree(os.getcwd())\n"
        "        self.assertEqual(f(1), 1)\n"
    )
    second = _after(one_worker, COUNTING, removing, WRITING_TESTS)
    assert second.status is ExecutionStatus.PASSED, (second.status, second.reason)


def test_tests_using_an_earlier_jobs_object_at_load_are_an_error_not_the_answers_failure(one_worker):
    # The kept object is the tests' doing, whatever this job's model wrote: an ``error``, never its 0.
    code = HOLDER + "def make(v):\n    return Holder(v)\n"
    loading = (
        "import json, unittest\nKEPT = json.rp_kept.value()\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
        "        self.assertEqual(make(2).value(), 2)\n"
    )
    second = _after(one_worker, code, KEEPING_TESTS, loading, entry_point="make")
    assert second.status is ExecutionStatus.ERROR, (second.status, second.reason)
    assert "earlier job" in (second.reason or ""), second.reason
