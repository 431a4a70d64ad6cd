"""Round thirty-six (fourth wave), the monitor's memory for alarm examples: each group's first scored rollout (its
lead, kept so an alarm past the step's first groups has examples) held the record's components and metrics dicts,
about 800 bytes a group; it now keeps the rollout id, the task id, 8-byte values and the metrics an example reads
(rewardpipe.monitoring.statistics.Leads), and every example, reason and verdict is the same as from the whole record."""

from __future__ import annotations

import ast
import math
import random
import tracemalloc
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rewardpipe.monitoring.examples as examples
import rewardpipe.monitoring.statistics as statistics
from rewardpipe.models import Record
from rewardpipe.monitoring import monitor_records
from rewardpipe.monitoring.pooling import StepHistory
from rewardpipe.monitoring.statistics import EXAMPLE_METRICS, SAMPLE_GROUPS, Leads, SampledRollout, accumulate


class Tracked(dict):  # type: ignore[type-arg]
    """A record's dict that can be watched (a plain dict takes no weak reference)."""


def scored(g: int, i: int, task: str, components: dict[str, Any], aggregate: float, metrics: Any) -> Record:
    """Rollout ``i`` of group ``g`` at step 0, built as given (no validation: a dict subclass and an int stay)."""
    return Record.model_construct(
        run_id="r",
        step=0,
        group_id=f"g{g}",
        rollout_id=f"g{g}-r{i}",
        task_id=task,
        status="scored",
        error=None,
        components=components,
        weights=dict.fromkeys(components, 1.0),
        aggregate=aggregate,
        metrics=metrics,
    )


def streamed(groups: int, size: int = 4, *, watch: list[Any] | None = None) -> Iterator[Record]:
    """Records made one at a time (nothing holds them but the monitor); each components and metrics dict goes
    to ``watch`` as a weak reference."""
    rnd = random.Random(groups)
    for g in range(groups):
        for i in range(size):
            components = Tracked(correctness=0.0 if g % 3 else rnd.random(), style=rnd.choice((0.0, 1.0)))
            metrics = Tracked(exec_status="failed", tests_passed=0, tests_total=4, transcript="x" * 200)
            if watch is not None:
                watch += [weakref.ref(components), weakref.ref(metrics)]
            aggregate = components["correctness"] + 0.5 * components["style"]
            yield scored(g, i, f"t{g % 7}", components, aggregate, metrics)


def test_a_group_beyond_the_sample_holds_none_of_its_records_dicts():
    """Before: every group's lead held its record's components and metrics (600 groups: 584 of each alive after
    the records were gone). Only the sample's rollouts (the first 16 groups, in full) still hold theirs."""
    watch: list[Any] = []
    _, steps = accumulate(streamed(600, watch=watch))
    alive = sum(ref() is not None for ref in watch)
    assert alive == 2 * SAMPLE_GROUPS * 4, alive
    assert len(steps[0].leads) == 600  # every group still has a lead an example can name


def kept_bytes(groups: int) -> int:
    """Bytes the step's accumulator still holds after reading ``groups`` streamed groups."""
    tracemalloc.start()
    try:
        _, steps = accumulate(streamed(groups))
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del steps
    return held


def test_what_a_group_beyond_the_sample_costs_is_its_figures_and_its_lead_ids():
    """Per extra group: its figures (two components and the aggregate, six numbers each, while reading) and a lead
    of an id, two 8-byte values and a few references; before, its lead kept the record's two dicts, their float
    objects too: about 1,050 bytes a group here against about 740 now."""
    small, large = kept_bytes(1000), kept_bytes(3000)
    per_group = (large - small) / 2000
    assert per_group < 900, per_group


def mixed_run() -> list[Record]:
    """A step whose first groups show nothing, and later groups that show each example path of a lead: a dead
    outcome (the execution's reason), cancelling components, a lone value, a None and an int value (kept whole)."""
    rnd = random.Random(4)
    out = []
    for g in range(3 * SAMPLE_GROUPS):
        late = g >= SAMPLE_GROUPS
        for i in range(4):
            a = rnd.random() if not late else (1.0 if i % 2 else 0.0)
            components: dict[str, Any] = {
                "correctness": rnd.random() if not late else -0.0,
                "a": a,
                "b": rnd.random() if not late else 1.0 - a,  # a + b constant: the aggregate cancels
                "lone": (0.5 if i == 0 else None) if late else None,
            }
            if g == 2 * SAMPLE_GROUPS:
                components["a"] = 1  # an int a caller put in by hand: kept whole, printed as given
            values = [v for v in components.values() if v is not None]
            metrics = {"exec_status": "failed", "exec_reason": f"\x1b[31massert {g}", "other": "y" * 50}
            out.append(scored(g, i, f"t{g}", components, float(sum(values)), metrics))
    return out


