"""Framework overhead of TRL's ``reward_funcs`` over a user reward of three cheap components.

TRL calls every reward function with the batch's prompts, completions and dataset columns; rewardpipe scores
the batch once (the first function) and serves the other components from it. The baseline calls the same
three plain functions in a loop over the completions, in the same process. Issue 17 asks for rewardpipe's
time to be at most 1.25x the baseline over 4,096 completions.

    .venv/bin/python benchmarks/trl_overhead.py [--completions 4096] [--rounds 15]

The two are timed in alternation, round after round, in CPU time of this process (``time.process_time``:
what other processes on a loaded machine do is not counted); prints the median and the best round of each,
their ratios and the load average beside them.
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

from rewardpipe import Reward, component  # noqa: E402
from rewardpipe.integrations.trl import reward_functions  # noqa: E402


def _parse(completion: str):
    try:
        return json.loads(completion)
    except ValueError:
        return None


@component(range=(0.0, 1.0), role="shaping")
def valid_json(completion: str) -> float:
    return 1.0 if _parse(completion) is not None else 0.0


@component(range=(0.0, 1.0), role="shaping", weight=0.5)
def has_answer_field(completion: str) -> float:
    data = _parse(completion)
    return 1.0 if isinstance(data, dict) and "answer" in data else 0.0


@component(range=(0.0, 1.0), role="outcome")
def answer_matches(completion: str, reference) -> float | None:
    data = _parse(completion)
    if reference is None:
        return None
    return 1.0 if isinstance(data, dict) and str(data.get("answer")) == str(reference) else 0.0


JSON_ANSWER = Reward("json_answer", [valid_json, has_answer_field, answer_matches])


def batch(size: int) -> tuple[list[str], list[str], list[str]]:
    prompts = [f"Question {i}: answer in JSON with an 'answer' field." for i in range(size)]
    completions = []
    for i in range(size):
        if i % 5 == 0:
            completions.append(f"The answer is {i}")
        elif i % 5 == 1:
            completions.append(json.dumps({"reasoning": "short", "value": i}))
        else:
            completions.append(json.dumps({"reasoning": "I added the numbers.", "answer": i if i % 3 else i + 1}))
    answers = [str(i) for i in range(size)]
    return prompts, completions, answers


def plain_loop(completions: list[str], answers: list[str]) -> list[list]:
    return [[valid_json.fn(c), has_answer_field.fn(c), answer_matches.fn(c, a)] for c, a in zip(completions, answers)]


def through_rewardpipe(funcs, prompts, completions, answers) -> list[list]:
    return [fn(prompts=prompts, completions=completions, answer=answers, trainer_state=None) for fn in funcs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--completions", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    prompts, completions, answers = batch(args.completions)
    funcs, _ = reward_functions(JSON_ANSWER)
    # Same answers both ways (and rewardpipe's really scores: TRL's list per component).
    expected = plain_loop(completions, answers)
    got = through_rewardpipe(funcs, prompts, completions, answers)
    assert [list(row) for row in zip(*got)] == expected, "rewardpipe and the plain loop disagree"
    plain, ours = [], []
    for _ in range(args.rounds):
        # TRL builds new lists every step: a fresh copy per round, so nothing is served from the last one.
        p, c, a = list(prompts), list(completions), list(answers)
        start = time.process_time()
        plain_loop(c, a)
        plain.append(time.process_time() - start)
        p, c, a = list(prompts), list(completions), list(answers)
        start = time.process_time()
        through_rewardpipe(funcs, p, c, a)
        ours.append(time.process_time() - start)
    base, mine = statistics.median(plain), statistics.median(ours)
    load = os.getloadavg()
    print(
        json.dumps(
            {
                "completions": args.completions,
                "rounds": args.rounds,
                "plain_loop_s": {"median": round(base, 5), "best": round(min(plain), 5)},
                "rewardpipe_s": {"median": round(mine, 5), "best": round(min(ours), 5)},
                "ratio_median": round(mine / base, 3),
                "ratio_best": round(min(ours) / min(plain), 3),
                "target_ratio": 1.25,
                "load_average": [round(x, 2) for x in load],
                "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }
        )
    )


if __name__ == "__main__":
    main()
