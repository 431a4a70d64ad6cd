"""Score `samples.jsonl` with the reward in `my_reward.py`, through the CLI as a user would (the README's example).

    rewardpipe score samples.jsonl --reward my_reward:json_answer --out store --json

`my_reward:json_answer` is a `package.module:attr` reference; the module is found on the working directory.
"""

# requires-api: rewardpipe:component, rewardpipe:Reward

import json
import shutil
import subprocess
import sys
from pathlib import Path

if __name__ == "__main__":
    shutil.rmtree("store", ignore_errors=True)
    rewardpipe = Path(sys.executable).with_name("rewardpipe")  # the CLI installed beside this interpreter
    out = subprocess.run([rewardpipe, "score", "samples.jsonl", "--reward", "my_reward:json_answer", "--out", "store",
                          "--json"], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        record = json.loads(line)
        print(record["rollout_id"], record["status"], record["components"], record["aggregate"])
    shutil.rmtree("store", ignore_errors=True)
