"""The loop check on a long transcript: the bit-parallel gap match against the textbook table it replaced.

``find_loop`` compares each assistant turn with the 32 before it (``LOOP_LOOKBACK_TURNS``). Two different short
questions share few runs of 4 characters, so nearly all of each comparison is the exact LCS of the stretches
between anchors (``_gap_match``). It was a Python double loop over a table (up to 32 x 128 cells a gap); it is
now bit-parallel (one int per table row). This times, in CPU time of this process (``time.process_time``: other
processes on a loaded machine are not counted), ``find_loop`` on transcripts of 96 and 384 turns of random
words (none a loop, so every pair in the lookback is compared), with each gap match in turn, in the same
process, best of ``--rounds``. Both must find the same (no) loop and give the same similarities.

    .venv/bin/python benchmarks/loop_check.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rewardpipe.envs.ask_before_coding import similarity

WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
    "amber",
    "basil",
    "cedar",
    "dune",
    "ember",
    "fjord",
    "grove",
    "heron",
]


def textbook_gap_match(a: str, b: str) -> int:
    """The gap match before: the LCS table, row by row (same bounds, same value)."""
    if not a or not b or min(len(a), len(b)) > similarity.GAP_CHARS or max(len(a), len(b)) > similarity.GAP_CHARS * 4:
        return 0
    short, other = (a, b) if len(a) <= len(b) else (b, a)
    previous = [0] * (len(short) + 1)
    for char in other:
        current = [0]
        for index, mine in enumerate(short):
            current.append(previous[index] + 1 if char == mine else max(previous[index + 1], current[index]))
        previous = current
    return previous[-1]


def transcript(turns: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return ["Should " + " ".join(rng.choices(WORDS, k=6)) + "?" for _ in range(turns)]


def best_cpu(call, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        call()
        best = min(best, time.process_time() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    bit_parallel = similarity._gap_match
    results = []
    for turns in (96, 384):
        text = transcript(turns)
        pairs = [(text[i], text[j]) for i in range(len(text)) for j in range(max(0, i - 4), i)]
        row: dict = {"turns": turns}
        for name, gap_match in (("textbook", textbook_gap_match), ("bit_parallel", bit_parallel)):
            similarity._gap_match = gap_match
            try:
                row[name + "_found"] = similarity.find_loop(text)
                row[name + "_similarities"] = [round(similarity.turn_similarity(a, b), 9) for a, b in pairs]
                row[name + "_cpu_s"] = round(best_cpu(lambda text=text: similarity.find_loop(text), args.rounds), 4)
            finally:
                similarity._gap_match = bit_parallel
        assert row["textbook_found"] == row["bit_parallel_found"], row
        assert row.pop("textbook_similarities") == row.pop("bit_parallel_similarities"), "the similarities differ"
        row["speedup"] = round(row["textbook_cpu_s"] / row["bit_parallel_cpu_s"], 2)
        results.append(row)
        print(
            f"{turns} turns: find_loop {row['textbook_cpu_s'] * 1000:.0f} ms with the table, "
            f"{row['bit_parallel_cpu_s'] * 1000:.0f} ms bit-parallel ({row['speedup']}x)"
        )
    print(json.dumps({"load_average": os.getloadavg(), "rounds": args.rounds, "results": results}))


if __name__ == "__main__":
    main()
