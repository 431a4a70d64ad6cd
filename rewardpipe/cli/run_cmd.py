"""`rewardpipe run`, `rewardpipe score`, `rewardpipe doctor`: the main job and its companions."""

from __future__ import annotations

import math
import sys
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rewardpipe.cli.application import (
    TerminalAlarmSink,
    app,
    error_line,
    fail,
    markup_safe,
    note,
    printable,
    usage_fail,
    when_stopped,
    write_json_line,
)
from rewardpipe.cli.common import (
    DEFAULT_ENV,
    cap_workers,
    check_output_file,
    check_run_id,
    check_threshold_names,
    environment_or_fail,
    episode_reward,
    exit_for_losses,
    file_sha256,
    load_tasks_or_fail,
    new_manifest,
    nothing_scored,
    open_run,
    parse_options,
    resume_hint,
    save_manifest,
    utc_now,
    warn_of_run,
    with_threshold_options,
)
from rewardpipe.cli.progress import count_lines, progress_bars
from rewardpipe.environment import MAX_TURNS
from rewardpipe.models import MAX_STEP, InputFileError, Rollout, load_rollouts

# Bounds far beyond any GRPO setup (K is 4-64 in practice), so a slip of the keyboard is a usage error
# instead of a run that cannot finish (or an overflow deep inside).
MAX_GROUP_SIZE = 4096
MAX_GROUPS_PER_STEP = 1_000_000
# An endpoint request waits at most an hour, and is retried at most ten times (backoff capped at a minute):
# beyond that a dead endpoint would hold the run for days before it wrote its error records.
MAX_ENDPOINT_TIMEOUT_S = 3600.0
MAX_ENDPOINT_RETRIES = 10

# Objects of a played step written at once: creating a file waits on the disk's journal (an S3 PUT on the
# network) far longer than it computes, so writes overlap; this also keeps the store ahead of the turn loop.
STORE_WRITERS = 8
WORKERS_HELP = "Code-execution workers (default: cores; at most 64)."

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


