"""The built-in ask-before-coding environment, laid out as any user's environment package is:

* :mod:`.tasks`: the task row model (``Task``) and the bundled task set;
* :mod:`.environment`: the environment (``AskBeforeCoding``, ``ENVIRONMENT``) and its state;
* :mod:`.turns`: the turn classifier; :mod:`.questions`: what a question asks and what a reply reveals;
* :mod:`.simulator`: the rule-based and LLM-played users;
* :mod:`.scenarios`: scripted players for doctor and ``--policy scripted``;
* :mod:`.reward`: the reward (``ASK_BEFORE_CODING``).

Names are imported on first use (a Lambda cold start that only validates a task loads nothing else).
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "ENVIRONMENT": "environment",
    "AskBeforeCoding": "environment",
    "AskBeforeCodingState": "state",
    "POLICY_SYSTEM_PROMPT": "environment",
    "task_job": "environment",
    "Task": "tasks",
    "BUNDLED_TASKS": "tasks",
    "ASK_BEFORE_CODING": "reward",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = sorted(_EXPORTS)
