"""The monitor's entry points: :func:`monitor_records` (any records, one pass) and :func:`monitor_step`
(one step of a run in a store, continuing its saved state), and their result, :class:`MonitorResult`.

GRPO learns only from differences between the K rollouts of one prompt (a group). A component whose
value is the same for every rollout of a group gives that group no advantage, however much it varies
across the batch and whatever its weight. See :mod:`rewardpipe.monitoring` for where each part lives.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from rewardpipe.models import Record
from rewardpipe.monitoring.alarms import (
    AGGREGATE_TARGET,
    RESERVED_COMPONENT_NAMES,
    Alarm,
    AlarmSink,
    Delivery,
    DeliveryFailure,
    deliver,
    dispatch,
)
from rewardpipe.monitoring.batch import RecordBatch, accumulate_batch
from rewardpipe.monitoring.causes import diagnose
from rewardpipe.monitoring.examples import choose_examples
from rewardpipe.monitoring.hysteresis import (
    ABSENT,
    IGNORED,
    predates,
    recent_fired,
    stop_judging,
    track_component,
    track_errors,
)
from rewardpipe.monitoring.messages import run_warnings
from rewardpipe.monitoring.pooling import StepHistory, pool_small_steps, stored_step
from rewardpipe.monitoring.state import MonitorState, PendingDelivery, ProvisionalStep, load_state, state_key
from rewardpipe.monitoring.statistics import (
    StepAcc,
    accumulate,
    accumulate_valid,
    last_copies,
    listed,
    validated_records,
)
from rewardpipe.monitoring.thresholds import MonitorInputError, Thresholds
from rewardpipe.monitoring.verdicts import StepReport, step_report
from rewardpipe.store import BadObject, Store, step_prefix


@dataclass
class MonitorResult:
    run_id: str | None
    thresholds: Thresholds
    steps: list[StepReport]
    alarms: list[Alarm]
    state: MonitorState
    unreadable: list[dict[str, Any]] = field(default_factory=list)  # filled by callers reading a source
    #: monitor_step: alarms every durable sink already had (delivered by an earlier, interrupted check)
    already_delivered: list[Alarm] = field(default_factory=list)
    #: monitor_records: the indices of the records it dropped as repeated deliveries (the last copy counts)
    duplicates: list[int] = field(default_factory=list)
    #: groups left out of every statistic, by step and group id, with their tasks and the reason
    #: (:func:`~rewardpipe.monitoring.statistics.set_aside_entry`): the other groups are judged as ever
    set_aside: list[dict[str, Any]] = field(default_factory=list)

    def step(self, n: int) -> StepReport:
        for report in self.steps:
            if report.step == n:
                return report
        raise KeyError(f"no step {n} in this result (steps: {[r.step for r in self.steps]})")

    @property
    def warnings(self) -> list[dict[str, str]]:
        """Warnings about the run as a whole (:func:`rewardpipe.monitoring.messages.run_warnings`)."""
        return run_warnings(self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "thresholds": self.thresholds.model_dump(mode="json"),
            "steps": [report.to_dict() for report in self.steps],
            "alarms": [alarm.to_dict() for alarm in self.alarms],
            **listed("unreadable", self.unreadable),
            **listed("set_aside", self.set_aside),
            "state": self.state.to_dict(),
            "warnings": self.warnings,
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)


def monitor_records(
    records: Iterable[Record | Mapping[str, Any]],
    thresholds: Thresholds | None = None,
    previous_state: MonitorState | Mapping[str, Any] | None = None,
    history: StepHistory | None = None,
    *,
    dedupe: bool = True,
) -> MonitorResult:
    """Compute every step's statistics and verdicts in one pass, then advance the alarm state.

    ``records`` may span several steps (of one run) in any order. ``previous_state`` is the ``state`` of
    an earlier result (object or its ``to_dict()``); the returned ``state`` continues it. Steps the state
    has already checked are reported but marked ``replayed``: they raise no alarms and leave the state as
    it was. Every other step is checked, in step order, even if a later step was checked before it.

    A plain dict that is not a valid record is skipped and listed in ``result.unreadable`` (as
    ``record #<index>``); one bad record never stops the others from being checked.

    ``history``: the steps an earlier call saw, for pooling small steps (:mod:`.pooling`); a caller that
    monitors one step per call (a trainer callback) keeps one :class:`StepHistory` and passes it each time.

    A record delivered more than once (same run, step, group and rollout: a retried delivery, a batch sent
    twice) counts once, the last copy, as in `rewardpipe monitor` (:func:`~.statistics.last_copies`, the same
    code); ``result.duplicates`` lists the dropped copies' indices in ``records``. That holds every record
    until the input ends; ``dedupe=False`` streams instead, for a source that cannot repeat a key (a store).
    """
    bad: list[BadObject] = []
    duplicates: list[int] = []
    if dedupe:  # (checked once, here: the accumulation takes the kept copies as they are)
        run_id, accs = accumulate_valid(last_copies(validated_records(records, bad.append), duplicates))
    else:
        run_id, accs = accumulate(records, on_bad=bad.append)
    result = judge(run_id, accs, thresholds, previous_state, bad, history)
    result.duplicates = duplicates
    return result


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
    history: StepHistory | None = None,
) -> MonitorResult:
    """Verdicts, hysteresis and alarms for every step of ``accs``, in step order (a component short of groups
    at a step is judged over the consecutive small steps: :mod:`.pooling`)."""
    th = thresholds or Thresholds()
    bad = list(bad)
    for step in sorted(accs):
        # Named as the monitor's own alarms on the aggregate reward and on errors, a component's alarms would be
        # mistaken for them (one silencing the other). A reward refuses such a name when it is defined; records of
        # another writer that use one have that component left out of the step, said here, and the rest judged:
        # one writer's mistake never stops the run's check.
        reserved = sorted(RESERVED_COMPONENT_NAMES.intersection(accs[step].component_names()))
        if reserved:
            accs[step].drop_components(reserved)
            bad.append(
                BadObject(
                    f"step {step}",
                    f"records name a component {', '.join(map(repr, reserved))}, the name of the monitor's own alarms "
                    f"on the aggregate reward and on errors: left out of the step (a reward refuses the name when it "
                    f"is defined); rename the component in the records' writer",
                )
            )
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
    history = history if history is not None else StepHistory()

    reports: list[StepReport] = []
    alarms: list[Alarm] = []
    set_aside: list[dict[str, Any]] = []
    for step in sorted(accs):
        acc = accs.pop(step)
        set_aside.extend(acc.set_aside)
        report = step_report(step, acc, th, recent_fired(state, step))
        reports.append(report)
        if state.is_checked(step):
            report.replayed = True
            report.diagnoses = diagnose(report.components, acc, th)
            continue
        pooling = pool_small_steps(report, acc, state, th, history)
        history.remember(step, acc)
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
        step_alarms.extend(_stop_judging(report, ignored, state, run_id))
        alarm = track_errors(report, run_id, state, th)
        if alarm:
            step_alarms.append(alarm)
        report.diagnoses = diagnose(report.components, pooling.acc, th)  # after tracking: it reads ``dying``
        for alarm in step_alarms:
            explain(alarm, report, pooling.acc, th)
            pooling.annotate(alarm)
        alarms.extend(step_alarms)
        state.mark_checked(step)
        state.provisional = None  # this judgement continued the state: an earlier step is judged for good
    return MonitorResult(
        run_id=run_id,
        thresholds=th,
        steps=reports,
        alarms=alarms,
        state=state,
        unreadable=[b.to_dict() for b in bad],
        set_aside=set_aside,
    )


def _stop_judging(report: StepReport, ignored: set[str], state: MonitorState, run_id: str | None) -> list[Alarm]:
    """The targets a checked step no longer judges: the components it leaves out of every scored record (renamed,
    removed) and the ignored ones. Their open dead alarms were never cleared and their dead streaks kept counting in
    the variance check's DeadStreak: each is closed with a note (:func:`~.hysteresis.stop_judging`). A step with no
    scored record tells nothing of its components (the error-rate alarm speaks for it)."""
    alarms = []
    for key, target in state.targets.items():
        name = AGGREGATE_TARGET if key == AGGREGATE_TARGET else key.removeprefix("component:")
        if key != AGGREGATE_TARGET and not key.startswith("component:"):
            continue
        if name in ignored:
            cause = IGNORED
        elif predates(target, report.step):
            continue  # a late step from before its alarm (a component added since): nothing it lacks is news
        elif key != AGGREGATE_TARGET and report.scored and name not in report.components:
            cause = ABSENT
        else:
            continue
        if target.active or target.dead_streak or target.streak or target.dying_active:
            alarm = stop_judging(target, name, report.step, run_id, cause)
            if alarm is not None:
                alarms.append(alarm)
    return alarms


def explain(alarm: Alarm, report: StepReport, acc: StepAcc, th: Thresholds) -> None:
    """Attach the step's diagnoses that name the alarm's component, and example rollouts."""
    if alarm.kind == "recovered":
        return
    related = [d for d in report.diagnoses if alarm.component in d.components]
    alarm.causes = [d.to_dict() for d in related]
    alarm.examples = [e.to_dict() for e in choose_examples(alarm, acc, th, [d.cause for d in related])]


class StepPublisher(Protocol):
    """What an adapter adds to each step :func:`monitor_step` checks (the variance-check Lambda: the
    verdict JSON and the CloudWatch metrics)."""

    def before_commit(self, run_id: str, result: MonitorResult) -> list[dict[str, Any]]:
        """Publish what may be published twice (the verdict object, at a key of its own) and return what
        must be delivered once (metric points, as JSON), to keep in the step's pending delivery."""

    def publish(self, run_id: str, entry: PendingDelivery) -> None:
        """Deliver ``entry.metrics``; raise if they were not delivered (they stay pending)."""


def monitor_step(
    store: Store,
    run_id: str,
    step: int,
    thresholds: Thresholds | None = None,
    sinks: Iterable[AlarmSink] = (),
    *,
    persist_state: bool = True,
    publisher: StepPublisher | None = None,
    provisional: bool = False,
) -> MonitorResult:
    """Monitor one step of a run stored in ``store``, continuing the run's saved hysteresis state.

    The local runner calls this after each step, and so does the variance-check Lambda: it reads the
    state from :func:`state_key`, reads the step's records (unreadable objects are listed in
    ``result.unreadable``), and then, so that no alarm is lost or delivered twice whatever fails when:

    1. delivers what earlier checks committed but did not deliver (the state's ``pending``: a check that
       died after its commit, a sink that failed);
    2. commits the new state with this step checked **and** its alarms (and the publisher's metrics)
       pending, in one write: until it is written nothing is delivered, and the step is checked again
       next time;
    3. delivers them (:func:`~rewardpipe.monitoring.alarms.deliver`: a durable sink's ledger is asked
       first, so an alarm that got through before is not sent again), then commits the state without the
       entries that were delivered everywhere.

    ``result.alarms`` are the alarms this call delivered for the first time (a late one of an earlier
    step included); ``result.already_delivered`` those every durable sink already had. A delivery that
    failed is listed in ``result.unreadable`` as ``alarm-delivery:<sink>`` and stays pending. A corrupt
    saved state is moved aside and replaced by a fresh one (:func:`load_state`), and listed too. With
    ``persist_state=False`` nothing is committed and the alarms go straight to ``sinks``.

    ``provisional`` (the scheduled variance check, which judges a step before it can know it is whole): the step,
    once judged, stays open to a new judgement (``state.provisional``) while no later step is judged and if it
    raised no alarm; called again for that step when more objects are stored under it, it is judged again, whole,
    from the targets it was first judged from (:func:`rewardpipe.monitoring.check_pending` decides when).
    """
    previous, state_problem = load_state(store, run_id)
    bad: list[BadObject] = [state_problem] if state_problem is not None else []
    sinks = list(sinks)
    late = Delivery()
    notes: list[dict[str, Any]] = []
    if persist_state and previous.pending:
        late = _deliver_pending(store, run_id, previous, sinks, publisher, notes)
    listed = len(store.list_keys(step_prefix(run_id, step))) if provisional and persist_state else None
    judged_from = _reopened(previous, step, listed) if listed is not None else previous
    result = monitor_records(
        store.iter_records(run_id, step, on_bad=bad.append),
        thresholds,
        judged_from,
        StepHistory(load=stored_step(store, run_id), listing=lambda: store.list_steps(run_id)),
        dedupe=False,  # a store holds one object per (run, step, group, rollout): nothing can repeat
    )
    result.unreadable = [b.to_dict() for b in bad] + result.unreadable
    if not persist_state:
        result.unreadable.extend(_failed(dispatch(result.alarms, sinks)))
        return result
    if result.state.run_id is None:
        result.state.run_id = run_id
    newly = any(report.step == step and not report.replayed for report in result.steps)
    if newly:
        metrics = publisher.before_commit(run_id, result) if publisher is not None else []
        if result.alarms or metrics:
            result.state.pending.append(
                PendingDelivery(step=step, alarms=[a.to_dict() for a in result.alarms], metrics=metrics)
            )
        if listed is not None and not result.alarms and result.state.last_step == step:
            result.state.provisional = ProvisionalStep(step=step, keys=listed, before=judged_from.targets)
    commit_state(store, run_id, result.state)  # the step and what it owes, in one write
    now = _deliver_pending(store, run_id, result.state, sinks, publisher, notes, only_step=step)
    # a late alarm still owed is listed when it finally goes through, not on every call until then
    result.alarms = [alarm for alarm in late.raised if alarm not in late.owed] + now.raised
    result.already_delivered = late.already + now.already
    result.unreadable.extend(_failed(late.failures + now.failures) + notes)
    return result


def _reopened(state: MonitorState, step: int, listed: int) -> MonitorState:
    """``state`` with ``step`` open to a new judgement when it is the state's provisional step and more objects
    are stored under it than when it was judged: its targets as before that judgement, the step unchecked."""
    held = state.provisional
    if held is None or held.step != step or state.last_step != step or listed <= held.keys:
        return state
    reopened = state.model_copy(deep=True)
    reopened.targets = {key: target.model_copy(deep=True) for key, target in held.before.items()}
    reopened.unmark_newest(step)
    reopened.provisional = None
    return reopened


def flush_pending(
    store: Store, run_id: str, sinks: Iterable[AlarmSink] = (), publisher: StepPublisher | None = None
) -> tuple[Delivery, list[dict[str, Any]]]:
    """Deliver what the run's state still owes (the outbox of checks that died or whose sinks failed),
    without checking any step: (what was delivered, notes on what failed)."""
    state, _ = load_state(store, run_id)
    notes: list[dict[str, Any]] = []
    if not state.pending:
        return Delivery(), notes
    done = _deliver_pending(store, run_id, state, list(sinks), publisher, notes)
    notes.extend(_failed(done.failures))
    return done, notes


def commit_state(store: Store, run_id: str, state: MonitorState) -> None:
    """Write the run's state, with a fresh ``commit`` token (see MonitorState.commit)."""
    state.commit = uuid.uuid4().hex
    store.put_json(state_key(run_id), state.to_dict())


def _deliver_pending(
    store: Store,
    run_id: str,
    state: MonitorState,
    sinks: list[AlarmSink],
    publisher: StepPublisher | None,
    notes: list[dict[str, Any]],
    only_step: int | None = None,
) -> Delivery:
    """Deliver the state's pending entries (or only step ``only_step``'s), drop what got everywhere, and
    commit the state if that changed it. A failing commit here is only noted: what was delivered is in
    the sinks' ledgers, and the entries are delivered (as far as still owed) by the next check."""
    total = Delivery()
    keep: list[PendingDelivery] = []
    changed = False
    for entry in state.pending:
        if only_step is not None and entry.step != only_step:
            keep.append(entry)
            continue
        done = deliver([Alarm.from_dict(alarm) for alarm in entry.alarms], sinks)
        for name in ("raised", "already", "failures"):
            getattr(total, name).extend(getattr(done, name))
        metrics = entry.metrics
        if metrics and publisher is not None:
            try:
                publisher.publish(run_id, entry)
                metrics = []
            except Exception as exc:  # noqa: BLE001 - kept pending, reported, delivered next time
                notes.append(
                    {
                        "key": f"metrics-delivery:{type(publisher).__name__}",
                        "reason": f"step {entry.step}: {type(exc).__name__}: {exc}",
                    }
                )
        owed = [alarm.to_dict() for alarm in done.owed]
        if owed or metrics:
            keep.append(PendingDelivery(step=entry.step, alarms=owed, metrics=metrics))
        changed = changed or owed != entry.alarms or metrics != entry.metrics
    if changed:
        state.pending = keep
        try:
            commit_state(store, run_id, state)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            notes.append(
                {
                    "key": state_key(run_id),
                    "reason": f"delivered, but the state that says so could not be "
                    f"written ({type(exc).__name__}: {exc}); the next "
                    f"check delivers what is still owed",
                }
            )
    return total


def _failed(failures: list[DeliveryFailure]) -> list[dict[str, Any]]:
    return [
        {"key": f"alarm-delivery:{f.sink}", "reason": f"{f.alarm.component}/{f.alarm.kind}: {f.error}"}
        for f in failures
    ]
