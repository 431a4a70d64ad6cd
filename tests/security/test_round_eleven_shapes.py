"""Round eleven (issue 19, classes 5 and 4): shapes of values and tests where split trust still differed from one
process, found by an independent review. Each case runs through the sandbox and, as the reference, through plain
unittest with the code and the tests in one process; wrong answers of the same shape still fail.

* Text crossed as ``\\u`` escapes, so the two lone surrogates ``"\\ud83d\\ude00"`` and the one character
  ``"\\U0001f600"`` were the same JSON: a wrong unescaper passed, a right answer's two code units came back as one.
* A subclass of ``str``, ``int``, ``float``, ``bytes`` or ``complex`` crossed through its own ``__str__``,
  ``__int__``...: a ``(str, Enum)`` member became ``"Color.RED"`` instead of ``"red"``.
* Tests calling the model from several threads interleaved their frames on the one channel (replies to the wrong
  call, a "frame of 2 GB", a verdict that changed from run to run).
* In-place changes to a ``deque``, ``Counter``, ``defaultdict``, ``OrderedDict`` or ``array`` argument never
  reached the tests' object, and an ``OrderedDict`` crossed in insertion order whatever ``move_to_end`` did.
* ``round()``, ``math.floor``/``ceil``/``trunc``, ``complex()``, ``bytes()`` and ``__wrapped__`` of a model object.
* ``asyncio.run`` in the model's own code raised PermissionError (its event loop asks for a socket pair, which
  the sandbox refuses); tests that await the model's coroutine were a silent 0 and are now a loud error that names
  the in-process fallback, where they run.
"""

from __future__ import annotations

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.runtime import untrusted, wire
from tests.security.test_round_eight_shapes import _run as run_split
from tests.security.test_round_seven import _one_process

PASSED, FAILED, ERROR = ExecutionStatus.PASSED, ExecutionStatus.FAILED, ExecutionStatus.ERROR


def _run(executor, code: str, tests: str, **fields):
    return run_split(executor, code, tests, timeout_s=20, **fields)  # thread pools and event loops take a while


def _same_as_one_process(executor, code: str, tests: str, expected: ExecutionStatus, **fields) -> None:
    result = _run(executor, code, tests, **fields)
    assert _one_process(code, tests) is expected  # the reference agrees with what the case claims
    assert result.status is expected, (result.status, result.reason)


def _check(condition: str, setup: str = "", imports: str = "") -> str:
    """A TestCase whose one test asserts ``condition`` (after ``setup``)."""
    lines = [f"import {imports}" if imports else "", "class T(unittest.TestCase):", "    def test(self):"]
    lines += [f"        {setup}" if setup else "", f"        self.assertTrue({condition})", ""]
    return "\n".join(line for line in lines if line) + "\n"


# --- text: lone surrogates stay apart from the character they would pair into ------------------------------------

SURROGATE_TESTS = """
class T(unittest.TestCase):
    def test_unescape(self):
        self.assertEqual(f(r"smile \\ud83d\\ude00"), "smile \\U0001F600")
"""
SURROGATE_CASES = {
    # A \\u unescaper that never joins a surrogate pair: two code units where the test wants one character.
    "wrong-unescaper": (
        "import re\ndef f(s):\n    return re.sub(r'\\\\u([0-9a-fA-F]{4})', lambda m: chr(int(m.group(1), 16)), s)\n",
        SURROGATE_TESTS,
        FAILED,
    ),
    "right-unescaper": (
        "import json\ndef f(s):\n    return json.loads(json.dumps(s).replace('\\\\\\\\u', '\\\\u'))\n",
        SURROGATE_TESTS,
        PASSED,
    ),
    "two-code-units-returned": ("def f():\n    return '\\ud83d\\ude00'\n", _check("len(f()) == 2"), PASSED),
    "two-code-units-as-argument": (
        "def f(d):\n    return len(d['a'])\n",
        _check("f({'a': 'x\\ud800\\udc00y'}) == 4"),
        PASSED,
    ),
    "one-character-returned": (
        "def f():\n    return '\\U0001F600' + 'é' * 3\n",
        _check("f() == '\\U0001F600ééé' and len(f()) == 4"),
        PASSED,
    ),
}


