"""Single-turn reward: the Lambda a Nova Forge job calls through ``reward_lambda_arn``.

Its name contains "SageMaker" (HyperPod requires that). It needs no AWS permissions beyond writing
its own logs, and it runs in the isolated VPC because the code_correctness reward executes model code.
"""

from __future__ import annotations

import json

from aws_cdk import CfnOutput
from aws_cdk import aws_lambda as _lambda
from constructs import Construct

from stacks.config import DeploymentSettings
from stacks.constructs.common import python_function, stack_name
from stacks.constructs.network import Network


class SingleTurnReward(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: DeploymentSettings,
        network: Network,
        layer: _lambda.ILayerVersion,
    ) -> None:
        super().__init__(scope, construct_id)
        self.function = python_function(
            self,
            "Function",
            name="single_turn_reward",
            function_name=f"{stack_name(self)}-SageMaker-reward"[:64],
            layer=layer,
            description="rewardpipe: Nova Forge single-turn reward (one result per sample, in order)",
            environment={
                "REWARD_NAME": settings.single_turn_reward,
                "REWARD_WEIGHTS": json.dumps(settings.single_turn_weights, sort_keys=True),
            },
            memory_mb=settings.functions.single_turn_memory_mb,
            timeout_s=settings.functions.single_turn_timeout_s,
            vpc=network.vpc,
            security_groups=[network.sandbox_sg],
            tracing=False,
        )
        CfnOutput(self, "FunctionName", value=self.function.function_name, key="RewardLambdaName",
                  description="Lambda for Nova Forge reward_lambda_arn (name contains SageMaker)")
        CfnOutput(self, "FunctionArn", value=self.function.function_arn, key="RewardLambdaArn",
                  description="Set this as reward_lambda_arn in the Nova Forge training job")
