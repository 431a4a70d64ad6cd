"""Correct code must pass under split trust wherever it passes in one process (issue 19, class 5).

Round six found return values that came back as opaque stubs or lost a detail on the way, so that correct code
failed with no error and no doctor finding: ``next()`` on a returned generator, ``Ellipsis``, built-in types and
functions compared with ``assertIs``, ``range``/``slice``/dict views/``array``/``memoryview`` compared by value, a
returned exception instance, a time's ``fold`` and its zone's name, a ``defaultdict`` whose factory is a lambda.
Each now crosses as what it is; what the trusted side builds from the model's data stays a fixed set of
harmless values (no ``eval``, no ``SystemExit``)."""

from __future__ import annotations

import textwrap

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.runtime import wire
from tests.execution.conftest import job

CASES = {
    "next on a generator": (
        "def f():\n    yield 1\n    yield 2\n",
        "g = f()\nself.assertEqual(next(g), 1)\nself.assertEqual(next(g), 2)\n"
        "self.assertIsNone(next(g, None))\nwith self.assertRaises(StopIteration):\n    next(g)",
    ),
    "next on a returned iterator": (
        "def f():\n    return map(str, [1, 2])\n",
        "it = f()\nself.assertEqual(next(it), '1')\nself.assertEqual(list(it), ['2'])",
    ),
    "next after a loop that stopped early": (
        "def f():\n    yield from range(10)\n",
        "g = f()\nfor x in g:\n    if x == 2:\n        break\nself.assertEqual(next(g), 3)\n"
        "self.assertIn(6, g)\nself.assertEqual(next(g), 7)\nself.assertEqual(list(g), [8, 9])",
    ),
    "a generator driven by send": (
        "def f():\n    total = 0\n    while True:\n        total += yield total\n",
        "g = f()\nself.assertEqual(next(g), 0)\nself.assertEqual(g.send(5), 5)\nself.assertEqual(g.send(2), 7)",
    ),
    "singletons and built-ins by identity": (
        "def f():\n    return [Ellipsis, NotImplemented, int, len, ValueError]\n",
        "a, b, c, d, e = f()\nself.assertIs(a, Ellipsis)\nself.assertIs(b, NotImplemented)\nself.assertIs(c, int)\n"
        "self.assertIs(d, len)\nself.assertIs(e, ValueError)\nself.assertEqual(d([1, 2]), 2)",
    ),
    "range, slice, views, array, memoryview by value": (
        "import array\ndef f():\n    d = {'a': 1, 'b': 2}\n"
        "    numbers = array.array('i', [1, 2])\n"
        "    return range(1, 9, 2), slice(1, None, 2), d.keys(), d.items(), numbers, memoryview(b'ab')\n",
        "import array\nrg, sl, keys, items, arr, mv = f()\nself.assertEqual(rg, range(1, 9, 2))\n"
        "self.assertEqual(sl, slice(1, None, 2))\nself.assertEqual(keys, {'a', 'b'})\n"
        "self.assertEqual(items, {('a', 1), ('b', 2)})\nself.assertEqual(arr, array.array('i', [1, 2]))\n"
        "self.assertEqual(mv, b'ab')\nself.assertEqual([1, 2, 3, 4][sl], [2, 4])",
    ),
    "a returned exception": (
        "def f():\n    return ValueError('bad', 3)\n",
        "error = f()\nself.assertIsInstance(error, ValueError)\nself.assertEqual(error.args, ('bad', 3))",
    ),
    "a time's fold and its zone's name": (
        "import datetime\ndef f():\n    ist = datetime.timezone(datetime.timedelta(hours=5, minutes=30), 'IST')\n"
        "    return datetime.datetime(2024, 1, 1, tzinfo=ist), datetime.time(1, 30, fold=1)\n",
        "stamp, moment = f()\nself.assertEqual(stamp.tzname(), 'IST')\nself.assertEqual(moment.fold, 1)",
    ),
    "a defaultdict whose factory is a lambda": (
        "import collections\ndef f():\n    counts = collections.defaultdict(lambda: 0)\n    counts['a'] += 1\n"
        "    return counts\n",
        "counts = f()\nself.assertEqual(counts, {'a': 1})\nself.assertEqual(counts['missing'], 0)",
    ),
}


def _tests(body: str) -> str:
    return "import unittest\n\nclass T(unittest.TestCase):\n    def test_it(self):\n" + textwrap.indent(body, " " * 8)


@pytest.mark.parametrize("name", list(CASES))
def test_correct_code_passes_under_split_trust_as_in_one_process(executor, name):
    code, body = CASES[name]
    for mode in ("split", "inprocess"):
        result = executor.run(job(code, _tests(body), "f", trust_mode=mode))
        assert result.status is ExecutionStatus.PASSED, (mode, result.status, result.reason)


def test_wrong_code_still_fails_the_same_tests(executor):
    wrong = {
        "next on a generator": "def f():\n    yield 2\n    yield 1\n",
        "singletons and built-ins by identity": "def f():\n    return [None, None, float, sum, KeyError]\n",
        "a defaultdict whose factory is a lambda": (
            "import collections\ndef f():\n    return collections.defaultdict(lambda: 1, a=1)\n"
        ),
    }
    for name, code in wrong.items():
        result = executor.run(job(code, _tests(CASES[name][1]), "f"))
        assert result.status is ExecutionStatus.FAILED, (name, result.status, result.reason)


@pytest.mark.parametrize(
    "tree",
    [
        {"bi": "eval"},
        {"bi": "open"},
        {"bi": "__import__"},
        {"bi": "SystemExit"},
        {"ex": ["SystemExit", []]},
        {"ex": ["KeyboardInterrupt", []]},
        {"ex": ["open", []]},
        {"e": "None"},
        {"ar": ["zz", []]},
        {"ar": ["i", [{"h": 1}]]},
        {"rg": [0, "9", 1]},
        {"dtx": ["2024-01-01T00:00:00", 2, None, None]},
        {"dtx": ["2024-01-01T00:00:00", 0, None, "../../etc/passwd"]},
        {"tmx": ["01:00:00", 0, "x" * 65, None]},
        {"dd": [{"h": 1}, []]},  # a factory by handle where no handles are expected
    ],
)
def test_what_the_trusted_side_will_not_build(tree):
    with pytest.raises(wire.WireError):
        wire.decode(tree)


def test_the_new_forms_round_trip_in_the_order_write_back_relies_on():
    # encode's visiting order and decode's building order must agree (write-back names parts by position).
    value = [range(3), slice(None, 2), {"k": 1}.items(), ValueError("x")]
    sent: list = []
    tree = wire.encode(value, nodes=sent)
    built: list = []
    wire.decode(tree, nodes=built)
    assert len(sent) == len(built)
