"""The Nova Forge single-turn reward Lambda: contract, tolerance, and a fuzz test."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.aws import harness
from tests.aws.handlers import Context, load


def _sample(sample_id, answer, *, where="metadata", reference="42"):
    sample = {
        "id": sample_id,
        "messages": [
            {"role": "user", "content": "What is 6 * 7? End with #### <answer>."},
            {"role": "nova_assistant", "content": [{"type": "text", "text": f"6 * 7 = {answer}\n#### {answer}"}]},
        ],
    }
    if where == "metadata":
        sample["metadata"] = {"reference_answer": reference, "task_id": "t1"}
    elif where == "top":
        sample["reference_answer"] = reference
    elif where == "text":
        sample["metadata"] = {"reference_answer": {"text": reference}}
    return sample


@pytest.fixture
def gsm8k(monkeypatch):
    monkeypatch.setenv("REWARD_NAME", "gsm8k")
    monkeypatch.delenv("REWARD_WEIGHTS", raising=False)
    return load("single_turn_reward")


def _metrics(result) -> dict:
    return {m["name"]: (m["value"], m["type"]) for m in result["metrics_list"]}


def test_batch_in_order_with_ids_echoed_and_typed_metrics(gsm8k):
    ids = ["b", 7, {"nested": "id"}, "a"]
    samples = [
        _sample(ids[0], 42),
        _sample(ids[1], 41),
        _sample(ids[2], 42, where="top"),
        _sample(ids[3], 42, where="text"),
    ]
    results = gsm8k.lambda_handler(samples, Context())
    assert [r["id"] for r in results] == ids
    scores = [r["aggregate_reward_score"] for r in results]
    assert scores[0] == pytest.approx(1.5) and scores[2] == pytest.approx(1.5) and scores[3] == pytest.approx(1.5)
    assert scores[1] == pytest.approx(0.5)  # formatted, wrong answer
    first = _metrics(results[0])
    assert first["answer_correct"] == (1.0, "Reward") and first["format"][1] == "Reward"
    assert first["reward_error"] == (0, "Metric")
    assert all(m["type"] in ("Reward", "Metric") for r in results for m in r["metrics_list"])
    json.dumps(results)  # the response must serialise


def test_a_single_object_is_answered_as_a_batch_of_one(gsm8k):
    results = gsm8k.lambda_handler(_sample("solo", 42), Context())
    assert (
        len(results) == 1 and results[0]["id"] == "solo" and results[0]["aggregate_reward_score"] == pytest.approx(1.5)
    )


def test_malformed_samples_get_error_results_and_the_batch_survives(gsm8k):
    samples = [
        _sample("ok", 42),
        {"id": "no-messages"},
        "not an object",
        _sample("no-ref", 42, where="none"),
        {"id": "bad-role", "messages": [{"role": "", "content": "x"}]},
    ]
    results = gsm8k.lambda_handler(samples, Context())
    assert len(results) == len(samples)
    assert results[0]["aggregate_reward_score"] == pytest.approx(1.5) and _metrics(results[0])["reward_error"][0] == 0
    for result in results[1:]:
        # Default error_reward=neutral: the only scored sample's reward (its prompt's, or the batch's, mean),
        # so an unscorable sample moves GRPO nowhere; always flagged.
        assert result["aggregate_reward_score"] == pytest.approx(1.5)
        assert _metrics(result)["reward_error"] == (1, "Metric")
    assert [r["id"] for r in results] == ["ok", "no-messages", None, "no-ref", "bad-role"]


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "What is 6 * 7? End with #### <answer>."}],
        [],
        [{"role": "system", "content": "be brief"}],
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "#### 42"}],
    ],
)
def test_a_sample_without_an_answer_is_flagged_malformed_not_scored_zero(gsm8k, messages):
    """No assistant message is no answer: flagged like any malformed sample (before: 0.0 with reward_error 0)."""
    bad = {"id": "no-answer", "messages": messages, "metadata": {"reference_answer": "42"}}
    results = gsm8k.lambda_handler([_sample("ok", 42), bad], Context())
    assert _metrics(results[0])["reward_error"] == (0, "Metric")
    flagged = _metrics(results[1])
    assert flagged["reward_error"] == (1, "Metric") and flagged["error_malformed_sample"] == (1, "Metric")
    assert results[1]["aggregate_reward_score"] == pytest.approx(1.5)  # neutral: the batch's scored mean


def test_reward_is_chosen_by_configuration(monkeypatch):
    monkeypatch.setenv("REWARD_NAME", "code_correctness")
    handler = load("single_turn_reward")
    reference = {
        "entry_point": "add",
        "tests": (
            "import unittest\nclass T(unittest.TestCase):\n"
            "    def test_a(self):\n        self.assertEqual(add(1, 2), 3)\n"
            "    def test_b(self):\n        self.assertEqual(add(-1, 1), 0)\n"
        ),
    }
    good = {
        "id": "g",
        "messages": [
            {"role": "user", "content": "add"},
            {"role": "assistant", "content": "```python\ndef add(a, b):\n    return a + b\n```"},
        ],
        "metadata": {"reference_answer": reference},
    }
    bad = {
        "id": "b",
        "messages": [
            {"role": "user", "content": "add"},
            {"role": "assistant", "content": "```python\ndef add(a, b):\n    return a - b\n```"},
        ],
        "reference_answer": reference,
    }
    results = handler.lambda_handler([good, bad], Context())
    assert _metrics(results[0])["reward_error"][0] == 0 and _metrics(results[1])["reward_error"][0] == 0
    assert results[0]["aggregate_reward_score"] > results[1]["aggregate_reward_score"]


@pytest.mark.xdist_group("cdk")
def test_the_deployed_function_answers_through_lambda_invoke(deployment):
    """The synthesized function (name contains SageMaker, env from the template) through moto's Invoke API."""
    import boto3

    name = deployment.function_name("SingleTurnReward")
    assert "SageMaker" in name
    client = boto3.client("lambda", region_name=harness.REGION)
    response = client.invoke(FunctionName=name, Payload=json.dumps([_sample("x", 42), {"id": "y"}]))
    assert "FunctionError" not in response
    results = json.loads(response["Payload"].read())
    assert [r["id"] for r in results] == ["x", "y"]
    assert results[0]["aggregate_reward_score"] == pytest.approx(1.5)


