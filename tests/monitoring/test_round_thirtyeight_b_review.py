"""Round thirty-eight (review), monitoring and stored progress: attacks on the round's penalty evidence window
(``TargetState.fired``) and its messages.

1. A stored state's ``fired`` points were taken as written: negative counts, negative steps or hundreds of points (a
   damaged or hand-edited state; no rewardpipe writes them) were summed into a penalty's evidence and kept a penalty
   set per prompt ``info`` for up to 24 steps. Such a state is refused (set aside as corrupt, as for a negative
   streak); more points than the window keeps are trimmed to its newest.
2. The note an ``info`` penalty's message gets when its whole fired groups were not taken as set per prompt said "it
   fired on every rollout of 0 group(s) ... too few to tell" for a penalty that fired on no group at all, and "it
   fires per rollout" when its whole groups outnumbered its varying ones (too few fired groups to tell, not evidence
   of firing per rollout).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from pydantic import ValidationError

from rewardpipe.monitoring import MonitorState, Thresholds, load_state, monitor_records, state_key
from rewardpipe.monitoring.state import FIRED_WINDOW
from rewardpipe.store import LocalStore
from tests.monitoring.test_round_thirtyfive_monitor import _records  # (step, groups, values_of(g, i), k)

PENALTY = {"pen": (-1.0, 0.0)}


def _state_with_fired(fired: list[list[int]]) -> dict[str, Any]:
    return {"schema": "rewardpipe.monitor-state/v2", "targets": {"component:pen": {"fired": fired}}}


def _per_prompt_step(step: int) -> list[dict[str, Any]]:
    """``pen`` fires on every rollout of 3 of 32 groups and nowhere else: set per prompt, dead at once."""
    rng = random.Random(step)
    return _records(step, 32, lambda g, i: {"good": rng.random(), "pen": -1.0 if g < 3 else 0.0})


@pytest.mark.parametrize(
    "fired",
    [
        [[0, -1000, 0]],  # a negative count of whole groups: outweighs any whole group to come
        [[0, 0, -5]],
        [[-1, 0, 1]],  # a negative step: no checked step is
    ],
)
def test_a_stored_penalty_evidence_that_no_rewardpipe_writes_is_refused(fired, tmp_path):
    with pytest.raises(ValidationError, match="fired"):
        MonitorState.model_validate(_state_with_fired(fired))
    store = LocalStore(tmp_path)
    store.put_json(state_key("r"), _state_with_fired(fired))
    state, problem = load_state(store, "r")  # set aside as corrupt, a fresh state in its place
    assert problem is not None and state.targets == {}
    result = monitor_records(_per_prompt_step(1), Thresholds(ranges=PENALTY), state)
    assert result.step(1).components["pen"].verdict == "dead"


def test_more_penalty_evidence_than_the_window_is_trimmed_to_its_newest_points():
    """100 points of one varying group each: all of them were summed into the next step's evidence (a penalty set
    per prompt was info); only the window's newest are kept, as the monitor writes them."""
    fired = [[step, 0, 1] for step in range(100)] + [[100 + step, 2, 0] for step in range(FIRED_WINDOW)]
    state = MonitorState.model_validate(_state_with_fired(fired))
    assert state.targets["component:pen"].fired == [(100 + step, 2, 0) for step in range(FIRED_WINDOW)]
    result = monitor_records(_per_prompt_step(200), Thresholds(ranges=PENALTY), state)
    assert result.step(200).components["pen"].verdict == "dead"


def test_a_penalty_that_fires_on_no_group_says_nothing_of_whole_fired_groups():
    rng = random.Random(1)
    stats = (
        monitor_records(_records(0, 32, lambda g, i: {"good": rng.random(), "pen": 0.0}), Thresholds(ranges=PENALTY))
        .step(0)
        .components["pen"]
    )
    assert (stats.verdict, stats.cause) == ("info", "penalty_never_fires")
    assert "fired on every rollout of 0 group" not in (stats.message or "")
    assert "varied" not in (stats.message or "")


