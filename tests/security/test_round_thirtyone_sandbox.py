"""Round thirty-one, the sandbox: attacked through the public executor, in full isolation and the Lambda/Fargate mode.

* **One object twice in a value.** The plain-data codec copied every occurrence of a container on its own, so a
  value that held one list (dict, set...) in two places arrived as two lists. The classic wrong answer that builds a
  grid with ``[[0] * w] * h`` (every row the same list) **passed** tests that write one cell and check the other rows,
  which fail it in one process; and a right answer that shares one object on purpose failed ``assertIs``. A container
  met again inside one value now crosses as a reference to where it first crossed, both ways, and what such
  references would make the runner hold once expanded is bounded as the values of a reply are.
* **One container on both sides.** A container one side handed the other stayed a copy there for good: a wrong answer
  that keeps the caller's list (``self.data = data``) or hands out its own state (``return self._items``) **passed**
  tests that check it does not alias them, and a module-level list the tests read (``HISTORY``) stayed as first read
  (a right answer's 0). Containers the model's code keeps are linked, their changes mirrored both ways at every
  request; what the model's process reports as changes is at most what kept code could do.
"""

from __future__ import annotations

import textwrap

import pytest

from rewardpipe.execution import ExecutionJob, ExecutionStatus
from rewardpipe.execution.sandbox import make_executor
from tests.security.test_round_nine_files import _lambda_like


@pytest.fixture(scope="module", params=["full", "lambda"])
def executor(request):
    """Every layer where this host allows it, then the Lambda/Fargate mode (no namespaces, Landlock or own uid)."""
    executor = make_executor(workers=1) if request.param == "full" else _lambda_like()
    yield executor
    executor.close()


def _run(executor, name: str, code: str, tests: str, entry_point: str = "make_grid"):
    job = ExecutionJob(
        id=name, code=textwrap.dedent(code), tests=textwrap.dedent(tests), entry_point=entry_point, timeout_s=20
    )
    return executor.run(job)


GRID_TESTS = """
    import unittest

    class TestGrid(unittest.TestCase):
        def test_shape(self):
            self.assertEqual(make_grid(2, 3), [[0, 0, 0], [0, 0, 0]])

        def test_rows_are_independent(self):
            grid = make_grid(3, 2)
            grid[0][0] = 7
            self.assertEqual(grid, [[7, 0], [0, 0], [0, 0]])
"""

SHARED_ROWS = {
    "list times": "def make_grid(h, w):\n    return [[0] * w] * h\n",
    "one row appended": "def make_grid(h, w):\n    row = [0] * w\n    return [row for _ in range(h)]\n",
    "in a tuple": "def make_grid(h, w):\n    row = [0] * w\n    return list((row,) * h)\n",
}


@pytest.mark.parametrize("name", sorted(SHARED_ROWS))
def test_a_grid_whose_rows_are_one_list_fails_as_in_one_process(executor, name):
    result = _run(executor, name, SHARED_ROWS[name], GRID_TESTS)
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)
    assert result.passed == 1, result.reason
    right = _run(executor, "right", "def make_grid(h, w):\n    return [[0] * w for _ in range(h)]\n", GRID_TESTS)
    assert right.status is ExecutionStatus.PASSED, right.reason


SHARING_ON_PURPOSE = {
    "the same list twice": (
        "def pair():\n    shared = []\n    return [shared, shared]\n",
        "r = pair()\nself.assertIs(r[0], r[1])\nr[0].append(1)\nself.assertEqual(r, [[1], [1]])",
    ),
    "a dict of one bucket": (
        "def pair():\n    bucket = {'n': 0}\n    return {'a': bucket, 'b': bucket, 'c': {'n': 0}}\n",
        "r = pair()\nself.assertIs(r['a'], r['b'])\nself.assertIsNot(r['a'], r['c'])",
    ),
    "a set and a deque twice, nested": (
        "import collections\ndef pair():\n    s, d = {1}, collections.deque([2])\n    return ([s, d], (s, [d]))\n",
        "r = pair()\nself.assertIs(r[0][0], r[1][0])\nself.assertIs(r[0][1], r[1][1][0])",
    ),
}


@pytest.mark.parametrize("name", sorted(SHARING_ON_PURPOSE))
def test_one_object_returned_twice_is_one_object(executor, name):
    code, body = SHARING_ON_PURPOSE[name]
    tests = "import unittest\nclass T(unittest.TestCase):\n    def test_it(self):\n" + textwrap.indent(body, " " * 8)
    result = _run(executor, name, code, tests, entry_point="pair")
    assert result.status is ExecutionStatus.PASSED, result.reason


