"""Every trainer adapter takes a user's reward by reference (tests/fixtures/user_pkg/acme_rl) and records a
component that raises as an error (None / NaN / reward_error), never a 0, while the rest of the batch is
scored. Called the way TRL, verl and verifiers call them; the real libraries run the same cases in
test_trl_real.py, test_verl_real.py and test_verifiers_real.py."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rewardpipe.integrations.trl import RewardPipeMonitor, reward_functions
from rewardpipe.integrations.verifiers import rubric_functions
from rewardpipe.integrations.verl import compute_score

USER_PKG = Path(__file__).resolve().parents[1] / "fixtures" / "user_pkg"
JSON_ANSWER = "acme_rl.json_answer:JSON_ANSWER"
FLAKY = "acme_rl.json_answer:FLAKY"


@pytest.fixture(autouse=True)
def user_package(monkeypatch):
    monkeypatch.syspath_prepend(str(USER_PKG))


def test_trl_reward_functions_score_a_user_reward_and_a_raising_component_is_none_in_every_function():
    funcs, weights = reward_functions(FLAKY)
    assert [f.__name__ for f in funcs] == [
        "json_flaky_valid_json",
        "json_flaky_answer_matches",
        "json_flaky_explodes_on_boom",
    ] and weights == [0.5, 1.0, 1.0]
    prompts = ["q1", "q1", "q2", "q2"]
    completions = ['{"answer": 1}', '{"answer": "BOOM"}', '{"answer": 2}', "no json"]
    columns = [f(prompts=prompts, completions=completions, answer=["1", "1", "2", "2"]) for f in funcs]
    # The raising sample is None everywhere (TRL makes it NaN and leaves it out); its neighbours are scored.
    assert columns == [[1.0, None, 1.0, 0.0], [1.0, None, 1.0, 0.0], [1.0, None, 1.0, 1.0]]


def test_trl_monitor_records_the_raising_component_as_an_error_record_with_its_name():
    monitor = RewardPipeMonitor(reward=FLAKY, run_id="flaky")
    monitor.group_size = 2
    seen = []
    monitor._monitor = lambda rows, *rest: seen.extend(rows)  # the rows the within-group monitor receives
    prompts, completions = ["q", "q"], ['{"answer": 1}', "BOOM"]
    for fn in monitor.reward_funcs:
        fn(prompts=prompts, completions=completions, answer=["1", "1"])
    (good, _, _), (bad, kind, _) = seen
    assert kind == "component_raised" and set(bad.values()) == {None}
    assert good == {"valid_json": 1.0, "answer_matches": 1.0, "explodes_on_boom": 1.0}


def test_verl_compute_score_takes_a_user_reward_and_flags_a_raising_component():
    good = compute_score("acme", '{"answer": 7}', "7", {"rewardpipe_reward": JSON_ANSWER})
    assert good == {"score": 1.5, "valid_json": 1.0, "answer_matches": 1.0, "too_long": 0.0, "reward_error": 0.0}
    raised = compute_score("acme", '{"answer": "BOOM"}', "7", {"rewardpipe_reward": FLAKY})
    assert raised["reward_error"] == 1.0 and raised["score"] == 0.0  # verl needs a number: the flag says why
    assert all(math.isnan(raised[name]) for name in ("valid_json", "answer_matches", "explodes_on_boom"))


def test_verifiers_rubric_functions_take_a_user_reward_and_a_raising_component_is_nan_not_zero():
    funcs, weights = rubric_functions(FLAKY)
    assert [f.__name__ for f in funcs] == ["valid_json", "answer_matches", "explodes_on_boom"]
    assert weights == [0.5, 1.0, 1.0]
    completion = [{"role": "assistant", "content": '{"answer": 3}'}]
    assert [f(completion=completion, answer="3", prompt="q") for f in funcs] == [1.0, 1.0, 1.0]
    boom = [{"role": "assistant", "content": "BOOM"}]
    assert all(math.isnan(f(completion=boom, answer="3", prompt="q")) for f in funcs)
    assert funcs[0].rewardpipe_scorer.samples_scored == 2  # each sample scored once, not once per function


def test_verifiers_group_scoring_function_by_function_scores_identical_rollouts_once_each():
    # verifiers' score_group calls each function over the whole group before the next; a GRPO group often
    # holds identical rollouts. Each rollout is one sample scored once, and every function reads its own.
    funcs, _ = rubric_functions(FLAKY)
    scorer = funcs[0].rewardpipe_scorer
    group = [
        [{"role": "assistant", "content": text}]
        for text in ('{"answer": 3}', '{"answer": 3}', "BOOM", '{"answer": 4}', '{"answer": 3}')
    ]
    columns = [[f(completion=c, answer="3", prompt="q") for c in group] for f in funcs]
    assert scorer.samples_scored == len(group)
    for column in columns:
        assert column[:2] + column[3:] == [1.0, 1.0, column[3], 1.0] and math.isnan(column[2])
    assert [column[3] for column in columns] == [1.0, 0.0, 1.0]
    # every function has read every sample: nothing is held, and the same group again is scored again
    assert not scorer._cache
    [f(completion=group[0], answer="3", prompt="q") for f in funcs]
    assert scorer.samples_scored == len(group) + 1
