"""Round thirty-two (lead): a component dead within groups at different values, with a known range, that varies in
a few groups, made the monitor's message raise (``float - None``: the "rarely varies" arithmetic took the constant
value, which only a component constant at one end has). A ``run`` hit it when its random draw of scripted rollouts gave
such a step, and the whole step went unchecked ("the monitor could not check this step")."""

from __future__ import annotations

from rewardpipe.monitoring import Thresholds, monitor_records
from tests.monitoring.test_round_twentyseven_monitor import record


def constant_at_both_ends(groups: int = 32, k: int = 4, varying: int = 2) -> list[dict]:
    """``solved`` is 1.0 in every rollout of half the groups and 0.0 in the others, except ``varying`` groups where it
    varies; ``b`` varies everywhere."""
    out = []
    for g in range(groups):
        for i in range(k):
            solved = float(i % 2) if g < varying else float(g % 2)
            out.append(record(0, g, i, {"solved": solved, "b": i / k}))
    return out


def test_a_component_constant_within_groups_at_both_ends_that_rarely_varies_gets_its_message():
    result = monitor_records(constant_at_both_ends(), Thresholds(ranges={"solved": (0.0, 1.0)}))
    s = result.step(0).components["solved"]
    assert (s.verdict, s.cause) == ("dead", "constant_within_groups")
    assert "constant inside 94% of groups (30/32)" in s.message
    assert "binary outcome varies" not in s.message  # (no one end to count a rate of rollouts off)