# Lambda events arrive as JSON, so the fuzz stays within JSON values (no NaN or infinity).
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "nova_assistant", "", 3]),
        "content": json_values | st.text(max_size=60),
    }
)
sample = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"id": json_values, "messages": st.lists(message, max_size=3) | json_values},
        optional={
            "metadata": st.fixed_dictionaries({}, optional={"reference_answer": json_values}) | json_values,
            "reference_answer": json_values | st.fixed_dictionaries({"text": json_values}),
        },
    ),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(event=st.lists(sample, max_size=6) | sample)
def test_fuzz_every_sample_is_answered_and_nothing_raises(gsm8k, event):
    results = gsm8k.lambda_handler(event, Context())
    assert isinstance(results, list)
    if isinstance(event, list):
        assert len(results) == len(event)  # one answer per sample, in order (none for an empty batch)
        for raw, result in zip(event, results, strict=True):
            expected_id = raw.get("id") if isinstance(raw, dict) else None
            assert result["id"] == expected_id
    else:
        assert len(results) == 1  # a single object (or junk) is answered as a batch of one
    for result in results:
        assert math.isfinite(result["aggregate_reward_score"])
        names = [m["name"] for m in result["metrics_list"]]
        assert "reward_error" in names
        assert all(m["type"] in ("Reward", "Metric") and math.isfinite(m["value"]) for m in result["metrics_list"])
    json.dumps(results, allow_nan=False)


