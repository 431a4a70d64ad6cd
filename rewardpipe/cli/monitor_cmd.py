"""`rewardpipe monitor PATH`: per-component within-group variance of a run, with verdicts and alarms."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson  # the duplicate pass parses every line only for its ids: a few times faster than json
import typer
from rich.console import Console
from rich.table import Table

from rewardpipe.cli.application import (
    ALARM_EXIT,
    TerminalAlarmSink,
    app,
    error_line,
    fail,
    markup_safe,
    note,
    write_json_line,
)
from rewardpipe.cli.common import (
    no_transcript_store,
    note_set_aside,
    note_unreadable,
    rollouts_hint,
    warn_of_run,
    with_threshold_options,
)
from rewardpipe.cli.progress import progress_bars
from rewardpipe.monitoring.statistics import delivery_key


def _record_identity(line: bytes) -> int | None:
    """Hash of (run, step, group, rollout) of a JSONL record line (SipHash with a per-process key, so not
    steerable by whoever wrote the file), or None if the line cannot say (it is reported when validated).
    The key is :func:`~rewardpipe.monitoring.statistics.delivery_key`, the one ``monitor_records`` dedupes on."""
    try:
        return hash(delivery_key(orjson.loads(line)))
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):  # orjson.JSONDecodeError is a ValueError
        return None


def read_jsonl_records(path: Path, on_bad: Callable[[Any], None], duplicates: list[int]) -> Iterator[Any]:
    """Records of a JSONL file, each decoded and validated on its own line; a bad line is reported as
    ``file:line`` through ``on_bad`` and skipped.

    A record delivered more than once (same run, step, group and rollout; a retried delivery or a file
    concatenated twice) is counted once: the last copy wins, as it would in the store where the key is
    the same, and the dropped copies' line numbers are appended to ``duplicates``. This takes two passes
    over the file (the first reads only the ids), so memory holds one line number per distinct record.
    """
    from rewardpipe.monitoring.sources import record_of_line

    last_line: dict[Any, int] = {}
    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, start=1):
            identity = _record_identity(line) if line.strip() else None
            if identity is not None:
                if identity in last_line:
                    duplicates.append(last_line[identity])
                last_line[identity] = lineno
    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            identity = _record_identity(line)  # (None for a line that is not UTF-8 JSON: reported below)
            if identity is not None and last_line.get(identity) != lineno:
                continue  # an earlier copy of a record delivered again later
            record = record_of_line(line, f"{path}:{lineno}", on_bad)
            if record is not None:
                yield record


def _dump_hint(directory: Path) -> str:
    """What to do with verl's rollout dump (``<step>.jsonl`` files), which is no store: import it first."""
    from rewardpipe.integrations.verl_dump import STEP_FILE

    if not any(STEP_FILE.fullmatch(p.name) for p in directory.iterdir() if p.is_file()):
        return ""
    return (
        f"; its <step>.jsonl files look like verl's rollout dump (trainer.rollout_data_dir): import it first, "
        f"`rewardpipe verl import {directory} --out STORE`, then read STORE"
    )


