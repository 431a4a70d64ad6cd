"""One rule per input field, applied wherever records are created.

* Ids (task, group, rollout, job, run, Nova sample) may not hold control, format, surrogate or line-separator
  characters: such an id prints differently from what it is. Refused at the input naming file:line:field.
* A task's spec has at least one non-blank detail: with none, asking can never be paid (a dead component)
  and every episode is charged for guessing. Refused the same way by every command that reads tasks.
* ``exec --batch``: a line that is not a valid job is bad data (exit 1), named on stderr, even when every
  line is bad; an empty batch is an error.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.cli.conftest import make_task, write_jsonl

# Characters of every forbidden class: C0/C1 controls, tab/newline, ESC, bidi override, zero-width joiner,
# BOM inside an id, line and paragraph separators, a lone surrogate.
FORBIDDEN = {
    "nul": "\x00",
    "esc": "\x1b",
    "tab": "\t",
    "newline": "\n",
    "cr": "\r",
    "del": "\x7f",
    "c1": "\x85",
    "rlo": "\u202e",
    "zwj": "\u200d",
    "bom": "\ufeff",
    "line_sep": "\u2028",
    "para_sep": "\u2029",
    "surrogate": "\ud800",
}
ROLLOUT = {
    "rollout_id": "r1",
    "group_id": "g1",
    "task_id": "add",
    "step": 0,
    "messages": [
        {"role": "user", "content": "Write add."},
        {"role": "assistant", "content": "```python\ndef add(a, b):\n    return a + b\n```"},
    ],
}


def _line(obj: dict) -> str:
    return json.dumps(obj)  # ASCII escapes: the JSON is valid, the decoded id holds the character


def _files_under(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()] if path.exists() else []


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("char", sorted(FORBIDDEN))
@pytest.mark.parametrize("field", ["rollout_id", "group_id", "task_id"])
def test_score_refuses_a_rollout_id_with_a_forbidden_character(cli, here, field, char):
    tasks = write_jsonl(here / "tasks.jsonl", [make_task()])
    bad = {**ROLLOUT, field: f"x{FORBIDDEN[char]}y"}
    rollouts = write_jsonl(here / "rollouts.jsonl", [_line(bad)])
    store = here / "store"
    result = cli("score", rollouts, "--tasks", tasks, "--out", store, "--json")
    assert result.exit_code == 1, result.output
    assert f"{rollouts}:1" in result.stderr and f"field '{field}'" in result.stderr, result.stderr
    assert "control, format or line-separator" in result.stderr or "unicode" in result.stderr
    assert not list(store.rglob("records/**/*.json")), "a refused rollout was stored"
    assert result.stderr.isprintable() or "\x1b" not in result.stderr


@pytest.mark.parametrize("char", sorted(FORBIDDEN))
def test_every_task_reader_refuses_a_task_id_with_a_forbidden_character(cli, here, char):
    tasks = write_jsonl(here / "tasks.jsonl", [make_task(), _line(make_task(f"add{FORBIDDEN[char]}2"))])
    store = here / "store"
    rollouts = write_jsonl(here / "rollouts.jsonl", [ROLLOUT])
    for args in (
        ["tasks", "validate", tasks],
        ["doctor", "--tasks", tasks],
        ["run", "--tasks", tasks, "--out", store, "--steps", "1", "-k", "2", "--groups-per-step", "1"],
        ["score", rollouts, "--tasks", tasks, "--out", store],
    ):
        result = cli(*args)
        assert result.exit_code == 1, (args, result.output)
        assert f"{tasks}:2" in result.stderr and "field 'task_id'" in result.stderr, (args, result.stderr)
        assert "\x1b" not in result.output
    assert _files_under(store) == [], "run/score wrote something for an invalid task file"


@pytest.mark.parametrize("char", sorted(FORBIDDEN))
def test_replayed_rollouts_with_a_forbidden_id_character_write_nothing(cli, here, char):
    tasks = write_jsonl(here / "tasks.jsonl", [make_task()])
    rollouts = write_jsonl(here / "rollouts.jsonl", [ROLLOUT, _line({**ROLLOUT, "rollout_id": f"r{FORBIDDEN[char]}"})])
    store = here / "store"
    result = cli("run", "--tasks", tasks, "--policy", "replay", "--rollouts", rollouts, "--out", store)
    assert result.exit_code == 1, result.output
    assert f"{rollouts}:2" in result.stderr and "field 'rollout_id'" in result.stderr
    assert _files_under(store) == []


@pytest.mark.parametrize("char", sorted(set(FORBIDDEN) - {"surrogate"}))  # argv cannot carry a lone surrogate
@pytest.mark.parametrize("command", ["run", "score"])
def test_a_run_id_with_a_forbidden_character_is_a_usage_error(cli, here, command, char):
    tasks = write_jsonl(here / "tasks.jsonl", [make_task()])
    rollouts = write_jsonl(here / "rollouts.jsonl", [ROLLOUT])
    store = here / "store"
    head = ["run", "--tasks", tasks] if command == "run" else ["score", rollouts, "--tasks", tasks]
    result = cli(*head, "--out", store, "--run-id", f"run{FORBIDDEN[char]}1")
    assert result.exit_code == 2, result.output
    assert "--run-id must not contain control" in result.stderr
    assert _files_under(store) == []
    assert [p.name for p in here.iterdir() if p.name.startswith("rewardpipe-unstored")] == []


@pytest.mark.parametrize("char", sorted(FORBIDDEN))
def test_the_rule_lives_in_the_shared_models(char):
    """The Lambda, Nova and TRL entry points build the same models, so they get the same rule."""
    from pydantic import ValidationError

    from rewardpipe.aws.rollout import RolloutInput
    from rewardpipe.execution.result import ExecutionJob
    from rewardpipe.integrations.nova.protocol import RolloutRequest
    from rewardpipe.models import Rollout, Task

    bad = f"id{FORBIDDEN[char]}"
    cases = [
        (Task, {**make_task(), "task_id": bad}),
        (Rollout, {**ROLLOUT, "group_id": bad}),
        (ExecutionJob, {"id": bad, "code": "", "tests": "t", "entry_point": "f"}),
        (RolloutRequest, {"sample_id": bad}),
        (RolloutInput, {"run": "run", "group": bad, "rollout": "r", "task": make_task()}),
        (RolloutInput, {"run": "run", "group": "g", "rollout": bad, "task": make_task()}),
        (RolloutInput, {"run": bad, "group": "g", "rollout": "r", "task": make_task()}),
    ]
    for model, raw in cases:
        with pytest.raises(ValidationError):
            model.model_validate(raw)
    # printable ids of any script still pass, spaces included
    Task.model_validate({**make_task(), "task_id": "añadir – 加法 #1 [x]"})


@pytest.mark.parametrize(
    "spec", [[], [""], ["   "], ["A real detail.", "\n\t"]], ids=["empty", "blank", "spaces", "one_blank"]
)
def test_every_task_reader_refuses_an_empty_spec(cli, here, spec):
    tasks = write_jsonl(here / "tasks.jsonl", [make_task(), make_task("no-spec", spec=spec)])
    rollouts = write_jsonl(here / "rollouts.jsonl", [ROLLOUT])
    store = here / "store"
    for args in (
        ["tasks", "validate", tasks],
        ["doctor", "--tasks", tasks, "--json"],
        ["run", "--tasks", tasks, "--out", store, "--steps", "1", "-k", "2", "--groups-per-step", "1"],
        ["run", "--tasks", tasks, "--policy", "replay", "--rollouts", rollouts, "--out", store],
        ["score", rollouts, "--tasks", tasks, "--out", store],
    ):
        result = cli(*args)
        assert result.exit_code == 1, (args, result.output)
        assert f"{tasks}:2 (no-spec): field 'spec" in result.stderr, (args, result.stderr)
        assert result.stdout == "", args  # no report, no "N tasks OK"
    assert _files_under(store) == [], "an invalid task file must not start a run"


def test_a_humaneval_problem_with_nothing_to_ask_is_named_on_import(cli, here):
    problem = {
        "task_id": "HumanEval/x",
        "entry_point": "f",
        "prompt": 'def f(x):\n    """Return x."""\n',
        "canonical_solution": "    return x\n",
        "test": "def check(candidate):\n    assert candidate(1) is not None\n",
    }  # no example either
    source = write_jsonl(here / "he.jsonl", [problem])
    out = here / "tasks.jsonl"
    result = cli("tasks", "import-humaneval", source, "--out", out)
    assert result.exit_code == 1, result.output
    assert f"{source}:1 (HumanEval/x)" in result.stderr and "spec" in result.stderr
    assert not out.exists()


GOOD_JOB = {
    "id": "ok",
    "code": "def add(a, b):\n    return a + b\n",
    "entry_point": "add",
    "tests": "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n"
    "        self.assertEqual(add(1, 2), 3)\n",
}


@pytest.mark.parametrize("as_json", [False, True])
def test_exec_batch_of_only_bad_lines_is_bad_data_and_names_each_line(cli, here, as_json):
    batch = here / "jobs.jsonl"
    batch.write_bytes(
        b"{nope\n[1]\n"
        + _line({**GOOD_JOB, "id": "a\x00b"}).encode()
        + b"\n\xff\n"
        + _line({"id": "x"}).encode()
        + b"\n"
    )
    result = cli("exec", "--batch", batch, *(["--json"] if as_json else []))
    assert result.exit_code == 1, result.output
    for number in range(1, 6):
        assert f"{batch}:{number}:" in result.stderr, result.stderr
    if as_json:
        rows = [json.loads(line) for line in result.stdout.splitlines()]
        assert [row["status"] for row in rows] == ["error"] * 5
        assert result.stdout.isascii()


def test_exec_batch_with_one_bad_line_still_runs_the_rest_and_exits_1(cli, here):
    batch = write_jsonl(here / "jobs.jsonl", [GOOD_JOB, "{nope"])
    result = cli("exec", "--batch", batch, "--json")
    assert result.exit_code == 1
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["id"], r["status"]) for r in rows] == [("ok", "passed"), ("", "error")]


def test_exec_batch_of_good_lines_exits_0_whatever_the_verdicts(cli, here):
    wrong = {**GOOD_JOB, "id": "wrong", "code": "def add(a, b):\n    return 0\n"}
    batch = write_jsonl(here / "jobs.jsonl", [GOOD_JOB, wrong])
    result = cli("exec", "--batch", batch)
    assert result.exit_code == 0, result.output  # verdicts are data; only bad lines are bad input
    assert result.stderr == ""


@pytest.mark.parametrize("content", [b"", b"\n  \n", b"\xef\xbb\xbf\n"], ids=["empty", "blank", "bom_only"])
def test_exec_batch_with_no_jobs_is_an_error(cli, here, content):
    batch = here / "jobs.jsonl"
    batch.write_bytes(content)
    result = cli("exec", "--batch", batch, "--json")
    assert result.exit_code == 1 and "contains no jobs" in result.stderr
    assert result.stdout == ""


def test_exec_batch_accepts_a_bom_and_crlf(cli, here):
    batch = here / "jobs.jsonl"
    batch.write_bytes(
        b"\xef\xbb\xbf" + _line(GOOD_JOB).encode() + b"\r\n" + _line({**GOOD_JOB, "id": "two"}).encode() + b"\r\n"
    )
    result = cli("exec", "--batch", batch, "--json")
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["id"] for line in result.stdout.splitlines()] == ["ok", "two"]
    assert os.path.getsize(batch) > 0


@pytest.mark.parametrize("name", ["a b", "add; import os", "class", "1add", "add\x1b[2J", "__import__('os')"])
def test_exec_refuses_an_entry_point_that_cannot_name_a_function(cli, here, name):
    code = here / "code.py"
    code.write_text(GOOD_JOB["code"])
    tests = here / "tests.py"
    tests.write_text(GOOD_JOB["tests"])
    result = cli("exec", "--code", code, "--tests", tests, "--entry-point", name)
    assert result.exit_code == 2, result.output  # a usage error, not a verdict
    assert result.stdout == "" and "entry_point: must be a Python function name" in result.stderr
    batch = write_jsonl(here / "jobs.jsonl", [GOOD_JOB, {**GOOD_JOB, "id": "bad", "entry_point": name}])
    result = cli("exec", "--batch", batch, "--json")
    assert result.exit_code == 1
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["id"], r["status"]) for r in rows] == [("ok", "passed"), ("bad", "error")]
    assert f"{batch}:2: entry_point" in result.stderr


def test_exec_batch_refuses_a_repeated_job_id_naming_the_first_line(cli, here):
    wrong = {**GOOD_JOB, "code": "def add(a, b):\n    return 0\n"}
    batch = write_jsonl(here / "jobs.jsonl", [GOOD_JOB, {**GOOD_JOB, "id": "other"}, wrong])
    result = cli("exec", "--batch", batch, "--json")
    assert result.exit_code == 1
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["id"], r["status"]) for r in rows] == [("ok", "passed"), ("other", "passed"), ("ok", "error")]
    assert rows[2]["reason"] == f"{batch}:3: field 'id': duplicate id (first on line 1)"


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1" + "0" * 400])
def test_a_non_finite_or_huge_timeout_is_refused_naming_the_field(cli, here, value):
    task = json.dumps(make_task())[:-1] + f', "timeout_s": {value}}}'
    tasks = write_jsonl(here / "tasks.jsonl", [task])
    result = cli("tasks", "validate", tasks)
    assert result.exit_code == 1 and f"{tasks}:1 (add): field 'timeout_s'" in result.stderr, result.stderr
    job = json.dumps(GOOD_JOB)[:-1] + f', "timeout_s": {value}}}'
    batch = write_jsonl(here / "jobs.jsonl", [job])
    result = cli("exec", "--batch", batch, "--json")
    assert result.exit_code == 1 and f"{batch}:1: timeout_s" in result.stderr
    assert "NaN" not in result.stdout and "Infinity" not in result.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["report", "{store}"],  # nowhere to put the report
        ["report", "{store}", "{store}", "{store}", "--json"],  # three paths
        ["report", "{store}", "--run-id", "a", "--run-id", "b", "--run-id", "c", "--json"],
        ["show", "{store}", "--run-id", "a"],  # no --rollout nor --key
    ],
    ids=["report_no_output", "report_three_paths", "report_three_run_ids", "show_no_rollout"],
)
def test_report_and_show_usage_mistakes_exit_2(cli, here, args):
    store = here / "store"
    store.mkdir()
    result = cli(*[a.format(store=store) for a in args])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and result.stdout == ""


def test_report_with_only_a_parquet_export_is_enough(cli, here):
    pytest.importorskip("pyarrow")
    tasks = write_jsonl(here / "tasks.jsonl", [make_task()])
    rollouts = write_jsonl(here / "rollouts.jsonl", [ROLLOUT, {**ROLLOUT, "rollout_id": "r2"}])
    store = here / "store"
    assert cli("score", rollouts, "--tasks", tasks, "--out", store, "--run-id", "p").exit_code == 0
    result = cli("report", store, "--run-id", "p", "--parquet", here / "pq")
    assert result.exit_code == 0, result.output
    assert list((here / "pq").glob("*.parquet"))


def test_a_group_holds_one_task_per_step(cli, here):
    tasks = write_jsonl(here / "tasks.jsonl", [make_task(), make_task("other")])
    rows = [
        ROLLOUT,
        {**ROLLOUT, "rollout_id": "r2", "task_id": "other"},  # same group, another task: refused
        {**ROLLOUT, "rollout_id": "r2"},  # the corrected line is accepted
        {**ROLLOUT, "rollout_id": "r3", "task_id": "other", "step": 1},
    ]  # the group id at another step: fine
    rollouts = write_jsonl(here / "rollouts.jsonl", rows)
    store = here / "store"
    result = cli("score", rollouts, "--tasks", tasks, "--out", store, "--json")
    assert result.exit_code == 1
    assert [json.loads(line)["rollout_id"] for line in result.stdout.splitlines()] == ["r1", "r2", "r3"]
    assert (
        f"{rollouts}:2 (r2): field 'task_id': group 'g1' of step 0 is task 'add' (line 1), not 'other'" in result.stderr
    )
    replay = cli("run", "--tasks", tasks, "--policy", "replay", "--rollouts", rollouts, "--out", here / "replayed")
    assert replay.exit_code == 1 and f"{rollouts}:2 (r2): field 'task_id'" in replay.stderr
    assert not (here / "replayed").exists()


@pytest.mark.parametrize("name", ["he[/].jsonl", "he[red]x.jsonl", "he\x1b[2J.jsonl"])
def test_import_humaneval_prints_any_output_path_as_itself(cli, here, name):
    out = here / "out" / name
    result = cli("tasks", "import-humaneval", "--out", out)
    assert result.exit_code == 0, result.output
    assert out.is_file()
    shown = name.replace("\x1b", "\\x1b")
    assert f"into {here / 'out' / shown} (" in result.stdout and "\x1b" not in result.stdout


@pytest.mark.parametrize("which", ["code", "tests", "both"])
def test_exec_reads_source_files_saved_with_a_bom_and_crlf(cli, here, which):
    code, tests = here / "code.py", here / "tests.py"
    for path, text in ((code, GOOD_JOB["code"]), (tests, GOOD_JOB["tests"])):
        bom = which in (path.stem, "both")
        path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.replace("\n", "\r\n").encode())
    result = cli("exec", "--code", code, "--tests", tests, "--entry-point", "add")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("passed 1/1")
