"""Alarms raised by the monitor and the sinks that deliver them.

An :class:`Alarm` is a plain value (JSON-serialisable through :meth:`Alarm.to_dict`). The monitor decides
*when* to raise one (once per onset, with hysteresis); sinks only decide *where* it goes:

* :class:`ConsoleAlarmSink` prints it with rich (the local default);
* :class:`StoreAlarmSink` writes it beside the records, at
  ``runs/<run_id>/alarms/step=<n>/<component>-<kind>.json`` (deterministic, so a replay overwrites);
* :class:`SnsAlarmSink` publishes it to an SNS topic (the AWS variant).

:func:`dispatch` sends alarms to several sinks; a failing sink is reported, never allowed to stop the
others or the caller.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Literal, Protocol

from rewardpipe.store import Store, encode_id, run_prefix

AlarmKind = Literal["dead_component", "error_rate", "recovered"]

#: ``component`` of an error-rate alarm (errors belong to records, not to one component).
ERRORS_TARGET = "errors"
#: ``component`` of alarms about the weighted total reward.
AGGREGATE_TARGET = "aggregate"


@dataclass
class Alarm:
    """One alarm.

    ``kind``: ``dead_component`` (a component, or the aggregate, has stopped varying inside groups),
    ``error_rate`` (too many records could not be scored) or ``recovered`` (the condition named by
    ``recovered_from`` has cleared). ``cause`` is a stable machine-readable reason (``constant_at_minimum``,
    ``constant_at_maximum``, ``constant_everywhere``, ``constant_within_groups``, ``components_cancel``,
    ``error_rate``, ``recovered``); ``message`` is the sentence for a human; ``figures`` holds the numbers.
    """

    kind: AlarmKind
    component: str
    step: int
    cause: str
    message: str
    run_id: str | None = None
    recovered_from: str | None = None
    figures: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Alarm":
        return cls(**data)

    @property
    def is_recovery(self) -> bool:
        return self.kind == "recovered"


def alarm_key(run_id: str, step: int, component: str, kind: str) -> str:
    """Where an alarm is stored: ``runs/<run_id>/alarms/step=<n>/<component>-<kind>.json``."""
    return f"{run_prefix(run_id)}alarms/step={int(step)}/{encode_id(component)}-{encode_id(kind)}.json"


class AlarmSink(Protocol):
    def emit(self, alarm: Alarm) -> None: ...


@dataclass
class DeliveryFailure:
    sink: str
    alarm: Alarm
    error: str


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


# --------------------------------------------------------------------------------------------------


_STYLE = {"dead_component": "bold red", "error_rate": "bold yellow", "recovered": "bold green"}
_LABEL = {"dead_component": "DEAD", "error_rate": "ERRORS", "recovered": "RECOVERED"}


class ConsoleAlarmSink:
    """Print alarms to the terminal. Pass ``Console(stderr=True)`` to keep stdout for JSON."""

    def __init__(self, console: Any = None) -> None:
        if console is None:
            from rich.console import Console

            console = Console(stderr=True)
        self.console = console

    def emit(self, alarm: Alarm) -> None:
        from rich.markup import escape

        style = _STYLE.get(alarm.kind, "bold")
        label = _LABEL.get(alarm.kind, alarm.kind.upper())
        run = f" run {escape(alarm.run_id)}" if alarm.run_id else ""
        self.console.print(
            f"[{style}]ALARM {label}[/{style}]{run} step {alarm.step} "
            f"[bold]{escape(alarm.component)}[/bold]: {escape(alarm.message)}",
            highlight=False,
            soft_wrap=True,
        )


class StoreAlarmSink:
    """Write each alarm as JSON beside the records of its run (``alarm_key``)."""

    def __init__(self, store: Store, run_id: str | None = None) -> None:
        self.store = store
        self.run_id = run_id
        self.written: list[str] = []

    def emit(self, alarm: Alarm) -> None:
        run_id = alarm.run_id or self.run_id
        if not run_id:
            raise ValueError("StoreAlarmSink needs a run_id (on the alarm or the sink) to place the alarm")
        key = alarm_key(run_id, alarm.step, alarm.component, alarm.kind)
        self.store.put_json(key, alarm.to_dict())
        self.written.append(key)


class SnsAlarmSink:
    """Publish each alarm to an SNS topic: a readable subject, the alarm as JSON in the body, and
    ``kind``/``component``/``run_id`` as message attributes so subscriptions can filter on them."""

    SUBJECT_LIMIT = 100  # SNS rejects longer subjects

    def __init__(self, topic_arn: str, client: Any = None) -> None:
        if not topic_arn or not topic_arn.startswith("arn:"):
            raise ValueError(f"SnsAlarmSink needs a topic ARN (arn:aws:sns:...), got {topic_arn!r}")
        if client is None:
            import boto3

            client = boto3.client("sns")
        self.topic_arn = topic_arn
        self.client = client
        self.message_ids: list[str] = []

    @classmethod
    def subject(cls, alarm: Alarm) -> str:
        run = f" run {alarm.run_id}" if alarm.run_id else ""
        text = f"[rewardpipe] {alarm.kind}: {alarm.component}{run} step {alarm.step}"
        # SNS subjects: ASCII, no line breaks, at most 100 characters.
        text = "".join(ch if 32 <= ord(ch) < 127 else "?" for ch in text)
        return text if len(text) <= cls.SUBJECT_LIMIT else text[: cls.SUBJECT_LIMIT - 3] + "..."

    def emit(self, alarm: Alarm) -> None:
        attributes = {
            "kind": {"DataType": "String", "StringValue": alarm.kind},
            "component": {"DataType": "String", "StringValue": alarm.component},
        }
        if alarm.run_id:
            attributes["run_id"] = {"DataType": "String", "StringValue": alarm.run_id}
        response = self.client.publish(
            TopicArn=self.topic_arn,
            Subject=self.subject(alarm),
            Message=json.dumps(alarm.to_dict(), indent=2, sort_keys=True),
            MessageAttributes=attributes,
        )
        self.message_ids.append(response["MessageId"])
