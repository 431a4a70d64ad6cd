"""Round thirty-five, Nova multi-turn (delegated rollouts): what an error answer is worth to its GRPO group.

* A request refused at intake (a task that does not validate, tools that cannot be offered, a request that does not
  parse) was answered at once under ``error_reward: neutral``, with the mean of its group's answers so far: the
  middle of ``rewards.range`` while its group-mates were still running, a GRPO advantage whenever their scores lay
  elsewhere. It now has a budget from Nova's timestamp, as a started rollout has, and is held while group-mates of
  its round run, like any other error answer; the sweeper sends it at that budget at the latest.
"""

from __future__ import annotations

import pytest

from tests.integrations.nova.test_nova_contract import FakeSfn, _bridge, _in_flight
from tests.integrations.test_round_thirtythree_nova_multiturn import _answered, _scored


def _refused(bridge, clock, sample_id: str) -> dict:
    """A request whose inline task does not validate: refused at intake (``bad_input``)."""
    body = {"version": "v0", "timestamp": clock["now"], "sample_id": sample_id, "data": {"task": {"no": "task"}}}
    return bridge.intake(body)


def _unparsable(bridge, clock, sample_id: str) -> dict:
    """A request that does not parse (its range upside down): refused at intake (``bad_request``)."""
    body = {"version": "v0", "timestamp": clock["now"], "sample_id": sample_id, "rewards": {"range": [1, 0]}}
    return bridge.intake(body)


@pytest.mark.parametrize("refuse", [_refused, _unparsable], ids=["bad_input", "bad_request"])
def test_a_request_refused_while_its_group_mates_run_is_answered_with_their_mean(refuse):
    bridge, clock = _bridge(sfn=FakeSfn())
    mates = [_in_flight(bridge, clock, sample) for sample in ("p-1_0", "p-1_1")]
    assert refuse(bridge, clock, "p-1_2")["status"] == "rejected_deferred"
    assert [m for m in bridge.sqs.sent if "p-1_2" in m["MessageBody"]] == []  # held: nothing sent yet
    # The reward's own range is [-0.5, 1.6], mapped linearly onto [0, 1].
    bridge.respond(mates[0]["execution"], "SUCCEEDED", _scored(1.6))  # 1.0
    bridge.respond(mates[1]["execution"], "SUCCEEDED", _scored(-0.5 + 2.1 * 0.6))  # 0.6
    refused = _answered(bridge, "p-1_2")
    assert refused["stop_reason"] == "error"
    assert refused["rewards"]["aggregate_score"] == pytest.approx(0.8)  # (1.0 + 0.6) / 2, not 0.5
    assert refuse(bridge, clock, "p-1_2")["status"] == "duplicate"  # redelivered: answered once


def test_a_held_refusal_whose_mates_never_end_is_sent_by_the_sweeper_at_its_budget():
    bridge, clock = _bridge(sfn=FakeSfn())
    mate = _in_flight(bridge, clock, "p-1_0")
    assert _refused(bridge, clock, "p-1_1")["status"] == "rejected_deferred"
    clock["now"] += 60
    bridge.sweep()
    assert [m for m in bridge.sqs.sent if "p-1_1" in m["MessageBody"]] == []  # its mate still runs, in budget
    bridge.respond(mate["execution"], "SUCCEEDED", _scored(1.6))  # the mate's answer sends it
    assert _answered(bridge, "p-1_1")["rewards"]["aggregate_score"] == pytest.approx(1.0)

    bridge, clock = _bridge(sfn=FakeSfn())
    _in_flight(bridge, clock, "q-1_0")
    _refused(bridge, clock, "q-1_1")
    clock["now"] += 480 + 61  # past both budgets: the mate is stopped and answered, the refusal sent
    bridge.sweep()
    assert _answered(bridge, "q-1_1")["stop_reason"] == "error"
    assert _answered(bridge, "q-1_0")["stop_reason"] == "error"
    assert bridge.sweep()["in_flight"] == 0


def test_a_groups_first_request_refused_before_any_mate_started_is_still_answered_at_once():
    bridge, clock = _bridge(sfn=FakeSfn())
    assert _refused(bridge, clock, "r-1_0")["status"] == "rejected_answered"
    assert _answered(bridge, "r-1_0")["rewards"]["aggregate_score"] == pytest.approx(0.5)
    assert bridge.sweep()["in_flight"] == 0  # nothing of it left in flight


def test_a_request_refused_for_another_field_is_answered_in_the_range_it_asked_for():
    """A request that did not parse as a whole was answered in [0, 1], whatever range it asked for: mid-range of
    another range than its group's (and the group's answers of its range never averaged). Its own range is kept
    when that part of it is sound."""
    bridge, _ = _bridge(sfn=FakeSfn())
    body = {"version": "v0", "sample_id": "w-1_0", "max_length": -5, "rewards": {"range": [-1, 3]}}
    assert bridge.intake(body)["status"] == "rejected_answered"
    assert _answered(bridge, "w-1_0")["rewards"]["aggregate_score"] == pytest.approx(1.0)  # the middle of [-1, 3]
    body = {"version": "v0", "sample_id": "w-2_0", "rewards": {"range": [3, -1]}}  # the range itself at fault
    assert bridge.intake(body)["status"] == "rejected_answered"
    assert _answered(bridge, "w-2_0")["rewards"]["aggregate_score"] == pytest.approx(0.5)
