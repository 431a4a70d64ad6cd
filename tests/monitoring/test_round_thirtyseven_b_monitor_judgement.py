"""Round thirty-seven (second wave), the monitor's judgement: a component that stops varying within GRPO groups is
alarmed once per onset, with the right cause and examples, and a healthy one never. Each fix's tests failed before
it (docs/changelog.md, round thirty-seven, the monitor's judgement); the healthy counterparts (a rare per-rollout
penalty, a dead stretch straddling pools, a stationary or narrowing spread) are guards that passed before too."""

from __future__ import annotations

import random
from typing import Any

from rewardpipe.monitoring import MonitorState, Thresholds, monitor_records
from rewardpipe.monitoring.statistics import SAMPLE_GROUPS
from tests.monitoring.test_round_thirtyfive_monitor import _records  # (step, groups, values_of(g, i), k)

PENALTY = {"pen": (-1.0, 0.0)}


def _whole_group_penalty(steps: int, rate: float, seed: int, groups: int = 32) -> list[dict[str, Any]]:
    """``pen`` fires (-1.0) on every rollout of about ``rate`` of the groups of a step, 0.0 elsewhere; ``good``
    varies everywhere."""
    rng = random.Random(seed)
    records: list[dict[str, Any]] = []
    for step in range(steps):
        fired = {g for g in range(groups) if rng.random() < rate}
        records += _records(step, groups, lambda g, i, f=fired: {"good": rng.random(), "pen": -1.0 if g in f else 0.0})
    return records


def _pen_alarms(result: Any) -> list[tuple[str, int, str]]:
    return [(a.kind, a.step, a.cause) for a in result.alarms if a.component == "pen"]


def test_a_penalty_firing_on_whole_groups_is_alarmed_once_with_its_cause():
    """Fired on all 4 rollouts of ~12 % of the groups: it is constant inside every group, so it teaches nothing. It
    was "never fires" (info) at each step where its 0 reached 90 % of groups and dead on the next where it fell
    short: 22 alarms in 40 steps, a dead alarm and its closing "no longer judged" one, over and over."""
    records = _whole_group_penalty(40, 0.12, seed=1)
    result = monitor_records(records, Thresholds(ranges=PENALTY))
    assert _pen_alarms(result) == [("dead_component", 0, "constant_within_groups")]
    verdicts = {s.components["pen"].verdict for s in result.steps}
    assert verdicts <= {"dead", "info"}  # info only where no group fired at all (still no signal, no recovery)
    for report in result.steps:
        stats = report.components["pen"]
        assert stats.alarm_active
        if stats.verdict == "dead":
            assert stats.cause == "constant_within_groups"
            assert "set per prompt, not per rollout" in stats.message
            assert "a penalty that fires on whole groups" in stats.message


def test_a_penalty_firing_on_whole_groups_stays_alarmed_through_a_step_it_never_fires_one_call_a_step():
    """A step where no task fired it is all 0: "never fires", info, which closed the open alarm ("no longer judged")
    and reopened it at the next step that fired. The open alarm's cause is kept in the state (a Lambda checks one
    step a call)."""
    rng = random.Random(2)
    fired_at = {0: {3, 9}, 1: set(), 2: {5}, 3: set(), 4: {1, 2, 30}}
    state: MonitorState | None = None
    alarms = []
    for step, fired in fired_at.items():
        records = _records(step, 32, lambda g, i, f=fired: {"good": rng.random(), "pen": -1.0 if g in f else 0.0})
        result = monitor_records(records, Thresholds(ranges=PENALTY), state)
        state = result.state
        alarms += _pen_alarms(result)
        stats = result.step(step).components["pen"]
        assert stats.alarm_active
        assert stats.verdict == ("dead" if fired else "info")
        if not fired:
            assert "stays open" in (stats.message or "")
    assert alarms == [("dead_component", 0, "constant_within_groups")]
    assert MonitorState.from_dict(state.to_dict()).targets["component:pen"].alarm_cause == "constant_within_groups"


def test_a_penalty_that_fires_on_single_rollouts_rarely_is_still_info():
    """The healthy counterpart: a penalty that fires on one rollout of a few groups (it separates them) is an idle
    penalty at 90 %+ of groups at 0, and raises nothing."""
    rng = random.Random(3)
    records: list[dict[str, Any]] = []
    for step in range(20):
        fired = {g for g in range(32) if rng.random() < 0.08}
        records += _records(
            step, 32, lambda g, i, f=fired: {"good": rng.random(), "pen": -1.0 if g in f and i == 0 else 0.0}
        )
    result = monitor_records(records, Thresholds(ranges=PENALTY))
    assert _pen_alarms(result) == []
    assert {s.components["pen"].verdict for s in result.steps} <= {"ok", "info"}


