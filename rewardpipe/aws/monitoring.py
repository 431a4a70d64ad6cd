"""The variance check the monitor Lambda runs: every unchecked step of one run, or of every run, in order.

It is the core monitor's own check (:func:`rewardpipe.monitoring.check_pending` over the run's core state
``runs/<run>/monitor/state.json``, schema v2: hysteresis, the set of checked steps, each component's dead
streak, the outbox of deliveries still owed) with one difference: the state is written with an S3
conditional write (``If-Match`` on the ETag it was read with, ``If-None-Match: *`` for a new run), so two
concurrent checks of a run cannot both commit a step.

**Nothing lost, nothing delivered twice.** For each step, in this order (:func:`rewardpipe.monitoring.
monitor_step`):

1. the verdict JSON is written (``runs/<run>/monitor/step=<n>.json``: at its own key, so writing it twice
   is harmless);
2. the state is committed with the step checked **and** its alarms and metric points pending (the
   outbox), in one conditional write carrying a fresh ``commit`` token. S3 answers a conditional write
   that lost with 412 (or 409, or 404): the state is then read back, and if it carries this write's token
   the write was applied and only its answer was lost (a dropped connection, a retry after it), so the
   check goes on; otherwise another check won, and the step is left to it (it has the same outbox);
3. the alarms are delivered: to the store (the alarm objects) and to SNS, each through its ledger (the
   stored alarm object; ``runs/<run>/monitor/delivered/...sns.json`` written after each publish), so a
   retried check never publishes what got through; the metrics are emitted;
4. the state is committed again without what was delivered.

A check that dies anywhere after 2 leaves the outbox in the state: the next check of the run (the Lambda's
own retry, or the schedule) delivers it first (:func:`rewardpipe.monitoring.flush_pending`), including for
a step it then finds already checked. A delivery that fails (SNS down, a throttled S3) stays in the outbox
and **fails the invocation** (:class:`CheckFailed`), so Lambda retries it and the function's Errors alarm
sees it. "Exactly once", as far as SNS allows: an alarm is the same alarm when its run, step, component and
kind are (its ``dedupe_key``, sent as a message attribute); a run raises it once, a replay raises nothing,
and the ledger stops a retried or concurrent delivery. SNS has no idempotent publish on a standard topic,
so the one window left is a check that dies between SNS's answer and the ledger write; on a FIFO topic
the ``dedupe_key`` digest is the ``MessageDeduplicationId``, and SNS drops such a repeat within 5 minutes.

Runs are isolated: a run whose state or records cannot be read is reported and skipped (a corrupt or
truncated state is kept aside at ``monitor/state.corrupt-<time>.json`` and the run checked from a fresh
state: the ledgers keep the alarms it already raised from being sent again), the other runs are still
checked, and the invocation then fails with every problem named.

The Lambda's earlier state file ``runs/<run>/monitor/check-state.json`` is migrated once into the core
state when the run has none, and otherwise ignored.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from datetime import UTC
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict, Field

from rewardpipe.aws.settings import Settings, aws_client
from rewardpipe.deferred import DeferredModel

if TYPE_CHECKING:
    from rewardpipe.store import RunProgress

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

_CONFLICT = object()
_STEP_FOLDER = re.compile(r"runs/[^/]+/step=[0-9]+/")


class ConditionalStateStore:
    """An S3Store whose monitor states are compare-and-swap objects; every other key passes through.

    The core monitor reads a run's state with ``get_bytes`` and writes it with ``put_json``: here the
    read remembers the object's ETag and the write is conditional on it. AWS answers a failed
    precondition with 412 PreconditionFailed, a concurrent conflicting write with 409
    ConditionalRequestConflict, and ``If-Match`` on a deleted object with 404 NoSuchKey. Any of the three
    may also answer a write that **was** applied, when its first answer was lost and it was sent again
    (by the store's retries or botocore's): the state is read back, and its ``commit`` token says which.
    Only "someone else changed it" raises :class:`StateConflict`. Reads and writes go through the store's
    own bounded, classified retries (rewardpipe.store.S3Limits).
    """

    CONFLICT_CODES = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict", "409", "NoSuchKey", "404"})

    def __init__(self, store: Any, upto: int | None = None) -> None:
        if not all(hasattr(store, name) for name in ("client", "bucket", "_full", "_call")):
            raise TypeError("the variance check keeps its state in S3 and needs an S3Store")
        self._store, self.upto = store, upto
        self._etags: dict[str, str | None] = {}
        self._runs: list[str] | None = None
        self._last_listing: tuple[str, list[str]] | None = None
        #: Per step folder read from a listing of this check: how many keys it held (the verdict keeps it).
        self.keys_read: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def list_runs(self) -> list[str]:
        """The bucket's runs, listed once per check (this store lives for one): the runs to check, the holders of
        per-run metrics (:class:`RunMetricRuns`) and the alarms' streaks (:func:`streak_points`) each listed
        ``runs/`` again, three LISTs a scheduled check and two a run's."""
        if self._runs is None:
            self._runs = self._store.list_runs()
        return list(self._runs)

    def list_keys(self, prefix: str = "") -> list[str]:
        """The keys below ``prefix``; the same prefix asked again with nothing else listed in between is answered from
        the first listing, and so is the read of that step that follows (:meth:`iter_records`). A scheduled check
        lists the run's provisional step to see whether records landed in it (``check_pending``), judging a step
        lists it to keep its key count (``monitor_step``) and then reads it: three LISTs of one step for a new
        judgement, two for a first one. Its count is now that of the keys read."""
        last = self._last_listing
        if last is not None and last[0] == prefix:
            return list(last[1])
        keys = self._store.list_keys(prefix)
        # only a step's folder, which the check never writes to: any other listing is made afresh
        self._last_listing = (prefix, keys) if _STEP_FOLDER.fullmatch(prefix) else None
        return list(keys)

    def iter_records(self, run_id: str, step: int | None = None, **kwargs: Any) -> Any:
        """The store's records, the step's read from the listing :meth:`list_keys` just made of it, if any."""
        from rewardpipe.store import step_prefix

        last, self._last_listing = self._last_listing, None
        if step is not None and last is not None and last[0] == step_prefix(run_id, step) and "listed" not in kwargs:
            self.keys_read[last[0]] = len(last[1])
            return self._store.iter_records(run_id, step, listed=last[1], **kwargs)
        return self._store.iter_records(run_id, step, **kwargs)

    def list_steps(self, run_id: str, **kwargs: Any) -> list[int]:
        """The run's stored steps; for a check of step n, those up to n (a later one may still be written)."""
        return self._capped(self._store.list_steps(run_id, **kwargs))

    def run_progress(self, run_id: str) -> RunProgress:
        """The run's progress (:meth:`rewardpipe.store.Store.run_progress`) with its steps capped as
        :meth:`list_steps` caps them: ``check_pending`` reads the run's steps from it alone (one listing a run)."""
        from dataclasses import replace

        progress = self._store.run_progress(run_id)
        if self.upto is None:
            return progress
        return replace(progress, steps=self._capped(progress.steps), finished=self._capped(progress.finished))

    def _capped(self, steps: list[int]) -> list[int]:
        return steps if self.upto is None else [s for s in steps if s <= self.upto]

    @staticmethod
    def _is_state(key: str) -> bool:
        return key.startswith("runs/") and key.endswith("/monitor/state.json")

    def _fetch(self, key: str) -> bytes:
        store = self._store

        def get() -> tuple[str, bytes]:
            response = store.client.get_object(Bucket=store.bucket, Key=store._full(key))
            return response["ETag"], response["Body"].read()  # the body inside the retried call

        try:
            etag, body = store._call(f"read {key}", get)
        except KeyError:
            self._etags[key] = None
            raise KeyError(key) from None
        self._etags[key] = etag
        return body

    def get_bytes(self, key: str) -> bytes:
        return self._fetch(key) if self._is_state(key) else self._store.get_bytes(key)

    def put_json(self, key: str, obj: Any) -> str:
        if not self._is_state(key):
            return self._store.put_json(key, obj)
        from botocore.exceptions import ClientError

        from rewardpipe.store import s3_error_code

        store = self._store
        etag = self._etags.get(key)
        condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
        body = json.dumps(obj, sort_keys=True, allow_nan=False).encode("utf-8")

        def attempt() -> Any:
            try:
                return store.client.put_object(
                    Bucket=store.bucket, Key=store._full(key), Body=body, ContentType="application/json", **condition
                )
            except ClientError as exc:
                if s3_error_code(exc) in self.CONFLICT_CODES:
                    return _CONFLICT  # decided below, once: retrying cannot change the answer
                raise

        response = store._call(f"commit {key}", attempt)
        if response is _CONFLICT:
            token = obj.get("commit") if isinstance(obj, dict) else None
            if token and self._applied(key, token):
                return key  # this write got through; only its answer was lost
            self._etags.pop(key, None)
            raise StateConflict(f"{key} was changed by a concurrent check")
        self._etags[key] = response.get("ETag")
        return key

    def _applied(self, key: str, token: str) -> bool:
        """The state now stored carries ``token`` (a failure to read it back is raised: the caller's step
        stays unconfirmed, and its next check finds it either checked, with its outbox, or not)."""
        try:
            stored = json.loads(self._fetch(key))
        except KeyError:
            return False
        except ValueError:
            return False
        return isinstance(stored, dict) and stored.get("commit") == token


