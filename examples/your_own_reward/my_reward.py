import json

from rewardpipe import Reward, component


@component(range=(0, 1), role="outcome")
def answer_correct(completion, reference):
    if reference is None:
        return None  # nothing to compare with: not the model's fault, so an error record, never a 0
    try:
        return float(json.loads(completion)["answer"] == reference)
    except (ValueError, KeyError, TypeError):
        return 0.0


@component(range=(0, 1), role="shaping", weight=0.2)
def valid_json(completion):
    try:
        return float(isinstance(json.loads(completion), dict))
    except ValueError:
        return 0.0


@component(range=(-1, 0), role="penalty", weight=0.5)
def too_long(completion):
    return -1.0 if len(completion) > 200 else 0.0


json_answer = Reward("json_answer", [answer_correct, valid_json, too_long])