@pytest.mark.parametrize("case", sorted(SURROGATE_CASES))
def test_surrogates_cross_as_themselves(executor, case):
    code, tests, expected = SURROGATE_CASES[case]
    _same_as_one_process(executor, code, tests, expected)


def test_the_wire_keeps_lone_surrogates_and_characters_apart():
    for text in ["\ud83d\ude00", "\U0001f600", "\ud800", "x\udfffy", "é\u2028\x00"]:
        frame = wire.encode_json({"ok": wire.encode(text)})
        assert b"\\u" not in frame.replace(b"\\u0000", b"")  # as UTF-8, never as escapes that could pair up
        assert wire.decode(wire.json.loads(frame)["ok"]) == text
        assert len(wire.decode(wire.json.loads(frame)["ok"])) == len(text)


# --- subclasses of built-in values cross as their base value, never through their own methods -------------------


def _returns(definition: str, value: str) -> str:
    """Model code: ``definition``, then ``f`` returning ``value``."""
    return f"{definition}\ndef f():\n    return {value}\n"


STR_ENUM = "import enum\nclass Color(str, enum.Enum):\n    RED = 'red'"
INT_ENUM = "import enum\nclass Level(enum.IntEnum):\n    HIGH = 3"
SCALAR_SUBCLASSES = {
    "str-enum-member": (_returns(STR_ENUM, "Color.RED"), "f() == 'red'", PASSED),
    "str-with-own-str": (
        _returns("class S(str):\n    __str__ = lambda self: 'SECRET'", "S('wrong')"),
        "f() == 'SECRET'",
        FAILED,
    ),
    "str-with-own-str-real-value": (
        _returns("class S(str):\n    __str__ = lambda self: 'x'", "S('real')"),
        "f() == 'real'",
        PASSED,
    ),
    "int-with-own-int": (_returns("class I(int):\n    __int__ = lambda self: 0", "I(7)"), "f() == 7", PASSED),
    "int-enum": (_returns(INT_ENUM, "Level.HIGH"), "f() == 3 and f() + 1 == 4", PASSED),
    "float-with-own-float": (
        _returns("class F(float):\n    __float__ = lambda self: 0.0", "F(2.5)"),
        "f() == 2.5",
        PASSED,
    ),
    "bytes-with-own-bytes": (
        _returns("class B(bytes):\n    __bytes__ = lambda self: b'lie'", "B(b'ok')"),
        "f() == b'ok'",
        PASSED,
    ),
    "bytes-lying-for-the-answer": (
        _returns("class B(bytes):\n    __bytes__ = lambda self: b'answer'", "B(b'wrong')"),
        "f() == b'answer'",
        FAILED,
    ),
}


@pytest.mark.parametrize("case", sorted(SCALAR_SUBCLASSES))
def test_scalar_subclasses_cross_as_their_value(executor, case):
    code, check, expected = SCALAR_SUBCLASSES[case]
    _same_as_one_process(executor, code, _check(check), expected)


# --- tests that call the model from several threads -------------------------------------------------------------

THREADED = {
    "pool-map": (
        "def f(x):\n    return x * x\n",
        """
        class T(unittest.TestCase):
            def test(self):
                from concurrent.futures import ThreadPoolExecutor
                with ThreadPoolExecutor(4) as pool:
                    self.assertEqual(list(pool.map(f, range(300))), [x * x for x in range(300)])
        """,
    ),
    "threads-on-one-object": (
        """
        import threading
        class f:
            def __init__(self):
                self.value, self.lock = 0, threading.Lock()
            def inc(self):
                with self.lock:
                    self.value += 1
        """,
        """
        class T(unittest.TestCase):
            def test(self):
                import threading
                counter = f()
                def work():
                    for _ in range(150):
                        counter.inc()
                threads = [threading.Thread(target=work) for _ in range(8)]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                self.assertEqual(counter.value, 1200)
        """,
    ),
}


@pytest.mark.parametrize("case", sorted(THREADED))
def test_calls_from_the_tests_threads_each_get_their_own_reply(executor, case):
    code, tests = THREADED[case]
    for _ in range(3):  # interleaved frames gave a different verdict from run to run
        result = _run(executor, code, tests)
        assert result.status is PASSED, result.reason


