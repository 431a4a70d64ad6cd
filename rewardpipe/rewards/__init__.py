"""Reward registry: pick a reward by name or reference, optionally override component weights.

``get_reward`` accepts every form of :mod:`rewardpipe.references` (a built-in name, ``package.module:ATTR``,
``path/file.py:ATTR`` locally, or a short name an installed package registers under ``rewardpipe.rewards``).
The built-ins are imported only when named.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from rewardpipe.components import Component, component
from rewardpipe.references import BUILTIN_REWARDS, ReferenceProblem
from rewardpipe.rewards.base import Reward, Score, ScoringInput, Transcript


class _BuiltinRewards(Mapping[str, Reward]):
    """The built-in rewards by name, each imported the first time it is asked for."""

    def __getitem__(self, name: str) -> Reward:
        if name not in BUILTIN_REWARDS:
            raise KeyError(name)
        from rewardpipe.references import load_import_reference

        return load_import_reference(BUILTIN_REWARDS[name])

    def __iter__(self) -> Iterator[str]:
        return iter(BUILTIN_REWARDS)

    def __len__(self) -> int:
        return len(BUILTIN_REWARDS)


REWARDS: Mapping[str, Reward] = _BuiltinRewards()


def get_reward(name: Any, weights: Mapping[str, float] | None = None, *, allow_files: bool = True) -> Reward:
    """The reward ``name`` refers to (a Reward passes through), with ``weights`` overriding component weights.

    ValueError (:class:`rewardpipe.references.ReferenceProblem`) says what is wrong: an unknown name lists
    what exists and how to register one."""
    from rewardpipe.references import resolve_reward

    return resolve_reward(name, weights, allow_files=allow_files)


def reads_reference(reward: Reward) -> bool:
    """True for a reward only single-turn samples can feed: one of its components reads ``reference``."""
    return "reference" in reward.reads


def __getattr__(name: str) -> Any:
    if name in ("ASK_BEFORE_CODING", "GSM8K", "CODE_CORRECTNESS"):
        return REWARDS[
            {"ASK_BEFORE_CODING": "ask_before_coding", "GSM8K": "gsm8k", "CODE_CORRECTNESS": "code_correctness"}[name]
        ]
    if name == "EPISODE_REWARDS":  # rewards an episode can be scored by (those that read no reference)
        return frozenset(n for n in BUILTIN_REWARDS if not reads_reference(REWARDS[n]))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "REWARDS",
    "Component",
    "ReferenceProblem",
    "Reward",
    "Score",
    "ScoringInput",
    "Transcript",
    "component",
    "get_reward",
    "reads_reference",
]
