"""Benchmark: the monitor over 1,000,000 component values against a pandas groupby, in one process.

    .venv/bin/python benchmarks/monitor.py              # 250,000 rollouts x 4 components, groups of 8
    .venv/bin/python benchmarks/monitor.py --rollouts 50000   # quicker

What it prints:

1. Time of ``rewardpipe.monitoring.monitor_records`` (the entry point the CLI and the Lambda call) over a
   list of Record objects, and of a pandas baseline computing the same statistics from the same list
   (mean, population std, per-group std, share of groups with >= 2 values whose std <= 1e-6, for the
   four components and the aggregate): once including building the DataFrame from the records, once the
   groupby alone. The two results are checked to agree before any figure is printed.
2. Peak traced memory (tracemalloc, allocations made during the call) of both, over the same list.
3. Memory against input shape, the monitor reading a lazy stream of records (nothing held but what the
   monitor keeps): the base case, twice the records in the same groups, and the same records in twice
   the groups. Memory should follow groups, not records.

Timings are best of ``--repeat`` runs; tracemalloc runs are separate because tracing slows Python down.
"""

from __future__ import annotations

import argparse
import gc
import math
import platform
import random
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd

from rewardpipe.models import Record
from rewardpipe.monitoring import Thresholds, monitor_records

COMPONENTS = ("correctness", "asked_before_coding", "guessed_immediately", "loop_penalty")
WEIGHTS = {"correctness": 1.0, "asked_before_coding": 0.6, "guessed_immediately": 0.4, "loop_penalty": 0.2}
EPS = 1e-6


def synthetic(rollouts: int, group_size: int, seed: int = 0) -> Iterator[Record]:
    """Rollouts in groups; each group's behaviour differs, so some groups are constant, some vary,
    and about 1% of records are infrastructure errors."""
    rnd = random.Random(seed)
    for i in range(rollouts):
        g = i // group_size
        if rnd.random() < 0.01:
            yield Record.model_construct(
                run_id="bench",
                step=0,
                group_id=f"prompt-{g}",
                rollout_id=f"prompt-{g}_{i % group_size}",
                task_id=f"task-{g % 500}",
                status="error",
                error=None,
                components={k: None for k in COMPONENTS},
                weights=WEIGHTS,
                aggregate=None,
                metrics={},
            )
            continue
        hard = g % 3 == 0  # a third of the prompts: every rollout fails the tests
        comps = {
            "correctness": 0.0 if hard else rnd.choice((0.0, 0.25, 0.5, 1.0)),
            "asked_before_coding": 1.0 if g % 5 == 0 else rnd.choice((0.0, 0.6, 1.0)),
            "guessed_immediately": rnd.choice((0.0, -1.0)),
            "loop_penalty": -0.5 if rnd.random() < 0.05 else 0.0,
        }
        yield Record.model_construct(
            run_id="bench",
            step=0,
            group_id=f"prompt-{g}",
            rollout_id=f"prompt-{g}_{i % group_size}",
            task_id=f"task-{g % 500}",
            status="scored",
            error=None,
            components=comps,
            weights=WEIGHTS,
            aggregate=sum(WEIGHTS[k] * v for k, v in comps.items()),
            metrics={},
        )


# -- the baseline -----------------------------------------------------------------------------------


def pandas_frame(records: list[Record]) -> pd.DataFrame:
    rows = [
        {"step": r.step, "group_id": r.group_id, **r.components, "aggregate": r.aggregate}
        for r in records
        if r.status == "scored"
    ]
    return pd.DataFrame.from_records(rows)


def pandas_stats(df: pd.DataFrame) -> dict[tuple[int, str], dict[str, float]]:
    cols = [*COMPONENTS, "aggregate"]
    by_step = df.groupby("step")[cols]
    mean, std = by_step.mean(), by_step.std(ddof=0)
    by_group = df.groupby(["step", "group_id"])[cols]
    count, gstd = by_group.count(), by_group.std(ddof=0)
    eligible = count >= 2
    zero = (gstd <= EPS) & eligible
    n_eligible = eligible.groupby(level="step").sum()
    n_zero = zero.groupby(level="step").sum()
    wstd = gstd.where(eligible).groupby(level="step").mean()
    out = {}
    for step in mean.index:
        for col in cols:
            out[(step, col)] = {
                "mean": mean.at[step, col],
                "std": std.at[step, col],
                "within_group_std_mean": wstd.at[step, col],
                "zero_variance_group_fraction": n_zero.at[step, col] / n_eligible.at[step, col],
            }
    return out


