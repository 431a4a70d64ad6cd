"""Round thirty-three follow-ups on the Nova multi-turn bridge (delegated rollouts)."""

from __future__ import annotations

import json

import pytest

from rewardpipe.integrations.nova.protocol import BridgeConfig, error_score
from tests.integrations.nova.test_nova_contract import FakeSfn, _bridge, _in_flight, _scored_output


def _answered(bridge, sample_id: str) -> dict:
    (sent,) = [
        json.loads(m["MessageBody"]) for m in bridge.sqs.sent if json.loads(m["MessageBody"])["sample_id"] == sample_id
    ]
    return sent


def _scored(aggregate: float) -> str:
    output = json.loads(_scored_output("runs/nova/x.json"))
    return json.dumps({**output, "aggregate_reward_score": aggregate})


def test_a_neutral_error_answer_is_the_mean_of_its_groups_scored_rollouts_not_the_middle_of_the_range():
    """A mid-range error answer has a GRPO advantage whenever the group's mean is elsewhere: an infrastructure
    failure taught the policy. Now it is the mean of the group's scored answers, as in the single-turn path."""
    bridge, clock = _bridge(sfn=FakeSfn())
    entries = {sample: _in_flight(bridge, clock, sample) for sample in ("p-1_0", "p-1_1", "p-1_2", "q-9_0")}
    # The reward's own range is [-0.5, 1.6], mapped linearly onto [0, 1].
    bridge.respond(entries["p-1_0"]["execution"], "SUCCEEDED", _scored(1.6))  # 1.0
    bridge.respond(entries["p-1_1"]["execution"], "SUCCEEDED", _scored(-0.5 + 2.1 * 0.6))  # 0.6
    bridge.respond(entries["q-9_0"]["execution"], "SUCCEEDED", _scored(-0.5))  # another group: 0.0
    bridge.respond(entries["p-1_2"]["execution"], "FAILED", None)
    failed = _answered(bridge, "p-1_2")
    assert failed["stop_reason"] == "error"
    assert failed["rewards"]["aggregate_score"] == pytest.approx(0.8)  # (1.0 + 0.6) / 2, not 0.5
    report = bridge.store.get_json(f"nova/reports/{entries['p-1_2']['execution']}.json")
    assert {"name": "reward_error", "value": 1, "type": "Metric"} in report["metrics_list"]


def test_an_error_in_a_group_with_nothing_scored_gets_the_middle_of_the_range():
    """(Round thirty-four: an error answer waits for its running group-mates, tests/integrations/
    test_round_thirtyfour_nova.py.) A group whose every rollout fails has no score: the middle of the range."""
    bridge, clock = _bridge(sfn=FakeSfn())
    first = _in_flight(bridge, clock, "r-1_0")
    second = _in_flight(bridge, clock, "r-1_1")
    assert bridge.respond(first["execution"], "FAILED", None)["status"] == "deferred"  # r-1_1 still runs
    bridge.respond(second["execution"], "FAILED", None)
    assert _answered(bridge, "r-1_0")["rewards"]["aggregate_score"] == pytest.approx(0.5)
    assert _answered(bridge, "r-1_1")["rewards"]["aggregate_score"] == pytest.approx(0.5)


def test_error_answers_and_other_rounds_never_count_as_the_groups_scores():
    bridge, clock = _bridge(sfn=FakeSfn())
    samples = ("g-1_0", "g-1_1", "g-1_2")
    for sample in samples:  # round 0: every sample scored 1.0
        bridge.respond(_in_flight(bridge, clock, sample)["execution"], "SUCCEEDED", _scored(1.6))
    sent_in_round_0 = len(bridge.sqs.sent)
    clock["now"] += 1  # the same samples requested again: the next training round
    b, c, d = (_in_flight(bridge, clock, sample) for sample in samples)
    bridge.respond(b["execution"], "FAILED", None)  # c and d still run: held back
    bridge.respond(c["execution"], "SUCCEEDED", _scored(-0.5))  # 0.0
    bridge.respond(d["execution"], "FAILED", None)  # b's error is no score, round 0 another round: 0.0 for both
    answers = [json.loads(m["MessageBody"]) for m in bridge.sqs.sent[sent_in_round_0:]]
    assert {a["sample_id"]: a["rewards"]["aggregate_score"] for a in answers} == {
        "g-1_0": pytest.approx(0.0),
        "g-1_1": pytest.approx(0.0),
        "g-1_2": pytest.approx(0.0),
    }