class _Source:
    """What PATH turned out to be: a store (with the run to read) or a JSONL file."""

    def __init__(self, path: str, run_id: str | None) -> None:
        from rewardpipe.store import LocalStore, StoreError, decode_id, open_store

        self.store: Any = None
        self.jsonl: Path | None = None
        self.parquet: list[Path] = []  # rewardpipe's Parquet export: a .parquet file, or a directory of them
        self.run_id = run_id
        if path.startswith("s3://"):
            try:
                self.store = open_store(path)
                runs = self.store.list_runs()
            except StoreError as exc:
                fail(str(exc))
            except Exception as exc:  # noqa: BLE001 - credentials, endpoint, network: say what failed
                fail(f"cannot read {path}: {type(exc).__name__}: {exc}")
            self._choose_run(path, runs)
            return
        local = Path(path)
        if (local.is_file() and local.suffix == ".parquet") or (
            local.is_dir() and not (local / "runs").is_dir() and any(local.glob("*.parquet"))
        ):
            from rewardpipe.monitoring.fastread import parquet_files

            self.parquet = parquet_files(local)
            return
        if local.is_file():
            self.jsonl = local
            return
        if not local.exists():
            fail(f"PATH not found: {path} (expected a store directory, an s3:// URI or a JSONL file of records)")
        if not local.is_dir():  # a pipe, a device, a socket: records are read twice, so only a file will do
            fail(
                f"{path} is not a regular file or a directory (expected a store directory, an s3:// URI or a "
                f"JSONL file of records; a pipe will not do, since the records are read twice: write them to a "
                f"file first)"
            )
        if not (local / "runs").is_dir() and local.parent.name == "runs":
            # PATH is runs/<run_id> inside a store: use the store above it and that run.
            if run_id is not None and run_id != decode_id(local.name):
                fail(f"{path} is run '{decode_id(local.name)}' but --run-id says '{run_id}'")
            self.run_id = decode_id(local.name)
            local = local.parent.parent
        if not (local / "runs").is_dir():
            fail(f"{path} is a directory but not a rewardpipe store (no runs/ folder inside){_dump_hint(local)}")
        try:
            self.store = LocalStore(local)
        except StoreError as exc:
            fail(str(exc))
        self._choose_run(path, self.store.list_runs())

    def _choose_run(self, path: str, runs: list[str]) -> None:
        from rewardpipe.store import StoreError

        if not runs:
            fail(f"{path} holds no runs")
        if self.run_id is None:
            if len(runs) > 1:
                fail(f"{path} holds several runs ({', '.join(runs)}): choose one with --run-id")
            self.run_id = runs[0]
        elif self.run_id not in runs:
            fail(f"run '{self.run_id}' not found in {path} (runs: {', '.join(runs)})")
        try:
            self.progress = self.store.run_progress(self.run_id)
        except StoreError as exc:
            fail(f"cannot read {path}: {exc}")

    #: A store's run: which steps are finished (rewardpipe.store.Store.run_progress); None for a file.
    progress: Any = None

    @property
    def finished_steps(self) -> list[int] | None:
        """The steps to judge: a store's finished steps, or None (every step) for a file."""
        return None if self.progress is None else self.progress.finished

    def only_finished(self, path: str, step: int | None) -> None:
        """Judge finished steps only (see "When is a step finished?" in rewardpipe.store): a run still being
        written is said to be, its unfinished steps are named, and nothing is judged (or written) for them."""
        progress = self.progress
        if progress is None or not progress.in_progress:
            return
        unfinished = progress.unfinished
        who = (
            f"run '{self.run_id}' in {path} is still being written (or was interrupted: `rewardpipe run "
            f"--resume` finishes it; a trainer's run, TRL's or verifiers', is finished at the end of its training "
            f"when every step was stored whole; `rewardpipe verl import` marks a step once it stored all of it, and "
            f"completes an unfinished one when run again)"
        )
        if step is not None and step in unfinished:
            fail(f"{who}: step {step} is not finished, so it is not judged")
        if not progress.finished:
            fail(f"{who}: no step is finished yet, so nothing is judged and nothing written")
        if unfinished and step is None:
            note(
                f"warning: {who}: judging its finished step(s) {_steps(progress.finished)} only; step(s) "
                f"{_steps(unfinished)} not finished: not judged, no alarm or triage written from them"
            )

    def status(self) -> dict[str, Any]:
        """``in_progress`` and ``unfinished_steps``, for the JSON outputs."""
        if self.progress is None:
            return {"in_progress": False, "unfinished_steps": []}
        return {"in_progress": self.progress.in_progress, "unfinished_steps": self.progress.unfinished}

    def batch(self, step: int | None, progress: Any = None) -> Any:
        """The run's records as columns (repeated deliveries dropped, listed in ``batch.duplicates``) when
        PATH is a file or a local store the fast readers can vouch for entirely; None sends the caller to
        :meth:`records`."""
        from rewardpipe.monitoring.fastread import read_jsonl_batch, read_parquet_batch, read_store_batch

        if self.store is not None:
            assert self.run_id is not None  # _choose_run chose one for every store
            return read_store_batch(self.store, self.run_id, step, self.finished_steps, progress)
        if self.parquet:
            try:
                batch = read_parquet_batch(self.parquet)
            except (ValueError, OSError) as exc:  # not rewardpipe's export, or not Parquet at all
                fail(f"cannot read {self.parquet[0] if len(self.parquet) == 1 else self.parquet[0].parent}: {exc}")
        elif self.jsonl is not None:
            batch = read_jsonl_batch(self.jsonl)
        else:
            return None
        return None if batch is None else batch.dedupe().only(self.run_id, step)

    def records(self, step: int | None, bad: list, duplicates: list[int] | None = None) -> Iterable[Any]:
        """The run's records; for a JSONL file, repeated records are dropped (their lines go to ``duplicates``)."""
        if self.store is not None:
            return self.store.iter_records(self.run_id, step, on_bad=bad.append, steps=self.finished_steps)
        if self.parquet:
            from rewardpipe.monitoring.fastread import parquet_rows

            records: Iterable[Any] = parquet_rows(self.parquet, bad.append, [] if duplicates is None else duplicates)
        else:
            assert self.jsonl is not None  # the source is a store, a Parquet export or this file
            records = read_jsonl_records(self.jsonl, bad.append, [] if duplicates is None else duplicates)
        if self.run_id is not None:
            records = (r for r in records if r.run_id == self.run_id)
        if step is not None:
            records = (r for r in records if r.step == step)
        return records


