"""Round thirty-four on Nova Forge: stop reasons, the tools prompt, the single-turn reward Lambda."""

from __future__ import annotations

import json

import pytest

from tests.integrations.nova.test_nova_contract import FakeSfn, _bridge

# --------------------------------------------------------------------------------------------------
# How a generate response's finish_reason ends a turn


def _waiting_step(bridge, sample_id: str = "s-000_0") -> str:
    step_id = f"{sample_id}_0"
    bridge.store.put_json(
        bridge._step_path(step_id), {"task_token": "tok", "sample_id": sample_id, "step_id": step_id, "used": False}
    )
    return step_id


def _response(step_id: str, content, finish_reason, top=None, sample_id: str = "s-000_0") -> str:
    body = {
        "version": "v0",
        "sample_id": sample_id,
        "step_id": step_id,
        "data": {"choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}]},
    }
    if top is not None:
        body["finish_reason"] = top
    return json.dumps(body)


@pytest.mark.parametrize("reason", ["error", "abort", "ERROR", "cancelled"])
@pytest.mark.parametrize("content", ["", "def f(x): ret"])
def test_a_generation_that_failed_is_a_policy_error_never_a_scored_turn(reason, content):
    """finish_reason "error" (or vLLM's "abort") with an empty or cut text was the model's turn, scored: a failed
    generation scored 0 as the model's answer. It now ends the rollout as a policy_error naming the reason."""
    bridge, _ = _bridge(sfn=FakeSfn())
    step = _waiting_step(bridge)
    out = bridge.route_response(_response(step, content, reason))
    assert out["status"] == "failed"
    assert bridge.sfn.successes == []
    (failure,) = bridge.sfn.failures
    assert failure["error"] == "PolicyError" and repr(reason) in failure["cause"] and "failed" in failure["cause"]


def test_a_failure_in_the_responses_own_finish_reason_counts_too():
    bridge, _ = _bridge(sfn=FakeSfn())
    step = _waiting_step(bridge)
    assert bridge.route_response(_response(step, "partial", "stop", top="error"))["status"] == "failed"


def test_an_unknown_finish_reason_is_a_named_policy_error_unless_the_setting_accepts_it():
    bridge, _ = _bridge(sfn=FakeSfn())
    step = _waiting_step(bridge)
    assert bridge.route_response(_response(step, "an answer", "weird_reason"))["status"] == "failed"
    (failure,) = bridge.sfn.failures
    assert "unknown finish_reason 'weird_reason'" in failure["cause"] and "model_finish_reasons" in failure["cause"]

    from rewardpipe.integrations.nova.protocol import BridgeConfig

    bridge, _ = _bridge(sfn=FakeSfn())
    bridge.config = BridgeConfig(rollout_budget_s=480.0, model_finish_reasons=["Weird_Reason"])
    step = _waiting_step(bridge)
    assert bridge.route_response(_response(step, "an answer", "weird_reason"))["status"] == "delivered"
    (success,) = bridge.sfn.successes
    assert json.loads(success["output"])["text"] == "an answer"


@pytest.mark.parametrize("reason", ["stop", "length", "tool_calls", "end_turn", "max_tokens", "STOP", None, ""])
def test_the_known_finish_reasons_still_deliver_the_models_turn(reason):
    bridge, _ = _bridge(sfn=FakeSfn())
    step = _waiting_step(bridge)
    assert bridge.route_response(_response(step, "hello", reason))["status"] == "delivered"
    assert json.loads(bridge.sfn.successes[0]["output"])["text"] == "hello"


def test_the_stack_passes_model_finish_reasons_to_the_bridge():
    from rewardpipe.integrations.nova.protocol import BridgeConfig
    from stacks.constructs.nova_bridge import NovaBridgeSettings

    settings = NovaBridgeSettings(enabled=True, model_finish_reasons=["eos_token"])
    assert BridgeConfig.model_validate(settings.bridge_config()).model_finish_reasons == ["eos_token"]
    with pytest.raises(ValueError):
        NovaBridgeSettings(model_finish_reasons=[""])
