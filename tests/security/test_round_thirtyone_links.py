"""Round thirty-one, the linked containers attacked (``wire.Links``): what a request costs, what the bounds count, and
what mirroring keeps of the objects the tests hold.

* **Every request read every linked container again.** Both sides encoded each linked container in full (up to 2,000
  values) before and after every request to learn whether it changed, and a string, bytes or bytearray counted one
  value whatever its length: a right answer that kept the caller's 2,000-item list took ten times as long per call
  (a few thousand calls timed out), and one that kept a 4 MiB bytearray timed out after a few hundred. A container
  whose parts are the very objects they were is not read again now (a shallow look, in C), and long strings and
  bytes count toward the bound by their length.
"""

from __future__ import annotations

import array
import collections
import json
import textwrap

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.runtime import wire


def _counting_reads(monkeypatch) -> list:
    reads: list = []
    real = wire.encode

    def counting(value, *args, **kwargs):
        reads.append(value)
        return real(value, *args, **kwargs)

    monkeypatch.setattr(wire, "encode", counting)
    return reads


def test_an_unchanged_linked_container_is_not_read_again_at_each_request(monkeypatch):
    links = wire.Links()
    kept = list(range(1_000))
    assert links.add(0, kept)
    reads = _counting_reads(monkeypatch)
    for _ in range(50):
        assert links.changed() == []
    assert reads == []  # (it was read 50 times, 1,000 values each, on each side)


CHANGES = {  # a linked container -> what the tests (or the model's code) do to it
    "appended": ([1, 2], lambda x: x.append(3)),
    "an int made a bool": ([1, 2], lambda x: x.__setitem__(0, True)),
    "a float made an int": ([1.0], lambda x: x.__setitem__(0, 1)),
    "a nested list": ([[1], [2]], lambda x: x[1].append(5)),
    "a list in a tuple": ([([1],)], lambda x: x[0][0].append(5)),
    "a dict's value": ({"a": [1]}, lambda x: x.__setitem__("a", [1, 2])),
    "a dict's nested value": ({"a": [1]}, lambda x: x["a"].append(2)),
    "a nested bytearray": ([bytearray(b"ab")], lambda x: x[0].__setitem__(0, 0x7A)),
    "a bytearray": (bytearray(b"ab"), lambda x: x.__setitem__(1, 0x7A)),
    "an array": (array.array("d", [0.0]), lambda x: x.__setitem__(0, -0.0)),
    "an OrderedDict moved": (collections.OrderedDict(a=1, b=2), lambda x: x.move_to_end("a")),
    "a defaultdict's factory": (collections.defaultdict(list), lambda x: setattr(x, "default_factory", set)),
    "a deque rotated": (collections.deque([1, 2, 3]), lambda x: x.rotate(1)),
    "a set": ({1, 2}, lambda x: (x.discard(1), x.add(3))),
    "a Counter": (collections.Counter("aab"), lambda x: x.update("b")),
    "a dict view's dict": ([{"a": 1}, None], lambda x: x.__setitem__(1, x[0].keys()) or x[0].__setitem__("b", 2)),
}


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_every_change_of_a_linked_container_is_seen(name):
    value, change = CHANGES[name]
    links = wire.Links()
    assert links.add(0, value)
    assert links.changed() == []
    change(value)
    found = links.changed()
    assert [link for link, _ in found] == [0], name
    assert found[0][1] == wire.encode(value)
    if name == "a dict view's dict":  # (a view reads a dict elsewhere: read in full at every request)
        value[0]["c"] = 3
        assert [link for link, _ in links.changed()] == [0]
    else:
        assert links.changed() == []


LONG = {  # a value that counted one -> the same kind, short
    "bytearray": (bytearray(1 << 20), bytearray(100)),
    "str": (["x" * (1 << 20)], ["x" * 100]),
    "bytes": ([b"x" * (1 << 20)], [b"x" * 100]),
    "wide int": ([1 << (1 << 20)], [1 << 5000]),
    "a str subclass": ([type("Text", (str,), {})("x" * (1 << 20))], [type("Text", (str,), {})("x")]),
}


@pytest.mark.parametrize("name", sorted(LONG))
def test_a_long_string_or_buffer_counts_toward_the_bound_by_its_length(name):
    # (one value each, they were encoded, base64 and all, at every request on both sides, and sent whole on a change)
    long, short = LONG[name]
    assert not wire.Links().add(0, long)
    assert wire.Links().add(0, short)


