"""The variance check the monitor Lambda runs: every unchecked step of one run, or of every run, in order.

It is the core monitor's own check (:func:`rewardpipe.monitoring.check_pending` over the run's core state
``runs/<run>/monitor/state.json``, schema v2: hysteresis, the set of checked steps, each component's dead
streak) with one difference: the state is written with an S3 conditional write (``If-Match`` on the ETag
it was read with, ``If-None-Match: *`` for a new run), so two concurrent checks of a run cannot both commit
a step. Alarms, metrics and the verdict JSON are published only for steps this check committed; a check
that loses the race leaves the step to the winner and checks the run's remaining steps again from the
winner's state. That serialises concurrent checks without reserved concurrency.

Runs are isolated: a run whose state or records cannot be read is reported and skipped (a corrupt state
is moved aside by the core and the run checked from a fresh state), the other runs are still checked,
and the invocation then fails (so the function's Errors alarm fires and the asynchronous retries and
dead-letter queue see it) with every problem named.

The Lambda's earlier state file ``runs/<run>/monitor/check-state.json`` is migrated once into the core
state when the run has none, and otherwise ignored.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ConfigDict, Field

from rewardpipe.aws.settings import Settings, aws_client, open_bucket_store
from rewardpipe.deferred import DeferredModel

COMMIT_ATTEMPTS = 5
LEGACY_STATE = "check-state.json"


class CheckRequest(DeferredModel):
    """Invoke with ``{"run_id": ..., "step": n}``; an EventBridge scheduled event means "every run"."""

    model_config = ConfigDict(extra="ignore")

    run_id: str | None = Field(default=None, min_length=1)
    step: int | None = Field(default=None, ge=0)


class CheckFailed(RuntimeError):
    """At least one run could not be checked (the others were); the message names each run and why."""


class StateConflict(RuntimeError):
    """Another check committed the run's state first; this check's step is left to it."""


def verdict_key(run_id: str, step: int) -> str:
    from rewardpipe.store import run_prefix

    return f"{run_prefix(run_id)}monitor/step={int(step)}.json"


def thresholds(settings: Settings) -> Any:
    """The alarm policy's thresholds, judging each component by the configured reward's declared range and role
    (REWARD_COMPONENTS, data the stack writes at synth: no user code is imported here), so a user's penalty that
    never fires is ``info``, not dead. Without it, the built-in reward's ranges, as before."""
    base = settings.alarm_policy.thresholds()
    return base.with_components(settings.reward_components) if settings.reward_components else base


# --------------------------------------------------------------------------------------------------
# The run's state object, read with its ETag and written only if nobody else wrote it in between


class ConditionalStateStore:
    """An S3Store whose monitor states are compare-and-swap objects; every other key passes through.

    The core monitor reads a run's state with ``get_bytes`` and writes it with ``put_json``: here the
    read remembers the object's ETag and the write is conditional on it. AWS answers a failed
    precondition with 412 PreconditionFailed, a concurrent conflicting write with 409
    ConditionalRequestConflict, and ``If-Match`` on a deleted object with 404 NoSuchKey; all three mean
    "someone else changed it" and raise :class:`StateConflict`.
    """

    CONFLICT_CODES = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict", "409", "NoSuchKey", "404"})

    def __init__(self, store: Any, upto: int | None = None) -> None:
        if not all(hasattr(store, name) for name in ("client", "bucket", "_full")):
            raise TypeError("the variance check keeps its state in S3 and needs an S3Store")
        self._store, self.upto = store, upto
        self._etags: dict[str, str | None] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def list_steps(self, run_id: str) -> list[int]:
        """The run's stored steps; for a check of step n, those up to n (a later one may still be written)."""
        steps = self._store.list_steps(run_id)
        return steps if self.upto is None else [s for s in steps if s <= self.upto]

    @staticmethod
    def _is_state(key: str) -> bool:
        return key.startswith("runs/") and key.endswith("/monitor/state.json")

    def get_bytes(self, key: str) -> bytes:
        if not self._is_state(key):
            return self._store.get_bytes(key)
        from botocore.exceptions import ClientError

        try:
            response = self._store.client.get_object(Bucket=self._store.bucket, Key=self._store._full(key))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                self._etags[key] = None
                raise KeyError(key) from None
            raise
        self._etags[key] = response["ETag"]
        return response["Body"].read()

    def put_json(self, key: str, obj: Any) -> str:
        if not self._is_state(key):
            return self._store.put_json(key, obj)
        from botocore.exceptions import ClientError

        etag = self._etags.get(key)
        condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
        try:
            response = self._store.client.put_object(
                Bucket=self._store.bucket, Key=self._store._full(key), ContentType="application/json",
                Body=json.dumps(obj, sort_keys=True).encode("utf-8"), **condition)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in self.CONFLICT_CODES:
                self._etags.pop(key, None)
                raise StateConflict(f"{key} was changed by a concurrent check") from None
            raise
        self._etags[key] = response.get("ETag")
        return key