class Reading:
    """A command's "reading records" bar (see rewardpipe.cli.progress): the files of a store counted as
    they are read, the records of the careful path as they come, then what the command does with them."""

    EVERY = 1024  # records between two updates of the bar

    def __init__(self, bar: Any) -> None:
        self.bar = bar
        self.task = bar.add_task("reading records", total=None)

    def files(self) -> Any:
        """The ``progress`` callback of the fast store reader, or None when no bar is drawn."""
        if not self.bar.drawn:
            return None
        return lambda done, total: self.bar.update(self.task, completed=done, total=total)

    def counted(self, records: Iterable[Any]) -> Iterator[Any]:
        """``records``, counted on the bar as they go by."""
        if not self.bar.drawn:
            yield from records
            return
        count = 0
        self.bar.update(self.task, completed=0, total=None)
        for count, record in enumerate(records, start=1):
            if count % self.EVERY == 0:
                self.bar.update(self.task, completed=count)
            yield record
        self.bar.update(self.task, completed=count)

    def phase(self, description: str) -> None:
        self.bar.update(self.task, description=description)


def _steps(steps: list[int]) -> str:
    """``0-4, 7, 9-10``: a list of steps, runs of consecutive ones shortened."""
    spans: list[list[int]] = []
    for n in sorted(steps):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if value else "0"
    return str(value)


_VERDICT_STYLE = {"ok": "green", "dying": "magenta", "dead": "bold red", "info": "blue", "insufficient_data": "yellow"}


