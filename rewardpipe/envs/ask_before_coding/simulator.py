"""User simulators: they hold the task's hidden ``spec`` and reveal a detail only when asked.

The rule-based simulator is deterministic and free, which makes rollouts reproducible and lets the
state machine call it from a small Lambda. The LLM-backed simulator talks to any OpenAI-compatible endpoint.
Neither ever sees the hidden tests or the reference solution: they are not passed in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

# The canned replies are part of this module's interface.
from rewardpipe.envs.ask_before_coding.questions import (  # noqa: F401
    ASK_SOMETHING_SPECIFIC,
    NOT_A_QUESTION,
    NOTHING_LEFT,
    NOTHING_MATCHES,
    asked_match,
    best_spec_match,
    content_words,
    question_subject,
    revealed_spec_item,
    stated_spec_items,
)
from rewardpipe.envs.ask_before_coding.replies import vet_llm_reply
from rewardpipe.envs.ask_before_coding.state import FALLBACK_NO_TEXT, FALLBACK_UNVETTED
from rewardpipe.openai_client import ChatClient, OwnsChatClient
from rewardpipe.parsing import TurnKind, classify_turn

if TYPE_CHECKING:  # pragma: no cover
    from rewardpipe.envs.ask_before_coding.environment import AskBeforeCodingState as EpisodeState
    from rewardpipe.envs.ask_before_coding.tasks import Task


@dataclass(frozen=True)
class SimulatorReply:
    text: str
    revealed: int | None  # index into task.spec newly revealed by this reply
    # Set when an LLM user's reply was replaced by the rule-based user's: FALLBACK_NO_TEXT or FALLBACK_UNVETTED.
    fallback: str | None = None
    # The detail told before that this reply restated: the question asked what an earlier one was answered (the
    # same words or others), a repeat the loop penalty charges.
    restated: int | None = None


class Simulator(Protocol):
    def respond(self, state: EpisodeState, task: Task) -> SimulatorReply: ...


def _pick(options: Sequence[str], key: str) -> str:
    digest = hashlib.sha256(key.encode()).digest()
    return options[digest[0] % len(options)]


class RuleBasedSimulator:
    """Reveals the unrevealed spec item that shares the most (IDF-weighted) words with the question.

    * A question that asks nothing specific ("?", "ok?", "can you explain again?", the request or the
      function's name echoed back; see :func:`question_subject`) reveals nothing: it is asked what it wants
      to know. This is what keeps a bare "?" from earning asked_before_coding.
    * A question about something specific reveals the best-matching unrevealed detail, its words read as their
      synonym groups' concepts ("throw an exception" asks about "raises ValueError"). A turn of several questions
      is answered about the first one that asks something (:func:`asked_match`).
    * A generic question ("any other requirements?") reveals the next unrevealed detail in spec order.
    * A question that matches an already revealed detail better than any unrevealed one gets that detail
      restated (no new reveal: asking the same thing twice, in any words, must not unlock a different detail;
      the reply's ``restated`` marks the repeat for the loop penalty), unless it
      is also generic ("any other constraints on the format?"), which reveals the next unrevealed detail.
    * A question about exactly what an earlier one of the conversation asked (the same subject words) gets
      the detail told then, restated: where two details tie on its words the repeat does not unlock the other.
    * A question that matches nothing gets "that is up to you".
    * A turn that is not a question reveals nothing: the simulator never volunteers details.
    """

    def respond(self, state: EpisodeState, task: Task) -> SimulatorReply:
        question = next((m.content for m in reversed(state.messages) if m.role == "assistant"), "")
        key = f"{state.rollout_id}:{len(state.messages)}"
        if classify_turn(question) is not TurnKind.QUESTION:
            return SimulatorReply(_pick(NOT_A_QUESTION, key), None)
        subject = question_subject(question, task.prompt, task.entry_point)
        if subject.asks_nothing:
            return SimulatorReply(_pick(ASK_SOMETHING_SPECIFIC, key), None)
        revealed = set(state.revealed)
        # the first of the turn's questions that asks for something new: one reply, one detail
        asked, index, restated = asked_match(question, task.spec, revealed, task.prompt, task.entry_point)
        if index is not None and not restated and not asked.generic:
            # (the whole turn's words: the same turn again, its questions in any order, is the same questions)
            told = _told_before(state, task, subject.words, revealed)
            if told is not None:  # the same thing asked again: the same answer, never the detail it tied with
                index, restated = told, True
        unrevealed = [i for i in range(len(task.spec)) if i not in revealed]
        # "Any other constraints on the format?" asks for more: restating the format detail would stall it.
        if index is not None and not (restated and asked.generic and unrevealed):
            if restated:
                # a repeat unless it asked for more ("Any other constraints on the format?" once all is told)
                return SimulatorReply(f"As I said: {task.spec[index]}", None, restated=None if asked.generic else index)
            return SimulatorReply(task.spec[index], index)
        if asked.generic:
            if unrevealed:
                return SimulatorReply(task.spec[unrevealed[0]], unrevealed[0])
            return SimulatorReply(NOTHING_LEFT, None)
        return SimulatorReply(_pick(NOTHING_MATCHES, key), None)

    @staticmethod
    def best_match(question: str | Iterable[str], spec: Sequence[str], revealed: set[int]) -> tuple[int | None, bool]:
        """Return (index, already_revealed) of the best-matching spec item, or (None, False).

        ``question`` is a question's text or the subject words :func:`question_subject` found in it.
        """
        words = question_subject(question).words if isinstance(question, str) else question
        return best_spec_match(words, spec, revealed)


def _told_before(state: EpisodeState, task: Task, words: frozenset[str], revealed: set[int]) -> int | None:
    """The revealed detail that best answers ``words`` if an earlier question of this conversation asked about
    exactly these words (its answer is then among the revealed ones), else None. Asked only when a question is
    about to reveal a new detail, so it reads the earlier questions a few times per episode at most."""
    if not revealed:
        return None
    earlier = [m.content for m in state.messages[:-1] if m.role == "assistant"]
    if not any(
        classify_turn(text) is TurnKind.QUESTION
        and question_subject(text, task.prompt, task.entry_point).words == words
        for text in earlier
    ):
        return None
    index, _ = best_spec_match(words, [task.spec[i] if i in revealed else "" for i in range(len(task.spec))], ())
    return index


SIMULATOR_SYSTEM_PROMPT = """You are role-playing a user who asked a programmer for help with this request:
"{prompt}"
You privately know these details of what you want (numbered):
{details}
Rules: answer only the question the programmer just asked. If it is about one of the details, state that one
detail plainly, and no other. If it asks for the requirements in general, state the first detail you have not
stated yet, and only that one.
If it asks nothing specific (for example "?", "ok?", "can you explain again?", "more info?", "what should I do?",
or the request repeated back),
reveal no detail: ask what they want to know. If it matches none, say it is up to them. Never volunteer other
details, never write code, never mention tests. Answer in one or two sentences."""


class OpenAISimulator(OwnsChatClient):
    """An LLM plays the user. Which detail its reply reveals, and whether the reply may stand at all, is
    judged by :func:`~rewardpipe.envs.ask_before_coding.replies.vet_llm_reply` (at most one hidden detail per
    reply, judged on the reply's concepts, never on verbatim matching alone).

    The endpoint is asked only about real questions: a turn that is not a question, or a question that asks
    nothing specific (the same :func:`question_subject` rule as the rule-based simulator), gets a fixed
    reply that reveals nothing, whatever the LLM would have said. The system prompt states the same rule. A reply
    the rules cannot vet, or no reply text at all (the model spent ``max_tokens`` first), is replaced by the
    rule-based user's answer, marked in :attr:`SimulatorReply.fallback` (the rollout's ``llm_user_fallbacks`` and
    ``llm_user_no_text`` metrics count them); any other failure of the endpoint raises.
    """

    #: Its replies say when the rule-based user's answer replaced them (SimulatorReply.fallback): the environment
    #: reports the rollout's ``llm_user_fallbacks`` with it, 0 included.
    marks_fallbacks = True

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        client: ChatClient | None = None,
        *,
        chat: Callable[..., str] | None = None,
    ):
        # ``chat``: rewardpipe's chat client as an environment context gives it (EnvContext.chat); else a
        # client of its own for ``base_url``/``model``.
        if chat is None:
            self.client = client or ChatClient(base_url or "", model or "", api_key=api_key)
        self._chat = chat if chat is not None else self.client.complete

    def close(self) -> None:
        if getattr(self, "client", None) is not None:
            self.client.close()

    def respond(self, state: EpisodeState, task: Task) -> SimulatorReply:
        question = next((m.content for m in reversed(state.messages) if m.role == "assistant"), "")
        key = f"{state.rollout_id}:{len(state.messages)}"
        if classify_turn(question) is not TurnKind.QUESTION:
            return SimulatorReply(_pick(NOT_A_QUESTION, key), None)
        if question_subject(question, task.prompt, task.entry_point).asks_nothing:
            return SimulatorReply(_pick(ASK_SOMETHING_SPECIFIC, key), None)
        details = "\n".join(f"{i + 1}. {item}" for i, item in enumerate(task.spec))
        messages = [{"role": "system", "content": SIMULATOR_SYSTEM_PROMPT.format(prompt=task.prompt, details=details)}]
        # From the simulator's point of view the roles are swapped: the programmer is the "user".
        for message in state.messages[1:]:
            role = "user" if message.role == "assistant" else "assistant"
            messages.append({"role": role, "content": message.content})
        from rewardpipe.openai_client import NoTextBeforeLimit

        try:
            text = self._chat(messages, temperature=0.0).strip()
        except NoTextBeforeLimit:
            # The user's model spent max_tokens before writing anything (a question written to keep a reasoning
            # model thinking: "work out every case by hand first"). Raised, the rollout was a simulator_error record,
            # out of its group's baseline: a weak rollout's way out of the low score it was heading for. A reply with
            # no text is one the rules cannot vet, replaced by the rule-based user's answer as any such reply is.
            return _fallback(state, task, FALLBACK_NO_TEXT)
        # One question, at most one detail, judged on what the reply means and enforced: a reply stating
        # several details (a question that talked the LLM into listing the requirements, in its own words or
        # the spec's) says only the one asked about; a reply the rules cannot account for (a paraphrase they
        # do not recognise, a made-up requirement) is replaced by the rule-based user's answer.
        vetted, revealed = vet_llm_reply(
            text, question, task.spec, prompt=task.prompt, entry_point=task.entry_point, revealed=state.revealed
        )
        if vetted is None:
            return _fallback(state, task, FALLBACK_UNVETTED)
        return SimulatorReply(vetted, revealed)


def _fallback(state: EpisodeState, task: Task, why: str) -> SimulatorReply:
    """The rule-based user's answer in place of the LLM user's reply, marked with ``why`` (counted in the
    rollout's metrics: ``llm_user_fallbacks``)."""
    reply = RuleBasedSimulator().respond(state, task)
    return SimulatorReply(reply.text, reply.revealed, why, reply.restated)
