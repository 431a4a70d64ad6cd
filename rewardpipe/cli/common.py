"""Pieces `run`, `score`, `doctor` and `monitor` share: input loading, thresholds, claiming a run id
(manifest, --overwrite, --resume) and writing records so that none is lost."""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from rewardpipe.cli.application import error_line, fail, note, usage_fail, when_stopped
from rewardpipe.models import InputFileError, Record, RunManifest
from rewardpipe.models import file_sha256 as file_sha256  # (here until round thirty-eight: run and score import them)
from rewardpipe.models import new_manifest as new_manifest
from rewardpipe.models import utc_now as utc_now
from rewardpipe.references import meant_reference as meant_reference  # its home until round twenty-nine
from rewardpipe.safe_text import escape_lone_surrogates

DEFAULT_ENV = "ask_before_coding"  # the environment --env names when it is not given
MAX_RUN_ID = 128  # characters; = rewardpipe.store.MAX_RUN_ID, the rule check_run_id applies (run_id_problem)


def load_tasks_or_fail(
    path: Path, *, model: Any = None, env: Any = None, allow_empty: bool = False, runnable: bool = False
) -> list[Any]:
    """The task rows of ``path`` (as ``model``; default the ``task_model`` of ``env``, else the ask-before-coding
    ``Task``), or exit 1 naming the file, line and field (and, for a row that does not fit ``env``'s task model,
    which environment read it: see :func:`task_model_hint`); ``runnable`` also refuses tasks whose hidden tests
    cannot run (see :func:`refuse_unrunnable_tests`)."""
    from rewardpipe.models import load_task_rows, load_tasks

    if model is None and env is not None:
        model = env.task_model
    try:
        tasks = load_tasks(path) if model is None else load_task_rows(path, model)
    except FileNotFoundError:
        fail(f"task file not found: {path}{bundled_copy_hint(path)}")
    except IsADirectoryError:
        fail(f"expected a task file, got a directory: {path}")
    except InputFileError as exc:
        fail(f"{exc}{task_model_hint(env, str(exc))}")
    except OSError as exc:
        fail(f"cannot read task file {path}: {exc.strerror or exc}")
    if not tasks and not allow_empty:
        fail(f"{path}: contains no tasks")
    if runnable:
        refuse_unrunnable_tests(path, tasks)
    return tasks


def bundled_copy_hint(path: Path) -> str:
    """For a missing ``rewardpipe/data/...`` (the docs' paths, of the source tree) that the installed package
    holds: where that copy is. Empty otherwise."""
    import rewardpipe

    parts = Path(path).parts
    if parts[:2] != ("rewardpipe", "data") or len(parts) < 3:
        return ""
    installed = Path(rewardpipe.__file__).resolve().parent.joinpath(*parts[1:])
    if not installed.is_file():
        return ""
    return (
        f" (a path of rewardpipe's source tree, relative to the working directory; the installed copy is {installed})"
    )


def task_model_hint(env: Any, problem: str) -> str:
    """What to add to a task file's refused row when the fields do not fit ``env``'s task model: the rows were read
    as that environment's (``--env`` forgotten, so the default ``ask_before_coding``'s: "missing required field
    'spec' ... unknown field 'secret'" blamed the file), or the environment set no ``task_model`` (bare
    ``TaskRow``s: ``task_id`` and ``prompt`` only). Empty for any other problem, or without an environment."""
    from rewardpipe.environment import TaskRow

    if env is None or not ("unknown field" in problem or "missing required field" in problem):
        return ""
    if env.task_model is TaskRow:
        return (
            f" (environment '{env.name}' sets no task_model, so a row may hold task_id and prompt only: give the "
            f"environment class task_model = <its TaskRow subclass>)"
        )
    return (
        f" (the rows were read as the task model {env.task_model.__name__} of environment '{env.name}'; a task "
        f"file of another environment needs --env REF)"
    )


