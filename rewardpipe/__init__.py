"""rewardpipe: score GRPO rollouts component by component and watch each component's within-group variance.

The public API (v1): everything a user's own rewards and environments need, importable from here::

    from rewardpipe import component, Reward, Environment, EpisodeState, TaskRow, Message

* :func:`component` (decorator) and :class:`Component`, :class:`Reward`: rewards (rewardpipe.components,
  rewardpipe.rewards.base); :class:`ScoringInput` and :class:`Transcript`: what components read;
* :class:`Environment`, :class:`TaskRow`, :class:`EpisodeState`, :class:`EnvContext`, :class:`RolloutIds`:
  environments (rewardpipe.environment); :class:`ScriptedPolicy`: scenarios for doctor and ``--policy
  scripted``; :class:`PolicyExhausted` and :class:`ContextLimitReached`: a policy's way to end its episode;
* :class:`Message`, :class:`ExecutionJob`, :class:`ExecutionResult`: the data that crosses every boundary;
* :func:`llm_judge` (alias :func:`judge`): a component an LLM judge gives by a rubric (rewardpipe.judges);
  :class:`ComponentUnavailable`: raised by a component that cannot compute, with the reason;
* :func:`load_reward` / :func:`load_environment`: resolve a name or reference (a built-in name,
  ``package.module:ATTR``, ``path/file.py:ATTR``, an installed short name);
* :mod:`rewardpipe.testing`: doctor's checks for pytest.

Names are imported on first use: ``import rewardpipe`` stays cheap (a Lambda cold start imports it).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
API_VERSION = 1

_EXPORTS = {
    "component": "rewardpipe.components",
    "Component": "rewardpipe.components",
    "ComponentDefinitionError": "rewardpipe.components",
    "ComponentUnavailable": "rewardpipe.components",
    "INPUTS": "rewardpipe.components",
    "Reward": "rewardpipe.rewards.base",
    "Score": "rewardpipe.rewards.base",
    "ScoringInput": "rewardpipe.rewards.base",
    "Transcript": "rewardpipe.rewards.base",
    "Environment": "rewardpipe.environment",
    "EnvContext": "rewardpipe.environment",
    "EpisodeState": "rewardpipe.environment",
    "PolicyExhausted": "rewardpipe.environment",
    "ContextLimitReached": "rewardpipe.environment",
    "RolloutIds": "rewardpipe.environment",
    "TaskRow": "rewardpipe.environment",
    "ScriptedPolicy": "rewardpipe.policies",
    "Message": "rewardpipe.models",
    "ExecutionJob": "rewardpipe.execution.result",
    "ExecutionResult": "rewardpipe.execution.result",
    "ExecutionStatus": "rewardpipe.execution.result",
    "ReferenceProblem": "rewardpipe.references",
}
_FUNCTIONS = {"load_reward": "resolve_reward", "load_environment": "resolve_environment"}
# Built-in component factories: ``rewardpipe.llm_judge(...)``, alias ``rewardpipe.judge(...)`` (rewardpipe.judges).
_FACTORIES = {"llm_judge": "rewardpipe.judges", "judge": "rewardpipe.judges"}


def __getattr__(name: str) -> Any:
    import importlib

    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif name in _FUNCTIONS:
        value = getattr(importlib.import_module("rewardpipe.references"), _FUNCTIONS[name])
    elif name in _FACTORIES:
        value = importlib.import_module(_FACTORIES[name]).llm_judge
    elif name == "testing":
        value = importlib.import_module("rewardpipe.testing")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS, *_FUNCTIONS, *_FACTORIES, "testing"])


__all__ = sorted([*_EXPORTS, *_FUNCTIONS, *_FACTORIES, "API_VERSION", "testing"])
