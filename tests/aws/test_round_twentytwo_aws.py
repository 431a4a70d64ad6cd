"""Round twenty-two, AWS path (an independent review, "moto is not AWS"): what the real services refuse that moto
took.

* CloudWatch takes a metric value only when it is 0 or of magnitude 8.515920e-109 to 1.174271e+108 (no NaN or
  infinity). A record may hold any component value up to ±1e100, so a component whose values are tiny (a
  probability-like shaping term of ``exp(-300)``) gave a ``ComponentMean`` and a ``WithinGroupStd`` below that
  range: CloudWatch refused the point, and the variance check's metrics of that component were lost (its
  alarms starved of data). Such a magnitude is sent as 0.0, one above the range as the largest value; the
  harness's EMF check now refuses a value outside the range, as CloudWatch does.
* Bedrock Converse takes ``temperature`` and ``topP`` from 0 to 1, ``maxTokens`` of at least 1 and at most 2,500
  non-empty stop sequences; botocore checks types and minimums only, and moto has no Converse (the tests stub
  botocore). A judge given OpenAI's ``temperature=1.5`` (OpenAI takes up to 2) sent a request Bedrock refuses
  on every sample: each judged sample an error record naming a ValidationException, a paid round trip each. The
  request is now checked as Bedrock checks it, before it is sent, and the error names the parameter.
"""

from __future__ import annotations

import json
import math

import pytest

from rewardpipe.aws.metrics import METRIC_VALUE_LARGEST, MetricPoint, emit, metric_value
from tests.aws import harness
from tests.aws.handlers import Context
from tests.aws.test_round_sixteen_aws import _docs, _record, monitor  # noqa: F401 - the fixture

pytestmark = pytest.mark.xdist_group("cdk")


def test_the_harness_refuses_a_metric_value_cloudwatch_refuses():
    doc = {
        "_aws": {"CloudWatchMetrics": [{"Namespace": "N", "Dimensions": [["run"]], "Metrics": [{"Name": "M"}]}]},
        "run": "r",
    }
    for value in (1e-120, -1e-120, 1e109, [0.5, 1e-200]):
        assert harness.emf_violations(json.dumps({**doc, "M": value})) != [], value
    for value in (0, 0.0, 1e-100, -1e100, [0.5, 1.0]):
        assert harness.emf_violations(json.dumps({**doc, "M": value})) == [], value


def test_a_metric_value_is_one_cloudwatch_takes():
    assert metric_value(1e-120) == 0.0 and metric_value(-1e-300) == 0.0
    assert metric_value(1e200) == METRIC_VALUE_LARGEST and metric_value(-1e200) == -METRIC_VALUE_LARGEST
    assert metric_value(0.25) == 0.25 and metric_value(0.0) == 0.0


def test_emit_prints_a_tiny_value_as_zero(capsys):
    emit([MetricPoint("ComponentMean", 1e-150, "None", {"component": "c"})])
    stdout = capsys.readouterr().out
    assert harness.emf_violations(stdout) == []
    (doc,) = _docs(stdout)
    assert doc["ComponentMean"] in (0.0, [0.0])


def test_the_variance_check_of_a_component_with_tiny_values_sends_every_point(monitor, capsys):  # noqa: F811
    store, handler = monitor
    tiny = [math.exp(-300), 0.0, 2 * math.exp(-300), 0.0]  # 5e-131: a record holds it (|value| <= 1e100)
    for group in range(4):
        for i in range(4):
            store.put_record(_record("r22", group, i, {"correctness": [0.0, 1.0, 0.5, 1.0][i], "odds": tiny[i]}))
    handler.lambda_handler({"run_id": "r22", "step": 0}, Context())
    stdout = capsys.readouterr().out
    # Before: "metric ComponentMean value 1.9e-131: magnitude outside ..." (and WithinGroupStd's).
    assert harness.emf_violations(stdout) == []
    sent = {
        (d.get("component"), name) for d in _docs(stdout) for name in ("ComponentMean", "WithinGroupStd") if name in d
    }
    assert {("odds", "ComponentMean"), ("odds", "WithinGroupStd")} <= sent


# -- Bedrock Converse's inference parameters --------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "said"),
    [
        ({"temperature": 1.5}, "temperature must be a number from 0 to 1, got 1.5"),
        ({"top_p": -0.1}, "topP must be a number from 0 to 1"),
        ({"max_tokens": 0}, "maxTokens"),
        ({"stop": ""}, "every stop sequence must be non-empty text"),
        ({"stop": ["x"] * 2501}, "at most 2500"),
    ],
)
def test_a_converse_request_bedrock_refuses_is_not_sent_and_names_the_parameter(params, said):
    import boto3
    from botocore.stub import Stubber

    from rewardpipe.bedrock import BedrockChatClient

    client = boto3.client("bedrock-runtime", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stubber:  # no response queued: a request sent would fail the stub
        chat = BedrockChatClient("anthropic.claude-3-haiku-20240307-v1:0", client=client, sleep=lambda _: None)
        with pytest.raises(ValueError, match=said):
            chat.complete([{"role": "user", "content": "grade"}], **params)
        stubber.assert_no_pending_responses()


def test_the_parameters_bedrock_takes_still_go_out():
    from rewardpipe.bedrock import converse_request

    request = converse_request(
        "m", [{"role": "user", "content": "q"}], {"temperature": 1, "top_p": 0.0, "max_tokens": 1, "stop": "\n"}
    )
    assert request["inferenceConfig"] == {"temperature": 1, "topP": 0.0, "maxTokens": 1, "stopSequences": ["\n"]}


def test_a_judge_with_a_temperature_bedrock_refuses_says_so_in_its_error_record():
    import boto3
    from botocore.stub import Stubber

    from rewardpipe import Message, Reward
    from rewardpipe.bedrock import BedrockChatClient
    from rewardpipe.judges import llm_judge

    client = boto3.client("bedrock-runtime", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stubber:
        chat = BedrockChatClient("anthropic.claude-3-haiku-20240307-v1:0", client=client, sleep=lambda _: None)
        graded = llm_judge("graded", "Is it right?", range=(0, 1), client=chat, params={"temperature": 1.5})
        score = Reward("r", [graded]).score([Message(role="user", content="q"), Message(role="assistant", content="a")])
        stubber.assert_no_pending_responses()
    assert score.aggregate is None and "temperature must be a number from 0 to 1" in score.error.message
