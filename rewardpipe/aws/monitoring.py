"""The variance check the monitor Lambda runs: every unchecked step of one run, or of every run, in order.

Per run, the Lambda keeps one object, ``runs/<run>/monitor/check-state.json``: the core monitor's
hysteresis state, the set of steps already checked and each component's dead streak (consecutive dead
checked steps). A check reads it with its ETag, checks the steps in ascending order, and commits the new
state with an S3 conditional write (``If-Match`` on the ETag, ``If-None-Match: *`` for a new run). Only the
check that commits sends alarms and emits metrics; a check that loses the race starts over from the state
the winner wrote. That serialises concurrent checks of a run without reserved concurrency.

Runs are isolated: a run whose state or records cannot be read is reported and skipped, the other runs are
still checked, and the invocation then fails (so the function's Errors alarm fires and the asynchronous
retries and dead-letter queue see it) with every failed run named.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rewardpipe.aws.settings import Settings, aws_client, open_bucket_store

CHECK_STATE_SCHEMA = "rewardpipe.check-state/v1"
COMMIT_ATTEMPTS = 5


class CheckRequest(BaseModel):
    """Invoke with ``{"run_id": ..., "step": n}``; an EventBridge scheduled event means "every run"."""

    model_config = ConfigDict(extra="ignore")

    run_id: str | None = Field(default=None, min_length=1)
    step: int | None = Field(default=None, ge=0)


class CheckFailed(RuntimeError):
    """At least one run could not be checked (the others were); the message names each run and why."""


class CheckConflict(RuntimeError):
    """Another check kept committing this run's state first; the next invocation picks the steps up."""


class CheckState(BaseModel):
    """What the Lambda remembers about one run between checks."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: str = Field(default=CHECK_STATE_SCHEMA, alias="schema", pattern=f"^{CHECK_STATE_SCHEMA}$")
    monitor: dict[str, Any] | None = None  # rewardpipe.monitoring.MonitorState.to_dict()
    checked: list[int] = Field(default_factory=list)
    dead_streak: dict[str, int] = Field(default_factory=dict)


def verdict_key(run_id: str, step: int) -> str:
    from rewardpipe.store import run_prefix

    return f"{run_prefix(run_id)}monitor/step={int(step)}.json"


def check_state_key(run_id: str) -> str:
    from rewardpipe.store import run_prefix

    return f"{run_prefix(run_id)}monitor/check-state.json"


def thresholds(settings: Settings) -> Any:
    from rewardpipe.monitoring import Thresholds

    return Thresholds(
        dead_fraction=settings.zero_variance_fraction,
        recover_fraction=min(0.5, settings.zero_variance_fraction),
        error_rate=settings.error_rate,
        error_recover_rate=min(0.05, settings.error_rate),
        raise_after=settings.dead_steps,
    )


# --------------------------------------------------------------------------------------------------
# The run's state object, read with its ETag and written only if nobody else wrote it in between


class VersionedObject:
    """One S3 object updated by compare-and-swap (S3 conditional writes).

    AWS answers a failed precondition with 412 PreconditionFailed, a concurrent conflicting write with
    409 ConditionalRequestConflict, and ``If-Match`` on a deleted object with 404 NoSuchKey; all three
    mean "someone else changed it": re-read and try again.
    """

    CONFLICT_CODES = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict", "409", "NoSuchKey", "404"})

    def __init__(self, store: Any, key: str) -> None:
        if not all(hasattr(store, name) for name in ("client", "bucket", "_full")):
            raise TypeError("the variance check keeps its state in S3 and needs an S3Store")
        self.client, self.bucket, self.key, self._full_key = store.client, store.bucket, key, store._full(key)

    def read(self) -> tuple[bytes | None, str | None]:
        from botocore.exceptions import ClientError

        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self._full_key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None, None
            raise
        return response["Body"].read(), response["ETag"]

    def write(self, data: bytes, etag: str | None) -> bool:
        """Write if the object is still at ``etag`` (absent when None); False if someone else won."""
        from botocore.exceptions import ClientError

        condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._full_key, Body=data,
                                   ContentType="application/json", **condition)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in self.CONFLICT_CODES:
                return False
            raise
        return True


def parse_check_state(data: bytes | None, key: str) -> CheckState:
    if data is None:
        return CheckState()
    try:
        return CheckState.model_validate(json.loads(data))
    except (ValueError, ValidationError) as exc:  # JSONDecodeError is a ValueError
        if isinstance(exc, ValidationError) and exc.errors():
            first = exc.errors()[0]
            reason = f"field '{'.'.join(str(p) for p in first['loc'])}': {first['msg']}"
        else:
            reason = "not valid JSON"
        raise ValueError(f"{key}: corrupt check state ({reason})") from None


# --------------------------------------------------------------------------------------------------
# Checking


@dataclass
class StepCheck:
    """One step's result and what it means for the metrics (nothing for a replayed step)."""

    step: int
    result: Any  # rewardpipe.monitoring.MonitorResult
    replayed: bool
    dead_streak: dict[str, int]

    @property
    def report(self) -> Any:
        return self.result.step(self.step) if any(r.step == self.step for r in self.result.steps) else None


def advance_dead_streaks(streaks: dict[str, int], report: Any) -> dict[str, int]:
    """Consecutive dead checked steps per component; a step with too little data neither extends nor ends it.

    The core monitor tracks it in its state (``ComponentStats.dead_streak``) and is taken at its word;
    the count here is the same rule, for a report that carries none.
    """
    out = dict(streaks)
    for name, stats in report.components.items():
        if getattr(stats, "dead_streak", None) is not None:
            out[name] = int(stats.dead_streak)
        elif stats.verdict != "insufficient_data":
            out[name] = out.get(name, 0) + 1 if stats.verdict == "dead" else 0
    return out


