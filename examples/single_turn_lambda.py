"""The Nova Forge single-turn reward Lambda (`reward_lambda_arn`), called the way Lambda calls it.

The handler is loaded from its file as Lambda loads it, with the environment the stack gives it
(`single_turn_reward` in cdk.json becomes SINGLE_TURN_REWARD_REF, its import reference: a built-in's, here
gsm8k's, or your own reward's `package.module:ATTR`, importable here), and called with a batch of samples:
one correct, one with a wrong answer, and one that cannot be scored (it is flagged, never a silent 0).
"""

import importlib.util
import json
import os
from pathlib import Path

os.environ.update(
    SINGLE_TURN_REWARD_REF="rewardpipe.rewards.gsm8k:GSM8K",  # or "your_package.rewards:REWARD"
    ERROR_REWARD="neutral",  # what the stack sets from cdk.json
    POWERTOOLS_LOG_LEVEL="WARNING",
    POWERTOOLS_METRICS_DISABLED="true",
)  # quiet for this example

HANDLER = Path(__file__).resolve().parents[1] / "functions" / "single_turn_reward" / "handler.py"


class LambdaContext:  # the two things the handler reads from Lambda's context object
    function_name = aws_request_id = "example"
    memory_limit_in_mb = 1769
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:RewardPipe-SageMaker-reward"

    def get_remaining_time_in_millis(self) -> int:
        return 900_000


def sample(sample_id: str, answer: str, reference: object) -> dict:
    return {
        "id": sample_id,
        "messages": [
            {"role": "user", "content": "What is 6 * 7? End with #### <answer>."},
            {"role": "assistant", "content": f"6 * 7 = {answer}\n#### {answer}"},
        ],
        "metadata": {"reference_answer": reference},
    }


if __name__ == "__main__":
    spec = importlib.util.spec_from_file_location("handler", HANDLER)
    handler = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(handler)

    event = [sample("right", "42", "42"), sample("wrong", "41", "42"), sample("no-reference", "42", None)]
    for result in handler.lambda_handler(event, LambdaContext()):
        print(json.dumps(result))
