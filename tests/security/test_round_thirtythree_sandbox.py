"""Round thirty-three, the sandbox: tests that seed the module-level ``random`` generator.

In one process the model's code draws from the generator the hidden tests seeded (``random.seed(7)`` then a check of
``shuffled(xs)`` against the order that seed gives). Under split trust the model's process had a generator of its own,
so a right answer **failed silently** (a 0; ``doctor`` flagged the shape, nothing at run time did: the last open case of
round three's item 5). Each time the tests seed or set the module's generator, the model's process now adopts its
state before its code next runs. One way only: nothing the model's code does sets the tests' generator, which would let
it choose every random input the tests draw after its call.
"""

from __future__ import annotations

import textwrap

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.shape_lint import shape_findings
from tests.security import test_round_thirtyone_sandbox as thirtyone

executor = thirtyone.executor  # (the fixture: every layer this host allows, then the Lambda/Fargate mode)


def _run(executor, name: str, code: str, tests: str):
    return thirtyone._run(executor, name, code, tests, entry_point="f")


def _tests(body: str, imports: str = "import random, unittest") -> str:
    return f"{imports}\n\nclass T(unittest.TestCase):\n    def test_a(self):\n" + textwrap.indent(body, " " * 8) + "\n"


DRAWS = "import random\ndef f(n):\n    return [random.random() for _ in range(n)]\n"
SHUFFLED = "import random\ndef f(xs):\n    xs = list(xs)\n    random.shuffle(xs)\n    return xs\n"

SEEDED_TESTS = {
    "seed, then the same draws": (
        DRAWS,
        "random.seed(7)\nexpected = [random.random() for _ in range(3)]\nrandom.seed(7)\n"
        "self.assertEqual(f(3), expected)",
    ),
    "seed by an imported name": (
        SHUFFLED,
        "seed(11)\nxs = list(range(20))\nexpected = list(xs)\nrandom.shuffle(expected)\nseed(11)\n"
        "self.assertEqual(f(xs), expected)",
    ),
    "setstate": (
        "import random\ndef f():\n    return random.sample(range(1000), 5)\n",
        "random.seed(3)\nrandom.random()\nstate = random.getstate()\nexpected = random.sample(range(1000), 5)\n"
        "random.setstate(state)\nself.assertEqual(f(), expected)",
    ),
    "a draw between the seed and the call": (
        "import random\ndef f():\n    return random.randint(0, 10**9)\n",
        "random.seed(5)\nrandom.random()\nstate = random.getstate()\nexpected = random.randint(0, 10**9)\n"
        "random.setstate(state)\nself.assertEqual(f(), expected)",
    ),
    "two seeds, two calls": (
        DRAWS,
        "random.seed(1)\nfirst = f(2)\nrandom.seed(1)\nself.assertEqual(f(2), first)\n"
        "random.seed(2)\nself.assertNotEqual(f(2), first)",
    ),
}


@pytest.mark.parametrize("name", sorted(SEEDED_TESTS))
def test_a_right_answer_draws_from_the_generator_the_tests_seeded(executor, name):
    code, body = SEEDED_TESTS[name]
    tests = _tests(body, "import random, unittest\nfrom random import seed")
    result = _run(executor, name, code, tests)
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


@pytest.mark.parametrize(
    "wrong",
    [
        "import random\ndef f(n):\n    random.seed(0)\n    return [random.random() for _ in range(n)]\n",
        "import random\ndef f(n):\n    return [random.Random().random() for _ in range(n)]\n",
        "def f(n):\n    return [0.5] * n\n",
    ],
    ids=["reseeds", "own generator", "constant"],
)
def test_a_wrong_answer_still_fails(executor, wrong):
    body = SEEDED_TESTS["seed, then the same draws"][1]
    result = _run(executor, "wrong", wrong, _tests(body))
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)


def test_the_model_never_sets_the_tests_generator(executor):
    """The model's code rigs its own generator (a state of its choosing); the tests' next draw is still the one their
    seed gives, so the model cannot choose the random inputs drawn after its call."""
    rig = (
        "import random\ndef f(n):\n    random.seed(12345)\n    for _ in range(n):\n        random.random()\n"
        "    return n\n"
    )
    body = (
        "random.seed(9)\nexpected = random.random()\nrandom.seed(9)\nself.assertEqual(f(3), 3)\n"
        "self.assertEqual(random.random(), expected)"
    )
    result = _run(executor, "rig", rig, _tests(body))
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


def test_tests_that_never_seed_do_not_hand_over_their_generator(executor):
    """The runner's own generator (not seeded by the tests) is never sent: the model's draws are not the tests'."""
    body = "mine = [random.random() for _ in range(4)]\nself.assertNotEqual(f(4), mine)"
    result = _run(executor, "unseeded", DRAWS, _tests(body))
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


def test_doctor_no_longer_calls_a_seeded_generator_a_silent_zero():
    for body in (
        "random.seed(1)\nself.assertEqual(f(1), [0.13436424411240122])",
        "random.setstate(random.getstate())\nself.assertTrue(f(1))",
    ):
        assert not [line for line in shape_findings(_tests(body)) if "random" in line], shape_findings(_tests(body))
