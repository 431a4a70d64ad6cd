"""The reward of `my_reward.py` under pytest, with rewardpipe's own checks (`pytest test_my_reward.py`).

`samples.jsonl` alone fails `check_reward`: none of its answers is too long, so the penalty `too_long` never moves
there. The samples of a test must move every component, so the second test adds a long answer."""

# requires-api: rewardpipe.testing:check_reward, rewardpipe.testing:score

from pathlib import Path

import pytest
from my_reward import json_answer

from rewardpipe.testing import check_reward, score

SAMPLES = Path(__file__).resolve().parent / "samples.jsonl"
LONG = '{"answer": "42", "working": "' + "6 * 7 = 42. " * 20 + '"}'


def test_the_samples_file_never_fires_the_penalty():
    with pytest.raises(AssertionError, match="component 'too_long' takes only the value"):
        check_reward(json_answer, SAMPLES)


def test_every_component_moves_and_stays_in_range():
    check_reward(
        json_answer,
        [
            {"completion": '{"answer": "42"}', "reference": "42"},
            {"completion": '{"answer": "41"}', "reference": "42"},
            {"completion": "The answer is 42.", "reference": "42"},
            {"completion": LONG, "reference": "42"},
        ],
    )


def test_one_score_component_by_component():
    result = score(json_answer, completion=LONG, reference="42")
    assert result.components == {"answer_correct": 1.0, "valid_json": 1.0, "too_long": -1.0}
    assert result.aggregate == pytest.approx(0.7)  # 1.0 + 0.2 * 1.0 + 0.5 * -1.0


if __name__ == "__main__":  # `python test_my_reward.py` runs each test and says so (or `pytest test_my_reward.py`)
    for name, test in list(globals().items()):
        if name.startswith("test_"):
            test()
            print(f"passed: {name}")
