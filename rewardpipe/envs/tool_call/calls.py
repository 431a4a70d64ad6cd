"""Reading the tool calls of one assistant turn: structured ``tool_calls`` or tagged text.

* **Structured** (what an OpenAI-compatible endpoint returns when it is sent ``tools=``): the assistant
  message's ``tool_calls``, each ``{"id", "type": "function", "function": {"name", "arguments"}}``, the
  arguments a JSON text (an object is accepted too). A turn with structured calls is read from them alone.
* **Tagged text** (a model served without a tool parser): ``<tool_call>{"name": "transfer", "arguments":
  {...}}</tool_call>``, as many as the turn holds; the arguments may be an object or a JSON text. Found in
  linear time (:func:`rewardpipe.tagged.tagged_spans`); an unclosed ``<tool_call>`` is a call that failed
  to parse.

A turn with neither is the model's **final answer**: the content of its last ``<answer>...</answer>`` if it
has one, else its whole text.

Everything here is bounded: at most :data:`MAX_CALLS_PER_TURN` calls of a turn are run, the next ones up
to :data:`MAX_READ_CALLS` are answered as refused, and any beyond that are only counted; a tag's content
is read only up to a size; nothing is ever evaluated.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rewardpipe.envs.tool_call.tools import MAX_ARGUMENT_CHARS
from rewardpipe.tagged import tagged_spans

CALL_TAG = "tool_call"
ANSWER_TAG = "answer"
MAX_CALLS_PER_TURN = 8
#: Calls of one turn that get an answer (the ones past MAX_CALLS_PER_TURN are refused); more are counted.
MAX_READ_CALLS = 16
MAX_ID_CHARS = 128
#: The longest final answer kept (characters).
MAX_ANSWER_CHARS = 2000


@dataclass(frozen=True)
class ParsedCall:
    """One call as the turn wrote it: ``name`` and ``arguments`` (a JSON text or an object) as given, or the
    ``problem`` that kept it from being read; ``id`` is the call's own (structured) or one made for it."""

    id: str
    name: Any = None
    arguments: Any = None
    problem: str | None = None


@dataclass(frozen=True)
class ParsedTurn:
    """The calls of a turn (``structured``: they came as ``tool_calls``), how many were left unread past
    MAX_READ_CALLS, and the final answer of a turn with no call."""

    calls: tuple[ParsedCall, ...]
    structured: bool
    unread: int
    answer: str | None


def _call_id(given: Any, turn: int, index: int) -> str:
    if isinstance(given, str) and 0 < len(given) <= MAX_ID_CHARS and given.isprintable():
        return given
    return f"call_{turn}_{index}"


def _structured(entries: Sequence[Any], turn: int) -> list[ParsedCall]:
    calls = []
    for index, entry in enumerate(entries[:MAX_READ_CALLS]):
        given_id = entry.get("id") if isinstance(entry, dict) else None
        call_id = _call_id(given_id, turn, index)
        function = entry.get("function") if isinstance(entry, dict) else None
        if not isinstance(function, dict):
            calls.append(
                ParsedCall(call_id, problem="a tool call needs a 'function' object with 'name' and 'arguments'")
            )
            continue
        calls.append(ParsedCall(call_id, function.get("name"), function.get("arguments", {})))
    return calls


def _tagged(text: str, turn: int) -> tuple[list[ParsedCall], int]:
    scan = tagged_spans(text, CALL_TAG)
    calls = []
    for index, (start, end) in enumerate(scan.spans[:MAX_READ_CALLS]):
        call_id = _call_id(None, turn, index)
        if end - start > MAX_ARGUMENT_CHARS + 512:
            calls.append(
                ParsedCall(
                    call_id, problem=f"a <{CALL_TAG}> of {end - start} characters; at most {MAX_ARGUMENT_CHARS + 512}"
                )
            )
            continue
        try:
            body = json.loads(text[start:end])
        except (ValueError, RecursionError) as exc:
            calls.append(ParsedCall(call_id, problem=f"the <{CALL_TAG}> is not JSON: {str(exc)[:120]}"))
            continue
        if not isinstance(body, dict) or "name" not in body:
            calls.append(ParsedCall(call_id, problem=f'a <{CALL_TAG}> holds {{"name": ..., "arguments": {{...}}}}'))
            continue
        extra = sorted(set(body) - {"name", "arguments"})
        if extra:
            calls.append(
                ParsedCall(
                    call_id,
                    problem=f"a <{CALL_TAG}> holds only name and arguments, not "
                    f"{', '.join(repr(k)[:40] for k in extra[:3])}",
                )
            )
            continue
        calls.append(ParsedCall(call_id, body["name"], body.get("arguments", {})))
    unread = max(0, len(scan.spans) - MAX_READ_CALLS)
    if scan.unclosed and len(calls) < MAX_READ_CALLS:
        calls.append(
            ParsedCall(_call_id(None, turn, len(calls)), problem=f"a <{CALL_TAG}> is never closed (</{CALL_TAG}>)")
        )
    elif scan.unclosed:
        unread += scan.unclosed
    return calls, unread


def final_answer(text: str) -> str:
    """The answer a turn gives: its last ``<answer>`` span, else its text (stripped, bounded)."""
    tagged = tagged_spans(text, ANSWER_TAG).last()
    answer = (tagged if tagged is not None else text).strip()
    return answer[:MAX_ANSWER_CHARS]


def parse_turn(text: str, tool_calls: Sequence[Any] | None, turn: int) -> ParsedTurn:
    """The calls of one assistant turn (its text and its structured ``tool_calls``), or its final answer."""
    if tool_calls:
        entries = list(tool_calls) if isinstance(tool_calls, (list, tuple)) else []
        return ParsedTurn(tuple(_structured(entries, turn)), True, max(0, len(entries) - MAX_READ_CALLS), None)
    calls, unread = _tagged(text, turn)
    if calls or unread:
        return ParsedTurn(tuple(calls), False, unread, None)
    return ParsedTurn((), False, 0, final_answer(text))