def migrate_legacy_state(store: Any, run_id: str) -> str | None:
    """Carry ``monitor/check-state.json`` (the Lambda's own state before it used the core's) into the core
    state when the run has none: its hysteresis and checked steps, so no step is alarmed twice. Returns a
    problem to report if the old file is unusable (it is then ignored). A state that exists, usable or
    not, is left to :func:`rewardpipe.monitoring.load_state` (which keeps a corrupt one aside)."""
    from rewardpipe.monitoring import MonitorState, state_key
    from rewardpipe.store import StoreError, run_prefix

    try:  # through the conditional store: the write below is "only if still absent"
        store.get_bytes(state_key(run_id))
        return None
    except KeyError:
        pass
    legacy = f"{run_prefix(run_id)}monitor/{LEGACY_STATE}"
    try:
        old = store.get_json(legacy, default=None)
    except StoreError as exc:
        return f"{legacy}: not migrated, ignored ({exc})"
    if old is None:
        return None
    try:
        state = MonitorState.from_dict(old["monitor"]) if old.get("monitor") else MonitorState()
        for step in old.get("checked") or []:
            state.mark_checked(int(step))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        return f"{legacy}: not migrated, ignored ({exc})"
    state.run_id = run_id
    from rewardpipe.monitoring import commit_state

    commit_state(store, run_id, state)
    return None


