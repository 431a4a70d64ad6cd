"""Nova bridge: stop and answer rollouts past their time budget (every minute)."""

from rewardpipe.integrations.nova.aws import sweep as lambda_handler  # noqa: F401
