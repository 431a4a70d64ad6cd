"""`rewardpipe exec`: run model code against hidden tests in the sandbox, one job or a JSONL batch."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import NoReturn, Optional

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from rewardpipe.cli.app import USAGE_ERROR, app, fail, printable
from rewardpipe.cli.common import cap_workers
from rewardpipe.execution.result import ExecutionJob, ExecutionResult, ExecutionStatus

console = Console(stderr=True, soft_wrap=True)
out = Console(soft_wrap=True)


def _fail(message: str, code: int = USAGE_ERROR) -> NoReturn:
    fail(message, code)


def _read_text(path: Path, what: str) -> str:
    """A whole input file (bad data, exit 1, if it cannot be read as UTF-8 text)."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        fail(f"{what} file not found: {path}")
    except UnicodeDecodeError as exc:
        fail(f"{what} file {path} is not UTF-8 text ({exc.reason} at byte {exc.start})")
    except OSError as exc:
        fail(f"cannot read {what} file {path}: {exc.strerror}")


def _result_json(result: ExecutionResult) -> str:
    return json.dumps(result.model_dump(mode="json"), ensure_ascii=False)


def _describe_validation(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(item) for item in error["loc"]) or "job"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


def parse_job_line(line: str, number: int) -> tuple[ExecutionJob | None, str | None, object]:
    """(job, None, id) for a valid line, (None, problem, id-if-known) for a malformed one."""
    try:
        raw = json.loads(line)
    except ValueError as exc:
        return None, f"line {number}: not valid JSON ({exc})", None
    if not isinstance(raw, dict):
        return None, f"line {number}: a job must be a JSON object, got {type(raw).__name__}", None
    job_id = raw.get("id")
    if not isinstance(job_id, str) or not job_id:
        return None, f"line {number}: missing or empty 'id' (a non-empty string is required)", job_id
    try:
        return ExecutionJob.model_validate(raw), None, job_id
    except ValidationError as exc:
        return None, f"line {number}: {_describe_validation(exc)}", job_id


def _make_executor(disable: str, workers: Optional[int]):
    from rewardpipe.execution.sandbox import SandboxConfigError, make_executor

    layers = frozenset(part.strip() for part in disable.split(",") if part.strip())
    try:
        overrides = {"workers": workers} if workers else {}
        if layers:
            overrides["disable"] = layers
        return make_executor(**overrides)
    except SandboxConfigError as exc:
        _fail(str(exc))


def _print_human(result: ExecutionResult) -> None:
    """A result is data: it goes to stdout (the model's text in ``reason`` is shown escaped, never as markup)."""
    colour = {"passed": "green", "failed": "red", "timeout": "yellow", "error": "magenta"}[result.status.value]
    label = f"{escape(printable(result.id))}: " if result.id else ""
    out.print(
        f"{label}[bold {colour}]{result.status.value}[/] {result.passed}/{result.total} "
        f"({result.duration_ms:.1f} ms, mode {result.mode}) {escape(printable(result.reason or ''))}",
        markup=True, highlight=False,
    )