def test_a_change_to_an_equal_value_of_another_type_reaches_the_other_side():
    # The sides compared trees by ==, where 1 == 1.0 == True and 0.0 == -0.0: the tests' ``data[0] = True`` never
    # reached the model's code (a right answer returning it failed ``assertIs(..., True)``), nor the model's change of
    # the tests' -0.0 to 0.0 the tests.
    for before, after in ((1, True), (1.0, 1), (-0.0, 0.0), (True, 1)):
        here, there = wire.Links(), wire.Links()
        data = [before]
        assert here.add(0, data) and there.add(0, wire.decode(wire.encode(data)))
        data[0] = after
        there.apply(here.changed())
        copy = there.entries[0][0]
        assert type(copy[0]) is type(after) and str(copy[0]) == str(after), (before, after)


@pytest.fixture(scope="module", params=["full", "lambda"])
def executor(request):
    """Every layer where this host allows it, then the Lambda/Fargate mode (no namespaces, Landlock or own uid)."""
    from rewardpipe.execution.sandbox import make_executor
    from tests.security.test_round_nine_files import _lambda_like

    executor = make_executor(workers=1) if request.param == "full" else _lambda_like()
    yield executor
    executor.close()


def _verdict(executor, code: str, body: str, entry_point: str):
    from rewardpipe.execution import ExecutionJob

    tests = "import unittest\nclass T(unittest.TestCase):\n    def test_it(self):\n" + textwrap.indent(body, " " * 8)
    job = ExecutionJob(id="links", code=code, tests=tests, entry_point=entry_point, timeout_s=20)
    return executor.run(job)


KEEPS_AND_HANDS_OUT = (
    "class Stats:\n    def __init__(self, data):\n        self.data = data\n    def items(self):\n"
    "        return self.data\n    def count(self):\n        return len(self.data)\n"
    "    def add_to(self, items, x):\n        items.append(x)\n        return len(self.data)\n"
)
COPIES = KEEPS_AND_HANDS_OUT.replace("self.data = data", "self.data = list(data)").replace(
    "return self.data", "return list(self.data)"
)
ONE_CONTAINER = {  # tests -> whether they pass for the code that keeps the caller's list and hands it out again
    "handed out, then changed": ("s = Stats([1, 2])\ns.items().append(3)\nself.assertEqual(s.count(), 2)", False),
    "handed out as an attribute": ("xs = [1, 2]\ns = Stats(xs)\ns.data.append(3)\nself.assertEqual(xs, [1, 2])", False),
    "handed out: the caller's own": ("xs = [1, 2]\ns = Stats(xs)\nself.assertIs(s.items(), xs)", True),
    "the attribute: the caller's own": ("xs = [1, 2]\ns = Stats(xs)\nself.assertIs(s.data, xs)", True),
    "passed again": (
        "xs = [1]\ns = Stats(xs)\nself.assertEqual(s.add_to(xs, 2), 2)\nself.assertEqual(xs, [1, 2])",
        True,
    ),
}


@pytest.mark.parametrize("name", sorted(ONE_CONTAINER))
def test_a_linked_container_crossing_again_is_the_one_container(executor, name):
    # A linked container the model's code handed back (``return self.data``, the caller's list it kept) crossed as a
    # new copy, so the tests' change of it reached nothing: the wrong answer that hands out the caller's list passed
    # "does not alias" tests; and one the tests passed again arrived as a copy beside the kept one (a right answer's
    # ``add_to(xs, 2)`` changed the copy). Each crosses as the other side's own linked container now.
    body, passes = ONE_CONTAINER[name]
    result = _verdict(executor, KEEPS_AND_HANDS_OUT, body, "Stats")
    expected = ExecutionStatus.PASSED if passes else ExecutionStatus.FAILED
    assert result.status is expected, (result.status, result.reason)
    if not passes:
        right = _verdict(executor, COPIES, body, "Stats")
        assert right.status is ExecutionStatus.PASSED, right.reason


NESTED = {  # the model's code, tests that hold a part of a container they passed it (as one process shows them)
    "a kept list appended to": (
        "class Log:\n    def __init__(self, rows):\n        self.rows = rows\n    def add(self, row):\n"
        "        self.rows.append(row)\n        return len(self.rows)\n",
        "inner = [1]\nrows = [inner]\nlog = Log(rows)\nlog.add([2])\nself.assertIs(rows[0], inner)\n"
        "inner.append(5)\nself.assertEqual(rows, [[1, 5], [2]])\nself.assertEqual(log.add([3]), 3)\n"
        "self.assertEqual(rows, [[1, 5], [2], [3]])",
        "Log",
    ),
    "an argument changed in place": (
        "def add(rows, row):\n    rows.append(row)\n",
        "inner = [1]\nrows = [inner]\nadd(rows, [2])\nself.assertIs(rows[0], inner)",
        "add",
    ),
    "a dict of lists": (
        "def add(index, key):\n    index[key] = []\n",
        "words = ['a']\nindex = {'w': words}\nadd(index, 'v')\nself.assertIs(index['w'], words)",
        "add",
    ),
}


