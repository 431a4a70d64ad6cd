"""Where alarms go: the terminal, the store beside the records, or an SNS topic.

* :class:`ConsoleAlarmSink` prints it with rich (the local default);
* :class:`StoreAlarmSink` writes it beside the records, at
  ``runs/<run_id>/alarms/step=<n>/<component>-<kind>.json`` (deterministic, so a replay overwrites);
* :class:`SnsAlarmSink` publishes it to an SNS topic (the AWS variant).
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from typing import Any
from urllib.parse import quote

from rewardpipe.monitoring.alarms import Alarm, alarm_key, delivery_key, warning_delivery_key
from rewardpipe.store import Store

_STYLE = {
    "dead_component": "bold red",
    "dying_component": "bold magenta",
    "error_rate": "bold yellow",
    "recovered": "bold green",
}
_LABEL = {"dead_component": "DEAD", "dying_component": "DYING", "error_rate": "ERRORS", "recovered": "RECOVERED"}


class ConsoleAlarmSink:
    """Print alarms to the terminal. Pass ``Console(stderr=True)`` to keep stdout for JSON. ``location`` is the
    store's (a directory or ``s3://bucket/prefix``): each example's transcript is then shown where it is, under
    it, rather than as its key relative to the store root (which, beside ``--out runs``, named no file). Without
    one, the key is printed as ``transcript_key runs/...``: relative to the store that wrote the records."""

    def __init__(self, console: Any = None, location: str | None = None) -> None:
        if console is None:
            from rich.console import Console

            console = Console(stderr=True)
        self.console = console
        self.location = location

    def transcript_at(self, key: Any) -> Any:
        """Where the transcript of ``key`` (a ``transcript_key``) is: under the store's location when known."""
        from rewardpipe.store import location_path

        if not self.location or not isinstance(key, str) or not key:
            return key
        return location_path(self.location, key)  # as the store names its objects (Store.path_of)

    def emit(self, alarm: Alarm) -> None:
        from rich.markup import escape

        from rewardpipe.safe_text import printable

        def shown(value: Any) -> str:
            # Rich markup escaped, and control and format characters as visible escapes: an example's reason
            # quotes the executor's (the model's program's output), a component name is any text; raw, an ANSI
            # or OSC sequence or a bidi override in them reached the terminal.
            return escape(printable(str(value), keep_newlines=False))

        style = _STYLE.get(alarm.kind, "bold")
        label = _LABEL.get(alarm.kind, alarm.kind.upper())
        run = f" run {shown(alarm.run_id)}" if alarm.run_id else ""
        self.console.print(
            f"[{style}]ALARM {label}[/{style}]{run} step {alarm.step} "
            f"[bold]{shown(alarm.component)}[/bold]: {shown(alarm.message)}",
            highlight=False,
            soft_wrap=True,
        )
        for cause in alarm.causes:
            self.console.print(
                f"  [bold]cause {shown(cause.get('cause'))}[/bold]: {shown(cause.get('message'))}",
                highlight=False,
                soft_wrap=True,
            )
        # without a location the key is relative to a store this sink does not know: it is said to be a key
        key_label = "" if self.location else "transcript_key "
        for example in alarm.examples:
            key = example.get("transcript_key")
            where = f"{key_label}{shown(self.transcript_at(key))}" if key else ""
            self.console.print(
                f"  example {shown(example.get('rollout_id'))} (group {shown(example.get('group_id'))}): "
                f"{shown(example.get('reason'))} [dim]{where}[/dim]",
                highlight=False,
                soft_wrap=True,
            )