def _print_table(console: Console, result: Any, title: str) -> None:
    table = Table(title=title)
    for column in (
        "step",
        "component",
        "verdict",
        "cause",
        "zero-var groups",
        "eligible",
        "mean",
        "batch std",
        "within-group std",
        "missing",
        "errors",
    ):
        table.add_column(column, justify="left" if column in ("component", "verdict", "cause") else "right")
    for report in result.steps:
        rows = [*report.components.values(), report.aggregate]
        for index, stats in enumerate(rows):
            style = _VERDICT_STYLE.get(stats.verdict, "")
            frac = stats.zero_variance_group_fraction
            table.add_row(
                str(report.step) if index == 0 else "",
                "[i]aggregate (total)[/i]" if stats is report.aggregate else markup_safe(stats.name),
                f"[{style}]{stats.verdict}[/{style}]" + (" [red]*[/red]" if stats.alarm_active else ""),
                markup_safe(stats.cause or ""),
                "-" if frac is None else f"{100 * frac:.0f}%",
                str(stats.eligible_groups),
                _fmt(stats.mean),
                _fmt(stats.std),
                _fmt(stats.within_group_std_mean),
                str(stats.missing + stats.non_finite),
                f"{report.errors} ({100 * report.error_rate:.0f}%)" if index == 0 else "",
                end_section=index == len(rows) - 1,
            )
    console.print(table)
    _print_diagnoses(console, result)
    starred = any(stats.alarm_active for report in result.steps for stats in report.components.values()) or any(
        report.aggregate.alarm_active for report in result.steps
    )
    console.print(
        ("[dim]* alarm active. " if starred else "[dim]")
        + "zero-var groups: share of groups (>= 2 scored rollouts) whose std "
        f"<= {result.thresholds.epsilon:g} (for weight 1 and values within +-1; the bound scales with both: "
        "docs/monitor.md).[/dim]"
    )


def _print_diagnoses(console: Console, result: Any) -> None:
    """Each named cause once, with the steps it was seen at and its latest message."""
    seen: dict[tuple[str, tuple[str, ...]], tuple[list[int], str]] = {}
    for report in result.steps:
        for diagnosis in report.diagnoses:
            steps, _ = seen.get((diagnosis.cause, tuple(diagnosis.components)), ([], ""))
            seen[(diagnosis.cause, tuple(diagnosis.components))] = ([*steps, report.step], diagnosis.message)
    for (cause, _), (steps, message) in seen.items():
        where = f"step {steps[0]}" if len(steps) == 1 else f"{len(steps)} steps, {steps[0]}-{steps[-1]}"
        console.print(
            f"[bold]cause {markup_safe(cause)}[/bold] ({where}): {markup_safe(message)}",
            highlight=False,
            soft_wrap=True,
        )


def _run_thresholds(data: dict[str, Any], components: set[str]) -> dict[str, Any]:
    """The thresholds' JSON for the run's own components: the built-in reward's default ranges (and its
    ``correctness`` as the outcome) are left out of a run that has no such component."""
    for name in ("ranges", "range_overrides", "roles"):
        data[name] = {key: value for key, value in data[name].items() if key in components}
    data["outcome_components"] = [name for name in data["outcome_components"] if name in components]
    return data


