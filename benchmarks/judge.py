"""An LLM-judged component over a batch: 64 samples against a local judge that takes 50 ms per call.

Issue 17 asks for the batch to take at most 0.6 s at concurrency 8 (a serial judge takes 64 x 50 ms = 3.2 s).
The judge is a real HTTP server on 127.0.0.1 in this process (tests/judge/fake_judge.py), answering each
request after ``--delay-ms``; the reward is scored with ``Reward.score_many`` (what every batch path uses), once
with ``concurrency=1`` (the serial baseline) and once with ``--concurrency``, alternately, ``--rounds`` times,
each with a fresh judge (an empty cache), and once more on a warm cache. Wall-clock time: the judge's latency is
the point. Prints the medians, their ratio, the most requests the server saw at once, and the load average.

    .venv/bin/python benchmarks/judge.py [--samples 64] [--delay-ms 50] [--concurrency 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rewardpipe import Message, Reward, ScoringInput, llm_judge
from tests.judge.fake_judge import FakeJudge


def samples(count: int) -> list[ScoringInput]:
    out = []
    for i in range(count):
        text = f"Answer {i}: {'a good one' if i % 3 else 'not much'}"
        out.append(
            ScoringInput(
                completion=text,
                messages=[Message(role="user", content=f"Question {i}?"), Message(role="assistant", content=text)],
            )
        )
    return out


def timed(url: str, batch: list[ScoringInput], concurrency: int) -> tuple[float, list]:
    judge = llm_judge(
        "helpful", "Does the response answer {prompt} well?", base_url=url, model="local-judge", concurrency=concurrency
    )
    reward = Reward("judged", [judge])
    start = time.perf_counter()
    scores = reward.score_many(batch)
    elapsed = time.perf_counter() - start
    warm_start = time.perf_counter()
    again = reward.score_many(batch)
    warm = time.perf_counter() - warm_start
    assert [s.components for s in again] == [s.components for s in scores]
    judge.fn.judge.close()
    return elapsed, [scores, warm]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--delay-ms", type=float, default=50.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    batch = samples(args.samples)
    serial, bounded, warm = [], [], []
    with FakeJudge(delay_s=args.delay_ms / 1000.0) as server:
        timed(server.url, batch[:4], args.concurrency)  # connections and threads made once before timing
        for _ in range(args.rounds):
            server.max_in_flight = 0
            elapsed, (scores, warm_s) = timed(server.url, batch, args.concurrency)
            bounded.append(elapsed)
            warm.append(warm_s)
            peak = server.max_in_flight
            assert all(s.error is None for s in scores), [s.error for s in scores if s.error][:2]
            serial.append(timed(server.url, batch, 1)[0])
    base, mine = statistics.median(serial), statistics.median(bounded)
    print(
        json.dumps(
            {
                "samples": args.samples,
                "judge_delay_ms": args.delay_ms,
                "concurrency": args.concurrency,
                "rounds": args.rounds,
                "serial_s": round(base, 3),
                "concurrent_s": round(mine, 3),
                "concurrent_best_s": round(min(bounded), 3),
                "warm_cache_s": round(statistics.median(warm), 4),
                "speedup": round(base / mine, 2),
                "ratio_to_serial": round(mine / base, 3),
                "target_s": 0.6,
                "meets_target": mine <= 0.6,
                "max_requests_in_flight": peak,
                "load_average": [round(x, 2) for x in os.getloadavg()],
                "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }
        )
    )


if __name__ == "__main__":
    main()
