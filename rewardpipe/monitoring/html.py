"""Render report data (:mod:`rewardpipe.monitoring.report`) as ONE self-contained HTML page.

Inline CSS and inline SVG only: no scripts, no fonts, no images fetched from anywhere, and a
Content-Security-Policy (``default-src 'none'``) that forbids them even if something slipped through.
Every string that came from a run (component and task names, ids, alarm messages, transcripts) is
model- or user-controlled: it goes through :func:`_t` (control characters made visible, then HTML-escaped,
quotes included), never into markup or an attribute unescaped. Transcripts sit in ``<details>`` so the
page stays short and needs no JavaScript to expand them.
"""

from __future__ import annotations

import heapq
import html
import math
from collections.abc import Callable, Sequence
from typing import Any

from rewardpipe.monitoring.alarms import OnsetMarker, onset_markers
from rewardpipe.safe_text import printable

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")
VERDICT_COLOURS = {
    "ok": "#8fd19e",
    "dying": "#f5b041",
    "dead": "#e4606d",
    "info": "#aecbfa",
    "insufficient_data": "#d6d8db",
}
TRIAGE_ROWS = 300  # the page lists this many triage entries; the JSON and triage.jsonl have them all
#: The page lists this many alarms, the first and the last half (a run's alarms grow with its steps; each may carry
#: ids of 1,000 characters and three examples); the JSON has them all.
ALARM_ROWS = 300
#: The page draws the correlation matrix of up to this many components; past it, the CORRELATION_PAIRS most
#: correlated pairs.
CORRELATION_MATRIX, CORRELATION_PAIRS = 40, 100
#: What the charts draw at most: points per chart and bands per timeline, shared by their lines or rows (each given
#: at least MIN_COLUMNS columns): 100 components over 1,000 steps of flickering verdicts made a 9 MB timeline.
DRAWN_POINTS, DRAWN_BANDS, MIN_COLUMNS = 20_000, 20_000, 60
DYING_MARK = "#8a4b00"  # dark enough to read on the dying band's orange
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;
max-width:1180px;color:#222;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.sub{color:#666}.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(540px,1fr));gap:12px}
.card{border:1px solid #e3e3e3;border-radius:6px;padding:8px 10px;background:#fff}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #e1e1e1;padding:3px 7px;text-align:right}
th{background:#f6f6f6}td.l,th.l{text-align:left}.legend span{display:inline-block;margin-right:14px}
.sw{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:4px;vertical-align:middle}
details{border:1px solid #e3e3e3;border-radius:6px;margin:6px 0;padding:4px 10px;background:#fafafa}
summary{cursor:pointer;font-weight:600}pre{white-space:pre-wrap;word-break:break-word;background:#fff;
border:1px solid #eee;padding:6px;margin:4px 0;max-height:420px;overflow:auto;font-size:12px}
.role{font-size:12px;color:#555;margin-top:6px}.alarm{margin:10px 0}.kind{font-weight:700;color:#b02a37}
.muted{color:#888}.note{font-size:12px;color:#666}
"""


def _t(value: Any) -> str:
    """Untrusted text → safe HTML text (also safe inside a quoted attribute)."""
    return html.escape(printable("" if value is None else str(value)), quote=True)


def _num(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return _t(value)


# ---------------------------------------------------------------------------------------------- charts


def line_chart(
    title: str,
    steps: Sequence[int],
    lines: Sequence[tuple[str, Sequence[Any], str, bool]],
    *,
    y_range: tuple[float, float] | None = None,
    markers: Sequence[tuple[int, str]] = (),
    width: int = 540,
    height: int = 210,
) -> str:
    """An inline SVG line chart. ``lines``: (label, values per step, colour, dashed). ``markers``: vertical
    lines at (step, colour) — alarm onsets."""
    left, right, top, bottom = 46, 10, 22, 26
    plot_w, plot_h = width - left - right, height - top - bottom
    values = [v for _, series, _, _ in lines for v in series if isinstance(v, (int, float)) and math.isfinite(v)]
    if y_range is None:
        lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    else:
        lo, hi = y_range
    if not hi - lo >= 1e-12 * max(1.0, abs(lo), abs(hi)):  # one value (at 9e15, lo + 0.5 is lo): a band round it
        pad = max(0.5, abs(lo) * 1e-6)
        lo, hi = lo - pad, hi + pad
    first, last = (steps[0], steps[-1]) if steps else (0, 1)
    span = max(1, last - first)

    def x(step: int) -> float:
        return left + (step - first) / span * plot_w

    def y(value: float) -> float:
        return top + (1 - (value - lo) / (hi - lo)) * plot_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{_t(title)}"><text x="{left}" y="14" font-size="13" font-weight="600">{_t(title)}</text>',
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fcfcfc" stroke="#ddd"/>',
    ]
    for tick in range(5):
        value = lo + (hi - lo) * tick / 4
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y(value):.1f}" y2="{y(value):.1f}" '
            f'stroke="#eee"/><text x="{left - 4}" y="{y(value) + 4:.1f}" font-size="10" '
            f'text-anchor="end">{value:.3g}</text>'
        )
    for tick_step in _ticks(first, last):
        parts.append(
            f'<text x="{x(tick_step):.1f}" y="{height - 8}" font-size="10" text-anchor="middle">{tick_step}</text>'
        )
    for step, colour in markers:
        parts.append(
            f'<line x1="{x(step):.1f}" x2="{x(step):.1f}" y1="{top}" y2="{top + plot_h}" '
            f'stroke="{colour}" stroke-width="1.5" stroke-dasharray="3,2"/>'
        )
    # a column per pixel, fewer when many lines share the chart (a page of hundreds of components stays bounded)
    columns = min(plot_w, max(MIN_COLUMNS, DRAWN_POINTS // max(1, len(lines))))
    for _, series, colour, dashed in lines:
        for segment in _segments(steps, series):
            segment = _decimated(segment, lambda step: min(columns - 1, int((x(step) - left) * columns / plot_w)))
            points = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in segment)
            dash = ' stroke-dasharray="6,3"' if dashed else ""
            if len(segment) == 1:
                s, v = segment[0]
                parts.append(f'<circle cx="{x(s):.1f}" cy="{y(v):.1f}" r="2.5" fill="{colour}"/>')
            else:
                parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.8"{dash} points="{points}"/>')
    parts.append("</svg>")
    return "".join(parts)


def _decimated(segment: list[tuple[int, float]], column: Callable[[int], int]) -> list[tuple[int, float]]:
    """A line's points, at most two per column of the chart (its lowest and its highest, in step order): a run of
    10,000 steps drew 10,000 points per line, megabytes of HTML that looked the same as the envelope does."""
    columns: dict[int, list[tuple[int, float]]] = {}
    for point in segment:
        columns.setdefault(column(point[0]), []).append(point)
    if len(columns) == len(segment):
        return segment
    out: list[tuple[int, float]] = []
    for points in columns.values():
        low, high = min(points, key=lambda p: p[1]), max(points, key=lambda p: p[1])
        out += sorted({low, high})  # (step, value) pairs: sorted by step
    return out


def _ticks(first: int, last: int, count: int = 8) -> list[int]:
    if last <= first:
        return [first]
    stride = max(1, math.ceil((last - first) / count))
    return list(range(first, last + 1, stride))


def _segments(steps: Sequence[int], series: Sequence[Any]) -> list[list[tuple[int, float]]]:
    """Runs of consecutive finite values (a missing step breaks the line instead of bridging it)."""
    out: list[list[tuple[int, float]]] = [[]]
    for step, value in zip(steps, series, strict=False):
        if isinstance(value, (int, float)) and math.isfinite(value):
            out[-1].append((step, float(value)))
        elif out[-1]:
            out.append([])
    return [segment for segment in out if segment]


def timeline(
    steps: Sequence[int], series: dict[str, dict[str, list]], alarms: Sequence[dict], width: int = 1100
) -> str:
    """Verdict per component per step as coloured bands (runs of equal verdicts merged), ▼ at dead onsets,
    △ at dying onsets with a dashed line to the projected step of death (→ at the edge when beyond)."""
    names = list(series)
    markers: dict[str, list[OnsetMarker]] = {}
    for marker in onset_markers(alarms):
        markers.setdefault(marker.component, []).append(marker)
    label_w, row_h = 170, 20
    height = 24 + row_h * len(names)
    plot_w = width - label_w - 10
    n = max(1, len(steps))
    cell = plot_w / n
    index = {step: i for i, step in enumerate(steps)}
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="verdict timeline">'
    ]
    # a column per pixel, fewer when there are many rows (a page of hundreds of components stays bounded)
    columns = _columns(len(steps), min(int(plot_w), max(MIN_COLUMNS, DRAWN_BANDS // max(1, len(names)))))
    for row, name in enumerate(names):
        y = 18 + row * row_h
        parts.append(f'<text x="{label_w - 6}" y="{y + 13}" font-size="12" text-anchor="end">{_t(name)}</text>')
        for first, last, verdict in _verdict_bands(series[name]["verdict"], columns):
            colour = VERDICT_COLOURS.get(verdict or "", "#ffffff")
            worst = " (the worst verdict of each column's steps)" if len(columns) < len(steps) else ""
            parts.append(
                f'<rect x="{label_w + first * cell:.1f}" y="{y}" width="{(last + 1 - first) * cell:.1f}" '
                f'height="{row_h - 3}" fill="{colour}"><title>{_t(name)} steps {steps[first]}–'
                f"{steps[last]}: {_t(verdict)}{worst}</title></rect>"
            )
        for marker in markers.get(name, ()):
            parts.append(_onset(marker, label_w, cell, index, y, steps))
    for tick_step in _ticks(steps[0], steps[-1]) if steps else []:
        if tick_step in index:
            parts.append(
                f'<text x="{label_w + (index[tick_step] + 0.5) * cell:.1f}" y="12" font-size="10" '
                f'text-anchor="middle">{tick_step}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


#: Which verdict a timeline column of several steps shows: the worst of them (a dead step never hides behind ok ones).
_SEVERITY = {"dead": 5, "dying": 4, "ok": 3, "info": 2, "insufficient_data": 1}


def _columns(count: int, pixels: int) -> list[range]:
    """The step indices each of at most ``pixels`` columns of the timeline stands for: one step each, or, past one
    step per column, the steps of one column (a run of 10,000 steps drew a band per verdict change, 30,000 of them,
    megabytes of HTML)."""
    if count <= pixels:
        return [range(i, i + 1) for i in range(count)]
    bounds = [column * count // pixels for column in range(pixels + 1)]
    return [range(bounds[c], bounds[c + 1]) for c in range(pixels)]


def _verdict_bands(verdicts: Sequence[Any], columns: list[range]) -> list[tuple[int, int, Any]]:
    """(first step index, last step index, verdict) of each band: runs of columns showing one verdict merged."""
    shown = [max((verdicts[i] for i in column), key=lambda v: _SEVERITY.get(v, 0)) for column in columns]
    bands: list[tuple[int, int, Any]] = []
    for column, verdict in zip(columns, shown, strict=True):
        if bands and bands[-1][2] == verdict:
            bands[-1] = (bands[-1][0], column[-1], verdict)
        else:
            bands.append((column[0], column[-1], verdict))
    return bands


def _onset(marker: OnsetMarker, label_w: int, cell: float, index: dict[int, int], y: int, steps: Sequence[int]) -> str:
    """One onset marker of the timeline (nothing when its step is not on the timeline)."""
    if marker.step not in index:
        return ""
    cx = label_w + (index[marker.step] + 0.5) * cell
    if marker.kind == "dead":
        return (
            f'<text class="onset-dead" x="{cx:.1f}" y="{y + 12}" font-size="11" text-anchor="middle">▼'
            f"<title>dead at step {marker.step}</title></text>"
        )
    projected = marker.projected_dead_step
    where = "" if projected is None else f", projected dead around step {projected}"
    out = [
        f'<g class="onset-dying" data-step="{marker.step}" data-projected-dead-step="{_t(projected)}">'
        f"<title>dying from step {marker.step}{where}</title>"
        f'<text x="{cx:.1f}" y="{y + 12}" font-size="11" text-anchor="middle" fill="{DYING_MARK}">△</text>'
    ]
    if projected is not None and projected > marker.step:
        beyond = projected > steps[-1]
        end = len(steps) if beyond else index.get(projected, sum(1 for s in steps if s < projected)) + 0.5
        px = label_w + end * cell
        out.append(
            f'<line x1="{cx + 5:.1f}" y1="{y + 8}" x2="{px:.1f}" y2="{y + 8}" stroke="{DYING_MARK}" '
            f'stroke-dasharray="3,2"/>'
        )
        out.append(
            f'<text x="{px:.1f}" y="{y + 12}" font-size="10" text-anchor="{"end" if beyond else "middle"}" '
            f'fill="{DYING_MARK}">{"→" if beyond else "✕"}</text>'
        )
    return "".join(out) + "</g>"


def _heat(value: float | None) -> str:
    if value is None:
        return "#f0f0f0"
    v = max(-1.0, min(1.0, value))
    if v >= 0:
        return f"rgb({int(255 - 120 * v)},{int(255 - 120 * v)},255)"
    return f"rgb(255,{int(255 + 120 * v)},{int(255 + 120 * v)})"


# ---------------------------------------------------------------------------------------------- sections


def _legend(names: Sequence[str], dashed_label: str | None = None) -> str:
    items = "".join(
        f'<span><i class="sw" style="background:{PALETTE[i % len(PALETTE)]}"></i>{_t(n)}</span>'
        for i, n in enumerate(names)
    )
    if dashed_label:
        items += f'<span class="muted">dashed: {_t(dashed_label)}</span>'
    return f'<div class="legend">{items}</div>'


def _charts(runs: Sequence[dict[str, Any]]) -> str:
    first = runs[0]
    names = list(dict.fromkeys(n for run in runs for n in run["series"]))
    steps = sorted({s for run in runs for s in run["steps"]})
    onsets = [
        (step, "#b02a37") for step in sorted({a["step"] for a in first["alarms"] if a.get("kind") != "recovered"})
    ]
    charts = []
    for key, title, y_range in (
        ("mean", "mean", None),
        ("std", "batch std", None),
        ("within_group_std", "within-group std (mean over groups)", None),
        ("zero_variance_share", "zero-variance share of groups", (0.0, 1.0)),
    ):
        lines = []
        for r, run in enumerate(runs):
            position = {s: i for i, s in enumerate(run["steps"])}
            for i, name in enumerate(names):
                values = run["series"].get(name, {}).get(key)
                if values is None:
                    continue
                aligned = [values[position[s]] if s in position else None for s in steps]
                lines.append((name, aligned, PALETTE[i % len(PALETTE)], r == 1))
        markers = onsets if key == "zero_variance_share" else ()
        charts.append(f'<div class="card">{line_chart(title, steps, lines, y_range=y_range, markers=markers)}</div>')
    dashed = runs[1]["run_id"] if len(runs) > 1 else None
    return _legend(names, dashed) + f'<div class="grid">{"".join(charts)}</div>'


def _correlated_pairs(names: Sequence[str], matrix: Sequence[Sequence[Any]]) -> str:
    """The :data:`CORRELATION_PAIRS` most correlated pairs of components (by |r|) as a table: the whole matrix of
    300 components was 90,000 cells, 4 MB of the page."""
    pairs = heapq.nlargest(
        CORRELATION_PAIRS,
        (
            (abs(value), i, j)
            for i, row in enumerate(matrix)
            for j, value in enumerate(row)
            if j > i and isinstance(value, (int, float)) and math.isfinite(value)
        ),
        key=lambda pair: pair[0],
    )
    rows = "".join(
        f'<tr><td class="l">{_t(names[i])}</td><td class="l">{_t(names[j])}</td>'
        f'<td style="background:{_heat(matrix[i][j])}">{_num(matrix[i][j], 2)}</td></tr>'
        for _, i, j in pairs
    )
    return (
        f'<p class="note">{len(names)} components: the {len(pairs)} most correlated pairs (the JSON output has the '
        f'whole matrix).</p><table><tr><th class="l">component</th><th class="l">component</th><th>r</th></tr>'
        f"{rows}</table>"
    )


def _correlation(report: dict[str, Any]) -> str:
    names = report["correlation"]["components"]
    matrix = report["correlation"]["matrix"]
    if not names:
        return '<p class="muted">no scored values</p>'
    if len(names) > CORRELATION_MATRIX:
        return _correlated_pairs(names, matrix)
    head = "".join(f"<th>{_t(n)}</th>" for n in names)
    rows = []
    for name, row in zip(names, matrix, strict=False):
        cells = "".join(f'<td style="background:{_heat(v)}">{_num(v, 2)}</td>' for v in row)
        rows.append(f'<tr><th class="l">{_t(name)}</th>{cells}</tr>')
    return (
        f'<table><tr><th class="l">within groups</th>{head}</tr>{"".join(rows)}</table>'
        '<p class="note">Pearson correlation of values minus their group mean, pooled over groups. '
        "±1 off the diagonal: two components move together in every group, one of them adds nothing. "
        "– : the component never varies inside a group.</p>"
    )


def _advantage(report: dict[str, Any]) -> str:
    shares = report["advantage_share"]["run"]
    names = list(report["components"])
    steps = report["steps"]
    lines = [
        (name, report["series"][name]["advantage_share"], PALETTE[i % len(PALETTE)], False)
        for i, name in enumerate(names)
    ]
    chart = line_chart("share of the GRPO advantage, per step", steps, lines, y_range=(0.0, 1.0))
    rows = "".join(
        f'<tr><td class="l">{_t(n)}</td><td>{_num(report["weights"].get(n))}</td><td>{_num(shares.get(n))}</td></tr>'
        for n in names
    )
    return (
        f'<div class="grid"><div class="card">{chart}</div><div class="card"><table><tr><th class="l">component'
        f'</th><th>weight</th><th>mean share</th></tr>{rows}</table><p class="note">Per group, each weighted '
        f"component's part of the normalised advantage, |w|·std(x) / Σ |w'|·std(x'): a group's shares add "
        f"up to 1, a component constant in the group has none. Mean over the groups where anything varies, "
        f"per step; the table averages the steps. A gap in the chart: no group had an advantage.</p>"
        f"</div></div>"
    )


def _triage(report: dict[str, Any]) -> str:
    entries = report["task_triage"]
    judged, tasks = report.get("triage_tasks_judged", report["tasks"]), report["tasks"]
    unjudged = (
        f'<p class="note">Judged: {judged} of {tasks} tasks. The others have no group where a component has 2 or '
        f"more values (one rollout per group, or the rest errors): whether they teach anything is not known.</p>"
        if judged < tasks
        else ""
    )
    if not entries:
        if judged < tasks:
            return f"<p>No judged task gives a component no signal.</p>{unjudged}"
        return "<p>Every task gives every component some signal.</p>"
    rows = "".join(
        f'<tr><td class="l">{_t(e["task_id"])}</td><td class="l">{_t(e["component"])}</td>'
        f'<td class="l">{_t(e["verdict"])}</td><td>{_num(e.get("value"))}</td><td>{e["groups"]}</td>'
        f"<td>{e['steps']}</td></tr>"
        for e in entries[:TRIAGE_ROWS]
    )
    more = (
        f'<p class="note">{len(entries) - TRIAGE_ROWS} more in the JSON output and triage.jsonl.</p>'
        if len(entries) > TRIAGE_ROWS
        else ""
    )
    return (
        f"<p>{len(entries)} (task, component) pairs give no signal: in every group of the task the component "
        f"did not vary. <b>never</b>: always at its minimum; <b>always</b>: always at its maximum; "
        f'<b>constant</b>: another value.</p><table><tr><th class="l">task</th><th class="l">component</th>'
        f'<th class="l">verdict</th><th>value</th><th>groups</th><th>steps</th></tr>{rows}</table>{more}{unjudged}'
    )


def _transcript(example: dict[str, Any]) -> str:
    label = (
        f"rollout {_t(example.get('rollout_id'))} · group {_t(example.get('group_id'))} · "
        f"step {_t(example.get('step'))}"
    )
    transcript = example.get("transcript")
    if transcript is None:
        reason = example.get("transcript_missing") or "transcripts were not loaded"
        return f'<details><summary>{label}</summary><p class="muted">{_t(reason)}</p></details>'
    body = []
    turn = -1
    left_out, left_out_from = transcript.get("messages_left_out") or 0, transcript.get("messages_left_out_from")
    for index, message in enumerate(transcript["messages"]):
        if left_out and index == left_out_from:
            body.append(f'<p class="muted">… {_t(left_out)} messages left out …</p>')
        role = message["role"]
        if role == "assistant":
            turn = message.get("turn", turn + 1)  # reports before the cap did not say it
            kinds = transcript.get("turn_kinds") or []
            # a message past the left-out ones carries its kind; the list has the first turns' (all, before the cut)
            kind = message.get("turn_kind") or (
                kinds[turn] if isinstance(turn, int) and 0 <= turn < len(kinds) else "?"
            )
            role = f"assistant · turn {turn} · {kind}"
        if message.get("name") is not None:
            role += f" · {message['name']}"
        if message.get("tool_call_id") is not None:
            role += f" · answers {message['tool_call_id']}"
        text = message["content"]
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            ident = f" [{call['id']}]" if call.get("id") is not None else ""
            text += ("\n" if text else "") + f"↳ tool call {function.get('name')}({function.get('arguments')}){ident}"
        if message.get("tool_calls_dropped"):
            text += f"\n↳ {message['tool_calls_dropped']} more tool calls"
        body.append(f'<div class="role">{_t(role)}</div><pre>{_t(text)}</pre>')
    if transcript.get("executed_code") is not None:
        body.append(f'<div class="role">executed code</div><pre>{_t(transcript["executed_code"])}</pre>')
    verdict = transcript.get("verdict") or {}
    tests = f" ({verdict.get('passed')}/{verdict.get('total')} tests)" if verdict.get("total") else ""
    body.append(f"<p><b>verdict:</b> {_t(verdict.get('status'))}{_t(tests)} — {_t(verdict.get('reason'))}</p>")
    if "revealed" in transcript:  # an environment without a spec (tool_call, wordle) has none to count
        revealed = transcript.get("revealed") or []
        count = transcript.get("revealed_count", len(revealed))
        more = f"<br>… {_t(count - len(revealed))} more" if count > len(revealed) else ""
        body.append(
            f"<p><b>revealed spec items:</b> {_t(count)}"
            + "".join(f"<br>· turn {_t(r.get('turn'))}: {_t(r.get('text'))}" for r in revealed)
            + more
            + "</p>"
        )
    components = " · ".join(f"{_t(k)} {_num(v)}" for k, v in (transcript.get("components") or {}).items())
    body.append(f"<p><b>components:</b> {components} · aggregate {_num(transcript.get('aggregate'))}</p>")
    return f"<details><summary>{label}</summary>{''.join(body)}</details>"


def _alarms(report: dict[str, Any]) -> str:
    alarms = report["alarms"]
    if not alarms:
        return "<p>No alarms.</p>"
    out = []
    left_out = len(alarms) - ALARM_ROWS
    for index, alarm in enumerate(alarms):
        if left_out > 0 and ALARM_ROWS // 2 <= index < ALARM_ROWS // 2 + left_out:
            if index == ALARM_ROWS // 2:
                out.append(f'<p class="note">… {left_out} more alarms in the JSON output (--json) …</p>')
            continue
        examples = "".join(_transcript(e) for e in alarm.get("examples") or [])
        out.append(
            f'<div class="alarm"><span class="kind">{_t(alarm.get("kind"))}</span> · step '
            f"{_t(alarm.get('step'))} · <b>{_t(alarm.get('component'))}</b> · {_t(alarm.get('cause'))}"
            f"<br>{_t(alarm.get('message'))}{examples}</div>"
        )
    return "".join(out)


def _summary(report: dict[str, Any]) -> str:
    unfinished = report.get("unfinished_steps") or []
    progress = (
        (
            f'<p class="sub"><b>run still being written</b> (or interrupted): finished steps only; '
            f"{len(unfinished)} unfinished step(s) ({_t(', '.join(map(str, unfinished[:20])))}"
            f"{' …' if len(unfinished) > 20 else ''}) not judged</p>"
        )
        if report.get("in_progress")
        else ""
    )
    return (
        f'<p class="sub">run <b>{_t(report["run_id"])}</b> · {report["records"]} records '
        f"({report['errors']} error records, excluded) · {report['groups']} groups · {report['tasks']} "
        f"tasks · steps {report['steps'][0] if report['steps'] else '–'}–"
        f"{report['steps'][-1] if report['steps'] else '–'} · {len(report['alarms'])} alarm(s)</p>{progress}"
        + "".join(
            f'<p class="sub"><b>warning: {_t(w["kind"])}</b>: {_t(w["message"])}</p>'
            for w in report.get("warnings", [])
        )
        + "".join(
            f'<p class="sub"><b>set aside</b>: {_t(e["reason"])}; its {e["records"]} scored record(s) are left out '
            f"({_t(', '.join(t['task_id'][:80] + ': ' + str(t['records']) for t in e['tasks'][:5]))})</p>"
            for e in report.get("set_aside", [])[:20]
        )
        + (
            f'<p class="sub">… and {set_aside - 20} more group(s) set aside</p>'
            if (set_aside := report.get("set_aside_count", len(report.get("set_aside", [])))) > 20
            else ""
        )
    )


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{_t(title)}</title><style>{STYLE}</style></head><body>{body}</body></html>\n"
    )


def _verdict_legend() -> str:
    return "".join(
        f'<span><i class="sw" style="background:{c}"></i>{_t(v)}</span>' for v, c in VERDICT_COLOURS.items()
    ) + (f'<span>▼ dead onset</span><span style="color:{DYING_MARK}">△ dying onset ┄ ✕ projected death</span>')


def render_report(report: dict[str, Any]) -> str:
    body = [
        f"<h1>rewardpipe report · {_t(report['run_id'])}</h1>",
        _summary(report),
        "<h2>Per component over steps</h2>",
        _charts([report]),
        "<h2>Verdict timeline</h2>",
        f'<div class="legend">{_verdict_legend()}</div>',
        timeline(report["steps"], report["series"], report["alarms"]),
        "<h2>Component correlation inside groups</h2>",
        _correlation(report),
        "<h2>Share of the GRPO advantage</h2>",
        _advantage(report),
        "<h2>Task triage</h2>",
        _triage(report),
        "<h2>Alarms and example transcripts</h2>",
        _alarms(report),
    ]
    return _page(f"rewardpipe report {report['run_id']}", "".join(body))


def render_comparison(comparison: dict[str, Any]) -> str:
    a, b = comparison["runs"]
    head = (
        "<tr><th class='l'>component</th>"
        + "".join(
            f"<th>{_t(label)} {_t(run['run_id'])}</th>"
            for run in (a, b)
            for label in ("last mean", "last within-std", "last zero-var", "dead steps", "adv. share", "triaged tasks")
        )
        + "</tr>"
    )
    rows = []
    for row in comparison["comparison"]:
        cells = "".join(
            f"<td>{_num(row[side][key])}</td>"
            for side in ("a", "b")
            for key in (
                "last_mean",
                "last_within_group_std",
                "last_zero_variance_share",
                "dead_steps",
                "advantage_share",
                "triaged_tasks",
            )
        )
        rows.append(f"<tr><td class='l'>{_t(row['component'])}</td>{cells}</tr>")
    body = [
        f"<h1>rewardpipe report · {_t(a['run_id'])} vs {_t(b['run_id'])}</h1>",
        _summary(a),
        _summary(b),
        "<h2>Side by side</h2>",
        f"<table>{head}{''.join(rows)}</table>",
        "<h2>Per component over steps</h2>",
        _charts([a, b]),
    ]
    for run in (a, b):
        body += [
            f"<h2>Verdict timeline · {_t(run['run_id'])}</h2>",
            f'<div class="legend">{_verdict_legend()}</div>',
            timeline(run["steps"], run["series"], run["alarms"]),
            f"<h2>Alarms · {_t(run['run_id'])}</h2>",
            _alarms(run),
        ]
    return _page(f"rewardpipe report {a['run_id']} vs {b['run_id']}", "".join(body))
