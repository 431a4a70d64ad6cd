"""`make demo`, then what the guide "Read an alarm and its report" does with it: the run's table and alarms,
one rollout's transcript with `rewardpipe show`, and the report's task triage as data.

Runs in a temporary folder; the section markers let the guide include each part of the output on its own.
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REWARDPIPE = Path(sys.executable).with_name("rewardpipe")  # the CLI installed beside this interpreter
TASKS = Path(__file__).resolve().parents[1] / "rewardpipe" / "data" / "tasks.jsonl"


def rewardpipe(*args: str, cwd: str) -> str:
    env = {**os.environ, "COLUMNS": "120"}  # the width the tables are printed at
    return subprocess.run([REWARDPIPE, *args], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout


def section(name: str, text: str) -> None:
    print(f"--8<-- [start:{name}]\n{text.rstrip()}\n--8<-- [end:{name}]")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        section(
            "run",
            rewardpipe(
                "run",
                "--tasks",
                str(TASKS),
                "--policy",
                "scripted",
                "--group-size",
                "8",
                "--steps",
                "4",
                "--collapse-from-step",
                "3",
                "--out",
                "demo-store",
                "--run-id",
                "demo",
                cwd=folder,
            ),
        )
        section(
            "show",
            rewardpipe(
                "show",
                "demo-store",
                "--run-id",
                "demo",
                "--rollout",
                "s1-g000-abc-013-password-strength-k1",
                cwd=folder,
            ),
        )
        report = json.loads(
            rewardpipe("report", "demo-store", "--run-id", "demo", "--out", "report.html", "--json", cwd=folder)
        )
        triage = report["runs"][0]["task_triage"] if "runs" in report else report["task_triage"]
        section(
            "triage",
            "\n".join(json.dumps(row, sort_keys=True) for row in triage[:3])
            + f"\n... {len(triage)} (task, component) pairs",
        )
