"""Round thirty-four, the sandbox: what the trusted runner pays for a value the model hands over.

A set of ints whose hashes are all equal (multiples of ``2**61 - 1``) costs whoever builds it one comparison per pair
of items: 20,000 of them kept the trusted runner decoding (in C, where the job's deadline cannot stop it) until the job
timed out and the runner was replaced. Decoding now counts the pairs of equal hashes among a set's items or a mapping's
keys before building it and refuses a reply with over ``wire.MAX_HASH_COLLISIONS`` of them (the model's failure, as a
reply over its value budget is): what decoding costs is linear in what the model sent.
"""

from __future__ import annotations

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.runtime import wire
from tests.security import test_round_thirtyone_sandbox as thirtyone

executor = thirtyone.executor  # (the fixture: every layer this host allows, then the Lambda/Fargate mode)

MODULUS = 2**61 - 1  # an int's hash is the int modulo this: its multiples all hash to 0


class _Counted:
    """An object whose hash is a constant and whose comparisons are counted (a model object that lies in its
    ``__hash__``, as its stub on the trusted side answers)."""

    equalities = 0

    def __hash__(self):
        return 7

    def __eq__(self, other):
        type(self).equalities += 1
        return self is other


def _colliding_ints(count: int) -> list:
    return [{"i": format(MODULUS * k, "x")} if (MODULUS * k).bit_length() > 53 else MODULUS * k for k in range(count)]


SHAPES = {
    "set": lambda items: {"s": items},
    "frozenset": lambda items: {"fs": items},
    "dict keys": lambda items: {"d": [[item, 0] for item in items]},
    "keys view": lambda items: {"dk": items},
    "Counter": lambda items: {"ctr": [[item, 1] for item in items]},
    "set in a list": lambda items: {"l": [1, {"s": items}]},
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_decoding_items_whose_hashes_are_equal_compares_within_a_budget(shape):
    # 800 objects with one hash: 319,600 comparisons to build the set; refused before any is made.
    _Counted.equalities = 0
    made = [_Counted() for _ in range(800)]
    tree = SHAPES[shape]([{"h": number} for number in range(len(made))])
    with pytest.raises(wire.ValueBudgetExceeded):
        wire.decode(tree, made.__getitem__)
    assert _Counted.equalities <= wire.MAX_HASH_COLLISIONS


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_ints_whose_hashes_are_equal_are_refused_as_over_the_budget(shape):
    tree = SHAPES[shape](_colliding_ints(3000))
    with pytest.raises(wire.ValueBudgetExceeded):
        wire.decode(tree)


def test_the_budget_is_for_the_whole_reply_not_each_container():
    # 40 sets of 40 colliding ints each: 780 pairs apiece, 31,200 in all.
    tree = {"l": [{"s": _colliding_ints(40)} for _ in range(40)]}
    with pytest.raises(wire.ValueBudgetExceeded):
        wire.decode(tree)


@pytest.mark.parametrize(
    "value",
    [
        set(range(5000)),
        frozenset(str(n) for n in range(5000)),
        {n: n for n in range(5000)},
        {-1, -2, *range(100)},  # (-1 and -2 hash alike: a few equal hashes are fine)
        {MODULUS * k for k in range(150)},  # 11,175 pairs: within
        {(n, str(n)): None for n in range(3000)}.keys(),
    ],
    ids=["ints", "strings", "dict", "minus one", "within the budget", "keys view"],
)
def test_values_within_the_budget_decode_as_they_were(value):
    assert wire.decode(wire.encode(value)) == value


def test_a_returned_set_of_colliding_ints_fails_and_the_runner_goes_on(executor):
    code = "def f(n):\n    return {(2**61 - 1) * k for k in range(n)}\n"
    tests = (
        "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n"
        "        self.assertEqual(len(f(20000)), 20000)\n"
    )
    result = thirtyone._run(executor, "colliding set", code, tests, entry_point="f")
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)
    assert "hashes are equal" in (result.reason or ""), result.reason
    right = thirtyone._run(executor, "small set", code, tests.replace("20000", "50"), entry_point="f")
    assert right.status is ExecutionStatus.PASSED, right.reason
