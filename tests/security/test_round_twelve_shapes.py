"""Round twelve (issue 19, classes 3 and 5): what an independent review of split trust found. Each case runs through
the sandbox and, as the reference, through plain unittest with the code and the tests in one process.

* A wrong answer turned its 0 into an ``error`` (no reward: excluded from GRPO) through the rule that tests awaiting
  a model's coroutine are a loud error: wherever the tests mentioned async, await or asyncio (a comment was enough),
  their own ``g.send(None)`` or ``mailer.send(m)`` on an object the model's process called a coroutine (a wrong
  answer that was one, or a lie about its kind) counted as asyncio driving it. Only asyncio's own code drives now.
"""

from __future__ import annotations

import pytest

from rewardpipe.execution import ExecutionStatus
from tests.security.test_round_eleven_shapes import AWAITED_CODE, AWAITING_TESTS, _check, _run, _same_as_one_process

PASSED, FAILED, ERROR = ExecutionStatus.PASSED, ExecutionStatus.FAILED, ExecutionStatus.ERROR

# --- class 3: the awaited-coroutine error is asyncio's to raise, never the tests' own send() -----------------------

GENERATOR_SUITE = """
import asyncio
class T(unittest.TestCase):
    def test_gen(self):
        g = running_total()
        g.send(None)
        self.assertEqual(g.send(5), 5)
    def test_async_helper(self):
        self.assertEqual(asyncio.run(asyncio.sleep(0, 7)), 7)
"""
RIGHT_GENERATOR = "def running_total():\n    t = 0\n    while True:\n        x = yield t\n        t += x\n"
# The model's process says a Mailer is a coroutine (its own copy of the runtime is the model's to change).
LYING_MAILER = """
import sys
for _name, _module in list(sys.modules.items()):
    if _name.endswith("untrusted") and hasattr(_module, "describe_kind"):
        def _lie(obj, handle, _kind=_module.describe_kind):
            return ["t", "coroutine", 0, 0] if type(obj).__name__ == "Mailer" else _kind(obj, handle)
        _module.describe_kind = _lie
class Mailer:
    def send(self, message):
        return 0
"""
MAILER_TESTS = """
# the other suites of this task use asyncio
class T(unittest.TestCase):
    def test_send(self):
        self.assertEqual(Mailer().send("x"), 1)
"""


@pytest.mark.parametrize(
    "code, tests, entry_point, expected",
    [
        pytest.param(RIGHT_GENERATOR, GENERATOR_SUITE, "running_total", PASSED, id="right-generator-in-an-async-suite"),
        pytest.param(
            "async def running_total():\n    return 0\n", GENERATOR_SUITE, "running_total", FAILED, id="wrong-coroutine"
        ),
        pytest.param(
            "async def f(x):\n    return x\n", _check("f(3).send(None) == 3", imports="asyncio"), "f", FAILED, id="send"
        ),
    ],
)
def test_the_tests_own_send_is_an_ordinary_call(executor, code, tests, entry_point, expected):
    _same_as_one_process(executor, code, tests, expected, entry_point=entry_point)


def test_a_lie_about_a_kind_never_makes_an_error(executor):
    result = _run(executor, LYING_MAILER, MAILER_TESTS, entry_point="Mailer")
    assert result.status is FAILED, (result.status, result.reason)


def test_asyncio_driving_the_models_coroutine_is_still_the_loud_error(executor):
    assert _run(executor, AWAITED_CODE, AWAITING_TESTS).status is ERROR
    for runner in ("asyncio.run(f(3))", "asyncio.new_event_loop().run_until_complete(f(3))"):
        assert _run(executor, AWAITED_CODE, _check(f"{runner} == 6", imports="asyncio")).status is ERROR


# --- class 5: a generator's end carries its value, through next() and through send() -------------------------------

