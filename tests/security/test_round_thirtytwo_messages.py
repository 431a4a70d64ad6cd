"""Round thirty-two (lead): a message's tool calls nested past what can be stored.

An OpenAI endpoint sends a call's arguments as text, but a recording, Nova's generate responses or a user's own policy
may hand them over as objects. Nested some 250 levels or more, a turn was accepted and then the state, transcript and
record holding it could not be written ("Maximum serialization depth exceeded"). ``Message`` now refuses tool calls
nested more than ``MAX_TOOL_CALL_DEPTH`` levels, naming the field, so the turn is that rollout's error.
"""

from __future__ import annotations

import pydantic
import pytest

from rewardpipe.models import MAX_TOOL_CALL_DEPTH, Message, nesting_depth
from tests.security.test_round_thirtyone_environments import Count, _run


def _nested(levels: int) -> dict:
    top: dict = {}
    here = top
    for _ in range(levels - 1):
        here["a"] = {}
        here = here["a"]
    return top


def _calls(arguments) -> list:
    return [{"id": "c1", "type": "function", "function": {"name": "say", "arguments": arguments}}]


@pytest.mark.parametrize("levels", [300, 100_000])
def test_tool_calls_nested_too_deep_are_refused_by_name(levels):
    with pytest.raises(pydantic.ValidationError, match=f"tool_calls are nested more than {MAX_TOOL_CALL_DEPTH}"):
        Message(role="assistant", content="", tool_calls=_calls(_nested(levels)))


def test_tool_calls_within_the_bound_are_kept_and_can_be_written():
    # the calls' list, the call, its "function" object: three levels above the arguments
    message = Message(role="assistant", content="", tool_calls=_calls(_nested(MAX_TOOL_CALL_DEPTH - 3)))
    assert Message.model_validate_json(message.model_dump_json()) == message


def test_nesting_depth_counts_lists_and_objects_and_stops_past_the_bound():
    assert nesting_depth("text", 5) == 0
    assert nesting_depth([1, {"a": [2]}], 5) == 3
    assert nesting_depth(_nested(1_000), 10) == 11


def test_a_policy_turn_nested_too_deep_is_that_rollouts_error_and_the_others_are_scored():
    class Deep:
        def next_turn(self, state, task):
            if task.target == 6:
                return Message(role="assistant", content="6", tool_calls=_calls(_nested(300)))
            return str(task.target)

    records = _run(Count(), policy=Deep())
    by_task = {record.task_id: record for record in records}
    assert by_task["t6"].status == "error" and "nested more than" in by_task["t6"].error.message
    assert all(record.status == "scored" for record in records if record.task_id != "t6")
    for record in records:
        record.model_dump_json()  # every record can be written