def refuse_unrunnable_tests(path: Path, tasks: list[Any]) -> None:
    """Exit 1 naming every task whose hidden tests cannot run at all (they do not parse, or hold no test),
    before anything is written: every execution of such a task would be an infrastructure error. Task rows
    that carry no ``tests`` (an environment that runs no code) have nothing to check."""
    from rewardpipe.execution.runtime.harness import HarnessError, count_expected_tests

    broken = []
    for task in tasks:
        tests, tests_format = getattr(task, "tests", None), getattr(task, "tests_format", "unittest")
        if not isinstance(tests, str):
            continue
        try:
            count_expected_tests(tests, tests_format)
        except HarnessError as exc:
            broken.append(f"task '{task.task_id[:80]}': tests: {exc}")
    if broken:
        more = f" (and {len(broken) - 5} more)" if len(broken) > 5 else ""
        fail(f"{path}: {'; '.join(broken[:5])}{more} (`rewardpipe doctor --tasks {path}` checks a task file)")


# A weight as a person writes it: float() also took "1_0" (10.0) and digits of other scripts ("٣", 3.0), which
# read as something else than the value used. "nan" and "inf" pass here to be named as not finite.
_WEIGHT_NUMBER = re.compile(
    r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|nan|inf|infinity)", re.IGNORECASE
)


def parse_weights(pairs: list[str]) -> dict[str, float]:
    weights: dict[str, float] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        name, number = name.strip(), value.strip()
        if not sep or not name or not _WEIGHT_NUMBER.fullmatch(number):
            usage_fail(f"--weight must look like NAME=NUMBER, got '{pair}'")
        weight = float(number)
        if not math.isfinite(weight):
            usage_fail(f"--weight {name} must be a finite number, got '{value}'")
        if name in weights and weights[name] != weight:  # contradictory: the last one silently won
            usage_fail(f"--weight {name} is given twice, as {weights[name]:g} and {weight:g}: keep one")
        weights[name] = weight
    return weights


def parse_options(pairs: list[str], option: str) -> dict[str, str]:
    options: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            usage_fail(f"{option} must look like NAME=VALUE, got '{pair}'")
        if options.get(name.strip(), value) != value:  # contradictory: the last one silently won
            usage_fail(f"{option} {name.strip()} is given twice, as '{options[name.strip()]}' and '{value}': keep one")
        options[name.strip()] = value
    return options


def raised_at(problem: BaseException) -> str:
    """`` (at FILE:LINE)``: the line of the user's own code that raised what ``problem`` (a reference that could not
    be loaded) wraps, when its message does not say it already; a missing dependency's ``import``, a data file
    opened at import time, an ``assert`` in a module named only the exception. Empty when none is known. The frame
    is the one a ``component_raised`` error names (:func:`rewardpipe.rewards.base.user_frame`), shown as the
    traceback names its file."""
    from rewardpipe.rewards.base import user_frame

    cause = problem.__cause__
    if cause is None or isinstance(cause, SyntaxError):  # a SyntaxError's message names its file and line
        return ""
    found = user_frame(cause)
    if found is None:
        return ""
    frame = found[1]
    where = f"{frame.filename}:{frame.lineno}"
    return "" if where in str(problem) else f" (at {where})"


def environment_or_fail(reference: str, options: dict[str, str] | None = None) -> Any:
    """The environment ``--env`` names (any reference form), configured with ``options``; a name that does
    not resolve, or options it refuses, exit 2 saying why."""
    from rewardpipe.references import ReferenceProblem, resolve_environment

    try:
        env = resolve_environment(reference)
    except ReferenceProblem as exc:
        usage_fail(f"--env {exc}{raised_at(exc)}")  # a module named where a reference was meant: meant_reference
    if options:
        try:
            env = env.configure(**options)
        except (TypeError, ValueError) as exc:
            usage_fail(f"--env-option: {exc}")
    return env


def reward_or_fail(reference: str | None, weight: list[str], env: Any = None) -> Any:
    """The reward ``--reward`` names (default: the environment's), with the ``--weight`` overrides; exit 2
    naming what is wrong."""
    from rewardpipe.references import ReferenceProblem, resolve_reward

    weights = parse_weights(weight)
    try:
        if reference is None:
            return env.reward.with_weights(weights)
        return resolve_reward(reference, weights)
    except ReferenceProblem as exc:
        usage_fail(f"--reward {exc}{raised_at(exc)}")
    except ValueError as exc:
        usage_fail(str(exc))