@app.command("exec")
def exec_command(
    code: Optional[Path] = typer.Option(None, "--code", help="File with the model's code."),
    tests: Optional[Path] = typer.Option(None, "--tests", help="File with the hidden tests."),
    entry_point: Optional[str] = typer.Option(None, "--entry-point", help="Name the tests call."),
    tests_format: str = typer.Option("unittest", "--tests-format", help="unittest | check (HumanEval)."),
    timeout: float = typer.Option(10.0, "--timeout", help="Wall-clock seconds per execution."),
    trust_mode: str = typer.Option("split", "--trust-mode", help="split (default) | inprocess (screened fallback)."),
    batch: Optional[Path] = typer.Option(None, "--batch", help="JSONL file of jobs (id, code, tests, entry_point, ...)."),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Parallel workers (default: one per core)."),
    disable: str = typer.Option("", "--disable", help="Comma-separated isolation layers to turn off (testing only)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (one object, or one line per batch job)."),
    isolation: bool = typer.Option(False, "--isolation", help="Only report which isolation layers this machine allows."),
) -> None:
    """Run model code against hidden tests in the sandbox and print the verdict."""
    workers = cap_workers(workers)
    if isolation:
        _report_isolation(disable, as_json)
        return
    if batch is not None:
        if code or tests or entry_point:
            _fail("--batch cannot be combined with --code/--tests/--entry-point")
        _run_batch(batch, workers, disable, as_json)
        return
    missing = [flag for flag, value in (("--code", code), ("--tests", tests), ("--entry-point", entry_point)) if not value]
    if missing:
        _fail(f"missing {', '.join(missing)} (or use --batch JOBS.jsonl)")
    try:
        job = ExecutionJob(code=_read_text(code, "code"), tests=_read_text(tests, "tests"), entry_point=entry_point,
                           tests_format=tests_format, timeout_s=timeout, trust_mode=trust_mode)
    except ValidationError as exc:
        _fail(_describe_validation(exc))
    executor = _make_executor(disable, workers)
    try:
        result = executor.run(job)
    finally:
        executor.close()
    if as_json:
        sys.stdout.write(_result_json(result) + "\n")
    else:
        _print_human(result)
    raise typer.Exit(0 if result.status is ExecutionStatus.PASSED else 1)


def _report_isolation(disable: str, as_json: bool) -> None:
    executor = _make_executor(disable, 1)
    try:
        report = executor.isolation()
    except Exception as exc:  # noqa: BLE001 - a sandbox that cannot start is exactly what to report
        _fail(f"the sandbox could not start: {exc}", code=1)
    finally:
        executor.close()
    if as_json:
        sys.stdout.write(json.dumps(report) + "\n")
        return
    for layer, state in report.items():
        colour = "green" if state.startswith("on") else "yellow" if state.startswith("off") else "white"
        console.print(f"{layer:20s} [{colour}]{state}[/]", markup=True, highlight=False)


def _batch_lines(batch: Path) -> list[tuple[int, str | None]]:
    """(line number, text) of each line, decoded on its own: a line that is not UTF-8 has text None (an
    error result naming it), never a failure of the whole batch."""
    try:
        raw_lines = batch.read_bytes().split(b"\n")
    except FileNotFoundError:
        fail(f"batch file not found: {batch}")
    except OSError as exc:
        fail(f"cannot read batch file {batch}: {exc.strerror}")
    lines: list[tuple[int, str | None]] = []
    for number, raw in enumerate(raw_lines, start=1):
        try:
            lines.append((number, raw.decode("utf-8")))
        except UnicodeDecodeError:
            lines.append((number, None))
    return lines


def _run_batch(batch: Path, workers: Optional[int], disable: str, as_json: bool) -> None:
    entries: list[tuple[str, object]] = []  # ("job", index into jobs) or ("error", error line)
    jobs: list[ExecutionJob] = []
    for number, line in _batch_lines(batch):
        if line is not None and not line.strip():
            continue
        job, problem, job_id = (parse_job_line(line, number) if line is not None
                                else (None, f"line {number}: not UTF-8 text", None))
        if job is None:
            error = ExecutionResult(id=job_id if isinstance(job_id, str) else "", status=ExecutionStatus.ERROR,
                                    reason=problem)
            entries.append(("error", error))
        else:
            entries.append(("job", len(jobs)))
            jobs.append(job)
    executor = _make_executor(disable, workers)
    counts: dict[str, int] = {}
    try:
        results = executor.run_batch(jobs, workers=workers)
        for kind, value in entries:
            result = next(results) if kind == "job" else value
            counts[result.status.value] = counts.get(result.status.value, 0) + 1
            if as_json:
                sys.stdout.write(_result_json(result) + "\n")
                sys.stdout.flush()
            else:
                _print_human(result)
    finally:
        executor.close()
    if not as_json:
        summary = ", ".join(f"{count} {status}" for status, count in sorted(counts.items()))
        console.print(f"{len(entries)} jobs: {summary}", highlight=False)
