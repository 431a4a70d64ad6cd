"""Round thirty-three, the monitor's follow-ups: the dashboard stays within CloudWatch's dashboard quotas however
many components the reward has."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk import aws_cloudwatch as cw

from stacks.constructs.monitoring import (
    COMPONENT_GRAPHS,
    DASHBOARD_METRICS,
    DASHBOARD_WIDGET_METRICS,
    add_dashboard_graphs,
)

pytestmark = pytest.mark.xdist_group("cdk")

ALARMS = SimpleNamespace(zero_variance_fraction=0.9, error_rate=0.2, dead_steps=3, error_steps=3)


def _body(components: list[str]) -> tuple[dict, list[str]]:
    """The dashboard body CloudFormation would be given (tokens as placeholders), and the components left out."""
    app = App()
    stack = Stack(app, "s")
    dashboard = cw.Dashboard(stack, "D")
    runner = cw.Metric(namespace="AWS/Lambda", metric_name="Duration", statistic="p99")
    left_out = add_dashboard_graphs(dashboard, components, Duration.minutes(5), ALARMS, runner)
    template = app.synth().get_stack_by_name("s").template
    (resource,) = template["Resources"].values()
    body = resource["Properties"]["DashboardBody"]
    if isinstance(body, dict):  # {"Fn::Join": ["", [text, token, text...]]}
        body = "".join(part if isinstance(part, str) else "TOKEN" for part in body["Fn::Join"][1])
    return json.loads(body), left_out


def _metrics(widget: dict) -> int:
    return len(widget.get("properties", {}).get("metrics", []))


def test_a_default_reward_keeps_one_graph_per_figure():
    body, left_out = _body(["correctness", "asked_before_coding", "guessed_immediately", "loop_penalty"])
    assert left_out == []
    titles = [w["properties"].get("title") for w in body["widgets"]]
    assert "Within-group std by component" in titles and "Component mean" in titles
    assert not any(w["type"] == "text" for w in body["widgets"])


@pytest.mark.parametrize("count", [101, 300, 1000])
def test_a_large_reward_is_graphed_within_cloudwatchs_dashboard_quotas(count):
    components = [f"c{i:04d}" for i in range(count)]
    body, left_out = _body(components)
    widgets = body["widgets"]
    assert max(map(_metrics, widgets)) <= DASHBOARD_WIDGET_METRICS
    assert sum(map(_metrics, widgets)) <= DASHBOARD_METRICS
    graphed = {
        entry[entry.index("component") + 1]
        for w in widgets
        for entry in w.get("properties", {}).get("metrics", [])
        if "component" in entry
    }
    # every component is graphed or named as left out, in the order the reward gives them
    assert sorted(graphed) == components[: len(graphed)] and left_out == components[len(graphed) :]
    assert len(graphed) >= (DASHBOARD_METRICS - 10) // COMPONENT_GRAPHS or not left_out
    if left_out:
        (note,) = [w for w in widgets if w["type"] == "text"]
        assert f"{len(left_out)} of the reward's {count} components" in note["properties"]["markdown"]
    split = [w["properties"]["title"] for w in widgets if "Within-group std" in w["properties"].get("title", "")]
    assert len(split) == -(-len(graphed) // DASHBOARD_WIDGET_METRICS)