def episode_reward(reference: str | None, weight: list[str], env: Any = None) -> Any:
    """:func:`reward_or_fail` for an episode: a reward that reads ``reference`` scores single-turn samples
    only (an episode carries none), which is a usage error."""
    from rewardpipe.rewards import reads_reference

    reward = reward_or_fail(reference, weight, env)
    if reads_reference(reward):
        readers = [c.name for c in reward.components if "reference" in c.inputs]
        usage_fail(
            f"--reward {reward.name} scores single-turn samples: its component(s) {', '.join(readers)} read "
            f"'reference', which an episode does not have (score such samples with `rewardpipe score FILE "
            f"--reward {reward.name}`, the Nova reward Lambda or rewardpipe.single_turn); environment "
            f"'{env.name}' is scored by its own reward '{env.reward.name}' unless --reward names another"
        )
    return reward


def check_threshold_names(thresholds: Any, reward: Any) -> None:
    """``run`` knows its reward, so an ``--ignore`` or ``--range`` naming none of its components (a typo:
    ``loop_penalt``) is a usage error rather than a knob that silently does nothing."""
    from rewardpipe.monitoring import AGGREGATE_TARGET

    known = [*reward.component_names, AGGREGATE_TARGET]
    for option, names in (("--ignore", thresholds.ignore), ("--range", list(thresholds.range_overrides))):
        for name in names:
            if name not in known:
                usage_fail(
                    f"{option} {name!r}: reward '{reward.name}' has no such component; known: {', '.join(known)}"
                )


def parse_ranges(items: list[str]) -> dict[str, tuple[float, float]]:
    ranges = {}
    for item in items:
        name, sep, span = item.partition("=")
        lo, colon, hi = span.partition(":")
        try:
            if not sep or not colon or not name.strip():
                raise ValueError
            ranges[name.strip()] = (float(lo), float(hi))
        except ValueError:
            usage_fail(f"--range must look like NAME=MIN:MAX (e.g. correctness=0:1), got '{item}'")
    return ranges


# The monitor's knobs, declared once: `run` (which monitors as it goes) and `monitor` both take them.
_THRESHOLD_OPTIONS: dict[str, tuple[Any, Any]] = {  # parameter name -> (annotation, default)
    "epsilon": (
        Annotated[
            float,
            typer.Option(
                help="A group whose std is at most this has zero variance (for weight 1 and values within +-1; "
                "the bound scales with both: docs/monitor.md)."
            ),
        ],
        1e-6,
    ),
    "dead_fraction": (
        Annotated[
            float,
            typer.Option(help="A component is dead when at least this share of eligible groups has zero variance."),
        ],
        0.9,
    ),
    "recover_fraction": (
        Annotated[float, typer.Option(help="An active alarm clears when the share drops below this.")],
        0.5,
    ),
    "min_groups": (
        Annotated[
            int,
            typer.Option(
                min=1, help="Groups with >= 2 scored rollouts needed for a verdict (fewer gives insufficient_data)."
            ),
        ],
        4,
    ),
    "consecutive": (Annotated[int, typer.Option(min=1, help="Dead steps in a row before alarming.")], 1),
    "max_error_rate": (
        Annotated[float, typer.Option(help="Alarm when at least this share of a step's rollouts are errors.")],
        0.1,
    ),
    "error_recover_rate": (Annotated[float, typer.Option(help="The error alarm clears below this share.")], 0.05),
    "ignore": (
        Annotated[
            list[str], typer.Option("--ignore", help="Component that never alarms (repeatable), e.g. loop_penalty.")
        ],
        [],
    ),
    "value_range": (
        Annotated[list[str], typer.Option("--range", help="Known range NAME=MIN:MAX of a component (repeatable).")],
        [],
    ),
    "alarm_idle_penalties": (
        Annotated[
            bool,
            typer.Option(
                "--alarm-idle-penalties",
                help="Alarm on a penalty (range MIN:0) that never fires; by default it is reported as info.",
            ),
        ],
        False,
    ),
}


