"""Benchmark: how often the `dying` early warning fires before `dead`, and how often it fires for nothing.

    .venv/bin/python benchmarks/dying.py               # 40 seeds per case
    .venv/bin/python benchmarks/dying.py --seeds 8     # quicker

A component ``c`` is scored in ``G`` groups of K = 4 rollouts per step; each group is constant (zero
within-group variance) with probability ``p(step)``, independently: the zero-variance share a step shows is a
binomial proportion around ``p``. Every run goes through ``monitor_records`` in one pass (small steps are
pooled as the monitor pools them).

* steady rises: ``p`` goes linearly from 0 to 1 over 40 steps (then 20 steps); a run counts when the first
  ``dying_component`` alarm comes before the first ``dead`` verdict;
* stationary processes over 40 steps: ``p`` constant at 0, 0.1 and 0.3, and a bump (0.1 up to 0.3, or 0.4, at
  step 20, back to 0.1 at step 40: a rise of 1 or 1.5 points per step, slower than ``dying_min_slope``'s 2, that
  never reaches ``dead_fraction``); a run counts when it raises any ``dying_component`` alarm (a false warning).

The simulation is :func:`simulate` (tests/monitoring/test_dying_power.py runs a few seeds of it).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rewardpipe.monitoring import Thresholds, monitor_records
from tests.monitoring.test_library_duplicates import rec

K = 4
GROUP_SIZES = (1, 2, 4, 10, 50)


def rise(steps: int) -> Callable[[int], float]:
    return lambda step: min(1.0, step / (steps - 1))


def constant(p: float) -> Callable[[int], float]:
    return lambda _step: p


def bump(low: float, high: float, steps: int) -> Callable[[int], float]:
    half = steps / 2
    return lambda step: low + (high - low) * (1 - abs(step - half) / half)


#: name -> (p of step, steps run, whether the component really dies)
CASES: dict[str, tuple[Callable[[int], float], int, bool]] = {
    "rise 0->100% over 40 steps": (rise(40), 40, True),
    "rise 0->100% over 20 steps": (rise(20), 24, True),
    "constant 0%": (constant(0.0), 40, False),
    "constant 10%": (constant(0.1), 40, False),
    "constant 30%": (constant(0.3), 40, False),
    "bump 10%->30%->10%": (bump(0.1, 0.3, 40), 40, False),
    "bump 10%->40%->10%": (bump(0.1, 0.4, 40), 40, False),
}


def records(p_of_step: Callable[[int], float], steps: int, groups: int, seed: int) -> list[dict]:
    rnd = random.Random(seed)
    out = []
    for step in range(steps):
        p = p_of_step(step)
        for g in range(groups):
            constant_group = rnd.random() < p
            out.extend(rec(step, g, k, 0.5 if constant_group else float(k % 2), run="sim") for k in range(K))
    return out


def simulate(case: str, groups: int, seed: int, thresholds: Thresholds | None = None) -> tuple[int | None, int | None]:
    """(first dying_component alarm step, first dead verdict step) of component c in one seeded run."""
    p_of_step, steps, _ = CASES[case]
    result = monitor_records(records(p_of_step, steps, groups, seed), thresholds)
    dying = [a.step for a in result.alarms if a.component == "c" and a.kind == "dying_component"]
    dead = [r.step for r in result.steps if r.components["c"].verdict == "dead"]
    return (dying[0] if dying else None, dead[0] if dead else None)


def warned_in_time(first_dying: int | None, first_dead: int | None) -> bool:
    return first_dying is not None and (first_dead is None or first_dying < first_dead)


def rate(case: str, groups: int, seeds: range) -> float:
    """Share of seeds that warn before dead (a rise) or warn at all (a stationary case)."""
    dies = CASES[case][2]
    hits = 0
    for seed in seeds:
        first_dying, first_dead = simulate(case, groups, seed)
        hits += warned_in_time(first_dying, first_dead) if dies else first_dying is not None
    return hits / len(seeds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=40)
    args = parser.parse_args()
    seeds = range(args.seeds)
    started = time.perf_counter()
    print(f"{'case':<30}" + "".join(f"{f'G={g}':>8}" for g in GROUP_SIZES) + "   (share of seeds)")
    for case, (_, _, dies) in CASES.items():
        what = "dying before dead" if dies else "false dying"
        cells = "".join(f"{rate(case, g, seeds):>8.2f}" for g in GROUP_SIZES)
        print(f"{case:<30}{cells}   {what}")
    print(f"{args.seeds} seeds per cell, {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
