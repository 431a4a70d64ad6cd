"""``tests_format="stdio"``: a whole program per case, the case's input as stdin, its output compared in the scorer."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from rewardpipe.cli import app
from rewardpipe.execution import ExecutionJob, ExecutionStatus
from rewardpipe.execution.runtime import harness
from rewardpipe.execution.runtime.harness import (
    MAX_STDIO_CASES,
    HarnessError,
    count_expected_tests,
    parse_stdio_tests,
    stdio_output_matches,
)
from rewardpipe.execution.sandbox import make_executor
from rewardpipe.rewards.code_correctness import job_for_code
from tests.execution.conftest import ADD_TESTS

SUM_CASES = json.dumps(
    [
        {"input": "1 2\n", "output": "3\n"},
        {"input": "10 20", "output": "30"},
        {"input": "-5 5\n\n", "output": "0"},
    ]
)

IDIOMS = {
    "input": "a, b = map(int, input().split())\nprint(a + b)\n",
    "sys.stdin.read": "import sys\nprint(sum(map(int, sys.stdin.read().split())))\n",
    "sys.stdin.buffer": "import sys\nprint(sum(map(int, sys.stdin.buffer.read().split())))\n",
    "open(0)": "print(sum(map(int, open(0).read().split())))\n",
    "iteration": (
        "import sys\ntotal = 0\nfor line in sys.stdin:\n    total += sum(map(int, line.split()))\nprint(total)\n"
    ),
    "readline": "import sys\nprint(sum(map(int, sys.stdin.readline().split())))\n",
    "exit(0) after printing": "import sys\nprint(sum(map(int, open(0).read().split())))\nsys.exit(0)\n",
    "main guard": "def main():\n    print(sum(map(int, input().split())))\n\nif __name__ == '__main__':\n    main()\n",
    "a thread": (
        "import threading\n"
        "def main():\n    print(sum(map(int, open(0).read().split())))\n"
        "threading.Thread(target=main).start()\n"
    ),
}

runner = CliRunner()


def stdio_job(code: str, tests: str = SUM_CASES, **fields) -> ExecutionJob:
    fields.setdefault("timeout_s", 10.0)
    return ExecutionJob(code=code, tests=tests, tests_format="stdio", **fields)


@pytest.mark.parametrize("idiom", sorted(IDIOMS))
def test_a_right_program_passes_with_each_way_of_reading_stdin(executor, idiom):
    result = executor.run(stdio_job(IDIOMS[idiom]))
    assert (result.status, result.passed, result.total) == (ExecutionStatus.PASSED, 3, 3), result.reason


def test_a_wrong_program_fails_and_every_case_is_run(executor):
    code = "a, b = map(int, input().split())\nprint(a + b if a > 0 else 99)\n"  # wrong on the third case only
    result = executor.run(stdio_job(code))
    assert (result.status, result.passed, result.total) == (ExecutionStatus.FAILED, 2, 3)
    assert "case 2 of 3: wrong answer" in result.reason


def test_non_ascii_input_and_output(executor):
    cases = json.dumps([{"input": "héllo wörld ☃\n", "output": "☃ wörld héllo"}])
    result = executor.run(stdio_job("print(*reversed(input().split()))\n", cases))
    assert result.status is ExecutionStatus.PASSED, result.reason


def test_the_checker_compares_whitespace_separated_tokens():
    assert stdio_output_matches(b"1 2\n3  \n\n", b"1\n2 3")
    assert stdio_output_matches(b"", b"\n")
    assert not stdio_output_matches(b"1 2", b"12")
    assert not stdio_output_matches(b"1.0", b"1")  # exact tokens unless a float tolerance is given
    assert not stdio_output_matches(b"3 3", b"3")


def test_the_expected_output_is_nowhere_in_the_models_process(executor):
    """The program looks for the expected text in its own memory, every descriptor it holds, its working directory
    and its environment, and prints whatever it finds: it must find nothing (and so fail)."""
    secret = "EXPECTED-7f3c1a9d-SECRET"
    cases = json.dumps([{"input": "give me the answer\n", "output": secret}])
    code = r"""
import os, re, sys
needle = ("EXPECTED-" + "7f3c1a9d-SECRET").encode()
found = set()
def look(data, where):
    if needle in data:
        found.add(where)
