"""The LLM judge's settings and permissions, on the functions that score (``judge`` in the settings).

* a Bedrock judge (``judge.bedrock_model_id``): ``JUDGE_BEDROCK_MODEL_ID``, and ``bedrock:InvokeModel`` (the
  permission the Converse API authorizes with) on that one foundation model's ARN in the stack's partition and
  region, nothing else;
* an OpenAI-compatible judge (``judge.base_url``, ``model``, ``api_key_secret``): ``JUDGE_BASE_URL``,
  ``JUDGE_MODEL`` and ``JUDGE_API_KEY_SECRET``, with read access to that secret only (as for the policy's key).

No judge configured: no variable and no permission at all. The single-turn reward Lambda runs in the isolated
VPC (no internet, DNS limited to AWS's domains): for a Bedrock judge the network gets a bedrock-runtime interface
endpoint serving that model only; an OpenAI-compatible judge outside AWS is reachable from the rollout functions,
not from it.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_iam as iam

from constructs import Construct
from stacks.config import JudgeSettings
from stacks.constructs.common import grant_secret_read

# Converse and ConverseStream are authorized as bedrock:InvokeModel (and InvokeModelWithResponseStream): the judge
# calls Converse only, so it gets InvokeModel.
JUDGE_ACTIONS = ("bedrock:InvokeModel",)


def foundation_model_arn(scope: Construct, model_id: str) -> str:
    """``arn:<partition>:bedrock:<region>::foundation-model/<model id>`` (foundation models have no account)."""
    return Stack.of(scope).format_arn(
        service="bedrock",
        account="",
        resource="foundation-model",
        resource_name=model_id,
        arn_format=ArnFormat.SLASH_RESOURCE_NAME,
    )


class JudgeAccess(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, judge: JudgeSettings, functions: list[Any], network: Any = None
    ) -> None:
        super().__init__(scope, construct_id)
        self.functions = list(functions)
        if judge.kind == "bedrock":
            arn = foundation_model_arn(self, judge.bedrock_model_id)
            if network is not None:  # the single-turn reward Lambda reaches Bedrock from the isolated VPC
                network.allow_bedrock_model(arn)
            for fn in self.functions:
                fn.add_environment("JUDGE_BEDROCK_MODEL_ID", judge.bedrock_model_id)
                fn.add_to_role_policy(
                    iam.PolicyStatement(sid="JudgeInvokesItsModel", actions=list(JUDGE_ACTIONS), resources=[arn])
                )
        elif judge.kind == "openai":
            for fn in self.functions:
                fn.add_environment("JUDGE_BASE_URL", judge.base_url)
                fn.add_environment("JUDGE_MODEL", judge.model)
            if judge.api_key_secret:
                grant_secret_read(self, "JudgeApiKey", judge.api_key_secret, self.functions, "JUDGE_API_KEY_SECRET")
