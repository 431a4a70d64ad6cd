"""Each weighted component's share of the GRPO advantage, per group and per step."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rewardpipe.models import Record
from rewardpipe.monitoring import monitor_records
from rewardpipe.monitoring.advantage import (
    ADVANTAGE_EPS,
    advantage_shares,
    group_advantage_shares,
    rollout_advantages,
)


def grpo_advantages(totals, eps=ADVANTAGE_EPS):
    mean = sum(totals) / len(totals)
    std = math.sqrt(sum((t - mean) ** 2 for t in totals) / len(totals))
    return [(t - mean) / (std + eps) for t in totals]


def test_component_terms_add_up_to_the_grpo_advantage():
    values = {"correctness": [0.0, 1.0, 1.0, 0.0], "asked": [1.0, 1.0, 0.0, 0.0], "penalty": [0.0, -0.5, 0.0, 0.0]}
    weights = {"correctness": 1.0, "asked": 0.6, "penalty": 0.2}
    advantages, terms = rollout_advantages(values, weights)
    totals = [sum(weights[c] * values[c][i] for c in values) for i in range(4)]
    assert advantages == pytest.approx(grpo_advantages(totals))
    for i in range(4):
        assert sum(terms[c][i] for c in values) == pytest.approx(advantages[i])
    # a rollout that differs from the group only by the penalty gets its (negative) term from the penalty
    assert terms["penalty"][1] < 0 and terms["penalty"][0] > 0


def test_a_constant_component_carries_no_share_whatever_its_weight():
    shares = group_advantage_shares(
        {"outcome": [0.0] * 8, "shaping": [0.1 * i for i in range(8)]}, {"outcome": 10.0, "shaping": 0.1}
    )
    assert shares == {"outcome": 0.0, "shaping": 1.0}


def test_shares_follow_weight_times_std():
    assert advantage_shares({"a": 0.5, "b": 0.5}, {"a": 1.0, "b": 1.0}) == {"a": 0.5, "b": 0.5}
    shares = advantage_shares({"a": 0.5, "b": 0.5}, {"a": 2.0, "b": -1.0})  # the sign does not shrink a share
    assert shares == pytest.approx({"a": 2 / 3, "b": 1 / 3})
    assert advantage_shares({"a": 0.0, "b": 0.0}, {"a": 1.0}) is None  # nothing varies: no advantage at all


def test_mismatched_lengths_are_refused():
    with pytest.raises(ValueError, match="one value per rollout"):
        rollout_advantages({"a": [1.0, 2.0], "b": [1.0]}, {})


group_values = st.lists(st.floats(-1, 1, allow_nan=False), min_size=2, max_size=8)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(group_values, group_values), min_size=1, max_size=6), st.floats(0.1, 3), st.floats(0.1, 3))
def test_step_share_is_the_mean_share_over_groups_with_a_signal(groups, w_a, w_b):
    records, expected = [], []
    for g, (a, b) in enumerate(groups):
        k = min(len(a), len(b))
        a, b = a[:k], b[:k]
        shares = group_advantage_shares({"a": a, "b": b}, {"a": w_a, "b": w_b})
        if shares is not None:
            expected.append(shares)
        for i in range(k):
            records.append(
                Record(
                    run_id="r",
                    group_id=f"g{g}",
                    rollout_id=f"{g}-{i}",
                    task_id="t",
                    status="scored",
                    components={"a": a[i], "b": b[i]},
                    weights={"a": w_a, "b": w_b},
                    aggregate=w_a * a[i] + w_b * b[i],
                )
            )
    step = monitor_records(records).step(0)
    for name in ("a", "b"):
        got = step.components[name].advantage_share
        if not expected:
            assert got is None
        else:
            assert got == pytest.approx(sum(s[name] for s in expected) / len(expected), abs=1e-6)