def test_a_few_whole_groups_among_fewer_varying_ones_are_too_few_to_tell_not_firing_per_rollout():
    """4 whole fired groups and 1 varying one, a first step: info (at least 20 fired groups once it has varied), but
    its message said "it fires per rollout", the opposite of what the groups show."""
    rng = random.Random(1)

    def values(g: int, i: int) -> dict[str, float]:
        fired = g < 4 or (g == 4 and i == 0)
        return {"good": rng.random(), "pen": -1.0 if fired else 0.0}

    stats = monitor_records(_records(0, 32, values), Thresholds(ranges=PENALTY)).step(0).components["pen"]
    assert (stats.verdict, stats.cause) == ("info", "penalty_never_fires")
    message = stats.message or ""
    assert "it fires per rollout" not in message
    assert "fired on every rollout of 4 group(s) and varied inside 1" in message
    assert "too few to tell" in message


def test_a_replayed_step_is_reported_with_the_verdict_it_was_judged_with():
    """A penalty set per prompt, one whole fired group a step, judged one step a call: ``info`` at step 0 (one whole
    group is too few), ``dead`` from step 1. Replayed after step 5 (a retried check, a file read again), step 0 was
    reported ``dead``: the evidence of the steps judged after it counted, a verdict no alarm was ever raised for.
    A step's evidence is that of the steps before it."""
    rng = random.Random(0)
    steps = [
        _records(step, 32, lambda g, i, s=step: {"good": rng.random(), "pen": -1.0 if g == s else 0.0})
        for step in range(6)
    ]
    state = None
    judged = {}
    for step, records in enumerate(steps):
        result = monitor_records(records, Thresholds(ranges=PENALTY), state)
        state = result.state
        judged[step] = result.step(step).components["pen"].verdict
    assert judged == {0: "info", 1: "dead", 2: "dead", 3: "dead", 4: "dead", 5: "dead"}
    again = monitor_records(steps[0] + steps[3], Thresholds(ranges=PENALTY), state)
    assert all(report.replayed for report in again.steps)
    assert {report.step: report.components["pen"].verdict for report in again.steps} == {0: "info", 3: "dead"}
    assert again.alarms == []


@pytest.mark.parametrize(
    ("ranges", "roles", "fired", "cause"),
    [
        # a penalty role over (0, 1), weighted as given: it fires at its maximum on every rollout of 9 of 10 groups
        ({"pen": (0.0, 1.0)}, {"pen": "penalty"}, lambda g, i: 1.0 if g < 9 or i == 0 else 0.0, "constant_at_maximum"),
        # a penalty over [-1, 0] set per prompt at -1 (8 groups) and -0.5 (1): constant in 9 of 10 groups, none at 0
        (
            {"pen": (-1.0, 0.0)},
            {},
            lambda g, i: -1.0 if g < 8 else -0.5 if g == 8 else (-1.0 if i == 0 else 0.0),
            "constant_within_groups",
        ),
    ],
)
def test_a_penalty_off_its_neutral_end_in_most_groups_is_not_an_idle_penalty(ranges, roles, fired, cause):
    """A small step (10 groups, fewer fired groups than it takes to tell chance from a penalty set per prompt) where
    the penalty sits off its neutral end in most groups: it was ``info``, "the penalty never fires" ("at its maximum
    0.0 in every rollout of 0% of groups"), since "too few fired groups to tell" cleared it as an idle penalty whatever
    its neutral end held. That doubt is for a penalty idle in most groups, firing on a few (round thirty-seven: dead,
    as here)."""
    rng = random.Random(1)
    records = _records(0, 10, lambda g, i: {"good": rng.random(), "pen": fired(g, i)})
    stats = monitor_records(records, Thresholds(ranges=ranges, roles=roles)).step(0).components["pen"]
    assert (stats.verdict, stats.cause) == ("dead", cause)
    assert "never fires" not in (stats.message or "") and "fires rarely" not in (stats.message or "")
