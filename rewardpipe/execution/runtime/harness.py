"""Test discovery and counting shared by the trusted harness and the in-process fallback."""

from __future__ import annotations

import ast
import decimal
import json
import math
import re
import threading
import unittest
from typing import NamedTuple

# Two threads building ASTs at once have failed here with a spurious "SystemError: AST constructor
# recursion depth mismatch" (python/cpython#106905: the builder's depth bookkeeping was shared between
# threads; seen on 3.11). The scorer parses on many threads and a spurious error would drop an innocent
# rollout as an infrastructure error, so every parse in it goes through this lock on every version: a
# parse is microseconds, and no version is assumed fixed without being tested here (only 3.11 is).
_PARSE_LOCK = threading.Lock()


def parse_python(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse`` that is safe to call from several threads at once."""
    with _PARSE_LOCK:
        return ast.parse(source, filename)


class HarnessError(Exception):
    """The hidden tests themselves are unusable (an infrastructure/dataset fault, never the model's)."""


class ModelBaseException(BaseException):
    """What the model's code raised when that is no ``Exception`` (``SystemExit``, ``KeyboardInterrupt``,
    ``GeneratorExit``, a ``BaseException`` subclass of its own), rebuilt in the trusted runner. As in one process,
    ``except Exception`` and ``assertRaises(Exception)`` do not catch it (round thirty-five: they caught the ordinary
    error it arrived as, so a wrong answer that called ``sys.exit()`` passed tests expecting an error); unittest
    records it as the test's error, and where it ends the test run in one process (a class or module fixture, a
    cleanup of theirs, the tests' module-level code) the run ends there, a failure of the model's."""


class ModelSystemExit(SystemExit, ModelBaseException):
    """The model's ``SystemExit`` with its ``code``: ``assertRaises(SystemExit)`` catches it, as in one process (a right
    command-line answer whose argparse exits with status 2 failed such a test)."""


class ModelKeyboardInterrupt(KeyboardInterrupt, ModelBaseException):
    """The model's ``KeyboardInterrupt``: ``assertRaises(KeyboardInterrupt)`` and ``except KeyboardInterrupt`` catch it,
    as in one process (round thirty-six: it arrived as a plain :class:`ModelBaseException`, so a right answer that
    raises it on purpose failed such a test). Uncaught, unittest lets it through and it ends the run, as it ends
    ``python -m unittest`` (:func:`run_suite`: the model's failure)."""


class ModelGeneratorExit(GeneratorExit, ModelBaseException):
    """The model's ``GeneratorExit``, caught by ``assertRaises(GeneratorExit)`` as in one process (round thirty-six)."""


# The built-in exception classes that are no ``Exception``, each with what stands for it here (most specific first).
MODEL_BASE_EXCEPTIONS: tuple[tuple[type[BaseException], type[ModelBaseException]], ...] = (
    (SystemExit, ModelSystemExit),
    (KeyboardInterrupt, ModelKeyboardInterrupt),
    (GeneratorExit, ModelGeneratorExit),
)


class UndefinedName(HarnessError):
    """The hidden tests' module-level code read ``name``, which neither they nor the model's code define. From one
    job alone this is broken tests (a typo) or an answer that left out a name the tests need (a class, a constant):
    an ``error``, which the scorer turns into the model's ``failed`` once other answers to the same tests loaded."""

    def __init__(self, message: str, name: str):
        super().__init__(message)
        self.name = name


class MissingEntryPoint(HarnessError):
    """The tests cannot run because the model's code does not define the function under test.

    The result is ``error`` (the tests never ran, so nothing was verified), but the fault is the
    model's: scoring treats it as a failure worth 0, never as an infrastructure error that drops the
    rollout from GRPO (which a model could otherwise exploit by renaming a wrong function).
    """


def parse_tests(tests: str) -> ast.Module:
    try:
        return parse_python(tests, "<hidden tests>")
    except SyntaxError as exc:
        raise HarnessError(f"hidden tests do not parse: {exc.msg} (line {exc.lineno})") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # e.g. NUL bytes, absurd nesting
        raise HarnessError(f"hidden tests cannot be compiled: {type(exc).__name__}: {exc}") from None


def is_test_method(item: ast.stmt) -> bool:
    """A ``test*`` method (plain or async) in a class body: what the loader runs and the count expects."""
    return isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test")


# The ``stdio`` format (competitive programming): ``tests`` is a JSON list of ``{"input": str, "output": str}``.
MAX_STDIO_CASES = 1000
MAX_STDIO_TESTS_CHARS = 64 << 20  # the whole JSON text
MAX_STDIO_INPUT_BYTES = 16 << 20  # one case's input, UTF-8
MAX_STDIO_OUTPUT_BYTES = 1 << 20  # one case's expected output
# What one case's program may print: beyond it the case fails. Twice the largest expected output, because a right
# program's output differs from the expected one in whitespace (the newline print() ends it with) and, with a float
# tolerance, in digits (round twenty-seven: at the same bound, an expected output of 1 MiB left no room for them, so a
# right program that printed it with its final newline failed).
MAX_STDIO_PRINTED_BYTES = 2 * MAX_STDIO_OUTPUT_BYTES


class StdioSuite(NamedTuple):
    """``stdio``-format tests: each case's ``(input, expected output)`` bytes (UTF-8), and the float tolerance
    their numbers are compared with (None: every token exactly)."""

    cases: list[tuple[bytes, bytes]]
    float_tolerance: float | None = None


STDIO_SHAPES = (
    'a non-empty JSON list of {"input": str, "output": str} cases, or an object '
    '{"cases": [...], "float_tolerance": number}'
)
MAX_FLOAT_TOLERANCE = 0.5  # beyond it "equal" would say nothing about the answer: surely a mistake


def parse_stdio_suite(tests: str) -> StdioSuite:
    """The cases of ``stdio``-format tests and their float tolerance; a :class:`HarnessError` naming what is wrong
    if they are malformed (the task author's input)."""
    if len(tests) > MAX_STDIO_TESTS_CHARS:
        raise HarnessError(f"stdio tests are over {MAX_STDIO_TESTS_CHARS >> 20} MiB of JSON")
    try:
        document = json.loads(tests)
    except (ValueError, RecursionError) as exc:
        raise HarnessError(f"stdio tests are not valid JSON: {str(exc)[:200]}") from None
    tolerance = None
    if type(document) is dict and "cases" in document:
        unknown = sorted(set(document) - {"cases", "float_tolerance"})
        if unknown:
            raise HarnessError(f"stdio tests: unknown key {unknown[0]!r}; they must be {STDIO_SHAPES}")
        tolerance = _float_tolerance(document.get("float_tolerance"))
        document = document["cases"]
    if type(document) is not list or not document:
        raise HarnessError(f"stdio tests must be {STDIO_SHAPES}")
    if len(document) > MAX_STDIO_CASES:
        raise HarnessError(f"stdio tests have {len(document)} cases, more than the {MAX_STDIO_CASES} allowed")
    parsed = []
    for index, case in enumerate(document):
        if type(case) is not dict or set(case) != {"input", "output"}:
            raise HarnessError(f'stdio case {index} must be an object with exactly the keys "input" and "output"')
        if type(case["input"]) is not str or type(case["output"]) is not str:
            raise HarnessError(f'stdio case {index}: "input" and "output" must be strings')
        given = case["input"].encode("utf-8", "surrogatepass")
        wanted = case["output"].encode("utf-8", "surrogatepass")
        if len(given) > MAX_STDIO_INPUT_BYTES:
            raise HarnessError(f"stdio case {index}: input is over {MAX_STDIO_INPUT_BYTES >> 20} MiB")
        if len(wanted) > MAX_STDIO_OUTPUT_BYTES:
            raise HarnessError(f"stdio case {index}: output is over {MAX_STDIO_OUTPUT_BYTES >> 20} MiB")
        parsed.append((given, wanted))
    return StdioSuite(parsed, tolerance)


def _float_tolerance(value) -> float | None:
    if value is None:
        return None
    # (bool is an int to Python, and JSON's NaN and Infinity are floats to json.loads: neither is a tolerance)
    if type(value) not in (int, float) or not math.isfinite(value) or not 0 <= value <= MAX_FLOAT_TOLERANCE:
        raise HarnessError(
            f"stdio tests: float_tolerance must be a number from 0 to {MAX_FLOAT_TOLERANCE} (1e-6, say), got {value!r}"
        )
    return float(value)


def parse_stdio_tests(tests: str) -> list[tuple[bytes, bytes]]:
    """The ``(input, expected output)`` bytes (UTF-8) of each case of ``stdio``-format tests (see
    :func:`parse_stdio_suite`)."""
    return parse_stdio_suite(tests).cases


# A decimal number as checkers read one: sign, digits with at most one point, an optional exponent. Nothing else
# float() accepts ("nan", "inf", "1_000", surrounding spaces) is a number here. Each part is unambiguous, so a
# failing match is linear in the token's length (no two quantifiers compete for the same digits).
_DECIMAL = re.compile(rb"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_INTEGER = re.compile(rb"[+-]?[0-9]+")
MAX_NUMBER_TOKEN_BYTES = 1000  # longer tokens are compared exactly: no checker's float reads that many digits


def is_fractional_number(token: bytes) -> bool:
    """Whether ``token`` is a decimal number with a fraction or an exponent (``0.5``, ``1e-3``): one a right program
    may print with other digits, so the cases want a float tolerance. An integer is not (two integers are compared
    exactly, see :func:`stdio_output_matches`)."""
    return _DECIMAL.fullmatch(token) is not None and _INTEGER.fullmatch(token) is None


def stdio_output_matches(printed: bytes, expected: bytes, float_tolerance: float | None = None) -> bool:
    """The usual checker: the same whitespace-separated tokens (ASCII whitespace), so trailing spaces, blank lines
    and line breaks against spaces do not matter. Tokens are compared exactly; with a ``float_tolerance`` two
    decimal numbers also match when they differ by at most that much, absolutely or relatively to the expected
    one (Codeforces' "absolute or relative error"): ``|printed - expected| <= tolerance * max(1, |expected|)``,
    unless both are integers, which must be equal (``007`` is ``7``)."""
    got, want = printed.split(), expected.split()
    if got == want:
        return True
    if float_tolerance is None or len(got) != len(want):
        return False
    return all(a == b or _numbers_close(a, b, float_tolerance) for a, b in zip(got, want, strict=True))


def _numbers_close(printed: bytes, expected: bytes, tolerance: float) -> bool:
    if len(printed) > MAX_NUMBER_TOKEN_BYTES or len(expected) > MAX_NUMBER_TOKEN_BYTES:
        return False
    if not (_DECIMAL.fullmatch(printed) and _DECIMAL.fullmatch(expected)):
        return False
    if _INTEGER.fullmatch(printed) and _INTEGER.fullmatch(expected):
        # Two integers are compared as integers: as doubles, 2**53 + 1 is 2**53, and a wrong count (or a wrong
        # big answer) would pass within any tolerance, 0 included. The tolerance is for numbers with a fraction.
        return int(printed) == int(expected)
    got, want = float(printed), float(expected)
    if not (math.isfinite(got) and math.isfinite(want)):  # 1e999 is no number a checker accepts
        return False
    gap, slack = abs(got - want), tolerance * max(1.0, abs(want))
    # As doubles each number (and so their gap) is rounded, by far less than this; where that could decide, the exact
    # decimal values do (round twenty-eight: 9007199254740992.0 was 9007199254740993 within a tolerance of 0, so an
    # integer printed with ".0" undid round twenty-seven's rule for two integers).
    rounding = _DOUBLE_ROUNDING * max(1.0, abs(got), abs(want))
    if abs(gap - slack) > rounding:
        return gap < slack
    return _decimals_close(printed, expected, tolerance)


_DOUBLE_ROUNDING = 2.0**-45  # relative: well above the few units in the last place (2**-52) the doubles above lose
# Exact for two tokens of up to MAX_NUMBER_TOKEN_BYTES digits and a tolerance (at most 17 digits) times one of them.
_EXACT = decimal.Context(prec=3 * MAX_NUMBER_TOKEN_BYTES, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN, traps=[])


def _decimals_close(printed: bytes, expected: bytes, tolerance: float) -> bool:
    """:func:`_numbers_close` on the decimal values the tokens and the tolerance (as written: ``1e-06``) spell."""
    got, want = _EXACT.create_decimal(printed.decode("ascii")), _EXACT.create_decimal(expected.decode("ascii"))
    # (every step in the exact context: abs() would round to the thread's context, 28 digits by default)
    slack = _EXACT.multiply(
        _EXACT.create_decimal(repr(tolerance)), _EXACT.max(_EXACT.create_decimal(1), _EXACT.abs(want))
    )
    return _EXACT.compare(_EXACT.abs(_EXACT.subtract(got, want)), slack) <= 0


def count_expected_tests(tests: str | ast.Module, tests_format: str) -> int:
    """How many tests must run, decided from the test source alone (never from anything the model
    can influence): one for ``check`` format, the number of cases for ``stdio``, else every ``test*``
    method of module-level classes."""
    if tests_format == "stdio":
        if not isinstance(tests, str):
            raise HarnessError("stdio tests are JSON, not Python")
        return len(parse_stdio_suite(tests).cases)
    tree = parse_tests(tests) if isinstance(tests, str) else tests
    if tests_format == "check":
        if not any(isinstance(node, ast.FunctionDef) and node.name == "check" for node in tree.body):
            raise HarnessError("check-format tests define no top-level check(candidate) function")
        return 1
    count = 0
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            count += sum(1 for item in node.body if is_test_method(item))
    if count == 0:
        raise HarnessError("hidden tests define no test* methods in any class")
    return count


def names_used(tree: ast.Module) -> set[str]:
    """Every name the test source reads; the only names the trusted side takes from the model.

    An explicit stack over ``_fields`` rather than ``ast.walk``: a HumanEval check function is thousands
    of literal nodes, and the generators of ast.walk cost milliseconds on it."""
    names: set[str] = set()
    stack: list = [tree]
    name_type, node_type = ast.Name, ast.AST
    while stack:
        node = stack.pop()
        if type(node) is name_type:
            names.add(node.id)
            continue
        for field in node._fields:
            value = getattr(node, field, None)
            if type(value) is list:
                stack.extend(item for item in value if isinstance(item, node_type))
            elif isinstance(value, node_type):
                stack.append(value)
    return names


class CheckCase(unittest.TestCase):
    """HumanEval format: one test that calls ``check(candidate)``."""

    def __init__(self, check, candidate):
        super().__init__("test_check")
        self._check = check
        self._candidate = candidate

    def test_check(self):
        self._check(self._candidate)


def load_failed(suite: unittest.TestSuite) -> bool:
    """Whether the loader put a placeholder for a load that raised (a ``load_tests`` hook, an import) in ``suite``."""
    for test in suite:
        if isinstance(test, unittest.TestSuite):
            if load_failed(test):
                return True
        elif type(test).__name__ == "_FailedTest" and type(test).__module__ == "unittest.loader":  # (private)
            return True
    return False


MISSING = object()  # no entry point in the namespace


def build_suite(namespace: dict, module, tests_format: str, entry_point: str, candidate=MISSING) -> unittest.TestSuite:
    """The suite to run. ``candidate``: for ``check`` tests, the model's entry point as the namespace held it before
    the tests' code ran (round twenty-seven: an entry point named ``check`` was the tests' own ``def check`` by then,
    so ``check(check)`` never called the model's code and every answer, a right one too, failed)."""
    if tests_format == "check":
        check = namespace.get("check")
        if not callable(check):
            raise HarnessError("check-format tests define no check(candidate) function")
        if candidate is MISSING:
            return unittest.TestSuite([_MissingEntryPoint(entry_point)])
        return unittest.TestSuite([CheckCase(check, candidate)])
    return unittest.defaultTestLoader.loadTestsFromModule(module)


class _MissingEntryPoint(unittest.TestCase):
    def __init__(self, entry_point):
        super().__init__("test_check")
        self._entry_point = entry_point

    def test_check(self):
        raise AssertionError(f"the model's code defines no {self._entry_point!r}")


class CountingResult(unittest.TestResult):
    """Counts successes directly, so a test is 'passed' only if it ran to addSuccess."""

    def __init__(self):
        super().__init__()
        self.successes = 0
        self.first_failure = ""
        # Errors unittest reports outside any one test: setUpClass/tearDownClass, setUpModule/
        # tearDownModule, class and module cleanups. Plain unittest counts them as errors of the run; a
        # count of passing test methods alone would miss them (a failed assertion in tearDownClass).
        self.fixture_problems = 0
        self.class_pattern_errors = 0  # (see class_pattern_error)

    def addSuccess(self, test):  # noqa: N802 - unittest.TestResult's method name
        super().addSuccess(test)
        self.successes += 1

    def _note(self, test, err):
        if not self.first_failure:
            kind, value, _ = err
            try:
                text = str(value)
            except Exception:  # noqa: BLE001 - a hostile __str__ must not break the harness
                text = "<unprintable>"
            self.first_failure = f"{_test_name(test)}: {kind.__name__}: {text}"[:600]

    def ended_by(self, exc: BaseException) -> None:
        """The model's :class:`ModelBaseException` ended the run outside a test method."""
        self.fixture_problems += 1
        if not self.first_failure:
            try:
                text = str(exc)
            except Exception:  # noqa: BLE001 - a hostile __str__ must not break the harness
                text = "<unprintable>"
            self.first_failure = f"the model's code ended the test run: {type(exc).__name__}: {text}"[:600]

    def _count_fixture(self, test) -> None:
        if not isinstance(test, unittest.TestCase):  # unittest's _ErrorHolder for a fixture or a cleanup
            self.fixture_problems += 1

    def addFailure(self, test, err):  # noqa: N802 - unittest.TestResult's method name
        self._count_fixture(test)
        self._note(test, err)
        super().addFailure(test, err)

    def addError(self, test, err):  # noqa: N802 - unittest.TestResult's method name
        self._count_fixture(test)
        self._note(test, err)
        self.class_pattern_errors += class_pattern_error(err)
        super().addError(test, err)

    def addSubTest(self, test, subtest, err):  # noqa: N802 - unittest.TestResult's method name
        if err is not None:
            self._note(subtest, err)
        super().addSubTest(test, subtest, err)

    def addSkip(self, test, reason):  # noqa: N802 - unittest.TestResult's method name
        self._count_fixture(test)  # a fixture that raised SkipTest skipped tests the run needed
        if not self.first_failure:
            self.first_failure = f"{_test_name(test)}: skipped ({reason})"[:600]
        super().addSkip(test, reason)

    def addUnexpectedSuccess(self, test):  # noqa: N802 - unittest.TestResult's method name
        if not self.first_failure:
            self.first_failure = f"{_test_name(test)}: unexpected success"
        super().addUnexpectedSuccess(test)


def class_pattern_error(err) -> bool:
    """Whether ``err`` is the interpreter's refusal of a ``match`` class pattern whose class is no type (``case
    Point(x=0)`` where ``Point`` is a stub of the model's class, round thirty-four), raised in the tests' own frame:
    never an exception of the model's carried over, whose innermost frame is the runner's."""
    kind, value, trace = err
    if kind is not TypeError or trace is None:
        return False
    while trace.tb_next is not None:
        trace = trace.tb_next
    message = value.args[0] if len(value.args) == 1 else None
    return (
        trace.tb_frame.f_code.co_filename == "<hidden tests>"
        and type(message) is str
        and message.startswith("called match pattern must be a ")
    )


def _test_name(test) -> str:
    name = getattr(test, "_testMethodName", None) or str(test)
    return f"{type(test).__name__}.{name}"


def summarize(result: CountingResult) -> dict:
    return {
        "tests_run": result.testsRun,
        "successes": result.successes,
        "first_failure": result.first_failure,
        "fixture_problems": result.fixture_problems,
    }


def run_suite(suite: unittest.TestSuite, module) -> CountingResult:
    """Run ``suite`` as unittest would run ``module``: its setUpModule/tearDownModule need the module to
    be importable by name (unittest looks it up in sys.modules, and silently skips both otherwise)."""
    import sys

    name = module.__name__
    previous = sys.modules.get(name)
    sys.modules[name] = module
    result = CountingResult()
    try:
        suite.run(result)
    except ModelBaseException as exc:
        # unittest's fixtures catch only ``Exception``: the model's SystemExit (or other) from setUpClass, a class or
        # module cleanup or tearDownModule ends the whole run, as it ends ``python -m unittest``; what has not run has
        # not passed.
        result.ended_by(exc)
    finally:
        if previous is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = previous
    return result
