"""Policies produce assistant turns: a seeded scripted mix, a replay of recorded turns, or a live endpoint."""

from __future__ import annotations

import hashlib
import math
import random
from typing import Iterable, Protocol

from rewardpipe.episode import EpisodeState, PolicyExhausted
from rewardpipe.models import Rollout, Task
from rewardpipe.openai_client import ChatClient, OwnsChatClient


class Policy(Protocol):
    def next_turn(self, state: EpisodeState, task: Task) -> str: ...


# Strategies of the scripted policy and how often a healthy policy picks each.
STRATEGY_WEIGHTS = {"ask_first": 0.35, "ask_later": 0.2, "guess": 0.3, "loop": 0.15}

_QUESTIONS = (
    "Before I write this, could you tell me more about the requirements?",
    "Are there any other details or edge cases I should know about?",
    "What else should I keep in mind — any constraints on the input or the output format?",
    "Is there anything more about the expected behaviour I should know?",
)
_STALL = "Let me think about how to approach this first."
_LOOP_QUESTION = "Can you explain again what exactly you need?"


def fenced(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


def stub_guess(task: Task) -> str:
    """What a model that never asked commits: a plausible signature with no knowledge of the hidden spec."""
    return f"def {task.entry_point}(*args, **kwargs):\n    return None\n"


class ScriptedPolicy:
    """A deterministic stand-in for a model, so groups have real, reproducible within-group variance.

    Each rollout picks a strategy from a seeded draw on (seed, rollout_id):

    * ``ask_first``  asks on turn one, keeps asking for a random number of turns, then commits;
    * ``ask_later``  opens with a non-question, then asks, then commits;
    * ``guess``      commits on turn one;
    * ``loop``       repeats the same question until the turn limit, never committing.

    A committing strategy submits the reference solution only when it has learnt every hidden detail,
    and a signature-only guess otherwise — the "asking is needed to pass" design of the task, simulated.
    ``collapse_from_step`` makes every rollout from that step on guess immediately: the collapse the
    monitor exists to catch.
    """

    def __init__(self, seed: int = 0, weights: dict[str, float] | None = None, collapse_from_step: int | None = None):
        self.seed = seed
        self.weights = dict(weights or STRATEGY_WEIGHTS)
        unknown = set(self.weights) - set(STRATEGY_WEIGHTS)
        if unknown:
            raise ValueError(f"unknown strategies {sorted(unknown)}; known: {sorted(STRATEGY_WEIGHTS)}")
        # Checked here, not at the first draw, where it would turn every rollout into a policy error.
        for name, weight in self.weights.items():
            numeric = isinstance(weight, (int, float)) and not isinstance(weight, bool)
            if not (numeric and math.isfinite(weight) and weight >= 0):
                raise ValueError(f"strategy weight for '{name}' must be a finite number >= 0, got {weight!r}")
        if not sum(self.weights.values()) > 0:
            raise ValueError("at least one strategy weight must be positive")
        self.collapse_from_step = collapse_from_step

    def _rng(self, state: EpisodeState) -> random.Random:
        digest = hashlib.sha256(f"{self.seed}:{state.run_id}:{state.step}:{state.rollout_id}".encode()).digest()
        return random.Random(int.from_bytes(digest[:8], "big"))

    def strategy(self, state: EpisodeState) -> str:
        if self.collapse_from_step is not None and state.step >= self.collapse_from_step:
            return "guess"
        rng = self._rng(state)
        names = list(self.weights)
        return rng.choices(names, weights=[self.weights[n] for n in names])[0]

    def next_turn(self, state: EpisodeState, task: Task) -> str:
        strategy = self.strategy(state)
        turn = state.assistant_turns
        rng = self._rng(state)
        rng.random()  # decorrelate from the strategy draw
        planned_questions = rng.randint(1, max(1, len(task.spec)))
        if strategy == "guess":
            return "Here is my solution:\n" + fenced(stub_guess(task))
        if strategy == "loop":
            return _LOOP_QUESTION
        if strategy == "ask_later" and turn == 0:
            return _STALL
        asked = turn - (1 if strategy == "ask_later" else 0)
        last_turn = turn + 1 >= state.max_turns
        if asked < planned_questions and not last_turn:
            return _QUESTIONS[asked % len(_QUESTIONS)]
        knows_everything = len(state.revealed) >= len(task.spec)
        code = task.reference_solution if knows_everything else stub_guess(task)
        return "Thanks, that makes it clear. Here is the implementation:\n" + fenced(code)


class ReplayPolicy:
    """Replays the assistant turns of recorded rollouts, matched by ``(step, rollout_id)``.

    Rollout ids often repeat across training steps ("...-k0" at every step), so the step is part of the
    key; a rollout id recorded at a single step also matches a state at another step. The same
    ``(step, rollout_id)`` recorded twice is ambiguous and rejected.
    """

    def __init__(self, rollouts: Iterable[Rollout]):
        self.turns: dict[tuple[int, str], list[str]] = {}
        for rollout in rollouts:
            key = (rollout.step, rollout.rollout_id)
            if key in self.turns:
                raise ValueError(f"rollout '{rollout.rollout_id}' is recorded twice for step {rollout.step}")
            self.turns[key] = [m.content for m in rollout.messages if m.role == "assistant"]
        self._steps_by_id: dict[str, list[int]] = {}
        for step, rollout_id in self.turns:
            self._steps_by_id.setdefault(rollout_id, []).append(step)

    def _recorded(self, state: EpisodeState) -> list[str] | None:
        exact = self.turns.get((state.step, state.rollout_id))
        if exact is not None:
            return exact
        steps = self._steps_by_id.get(state.rollout_id, [])
        return self.turns[(steps[0], state.rollout_id)] if len(steps) == 1 else None

    def next_turn(self, state: EpisodeState, task: Task) -> str:
        recorded = self._recorded(state)
        if recorded is None:
            raise KeyError(f"no recorded rollout '{state.rollout_id}' (step {state.step}) to replay")
        if state.assistant_turns >= len(recorded):
            raise PolicyExhausted(f"recording has {len(recorded)} assistant turn(s)")
        return recorded[state.assistant_turns]


POLICY_SYSTEM_PROMPT = (
    "You are a careful programmer helping a user. The request may leave out details that matter. "
    "Each turn, either ask the user one clarifying question (no code), or, when you know enough, reply with "
    "the complete solution as a single ```python fenced block defining the requested function."
)


class OpenAIPolicy(OwnsChatClient):
    """Any OpenAI-compatible chat endpoint (a local vLLM server, a hosted API) plays the model."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        temperature: float = 1.0,
        max_tokens: int = 1024,
        system_prompt: str = POLICY_SYSTEM_PROMPT,
        client: ChatClient | None = None,
    ):
        self.client = client or ChatClient(base_url, model, api_key=api_key)
        self.params = {"temperature": temperature, "max_tokens": max_tokens}
        self.system_prompt = system_prompt

    def next_turn(self, state: EpisodeState, task: Task) -> str:
        messages = [{"role": "system", "content": self.system_prompt}]
        messages += [{"role": m.role, "content": m.content} for m in state.messages]
        return self.client.complete(messages, **self.params)