def test_the_tests_aliased_argument_is_aliased_in_the_models_code(executor):
    code = "def poke(grid):\n    grid[0][0] = 1\n    return grid[1][0]\n"
    tests = """
        import unittest
        class T(unittest.TestCase):
            def test_it(self):
                grid = [[0, 0]] * 2
                self.assertEqual(poke(grid), 1)
                self.assertEqual(grid, [[1, 0], [1, 0]])
    """
    result = _run(executor, "aliased argument", code, tests, entry_point="poke")
    assert result.status is ExecutionStatus.PASSED, result.reason


def test_references_cannot_make_the_runner_hold_more_than_a_reply_may(executor):
    # 2**60 leaves once expanded, 120 values on the wire: refused as a reply over the value budget (the test fails),
    # never a runner that hangs in the tests' comparison or its failure message, nor an error.
    code = "def make_grid(h, w):\n    x = [0]\n    for _ in range(60):\n        x = [x, x]\n    return x\n"
    result = _run(executor, "doubling", code, GRID_TESTS)
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)
    assert result.passed == 0
    assert "limit" in result.reason or "too large" in result.reason, result.reason
    right = _run(executor, "right", "def make_grid(h, w):\n    return [[0] * w for _ in range(h)]\n", GRID_TESTS)
    assert right.status is ExecutionStatus.PASSED, right.reason


def test_a_container_holding_itself_still_cannot_cross(executor):
    code = "def make_grid(h, w):\n    x = []\n    x.append(x)\n    return x\n"
    result = _run(executor, "cycle", code, GRID_TESTS)
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)


KEPT = {
    "the caller's list kept": (
        "class Stats:\n    def __init__(self, data):\n        self.data = data\n    def count(self):\n"
        "        return len(self.data)\n",
        "data = [1, 2]\ns = Stats(data)\ndata.append(3)\nself.assertEqual(s.count(), 2)",
    ),
    "its own list handed out": (
        "class Stats:\n    def __init__(self, data):\n        self.data = list(data)\n    def items(self):\n"
        "        return self.data\n    def count(self):\n        return len(self.data)\n",
        "s = Stats([1, 2])\ns.items().append(3)\nself.assertEqual(s.count(), 2)",
    ),
    "its own dict read as an attribute": (
        "class Stats:\n    def __init__(self, data):\n        self.data = {k: 1 for k in data}\n    def count(self):\n"
        "        return len(self.data)\n",
        "s = Stats([1, 2])\ns.data[3] = 1\nself.assertEqual(s.count(), 2)",
    ),
    "the caller's list changed later": (
        "class Stats:\n    def __init__(self, data):\n        self.data = data\n    def add(self, x):\n"
        "        self.data.append(x)\n",
        "data = [1]\ns = Stats(data)\ns.add(2)\nself.assertEqual(data, [1])",
    ),
}
COPIED = {
    "the caller's list kept": (
        "class Stats:\n    def __init__(self, data):\n        self.data = list(data)\n    def count(self):\n"
        "        return len(self.data)\n"
    ),
    "its own list handed out": (
        "class Stats:\n    def __init__(self, data):\n        self.data = list(data)\n    def items(self):\n"
        "        return list(self.data)\n    def count(self):\n        return len(self.data)\n"
    ),
    "its own dict read as an attribute": None,  # (the tests reach into its state: one process lets them)
    "the caller's list changed later": (
        "class Stats:\n    def __init__(self, data):\n        self.data = list(data)\n    def add(self, x):\n"
        "        self.data.append(x)\n"
    ),
}


@pytest.mark.parametrize("name", sorted(KEPT))
def test_a_container_both_sides_hold_is_one_container(executor, name):
    code, body = KEPT[name]
    tests = "import unittest\nclass T(unittest.TestCase):\n    def test_it(self):\n" + textwrap.indent(body, " " * 8)
    wrong = _run(executor, name, code, tests, entry_point="Stats")
    assert wrong.status is ExecutionStatus.FAILED, (wrong.status, wrong.reason)
    if COPIED[name] is not None:
        right = _run(executor, name, COPIED[name], tests, entry_point="Stats")
        assert right.status is ExecutionStatus.PASSED, right.reason


