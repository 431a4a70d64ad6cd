"""Check every step not checked yet, run by run, so nothing is skipped and one failure stops nothing.

A scheduled check (the variance-check Lambda) or a catch-up after an outage calls :func:`check_pending`:
for each run it lists the stored steps (once: :meth:`~rewardpipe.store.Store.run_progress`, which also says which
of them are finished), and checks each step the run's state has not checked, in step
order, with :func:`~rewardpipe.monitoring.monitor.monitor_step`. A step that cannot be read (a store
failure) is reported and left unchecked, so the next call tries it again; the following steps and the
other runs are still checked. A corrupt state is moved aside by ``monitor_step`` and reported.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rewardpipe.monitoring.alarms import AlarmSink
from rewardpipe.monitoring.monitor import MonitorResult, StepPublisher, monitor_step
from rewardpipe.monitoring.state import MonitorState, load_state
from rewardpipe.monitoring.thresholds import Thresholds
from rewardpipe.store import Store, step_prefix


@dataclass
class RunCheck:
    """What :func:`check_pending` did for one run."""

    run_id: str
    results: list[MonitorResult] = field(default_factory=list)  # one per step checked, in step order
    #: {"run_id", "step", "error"}: a run or step that could not be checked (tried again next time), or
    #: a corrupt state that was replaced.
    problems: list[dict[str, Any]] = field(default_factory=list)

    @property
    def checked_steps(self) -> list[int]:
        return [step.step for result in self.results for step in result.steps]


def check_pending(
    store: Store,
    run_ids: Iterable[str] | None = None,
    thresholds: Thresholds | None = None,
    sinks: Iterable[AlarmSink] = (),
    *,
    skip_newest: bool = False,
    publisher: StepPublisher | None = None,
) -> list[RunCheck]:
    """Check every unchecked step of ``run_ids`` (default: every run in the store), oldest first.

    ``skip_newest`` leaves each run's highest step alone: a scheduled check cannot know whether the
    trainer is still writing it (a later step's first record is taken as the sign it is complete). As that sign
    can be wrong (a step's last executions may end after the next step began), the steps such a check judges
    stay open to a new judgement: the run's newest judged step is judged again, whole, when objects landed under
    it since, until a later step is judged (``provisional`` of :func:`~rewardpipe.monitoring.monitor.monitor_step`).
    A run whose manifest says it is still being written has its unfinished steps (no completion marker) left
    unchecked too, to be checked once marked.
    """
    sinks = list(sinks)
    checks: list[RunCheck] = []
    try:
        runs = list(run_ids) if run_ids is not None else store.list_runs()
    except Exception as exc:  # noqa: BLE001 - report the listing failure instead of raising
        return [RunCheck(run_id="*", problems=[{"run_id": None, "step": None, "error": _describe(exc)}])]
    for run_id in runs:
        check = RunCheck(run_id)
        checks.append(check)
        try:
            # Finished steps only, as `monitor` and `report` judge (see "When is a step finished?" in
            # rewardpipe.store): a step its writer left unmarked holds part of its groups, and once checked it would
            # never be judged whole. The progress lists the run's steps: listing them apart cost a LIST a run a check.
            progress = store.run_progress(run_id)
            steps = list(progress.steps)
            state, state_problem = load_state(store, run_id)
        except Exception as exc:  # noqa: BLE001 - one broken run must not stop the others
            check.problems.append({"run_id": run_id, "step": None, "error": _describe(exc)})
            continue
        if state_problem is not None:
            check.problems.append({"run_id": run_id, "step": None, "error": state_problem.reason})
        if skip_newest and steps:
            steps = steps[:-1]
        if progress.in_progress:
            finished = set(progress.finished)
            steps = [step for step in steps if step in finished]
        if skip_newest:
            _judge_grown_step(store, run_id, state, steps, check, thresholds, sinks, publisher)
        for step in state.unchecked(steps):
            try:
                check.results.append(
                    monitor_step(store, run_id, step, thresholds, sinks, publisher=publisher, provisional=skip_newest)
                )
            except Exception as exc:  # noqa: BLE001 - one broken step must not stop the later ones
                check.problems.append({"run_id": run_id, "step": step, "error": _describe(exc)})
    return checks


def _judge_grown_step(
    store: Store,
    run_id: str,
    state: MonitorState,
    steps: list[int],
    check: RunCheck,
    thresholds: Thresholds | None,
    sinks: list[AlarmSink],
    publisher: StepPublisher | None,
) -> None:
    """Judge the run's provisional step again when objects landed under it since it was judged (executions of
    step N that ended after step N+1 began). One listing of one step per run: the cost stays bounded."""
    held = state.provisional
    if held is None or held.step != state.last_step or held.step not in steps:
        return
    try:
        if len(store.list_keys(step_prefix(run_id, held.step))) <= held.keys:
            return
        check.results.append(
            monitor_step(store, run_id, held.step, thresholds, sinks, publisher=publisher, provisional=True)
        )
    except Exception as exc:  # noqa: BLE001 - reported; the run's unchecked steps are still checked
        check.problems.append({"run_id": run_id, "step": held.step, "error": _describe(exc)})


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"