class NearlyOutOfTime(Context):
    """Lambda's context with less time left than the handler keeps in reserve."""

    def get_remaining_time_in_millis(self) -> int:
        return 12_000


def _code_sample(sample_id, prompt="add"):
    reference = {
        "entry_point": "add",
        "tests": (
            "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n"
            "        self.assertEqual(add(1, 2), 3)\n"
        ),
    }
    return {
        "id": sample_id,
        "messages": [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": "```python\ndef add(a, b):\n    return a + b\n```"},
        ],
        "metadata": {"reference_answer": reference},
    }


def test_a_batch_with_no_time_left_is_answered_flagged_instead_of_timing_out(monkeypatch):
    monkeypatch.setenv("REWARD_NAME", "code_correctness")
    monkeypatch.delenv("ERROR_REWARD", raising=False)
    handler = load("single_turn_reward")
    results = handler.lambda_handler([_code_sample("a"), _code_sample("b")], NearlyOutOfTime())
    assert [r["id"] for r in results] == ["a", "b"]
    for result in results:
        assert _metrics(result)["reward_error"][0] == 1
        assert _metrics(result)["error_deadline_exceeded"][0] == 1
        assert math.isfinite(result["aggregate_reward_score"])


def test_error_reward_setting_decides_what_nova_sees(monkeypatch, gsm8k):
    samples = [_sample("ok", 42), _sample("broken", 42, reference=None)]
    neutral = gsm8k.lambda_handler(samples, Context())
    assert neutral[1]["aggregate_reward_score"] == pytest.approx(neutral[0]["aggregate_reward_score"])
    assert _metrics(neutral[1])["reward_error"][0] == 1

    monkeypatch.setenv("ERROR_REWARD", "zero")
    assert load("single_turn_reward").lambda_handler(samples, Context())[1]["aggregate_reward_score"] == 0.0

    monkeypatch.setenv("ERROR_REWARD", "fail_batch")
    from rewardpipe.single_turn import BatchFailed

    with pytest.raises(BatchFailed):
        load("single_turn_reward").lambda_handler(samples, Context())


@pytest.mark.xdist_group("cdk")
def test_an_answer_over_lambdas_6_mb_response_limit_is_trimmed_not_lost(deployment):
    """Many short samples (2.6 MB in) make a full answer of 6.9 MB, which Lambda would refuse as a whole
    ("Response payload size exceeded"): the harness fails any response over 6 MB. Diagnostics are dropped
    instead; every sample keeps its answer, in order, with its score."""
    import boto3

    samples = [
        {
            "id": f"s{i}",
            "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "#### 4"}],
            "reference_answer": "4",
        }
        for i in range(20_000)
    ]
    client = boto3.client("lambda", region_name=harness.REGION)
    response = client.invoke(FunctionName=deployment.function_name("SingleTurnReward"), Payload=json.dumps(samples))
    assert "FunctionError" not in response
    results = json.loads(response["Payload"].read())
    assert [r["id"] for r in results] == [s["id"] for s in samples]
    assert all(r["aggregate_reward_score"] == pytest.approx(1.5) for r in results)
    assert {m["name"] for m in results[0]["metrics_list"]} <= {"format", "answer_correct", "reward_error"}


class AlmostNoTimeLeft(Context):
    def get_remaining_time_in_millis(self) -> int:
        return 3_000  # less than the reserve for sending the answer


def test_a_batch_with_only_the_answer_reserve_left_is_answered_flagged_even_without_code(gsm8k):
    results = gsm8k.lambda_handler([_sample("a", 42), _sample("b", 41)], AlmostNoTimeLeft())
    assert [r["id"] for r in results] == ["a", "b"]
    assert all(_metrics(r)["error_deadline_exceeded"][0] == 1 and _metrics(r)["reward_error"][0] == 1 for r in results)