def migrate_legacy_state(store: Any, run_id: str) -> str | None:
    """Carry ``monitor/check-state.json`` (the Lambda's own state before it used the core's) into the core
    state when the run has none: its hysteresis and checked steps, so no step is alarmed twice. Returns a
    problem to report if the old file is unusable (it is then ignored)."""
    from rewardpipe.monitoring import MonitorState, state_key
    from rewardpipe.store import run_prefix

    legacy = f"{run_prefix(run_id)}monitor/{LEGACY_STATE}"
    if store.get_json(state_key(run_id), default=None) is not None:
        return None
    old = store.get_json(legacy, default=None)
    if old is None:
        return None
    try:
        state = MonitorState.from_dict(old["monitor"]) if old.get("monitor") else MonitorState()
        for step in old.get("checked") or []:
            state.mark_checked(int(step))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        return f"{legacy}: not migrated, ignored ({exc})"
    state.run_id = run_id
    try:  # through the conditional store itself (get_json reads past it): the write below is "only if still absent"
        store.get_bytes(state_key(run_id))
    except KeyError:
        pass
    store.put_json(state_key(run_id), state.to_dict())
    return None


# --------------------------------------------------------------------------------------------------
# Publishing: alarms, metrics and the verdict JSON of the steps a check committed


def publish(store: Any, run_id: str, result: Any, sinks: list[Any]) -> dict[str, Any]:
    """Deliver one committed step's alarms, emit its metrics, store its verdict; its summary."""
    from rewardpipe.aws.metrics import emit, step_points
    from rewardpipe.monitoring import dispatch

    report = result.steps[0]
    summary: dict[str, Any] = {"run_id": run_id, "step": report.step, "replayed": report.replayed,
                               "records": report.records, "error_rate": report.error_rate,
                               "verdicts": {name: stats.verdict for name, stats in report.components.items()},
                               "alarms": [] if report.replayed else [a.to_dict() for a in result.alarms],
                               "verdict_key": verdict_key(run_id, report.step)}
    if not report.replayed:
        failures = dispatch(result.alarms, sinks)
        result.unreadable.extend(
            {"key": f"alarm-delivery:{f.sink}", "reason": f"{f.alarm.component}/{f.alarm.kind}: {f.error}"}
            for f in failures
        )
        emit(step_points(report, run_id=run_id))
        store.put_json(verdict_key(run_id, report.step), result.to_dict())
    if result.unreadable:
        summary["unreadable"] = result.unreadable
    return summary


