"""Score `samples.jsonl` with the reward in `my_reward.py`, through the CLI as a user would (the README's example).

    PYTHONPATH=. rewardpipe score samples.jsonl --reward my_reward:json_answer --out store --json

`my_reward:json_answer` is a `package.module:attr` reference: `my_reward` must be importable, hence `PYTHONPATH=.`
(or install your package; or name the file itself: `--reward my_reward.py:json_answer`). The records are filed
under `store/runs/scored/`.
"""

# requires-api: rewardpipe:component, rewardpipe:Reward

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

if __name__ == "__main__":
    shutil.rmtree("store", ignore_errors=True)
    rewardpipe = Path(sys.executable).with_name("rewardpipe")  # the CLI installed beside this interpreter
    env = {**os.environ, "PYTHONPATH": "."}
    out = subprocess.run(
        [rewardpipe, "score", "samples.jsonl", "--reward", "my_reward:json_answer", "--out", "store", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert Path("store/runs/scored/manifest.json").is_file()  # the run id score files records under by default
    for line in out.splitlines():
        record = json.loads(line)
        print(record["rollout_id"], record["status"], record["components"], record["aggregate"])
    shutil.rmtree("store", ignore_errors=True)
