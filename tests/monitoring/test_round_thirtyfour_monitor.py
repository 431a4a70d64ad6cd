"""Round thirty-four, the monitor: per-run CloudWatch metrics bounded, triage's ``never``/``always`` judged by the
monitor's zero-variance rule, reserved component names in a run manifest, the LLM user's fallbacks, and model text
in what the monitor writes."""

from __future__ import annotations

import pytest

from tests.monitoring.test_round_thirtythree_followups import _records


def _task_records(values_of_group, weights, groups=4):
    """One step of one task; every rollout of group ``g`` has the components ``values_of_group(g)``."""
    return _records(values_of_group, weights, steps=1, groups=groups, by_group=True)


# -- 2. triage's never/always follow the monitor's zero-variance rule ----------------------------------------------


def _triage(records, thresholds=None):
    from rewardpipe.monitoring.report import build_report

    return {e["component"]: e for e in build_report(records, thresholds)["task_triage"]}


def test_triage_never_is_judged_at_the_values_scale():
    # values near 1e6 differing by 0.3 between groups: rounding dust at that scale (the groups' own rule calls a
    # spread of 1 zero variance there), so the task sits at its minimum
    records = _task_records(lambda g: {"huge": 1e6 + 0.3 * g, "plain": 0.5}, {"huge": 1.0, "plain": 1.0})
    entry = _triage(records)["huge"]
    assert entry["verdict"] == "never"
    assert entry["value"] == 1e6


def test_triage_never_is_judged_at_the_components_weight():
    # under weight 1e8 a difference of 1e-8 is a whole reward unit: the task's groups differ, it is not "never"
    records = _task_records(lambda g: {"tiny": 1e-8 * g, "plain": 0.5}, {"tiny": 1e8, "plain": 1.0})
    entry = _triage(records)["tiny"]
    assert entry["verdict"] == "constant"
    assert entry["value"] is None


def test_triage_labels_follow_the_monitors_epsilon():
    from rewardpipe.monitoring.thresholds import Thresholds

    records = _task_records(lambda g: {"plain": 0.02 * g}, {"plain": 1.0})
    assert _triage(records)["plain"]["verdict"] == "constant"
    assert _triage(records, Thresholds(epsilon=0.1))["plain"]["verdict"] == "never"


# -- 3. a run manifest declaring a reserved component name ---------------------------------------------------------


@pytest.mark.parametrize("name", ["aggregate", "errors"])
def test_a_manifest_cannot_declare_a_reserved_name(tmp_path, name):
    from rewardpipe.aws.monitoring import MetricComponents
    from rewardpipe.monitoring.thresholds import ManifestWarning, run_thresholds
    from rewardpipe.store import LocalStore, manifest_key

    store = LocalStore(tmp_path)
    declared = {"plain": {"range": [0, 1], "role": "shaping"}, name: {"range": [-1, 1], "role": "outcome"}}
    store.put_json(manifest_key("r1"), {"components": declared})
    with pytest.warns(ManifestWarning, match=rf"run manifest field components\.{name}: '{name}' is reserved"):
        th = run_thresholds(None, store, "r1")
    # declared the outcome, the monitor's own target replaced the reward's outcome components (correctness)
    assert name not in th.roles and name not in th.ranges and name not in th.outcome_components
    assert th.outcome_components == ("correctness",)
    assert th.roles["plain"] == "shaping"  # the rest of the manifest still applies
    with pytest.warns(ManifestWarning):
        assert MetricComponents(store).declared("r1") == {"plain"}
