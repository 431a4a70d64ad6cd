"""A user's reward and environment through the trainer adapters (TRL reward_funcs + callback, TRL's
multi-turn rollout_func, verl, verifiers), named by reference; the real trainers' own runs are the
``make test-trl/-verl/-verifiers`` suites."""

from __future__ import annotations

import pytest

from tests.api.conftest import GUESS_TASKS, CharCodec


class Trainer:
    """What RewardPipeCallback reads off TRL's trainer (through the log_metric hook's __self__)."""

    def __init__(self, funcs, weights, group):
        self.reward_funcs, self.reward_weights, self.num_generations = funcs, weights, group
        self.model = type("M", (), {"training": True})()
        self.logged = {}

    def _log_metric(self, name, value):
        self.logged[name] = value


def test_trl_reward_functions_take_a_user_reward_by_short_name(acme):
    from rewardpipe.integrations.trl import reward_functions

    funcs, weights = reward_functions("json_answer")
    assert [f.__name__ for f in funcs] == [
        "json_answer_valid_json",
        "json_answer_answer_matches",
        "json_answer_too_long",
    ]
    assert weights == [0.5, 1.0, 0.2]
    completions = ['{"answer": 4}', "four", '{"answer": 4}' + " " * 500]
    values = [f(prompts=["2+2?"] * 3, completions=completions, answer=["4", "4", "4"]) for f in funcs]
    assert values == [[1.0, 0.0, 1.0], [1.0, 0.0, 1.0], [0.0, 0.0, -1.0]]


def test_trl_conversational_completions_are_read_as_their_assistant_message(acme):
    from rewardpipe.integrations.trl import reward_functions

    funcs, _ = reward_functions("acme_rl.json_answer:JSON_ANSWER")
    completion = [{"role": "assistant", "content": [{"type": "text", "text": '{"answer": 9}'}]}]
    assert funcs[1](prompts=[[{"role": "user", "content": "3*3?"}]], completions=[completion], answer=[9]) == [1.0]


def test_the_callback_judges_each_component_by_its_own_range_and_role(acme):
    from rewardpipe.integrations.trl import RewardPipeMonitor

    monitor = RewardPipeMonitor("json_answer", run_id="cb")
    assert monitor.thresholds.ranges["too_long"] == (-1.0, 0.0) and monitor.thresholds.roles["too_long"] == "penalty"
    assert monitor.thresholds.outcome_components == ("answer_matches",)
    trainer = Trainer(monitor.reward_funcs, [0.5, 1.0, 0.2], 2)
    completions = ['{"answer": 1}', '{"answer": 2}'] * 4  # 4 groups of 2: valid JSON everywhere, never long
    answers = ["1"] * 8
    for fn in monitor.reward_funcs:
        fn(prompts=["q"] * 8, completions=completions, answer=answers, log_metric=trainer._log_metric)
    report = monitor.reports[0]
    assert (report.components["valid_json"].verdict, report.components["valid_json"].cause) == (
        "dead",
        "constant_at_maximum",
    )
    assert (report.components["too_long"].verdict, report.components["too_long"].cause) == (
        "info",
        "penalty_never_fires",
    )
    assert report.components["answer_matches"].verdict == "ok"
    assert trainer.logged["rewardpipe/valid_json/dead"] == 1.0


def bisect(contexts, budget):
    """A 'model' that plays binary search on what the context says (each guess, then higher / lower)."""
    import re

    out = []
    for context in contexts:
        lo, hi = 1, 100
        for guess, reply in re.findall(r"(\d+)\nUser: (higher|lower)", CharCodec().decode(context)):
            lo, hi = (int(guess) + 1, hi) if reply == "higher" else (lo, int(guess) - 1)
        out.append([ord(c) for c in str((lo + hi) // 2)] + [0, 0])
    return out


def test_trl_rollout_func_plays_a_user_environment_whose_tasks_share_a_prompt(acme):
    from rewardpipe.integrations.trl_episodes import EPISODE_FIELD, EpisodeRollout, rollout_output

    rollout = EpisodeRollout(GUESS_TASKS, env="guess", max_turns=8)
    prompt = rollout.dataset_rows()[0]["prompt"]
    assert len({row["prompt"] for row in rollout.dataset_rows()}) == 1  # every game opens the same way
    episodes = rollout.play([prompt] * 6, CharCodec(), bisect, max_completion_tokens=2000, group_size=2)
    assert [e.task.task_id for e in episodes] == ["g-07", "g-07", "g-42", "g-42", "g-93", "g-93"]
    assert all(e.record.status == "scored" for e in episodes)
    assert [e.record.components["solved"] for e in episodes] == [1.0] * 6
    assert all(e.state.end_reason == "solved" for e in episodes)
    rows = rollout_output(episodes, rollout.env)[EPISODE_FIELD]
    assert rows[0]["task_id"] == "g-07" and rows[0]["simulator_replies"] >= 1
    funcs, weights = rollout.reward_functions()
    assert [f.__name__ for f in funcs] == [
        "guess_reward_solved",
        "guess_reward_closeness",
        "guess_reward_invalid_turns",
    ]
    assert funcs[0](prompts=[""] * 6, completions=[""] * 6, **{EPISODE_FIELD: rows}) == [1.0] * 6


def test_verl_compute_score_takes_a_user_reward(acme):
    from rewardpipe.integrations.verl import compute_score

    right = compute_score("mine", '{"answer": 4}', 4, {"rewardpipe_reward": "json_answer"})
    wrong = compute_score("mine", "four", 4, {"rewardpipe_reward": "acme_rl.json_answer:JSON_ANSWER"})
    assert right == {"score": 1.5, "valid_json": 1.0, "answer_matches": 1.0, "too_long": 0.0, "reward_error": 0.0}
    assert wrong["score"] == 0.0 and wrong["reward_error"] == 0.0 and set(wrong) == set(right)
    with pytest.raises(ValueError, match="unknown reward 'nope'"):
        compute_score("mine", "x", 4, {"rewardpipe_reward": "nope"})


def test_verifiers_rubric_takes_a_user_reward(acme):
    from rewardpipe.integrations.verifiers import rubric_functions

    funcs, weights = rubric_functions("json_answer")
    assert weights == [0.5, 1.0, 0.2]
    assert [f(completion=[{"role": "assistant", "content": '{"answer": 4}'}], answer=4, prompt="q") for f in funcs] == [
        1.0,
        1.0,
        0.0,
    ]
