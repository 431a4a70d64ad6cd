"""What the monitor remembers between steps (:class:`MonitorState`) and where a store keeps it."""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from rewardpipe.monitoring.thresholds import MonitorInputError
from rewardpipe.store import BadObject, Store, UnreadableObject, run_prefix

STATE_SCHEMA: Final = "rewardpipe.monitor-state/v2"
#: Earlier states (``last_step`` only) are read and upgraded: every step up to ``last_step`` counts as checked.
_V1_SCHEMA = "rewardpipe.monitor-state/v1"
#: The most verdicts of a penalty whose fired groups ``TargetState.fired`` keeps.
FIRED_WINDOW: Final = 24
#: A count or step a state keeps: never negative (a damaged state's negative count is refused, not summed).
_Count = Annotated[int, Field(ge=0)]


class TargetState(BaseModel):
    """The memory of one target (a component, the aggregate or the error rate)."""

    model_config = ConfigDict(extra="forbid")

    active: bool = False  # an alarm has been raised and not yet cleared
    streak: int = Field(default=0, ge=0)  # consecutive dead (or high-error) steps seen while inactive
    since: int | None = None  # step at which the active alarm was raised
    #: The first step the evidence of ``streak`` covers (a pooled verdict's first pooled step); None with no streak.
    streak_since: int | None = None
    #: Consecutive checked steps whose verdict was ``dead`` (the DeadStreak metric); an
    #: ``insufficient_data`` step neither extends nor breaks it.
    dead_streak: int = Field(default=0, ge=0)
    #: The error target only: consecutive checked steps whose error rate was at or over the threshold
    #: (the ErrorStreak metric), whether or not its alarm is open.
    error_streak: int = Field(default=0, ge=0)
    #: The last (step, zero-variance share) points, for the ``dying`` trend fit: its shortest window and the
    #: longer ones (``dying_window`` + :data:`rewardpipe.monitoring.trend.BASELINE_STEPS`; restarted after a warning).
    trend: list[tuple[int, float]] = Field(default_factory=list)
    #: The eligible groups behind each point of ``trend``, oldest first (the fit's weights). A state written
    #: before they were kept has none: its points count the groups of the step being judged.
    trend_groups: list[int] = Field(default_factory=list)
    #: The last (step, mean within-group std) points, for the decay of a continuous component's std (its share stays
    #: 0 until it dies): rewardpipe.monitoring.trend.detect_std_decay.
    std_trend: list[tuple[int, float]] = Field(default_factory=list)
    dying_active: bool = False  # a dying warning has been raised for the current decline
    #: The cause of the open dying warning when it is the std's decay (``within_group_std_decaying``), else None.
    dying_cause: str | None = None
    #: Consecutive checked steps whose fit found a rise (a warning needs trend.CONFIRM_STEPS of them).
    dying_seen: int = Field(default=0, ge=0)
    dying_since: int | None = None
    #: The cause of the open dead alarm (None: none open, or a state written before it was kept): a component set
    #: per prompt (``constant_within_groups``) stays alarmed through a step where no prompt set it off its end.
    alarm_cause: str | None = None
    #: A penalty's last (step, groups it fired on whole, groups where it varied), one point per verdict, at most
    #: :data:`FIRED_WINDOW`: whether it fires per rollout or per prompt is told over several steps, not on one step's
    #: one or two fired groups (rewardpipe.monitoring.verdicts.RecentFired).
    fired: list[tuple[_Count, _Count, _Count]] = Field(default_factory=list)
    #: First step of an open pool of small steps (too few groups for a verdict): rewardpipe.monitoring.pooling.
    pooled_since: int | None = None

    @field_validator("fired")
    @classmethod
    def _newest_fired(cls, fired: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
        """The window's newest points, one a step, as the monitor writes them: a damaged state's hundreds of points
        were all summed into a penalty's evidence (its whole groups outweighed for up to the window's steps)."""
        by_step = {step: (step, whole, varying) for step, whole, varying in fired}
        return [by_step[step] for step in sorted(by_step)[-FIRED_WINDOW:]]


class PendingDelivery(BaseModel):
    """What a checked step still has to deliver (the outbox): its alarms, and what an adapter keeps for it
    (the variance check's metric points). A check commits the step and its pending delivery in one state
    write, then delivers, then drops the entry: a check that dies in between delivers on its next call,
    and the sinks' ledgers (``runs/<run>/monitor/delivered/``, the stored alarm objects) keep a second
    delivery from repeating one that got through (see :func:`rewardpipe.monitoring.alarms.deliver`)."""

    model_config = ConfigDict(extra="forbid")

    step: int = Field(ge=0)
    alarms: list[dict[str, Any]] = Field(default_factory=list)
    metrics: list[dict[str, Any]] = Field(default_factory=list)

    @field_validator("alarms")
    @classmethod
    def _alarms_deliverable(cls, alarms: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each pending alarm must make an :class:`~rewardpipe.monitoring.alarms.Alarm` (an outbox entry of a
        hand-edited or damaged state crashed every later check of the run, when it was delivered); the state is
        refused instead, which :func:`load_state` sets aside."""
        from rewardpipe.monitoring.alarms import Alarm

        adapter = TypeAdapter(Alarm)
        for index, alarm in enumerate(alarms):
            try:
                adapter.validate_python(alarm)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                raise ValueError(f"pending alarm #{index} is not an alarm ({first['msg']} at {where})") from None
        return alarms


class ProvisionalStep(BaseModel):
    """The newest judged step, kept so a scheduled check can judge it again when records land in it afterwards
    (a trainer on AWS starts step N+1 while executions of step N still run: see docs/aws.md). It is kept only while
    no later step has been judged (a later judgement continued the state this one made) and only when its judgement
    raised no alarm (judging it again could contradict an alarm already sent)."""

    model_config = ConfigDict(extra="forbid")

    step: int = Field(ge=0)
    #: The objects listed under the step's prefix when it was judged: more now means records landed since.
    keys: int = Field(ge=0)
    #: The targets as they were before the step was judged: a new judgement starts from them.
    before: dict[str, TargetState] = Field(default_factory=dict)


class MonitorState(BaseModel):
    """What the monitor must remember between steps.

    Keys of ``targets``: ``component:<name>``, ``aggregate`` and ``errors``. ``checked`` is the set of
    steps already checked, as sorted, disjoint ``[first, last]`` ranges (a run of 10,000 steps checked in
    order is one pair). A checked step seen again (a retried Lambda, a re-read file) is a replay: its
    statistics are computed again but it does not advance the hysteresis or raise alarms. A step not yet
    checked is checked whenever it arrives, even after a later step. ``last_step`` is the highest
    checked step, kept for readers.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: Literal["rewardpipe.monitor-state/v2"] = Field(default=STATE_SCHEMA, alias="schema")
    run_id: str | None = None
    last_step: int | None = None
    checked: list[tuple[int, int]] = Field(default_factory=list)
    targets: dict[str, TargetState] = Field(default_factory=dict)
    #: Checked steps whose alarms (or metrics) are not yet delivered everywhere (see PendingDelivery).
    pending: list[PendingDelivery] = Field(default_factory=list)
    #: A token naming the write that stored this state: a conditional write whose answer was lost is
    #: told apart from one that lost a race by reading the state back (rewardpipe.aws.monitoring).
    commit: str | None = None
    #: The step a scheduled check may judge again (see ProvisionalStep); None once a later step is judged.
    provisional: ProvisionalStep | None = None

    def to_dict(self) -> dict[str, Any]:
        data = self.model_dump(by_alias=True, mode="json")
        if data.get("provisional") is None:  # written only while a step may be judged again: states read as before
            data.pop("provisional", None)
        # the targets a provisional step was judged from too: written in full, a field an older rewardpipe does not
        # know made it set aside every state of a scheduled check (the AWS one) for a run that never needed the field
        before = (data.get("provisional") or {}).get("before", {})
        for target in [*data["targets"].values(), *before.values()]:
            if target.get("pooled_since") is None:  # written only while a pool is open: states read as before
                target.pop("pooled_since", None)
            # states without them read as before
            for kept_only_when_set in (
                "trend_groups",
                "dying_seen",
                "alarm_cause",
                "std_trend",
                "dying_cause",
                "fired",
            ):
                if not target.get(kept_only_when_set):
                    target.pop(kept_only_when_set, None)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MonitorState:
        if not isinstance(data, Mapping):
            raise MonitorInputError(f"invalid monitor state: expected a JSON object, got {type(data).__name__}")
        if data.get("schema") == _V1_SCHEMA:
            last = data.get("last_step")
            data = {
                **data,
                "schema": STATE_SCHEMA,
                "checked": [[0, last]] if isinstance(last, int) and last >= 0 else [],
            }
        try:
            state = cls.model_validate(data)
        except ValidationError as exc:
            raise MonitorInputError(
                f"invalid monitor state: {exc.errors()[0]['msg']} at {'.'.join(str(p) for p in exc.errors()[0]['loc'])}"
            ) from None
        from rewardpipe.models import MAX_STEP

        for first, last in state.checked:
            if first < 0 or last < first or last > MAX_STEP:  # beyond any step: it would silence every later one
                raise MonitorInputError(f"invalid monitor state: checked range [{first}, {last}]")
        return state

    def target(self, key: str) -> TargetState:
        return self.targets.setdefault(key, TargetState())

    def is_checked(self, step: int) -> bool:
        index = bisect.bisect_right(self.checked, (step, _BIG)) - 1
        return index >= 0 and self.checked[index][0] <= step <= self.checked[index][1]

    def mark_checked(self, step: int) -> None:
        """Add ``step`` to the checked set, merging it with the ranges it touches."""
        if self.is_checked(step):
            return
        ranges = [tuple(r) for r in self.checked] + [(step, step)]
        ranges.sort()
        merged: list[tuple[int, int]] = []
        for first, last in ranges:
            if merged and first <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], last))
            else:
                merged.append((first, last))
        self.checked = merged
        self.last_step = merged[-1][1]

    def unmark_newest(self, step: int) -> None:
        """Take ``step``, the highest checked step, out of the checked set (to judge it again)."""
        if not self.checked or self.checked[-1][1] != step:
            raise ValueError(f"step {step} is not the newest checked step")
        first, _ = self.checked[-1]
        self.checked = self.checked[:-1] + ([(first, step - 1)] if first < step else [])
        self.last_step = self.checked[-1][1] if self.checked else None

    def unchecked(self, steps: Iterable[int]) -> list[int]:
        """The steps of ``steps`` not yet checked, in ascending order."""
        return sorted(step for step in set(steps) if not self.is_checked(step))