look(sys.stdin.buffer.read(), "stdin")
for fd in range(3, 1024):
    try:
        look(os.pread(fd, 1 << 24, 0), f"fd {fd}")
    except OSError:
        pass
for root, dirs, files in os.walk("."):
    for name in files:
        try:
            with open(os.path.join(root, name), "rb") as handle:
                look(handle.read(1 << 24), name)
        except OSError:
            pass
look(repr(dict(os.environ)).encode(), "environ")
try:
    with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            if "r" not in perms:
                continue
            start, end = (int(x, 16) for x in span.split("-"))
            try:
                mem.seek(start)
                look(mem.read(min(end - start, 1 << 26)), "memory")
            except (OSError, OverflowError, ValueError):
                pass
except OSError:
    pass
print("EXPECTED-" + "7f3c1a9d-SECRET" if found else "nothing found", sorted(found))
"""
    result = executor.run(stdio_job(code, cases))
    assert result.status is ExecutionStatus.FAILED, result.reason
    assert "nothing found []" in result.stdout, result.stdout


def test_printing_another_cases_expected_output_does_not_pass(executor):
    cases = json.dumps([{"input": "A\n", "output": "alpha"}, {"input": "B\n", "output": "beta"}])
    result = executor.run(stdio_job("print('alpha')\n", cases))
    assert (result.status, result.passed, result.total) == (ExecutionStatus.FAILED, 1, 2)
    assert "case 1 of 2: wrong answer" in result.reason


def test_the_input_cannot_be_written(executor):
    code = "import os\ntry:\n    os.pwrite(0, b'zz', 0)\n    print('written')\nexcept OSError:\n    print('refused')\n"
    result = executor.run(stdio_job(code, json.dumps([{"input": "abc", "output": "refused"}])))
    assert result.status is ExecutionStatus.PASSED, (result.reason, result.stdout)


@pytest.mark.parametrize(
    ("code", "status", "why"),
    [
        ("raise ValueError('boom')\n", ExecutionStatus.FAILED, "exit 1 (ValueError: boom)"),
        ("print(3)\nimport sys\nsys.exit(1)\n", ExecutionStatus.FAILED, "exit 1"),
        ("import sys\nsys.exit('bad input')\n", ExecutionStatus.FAILED, "exit 1 (bad input)"),
        ("import ctypes\nctypes.string_at(0)\n", ExecutionStatus.FAILED, "killed by SIGSEGV"),
        ("import sys\nwhile True:\n    sys.stdout.write('3 ' * 65536)\n", ExecutionStatus.FAILED, "bytes"),
        ("import sys\nsys.stdout.write('3 ' * (1 << 20) + '3')\n", ExecutionStatus.FAILED, "over the 2 MiB limit"),
        ("while True:\n    pass\n", ExecutionStatus.TIMEOUT, "deadline of 2 s exceeded"),
    ],
    ids=["raises", "exit-1", "exit-message", "crash", "endless-output", "output-over-bound", "endless-loop"],
)
def test_a_broken_program_is_the_models_failure_never_an_error(executor, code, status, why):
    result = executor.run(stdio_job(code, timeout_s=2.0))
    assert result.status is status, result.reason
    assert not result.is_infrastructure_error
    assert result.passed == 0 and result.total == 3
    assert why in result.reason
    assert result.fraction_passed == 0.0


def test_the_time_limit_is_the_whole_jobs(executor):
    cases = json.dumps([{"input": str(i), "output": "ok"} for i in range(5)])
    # Each case well within the 5 s, all five (10 s) not: wide margins both ways, for a loaded machine (0.4 s cases
    # against 1 s left a case's own start-up under load the difference).
    code = "import time\ntime.sleep(2.0)\nprint('ok')\n"
    result = executor.run(stdio_job(code, cases, timeout_s=5.0))
    assert result.status is ExecutionStatus.TIMEOUT, result.reason
    assert 1 <= result.passed < 5 and result.total == 5
    assert result.duration_ms < 8000  # ended at the deadline, not after all five cases


@pytest.mark.parametrize(
    ("tests", "says"),
    [
        ("[{", "not valid JSON"),
        ('{"input": "1", "output": "1"}', "non-empty JSON list"),
        ("[]", "non-empty JSON list"),
        ('[{"input": "1"}]', 'case 0 must be an object with exactly the keys "input" and "output"'),
        ('[{"input": "1", "output": "1"}, {"input": 1, "output": "1"}]', "case 1"),
        (json.dumps([{"input": "", "output": ""}] * (MAX_STDIO_CASES + 1)), "more than the 1000 allowed"),
    ],
)
def test_malformed_cases_are_a_clear_error_for_that_job_only(executor, tests, says):
    with pytest.raises(HarnessError, match="stdio"):
        parse_stdio_tests(tests)
    good = stdio_job(IDIOMS["input"], id="good")
    bad = stdio_job(IDIOMS["input"], tests, id="bad")
    results = list(executor.run_batch([good, bad, good.model_copy(update={"id": "again"})], workers=2))
    assert [r.status for r in results] == [ExecutionStatus.PASSED, ExecutionStatus.ERROR, ExecutionStatus.PASSED]
    assert results[1].id == "bad" and says in results[1].reason
    assert results[1].is_infrastructure_error  # the task author's input, never the model's 0


def test_count_expected_tests_counts_cases():
    assert count_expected_tests(SUM_CASES, "stdio") == 3
    with pytest.raises(HarnessError):
        count_expected_tests("print(1)", "stdio")


def test_entry_point_is_required_unless_stdio_and_refused_for_it():
    assert stdio_job("print(1)").entry_point == ""
    with pytest.raises(ValidationError, match="not used by stdio"):
        stdio_job("print(1)", entry_point="main")
    for missing in ({}, {"entry_point": ""}, {"tests_format": "check"}):  # refused as before the stdio format
        with pytest.raises(ValidationError) as refused:
            ExecutionJob(code="def add(a, b): return a + b", tests=ADD_TESTS, **missing)
        assert [e["loc"] for e in refused.value.errors()] == [("entry_point",)]
        wanted = "string_too_short" if missing.get("entry_point") == "" else "missing"
        assert refused.value.errors()[0]["type"] == wanted
    with pytest.raises(ValidationError, match="inprocess"):
        stdio_job("print(1)", trust_mode="inprocess")
    assert ExecutionJob(code="x", tests=ADD_TESTS, entry_point="add").tests_format == "unittest"


def test_code_correctness_passes_stdio_through():
    cases = [{"input": "1 2", "output": "3"}]
    job = job_for_code("print(3)", {"tests": cases, "tests_format": "stdio"})
    assert job is not None
    assert (job.tests_format, job.entry_point, json.loads(job.tests)) == ("stdio", "", cases)
    with pytest.raises(ValueError, match="entry_point"):
        job_for_code("print(3)", {"tests": ADD_TESTS})


def test_the_isolation_report_is_the_same_as_for_other_jobs():
    executor = make_executor(workers=1)  # one fork server: its uid and CPU are in the report
    try:
        stdio = executor.run(stdio_job(IDIOMS["input"]))
        unittest_job = ExecutionJob(code="def add(a, b):\n    return a + b\n", tests=ADD_TESTS, entry_point="add")
        other = executor.run(unittest_job)
    finally:
        executor.close()
    assert stdio.status is other.status is ExecutionStatus.PASSED
    assert stdio.isolation == other.isolation and stdio.mode == other.mode == "split"


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_cli_runs_a_stdio_job_without_an_entry_point(tmp_path):
    code = write(tmp_path, "prog.py", IDIOMS["open(0)"])
    tests = write(tmp_path, "cases.json", SUM_CASES)
    args = ["exec", "--code", code, "--tests", tests, "--tests-format", "stdio", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert (payload["status"], payload["passed"], payload["total"]) == ("passed", 3, 3)
    missing = runner.invoke(app, ["exec", "--code", code, "--tests", tests])
    assert missing.exit_code != 0 and "--entry-point" in missing.output


def test_cli_batch_and_hostile_output_stay_harmless(tmp_path):
    hostile = (
        "import sys\nsys.stdout.buffer.write(b'\\x1b]0;pwned\\x07\\x1b[2J\\xff\\xfe 3')\n"
        "sys.stderr.write('\\x1b[31mred\\x1b[0m \\udcff')\nsys.exit(2)\n"
    )
    lines = [
        {"id": "right", "code": IDIOMS["input"], "tests": SUM_CASES, "tests_format": "stdio"},
        {"id": "hostile", "code": hostile, "tests": SUM_CASES, "tests_format": "stdio"},
        {"id": "broken", "code": IDIOMS["input"], "tests": "[1]", "tests_format": "stdio"},
    ]
    batch = write(tmp_path, "jobs.jsonl", "".join(json.dumps(line) + "\n" for line in lines))
    result = runner.invoke(app, ["exec", "--batch", batch, "--json", "--workers", "1"])
    assert "\x1b" not in result.stdout
    payloads = {p["id"]: p for p in map(json.loads, result.stdout.splitlines())}
    assert [payloads[k]["status"] for k in ("right", "hostile", "broken")] == ["passed", "failed", "error"]
    assert "\x1b" in payloads["hostile"]["stdout"]  # kept, as data, inside the escaped JSON string
    assert "exit 2" in payloads["hostile"]["reason"]
    human = runner.invoke(app, ["exec", "--batch", batch, "--workers", "1"])
    assert "\x1b" not in human.output and "exit 2" in human.output


def test_doctor_lints_stdio_cases_not_python():
    from types import SimpleNamespace

    from rewardpipe.doctor import static_problems, weak_test_shapes

    good = SimpleNamespace(tests=SUM_CASES, reference_solution=IDIOMS["input"], entry_point="", tests_format="stdio")
    assert static_problems(good) == [] and weak_test_shapes(good) == []
    bad = SimpleNamespace(**{**vars(good), "tests": '[{"input": "1"}]', "reference_solution": "print("})
    problems = static_problems(bad)
    assert any('case 0 must be an object with exactly the keys "input" and "output"' in p for p in problems)
    assert any("reference_solution does not parse" in p for p in problems)


# -- float tolerance: {"cases": [...], "float_tolerance": x} ---------------------------------------------------

THIRDS = [{"input": "1 3\n", "output": "0.333333\n"}, {"input": "2 3\n", "output": "0.666667\n"}]
DIVIDES = "a, b = map(int, input().split())\nprint(a / b)\n"  # 0.3333333333333333: other digits than the cases'


def test_the_checker_accepts_numbers_within_the_tolerance_absolutely_or_relatively():
    assert stdio_output_matches(b"0.3333333333", b"0.333333", 1e-6)
    assert stdio_output_matches(b"1.0 2", b"1 2.0000001", 1e-6)  # 1.0 is 1 with a tolerance
    assert stdio_output_matches(b"1000000.5", b"1000000", 1e-6)  # relative: 0.5 in a million
    assert stdio_output_matches(b"1e-7", b"0", 1e-6)  # absolute near zero
    assert stdio_output_matches(b"YES 0.5\n", b"YES\n0.5000001", 1e-6)  # words still compared exactly
    assert not stdio_output_matches(b"0.3334", b"0.333333", 1e-6)
    assert not stdio_output_matches(b"1000001.5", b"1000000", 1e-6)
    assert not stdio_output_matches(b"yes 0.5", b"YES 0.5", 1e-6)
    assert not stdio_output_matches(b"0.5", b"0.5 0.5", 1e-6)  # the same number of tokens
    assert not stdio_output_matches(b"0.3333333333", b"0.333333")  # no tolerance: exact tokens


@pytest.mark.parametrize(
    "printed",
    [b"nan", b"NaN", b"inf", b"-inf", b"Infinity", b"1e999", b"1_0", b"0x1p0", b"\xd9\xa1\xd9\xa0", b"1,0", b"--1"],
)
def test_only_plain_decimal_numbers_are_compared_with_the_tolerance(printed):
    """float() reads all of these (or their neighbours); a checker reads none of them as the expected 10 or 1."""
    for expected in (b"10", b"1", b"1e9999"):
        assert not stdio_output_matches(printed, expected, 0.5)


def test_a_number_longer_than_any_checker_reads_is_compared_exactly():
    long_one = b"1." + b"0" * harness.MAX_NUMBER_TOKEN_BYTES
    assert not stdio_output_matches(long_one, b"1", 1e-6)
    assert stdio_output_matches(long_one, long_one, 1e-6)


def test_float_tolerance_passes_a_right_program_that_prints_other_digits(executor):
    exact = stdio_job(DIVIDES, json.dumps(THIRDS))
    tolerant = stdio_job(DIVIDES, json.dumps({"cases": THIRDS, "float_tolerance": 1e-6}))
    wrong = stdio_job("print(0.3334)\n", json.dumps({"cases": THIRDS, "float_tolerance": 1e-6}))
    results = list(executor.run_batch([exact, tolerant, wrong], workers=2))
    assert [(r.status, r.passed) for r in results] == [
        (ExecutionStatus.FAILED, 0),
        (ExecutionStatus.PASSED, 2),
        (ExecutionStatus.FAILED, 0),
    ]
    assert count_expected_tests(tolerant.tests, "stdio") == 2


@pytest.mark.parametrize(
    ("tests", "says"),
    [
        ({"cases": THIRDS, "float_tolerance": True}, "float_tolerance must be a number from 0 to 0.5"),
        ({"cases": THIRDS, "float_tolerance": "1e-6"}, "float_tolerance must be a number"),
        ({"cases": THIRDS, "float_tolerance": -1e-6}, "float_tolerance must be a number"),
        ({"cases": THIRDS, "float_tolerance": 1}, "float_tolerance must be a number"),
        ({"cases": THIRDS, "float_tolerance": float("nan")}, "float_tolerance must be a number"),
        ({"cases": THIRDS, "tolerance": 1e-6}, "unknown key 'tolerance'"),
        ({"cases": []}, "non-empty JSON list"),
        ({"cases": {"input": "1", "output": "1"}}, "non-empty JSON list"),
    ],
)
def test_a_malformed_tolerance_is_a_clear_error_for_that_job_only(executor, tests, says):
    with pytest.raises(HarnessError, match=says):
        parse_stdio_tests(json.dumps(tests))
    results = list(executor.run_batch([stdio_job(DIVIDES, json.dumps(tests), id="bad"), stdio_job(IDIOMS["input"])]))
    assert [r.status for r in results] == [ExecutionStatus.ERROR, ExecutionStatus.PASSED]
    assert says in results[0].reason and results[0].is_infrastructure_error


def test_code_correctness_and_doctor_know_the_tolerance():
    from types import SimpleNamespace

    from rewardpipe.doctor import weak_test_shapes

    tolerant = {"cases": THIRDS, "float_tolerance": 1e-6}
    job = job_for_code(DIVIDES, {"tests": tolerant, "tests_format": "stdio"})
    assert job is not None and json.loads(job.tests) == tolerant
    task = SimpleNamespace(tests=json.dumps(THIRDS), reference_solution=DIVIDES, entry_point="", tests_format="stdio")
    (warning,) = weak_test_shapes(task)
    assert "stdio case 0 expects '0.333333'" in warning and "float_tolerance" in warning
    assert weak_test_shapes(SimpleNamespace(**{**vars(task), "tests": json.dumps(tolerant)})) == []
    assert weak_test_shapes(SimpleNamespace(**{**vars(task), "tests": SUM_CASES})) == []  # integers: exact is right


def test_two_integers_are_compared_as_integers_whatever_the_tolerance():
    """As doubles, 2**53 + 1 is 2**53: a wrong big answer would pass within any tolerance, 0 included."""
    assert not stdio_output_matches(b"9007199254740993", b"9007199254740992", 0.0)
    assert not stdio_output_matches(b"1000001", b"1000000", 1e-6)  # a wrong count is wrong
    assert stdio_output_matches(b"007 -0", b"7 0", 1e-6)
    assert stdio_output_matches(b"1000000.0000001", b"1000000", 1e-6)  # a fraction on either side: the tolerance


def test_the_exact_comparison_keeps_every_digit_whatever_the_threads_decimal_context():
    """Where the doubles' rounding could decide, the exact decimal values do: each step of that comparison runs in
    its own context. ``abs()`` in the thread's context (28 digits) rounded a 30-digit expected value, and with it
    the slack: a printed value just outside the tolerance passed."""
    from decimal import Decimal, localcontext

    want, tolerance = Decimal("1234567890123456789012345678.95"), 1e-28
    with localcontext() as exact:
        exact.prec = 200
        slack = Decimal(repr(tolerance)) * want  # 0.123456789012345678901234567895
        just_outside, just_inside = want + slack + Decimal("1e-29"), want + slack
    printed_outside, printed_inside = str(just_outside).encode(), str(just_inside).encode()
    assert not stdio_output_matches(printed_outside, str(want).encode(), tolerance)
    assert stdio_output_matches(printed_inside, str(want).encode(), tolerance)
