"""Round twenty-seven: the single-turn reward Lambda against the Nova Forge SDK's own checks.

The SDK's ``verify_reward_function`` (``amzn_nova_forge.util.reward_verifier``) tests a reward Lambda *file*
before a training job by calling ``lambda_handler(samples, {})``: an empty dict for the context, never a
Lambda context object. It then checks each result with ``_validate_output_format``: ``id`` present,
``aggregate_reward_score`` an int or float, each ``metrics_list`` entry a dict with a string ``name``, a
number ``value`` and a ``type`` of "Metric" or "Reward".
"""

from __future__ import annotations

import pytest

from tests.aws.handlers import load


def _sample(sample_id, answer, reference="42"):
    # the SDK's documented sample: the reference at the top level, no metadata
    return {
        "id": sample_id,
        "reference_answer": reference,
        "messages": [{"role": "user", "content": "What is 6 * 7?"}, {"role": "assistant", "content": f"#### {answer}"}],
    }


def _sdk_output_problems(result) -> list[str]:
    """What the SDK's per-result check would say (its rules, restated)."""
    problems = []
    if not isinstance(result, dict):
        return ["not a dict"]
    if "id" not in result:
        problems.append("no id")
    if not isinstance(result.get("aggregate_reward_score"), (int, float)):
        problems.append("aggregate_reward_score not a number")
    for metric in result.get("metrics_list", []):
        if not isinstance(metric, dict):
            problems.append("metric not a dict")
            continue
        if not isinstance(metric.get("name"), str):
            problems.append("metric name not a string")
        if not isinstance(metric.get("value"), (int, float)):
            problems.append("metric value not a number")
        if metric.get("type") not in ("Metric", "Reward"):
            problems.append("metric type")
    return problems


@pytest.fixture
def gsm8k(monkeypatch):
    monkeypatch.setenv("REWARD_NAME", "gsm8k")
    monkeypatch.delenv("REWARD_WEIGHTS", raising=False)
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    return load("single_turn_reward")


@pytest.mark.parametrize("context", [{}, None], ids=["empty-dict", "none"])
def test_the_sdk_local_verification_call_without_a_lambda_context_scores_the_batch(gsm8k, context):
    """``handler(sample_data, {})`` raised AttributeError ('dict' object has no attribute 'function_name'), so
    the SDK marked every sample failed ("Handler execution failed")."""
    samples = [_sample("right", 42), _sample("wrong", 41), _sample("no-reference", 42, reference=None)]
    results = gsm8k.lambda_handler(samples, context)
    assert [r["id"] for r in results] == ["right", "wrong", "no-reference"]
    assert [_sdk_output_problems(r) for r in results] == [[], [], []]
    assert results[0]["aggregate_reward_score"] == pytest.approx(1.5)
    assert results[1]["aggregate_reward_score"] == pytest.approx(0.5)
    flags = {m["name"]: m["value"] for m in results[2]["metrics_list"]}
    assert flags["reward_error"] == 1 and flags["error_bad_reference"] == 1