# --------------------------------------------------------------------------------------------------
# What a committed step publishes besides its alarms: the verdict JSON and the CloudWatch metrics


#: Component names a run's metrics may carry beyond the ones declared (the deployed reward's, the run manifest's):
#: the first ones in name order. Every name is 3 or 4 custom metrics (ZeroVarianceGroupFraction, WithinGroupStd,
#: ComponentMean, DeadStreak), each billed by the month: records naming thousands of components (a bad writer, or
#: anyone who may put objects under the records prefix) made thousands of metrics.
EXTRA_METRIC_COMPONENTS = 5
#: The most declared names a run's manifest adds to the deployed reward's (a manifest is an object in the same
#: bucket); past it they count as undeclared. No stack alarms more (each component is an alarm: see
#: stacks/constructs/monitoring.py's TEMPLATE_MAX_RESOURCES).
MANIFEST_METRIC_COMPONENTS = 500
#: Names listed in a summary's ``metrics_left_out`` (the count says how many in all).
LEFT_OUT_LISTED = 20


class MetricComponents:
    """Which component names a run's CloudWatch metrics carry: the deployed reward's components
    (``REWARD_COMPONENTS``), the ones the run's manifest declares (up to MANIFEST_METRIC_COMPONENTS), and up to
    EXTRA_METRIC_COMPONENTS others found in its records (the first by name, so a run keeps the same ones from
    step to step). A run's manifest is read once per check."""

    def __init__(self, store: Any, deployed: Any = ()) -> None:
        self.store = store
        self.deployed = list(deployed)
        self._declared: dict[str, set[str]] = {}

    def declared(self, run_id: str) -> set[str]:
        if run_id not in self._declared:
            from itertools import islice

            from rewardpipe.monitoring.thresholds import manifest_components
            from rewardpipe.store import manifest_key

            try:
                manifest = self.store.get_json(manifest_key(run_id), default=None)
                named = manifest_components(manifest) if isinstance(manifest, dict) else {}
            except Exception:  # noqa: BLE001 - an unreadable manifest declares nothing; its run's check reports it
                named = {}
            self._declared[run_id] = {*self.deployed, *islice(named, MANIFEST_METRIC_COMPONENTS)}
        return self._declared[run_id]

    def split(self, run_id: str, names: Any) -> tuple[list[str], list[str]]:
        """``names`` (found in the run's records) as (given metrics, left out), each in name order."""
        declared = self.declared(run_id)
        others = sorted(name for name in set(names) if name not in declared)
        kept = sorted({name for name in names if name in declared} | set(others[:EXTRA_METRIC_COMPONENTS]))
        return kept, others[EXTRA_METRIC_COMPONENTS:]