def with_threshold_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give a typer command the monitor's threshold options and call it with ``thresholds=`` built from them.

    The command's own signature keeps a ``thresholds`` parameter; the wrapper's signature (which typer reads)
    swaps it for the options above, so the two commands cannot drift apart."""
    own = [p for p in inspect.signature(command).parameters.values() if p.name != "thresholds"]
    added = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
        for name, (annotation, default) in _THRESHOLD_OPTIONS.items()
    ]

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> Any:
        knobs = {name: kwargs.pop(name) for name in _THRESHOLD_OPTIONS}
        return command(**kwargs, thresholds=build_thresholds(**knobs))

    wrapper.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + added
    )
    return wrapper


def build_thresholds(
    *,
    epsilon: float,
    dead_fraction: float,
    recover_fraction: float,
    min_groups: int,
    consecutive: int,
    max_error_rate: float,
    error_recover_rate: float,
    ignore: list[str],
    value_range: list[str],
    alarm_idle_penalties: bool,
) -> Any:
    """The monitor's thresholds from the options `run` and `monitor` both take; a bad value exits 2."""
    from pydantic import ValidationError

    from rewardpipe.monitoring import DEFAULT_RANGES, Thresholds

    try:
        return Thresholds(
            epsilon=epsilon,
            dead_fraction=dead_fraction,
            recover_fraction=recover_fraction,
            min_groups=min_groups,
            raise_after=consecutive,
            error_rate=max_error_rate,
            error_recover_rate=error_recover_rate,
            ranges={**DEFAULT_RANGES, **parse_ranges(value_range)},
            ignore=tuple(ignore),
            alarm_idle_penalties=alarm_idle_penalties,
            range_overrides=parse_ranges(value_range),
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        usage_fail(f"bad threshold{' ' + where if where else ''}: {first['msg'].removeprefix('Value error, ')}")


def warn_of_run(warnings: list[dict[str, str]]) -> None:
    """A ``warning: KIND: message`` line on stderr for each warning about a run as a whole (``monitor`` and
    ``run`` alike; ``--json`` carries them under ``warnings``)."""
    for warning in warnings:
        note(f"warning: {warning['kind']}: {warning['message']}")


def note_unreadable(items: list[dict[str, Any]], shown: int = 20) -> None:
    """One stderr line per record ``monitor`` and ``report`` skipped (by file:line or key, and why), at most ``shown``
    of them and then their count: a file of a million bad lines (another file's format) printed a million lines."""
    for item in items[:shown]:
        note(f"skipped unreadable record {item['key']}: {item['reason']}")
    if len(items) > shown:
        note(f"skipped {len(items) - shown} more unreadable record(s) (--json: unreadable, unreadable_count)")


def note_set_aside(entries: list[dict[str, Any]], shown: int = 20, count: int | None = None) -> None:
    """One stderr line per group the monitor set aside (``monitor`` and ``report``; ``--json`` lists the first
    hundred under ``set_aside`` and counts them all, ``set_aside_count``), at most ``shown`` of them and then their
    count (``count``, when ``entries`` are only the first of them)."""
    count = len(entries) if count is None else count
    for entry in entries[:shown]:
        tasks = ", ".join(
            f"task '{t['task_id'][:80]}': {t['records']} from rollout '{t['first_rollout_id'][:80]}'"
            for t in entry["tasks"][:5]
        )
        note(
            f"warning: set aside: {entry['reason']}; its {entry['records']} scored record(s) are left out of every "
            f"figure and verdict ({tasks}{', ...' if entry.get('task_count', len(entry['tasks'])) > 5 else ''})"
        )
    if count > shown:
        note(f"warning: set aside: {count - shown} more group(s) like these (--json: set_aside, set_aside_count)")


def nothing_scored(records: int, scored: int, kinds: Mapping[str, int], example: str | None) -> bool:
    """True, after an ``error:`` line saying so, when records were written and not one of them was scored (every
    rollout an error record: an endpoint down, a replay that never matches). The records stay as evidence; the
    command measured nothing, which exit 0 hid."""
    if not records or scored:
        return False
    counts = ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items(), key=lambda item: -item[1]))
    error_line(
        f"no rollout was scored: all {records} are error records ({counts})" + (f"; e.g. {example}" if example else "")
    )
    return True


def no_transcript_store(path: str) -> str:
    """What an alarm example's transcript is when PATH is a file of records: no store names it here."""
    return (
        f"{path} is records, not a store: there is no transcript store here. An example's transcript_key is "
        f"relative to the store that wrote them; `rewardpipe show STORE --key KEY` prints it from there."
    )


