"""Guess the animal: the model asks yes/no questions ("Does it have fur?") or guesses ("Guess: otter"); a
simulated user answers from the task's hidden facts. The environment ends the episode when the animal is
found or the guesses run out."""

import re

from animals_reward import ANIMALS
from pydantic import Field

from rewardpipe import Environment, EpisodeState, ScriptedPolicy, TaskRow


class AnimalTask(TaskRow):
    animal: str  # hidden from the model, like the facts
    facts: dict[str, bool] = Field(min_length=1)  # a keyword of a question and its answer: "fur": true
    max_guesses: int = Field(default=3, ge=1)


class AnimalState(EpisodeState):
    questions: int = 0
    answered: int = 0  # questions the user could answer
    wrong_guesses: int = 0
    found: bool = False


def guess_in(text):
    for line in text.splitlines():
        if line.strip().lower().startswith("guess:"):
            return line.split(":", 1)[1].strip().strip(".").lower()
    return None


class AnimalGuess(Environment):
    name = "animals"
    version = "1"
    task_model = AnimalTask
    state_model = AnimalState
    max_turns = 8
    reward = ANIMALS
    system_prompt = "Find the animal. Ask yes/no questions, or answer with a line 'Guess: <animal>'."
    collapse_scenario = "blind_guesses"  # what every rollout plays from `run --collapse-from-step N` on
    hook_timeout_s = 30.0  # a hook still running after this many seconds costs its own rollout, not the run

    def on_policy_turn(self, state, task, text):
        guess = guess_in(text)
        if guess == task.animal:
            return state.evolve(found=True, next_action="score", end_reason="found")
        return state.evolve(next_action="env")  # the user answers

    def respond(self, state, task, ctx):
        text = state.messages[-1].content
        guess = guess_in(text)
        if guess is not None:
            wrong = state.wrong_guesses + 1
            if wrong >= task.max_guesses:
                return state.append(
                    {"role": "user", "content": f"No. The animal was: {task.animal}."},
                    wrong_guesses=wrong,
                    next_action="score",
                    end_reason="out_of_guesses",
                )
            return state.append(
                {"role": "user", "content": f"No, it is not a {guess}."}, wrong_guesses=wrong, next_action="policy"
            )
        if not text.rstrip().endswith("?"):
            return state.append(
                {"role": "user", "content": "Ask a yes/no question, or write 'Guess: <animal>'."}, next_action="policy"
            )
        words = set(re.findall(r"[a-z]+", text.lower()))
        known = [fact for fact in task.facts if fact in words]
        reply = ("Yes." if task.facts[known[0]] else "No.") if known else "I can't say."
        return state.append(
            {"role": "user", "content": reply},
            questions=state.questions + 1,
            answered=state.answered + bool(known),
            next_action="policy",
        )

    def scenarios(self, task):
        first_fact = next(iter(task.facts))

        def reference(state, task):
            return f"Does '{first_fact}' describe it?" if state.questions == 0 else f"Guess: {task.animal}"

        return {
            "reference": ScriptedPolicy(reference),
            "blind_guesses": ScriptedPolicy(["Guess: cat", "Guess: dog", "Guess: horse"]),
            "vague": ScriptedPolicy(lambda state, task: "Is it nice?"),
            "curious": ScriptedPolicy(lambda state, task: f"Does '{first_fact}' describe it?"),
        }


ENVIRONMENT = AnimalGuess()