@pytest.mark.parametrize("name", sorted(NESTED))
def test_mirroring_keeps_the_parts_the_model_did_not_change(executor, name):
    # A container mirrored (a change the model's code made to a linked container, or to an argument) was made to hold
    # new copies of all its parts: the tests' ``inner`` was no longer ``rows[0]``, and their later change of it reached
    # neither ``rows`` nor the model's code; a right answer's failure.
    code, body, entry_point = NESTED[name]
    result = _verdict(executor, code, body, entry_point)
    assert result.status is ExecutionStatus.PASSED, result.reason


def test_mirroring_never_makes_two_parts_one():
    inner = [1]
    target = [inner, inner]
    new = [[1], [1]]  # (the other side's are two lists now)
    wire.mirror_into(target, new)
    assert target == [[1], [1]] and target[0] is not target[1]
    shared = [[2]]
    target, new = [[2], [3]], [shared[0], shared[0]]
    kept = target[0]
    wire.mirror_into(target, new)
    assert target[0] is target[1] and target[0] is not kept  # (the new parts' own sharing, as sent)


class _BrokenZone(__import__("datetime").tzinfo):
    def utcoffset(self, _when):
        raise KeyError("the tests' own time zone class fails")


def test_a_linked_container_that_cannot_be_read_is_unlinked_never_a_failing_request():
    # Reading a linked container runs before every request (wire.Links.changed): what a part of it raised there (a time
    # zone class of the tests' own, a dict changed by a thread) escaped the request, a test error the model's link
    # caused. It is no longer linked (a copy, as before the links).
    import datetime

    broken = datetime.datetime(2020, 1, 1, tzinfo=_BrokenZone())
    links = wire.Links()
    assert not links.add(0, [broken])
    kept = [1]
    assert links.add(1, kept)
    kept.append(broken)
    assert links.changed() == []
    assert links.entries == {} and links.link_of(kept) is None
    # (nor a mirror into it: its parts compared with the new ones, and read after)
    broken_list = [[1], broken]
    assert links.add(2, broken_list) is False
    target = [[1], [broken]]
    wire.mirror_into(target, [[1], [2]])
    assert target == [[1], [2]]


MANY = (
    "for n in range(100):\n    xs = [n]\n    bag = Bag(xs)\n    xs.append(1)\n"
    "    self.assertEqual(bag.total(), n + 1, n)\n"
)
LAST = "ys = [1]\ncopy = Copy(ys)\nys.append(2)\nself.assertEqual(copy.total(), 1)"
MANY_CODE = (
    "class Bag:\n    def __init__(self, items):\n        self.items = items\n    def total(self):\n"
    "        return sum(self.items)\n"
    "class Copy(Bag):\n    pass\n"
)


def test_links_the_tests_no_longer_hold_are_given_up(executor):
    # A link held its container for the rest of the job: a job that made more than 64 objects keeping the caller's list
    # (one a loop's turn) had none left, and from the 65th on a right answer that keeps it on purpose failed, and a
    # wrong one (``Copy`` here, which should copy and keeps) passed the tests that check it does not. A container the
    # tests no longer hold (nor the model's code its copy) is unlinked at the next request, on both sides.
    right = _verdict(executor, MANY_CODE, MANY, "Bag")
    assert right.status is ExecutionStatus.PASSED, right.reason
    quiet = MANY.replace("self.assertEqual(bag.total(), n + 1, n)", "bag.total()")
    wrong = _verdict(executor, MANY_CODE, quiet + LAST, "Bag")
    assert wrong.status is ExecutionStatus.FAILED, (wrong.status, wrong.reason)
    assert "AssertionError: 3 != 1" in wrong.reason, wrong.reason


def test_a_link_is_given_up_once_nothing_but_the_table_holds_it():
    links = wire.Links()
    held, dropped, volatile = [1], [2], [{"a": 1}.keys()]
    assert links.add(0, held) and links.add(1, dropped) and links.add(2, volatile)
    assert links.entries[2][2] is None  # (read in full at every request: no snapshot holds it)
    assert links.changed() == [] and links.take_gone() == []
    del volatile
    dropped.append(3)
    dropped = None
    found = links.changed()
    assert [link for link, _ in found] == [1]  # (its last change goes to the other side first)
    assert links.take_gone() == [1, 2] and list(links.entries) == [0] and links.take_gone() == []
    assert links.changed() == [] and list(links.entries) == [0]
    links.forget([0, 5, "x"])
    assert links.entries == {} and links.ids == {} and held == [1]


