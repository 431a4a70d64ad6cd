"""The monitor's entry points: :func:`monitor_records` (any records, one pass) and :func:`monitor_step`
(one step of a run in a store, continuing its saved state), and their result, :class:`MonitorResult`.

GRPO learns only from differences between the K rollouts of one prompt (a group). A component whose
value is the same for every rollout of a group gives that group no advantage, however much it varies
across the batch and whatever its weight. See :mod:`rewardpipe.monitoring` for where each part lives.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rewardpipe.models import Record
from rewardpipe.monitoring.alarms import AGGREGATE_TARGET, Alarm, AlarmSink, dispatch
from rewardpipe.monitoring.batch import RecordBatch, accumulate_batch
from rewardpipe.monitoring.causes import diagnose
from rewardpipe.monitoring.examples import choose_examples
from rewardpipe.monitoring.hysteresis import track_component, track_errors
from rewardpipe.monitoring.state import MonitorState, load_state, state_key
from rewardpipe.monitoring.statistics import StepAcc, accumulate
from rewardpipe.monitoring.thresholds import MonitorInputError, Thresholds
from rewardpipe.monitoring.verdicts import StepReport, step_report
from rewardpipe.store import BadObject, Store


@dataclass
class MonitorResult:
    run_id: str | None
    thresholds: Thresholds
    steps: list[StepReport]
    alarms: list[Alarm]
    state: MonitorState
    unreadable: list[dict[str, Any]] = field(default_factory=list)  # filled by callers reading a source

    def step(self, n: int) -> StepReport:
        for report in self.steps:
            if report.step == n:
                return report
        raise KeyError(f"no step {n} in this result (steps: {[r.step for r in self.steps]})")

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "thresholds": self.thresholds.model_dump(mode="json"),
            "steps": [report.to_dict() for report in self.steps],
            "alarms": [alarm.to_dict() for alarm in self.alarms],
            "unreadable": list(self.unreadable),
            "state": self.state.to_dict(),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)


def monitor_records(
    records: Iterable[Record | Mapping[str, Any]],
    thresholds: Thresholds | None = None,
    previous_state: MonitorState | Mapping[str, Any] | None = None,
) -> MonitorResult:
    """Compute every step's statistics and verdicts in one pass, then advance the alarm state.

    ``records`` may span several steps (of one run) in any order. ``previous_state`` is the ``state`` of
    an earlier result (object or its ``to_dict()``); the returned ``state`` continues it. Steps the state
    has already checked are reported but marked ``replayed``: they raise no alarms and leave the state as
    it was. Every other step is checked, in step order, even if a later step was checked before it.

    A plain dict that is not a valid record is skipped and listed in ``result.unreadable`` (as
    ``record #<index>``); one bad record never stops the others from being checked.
    """
    bad: list[BadObject] = []
    run_id, accs = accumulate(records, on_bad=bad.append)
    return judge(run_id, accs, thresholds, previous_state, bad)


def monitor_batch(
    batch: RecordBatch,
    thresholds: Thresholds | None = None,
    previous_state: MonitorState | Mapping[str, Any] | None = None,
) -> MonitorResult:
    """:func:`monitor_records` over records already read into columns (the fast readers of
    :mod:`rewardpipe.monitoring.fastread`): the same result, without a model object per record."""
    run_id, accs = accumulate_batch(batch)
    return judge(run_id, accs, thresholds, previous_state, [])


def judge(
    run_id: str | None,
    accs: dict[int, StepAcc],
    thresholds: Thresholds | None,
    previous_state: MonitorState | Mapping[str, Any] | None,
    bad: list[BadObject],
) -> MonitorResult:
    """Verdicts, hysteresis and alarms for every step of ``accs``, in step order."""
    th = thresholds or Thresholds()
    if previous_state is None:
        state = MonitorState()
    elif isinstance(previous_state, MonitorState):
        state = previous_state.model_copy(deep=True)
    else:
        state = MonitorState.from_dict(previous_state)
    if run_id is not None and state.run_id is not None and run_id != state.run_id:
        raise MonitorInputError(f"records are from run '{run_id}' but the monitor state is for run '{state.run_id}'")
    state.run_id = state.run_id or run_id
    ignored = set(th.ignore)

    reports: list[StepReport] = []
    alarms: list[Alarm] = []
    for step in sorted(accs):
        acc = accs.pop(step)
        report = step_report(step, acc, th)
        reports.append(report)
        if state.is_checked(step):
            report.replayed = True
            report.diagnoses = diagnose(report.components, acc, th)
            continue
        step_alarms: list[Alarm] = []
        for name, stats in report.components.items():
            if name in ignored:
                continue
            alarm = track_component(f"component:{name}", stats, step, run_id, state, th)
            if alarm:
                step_alarms.append(alarm)
        if AGGREGATE_TARGET not in ignored:
            alarm = track_component(AGGREGATE_TARGET, report.aggregate, step, run_id, state, th)
            if alarm:
                step_alarms.append(alarm)
        alarm = track_errors(report, run_id, state, th)
        if alarm:
            step_alarms.append(alarm)
        report.diagnoses = diagnose(report.components, acc, th)  # after tracking: it reads ``dying``
        for alarm in step_alarms:
            explain(alarm, report, acc, th)
        alarms.extend(step_alarms)
        state.mark_checked(step)
    return MonitorResult(
        run_id=run_id, thresholds=th, steps=reports, alarms=alarms, state=state, unreadable=[b.to_dict() for b in bad]
    )


def explain(alarm: Alarm, report: StepReport, acc: StepAcc, th: Thresholds) -> None:
    """Attach the step's diagnoses that name the alarm's component, and example rollouts."""
    if alarm.kind == "recovered":
        return
    related = [d for d in report.diagnoses if alarm.component in d.components]
    alarm.causes = [d.to_dict() for d in related]
    alarm.examples = [e.to_dict() for e in choose_examples(alarm, acc, th, [d.cause for d in related])]


def monitor_step(
    store: Store,
    run_id: str,
    step: int,
    thresholds: Thresholds | None = None,
    sinks: Iterable[AlarmSink] = (),
    *,
    persist_state: bool = True,
) -> MonitorResult:
    """Monitor one step of a run stored in ``store``, continuing the run's saved hysteresis state.

    The local runner calls this after each step, and so can the variance-check Lambda: it reads the
    state from :func:`state_key`, reads the step's records (unreadable objects are listed in
    ``result.unreadable``), sends the alarms to ``sinks`` and saves the new state. A corrupt saved state
    is moved aside and replaced by a fresh one (:func:`load_state`), and listed in ``result.unreadable``.
    """
    previous, state_problem = load_state(store, run_id)
    bad: list[BadObject] = [state_problem] if state_problem is not None else []
    result = monitor_records(store.iter_records(run_id, step, on_bad=bad.append), thresholds, previous)
    result.unreadable = [b.to_dict() for b in bad] + result.unreadable
    failures = dispatch(result.alarms, sinks)
    if failures:
        result.unreadable.extend(
            {"key": f"alarm-delivery:{f.sink}", "reason": f"{f.alarm.component}/{f.alarm.kind}: {f.error}"}
            for f in failures
        )
    if persist_state:
        if result.state.run_id is None:
            result.state.run_id = run_id
        store.put_json(state_key(run_id), result.state.to_dict())
    return result
