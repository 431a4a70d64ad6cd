"""verl's compute_score and the verifiers rubric/simulator, called the way those frameworks call them."""

import inspect
import json
import math
from pathlib import Path

import pytest

from rewardpipe.integrations.verifiers import rubric_functions, simulator_env_response
from rewardpipe.integrations.verl import compute_score


def test_verl_compute_score_has_verls_signature_and_returns_score_plus_components():
    assert list(inspect.signature(compute_score).parameters)[:4] == [
        "data_source",
        "solution_str",
        "ground_truth",
        "extra_info",
    ]
    right = compute_score("openai/gsm8k", "3 + 4 = 7\n#### 7", "7", {"index": 3, "question": "3 + 4?"})
    assert right["score"] == pytest.approx(1.5) and right["format"] == 1.0 and right["answer_correct"] == 1.0
    assert right["reward_error"] == 0.0
    wrong = compute_score("gsm8k", "It is 8", "7")
    assert wrong["score"] == 0.0 and wrong["answer_correct"] == 0.0 and wrong["reward_error"] == 0.0
    # An unreadable reference is an error record, flagged, with no component pretending to be a zero.
    broken = compute_score("gsm8k", "#### 7", "not a number")
    assert broken["reward_error"] == 1.0 and math.isnan(broken["answer_correct"]) and math.isnan(broken["format"])
    assert all(isinstance(v, float) for v in right.values())
    # verl appends each key to a per-key list: every sample must carry the same keys, error or not.
    assert set(right) == set(wrong) == set(broken) == {"score", "format", "answer_correct", "reward_error"}


def test_verl_reward_chosen_by_extra_info_and_unknown_names_are_refused():
    spec = {
        "tests": "def check(candidate):\n    assert candidate(2) == 4\n",
        "entry_point": "double",
        "tests_format": "check",
    }
    out = compute_score(
        "my/code",
        "```python\ndef double(x):\n    return 2 * x\n```",
        json.dumps(spec),
        {"rewardpipe_reward": "code_correctness"},
    )
    assert out["reward_error"] == 0.0 and out["score"] == 1.0
    with pytest.raises(ValueError, match="unknown reward"):
        compute_score("x", "#### 1", "1", {"rewardpipe_reward": "nope"})


def test_verifiers_rubric_functions_follow_the_named_argument_convention():
    funcs, weights = rubric_functions("gsm8k")
    assert [f.__name__ for f in funcs] == ["format", "answer_correct"] and weights == [0.5, 1.0]
    completion = [{"role": "assistant", "content": "#### 12"}]
    prompt = [{"role": "user", "content": "5 + 7?"}]
    assert [f(completion=completion, answer="12", prompt=prompt, state={}, info={}) for f in funcs] == [1.0, 1.0]
    assert math.isnan(funcs[1](completion=completion, answer="twelve"))  # not a fake zero


def test_simulator_env_response_answers_a_question_from_the_hidden_spec_only():
    task = json.loads(Path("rewardpipe/data/tasks.jsonl").read_text().splitlines()[0])
    messages = [
        {"role": "user", "content": task["prompt"]},
        {"role": "assistant", "content": "What should happen with an empty input? Any other requirements?"},
    ]
    reply = simulator_env_response(messages, task)
    assert len(reply) == 1 and reply[0]["role"] == "user" and reply[0]["content"]
    assert task["tests"] not in reply[0]["content"] and task["reference_solution"] not in reply[0]["content"]


def test_simulator_env_response_reads_what_was_revealed_off_the_conversation():
    # verifiers keeps no simulator state: asking again must reveal the next detail, never the first twice.
    task = json.loads(Path("rewardpipe/data/tasks.jsonl").read_text().splitlines()[0])
    question = "Are there any other requirements or edge cases I should know about?"
    messages = [{"role": "user", "content": task["prompt"]}]
    for expected in task["spec"]:
        messages.append({"role": "assistant", "content": question})
        reply = simulator_env_response(messages, task)
        assert reply == [{"role": "user", "content": expected}]
        messages += reply


def test_verifiers_message_objects_are_read_like_dicts():
    # verifiers 0.2 hands pydantic message objects (UserMessage...) to env_response and reward functions.
    class Msg:
        def __init__(self, role, content):
            self.role, self.content = role, content

        def model_dump(self):
            return {"role": self.role, "content": self.content}

    funcs, _ = rubric_functions("gsm8k")
    assert [
        f(completion=[Msg("assistant", "#### 12")], answer="12", prompt=[Msg("user", "5 + 7?")]) for f in funcs
    ] == [1.0, 1.0]
    task = json.loads(Path("rewardpipe/data/tasks.jsonl").read_text().splitlines()[0])
    reply = simulator_env_response([Msg("user", task["prompt"]), Msg("assistant", "Any other requirements?")], task)
    assert reply == [{"role": "user", "content": task["spec"][0]}]
