"""rewardpipe: score GRPO rollouts component by component and watch each component's within-group variance."""

__version__ = "0.1.0"
