"""The bundled task set (rewardpipe/data/tasks.jsonl) keeps the promise the environment depends on:
every reference solution passes its hidden tests, and the guess a programmer writes from the prompt
alone fails them, so asking clarifying questions is the only reliable way to full correctness."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

from rewardpipe.execution import ExecutionJob, ExecutionStatus, execute_batch
from rewardpipe.models import Task, load_tasks

REPO_ROOT = Path(__file__).resolve().parent.parent
TASKS_PATH = REPO_ROOT / "rewardpipe" / "data" / "tasks.jsonl"
NAIVE_GUESSES_PATH = Path(__file__).resolve().parent / "fixtures" / "naive_guesses.py"

MIN_TASKS = 40
TASK_ID_PATTERN = re.compile(r"^abc-\d{3}-[a-z0-9]+(-[a-z0-9]+)*$")


def _load_naive_guesses() -> dict[str, str]:
    spec = importlib.util.spec_from_file_location("naive_guesses_fixture", NAIVE_GUESSES_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.NAIVE_GUESSES


TASKS: list[Task] = load_tasks(TASKS_PATH)
NAIVE_GUESSES = _load_naive_guesses()


def _job(task: Task, code: str, label: str) -> ExecutionJob:
    return ExecutionJob(
        id=f"{task.task_id}:{label}",
        code=code,
        tests=task.tests,
        entry_point=task.entry_point,
        tests_format=task.tests_format,
        timeout_s=task.timeout_s or 10.0,
    )


@pytest.fixture(scope="module")
def verdicts() -> dict[str, dict[str, object]]:
    """Run every reference and every naive guess once, in one batch, keyed by task id then label."""
    jobs = [_job(task, task.reference_solution, "reference") for task in TASKS]
    jobs += [_job(task, NAIVE_GUESSES[task.task_id], "naive") for task in TASKS if task.task_id in NAIVE_GUESSES]
    results: dict[str, dict[str, object]] = {}
    for job, result in zip(jobs, execute_batch(jobs, workers=2)):
        task_id, label = job.id.rsplit(":", 1)
        results.setdefault(task_id, {})[label] = result
    return results


def test_task_file_parses_with_load_tasks_and_has_enough_tasks():
    assert len(TASKS) >= MIN_TASKS, f"only {len(TASKS)} tasks in {TASKS_PATH}"


def test_task_ids_are_unique_and_well_formed():
    ids = [task.task_id for task in TASKS]
    assert len(ids) == len(set(ids))
    bad = [task_id for task_id in ids if not TASK_ID_PATTERN.match(task_id)]
    assert not bad, f"task ids not of the form abc-NNN-words: {bad}"


def test_prompts_are_one_or_two_sentences():
    for task in TASKS:
        sentences = [s for s in re.split(r"(?<=[.?!])\s+", task.prompt.strip()) if s]
        assert 1 <= len(sentences) <= 2, f"{task.task_id}: prompt has {len(sentences)} sentences"
        assert task.prompt.strip()[-1] in ".?!", f"{task.task_id}: prompt does not end a sentence"


def test_prompts_name_the_function_the_hidden_tests_call():
    # The model only sees the prompt, so it must learn the entry point's name there, not by guessing.
    for task in TASKS:
        assert f"`{task.entry_point}(" in task.prompt, f"{task.task_id}: prompt does not name {task.entry_point}"


def test_every_spec_item_is_a_full_sentence():
    for task in TASKS:
        assert 2 <= len(task.spec) <= 5, f"{task.task_id}: {len(task.spec)} spec items, expected 2 to 5"
        for item in task.spec:
            assert item[0].isupper(), f"{task.task_id}: spec item does not start a sentence: {item!r}"
            assert item.endswith("."), f"{task.task_id}: spec item does not end with a full stop: {item!r}"
            assert len(item.split()) >= 5, f"{task.task_id}: spec item too short to be a sentence: {item!r}"
            assert "assert" not in item and "def " not in item, f"{task.task_id}: spec item contains test code"


def test_spec_items_are_not_already_in_the_prompt():
    for task in TASKS:
        assert len(set(task.spec)) == len(task.spec), f"{task.task_id}: duplicate spec items"
        for item in task.spec:
            assert item not in task.prompt, f"{task.task_id}: a hidden detail is given away by the prompt"


# A natural clarifying question per task and a phrase of the hidden detail it should reveal.
NATURAL_QUESTIONS = [
    ("abc-001-format-duration", "What output format do you want for the duration?", "clock-style format"),
    ("abc-002-slugify-title", "Is there a maximum length for the slug?", "maximum length of 30"),
    ("abc-003-split-bill", "What happens when the bill doesn't divide evenly?", "leftover cents"),
    ("abc-005-top-words", "How should ties be broken?", "broken alphabetically"),
    ("abc-006-add-business-days", "Are there holidays to skip?", "Christmas Day"),
    ("abc-010-lower-median", "For an even number of values, should I average the two middle ones?", "lower of the two"),
    ("abc-013-password-strength", "What is the minimum length?", "12 characters"),
    ("abc-015-parse-csv-line", "What delimiter does the file use?", "semicolon"),
    ("abc-016-human-file-size", "Should I use 1000 or 1024 for units?", "1024 bytes"),
    ("abc-021-insert-position-descending", "Is the list sorted ascending or descending?", "descending order"),
    ("abc-023-rotate-grid", "Clockwise or counterclockwise?", "counterclockwise"),
    ("abc-029-compare-versions", "How should pre-release suffixes like beta be handled?", "1.2.0-beta"),
    ("abc-033-count-vowels", "Does y count as a vowel?", "letter y"),
    ("abc-039-most-frequent-value", "What if there is a tie?", "smallest of them"),
    ("abc-041-headline-title-case", "What about acronyms?", "NASA"),
    ("abc-044-age-on-date", "What about people born on February 29?", "February 28"),
]


def test_natural_questions_reveal_the_detail_they_ask_about():
    from rewardpipe.simulator import RuleBasedSimulator

    by_id = {task.task_id: task for task in TASKS}
    for task_id, question, phrase in NATURAL_QUESTIONS:
        spec = by_id[task_id].spec
        index, restated = RuleBasedSimulator.best_match(question, spec, set())
        assert index is not None and not restated, f"{task_id}: {question!r} reveals nothing"
        assert phrase in spec[index], f"{task_id}: {question!r} revealed {spec[index]!r}"


def _calls(tree: ast.AST) -> set[str]:
    return {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}


def test_every_test_suite_calls_the_entry_point():
    for task in TASKS:
        tree = ast.parse(task.tests)
        if task.tests_format == "unittest":
            classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
            assert len(classes) == 1, f"{task.task_id}: expected one TestCase class, found {len(classes)}"
            methods = [n for n in classes[0].body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
            assert 3 <= len(methods) <= 8, f"{task.task_id}: {len(methods)} test methods, expected 3 to 8"
            for method in methods:
                assert task.entry_point in _calls(method), (
                    f"{task.task_id}: {method.name} never calls {task.entry_point}"
                )
        else:
            checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
            assert len(checks) == 1, f"{task.task_id}: a 'check' task must define check(candidate)"
            assert "candidate" in _calls(checks[0]), f"{task.task_id}: check() never calls candidate"


def test_reference_solutions_define_the_entry_point():
    for task in TASKS:
        tree = ast.parse(task.reference_solution)
        defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert task.entry_point in defined, f"{task.task_id}: reference does not define {task.entry_point}"


def test_some_tasks_use_the_check_format():
    assert sum(task.tests_format == "check" for task in TASKS) >= 3


def test_every_task_has_a_naive_guess_and_no_stray_guesses():
    ids = {task.task_id for task in TASKS}
    assert ids == set(NAIVE_GUESSES), {
        "tasks without a naive guess": sorted(ids - set(NAIVE_GUESSES)),
        "guesses without a task": sorted(set(NAIVE_GUESSES) - ids),
    }


# Both verdict tests share one batch run; the group keeps them on one xdist worker (`--dist loadgroup`).
@pytest.mark.xdist_group("bundled_task_verdicts")
def test_every_reference_solution_passes_all_its_tests(verdicts):
    failures = {
        task_id: f"{result.status.value} {result.passed}/{result.total} {result.reason} {result.stderr[-300:]}"
        for task_id, by_label in verdicts.items()
        if (result := by_label["reference"]).status is not ExecutionStatus.PASSED
    }
    assert not failures, failures


@pytest.mark.xdist_group("bundled_task_verdicts")
def test_every_naive_guess_fails_at_least_one_test(verdicts):
    infrastructure_errors = {
        task_id: by_label["naive"].reason
        for task_id, by_label in verdicts.items()
        if by_label["naive"].status is ExecutionStatus.ERROR
    }
    assert not infrastructure_errors, infrastructure_errors
    passing = [task_id for task_id, by_label in verdicts.items() if by_label["naive"].status is ExecutionStatus.PASSED]
    assert not passing, f"naive guesses pass every hidden test, so asking is pointless for: {passing}"