def rollouts_hint(path: Any) -> str:
    """For `monitor` and `report` finding no record in a file: when its first line is a rollout (a
    conversation, no ``run_id``), the text that says so and how to score it; else "". A new user who gave
    `rewardpipe monitor` the samples `score` read, not the store it wrote, was told only that every line
    lacked ``run_id``."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            first = next((line for line in iter(lambda: handle.readline(1 << 20), "") if line.strip()), "")
        row = json.loads(first)
    except (OSError, ValueError, TypeError, RecursionError):  # a line nested past the parser's depth: no hint
        return ""
    if not isinstance(row, dict) or "run_id" in row or "messages" not in row:
        return ""
    return (
        f"; {path} holds rollouts, not records: score them first, "
        f"rewardpipe score {path} --reward REF --out STORE, then give STORE"
    )


def check_run_id(run_id: str) -> str:
    from rewardpipe.store import run_id_problem

    problem = run_id_problem(run_id, "--run-id")
    if problem is not None:
        usage_fail(problem)
    return run_id


def check_output_file(
    path: Path | None, option: str, inputs: Iterable[str | os.PathLike[str] | None] = ()
) -> Path | None:
    """An output file named by ``option``, checked before the command does any work or writes anything:
    not a directory, not one of the command's ``inputs`` (``report records.jsonl --out records.jsonl`` wrote
    the page over the records it read), and the nearest existing folder above it is a writable directory
    (missing folders are created when the file is written). A bad path is a usage error (exit 2)."""
    if path is None:
        return None
    if path.is_dir():
        usage_fail(f"{option} {path} is a directory; give a file name")
    for source in inputs:
        if source is not None and same_file(path, Path(source)):
            usage_fail(
                f"{option} {path} is the input file {source}: writing it would destroy what is read; give "
                f"another file name"
            )
    if path.exists() and not os.access(path, os.W_OK):
        usage_fail(f"{option} {path}: the file exists and cannot be written")
    _check_creatable(path.parent, path, option)
    return path


def same_file(one: Path, other: Path) -> bool:
    """True when the two paths name one existing file or folder (a link, a relative and an absolute name alike)."""
    try:
        return one.exists() and other.exists() and os.path.samefile(one, other)
    except OSError:
        return False


def check_output_dir(path: Path | None, option: str) -> Path | None:
    """An output folder named by ``option``, checked like :func:`check_output_file`: a directory (or not there
    yet) below a writable directory. A bad path is a usage error (exit 2)."""
    if path is None:
        return None
    if path.exists() and not path.is_dir():
        usage_fail(f"{option} {path} exists and is not a directory")
    if path.is_dir() and not os.access(path, os.W_OK | os.X_OK):
        usage_fail(f"{option} {path}: cannot create files in it")
    if not path.is_dir():
        _check_creatable(path.parent, path, option)
    return path


def _check_creatable(ancestor: Path, path: Path, option: str) -> None:
    """The nearest existing folder at or above ``ancestor`` is a writable directory (``path`` can be made)."""
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        usage_fail(f"{option} {path}: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        usage_fail(f"{option} {path}: cannot create files in {ancestor}")


def cap_workers(workers: int | None) -> int | None:
    """``--workers`` above the sandbox's limit is capped, and the user is told (never a silent fallback)."""
    from rewardpipe.execution.sandbox import MAX_WORKERS

    if workers is not None and workers > MAX_WORKERS:
        note(f"warning: --workers {workers} is above the sandbox limit; using {MAX_WORKERS}")
        return MAX_WORKERS
    return workers


MAX_GENERATED_ID_ATTEMPTS = 20  # default run ids tried (<timestamp>, -2, -3...) before the clash is reported