def whole_leads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Leads, "add", lambda self, rec: self.__setitem__(rec.group_id, SampledRollout(rec)))


def test_every_result_is_the_one_whole_leads_give(monkeypatch):
    """The whole JSON result (verdicts, alarms, examples and their reasons) matches the one with each lead kept as a
    whole rollout, for a run whose alarms take their examples from leads beyond the sample."""
    records = mixed_run()
    compact = monitor_records(iter(records), dedupe=False).to_dict()
    examples_shown = [e for a in compact["alarms"] for e in a["examples"]]
    assert any(int(e["group_id"][1:]) >= SAMPLE_GROUPS for e in examples_shown)  # leads were used
    with monkeypatch.context() as patch:
        whole_leads(patch)
        whole = monitor_records(iter(records), dedupe=False).to_dict()
    assert compact == whole


def test_a_pooled_run_gives_the_same_examples(monkeypatch):
    """Small steps pooled (their leads rebuilt from each step's compact store) give the examples whole leads give."""

    def run() -> list[dict[str, Any]]:
        history, state, alarms = StepHistory(), None, []
        for step in range(2):
            records = [r.model_copy(update={"step": step}) for r in mixed_run()[: 4 * (SAMPLE_GROUPS + 3)]]
            result = monitor_records(records, None, state, history)
            state, alarms = result.state, alarms + [a.to_dict() for a in result.alarms]
        return alarms

    compact = run()
    assert any(a["figures"].get("pooled_steps") == [0, 1] and a["examples"] for a in compact)
    with monkeypatch.context() as patch:
        whole_leads(patch)
        assert run() == compact


def test_a_rebuilt_lead_equals_its_record():
    """Field by field, with a negative zero, an infinity-free float of every kind and the metrics an example reads."""
    leads = Leads()
    rec = Record.model_construct(
        run_id="r",
        step=0,
        group_id="g",
        rollout_id="g-0",
        task_id="t",
        status="scored",
        error=None,
        components={"z": -0.0, "tiny": 5e-324, "big": 1e300},
        weights={},
        aggregate=1e300,
        metrics={"committed": False, "questions": 2, "assistant_turns": 3, "note": "not read"},
    )
    leads.add(rec)
    lead = leads.get("g")
    assert lead is not None
    assert (lead.rollout_id, lead.group_id, lead.task_id, lead.status, lead.error) == ("g-0", "g", "t", "scored", None)
    assert lead.aggregate == rec.aggregate
    assert lead.components == rec.components
    assert math.copysign(1.0, lead.components["z"]) == -1.0
    assert lead.metrics == {"committed": False, "questions": 2, "assistant_turns": 3}
    assert leads.task_and_rollout("g") == ("t", "g-0")


def metric_keys_read(tree: ast.AST) -> set[str]:
    """Every constant key read from a ``metrics`` mapping (``m`` or ``….metrics``) with ``.get``, ``[...]`` or
    ``in``."""

    def is_metrics(node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id == "m") or (
            isinstance(node, ast.Attribute) and node.attr == "metrics"
        )

    keys = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            if is_metrics(node.func.value) and node.args and isinstance(node.args[0], ast.Constant):
                keys.add(node.args[0].value)
        elif isinstance(node, ast.Subscript) and is_metrics(node.value) and isinstance(node.slice, ast.Constant):
            keys.add(node.slice.value)
        elif (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Constant)
            and any(is_metrics(c) for c in node.comparators)
        ):
            keys.add(node.left.value)
    return keys


def test_a_lead_keeps_every_metric_an_example_reads():
    """A metric an example's reason reads but a lead drops would change the reason of an example beyond the sample."""
    read = metric_keys_read(ast.parse(Path(examples.__file__).read_text()))
    assert {"exec_status", "committed", "questions"} <= read  # (the parse finds them)
    assert read <= set(EXAMPLE_METRICS), read - set(EXAMPLE_METRICS)
    assert statistics.EXAMPLE_METRICS is EXAMPLE_METRICS
