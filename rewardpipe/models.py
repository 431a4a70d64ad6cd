"""The data that crosses every boundary: tasks, rollouts, messages and scored records.

One definition serves the local runner, the Lambda handlers and the Fargate code runner, so a record
written by any of them reads the same way everywhere.
"""

from __future__ import annotations

import errno
import json
import keyword
import math
import numbers
import os
import re
import stat
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Annotated, Any, Final, Literal, TypeGuard, TypeVar, cast

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from rewardpipe.deferred import DeferredModel
from rewardpipe.safe_text import encodable

RECORD_SCHEMA: Final = "rewardpipe.record/v1"
MANIFEST_SCHEMA: Final = "rewardpipe.run-manifest/v2"
MANIFEST_SCHEMA_V1 = "rewardpipe.run-manifest/v1"

#: Longest task, group or rollout id accepted at the input (characters). Ids this long still get a store
#: key (a long id is stored under a hash-suffixed key, see ``rewardpipe.store.encode_id``); the limit only
#: stops a runaway value (a whole transcript pasted into an id) at the door with a clear error.
MAX_ID_LENGTH = 1024
#: Largest step number: a 32-bit signed integer, the type a step partition gets in Athena/Glue.
MAX_STEP = 2**31 - 1
#: Most spec items a task may hold: one question per item and then the code must fit in an episode's
#: turn limit (rewardpipe.episode.MAX_TURNS, 100), or no episode (nor `doctor`) could ever reveal them all.
MAX_SPEC_ITEMS = 99
#: Largest magnitude of a component value or an aggregate. No reward is anywhere near it, and the monitor
#: squares and sums these numbers (variances, correlations, advantage shares): beyond about 1e150 a sum of
#: squares overflows a float. Scoring turns a larger (or non-finite) number into an error record; the
#: monitor excludes one it reads, like NaN, for that component only (``non_finite``).
MAX_SCORE_MAGNITUDE = 1e100


def is_score(value: Any) -> TypeGuard[float]:
    """True for a number the monitor can use as a component value or aggregate (finite, within bounds)."""
    return isinstance(value, (int, float)) and -MAX_SCORE_MAGNITUDE <= value <= MAX_SCORE_MAGNITUDE


def score_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a component value or an aggregate (None is "not computed"), or None."""
    if value is None or (is_score(value) and not isinstance(value, bool)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} {NOT_FINITE}"
    return f"{value:g} is beyond ±{MAX_SCORE_MAGNITUDE:g} (no reward is that large; its statistics would overflow)"


#: How :func:`score_problem` ends for a value that is not finite (NaN, an infinity).
NOT_FINITE = "is not a finite number"
#: The error kinds of a value that is no score (:func:`checked_score`'s), as records say them.
NOT_A_SCORE_KINDS = ("component_out_of_range", "aggregate_out_of_range", "non_finite_aggregate")


def non_finite_error(error: ErrorInfo) -> bool:
    """Whether ``error`` is :func:`checked_score`'s for a value that is not finite (a component's NaN or infinity,
    an overflowing weighted sum): what the trainers' answers (Nova's ``error_<kind>``, TRL's rows) have always
    called ``non_finite_score``. A ``component_out_of_range`` error says which it is in ``non_finite``; only a
    record written before that field (``non_finite`` absent) is read by its message's ending, as it always was."""
    if error.kind == "non_finite_aggregate":
        return True
    if error.kind != "component_out_of_range":
        return False
    if error.non_finite is not None:
        return error.non_finite
    return error.message.endswith(NOT_FINITE)


def checked_score(
    components: dict[str, float | None], weights: dict[str, float], aggregate: float | None, error: ErrorInfo | None
) -> tuple[dict[str, float | None], float | None, ErrorInfo | None]:
    """``(components, aggregate, error)`` fit for a record: a component value or an aggregate that is not a
    finite number within ±MAX_SCORE_MAGNITUDE (huge weights overflow to inf; a custom component can
    return anything) is left out (None) and the record becomes an error saying so: a null, infinite or
    absurd reward must never be handed to a trainer as a score, nor reach the monitor's statistics.
    Every score goes through it: :class:`rewardpipe.rewards.Reward`'s own (so a library caller never gets a NaN
    reward) and every record built from one (``rewardpipe.episode.build_record``), locally and on AWS."""
    bad_components = {
        name: problem for name, value in components.items() if (problem := score_problem(value)) is not None
    }
    if error is not None and error.kind == "component_out_of_range" and error.non_finite is None:
        # a component_out_of_range this check did not make (a reward's explain_error or a subclass's score_input
        # naming it): what its values are says whether one was not finite, never its message (model-written text
        # may end it)
        found = any(
            isinstance(value := components[name], float) and not math.isfinite(value) for name in bad_components
        )
        error = error.model_copy(update={"non_finite": found})
    if bad_components:
        name, problem = next(iter(bad_components.items()))
        bad = components[name]
        components = {name: None if name in bad_components else value for name, value in components.items()}
        return (
            components,
            None,
            error
            or ErrorInfo(
                kind="component_out_of_range",
                message=f"component '{name}': {problem}",
                non_finite=isinstance(bad, float) and not math.isfinite(bad),
            ),
        )
    problem = score_problem(aggregate)
    if problem is None:
        return components, aggregate, error
    shown = ", ".join(f"{name}={value:g}" for name, value in weights.items())
    kind = "non_finite_aggregate" if not math.isfinite(aggregate) else "aggregate_out_of_range"  # type: ignore[arg-type]
    return (
        components,
        None,
        error
        or ErrorInfo(
            kind=kind,
            message=f"the weighted sum of the components is {aggregate} (weights {shown}): {problem}; "
            f"use smaller weights",
        ),
    )