def deployed_components(settings: Settings) -> list[str]:
    """The deployed reward's component names: REWARD_COMPONENTS, and the names REWARD_WEIGHTS weighs (a deployment
    synthesized before REWARD_COMPONENTS has only these)."""
    return list(dict.fromkeys([*settings.reward_components, *settings.reward_weights]))


#: The most runs whose DeadStreak and ErrorStreak are also sent with a ``run`` dimension: every such run adds a
#: custom metric per component and one more, billed for each hour it gets a point, so many concurrent runs (or a
#: check catching up on every run of the bucket) made the metric count, and the bill, grow with the runs. The
#: alarms' streaks (no run dimension) count every active run, whichever carries its own (:class:`RunMetricRuns`).
RUN_METRIC_RUNS = 10


def run_metrics_key(run_id: str) -> str:
    """The marker a run's first check writes when it is given per-run streak metrics (its grant)."""
    from rewardpipe.store import run_prefix

    return f"{run_prefix(run_id)}monitor/run-metrics.json"


class RunMetricRuns:
    """Which runs' streaks carry a ``run`` dimension: first come, first served, at most RUN_METRIC_RUNS at once. A
    run is given them at its first check while fewer active runs (whose core state a check wrote within
    ``settings.active_run_minutes``) hold them, and keeps them (its :func:`run_metrics_key` marker) for as long as
    it runs; a run that stopped frees its place after the window. Should more hold a marker (a stopped run that
    resumed, two checks granting at once), the first RUN_METRIC_RUNS by grant keep them. The holders are listed
    once per check; each run left out is logged once, with the count of holders."""

    def __init__(self, store: Any, settings: Settings, now: Any = None) -> None:
        self.store = store
        self.settings = settings
        self.now = now
        self._holders: dict[str, Any] | None = None
        self._logged: set[str] = set()

    def _granted(self, run_id: str) -> Any:
        """When the run's marker was written, or None when it has none."""
        try:
            head = self.store.client.head_object(
                Bucket=self.store.bucket, Key=self.store._full(run_metrics_key(run_id))
            )
        except Exception:  # noqa: BLE001 - no marker (or unreadable): not a holder
            return None
        return head["LastModified"]

    def holders(self) -> dict[str, Any]:
        if self._holders is None:
            active = _active_states(self.store, self.settings, self.now, read=False)
            granted = {run_id: self._granted(run_id) for run_id in active}
            self._holders = {run_id: when for run_id, when in granted.items() if when is not None}
        return self._holders

    def allows(self, run_id: str) -> bool:
        holders = self.holders()
        if run_id not in holders:
            when = self._granted(run_id)
            if when is None and len(holders) < RUN_METRIC_RUNS:
                try:
                    self.store.put_json(run_metrics_key(run_id), {"run_id": run_id})
                except Exception as exc:  # noqa: BLE001 - the step's check and its other metrics go on without them
                    return self._left_out(run_id, f"its grant could not be written ({type(exc).__name__}: {exc})")
                when = self._granted(run_id)
            if when is not None:
                holders[run_id] = when
        first = sorted(holders, key=lambda run: (holders[run], run))[:RUN_METRIC_RUNS]
        if run_id in first:
            return True
        return self._left_out(run_id, f"{len(holders)} active runs hold them, at most {RUN_METRIC_RUNS}")

    def _left_out(self, run_id: str, why: str) -> bool:
        """False, logged once per run: its per-run streaks are not sent, and why."""
        if run_id not in self._logged:
            self._logged.add(run_id)
            message = (
                f"per-run DeadStreak and ErrorStreak not sent for this run: {why}; the alarms' streaks (no run "
                f"dimension) still count this run"
            )
            _log_warning(message, run_id=run_id)
        return False


