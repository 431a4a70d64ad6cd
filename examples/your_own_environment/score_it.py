"""Score recorded conversations (a model's, from any source) through the environment: rewardpipe replays each one
through the hooks to rebuild its final state, checks that the environment answers as recorded, and scores it. A
conversation the environment would not have answered that way becomes an error record (replay_failed), not a
score, and `score` exits 1 naming it (the others are scored and stored all the same)."""

import json
import shutil

from commands import rewardpipe

if __name__ == "__main__":
    shutil.rmtree("store", ignore_errors=True)
    command = "score rollouts.jsonl --env animals_env:ENVIRONMENT --tasks animals.jsonl --out store --json"
    done = rewardpipe(command, check=False, echo=False)
    for line in done.stdout.splitlines():  # one record per line, cut here to its scores
        record = json.loads(line)
        print(record["rollout_id"], record["status"], record["error"] or record["components"], record["aggregate"])
    print(f"exit status {done.returncode}:", done.stderr.strip().removeprefix("error: ").split(";")[0])
    shutil.rmtree("store", ignore_errors=True)