# --- in-place changes to more argument types reach the tests' own object ----------------------------------------

MIRRORED = {
    "deque-rotate": (
        "def f(d):\n    d.rotate(1)\n",
        "d = collections.deque([1, 2, 3], maxlen=3); f(d)",
        "list(d) == [3, 1, 2] and d.maxlen == 3",
    ),
    "counter-update": (
        "def f(c):\n    c.update('aab')\n",
        "d = collections.Counter(b=1); f(d)",
        "d == {'a': 2, 'b': 2}",
    ),
    "defaultdict-append": (
        "def f(d):\n    d['x'].append(1)\n",
        "d = collections.defaultdict(list); f(d)",
        "d == {'x': [1]} and d.default_factory is list",
    ),
    "ordereddict-move": (
        "def f(o):\n    o.move_to_end('a')\n",
        "d = collections.OrderedDict(a=1, b=2); f(d)",
        "list(d) == ['b', 'a']",
    ),
    "array-item": ("def f(a):\n    a[0] = 9\n", "d = array.array('i', [1, 2]); f(d)", "d.tolist() == [9, 2]"),
    "ordereddict-returned": (
        _returns("import collections\no = collections.OrderedDict(a=1, b=2)\no.move_to_end('a')", "o"),
        "d = f()",
        "list(d) == ['b', 'a']",
    ),
}


@pytest.mark.parametrize("case", sorted(MIRRORED))
def test_in_place_changes_reach_the_tests_object(executor, case):
    code, setup, check = MIRRORED[case]
    _same_as_one_process(executor, code, _check(check, setup, imports="array, collections"), PASSED)


def test_a_wrong_in_place_change_still_fails(executor):
    tests = _check("list(d) == [3, 1, 2]", "d = collections.deque([1, 2, 3]); f(d)", imports="collections")
    _same_as_one_process(executor, "def f(d):\n    d.rotate(-1)\n", tests, FAILED)


# --- round, math.floor/ceil/trunc, complex, bytes and __wrapped__ of a model object -------------------------------

MONEY = """
import functools, math
class Money:
    def __init__(self, cents):
        self.cents = cents
    def __round__(self, ndigits=None):
        return round(self.cents / 100, ndigits)
    def __floor__(self):
        return self.cents // 100
    def __ceil__(self):
        return -(-self.cents // 100)
    def __trunc__(self):
        return int(self.cents / 100)
    def __complex__(self):
        return complex(self.cents, 1)
    def __bytes__(self):
        return str(self.cents).encode()
def logged(fn):
    @functools.wraps(fn)
    def inner(*args):
        return fn(*args)
    return inner
@logged
def f(cents):
    return Money(cents)
"""


@pytest.mark.parametrize(
    "check",
    [
        "round(f(1234), 1) == 12.3",
        "round(f(1250)) == 12",
        "math.floor(f(1299)) == 12",
        "math.ceil(f(1201)) == 13",
        "math.trunc(f(-1250)) == -12",
        "complex(f(7)) == 7 + 1j",
        "bytes(f(42)) == b'42'",
        "f.__wrapped__(5).cents == 5",
    ],
)
def test_numeric_protocols_of_a_model_object(executor, check):
    _same_as_one_process(executor, MONEY, _check(check, imports="math"), PASSED)


def test_a_complex_or_bytes_that_is_neither_is_refused(executor):
    code = _returns("class V:\n    __complex__ = lambda self: 'lie'\n    __bytes__ = lambda self: 5", "V()")
    for call in ("complex(f())", "bytes(f())"):
        tests = f"class T(unittest.TestCase):\n    def test(self):\n        {call}\n"
        _same_as_one_process(executor, code, tests, FAILED)


# --- asyncio ----------------------------------------------------------------------------------------------------

ASYNC_CODE = """
import asyncio
async def twice(x):
    await asyncio.sleep(0.01)
    return x * 2
def f(x):
    async def main():
        return await asyncio.gather(twice(x), twice(x + 1))
    return asyncio.run(main())
"""


def test_asyncio_in_the_models_own_code_runs(executor):
    _same_as_one_process(executor, ASYNC_CODE, _check("f(3) == [6, 8]"), PASSED)


