"""Records built to show what the report must find."""

from __future__ import annotations

from typing import Any

WEIGHTS = {"a": 1.0, "b": 0.5}


def rec(
    step: int, group: str, k: int, task: str, status: str = "scored", run: str = "r", weights=None, **components: Any
) -> dict:
    weights = weights or {name: WEIGHTS.get(name, 1.0) for name in components}
    scored = status == "scored" and all(v is not None for v in components.values())
    return {
        "schema": "rewardpipe.record/v1",
        "run_id": run,
        "step": step,
        "group_id": group,
        "rollout_id": f"{group}-k{k}",
        "task_id": task,
        "status": status,
        "error": None if status == "scored" else {"kind": "executor_crash", "message": "boom"},
        "components": components,
        "weights": weights,
        "aggregate": sum(weights[n] * v for n, v in components.items()) if scored else None,
        "metrics": {"exec_status": "failed"},
    }


from tests.cli.conftest import cli  # noqa: E402,F401 - the CLI runner fixture, shared