STORES = (
    "class Box:\n    def __init__(self):\n        self.slots = {}\n    def __setitem__(self, key, value):\n"
    "        self.slots[key] = value\n    def total(self):\n"
    "        return sum(self.items) + sum(map(sum, self.slots.values()))\n"
)
COPYING_STORES = (
    "class Box:\n    def __init__(self):\n        self.slots = {}\n    def __setitem__(self, key, value):\n"
    "        self.slots[key] = list(value)\n    def __setattr__(self, name, value):\n"
    "        object.__setattr__(self, name, list(value) if name == 'items' else value)\n"
    "    def total(self):\n        return sum(self.items) + sum(map(sum, self.slots.values()))\n"
)
STORED = "b = Box()\nxs, ys = [1], [10]\nb.items = xs\nb['k'] = ys\nxs.append(2)\nys.append(20)\nxs.append(3)\n"


def test_a_container_stored_in_the_models_object_is_linked(executor):
    # ``obj.items = xs`` and ``obj[k] = ys`` left the model's object a copy: the tests' later change of the list never
    # reached it (a right answer that keeps what it is given failed, a wrong one that should copy it passed). The
    # model's code holds what it stored: it is linked as a kept argument is.
    keeps = _verdict(executor, STORES, STORED + "self.assertEqual(b.total(), 36)", "Box")
    assert keeps.status is ExecutionStatus.PASSED, keeps.reason
    copies = _verdict(executor, COPYING_STORES, STORED + "self.assertEqual(b.total(), 11)", "Box")
    assert copies.status is ExecutionStatus.PASSED, copies.reason
    wrong = _verdict(executor, STORES, STORED + "self.assertEqual(b.total(), 11)", "Box")
    assert wrong.status is ExecutionStatus.FAILED, (wrong.status, wrong.reason)


def test_a_changed_list_of_plain_values_is_read_and_mirrored_without_a_step_per_value(monkeypatch):
    # A linked list the model's code appends to at every call (``HISTORY``) is read again, sent and mirrored at every
    # request: each of its values a step of Python's on both sides, so a job of 2,000 such calls ran twenty times as
    # long as one that kept nothing. A list of plain values (ints, strings...) is read and built whole, in C.
    here, there = wire.Links(), wire.Links()
    history, copy = [*range(1_500), "a", None, True], [*range(1_500), "a", None, True]
    assert here.add(0, history) and there.add(0, copy)
    steps: list = []
    for name in ("_encode_shared", "_decode"):
        real = getattr(wire, name)
        monkeypatch.setattr(wire, name, lambda *args, _real=real, **kwargs: steps.append(1) or _real(*args, **kwargs))
    history.append(7)
    there.apply(json.loads(wire.encode_json(here.changed())))
    assert copy == history and len(steps) <= 4, len(steps)
    assert wire.decode(wire.encode([1, [2, 3.5], "x"])) == [1, [2, 3.5], "x"]  # (nested and float: step by step)
    assert wire.encode([1 << 5000]) == {"l": [{"i": format(1 << 5000, "x")}]} and wire.encode([True]) == {"l": [True]}


def test_one_container_in_two_arguments_is_one_container(executor):
    # Each argument of a call crossed in a codec session of its own, so ``f(xs, xs)`` (or ``f(xs, into=xs)``, or a
    # grid and one of its rows) gave the model's code two lists: a right answer writing through one and reading the
    # other failed. A call's arguments cross as parts of one value now.
    code = (
        "def move(src, dst=None, row=None):\n    src.append(dst is src)\n    if row is not None:\n"
        "        row.append(9)\n    return len(dst)\n"
    )
    body = (
        "xs = [1]\nself.assertEqual(move(xs, xs), 2)\nself.assertEqual(xs, [1, True])\n"
        "self.assertEqual(move(xs, dst=xs), 3)\ngrid = [[0], [1]]\nmove([], grid, row=grid[1])\n"
        "self.assertEqual(grid, [[0], [1, 9]])\nself.assertEqual(move([], [grid[0]], row=grid[0]), 1)"
    )
    result = _verdict(executor, code, body, "move")
    assert result.status is ExecutionStatus.PASSED, result.reason