def claim_run(store: Any, manifest: RunManifest, *, overwrite: bool, resume: bool) -> set[str]:
    """Make ``manifest.run_id`` this experiment's, in ``store``. Returns the keys already stored (to skip).

    * a run id without records: nothing to do (a stale state or manifest is replaced);
    * a run id holding records, without a flag: refused (exit 1), naming both ways out;
    * ``overwrite``: the run's whole prefix is deleted first;
    * ``resume``: the stored manifest must have the same identity, or it is refused naming what differs.
    """
    from rewardpipe.store import StoreError, manifest_key, run_prefix

    run_id = manifest.run_id
    if overwrite and resume:
        usage_fail("--overwrite and --resume cannot be combined")
    where = store.path_of(run_prefix(run_id))
    try:
        clash = store.run_id_clash(run_id)
        if clash is not None:
            from rewardpipe.models import same_text

            how = (
                "is the stored run '{0}' in another Unicode normalisation ({1} there, {2} here): the two print the same"
                if same_text(clash) == same_text(run_id)
                else "differs from the stored run '{0}' only in letter case: on macOS and Windows the two would "
                "share one folder"
            )
            fail(
                f"run id '{run_id}' {how.format(clash, ascii(clash), ascii(run_id))}; use another --run-id "
                f"(or '{clash}' itself)"
            )
        unsafe = store.unsafe_folders(run_id)  # a link where a step folder is: its records would go elsewhere
        if unsafe:
            fail(
                f"cannot write run '{run_id}': {store.path_of(unsafe[0].key.rstrip('/'))} is {unsafe[0].reason}; "
                f"remove it, or use another --run-id"
            )
        if not store.run_has_records(run_id):
            if resume:
                note(f"warning: nothing to resume under {where}; starting run '{run_id}' afresh")
            return set()
        if overwrite:
            store.delete_run(run_id)
            return set()
        if not resume:
            fail(
                f"run id '{run_id}' already holds records under {where}: use another --run-id, --resume to continue "
                f"the same configuration, or --overwrite to delete it first"
            )
        try:
            stored = RunManifest.model_validate(store.get_json(manifest_key(run_id), default=None) or {})
        except ValueError:
            fail(
                f"cannot --resume run '{run_id}': {store.path_of(manifest_key(run_id))} is missing or not a "
                f"run manifest, so the configuration cannot be checked (use --overwrite or another --run-id)"
            )
        differences = stored.differences(manifest)
        if differences:
            fail(f"cannot --resume run '{run_id}' with a different configuration ({'; '.join(differences)})")
        manifest.started_at = stored.started_at
        if stored.steps is not None and manifest.steps is not None and stored.steps > manifest.steps:
            manifest.steps = stored.steps  # a shorter resume does not unmake the steps already stored
        return store.stored_rollout_keys(run_id)
    except StoreError as exc:
        fail(str(exc))


def resume_hint(command: str, run_id: str, out_dir: str) -> str:
    """The command that finishes a run whose records could not all be stored (the same options besides)."""
    from shlex import quote

    return f"rewardpipe {command} ... --out {quote(str(out_dir))} --run-id {quote(run_id)} --resume"


def open_run(
    location: str,
    manifest: RunManifest,
    *,
    overwrite: bool,
    resume: bool,
    spill: Path | None,
    generated_id: bool = False,
) -> tuple[Any, set[str], RecordWriter]:
    """Open the store, claim the run id (see :func:`claim_run`), save the manifest and get a writer.

    Returns ``(store, keys already stored, writer)``; call only once every input has been checked. A
    ``generated_id`` (the default timestamp, no ``--run-id`` given) taken already in the store, by a run started in
    the same second, becomes ``<timestamp>-2``, ``-3``...: ``manifest.run_id`` is the one claimed.
    """
    from rewardpipe.store import StoreError, open_store

    try:
        store = open_store(location)
    except StoreError as exc:
        fail(str(exc))
    base, attempts = manifest.run_id, (MAX_GENERATED_ID_ATTEMPTS if generated_id and not resume else 1)
    for attempt in range(1, attempts + 1):
        manifest.run_id = base if attempt == 1 else f"{base}-{attempt}"
        try:
            if attempt < attempts and store.run_has_records(manifest.run_id):
                continue
            lock = store.lock_run(manifest.run_id)  # held until the writer closes: one process per run id
        except StoreError as exc:
            if attempt < attempts:  # (another run of this second holds it)
                continue
            fail(str(exc))
        break
    try:
        already = claim_run(store, manifest, overwrite=overwrite, resume=resume)
    except BaseException:
        if lock is not None:
            lock.close()
        raise
    writer = RecordWriter(store, spill or default_spill_path(manifest.run_id), lock)
    hint = resume_hint(manifest.command, manifest.run_id, location)
    when_stopped(lambda: f"{writer.stored} record(s) stored by this command are kept: continue with {hint}")
    save_manifest(writer, manifest)
    return store, already, writer


