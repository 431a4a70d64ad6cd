"""Round thirty: the trainer adapters and the Nova bridge.

Each test failed before its fix (see docs/changelog.md, round thirty)."""

from __future__ import annotations

import math

import pytest

from rewardpipe.integrations.nova.protocol import BridgeConfig, generate_request, rollout_result
from rewardpipe.rewards import get_reward

REWARD = get_reward("gsm8k")


class TestNovaGenerateRequestKeepsToolTurns:
    """The generate request sent Nova each message's role and content only: an assistant's ``tool_calls``, a tool
    message's ``tool_call_id`` and ``name`` were dropped, so the policy saw tool answers to calls it never made."""

    def test_tool_fields_travel_and_nothing_else_does(self):
        call = {"id": "c1", "type": "function", "function": {"name": "run", "arguments": "{}"}}
        messages = [
            {"role": "user", "content": "q", "secret": "x"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": "4", "tool_call_id": "c1", "name": "run"},
            {"role": "assistant", "content": "a", "tool_calls": None, "name": None},
        ]
        request = generate_request("s_0", messages)
        assert request.messages == [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": "4", "tool_call_id": "c1", "name": "run"},
            {"role": "assistant", "content": "a"},
        ]
        assert request.step_id == "s_0_2"


class TestNovaRolloutResultReadsAnyOutput:
    """``rollout_result`` raised TypeError on an aggregate that is no number (``math.isfinite("0.5")``) and
    OverflowError on an integer past a float; the rollout went unanswered until the sweeper gave it a timeout. It
    is an error answer (``non_finite_score``) now; a component or metric that is no finite number is left out."""

    @pytest.mark.parametrize("aggregate", ["0.5", [1], {"a": 1}, True, 10**400])
    def test_a_non_number_aggregate_is_an_error_answer(self, aggregate):
        response, envelope = rollout_result(
            "s_0", (0.0, 1.0), REWARD, BridgeConfig(), aggregate=aggregate, components={"format": 1.0}
        )
        assert response is not None and response.stop_reason == "error"
        assert response.rewards == {"aggregate_score": 0.5}
        flags = {m["name"]: m["value"] for m in envelope["metrics_list"]}
        assert flags["reward_error"] == 1 and flags["error_non_finite_score"] == 1

    def test_non_number_components_and_metrics_are_left_out(self):
        response, envelope = rollout_result(
            "s_0",
            (0.0, 1.0),
            REWARD,
            BridgeConfig(),
            aggregate=1.5,
            components={"format": "1", "answer_correct": 1},
            metrics={"turns": 10**400, "tokens": 12, "note": "x"},
        )
        assert response is not None and response.stop_reason == "end_of_conversation"
        names = {m["name"]: m["value"] for m in envelope["metrics_list"]}
        assert "format" not in names and names["answer_correct"] == 1.0
        assert "turns" not in names and names["tokens"] == 12 and "note" not in names
        assert math.isclose(response.rewards["aggregate_score"], 1.0)
