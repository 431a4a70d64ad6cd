"""What the monitor remembers between steps (:class:`MonitorState`) and where a store keeps it."""

from __future__ import annotations

from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rewardpipe.monitoring.thresholds import MonitorInputError
from rewardpipe.store import run_prefix

STATE_SCHEMA = "rewardpipe.monitor-state/v1"


class TargetState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    active: bool = False  # an alarm has been raised and not yet cleared
    streak: int = Field(default=0, ge=0)  # consecutive dead (or high-error) steps seen while inactive
    since: int | None = None  # step at which the active alarm was raised


class MonitorState(BaseModel):
    """What the monitor must remember between steps. Keys of ``targets``: ``component:<name>``,
    ``aggregate`` and ``errors``. ``last_step`` makes a replayed step (a retried Lambda) harmless:
    its statistics are computed again but it does not advance the hysteresis or re-raise alarms."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: Literal["rewardpipe.monitor-state/v1"] = Field(default=STATE_SCHEMA, alias="schema")
    run_id: str | None = None
    last_step: int | None = None
    targets: dict[str, TargetState] = Field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "MonitorState":
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise MonitorInputError(f"invalid monitor state: {exc.errors()[0]['msg']} at "
                                    f"{'.'.join(str(p) for p in exc.errors()[0]['loc'])}") from None

    def target(self, key: str) -> TargetState:
        return self.targets.setdefault(key, TargetState())


def state_key(run_id: str) -> str:
    """Where the hysteresis state of a run is kept in a store."""
    return f"{run_prefix(run_id)}monitor/state.json"

