"""Issue 19 item 10: batches with fewer groups than ``min_groups`` are pooled until the evidence is enough.

Every way the monitor meets steps: one call per step with a kept history (a trainer callback), one call over
many steps (``rewardpipe monitor`` on a file or store, the fast column path), one step per call from a store
(the runner after each step, the variance-check Lambda through ``check_pending``). A pooled verdict says so:
``pooled_steps`` in its figures, "pooled over steps a-b" in its message and alarm.
"""

from __future__ import annotations

import json

import pytest

from rewardpipe.models import Record
from rewardpipe.monitoring import MonitorState, Thresholds, check_pending, monitor_records, monitor_step
from rewardpipe.monitoring.monitor import monitor_batch
from rewardpipe.monitoring.pooling import MAX_POOLED_STEPS, StepHistory
from rewardpipe.store import LocalStore


def records(step, groups=2, size=4, *, run="r", dead=("format",), first_group=0):
    """``groups`` groups of ``size`` rollouts: each name in ``dead`` is 0.0 everywhere, ``alive`` varies."""
    out = []
    for g in range(first_group, first_group + groups):
        for r in range(size):
            components = {**{name: 0.0 for name in dead}, "alive": float(r % 2)}
            out.append(
                {
                    "run_id": run,
                    "step": step,
                    "group_id": f"g{g}",
                    "rollout_id": f"c{g}-{r}",
                    "task_id": "t",
                    "status": "scored",
                    "components": components,
                    "weights": {n: 1.0 for n in components},
                    "aggregate": sum(components.values()),
                    "metrics": {},
                }
            )
    return out


TH = Thresholds(ranges={"format": (0.0, 1.0), "alive": (0.0, 1.0)})


def one_call_per_step(steps, **kwargs):
    history, state, results = StepHistory(), None, []
    for step in steps:
        result = monitor_records(records(step, **kwargs), TH, state, history)
        state = result.state
        results.append(result)
    return results


def test_two_groups_a_step_are_judged_over_two_steps_and_the_alarm_says_so():
    results = one_call_per_step(range(4))
    first, second = results[0].steps[0], results[1].steps[0]
    assert first.components["format"].verdict == "insufficient_data"
    assert "pooling small steps: 2 of 4 groups so far over step 0" in first.components["format"].message
    assert not results[0].alarms
    stats = second.components["format"]
    assert (stats.verdict, stats.cause, stats.pooled_steps) == ("dead", "constant_at_minimum", [0, 1])
    assert stats.eligible_groups == 4 and "pooled over steps 0\u20131" in stats.message
    (alarm,) = [a for a in results[1].alarms if a.component == "format"]
    assert alarm.step == 1 and alarm.figures["pooled_steps"] == [0, 1] and "pooled over steps 0\u20131" in alarm.message
    assert second.components["alive"].verdict == "ok" and second.components["alive"].pooled_steps == [0, 1]
    # the next pool opens at step 2 and is judged at step 3; the open alarm is not raised again
    assert results[3].steps[0].components["format"].pooled_steps == [2, 3]
    assert not [a for a in results[3].alarms if a.component == "format"]


def test_the_examples_of_a_pooled_alarm_point_at_each_rollouts_own_step():
    results = one_call_per_step(range(2))
    (alarm,) = [a for a in results[1].alarms if a.component == "format"]
    steps = {example["step"] for example in alarm.examples}
    assert steps <= {0, 1} and alarm.examples
    for example in alarm.examples:
        assert f"/step={example['step']}/" in example["transcript_key"]


def test_batches_large_enough_are_judged_alone_exactly_as_before():
    pooled = one_call_per_step(range(3), groups=4)
    alone = [monitor_records(records(step, groups=4), TH, None) for step in range(3)]
    for with_history, without in zip(pooled, alone, strict=True):
        stats = with_history.steps[0].components["format"]
        assert stats.pooled_steps is None
        assert stats.to_dict() == {
            **without.steps[0].components["format"].to_dict(),
            "alarm_active": stats.alarm_active,
            "dead_streak": stats.dead_streak,
        }


def test_one_group_a_step_is_pooled_over_four_steps():
    results = one_call_per_step(range(8), groups=1)
    verdicts = [r.steps[0].components["format"].verdict for r in results]
    assert verdicts == ["insufficient_data"] * 3 + ["dead"] + ["insufficient_data"] * 3 + ["dead"]
    assert results[3].steps[0].components["format"].pooled_steps == [0, 1, 2, 3]
    assert results[7].steps[0].components["format"].pooled_steps == [4, 5, 6, 7]


