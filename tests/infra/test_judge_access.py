"""The judge construct on a small stack of its own (the full stack's Bedrock judge is in test_user_package.py):
an OpenAI-compatible judge's settings and secret, on the functions given and nothing else."""

from __future__ import annotations

import pytest

from stacks.config import JudgeSettings

pytestmark = pytest.mark.xdist_group("cdk")


def _stack(judge: JudgeSettings) -> dict:
    from aws_cdk import App, Stack
    from aws_cdk import aws_lambda as _lambda
    from aws_cdk.assertions import Template

    from stacks.constructs.judge import JudgeAccess

    stack = Stack(App(), "JudgeTest")
    functions = [
        _lambda.Function(
            stack,
            name,
            runtime=_lambda.Runtime.PYTHON_3_13,
            handler="index.handler",
            code=_lambda.Code.from_inline("def handler(e, c): return e"),
        )
        for name in ("Scores", "Bystander")
    ]
    JudgeAccess(stack, "Judge", judge=judge, functions=functions[:1])
    return Template.from_stack(stack).to_json()


def _function(template: dict, prefix: str) -> dict:
    (found,) = [
        r["Properties"]
        for k, r in template["Resources"].items()
        if r["Type"] == "AWS::Lambda::Function" and k.startswith(prefix)
    ]
    return found


def _statements(template: dict, role_prefix: str) -> list[dict]:
    return [
        st
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy"
        and any(ref["Ref"].startswith(role_prefix) for ref in r["Properties"]["Roles"])
        for st in r["Properties"]["PolicyDocument"]["Statement"]
    ]


@pytest.mark.parametrize(
    "secret, resource_fragment",
    [
        ("judge-api-key", ":secret:judge-api-key-??????"),
        (
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:judge-api-key-AbCdEf",
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:judge-api-key-AbCdEf",
        ),
    ],
)
def test_an_openai_compatible_judge_reads_its_secret_only_from_the_functions_that_score(secret, resource_fragment):
    template = _stack(JudgeSettings(base_url="https://judge.example.com/v1", model="judge-1", api_key_secret=secret))
    variables = _function(template, "Scores")["Environment"]["Variables"]
    assert variables == {
        "JUDGE_BASE_URL": "https://judge.example.com/v1",
        "JUDGE_MODEL": "judge-1",
        "JUDGE_API_KEY_SECRET": secret,
    }
    (statement,) = _statements(template, "ScoresServiceRole")
    assert sorted(statement["Action"]) == ["secretsmanager:DescribeSecret", "secretsmanager:GetSecretValue"]
    import json

    assert resource_fragment in json.dumps(statement["Resource"])
    assert "Environment" not in _function(template, "Bystander")
    assert _statements(template, "BystanderServiceRole") == []


def test_a_bedrock_judge_is_granted_its_model_in_the_deploying_partition_and_region():
    template = _stack(JudgeSettings(bedrock_model_id="amazon.nova-lite-v1:0"))
    (statement,) = _statements(template, "ScoresServiceRole")
    assert statement["Action"] == "bedrock:InvokeModel"
    model = "amazon.nova-lite-v1:0"
    assert statement["Resource"] == {
        "Fn::Join": [
            "",
            ["arn:", {"Ref": "AWS::Partition"}, ":bedrock:", {"Ref": "AWS::Region"}, f"::foundation-model/{model}"],
        ]
    }
    assert _function(template, "Scores")["Environment"]["Variables"] == {"JUDGE_BEDROCK_MODEL_ID": model}


def test_no_judge_adds_nothing():
    template = _stack(JudgeSettings())
    assert _statements(template, "ScoresServiceRole") == []
    assert "Environment" not in _function(template, "Scores")
