"""CloudWatch metrics for the variance check and the code runners, as Powertools EMF log lines.

Names and dimensions must match the alarms and dashboard in stacks/constructs/monitoring.py:
namespace ``RewardPipe``, dimensions ``service`` (+ ``component`` or ``route``). ``DeadStreak`` (per
component) and ``ErrorStreak`` are emitted twice: per run (+ ``run``), and without the run as the longest
current streak among the active runs, which is what the dead-component and error-rate alarms watch (they
need no run ids, and runs never mix). At most ``rewardpipe.aws.monitoring.RUN_METRIC_RUNS`` runs at once carry the
per-run series (:class:`rewardpipe.aws.monitoring.RunMetricRuns`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

NAMESPACE = "RewardPipe"
ZERO_VARIANCE = "ZeroVarianceGroupFraction"
WITHIN_GROUP_STD = "WithinGroupStd"
COMPONENT_MEAN = "ComponentMean"
ERROR_RATE = "ErrorRate"
EXECUTION_MS = "ExecutionDurationMs"
DEAD_STREAK = "DeadStreak"
ERROR_STREAK = "ErrorStreak"
CHECKS_RUN = "ChecksRun"
# The Nova bridge's sweeper, every minute: seconds since Nova sent the oldest rollout request not yet answered.
NOVA_OLDEST_UNANSWERED = "NovaOldestUnansweredSeconds"


def service_name() -> str:
    return os.environ.get("POWERTOOLS_SERVICE_NAME") or "rewardpipe"


# CloudWatch's Dimension: "Dimension values must contain only ASCII characters and must include at least one
# non-whitespace character. ASCII control characters are not supported as part of dimension values", 1 to 1024
# characters. https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_Dimension.html
DIMENSION_VALUE_LIMIT = 1024


def dimension_value(value: Any) -> str:
    """``value`` as a dimension value CloudWatch accepts: itself when it follows the rules above and holds no
    ``%``, else percent-encoded (its run folder name in the bucket for a run id; a long one cut with a digest).

    Run ids and the component names of stored records may be any printable text ("expérience", "   "): such a
    value would be refused (a metric lost) or dropped by Powertools (a per-run point filed as the alarms'
    aggregate). Keeping ``%`` for encoded values keeps the mapping one to one."""
    from rewardpipe.store import encode_id

    text = str(value)
    if (
        len(text) <= DIMENSION_VALUE_LIMIT
        and text.isascii()
        and text.isprintable()
        and text.strip()
        and "%" not in text
    ):
        return text
    return encode_id(text, portable=False) if text else "%"


# CloudWatch's MetricDatum Value: "CloudWatch rejects values that are either too small or too large. Values must
# be in the range of 8.515920e-109 to 1.174271e+108 (Base 10) or 2e-360 to 2e360 (Base 2). In addition, special
# values (for example, NaN, +Infinity, -Infinity) are not supported" (0 is a value).
# https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_MetricDatum.html
METRIC_VALUE_SMALLEST = 8.515920e-109
METRIC_VALUE_LARGEST = 1.174271e108


def metric_value(value: float) -> float:
    """``value`` as CloudWatch takes it: a magnitude below its smallest is 0.0 (a component's mean or spread of
    1e-120, from values a record may hold, is nothing at any precision an alarm reads), one above its largest
    the largest, with its sign. A value outside the range was refused, the whole point lost. NaN has no such
    value: it is returned as it is, and :func:`emit` leaves its point out."""
    magnitude = abs(value)
    if magnitude < METRIC_VALUE_SMALLEST:
        return 0.0
    if magnitude > METRIC_VALUE_LARGEST:
        return math.copysign(METRIC_VALUE_LARGEST, value)
    return value


@dataclass(frozen=True)
class MetricPoint:
    name: str
    value: float
    unit: str
    dimensions: dict[str, str] = field(default_factory=dict)


def step_points(report: Any, run_id: str | None = None) -> list[MetricPoint]:
    """Metric points of one newly checked step (a rewardpipe.monitoring.StepReport).

    Statistics that could not be computed (no eligible groups) are left out rather than sent as 0,
    which would look like a healthy or a dead component depending on the metric; so is the dead
    streak of a component whose verdict was ``insufficient_data``. The run's dead streaks (the core
    monitor's ``ComponentStats.dead_streak``) and error streak (``StepReport.error_streak``) carry the
    ``run`` dimension.
    """
    points = [MetricPoint(ERROR_RATE, float(report.error_rate), "None")]
    error_streak = getattr(report, "error_streak", None)
    if run_id is not None and error_streak is not None:
        points.append(MetricPoint(ERROR_STREAK, float(error_streak), "Count", {"run": run_id}))
    for name, stats in report.components.items():
        dims = {"component": name}
        streak = getattr(stats, "dead_streak", None)
        if run_id is not None and streak is not None and stats.verdict != "insufficient_data":
            points.append(MetricPoint(DEAD_STREAK, float(streak), "Count", {**dims, "run": run_id}))
        for metric, value in (
            (ZERO_VARIANCE, stats.zero_variance_group_fraction),
            (WITHIN_GROUP_STD, stats.within_group_std_mean),
            (COMPONENT_MEAN, stats.mean),
        ):
            if value is not None and math.isfinite(value):
                points.append(MetricPoint(metric, float(value), "None", dims))
    return points


def aggregate_streak_points(longest_dead: dict[str, int], longest_errors: int | None) -> list[MetricPoint]:
    """DeadStreak per component and ErrorStreak, without a run dimension (what the alarms watch)."""
    points = [
        MetricPoint(DEAD_STREAK, float(streak), "Count", {"component": name})
        for name, streak in sorted(longest_dead.items())
    ]
    if longest_errors is not None:
        points.append(MetricPoint(ERROR_STREAK, float(longest_errors), "Count"))
    return points


def heartbeat_point(runs_checked: int) -> MetricPoint:
    """One per completed variance check; its absence while rollouts run is alarmed."""
    return MetricPoint(CHECKS_RUN, float(runs_checked), "Count")


def emit(points: Iterable[MetricPoint]) -> int:
    """Print each point as one EMF document (CloudWatch turns Lambda log lines into metrics); returns how many.

    A NaN value is left out: CloudWatch supports no NaN, and Powertools prints it as ``NaN``, which is not JSON, so
    the document would not be read as EMF at all (the point lost without a trace in any metric)."""
    from aws_lambda_powertools import single_metric
    from aws_lambda_powertools.metrics import MetricUnit

    count = 0
    for point in points:
        sent = metric_value(point.value)
        if math.isnan(sent):
            continue
        with single_metric(
            name=point.name,
            unit=MetricUnit(point.unit),
            value=sent,
            namespace=NAMESPACE,
            default_dimensions={"service": dimension_value(service_name())},
        ) as metric:
            for key, value in point.dimensions.items():
                metric.add_dimension(name=key, value=dimension_value(value))
        count += 1
    return count


def oldest_unanswered_point(age_s: float, run_id: str) -> MetricPoint:
    """The Nova bridge's in-flight age (0 when nothing is in flight), per bridge run id."""
    return MetricPoint(NOVA_OLDEST_UNANSWERED, float(age_s), "Seconds", {"run": run_id})


def execution_point(route: str, duration_ms: float) -> MetricPoint:
    return MetricPoint(EXECUTION_MS, float(duration_ms), "Milliseconds", {"route": route})