def test_a_pool_never_spans_more_than_its_window():
    history, state = StepHistory(), None
    for step in range(3 * MAX_POOLED_STEPS):
        # each group has 2+ values only every third step: 3 groups in any 8 steps, never the 4 a verdict needs
        result = monitor_records(records(step, groups=1, size=2 if step % 3 == 0 else 1), TH, state, history)
        state = result.state
        stats = result.steps[0].components["format"]
        assert stats.verdict == "insufficient_data"
        first = max(0, step - MAX_POOLED_STEPS + 1)
        assert state.targets["component:format"].pooled_since == first
        groups = sum(1 for s in range(first, step + 1) if s % 3 == 0)
        assert f"{groups} of {TH.min_groups} groups" in stats.message


def test_a_min_groups_above_the_window_widens_it_to_min_groups_steps():
    """One group a step and ``min_groups`` above :data:`MAX_POOLED_STEPS` (a valid setting): a window of 8 steps
    never held enough groups, so a constant component never alarmed (round six)."""
    strict = Thresholds(ranges=TH.ranges, min_groups=MAX_POOLED_STEPS + 5)
    verdicts = [r.steps[0].components["format"] for r in one_call_per_step_with(strict, range(3 * strict.min_groups))]
    assert [s.verdict for s in verdicts].count("dead") == 3
    assert verdicts[strict.min_groups - 1].pooled_steps == list(range(strict.min_groups))
    assert all(s.verdict == "insufficient_data" for s in verdicts[: strict.min_groups - 1])


def one_call_per_step_with(thresholds, steps):
    history, state, results = StepHistory(), None, []
    for step in steps:
        result = monitor_records(records(step, groups=1), thresholds, state, history)
        state = result.state
        results.append(result)
    return results


def test_a_large_step_closes_the_pool_and_is_judged_alone():
    history, state, seen = StepHistory(), None, []
    for step, groups in enumerate([2, 5, 2, 2]):
        result = monitor_records(records(step, groups=groups), TH, state, history)
        state = result.state
        seen.append(result.steps[0].components["format"])
    assert [s.verdict for s in seen] == ["insufficient_data", "dead", "insufficient_data", "dead"]
    assert [s.pooled_steps for s in seen] == [None, None, None, [2, 3]]


def test_each_component_is_pooled_only_where_it_is_short_of_groups():
    """``rare`` has values in one group a step (others give None), ``format`` in five."""
    history, state, seen = StepHistory(), None, []
    for step in range(4):
        batch = records(step, groups=5)
        for rec in batch:
            rec["components"]["rare"] = 0.5 if rec["group_id"] == "g0" else None
        result = monitor_records(batch, TH, state, history)
        state = result.state
        seen.append(result.steps[0])
    assert [s.components["format"].pooled_steps for s in seen] == [None] * 4
    assert [s.components["rare"].verdict for s in seen] == ["insufficient_data"] * 3 + ["dead"]
    assert seen[3].components["rare"].pooled_steps == [0, 1, 2, 3]


def test_one_call_over_many_steps_pools_them_too_on_both_read_paths(tmp_path):
    every = [rec for step in range(4) for rec in records(step)]
    careful = monitor_records(every, TH)
    assert [s.components["format"].pooled_steps for s in careful.steps] == [None, [0, 1], None, [2, 3]]
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(rec) + "\n" for rec in every))
    from rewardpipe.monitoring.fastread import read_jsonl_batch

    batch = read_jsonl_batch(path)
    if batch is None:
        pytest.skip("the fast reader did not vouch for this file")
    fast = monitor_batch(batch, TH)
    assert [s.to_dict() for s in fast.steps] == [s.to_dict() for s in careful.steps]
    assert [a.to_dict() for a in fast.alarms] == [a.to_dict() for a in careful.alarms]


def _write(store, step, **kwargs):
    for rec in records(step, **kwargs):
        store.put_record(Record.model_validate(rec))


def test_a_store_checked_one_step_per_call_pools_across_calls(tmp_path):
    """The runner's monitor_step after each step, and the Lambda's check_pending: the open pool is in the
    saved state, the earlier steps' records are read back from the store."""
    store = LocalStore(tmp_path)
    _write(store, 0)
    first = monitor_step(store, "r", 0, TH)
    assert first.steps[0].components["format"].verdict == "insufficient_data" and not first.alarms
    saved = MonitorState.from_dict(json.loads(store.get_bytes("runs/r/monitor/state.json")))
    assert saved.targets["component:format"].pooled_since == 0
    _write(store, 1)
    second = monitor_step(store, "r", 1, TH)
    stats = second.steps[0].components["format"]
    assert stats.verdict == "dead" and stats.pooled_steps == [0, 1]
    assert [a.figures["pooled_steps"] for a in second.alarms if a.component == "format"] == [[0, 1]]

    other = LocalStore(tmp_path / "lambda")
    for step in range(4):
        _write(other, step)
    (check,) = check_pending(other, ["r"], TH)
    pooled = [result.steps[0].components["format"].pooled_steps for result in check.results]
    assert pooled == [None, [0, 1], None, [2, 3]]


