"""Round eight against issue 19's reward classes (6, 8, 10): new payloads, none of them a copy of rounds two to
seven.

* **A user component that raises** (item 6): a component (or a reward's diagnostics) ending in an exception that is
  not an ``Exception`` (``sys.exit()``, ``GeneratorExit``, ``asyncio.CancelledError`` raised by a sync function,
  ``SystemExit`` in an async component, whose event loop re-raises it) left ``score_samples`` and failed the whole
  batch. Each is now that sample's ``component_raised`` error record; ``KeyboardInterrupt`` still stops the run.
"""

from __future__ import annotations

import asyncio
import sys

import pytest

from rewardpipe import component
from rewardpipe.rewards.base import Reward
from rewardpipe.single_turn import score_samples

# --- item 6: whatever a user component raises costs its own sample, never the batch ----------------------------


def _raise(kind: str) -> None:
    if kind == "sys.exit":
        sys.exit(2)
    if kind == "GeneratorExit":
        raise GeneratorExit
    if kind == "CancelledError":
        raise asyncio.CancelledError
    if kind == "BaseException subclass":
        raise type("Abort", (BaseException,), {})("stop")
    raise AssertionError(kind)


RAISED = ["sys.exit", "GeneratorExit", "CancelledError", "BaseException subclass"]
SAMPLES = [
    {"id": i, "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": f"a{i}"}]}
    for i in range(3)
]


@component(range=(0.0, 1.0), role="outcome", weight=1.0, description="always 1")
def _one(completion: str) -> float:
    return 1.0


def _reward(kind: str, where: str) -> Reward:
    if where == "async component":

        @component(range=(0.0, 1.0), role="shaping", weight=1.0, description="raises on a1")
        async def bad(completion: str) -> float:
            if completion == "a1":
                _raise(kind)
            return 0.5

        return Reward("r", [_one, bad])

    @component(range=(0.0, 1.0), role="shaping", weight=1.0, description="raises on a1")
    def bad_sync(completion: str) -> float:
        if completion == "a1" and where == "component":
            _raise(kind)
        return 0.5

    if where == "diagnostics":

        def diagnostics(completion: str) -> dict:
            if completion == "a1":
                _raise(kind)
            return {}

        return Reward("r", [_one, bad_sync], diagnostics=diagnostics)
    return Reward("r", [_one, bad_sync])


@pytest.mark.parametrize("where", ["component", "async component"])
@pytest.mark.parametrize("kind", RAISED)
def test_a_component_ending_in_any_exception_is_its_samples_error_record(kind, where):
    out = score_samples(SAMPLES, _reward(kind, where), error_reward="neutral")
    flags = [{m["name"]: m["value"] for m in o["metrics_list"]} for o in out]
    assert [f["reward_error"] for f in flags] == [0, 1, 0], flags
    assert flags[1]["error_component_raised"] == 1, flags
    assert [o["aggregate_reward_score"] for o in out] == [1.5, 1.5, 1.5]  # neutral: the group's mean, never a 0


@pytest.mark.parametrize("kind", RAISED)
def test_diagnostics_ending_in_any_exception_keep_the_score(kind):
    out = score_samples(SAMPLES, _reward(kind, "diagnostics"), error_reward="neutral")
    assert [o["aggregate_reward_score"] for o in out] == [1.5, 1.5, 1.5]
    assert all({m["name"]: m["value"] for m in o["metrics_list"]}["reward_error"] == 0 for o in out)


@pytest.mark.parametrize("kind", RAISED)
def test_the_trl_columns_path_keeps_a_raising_sample_as_its_own_error(kind):
    from rewardpipe.models import Message
    from rewardpipe.rewards.base import ScoringInput

    reward = _reward(kind, "component")
    inputs = [ScoringInput(messages=[Message(**m) for m in s["messages"]]) for s in SAMPLES]
    columns = reward.score_columns(inputs)
    assert [e is not None for e in columns.errors] == [False, True, False]
    assert columns.errors[1].kind == "component_raised"


def test_a_keyboard_interrupt_in_a_component_still_stops_the_run():
    @component(range=(0.0, 1.0), role="shaping", weight=1.0, description="interrupted")
    def interrupted(completion: str) -> float:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        score_samples(SAMPLES, Reward("r", [_one, interrupted]))
