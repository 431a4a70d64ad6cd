"""Dying onsets are marked on the chart and the report timeline, distinctly from dead onsets."""

from __future__ import annotations

import re

from rewardpipe.monitoring import monitor_records
from rewardpipe.monitoring.alarms import OnsetMarker, onset_markers
from rewardpipe.monitoring.html import render_report
from rewardpipe.monitoring.plots import plot_run
from rewardpipe.monitoring.report import build_report
from tests.test_monitor import step_with_fraction


def records(tenths_per_step):
    """Component "c" has zero variance in that many tenths of 40 groups per step."""
    return [r for step, tenths in enumerate(tenths_per_step) for r in step_with_fraction(step, 4 * tenths, groups=40)]


DYING_THEN_DEAD = [1, 2, 3, 4, 5, 6, 7, 8, 9]  # 10% .. 90%: dying from step 5 (projected 8), dead at 8
DYING_ONLY = [1, 2, 3, 4, 5, 6]


def test_the_markers_are_the_dying_and_dead_onsets_with_the_projection():
    result = monitor_records(records(DYING_THEN_DEAD))
    assert onset_markers(result.alarms) == [OnsetMarker("c", "dying", 5, 8), OnsetMarker("c", "dead", 8, None)]
    assert onset_markers([a.to_dict() for a in result.alarms]) == onset_markers(result.alarms)


def test_the_chart_draws_both_onsets(tmp_path):
    plot = plot_run(monitor_records(records(DYING_THEN_DEAD)), tmp_path / "run.png")
    assert plot.path.stat().st_size > 10_000
    assert [(m.kind, m.step, m.projected_dead_step) for m in plot.markers] == [("dying", 5, 8), ("dead", 8, None)]


def dying_marks(page):
    return re.findall(r'<g class="onset-dying" data-step="(\d+)" data-projected-dead-step="(\d*)">(.*?)</g>', page)


def test_the_report_timeline_marks_a_dying_onset_and_where_it_projects_death():
    page = render_report(build_report(records(DYING_ONLY)))
    [(step, projected, body)] = dying_marks(page)
    assert (step, projected) == ("5", "8")
    assert "projected dead around step 8" in body and "△" in body
    assert "→" in body, "the projected step lies beyond the last step shown: the line runs to the edge"
    assert "onset-dead" not in page


def test_the_report_timeline_keeps_dying_and_dead_onsets_apart():
    page = render_report(build_report(records(DYING_THEN_DEAD)))
    [(step, projected, body)] = dying_marks(page)
    assert (step, projected) == ("5", "8") and "✕" in body  # step 8 is on the timeline: death marked there
    assert len(re.findall(r'class="onset-dead"[^>]*>▼<title>dead at step 8</title>', page)) == 1