def _log_warning(message: str, **fields: Any) -> None:
    """One JSON ``WARNING`` line in the function's log (a scheduled check's result is read by nobody), its message
    cut to 2,000 characters (a warning may quote what a record holds)."""
    print(json.dumps({"level": "WARNING", "message": message[:2000], **fields}))


def _active_states(store: Any, settings: Settings, now: Any = None, read: bool = True) -> dict[str, Any]:
    """The runs whose core monitor state a check wrote within ``settings.active_run_minutes`` of ``now``, each with
    its :class:`~rewardpipe.monitoring.MonitorState` (``read``) or None. A run whose state is missing or unusable is
    left out (its own run's check reports it)."""
    from datetime import datetime, timedelta

    from rewardpipe.monitoring import MonitorState, state_key

    now = now or datetime.now(UTC)
    window = timedelta(minutes=settings.active_run_minutes)
    active: dict[str, Any] = {}
    for run_id in store.list_runs():
        try:
            key = store._full(state_key(run_id))
            if not read:
                head = store.client.head_object(Bucket=store.bucket, Key=key)
                if now - head["LastModified"] <= window:
                    active[run_id] = None
                continue
            response = store.client.get_object(Bucket=store.bucket, Key=key)
            if now - response["LastModified"] > window:
                continue
            active[run_id] = MonitorState.from_dict(json.loads(response["Body"].read()))
        except Exception:  # noqa: BLE001 - a missing or unusable state is reported by its own run's check
            continue
    return active


class CheckPublisher:
    """The variance check's :class:`rewardpipe.monitoring.StepPublisher`: the verdict object before the
    commit (idempotent), the metric points kept in the outbox and emitted once by the delivery. The points are
    those of :class:`MetricComponents`' names; the names left out are kept in ``left_out`` by (run, step)."""

    def __init__(
        self, store: Any, components: MetricComponents | None = None, runs: RunMetricRuns | None = None
    ) -> None:
        self.store = store
        self.components = components or MetricComponents(store)
        self.runs = runs  # None: every run's streaks carry its run dimension
        self.left_out: dict[tuple[str, int], list[str]] = {}

    def before_commit(self, run_id: str, result: Any) -> list[dict[str, Any]]:
        from dataclasses import replace

        from rewardpipe.aws.metrics import step_points
        from rewardpipe.store import step_prefix

        report = result.steps[0]
        verdict = result.to_dict()
        read = getattr(self.store, "keys_read", {}).get(step_prefix(run_id, report.step))
        if read is not None:  # what a later look at the step compares with (late_records)
            verdict["keys_read"] = read
        self.store.put_json(verdict_key(run_id, report.step), verdict)
        kept, left_out = self.components.split(run_id, report.components)
        if left_out:
            self.left_out[run_id, report.step] = left_out
            report = replace(report, components={name: report.components[name] for name in kept})
        per_run = self.runs is None or self.runs.allows(run_id)
        return [asdict(point) for point in step_points(report, run_id=run_id if per_run else None)]

    def publish(self, run_id: str, entry: Any) -> None:  # noqa: ARG002 - StepPublisher's publish(run_id, entry); the entry carries its points
        from rewardpipe.aws.metrics import MetricPoint, emit

        emit(MetricPoint(**point) for point in entry.metrics)


