"""A judged component in a multi-turn environment's reward (tests/fixtures/user_pkg/acme_rl's guessing game):
the rubric reads the episode's state, and the episodes of a batch (TRL's rollout_func scores them with
``runner.score_episodes``) are judged together, within the bound, with the same records as one by one."""

from __future__ import annotations

from pathlib import Path

import pytest

from rewardpipe import Reward, ScriptedPolicy, llm_judge
from rewardpipe.episode import converse, finish_episode, start_episode
from rewardpipe.runner import NoSandbox, score_episodes
from tests.judge.fake_judge import FakeJudge, quoted

USER_PKG = Path(__file__).resolve().parents[1] / "fixtures" / "user_pkg"


@pytest.fixture
def guess(monkeypatch):
    monkeypatch.syspath_prepend(str(USER_PKG))
    import acme_rl.guess as module

    return module


def grade(completion, tag, body):
    _, guesses = quoted(body, "STATE GUESSES")
    return f"VERDICT {tag}: {min(10, len(guesses.split(',')) if guesses != '[]' else 0)}"


def finished(guess, count):
    env = guess.ENVIRONMENT
    episodes = []
    for i in range(count):
        task = guess.GuessTask(task_id=f"t{i}", prompt="Guess 1..100", secret=10 + i)
        state = start_episode(task, env=env, run_id="j", step=0, group_id=f"g{i // 4}", rollout_id=f"r{i}")
        policy = ScriptedPolicy([str(50 + i)] * (1 + i % 4) + ["pass"] * 8)  # 1-4 guesses, each episode its own
        episodes.append((converse(state, task, policy, env), task))
    return episodes


def test_episodes_are_judged_together_within_the_bound_and_as_one_by_one(guess):
    with FakeJudge(grade, delay_s=0.05) as server:
        judged = llm_judge(
            "persistence",
            "How many guesses were made? {state.guesses}",
            base_url=server.url,
            model="m",
            concurrency=4,
            role="shaping",
            backoff_s=0.0,
        )
        reward = Reward("judged_guess", [*guess.GUESS_REWARD.components, judged])
        assert judged.inputs == ("completion", "state")
        episodes = finished(guess, 12)
        together = [
            record for record, _ in score_episodes(episodes, executor=NoSandbox(), reward=reward, env=guess.ENVIRONMENT)
        ]
        assert server.max_in_flight == 4  # concurrent, and never past the bound
        calls = len(server.requests)
        one_by_one = [finish_episode(state, task, None, reward, guess.ENVIRONMENT) for state, task in episodes]
        assert len(server.requests) == calls  # the same episodes again: all from the cache
    assert [r.model_dump() for r in together] == [r.model_dump() for r in one_by_one]
    assert all(r.status == "scored" for r in together)
    assert [r.components["persistence"] for r in together] == [
        pytest.approx(len(state.guesses) / 10) for state, _ in episodes
    ]
    assert {len(state.guesses) for state, _ in episodes} == {1, 2, 3, 4}
