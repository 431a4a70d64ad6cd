"""Loop the round-four attacks on the trusted side through one sandbox in its weakest configuration, and count
every verdict that is not the one the rules give.

The configuration is Lambda's (fork servers unprivileged, one uid for every sandbox process) with seccomp off,
so the job's code can reach the runner, the waiting children and the fork server's neighbours by pid; only
the trusted side's own checks stand between an attack and the next job. Each round is: an honest job (must
pass), the attack with a wrong answer (must fail, or time out when it stopped the runner: never an `error`),
then two honest jobs (must pass). A race the unit tests hit once in a while shows here in a few seconds.

    sudo .venv/bin/python scripts/degraded_attack_loop.py --rounds 300 [--stop]

Needs root (the fork servers start as uid 65531, so nothing else on the machine shares it). Exits 1 if any
verdict was wrong, printing each.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository: its tests' payloads

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.sandbox import make_executor
from tests.security.conftest import RIGHT_ADD, job
from tests.security.test_round_four import (
    KILL_THE_RUNNER,
    LOWER_THE_RUNNERS_LIMITS,
    STOP_THE_OTHERS,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300, help="rounds per attack (4 jobs each)")
    parser.add_argument("--stop", action="store_true", help="also stop the neighbours (each such attack waits 1 s)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        parser.error("needs root, to start the fork servers as another uid")
    attacks = {"limits": LOWER_THE_RUNNERS_LIMITS, "kill": KILL_THE_RUNNER}
    if args.stop:
        attacks["stop"] = STOP_THE_OTHERS
    executor = make_executor(workers=1, server_uid=65531, disable=frozenset({"landlock", "seccomp"}))
    wrong, jobs = 0, 0
    try:
        for number in range(args.rounds):
            for name, payload in attacks.items():
                # A wrong answer: failed, or a timeout where the runner was within the payload's reach and
                # stopped (a 0 either way; an `error` would drop it from GRPO).
                zero = {ExecutionStatus.FAILED, ExecutionStatus.TIMEOUT} if name == "stop" else {ExecutionStatus.FAILED}
                steps = [
                    ("honest", RIGHT_ADD, {ExecutionStatus.PASSED}, 5),
                    ("attack", payload, zero, 1 if name == "stop" else 5),
                    ("honest", RIGHT_ADD, {ExecutionStatus.PASSED}, 5),
                    ("honest", RIGHT_ADD, {ExecutionStatus.PASSED}, 5),
                ]
                for what, code, expected, timeout_s in steps:
                    result = executor.run(job(code, timeout_s=timeout_s))
                    jobs += 1
                    if result.status not in expected:
                        wrong += 1
                        print(f"round {number} {name} {what}: {result.status.value}, {result.reason[:300]}")
    finally:
        executor.close()
    print(f"{jobs} jobs, {wrong} wrong verdicts (attacks: {', '.join(attacks)}; load {os.getloadavg()[0]:.1f})")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
