"""The pure Nova v0 mappings: grouping, execution names, range mapping, error policy, hostile bodies."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rewardpipe.integrations.nova.protocol import (
    BridgeConfig,
    GenerateResponse,
    NovaProtocolError,
    RolloutRequest,
    generate_request,
    group_of,
    map_into_range,
    parse,
    request_key,
    reward_bounds,
    rollout_result,
    task_source,
)
from rewardpipe.models import ErrorInfo
from rewardpipe.rewards import get_reward

REWARD = get_reward("ask_before_coding")


def test_group_is_the_sample_id_without_its_last_index_and_the_rule_is_configurable():
    config = BridgeConfig()
    assert group_of("sample-000_3", config) == "sample-000"
    assert group_of("a_b_12", config) == "a_b"
    assert group_of("no-index", config) == "no-index"  # a group of its own, never an exception
    custom = BridgeConfig(group_pattern=r"^(?P<group>[^:]+):\d+$")
    assert group_of("p7:2", custom) == "p7"
    with pytest.raises(ValueError, match="named group"):
        BridgeConfig(group_pattern=r"^(.+)_\d+$")


# Any printable id (the id rule of rewardpipe.models refuses control, format and separator characters).
PRINTABLE_IDS = st.text(st.characters(blacklist_categories=("Cc", "Cf", "Cs", "Zl", "Zp")), min_size=1, max_size=300)


@given(PRINTABLE_IDS, st.one_of(st.none(), st.floats(allow_nan=False), st.text(max_size=20)))
def test_request_identity_is_stable_for_a_redelivery_and_new_for_a_later_step(sample_id, timestamp):
    key = request_key(RolloutRequest(sample_id=sample_id, timestamp=timestamp))
    assert re.fullmatch(r"[0-9a-f]{32}", key)
    assert key == request_key(RolloutRequest(sample_id=sample_id, timestamp=timestamp))
    assert key != request_key(RolloutRequest(sample_id=sample_id, timestamp=[timestamp]))


def test_aggregate_maps_linearly_from_the_rewards_own_range_into_the_advertised_one():
    bounds = reward_bounds(REWARD)
    assert bounds == pytest.approx((-0.5, 1.6))  # the blog's range
    assert map_into_range(1.6, bounds, (0.0, 1.0), "linear") == pytest.approx(1.0)
    assert map_into_range(-0.5, bounds, (0.0, 1.0), "linear") == pytest.approx(0.0)
    assert map_into_range(0.55, bounds, (-1.0, 1.0), "linear") == pytest.approx(0.0)
    assert map_into_range(1.6, bounds, (0.0, 1.0), "clip") == 1.0
    assert map_into_range(-0.4, bounds, (0.0, 1.0), "clip") == 0.0


def test_scored_rollouts_answer_in_range_and_errors_follow_the_policy_with_a_flag():
    comps = {"correctness": 1.0, "asked_before_coding": 1.0, "guessed_immediately": 0.0, "loop_penalty": 0.0}
    response, envelope = rollout_result("s_0", (0.0, 1.0), REWARD, BridgeConfig(), aggregate=1.6, components=comps)
    assert response.rewards == {"aggregate_score": pytest.approx(1.0)}
    types = {m["name"]: m["type"] for m in envelope["metrics_list"]}
    assert {k: types[k] for k in comps} == {k: "Reward" for k in comps}
    assert types["raw_aggregate"] == "Metric"
    error = ErrorInfo(kind="executor_crash", message="boom")
    for policy, expected in (("neutral", 0.5), ("zero", 0.5 / 2.1)):
        response, envelope = rollout_result(
            "s_0", (0.0, 1.0), REWARD, BridgeConfig(error_reward=policy), aggregate=None, components={}, error=error
        )
        assert response.rewards["aggregate_score"] == pytest.approx(expected) and response.stop_reason == "error"
        flags = {m["name"]: m["value"] for m in envelope["metrics_list"]}
        assert flags["reward_error"] == 1 and flags["error_executor_crash"] == 1
    response, _ = rollout_result(
        "s_0", (0.0, 1.0), REWARD, BridgeConfig(error_reward="fail_batch"), aggregate=None, components={}, error=error
    )
    assert response is None
    # a non-finite aggregate is an error, never sent as NaN
    response, _ = rollout_result("s_0", (0.0, 1.0), REWARD, BridgeConfig(), aggregate=float("nan"), components={})
    assert response.stop_reason == "error" and response.rewards["aggregate_score"] == 0.5


def test_task_comes_from_the_configured_field_or_inline_and_a_missing_one_names_the_field():
    assert task_source(RolloutRequest(sample_id="s_0", data={"task_id": "../../etc"}), BridgeConfig()) == (
        None,
        "tasks/nova/..%2F..%2Fetc.json",
    )  # an id never leaves its key segment
    nested = BridgeConfig(task_field="meta.task")
    assert (
        task_source(RolloutRequest(sample_id="s_0", data={"meta": {"task": "t1"}}), nested)[1] == "tasks/nova/t1.json"
    )
    # an upper-case id keeps the documented key (no case tail): tasks already uploaded are still found
    assert (
        task_source(RolloutRequest(sample_id="s_0", data={"meta": {"task": "HumanEval/0"}}), nested)[1]
        == "tasks/nova/HumanEval%2F0.json"
    )
    with pytest.raises(NovaProtocolError, match="data.task_id"):
        task_source(RolloutRequest(sample_id="s_0", data={"taskid": "t1"}), BridgeConfig())
    with pytest.raises(NovaProtocolError, match="data.task"):
        task_source(RolloutRequest(sample_id="s_0", data={"task": {"task_id": "x"}}), BridgeConfig())


def test_generate_request_step_id_counts_assistant_turns_and_messages_keep_only_role_and_content():
    messages = [
        {"role": "user", "content": "q", "secret": "x"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "b"},
    ]
    request = generate_request("s_0", messages)
    assert request.step_id == "s_0_1" and request.messages[0] == {"role": "user", "content": "q"}


@pytest.mark.parametrize(
    "body, field",
    [
        ("{", "RolloutRequest"),
        (json.dumps({"sample_id": ""}), "sample_id"),
        (json.dumps({"sample_id": "s", "rewards": {"range": [1, 0]}}), "rewards.range"),
        (json.dumps({"sample_id": "s", "rewards": {"range": [0, "inf"]}}), "rewards.range"),
        (json.dumps({"sample_id": "s", "data": []}), "data"),
    ],
)
def test_malformed_rollout_requests_name_the_field(body, field):
    with pytest.raises(NovaProtocolError, match=re.escape(field)):
        parse(RolloutRequest, body)


def test_generate_response_text_is_read_from_the_first_choice():
    body = {
        "sample_id": "s_0",
        "step_id": "s_0_0",
        "data": {
            "choices": [
                {"message": {"content": [{"type": "text", "text": "hi"}, {"type": "image"}]}, "finish_reason": "length"}
            ]
        },
    }
    response = parse(GenerateResponse, body)
    assert response.text == "hi" and response.stop == "length"
    with pytest.raises(NovaProtocolError, match="choices"):
        parse(GenerateResponse, {"sample_id": "s", "step_id": "s_0", "data": {"choices": []}})


def test_a_malformed_request_is_answered_under_the_id_nova_sent_even_an_over_long_one():
    from rewardpipe.integrations.nova.bridge import Bridge, Queues

    sent = []

    class FakeSqs:
        def send_message(self, **kwargs):
            sent.append(json.loads(kwargs["MessageBody"]))

    class MemoryStore:
        def __init__(self):
            self.objects = {}

        def put_json(self, key, obj):
            self.objects[key] = obj
            return key

        def get_json(self, key, default=None):
            return self.objects.get(key, default)

        def put_record(self, record):
            self.objects[f"record:{record.rollout_id}"] = record

    store = MemoryStore()
    bridge = Bridge(BridgeConfig(), REWARD, store, FakeSqs(), None, Queues("resp.fifo", "gen.fifo"))
    long_id = "s" * 600 + "_0"
    out = bridge.intake(json.dumps({"sample_id": long_id, "rewards": {"range": [2, 1]}}))
    assert out["status"] == "rejected_answered"
    assert sent == [
        {"version": "v0", "sample_id": long_id, "stop_reason": "error", "rewards": {"aggregate_score": 0.5}}
    ]
    assert store.objects[f"nova/reports/{out['execution']}.json"]["id"] == long_id
    # An id longer than a record id may be (only a rejected request can carry one) still gets its record.
    huge = "h" * 5000 + "_0"
    out = bridge.intake(json.dumps({"sample_id": huge}))
    assert out["status"] == "rejected_answered" and sent[-1]["sample_id"] == huge
    (record,) = [v for k, v in store.objects.items() if k.startswith("record:h")]
    assert (
        len(record.rollout_id) <= 1024
        and record.rollout_id.startswith("h" * 900)
        and record.error.kind == "bad_request"
    )
    # An id breaking the id rule (a control character) is answered as a bad request under the id Nova sent.
    for hostile in ("n\x00ul_0", "esc\x1b[2J_0", "rlo\u202e_0"):
        out = bridge.intake(json.dumps({"sample_id": hostile}))
        assert out["status"] == "rejected_answered" and sent[-1]["sample_id"] == hostile
        assert store.objects[f"record:{hostile}"].error.kind == "bad_request"
        assert "sample_id" in store.objects[f"record:{hostile}"].error.message
