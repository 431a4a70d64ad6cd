"""Round thirty-five (second wave), the local store, transcripts and the HTML report."""

from __future__ import annotations

from typing import Any

from rewardpipe.models import Message
from rewardpipe.store import open_store
from rewardpipe.transcripts import RolloutTranscript, Verdict

LONG = 4500  # longer than any one text the report shows (MESSAGE_CHARS)


def _hostile_transcript(rollout: str, calls: int = 16) -> RolloutTranscript:
    """10 assistant messages of ``calls`` tool calls each, every text longer than the report shows."""
    call = {"id": "i" * LONG, "type": "function", "function": {"name": "n" * LONG, "arguments": "<" * LONG}}
    messages = [
        Message(role="assistant", content="<" * LONG, tool_calls=[call] * calls or None, name="x" * LONG)
        for _ in range(10)
    ]
    return RolloutTranscript(
        run_id="run",
        step=0,
        group_id="g",
        rollout_id=rollout,
        task_id="t",
        messages=messages,
        verdict=Verdict(status="failed", reason="why it failed " + "r" * LONG),
        executed_code="print(1)",
    )


def _texts(value: Any) -> int:
    """Characters of text in a JSON-like value (the strings only)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(_texts(v) for v in value.values())
    if isinstance(value, list):
        return sum(_texts(v) for v in value)
    return 0


def _report_of(store, rollouts: list[str], calls: int = 16) -> dict:
    put = store.put_transcript
    examples = [
        {"rollout_id": r, "group_id": "g", "step": 0, "transcript_key": put(_hostile_transcript(r, calls))}
        for r in rollouts
    ]
    return {"alarms": [{"examples": examples[i : i + 3]} for i in range(0, len(examples), 3)]}


def test_one_example_transcript_shows_a_bounded_amount_of_text_however_many_tool_calls_it_has(tmp_path):
    from rewardpipe.monitoring.html import _transcript
    from rewardpipe.monitoring.report import TRANSCRIPT_CHARS, attach_transcripts

    store = open_store(str(tmp_path))
    report = _report_of(store, ["r"])
    attach_transcripts(report, store)
    example = report["alarms"][0]["examples"][0]
    shown = example["transcript"]
    # every text is cut at its own limit too; the notes saying what was cut are the only text beyond the budget
    assert _texts(shown) < TRANSCRIPT_CHARS * 1.2
    assert shown["verdict"]["reason"].startswith("why it failed")  # the verdict is not crowded out
    assert shown["messages_count"] == 10
    # calls past the budget are counted, never listed as empty calls
    last = shown["messages"][-1]
    assert "tool_calls" not in last and last["tool_calls_dropped"] == 16
    page = _transcript(example)
    assert len(page.encode()) < 5 * TRANSCRIPT_CHARS  # '<' is escaped as '&lt;'; was 4 MB (25 MB for 60 messages)


def test_the_examples_of_many_alarms_together_show_a_bounded_amount_and_the_rest_say_so(tmp_path):
    from rewardpipe.monitoring.html import _alarms
    from rewardpipe.monitoring.report import REPORT_TRANSCRIPT_CHARS, attach_transcripts

    store = open_store(str(tmp_path))
    report = _report_of(store, [f"r{n}" for n in range(30)], calls=0)  # each one shows 80,000 characters
    attach_transcripts(report, store)
    examples = [e for alarm in report["alarms"] for e in alarm["examples"]]
    loaded = [e for e in examples if "transcript" in e]
    left_out = [e for e in examples if "transcript" not in e]
    assert loaded and examples[0] in loaded
    assert _texts([e["transcript"] for e in loaded]) < REPORT_TRANSCRIPT_CHARS * 1.2
    assert left_out and all("left out" in e["transcript_missing"] for e in left_out)
    for alarm in report["alarms"]:
        alarm.update(kind="dead", step=0, component="c", cause=None, message="m")
    assert len(_alarms(report).encode()) < 5_000_000  # the report's whole-page goal (issue: HTML <= 5 MB)


def _flickering_series(steps: int) -> dict[str, dict[str, list]]:
    """A verdict changing at every step and a value jumping between 0 and 1: the most a run can draw."""
    verdicts = ["ok" if step % 2 else "insufficient_data" for step in range(steps)]
    verdicts[steps // 3] = "dead"  # one dead step among thousands
    values = [float(step % 2) for step in range(steps)]
    values[steps // 2] = 5.0  # one peak
    return {"a": {"verdict": verdicts, "mean": values}}


def test_a_long_runs_timeline_draws_at_most_a_band_per_pixel_and_keeps_a_lone_dead_step():
    import re

    from rewardpipe.monitoring.html import timeline

    steps = list(range(20_000))
    svg = timeline(steps, _flickering_series(len(steps)), [], width=1100)
    bands = re.findall(r"<rect [^>]*><title>([^<]*)</title>", svg)
    assert len(bands) <= 1100  # was one per verdict change: 20,000 (megabytes for a few components)
    assert any(title.endswith("dead (the worst verdict of each column's steps)") for title in bands)
    assert len(svg.encode()) < 200_000


def test_a_short_runs_timeline_still_draws_a_band_per_run_of_verdicts():
    import re

    from rewardpipe.monitoring.html import timeline

    series = {"a": {"verdict": ["ok", "ok", "dead", "dead", "ok"]}}
    titles = re.findall(r"<title>([^<]*)</title>", timeline(list(range(5)), series, []))
    assert titles == ["a steps 0–1: ok", "a steps 2–3: dead", "a steps 4–4: ok"]


def test_a_long_runs_line_chart_draws_at_most_two_points_per_pixel_and_keeps_the_extremes():
    import re

    from rewardpipe.monitoring.html import line_chart

    steps = list(range(20_000))
    values = _flickering_series(len(steps))["a"]["mean"]
    svg = line_chart("mean", steps, [("a", values, "#000", False)], width=540)
    points = re.search(r'points="([^"]*)"', svg)[1].split()
    assert len(points) <= 2 * 540  # was 20,000
    ys = sorted(float(p.split(",")[1]) for p in points)
    top, bottom = 22, 210 - 26  # the plot's edges: the peak at the top, the zeros at the bottom
    assert ys[0] == top and ys[-1] == bottom
    steps_drawn = [float(p.split(",")[0]) for p in points]
    assert steps_drawn == sorted(steps_drawn)  # in step order, as a line is drawn


def test_the_page_lists_the_first_and_the_last_alarms_of_a_run_with_thousands_and_counts_the_rest():
    from rewardpipe.monitoring.html import ALARM_ROWS, _alarms

    ident = "i" * 1000  # the longest ids a record may hold, in each of three examples
    alarms = [
        {
            "kind": "dead_component",
            "step": step,
            "component": "c",
            "cause": None,
            "message": f"alarm at step {step}.",
            "examples": [{"rollout_id": ident, "group_id": ident, "step": step, "transcript_missing": "none"}] * 3,
        }
        for step in range(5000)
    ]
    page = _alarms({"alarms": alarms})
    assert len(page.encode()) < 5_000_000  # was 31 MB
    assert "alarm at step 0." in page and "alarm at step 4999." in page  # the first and the latest
    assert f"alarm at step {ALARM_ROWS // 2}." not in page
    assert f"{5000 - ALARM_ROWS} more alarms in the JSON output" in page


def test_the_correlation_of_hundreds_of_components_lists_the_most_correlated_pairs_not_the_whole_matrix():
    from rewardpipe.monitoring.html import CORRELATION_PAIRS, _correlation

    count = 300
    names = [f"c{i}" for i in range(count)]
    matrix = [[1.0 if i == j else 0.01 for j in range(count)] for i in range(count)]
    matrix[7][200] = matrix[200][7] = -0.99  # the pair to find
    matrix[3][4] = matrix[4][3] = float("nan")
    page = _correlation({"correlation": {"components": names, "matrix": matrix}})
    assert len(page.encode()) < 100_000  # was 4 MB: 90,000 cells
    assert page.count("<tr>") == 1 + CORRELATION_PAIRS
    first = page.index("<tr><td")
    assert page[first:].startswith('<tr><td class="l">c7</td><td class="l">c200</td>')
    assert "-0.99" in page and "nan" not in page.lower()


def test_the_correlation_of_a_few_components_is_still_the_whole_matrix():
    from rewardpipe.monitoring.html import _correlation

    names = ["a", "b", "c"]
    matrix = [[1.0, 0.5, None], [0.5, 1.0, 0.2], [None, 0.2, 1.0]]
    page = _correlation({"correlation": {"components": names, "matrix": matrix}})
    assert page.count("<td") == 9 and "most correlated pairs" not in page


def test_the_charts_of_a_hundred_components_share_a_bounded_number_of_points_and_bands():
    import re

    from rewardpipe.monitoring.html import DRAWN_BANDS, DRAWN_POINTS, MIN_COLUMNS, line_chart, timeline

    steps = list(range(1000))
    series = {f"c{i}": _flickering_series(len(steps))["a"] for i in range(100)}
    svg = timeline(steps, series, [])
    bands = svg.count("<rect ")
    assert bands <= max(DRAWN_BANDS, 100 * MIN_COLUMNS) + 100  # was 100,000 bands, 9 MB
    assert svg.count("dead (the worst verdict of each column's steps)") == 100  # each row's lone dead step
    assert len(svg.encode()) < 3_000_000
    lines = [(name, data["mean"], "#000", False) for name, data in series.items()]
    chart = line_chart("mean", steps, lines)
    points = sum(len(found.split()) for found in re.findall(r'points="([^"]*)"', chart))
    assert points <= 2 * max(DRAWN_POINTS, 100 * MIN_COLUMNS)  # was 100,000 points
    assert chart.count("<polyline") == 100