def test_a_component_set_per_prompt_shows_groups_at_each_value_when_the_sample_holds_one():
    """Constant inside every group, 0.0 for the first tasks (the step's sample, its first groups) and 1.0 for the
    later ones: the examples were three groups at 0.0, which show nothing of it varying across groups."""
    records = _records(0, 40, lambda g, i: {"good": float(i), "difficulty": 1.0 if g >= SAMPLE_GROUPS + 4 else 0.0})
    (alarm,) = [a for a in monitor_records(records).alarms if a.component == "difficulty"]
    assert alarm.cause == "constant_within_groups"
    values = [e["reason"].split(",")[0] for e in alarm.examples]
    assert "difficulty = 1.0" in values and "difficulty = 0.0" in values, alarm.examples
    assert len({e["group_id"] for e in alarm.examples}) == len(alarm.examples) == 3


def test_a_penalty_firing_on_whole_groups_past_the_sample_shows_a_group_it_fires_on():
    """The same for a penalty that fires on the whole groups of two later tasks (95 % of groups at 0: it was "never
    fires", info, and raised nothing)."""
    fired = {SAMPLE_GROUPS + 3, SAMPLE_GROUPS + 7}
    records = _records(0, 40, lambda g, i: {"good": float(i), "pen": -1.0 if g in fired else 0.0})
    (alarm,) = [a for a in monitor_records(records, Thresholds(ranges=PENALTY)).alarms if a.component == "pen"]
    assert alarm.cause == "constant_within_groups"
    assert "it is 0.0 in every rollout of 38 group(s) and another value in every rollout of 2" in alarm.message
    values = [e["reason"].split(",")[0] for e in alarm.examples]
    assert "pen = -1.0" in values and "pen = 0.0" in values, alarm.examples


# Pools of small steps (2 groups a step, min_groups 4) straddling a healthy stretch.


def _small_steps(dead_at: list[bool]) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for step, dead in enumerate(dead_at):
        records += _records(step, 2, lambda g, i, d=dead: {"good": float(i), "c": 0.0 if d else float(i % 2)})
    return records


def _c_alarms(alarms: list[Any]) -> list[tuple[str, int, list[int] | None]]:
    return [(a.kind, a.step, a.figures.get("pooled_steps")) for a in alarms if a.component == "c"]


DEAD, HEALTHY = True, False


def test_a_healthy_stretch_straddling_two_pools_clears_the_alarm():
    """Dead at steps 0-4, healthy at 5-6 (4 groups, all varying: enough for a verdict), dead again from 7. The pools
    were [4, 5] and [6, 7], each half dead, both above recover_fraction: the alarm stayed open, the recovery unseen."""
    result = monitor_records(_small_steps([DEAD] * 5 + [HEALTHY] * 2 + [DEAD] * 5))
    assert _c_alarms(result.alarms) == [
        ("dead_component", 1, [0, 1]),
        ("recovered", 6, [5, 6]),
        ("dead_component", 8, [7, 8]),
    ]
    assert "pooled over steps 5\u20136" in next(a.message for a in result.alarms if a.kind == "recovered")


def test_a_recovery_after_an_odd_pool_is_cleared_when_its_steps_are_enough():
    """Healthy from step 5 on: the pool [4, 5] is half dead, and the recovery was said at step 7, a pool late."""
    result = monitor_records(_small_steps([DEAD] * 5 + [HEALTHY] * 6))
    assert _c_alarms(result.alarms) == [("dead_component", 1, [0, 1]), ("recovered", 6, [5, 6])]


def test_a_store_checked_one_step_per_call_clears_it_too(tmp_path):
    """The variance-check Lambda: one step per call, the earlier steps read back from the store."""
    from rewardpipe.models import Record
    from rewardpipe.monitoring import check_pending
    from rewardpipe.store import LocalStore

    store = LocalStore(tmp_path)
    alarms = []
    for record in _small_steps([DEAD] * 5 + [HEALTHY] * 2 + [DEAD] * 2):
        store.put_record(Record.model_validate(record))
    for check in check_pending(store, ["r"], Thresholds(), skip_newest=False):
        alarms += [a for result in check.results for a in result.alarms]
    assert _c_alarms(alarms) == [("dead_component", 1, [0, 1]), ("recovered", 6, [5, 6]), ("dead_component", 8, [7, 8])]


