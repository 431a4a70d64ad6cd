"""A one-page picture of a run: per component, how much of the batch still carries a learning signal.

Two panels per component, sharing the step axis: the share of groups whose within-group std is zero (with
the dead / recover thresholds drawn in), and the mean within-group std against the batch std. The gap between
the last two is the failure this project exists for: a component can vary across the batch while being
constant inside every group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rewardpipe.monitoring.alarms import OnsetMarker, onset_markers
from rewardpipe.monitoring.monitor import MonitorResult
from rewardpipe.safe_text import printable


def _plain(text: str, limit: int = 80) -> str:
    """``text`` as a chart shows it, literally: one line of at most ``limit`` characters, control and format
    characters as escapes, and every ``$`` escaped. Matplotlib reads text between two ``$`` as math: a component
    or run named ``a$\\frac{$b`` failed the chart (a ValueError from its math parser), ``$x$`` drew another name."""
    shown = printable(text, keep_newlines=False)
    if len(shown) > limit:
        shown = shown[: limit - 3] + "..."
    return shown.replace("$", r"\$")


@dataclass
class Plot:
    """What :func:`plot_run` wrote and the onset markers it drew on it."""

    path: Path
    markers: list[OnsetMarker] = field(default_factory=list)


def plot_run(result: MonitorResult, path: str | Path, title: str | None = None) -> Plot:
    """Render ``result`` to an image file (format from the suffix: .png, .svg, .pdf). Dead onsets are
    shaded bands; dying onsets a dashed orange line with a ▲ at the projected step of death."""
    import matplotlib

    matplotlib.use("Agg")  # headless: CI, Lambda and SSH sessions have no display
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    if not result.steps:
        raise ValueError("nothing to plot: the run has no steps")
    names = [*list(dict.fromkeys(n for report in result.steps for n in report.components)), "aggregate"]
    steps = [report.step for report in result.steps]

    def series(name: str, attribute: str) -> list[Any]:
        values = []
        for report in result.steps:
            stats = report.aggregate if name == "aggregate" else report.components.get(name)
            value = getattr(stats, attribute) if stats is not None else None
            values.append(float("nan") if value is None else value)
        return values

    fig, axes = plt.subplots(2, len(names), figsize=(3.2 * len(names), 5.2), sharex=True, squeeze=False)
    thresholds = result.thresholds
    markers = onset_markers(result.alarms)
    drawn: list[OnsetMarker] = []
    for column, name in enumerate(names):
        top, bottom = axes[0][column], axes[1][column]
        top.plot(steps, series(name, "zero_variance_group_fraction"), marker="o", color="tab:red")
        top.axhline(thresholds.dead_fraction, color="tab:red", linestyle="--", linewidth=0.8, label="dead")
        top.axhline(thresholds.recover_fraction, color="tab:green", linestyle=":", linewidth=0.8, label="recover")
        for marker in (m for m in markers if m.component == name):
            if marker.kind == "dead":
                top.axvline(marker.step, color="black", alpha=0.25, linewidth=6)
            else:
                top.axvline(marker.step, color="tab:orange", linestyle="--", linewidth=1.2)
                if marker.projected_dead_step is not None:
                    top.plot(
                        [marker.projected_dead_step],
                        [thresholds.dead_fraction],
                        marker="^",
                        markersize=9,
                        color="tab:orange",
                        linestyle="none",
                    )
                    top.annotate(
                        f"dead ~{marker.projected_dead_step}",
                        (marker.projected_dead_step, thresholds.dead_fraction),
                        textcoords="offset points",
                        xytext=(0, -14),
                        ha="center",
                        fontsize=7,
                        color="tab:orange",
                    )
            drawn.append(marker)
        top.set_ylim(-0.05, 1.05)
        top.set_title(_plain(name), fontsize=10)
        bottom.plot(steps, series(name, "within_group_std_mean"), marker="o", label="within-group std")
        bottom.plot(steps, series(name, "std"), marker="x", linestyle="--", label="batch std")
        bottom.set_xlabel("step")
        bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
        if column == 0:
            top.set_ylabel("zero-variance groups")
            bottom.set_ylabel("std")
            top.legend(fontsize=7, loc="center left")
            bottom.legend(fontsize=7)
    fig.suptitle(
        _plain(title, 200)
        if title
        else f"run {_plain(str(result.run_id))}: within-group variance per component "
        "(grey: dead; orange dashes: dying, ▲ projected death)"
    )
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Plot(path, drawn)
