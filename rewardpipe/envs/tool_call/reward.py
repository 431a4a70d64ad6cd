"""The tool-call reward: was the goal reached, were the calls well-formed, were any of them redundant.

| component         | range   | role    | weight | value                                                          |
|-------------------|---------|---------|--------|----------------------------------------------------------------|
| `goal_reached`    | [0, 1]  | outcome | 1.0    | 1 when the final world equals the expected one and/or the      |
|                   |         |         |        | final answer equals the expected one (whichever the task sets; |
|                   |         |         |        | an answer-only task also needs a world no call changed)        |
| `valid_calls`     | [0, 1]  | shaping | 0.3    | 1 / (1 + the calls that did not parse, name a tool or          |
|                   |         |         |        | type-check, or were past the 8 a turn runs) (a tool's refusal  |
|                   |         |         |        | is still a valid call); 0 with no valid call                   |
| `redundant_calls` | [-1, 0] | penalty | 0.3    | -0.25 per call that repeats an answered call (same tool, same  |
|                   |         |         |        | arguments) in the same world, and changes nothing itself (a    |
|                   |         |         |        | second read; not a second transfer), or that changes the world |
|                   |         |         |        | back to one the episode was already in (an undo), down to -1   |

``valid_calls`` is not gated on the goal: a model learning the call format is paid for it before it solves a task.
It counts the invalid calls rather than taking their share of all calls: a share rose with every extra call, so
padding an episode with cheap valid ones (lookups the tool refuses, each with other arguments, so none is a
redundant repeat) bought back what a malformed call cost. It is 0 for an episode with no valid call (none at all, or
only malformed ones: a junk call is not paid more than none), since every task needs at least one (an answer made up
without looking is not a well-formed use of the tools). A world goal is judged on the world whether or not the model
gave a final answer; an answer goal needs the answer, and, when the task states no world goal, a world no call
changed (a question answered after moving the user's money is not answered as asked). A task stating neither (a
task model of one's own without the fields) is an error record, not a goal reached.
"""

from __future__ import annotations

from typing import Any

from rewardpipe.components import component
from rewardpipe.envs.tool_call.state import ToolCallState
from rewardpipe.envs.tool_call.tasks import answers_match
from rewardpipe.models import ErrorInfo
from rewardpipe.rewards.base import Reward

REDUNDANT_CALL_PENALTY = 0.25


def _episode(state: Any) -> ToolCallState | None:
    return state if isinstance(state, ToolCallState) else None


@component(range=(0.0, 1.0), role="outcome", weight=1.0, description="the expected world and/or answer reached")
def goal_reached(state: Any, task: Any) -> float | None:
    episode = _episode(state)
    if episode is None or task is None:
        return None
    expected_world, expected_answer = getattr(task, "expected_world", None), getattr(task, "expected_answer", None)
    if expected_world is None and expected_answer is None:
        # A task that states no goal (a subclass's own task model, a plain row) reached nothing: without this,
        # every episode of it scored 1.0, the wiring error paid as success. No value; explain_error says why.
        return None
    if expected_world is not None and episode.world != expected_world:
        return 0.0
    if expected_world is None and episode.world_version:
        # A task stating only an answer asks a question: a call that changed the world on the way (savings moved
        # into checking to read one balance for the total, money sent away, a price changed) is a side effect
        # the user did not ask for. Without this, its right answer was the goal reached, the damage unpaid.
        return 0.0
    if expected_answer is not None and (episode.answer is None or not answers_match(episode.answer, expected_answer)):
        return 0.0
    return 1.0


@component(
    range=(0.0, 1.0),
    role="shaping",
    weight=0.3,
    description="1 / (1 + calls that did not parse or type-check); 0 with no valid call",
)
def valid_calls(state: Any) -> float | None:
    episode = _episode(state)
    if episode is None:
        return None
    valid = sum(1 for call in episode.calls if call.valid)
    if not valid:  # no call, or only malformed ones: a junk call is not paid more than none
        return 0.0
    invalid = len(episode.calls) - valid + episode.unread_calls
    return 1.0 / (1 + invalid)


@component(
    range=(-1.0, 0.0),
    role="penalty",
    weight=0.3,
    description="-0.25 per call repeating an answered one in the same world, or bringing a world back (at most -1)",
)
def redundant_calls(state: Any) -> float | None:
    episode = _episode(state)
    if episode is None:
        return None
    redundant = sum(1 for call in episode.calls if call.redundant)
    return -min(1.0, REDUNDANT_CALL_PENALTY * redundant) if redundant else 0.0


def explain_error(state: Any, task: Any) -> ErrorInfo | None:
    if _episode(state) is None or task is None:
        return ErrorInfo(
            kind="component_unavailable",
            message="the tool_call reward scores a tool-call episode's state and task (run or score "
            "it with --env tool_call and --tasks)",
        )
    if getattr(task, "expected_world", None) is None and getattr(task, "expected_answer", None) is None:
        return ErrorInfo(
            kind="component_unavailable",
            message=f"the tool_call reward needs a task stating its goal (expected_world and/or expected_answer); "
            f"the task is a {type(task).__name__} without either",
        )
    return None


TOOL_CALL = Reward(
    "tool_call",
    [goal_reached, valid_calls, redundant_calls],
    explain_error=explain_error,
    description="Tool use: goal reached, valid calls, redundant calls",
)