GENERATOR_ENDS = {
    "next-at-the-end": (
        "def g():\n    yield 1\n    return 42\n",
        "it = g()\n        next(it)\n        with self.assertRaises(StopIteration) as cm:\n            next(it)\n"
        "        self.assertEqual(cm.exception.value, 42)",
    ),
    "send-at-the-end": (
        "def g():\n    x = yield\n    return x * 2\n",
        "it = g()\n        next(it)\n        with self.assertRaises(StopIteration) as cm:\n            it.send(21)\n"
        "        self.assertEqual(cm.exception.value, 42)",
    ),
    "accumulator-ended-by-send": (
        "def g():\n    t = 0\n    while True:\n        x = yield t\n"
        "        if x is None:\n            return\n        t += x\n",
        "it = g()\n        next(it)\n        self.assertEqual(it.send(3), 3)\n        self.assertEqual(it.send(4), 7)\n"
        "        with self.assertRaises(StopIteration):\n            it.send(None)",
    ),
    "throw-that-ends-it": (
        "def g():\n    try:\n        yield 1\n    except KeyError:\n        return 'caught'\n",
        "it = g()\n        next(it)\n        with self.assertRaises(StopIteration) as cm:\n"
        "            it.throw(KeyError)\n        self.assertEqual(cm.exception.value, 'caught')",
    ),
}


@pytest.mark.parametrize("code, body", GENERATOR_ENDS.values(), ids=GENERATOR_ENDS)
def test_a_generators_end_is_its_stop_iteration(executor, code, body):
    tests = f"class T(unittest.TestCase):\n    def test(self):\n        {body}\n"
    _same_as_one_process(executor, code, tests, PASSED, entry_point="g")
    wrong = code.replace("42", "41").replace("x * 2", "x * 3").replace("'caught'", "'missed'")
    if wrong != code:
        _same_as_one_process(executor, wrong, tests, FAILED, entry_point="g")


def test_a_model_function_raising_stop_iteration_still_cannot_end_the_tests_loop(executor):
    """PEP 479's rule stays for the model's functions: all(map(f, xs)) is not made True by f raising StopIteration
    (in one process it is: a forged pass); only a generator's own send/throw, read by the tests, ends with it."""
    code = "def f(x):\n    raise StopIteration\n"
    result = _run(executor, code, _check("all(map(f, [1, 2, 3]))"))
    assert result.status is FAILED, (result.status, result.reason)


# --- class 5: standard callables the tests hand to the model --------------------------------------------------------

HIGHER_ORDER = {
    "str.upper": ("f(str.upper, ['a', 'b'])", "['A', 'B']"),
    "math.sqrt": ("f(math.sqrt, [4, 9])", "[2.0, 3.0]"),
    "operator.add": ("g(operator.add, [1, 2, 3])", "6"),
    "operator.itemgetter": ("f(operator.itemgetter(1), [(1, 2), (3, 4)])", "[2, 4]"),
    "operator.attrgetter": ("f(operator.attrgetter('real'), [1j + 2])", "[2.0]"),
    "functools.partial": ("f(functools.partial(pow, 2), [3, 4])", "[8, 16]"),
    "partial-of-a-standard-callable": ("f(functools.partial(math.pow, 2.0), [3])", "[8.0]"),
    "str.__add__": ("g(str.__add__, ['x', 'y'])", "'xy'"),
}
MAP = """
def f(fn, xs):
    return [fn(x) for x in xs]
def g(fn, xs):
    out = xs[0]
    for x in xs[1:]:
        out = fn(out, x)
    return out
"""


@pytest.mark.parametrize("call, expected", HIGHER_ORDER.values(), ids=HIGHER_ORDER)
def test_standard_callables_cross_to_the_models_code(executor, call, expected):
    imports = "math, operator, functools"
    _same_as_one_process(executor, MAP, _check(f"{call} == {expected}", imports=imports), PASSED)
    wrong = MAP.replace("[fn(x)", "[fn(x) * 2").replace("return out", "return out * 2")
    _same_as_one_process(executor, wrong, _check(f"{call} == {expected}", imports=imports), FAILED)


def test_a_sort_key_crosses(executor):
    code = "def f(words, key=None):\n    return sorted(words, key=key)\n"
    _same_as_one_process(executor, code, _check("f(['b', 'A'], key=str.lower) == ['A', 'b']"), PASSED)


def test_the_model_cannot_hand_the_tests_a_standard_callable(executor):
    """Only the model's process rebuilds them: a reply naming one (the model changed its own copy of the wire) is
    refused, so the tests never call a function of the model's choosing in the trusted process."""
    code = """
import sys
_wire = next(module for name, module in list(sys.modules.items()) if name.endswith("runtime.wire"))
_encode = _wire.encode
def _forged(value, *args, **kwargs):
    return {"sc": ["operator", "add"]} if value == "named" else _encode(value, *args, **kwargs)
_wire.encode = _forged
def f():
    return "named"
"""
    result = _run(executor, code, _check("f()(2, 3) == 5"))
    assert result.status is FAILED, (result.status, result.reason)