def save_manifest(writer: RecordWriter, manifest: RunManifest) -> None:
    """Write the manifest; a failure is reported and kept in ``writer.failed_writes`` (the exit status)."""
    from rewardpipe.store import StoreError, manifest_key

    try:
        writer.store.put_json(manifest_key(manifest.run_id), manifest.to_dict())
    except StoreError as exc:
        writer.failed(f"the run manifest ({'end' if manifest.finished_at else 'start'})", exc)


def _each(put: Callable[[Any], Any], items: list[Any], workers: int) -> list[Exception | None]:
    """``put`` applied to every item, ``workers`` at a time: per item None, or what it raised (any store
    failure is to be spilled by the caller, in order, never lost unsaid)."""

    def one(item: Any) -> Exception | None:
        try:
            put(item)
        except Exception as exc:  # noqa: BLE001 - returned to the caller, which spills the item
            return exc
        return None

    if workers > 1 and len(items) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(workers, len(items)), thread_name_prefix="rewardpipe-store") as pool:
            return list(pool.map(one, items))
    return [one(item) for item in items]


class RecordWriter:
    """Writes records (and transcripts) to the store; one the store refuses, whatever the reason (S3 out
    of reach after its retries, a full disk, a link in the way), is appended to a local spill file (one
    JSON object per line; transcripts to ``<spill>.transcripts.jsonl``) instead of being lost. When even
    the spill file cannot be written (the same full disk), the object is counted as lost, and
    ``halted`` says so: nothing more can be kept, so the run stops instead of playing steps it cannot
    store. ``close`` releases the run's lock."""

    def __init__(self, store: Any, spill_path: Path, lock: Any = None) -> None:
        self.store = store
        self.spill_path = spill_path
        self._lock = lock  # the run id's lock (Store.lock_run), released by close()
        self.stored = 0
        self.spilled = 0
        self.transcripts_spilled = 0
        self.lost = 0  # records neither stored nor spilled
        self.transcripts_lost = 0
        self.halted: str | None = None  # why nothing more can be kept, once that happens
        self.unplayed: list[int] = []  # the steps a halted run did not play
        self._files: dict[Path, Any] = {}
        #: Other objects of the run that could not be written (manifest, monitor state): each makes exit 1.
        self.failed_writes: list[str] = []

    @property
    def transcript_spill_path(self) -> Path:
        return self.spill_path.with_name(self.spill_path.name.removesuffix(".jsonl") + ".transcripts.jsonl")

    def failed(self, what: str, exc: Exception) -> None:
        error_line(f"could not write {what}: {exc}")
        self.failed_writes.append(what)

    def write(self, records: Iterable[Record], workers: int = 1) -> int:
        """Store ``records``, ``workers`` at a time (a disk or S3 answers several writes at once sooner than
        one after the other); each one refused, whatever the reason, is spilled, in order. Returns how many
        were stored."""
        records = list(records)
        stored = 0
        for record, refusal in zip(records, _each(self.store.put_record, records, workers), strict=True):
            if refusal is None:
                self.stored += 1
                stored += 1
            elif self._spill(self.spill_path, record.to_json(), f"not stored {record.rollout_id[:80]}", refusal):
                self.spilled += 1
            else:
                self.lost += 1
        return stored

    def write_transcripts(self, transcripts: Iterable[Any], workers: int = 1) -> None:
        """Store ``transcripts`` as :meth:`write` stores records (spilled to ``transcript_spill_path``)."""
        transcripts = list(transcripts)
        for transcript, refusal in zip(
            transcripts, _each(self.store.put_transcript, transcripts, workers), strict=True
        ):
            if refusal is None:
                continue
            line = json.dumps(transcript.to_json_dict(), ensure_ascii=False, allow_nan=False, default=str)
            if self._spill(
                self.transcript_spill_path, line, f"transcript not stored {transcript.rollout_id[:80]}", refusal
            ):
                self.transcripts_spilled += 1
            else:
                self.transcripts_lost += 1

    def write_transcript(self, transcript: Any) -> None:
        self.write_transcripts([transcript])

    def _spill(self, path: Path, line: str, what: str, exc: Exception) -> bool:
        """Append ``line`` to ``path``; False (and ``halted`` set) when even that fails. A line is written
        whole or not at all: a write that fails half-way is cut back, so the file stays valid JSONL."""
        from rewardpipe.store import StoreError

        reason = exc if isinstance(exc, StoreError) else f"{type(exc).__name__}: {exc}"
        try:
            handle = self._files.get(path)
            if handle is None:
                path.parent.mkdir(parents=True, exist_ok=True)
                handle = self._files[path] = path.open("ab", buffering=0)
            data = (escape_lone_surrogates(line.translate(_LINE_BREAKS_ESCAPED)) + "\n").encode("utf-8")
            start = handle.seek(0, os.SEEK_END)
            try:
                view = memoryview(data)
                while view:
                    view = view[handle.write(view) :]
            except OSError:
                handle.truncate(start)
                raise
        except OSError as spill_exc:
            why = f"the spill file {path} cannot be written either ({spill_exc.strerror or spill_exc})"
            self.halted = f"{reason}; {why}"
            error_line(f"{what}: {reason}; LOST: {why}")
            return False
        error_line(f"{what}: {reason} (kept in {path})")
        return True

    def close(self) -> None:
        for handle in self._files.values():
            with contextlib.suppress(OSError):
                handle.close()
        self._files.clear()
        if self._lock is not None:
            self._lock.close()
            self._lock = None