#: Unicode categories an id may not contain: control (Cc: NUL, ESC, tab, newline), format (Cf: bidi overrides,
#: zero-width characters), lone surrogates (Cs) and line/paragraph separators (Zl, Zp). They are the
#: characters rewardpipe.safe_text escapes on print: an id made of them would be shown differently from what
#: it is (and a terminal could act on it), two ids could look identical, and a key or a log line could split.
ID_FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def id_problem(value: str) -> str | None:
    """Why ``value`` cannot be an id (the first forbidden character and its position), or None."""
    if value.isprintable():  # the common case; every forbidden category is non-printable
        return None
    for position, char in enumerate(value, start=1):
        if unicodedata.category(char) in ID_FORBIDDEN_CATEGORIES:
            name = unicodedata.name(char, "") or "a control character"
            return (
                f"must not contain control, format or line-separator characters "
                f"(U+{ord(char):04X} {name} at character {position})"
            )
    return None


def same_text(value: str) -> str:
    """What ids are compared by where they must be unique: their NFC form. Two ids that differ only in
    Unicode normalisation (``café`` typed as one character or as ``e`` and a combining accent) print the
    same, so a user could never tell their records apart; the second is refused like a repeated id."""
    return value if value.isascii() else unicodedata.normalize("NFC", value)


def repeated_id(value: str, first_value: str, first_line: int) -> str:
    """How a repeated id is described: the earlier line, and its spelling when it differs only in form."""
    if value == first_value:
        return f"first on line {first_line}"
    return (
        f"line {first_line} has {ascii(first_value)[:80]}, here {ascii(value)[:80]}: the same text in another "
        f"Unicode normalisation"
    )


def require_printable_id(value: str) -> str:
    problem = id_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


#: A task, group, rollout or job id as accepted at every input (files, Lambda events, Nova and TRL entry
#: points): 1 to MAX_ID_LENGTH characters, none of them a control, format or separator character.
InputId = Annotated[str, Field(min_length=1, max_length=MAX_ID_LENGTH), AfterValidator(require_printable_id)]
#: Longest task id: an id less the room of the ids made from it, which must be ids too (`run`'s group and
#: rollout ids add "s<step>-g<group>-" and "-k<sample>", 26 characters at most; `doctor`'s "<task>:<scenario>").
MAX_TASK_ID_LENGTH = MAX_ID_LENGTH - 32
TaskId = Annotated[str, Field(min_length=1, max_length=MAX_TASK_ID_LENGTH), AfterValidator(require_printable_id)]
#: An end reason a recording declares: a name, as every end reason is (it becomes a metric and a report column).
END_REASON_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"
EndReason = Annotated[str, Field(pattern=END_REASON_PATTERN)]


def require_function_name(value: str) -> str:
    """``value`` if it can name a Python function (an identifier, not a keyword), else ValueError.

    The tests call the entry point by this name: anything else makes every execution an error, so a task
    file and an execution job (``exec``, the Lambda) refuse it at the input."""
    if not value.isidentifier() or keyword.iskeyword(value):
        raise ValueError("must be a Python function name (an identifier, not a keyword)")
    return value


UTF8_BOM = "\ufeff"  # what Windows editors put in front of a "UTF-8" file; JSON parsers refuse it

ASSISTANT_ROLE_ALIASES = {"nova_assistant": "assistant", "model": "assistant"}
#: The roles of OpenAI-style chat messages (after the aliases above).
CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def chat_role(value: Any) -> str | None:
    """The chat role ``value`` names (after the aliases), or None when it names none. Any case is read: the Nova
    Forge SDK's RFT samples compare their roles case-insensitively ("Assistant" is an assistant turn)."""
    if not isinstance(value, str) or not value:
        return None
    for spelled in (value, value.lower()):
        role = ASSISTANT_ROLE_ALIASES.get(spelled, spelled)
        if role in CHAT_ROLES:
            return role
    return None