def test_a_state_without_an_open_pool_is_written_as_before():
    state = one_call_per_step(range(2))[-1].state
    assert all("pooled_since" not in target for target in state.to_dict()["targets"].values())
    opened = one_call_per_step(range(1))[-1].state.to_dict()
    assert opened["targets"]["component:format"]["pooled_since"] == 0
    assert MonitorState.from_dict(opened).targets["component:format"].pooled_since == 0


def test_the_trl_callback_pools_two_group_batches():
    from rewardpipe.integrations.trl import RewardPipeMonitor

    callback = RewardPipeMonitor(reward="gsm8k", run_id="small")
    logged: list[tuple[str, float]] = []

    class Trainer:
        reward_funcs, reward_weights, num_generations = callback.reward_funcs, [0.5, 1.0], 4
        model = type("M", (), {"training": True})()

        def log(self, name, value):
            logged.append((name, value))

    trainer = Trainer()
    prompts = [f"q{g}" for g in range(2) for _ in range(4)]
    completions = [f"#### {i % 2}" for i in range(8)]  # format always 1.0 (dead at its maximum)
    for _ in range(2):
        for fn in callback.reward_funcs:
            fn(prompts=prompts, completions=completions, answer=["1"] * 8, log_metric=trainer.log, trainer_state=None)
    assert [r.components["format"].verdict for r in callback.reports] == ["insufficient_data", "dead"]
    (alarm,) = [a for a in callback.alarms if a.component == "format"]
    assert alarm.figures["pooled_steps"] == [0, 1] and "pooled over steps 0\u20131" in alarm.message
    assert ("rewardpipe/format/pooled_batches", 2.0) in logged


def test_the_trl_monitor_batch_helper_pools_when_given_a_history():
    """``integrations.trl.monitor_batch``, called once a batch by a user's own loop: with one StepHistory the
    two-group batches are judged together; without one no batch ever gets a verdict."""
    from rewardpipe.integrations.trl import monitor_batch as trl_monitor_batch

    values = {"format": [1.0] * 8, "alive": [float(i % 2) for i in range(8)]}  # two groups of four
    th = Thresholds(ranges={"format": (0.0, 1.0), "alive": (0.0, 1.0)})
    for history, expected in (
        (StepHistory(), ["insufficient_data", "dead", "insufficient_data", "dead"]),
        (None, ["insufficient_data"] * 4),
    ):
        state, verdicts = None, []
        for step in range(4):
            result = trl_monitor_batch(values, 4, step=step, thresholds=th, previous_state=state, history=history)
            state = result.state
            verdicts.append(result.steps[0].components["format"].verdict)
        assert verdicts == expected
    assert result.steps[0].components["format"].pooled_steps is None  # the last call, without a history


# Round five: steps numbered with a stride (a trainer that records every 10th step, a loop that numbers its steps
# by samples seen, TRL reusing one generation for several optimiser steps). The window counted step numbers, so
# no two batches 10 apart ever shared a pool and the constant component never alarmed, on any path.
STRIDED = [s * 10 for s in range(6)]


def test_steps_numbered_with_a_stride_are_pooled_on_every_path(tmp_path):
    h, state, per_call = StepHistory(), None, []
    for step in STRIDED:
        result = monitor_records(records(step), TH, state, h)
        state = result.state
        per_call.append(result)
    pooled = [r.steps[0].components["format"].pooled_steps for r in per_call]
    assert pooled == [None, [0, 10], None, [20, 30], None, [40, 50]]
    (alarm,) = [a for r in per_call for a in r.alarms if a.component == "format"]
    assert alarm.step == 10 and alarm.figures["pooled_steps"] == [0, 10] and "steps 0\u201310" in alarm.message

    every = [rec for step in STRIDED for rec in records(step)]
    assert [s.components["format"].pooled_steps for s in monitor_records(every, TH).steps] == pooled

    store = LocalStore(tmp_path)
    for step in STRIDED[:2]:
        _write(store, step)
        result = monitor_step(store, "r", step, TH)
    assert result.steps[0].components["format"].pooled_steps == [0, 10]
    assert [a.figures["pooled_steps"] for a in result.alarms if a.component == "format"] == [[0, 10]]


def test_a_strided_pool_still_spans_at_most_its_window_of_steps_seen():
    h, state = StepHistory(), None
    for index in range(3 * MAX_POOLED_STEPS):
        step = 100 * index  # an eligible group every third step: never 4 in a window of 8
        result = monitor_records(records(step, groups=1, size=2 if index % 3 == 0 else 1), TH, state, h)
        state = result.state
        assert result.steps[0].components["format"].verdict == "insufficient_data"
        assert state.targets["component:format"].pooled_since == 100 * max(0, index - MAX_POOLED_STEPS + 1)