def plan_steps(available: list[int], checked: Iterable[int], request: CheckRequest) -> tuple[list[int], list[int]]:
    """(steps to check now, in order; already-checked steps to report again).

    A scheduled check takes every complete step not yet checked; the newest step is complete only once a
    later one exists. A request for step n checks every unchecked step up to n first, so a step that was
    skipped (or checked late) still goes through the hysteresis in order and can alarm.
    """
    done = set(checked)
    if request.step is None:
        complete = available[:-1]
        return [s for s in complete if s not in done], []
    upto = sorted({s for s in available if s <= request.step} | {request.step})
    todo = [s for s in upto if s not in done]
    return todo, ([request.step] if request.step in done else [])


def check_run(
    store: Any,
    run_id: str,
    request: CheckRequest,
    settings: Settings,
    publish: Callable[[str, list[StepCheck]], None],
) -> list[StepCheck]:
    """Check one run's steps and commit its state; ``publish`` runs only for the check that committed."""
    from rewardpipe.monitoring import MonitorState, monitor_records

    th = thresholds(settings)
    state_object = VersionedObject(store, check_state_key(run_id))
    available = store.list_steps(run_id)
    for _ in range(COMMIT_ATTEMPTS):
        data, etag = state_object.read()
        state = parse_check_state(data, state_object.key)
        todo, again = plan_steps(available, state.checked, request)
        monitor_state = MonitorState.from_dict(state.monitor) if state.monitor else None
        checks: list[StepCheck] = []
        streaks = dict(state.dead_streak)
        checked = set(state.checked)
        for step in todo:
            bad: list[Any] = []
            result = monitor_records(store.iter_records(run_id, step, on_bad=bad.append), th, monitor_state)
            result.unreadable = [b.to_dict() for b in bad]
            check = StepCheck(step, result, replayed=False, dead_streak={})
            if check.report is None:
                continue  # no records yet: not checked, so the next check looks again
            monitor_state = result.state
            streaks = advance_dead_streaks(streaks, check.report)
            check.dead_streak = streaks
            checked.add(step)
            checks.append(check)
        if checks:
            new_state = CheckState(monitor=monitor_state.to_dict(), checked=sorted(checked), dead_streak=streaks)
            body = json.dumps(new_state.model_dump(by_alias=True, mode="json"), sort_keys=True).encode()
            if not state_object.write(body, etag):
                continue  # another check committed first: start again from its state
        for step in again:
            result = monitor_records(store.iter_records(run_id, step), th, monitor_state)
            checks.append(StepCheck(step, result, replayed=True, dead_streak={}))
        publish(run_id, checks)
        return checks
    raise CheckConflict(f"run '{run_id}': the check state kept changing under {COMMIT_ATTEMPTS} attempts")


# --------------------------------------------------------------------------------------------------
# Publishing: alarms, metrics and the verdict JSON of the steps a check committed


def publisher(store: Any, sinks: list[Any], summaries: list[dict[str, Any]]) -> Callable[[str, list[StepCheck]], None]:
    from rewardpipe.aws.metrics import emit, step_points
    from rewardpipe.monitoring import dispatch

    def publish(run_id: str, checks: list[StepCheck]) -> None:
        for check in checks:
            report = check.report
            summary: dict[str, Any] = {"run_id": run_id, "step": check.step, "records": 0, "replayed": check.replayed,
                                       "alarms": [] if check.replayed else [a.to_dict() for a in check.result.alarms]}
            if not check.replayed:
                failures = dispatch(check.result.alarms, sinks)
                check.result.unreadable.extend(
                    {"key": f"alarm-delivery:{f.sink}", "reason": f"{f.alarm.component}/{f.alarm.kind}: {f.error}"}
                    for f in failures
                )
                if report is not None:
                    emit(step_points(report, check.dead_streak))
                store.put_json(verdict_key(run_id, check.step), check.result.to_dict())
            if report is not None:
                summary.update(records=report.records, error_rate=report.error_rate,
                               verdicts={name: stats.verdict for name, stats in report.components.items()})
            summary["verdict_key"] = verdict_key(run_id, check.step)
            if check.result.unreadable:
                summary["unreadable"] = check.result.unreadable
            summaries.append(summary)

    return publish


def run_check(request: CheckRequest, settings: Settings, store: Any = None, sns_client: Any = None) -> dict[str, Any]:
    """Check every unchecked step of one run (or of every run) in order; one failing run stops no other."""
    from rewardpipe.aws.metrics import emit, heartbeat_point
    from rewardpipe.monitoring import SnsAlarmSink, StoreAlarmSink

    store = store or open_bucket_store(settings)
    sinks: list[Any] = [StoreAlarmSink(store)]
    if settings.alarm_topic_arn:
        sinks.append(SnsAlarmSink(settings.alarm_topic_arn, client=sns_client or aws_client("sns")))
    summaries: list[dict[str, Any]] = []
    publish = publisher(store, sinks, summaries)
    failures: dict[str, str] = {}
    runs = [request.run_id] if request.run_id else store.list_runs()
    for run_id in runs:
        try:
            check_run(store, run_id, request, settings, publish)
        except Exception as exc:  # noqa: BLE001 - isolate runs: report this one, check the others
            failures[run_id] = f"{type(exc).__name__}: {exc}"
    emit([heartbeat_point(len(runs) - len(failures))])
    if failures:
        raise CheckFailed("; ".join(f"run '{run}': {why}" for run, why in failures.items())[:4000])
    return {"checked": sum(1 for s in summaries if not s["replayed"]), "results": summaries}