def _positive(name: str, value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        usage_fail(f"{name} must be a positive number, got {value}")


def _chat_client(base_url: str, model: str, timeout: float, retries: int) -> Any:
    from rewardpipe.openai_client import ChatClient

    try:
        return ChatClient(base_url, model, timeout_s=timeout, max_retries=retries)
    except ValueError as exc:
        usage_fail(str(exc))


def _complete(run_id: str, stored: int) -> None:
    """Once every record is stored, a stop (the output's reader gone while the table prints) says so: it offered
    `--resume` for a run with nothing left to do."""
    when_stopped(lambda: f"run '{run_id}' is complete ({stored} record(s) stored by this command): nothing to resume")


@app.command()
@with_threshold_options
def run(
    tasks: Path = typer.Option(..., "--tasks", help="Task JSONL file (rows of the environment's task model)."),
    env_name: str = typer.Option(
        DEFAULT_ENV,
        "--env",
        help="Environment: a built-in name, package.module:ATTR, "
        "path/file.py:ATTR, or a short name an installed package registers.",
    ),
    env_option: list[str] = typer.Option(
        [], "--env-option", help="An option of the environment: NAME=VALUE (repeatable)."
    ),
    policy: PolicyName = typer.Option(PolicyName.scripted, help="Who plays the model."),
    group_size: int = typer.Option(
        8, "--group-size", "-k", min=1, max=MAX_GROUP_SIZE, help="Rollouts per group (GRPO's K)."
    ),
    steps: int = typer.Option(3, min=1, max=MAX_STEP + 1, help="Training steps to simulate."),
    out_dir: str = typer.Option(
        ".", "--out", help="Store root: a directory, or s3://bucket/prefix (records go under runs/<run_id>/)."
    ),
    run_id: str | None = typer.Option(
        None,
        help=(
            "Run id (default: the UTC time, with -2, -3... if a run of the same second took it). One run id is one "
            "experiment."
        ),
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Delete everything stored under the run id first."),
    resume: bool = typer.Option(
        False, "--resume", help="Continue the run id with the same configuration; rollouts already stored are skipped."
    ),
    groups_per_step: int = typer.Option(
        12, min=1, max=MAX_GROUPS_PER_STEP, help="Groups (prompts) per step, round-robin over tasks."
    ),
    max_turns: int | None = typer.Option(
        None, min=1, max=MAX_TURNS, help="Assistant turn limit per rollout (default: the environment's)."
    ),
    reward_name: str | None = typer.Option(
        None, "--reward", help="Reward to score with (default: the environment's); any reference form, like --env."
    ),
    weight: list[str] = typer.Option([], help="Override a component weight: NAME=VALUE (repeatable)."),
    seed: int = typer.Option(0, help="Seed of the scripted policy and of the environment's randomness."),
    collapse_from_step: int | None = typer.Option(
        None,
        min=0,
        max=MAX_STEP,
        help="Scripted policy only: from this step on every rollout plays the environment's collapse_scenario "
        "(simulates a collapse).",
    ),
    rollouts: Path | None = typer.Option(None, help="Recorded rollouts to replay (policy=replay)."),
    base_url: str | None = typer.Option(None, envvar="REWARDPIPE_POLICY_BASE_URL", help="Policy endpoint."),
    model: str | None = typer.Option(None, envvar="REWARDPIPE_POLICY_MODEL", help="Policy model name."),
    simulator: SimulatorName = typer.Option(
        SimulatorName.rule,
        help="Who plays the environment's user: rule (the "
        "environment itself) or openai (--env-option simulator=openai: an LLM, "
        "for an environment that offers one).",
    ),
    sim_base_url: str | None = typer.Option(
        None, envvar="REWARDPIPE_SIM_BASE_URL", help="The chat endpoint an environment that calls an LLM uses."
    ),
    sim_model: str | None = typer.Option(
        None, envvar="REWARDPIPE_SIM_MODEL", help="The model an environment that calls an LLM asks (at --sim-base-url)."
    ),
    endpoint_timeout: float = typer.Option(
        60.0, "--endpoint-timeout", max=MAX_ENDPOINT_TIMEOUT_S, help="Seconds per policy/simulator request."
    ),
    endpoint_retries: int = typer.Option(
        2, "--endpoint-retries", min=0, max=MAX_ENDPOINT_RETRIES, help="Retries of a failed endpoint request."
    ),
    workers: int | None = typer.Option(None, min=1, help=WORKERS_HELP),
    thresholds: Any = None,
    spill: Path | None = typer.Option(
        None, help="Where records the store refuses are kept (default: ./rewardpipe-unstored-<run>-<time>.jsonl)."
    ),
    plot: Path | None = typer.Option(None, help="Also draw the per-component variance chart to this file (.png/.svg)."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary instead of tables."),
) -> None:
    """The main job: K rollouts per task per step of any environment, scored, stored, and watched for dead
    components."""
    from rewardpipe.episode import EnvServices, env_tool_schemas
    from rewardpipe.policies import OpenAIPolicy, ReplayPolicy
    from rewardpipe.runner import plan_step, run_slots, slots_from_rollouts, unknown_task_record
    from rewardpipe.store import StoreError, rollout_key, run_prefix

    # Every input is checked before anything is written.
    if overwrite and resume:
        usage_fail("--overwrite and --resume cannot be combined")
    generated_id = run_id is None
    run_id = check_run_id(datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") if run_id is None else run_id)
    options = parse_options(env_option, "--env-option")
    if simulator is SimulatorName.openai:
        options.setdefault("simulator", "openai")
    env = environment_or_fail(env_name, options)
    reward = episode_reward(reward_name, weight, env)  # a usage error (exit 2) before the task file's rows
    task_list = load_tasks_or_fail(tasks, env=env, runnable=True)
    thresholds = thresholds.for_reward(reward)
    check_threshold_names(thresholds, reward)
    _positive("--endpoint-timeout", endpoint_timeout)
    workers = cap_workers(workers)
    if plot is not None and plot.suffix.lower() not in (".png", ".svg", ".pdf"):
        usage_fail(f"--plot must end in .png, .svg or .pdf, got '{plot}'")
    check_output_file(plot, "--plot", [tasks, rollouts])
    check_output_file(spill, "--spill", [tasks, rollouts])
    turns = max_turns or env.max_turns
    configuration: dict[str, Any] = {
        "policy": policy.value,
        "group_size": group_size,
        "groups_per_step": groups_per_step,
        "max_turns": turns,
        "simulator": simulator.value,
    }
    if env_option:
        configuration["env_options"] = options
    replay_slots = None
    unknown: list[Rollout] = []
    if policy is PolicyName.scripted:
        try:
            chosen: Any = env.scripted_policy(seed=seed, collapse_from_step=collapse_from_step)
        except ValueError as exc:
            usage_fail(str(exc))
        _refuse_unscripted_tasks(env, task_list)
        configuration.update(seed=seed, collapse_from_step=collapse_from_step)
    elif policy is PolicyName.replay:
        if rollouts is None:
            usage_fail("--policy replay needs --rollouts FILE")
        try:
            recorded = load_rollouts(rollouts)
            chosen = ReplayPolicy(recorded)
        except FileNotFoundError:
            fail(f"rollouts file not found: {rollouts}")
        except (InputFileError, ValueError) as exc:
            fail(str(exc))
        if not recorded:
            fail(f"{rollouts}: contains no rollouts")
        replay_slots, unknown = slots_from_rollouts(recorded, {t.task_id: t for t in task_list})
        configuration["rollouts_sha256"] = file_sha256(rollouts)
    else:
        if not base_url or not model:
            usage_fail("--policy openai needs --base-url and --model (or REWARDPIPE_POLICY_BASE_URL/_MODEL)")
        chosen = OpenAIPolicy(
            base_url,
            model,
            system_prompt=env.system_prompt,
            client=_chat_client(base_url, model, endpoint_timeout, endpoint_retries),
            tools=env_tool_schemas(env),
        )  # an environment that offers tools
        configuration.update(base_url=base_url, model=model)
    chat_client = None
    if simulator is SimulatorName.openai or env.calls_llm:
        if not sim_base_url or not sim_model:
            usage_fail(
                f"environment '{env.name}' calls an LLM: give --sim-base-url and --sim-model "
                f"(or REWARDPIPE_SIM_BASE_URL/_MODEL)"
            )
        chat_client = _chat_client(sim_base_url, sim_model, endpoint_timeout, endpoint_retries)
        configuration.update(sim_base_url=sim_base_url, sim_model=sim_model)
    services = EnvServices(seed=seed, chat=chat_client.complete if chat_client is not None else None)
    manifest = new_manifest(
        run_id=run_id,
        command="run",
        configuration=configuration,
        tasks_file=tasks,
        reward=reward,
        steps=steps,
        env=env,
        env_reference=env_name,
        reward_reference=reward_name,
    )
    # The runner keeps ``workers`` executions in flight; an executor sized to match serves them all at once
    # (the process-wide one when its size already matches, so a process running several jobs keeps its fork
    # servers). They start now, while the store is opened and the run claimed. An environment that runs
    # no code starts no sandbox.
    executor, own_executor = _executor(env, workers)
    from rewardpipe.monitoring import MonitorState, StoreAlarmSink, load_state, monitor_step, state_key
    from rewardpipe.monitoring.messages import run_warnings

    try:
        store, already, writer = open_run(
            out_dir, manifest, overwrite=overwrite, resume=resume, spill=spill, generated_id=generated_id
        )
    except BaseException:
        if own_executor:
            executor.close()
        raise
    run_id = manifest.run_id  # (a default id a run of the same second had taken is made unique)
    alarm_failures = 0
    unchecked_steps: list[int] = []
    try:
        _, state_problem = load_state(store, run_id)  # a corrupt state is kept aside and replaced, never a crash
        if state_problem is not None:
            error_line(f"{state_problem.key}: {state_problem.reason}")
        if not already:  # a fresh run (or one just overwritten) starts a fresh hysteresis; a resumed one carries on
            store.put_json(state_key(run_id), MonitorState(run_id=run_id).to_dict())
    except StoreError as exc:
        writer.failed("the monitor state", exc)
    writer.write(
        r
        for r in (unknown_task_record(u, run_id, reward) for u in unknown)
        if rollout_key(run_id, r.step, r.group_id, r.rollout_id) not in already
    )

    # Alarms go, as JSON, beside the records (the local stand-in for SNS) and are listed in the summary;
    # an interactive terminal also sees each one the moment its step ends.
    live = not as_json and console.is_terminal
    sinks: list[Any] = [StoreAlarmSink(store, run_id)] + ([TerminalAlarmSink(console, store.location)] if live else [])
    step_numbers = sorted({s.step for s in replay_slots}) if replay_slots is not None else list(range(steps))
    reports: list[Any] = []
    all_alarms: list[Any] = []
    skipped = 0
    monitor_state = MonitorState(run_id=run_id)
    metrics_failed = _MetricsFailed()

    def finish_step(step: int, records: list, transcripts: list, handle: Any) -> None:
        """Store a played step, check it, and mark it finished. Runs on the finisher thread, one step at a
        time and in order, while the next step is played: the sandbox never waits for the store or the
        monitor. Nothing here may end the run: a record the store refuses is spilled, a check that fails
        is named, and the completion marker is written last (after the check, so a `monitor` running
        meanwhile never judges, or writes alarms for, a step the run has not checked yet)."""
        nonlocal alarm_failures, monitor_state
        spilled_before = writer.spilled + writer.lost
        writer.write_transcripts(transcripts, workers=STORE_WRITERS)
        writer.write(records, workers=STORE_WRITERS)
        missing = writer.spilled + writer.lost - spilled_before
        result = None
        if missing:
            # Judged on the records the store holds, a step missing some could raise alarms its complete
            # self never would: it is checked when --resume has stored the rest.
            error_line(f"step {step}: not checked: {missing} of its records are not in the store")
            unchecked_steps.append(step)
        else:
            try:
                result = monitor_step(store, run_id, step, thresholds, sinks)
            except Exception as exc:  # noqa: BLE001 - the records are stored; say the check failed
                error_line(f"step {step}: the monitor could not check this step: {exc}")
                unchecked_steps.append(step)
        if result is not None:
            for item in result.unreadable:
                if item["key"].startswith("alarm-delivery:"):
                    alarm_failures += 1
                    error_line(f"step {step}: alarm not delivered ({item['key'].split(':', 1)[1]}): {item['reason']}")
                else:
                    error_line(f"step {step}: unreadable object {item['key']}: {item['reason']}")
            for alarm in result.already_delivered:
                note(
                    f"step {alarm.step}: alarm {alarm.component}/{alarm.kind} was raised before this run was "
                    f"interrupted; not raised again"
                )
            reports.extend(result.steps)
            all_alarms.extend(result.alarms)
            monitor_state = result.state
        if not missing:  # a step missing records in the store is not finished
            try:
                store.mark_step_finished(run_id, step, stored=len(records))
            except Exception as exc:  # noqa: BLE001 - reported, exit 1; monitor then sees the step as unfinished
                writer.failed(f"step {step}'s completion marker", exc)
        bar.remove_task(handle)

    finisher = ThreadPoolExecutor(1, thread_name_prefix="rewardpipe-finish-step")
    finishing: Future | None = None
    try:
        with progress_bars(as_json, console) as bar:
            for step in step_numbers:
                if writer.halted:  # nothing more can be kept: playing on would only lose more
                    writer.unplayed = step_numbers[step_numbers.index(step) :]
                    error_line(f"stopped before step {step}: {writer.halted}")
                    break
                planned = (
                    [s for s in replay_slots if s.step == step]
                    if replay_slots is not None
                    else plan_step(task_list, step, groups_per_step, group_size)
                )
                slots = [s for s in planned if rollout_key(run_id, s.step, s.group_id, s.rollout_id) not in already]
                skipped += len(planned) - len(slots)
                handle = bar.add_task(f"step {step}", total=len(slots))

                def on_progress(phase: str, done: int, total: int, handle=handle, step=step) -> None:
                    bar.update(handle, description=f"step {step}: {phase}", completed=done, total=total)

                transcripts: list = []
                records = run_slots(
                    slots,
                    policy=chosen,
                    env=env,
                    executor=executor,
                    reward=reward,
                    run_id=run_id,
                    max_turns=turns,
                    workers=workers,
                    services=services,
                    conversation_threads=8 if policy is PolicyName.openai else 1,
                    progress=on_progress,
                    on_transcript=transcripts.append,
                )
                metrics_failed.update(records)
                if finishing is not None:
                    finishing.result()  # at most one step waits to be stored: memory stays one step deep
                finishing = finisher.submit(finish_step, step, records, transcripts, handle)
            if finishing is not None:
                finishing.result()
    finally:
        finisher.shutdown(wait=True)  # every played step is stored before the writer closes
        writer.close()
        if own_executor:
            executor.close()
    for endpoint_user in (chosen, chat_client):
        if endpoint_user is not None and hasattr(endpoint_user, "close"):
            endpoint_user.close()
    if not (writer.spilled or writer.lost or writer.halted):  # a run missing records is not finished
        manifest.finished_at = utc_now()
        save_manifest(writer, manifest)
        _complete(manifest.run_id, writer.stored)
    if skipped:
        note(f"resumed run '{run_id}': {skipped} rollout(s) already stored were skipped")
    plot_failed = False
    if plot is not None:
        from rewardpipe.monitoring import MonitorResult
        from rewardpipe.monitoring.plots import plot_run

        # The chart shows what the steps already reported; no need to read and monitor the records again.
        whole_run = MonitorResult(
            run_id=run_id, thresholds=thresholds, steps=reports, alarms=all_alarms, state=monitor_state
        )
        try:
            plot_run(whole_run, plot)
            note(f"chart written to {plot}")
        except (ValueError, OSError) as exc:
            error_line(f"--plot: {exc}")
            plot_failed = True  # the records are stored; the chart asked for is not, so the exit status says so
    if as_json:
        write_json_line(
            {
                "run_id": run_id,
                "store": str(out_dir),
                "manifest": manifest.to_dict(),
                "skipped_already_stored": skipped,
                **_not_stored(writer),
                "alarm_failures": alarm_failures,
                "unchecked_steps": unchecked_steps,
                "failed_writes": writer.failed_writes,
                "steps": [r.to_dict() for r in reports],
                "alarms": [a.to_dict() for a in all_alarms],
                "warnings": run_warnings(reports),
                "metrics_failed": {"rollouts": metrics_failed.rollouts, "first": metrics_failed.first},
            }
        )
    else:
        _print_run_summary(run_id, store.path_of(run_prefix(run_id)), reports, all_alarms)
        metrics_failed.say()
    warn_of_run(run_warnings(reports))
    exit_for_losses(writer, alarm_failures, unchecked_steps, resume=resume_hint("run", run_id, out_dir))
    if unknown:
        _report_unknown_tasks(Counter(str(u.task_id) for u in unknown), tasks)
    kinds: Counter[str] = Counter()
    for report in reports:
        kinds.update(report.error_kinds)
    failed = nothing_scored(sum(r.records for r in reports), sum(r.scored for r in reports), kinds, None)
    if plot_failed or unknown or failed:
        raise typer.Exit(1)


def _not_stored(writer: Any) -> dict[str, Any]:
    """What a `--json` summary says of the records and transcripts the store refused: spilled where, or lost."""
    return {
        "unstored": writer.spilled,
        "spill_file": str(writer.spill_path) if writer.spilled else None,
        "unstored_transcripts": writer.transcripts_spilled,
        "transcript_spill_file": str(writer.transcript_spill_path) if writer.transcripts_spilled else None,
        "lost": writer.lost,
        "stopped": writer.halted,
    }


class _MetricsFailed:
    """The rollouts whose environment's ``metrics()`` failed: each kept its score and said so only in its record's
    ``env_metrics_error``, which a run's summary never showed."""

    def __init__(self) -> None:
        self.rollouts = 0
        self.first: str | None = None

    def update(self, records: list) -> None:
        for record in records:
            error = (record.metrics or {}).get("env_metrics_error")
            if error:
                self.rollouts += 1
                self.first = self.first or f"{record.rollout_id}: {error}"

    def say(self) -> None:
        if self.rollouts:
            out.print(
                f"[yellow]{self.rollouts} rollout(s) whose environment's metrics() failed[/] (scored; their records "
                f"say env_metrics_error); e.g. {markup_safe(self.first)}",
                highlight=False,
                soft_wrap=True,
            )


# ids a summary names of one kind of problem (the counts are whole): a file of hostile ids stays one short line
_SUMMARY_IDS = 20


def _first_of(ids: Counter[str]) -> dict[str, Any]:
    """A summary's entry for rollouts (or tasks) with one problem: how many, and the first few ids, each cut."""
    return {"count": sum(ids.values()), "first": [name[:200] for name in list(ids)[:_SUMMARY_IDS]]}


def _report_unknown_tasks(unknown: Counter[str], tasks: Path | None) -> None:
    """A rollout naming a task the task file does not hold is stored as an ``unknown_task`` error record, and,
    like a bad line, is an input problem the exit status (1) reports: every rollout of a wrong ``--tasks``
    file came out an error record while the command said nothing and exited 0."""
    count = sum(unknown.values())
    names = ", ".join(repr(printable(name[:80])) for name in list(unknown)[:5])
    more = f" (and {len(unknown) - 5} more)" if len(unknown) > 5 else ""
    error_line(
        f"{count} rollout(s) name a task that {tasks or 'no task file'} does not hold: {names}{more}; they are "
        f"stored as unknown_task error records (the right --tasks file?)"
    )


def _report_unreplayed(rollouts: list[str], total: int, env_name: str) -> None:
    """Recordings the environment cannot replay (it answers otherwise than the recording, the conversation does
    not open as it does) are stored as ``replay_failed`` error records; like a bad line or an unknown task, they
    are an input problem the exit status (1) reports. With some rollouts scored, ``score`` said
    "errors: replay_failed 1" and exited 0, so a script took a partly unreplayable file for a scored one."""
    names = ", ".join(repr(printable(rollout[:80])) for rollout in rollouts[:5])
    more = f" (and {len(rollouts) - 5} more)" if len(rollouts) > 5 else ""
    error_line(
        f"{len(rollouts)} of {total} recorded rollout(s) could not be replayed through environment "
        f"'{printable(env_name)}': {names}{more}; they are stored as replay_failed error records (is it the "
        f"environment, version and --env-option they were recorded with? see each record's error message)"
    )


def _refuse_unscripted_tasks(env: Any, tasks: list[Any]) -> None:
    """``--policy scripted`` plays the environment's ``scenarios(task)``: a task it gives none for made every
    rollout of it a ``policy_error`` (and the error alarm sent the user to a policy endpoint there is none of).
    Such tasks are a usage error, before anything is written. A ``scenarios()`` that raises is left to the
    rollouts, whose error records say what it raised."""
    from rewardpipe.episode import env_scenarios

    bare = []
    for task in tasks:
        try:
            scenarios = env_scenarios(env, task)  # bounded by hook_timeout_s: a hung one hung the command
        except Exception:  # noqa: BLE001 - each rollout of the task records the exception (a timeout included)
            continue
        if not scenarios:
            bare.append(task.task_id[:80])
    if bare:
        more = f" and {len(bare) - 5} more" if len(bare) > 5 else ""
        named = ", ".join(f"'{task_id}'" for task_id in bare[:5]) + more
        usage_fail(
            f"--policy scripted plays the scenarios(task) of environment '{env.name}', which gives none for "
            f"{len(bare)} of {len(tasks)} task(s) ({named}): define scenarios(task) returning named ScriptedPolicy "
            f"players, one named 'reference' (see `rewardpipe doctor`), or play the model with --policy openai "
            f"(--base-url, --model) or --policy replay --rollouts FILE"
        )


def _executor(env: Any, workers: int | None) -> tuple[Any, bool]:
    if not env.runs_code:
        from rewardpipe.runner import NoSandbox

        return NoSandbox(), False
    from rewardpipe.execution.sandbox import executor_for

    executor, own = executor_for(workers)
    executor.warm_up(workers)
    return executor, own


def _print_run_summary(run_id: str, where: str, reports: list, alarms: list) -> None:
    table = Table(title=f"run {markup_safe(run_id)}: per-component within-group variance", show_lines=False)
    for column in ("step", "component", "mean", "batch std", "within-group std", "zero-var groups", "verdict"):
        table.add_column(
            column,
            justify="left" if column in ("component", "verdict") else "right",
            no_wrap=column in ("component", "verdict"),
        )
    for report in reports:
        rows = [*report.components.values(), report.aggregate]
        for index, stats in enumerate(rows):
            verdict = markup_safe(stats.verdict if not stats.cause else f"{stats.verdict} ({stats.cause})")
            style = {"dead": "red", "ok": "green", "dying": "magenta", "info": "blue"}.get(stats.verdict, "yellow")
            step_label = str(report.step) if index == 0 else ""
            table.add_row(
                step_label,
                markup_safe(stats.name),
                _fmt(stats.mean),
                _fmt(stats.std),
                _fmt(stats.within_group_std_mean),
                _fmt(stats.zero_variance_group_fraction, pct=True),
                f"[{style}]{verdict}[/]",
                end_section=index == len(rows) - 1,
            )
    out.print(table)
    errors = sum(r.errors for r in reports)
    total = sum(r.records for r in reports)
    kinds: Counter[str] = Counter()
    for report in reports:
        kinds.update(report.error_kinds)
    # "infrastructure errors" called a user's own hook or component that raised rewardpipe's failure; the
    # kinds say whose (a kind may be a user's explain_error's: markup-safe)
    named = "".join(f"; {kind} {count}" for kind, count in kinds.most_common())
    out.print(
        f"{total} rollouts, {errors} error records (excluded from the statistics{markup_safe(named)})",
        highlight=False,
    )
    if alarms:
        out.print(f"[bold red]{len(alarms)} alarm(s):[/]")
        for alarm in alarms:
            # soft_wrap: a long model-written reason is never wrapped into a line that looks like another example
            out.print(
                f"  [red]step {alarm.step} · {markup_safe(alarm.component)} · {alarm.kind}[/]: "
                f"{markup_safe(alarm.message)}",
                highlight=False,
                soft_wrap=True,
            )
            for example in alarm.examples[:1]:
                out.print(
                    f"    e.g. {markup_safe(example['rollout_id'])}: {markup_safe(example['reason'])}",
                    highlight=False,
                    soft_wrap=True,
                )
    else:
        out.print("[green]no alarms[/]")
    out.print(f"records and alarms written under {markup_safe(where)}", highlight=False)


def _fmt(value: Any, pct: bool = False) -> str:
    if value is None:
        return "–"
    return f"{value:.0%}" if pct else f"{value:.3f}"


def _has_a_line(path: Path) -> bool:
    """True once a non-blank line is seen (reads no further)."""
    from rewardpipe.models import UTF8_BOM, open_input

    with open_input(path) as fh:
        return any(line.removeprefix(UTF8_BOM.encode()).strip() for line in fh)


def _builtin_env_of(reward: Any) -> str | None:
    """The built-in environment whose own reward ``reward`` is (``score --reward ask_before_coding`` replays
    through it, as it always has); None for any other reward."""
    from rewardpipe.references import BUILTIN_ENVIRONMENTS, resolve_environment

    for name in BUILTIN_ENVIRONMENTS:
        if resolve_environment(name).reward.components == reward.components and name == reward.name:
            return name
    return None


@app.command()
def score(
    rollouts_file: Path = typer.Argument(
        ...,
        metavar="FILE",
        help="Recorded rollouts (with --env), or single-turn samples carrying their reference (with --reward).",
    ),
    tasks: Path | None = typer.Option(
        None,
        "--tasks",
        help="Task JSONL file (needed to replay an environment's rollouts, or for a reward that reads the task).",
    ),
    env_name: str | None = typer.Option(
        None,
        "--env",
        help="Replay the recorded rollouts through this "
        "environment (default when no --reward is given: ask_before_coding).",
    ),
    out_dir: str = typer.Option(
        ".", "--out", help="Store root: a directory, or s3://bucket/prefix (records go under runs/<run_id>/)."
    ),
    run_id: str = typer.Option("scored", help="Run id the records are filed under. One run id is one experiment."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Delete everything stored under the run id first."),
    resume: bool = typer.Option(
        False, "--resume", help="Continue the run id (same files); rollouts already stored are skipped."
    ),
    reward_name: str | None = typer.Option(
        None,
        "--reward",
        help="Reward: a built-in name, package.module:ATTR, "
        "path/file.py:ATTR or an installed short name. Without --env, the "
        "lines are single-turn samples: {messages, reference, ids optional}.",
    ),
    weight: list[str] = typer.Option([], help="Override a component weight: NAME=VALUE (repeatable)."),
    workers: int | None = typer.Option(None, min=1, help=WORKERS_HELP),
    batch_size: int = typer.Option(
        256, "--batch-size", min=1, help="Rollouts read, scored and written at a time (memory stays flat)."
    ),
    spill: Path | None = typer.Option(
        None, help="Where records the store refuses are kept (default: ./rewardpipe-unstored-<run>-<time>.jsonl)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON record per line."),
    summary: bool = typer.Option(
        False,
        "--summary",
        help='With --json: end the output with one {"summary": {...}} line (the counts, spills and problems).',
    ),
    max_turns: int | None = typer.Option(
        None,
        min=1,
        max=MAX_TURNS,
        help="The turn limit the rollouts were played under, for their end reason (default: the environment's).",
    ),
) -> None:
    """Score recorded rollouts (through an environment) or single-turn samples (with a reward) as they are.

    A bad line is reported and skipped; the rest are scored (exit 1). A rollout naming a task not in --tasks is
    stored as an unknown_task error record and reported (exit 1), as is a recorded rollout the environment
    cannot replay (replay_failed). If not one rollout is scored (every one an error record, kept in the store),
    that is said and the exit status is 1 too.

    The file is streamed: ``--batch-size`` lines at a time are read, executed, scored, written and printed, so
    memory does not grow with the file (only the set of ids seen, to refuse repeats).
    """
    from rewardpipe.cli.common import reward_or_fail
    from rewardpipe.store import rollout_key

    if overwrite and resume:
        usage_fail("--overwrite and --resume cannot be combined")
    if summary and not as_json:
        usage_fail("--summary ends --json output with a summary line: give --json too (the tables have one)")
    run_id = check_run_id(run_id)
    env = None
    if env_name is None and reward_name is not None:
        reward = reward_or_fail(reward_name, weight)
        env_name = _builtin_env_of(reward)
    if env_name is None and reward_name is not None:  # single-turn samples
        if tasks is None and reward.reads_input("task"):
            usage_fail(f"--reward {reward.name} reads the task: give --tasks FILE (and a task_id on each line)")
        if tasks is not None and not (reward.reads_input("task") or reward.needs_execution):
            # the rows would be read for nothing, and every sample whose task they lack made an error record
            usage_fail(
                f"--reward {reward.name} reads no task (its components read "
                f"{', '.join(sorted(reward.reads)) or 'nothing'}): --tasks is not used by single-turn samples "
                f"scored with it; leave it out"
            )
        if reward.reads_input("state"):  # every sample's state is None: each component reading it would fail
            note(
                f"warning: --reward {reward.name} reads `state`, an environment's episode, which single-turn "
                f"samples do not have (None): score recorded rollouts through their environment, --env REF "
                f"--tasks FILE"
            )
        task_rows = None
        if tasks is not None:
            from rewardpipe.single_turn import OpenTaskRow

            task_rows = {t.task_id: t for t in load_tasks_or_fail(tasks, model=OpenTaskRow)}
    else:
        env = environment_or_fail(env_name or DEFAULT_ENV)
        reward = episode_reward(reward_name, weight, env)
        if tasks is None:
            usage_fail(f"scoring recorded rollouts of environment '{env.name}' needs --tasks FILE (its task rows)")
        task_rows = {t.task_id: t for t in load_tasks_or_fail(tasks, env=env, runnable=True)}
    workers = cap_workers(workers)
    check_output_file(spill, "--spill", [tasks, rollouts_file])
    if not rollouts_file.is_file():
        fail(
            f"rollouts file not found: {rollouts_file}"
            if not rollouts_file.exists()
            else f"expected a rollouts file, got a directory: {rollouts_file}"
        )
    try:
        rollouts_sha256 = file_sha256(rollouts_file)
        if not _has_a_line(rollouts_file):
            fail(f"{rollouts_file}: contains no rollouts")
    except OSError as exc:
        fail(f"cannot read rollouts file {rollouts_file}: {exc.strerror or exc}")
    configuration: dict[str, Any] = {"rollouts_file": str(rollouts_file), "rollouts_sha256": rollouts_sha256}
    if env is None:
        configuration["samples"] = "single_turn"
    manifest = new_manifest(
        run_id=run_id,
        command="score",
        reward=reward,
        tasks_file=tasks,
        configuration=configuration,
        env=env,
        env_reference=env_name or DEFAULT_ENV if env is not None else None,
        reward_reference=reward_name,
    )
    _store, already, writer = open_run(out_dir, manifest, overwrite=overwrite, resume=resume, spill=spill)
    transcripts = writer.write_transcript  # a transcript the store refuses is spilled beside the records
    scored = errors = bad_lines = skipped = 0
    error_kinds: Counter[str] = Counter()
    unknown_tasks: Counter[str] = Counter()  # task id -> rollouts naming it that the task file does not hold
    taskless: list[str] = []  # samples naming no task (no task_id) whose group is no task of the file either
    unreplayed: list[str] = []  # recorded rollouts the environment could not replay (replay_failed)
    first_error: list[str] = []  # the first error record, as an example for the summary
    metrics_failed = _MetricsFailed()
    lazy_executor: list[Any] = []

    def executor() -> Any:
        if not lazy_executor:
            from rewardpipe.execution import get_executor

            lazy_executor.append(get_executor())
        return lazy_executor[0]

    def flush(batch: list) -> None:
        nonlocal scored, errors
        if env is None:
            from rewardpipe.single_turn import score_sample_records

            records = score_sample_records(
                batch,
                reward,
                run_id=run_id,
                tasks=task_rows,
                workers=workers,
                executor=executor() if reward.needs_execution else None,
                on_transcript=transcripts,
            )
        else:
            from rewardpipe.runner import score_rollouts

            assert task_rows is not None  # recorded rollouts of an environment need --tasks (refused above)
            records = score_rollouts(
                batch,
                task_rows,
                executor=executor() if env.runs_code else None,
                env=env,
                reward=reward,
                run_id=run_id,
                workers=workers,
                on_transcript=transcripts,
                max_turns=max_turns,
            )
        writer.write(records)
        metrics_failed.update(records)
        # a sample without a task_id took its group as its task id: that is no task the user named
        unnamed = {(r.step, r.rollout_id) for r in batch if env is None and not r.names_task}
        for record in records:
            if record.status == "scored":
                scored += 1
            else:
                errors += 1
                if record.error is not None:
                    error_kinds[record.error.kind] += 1
                    if record.error.kind == "unknown_task" and (record.step, record.rollout_id) in unnamed:
                        taskless.append(record.rollout_id)
                    elif record.error.kind == "unknown_task":
                        unknown_tasks[str(record.task_id)] += 1
                    elif record.error.kind == "replay_failed":
                        unreplayed.append(record.rollout_id)
                    if not first_error:
                        first_error.append(f"{record.rollout_id}: {record.error.message}")
            if as_json:
                write_json_line(record.model_dump(mode="json", by_alias=True))

    no_reference = None  # why a sample without a reference is refused: its reward reads one
    if env is None:
        from rewardpipe.single_turn import SampleReader
        from rewardpipe.testing import missing_reference

        reader: Any = SampleReader(rollouts_file)
        no_reference = missing_reference(reward)
    else:
        from rewardpipe.models import RolloutReader

        reader = RolloutReader(rollouts_file)
    batch: list = []
    try:
        with progress_bars(as_json) as bar:
            # lines of the file read so far: counted only when a bar is drawn (and only for a regular file)
            lines = bar.add_task("scoring (lines read)", total=count_lines(rollouts_file) if bar.drawn else None)
            line = 0
            for line, rollout, problem in reader:
                if writer.halted:  # nothing more can be kept: scoring on would only lose more
                    error_line(f"stopped reading {rollouts_file}: {writer.halted}")
                    break
                if problem is None and no_reference and "reference" not in rollout.model_fields_set:
                    # scored with None, a component comparing with the reference gave the model a silent 0
                    problem = f"{rollouts_file}:{line} ({rollout.rollout_id[:80]}): {no_reference}"
                if problem is not None:
                    bad_lines += 1
                    note(f"skipped {problem}")
                    continue
                if rollout_key(run_id, rollout.step, rollout.group_id, rollout.rollout_id) in already:
                    skipped += 1
                    continue
                batch.append(rollout)
                if len(batch) >= batch_size:
                    flush(batch)
                    batch = []
                    bar.update(lines, completed=line)
            if batch:
                flush(batch)
            bar.update(lines, completed=line)
    finally:
        writer.close()
    if not (writer.spilled or writer.lost):
        manifest.finished_at = utc_now()
        save_manifest(writer, manifest)
        _complete(manifest.run_id, writer.stored)
    if not as_json:
        resumed = f", already stored {skipped}" if skipped else ""
        sys.stdout.write(
            f"scored {scored}, errors {errors}, skipped lines {bad_lines}{resumed} → {printable(out_dir)}\n"
        )
        if error_kinds:  # "errors 3" alone sent a user to --json to learn what they were
            kinds = ", ".join(f"{kind} {count}" for kind, count in error_kinds.most_common())
            sys.stdout.write(printable(f"errors: {kinds}; e.g. {first_error[0]}") + "\n")
        metrics_failed.say()
    elif summary:
        write_json_line(
            {
                "summary": {
                    "run_id": run_id,
                    "store": str(out_dir),
                    "scored": scored,
                    "errors": errors,
                    "error_kinds": dict(error_kinds.most_common()),
                    "first_error": first_error[0] if first_error else None,
                    "skipped_lines": bad_lines,
                    "skipped_already_stored": skipped,
                    "unknown_tasks": _first_of(unknown_tasks),
                    "taskless": _first_of(Counter(taskless)),
                    "replay_failed": _first_of(Counter(unreplayed)),
                    **_not_stored(writer),
                    "failed_writes": writer.failed_writes,
                    "metrics_failed": {"rollouts": metrics_failed.rollouts, "first": metrics_failed.first},
                }
            }
        )
    exit_for_losses(writer, 0, resume=resume_hint("score", run_id, out_dir))
    if unknown_tasks:
        _report_unknown_tasks(unknown_tasks, tasks)
    if taskless:
        names = ", ".join(repr(printable(rollout[:80])) for rollout in taskless[:5])
        more = f" (and {len(taskless) - 5} more)" if len(taskless) > 5 else ""
        error_line(
            f"{len(taskless)} sample(s) give no task_id, and {tasks} holds no task by their group either: {names}"
            f"{more}; they are stored as unknown_task error records (give each sample its task_id)"
        )
    failed = nothing_scored(scored + errors, scored, error_kinds, first_error[0] if first_error else None)
    if unreplayed and not failed:
        assert env is not None  # only an environment's recordings are replayed
        _report_unreplayed(unreplayed, scored + errors, env.name)
    if bad_lines or unknown_tasks or taskless or unreplayed or failed:
        raise typer.Exit(1)


@app.command()
def doctor(
    tasks: Path = typer.Option(..., "--tasks", help="Task JSONL file (rows of the environment's task model)."),
    env_name: str = typer.Option(DEFAULT_ENV, "--env", help="Environment to check (any reference form)."),
    reward_name: str | None = typer.Option(None, "--reward", help="Reward (default: the environment's)."),
    max_turns: int | None = typer.Option(
        None, min=1, max=MAX_TURNS, help="Turn limit of every scenario (default: each scenario's own)."
    ),
    workers: int | None = typer.Option(None, min=1, help=WORKERS_HELP),
    as_json: bool = typer.Option(
        False, "--json", help="Print one JSON object: the tasks, the broken ones and each task's diagnosis."
    ),
) -> None:
    """Before training: play every task through the environment's scenarios and prove each task can be scored,
    each component can move, the reference scenario is best, values stay in range, two plays agree, the
    state survives JSON, and the environment's transcript_fields() and replay() work on every play. Exit 1 naming
    broken tasks."""
    from rewardpipe.doctor import diagnose

    env = environment_or_fail(env_name)
    reward = episode_reward(reward_name, [], env)  # a reward of single-turn samples is said before the task rows
    task_list = load_tasks_or_fail(tasks, env=env)
    if env.runs_code:
        from rewardpipe.execution import get_executor

        executor: Any = get_executor()
    else:
        from rewardpipe.runner import NoSandbox

        executor = NoSandbox()
    diagnoses = diagnose(task_list, env, executor, reward=reward, workers=cap_workers(workers), max_turns=max_turns)
    broken = [d for d in diagnoses if not d.ok]
    if as_json:
        write_json_line(
            {
                "tasks": len(diagnoses),
                "broken": [d.task_id for d in broken],
                "environment": env.name,
                "reward": reward.name,
                "diagnoses": [d.to_dict() for d in diagnoses],
            }
        )
    else:
        for diagnosis in broken:
            out.print(f"[red]✗ {escape(printable(diagnosis.task_id))}[/]")
            for problem in diagnosis.problems:
                out.print(f"    {escape(printable(problem))}", highlight=False)
        for diagnosis in diagnoses:  # scorable, but gameable tests or a starving component (docs/tasks.md)
            for warning in diagnosis.warnings:
                out.print(
                    f"[yellow]! {escape(printable(diagnosis.task_id))}[/]: {escape(printable(warning))}",
                    highlight=False,
                )
        out.print(
            f"{len(diagnoses) - len(broken)}/{len(diagnoses)} tasks OK"
            + (f"; broken: {escape(printable(', '.join(d.task_id for d in broken)))}" if broken else ""),
            highlight=False,
        )
    if broken:  # the report above is data (stdout); the verdict is for people (stderr), even when piped
        fail(
            f"{tasks}: {len(broken)} of {len(diagnoses)} task(s) fail doctor's checks: "
            f"{', '.join(d.task_id[:80] for d in broken[:10])}{' ...' if len(broken) > 10 else ''} (each task's "
            f"problems are on stdout: fix the environment, the reward or the task row they name)"
        )
