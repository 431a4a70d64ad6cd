"""Reward registry: pick a reward by name, optionally override component weights."""

from __future__ import annotations

from typing import Mapping

from rewardpipe.rewards.ask_before_coding import ASK_BEFORE_CODING
from rewardpipe.rewards.base import Component, Reward, Score, ScoringInput, Transcript
from rewardpipe.rewards.code_correctness import CODE_CORRECTNESS
from rewardpipe.rewards.gsm8k import GSM8K

REWARDS: dict[str, Reward] = {r.name: r for r in (ASK_BEFORE_CODING, GSM8K, CODE_CORRECTNESS)}
# Rewards that score a multi-turn coding episode against its task's hidden tests (what `run` produces).
# gsm8k and code_correctness score single-turn samples that carry their own reference answer.
EPISODE_REWARDS = frozenset({ASK_BEFORE_CODING.name})


def get_reward(name: str, weights: Mapping[str, float] | None = None) -> Reward:
    try:
        reward = REWARDS[name]
    except KeyError:
        raise ValueError(f"unknown reward '{name}'; choose one of {sorted(REWARDS)}") from None
    return reward.with_weights(weights)


__all__ = ["Component", "EPISODE_REWARDS", "Reward", "Score", "ScoringInput", "Transcript", "get_reward", "REWARDS"]