def step_verdicts(report: Any) -> dict[str, Any]:
    """A checked step's verdicts in its summary: each component's (``verdicts``) and the aggregate reward's
    (``aggregate_verdict``), as the local monitor's step gives them (``components.<name>.verdict``,
    ``aggregate.verdict``). The aggregate has a key of its own: any text can be a component's name, "aggregate" too,
    and the summary had no verdict for it although its alarms include it."""
    return {
        "verdicts": {name: stats.verdict for name, stats in report.components.items()},
        "aggregate_verdict": report.aggregate.verdict,
    }


def _summary(run_id: str, result: Any, left_out: list[str]) -> dict[str, Any]:
    """One checked step's summary; ``left_out``: the component names its metrics were not given for."""
    report = result.steps[0]
    summary: dict[str, Any] = {
        "run_id": run_id,
        "step": report.step,
        "replayed": report.replayed,
        "records": report.records,
        "error_rate": report.error_rate,
        **step_verdicts(report),
        "alarms": [a.to_dict() for a in result.alarms],
        "verdict_key": verdict_key(run_id, report.step),
    }
    if left_out:
        summary["metrics_left_out"] = {"count": len(left_out), "components": left_out[:LEFT_OUT_LISTED]}
        # in the function's log too: a scheduled check's result is read by nobody
        message = "components not declared by the reward or the run's manifest: no CloudWatch metrics sent for them"
        _log_warning(message, run_id=run_id, step=report.step, metrics_left_out=summary["metrics_left_out"])
    warnings = result.warnings
    if warnings:
        # the run warnings `rewardpipe monitor` and `report` give (the simulated user replaced, values outside
        # their range, single-rollout groups): in the step's summary and in the function's log, one line each
        summary["warnings"] = warnings
        for warning in warnings:
            _log_warning(warning["message"], kind=warning["kind"], run_id=run_id, step=report.step)
    if result.already_delivered:
        summary["already_delivered"] = [a.dedupe_key for a in result.already_delivered]
    if result.unreadable:
        summary["unreadable"] = result.unreadable
    return summary


_OWED = ("alarm-delivery:", "metrics-delivery:")


def _owed(items: list[dict[str, Any]]) -> list[str]:
    """The deliveries still owed among a result's notes: each fails the invocation (Lambda retries it)."""
    return [
        f"{item['key']}: {item['reason']}"
        for item in items
        if str(item.get("key", "")).startswith(_OWED)
        or (
            str(item.get("key", "")).endswith("/monitor/state.json")
            and "StateConflict" not in item["reason"]
            and item["reason"].startswith("delivered, but")
        )
    ]


def streak_points(
    store: Any, settings: Settings, now: Any = None, components: MetricComponents | None = None
) -> list[Any]:
    """DeadStreak per component and ErrorStreak, without a run dimension, for the alarms: the longest
    current streak among the **active** runs (whose core state a check wrote within the activity
    window). Runs do not mix: each keeps its own streaks (the per-run metrics carry a ``run``
    dimension), and a healthy run checked after a failing one cannot "recover" an alarm while the
    failing one is still running; a run that has stopped drops out after the window. Emitted only by a
    check that committed a step, so a pause in training sends nothing and the alarms keep their state. Each run
    adds the streaks of its :class:`MetricComponents` names only."""
    from rewardpipe.aws.metrics import aggregate_streak_points
    from rewardpipe.monitoring import ERRORS_TARGET

    components = components or MetricComponents(store, deployed_components(settings))
    longest_dead: dict[str, int] = {}
    longest_errors: int | None = None
    for run_id, state in _active_states(store, settings, now).items():
        named = {key.split(":", 1)[1]: target for key, target in state.targets.items() if key.startswith("component:")}
        for name in components.split(run_id, named)[0]:
            longest_dead[name] = max(longest_dead.get(name, 0), named[name].dead_streak)
        for key, target in state.targets.items():
            if key == ERRORS_TARGET:
                longest_errors = max(longest_errors or 0, target.error_streak)
    return aggregate_streak_points(longest_dead, longest_errors)


def _replay(store: Any, run_id: str, step: int, settings: Settings) -> dict[str, Any] | None:
    """A requested step that was already checked: reported again, never alarmed or measured again."""
    from rewardpipe.monitoring import monitor_step

    result = monitor_step(store, run_id, step, thresholds(settings), (), persist_state=False)
    if not result.steps:
        return None
    return {
        "run_id": run_id,
        "step": step,
        "replayed": True,
        "records": result.steps[0].records,
        **step_verdicts(result.steps[0]),
        "alarms": [],
        "verdict_key": verdict_key(run_id, step),
        **({"warnings": result.warnings} if result.warnings else {}),
    }


