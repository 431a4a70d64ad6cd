"""`rewardpipe run`, `rewardpipe score`, `rewardpipe doctor`: the main job and its companions."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rewardpipe.cli.app import app
from rewardpipe.models import InputFileError, Rollout, Task, load_rollouts, load_tasks, parse_jsonl

console = Console(stderr=True)
# Piped output (CI logs, `make demo | tee`) gets a table wide enough not to truncate component names.
out = Console(width=None if Console().is_terminal else 130)


class PolicyName(str, Enum):
    scripted = "scripted"
    replay = "replay"
    openai = "openai"


class SimulatorName(str, Enum):
    rule = "rule"
    openai = "openai"


def _fail(message: str, code: int = 1) -> None:
    console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(code)


def _store_all(store: Any, records: list) -> int:
    """Write every record; a record the store refuses (an id too long for a key) is reported, not fatal."""
    from rewardpipe.store import StoreError

    refused = 0
    for record in records:
        try:
            store.put_record(record)
        except (ValueError, StoreError) as exc:
            refused += 1
            console.print(f"[red]not stored[/] {escape(record.rollout_id[:80])}: {escape(str(exc))}", soft_wrap=True)
    return refused


def _transcript_writer(store: Any):
    """``on_transcript`` for the runner: store each transcript; a refused one is reported, never fatal."""
    from rewardpipe.store import StoreError

    def write(transcript) -> None:
        try:
            store.put_transcript(transcript)
        except (ValueError, StoreError) as exc:
            console.print(f"[yellow]transcript not stored[/] {escape(transcript.rollout_id[:80])}: {escape(str(exc))}",
                          soft_wrap=True)

    return write


def _load_tasks_or_exit(path: Path) -> list[Task]:
    try:
        return load_tasks(path)
    except FileNotFoundError:
        _fail(f"task file not found: {path}")
    except InputFileError as exc:
        _fail(str(exc))
    raise AssertionError("unreachable")


def _parse_weights(pairs: list[str]) -> dict[str, float]:
    weights = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        try:
            if not sep:
                raise ValueError
            weights[name.strip()] = float(value)
        except ValueError:
            _fail(f"--weight must look like NAME=NUMBER, got '{pair}'")
    return weights


def _reward(name: str, weight: list[str]):
    from rewardpipe.rewards import EPISODE_REWARDS, get_reward

    if name not in EPISODE_REWARDS:
        _fail(f"--reward {name} scores single-turn samples (use it through the Nova reward Lambda or "
              f"rewardpipe.single_turn); episodes against a task's hidden tests use: {', '.join(sorted(EPISODE_REWARDS))}")
    try:
        return get_reward(name, _parse_weights(weight))
    except ValueError as exc:
        _fail(str(exc))


def _progress() -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True, disable=not console.is_terminal)


def _thresholds(dead_fraction: float, recover_fraction: float, consecutive: int, error_rate: float, min_groups: int):
    from pydantic import ValidationError

    from rewardpipe.monitoring import Thresholds

    try:
        return Thresholds(dead_fraction=dead_fraction, recover_fraction=recover_fraction,
                          raise_after=consecutive, error_rate=error_rate, min_groups=min_groups)
    except ValidationError as exc:
        _fail(f"bad monitor thresholds: {exc.errors()[0]['loc'][0] if exc.errors()[0]['loc'] else ''} "
              f"{exc.errors()[0]['msg']}")


@app.command()
def run(
    tasks: Path = typer.Option(..., "--tasks", help="Task JSONL file."),
    policy: PolicyName = typer.Option(PolicyName.scripted, help="Who plays the model."),
    group_size: int = typer.Option(8, "--group-size", "-k", min=1, help="Rollouts per group (GRPO's K)."),
    steps: int = typer.Option(3, min=1, help="Training steps to simulate."),
    out_dir: str = typer.Option(".", "--out", help="Store root: a directory, or s3://bucket/prefix (records go under runs/<run_id>/)."),
    run_id: Optional[str] = typer.Option(None, help="Run id (default: a UTC timestamp)."),
    groups_per_step: int = typer.Option(12, min=1, help="Groups (prompts) per step, round-robin over tasks."),
    max_turns: int = typer.Option(6, min=1, help="Assistant turn limit per rollout."),
    reward_name: str = typer.Option("ask_before_coding", "--reward", help="Reward to score with."),
    weight: list[str] = typer.Option([], help="Override a component weight: NAME=VALUE (repeatable)."),
    seed: int = typer.Option(0, help="Seed of the scripted policy."),
    collapse_from_step: Optional[int] = typer.Option(
        None, help="Scripted policy only: from this step on every rollout guesses (simulates a collapse)."),
    rollouts: Optional[Path] = typer.Option(None, help="Recorded rollouts to replay (policy=replay)."),
    base_url: Optional[str] = typer.Option(None, envvar="REWARDPIPE_POLICY_BASE_URL", help="Policy endpoint."),
    model: Optional[str] = typer.Option(None, envvar="REWARDPIPE_POLICY_MODEL", help="Policy model name."),
    simulator: SimulatorName = typer.Option(SimulatorName.rule, help="User simulator."),
    sim_base_url: Optional[str] = typer.Option(None, envvar="REWARDPIPE_SIM_BASE_URL"),
    sim_model: Optional[str] = typer.Option(None, envvar="REWARDPIPE_SIM_MODEL"),
    workers: Optional[int] = typer.Option(None, min=1, help="Code-execution workers (default: cores)."),
    dead_fraction: float = typer.Option(0.9, help="A component is dead when this fraction of groups has zero variance."),
    recover_fraction: float = typer.Option(0.5, help="...and alive again below this fraction (hysteresis)."),
    consecutive: int = typer.Option(1, min=1, help="Dead steps in a row before alarming."),
    min_groups: int = typer.Option(4, min=1, help="Groups with >= 2 scored rollouts needed for a verdict."),
    max_error_rate: float = typer.Option(0.1, help="Alarm when at least this fraction of a step's rollouts are errors."),
    plot: Optional[Path] = typer.Option(None, help="Also draw the per-component variance chart to this file (.png/.svg)."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary instead of tables."),
) -> None:
    """The main job: K rollouts per task per step, scored, stored, and watched for dead components."""
    from rewardpipe.execution import get_executor
    from rewardpipe.policies import OpenAIPolicy, ReplayPolicy, ScriptedPolicy
    from rewardpipe.runner import plan_step, run_slots, slots_from_rollouts, unknown_task_record
    from rewardpipe.simulator import OpenAISimulator, RuleBasedSimulator
    from rewardpipe.store import open_store

    task_list = _load_tasks_or_exit(tasks)
    reward = _reward(reward_name, weight)
    thresholds = _thresholds(dead_fraction, recover_fraction, consecutive, max_error_rate, min_groups)
    run_id = run_id or datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    store = open_store(out_dir)

    replay_slots = None
    refused_early = 0
    if policy is PolicyName.scripted:
        chosen: Any = ScriptedPolicy(seed=seed, collapse_from_step=collapse_from_step)
    elif policy is PolicyName.replay:
        if rollouts is None:
            _fail("--policy replay needs --rollouts FILE")
        try:
            recorded = load_rollouts(rollouts)
            chosen = ReplayPolicy(recorded)
        except (FileNotFoundError, InputFileError, ValueError) as exc:
            _fail(str(exc))
        replay_slots, unknown = slots_from_rollouts(recorded, {t.task_id: t for t in task_list})
        for rollout in unknown:
            refused_early = _store_all(store, [unknown_task_record(rollout, run_id, reward)])
    else:
        if not base_url or not model:
            _fail("--policy openai needs --base-url and --model (or REWARDPIPE_POLICY_BASE_URL/_MODEL)")
        chosen = OpenAIPolicy(base_url, model)
    if simulator is SimulatorName.openai:
        if not sim_base_url or not sim_model:
            _fail("--simulator openai needs --sim-base-url and --sim-model")
        sim: Any = OpenAISimulator(sim_base_url, sim_model)
    else:
        sim = RuleBasedSimulator()

    from rewardpipe.monitoring import ConsoleAlarmSink, StoreAlarmSink
    from rewardpipe.monitoring import MonitorState, load_state, monitor_step, state_key

    # Alarms go, as JSON, beside the records (the local stand-in for SNS) and are listed in the summary;
    # an interactive terminal also sees each one the moment its step ends.
    live = not as_json and console.is_terminal
    sinks: list[Any] = [StoreAlarmSink(store, run_id)] + ([ConsoleAlarmSink(console)] if live else [])
    # Running a run id again re-scores it from scratch: start the monitor's hysteresis afresh, or every step
    # would count as a replay of the saved state and no alarm would be raised a second time.
    _, state_problem = load_state(store, run_id)  # a corrupt state is kept aside and replaced, never a crash
    if state_problem is not None:
        console.print(f"{state_problem.key}: {state_problem.reason}", markup=False, soft_wrap=True)
    if store.get_json(state_key(run_id), default=None) is not None:
        console.print(f"run id '{run_id}' exists in {out_dir}: its records and monitor state are replaced")
    store.put_json(state_key(run_id), MonitorState(run_id=run_id).to_dict())
    executor = get_executor()
    step_numbers = sorted({s.step for s in replay_slots}) if replay_slots is not None else list(range(steps))
    reports, all_alarms = [], []
    refused = refused_early
    monitor_state = MonitorState(run_id=run_id)
    with _progress() as bar:
        for step in step_numbers:
            slots = ([s for s in replay_slots if s.step == step] if replay_slots is not None
                     else plan_step(task_list, step, groups_per_step, group_size))
            handle = bar.add_task(f"step {step}", total=len(slots))

            def on_progress(phase: str, done: int, total: int, handle=handle) -> None:
                bar.update(handle, description=f"step {step}: {phase}", completed=done, total=total)

            records = run_slots(slots, policy=chosen, simulator=sim, executor=executor, reward=reward,
                                run_id=run_id, max_turns=max_turns, workers=workers,
                                conversation_threads=8 if policy is PolicyName.openai else 1, progress=on_progress,
                                on_transcript=_transcript_writer(store))
            refused += _store_all(store, records)
            result = monitor_step(store, run_id, step, thresholds, sinks)
            reports.extend(result.steps)
            all_alarms.extend(result.alarms)
            monitor_state = result.state
            bar.remove_task(handle)

    for endpoint_user in (chosen, sim):
        if hasattr(endpoint_user, "close"):
            endpoint_user.close()
    if plot is not None:
        from rewardpipe.monitoring import MonitorResult
        from rewardpipe.monitoring.plots import plot_run

        # The chart shows what the steps already reported; no need to read and monitor the records again.
        whole_run = MonitorResult(run_id=run_id, thresholds=thresholds, steps=reports, alarms=all_alarms,
                                  state=monitor_state)
        try:
            plot_run(whole_run, plot)
        except ValueError as exc:
            _fail(f"--plot: {exc}")
        console.print(f"chart written to {plot}")
    if as_json:
        out.print_json(json.dumps({"run_id": run_id, "store": str(out_dir),
                                   "steps": [r.to_dict() for r in reports],
                                   "alarms": [a.to_dict() for a in all_alarms]}))
    else:
        _print_run_summary(run_id, out_dir, reports, all_alarms)
    if refused:
        _fail(f"{refused} record(s) could not be stored (see above)")


def _print_run_summary(run_id: str, location: str, reports: list, alarms: list) -> None:
    table = Table(title=f"run {run_id}: per-component within-group variance", show_lines=False)
    for column in ("step", "component", "mean", "batch std", "within-group std", "zero-var groups", "verdict"):
        table.add_column(column, justify="left" if column in ("component", "verdict") else "right",
                         no_wrap=column in ("component", "verdict"))
    for report in reports:
        rows = [*report.components.values(), report.aggregate]
        for index, stats in enumerate(rows):
            verdict = stats.verdict if not stats.cause else f"{stats.verdict} ({stats.cause})"
            style = "red" if stats.verdict == "dead" else ("yellow" if stats.verdict != "ok" else "green")
            step_label = str(report.step) if index == 0 else ""
            table.add_row(step_label, stats.name, _fmt(stats.mean), _fmt(stats.std), _fmt(stats.within_group_std_mean),
                          _fmt(stats.zero_variance_group_fraction, pct=True), f"[{style}]{verdict}[/]",
                          end_section=index == len(rows) - 1)
    out.print(table)
    errors = sum(r.errors for r in reports)
    total = sum(r.records for r in reports)
    out.print(f"{total} rollouts, {errors} infrastructure errors (excluded from the statistics)")
    if alarms:
        out.print(f"[bold red]{len(alarms)} alarm(s):[/]")
        for alarm in alarms:
            out.print(f"  [red]step {alarm.step} · {alarm.component} · {alarm.kind}[/]: {alarm.message}")
    else:
        out.print("[green]no alarms[/]")
    where = f"{location.rstrip('/')}/runs/{run_id}/"
    out.print(f"records and alarms written under {where}")


def _fmt(value: Any, pct: bool = False) -> str:
    if value is None:
        return "–"
    return f"{value:.0%}" if pct else f"{value:.3f}"


@app.command()
def score(
    rollouts_file: Path = typer.Argument(..., metavar="ROLLOUTS.jsonl", help="Recorded rollouts."),
    tasks: Path = typer.Option(..., "--tasks", help="Task JSONL file."),
    out_dir: str = typer.Option(".", "--out", help="Store root: a directory, or s3://bucket/prefix (records go under runs/<run_id>/)."),
    run_id: str = typer.Option("scored", help="Run id the records are filed under."),
    reward_name: str = typer.Option("ask_before_coding", "--reward"),
    weight: list[str] = typer.Option([], help="Override a component weight: NAME=VALUE (repeatable)."),
    workers: Optional[int] = typer.Option(None, min=1),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON record per line."),
) -> None:
    """Score recorded rollouts as they are. A bad line is reported and skipped; the rest are scored (exit 1)."""
    from rewardpipe.execution import get_executor
    from rewardpipe.runner import score_rollouts
    from rewardpipe.store import open_store

    task_list = _load_tasks_or_exit(tasks)
    reward = _reward(reward_name, weight)
    good: list[Rollout] = []
    bad_lines = 0
    try:
        lines = rollouts_file.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        _fail(f"rollouts file not found: {rollouts_file}")
    for lineno, line in enumerate(lines, start=1):
        try:
            # parse_jsonl names the line; feed it one line at a time so one bad line costs one rollout.
            good.extend(parse_jsonl([line], Rollout, f"{rollouts_file}:{lineno}"))
        except InputFileError as exc:
            bad_lines += 1
            console.print(f"[red]skipped[/] {escape(str(exc).replace(':1:', '', 1))}", soft_wrap=True)
    store = open_store(out_dir)
    records = score_rollouts(good, {t.task_id: t for t in task_list}, executor=get_executor(), reward=reward,
                             run_id=run_id, workers=workers, on_transcript=_transcript_writer(store))
    refused = _store_all(store, records)
    for record in records:
        if as_json:
            out.print(record.to_json(), soft_wrap=True, highlight=False)
    if not as_json:
        scored = sum(r.status == "scored" for r in records)
        out.print(f"scored {scored}, errors {len(records) - scored}, skipped lines {bad_lines} → {out_dir}")
    if bad_lines or refused:
        raise typer.Exit(1)


@app.command()
def doctor(
    tasks: Path = typer.Option(..., "--tasks", help="Task JSONL file."),
    reward_name: str = typer.Option("ask_before_coding", "--reward"),
    workers: Optional[int] = typer.Option(None, min=1),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Before training: prove each task can be scored and each component can move. Exit 1 naming broken tasks."""
    from rewardpipe.doctor import diagnose
    from rewardpipe.execution import get_executor

    task_list = _load_tasks_or_exit(tasks)
    reward = _reward(reward_name, [])
    diagnoses = diagnose(task_list, reward, get_executor(), workers=workers)
    broken = [d for d in diagnoses if not d.ok]
    if as_json:
        out.print_json(json.dumps({"tasks": len(diagnoses), "broken": [d.task_id for d in broken],
                                   "diagnoses": [d.to_dict() for d in diagnoses]}))
    else:
        for diagnosis in broken:
            out.print(f"[red]✗ {diagnosis.task_id}[/]")
            for problem in diagnosis.problems:
                out.print(f"    {problem}")
        for diagnosis in diagnoses:  # weak test shapes: scorable, but gameable (docs/tasks.md)
            for warning in diagnosis.warnings:
                out.print(f"[yellow]! {escape(diagnosis.task_id)}[/]: {escape(warning)}", highlight=False)
        out.print(f"{len(diagnoses) - len(broken)}/{len(diagnoses)} tasks OK" +
                  (f"; broken: {', '.join(d.task_id for d in broken)}" if broken else ""))
    if broken:
        raise typer.Exit(1)
