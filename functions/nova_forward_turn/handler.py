"""Nova bridge: forward turn (SQS event source; see rewardpipe/integrations/nova/bridge.py)."""

from rewardpipe.integrations.nova.aws import sqs_batch
from rewardpipe.integrations.nova.bridge import Bridge

lambda_handler = sqs_batch(Bridge.forward_turn)
