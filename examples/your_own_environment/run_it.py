"""Run the environment with its scripted players (6 groups of K=8 rollouts a step, 3 steps; from step 2 on every
rollout plays the environment's collapse_scenario, "blind_guesses"), then show one rollout's transcript."""

import shutil

from commands import rewardpipe

if __name__ == "__main__":
    shutil.rmtree("store", ignore_errors=True)
    rewardpipe(
        "run --env animals_env:ENVIRONMENT --tasks animals.jsonl --policy scripted --steps 3 --group-size 8 "
        "--groups-per-step 6 --collapse-from-step 2 --out store --run-id animals"
    )
    print()
    rewardpipe("show store --run-id animals --rollout s0-g000-otter-k0")
    shutil.rmtree("store", ignore_errors=True)
