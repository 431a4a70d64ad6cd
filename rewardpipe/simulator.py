"""User simulators: they hold the task's hidden ``spec`` and reveal a detail only when asked.

The rule-based simulator is deterministic and free, which makes rollouts reproducible and lets the
state machine call it from a small Lambda. The LLM-backed simulator talks to any OpenAI-compatible endpoint.
Neither ever sees the hidden tests or the reference solution: they are not passed in.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence

from rewardpipe.openai_client import ChatClient, OwnsChatClient
from rewardpipe.parsing import TurnKind, classify_turn

if TYPE_CHECKING:  # pragma: no cover
    from rewardpipe.episode import EpisodeState
    from rewardpipe.models import Task

STOPWORDS = frozenset(
    """a an the and or but if then else of to in on at by for with from as is are was were be been being do does
    did doing have has had it its this that these those there here what which who whom whose when where why how
    can could should would will shall may might must i you we they he she me my your our their us them not no
    yes so than too very just also any some all each every about into over under again further once only own
    same such both few more most other please thanks thank tell know want need like let lets ok okay sure
    before keep mind
    function write code program implement return returns returned value values input output give get make use
    should does do""".split()
)

# Questions that ask for requirements in general rather than about something specific. Stemmed below (after
# _stem is defined) so they compare equal to the stemmed words of a question.
_GENERIC_CUE_WORDS = """requirement requirements detail details spec specs specification specifications constraint
    constraints clarify clarification expect expected expectation expectations edge else anything more
    assumption assumptions rule rules""".split()
# ("edge" alone marks "edge cases" as generic: "case" must stay specific for questions about letter case.)

NOTHING_MATCHES = (
    "That is up to you.",
    "I don't have a preference there; use your judgement.",
    "Whatever you think is sensible.",
)
NOTHING_LEFT = "I think I've told you everything that matters; the rest is up to you."
NOT_A_QUESTION = ("Okay.", "Sounds good.", "Go ahead.")


@dataclass(frozen=True)
class SimulatorReply:
    text: str
    revealed: int | None  # index into task.spec newly revealed by this reply


class Simulator(Protocol):
    def respond(self, state: "EpisodeState", task: "Task") -> SimulatorReply: ...


_WORD = re.compile(r"[a-z0-9]+")


def _stem(word: str) -> str:
    """A tiny suffix stripper that maps a word's common forms to one key (name/names/named -> "nam").

    Both sides of a comparison go through it, so it only has to be consistent, not linguistic: "cases"
    and "case" must meet, which is why a final "e" goes too and "es" is only a suffix after s/x/z/ch/sh.
    """
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            if suffix == "es" and not word[:-2].endswith(("s", "x", "z", "ch", "sh")):
                suffix = "s"
            if suffix == "s" and word.endswith(("ss", "us", "is")):
                break
            word = word[: -len(suffix)]
            break
    if len(word) > 3 and word.endswith("e"):
        word = word[:-1]
    return word


GENERIC_CUES = frozenset(_stem(word) for word in _GENERIC_CUE_WORDS)


def content_words(text: str) -> set[str]:
    return {_stem(w) for w in _WORD.findall(text.lower()) if w not in STOPWORDS and len(w) > 1}


def _pick(options: Sequence[str], key: str) -> str:
    digest = hashlib.sha256(key.encode()).digest()
    return options[digest[0] % len(options)]


class RuleBasedSimulator:
    """Reveals the unrevealed spec item that shares the most (IDF-weighted) words with the question.

    * A question about something specific reveals the best-matching unrevealed detail.
    * A generic question ("any other requirements?") reveals the next unrevealed detail in spec order.
    * A question that matches an already revealed detail better than any unrevealed one gets that detail
      restated (no new reveal: asking the same thing twice must not unlock a different detail), unless it
      is also generic ("any other constraints on the format?"), which reveals the next unrevealed detail.
    * A question that matches nothing gets "that is up to you".
    * A turn that is not a question reveals nothing: the simulator never volunteers details.
    """

    def respond(self, state: "EpisodeState", task: "Task") -> SimulatorReply:
        question = next((m.content for m in reversed(state.messages) if m.role == "assistant"), "")
        key = f"{state.rollout_id}:{len(state.messages)}"
        if classify_turn(question) is not TurnKind.QUESTION:
            return SimulatorReply(_pick(NOT_A_QUESTION, key), None)
        index, restated = self.best_match(question, task.spec, set(state.revealed))
        unrevealed = [i for i in range(len(task.spec)) if i not in set(state.revealed)]
        generic = bool(content_words(question) & GENERIC_CUES) or not content_words(question)
        # "Any other constraints on the format?" asks for more: restating the format detail would stall it.
        if index is not None and not (restated and generic and unrevealed):
            if restated:
                return SimulatorReply(f"As I said: {task.spec[index]}", None)
            return SimulatorReply(task.spec[index], index)
        if generic:
            if unrevealed:
                return SimulatorReply(task.spec[unrevealed[0]], unrevealed[0])
            return SimulatorReply(NOTHING_LEFT, None)
        return SimulatorReply(_pick(NOTHING_MATCHES, key), None)

    @staticmethod
    def best_match(question: str, spec: Sequence[str], revealed: set[int]) -> tuple[int | None, bool]:
        """Return (index, already_revealed) of the best-matching spec item, or (None, False)."""
        words = content_words(question) - GENERIC_CUES
        if not words or not spec:
            return None, False
        item_words = [content_words(item) for item in spec]
        doc_freq = {w: sum(1 for iw in item_words if w in iw) for w in words}
        def score(i: int) -> float:
            return sum(math.log(1 + len(spec) / doc_freq[w]) for w in words if w in item_words[i])
        # The most relevant item overall answers the question; a revealed item that matches *better* is
        # restated rather than leaking a weaker-matching new detail the model did not ask about. Ties go to
        # the unrevealed item, then to spec order.
        unrevealed = [i for i in range(len(spec)) if i not in revealed]
        best_new = max(unrevealed, key=score, default=None)
        best_old = max(sorted(i for i in revealed if 0 <= i < len(spec)), key=score, default=None)
        new_score = score(best_new) if best_new is not None else 0.0
        old_score = score(best_old) if best_old is not None else 0.0
        if best_new is not None and new_score > 0 and new_score >= old_score:
            return best_new, False
        if best_old is not None and old_score > 0:
            return best_old, True
        return None, False


SIMULATOR_SYSTEM_PROMPT = """You are role-playing a user who asked a programmer for help with this request:
"{prompt}"
You privately know these details of what you want (numbered):
{details}
Rules: answer only the question the programmer just asked. If it is about one of the details, state that one
detail plainly. If it matches none, say it is up to them. Never volunteer other details, never write code,
never mention tests. Answer in one or two sentences."""


class OpenAISimulator(OwnsChatClient):
    """An LLM plays the user. The revealed detail is inferred from word overlap with the reply."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, client: ChatClient | None = None):
        self.client = client or ChatClient(base_url, model, api_key=api_key)

    def respond(self, state: "EpisodeState", task: "Task") -> SimulatorReply:
        details = "\n".join(f"{i + 1}. {item}" for i, item in enumerate(task.spec))
        messages = [{"role": "system", "content": SIMULATOR_SYSTEM_PROMPT.format(prompt=task.prompt, details=details)}]
        # From the simulator's point of view the roles are swapped: the programmer is the "user".
        for message in state.messages[1:]:
            role = "user" if message.role == "assistant" else "assistant"
            messages.append({"role": role, "content": message.content})
        text = self.client.complete(messages, temperature=0.0).strip()
        return SimulatorReply(text, self._revealed_index(text, task.spec, set(state.revealed)))

    @staticmethod
    def _revealed_index(reply: str, spec: Sequence[str], revealed: set[int]) -> int | None:
        reply_words = content_words(reply)
        best, best_overlap = None, 0.0
        for i, item in enumerate(spec):
            if i in revealed:
                continue
            words = content_words(item)
            overlap = len(words & reply_words) / max(1, len(words))
            if overlap > best_overlap:
                best, best_overlap = i, overlap
        return best if best_overlap >= 0.5 else None
