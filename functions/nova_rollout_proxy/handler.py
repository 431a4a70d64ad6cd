"""Nova bridge: the rollout proxy, the Lambda the recipe's rollout_request_arn names (Nova invokes it with each
rollout request; see rewardpipe/integrations/nova/bridge.py)."""

from rewardpipe.integrations.nova.aws import rollout_proxy as lambda_handler  # noqa: F401
