"""The reward of the animal-guessing game: what each component reads is named by its parameters."""

from rewardpipe import Reward, component


@component(range=(0, 1), role="outcome")
def found(state):
    """1 when the model named the animal."""
    return 1.0 if state.found else 0.0


@component(range=(0, 1), role="shaping", weight=0.3)
def on_topic(state):
    """The share of the model's questions the user could answer (0 when it asked none)."""
    return state.answered / state.questions if state.questions else 0.0


@component(range=(-1, 0), role="penalty", weight=0.5)
def wrong_guesses(state, task):
    """Minus the share of the task's guesses spent on wrong animals."""
    return -state.wrong_guesses / task.max_guesses


ANIMALS = Reward("animals", [found, on_topic, wrong_guesses])


@component(range=(0, 1), role="shaping")
def says_please(messages):
    """1 when the model said please: none of the scripted players does, so doctor finds it can never move."""
    return 1.0 if any("please" in m.content.lower() for m in messages if m.role == "assistant") else 0.0


WITH_PLEASE = Reward("animals_please", [found, on_topic, wrong_guesses, says_please])
