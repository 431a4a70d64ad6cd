"""The wordle environment: the model guesses a secret five-letter word; the environment answers each guess
with green/yellow/grey feedback, and ends the game itself when it is solved or the guesses run out.

* task: :class:`~rewardpipe.envs.wordle.tasks.WordleTask` (flat rows or the AWS sample's ``{"id",
  "metadata"}`` rows);
* state: :class:`~rewardpipe.envs.wordle.state.WordleState` (guesses, their feedback, what each turn did,
  solved);
* ``on_policy_turn``: reads the turn's ``<guess>`` (:func:`~rewardpipe.envs.wordle.game.parse_guess`: the
  last complete tag wins); the answer ends the episode (``score``, end reason ``solved``), anything else
  hands the turn to the environment;
* ``respond``: the feedback of a guess, or what was wrong with the turn (a malformed turn gets a format
  reminder and uses no guess; a word not in the word list uses no guess; a repeated word uses one); once the
  guesses run out it says the answer and ends the episode (``score``, ``out_of_guesses``);
* ``execution_job``: none, ever (no sandbox is started for this environment);
* ``replay``: the recorded guesses played through the same rules (``rewardpipe score --env wordle``);
* ``scenarios``: doctor's (``reference`` solves every task); ``--policy scripted`` plays the seeded mix of
  :mod:`~rewardpipe.envs.wordle.scenarios`;
* reward: :data:`~rewardpipe.envs.wordle.reward.WORDLE`.

Option (``--env-option``): ``dictionary=bundled`` (default: the bundled word list, plus each task's answer),
``dictionary=off`` (any five letters is a guess; what to use with a policy whose vocabulary is larger than
the list) or ``dictionary=PATH`` (a word list of your own, one word a line).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rewardpipe.environment import EnvContext, Environment
from rewardpipe.envs.wordle.game import (
    GUESS_TAG,
    SOLVED_PATTERN,
    GuessProblem,
    describe,
    feedback,
    load_words,
    parse_guess,
)
from rewardpipe.envs.wordle.reward import WORDLE
from rewardpipe.envs.wordle.state import TurnResult, WordleState
from rewardpipe.envs.wordle.tasks import WordleTask
from rewardpipe.models import Message, text_message

POLICY_SYSTEM_PROMPT = (
    "You are playing Wordle: find the secret five-letter English word. Each turn, think briefly if you like, "
    f"then write exactly one guess as <{GUESS_TAG}>word</{GUESS_TAG}> (if you write several, the last one "
    "counts). After each guess you are told, letter by letter, green (right letter, right place), yellow (in "
    "the word, elsewhere) or grey (not in the word, or no copy of it left)."
)

FORMAT_REMINDER = {
    GuessProblem.NO_TAG: f"I found no guess in that. Write it as five letters between tags, e.g. "
    f"<{GUESS_TAG}>crane</{GUESS_TAG}>.",
    GuessProblem.UNCLOSED_TAG: f"Your <{GUESS_TAG}> tag is not closed. Write it as <{GUESS_TAG}>crane</{GUESS_TAG}>.",
    GuessProblem.NOT_FIVE_LETTERS: f"A guess is exactly five letters a-z, e.g. <{GUESS_TAG}>crane</{GUESS_TAG}>.",
}


def _left(count: int) -> str:
    return f"{count} guess{'' if count == 1 else 'es'} left."


def dictionary_words(dictionary: str) -> frozenset[str] | None:
    """The words ``dictionary`` (``bundled``, ``off`` or a word-list file) accepts as guesses; None: any five
    letters. A file that is missing or holds a line that is not a five-letter word is a ValueError."""
    if dictionary == "bundled":
        return load_words()
    if dictionary == "off":
        return None
    path = Path(dictionary).expanduser()
    if not path.is_file():
        raise ValueError(f"dictionary must be bundled, off or a word-list file; {dictionary!r} is not a file")
    try:
        return load_words(path)
    except OSError as exc:
        raise ValueError(f"cannot read the word list {dictionary}: {exc}") from None


class Wordle(Environment):
    """See the module docstring. ``Wordle(dictionary="bundled")``: which words count as guesses."""

    name = "wordle"
    version = "1"
    task_model = WordleTask
    state_model = WordleState
    # The platform's turn limit: room for the default six guesses and a few turns that use none.
    max_turns = 10
    reward = WORDLE
    system_prompt = POLICY_SYSTEM_PROMPT
    collapse_scenario = "stuck"

    def __init__(self, dictionary: str = "bundled") -> None:
        self.dictionary = dictionary
        self.words = dictionary_words(dictionary)

    def configure(self, **options: str) -> Wordle:
        """``dictionary=bundled|off|PATH`` (see the module docstring)."""
        unknown = set(options) - {"dictionary"}
        if unknown:
            raise ValueError(
                f"environment 'wordle' takes the option dictionary=bundled|off|PATH, not {', '.join(sorted(unknown))}"
            )
        return Wordle(options.get("dictionary", "bundled"))

    def accepts(self, word: str, task: WordleTask) -> bool:
        """Whether ``word`` is a guess: the task's answer always is."""
        return self.words is None or word in self.words or word == task.answer

    # -- the episode ------------------------------------------------------------------------------------

    def start(self, task: WordleTask) -> WordleState:
        return WordleState(messages=task.prompt_messages(), max_guesses=task.max_guesses)

    def on_policy_turn(self, state: WordleState, task: WordleTask, text: str) -> WordleState:
        word = parse_guess(text).word
        if word is None:
            return state.evolve(turn_results=[*state.turn_results, TurnResult.MALFORMED], next_action="env")
        if word == task.answer:
            return state.evolve(
                guesses=[*state.guesses, word],
                feedback=[*state.feedback, SOLVED_PATTERN],
                turn_results=[*state.turn_results, TurnResult.SOLVED],
                solved=True,
                next_action="score",
                end_reason="solved",
            )
        if word in state.guesses:
            result = TurnResult.REPEAT
        elif not self.accepts(word, task):
            return state.evolve(turn_results=[*state.turn_results, TurnResult.NOT_A_WORD], next_action="env")
        else:
            result = TurnResult.GUESS
        return state.evolve(
            guesses=[*state.guesses, word],
            feedback=[*state.feedback, feedback(word, task.answer)],
            turn_results=[*state.turn_results, result],
            next_action="env",
        )

    def respond(self, state: WordleState, task: WordleTask, ctx: EnvContext | None = None) -> WordleState:
        result = state.turn_results[-1]
        left = task.max_guesses - len(state.guesses)
        if result == TurnResult.MALFORMED:
            problem = parse_guess(state.messages[-1].content).problem
            text = f"{FORMAT_REMINDER[problem or GuessProblem.NO_TAG]} That used no guess; {_left(left)}"
        elif result == TurnResult.NOT_A_WORD:
            word = parse_guess(state.messages[-1].content).word or ""
            text = f"{word.upper()} is not in the word list. That used no guess; {_left(left)}"
        else:
            word, pattern = state.guesses[-1], state.feedback[-1]
            repeated = f"You already guessed {word.upper()}. " if result == TurnResult.REPEAT else ""
            text = (
                f"{repeated}Guess {len(state.guesses)} of {task.max_guesses}: {word.upper()}\n{describe(word, pattern)}"
            )
            if left > 0:
                text += f"\n{_left(left)}"
        if left <= 0:
            text += f"\nNo guesses left: the word was {task.answer.upper()}."
            return state.append(text_message("user", text), next_action="score", end_reason="out_of_guesses")
        return state.append(text_message("user", text), next_action="policy")

    # -- scoring recorded conversations, doctor, the record -----------------------------------------------

    def replay(self, task: WordleTask, messages: Sequence[Message]) -> WordleState:
        """The state of a recorded game: its assistant turns played through the same rules, every reply
        checked against the recorded one (a recording made with another word list does not replay)."""
        from rewardpipe.episode import replay_through_hooks

        return replay_through_hooks(self, task, messages)

    def scenarios(self, task: WordleTask) -> dict[str, Any]:
        from rewardpipe.envs.wordle.scenarios import doctor_scenarios

        return doctor_scenarios(task, self.guessable())

    def scripted_policy(
        self, *, seed: int = 0, collapse_from_step: int | None = None, weights: Mapping[str, float] | None = None
    ) -> Any:
        """The seeded strategy mix of :mod:`~rewardpipe.envs.wordle.scenarios` (``weights`` per strategy,
        default :data:`~rewardpipe.envs.wordle.scenarios.STRATEGY_WEIGHTS`)."""
        from rewardpipe.envs.wordle.scenarios import training_scenarios
        from rewardpipe.policies import ScenarioMix

        return ScenarioMix(
            training_scenarios(self.guessable(), dict(weights) if weights else None),
            seed=seed,
            collapse_from_step=collapse_from_step,
            collapse_to=self.collapse_scenario,
        )

    def guessable(self) -> tuple[str, ...]:
        """The words a scripted player picks from: the word list (the bundled one when any word goes)."""
        return tuple(sorted(self.words if self.words is not None else load_words()))

    def metrics(self, state: WordleState, task: WordleTask) -> dict[str, Any]:
        return {"guesses": len(state.guesses), "max_guesses": task.max_guesses, "solved": state.solved}

    def transcript_fields(self, state: WordleState, task: WordleTask | None) -> dict[str, Any]:
        return {"turn_kinds": list(state.turn_results)}


ENVIRONMENT = Wordle()
