"""`rewardpipe report PATH [PATH_B] --out report.html`: one self-contained HTML page (or JSON) explaining a run.

PATH is what `rewardpipe monitor` reads: a store directory, an s3:// URI or a JSONL file of records. With
two PATHs the runs are compared side by side. ``--run-id`` picks the run (give it twice for two runs in the
same store). The triage list is also written into the store as ``runs/<run>/triage.jsonl``;
``--parquet DIR`` exports the records (same single read) as ``DIR/<run>.parquet``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from rewardpipe.cli.application import app, error_line, fail, note, usage_fail, write_json_line
from rewardpipe.cli.common import (
    check_output_dir,
    check_output_file,
    no_transcript_store,
    note_set_aside,
    note_unreadable,
    rollouts_hint,
    same_file,
    warn_of_run,
)


def _one_run(
    path: str,
    run_id: str | None,
    parquet: Path | None,
    write_triage_file: bool,
    as_json: bool = False,
    failed_writes: list[str] | None = None,
) -> dict[str, Any]:
    """One run's report; a triage file the store refuses is said on its own line and kept in ``failed_writes``
    (the exit status, once the page is written)."""
    from rewardpipe.cli.monitor_cmd import Reading, _Source
    from rewardpipe.cli.progress import progress_bars
    from rewardpipe.monitoring.report import attach_transcripts, build_report, build_report_from_batch
    from rewardpipe.monitoring.statistics import listed
    from rewardpipe.monitoring.thresholds import run_thresholds
    from rewardpipe.monitoring.triage import write_triage
    from rewardpipe.store import StoreError

    source = _Source(path, run_id)
    source.only_finished(path, None)
    bad: list = []
    sinks = []
    if parquet is not None:
        from rewardpipe.monitoring.parquet import ParquetSink, ParquetUnavailable

        try:
            sinks.append(ParquetSink(parquet, source.run_id or Path(path).stem))
        except ParquetUnavailable as exc:
            fail(str(exc))
    try:
        with progress_bars(as_json) as bar:
            reading = Reading(bar)
            # the Parquet export writes records: the careful read
            batch = None if sinks else source.batch(None, reading.files())
            thresholds = run_thresholds(None, source.store, source.run_id)  # the run's own ranges and roles
            if batch is not None:
                reading.phase("building the report")
                report = build_report_from_batch(batch, thresholds, run_id=source.run_id)
            else:
                report = build_report(
                    reading.counted(source.records(None, bad)), thresholds, run_id=source.run_id, also=sinks
                )
    except (StoreError, ValueError) as exc:
        fail(f"cannot read {path}: {exc}")
    for sink in sinks:
        note(f"parquet: {sink.close()} ({sink.rows} records)")
    unreadable = [b.to_dict() for b in bad]
    report.update(listed("unreadable", unreadable))
    note_unreadable(unreadable)  # as `monitor` says them: each skipped record by file:line or key
    note_set_aside(report["set_aside"], count=report["set_aside_count"])
    report.update(source.status())
    if not report["steps"]:
        fail(
            f"{path} holds no records"
            + (f" for run '{source.run_id}'" if source.run_id else "")
            + (rollouts_hint(path) if source.store is None else "")
        )
    if source.store is None:  # records read from a file: their transcripts are in a store the report was not given
        for example in (e for alarm in report["alarms"] for e in alarm["examples"] if e.get("transcript_key")):
            example["transcript_missing"] = f"{no_transcript_store(path)} This one's: {example['transcript_key']}"
    else:
        attach_transcripts(report, source.store)
        if write_triage_file and report["in_progress"]:  # a triage says which prompts never teach: of the whole run
            note(f"triage.jsonl not written: run '{source.run_id}' is still being written")
        elif write_triage_file and report["run_id"]:
            try:
                key = write_triage(source.store, report["run_id"], report["task_triage"])
                report["triage_key"] = key
            except (StoreError, OSError, ValueError) as exc:
                error_line(f"triage.jsonl not written: {exc}")
                if failed_writes is not None:
                    failed_writes.append(f"the triage.jsonl of run '{report['run_id']}'")
    return report


def _same_place(one: str, other: str) -> bool:
    """The two PATHs name one store or file (the same s3:// text, or one local path however written)."""
    if one.rstrip("/") == other.rstrip("/"):
        return True
    return not (one.startswith("s3://") or other.startswith("s3://")) and same_file(Path(one), Path(other))


@app.command()
def report(
    paths: list[str] = typer.Argument(
        ..., metavar="PATH [PATH_B]", help="A store directory, s3://bucket/prefix or JSONL of records; two to compare."
    ),
    run_id: list[str] = typer.Option([], "--run-id", help="The run (give twice: the runs of PATH and PATH_B)."),
    out: Path | None = typer.Option(None, "--out", help="Write the HTML report here."),
    as_json: bool = typer.Option(False, "--json", help="Print the report's content as JSON."),
    parquet: Path | None = typer.Option(None, "--parquet", help="Also export the records as DIR/<run>.parquet."),
    no_triage_file: bool = typer.Option(False, "--no-triage-file", help="Do not write runs/<run>/triage.jsonl."),
) -> None:
    """Explain a run: per-component curves, verdict timeline, correlations, advantage shares, task triage
    and the example transcripts behind every alarm. Two PATHs compare two runs."""
    from rewardpipe.monitoring.html import render_comparison, render_report
    from rewardpipe.monitoring.report import compare_reports

    if len(paths) > 2:
        usage_fail(f"give one PATH, or two to compare, not {len(paths)}")
    if len(run_id) > len(paths) and not (len(paths) == 1 and len(run_id) == 2):
        usage_fail("give --run-id at most once per PATH")
    if out is None and not as_json and parquet is None:
        usage_fail("say where the report goes: --out report.html, --json, or --parquet DIR")
    check_output_file(out, "--out", [p for p in paths if not p.startswith("s3://")])
    check_output_dir(parquet, "--parquet")
    if len(paths) == 1 and len(run_id) == 2:
        paths = [paths[0], paths[0]]  # two runs of one store
    ids: list[str | None] = [*run_id, *[None] * (len(paths) - len(run_id))]
    if len(paths) == 2 and len(run_id) == 1:
        ids = [run_id[0], run_id[0]]
    if len(paths) == 2 and ids[0] == ids[1] and _same_place(*paths):
        which = f"run '{ids[0]}'" if ids[0] is not None else "the only run"
        usage_fail(
            f"both sides of the comparison are {which} of {paths[0]}: compare two runs (PATH PATH_B, or one store "
            f"with --run-id A --run-id B)"
        )
    failed_writes: list[str] = []
    reports = [
        _one_run(
            p,
            r,
            parquet / f"run{i}" if parquet and len(paths) == 2 else parquet,
            not no_triage_file,
            as_json,
            failed_writes,
        )
        for i, (p, r) in enumerate(zip(paths, ids, strict=False))
    ]
    if len(reports) == 2:
        data = compare_reports(*reports)
        page = render_comparison(data)
    else:
        data = reports[0]
        page = render_report(data)
        warn_of_run(data["warnings"])
    if out is not None:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(page, encoding="utf-8")
        except OSError as exc:
            fail(f"cannot write {out}: {exc}")
        note(f"report: {out} ({len(page.encode('utf-8')) / 1024:.0f} KiB)")
    if as_json:  # one ASCII line: every control or non-ASCII character a model wrote is a \u escape
        write_json_line(data)
    if failed_writes:  # the report is out; what it was to leave in the store is not, and the exit status says so
        fail(f"could not write {', '.join(failed_writes)} (see above); --no-triage-file skips it")
