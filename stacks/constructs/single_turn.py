"""Single-turn reward: the Lambda a Nova Forge job calls through ``reward_lambda_arn``.

Its name contains "SageMaker" (HyperPod requires that). It needs no AWS permissions beyond writing
its own logs, and it runs in the isolated VPC because the code_correctness reward executes model code.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput

from constructs import Construct
from stacks.config import MIN_SINGLE_TURN_WORKERS, DeploymentSettings
from stacks.constructs.common import RewardPipeLayer, python_function, sandbox_memory_mb, stack_name
from stacks.constructs.network import Network

# Lambda gives one vCPU per 1769 MB; model code is CPU-bound, so the pool follows the vCPUs (at least
# MIN_SINGLE_TURN_WORKERS, so one slow sample does not hold up the whole batch).
MB_PER_VCPU = 1769


class SingleTurnReward(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: DeploymentSettings,
        network: Network,
        layer: RewardPipeLayer,
        user_layer: Any = None,
    ) -> None:
        super().__init__(scope, construct_id)
        memory_mb = settings.functions.single_turn_memory_mb
        workers = max(MIN_SINGLE_TURN_WORKERS, memory_mb // MB_PER_VCPU)
        self.function = python_function(
            self,
            "Function",
            name="single_turn_reward",
            # Never truncated (that dropped "SageMaker" past 54 characters of stack name): a stack name too
            # long for it fails the synth instead (stacks/names.py).
            function_name=f"{stack_name(self)}-SageMaker-reward",
            layer=layer,
            description="rewardpipe: Nova Forge single-turn reward (one result per sample, in order)",
            environment={
                # The reward as an explicit reference, resolved at synth (stacks/user_code.py).
                **settings.user_code.single_turn_env(settings.single_turn_weights),
                "ERROR_REWARD": settings.error_reward,
                "REWARDPIPE_SANDBOX_WORKERS": str(workers),
                "REWARDPIPE_SANDBOX_MEMORY_MB": str(sandbox_memory_mb(memory_mb, workers)),
            },
            memory_mb=memory_mb,
            timeout_s=settings.functions.single_turn_timeout_s,
            reserved_concurrency=settings.functions.reserved_concurrency.single_turn_reward,
            vpc=network.vpc,
            security_groups=[network.sandbox_sg],
            tracing=False,
            user_layer=user_layer,
        )
        CfnOutput(
            self,
            "FunctionName",
            value=self.function.function_name,
            key="RewardLambdaName",
            description="Lambda for Nova Forge reward_lambda_arn (name contains SageMaker)",
        )
        CfnOutput(
            self,
            "FunctionArn",
            value=self.function.function_arn,
            key="RewardLambdaArn",
            description="Set this as reward_lambda_arn in the Nova Forge training job",
        )
