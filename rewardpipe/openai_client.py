"""Minimal client for OpenAI-compatible ``/chat/completions`` endpoints (vLLM, SGLang, OpenAI, Bedrock gateways).

Failures after retries raise :class:`EndpointError`; callers turn that into an *error record*, never a score.
A throttled or failing endpoint (429, 5xx, a timeout, a dropped connection) is retried with exponential backoff,
jittered (many workers retrying in step would hit a recovering endpoint together) and capped; a ``Retry-After``
the endpoint sends is honoured up to the same cap. The API key goes into the request header only: it is in no
error message, log line or ``repr``.

:class:`ChatModel` is the interface the rest of rewardpipe programs against (the LLM judge, an environment's
``ctx.chat``): anything with ``complete(messages, **params) -> str`` and a ``model`` name, so another transport
(Bedrock's Converse API) can stand in for this one.
"""

from __future__ import annotations

import functools
import html
import itertools
import json
import os
import random
import re
import ssl
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

import httpx

from rewardpipe.safe_text import encodable

RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
MAX_BACKOFF_S = 60.0  # exponential backoff stops growing here (a long retry series must not sleep for days)


class EndpointError(RuntimeError):
    """The model endpoint could not produce a completion (network, HTTP status, or malformed body)."""


class ContentFiltered(EndpointError):
    """The endpoint's content filter stopped the exchange: the request (``on_prompt``: an HTTP 4xx whose error
    *code* names a content filter or policy, as Azure OpenAI's ``content_filter`` and OpenAI's
    ``content_policy_violation`` do) or the reply (no text, with ``finish_reason`` ``content_filter`` or a
    ``refusal`` in its place). What the conversation holds decided it, not the endpoint's health: the caller
    decides whose it is (:func:`rewardpipe.episode.converse`)."""

    def __init__(self, message: str, *, on_prompt: bool) -> None:
        super().__init__(message)
        self.on_prompt = on_prompt


class NoTextBeforeLimit(EndpointError):
    """The reply has no text and ``finish_reason`` ``length``: the model spent ``max_tokens`` before writing any
    (a reasoning model still thinking, its thoughts in ``reasoning_content``). A policy takes it as an empty turn,
    the model's own doing; a judge as an answer without a verdict, and ask-before-coding's LLM user as a reply it
    cannot vet (both, where the model's text may have kept them thinking); any other caller as the endpoint's
    failure."""


class ContextLengthExceeded(EndpointError):
    """The endpoint refused the request because the conversation (with ``max_tokens``) no longer fits the
    model's context window: no retry can help, and a policy's conversation ends there."""


# How the servers people use say a prompt is too long, in the 4xx body: OpenAI's error code (and its "maximum
# context length" message, which vLLM copies), vLLM's and SGLang's own, TGI's token budget (422), Anthropic's
# and Bedrock's, llama.cpp's server ("exceeds the available context size", type exceed_context_size_error).
# A refusal for another reason may quote what was sent, the model's own words included: a code counts only as a
# code or type field of a JSON body (the server sets those, never the conversation), and a phrase only where
# the words around it are not text the request carried.
_CONTEXT_OVERFLOW_STATUS = frozenset({400, 413, 422})
#: Error codes of a request a content filter refused (Azure OpenAI, its inner code, OpenAI). Only a body's code
#: fields are read: its message may quote the conversation, and the model's words may say anything.
_CONTENT_FILTER_CODES = frozenset({"content_filter", "content_policy_violation", "responsibleaipolicyviolation"})
_CONTEXT_OVERFLOW_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error"})  # OpenAI, llama.cpp
_CONTEXT_OVERFLOW_TEXT = re.compile(
    r"context[ _-]?length|context window|max(?:imum)?[ _]model[ _]len|prompt is too long|input is too long"
    r"|(?:input|prompt)\b[^.]{0,60}\b(?:too long|exceeds?)\b[^.]{0,60}\b(?:limit|length|tokens)"
    r"|tokens \+ `?max_new_tokens`? must be <=|exceeds? the (?:available|max(?:imum)?) context size",
    re.IGNORECASE,
)
_READ_CHARS = 1024  # of the body, and of each message in it: the server's sentence comes first, quotes later
_QUOTE_CONTEXT = 48  # characters either side of a phrase compared with what was sent (a server's sentence has its
# varying token counts within them: "context length is 4096 tokens. However, you requested 5120")
_MAX_FIELDS = 64  # JSON fields read from an error body (a hostile or huge one costs no more)
_MAX_PHRASES = 32  # overflow phrases of a body compared with what was sent (each costs up to ~100 searches)
_SENT_EDGE = "\x00"  # between the texts of what was sent (see _quoted_side)
# What stands before and after a quote of a sent text cut short (the server's quotation marks and brackets, an
# escaped quote, a space or a colon before one).
_OPENS = frozenset("'\"`([{<:= \t\n\u201c\u2018\u00ab\u201e")
_CLOSES = frozenset("'\"`)]}>\\\u201d\u2019\u00bb")


