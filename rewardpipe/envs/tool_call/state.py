"""The tool-call episode's state: the world as the tools left it, every call the model made, its answer.

Its own module, so a Lambda that only carries a state between steps imports nothing else of the environment.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from rewardpipe.deferred import DeferredModel
from rewardpipe.environment import EpisodeState

CallStatus = Literal["ok", "tool_error", "invalid", "refused"]


class CallLog(DeferredModel):
    """One call the model made. ``status``: ``ok``; ``tool_error`` (valid, but the tool refused it: an
    unknown account, not enough money); ``invalid`` (it did not parse, named no tool, or its arguments did
    not type-check); ``refused`` (past the calls one turn may make). ``key`` names a valid call (the tool and
    its arguments, canonical JSON) and ``world_version`` is the world's version after it; ``redundant``: an
    identical call was already answered in the same world and this one changed nothing, or this one changed the world
    back to one the episode had already been in."""

    model_config = ConfigDict(extra="forbid")

    id: str
    turn: int
    name: str | None = None
    status: CallStatus
    key: str | None = None
    world_version: int = 0
    redundant: bool = False

    @property
    def valid(self) -> bool:
        return self.status in ("ok", "tool_error")


class ToolCallState(EpisodeState):
    """``world`` (a JSON object, as the tools left it) and ``world_version`` (how many calls changed it);
    ``calls`` in order; ``unread_calls``: calls past the most a turn is read for (counted invalid);
    ``answer``: the final answer (None until the model gives one); ``turn_kinds``: ``calls`` or ``answer``
    per assistant turn."""

    world: dict[str, Any] = Field(default_factory=dict)
    world_version: int = 0
    #: The digest of the world at each version (index: the version): a call that brings a world back is redundant.
    worlds_seen: list[str | None] = Field(default_factory=list)
    calls: list[CallLog] = Field(default_factory=list)
    unread_calls: int = 0
    answer: str | None = None
    turn_kinds: list[str] = Field(default_factory=list)
