"""A classic verifiers environment, written as a verifiers user writes one (nothing of rewardpipe in it): guess a
number from 1 to 8; the environment says higher or lower and keeps its hints in the state; a @vf.stop condition
ends a solved game; a vf.Rubric scores it."""

import re

import verifiers as vf
from datasets import Dataset

NUMBER = re.compile(r"\d+")


def _text(message):
    return message["content"] if isinstance(message, dict) else message.content


class GuessEnv(vf.MultiTurnEnv):
    async def setup_state(self, state, **_):
        state["hints"] = []
        return state

    async def env_response(self, messages, state, **_):
        found = NUMBER.search(_text(messages[-1]) or "")
        if found is None:
            hint = "Answer with a number."
        else:
            guess, secret = int(found.group()), int(state["answer"])
            hint = "correct" if guess == secret else ("higher" if guess < secret else "lower")
        state["hints"].append(hint)
        return [{"role": "user", "content": hint}]

    @vf.stop
    async def solved(self, state, **_) -> bool:
        return bool(state.get("hints")) and state["hints"][-1] == "correct"


def solved(state) -> float:
    return 1.0 if state["hints"] and state["hints"][-1] == "correct" else 0.0


def fewer_guesses(state) -> float:
    return 1.0 - len(state["hints"]) / 8


def load_environment(max_turns: int = 6):
    dataset = Dataset.from_list([{"question": "Guess my number from 1 to 8.", "answer": str(n)} for n in (5, 2)])
    return GuessEnv(
        dataset=dataset, max_turns=max_turns, rubric=vf.Rubric(funcs=[solved, fewer_guesses], weights=[1.0, 0.2])
    )