def _error_fields(body: Any) -> tuple[set[str], list[str]]:
    """The code/type values and the message texts of a JSON error body, whatever shape the server uses
    (``{"error": {...}}``, ``{"error": "text"}``, ``{"message": ...}``, ``{"detail": ...}``), nested or not."""
    codes: set[str] = set()
    messages: list[str] = []
    pending, seen = [body], 0
    while pending and seen < _MAX_FIELDS:
        value = pending.pop()
        if not isinstance(value, dict):
            continue
        for key, item in value.items():
            seen += 1
            if isinstance(item, dict):
                pending.append(item)
            elif isinstance(item, str) and key in ("code", "type", "error_type"):
                codes.add(item.lower())
            elif isinstance(item, str) and key in ("message", "error", "detail", "msg"):
                messages.append(item[:_READ_CHARS])
    return codes, messages


def _quoted_forms(text: str) -> tuple[str, ...]:
    """``text`` as a refusal may quote it: as it is, and escaped the ways servers quote what they were sent (a
    Python repr: pydantic's ``input_value=...``, a parser's ``{arguments!r}``; JSON inside the message, with and
    without non-ASCII as ``\\uXXXX``; HTML entities). Escaped *before* lower-casing, as the server escaped it."""
    forms = [text]
    if not text.isprintable() or any(char in "\"'\\&<>" for char in text) or not text.isascii():
        forms += [repr(text)[1:-1], json.dumps(text)[1:-1], json.dumps(text, ensure_ascii=False)[1:-1]]
        forms.append(html.escape(text, quote=False))
        forms.append(html.escape(text))
    return tuple(form.lower() for form in dict.fromkeys(forms))


def _sent_text(messages: Sequence[Any]) -> str:
    """Every string the request carried in its messages (contents, parts, tool-call arguments), lower-cased, each
    also in the escaped forms a refusal may quote it in (:func:`_quoted_forms`): round nineteen compared the text
    as it was sent only, so a model's "Done.\\nprompt is too long" quoted back as a repr (``\\n``) read as the
    server's own sentence, and the endpoint's failure as the episode's context_limit end (round twenty)."""
    found: list[str] = []
    pending: list[Any] = [list(messages)]
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            found.extend(_quoted_forms(value))
        elif isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, (list, tuple)):
            pending.extend(value)
    # Each text between separators, so a quote that stops where a sent text starts or ends can be told (a short
    # turn quoted whole).
    return _SENT_EDGE + _SENT_EDGE.join(found) + _SENT_EDGE


def _quoted_side(lowered: str, start: int, end: int, sent: str, *, left: bool) -> int | None:
    """How far the text on one side of the phrase ``lowered[start:end]`` goes on as what was sent: the full
    ``_QUOTE_CONTEXT`` characters, or fewer up to where a sent text starts (left) or ends (right); None when it
    does not (the server's own words are there)."""
    width = _QUOTE_CONTEXT
    if left:
        if start >= width and lowered[start - width : end] in sent:
            return width
        edges = (k for k in range(min(width, start), -1, -1) if k == start or lowered[start - k - 1] in _OPENS)
        return next((k for k in edges if _SENT_EDGE + lowered[start - k : end] in sent), None)
    if end + width <= len(lowered) and lowered[start : end + width] in sent:
        return width
    room = min(width, len(lowered) - end)
    # A quote ends at a closing mark or the end of the text: a sent text that stops where the server's sentence
    # goes on ("... context length" before " (4096 tokens)") is the model's words echoing it, not a quote.
    edges = (k for k in range(room, -1, -1) if end + k == len(lowered) or lowered[end + k] in _CLOSES)
    return next((k for k in edges if lowered[start : end + k] + _SENT_EDGE in sent), None)