#: How many judged steps before the run's newest a scheduled check looks back at for records that landed in them
#: after the next step was judged (which no judgement reads any more): one of them per check that judged a step.
LATE_LOOK_BACK = 4


def late_records(store: Any, run_id: str, before: Any, judged: int) -> dict[str, Any] | None:
    """Records stored in a step after it was judged for good, which no judgement will read (docs/aws.md: a step is
    judged again only while no later one is). ``before``: the run's state as this check found it; ``judged``: the
    newest step this check judged. Looks at one of the LATE_LOOK_BACK steps judged before the provisional one, in
    turn as steps are judged (``judged`` picks it), only in a check that judged a step: its listing takes the place
    of the one a judgement no longer makes (:meth:`ConditionalStateStore.list_keys`), so a check lists no more than
    before. The step's count is compared with the keys its verdict read (``keys_read``; a verdict without it, of an
    explicit request or an earlier version, is not compared). Returns ``{"run_id", "step", "keys_read",
    "stored"}`` when it holds more, once (the verdict keeps the count reported, ``late_seen``)."""
    from rewardpipe.store import step_prefix

    held = before.provisional.step if before.provisional is not None else None
    window: list[int] = []
    for first, last in reversed(before.checked):
        for step in range(last, first - 1, -1):
            if step != held:
                window.append(step)
            if len(window) == LATE_LOOK_BACK:
                break
        if len(window) == LATE_LOOK_BACK:
            break
    if not window:
        return None
    step = window[judged % len(window)]
    verdict = store.get_json(verdict_key(run_id, step), default=None)
    read = verdict.get("keys_read") if isinstance(verdict, dict) else None
    if not isinstance(read, int):
        return None
    stored = len(store.list_keys(step_prefix(run_id, step)))
    seen = verdict.get("late_seen")  # reported once: again only when still more land
    if stored <= max(read, seen if isinstance(seen, int) else read):
        return None
    store.put_json(verdict_key(run_id, step), {**verdict, "late_seen": stored})
    return {"run_id": run_id, "step": step, "keys_read": read, "stored": stored}


def _send_warnings(sns: Any, run_id: str, step: int, warnings: list[dict[str, str]]) -> list[str]:
    """A checked step's run warnings to the SNS topic, each kind once per run (:meth:`rewardpipe.monitoring.
    SnsAlarmSink.warn`): in AWS nobody reads the function's log, and a warning such as ``llm_user_replaced`` (the
    environment's LLM-played user replaced by its rule-based one in 10 % or more of a step's rollouts: the run trains
    against another user than the one configured) is one its user acts on. A notice, not an alarm (no CloudWatch alarm,
    nothing under ``alarms/``). A publish that fails is a problem of the run (the invocation fails and is retried;
    the next step with the warning tries again)."""
    if sns is None:
        return []
    problems = []
    for warning in warnings:
        try:
            sns.warn(run_id, step, warning)
        except Exception as exc:  # noqa: BLE001 - named in the check's failure, the other warnings still sent
            problems.append(f"step {step}: warning-delivery:{warning.get('kind')}: {type(exc).__name__}: {exc}")
    return problems


def _open_store(settings: Settings) -> Any:
    """The records bucket through a client bounded by rewardpipe.store.S3Limits (REWARDPIPE_S3_*): a hung
    S3 endpoint costs the check one bounded call, not botocore's minutes."""
    from rewardpipe.store import S3Store

    return S3Store(settings.require_bucket())