class StoreAlarmSink:
    """Write each alarm as JSON beside the records of its run (``alarm_key``). Durable: the stored alarm
    object is its own ledger (``already_delivered``), so an alarm is written once per run."""

    def __init__(self, store: Store, run_id: str | None = None) -> None:
        self.store = store
        self.run_id = run_id
        self.written: list[str] = []

    def _key(self, alarm: Alarm) -> str:
        run_id = alarm.run_id or self.run_id
        if not run_id:
            raise ValueError("StoreAlarmSink needs a run_id (on the alarm or the sink) to place the alarm")
        return alarm_key(run_id, alarm.step, alarm.component, alarm.kind)

    def already_delivered(self, alarm: Alarm) -> bool:
        """The alarm's object is stored (an unreadable one is written again)."""
        try:
            stored = json.loads(self.store.get_bytes(self._key(alarm)))
        except KeyError:
            return False
        except ValueError:  # not JSON (or cut short): written again
            return False
        return isinstance(stored, dict) and (stored.get("kind"), stored.get("component"), stored.get("step")) == (
            alarm.kind,
            alarm.component,
            alarm.step,
        )

    def emit(self, alarm: Alarm) -> None:
        key = self._key(alarm)
        self.store.put_json(key, alarm.to_dict())
        self.written.append(key)