def content_to_text(content: Any) -> str:
    """Flatten OpenAI-style content (a string or a list of parts) into plain text.

    Parts may be strings or ``{"type": "text", "text": ...}`` dicts; non-text parts (images, tool
    payloads) carry nothing a text reward can score, so they are skipped rather than rejected. A text part
    whose text is not a string, or a part that is neither a string nor an object, is refused (a malformed answer,
    never text read as empty and scored 0).
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_part_text(part) for part in content)
    if isinstance(content, dict) and "text" in content:  # (one text part, not in a list)
        return _part_text(content)
    raise ValueError(f"message content must be a string or a list of text parts, got {type(content).__name__}")


def _part_text(part: Any) -> str:
    """The text of one content part ('' for a part of another kind: an image, a tool payload)."""
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        raise ValueError(f"a message content part must be a string or an object, got {type(part).__name__}")
    if "text" in part:
        text = part["text"]
        if not isinstance(text, str):
            raise ValueError(f"a message content part's 'text' must be a string, got {type(text).__name__}")
        return text
    if part.get("type") == "text":
        raise ValueError("a message content part of type 'text' has no 'text'")
    return ""


def _is_none(value: Any) -> bool:
    return value is None


class Message(DeferredModel):
    """One chat turn. ``content`` is always normalised to text; ``nova_assistant`` becomes ``assistant``.

    The optional ``tool_calls`` (an assistant's OpenAI-style calls: ``{"id", "type": "function", "function":
    {"name", "arguments"}}``), ``tool_call_id`` (a tool message's answer to one of them) and ``name`` are kept,
    stored and passed to components; a message without them is written exactly as before they existed."""

    model_config = ConfigDict(extra="ignore")

    role: str
    content: str = ""
    # Absent (None) tool fields are not written. Excluded per field rather than by a model serializer: every
    # stored transcript writes every message, and a Python serializer per message cost more than the rest.
    tool_calls: list[dict[str, Any]] | None = Field(default=None, exclude_if=_is_none)
    tool_call_id: str | None = Field(default=None, exclude_if=_is_none)
    name: str | None = Field(default=None, exclude_if=_is_none)

    @field_validator("role", mode="before")
    @classmethod
    def _normalise_role(cls, value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise ValueError("role must be a non-empty string")
        role = chat_role(value)
        if role is None:  # a typo ("asistant") would silently drop the turn from scoring
            raise ValueError(f"unknown role {value[:40]!r} (expected one of {', '.join(sorted(CHAT_ROLES))})")
        return role

    @field_validator("content", mode="before")
    @classmethod
    def _normalise_content(cls, value: Any) -> str:
        return content_to_text(value)

    @field_validator("tool_calls", mode="after")
    @classmethod
    def _bounded_tool_calls(cls, value: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        if value is not None and nesting_depth(value, MAX_TOOL_CALL_DEPTH) > MAX_TOOL_CALL_DEPTH:
            # (a call's arguments may arrive as objects from a recording, Nova or a user's policy: nested past what
            # a state, a transcript or a record can be written with, the rollout could not be stored at all)
            raise ValueError(f"tool_calls are nested more than {MAX_TOOL_CALL_DEPTH} levels deep")
        return None if value is None else _encodable_keys(value)


def _encodable_keys(value: Any) -> Any:
    """``value`` with each object key's lone surrogates replaced by U+FFFD (see :func:`encodable`). A value's lone
    surrogate is kept and escaped when stored; a key's made pydantic's JSON dump of every transcript and state
    holding the message raise, so one model's call (arguments handed over as an object, by a recording, Nova or a
    user's policy) failed the whole run. Called on a depth already bounded; the caller's objects are left as they
    are (a new object only where something changed)."""
    if isinstance(value, dict):
        rebuilt = {
            encodable(key) if isinstance(key, str) else key: _encodable_keys(item) for key, item in value.items()
        }
        same = len(rebuilt) == len(value) and all(key in value and value[key] is rebuilt[key] for key in rebuilt)
        return value if same else rebuilt
    if isinstance(value, list):
        children = [_encodable_keys(item) for item in value]
        return value if all(new is old for new, old in zip(children, value, strict=True)) else children
    return value


#: How deep a message's ``tool_calls`` may nest (lists and objects, the calls' list itself included). An OpenAI
#: endpoint sends a call's arguments as text; objects come from recordings, Nova or a user's own policy, and past
#: about 250 levels pydantic cannot write them (a state, a transcript, a record).
MAX_TOOL_CALL_DEPTH = 64


def nesting_depth(value: Any, most: int) -> int:
    """How deep ``value``'s lists, tuples and dicts nest (a scalar is 0), counted without recursion and only up to
    ``most + 1``: a hostile value nested a million levels costs no more than one just past the bound."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if depth > most:
            return depth
        stack.extend((child, depth + 1) for child in children)
    return deepest


#: Why a conversation without an assistant message is refused: the model never spoke, so there is no answer.
NO_ANSWER = "field 'messages': no assistant message, so no answer to score"


def has_answer(messages: Iterable[Message]) -> bool:
    """Whether ``messages`` hold an answer to score: an assistant message (after the role aliases).

    An empty assistant message is an answer (the model said nothing, and that is scored); a conversation with
    no assistant message at all (``[]``, system or user turns only) has none and is bad input wherever it is
    read: a rollouts or samples file, the single-turn reward Lambda, a trainer adapter."""
    return any(message.role == "assistant" for message in messages)


_MESSAGE_FIELDS_SET = frozenset({"role", "content"})


def text_message(role: str, content: str) -> Message:
    """A text message built without validation: what ``Message.model_construct(role=..., content=...)`` builds,
    without its general cases (it costs more than validating). For the turn loop's own messages, whose role
    is spelled by the code and whose content is already text (a policy's reply, an environment's answer)."""
    message = Message.__new__(Message)
    _setattr = object.__setattr__
    _setattr(
        message, "__dict__", {"role": role, "content": content, "tool_calls": None, "tool_call_id": None, "name": None}
    )
    _setattr(message, "__pydantic_fields_set__", set(_MESSAGE_FIELDS_SET))
    _setattr(message, "__pydantic_extra__", None)
    _setattr(message, "__pydantic_private__", None)
    return message


class Rollout(DeferredModel):
    """A recorded episode: the transcript of one of the K samples of a GRPO group."""

    model_config = ConfigDict(extra="forbid")

    rollout_id: InputId
    group_id: InputId
    task_id: InputId
    step: int = Field(default=0, ge=0, le=MAX_STEP, strict=True)  # true, 1.0 or "1" is not a step number
    # An empty transcript has nothing to score: it is a bad input line, never a silent 0.
    messages: list[Message] = Field(min_length=1)
    # Why the conversation stopped, where the recorder knows and the messages cannot say: the platform ended
    # it (context_limit, completion_budget, turn_limit) rather than the environment. Kept only where the
    # environment's replay names no end of its own; None: read from the replay, as before.
    end_reason: EndReason | None = None


class RolloutIdentity(DeferredModel):
    """What names one rollout and what was said in it: shared by the live episode state and the
    stored transcript, so both identify a rollout, and turn back into a Rollout, the same way."""

    run_id: str
    step: int = Field(default=0, ge=0, le=MAX_STEP, strict=True)  # one rule for every step a store files
    group_id: str
    rollout_id: str
    task_id: str
    messages: list[Message]

    def record_ids(self) -> dict[str, Any]:
        """The identifying fields every record of this rollout carries."""
        return {
            "run_id": self.run_id,
            "step": self.step,
            "group_id": self.group_id,
            "rollout_id": self.rollout_id,
            "task_id": self.task_id,
        }

    def to_rollout(self) -> Rollout:
        """The recording ``score`` replays, with how it ended where the live state or the transcript knows it
        (an end reason that is not a name is left for the replay to read)."""
        end_reason = getattr(self, "end_reason", None)  # EpisodeState's and RolloutTranscript's field
        if not (isinstance(end_reason, str) and re.fullmatch(END_REASON_PATTERN, end_reason)):
            end_reason = None
        return Rollout(
            rollout_id=self.rollout_id,
            group_id=self.group_id,
            task_id=self.task_id,
            step=self.step,
            messages=self.messages,
            end_reason=end_reason,
        )


class ErrorInfo(DeferredModel):
    """Why a record could not be scored. ``kind`` is a stable machine-readable class."""

    kind: str
    message: str
    #: For a ``component_out_of_range`` error (:func:`checked_score`'s): True when the component's value was not a
    #: finite number (NaN, an infinity), False when it was a finite one beyond ±MAX_SCORE_MAGNITUDE. None (and
    #: absent from the JSON) on every other kind, and on records written before this field
    #: (:func:`non_finite_error` reads those by their message, as it always did).
    non_finite: bool | None = Field(default=None, exclude_if=lambda value: value is None)

    @field_validator("kind", "message", mode="after")
    @classmethod
    def _utf8(cls, text: str) -> str:
        # A user's explain_error may quote the model's text: a lone surrogate in it must not make every record
        # of the run unserialisable (its JSON is UTF-8).
        return encodable(text)


MetricValue = float | int | str | bool | None


#: The most characters of one text metric a record keeps (an environment's ``metrics()``, a reward's diagnostics): a
#: longer one is cut, ending with a note of its length (a metric echoing a file or the model's padding put megabytes
#: into every record, as observations did before ``max_observation_chars``).
MAX_METRIC_TEXT_CHARS = 2000
#: The longest metric name a record keeps: a longer one is left out, and said so.
MAX_METRIC_NAME_CHARS = 200
#: The most metrics one source (an environment's ``metrics()``, a reward's diagnostics) adds to a record: the ones past
#: it are left out, and said so (200,000 of them, each short, made a 3 MB record of every rollout). Above the 1,500
#: checks a reward's diagnostics may report (round sixteen keeps them all in the record, tests/aws).
MAX_METRICS = 2048
#: The most characters of text (names and text values together) one source adds to a record: a metric past it is
#: left out, and said so (2,048 metrics of 2,000 characters each, every one within its own limit, made 4 MB records).
MAX_METRICS_TEXT_CHARS = 200_000


def cut_text(value: str, limit: int) -> str:
    """``value``, or its first characters and a note of its length: at most ``limit`` characters in all."""
    if len(value) <= limit:
        return value
    note = f"... [cut: {len(value):,} characters]"
    return value[: max(limit - len(note), 0)] + note


#: The bounds of the transcripts a trainer integration keeps of what it saw (the TRL callback's, a verifiers
#: GroupWatch's): the model's text may be any length, so each message's text is cut to this many characters, and a
#: longer conversation keeps its first message (the task) with the last ones, this many in all.
TRAINER_TRANSCRIPT_MESSAGE_CHARS = 4000
TRAINER_TRANSCRIPT_MESSAGES = 32


def first_and_last(messages: list[Any], keep: int) -> list[Any]:
    """``messages`` when at most ``keep``; else the first one with the last ``keep - 1``."""
    return messages if len(messages) <= keep else [messages[0], *messages[1 - keep :]]


def recordable_metrics(values: Any, source: str) -> tuple[dict[str, MetricValue], str | None]:
    """``values`` (what a reward's diagnostics or an environment's ``metrics()`` returned) as a record's
    metrics, and a note naming what was left out (None when nothing was).

    They may carry what the model wrote (a diagnostics reporting the answer it parsed), so nothing in them may
    fail the record, its JSON or the Nova answer: text keys with number, text, boolean or None values are kept,
    text with its lone surrogates replaced by U+FFFD and cut to ``MAX_METRIC_TEXT_CHARS``; an integer no float holds,
    a name longer than ``MAX_METRIC_NAME_CHARS``, any other value or key is left out and named, and so are the
    metrics past the first ``MAX_METRICS`` kept and those past ``MAX_METRICS_TEXT_CHARS`` characters of names and
    texts.
    """
    if not isinstance(values, dict):
        try:
            values = dict(values)
        except Exception as exc:  # noqa: BLE001 - a value of the wrong shape is evidence lost, never the record
            return {}, f"{source} returned {type(values).__name__}, not a dict ({type(exc).__name__})"
    kept: dict[str, MetricValue] = {}
    odd: list[str] = []
    seen = 0
    chars = 0  # of the names and texts kept
    over_budget = 0  # metrics left out past MAX_METRICS_TEXT_CHARS
    for name, value in values.items():
        if len(kept) + over_budget >= MAX_METRICS:
            odd.insert(0, f"{len(values) - seen:,} of its {len(values):,} metrics past the first {MAX_METRICS} kept")
            break
        seen += 1
        if not isinstance(name, str):
            odd.append(repr(name)[:40] if isinstance(name, (int, float, bool)) else f"a {type(name).__name__} key")
            continue
        if len(name) > MAX_METRIC_NAME_CHARS:
            odd.append(f"a name of {len(name):,} characters")
            continue
        name = encodable(name)
        if value.__class__ not in _PLAIN:
            value = _plain_scalar(value)
        if isinstance(value, str):
            value = cut_text(value, MAX_METRIC_TEXT_CHARS)
        elif isinstance(value, int) and not isinstance(value, bool) and not _fits_a_float(value):
            odd.append(f"{name[:40]!r} is an int of {value.bit_length()} bits")
            continue
        elif not (value is None or isinstance(value, (bool, int, float))):
            odd.append(f"{name[:40]!r} is a {type(value).__name__}")
            continue
        cost = len(name) + (len(value) if isinstance(value, str) else 0)
        if chars + cost > MAX_METRICS_TEXT_CHARS:
            over_budget += 1
            continue
        chars += cost
        kept[name] = encodable(value) if isinstance(value, str) else value
    if over_budget:
        odd.insert(0, f"{over_budget:,} metrics past {MAX_METRICS_TEXT_CHARS:,} characters of names and texts kept")
    if not odd:
        return kept, None
    return kept, (
        f"{source} values must be numbers, text, booleans or None, keyed by text; left out: {', '.join(odd[:3])}"
    )


_PLAIN = frozenset({str, int, float, bool, type(None)})


#: Where a record says which metrics the record-wide bounds (:func:`record_metrics`) left out.
METRICS_LEFT_OUT = "metrics_left_out"


def record_metrics(*sources: Mapping[str, MetricValue]) -> dict[str, MetricValue]:
    """The metrics of ``sources`` (a reward's diagnostics, then the episode's: its platform metrics and an
    environment's ``metrics()``; a later one wins a name) as one record keeps them: at most
    ``MAX_METRICS_TEXT_CHARS`` characters of names and texts in all.

    :func:`recordable_metrics` bounds each source, so two full sources made a record twice the size the bound
    allows. Within it nothing changes; past it the costliest metrics (longest name and text) are left out first, so
    the platform's short ones (``end_reason``, an execution's status, a source's note of what it left out) stay, the
    rest keep their order, and ``metrics_left_out`` says how many went. (Their number needs no bound of its own:
    each source keeps ``MAX_METRICS``, each name counts against the characters.)"""
    merged: dict[str, MetricValue] = {}
    for source in sources:
        merged.update(source)

    def cost(item: tuple[str, MetricValue]) -> int:
        return len(item[0]) + (len(item[1]) if isinstance(item[1], str) else 0)

    if sum(map(cost, merged.items())) <= MAX_METRICS_TEXT_CHARS:
        return merged
    kept: set[str] = set()
    chars = 0
    for name, value in sorted(merged.items(), key=cost):  # stable: equal costs keep their order
        price = cost((name, value))
        if chars + price > MAX_METRICS_TEXT_CHARS - 200:  # room for the note
            break
        kept.add(name)
        chars += price
    out = {name: value for name, value in merged.items() if name in kept}
    out[METRICS_LEFT_OUT] = (
        f"{len(merged) - len(kept):,} of the record's {len(merged):,} metrics left out (a record keeps "
        f"{MAX_METRICS_TEXT_CHARS:,} characters of names and texts, the longest left out first)"
    )
    return out


def _plain_scalar(value: Any) -> Any:
    """A number of another library as the Python number it is: numpy's integers (``numpy.int64``, what a count
    over an array gives) and booleans were left out of a record's metrics as "a int64", while numpy's floats
    (a float subclass) were kept. Anything else is returned as it is."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, int, float)):
        return float(value)
    if isinstance(value, float):
        return float(value)  # numpy.float64 and other subclasses: a plain float in the record
    kind = type(value)
    if kind.__module__ == "numpy" and kind.__name__ in ("bool_", "bool"):
        return bool(value)
    return value


def _fits_a_float(value: int) -> bool:
    try:
        float(value)
    except OverflowError:
        return False
    return True


class Record(DeferredModel):
    """One scored (or unscorable) rollout. Components are ``None`` when they could not be computed."""

    model_config = ConfigDict(populate_by_name=True)

    schema_: Literal["rewardpipe.record/v1"] = Field(default=RECORD_SCHEMA, alias="schema")
    # ids: non-empty (an empty one has no store key) and steps as Rollout.step; refused where a record is read
    run_id: str = Field(min_length=1)
    step: int = Field(default=0, ge=0, le=MAX_STEP, strict=True)
    group_id: str = Field(min_length=1)
    rollout_id: str = Field(min_length=1)
    task_id: str = Field(min_length=1)
    status: Literal["scored", "error"]
    error: ErrorInfo | None = None
    components: dict[str, float | None]
    weights: dict[str, float]
    aggregate: float | None
    metrics: dict[str, MetricValue] = Field(default_factory=dict)

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True)

    def to_nova(self) -> dict[str, Any]:
        """The Nova Forge reward shape: ``aggregate_reward_score`` plus typed ``metrics_list``."""
        return nova_output(self.rollout_id, self.aggregate, self.components, self.metrics, self.error)


def nova_output(
    sample_id: Any,
    aggregate: float | None,
    components: dict[str, float | None],
    metrics: dict[str, MetricValue],
    error: ErrorInfo | None = None,
) -> dict[str, Any]:
    """Build one Nova ``RewardFunctionOutput``.

    Nova requires a finite number for every entry, so an uncomputable component is left out of
    ``metrics_list`` (a reward of 0 would be a lie), as is any non-finite value, and an error is flagged by
    the ``reward_error`` metric; the aggregate of an error (or a non-finite aggregate) is reported as 0.0
    *and* flagged, because the contract has no null. Trainers that read ``reward_error`` can drop the
    sample from the group baseline.
    """
    metrics_list: list[dict[str, Any]] = []
    for name, value in components.items():
        if value is not None and math.isfinite(value):
            metrics_list.append({"name": name, "value": float(value), "type": "Reward"})
    for name, metric in metrics.items():
        # A diagnostic named like a component, the ``reward_error`` flag or an ``error_<kind>`` flag would stand
        # beside it in the list, and every reader that keys the list by name (the trainer adapters, the bridge)
        # would take the diagnostic's value for the component or the flag: left out (the record keeps it).
        if name in components or name == "reward_error" or name.startswith("error_"):
            continue
        if isinstance(metric, bool):
            metric = int(metric)
        if isinstance(metric, (int, float)) and math.isfinite(metric):
            metrics_list.append({"name": name, "value": metric, "type": "Metric"})
    # A non-finite aggregate cannot be sent either: it is reported as 0.0 and flagged like any error.
    finite = aggregate is not None and math.isfinite(aggregate)
    flagged = bool(error) or (aggregate is not None and not finite)
    metrics_list.append({"name": "reward_error", "value": 1 if flagged else 0, "type": "Metric"})
    return {
        "id": sample_id,
        "aggregate_reward_score": float(aggregate) if finite and aggregate is not None else 0.0,
        "metrics_list": metrics_list,
    }


def nova_fields(output: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(components, metrics)`` of a Nova output (:func:`nova_output`): its ``"Reward"`` entries by name and
    its other entries by name. Kept apart, so a component named like a flag (``reward_error``, ``error_count``)
    is never read as the flag, nor the flag as the component."""
    rewards: dict[str, Any] = {}
    metrics: dict[str, Any] = {}
    entries = output.get("metrics_list") if isinstance(output, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            (rewards if entry.get("type") == "Reward" else metrics)[entry["name"]] = entry.get("value")
    return rewards, metrics


class InputFileError(ValueError):
    """A JSONL input file has a bad line; the message names the file, line and field."""


M = TypeVar("M", bound=BaseModel)


def field_error(error: Any, default: str = "<object>") -> str:
    """One pydantic error as ``field 'a.b': message`` (pydantic's "Value error, " prefix dropped)."""
    field = ".".join(str(p) for p in error["loc"]) or default
    return f"field '{field}': {error['msg'].removeprefix('Value error, ')}"


def _describe_validation_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "<line>"
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown field '{field}'")
        elif err["type"] == "missing":
            parts.append(f"missing required field '{field}'")
        else:
            parts.append(field_error(err, field))
    return "; ".join(parts)


def parse_jsonl(lines: Iterable[str], model: type[M], source: str) -> Iterator[M]:
    """Parse JSONL into ``model`` instances; any bad line raises :class:`InputFileError` naming it."""
    for _, item in _parse_numbered(lines, model, source):
        yield item


def decode_lines(raw_lines: Iterable[bytes], source: str) -> Iterator[str]:
    """Text of each ``\n``-terminated line of a byte stream, decoded one line at a time.

    A line that is not UTF-8 raises :class:`InputFileError` naming ``source:line`` and the byte, so one
    bad byte in a large file points at its line instead of failing the file as a whole. Lines are split
    on ``\n`` only (JSON strings may legally hold U+2028 or a bare ``\r``, which ``str.splitlines``
    would split on).
    """
    for lineno, raw in enumerate(raw_lines, start=1):
        yield decode_line(raw, lineno, f"{source}:{lineno}")


def open_input(path: str | Path, *, follow_links: bool = True, pipes: bool = True) -> IO[bytes]:
    """``path`` opened for binary reading, if it is something a command can read to its end.

    A regular file, or a pipe (``<(...)``, ``/dev/stdin``, a named FIFO): a FIFO nobody writes to reads
    as empty instead of blocking the command forever (it is opened non-blocking, then set back to
    blocking for the reads). A directory raises :class:`IsADirectoryError`; a device or socket
    (``/dev/zero`` never ends) raises :class:`InputFileError`. Other opening errors propagate (OSError).
    ``follow_links=False``: a symbolic link is not followed (an OSError); ``pipes=False``: a regular file only.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else getattr(os, "O_NOFOLLOW", 0))
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
        if not (stat.S_ISREG(mode) or (pipes and stat.S_ISFIFO(mode))):
            what = "a regular file or a pipe" if pipes else "a regular file"
            raise InputFileError(f"{path}: not {what}, so it cannot be read as input")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_lines(path: str | Path) -> Iterator[str]:
    """The lines of a text file as :func:`decode_lines` gives them; opening errors propagate (OSError)."""
    path = Path(path)
    with open_input(path) as fh:
        yield from decode_lines(fh, str(path))


def iter_json_objects(lines: Iterable[str], source: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank JSONL line; a line that is not an object raises
    :class:`InputFileError` naming ``source`` and the line."""
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        yield lineno, json_object(line, f"{source}:{lineno}")


def json_object(line: str, where: str) -> dict[str, Any]:
    """One JSONL line as a dict; :class:`InputFileError` prefixed with ``where`` (``file:line``) if it is not."""
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputFileError(f"{where}: not valid JSON ({exc.msg})") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits (CPython's conversion limit)
        raise InputFileError(f"{where}: not valid JSON ({str(exc).split(':')[0]})") from None
    except RecursionError:
        raise InputFileError(f"{where}: not valid JSON (nested too deeply)") from None
    if not isinstance(raw, dict):
        raise InputFileError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    return raw


def validate_object(raw: dict[str, Any], model: type[M], where: str) -> M:
    """``model`` built from one parsed line; :class:`InputFileError` naming ``where``, the id and the field."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        ident = raw.get("rollout_id") or raw.get("task_id") or ""
        label = f" ({str(ident)[:80]})" if isinstance(ident, str) and ident else ""
        raise InputFileError(f"{where}{label}: {_describe_validation_error(exc)}") from None


def _parse_numbered(lines: Iterable[str], model: type[M], source: str) -> Iterator[tuple[int, M]]:
    for lineno, raw in iter_json_objects(lines, source):
        yield lineno, validate_object(raw, model, f"{source}:{lineno}")


def load_task_rows(path: str | Path, model: type[M]) -> list[M]:
    """Load a task JSONL file as rows of ``model`` (an environment's ``task_model``); a bad line raises
    :class:`InputFileError` naming the file, the line and the field, and so does a repeated ``task_id``."""
    rows, problems = read_task_rows(path, model)
    if problems:
        raise InputFileError(problems[0][1])
    return rows


def read_task_rows(path: str | Path, model: type[M]) -> tuple[list[M], list[tuple[int, str]]]:
    """The valid rows of a task JSONL file as ``model``, and ``(line, problem)`` for every line that is not one
    (not UTF-8, not JSON, a field wrong: ``file:line`` and the field), then for every repeated ``task_id``.
    Opening errors propagate (OSError)."""
    path = Path(path)
    numbered: list[tuple[int, M]] = []
    problems: list[tuple[int, str]] = []
    with open_input(path) as fh:
        for lineno, _, row, problem in validated_lines(fh, path, model):
            if row is None:
                problems.append((lineno, problem or f"{path}:{lineno}: not a task row"))
            else:
                numbered.append((lineno, row))
    first: dict[str, tuple[str, int]] = {}  # same_text(task_id) -> (task_id, line)
    for lineno, task in numbered:
        task_id = task.task_id  # type: ignore[attr-defined]
        first_id, first_line = first.setdefault(same_text(task_id), (task_id, lineno))
        if first_line != lineno:
            problems.append(
                (
                    lineno,
                    f"{path}:{lineno}: duplicate task_id '{task_id[:80]}' "
                    f"({repeated_id(task_id, first_id, first_line)})",
                )
            )
    return [task for _, task in numbered], problems


def load_tasks(path: str | Path) -> list[Any]:
    """The ask-before-coding tasks of a JSONL file (:func:`load_task_rows` with its ``Task``)."""
    from rewardpipe.envs.ask_before_coding.tasks import Task

    return load_task_rows(path, Task)


def __getattr__(name: str) -> Any:
    # ``Task`` is the ask-before-coding environment's task model (rewardpipe.envs.ask_before_coding.tasks);
    # it is still importable from here, where it was first defined.
    if name == "Task":
        from rewardpipe.envs.ask_before_coding.tasks import Task

        return Task
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class RolloutReader:
    """Rollouts of a JSONL file, one line at a time, each line judged on its own.

    Iterating yields ``(line number, Rollout | None, problem | None)``: a bad line (not UTF-8, not JSON,
    not a valid rollout, a transcript without an assistant message, a ``rollout_id`` already seen on an
    earlier line (or the same text in another Unicode normalisation), or a rollout filed in a group of
    its step that an earlier line gave another task: a GRPO group is K samples of one prompt, and a mixed
    one would compare answers to different questions) comes back with a problem naming ``file:line`` and
    nothing is held in memory but the ids seen so far.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._first_line: dict[str, tuple[str, int]] = {}  # same_text(rollout_id) -> (rollout_id, line)
        # (step, same_text(group)) -> (group, task, first line)
        self._group_task: dict[tuple[int, str], tuple[str, str, int]] = {}

    def __iter__(self) -> Iterator[tuple[int, Rollout | None, str | None]]:
        with open_input(self.path) as fh:
            yield from self.read(fh)

    def read(self, fh: IO[bytes]) -> Iterator[tuple[int, Rollout | None, str | None]]:
        for lineno, where, rollout, problem in validated_lines(fh, self.path, Rollout):
            if rollout is None:
                yield lineno, None, problem
                continue
            rollout_key = same_text(rollout.rollout_id)
            first_id, first = self._first_line.setdefault(rollout_key, (rollout.rollout_id, lineno))
            if first != lineno:
                yield (
                    lineno,
                    None,
                    (
                        f"{where} ({rollout.rollout_id[:80]}): duplicate rollout_id "
                        f"({repeated_id(rollout.rollout_id, first_id, first)})"
                    ),
                )
                continue
            group, task, task_line = self._group_task.setdefault(
                (rollout.step, same_text(rollout.group_id)), (rollout.group_id, rollout.task_id, lineno)
            )
            problem = None
            if not has_answer(rollout.messages):
                # like `messages: []`: a transcript in which the model never spoke has nothing to score
                problem = "field 'messages': no assistant message, so nothing the model said to score"
            elif group != rollout.group_id:  # two groups a reader cannot tell apart would split one group in two
                problem = (
                    f"field 'group_id': group {ascii(rollout.group_id)[:80]} of step {rollout.step} is "
                    f"the same text as group {ascii(group)[:80]} of line {task_line} in another Unicode "
                    f"normalisation"
                )
            elif task != rollout.task_id:
                problem = (
                    f"field 'task_id': group '{rollout.group_id[:80]}' of step {rollout.step} is task "
                    f"'{task[:80]}' (line {task_line}), not '{rollout.task_id[:80]}': a group is one prompt"
                )
            if problem is not None:
                del self._first_line[rollout_key]  # refused: its id stays free for a corrected line
                yield lineno, None, f"{where} ({rollout.rollout_id[:80]}): {problem}"
                continue
            yield lineno, rollout, None


def validated_lines(fh: IO[bytes], path: str | Path, model: type[M]) -> Iterator[tuple[int, str, M | None, str | None]]:
    """``(line number, "file:line", object, None)`` for each non-blank line of ``fh`` that is a valid ``model``;
    ``(line number, "file:line", None, problem)`` for one that is not (not UTF-8, not JSON, a field wrong)."""
    for lineno, raw in enumerate(fh, start=1):
        where = f"{path}:{lineno}"
        try:
            line = decode_line(raw, lineno, where)
            if not line.strip():
                continue
            item = validate_object(json_object(line, where), model, where)
        except InputFileError as exc:
            yield lineno, where, None, str(exc)
            continue
        yield lineno, where, item, None


def decode_line(raw: bytes, lineno: int, where: str) -> str:
    """Line ``lineno`` of a file as text (a byte-order mark in front of line 1 dropped), or InputFileError."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start + 1} of the line)") from None
    return line.removeprefix(UTF8_BOM) if lineno == 1 else line


def load_rollouts(path: str | Path) -> list[Rollout]:
    """Every rollout of a JSONL file; the first bad line (including a repeated rollout_id) raises."""
    rollouts: list[Rollout] = []
    for _, rollout, problem in RolloutReader(path):
        if problem is not None:
            raise InputFileError(problem)
        rollouts.append(cast(Rollout, rollout))  # the reader gives a rollout whenever it gives no problem
    return rollouts


# --------------------------------------------------------------------------------------------------
# Run manifest


class ComponentInfo(DeferredModel):
    """What the monitor, the report and the alarms need to judge one component: its declared value range,
    its role (``outcome``, ``shaping`` or ``penalty``) and its weight; and its time limit, if it has one."""

    model_config = ConfigDict(extra="ignore")

    range: tuple[float, float]
    role: Literal["outcome", "shaping", "penalty"]
    weight: float
    #: the component's ``timeout_s``; written only when it has one (a manifest without limits reads as before)
    timeout_s: float | None = Field(default=None, exclude_if=lambda value: value is None)


class RunManifest(DeferredModel):
    """``runs/<run_id>/manifest.json``: what one run id stands for.

    Written when a run starts (``finished_at`` null) and again when it ends. ``identity()`` is the part
    that decides which records the run produces; ``run --resume`` refuses to continue a run whose
    identity differs, so one run id always means one experiment.

    * ``command``: the subcommand that wrote the run (``run`` or ``score``).
    * ``configuration``: the options that shape the records (policy, seed, group size, groups per step,
      max turns, endpoints and models, the rollouts file hash for replay/score...).
    * ``tasks_file`` / ``tasks_sha256``: the task file used, and the SHA-256 of its bytes (null when a
      single-turn ``score`` used none).
    * ``reward`` / ``weights``: the reward name and the effective component weights.
    * ``versions``: rewardpipe and Python versions that wrote it.
    * ``started_at`` / ``finished_at``: UTC ISO-8601 timestamps; ``finished_at`` stays null for a run
      that was interrupted (resume it with ``--resume``).
    * ``steps``: step count requested (not part of the identity: a resumed run may ask for more steps).

    Added in v2 (a v1 manifest still reads, with these empty):

    * ``environment`` / ``environment_version``: the environment reference the run was given (``ask_before_coding``,
      ``pkg.module:ENV``, a short name) and its version; null for single-turn scoring;
    * ``reward_reference``: the reference the reward was named by, when it is not simply its name;
    * ``components``: each component's declared ``range``, ``role`` and ``weight``, so ``monitor``,
      ``report`` and the alarms judge a user's component by its own range and role;
    * ``packages``: the distributions (and versions) the environment and reward came from.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: Literal["rewardpipe.run-manifest/v1", "rewardpipe.run-manifest/v2"] = Field(
        default=MANIFEST_SCHEMA, alias="schema"
    )
    run_id: str
    command: str
    configuration: dict[str, Any]
    tasks_file: str | None
    tasks_sha256: str | None
    reward: str
    weights: dict[str, float]
    versions: dict[str, str]
    started_at: str
    finished_at: str | None = None
    steps: int | None = None
    environment: str | None = None
    environment_version: str | None = None
    reward_reference: str | None = None
    components: dict[str, ComponentInfo] = Field(default_factory=dict)
    packages: dict[str, str] = Field(default_factory=dict)

    @property
    def environment_name(self) -> str | None:
        """The environment of the run; a v1 manifest's runs were all of the built-in ask_before_coding."""
        if self.schema_ == MANIFEST_SCHEMA_V1:
            return "ask_before_coding"
        return self.environment

    def identity(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "configuration": self.configuration,
            "tasks_sha256": self.tasks_sha256,
            "reward": self.reward,
            "weights": self.weights,
            "environment": self.environment_name,
        }

    def differences(self, other: RunManifest) -> list[str]:
        """Human-readable ``field: mine -> theirs`` lines for every identity field that differs."""
        mine, theirs = self.identity(), other.identity()
        diffs = []
        for name in mine:
            if name == "configuration":
                keys = sorted(set(mine[name]) | set(theirs[name]))
                diffs += [
                    f"{k}: {mine[name].get(k)!r} -> {theirs[name].get(k)!r}"
                    for k in keys
                    if mine[name].get(k) != theirs[name].get(k)
                ]
            elif mine[name] != theirs[name]:
                diffs.append(f"{name}: {mine[name]!r} -> {theirs[name]!r}")
        return diffs

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


def utc_now() -> str:
    """Now as a run manifest's timestamps are written: UTC, ISO-8601, to the second."""
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat(timespec="seconds")


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of the file's bytes (a manifest's ``tasks_sha256``, a replayed rollouts file's)."""
    import hashlib

    digest = hashlib.sha256()
    with open_input(path) as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def new_manifest(
    *,
    run_id: str,
    command: str,
    configuration: Mapping[str, Any],
    reward: Any,
    tasks_file: str | Path | None = None,
    steps: int | None = None,
    env: Any = None,
    env_reference: str | None = None,
    reward_reference: str | None = None,
    weights: Mapping[str, float] | None = None,
    components: Mapping[str, Any] | None = None,
) -> RunManifest:
    """A new run's manifest, in progress (``finished_at`` null), as every writer of a run builds it: ``run`` and
    ``score``, the trainer integrations and ``verl import`` (here, beside the model, so a training process builds it
    without loading the CLI).

    ``reward`` is the :class:`~rewardpipe.rewards.base.Reward` (its name, weights and components recorded, and the
    package it came from), or the name of a reward rewardpipe does not hold (a verifiers rubric, verl's reward
    function), whose ``weights`` (and ``components``, each a :class:`ComponentInfo`'s fields, when known) are then
    given. ``packages`` names the distributions (and versions) ``env`` and ``reward`` came from when that can be told
    cheaply (:func:`rewardpipe.references.distribution_of`)."""
    import platform

    from rewardpipe import __version__

    named = isinstance(reward, str)
    name = reward if named else reward.name
    return RunManifest(
        run_id=run_id,
        command=command,
        configuration=dict(configuration),
        tasks_file=None if tasks_file is None else str(tasks_file),
        tasks_sha256=None if tasks_file is None else file_sha256(tasks_file),
        reward=name,
        weights={key: float(weight) for key, weight in ((weights or {}) if named else reward.weights).items()},
        versions={"rewardpipe": __version__, "python": platform.python_version()},
        started_at=utc_now(),
        steps=steps,
        environment=env_reference if env is not None else None,
        environment_version=env.version if env is not None else None,
        reward_reference=reward_reference if reward_reference not in (None, name) else None,
        components=dict(components or {}) if named else reward.describe(),
        packages=_packages(env, None if named else reward),
    )


def _packages(*sources: Any) -> dict[str, str]:
    """The distributions (other than rewardpipe) the environment and reward came from. A lookup that raises (a
    distribution's unreadable metadata) leaves its package unnamed: the versions are a courtesy, and a trainer whose
    manifest failed to build would have none, its steps never marked."""
    from rewardpipe.references import distribution_of

    packages: dict[str, str] = {}
    for obj in sources:
        try:
            found = distribution_of(obj) if obj is not None else None
        except Exception:  # noqa: BLE001 - see above: the manifest is written without it
            found = None
        if found is not None and found[0] != "rewardpipe":
            packages[found[0]] = found[1]
    return packages
