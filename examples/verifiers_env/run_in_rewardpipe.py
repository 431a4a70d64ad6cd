"""A classic verifiers environment (guess_env.py) inside rewardpipe's loop with ``from_verifiers``: its dataset
rows become task rows, its env_response and stop conditions drive the episode, its Rubric's functions become
components (a function that raises makes an error record, not verifiers' 0.0), and doctor's checks run on it.
The same ENVIRONMENT works with `rewardpipe run --env`, `rewardpipe doctor --env` and TRL's rollout_func."""

# requires: verifiers, datasets

import re

from rewardpipe import ScriptedPolicy
from rewardpipe.integrations.verifiers import from_verifiers
from rewardpipe.testing import check_environment


def halve(state, _task):
    """A scripted player: binary search on the hints so far."""
    lo, hi = 1, 8
    guesses = [int(re.search(r"\d+", m.content).group()) for m in state.messages if m.role == "assistant"]
    for guess, hint in zip(guesses, state.vf_state.get("hints", []), strict=False):
        lo, hi = (guess + 1, hi) if hint == "higher" else (lo, guess - 1) if hint == "lower" else (lo, hi)
    return f"Is it {(lo + hi) // 2}?"


def scenarios(_task):
    return {"reference": ScriptedPolicy(halve), "always_one": ScriptedPolicy(lambda _state, _task: "1")}


ENVIRONMENT = from_verifiers(
    "guess_env:load_environment", env_args={"max_turns": 6}, ranges={"solved": (0, 1)}, scenarios=scenarios
)  # fewer_guesses: no range given

if __name__ == "__main__":
    print("components:", {c.name: (c.weight, c.value_range, c.role) for c in ENVIRONMENT.reward.components})
    tasks = ENVIRONMENT.task_rows()
    report = check_environment(ENVIRONMENT, tasks)  # doctor's checks, as in pytest
    for diagnosis in report:
        print(diagnosis.task_id, "values seen:", diagnosis.component_values)
    for warning in report.warnings:
        print("warning:", warning)