def _said_by_server(texts: Sequence[str], sent: str) -> bool:
    """Whether an overflow phrase in ``texts`` is the server's own: one that is not a quote of the conversation.

    A quote goes on as what was sent on *both* sides of the phrase, each for ``_QUOTE_CONTEXT`` characters (48: where
    a server's own sentence has token counts the model cannot know) or up to where a sent text starts or ends (a
    short turn quoted whole, between the server's quotation marks). Round nineteen took either side, 24 characters,
    and at the body's start a window cut down to the phrase alone: a conversation that once asked "What is this
    model's maximum context length?" or said "The prompt is too long" made vLLM's and Anthropic's own sentences
    quotes, and a rollout that outgrew its window an excluded policy_error (round twenty). A sent text that is
    nothing but the phrase quotes nothing (it cannot be told from the server saying it). The first
    ``_MAX_PHRASES`` phrases of the body are read, so a hostile one costs no more."""

    def phrases() -> Iterator[tuple[str, int, int]]:
        for text in texts:
            lowered = text.lower()
            for match in _CONTEXT_OVERFLOW_TEXT.finditer(lowered):
                yield lowered, match.start(), match.end()

    for lowered, start, end in itertools.islice(phrases(), _MAX_PHRASES):
        if lowered[start:end] not in sent:  # the phrase was never sent: the server's (one search, the common case)
            return True
        before = _quoted_side(lowered, start, end, sent, left=True)
        after = _quoted_side(lowered, start, end, sent, left=False) if before is not None else None
        if before is None or after is None or before + after == 0:
            return True
    return False


def _content_filtered(response: httpx.Response) -> bool:
    if response.status_code not in _CONTEXT_OVERFLOW_STATUS:
        return False
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and bool(_error_fields(body)[0] & _CONTENT_FILTER_CODES)


