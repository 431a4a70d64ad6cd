"""A stationary binary outcome just below the dead threshold: how often does a noisy step raise a dead alarm?

Each group of K rollouts passes each rollout with probability p, independently, at every step (nothing changes:
the expected zero-variance share is (1 - p)^K + p^K, below ``dead_fraction``). Prints, for ``raise_after`` 1 and 3,
the share of runs of STEPS steps with a ``dead_component`` alarm, the median step it came at, and how many such
alarms cleared (``recovered``). Deterministic (seeded). ``.venv/bin/python benchmarks/near_dead.py``
"""

from __future__ import annotations

import random
import statistics

from rewardpipe.monitoring import Thresholds, monitor_records

STEPS, GROUPS, SEEDS = 100, 32, 10


def records(p: float, k: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for step in range(STEPS):
        for g in range(GROUPS):
            for i in range(k):
                right = float(rng.random() < p)
                out.append(
                    {
                        "schema": "rewardpipe.record/v1",
                        "run_id": "near-dead",
                        "step": step,
                        "group_id": f"g{g}",
                        "rollout_id": f"s{step}g{g}r{i}",
                        "task_id": f"t{g}",
                        "status": "scored",
                        "error": None,
                        "components": {"correctness": right, "b": i / k},
                        "weights": {"correctness": 1.0, "b": 1.0},
                        "aggregate": right + i / k,
                        "metrics": {},
                    }
                )
    return out


def main() -> None:
    print(f"{STEPS} steps x {GROUPS} groups, {SEEDS} seeds a cell")
    print("p      K  expected share  raise_after  runs alarmed  median step  cleared")
    for p, k in ((0.10, 4), (0.05, 4), (0.03, 8)):
        expected = (1 - p) ** k + p**k
        for raise_after in (1, 3):
            steps, cleared = [], 0
            for seed in range(SEEDS):
                result = monitor_records(records(p, k, seed), Thresholds(raise_after=raise_after))
                dead = [a.step for a in result.alarms if a.kind == "dead_component" and a.component == "correctness"]
                cleared += sum(a.kind == "recovered" and a.component == "correctness" for a in result.alarms)
                if dead:
                    steps.append(dead[0])
            median = statistics.median(steps) if steps else "-"
            alarmed = f"{len(steps)}/{SEEDS}"
            print(f"{p:<6} {k:<2} {expected:<15.3f} {raise_after:<12} {alarmed:<13} {median!s:<12} {cleared}")


if __name__ == "__main__":
    main()