def test_a_dead_stretch_straddling_two_pools_is_judged_on_the_pools_as_before():
    """Only a recovery is judged over the latest steps: a dead verdict still counts disjoint pools (each once towards
    raise_after), so healthy, dead, dead, healthy in pools [0, 1] and [2, 3] raises nothing."""
    result = monitor_records(_small_steps([HEALTHY, DEAD, DEAD, HEALTHY, HEALTHY, HEALTHY]))
    assert _c_alarms(result.alarms) == []


def test_many_dead_components_clean_only_the_reasons_they_show(monkeypatch):
    """A reward of hundreds of components: each dead one's examples cleaned the reason of every rollout of every
    constant sampled group (64 here) to keep 3, most of a step's time. Work counted, not timed."""
    from rewardpipe.monitoring import examples

    calls = []
    real = examples.clean
    monkeypatch.setattr(examples, "clean", lambda text, *a, **k: calls.append(text) or real(text, *a, **k))
    rng = random.Random(7)
    result = monitor_records(
        _records(0, SAMPLE_GROUPS, lambda g, i: {f"c{j}": rng.random() if j % 2 else 0.0 for j in range(40)})
    )
    dead = [a for a in result.alarms if a.kind == "dead_component"]
    assert len(dead) == 20
    assert all(len(a.examples) == 3 for a in dead)
    assert len(calls) <= 3 * len(dead)


# A continuous component whose within-group std decays steadily: its zero-variance share stays 0 until it dies.


def _decaying(steps: int, per_step: float, seed: int = 9) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    records: list[dict[str, Any]] = []
    for step in range(steps):
        spread = 0.5 * per_step**step
        records += _records(step, 32, lambda g, i, w=spread: {"ok": rng.random(), "judge": 0.5 + w * rng.random()})
    return records


def test_a_steadily_decaying_within_group_std_is_warned_well_before_it_dies():
    """Its spread shrinks x0.75 a step, from 0.1 to 1e-6 over 40 steps: the share's trend warned at step 41, one step
    before the dead alarm. The std's steady decay is warned about 20 steps (the dying horizon) before."""
    result = monitor_records(_decaying(50, 0.75))
    judge = [a for a in result.alarms if a.component == "judge"]
    assert [a.kind for a in judge] == ["dying_component", "dead_component"]
    dying, dead = judge
    assert dying.cause == "within_group_std_decaying"
    assert dead.step - dying.step >= 15
    assert result.step(dying.step).components["judge"].zero_variance_group_fraction == 0.0
    assert abs(dying.figures["projected_dead_step"] - dead.step) <= 5
    assert 0.6 < dying.figures["std_factor_per_step"] < 0.9 and "a steady x0." in dying.message
    assert f"warned as dying since step {dying.step}" in dead.message
    # no group is constant yet: the examples are the narrowest groups, saying how narrow
    assert len(dying.examples) == 3 and len({e["group_id"] for e in dying.examples}) == 3
    assert all(e["reason"].startswith("judge spans ") for e in dying.examples), dying.examples


def test_a_healthy_or_converging_continuous_component_is_not_warned():
    """A stationary spread, and one that narrows (x0.965 a step, to a floor of 0.05): no steady fall towards
    epsilon within the horizon."""
    rng = random.Random(4)
    records: list[dict[str, Any]] = []
    for step in range(120):
        narrowing = max(0.05, 0.3 * 0.965**step)
        records += _records(
            step, 8, lambda g, i, w=narrowing: {"flat": rng.random(), "narrowing": 0.5 + w * rng.random()}
        )
    assert [a for a in monitor_records(records).alarms if a.kind == "dying_component"] == []


def test_a_std_decay_warning_survives_one_step_per_call():
    """The Lambda sees one step a call: the std points are in the state, and the warning is raised once."""
    records = _decaying(30, 0.6)
    state: MonitorState | None = None
    warnings = []
    for step in range(30):
        result = monitor_records([r for r in records if r["step"] == step], Thresholds(), state)
        state = MonitorState.from_dict(result.state.to_dict())
        warnings += [a.step for a in result.alarms if a.kind == "dying_component" and a.component == "judge"]
    assert len(warnings) == 1


def test_a_component_of_many_values_per_prompt_is_not_said_to_sit_at_one_end():
    """The per-prompt count is said only where one end holds most constant groups."""
    (alarm,) = [
        a for a in monitor_records(_records(0, 10, lambda g, i: {"good": float(i), "difficulty": g / 10})).alarms
    ]
    assert alarm.component == "difficulty" and alarm.cause == "constant_within_groups"
    assert "another value" not in alarm.message
