"""AWS-side glue shared by the Lambda handlers (functions/) and the Fargate runner (containers/).

Domain logic stays in the core (rewardpipe.episode, rewards, monitor, store); this package only moves
data between Step Functions, S3 and those functions: settings from the environment, the rollout
context that travels through the state machine, the S3 hand-off of execution jobs, and metrics.
Nothing here imports boto3 at module level, so handler cold starts stay small.
"""
