"""The content of ``rewardpipe report``: one run (or two, compared) as data.

One read of the records feeds both the monitor (statistics, verdicts, alarms) and the column store the
report's own figures come from (correlation, advantage shares, triage), so the cost is one pass plus a few
vectorised reductions; the output is aggregated per step and component, never per record, so its size does
not grow with the number of records. :mod:`rewardpipe.monitoring.html` renders it.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rewardpipe.monitoring.columns import RunColumns, group_rows, paused_gc, tee
from rewardpipe.monitoring.monitor import monitor_records
from rewardpipe.monitoring.signal import within_group_correlation
from rewardpipe.monitoring.statistics import listed
from rewardpipe.monitoring.thresholds import Thresholds
from rewardpipe.monitoring.triage import judged_tasks, task_triage
from rewardpipe.store import transcript_key
from rewardpipe.transcripts import tool_call_parts

REPORT_SCHEMA = "rewardpipe.report/v1"
EXAMPLES_PER_ALARM = 3
MESSAGE_CHARS = 4000  # a transcript message longer than this is cut in the report (the store keeps it whole)
TOOL_CALLS = 16  # tool calls of one message shown in the report (the rest are counted)
#: Messages of one transcript the report shows: the first FIRST_MESSAGES (the prompt, the first turns) and the last
#: LAST_MESSAGES (how it ended); the ones between are counted (``messages_left_out``), never listed.
FIRST_MESSAGES, LAST_MESSAGES = 20, 40
#: Revealed spec items of one transcript the report lists (``revealed_count`` counts them all), each text cut.
REVEALED_ITEMS = 50
#: Characters of text one example transcript shows in all (each text also cut at MESSAGE_CHARS): 60 messages of 16 tool
#: calls each, every part cut at 4,000 characters, made 25 MB of HTML for one example.
TRANSCRIPT_CHARS = 100_000
#: Characters of text all the example transcripts of one report show: past them an example's transcript is not
#: loaded (it says so; ``rewardpipe show`` prints it), so many alarms' examples keep the page within its 5 MB.
REPORT_TRANSCRIPT_CHARS = 400_000
AGGREGATE = "aggregate"


def _round(value: Any) -> Any:
    if isinstance(value, float):
        return None if not math.isfinite(value) else round(value, 6)
    return value


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


def _series(result: Any) -> tuple[list[int], dict[str, dict[str, list]]]:
    steps = [report.step for report in result.steps]
    names: list[str] = []
    for report in result.steps:
        names += [n for n in report.components if n not in names]
    series: dict[str, dict[str, list]] = {}
    for name in [*names, AGGREGATE]:
        columns: dict[str, list] = {
            "mean": [],
            "std": [],
            "within_group_std": [],
            "zero_variance_share": [],
            "advantage_share": [],
            "verdict": [],
            "cause": [],
        }
        for report in result.steps:
            stats = report.aggregate if name == AGGREGATE else report.components.get(name)
            if stats is None:
                for key in columns:
                    columns[key].append(None)
                continue
            columns["mean"].append(_round(stats.mean))
            columns["std"].append(_round(stats.std))
            columns["within_group_std"].append(_round(stats.within_group_std_mean))
            columns["zero_variance_share"].append(_round(stats.zero_variance_group_fraction))
            columns["advantage_share"].append(_round(getattr(stats, "advantage_share", None)))
            columns["verdict"].append(stats.verdict)
            columns["cause"].append(stats.cause)
        series[name] = columns
    return steps, series


def _alarm_examples(alarm: Mapping[str, Any], columns: RunColumns, run_id: str | None) -> list[dict[str, Any]]:
    """The alarm's own examples when the monitor chose them; otherwise rollouts of the alarm's step."""
    given = alarm.get("examples")
    if given:
        return [dict(example) for example in given][:EXAMPLES_PER_ALARM]
    picks = columns.examples.get(alarm["step"], [])[:EXAMPLES_PER_ALARM]
    examples = []
    for group_id, rollout_id, _ in picks:
        example = {"rollout_id": rollout_id, "group_id": group_id, "step": alarm["step"]}
        if run_id is not None:
            with contextlib.suppress(ValueError):
                example["transcript_key"] = transcript_key(run_id, alarm["step"], group_id, rollout_id)
        examples.append(example)
    return examples


def _cut(text: str, limit: int = MESSAGE_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"… [{len(text) - limit} more characters]"


class TextBudget:
    """The characters of text a transcript (or a report's transcripts) may still show: each text is cut at its own
    limit and at what is left, and what it shows is spent (the notes saying what was cut are not counted)."""

    def __init__(self, chars: int) -> None:
        self.left = chars

    def cut(self, text: str, limit: int = MESSAGE_CHARS) -> str:
        allowed = min(limit, self.left)
        self.left -= min(len(text), allowed)
        return _cut(text, allowed)


def _compact_call(call: Any, budget: TextBudget) -> dict[str, Any]:
    """One tool call as the report shows it: ``{"id", "type", "function": {"name", "arguments"}}``, each text cut
    (arguments that are not text as their JSON)."""
    if not isinstance(call, Mapping):
        return {"id": None, "type": "function", "function": {"name": "?", "arguments": budget.cut(str(call))}}
    name, arguments, ident = tool_call_parts(call)
    return {
        "id": None if ident is None else budget.cut(str(ident)),
        "type": "function",
        "function": {"name": budget.cut(str(name)), "arguments": budget.cut(arguments)},
    }


def _compact_message(message: Any, turn: int | None, budget: TextBudget) -> dict[str, Any]:
    """A message as the report shows it: role and content, and its tool calls, call id and name where it has them
    (without them, an assistant turn made of tool calls showed as empty); given ``turn``, an assistant message says
    it (0-based, counted over the whole transcript, shown or not: only a transcript with messages left out)."""
    compact: dict[str, Any] = {"role": message.role, "content": budget.cut(message.content)}
    if turn is not None:
        compact["turn"] = turn
    if message.tool_call_id is not None:
        compact["tool_call_id"] = budget.cut(message.tool_call_id)
    if message.name is not None:
        compact["name"] = budget.cut(message.name)
    calls = message.tool_calls or []
    shown: list[dict[str, Any]] = []
    for call in calls[:TOOL_CALLS]:
        if not budget.left:  # the transcript's text is spent: the rest are counted, not listed as empty calls
            break
        shown.append(_compact_call(call, budget))
    if shown:
        compact["tool_calls"] = shown
    if len(calls) > len(shown):
        compact["tool_calls_dropped"] = len(calls) - len(shown)
    return compact


def _compact_messages(
    messages: Sequence[Any], turn_kinds: Sequence[str] = (), budget: TextBudget | None = None
) -> dict[str, Any]:
    """The messages the report shows (:data:`FIRST_MESSAGES` and :data:`LAST_MESSAGES`), their count
    (``messages_count``), how many between them are left out (``messages_left_out``) and where (the index of the
    first, ``messages_left_out_from``; then each assistant message shown says its ``turn`` and, when known, its
    ``turn_kind``). An episode of thousands of messages made a report of megabytes per example.

    ``turn_kinds`` (the kind of each assistant turn, read by the page as ``turn_kinds[turn]``) keeps the turns of
    the first messages shown, each cut; ``turn_kinds_count`` says how many there were when that is fewer. It was
    cut per entry only: a transcript of 100,000 turns listed 100,000 kinds per example. The texts shown spend
    ``budget`` (:data:`TRANSCRIPT_CHARS` when not given)."""
    budget = budget or TextBudget(TRANSCRIPT_CHARS)
    turns: list[int | None] = []
    turn = -1
    for message in messages:
        if message.role == "assistant":
            turn += 1
        turns.append(turn if message.role == "assistant" else None)
    count = len(messages)
    left_out = max(count - FIRST_MESSAGES - LAST_MESSAGES, 0)
    shown = range(count) if not left_out else [*range(FIRST_MESSAGES), *range(count - LAST_MESSAGES, count)]
    compact = [_compact_message(messages[i], turns[i] if left_out else None, budget) for i in shown]
    if left_out:
        for message in compact:
            at = message.get("turn")
            if at is not None and at < len(turn_kinds):
                message["turn_kind"] = _cut(turn_kinds[at], 80)
    # the turns before the first message left out (all of them when none is): numbered from 0, as the page reads
    first_turns = 1 + max((t for t in turns[: FIRST_MESSAGES if left_out else count] if t is not None), default=-1)
    kinds = [_cut(kind, 80) for kind in turn_kinds[:first_turns]]
    return {
        "messages": compact,
        "messages_count": count,
        "messages_left_out": left_out,
        **({"messages_left_out_from": FIRST_MESSAGES} if left_out else {}),
        "turn_kinds": kinds,
        **({"turn_kinds_count": len(turn_kinds)} if len(turn_kinds) > len(kinds) else {}),
    }


def _compact_revealed(items: Sequence[Any], budget: TextBudget) -> dict[str, Any]:
    """The first REVEALED_ITEMS revealed spec items, each text cut, and their count when more."""
    shown = [{**item.model_dump(), "text": budget.cut(item.text)} for item in items[:REVEALED_ITEMS]]
    return {"revealed": shown, **({"revealed_count": len(items)} if len(items) > REVEALED_ITEMS else {})}


def _compact_transcript(transcript: Any, budget: TextBudget | None = None) -> dict[str, Any]:
    """What the report shows of a stored transcript: every text in it cut, and all of them together within
    ``budget`` (:data:`TRANSCRIPT_CHARS` when not given). A stored object is whatever its writer put there: a
    verdict's reason quoting the model's output whole made a report of megabytes per example. The verdict and the
    code are cut first, so a long conversation cannot crowd out why the rollout scored as it did."""
    budget = budget or TextBudget(TRANSCRIPT_CHARS)
    verdict = transcript.verdict
    status, reason = budget.cut(verdict.status, 80), budget.cut(verdict.reason)
    code = None if transcript.executed_code is None else budget.cut(transcript.executed_code)
    return {
        **_compact_messages(transcript.messages, transcript.turn_kinds, budget),
        # only an environment with a spec reports revealed items (the page counts them only then)
        **(_compact_revealed(transcript.revealed, budget) if transcript.reveals_spec else {}),
        "executed_code": code,
        "verdict": {**verdict.model_dump(), "status": status, "reason": reason},
        "components": dict(transcript.components),
        "aggregate": transcript.aggregate,
    }


def attach_transcripts(report: dict[str, Any], store: Any, *, chars: int = REPORT_TRANSCRIPT_CHARS) -> None:
    """Load each alarm example's transcript from ``store`` (missing ones say so; the report still renders), all of
    them together showing at most ``chars`` characters of text: past them an example says it was left out."""
    left = chars
    for alarm in report["alarms"]:
        for example in alarm["examples"]:
            key = example.get("transcript_key")
            if not key:
                continue
            if left <= 0:
                example["transcript_missing"] = (
                    f"left out: the report's example transcripts already show {chars:,} characters "
                    "(`rewardpipe show` prints this one)"
                )
                continue
            budget = TextBudget(min(TRANSCRIPT_CHARS, left))
            try:
                example["transcript"] = _compact_transcript(store.get_transcript(key), budget)
            except KeyError:
                example["transcript_missing"] = "no transcript stored for this rollout"
            except Exception as exc:  # noqa: BLE001 - an unreadable transcript must not sink the report
                example["transcript_missing"] = _cut(f"unreadable: {exc}")
            left -= min(TRANSCRIPT_CHARS, left) - budget.left


def build_report(
    records: Iterable[Any],
    thresholds: Thresholds | None = None,
    *,
    run_id: str | None = None,
    ranges: Mapping[str, tuple[float, float]] | None = None,
    also: Sequence[Any] = (),
) -> dict[str, Any]:
    """Everything the report shows, as JSON-ready data (no transcripts yet: see :func:`attach_transcripts`).

    ``also``: further consumers (objects with ``add(record)``, e.g. a Parquet sink) fed by the same read.
    """
    columns = RunColumns()
    with paused_gc():
        result = monitor_records(tee(records, columns, *also), thresholds)
    return report_content(result, columns, run_id, ranges)


def build_report_from_batch(
    batch: Any,
    thresholds: Thresholds | None = None,
    *,
    run_id: str | None = None,
    ranges: Mapping[str, tuple[float, float]] | None = None,
) -> dict[str, Any]:
    """:func:`build_report` over records already read into columns
    (:class:`~rewardpipe.monitoring.batch.RecordBatch`): the same content, no model object per record."""
    from rewardpipe.monitoring.batch import run_columns
    from rewardpipe.monitoring.monitor import monitor_batch

    return report_content(monitor_batch(batch, thresholds), run_columns(batch), run_id, ranges)


def report_content(
    result: Any, columns: RunColumns, run_id: str | None, ranges: Mapping[str, tuple[float, float]] | None
) -> dict[str, Any]:
    """The report's data from a monitor result and the run's columns (less the groups the monitor set aside)."""
    columns.drop_groups([(entry["step"], entry["group_id"]) for entry in result.set_aside])
    grouped = group_rows(columns)
    run = run_id or result.run_id or columns.run_id
    steps, series = _series(result)
    known_ranges = {**result.thresholds.ranges, **dict(ranges or {})}
    run_shares = {
        name: _mean([v for v in series[name]["advantage_share"] if v is not None])
        for name in series
        if name != AGGREGATE
    }
    alarms = []
    for alarm in result.alarms:
        data = alarm.to_dict()
        if data.get("kind") != "recovered":
            data["examples"] = _alarm_examples(data, columns, run)
        else:
            data["examples"] = []
        alarms.append(data)
    return {
        "schema": REPORT_SCHEMA,
        "run_id": run,
        "records": sum(report.records for report in result.steps),
        "scored": columns.rows,
        "errors": columns.errors,
        "groups": len(columns.group_ids),
        "tasks": len(columns.task_ids),
        "steps": steps,
        "components": [name for name in series if name != AGGREGATE],
        "weights": dict(columns.weights),
        "series": series,
        "alarms": alarms,
        "correlation": {"components": grouped.names, "matrix": within_group_correlation(grouped)},
        "advantage_share": {"run": run_shares},  # per step: series[<component>]["advantage_share"]
        "task_triage": task_triage(columns, grouped, known_ranges, epsilon=result.thresholds.epsilon),
        "triage_tasks_judged": judged_tasks(columns, grouped),
        "thresholds": result.thresholds.model_dump(mode="json"),
        "warnings": result.warnings,
        **listed("set_aside", result.set_aside),
    }


def compare_reports(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Two runs side by side: both reports plus, per component, the figures that differ most in practice."""

    def last(report: dict[str, Any], name: str, key: str) -> Any:
        values = [v for v in report["series"].get(name, {}).get(key, []) if v is not None]
        return values[-1] if values else None

    def dead_steps(report: dict[str, Any], name: str) -> int:
        return sum(v == "dead" for v in report["series"].get(name, {}).get("verdict", []))

    names = list(dict.fromkeys([*first["components"], *second["components"], AGGREGATE]))
    rows = []
    for name in names:
        row: dict[str, Any] = {"component": name}
        for label, report in (("a", first), ("b", second)):
            row[label] = {
                "last_mean": last(report, name, "mean"),
                "last_within_group_std": last(report, name, "within_group_std"),
                "last_zero_variance_share": last(report, name, "zero_variance_share"),
                "dead_steps": dead_steps(report, name),
                "advantage_share": report["advantage_share"]["run"].get(name),
                "triaged_tasks": sum(e["component"] == name for e in report["task_triage"]),
            }
        rows.append(row)
    return {"schema": REPORT_SCHEMA + "+compare", "runs": [first, second], "comparison": rows}
