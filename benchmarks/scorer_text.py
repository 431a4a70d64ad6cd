"""Scorer CPU on hostile model text (issue 19 item 7): the parsers and the loop check, old against new.

Round three found two quadratic costs on one line of model text: the code-fence regex (32,000 characters of
spaces after a fence: 9-12 s of scorer CPU) and the loop similarity (difflib's ratio: about 1 s for two turns
of 3,000 random characters). This measures, in CPU time of this process (``time.process_time``: what other
processes on a loaded machine do is not counted):

* ``parse_turn`` on the fence attack, and on random text, at 32,000 characters;
* the loop check (``find_loop``) on two turns of 3,000 and of 32,000 random characters;
* the whole ask-before-coding reward on a conversation holding 32,000 hostile characters;

next to the round-three baselines, re-created here (the fence regex and ``difflib.SequenceMatcher.ratio``),
timed on the same inputs in the same process where they finish in reasonable time. Also the growth from
8,000 to 32,000 characters (4x the text: a linear cost takes about 4x the time).

    .venv/bin/python benchmarks/scorer_text.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import random
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rewardpipe.envs.ask_before_coding.reward import ASK_BEFORE_CODING
from rewardpipe.envs.ask_before_coding.similarity import find_loop
from rewardpipe.models import Message
from rewardpipe.parsing import parse_turn

# Round three's fence pattern (rewardpipe/parsing.py before issue 19), applied to every line as it was.
OLD_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$")


def random_text(seed: int, n: int, alphabet: str = "abcdefghijklmnopqrstuvwxyz     .,?`\n") -> str:
    rng = random.Random(seed)
    return "".join(rng.choices(alphabet, k=n))


def best_cpu(call, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        parse_turn.cache_clear()
        started = time.process_time()
        call()
        best = min(best, time.process_time() - started)
    return best


def conversation(text: str) -> list[Message]:
    return [
        Message(role="user", content="Write a function `f(x)`."),
        Message(role="assistant", content=text + "?"),
        Message(role="user", content="Okay."),
        Message(role="assistant", content=text[::-1] + "?"),
        Message(role="user", content="Okay."),
        Message(role="assistant", content="```python\n" + text + "\n```"),
    ]


def measure(n: int, rounds: int) -> dict[str, float]:
    fence, text, other = "```" + " " * n + "`", random_text(1, n), random_text(2, n)
    a, b = random_text(1, n, "ab"), random_text(2, n, "ab")  # two letters: every run recurs everywhere
    hostile = conversation(random_text(3, n))
    return {
        f"parse_turn fence attack {n}": best_cpu(lambda: parse_turn(fence), rounds),
        f"parse_turn random {n}": best_cpu(lambda: parse_turn(text), rounds),
        f"find_loop two random turns {n}": best_cpu(lambda: find_loop([text, other]), rounds),
        f"find_loop two random turns over 'ab' {n}": best_cpu(lambda: find_loop([a, b]), rounds),
        f"ask_before_coding reward {n}": best_cpu(lambda: ASK_BEFORE_CODING.score(hostile, None), rounds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    rows = {}
    for n in (8_000, 32_000):
        rows.update(measure(n, rounds))
    rows["find_loop two random turns 3000"] = best_cpu(
        lambda: find_loop([random_text(1, 3000), random_text(2, 3000)]), rounds
    )
    # The baselines, where they end in reasonable time (the fence regex at 32,000 takes 9-12 s a call).
    baseline = {
        "old fence regex 8000": best_cpu(lambda: OLD_FENCE.match("```" + " " * 8_000 + "`"), 1),
        "old difflib ratio two random turns 3000": best_cpu(
            lambda: difflib.SequenceMatcher(None, random_text(1, 3000), random_text(2, 3000), autojunk=False).ratio(), 1
        ),
    }
    growth = {
        name: rows[f"{name} 32000"] / max(rows[f"{name} 8000"], 1e-9)
        for name in (
            "parse_turn fence attack",
            "parse_turn random",
            "find_loop two random turns",
            "find_loop two random turns over 'ab'",
            "ask_before_coding reward",
        )
    }
    report = {
        "cpu_seconds": {k: round(v, 5) for k, v in rows.items()},
        "baseline_cpu_seconds": {k: round(v, 5) for k, v in baseline.items()},
        "speedup_fence_8000": round(
            baseline["old fence regex 8000"] / max(rows["parse_turn fence attack 8000"], 1e-9), 1
        ),
        "speedup_loop_3000": round(
            baseline["old difflib ratio two random turns 3000"] / max(rows["find_loop two random turns 3000"], 1e-9), 1
        ),
        "growth_8000_to_32000 (linear ~4)": {k: round(v, 2) for k, v in growth.items()},
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
