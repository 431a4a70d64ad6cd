"""TRL ``GRPOTrainer`` adapter: one reward function per component, and the within-group monitor per batch.

TRL logs every reward function on its own (``rewards/<name>/mean`` and ``/std``) and sums them with
``reward_weights``. Handing it one function per component gives per-component curves for free, and the
weights stay rewardpipe's::

    from rewardpipe.integrations.trl import reward_functions
    funcs, weights = reward_functions("gsm8k")
    trainer = GRPOTrainer(model=..., reward_funcs=funcs, args=GRPOConfig(reward_weights=weights, ...), ...)

A sample that cannot be scored (unreadable reference, harness failure) gets ``None`` from every function:
TRL treats ``None`` as "no reward" and leaves it out, where a 0.0 would enter the group's baseline.

TRL's batch statistics are batch-wide; the within-group view is :func:`monitor_batch`, which takes the
values TRL passes around (one list per component, completions of one prompt adjacent) and returns the same
report the local runner and the variance-check Lambda produce. It does not import TRL.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from rewardpipe.rewards import get_reward
from rewardpipe.single_turn import score_samples

RewardFn = Callable[..., list]

# Dataset columns read as the reference answer, in order of preference (GSM8K calls it "answer").
REFERENCE_COLUMNS = ("reference_answer", "answer", "solution")


def _as_messages(value: Any, role: str) -> list[dict[str, Any]]:
    """TRL passes plain strings (standard datasets) or message lists (conversational datasets)."""
    if isinstance(value, list):
        return list(value)
    return [{"role": role, "content": value}]


def _samples(prompts: Sequence[Any], completions: Sequence[Any], columns: Mapping[str, Any]) -> list[dict]:
    samples = []
    for index, completion in enumerate(completions):
        metadata = {name: values[index] for name, values in columns.items()
                    if isinstance(values, (list, tuple)) and len(values) == len(completions)}
        reference = next((metadata[c] for c in REFERENCE_COLUMNS if metadata.get(c) is not None), None)
        if reference is not None:
            metadata["reference_answer"] = reference
        prompt = prompts[index] if index < len(prompts) else ""
        messages = _as_messages(prompt, "user") + _as_messages(completion, "assistant")
        samples.append({"id": index, "messages": messages, "metadata": metadata})
    return samples


def reward_functions(
    reward_name: str = "gsm8k", weights: Mapping[str, float] | None = None, executor: Any = None
) -> tuple[list[RewardFn], list[float]]:
    """``(reward_funcs, reward_weights)`` for ``GRPOTrainer``: one function per component of the reward.

    The batch is scored once (the first function called for a batch scores it, the others read the
    result), so code is executed once per completion however many components there are.
    """
    reward = get_reward(reward_name, weights)
    cache: dict[str, Any] = {"key": None, "results": None}

    def scored(prompts, completions, columns) -> list[dict]:
        key = (id(completions), len(completions), id(prompts))
        if cache["key"] != key:
            cache["results"] = score_samples(_samples(prompts, completions, columns), reward.name,
                                             reward.weights, executor=executor)
            cache["key"] = key
        return cache["results"]

    def component_fn(name: str) -> RewardFn:
        def fn(prompts, completions, **columns) -> list:
            values = []
            for result in scored(prompts, completions, columns):
                metrics = {m["name"]: m["value"] for m in result["metrics_list"]}
                values.append(None if metrics.get("reward_error") else metrics.get(name))
            return values

        fn.__name__ = f"{reward.name}_{name}"  # TRL names its logged columns after the function
        return fn

    return [component_fn(c.name) for c in reward.components], [c.weight for c in reward.components]


def monitor_batch(
    component_values: Mapping[str, Sequence[float | None]],
    group_size: int,
    step: int = 0,
    thresholds: Any = None,
    previous_state: Any = None,
):
    """Within-group verdicts for one TRL batch (``num_generations`` adjacent completions per prompt).

    ``component_values`` maps a component to one value per completion, ``None`` for an unscorable one;
    a completion whose values are all ``None`` counts as an error record. Returns a ``MonitorResult``;
    pass its ``state`` back as ``previous_state`` on the next step to keep the alarm hysteresis.
    """
    from rewardpipe.monitoring import monitor_records

    if group_size < 1:
        raise ValueError("group_size must be at least 1")
    lengths = {len(values) for values in component_values.values()}
    if len(lengths) > 1:
        raise ValueError(f"every component needs one value per completion; got lengths {sorted(lengths)}")
    count = lengths.pop() if lengths else 0
    if count % group_size:
        raise ValueError(f"{count} completions do not split into groups of {group_size}")
    records = []
    for index in range(count):
        components = {name: values[index] for name, values in component_values.items()}
        failed = all(value is None for value in components.values())
        records.append({
            "run_id": "trl", "step": step, "group_id": f"g{index // group_size}", "rollout_id": f"c{index}",
            "task_id": f"p{index // group_size}", "status": "error" if failed else "scored",
            "error": {"kind": "unscored", "message": "no component could be computed"} if failed else None,
            "components": components, "weights": {name: 1.0 for name in components},
            "aggregate": None if failed or any(v is None for v in components.values())
            else sum(components.values()),
        })
    return monitor_records(records, thresholds, previous_state)