@app.command()
@with_threshold_options
def monitor(
    path: str = typer.Argument(
        ...,
        help="A store directory, an s3://bucket/prefix URI, a JSONL file of records, "
        "or a Parquet file (or directory of them) from `report --parquet`.",
    ),
    run_id: str | None = typer.Option(None, "--run-id", help="Run to monitor (needed when PATH holds several)."),
    step: int | None = typer.Option(None, "--step", min=0, help="Only this step."),
    as_json: bool = typer.Option(False, "--json", help="Print the full result as JSON."),
    fail_on_alarm: bool = typer.Option(
        False,
        "--fail-on-alarm",
        help="Exit 2 if a dead-component or error-rate alarm is raised (a usage error exits 2 with nothing on stdout).",
    ),
    thresholds: Any = None,
    write_alarms: bool = typer.Option(
        True, "--write-alarms/--no-write-alarms", help="Store alarms as JSON beside the records (store PATH only)."
    ),
) -> None:
    """Per step and per component: mean, batch std, within-group std, zero-variance group share, verdict."""
    from rewardpipe.monitoring import MonitorInputError, StoreAlarmSink, dispatch, monitor_records
    from rewardpipe.monitoring.monitor import monitor_batch
    from rewardpipe.monitoring.thresholds import run_thresholds
    from rewardpipe.store import StoreError

    source = _Source(path, run_id)
    source.only_finished(path, step)
    thresholds = run_thresholds(thresholds, source.store, source.run_id)  # the run's own ranges and roles
    bad: list = []
    duplicates: list[int] = []
    try:
        with progress_bars(as_json) as bar:
            reading = Reading(bar)
            batch = source.batch(step, reading.files())
            if batch is not None:  # every record vouched for: columns, no model object per record
                duplicates = batch.duplicates
                reading.phase("checking steps")
                result = monitor_batch(batch, thresholds)
            else:
                # source.records drops repeated deliveries itself (two passes over a file, holding line numbers)
                records = reading.counted(source.records(step, bad, duplicates))
                result = monitor_records(records, thresholds, dedupe=False)
    except MonitorInputError as exc:
        fail(f"{path}: {exc}")
    except (StoreError, OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read {path}: {exc}")
    result.unreadable = [b.to_dict() for b in bad] + result.unreadable  # (+ what the monitor itself left out)
    if duplicates:
        where = "row" if source.parquet else "line"
        note(
            f"{path}: {len(duplicates)} repeated record(s) dropped (same run, step, group and rollout; "
            f"the last copy counts), e.g. {where} {min(duplicates)}"
        )
    if not result.steps:
        note_unreadable(result.unreadable)  # what was refused, by file:line or key, before the verdict on the whole
        which = f" for run '{source.run_id}'" if source.run_id else ""
        fail(
            f"{path} has no readable records{which}{f' at step {step}' if step is not None else ''}"
            + (f" ({len(bad)} unreadable)" if bad else "")
            + (rollouts_hint(path) if source.store is None else "")
        )

    from rewardpipe.monitoring import AGGREGATE_TARGET

    seen = {name for report in result.steps for name in report.components} | {AGGREGATE_TARGET}
    # the records decide which components exist: a warning (--range, silent, judged the component by no range)
    for option, names in (("--ignore", thresholds.ignore), ("--range", list(thresholds.range_overrides))):
        for name in dict.fromkeys(names):
            if name not in seen:
                note(f"warning: {option} {name!r} names no component of these records ({', '.join(sorted(seen))})")

    out = Console(width=None if Console().is_terminal else 160)
    sinks: list[Any] = []
    if source.store is not None and write_alarms:
        sinks.append(StoreAlarmSink(source.store, source.run_id))
    failures = dispatch(result.alarms, sinks)

    if as_json:
        data = result.to_dict()
        data["thresholds"] = _run_thresholds(data["thresholds"], seen | set(thresholds.roles))
        data["source"] = path
        data.update(source.status())
        data["duplicates_dropped"] = len(duplicates)
        data["delivery_failures"] = [
            {"sink": f.sink, "component": f.alarm.component, "kind": f.alarm.kind, "error": f.error} for f in failures
        ]
        write_json_line(data)
    else:
        _print_table(
            out, result, f"run {markup_safe(source.run_id or result.run_id)}: within-group variance per component"
        )
        dispatch(result.alarms, [TerminalAlarmSink(out, source.store.location if source.store is not None else None)])
        if not result.alarms:
            out.print("[green]no alarms[/green]")
        elif source.store is None and any(e.get("transcript_key") for a in result.alarms for e in a.examples):
            out.print(
                f"[dim]{markup_safe(no_transcript_store(path))}[/dim]",
                highlight=False,
                soft_wrap=True,
            )
    note_unreadable(result.unreadable)
    note_set_aside(result.set_aside)
    warn_of_run(result.warnings)
    for failure in failures:
        error_line(
            f"could not deliver alarm {failure.alarm.component}/{failure.alarm.kind} via {failure.sink}: "
            f"{failure.error}"
        )

    if fail_on_alarm and any(a.kind in ("dead_component", "error_rate") for a in result.alarms):
        raise typer.Exit(ALARM_EXIT)
    if failures:
        raise typer.Exit(1)
