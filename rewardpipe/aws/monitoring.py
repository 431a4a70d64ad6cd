"""The variance check the monitor Lambda runs: one step of one run, or the latest step of every run."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rewardpipe.aws.settings import Settings, aws_client, open_bucket_store


class CheckRequest(BaseModel):
    """Invoke with ``{"run_id": ..., "step": n}``; an EventBridge scheduled event means "latest steps"."""

    model_config = ConfigDict(extra="ignore")

    run_id: str | None = Field(default=None, min_length=1)
    step: int | None = Field(default=None, ge=0)


def verdict_key(run_id: str, step: int) -> str:
    from rewardpipe.store import run_prefix

    return f"{run_prefix(run_id)}monitor/step={int(step)}.json"


def thresholds(settings: Settings) -> Any:
    from rewardpipe.monitoring import Thresholds

    return Thresholds(
        dead_fraction=settings.zero_variance_fraction,
        recover_fraction=min(0.5, settings.zero_variance_fraction),
        error_rate=settings.error_rate,
        error_recover_rate=min(0.05, settings.error_rate),
    )


def check_step(store: Any, run_id: str, step: int, settings: Settings, sinks: list[Any]) -> dict[str, Any]:
    from rewardpipe.aws.metrics import emit, step_points
    from rewardpipe.monitoring import monitor_step

    result = monitor_step(store, run_id, step, thresholds(settings), sinks)
    report = result.step(step) if any(r.step == step for r in result.steps) else None
    summary: dict[str, Any] = {"run_id": run_id, "step": step, "records": 0, "alarms": [a.to_dict() for a in result.alarms]}
    if report is not None:
        emit(step_points(report))
        summary.update(
            records=report.records, error_rate=report.error_rate, replayed=report.replayed,
            verdicts={name: stats.verdict for name, stats in report.components.items()},
        )
    store.put_json(verdict_key(run_id, step), result.to_dict())
    summary["verdict_key"] = verdict_key(run_id, step)
    if result.unreadable:
        summary["unreadable"] = result.unreadable
    return summary


def run_check(request: CheckRequest, settings: Settings, store: Any = None, sns_client: Any = None) -> dict[str, Any]:
    """Check one step, or the newest complete unchecked step of one run (or of every run)."""
    from rewardpipe.monitoring import SnsAlarmSink, StoreAlarmSink

    store = store or open_bucket_store(settings)
    sinks: list[Any] = [StoreAlarmSink(store)]
    if settings.alarm_topic_arn:
        sinks.append(SnsAlarmSink(settings.alarm_topic_arn, client=sns_client or aws_client("sns")))
    targets: list[tuple[str, int]] = []
    if request.run_id and request.step is not None:
        targets.append((request.run_id, request.step))
    else:
        # Scheduled (or run-wide) checks look at the newest step that is known to be complete: one
        # that a later step already follows. A step still being written is checked on the next tick
        # (or right away, by a per-step invocation from the trainer).
        for run_id in [request.run_id] if request.run_id else store.list_runs():
            steps = store.list_steps(run_id)
            if len(steps) >= 2 and store.get_json(verdict_key(run_id, steps[-2]), default=None) is None:
                targets.append((run_id, steps[-2]))
    checks = [check_step(store, run_id, step, settings, sinks) for run_id, step in targets]
    return {"checked": len(checks), "results": checks}