def _context_overflow(response: httpx.Response, messages: Sequence[Any]) -> bool:
    if response.status_code not in _CONTEXT_OVERFLOW_STATUS:
        return False
    try:
        body = response.json()
    except ValueError:
        body = None
    codes: set[str]
    texts: list[str]
    if not isinstance(body, dict):
        codes, texts = set(), [response.text[:_READ_CHARS]]  # not a JSON object: the body is the message
    else:
        codes, texts = _error_fields(body)
    if codes & _CONTEXT_OVERFLOW_CODES:
        return True
    sent = _sent_text(messages)
    return _said_by_server(texts, sent)


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One verifying TLS context for every client of the process: building one reads the CA bundle (tenths of
    a second each), and a run makes a client per policy, simulator and judge."""
    import certifi

    return ssl.create_default_context(cafile=certifi.where())


@runtime_checkable
class ChatModel(Protocol):
    """A chat model rewardpipe can call: ``complete(messages, **params)`` returns the assistant's text or raises
    :class:`EndpointError`; ``model`` names the model (it is part of what the judge caches on)."""

    model: str

    def complete(self, messages: Sequence[dict[str, str]], **params: Any) -> str: ...


def backoff_delay(
    attempt: int,
    base_s: float,
    cap_s: float = MAX_BACKOFF_S,
    retry_after: str | None = None,
    rng: Callable[[], float] = random.random,
) -> float:
    """Seconds to wait before retry ``attempt`` (1 = the first retry): ``base_s * 2**(attempt-1)``, capped at
    ``cap_s``, then jittered into [half, all] of it (the half keeps a floor under the wait; the jitter spreads
    retries that failed together). A ``Retry-After`` in seconds replaces the computed wait (still capped)."""
    if retry_after is not None:
        try:
            wanted = float(retry_after)
        except ValueError:  # an HTTP date: not worth a clock comparison, the computed wait applies
            wanted = -1.0
        if wanted >= 0.0:
            return min(wanted, cap_s)
    delay = min(base_s * 2.0 ** min(attempt - 1, 16), cap_s)
    return delay * (0.5 + 0.5 * rng())


class ChatClient:
    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        backoff_s: float = 0.5,
        transport: httpx.BaseTransport | None = None,
        *,
        max_backoff_s: float = MAX_BACKOFF_S,
    ) -> None:
        if not base_url:
            raise ValueError("base_url is required for an OpenAI-compatible endpoint")
        if not model:
            raise ValueError("model is required for an OpenAI-compatible endpoint")
        try:  # a base URL that can never be reached fails every request: say so before the first one
            url = httpx.URL(base_url)
        except (httpx.InvalidURL, TypeError, ValueError) as exc:
            raise ValueError(f"base URL {base_url!r} is not a URL: {exc}") from None
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(
                f"base URL {base_url!r} must be http:// or https:// with a host, e.g. http://localhost:8000/v1"
            )
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        self._http = httpx.Client(timeout=timeout_s, headers=headers, transport=transport, verify=_tls_context())

    def complete(self, messages: Sequence[dict[str, str]], **params: Any) -> str:
        return _content_of(*self._post(messages, params))

    def complete_message(self, messages: Sequence[dict[str, Any]], **params: Any) -> dict[str, Any]:
        """The reply as ``{"content": text, "tool_calls": list | None}``: a reply to a request sent ``tools=``
        may carry calls and no text. At most MAX_TOOL_CALLS calls are kept (each an object)."""
        response, url = self._post(messages, params)
        return choice_message(_first_choice(response), url, response.text)

    def _post(self, messages: Sequence[dict[str, Any]], params: dict[str, Any]) -> tuple[httpx.Response, str]:
        body = {"model": self.model, "messages": list(messages), **params}
        # A lone surrogate (a recorded turn's JSON "\ud800" decodes to one) has no UTF-8 form: sent as it is, the
        # request could not be encoded, so a judge's or an LLM user's call failed on the model's text (its sample
        # an excluded error, never graded: round twenty-two). It goes as U+FFFD.
        text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)  # as httpx writes it
        payload = encodable(text).encode("utf-8")
        url = f"{self.base_url}/chat/completions"
        last_problem = "no attempt made"
        retry_after: str | None = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(backoff_delay(attempt, self.backoff_s, self.max_backoff_s, retry_after))
            retry_after = None
            try:
                response = self._http.post(url, content=payload, headers={"Content-Type": "application/json"})
            except httpx.HTTPError as exc:
                last_problem = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code in RETRYABLE_STATUS:
                last_problem = f"HTTP {response.status_code} from {url}"
                retry_after = response.headers.get("retry-after")
                continue
            if response.status_code >= 400:
                problem = f"HTTP {response.status_code} from {url}: {response.text[:300]}"
                if _content_filtered(response):
                    raise ContentFiltered(problem, on_prompt=True)
                overflow = _context_overflow(response, messages)
                raise ContextLengthExceeded(problem) if overflow else EndpointError(problem)
            return response, url
        raise EndpointError(f"{url} failed after {self.max_retries + 1} attempts: {last_problem}")

    def close(self) -> None:
        self._http.close()

    def __repr__(self) -> str:  # never the key
        return f"ChatClient({self.base_url!r}, model={self.model!r}, key={'set' if self.api_key else 'unset'})"


def _first_choice(response: httpx.Response) -> Any:
    """``choices[0]`` of a response body (None when the body has none: the readers below say so)."""
    try:
        return response.json()["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def _content_of(response: httpx.Response, url: str) -> str:
    return choice_text(_first_choice(response), url, response.text)


def choice_text(choice: Any, where: str, body: str = "") -> str:
    """The text of one choice of a chat completion (``choices[0]``, as an endpoint or Nova's generate response
    sends it): the OpenAI policy's reading, shared so that the same reply has the same outcome on every path.
    EndpointError when there is no ``message.content``; ContentFiltered when a filter or a refusal took the text's
    place; NoTextBeforeLimit when ``max_tokens`` ran out before any text."""
    try:
        content = choice["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise EndpointError(f"{where} returned a body without choices[0].message.content: {body[:300]}") from None
    if isinstance(content, list):
        content = "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    if not isinstance(content, str):
        refusal = choice["message"].get("refusal") if isinstance(choice.get("message"), dict) else None
        if choice.get("finish_reason") == "content_filter" or isinstance(refusal, str):
            # The reply was filtered (or refused) in place of its text: the conversation decided it.
            raise ContentFiltered(f"{where} returned no text: the reply was filtered or refused", on_prompt=False)
        if content is None and choice.get("finish_reason") == "length":
            raise NoTextBeforeLimit(f"{where} returned no text: max_tokens ran out before the model wrote any")
        raise EndpointError(f"{where} returned no text (its content is a {type(content).__name__})")
    return content


MAX_TOOL_CALLS = 64  # calls kept from one reply: a model's output is hostile, and each call is answered


def choice_tool_calls(choice: Any, where: str, body: str = "") -> list[dict[str, Any]] | None:
    """The tool calls of one choice (None when it has none): at most MAX_TOOL_CALLS, each an object."""
    try:
        calls = choice["message"].get("tool_calls")
    except (KeyError, IndexError, TypeError, AttributeError):
        raise EndpointError(f"{where} returned a body without choices[0].message: {body[:300]}") from None
    if not calls:
        return None
    if not isinstance(calls, list):
        raise EndpointError(f"{where} returned tool_calls that are not a list: {type(calls).__name__}")
    return [call for call in calls[:MAX_TOOL_CALLS] if isinstance(call, dict)] or None


def choice_message(choice: Any, where: str, body: str = "") -> dict[str, Any]:
    """One choice as ``{"content": text, "tool_calls": list | None}`` (:meth:`ChatClient.complete_message`): beside
    tool calls a missing or null text is an empty one."""
    calls = choice_tool_calls(choice, where, body)
    if calls is None:
        return {"content": choice_text(choice, where, body), "tool_calls": None}
    try:
        content = choice_text(choice, where, body)
    except EndpointError:  # beside calls the text is often null
        content = ""
    return {"content": content, "tool_calls": calls}


class OwnsChatClient:
    """Mixin for policies and simulators that hold a :class:`ChatClient` as ``self.client``."""

    client: ChatClient

    def close(self) -> None:
        """Release the HTTP connection pool (long-lived runners create one client per run)."""
        self.client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