def test_the_eventfd_pair_is_only_for_a_default_pair():
    ours, theirs = untrusted._socketpair_or_eventfd()  # here sockets are allowed: a real pair
    ours.close()
    theirs.close()
    fd = untrusted.os.eventfd(0, untrusted.os.EFD_NONBLOCK)
    reader, writer = untrusted.EventfdSocket(fd), untrusted.EventfdSocket(untrusted.os.dup(fd))
    with pytest.raises(BlockingIOError):
        reader.recv(4096)
    writer.send(b"\0")
    writer.send(b"\0")
    assert reader.recv(4096) == b"\0\0"  # zero bytes: never read as a signal number
    reader.close()
    writer.close()


AWAITING_TESTS = """
class T(unittest.IsolatedAsyncioTestCase):
    async def test(self):
        self.assertEqual(await f(3), 6)
"""
AWAITED_CODE = "import asyncio\nasync def f(x):\n    await asyncio.sleep(0)\n    return x * 2\n"


def test_tests_that_await_the_models_coroutine_are_a_loud_error(executor):
    result = _run(executor, AWAITED_CODE, AWAITING_TESTS)
    assert result.status is ERROR, (result.status, result.reason)
    assert "await a coroutine of the model's code" in result.reason and "inprocess" in result.reason
    for runner in ("asyncio.run(f(3))", "asyncio.new_event_loop().run_until_complete(f(3))"):
        assert _run(executor, AWAITED_CODE, _check(f"{runner} == 6", imports="asyncio")).status is ERROR


def test_the_in_process_fallback_runs_them(executor):
    result = _run(executor, AWAITED_CODE, AWAITING_TESTS, trust_mode="inprocess")
    assert result.status is PASSED, result.reason


def test_a_coroutine_where_synchronous_tests_want_a_generator_is_the_models_failure(executor):
    """The model cannot make its wrong answer an error (no reward) by returning a coroutine: only tests that are
    asynchronous themselves turn driving one into the loud error."""
    result = _run(executor, "async def f(x):\n    return x\n", _check("f(3).send(None) == 3"))
    assert result.status is FAILED, (result.status, result.reason)


# --- an exception's notes, and the exceptions it was raised from or during --------------------------------------

CHAINED = """
class ConfigError(Exception):
    pass
def f(kind):
    try:
        {}["missing"]
    except KeyError as exc:
        if kind == "cause":
            raise ConfigError("bad config") from exc
        if kind == "context":
            raise ValueError("while handling")
        if kind == "hidden":
            raise ValueError("no context shown") from None
        error = ValueError("noted")
        error.add_note("hint: check the key")
        raise error
"""


@pytest.mark.parametrize(
    ("kind", "check"),
    [
        ("cause", "isinstance(cm.exception.__cause__, KeyError) and cm.exception.__cause__.args == ('missing',)"),
        ("context", "isinstance(cm.exception.__context__, KeyError) and cm.exception.__cause__ is None"),
        ("hidden", "cm.exception.__suppress_context__ and cm.exception.__cause__ is None"),
        ("notes", "cm.exception.__notes__ == ['hint: check the key']"),
    ],
)
def test_an_exceptions_chain_and_notes_cross_with_it(executor, kind, check):
    tests = (
        "class T(unittest.TestCase):\n    def test(self):\n        with self.assertRaises(Exception) as cm:\n"
        f"            f({kind!r})\n        self.assertTrue({check})\n"
    )
    _same_as_one_process(executor, CHAINED, tests, PASSED)


def test_a_chain_the_model_describes_is_bounded():
    from rewardpipe.execution.runtime import trusted

    info: dict = {"type": "ValueError", "module": "builtins", "msg": "0"}
    for level in range(1, 200):  # far deeper than any real chain: the runner rebuilds MAX_EXCEPTION_CHAIN levels
        info = {"type": "ValueError", "module": "builtins", "msg": str(level), "cause": info}
    exc, depth = trusted.Connection(-1, -1).exception(info), 0
    while exc.__cause__ is not None:
        exc, depth = exc.__cause__, depth + 1
    assert depth == trusted.MAX_EXCEPTION_CHAIN
    assert untrusted.MAX_EXCEPTION_CHAIN == trusted.MAX_EXCEPTION_CHAIN
