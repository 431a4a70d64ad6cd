"""Adapters that let other trainers use rewardpipe's rewards and monitor."""
