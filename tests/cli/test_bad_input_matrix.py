"""Issue 9 item 7: every subcommand against a matrix of bad inputs.

Each case must end with one clear ``error:`` line (or, for per-line problems, a report naming the line),
exit 1 for bad data or 2 for usage, never a Python traceback and never the last-resort "rewardpipe bug"
message; and nothing may be written anywhere but the store directory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rewardpipe.cli import app
from tests.cli.conftest import BUNDLED_TASKS, make_task

GOOD_ROLLOUT = {
    "rollout_id": "r",
    "group_id": "g",
    "task_id": "add",
    "step": 0,
    "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
}

# name -> bytes of a bad JSONL input (None: the path does not exist; "dir": the path is a directory)
BAD_FILES: dict[str, bytes | str | None] = {
    "missing": None,
    "directory": "dir",
    "empty": b"",
    "blank_lines": b"\n\n  \n",
    "invalid_utf8": b'{"task_id": "\xff\xfe"}\n',
    "utf16_bom": "\ufeff{}".encode("utf-16"),
    "not_json": b"{this is not json\n",
    "json_array_line": b"[1, 2, 3]\n",
    "json_scalar_line": b"42\n",
    "deeply_nested": b"[" * 100_000 + b"]" * 100_000 + b"\n",
    "wrong_types": json.dumps(
        {"task_id": 5, "rollout_id": ["x"], "group_id": {}, "step": "two", "messages": "hi", "prompt": None}
    ).encode()
    + b"\n",
    "huge_step": json.dumps({**GOOD_ROLLOUT, "step": 10**30}).encode() + b"\n",
    "negative_step": json.dumps({**GOOD_ROLLOUT, "step": -1}).encode() + b"\n",
    "empty_messages": json.dumps({**GOOD_ROLLOUT, "messages": []}).encode() + b"\n",
    "no_assistant_message": json.dumps({**GOOD_ROLLOUT, "messages": [{"role": "user", "content": "x"}]}).encode()
    + b"\n",
    "nul_bytes": b"\x00\x00\x00\n",
    "ansi_in_values": json.dumps({"task_id": "\x1b[2J\x1b[31mowned", "rollout_id": "\x1b]0;title\x07"}).encode()
    + b"\n",  # round two (independent check): what a JSON parser or pydantic lets through on its own
    "int_beyond_digit_limit": b'{"rollout_id": "r", "step": ' + b"9" * 5000 + b"}\n",
    "bool_step": json.dumps({**GOOD_ROLLOUT, "step": True}).encode() + b"\n",
    "string_step": json.dumps({**GOOD_ROLLOUT, "step": "1"}).encode() + b"\n",
    "unknown_role": json.dumps({**GOOD_ROLLOUT, "messages": [{"role": "wizard", "content": "x"}]}).encode() + b"\n",
    "nested_wrong_types": json.dumps({**GOOD_ROLLOUT, "messages": [{"role": 5, "content": {"x": [1]}}]}).encode()
    + b"\n",
    "entry_point_not_a_name": json.dumps(make_task(entry_point="add; import os")).encode() + b"\n",
    "nan_literal": b'{"task_id": NaN, "rollout_id": Infinity}\n',
    "only_a_bom": b"\xef\xbb\xbf\n",
    "deep_object": b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b"\n",
    "markup_and_bidi": json.dumps({"task_id": "[bold]x[/]\u202e\u2028", "rollout_id": "[link=http://e]x"}).encode()
    + b"\n",
    "tests_do_not_parse": json.dumps(make_task(tests="def (")).encode() + b"\n",
    "tests_hold_no_test": json.dumps(make_task(tests="import unittest\nx = 1\n")).encode() + b"\n",
    "tests_with_nul": json.dumps(make_task(tests="import unittest\x00\n")).encode() + b"\n",
    # round three: the id rule, the spec rule and the entry-point rule (tests/cli/test_input_rules.py)
    "nul_in_ids": json.dumps({**GOOD_ROLLOUT, **make_task(), "rollout_id": "r\x00", "task_id": "t\x00"}).encode()
    + b"\n",
    "bidi_in_ids": json.dumps({**GOOD_ROLLOUT, **make_task(), "group_id": "g\u202e", "task_id": "t\u2028"}).encode()
    + b"\n",
    "empty_spec": json.dumps(make_task(spec=[])).encode() + b"\n",
    "blank_spec_item": json.dumps(make_task(spec=["  "])).encode() + b"\n",
    "keyword_entry_point": json.dumps(make_task(entry_point="class")).encode() + b"\n",
    # round four: ids that differ only in Unicode normalisation print the same (tests/cli/test_id_collisions.py)
    "lookalike_task_ids": (json.dumps(make_task("caf\u00e9")) + "\n" + json.dumps(make_task("cafe\u0301"))).encode()
    + b"\n",
    "lookalike_rollout_ids": (
        json.dumps({**GOOD_ROLLOUT, "rollout_id": "caf\u00e9"})
        + "\n"
        + json.dumps({**GOOD_ROLLOUT, "rollout_id": "cafe\u0301"})
    ).encode()
    + b"\n",
    "lookalike_group_ids": (
        json.dumps({**GOOD_ROLLOUT, "rollout_id": "a", "group_id": "caf\u00e9"})
        + "\n"
        + json.dumps({**GOOD_ROLLOUT, "rollout_id": "b", "group_id": "cafe\u0301"})
    ).encode()
    + b"\n",
    "lookalike_job_ids": (
        json.dumps(
            {
                "id": "caf\u00e9",
                "code": "def add(a, b):\n    return a + b\n",
                "tests": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
                "tests_format": "check",
                "entry_point": "add",
            }
        )
        + "\n"
        + json.dumps(
            {
                "id": "cafe\u0301",
                "code": "def add(a, b):\n    return a + b\n",
                "tests": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
                "tests_format": "check",
                "entry_point": "add",
            }
        )
    ).encode()
    + b"\n",
    "fifo": "fifo",  # a named pipe nobody writes to: must not block the command forever
    "device": "device",  # /dev/zero never ends: refused, not read
}


def _materialise(tmp_path: Path, name: str) -> Path:
    path = tmp_path / "inputs" / f"{name}.jsonl"
    path.parent.mkdir(exist_ok=True)
    content = BAD_FILES[name]
    if content == "dir":
        path.mkdir()
    elif content == "fifo":
        os.mkfifo(path)
    elif content == "device":
        return Path("/dev/zero")
    elif content is not None:
        path.write_bytes(content)  # type: ignore[arg-type]
    return path


def _good(tmp_path: Path) -> dict[str, Path]:
    base = tmp_path / "inputs"
    base.mkdir(exist_ok=True)
    tasks = base / "good_tasks.jsonl"
    tasks.write_text(json.dumps(make_task()) + "\n")
    rollouts = base / "good_rollouts.jsonl"
    rollouts.write_text(json.dumps(GOOD_ROLLOUT) + "\n")
    code = base / "code.py"
    code.write_text("def add(a, b):\n    return a + b\n")
    tests = base / "tests.py"
    tests.write_text(
        "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n        self.assertEqual(add(1, 2), 3)\n"
    )
    return {"tasks": tasks, "rollouts": rollouts, "code": code, "tests": tests}


# Each command template takes {bad} (the bad file), {store} and the good files; "data" cases must exit 1.
FILE_COMMANDS = {
    "run_tasks": [
        "run",
        "--tasks",
        "{bad}",
        "--out",
        "{store}",
        "--steps",
        "1",
        "--group-size",
        "2",
        "--groups-per-step",
        "1",
    ],
    "run_replay": ["run", "--tasks", "{tasks}", "--policy", "replay", "--rollouts", "{bad}", "--out", "{store}"],
    "score_rollouts": ["score", "{bad}", "--tasks", "{tasks}", "--out", "{store}"],
    "score_tasks": ["score", "{rollouts}", "--tasks", "{bad}", "--out", "{store}"],
    "monitor": ["monitor", "{bad}"],
    "doctor": ["doctor", "--tasks", "{bad}"],
    "exec_code": ["exec", "--code", "{bad}", "--tests", "{tests}", "--entry-point", "add"],
    "exec_tests": ["exec", "--code", "{code}", "--tests", "{bad}", "--entry-point", "add"],
    "tasks_validate": ["tasks", "validate", "{bad}"],
    "import_humaneval": ["tasks", "import-humaneval", "{bad}", "--out", "{store}/imported.jsonl"],
    "exec_batch_json": ["exec", "--batch", "{bad}", "--json"],
    "monitor_json": ["monitor", "{bad}", "--json"],
    "report_json": ["report", "{bad}", "--json"],
    "nova_simulate_tasks": [
        "nova",
        "simulate",
        "--rollout-request-arn",
        "q1",
        "--rollout-response-url",
        "q2",
        "--generate-request-url",
        "q3",
        "--generate-response-url",
        "q4",
        "--tasks",
        "{bad}",
        "--timeout",
        "1",
        "--region",
        "us-east-1",
    ],
}

# Files that are valid enough to be processed line by line: the command reports the line and may exit 1,
# or (exec on source files, where any bytes are "code") run them and report a verdict.
USAGE_CASES = {
    "run_workers_zero": ["run", "--tasks", "{tasks}", "--workers", "0", "--out", "{store}"],
    "run_bad_weight": ["run", "--tasks", "{tasks}", "--weight", "correctness", "--out", "{store}"],
    "run_nan_weight": ["run", "--tasks", "{tasks}", "--weight", "correctness=nan", "--out", "{store}"],
    "run_unknown_store": ["run", "--tasks", "{tasks}", "--out", "gs://bucket/x"],
    "run_empty_run_id": ["run", "--tasks", "{tasks}", "--run-id", "", "--out", "{store}"],
    "run_long_run_id": ["run", "--tasks", "{tasks}", "--run-id", "r" * 300, "--out", "{store}"],
    "run_plot_suffix": ["run", "--tasks", "{tasks}", "--plot", "{store}/chart.txt", "--out", "{store}"],
    "run_both_flags": ["run", "--tasks", "{tasks}", "--overwrite", "--resume", "--out", "{store}"],
    "run_bad_threshold": ["run", "--tasks", "{tasks}", "--dead-fraction", "2", "--out", "{store}"],
    "run_bad_range": ["run", "--tasks", "{tasks}", "--range", "x=1", "--out", "{store}"],
    "run_openai_no_url": ["run", "--tasks", "{tasks}", "--policy", "openai", "--out", "{store}"],
    "run_replay_no_file": ["run", "--tasks", "{tasks}", "--policy", "replay", "--out", "{store}"],
    "run_single_turn_reward": ["run", "--tasks", "{tasks}", "--reward", "gsm8k", "--out", "{store}"],
    "score_store_is_file": ["score", "{rollouts}", "--tasks", "{tasks}", "--out", "{tasks}"],
    "monitor_bad_step": ["monitor", "{store}", "--step", "-1"],
    "monitor_bad_range": ["monitor", "{rollouts}", "--range", "nonsense"],
    "exec_missing_flags": ["exec", "--code", "{code}"],
    "exec_bad_format": [
        "exec",
        "--code",
        "{code}",
        "--tests",
        "{tests}",
        "--entry-point",
        "add",
        "--tests-format",
        "pytest",
    ],
    "exec_bad_layer": ["exec", "--code", "{code}", "--tests", "{tests}", "--entry-point", "add", "--disable", "x"],
    "unknown_command": ["frobnicate"],
    # round two (independent check): huge numbers and output paths that cannot be written, refused up front
    "run_huge_steps": ["run", "--tasks", "{tasks}", "--steps", "9" * 20, "--out", "{store}"],
    "run_huge_group_size": ["run", "--tasks", "{tasks}", "--group-size", "9" * 20, "--out", "{store}"],
    "run_huge_groups_per_step": ["run", "--tasks", "{tasks}", "--groups-per-step", "9" * 20, "--out", "{store}"],
    "run_huge_max_turns": ["run", "--tasks", "{tasks}", "--max-turns", "101", "--out", "{store}"],
    "run_plot_under_a_file": ["run", "--tasks", "{tasks}", "--plot", "{tasks}/chart.png", "--out", "{store}"],
    "run_spill_is_a_dir": ["run", "--tasks", "{tasks}", "--spill", "{inputs}", "--out", "{store}"],
    "score_spill_is_a_dir": ["score", "{rollouts}", "--tasks", "{tasks}", "--spill", "{inputs}", "--out", "{store}"],
    "report_out_is_a_dir": ["report", "{rollouts}", "--out", "{inputs}"],
    "report_out_under_a_file": ["report", "{rollouts}", "--out", "{tasks}/report.html"],
    "import_out_is_a_dir": ["tasks", "import-humaneval", "--out", "{inputs}"],
    "import_out_under_a_file": ["tasks", "import-humaneval", "--out", "{tasks}/x.jsonl"],
    "exec_nan_timeout": ["exec", "--code", "{code}", "--tests", "{tests}", "--entry-point", "add", "--timeout", "nan"],
    "monitor_nan_epsilon": ["monitor", "{rollouts}", "--epsilon", "nan"],
    "show_json_no_store": ["show", "{inputs}/nowhere", "--run-id", "x", "--rollout", "r", "--json"],
    "run_nul_run_id": ["run", "--tasks", "{tasks}", "--run-id", "a\x00b", "--out", "{store}"],
    "score_esc_run_id": ["score", "{rollouts}", "--tasks", "{tasks}", "--run-id", "a\x1b[2J", "--out", "{store}"],
    "exec_keyword_entry_point": ["exec", "--code", "{code}", "--tests", "{tests}", "--entry-point", "class"],
    # round four: a knob naming no component of the reward (a typo) would silently do nothing
    "run_ignore_typo": ["run", "--tasks", "{tasks}", "--ignore", "loop_penalt", "--out", "{store}"],
    "run_range_typo": ["run", "--tasks", "{tasks}", "--range", "correctnes=0:1", "--out", "{store}"],
    # an empty --out (an unset `$STORE`) once wrote into the working directory, saying "/runs/<run>/"
    "run_empty_out": ["run", "--tasks", "{tasks}", "--out", ""],
    "score_empty_out": ["score", "{rollouts}", "--tasks", "{tasks}", "--out", ""],
    "report_parquet_is_a_file": ["report", "{rollouts}", "--parquet", "{tasks}"],
    "report_parquet_under_a_file": ["report", "{rollouts}", "--parquet", "{tasks}/pq"],
    "run_negative_collapse_step": ["run", "--tasks", "{tasks}", "--collapse-from-step", "-5", "--out", "{store}"],
    "run_huge_endpoint_retries": [
        "run",
        "--tasks",
        "{tasks}",
        "--policy",
        "openai",
        "--base-url",
        "http://localhost:9",
        "--model",
        "m",
        "--endpoint-retries",
        "1000000000",
        "--out",
        "{store}",
    ],
    "run_huge_endpoint_timeout": [
        "run",
        "--tasks",
        "{tasks}",
        "--policy",
        "openai",
        "--base-url",
        "http://localhost:9",
        "--model",
        "m",
        "--endpoint-timeout",
        "1e308",
        "--out",
        "{store}",
    ],
    "run_base_url_not_a_url": [
        "run",
        "--tasks",
        "{tasks}",
        "--policy",
        "openai",
        "--base-url",
        "localhost:8000/v1",
        "--model",
        "m",
        "--out",
        "{store}",
    ],
    "score_device_run_id": ["score", "{rollouts}", "--tasks", "{tasks}", "--run-id", "NUL", "--out", "{store}"],
    "run_trailing_dot_run_id": ["run", "--tasks", "{tasks}", "--run-id", "exp.", "--out", "{store}"],
    "run_sim_base_url_not_a_url": [
        "run",
        "--tasks",
        "{tasks}",
        "--simulator",
        "openai",
        "--sim-base-url",
        "http://[::1",
        "--sim-model",
        "m",
        "--out",
        "{store}",
    ],
}


def _snapshot(root: Path, store: Path) -> dict[str, int]:
    """Every file under ``root`` except the store, with its size: what a command must not change."""
    found = {}
    for dirpath, _, filenames in os.walk(root):
        if Path(dirpath) == store or store in Path(dirpath).parents:
            continue
        for name in filenames:
            path = Path(dirpath) / name
            found[str(path.relative_to(root))] = path.stat().st_size
    return found


@pytest.fixture
def sandbox_dir(tmp_path, monkeypatch):
    """Run every command from an empty working directory, so a stray write (a spill file, a chart) shows."""
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    return tmp_path


def _invoke(args: list[str]):
    return CliRunner().invoke(app, args, catch_exceptions=False)


def _refuse_constant(name):
    raise AssertionError(f"non-finite number {name} in --json output")


def _check_json_lines(stdout: str) -> None:
    """--json output: ASCII only, and every line one complete JSON value with no NaN or Infinity."""
    assert stdout.isascii(), "non-ASCII characters in --json output"
    assert stdout.endswith("\n")
    for line in stdout.splitlines():
        json.loads(line, parse_constant=_refuse_constant)


def _check(result, tmp_path, store, before, allowed_codes, args=()):
    output = result.output
    assert "Traceback" not in output, output
    assert "rewardpipe bug" not in output, output
    assert result.exit_code in allowed_codes, (result.exit_code, output)
    assert _snapshot(tmp_path, store) == before, "a command wrote outside the store"
    if "--json" in args and result.stdout.strip():
        _check_json_lines(result.stdout)
    if result.exit_code != 0 and not result.stdout.startswith(("failed", "error")):  # exec: a verdict
        # one clear line for people, on stderr
        assert result.stderr.strip(), output
        assert "\x1b" not in result.stderr, "hostile control characters reached the terminal"


@pytest.mark.parametrize("bad", sorted(BAD_FILES))
@pytest.mark.parametrize("command", sorted(FILE_COMMANDS))
def test_bad_input_files(sandbox_dir, command, bad):
    tmp_path = sandbox_dir
    good = _good(tmp_path)
    bad_path = _materialise(tmp_path, bad)
    store = tmp_path / "store"
    args = [a.format(bad=bad_path, store=store, **good) for a in FILE_COMMANDS[command]]
    before = _snapshot(tmp_path, store)
    result = _invoke(args)
    # exec runs any readable text as code (a verdict, exit 0 or 1); every other command refuses bad data (1)
    # exec on source files runs any readable text as code (a verdict, exit 0 or 1); every other command,
    # exec --batch included, refuses bad data (1)
    allowed = (0, 1, 2) if command in ("exec_code", "exec_tests") else (1,)
    _check(result, tmp_path, store, before, allowed, args)


@pytest.mark.parametrize("case", sorted(USAGE_CASES))
def test_bad_options(sandbox_dir, case):
    tmp_path = sandbox_dir
    good = _good(tmp_path)
    store = tmp_path / "store"
    args = [a.format(store=store, inputs=good["tasks"].parent, **good) for a in USAGE_CASES[case]]
    before = _snapshot(tmp_path, store)
    result = _invoke(args)
    _check(result, tmp_path, store, before, (1, 2), args)
    assert not store.exists() or not any(store.rglob("*.json")), "a rejected command wrote records"


def test_the_bundled_tasks_are_still_fine(sandbox_dir):
    # guard for the matrix: the "good" side of each command really is good
    result = _invoke(["tasks", "validate", str(BUNDLED_TASKS)])
    assert result.exit_code == 0, result.output


def test_nova_simulate_without_aws_setup_is_one_error_line(sandbox_dir, monkeypatch):
    for name in [key for key in os.environ if key.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(sandbox_dir / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(sandbox_dir / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    urls = [
        "--rollout-request-arn",
        "q1",
        "--rollout-response-url",
        "q2",
        "--generate-request-url",
        "q3",
        "--generate-response-url",
        "q4",
        "--timeout",
        "1",
    ]
    for region in ([], ["--region", "us-east-1"]):  # no region at all; a region but no credentials
        result = _invoke(["nova", "simulate", *urls, *region])
        assert result.exit_code == 1, result.output
        assert "rewardpipe bug" not in result.output and "Traceback" not in result.output
        assert result.stderr.startswith("error: AWS:"), result.stderr
