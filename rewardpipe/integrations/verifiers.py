"""verifiers adapter: the reward components as a ``vf.Rubric`` and the user simulator as an environment turn.

Supported: verifiers 0.2.1 (the ``[verifiers]`` extra; ``make test-verifiers`` runs a real ``vf.MultiTurnEnv``
rollout and a real ``vf.Rubric`` against it). 0.3 moved this API under ``verifiers.legacy`` and 0.4 replaced
it with ``verifiers.v1``, which has neither ``Rubric`` nor ``MultiTurnEnv``. Reward functions ask for what
they need by argument name (``completion``, ``answer``, ``prompt``, ``info``, ``**kwargs``) and return a
float; ``vf.Rubric(funcs=[...], weights=[...])`` sums them with the weights. Messages arrive as dicts or as
verifiers' pydantic message objects; both are read.

* :func:`rubric_functions` gives ``(funcs, weights)``, one function per component (named after it, so
  verifiers logs each one); :func:`rubric` wraps them in ``vf.Rubric``.
* :func:`simulator_env_response` is the body of a ``vf.MultiTurnEnv.env_response``: given the conversation
  so far and the task, it returns the simulator's user turn. Keep the task under an ``info`` key of your own
  (``info["rewardpipe_task"]``): verifiers 0.2 reads ``info["task"]`` as its own task payload. What the
  simulator already revealed is read off the conversation (verifiers keeps no simulator state).

verifiers turns a reward-function exception into 0.0; a component rewardpipe cannot compute returns
``float("nan")`` here instead, so an infrastructure failure is visible in the rollout metrics, not a zero.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

from rewardpipe.models import Message, Task
from rewardpipe.rewards import Reward, get_reward
from rewardpipe.single_turn import score_samples


def _message(value: Any) -> dict[str, Any] | None:
    """One chat message as a dict: verifiers passes dicts (older releases) or its pydantic message objects
    (``UserMessage``, ``AssistantMessage``... in 0.2); anything without a role is dropped."""
    if isinstance(value, Mapping):
        message = dict(value)
    elif hasattr(value, "model_dump"):
        message = value.model_dump()
    else:
        message = {"role": getattr(value, "role", None), "content": getattr(value, "content", None)}
    return message if isinstance(message.get("role"), str) else None


def _messages(value: Any, role: str) -> list[dict[str, Any]]:
    if isinstance(value, list):
        return [m for m in map(_message, value) if m is not None]
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
    from rewardpipe.questions import reveals_in
    from rewardpipe.simulator import RuleBasedSimulator

    task = task if isinstance(task, Task) else Task.model_validate(task)
    parsed = [Message.model_validate(m) for m in _messages(list(messages), "user")]
    assistant = [m.content for m in parsed if m.role == "assistant"]
    # verifiers keeps no simulator bookkeeping: what was revealed is read off the conversation so far, the
    # way recorded transcripts are scored, so a detail is never revealed twice and the next one comes out.
    reveals = reveals_in(parsed, task.spec)
    state = EpisodeState(run_id="verifiers", group_id="g", rollout_id="r", task_id=task.task_id, messages=parsed,
                         turn_kinds=[parse_turn(text).kind for text in assistant], next_action="simulator",
                         revealed=[index for _, index in reveals], answered_turns=[turn for turn, _ in reveals])
    reply = (simulator or RuleBasedSimulator()).respond(state, task)
    return [{"role": "user", "content": reply.text}]
