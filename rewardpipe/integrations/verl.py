"""verl adapter: ``compute_score(data_source, solution_str, ground_truth, extra_info=None)``.

verl's reward managers call one function per sample and, when it returns a dict, use ``score`` as the
reward and keep every other key as ``reward_extra_info`` (written to ``rollout_data_dir`` and usable by
DAPO's ``filter_groups.metric``). The dict here carries each component's value, ``reward_error``
(1 for a sample that could not be scored) and the reward's diagnostics::

    # verl config
    custom_reward_function:
      path: <site-packages>/rewardpipe/integrations/verl.py
      name: compute_score

Which reward scores a sample: ``extra_info["rewardpipe_reward"]`` if given, else the ``data_source``
(``openai/gsm8k`` and ``gsm8k`` → ``gsm8k``; a registered reward name is used as is), else ``gsm8k``.
verl has no "no reward" value, so an unscorable sample scores 0.0 with ``reward_error`` = 1 and its
components left out (set ``filter_groups.metric: reward_error`` or drop such rows from your statistics).
"""

from __future__ import annotations

from typing import Any, Mapping

from rewardpipe.rewards import REWARDS
from rewardpipe.single_turn import score_samples

DATA_SOURCE_REWARDS = {"openai/gsm8k": "gsm8k", "gsm8k": "gsm8k"}
DEFAULT_REWARD = "gsm8k"


def reward_for(data_source: Any, extra_info: Mapping[str, Any] | None) -> str:
    chosen = (extra_info or {}).get("rewardpipe_reward")
    if isinstance(chosen, str):
        return chosen  # an unknown name is a configuration error: score_samples raises naming it
    if isinstance(data_source, str):
        if data_source in DATA_SOURCE_REWARDS:
            return DATA_SOURCE_REWARDS[data_source]
        if data_source in REWARDS:
            return data_source
    return DEFAULT_REWARD


def compute_score(data_source: Any, solution_str: Any, ground_truth: Any, extra_info: Mapping[str, Any] | None = None,
                  **_: Any) -> dict[str, float]:
    """``{"score": aggregate, <component>: value, ..., "reward_error": 0|1, <diagnostics>}``."""
    info = extra_info if isinstance(extra_info, Mapping) else {}
    prompt = info.get("question") or info.get("prompt") or ""
    sample = {
        "id": info.get("index"),
        "messages": [{"role": "user", "content": prompt if isinstance(prompt, (str, list)) else str(prompt)},
                     {"role": "assistant", "content": solution_str if isinstance(solution_str, (str, list)) else ""}],
        "metadata": {"reference_answer": ground_truth},
    }
    result = score_samples([sample], reward_for(data_source, info))[0]
    out: dict[str, float] = {"score": float(result["aggregate_reward_score"])}
    for metric in result["metrics_list"]:
        out[metric["name"]] = float(metric["value"])
    return out