_BIG = 1 << 62


def state_key(run_id: str) -> str:
    """Where the hysteresis state of a run is kept in a store."""
    return f"{run_prefix(run_id)}monitor/state.json"


def load_state(store: Store, run_id: str) -> tuple[MonitorState, BadObject | None]:
    """The run's saved state, or a fresh one when there is none.

    A state that cannot be used (not JSON, not a valid state, or a state of another run) must not stop
    the monitor: it is moved aside to ``monitor/state.corrupt-<UTC time>.json`` (kept for a post-mortem),
    a fresh state is saved in its place, and the problem is returned as a :class:`BadObject` for the
    caller to report. With a fresh state every stored step counts as unchecked again.
    """
    key = state_key(run_id)
    try:
        raw = store.get_bytes(key)
    except KeyError:
        return MonitorState(run_id=run_id), None
    except UnreadableObject as exc:  # a folder, a FIFO, a link where the state should be: nothing to keep
        fresh = MonitorState(run_id=run_id)
        store.put_json(key, fresh.to_dict())  # replaces a link or a FIFO itself (a folder stays: StoreError)
        return fresh, BadObject(key, f"unusable monitor state ({exc.reason}); replaced by a fresh state")
    try:
        data = json.loads(raw)
        state = MonitorState.from_dict(data)
        if state.run_id is not None and state.run_id != run_id:
            raise MonitorInputError(f"the state is for run {state.run_id!r}")
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # JSONDecodeError, MonitorInputError: ValueErrors
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        aside = f"{run_prefix(run_id)}monitor/state.corrupt-{stamp}.json"
        store.put_bytes(aside, raw)
        fresh = MonitorState(run_id=run_id)
        store.put_json(key, fresh.to_dict())  # so the next reader does not trip over it again
        reason = exc.args[0] if isinstance(exc, MonitorInputError) else f"not valid JSON ({exc})"
        return fresh, BadObject(key, f"unusable monitor state ({reason}); kept at {aside}, started a fresh state")
    state.run_id = run_id
    return state, None