def test_error_score_keeps_the_other_policies_and_stays_in_range():
    bounds = (-0.5, 1.6)
    assert error_score(BridgeConfig(), (0.0, 1.0), bounds, [0.2, 0.4]) == pytest.approx(0.3)
    assert error_score(BridgeConfig(), (0.0, 1.0), bounds, [float("nan")]) == pytest.approx(0.5)
    assert error_score(BridgeConfig(error_reward="zero"), (0.0, 1.0), bounds, [0.9]) == pytest.approx(0.5 / 2.1)
    assert error_score(BridgeConfig(error_reward="fail_batch"), (0.0, 1.0), bounds, [0.9]) is None


# --------------------------------------------------------------------------------------------------
# A tool environment on the Nova channel


def _tool_bridge(env):
    from rewardpipe.envs.tool_call import ToolCallTask

    bridge, clock = _bridge(sfn=FakeSfn())
    bridge.environment, bridge.task_model = env, ToolCallTask if env is not None else None
    return bridge, clock


def _tool_task() -> dict:
    from rewardpipe.envs.tool_call import BUNDLED_TASKS
    from rewardpipe.envs.tool_call.tasks import ToolCallTask
    from rewardpipe.models import load_task_rows

    return load_task_rows(BUNDLED_TASKS, ToolCallTask)[0].model_dump(mode="json")


def _first_generate_request(bridge, sample_id: str, opening: list[dict]) -> dict:
    bridge.store.put_json("states/s.json", {"state": {"messages": opening}})
    out = bridge.forward_turn({"task_token": "tok", "rollout": sample_id, "state_key": "states/s.json"})
    assert out["status"] == "sent"
    (sent,) = [json.loads(m["MessageBody"]) for m in bridge.sqs.sent if m["QueueUrl"] == "gen.fifo"]
    return sent


@pytest.mark.parametrize("stored", [False, True], ids=["inline", "stored"])
def test_a_tool_environments_tools_are_written_into_novas_system_prompt(stored, caplog):
    """Nova's generate request has no tools field: the model never saw the tools it is trained to call. The tools
    the environment offers for the task are now in the system prompt of each generate request, with a warning."""
    from rewardpipe.envs.tool_call import ENVIRONMENT

    bridge, clock = _tool_bridge(ENVIRONMENT)
    task = _tool_task()
    if stored:
        bridge.store.put_json(f"tasks/nova/{task['task_id']}.json", task)
    data = {"task_id": task["task_id"]} if stored else {"task": task}
    with caplog.at_level("WARNING", logger="rewardpipe.nova"):
        out = bridge.intake({"version": "v0", "timestamp": clock["now"], "sample_id": "tool-1_0", "data": data})
    assert out["status"] == "started" and "no tools field" in caplog.text
    opening = [{"role": "system", "content": "SYSTEM"}, {"role": "user", "content": "What is my balance?"}]
    sent = _first_generate_request(bridge, "tool-1_0", opening)
    system = sent["messages"][0]
    assert system["role"] == "system" and system["content"].startswith("SYSTEM\n\n")
    for schema in ENVIRONMENT.tool_schemas():
        assert json.dumps(schema, sort_keys=True) in system["content"]
    assert sent["messages"][1:] == opening[1:]


def test_an_environment_without_tools_gets_its_messages_unchanged():
    from rewardpipe.envs.ask_before_coding.environment import AskBeforeCoding
    from rewardpipe.integrations.nova.bridge import with_tools_prompt

    bridge, clock = _tool_bridge(AskBeforeCoding())
    bridge.task_model = None
    out = bridge.intake({"version": "v0", "timestamp": clock["now"], "sample_id": "n-1_0", "data": {"task_id": "t"}})
    assert out["status"] == "started"
    opening = [{"role": "user", "content": "Write it."}]
    assert _first_generate_request(bridge, "n-1_0", opening)["messages"] == opening
    # With no system message to extend, the tools open the conversation as one.
    assert with_tools_prompt(opening, "TOOLS") == [{"role": "system", "content": "TOOLS"}, *opening]