def run_check(request: CheckRequest, settings: Settings, store: Any = None, sns_client: Any = None) -> dict[str, Any]:
    """Check every unchecked step of one run (or of every run) in order; one failing run stops no other."""
    from rewardpipe.aws.metrics import emit, heartbeat_point
    from rewardpipe.monitoring import SnsAlarmSink, StoreAlarmSink, check_pending, flush_pending, load_state

    store = ConditionalStateStore(store or _open_store(settings), upto=request.step)
    components = MetricComponents(store, deployed_components(settings))
    publisher = CheckPublisher(store, components, RunMetricRuns(store, settings))
    sinks: list[Any] = [StoreAlarmSink(store)]
    sns = None
    if settings.alarm_topic_arn:
        sns = SnsAlarmSink(settings.alarm_topic_arn, client=sns_client or aws_client("sns"), ledger=store)
        sinks.append(sns)
    runs = [request.run_id] if request.run_id else store.list_runs()
    summaries: list[dict[str, Any]] = []
    late: list[dict[str, Any]] = []
    late_found: list[dict[str, Any]] = []
    problems: dict[str, list[str]] = {}
    for run_id in runs:
        try:
            legacy = migrate_legacy_state(store, run_id)
            state, corrupt = load_state(store, run_id)  # a corrupt state is moved aside here, and reported
            already = request.step is not None and state.is_checked(request.step)
            # what an earlier check committed and did not deliver (it died, a sink failed): delivered first
            delivered, notes = flush_pending(store, run_id, sinks, publisher)
        except Exception as exc:  # noqa: BLE001 - isolate runs: report this one, check the others
            problems.setdefault(run_id, []).append(f"{type(exc).__name__}: {exc}")
            continue
        late.extend(a.to_dict() for a in delivered.raised if a not in delivered.owed)
        problems.setdefault(run_id, []).extend(_owed(notes))
        for problem in (legacy, corrupt.reason if corrupt is not None else None):
            if problem:
                problems[run_id].append(problem)
        for _ in range(COMMIT_ATTEMPTS):
            (check,) = check_pending(
                store, [run_id], thresholds(settings), sinks, skip_newest=request.step is None, publisher=publisher
            )
            for result in check.results:
                if result.steps:
                    left_out = publisher.left_out.pop((run_id, result.steps[0].step), [])
                    summaries.append(_summary(run_id, result, left_out))
                    problems[run_id].extend(_send_warnings(sns, run_id, result.steps[0].step, result.warnings))
                problems[run_id].extend(
                    f"step {result.steps[0].step if result.steps else '?'}: {owed}" for owed in _owed(result.unreadable)
                )
            lost = [p for p in check.problems if str(p.get("error", "")).startswith(StateConflict.__name__)]
            problems[run_id].extend(
                f"step {p['step']}: {p['error']}" if p.get("step") is not None else str(p["error"])
                for p in check.problems
                if p not in lost
            )
            if not lost:
                break  # a lost race leaves steps to the winner; check what is still unchecked from its state
        judged_now = [r["step"] for r in summaries if r["run_id"] == run_id and not r["replayed"]]
        if request.step is None and judged_now:
            try:
                found = late_records(store, run_id, state, max(judged_now))
            except Exception as exc:  # noqa: BLE001 - a look that fails is reported; the run was checked
                problems[run_id].append(f"late records: {type(exc).__name__}: {exc}")
                found = None
            if found is not None:
                late_found.append(found)
                message = (
                    f"step {found['step']}: {found['stored'] - found['keys_read']} objects stored since it was "
                    f"judged from {found['keys_read']}, after a later step was judged: they are not judged"
                )
                _log_warning(message, run_id=run_id, step=found["step"], late_records=found)
        if already:
            replay = _replay(store, run_id, request.step, settings)  # type: ignore[arg-type]
            if replay is not None:
                # a retry of a check whose warning did not get through sends it now (once: the ledger)
                problems[run_id].extend(_send_warnings(sns, run_id, replay["step"], replay.get("warnings", [])))
                summaries.append(replay)
    if any(not summary["replayed"] for summary in summaries):
        emit(streak_points(store, settings, components=components))
    failed = {run: why for run, why in problems.items() if why}
    emit([heartbeat_point(len(runs) - len(failed))])
    if failed:
        raise CheckFailed("; ".join(f"run '{run}': {', '.join(why)}" for run, why in failed.items())[:4000])
    out: dict[str, Any] = {"checked": sum(1 for s in summaries if not s["replayed"]), "results": summaries}
    if late:
        out["delivered_late"] = late
    if late_found:
        out["late_records"] = late_found
    return out