def pandas_from_records(records: list[Record]):
    return pandas_stats(pandas_frame(records))


# -- measurement helpers ----------------------------------------------------------------------------


def best_time(fn: Callable[[], object], repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def peak_mib(fn: Callable[[], object]) -> float:
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    result = fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del result
    return (peak - base) / 2**20


def check_agreement(records: list[Record]) -> None:
    result = monitor_records(records, Thresholds()).step(0)
    reference = pandas_from_records(records)
    for name in [*COMPONENTS, "aggregate"]:
        ours = result.aggregate if name == "aggregate" else result.components[name]
        ref = reference[(0, name)]
        for key, value in ref.items():
            mine = getattr(ours, key)
            if not math.isclose(mine, float(value), rel_tol=1e-9, abs_tol=1e-9):
                raise SystemExit(f"MISMATCH {name}.{key}: monitor {mine} vs pandas {value}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=250_000)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    n, k = args.rollouts, args.group_size
    values = n * len(COMPONENTS)

    print(f"python {platform.python_version()}, pandas {pd.__version__}, {platform.machine()}, one process, one thread")
    print(
        f"input: {n:,} rollouts x {len(COMPONENTS)} components = {values:,} component values, "
        f"groups of {k} ({n // k:,} groups), ~1% error records; the aggregate is monitored too"
    )
    t0 = time.perf_counter()
    records = list(synthetic(n, k))
    print(f"(generated the Record objects in {time.perf_counter() - t0:.1f} s; not part of any figure below)")

    check_agreement(records)
    print(
        "check: monitor and pandas agree on mean, std, within-group std and zero-variance share "
        "for every component and the aggregate\n"
    )

    t_mon = best_time(partial(monitor_records, records), args.repeat)
    t_pd_all = best_time(partial(pandas_from_records, records), args.repeat)
    frame = pandas_frame(records)
    t_pd_groupby = best_time(partial(pandas_stats, frame), args.repeat)

    m_mon = peak_mib(partial(monitor_records, records))
    m_pd_all = peak_mib(partial(pandas_from_records, records))
    m_pd_groupby = peak_mib(partial(pandas_stats, frame))
    del frame

    print(f"{'':38} {'time':>9} {'values/s':>12} {'peak MiB':>9}")
    rows = [
        ("monitor_records (streaming)", t_mon, m_mon),
        ("pandas: frame from records + groupby", t_pd_all, m_pd_all),
        ("pandas: groupby on a ready frame", t_pd_groupby, m_pd_groupby),
    ]
    for label, t, m in rows:
        print(f"{label:38} {t:8.2f}s {values / t:12,.0f} {m:9.1f}")
    print(f"\nratio pandas(from records) / monitor: time {t_pd_all / t_mon:.2f}x, memory {m_pd_all / m_mon:.2f}x")
    print(
        f"ratio pandas(groupby only)  / monitor: time {t_pd_groupby / t_mon:.2f}x, memory {m_pd_groupby / m_mon:.2f}x"
    )
    goal = "meets" if t_mon <= 5.0 else "MISSES"
    print(f"goal <= 5 s for {values:,} values on one core: {goal} ({t_mon:.2f} s)")
    del records
    gc.collect()

    print("\nmemory vs input shape (monitor reading a lazy stream; peak of what it keeps):")
    shapes = [
        ("base", n, k),
        ("2x records, same groups", 2 * n, 2 * k),
        ("same records, 2x groups", n, max(k // 2, 2)),
    ]
    base_peak = None
    for label, rollouts, size in shapes:
        # dedupe=False: the streaming path (monitor_step and the CLI's careful read, whose sources cannot repeat a
        # record); the default holds every record until the end of the input to keep the last of repeated copies
        peak = peak_mib(lambda rollouts=rollouts, size=size: monitor_records(synthetic(rollouts, size), dedupe=False))
        base_peak = base_peak or peak
        print(
            f"  {label:26} {rollouts:>9,} records {rollouts // size:>9,} groups  peak {peak:7.1f} MiB"
            f"  ({peak / base_peak:.2f}x base)"
        )


if __name__ == "__main__":
    main()
