"""`rewardpipe exec`: run model code against hidden tests in the sandbox, one job or a JSONL batch."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer
from pydantic import ValidationError

from rewardpipe.cli.application import app, cut_line
from rewardpipe.cli.progress import progress_bars
from rewardpipe.execution.result import ExecutionJob, ExecutionResult, ExecutionStatus, clean_text

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

INPROCESS_WARNING = (
    "trust mode 'inprocess' runs the tests beside the model's code behind a deny-list screen "
    "that can be bypassed: not for untrusted code, never a reward source"
)
# Characters that end a line for some reader (str.splitlines(), terminals): in human output, model
# text must never start a line of its own (a forged "<other id>: passed 3/3").
_LINE_BREAKS = {ord(c): repr(c)[1:-1] for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}


@functools.cache
def console() -> Console:
    """Errors and warnings, for people (stderr). Rich is imported on first use: `exec --batch --json`
    never needs it, and its import is a tenth of the command's start-up."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


@functools.cache
def verdicts() -> Console:
    """Verdicts and the isolation report: data, so a pipe captures them (stdout)."""
    from rich.console import Console

    return Console(soft_wrap=True)


def _styled(*parts: str | tuple[str, str]) -> Text:
    """Plain strings and (string, style) pairs as one Rich Text, never parsed as markup."""
    from rich.text import Text

    return Text.assemble(*parts)


def one_line(text: str) -> str:
    """Model- or user-controlled ``text`` as one printable line: line breaks and other control
    characters escaped, lone surrogates replaced."""
    text = clean_text(cut_line(text)).translate(_LINE_BREAKS)  # (a megabyte of model text was a megabyte on screen)
    return "".join(ch if ch.isprintable() or ch == " " else repr(ch)[1:-1] for ch in text)


def _fail(message: str, code: int = 2) -> NoReturn:
    console().print(_styled(("error:", "bold red"), " ", one_line(message)), highlight=False)
    raise typer.Exit(code)


def _read_bytes(path: Path, what: str) -> bytes:
    from rewardpipe.models import InputFileError, open_input

    try:
        with open_input(path) as fh:
            return fh.read()
    except InputFileError as exc:
        _fail(str(exc), code=1)
    except FileNotFoundError:
        _fail(f"{what} file not found: {path}", code=1)
    except IsADirectoryError:
        _fail(f"expected a {what} file, got a directory: {path}", code=1)
    except OSError as exc:
        _fail(f"cannot read {what} file {path}: {exc.strerror}", code=1)
    raise AssertionError("unreachable")


def _read_text(path: Path, what: str) -> str:
    """The file as text; a UTF-8 byte-order mark in front (Windows editors write one) is dropped, as
    Python drops it from a source file."""
    from rewardpipe.models import UTF8_BOM

    try:
        return _read_bytes(path, what).decode("utf-8").removeprefix(UTF8_BOM)
    except UnicodeDecodeError as exc:
        _fail(f"{what} file {path} is not UTF-8 text ({exc.reason} at byte {exc.start})", code=1)
    raise AssertionError("unreachable")


def _result_json(result: ExecutionResult) -> str:
    """One JSON line, pure ASCII: U+2028/2029/0085 cannot split it for a reader using splitlines()."""
    return json.dumps(result.model_dump(mode="json"), ensure_ascii=True)


def _emit(result: ExecutionResult, as_json: bool) -> None:
    """Write one result on its own: if it cannot be written, an error line for its id takes its place,
    and the results after it are still written."""
    try:
        if as_json:
            line = _result_json(result)
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        else:
            _print_human(result)
    except (ValueError, TypeError, UnicodeError) as exc:
        fallback = ExecutionResult(
            id=clean_text(result.id),
            status=ExecutionStatus.ERROR,
            reason=f"the result could not be written: {type(exc).__name__}",
        )
        if as_json:
            sys.stdout.write(_result_json(fallback) + "\n")
            sys.stdout.flush()
        else:
            _print_human(fallback)