class SnsAlarmSink:
    """Publish each alarm to an SNS topic: a readable subject, the alarm as JSON in the body, and
    ``kind``/``component``/``run_id`` as message attributes so subscriptions can filter on them."""

    SUBJECT_LIMIT = 100  # SNS rejects longer subjects
    #: SNS's limit on one Publish: "All parts of the message attribute, including name, type, and value, are included
    #: in the message size restriction, which is 256 KiB (262,144 bytes)", UTF-8 bytes, with the message itself.
    PUBLISH_LIMIT = 256 * 1024
    MESSAGE_LIMIT = PUBLISH_LIMIT - 4096  # the message's share when the attributes are short; keep a margin
    #: UTF-8 bytes of one attribute value: a component, run id or dedupe key longer than this (a stored record may
    #: name a component with any text) is cut with a marker and a digest of the whole value.
    ATTRIBUTE_LIMIT = 1024
    #: Characters of a run warning's message sent (a warning quotes component names, cut at 80 characters each).
    WARNING_MESSAGE_LIMIT = 4000

    def __init__(self, topic_arn: str, client: Any = None, *, ledger: Store | None = None) -> None:
        if not topic_arn or not topic_arn.startswith("arn:"):
            raise ValueError(f"SnsAlarmSink needs a topic ARN (arn:aws:sns:...), got {topic_arn!r}")
        if client is None:
            import boto3

            client = boto3.client("sns")
        self.topic_arn = topic_arn
        self.client = client
        self.ledger = ledger
        self.message_ids: list[str] = []

    @property
    def fifo(self) -> bool:
        return self.topic_arn.endswith(".fifo")

    def _ledger_key(self, alarm: Alarm) -> str | None:
        if self.ledger is None or not alarm.run_id:
            return None
        return delivery_key(alarm.run_id, alarm, "sns")

    def already_delivered(self, alarm: Alarm) -> bool:
        """With a ``ledger`` store: a publish of this alarm got through before (its marker is stored). SNS
        has no idempotent publish on a standard topic, so this ledger is what keeps a retried check from
        sending an alarm twice; the one window left is a check that dies between SNS's answer and the
        marker's write. On a FIFO topic, SNS also drops a repeat with the same deduplication id within
        five minutes. Without a ledger: always False (every call publishes)."""
        key = self._ledger_key(alarm)
        if key is None:
            return False
        try:
            self.ledger.get_bytes(key)  # type: ignore[union-attr]
        except KeyError:
            return False
        return True

    @classmethod
    def subject(cls, alarm: Alarm) -> str:
        run = f" run {alarm.run_id}" if alarm.run_id else ""
        return cls._subject_text(f"[rewardpipe] {alarm.kind}: {alarm.component}{run} step {alarm.step}")

    @classmethod
    def _subject_text(cls, text: str) -> str:
        """SNS subjects: ASCII, no line breaks, at most 100 characters."""
        text = "".join(ch if 32 <= ord(ch) < 127 else "?" for ch in text)
        return text if len(text) <= cls.SUBJECT_LIMIT else text[: cls.SUBJECT_LIMIT - 3] + "..."

    @classmethod
    def message(cls, alarm: Alarm, limit: int | None = None) -> str:
        """The alarm as JSON of at most ``limit`` UTF-8 bytes (:data:`MESSAGE_LIMIT` by default). If it would be
        larger, examples are dropped from the end (the count is kept in ``examples_dropped``); if it still is (a
        component named with 200 KB of text, thousands of causes), every long string and list is cut with a
        ``...[cut: ...]`` marker and ``truncated`` says so, down to the alarm's identity alone at worst: an
        alarm is never lost to its evidence (the full alarm is in the store beside the records)."""
        limit = cls.MESSAGE_LIMIT if limit is None else limit
        data = alarm.to_dict()
        text = _alarm_json(data)
        dropped = 0
        while _utf8(text) > limit and data["examples"]:
            data["examples"] = data["examples"][:-1]
            dropped += 1
            data["examples_dropped"] = dropped
            text = _alarm_json(data)
        for cap in (4096, 512, 64, 16):
            if _utf8(text) <= limit:
                return text
            text = _alarm_json({**_cut_long(data, cap), "truncated": TRUNCATED_NOTE})
        if _utf8(text) <= limit:
            return text
        identity = {k: data.get(k) for k in ("kind", "component", "step", "cause", "run_id", "dedupe_key")}
        return _alarm_json({**_cut_long(identity, 64), "truncated": TRUNCATED_NOTE})

    @classmethod
    def attribute(cls, value: str) -> dict[str, str]:
        """A String message attribute. SNS: "Name, type, and value must not be empty or null", and the value is
        UTF-8 text. A stored record's component may be named "" or hold a control character or a lone
        surrogate (the monitor reads any name): such a value is sent as its JSON string (``""``, ``"a\\tb"``),
        so the alarm is still delivered instead of failing every check of its run. A value over
        :data:`ATTRIBUTE_LIMIT` bytes is cut, with a marker naming its length and a digest of the whole value
        (two long names sharing a beginning stay apart for a filter or a dedupe)."""
        text = str(value)
        if not text or not (text.isprintable() or all(unicodedata.category(c) not in ("Cc", "Cs") for c in text)):
            text = json.dumps(text)
        if _utf8(text) > cls.ATTRIBUTE_LIMIT:
            marker = f"...[cut: {len(text)} characters, sha256 {_digest(text)[:32]}]"
            room = cls.ATTRIBUTE_LIMIT - len(marker)
            head = text[:room]
            while _utf8(head) > room:  # multi-byte characters: a character is at most 4 bytes, so never cut too much
                head = head[: -max(1, (_utf8(head) - room) // 4)]
            text = head + marker
        return {"DataType": "String", "StringValue": text}

    @classmethod
    def publish_size(cls, message: str, attributes: dict[str, dict[str, str]]) -> int:
        """Bytes SNS counts against :data:`PUBLISH_LIMIT`: the message and every attribute's name, type, value."""
        return _utf8(message) + sum(
            _utf8(name) + _utf8(attr["DataType"]) + _utf8(attr["StringValue"]) for name, attr in attributes.items()
        )

    def emit(self, alarm: Alarm) -> None:
        attributes = {"kind": self.attribute(alarm.kind), "component": self.attribute(alarm.component)}
        if alarm.run_id:
            attributes["run_id"] = self.attribute(alarm.run_id)
        # subscribers can drop a repeat themselves: the same alarm always carries the same key
        attributes["dedupe_key"] = self.attribute(alarm.dedupe_key)
        message = self.message(alarm, min(self.MESSAGE_LIMIT, self.PUBLISH_LIMIT - self.publish_size("", attributes)))
        self._publish(self.subject(alarm), message, attributes, alarm.dedupe_key, alarm.run_id, self._ledger_key(alarm))

    def warn(self, run_id: str, step: int, warning: dict[str, str]) -> bool:
        """Publish a run warning (``{"kind", "message"}`` of :func:`rewardpipe.monitoring.messages.run_warnings`: the
        rule-based user replacing the LLM-played one, values out of their declared range...) once per run and kind:
        True if it was sent now, False if the ledger says an earlier step's was. A notice, never an alarm: its
        message attribute ``notice`` is ``run_warning`` (an alarm has none), its ``kind`` the warning's, and nothing of
        it is stored under ``alarms/`` or opens a CloudWatch alarm. Needs a ``ledger`` (without one, every call sends:
        the same warning each step would flood the topic)."""
        if self.ledger is None:
            raise ValueError("SnsAlarmSink.warn needs a ledger store: a run's warning is sent once, kept there")
        kind = str(warning.get("kind", ""))
        key = warning_delivery_key(run_id, kind, "sns")
        try:
            self.ledger.get_bytes(key)
            return False
        except KeyError:
            pass
        dedupe_key = "/".join(quote(part, safe="", errors="surrogatepass") for part in (run_id, "warning", kind))
        attributes = {
            "notice": self.attribute(RUN_WARNING),
            "kind": self.attribute(kind),
            "run_id": self.attribute(run_id),
            "dedupe_key": self.attribute(dedupe_key),
        }
        body = {
            "notice": RUN_WARNING,
            "kind": kind,
            "run_id": run_id,
            "step": int(step),
            "message": str(warning.get("message", ""))[: self.WARNING_MESSAGE_LIMIT],
            "dedupe_key": dedupe_key,
            "note": "a warning about the run, not an alarm: sent once per run and kind; later steps' are in the "
            "variance check's step results (warnings) and its log",
        }
        subject = self._subject_text(f"[rewardpipe] warning {kind} run {run_id} step {int(step)}")
        self._publish(subject, json.dumps(body, indent=2, sort_keys=True), attributes, dedupe_key, run_id, key)
        return True

    def _publish(
        self,
        subject: str,
        message: str,
        attributes: dict[str, dict[str, str]],
        dedupe_key: str,
        run_id: str | None,
        ledger_key: str | None,
    ) -> None:
        """One Publish, then its ledger entry (when there is a ledger key)."""
        fifo: dict[str, str] = {}
        if self.fifo:  # ids of at most 128 characters: digests (SNS deduplicates within 5 minutes)
            fifo = {
                "MessageDeduplicationId": _digest(dedupe_key),  # one run's messages stay in order
                "MessageGroupId": _digest(run_id or "-")[:32],
            }
        response = self.client.publish(
            TopicArn=self.topic_arn, Subject=subject, Message=message, MessageAttributes=attributes, **fifo
        )
        self.message_ids.append(response["MessageId"])
        if ledger_key is not None and self.ledger is not None:  # (a key means a ledger)
            self.ledger.put_json(
                ledger_key, {"dedupe_key": dedupe_key, "message_id": response["MessageId"], "topic": self.topic_arn}
            )


#: The ``notice`` message attribute (and body field) of a run warning sent to SNS; alarms carry no ``notice``.
RUN_WARNING = "run_warning"

#: ``truncated`` of an alarm message cut to fit SNS's limit.
TRUNCATED_NOTE = "cut to fit SNS's 256 KiB; the whole alarm is in the store (alarms/ beside the records)"


def _utf8(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _alarm_json(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True)


def _cut_long(value: Any, cap: int) -> Any:
    """``value`` with every string (a dict's keys too) longer than ``cap`` characters, and every list longer than
    ``cap`` items, cut to ``cap`` and marked ``...[cut: <n> characters]`` / ``...[cut: <n> items]``."""
    if isinstance(value, str):
        return value if len(value) <= cap else f"{value[:cap]}...[cut: {len(value)} characters]"
    if isinstance(value, dict):
        return {_cut_long(str(k), cap): _cut_long(v, cap) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_cut_long(v, cap) for v in value[:cap]]
        return [*items, f"...[cut: {len(value)} items]"] if len(value) > cap else items
    return value


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
