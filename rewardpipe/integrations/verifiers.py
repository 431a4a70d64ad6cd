"""verifiers adapter: the reward components as a ``vf.Rubric`` and the user simulator as an environment turn.

The ``verifiers`` package is not installed here (its dependency set is not on this machine's package
mirror), so this adapter is tested against verifiers' documented reward-function convention: functions ask
for what they need by argument name (``completion``, ``answer``, ``prompt``, ``info``, ``**kwargs``) and
return a float; ``vf.Rubric(funcs=[...], weights=[...])`` sums them with the weights.

* :func:`rubric_functions` gives ``(funcs, weights)``, one function per component (named after it, so
  verifiers logs each one); :func:`rubric` wraps them in ``vf.Rubric`` when verifiers is importable.
* :func:`simulator_env_response` is the body of a ``vf.MultiTurnEnv.env_response``: given the conversation
  so far and the task (from ``state["info"]`` / ``state["task"]``), it returns the simulator's user turn.
  Recent verifiers versions return only the new messages, older ones ``(messages, state)``; wrap accordingly.

verifiers turns a reward-function exception into 0.0; a component rewardpipe cannot compute returns
``float("nan")`` here instead, so an infrastructure failure is visible in the rollout metrics, not a zero.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

from rewardpipe.models import Message, Task
from rewardpipe.rewards import Reward, get_reward
from rewardpipe.single_turn import score_samples


def _messages(value: Any, role: str) -> list[dict[str, Any]]:
    if isinstance(value, list):
        return [m for m in value if isinstance(m, dict)]
    return [{"role": role, "content": value if isinstance(value, str) else ""}]


def rubric_functions(reward: str | Reward = "gsm8k", weights: Mapping[str, float] | None = None,
                     executor: Any = None) -> tuple[list[Callable[..., float]], list[float]]:
    resolved = reward.with_weights(weights) if isinstance(reward, Reward) else get_reward(reward, weights)

    def component_fn(name: str) -> Callable[..., float]:
        def fn(completion: Any = None, answer: Any = None, prompt: Any = None, **_: Any) -> float:
            sample = {"id": 0, "messages": _messages(prompt or "", "user") + _messages(completion, "assistant"),
                      "metadata": {"reference_answer": answer}}
            result = score_samples([sample], resolved, executor=executor)[0]
            values = {m["name"]: m["value"] for m in result["metrics_list"]}
            if values.get("reward_error") or name not in values:
                return math.nan
            return float(values[name])

        fn.__name__ = name
        return fn

    return [component_fn(c.name) for c in resolved.components], [c.weight for c in resolved.components]


def rubric(reward: str | Reward = "gsm8k", weights: Mapping[str, float] | None = None, **rubric_kwargs: Any) -> Any:
    """``vf.Rubric`` of the reward's components (needs the ``verifiers`` package)."""
    import verifiers as vf  # noqa: PLC0415 - optional dependency

    funcs, w = rubric_functions(reward, weights)
    return vf.Rubric(funcs=funcs, weights=w, **rubric_kwargs)


def simulator_env_response(messages: Sequence[Mapping[str, Any]], task: Task | Mapping[str, Any],
                           simulator: Any = None) -> list[dict[str, str]]:
    """The user simulator's next turn for a conversation, as a one-message list.

    The simulator sees the hidden ``spec`` of the task but never its tests or reference solution.
    """
    from rewardpipe.episode import EpisodeState
    from rewardpipe.parsing import parse_turn
    from rewardpipe.simulator import RuleBasedSimulator

    task = task if isinstance(task, Task) else Task.model_validate(task)
    parsed = [Message.model_validate(m) for m in messages]
    assistant = [m.content for m in parsed if m.role == "assistant"]
    state = EpisodeState(run_id="verifiers", group_id="g", rollout_id="r", task_id=task.task_id, messages=parsed,
                         turn_kinds=[parse_turn(text).kind for text in assistant], next_action="simulator")
    reply = (simulator or RuleBasedSimulator()).respond(state, task)
    return [{"role": "user", "content": reply.text}]
