"""Round twelve: a component with no value in any scored rollout (None, NaN or inf everywhere) is dead, cause
``no_values``. It was ``insufficient_data`` ("no eligible groups") for ever, so a reward whose judge started
returning None, or failing to NaN, never alarmed: through the library, the TRL callback's ``monitor_batch``
(whose docs invite None) and ``rewardpipe monitor`` on records from elsewhere alike.
"""

from __future__ import annotations

import json
import math
import random

import pytest
from typer.testing import CliRunner

from rewardpipe.cli import app
from rewardpipe.monitoring import Thresholds, monitor_records
from rewardpipe.monitoring.pooling import StepHistory


def records(step: int, judge, groups: int = 16, size: int = 8, seed: int = 0) -> list[dict]:
    """``groups`` groups of ``size``: ``correctness`` a coin flip, ``judge`` whatever ``judge(group, k)`` gives."""
    draw = random.Random(seed * 1000 + step)
    out = []
    for g in range(groups):
        for k in range(size):
            correctness = float(draw.random() < 0.5)
            value = judge(g, k)
            finite = value if isinstance(value, float) and math.isfinite(value) else 0.0
            out.append(
                {
                    "run_id": "r",
                    "step": step,
                    "group_id": f"g{g}",
                    "rollout_id": f"s{step}g{g}k{k}",
                    "task_id": f"t{g}",
                    "status": "scored",
                    "components": {"correctness": correctness, "judge": value},
                    "weights": {"correctness": 1.0, "judge": 1.0},
                    "aggregate": correctness + finite,
                }
            )
    return out


def run(steps: int, judge, **kwargs) -> object:
    return monitor_records([r for step in range(steps) for r in records(step, judge, **kwargs)])


@pytest.mark.parametrize("bad", [None, math.nan, math.inf], ids=["None", "NaN", "inf"])
def test_a_component_without_values_is_dead_and_alarms_once(bad):
    result = run(4, lambda g, k: bad)
    verdicts = [(step.components["judge"].verdict, step.components["judge"].cause) for step in result.steps]
    assert verdicts == [("dead", "no_values")] * 4
    alarms = [(a.kind, a.component, a.step, a.cause) for a in result.alarms]
    assert alarms == [("dead_component", "judge", 0, "no_values")]  # raised once and kept open, no "recovered"
    judge = result.steps[0].components["judge"]
    assert judge.eligible_groups == judge.zero_variance_groups == 16 and judge.zero_variance_group_fraction == 1.0
    counted = "128 None, 0 NaN or inf" if bad is None else "0 None, 128 NaN or inf"
    assert counted in judge.message and "no signal" in judge.message


def test_it_alarms_when_values_stop_and_recovers_when_they_return():
    def judge_for(step):
        return (lambda g, k: random.random()) if step < 2 or step >= 5 else (lambda g, k: None)

    history, state, kinds = StepHistory(), None, []
    for step in range(7):
        result = monitor_records(records(step, judge_for(step)), None, state, history)
        state = result.state
        kinds += [(a.kind, a.step) for a in result.alarms if a.component == "judge"]
    assert kinds == [("dead_component", 2), ("recovered", 5)]


def test_a_component_that_applies_to_some_tasks_only_is_not_dead():
    """None for the groups of other tasks (TRL: a reward function that does not apply) is not "no values"."""
    result = run(3, lambda g, k: random.random() if g % 2 else None)
    assert {step.components["judge"].verdict for step in result.steps} == {"ok"}
    assert not [a for a in result.alarms if a.component == "judge"]


def test_too_few_rollouts_for_a_verdict_still_waits_for_more():
    """Three groups of two: fewer than min_groups (4), so pooled with the next steps rather than judged."""
    first = run(1, lambda g, k: None, groups=3, size=2).steps[0].components["judge"]
    assert (first.verdict, first.cause) == ("insufficient_data", "no_eligible_groups")


def test_small_steps_pool_into_the_verdict():
    history, state, verdicts = StepHistory(), None, []
    for step in range(4):
        result = monitor_records(records(step, lambda g, k: None, groups=2, size=4), Thresholds(), state, history)
        state = result.state
        verdicts += [(s.components["judge"].verdict, s.components["judge"].cause) for s in result.steps]
    assert ("dead", "no_values") in verdicts


def test_the_cli_agrees_and_shows_the_examples(tmp_path):
    rows = [r for step in range(3) for r in records(step, lambda g, k: None)]
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = CliRunner().invoke(app, ["monitor", str(path), "--json"])
    assert out.exit_code in (0, 1), out.output
    report = json.loads(out.stdout)
    assert [step["components"]["judge"]["cause"] for step in report["steps"]] == ["no_values"] * 3
    library = monitor_records(rows)
    assert [a.cause for a in library.alarms] == [a["cause"] for a in report["alarms"]] == ["no_values"]
    examples = report["alarms"][0].get("examples") or []
    assert examples and all("judge = None" in example["reason"] for example in examples)
