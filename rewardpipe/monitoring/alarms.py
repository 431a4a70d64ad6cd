"""Alarms raised by the monitor, where they are stored, and how they are handed to sinks.

An :class:`Alarm` is a plain value (JSON-serialisable through :meth:`Alarm.to_dict`). The monitor decides
*when* to raise one (once per onset, with hysteresis: :mod:`rewardpipe.monitoring.hysteresis`); sinks
(:mod:`rewardpipe.monitoring.sinks`) only decide *where* it goes. :func:`dispatch` sends alarms to several
sinks; a failing sink is reported, never allowed to stop the others or the caller.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol
from urllib.parse import quote

from rewardpipe.store import encode_id, run_prefix

AlarmKind = Literal["dead_component", "dying_component", "error_rate", "recovered"]

#: ``component`` of an error-rate alarm (errors belong to records, not to one component).
ERRORS_TARGET = "errors"
#: ``component`` of alarms about the weighted total reward.
AGGREGATE_TARGET = "aggregate"
#: Names no component may have: an alarm's ``component`` (its key, its stored object, its SNS dedupe key, its
#: examples, ``--ignore``) could not tell the two apart. A reward refuses them when it is defined
#: (``rewardpipe.components.RESERVED_NAMES``, the same set); the monitor refuses records that use one.
RESERVED_COMPONENT_NAMES = frozenset({AGGREGATE_TARGET, ERRORS_TARGET})


@dataclass
class Alarm:
    """One alarm.

    ``kind``: ``dead_component`` (a component, or the aggregate, has stopped varying inside groups),
    ``dying_component`` (an early warning: its zero-variance share is rising steadily towards the dead
    threshold; ``figures.projected_dead_step`` says when it gets there), ``error_rate`` (too many records could not be
    scored) or ``recovered`` (the condition named by ``recovered_from`` has cleared). ``cause`` is a stable
    machine-readable reason (``constant_at_minimum``, ``constant_at_maximum``, ``constant_everywhere``,
    ``constant_within_groups``, ``components_cancel``, ``no_values``, ``sparse_values``, ``error_rate``, ``recovered``;
    a ``recovered`` alarm that closes a dead alarm whose component is no longer judged, without a recovery, says why:
    ``no_longer_judged_idle_penalty``, ``no_longer_judged_absent`` or ``no_longer_judged_ignored``);
    ``message`` is the sentence for a human; ``figures`` holds the numbers.
    """

    kind: AlarmKind
    component: str
    step: int
    cause: str
    message: str
    run_id: str | None = None
    recovered_from: str | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    #: Named causes across components (``saturation``, ``shaping_starves_outcome``, ``unreachable_gate``,
    #: ``redundant_components``), each ``{"cause", "components", "message", "figures"}``.
    causes: list[dict[str, Any]] = field(default_factory=list)
    #: Rollouts that show why: ``{"rollout_id", "group_id", "step", "transcript_key", "reason"}``,
    #: ``transcript_key`` relative to the store root (see ``rewardpipe.monitoring.examples``).
    examples: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "dedupe_key": self.dedupe_key}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Alarm:
        known = {name for name in cls.__dataclass_fields__}
        return cls(**{key: value for key, value in data.items() if key in known})

    @property
    def dedupe_key(self) -> str:
        """What makes an alarm the same alarm: its run, step, component and kind. A run raises it at most
        once (a step is checked once; a replay raises nothing), so it names one delivery: the ledger
        entry of every durable sink, the SNS ``dedupe_key`` attribute and, on a FIFO topic, the
        deduplication id. The ids are percent-encoded, so no two alarms share one."""
        return "/".join(
            quote(part, safe="", errors="surrogatepass")
            for part in (self.run_id or "", str(int(self.step)), self.component, self.kind)
        )

    @property
    def is_recovery(self) -> bool:
        return self.kind == "recovered"


def alarm_key(run_id: str, step: int, component: str, kind: str) -> str:
    """Where an alarm is stored: ``runs/<run_id>/alarms/step=<n>/<component>-<kind>.json``."""
    return f"{run_prefix(run_id)}alarms/step={int(step)}/{_segment(component)}-{_segment(kind)}.json"


def _segment(name: str) -> str:
    """A component or kind as a key segment; a component may be named "" (``%~e``: quote never writes it)."""
    return encode_id(name) if name else "%~e"


def delivery_key(run_id: str, alarm: Alarm, sink: str) -> str:
    """A durable sink's ledger entry for one alarm:
    ``runs/<run_id>/monitor/delivered/step=<n>/<component>-<kind>.<sink>.json`` (beside the monitor state,
    outside ``alarms/``, which holds alarms only)."""
    return (
        f"{run_prefix(run_id)}monitor/delivered/step={int(alarm.step)}/"
        f"{_segment(alarm.component)}-{_segment(alarm.kind)}.{sink}.json"
    )


def warning_delivery_key(run_id: str, kind: str, sink: str) -> str:
    """A sink's ledger entry for a run warning of ``kind``, sent once per run:
    ``runs/<run_id>/monitor/delivered/warnings/<kind>.<sink>.json``."""
    return f"{run_prefix(run_id)}monitor/delivered/warnings/{_segment(kind)}.{sink}.json"


class AlarmSink(Protocol):
    def emit(self, alarm: Alarm) -> None: ...


class DurableSink(AlarmSink, Protocol):
    """A sink that keeps a ledger of what it delivered (the store's alarm objects, an SNS topic's delivery
    markers): :func:`deliver` asks it before emitting, so an alarm reaches it once."""

    def already_delivered(self, alarm: Alarm) -> bool: ...


@dataclass
class DeliveryFailure:
    sink: str
    alarm: Alarm
    error: str


@dataclass
class Delivery:
    """What :func:`deliver` did: the alarms it raised (sent, or tried to send, to a sink that did not have
    them yet; every alarm when no sink keeps a ledger), the ones every durable sink already had (raised
    before: not again), the failures, and the alarms still owed to some sink (to deliver again later)."""

    raised: list[Alarm] = field(default_factory=list)
    already: list[Alarm] = field(default_factory=list)
    failures: list[DeliveryFailure] = field(default_factory=list)
    owed: list[Alarm] = field(default_factory=list)


def deliver(alarms: Iterable[Alarm], sinks: Iterable[AlarmSink]) -> Delivery:
    """Deliver each alarm once: to every durable sink (``already_delivered``) whose ledger does not have it,
    then to the live sinks (the terminal) only if some durable sink did not have it, or if no sink keeps a
    ledger. A ledger that cannot be read counts as a failure (the alarm stays owed): delivering anyway
    could deliver twice, dropping it would lose it. Never raises."""
    sinks = list(sinks)
    durable = [sink for sink in sinks if callable(getattr(sink, "already_delivered", None))]
    live = [sink for sink in sinks if sink not in durable]
    out = Delivery()
    for alarm in alarms:
        fresh = not durable  # some durable sink received it now
        owed = False
        for sink in durable:
            try:
                if sink.already_delivered(alarm):  # type: ignore[attr-defined]
                    continue
                sink.emit(alarm)
                fresh = True
            except Exception as exc:  # noqa: BLE001 - one broken sink must not hide the alarm elsewhere
                owed = True
                out.failures.append(DeliveryFailure(type(sink).__name__, alarm, f"{type(exc).__name__}: {exc}"))
        if fresh or owed:
            out.failures.extend(dispatch([alarm], live))
            out.raised.append(alarm)
        else:
            out.already.append(alarm)
        if owed:
            out.owed.append(alarm)
    return out


def dispatch(alarms: Iterable[Alarm], sinks: Iterable[AlarmSink]) -> list[DeliveryFailure]:
    """Send every alarm to every sink; return the deliveries that failed instead of raising."""
    sinks = list(sinks)
    failures: list[DeliveryFailure] = []
    for alarm in alarms:
        for sink in sinks:
            try:
                sink.emit(alarm)
            except Exception as exc:  # noqa: BLE001 - one broken sink must not hide the alarm elsewhere
                failures.append(DeliveryFailure(type(sink).__name__, alarm, f"{type(exc).__name__}: {exc}"))
    return failures


@dataclass(frozen=True)
class OnsetMarker:
    """An alarm onset to mark on a component's timeline: ``dead`` (the alarm step) or ``dying`` (the warning
    step, with the step at which the fitted rise reaches the dead threshold)."""

    component: str
    kind: str  # "dead" | "dying"
    step: int
    projected_dead_step: int | None = None


def onset_markers(alarms: Iterable[Any]) -> list[OnsetMarker]:
    """The dead and dying onsets among ``alarms`` (Alarm objects or their dicts), in alarm order; recovered
    and error-rate alarms are not component onsets."""
    out = []
    for alarm in alarms:
        data: Mapping[str, Any] = alarm if isinstance(alarm, Mapping) else alarm.to_dict()
        onsets: dict[Any, str] = {"dead_component": "dead", "dying_component": "dying"}
        kind = onsets.get(data.get("kind"))
        if kind is None:
            continue
        component = str(data.get("component"))
        component = component[len("component:") :] if component.startswith("component:") else component
        projected = (data.get("figures") or {}).get("projected_dead_step") if kind == "dying" else None
        out.append(OnsetMarker(component, kind, int(data["step"]), projected))
    return out