# Characters that end a line for str.splitlines() (and some editors) but that JSON may leave raw inside a string:
# a record or transcript holding model text (an exec_reason, a turn) with one would be split in two by such a
# reader. Only strings can hold them in a JSON line, so their \u escapes read back as the same text.
_LINE_BREAKS_ESCAPED = {0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"}


def default_spill_path(run_id: str) -> Path:
    from rewardpipe.store import run_folder

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path(f"rewardpipe-unstored-{run_folder(run_id)}-{stamp}.jsonl")


def exit_for_losses(
    writer: RecordWriter, alarm_failures: int, unchecked_steps: Iterable[int] = (), *, resume: str | None = None
) -> None:
    """Exit 1 naming the spill files, what was lost, the failed alarm writes, the steps the monitor could not
    check and the other objects that could not be written, if there were any; ``resume`` is the command that
    stores what is missing (``rewardpipe run ... --resume``), said when records are missing."""
    problems = []
    if writer.spilled:
        problems.append(
            f"{writer.spilled} record(s) could not be written to the store and were saved in {writer.spill_path}"
        )
    if writer.transcripts_spilled:
        problems.append(
            f"{writer.transcripts_spilled} transcript(s) could not be written to the store and were "
            f"saved in {writer.transcript_spill_path}"
        )
    if writer.lost or writer.transcripts_lost:
        problems.append(
            f"{writer.lost} record(s) and {writer.transcripts_lost} transcript(s) could be neither "
            f"stored nor spilled and are LOST ({writer.halted})"
        )
    if writer.unplayed:
        problems.append(
            f"the run stopped there: {len(writer.unplayed)} step(s) not played "
            f"({writer.unplayed[0]}-{writer.unplayed[-1]})"
        )
    if alarm_failures:
        problems.append(f"{alarm_failures} alarm(s) could not be delivered (see above)")
    unchecked = sorted(set(unchecked_steps))
    if unchecked:
        problems.append(
            f"the monitor could not check step(s) {', '.join(map(str, unchecked))} (see above; "
            f"`rewardpipe monitor` checks them once the store answers)"
        )
    if writer.failed_writes:
        problems.append(f"could not write {', '.join(dict.fromkeys(writer.failed_writes))} (see above)")
    if (writer.spilled or writer.lost or writer.unplayed) and resume:
        missing = f"{writer.spilled + writer.lost} missing rollout(s)" + (
            " and the steps not played" if writer.unplayed else ""
        )
        problems.append(
            f"once the store answers (or has space again), `{resume}` plays the {missing} and keeps every stored one"
        )
    if problems:
        fail("; ".join(problems))
    return None
