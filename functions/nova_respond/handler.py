"""Nova bridge: answer Nova when a rollout execution ends (EventBridge status-change rule)."""

from rewardpipe.integrations.nova.aws import status_change as lambda_handler  # noqa: F401
