"""benchmarks/cost.py prices what a rollout really costs (issue 18 item 7): INIT billing, the Fargate image
pull, the Fargate route's extra states and DNS Firewall queries are lines of the table, and the sensitivity to
the endpoint's latency per turn and to the Fargate share is the arithmetic the table uses.

The counts here are a fixed example (the benchmark measures them in moto); what is tested is the pricing."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cost():
    spec = importlib.util.spec_from_file_location("cost_benchmark", ROOT / "benchmarks" / "cost.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


COUNTS = {
    "transitions": 2,
    "history_events": 10,
    "inline_scores": 1,
    "inline_runs": 1,
    "s3_put": 7,
    "s3_get": 3,
    "s3_bytes": 8000,
    "invocations": {"RolloutWorkflowStartEpisodeAAAA0000": 1, "CodeRunnerFunctionBBBB1111": 1},
}
FACTS = {
    "architecture": "arm64",
    "cpu": {},
    "memory_mb": {
        "RolloutWorkflowStartEpisodeAAAA0000": 256,
        "CodeRunnerFunctionBBBB1111": 1769,
        "RolloutWorkflowScoreCCCC2222": 512,
    },
    "cold_s": {"RolloutWorkflowStartEpisodeAAAA0000": 0.5, "CodeRunnerFunctionBBBB1111": 0.4},
    "fargate_delta": {
        "transitions": 3,
        "history_events": 12,
        "s3_put": 1,
        "s3_get": 2,
        "invocations": {"RolloutWorkflowScoreCCCC2222": 1, "CodeRunnerFunctionBBBB1111": -1},
    },
}


def _lines(cost, path="openai", **assume) -> dict[str, float]:
    return {item: value for item, _how, value in cost.price(path, COUNTS, FACTS, **assume)}


def test_the_table_has_the_costs_the_first_tables_left_out(cost):
    lines = _lines(cost)
    for item in (
        "Lambda cold starts (INIT, billed since Aug 2025)",
        "Fargate (long jobs, image pull included)",
        "Fargate route's extra states",
        "DNS Firewall queries",
    ):
        assert lines[item] > 0, item


def test_init_is_billed_for_the_cold_share_of_invocations_at_each_functions_cpu_share(cost):
    rate = cost.PRICE["lambda_gb_s"]["arm64"]
    start = 0.5 * 1769 / 256 * 256 / 1024  # 256 MB gets 256/1769 of a vCPU: the measured 0.5 s takes 6.9 times longer
    runner = (1 - cost.FARGATE_SHARE) * 0.4 * 1769 / 1024
    expected = cost.COLD_START_SHARE * (start + runner) * 1e6 * rate
    assert _lines(cost)["Lambda cold starts (INIT, billed since Aug 2025)"] == pytest.approx(expected)


def test_the_fargate_pull_is_billed_and_the_routes_extra_states_are_priced_per_fargate_rollout(cost):
    per_task = (
        (cost.FARGATE_MIN + cost.FARGATE_PULL_S / 60)
        / 60
        * (cost.PRICE["fargate_vcpu_h"] + 2 * cost.PRICE["fargate_gb_h"])
    )
    assert _lines(cost)["Fargate (long jobs, image pull included)"] == pytest.approx(
        cost.FARGATE_SHARE * 1e6 * per_task
    )
    extra = (
        3 * cost.PRICE["transition"]
        + cost.PRICE["lambda_request"]
        + cost.CONTROL_STEP_S * 0.5 * cost.PRICE["lambda_gb_s"]["arm64"]
        + cost.PRICE["s3_put"]
        + 2 * cost.PRICE["s3_get"]
        + 12 * 350 / 1e9 * cost.PRICE["logs_gb"]
    )
    assert _lines(cost)["Fargate route's extra states"] == pytest.approx(cost.FARGATE_SHARE * 1e6 * extra)
    assert _lines(cost, fargate_share=0.0)["Fargate route's extra states"] == 0


def test_dns_firewall_queries_follow_the_route_mix(cost):
    at = {share: _lines(cost, fargate_share=share)["DNS Firewall queries"] for share in (0.0, 1.0)}
    assert at[0.0] == pytest.approx(cost.DNS_QUERIES_RUNNER * 0.60)
    assert at[1.0] == pytest.approx(cost.DNS_QUERIES_FARGATE * 0.60)


def test_sensitivity_to_the_endpoints_latency_is_the_wait_it_bills(cost):
    """Each extra second per policy turn is 3 turns × 0.25 GB of conversation Lambda waiting, per rollout."""
    five, sixty = (cost.total("openai", COUNTS, FACTS, openai_turn_s=s) for s in (5.0, 60.0))
    assert sixty - five == pytest.approx(3 * 55 * 256 / 1024 * 1e6 * cost.PRICE["lambda_gb_s"]["arm64"])
    assert cost.total("replay", COUNTS, FACTS, openai_turn_s=60.0) == cost.total("replay", COUNTS, FACTS)


def test_sensitivity_to_the_fargate_share_grows_with_it_and_is_printed(cost):
    totals = [cost.total("replay", COUNTS, FACTS, fargate_share=f) for f in cost.FARGATE_SHARES]
    assert totals == sorted(totals) and totals[-1] > totals[0]
    rendered = "\n".join(cost.sensitivity({"replay": COUNTS, "openai": COUNTS}, FACTS))
    assert "seconds the endpoint takes per policy turn" in rendered and "share of jobs on Fargate" in rendered
    assert f"${cost.total('openai', COUNTS, FACTS, openai_turn_s=60.0):,.0f}" in rendered