def streak_points(store: Any, settings: Settings, now: Any = None) -> list[Any]:
    """DeadStreak per component and ErrorStreak, without a run dimension, for the alarms: the longest
    current streak among the **active** runs (whose core state a check wrote within the activity
    window). Runs do not mix: each keeps its own streaks (the per-run metrics carry a ``run``
    dimension), and a healthy run checked after a failing one cannot "recover" an alarm while the
    failing one is still running; a run that has stopped drops out after the window. Emitted only by a
    check that committed a step, so a pause in training sends nothing and the alarms keep their state."""
    from datetime import datetime, timedelta, timezone

    from rewardpipe.aws.metrics import aggregate_streak_points
    from rewardpipe.monitoring import ERRORS_TARGET, MonitorState, state_key

    now = now or datetime.now(timezone.utc)
    window = timedelta(minutes=settings.active_run_minutes)
    longest_dead: dict[str, int] = {}
    longest_errors: int | None = None
    for run_id in store.list_runs():
        try:
            response = store.client.get_object(Bucket=store.bucket, Key=store._full(state_key(run_id)))
            if now - response["LastModified"] > window:
                continue
            state = MonitorState.from_dict(json.loads(response["Body"].read()))
        except Exception:  # noqa: BLE001 - a missing or unusable state is reported by its own run's check
            continue
        for key, target in state.targets.items():
            if key.startswith("component:"):
                name = key.split(":", 1)[1]
                longest_dead[name] = max(longest_dead.get(name, 0), target.dead_streak)
            elif key == ERRORS_TARGET:
                longest_errors = max(longest_errors or 0, target.error_streak)
    return aggregate_streak_points(longest_dead, longest_errors)


def _replay(store: Any, run_id: str, step: int, settings: Settings) -> dict[str, Any] | None:
    """A requested step that was already checked: reported again, never alarmed or measured again."""
    from rewardpipe.monitoring import monitor_step

    result = monitor_step(store, run_id, step, thresholds(settings), (), persist_state=False)
    if not result.steps:
        return None
    return {"run_id": run_id, "step": step, "replayed": True, "records": result.steps[0].records,
            "verdicts": {n: s.verdict for n, s in result.steps[0].components.items()}, "alarms": [],
            "verdict_key": verdict_key(run_id, step)}


def run_check(request: CheckRequest, settings: Settings, store: Any = None, sns_client: Any = None) -> dict[str, Any]:
    """Check every unchecked step of one run (or of every run) in order; one failing run stops no other."""
    from rewardpipe.aws.metrics import emit, heartbeat_point
    from rewardpipe.monitoring import SnsAlarmSink, StoreAlarmSink, check_pending, load_state

    store = ConditionalStateStore(store or open_bucket_store(settings), upto=request.step)
    sinks: list[Any] = [StoreAlarmSink(store)]
    if settings.alarm_topic_arn:
        sinks.append(SnsAlarmSink(settings.alarm_topic_arn, client=sns_client or aws_client("sns")))
    runs = [request.run_id] if request.run_id else store.list_runs()
    summaries: list[dict[str, Any]] = []
    problems: dict[str, list[str]] = {}
    for run_id in runs:
        try:
            legacy = migrate_legacy_state(store, run_id)
            state, corrupt = load_state(store, run_id)  # a corrupt state is moved aside here, and reported
            already = request.step is not None and state.is_checked(request.step)
        except Exception as exc:  # noqa: BLE001 - isolate runs: report this one, check the others
            problems.setdefault(run_id, []).append(f"{type(exc).__name__}: {exc}")
            continue
        for problem in (legacy, corrupt.reason if corrupt is not None else None):
            if problem:
                problems.setdefault(run_id, []).append(problem)
        for _ in range(COMMIT_ATTEMPTS):
            (check,) = check_pending(store, [run_id], thresholds(settings), (), skip_newest=request.step is None)
            summaries.extend(publish(store, run_id, result, sinks) for result in check.results)
            lost = [p for p in check.problems if str(p.get("error", "")).startswith(StateConflict.__name__)]
            problems.setdefault(run_id, []).extend(
                f"step {p['step']}: {p['error']}" if p.get("step") is not None else str(p["error"])
                for p in check.problems if p not in lost)
            if not lost:
                break  # a lost race leaves steps to the winner; check what is still unchecked from its state
        if already:
            replay = _replay(store, run_id, request.step, settings)  # type: ignore[arg-type]
            if replay is not None:
                summaries.append(replay)
    if any(not summary["replayed"] for summary in summaries):
        emit(streak_points(store, settings))
    failed = {run: why for run, why in problems.items() if why}
    emit([heartbeat_point(len(runs) - len(failed))])
    if failed:
        raise CheckFailed("; ".join(f"run '{run}': {', '.join(why)}" for run, why in failed.items())[:4000])
    return {"checked": sum(1 for s in summaries if not s["replayed"]), "results": summaries}
