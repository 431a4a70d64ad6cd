"""doctor the environment with its own reward (it passes), then with a reward holding a component that can
never move (it fails, naming the component on every task)."""

from commands import rewardpipe

if __name__ == "__main__":
    rewardpipe("doctor --env animals_env:ENVIRONMENT --tasks animals.jsonl")
    print()
    failed = rewardpipe(
        "doctor --env animals_env:ENVIRONMENT --tasks animals.jsonl --reward animals_reward:WITH_PLEASE", check=False
    )
    print(f"(exit code {failed.returncode})")