def test_what_the_tests_change_in_a_kept_container_reaches_the_models_code(executor):
    code = (
        "class Bag:\n    def __init__(self, items):\n        self.items = items\n    def total(self):\n"
        "        return sum(self.items)\n"
    )
    body = (
        "items = [1, 2]\nbag = Bag(items)\nitems.append(3)\nself.assertEqual(bag.total(), 6)\n"
        "items.clear()\nself.assertEqual(bag.total(), 0)"
    )
    tests = "import unittest\nclass T(unittest.TestCase):\n    def test_it(self):\n" + textwrap.indent(body, " " * 8)
    result = _run(executor, "kept on purpose", code, tests, entry_point="Bag")
    assert result.status is ExecutionStatus.PASSED, result.reason


def test_only_what_the_models_code_keeps_is_linked():
    """Linked containers are compared at every request (both sides): an argument its code did not keep, a result it
    built for the reply and an argument handed back stay unlinked, so a job that keeps nothing pays nothing."""
    from rewardpipe.execution.runtime import untrusted, wire

    server = untrusted.Server(-1, -1)
    state: dict = {}

    def keeps(xs, ys):
        state["xs"] = xs
        return len(ys)

    functions = {
        "sorted copy": (sorted, [[3, 1]], None),
        "sorted in place, handed back": (lambda xs: (xs.sort(), xs)[1], [[3, 1]], None),
        "a new list": (lambda: [1, 2], [], None),
        "keeps its first argument": (keeps, [[3, 1], [2]], [[0]]),
        "its own state": (lambda: state.setdefault("own", [1]), [], [[None]]),
    }
    for name, (function, arguments, linked) in functions.items():
        handle = server.handles.add(function)
        request = {"op": "call", "h": handle, "args": [wire.encode(item) for item in arguments], "kwargs": []}
        reply = server.handle(request)
        assert reply.get("nl") is None if linked is None else [key for key, _ in reply["nl"]] == linked[0], name


FORGED_CHANGES = {  # what the model's process reports as changes -> the verdict
    "a handle inside": ('[[0, {"l": [{"h": 1}]}]]', ExecutionStatus.FAILED),
    "the tests' list changed": ('[[0, {"l": [1, 2, 3]}]]', ExecutionStatus.FAILED),
    "not a list": ('{"x": 1}', ExecutionStatus.FAILED),
    "a malformed entry": ("[[0]]", ExecutionStatus.FAILED),
    "another type": ('[[0, {"d": [["a", 1]]}]]', ExecutionStatus.PASSED),
    "a link never made": ('[[7, {"l": [1, 2, 3]}]]', ExecutionStatus.PASSED),
}


@pytest.mark.parametrize("name", sorted(FORGED_CHANGES))
def test_forged_changes_of_linked_containers_are_at_most_what_kept_code_could_do(executor, name):
    # The model's process reports what it likes as changes of the containers linked to the tests' (wire.Links):
    # whatever it says is at most what its code could do to a list it kept (change it: the tests see that, as in one
    # process), or a malformed reply (its failure); never an error, and no other of the tests' values.
    forged, verdict = FORGED_CHANGES[name]
    code = f"""
import json
from rewardpipe.execution.runtime import wire
wire.Links.changed = lambda self: json.loads({forged!r})
class Stats:
    def __init__(self, data):
        self.data = data
    def count(self):
        return 2
"""
    body = "data, expected = [1, 2], [1, 2]\ns = Stats(data)\nself.assertEqual(s.count(), 2)\n"
    body += "self.assertEqual(data, expected)"
    tests = "import unittest\nclass T(unittest.TestCase):\n    def test_it(self):\n" + textwrap.indent(body, " " * 8)
    result = _run(executor, name, code, tests, entry_point="Stats")
    assert result.status is verdict, (result.status, result.reason)


def test_a_module_level_list_the_tests_read_follows_the_models_changes(executor):
    # Round thirteen left module-level mutable values read once (at the tests' load): ``HISTORY`` stayed empty after
    # the tests called the function that appends to it, a right answer's 0. The list is linked now.
    code = "HISTORY = []\ndef record(x):\n    HISTORY.append(x)\n    return len(HISTORY)\n"
    body = "self.assertEqual(record(1), 1)\nself.assertEqual(record(2), 2)\nself.assertEqual(HISTORY, [1, 2])"
    tests = "import unittest\nclass T(unittest.TestCase):\n    def test_it(self):\n" + textwrap.indent(body, " " * 8)
    right = _run(executor, "history", code, tests, entry_point="record")
    assert right.status is ExecutionStatus.PASSED, right.reason
    wrong = _run(executor, "history", code.replace("HISTORY.append(x)", "HISTORY.append(-x)"), tests, "record")
    assert wrong.status is ExecutionStatus.FAILED, (wrong.status, wrong.reason)