def _describe_validation(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        # a field name is the line's own text: a megabyte-long unknown one was a megabyte in every result's reason
        where = ".".join(cut_line(str(item), 80) for item in error["loc"]) or "job"
        parts.append(f"{where}: {error['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)


def parse_job_line(line: str, where: str) -> tuple[ExecutionJob | None, str | None, object]:
    """(job, None, id) for a valid line, (None, problem, id-if-known) for a malformed one; ``where`` is the
    line's ``file:line`` and starts every problem."""
    try:
        raw = json.loads(line)
    except ValueError as exc:
        return None, f"{where}: not valid JSON ({exc})", None
    except RecursionError:
        return None, f"{where}: not valid JSON (nested too deeply)", None
    if not isinstance(raw, dict):
        return None, f"{where}: a job must be a JSON object, got {type(raw).__name__}", None
    job_id = raw.get("id")
    if not isinstance(job_id, str) or not job_id:
        return None, f"{where}: missing or empty 'id' (a non-empty string is required)", job_id
    try:
        return ExecutionJob.model_validate(raw), None, job_id
    except ValidationError as exc:
        return None, f"{where}: {_describe_validation(exc)}", job_id


def _make_executor(disable: str, workers: int | None):
    from rewardpipe.execution.forkservers import overrides_for
    from rewardpipe.execution.sandbox import SandboxConfigError, make_executor

    try:
        # The same settings rewardpipe.__main__ started fork servers with, if it did: they are taken over.
        return make_executor(**overrides_for(workers, disable))
    except SandboxConfigError as exc:
        _fail(str(exc))


def _print_human(result: ExecutionResult) -> None:
    """Never through markup: ids, reasons and paths are model- or user-controlled text."""
    colour = {"passed": "green", "failed": "red", "timeout": "yellow", "error": "magenta"}[result.status.value]
    mode = ", mode " + one_line(result.mode) if result.mode else ""
    line = _styled(
        f"{one_line(result.id)}: " if result.id else "",
        (result.status.value, f"bold {colour}"),
        f" {result.passed}/{result.total} ({result.duration_ms:.1f} ms{mode}) ",
        one_line(result.reason),
    )
    if result.mode == "inprocess":
        line.append(f" [{INPROCESS_WARNING}]", style="bold yellow")
    verdicts().print(line, highlight=False)


@app.command("exec")
def exec_command(
    code: Path | None = typer.Option(None, "--code", help="File with the model's code."),
    tests: Path | None = typer.Option(
        None,
        "--tests",
        help='File with the hidden tests (stdio: a JSON list of {"input": ..., "output": ...}, or '
        '{"cases": [...], "float_tolerance": 1e-6} to accept numbers within that error).',
    ),
    entry_point: str | None = typer.Option(None, "--entry-point", help="Name the tests call (not for stdio)."),
    tests_format: str = typer.Option(
        "unittest",
        "--tests-format",
        help="unittest | check (HumanEval) | stdio (the code is a whole program, run on each case's input as "
        "stdin; its output's whitespace-separated tokens must match the case's).",
    ),
    timeout: float = typer.Option(10.0, "--timeout", help="Wall-clock seconds per execution."),
    trust_mode: str = typer.Option("split", "--trust-mode", help="split (default) | inprocess (screened fallback)."),
    batch: Path | None = typer.Option(None, "--batch", help="JSONL file of jobs (id, code, tests, entry_point, ...)."),
    workers: int | None = typer.Option(None, "--workers", min=1, help="Parallel workers (default: one per core)."),
    disable: str = typer.Option("", "--disable", help="Comma-separated isolation layers to turn off (testing only)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (one object, or one line per batch job)."),
    isolation: bool = typer.Option(
        False, "--isolation", help="Only report which isolation layers this machine allows."
    ),
) -> None:
    """Run model code against hidden tests in the sandbox and print the verdict."""
    if isolation:
        _report_isolation(disable, as_json)
        return
    if batch is not None:
        if code or tests or entry_point:
            _fail("--batch cannot be combined with --code/--tests/--entry-point")
        _run_batch(batch, workers, disable, as_json)
        return
    needed = (("--code", code), ("--tests", tests), ("--entry-point", entry_point or tests_format == "stdio"))
    missing = [flag for flag, value in needed if not value]
    if missing:
        _fail(f"missing {', '.join(missing)} (or use --batch JOBS.jsonl)")
    assert code is not None and tests is not None  # (named as missing otherwise)
    try:
        job = ExecutionJob(
            code=_read_text(code, "code"),
            tests=_read_text(tests, "tests"),
            entry_point=entry_point or "",
            tests_format=tests_format,
            timeout_s=timeout,
            trust_mode=trust_mode,
        )
    except ValidationError as exc:
        _fail(_describe_validation(exc))
    if job.trust_mode == "inprocess":
        console().print(_styled((f"warning: {INPROCESS_WARNING}", "bold yellow")), highlight=False)
    executor = _make_executor(disable, workers)
    try:
        result = executor.run(job)
    finally:
        executor.close()
    _emit(result, as_json)
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
        sys.stdout.write(json.dumps(report, ensure_ascii=True) + "\n")
        return
    for layer, state in report.items():
        colour = "green" if state.startswith("on") else "yellow" if state.startswith("off") else "white"
        verdicts().print(_styled(f"{one_line(layer):20s} ", (one_line(state), colour)), highlight=False)


def _run_batch(batch: Path, workers: int | None, disable: str, as_json: bool) -> None:
    """Every line gets a result, in file order (a bad line an ``error`` result naming ``file:line``, also
    said on stderr); the exit code is 1 when any line was bad, as for ``score``: the verdicts of the valid
    jobs are data, a line that could not be run is bad input."""
    executor = _make_executor(disable, workers)
    executor.warm_up(workers)  # fork servers start while the batch is read and validated
    counts: dict[str, int] = {}
    try:
        entries, jobs = _read_batch(batch)
        if any(job.trust_mode == "inprocess" for job in jobs):
            console().print(_styled((f"warning: {INPROCESS_WARNING}", "bold yellow")), highlight=False)
        results = executor.run_batch(jobs, workers=workers)
        with progress_bars(as_json, None if as_json else console(), prints_meanwhile=True) as bar:
            done = bar.add_task("running jobs", total=len(entries))
            for _, value in entries:
                result = value if isinstance(value, ExecutionResult) else next(results)  # a job's is its index
                counts[result.status.value] = counts.get(result.status.value, 0) + 1
                _emit(result, as_json)
                bar.advance(done)
    finally:
        executor.close()
    if not entries:
        _fail(f"{batch}: contains no jobs", code=1)
    bad_lines = [value for _, value in entries if isinstance(value, ExecutionResult)]  # the "error" entries
    if not as_json:
        summary = ", ".join(f"{count} {status}" for status, count in sorted(counts.items()))
        verdicts().print(_styled(f"{len(entries)} jobs: {summary}"), highlight=False)
    if bad_lines:
        for error in bad_lines:
            console().print(_styled(("skipped", "bold red"), " ", one_line(error.reason)), highlight=False)
        _fail(f"{batch}: {len(bad_lines)} of {len(entries)} line(s) are not valid jobs (named above)", code=1)


def _read_batch(batch: Path) -> tuple[list[tuple[str, ExecutionResult | int]], list[ExecutionJob]]:
    """Entries in file order (("job", index into jobs) or ("error", error result)) and the valid jobs.

    Lines end at ``\n`` only (U+2028 and friends are legal inside a JSON string) and are decoded one at a
    time (a byte-order mark in front of line 1 dropped), so an invalid byte costs its own line (an
    ``error`` result naming ``file:line``), not the batch."""
    from rewardpipe.models import InputFileError, decode_line, repeated_id, same_text

    entries: list[tuple[str, ExecutionResult | int]] = []
    jobs: list[ExecutionJob] = []
    # same_text(job id) -> (id, line): a repeated id would make two results indistinguishable
    first_line: dict[str, tuple[str, int]] = {}
    raw_lines = _read_bytes(batch, "batch").split(b"\n")
    for number, raw in enumerate(raw_lines, start=1):
        where = f"{batch}:{number}"
        job: ExecutionJob | None
        problem: str | None
        job_id: object
        try:
            line = decode_line(raw, number, where)
        except InputFileError as exc:
            job, problem, job_id = None, str(exc), None
        else:
            if not line.strip():
                continue
            job, problem, job_id = parse_job_line(line, where)
        if job is not None:
            first_id, first = first_line.setdefault(same_text(job.id), (job.id, number))
            if first != number:
                problem = f"{where}: field 'id': duplicate id ({repeated_id(job.id, first_id, first)})"
                job = None
        if job is None:
            error = ExecutionResult(
                id=job_id if isinstance(job_id, str) else "", status=ExecutionStatus.ERROR, reason=problem
            )
            entries.append(("error", error))
        else:
            entries.append(("job", len(jobs)))
            jobs.append(job)
    return entries, jobs
