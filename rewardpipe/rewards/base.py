"""The reward abstraction: a weighted sum of small, pure, named components (:mod:`rewardpipe.components`).

A component returns a float, or ``None`` when it cannot be computed for infrastructure reasons (the tests
could not run, the reference answer is unreadable). ``None`` is never folded into 0: the whole score becomes
an error so the monitor and the trainer can leave the sample out instead of learning from a fake zero. A
component that raises is recorded the same way, as ``component_raised`` naming the component and the first
line of the exception (the text may be model-influenced, so it is shortened and its control characters are
escaped), never as a 0.

Every path scores through :meth:`Reward.score_input` / :meth:`Reward.score_many`: the CLI, the episode
loop, the single-turn Nova Lambda, the AWS score step and the trainer adapters.
"""

from __future__ import annotations

import asyncio
import functools
import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from rewardpipe import bounded
from rewardpipe.components import (
    LEGACY_INPUT,
    Component,
    ComponentDefinitionError,
    ComponentTimeout,
    ComponentUnavailable,
    check_name,
    input_names,
    is_async_callable,
    leading_positional,
    make_caller,
)
from rewardpipe.gc_pause import paused_gc
from rewardpipe.models import (
    MAX_METRIC_TEXT_CHARS,
    MAX_SCORE_MAGNITUDE,
    ErrorInfo,
    Message,
    MetricValue,
    checked_score,
    cut_text,
    recordable_metrics,
    score_problem,
)
from rewardpipe.parsing import ParsedTurn, TurnKind, parse_turn

if TYPE_CHECKING:  # pragma: no cover
    from rewardpipe.execution.result import ExecutionResult

#: The longest exception line a ``component_raised`` error keeps (characters).
RAISED_MESSAGE_CHARS = 300


def _kept(error: ErrorInfo) -> ErrorInfo:
    """An ``explain_error``'s error as a record keeps it: its message cut to ``MAX_METRIC_TEXT_CHARS`` with a note
    of its length, as a text metric is. It may quote the model's answer: a message holding the whole of a
    300,000-character answer was stored in the record (and every answer naming it) whole."""
    if len(error.message) <= MAX_METRIC_TEXT_CHARS:
        return error
    return error.model_copy(update={"message": cut_text(error.message, MAX_METRIC_TEXT_CHARS)})


class Transcript:
    """A parsed view of a conversation, built once and shared by every component that asks for it.

    ``assistant_texts`` and ``assistant_turns`` (each assistant turn classified by
    :func:`rewardpipe.parsing.parse_turn`: question, commit or other, with its fenced Python code) are
    computed on first use only."""

    __slots__ = ("_texts", "_turns", "messages")

    def __init__(
        self,
        messages: Sequence[Message],
        assistant_turns: Sequence[ParsedTurn] | None = None,
        assistant_texts: Sequence[str] | None = None,
    ) -> None:
        self.messages: tuple[Message, ...] = tuple(messages)
        self._texts = tuple(assistant_texts) if assistant_texts is not None else None
        self._turns = tuple(assistant_turns) if assistant_turns is not None else None

    @classmethod
    def from_messages(cls, messages: Sequence[Message]) -> Transcript:
        return cls(messages)

    @property
    def assistant_texts(self) -> tuple[str, ...]:
        if self._texts is None:
            self._texts = tuple(m.content for m in self.messages if m.role == "assistant")
        return self._texts

    @property
    def assistant_turns(self) -> tuple[ParsedTurn, ...]:
        if self._turns is None:
            self._turns = tuple(parse_turn(text) for text in self.assistant_texts)
        return self._turns

    @property
    def completion(self) -> str:
        texts = self.assistant_texts
        return texts[-1] if texts else ""

    @property
    def kinds(self) -> list[TurnKind]:
        return [turn.kind for turn in self.assistant_turns]

    def final_commit_index(self) -> int | None:
        """Index (among assistant turns) of the last committing turn: its code is what gets executed."""
        turns = self.assistant_turns
        for index in range(len(turns) - 1, -1, -1):
            if turns[index].kind is TurnKind.COMMIT:
                return index
        return None

    @property
    def final_code(self) -> str | None:
        index = self.final_commit_index()
        return None if index is None else self.assistant_turns[index].code

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Transcript) and self.messages == other.messages

    def __repr__(self) -> str:
        return f"Transcript({len(self.messages)} messages)"


def _last_assistant_text(messages: Sequence[Message]) -> str:
    for message in reversed(messages):
        if message.role == "assistant":
            return message.content
    return ""


class ScoringInput:
    """What one sample offers its components: each input of :data:`rewardpipe.components.INPUTS`, built
    the first time a component asks for it.

    ``ScoringInput(transcript=None, execution=None, reference=None, *, messages=None, task=None, state=None,
    completion=None)``: give the messages (a sequence, or a function returning one, called once when
    needed) or a transcript; ``completion`` may be given directly when it is already at hand."""

    __slots__ = ("_completion", "_messages", "_transcript", "execution", "reference", "state", "task")

    def __init__(
        self,
        transcript: Transcript | None = None,
        execution: ExecutionResult | None = None,
        reference: Any = None,
        *,
        messages: Sequence[Message] | Callable[[], Sequence[Message]] | None = None,
        task: Any = None,
        state: Any = None,
        completion: str | None = None,
    ) -> None:
        self._transcript = transcript
        self._messages = messages
        self._completion = completion
        self.execution = execution
        self.reference = reference
        self.task = task
        self.state = state

    @property
    def messages(self) -> Sequence[Message]:
        messages = self._messages
        if callable(messages):
            messages = self._messages = messages()
        if messages is None:
            messages = self._messages = self._transcript.messages if self._transcript is not None else ()
        return messages

    @property
    def transcript(self) -> Transcript:
        if self._transcript is None:
            self._transcript = Transcript(self.messages)
        return self._transcript

    @property
    def completion(self) -> str:
        if self._completion is None:
            self._completion = (
                self._transcript.completion if self._transcript is not None else _last_assistant_text(self.messages)
            )
        return self._completion


#: A component's value this far outside its declared range is inside it (float rounding), as doctor judges it.
RANGE_TOLERANCE = 1e-9
#: The text metric a Score (so its record) carries when a component returned a value outside its declared range:
#: "name=5 outside [0, 1]". The value itself is scored as it is (the contract of a component's range).
OUT_OF_RANGE_METRIC = "out_of_range"


class OutOfRangeWarning(RuntimeWarning):
    """A component returned a value outside its declared range (warned once per component per reward). The value
    is scored as it is; ``warnings.simplefilter("error", OutOfRangeWarning)`` (a strict test, a CI run) makes the
    scorer raise it to its caller instead."""


@dataclass(slots=True)
class Score:
    components: dict[str, float | None]
    weights: dict[str, float]
    aggregate: float | None
    metrics: dict[str, MetricValue] = field(default_factory=dict)
    error: ErrorInfo | None = None


def _bounded(score: Score) -> Score:
    """``score``, or its error when a value of it is no score (NaN, infinity, beyond ±MAX_SCORE_MAGNITUDE: a component
    returning one, weights whose sum overflows), exactly as its record would say (``component_out_of_range``,
    ``non_finite_aggregate``, ``aggregate_out_of_range``: :func:`rewardpipe.models.checked_score`). A library caller
    (a user's own training loop) was handed the NaN, which made every advantage of its group NaN. An error score
    goes through the check too, which says of an error it did not make whether a value was not finite."""
    limit = MAX_SCORE_MAGNITUDE
    aggregate = score.aggregate
    if (
        score.error is None
        and (aggregate is None or -limit <= aggregate <= limit)
        and all(-limit <= value <= limit for value in score.components.values() if value is not None)
    ):
        return score  # NaN fails both comparisons
    components, aggregate, error = checked_score(score.components, score.weights, aggregate, score.error)
    return Score(components, score.weights, aggregate, score.metrics, error)


@dataclass(slots=True)
class ColumnScores:
    """A batch's scores by column (:meth:`Reward.score_columns`): ``values[i][j]`` is component ``names[i]`` of
    sample ``j`` (None for an error sample), ``aggregates[j]`` and ``errors[j]`` that sample's."""

    names: list[str]
    values: list[list[float | None]]
    aggregates: list[float | None]
    errors: list[ErrorInfo | None]


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message``, shortened and with control characters escaped: exception text
    may carry what the model wrote (ANSI sequences, a whole transcript)."""
    from rewardpipe.safe_text import printable

    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    line = printable(line, keep_newlines=False)
    if len(line) > RAISED_MESSAGE_CHARS:
        line = line[:RAISED_MESSAGE_CHARS] + "..."
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


#: The longest file path a ``component_raised`` error shows (its tail is kept: the file's own name).
RAISED_PATH_CHARS = 80


@functools.cache
def _library_dirs() -> tuple[str, ...]:
    """Directories whose frames are never the user's: rewardpipe's own package and Python's standard library."""
    import sysconfig
    from pathlib import Path

    import rewardpipe

    paths = sysconfig.get_paths()
    dirs = {str(Path(rewardpipe.__file__).resolve().parent)} | {
        str(Path(paths[key]).resolve()) for key in ("stdlib", "platstdlib") if paths.get(key)
    }
    return tuple(sorted(d.rstrip("/\\") + "/" for d in dirs))


def user_frame(exc: BaseException) -> tuple[str, Any] | None:
    """``(real path, frame)`` of the innermost frame of ``exc``'s traceback that is the user's code: never one of
    rewardpipe's own frames nor the standard library's, and outside installed packages (``site-packages``) when
    there is one (else the outermost user frame: the component itself, installed as a package). None when no frame
    is the user's (an error rewardpipe raised about a returned value)."""
    import os
    import traceback

    libraries = _library_dirs()
    frames = []
    for frame in traceback.extract_tb(exc.__traceback__):
        name = frame.filename
        if not name or name.startswith("<"):
            continue
        full = os.path.realpath(name).replace("\\", "/")
        if not full.startswith(libraries):
            frames.append((full, frame))
    if not frames:
        return None
    own = [f for f in frames if "/site-packages/" not in f[0] and "/dist-packages/" not in f[0]]
    return own[-1] if own else frames[0]


def user_location(exc: BaseException) -> str | None:
    """``file:line`` of :func:`user_frame` (None when there is none), for a record's error: the path is relative
    to the working directory when under it, its tail kept past :data:`RAISED_PATH_CHARS`, control characters
    escaped."""
    found = user_frame(exc)
    if found is None:
        return None
    path, frame = found
    return f"{shown_path(path)}:{frame.lineno}"


def shown_path(path: str) -> str:
    """A user's file as an error names it: relative to the working directory when under it, control characters
    escaped, its tail kept past :data:`RAISED_PATH_CHARS` (the file's own name)."""
    import os

    from rewardpipe.safe_text import printable

    try:
        relative = os.path.relpath(path)
        path = relative if not relative.startswith("..") else path
    except ValueError:  # another drive (Windows)
        pass
    path = printable(path, keep_newlines=False)
    if len(path) > RAISED_PATH_CHARS:
        path = "..." + path[-(RAISED_PATH_CHARS - 3) :]
    return path


def how_failed(exc: BaseException) -> str:
    """How user code failed, said after what failed: ``called sys.exit(3)``, or ``raised Type: first line``."""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r})"
    return f"raised {first_line(exc)}"


def raised_error(name: str, exc: BaseException) -> ErrorInfo:
    if isinstance(exc, ComponentTimeout):  # its own message names the component and the limit
        return ErrorInfo(kind="component_timeout", message=str(exc))
    if isinstance(exc, ComponentUnavailable):  # "cannot compute, and here is why": not a bug in the component
        from rewardpipe.safe_text import printable

        reason = printable(str(exc.reason), keep_newlines=False)[:RAISED_MESSAGE_CHARS]
        return ErrorInfo(kind="component_unavailable", message=f"component '{name}' could not compute: {reason}")
    where = user_location(exc)
    at = f" (at {where})" if where else ""
    return ErrorInfo(kind="component_raised", message=f"component '{name}' raised {first_line(exc)}{at}")


def run_coroutines(coroutines: Sequence[Any]) -> list[Any]:
    """Await ``coroutines`` concurrently; each result, or the exception it raised, in order. Works from
    synchronous code whether or not an event loop is running in this thread (a running one, as in a
    notebook or an async trainer, is left alone: the coroutines run on a loop of their own in a worker)."""
    if not coroutines:
        return []

    async def guarded(coroutine: Any) -> Any:
        # gather(return_exceptions=True) hands back an Exception, but lets SystemExit (and the event loop
        # re-raises it) out: a component calling sys.exit() would end the whole batch. Caught here, inside
        # the coroutine, it is that component's error like any other; only KeyboardInterrupt goes on.
        try:
            return await coroutine
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - one component's failure, returned as its result
            return exc

    async def gather() -> list[Any]:
        return list(await asyncio.gather(*map(guarded, coroutines), return_exceptions=True))

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(gather())
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1, thread_name_prefix="rewardpipe-async-components") as pool:
        return pool.submit(asyncio.run, gather()).result()


async def _raise(exc: BaseException) -> Any:
    raise exc


class _NotANumber(Exception):
    pass


def _as_value(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, float):
        return value
    if isinstance(value, (int, bool)) or (hasattr(value, "__float__") and not isinstance(value, (str, bytes))):
        try:
            return float(value)
        except OverflowError:  # a number, but none a float holds: "not a number" said the wrong thing
            raise _NotANumber(
                f"returned {type(value).__name__} too large for a float (a number of at most 1e308)"
            ) from None
        except (TypeError, ValueError):
            pass
    raise _NotANumber(f"returned {type(value).__name__} {str(value)[:40]!r}, not a number (or None)")


def _hook(fn: Callable[..., Any] | None, what: str) -> Callable[[ScoringInput], Any] | None:
    """A diagnostics or explain_error function, called with the inputs it names (like a component)."""
    if fn is None:
        return None
    inputs, positional = input_names(fn, what)
    if is_async_callable(fn):
        raise ComponentDefinitionError(f"{what}: must be a plain (not async) function")
    return make_caller(fn, inputs, positional, leading_positional(fn))


def _messages(messages: Any) -> Sequence[Message]:
    """``messages`` as Messages. A dict (OpenAI's message format) went through as it was, and every component
    of the sample "raised AttributeError: 'dict' object has no attribute 'role'": the user's input blamed on
    their reward."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise ValueError(f"messages must be a list of messages, got {type(messages).__name__}")
    if all(message.__class__ is Message for message in messages):
        return messages
    checked = []
    for index, message in enumerate(messages):
        if isinstance(message, Message):
            checked.append(message)
            continue
        if not isinstance(message, Mapping):
            raise ValueError(f"messages[{index}] is a {type(message).__name__}, not a Message or a dict of one")
        try:
            checked.append(Message.model_validate(dict(message)))
        except ValueError as exc:  # pydantic's ValidationError
            raise ValueError(f"messages[{index}] is not a message: {first_line(exc)}") from None
    return checked


class Reward:
    """A named, weighted sum of components.

    ``Reward(name, components, weights=None)``: ``components`` are :func:`rewardpipe.component`-decorated
    functions (:class:`~rewardpipe.components.Component`); ``weights`` overrides weights by component name
    (an unknown name is an error). Keyword-only extras: ``diagnostics`` (a function in the same input
    vocabulary returning extra metrics), ``explain_error`` (why a component came back None), and for
    single-turn code rewards ``needs_execution`` / ``executed_code``.
    """

    #: Whether the class (or a base of it below Reward) defines its own ``score_input``: every batch then scores each
    #: sample through it (:meth:`score_many`, :meth:`score_columns`), as :meth:`score` does.
    _own_score_input = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass's own ``score_input`` returns what the base class's does: a Score whose values are scores
        (:func:`_bounded`), whose ``component_out_of_range`` error says by its ``non_finite`` field, never by its
        message, whether a value was not finite. Without it such a subclass handed a NaN on, or an error every
        reader (TRL's rows, Nova's answer) read from its text."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("score_input")
        if own is None or getattr(own, "_rewardpipe_bounded", False):
            return
        cls._own_score_input = True

        @functools.wraps(own)
        def score_input(self: Reward, data: ScoringInput) -> Score:
            score = own(self, data)
            return _bounded(score) if isinstance(score, Score) else score

        score_input._rewardpipe_bounded = True  # type: ignore[attr-defined]
        cls.score_input = score_input  # type: ignore[method-assign]

    def __init__(
        self,
        name: str,
        components: Iterable[Any],
        weights: Mapping[str, float] | None = None,
        *,
        diagnostics: Callable[..., Mapping[str, MetricValue]] | None = None,
        explain_error: Callable[..., ErrorInfo | None] | None = None,
        needs_execution: bool = False,
        executed_code: Callable[[Transcript], str | None] | None = None,
        description: str = "",
    ) -> None:
        self.name = check_name(name, "reward")
        if isinstance(components, (Component, str, bytes)) or not isinstance(components, Iterable):
            raise ComponentDefinitionError(f"reward '{name}': components must be a list of components")
        comps = []
        for item in components:
            if not isinstance(item, Component):
                label = getattr(item, "__name__", repr(item))
                raise ComponentDefinitionError(
                    f"reward '{name}': {label} is not a component; decorate it with "
                    f"@component(range=(lo, hi), role='outcome'|'shaping'|'penalty')"
                )
            comps.append(item)
        if not comps:
            raise ComponentDefinitionError(f"reward '{name}' needs at least one component")
        seen: set[str] = set()
        for item in comps:
            if item.name in seen:
                raise ComponentDefinitionError(f"reward '{name}' has two components named '{item.name}'")
            seen.add(item.name)
        self.components: tuple[Component, ...] = tuple(comps)
        self.diagnostics = diagnostics
        self.explain_error = explain_error
        self.needs_execution = needs_execution
        self.executed_code = executed_code
        self.description = description
        self._diagnostics = _hook(diagnostics, f"reward '{name}' diagnostics")
        self._explain = _hook(explain_error, f"reward '{name}' explain_error")
        self._set_components(self.components)
        if weights is not None:  # checked even when empty or falsy: weights=0 was silently no weights
            self._set_components(self.with_weights(weights).components)

    def _set_components(self, components: tuple[Component, ...]) -> None:
        self.components = components
        self._weights = {c.name: c.weight for c in components}
        self._any_async = any(c.is_async for c in components)
        # What scoring walks for every sample, worked out once: a component of one positional input is called
        # here with it (no wrapper call in between), any other through its caller.
        self._plan = tuple(
            (
                c.name,
                c.fn if c.single_input else c._call,
                attrgetter(c.inputs[0]) if c.single_input else None,
                c.is_async,
            )
            for c in components
        )
        # The time limits of async components (those whose coroutine is watched for blocking its event loop) and
        # how to call any component again (a blocked loop is abandoned; what it had not finished is made again).
        self._async_limits = {c.name: c.timeout_s for c in components if c.is_async and c.timeout_s is not None}
        self._callers = {name: (call, get) for name, call, get, _ in self._plan}
        self._loop_blockers: dict[str, bounded.AbandonedCalls] = {}  # per component, its loops left blocked
        self._ranges = {c.name: c.value_range for c in components}
        self._bounds = {
            c.name: (c.value_range[0] - RANGE_TOLERANCE, c.value_range[1] + RANGE_TOLERANCE) for c in components
        }
        # The same, within ±MAX_SCORE_MAGNITUDE: a value outside them is out of range or no score at all.
        limit = MAX_SCORE_MAGNITUDE
        self._score_bounds = {name: (max(lo, -limit), min(hi, limit)) for name, (lo, hi) in self._bounds.items()}
        self._warned: set[str] = set()

    def _range_note(self, values: Mapping[str, float | None]) -> str | None:
        """What is outside its declared range among ``values`` ("name=5 outside [0, 1]", joined by "; "), or None;
        each component found so warns once per reward (:class:`OutOfRangeWarning`). The values stay as they are.
        (A value that is not finite or beyond ±1e100 is not among them: the record is an error for it.)"""
        note = None
        bounds = self._bounds
        for name, value in values.items():
            if value is not None and not bounds[name][0] <= value <= bounds[name][1] and score_problem(value) is None:
                found = self._out_of_range(name, value)
                note = found if note is None else f"{note}; {found}"
        return note

    def _out_of_range(self, name: str, value: float) -> str:
        lo, hi = self._ranges[name]
        found = f"{name}={value:g} outside [{lo:g}, {hi:g}]"
        if name not in self._warned:
            self._warned.add(name)
            warnings.warn(
                f"reward '{self.name}': component {found}, its declared range; the value is scored as it is, and "
                f"the record's metric '{OUT_OF_RANGE_METRIC}' names it (fix the component or its range)",
                OutOfRangeWarning,
                stacklevel=2,
            )
        return found

    # -- what the reward is ----------------------------------------------------------------------------

    @property
    def weights(self) -> dict[str, float]:
        return dict(self._weights)

    @property
    def component_names(self) -> list[str]:
        return [c.name for c in self.components]

    @property
    def reads(self) -> frozenset[str]:
        """The inputs its components (and diagnostics) read; ``data`` stands for "any of them"."""
        names = {name for c in self.components for name in c.inputs}
        for fn in (self.diagnostics, self.explain_error):
            if fn is not None:
                names.update(input_names(fn, "hook")[0])
        return frozenset(names)

    @property
    def has_async(self) -> bool:
        """Whether a component is async (it is awaited; a batch awaits them together)."""
        return self._any_async

    def reads_input(self, name: str) -> bool:
        reads = self.reads
        return name in reads or LEGACY_INPUT in reads

    @property
    def ranges(self) -> dict[str, tuple[float, float]]:
        return {c.name: c.value_range for c in self.components}

    @property
    def roles(self) -> dict[str, str]:
        return {c.name: c.role for c in self.components}

    @property
    def outcome_components(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.components if c.role == "outcome")

    def describe(self) -> dict[str, dict[str, Any]]:
        """``{component: {"range", "role", "weight"}}``: what travels with every manifest."""
        return {c.name: c.describe() for c in self.components}

    def code_to_execute(self, transcript: Transcript) -> str | None:
        return self.executed_code(transcript) if self.executed_code else transcript.final_code

    def _copy(self, components: tuple[Component, ...]) -> Reward:
        # of the same class: a subclass's own score_input (and whatever else it defines) stays with its copies
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new._set_components(components)
        return new

    def with_weights(self, weights: Mapping[str, float] | None) -> Reward:
        """A copy with some weights overridden; unknown names are an error, not silently ignored."""
        if weights is None:
            return self
        if not isinstance(weights, Mapping):  # a list of names or pairs was read as names, or failed on .items()
            raise TypeError(
                f"reward '{self.name}': weights must be a mapping of component name to weight, such as "
                f"{{{self.component_names[0]!r}: 0.5}}, got {type(weights).__name__} {weights!r:.200}"
            )
        if not weights:
            return self
        unknown = set(weights) - set(self.component_names)
        if unknown:
            raise ValueError(
                f"reward '{self.name}' has no component(s) {sorted(unknown, key=repr)}; known: {self.component_names}"
            )
        checked: dict[str, float] = {}
        for name, value in weights.items():
            number = bounded.real_number(value)
            if number is None or not math.isfinite(number):
                raise ValueError(f"weight for '{name}' must be a finite number, got {value!r}")
            checked[name] = number
        return self._copy(tuple(c.replace(weight=checked[c.name]) if c.name in checked else c for c in self.components))

    def with_components(self, components: Iterable[Component]) -> Reward:
        """The same reward (diagnostics, explanations; a subclass's own class) over other components."""
        made = Reward(
            self.name,
            components,
            diagnostics=self.diagnostics,
            explain_error=self.explain_error,
            needs_execution=self.needs_execution,
            executed_code=self.executed_code,
            description=self.description,
        )
        return made if type(self) is Reward else self._copy(made.components)

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, Reward):
            return NotImplemented
        return (self.name, self.components, self.diagnostics, self.explain_error) == (
            other.name,
            other.components,
            other.diagnostics,
            other.explain_error,
        )

    def __hash__(self) -> int:
        return hash((self.name, self.components))

    def __repr__(self) -> str:
        return f"Reward({self.name!r}, {[c.name for c in self.components]}, weights={self._weights})"

    # -- scoring ---------------------------------------------------------------------------------------

    def _evaluate(self, data: ScoringInput) -> tuple[dict[str, Any], tuple[str, BaseException] | None, list[Any]]:
        """Every component's value (async ones as pending coroutines), and the first that raised."""
        values: dict[str, Any] = {}
        raised: tuple[str, BaseException] | None = None
        pending: list[Any] = []
        for name, call, get, is_async in self._plan:
            try:
                value = call(get(data)) if get is not None else call(data)
                if is_async:
                    pending.append((name, value))
                    values[name] = None
                elif value.__class__ is float:  # the common case, checked first
                    values[name] = value
                else:
                    values[name] = _as_value(value)
            except _NotANumber as exc:
                values[name] = None
                if raised is None:
                    raised = (name, TypeError(str(exc)))
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # noqa: BLE001 - a user component's failure costs its sample only
                values[name] = None
                if raised is None:
                    raised = (name, exc)
        return values, raised, pending

    def _finish(
        self, data: ScoringInput, values: dict[str, float | None], raised: tuple[str, BaseException] | None
    ) -> Score:
        # ``weights`` of every Score is the reward's own dict, shared: read it, never change it.
        weights = self._weights
        metrics: dict[str, MetricValue] = {}
        if self._diagnostics is not None:
            try:
                returned = self._diagnostics(data)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # noqa: BLE001 - diagnostics are evidence, never a reason to lose a score
                metrics = {"diagnostics_error": first_line(exc)}
            else:  # they may carry the model's own values (what its answer parsed to): checked, never trusted
                metrics, problem = recordable_metrics(returned, "diagnostics")
                if problem is not None:
                    metrics["diagnostics_error"] = problem
        if (note := self._range_note(values)) is not None:
            metrics[OUT_OF_RANGE_METRIC] = note
        if raised is not None:
            return _bounded(Score(values, weights, None, metrics, raised_error(*raised)))
        aggregate: Any = 0
        for name, value in values.items():
            if value is None:
                return _bounded(Score(values, weights, None, metrics, self._none_error(data, values)))
            aggregate += weights[name] * value  # in component order, as a plain sum would
        return _bounded(Score(values, weights, aggregate, metrics, None))

    def _none_error(self, data: ScoringInput, values: dict[str, float | None]) -> ErrorInfo:
        missing = "could not compute: " + ", ".join(n for n, v in values.items() if v is None)
        if self._explain is None:
            return ErrorInfo(kind="component_unavailable", message=missing)
        try:
            error = self._explain(data)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001
            return ErrorInfo(
                kind="component_unavailable", message=f"{missing} (explain_error raised {first_line(exc)})"
            )
        if error is None:
            return ErrorInfo(kind="component_unavailable", message=missing)
        if isinstance(error, ErrorInfo):
            return _kept(error)
        # Anything else (a text, a dict, a tuple) would fail the record's validation and the batch with it: a
        # dict of ErrorInfo's fields is read as one, the rest is named.
        if isinstance(error, Mapping):
            try:
                return _kept(ErrorInfo.model_validate(dict(error)))
            except ValueError:  # pydantic's ValidationError is a ValueError
                pass
        return ErrorInfo(
            kind="component_unavailable",
            message=f"{missing} (explain_error returned {type(error).__name__}, not an ErrorInfo)",
        )

    def score_input(self, data: ScoringInput) -> Score:
        if not self._any_async:
            return self._score_sync(data)
        values, raised, pending = self._evaluate(data)
        if pending:
            self._settle(values, pending, raised_box := [raised], data)
            raised = raised_box[0]
        return self._finish(data, values, raised)

    def _score_sync(self, data: ScoringInput) -> Score:
        """:meth:`score_input` of a reward without async components, in one pass: the hot path of every
        batch (the same values, errors and aggregate as :meth:`_evaluate` then :meth:`_finish`)."""
        values: dict[str, Any] = {}
        raised: tuple[str, BaseException] | None = None
        complete = True
        aggregate: Any = 0
        weights = self._weights
        for name, call, get, _ in self._plan:
            try:
                value = call(get(data)) if get is not None else call(data)
                if value.__class__ is not float:
                    value = _as_value(value)
            except _NotANumber as exc:
                value = None
                if raised is None:
                    raised = (name, TypeError(str(exc)))
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # noqa: BLE001 - a user component's failure costs its sample only
                value = None
                if raised is None:
                    raised = (name, exc)
            values[name] = value
            if value is None:
                complete = False
            elif complete:
                aggregate += weights[name] * value  # in component order, as a plain sum would
        if not complete or self._diagnostics is not None:
            return self._finish(data, values, raised)
        note = self._range_note(values)
        return _bounded(Score(values, weights, aggregate, {} if note is None else {OUT_OF_RANGE_METRIC: note}, None))

    def score_many(self, inputs: Sequence[ScoringInput]) -> list[Score]:
        """Score a batch: the async components of every sample are awaited together (one event loop), so
        a component that calls a service (a judge) works on the whole batch at once. A subclass's own
        :meth:`score_input` scores each sample (its components are its to call)."""
        if self._own_score_input:
            return [self._own_score(data) for data in inputs]
        if not self._any_async:
            score = self._score_sync
            with paused_gc():
                return [score(data) for data in inputs]
        evaluated = [self._evaluate(data) for data in inputs]
        results = iter(
            self._await_all(
                [
                    (name, coro, data)
                    for data, (_, _, pending) in zip(inputs, evaluated, strict=True)
                    for name, coro in pending
                ]
            )
        )
        scores = []
        for data, (values, raised, pending) in zip(inputs, evaluated, strict=True):
            for name, _ in pending:
                raised = self._take(values, name, next(results), raised)
            scores.append(self._finish(data, values, raised))
        return scores

    def _own_score(self, data: ScoringInput) -> Score:
        """A subclass's own :meth:`score_input` of one sample of a batch: one that raises, or returns no Score, is
        that sample's error (``component_raised``, naming the reward), never the batch's end."""
        try:
            score = self.score_input(data)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - user code: its failure costs its sample only
            where = user_location(exc)
            problem = how_failed(exc) + (f" (at {where})" if where else "")
        else:
            if isinstance(score, Score):
                return score
            problem = f"returned {type(score).__name__}, not a Score"
        error = ErrorInfo(kind="component_raised", message=f"reward '{self.name}': score_input {problem}")
        return Score(dict.fromkeys(self._weights), self._weights, None, {}, error)

    def score_columns(self, inputs: Sequence[ScoringInput]) -> ColumnScores:
        """:meth:`score_many` by column, for trainers that want one list per component (TRL's reward
        functions): the same values, aggregates and errors, without a Score object (nor diagnostics) per
        sample. A sample that is an error has ``None`` in every column."""
        names = self.component_names
        if self._any_async or self._own_score_input:
            scores = self.score_many(inputs)
            errors: list[ErrorInfo | None] = [score.error for score in scores]
            return ColumnScores(
                names,
                [
                    [None if e is not None else sc.components[n] for sc, e in zip(scores, errors, strict=True)]
                    for n in names
                ],
                [s.aggregate for s in scores],
                errors,
            )
        plan = self._plan
        columns: list[list[Any]] = [[] for _ in plan]
        appends = [column.append for column in columns]
        bounds = self._score_bounds
        steps = tuple(zip(plan, appends, (self._weights[name] for name in names), strict=True))
        aggregates: list[Any] = []
        errors = []
        with paused_gc():
            for data in inputs:
                aggregate: Any = 0
                complete = True
                timed_out: ErrorInfo | None = None
                for (_name, call, get, _), append, weight in steps:
                    try:
                        value = call(get(data)) if get is not None else call(data)
                        if value.__class__ is not float:
                            value = _as_value(value)
                    except KeyboardInterrupt:
                        raise
                    except ComponentTimeout as exc:  # never called again: another full wait, another thread
                        complete = False
                        timed_out = raised_error(_name, exc)  # the first to raise: what score_input names
                        break
                    except BaseException:  # noqa: BLE001 - the sample is scored again below to name the error
                        complete = False
                        break
                    if value is None:
                        complete = False
                        break
                    if not bounds[_name][0] <= value <= bounds[_name][1]:  # NaN fails both comparisons
                        if score_problem(value) is not None:  # no score: scored whole below for its error
                            complete = False
                            break
                        self._out_of_range(_name, value)  # warns; a column has no metrics to carry it
                    append(value)
                    aggregate += weight * value
                if complete and not -MAX_SCORE_MAGNITUDE <= aggregate <= MAX_SCORE_MAGNITUDE:
                    complete = False  # the weighted sum overflowed: its error, as its record says, below
                if complete:
                    aggregates.append(aggregate)
                    errors.append(None)
                    continue
                # The rare path: score the sample whole for its error (which component, why), then keep the
                # columns aligned with None. A call past its time limit is that error already.
                score = self.score_input(data) if timed_out is None else None
                for column, name in zip(columns, names, strict=True):
                    del column[len(errors) :]
                    column.append(None if score is None or score.error is not None else score.components[name])
                aggregates.append(score.aggregate if score is not None and score.error is None else None)
                errors.append(timed_out if score is None else score.error)
        return ColumnScores(names, columns, aggregates, errors)

    def _settle(self, values: dict[str, Any], pending: list[Any], raised_box: list[Any], data: ScoringInput) -> None:
        results = self._await_all([(name, coro, data) for name, coro in pending])
        for (name, _), result in zip(pending, results, strict=True):
            raised_box[0] = self._take(values, name, result, raised_box[0])

    def _await_all(self, calls: list[tuple[str, Any, ScoringInput]]) -> list[Any]:
        """The results of async components' coroutines (``(name, coroutine, sample)``), awaited together. Where
        a component has a ``timeout_s``, a call of it that blocks the event loop past it (a blocking call inside
        ``async def``) is its sample's ``component_timeout`` and the others go on, on a loop of their own: the
        blocked loop is abandoned, never waited for."""
        if not any(name in self._async_limits for name, _, _ in calls):
            return run_coroutines([coro for _, coro, _ in calls])
        from rewardpipe.bounded import LoopBlocked, run_watched

        results: list[Any] = [None] * len(calls)
        watched: list[int] = []
        for index, (name, coro, _) in enumerate(calls):
            blockers = self._loop_blockers.get(name)
            refused = blockers.refused() if blockers is not None else 0
            if refused:  # blocks on every input: not called again
                coro.close()
                results[index] = ComponentTimeout(name, self._async_limits[name], refused)
                continue
            watched.append(index)

        def remake(position: int) -> Any:
            name, _, data = calls[watched[position]]
            call, get = self._callers[name]
            try:
                return call(get(data)) if get is not None else call(data)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # noqa: BLE001 - made once already; a failure now is that call's result
                return _raise(exc)

        outcomes = run_watched(
            [calls[index][1] for index in watched],
            [self._async_limits.get(calls[index][0]) for index in watched],
            remake,
        )
        for index, outcome in zip(watched, outcomes, strict=True):
            name = calls[index][0]
            if isinstance(outcome, LoopBlocked):
                if outcome.thread is not None:
                    abandoned = bounded.AbandonedCalls("rewardpipe-async-components")
                    self._loop_blockers.setdefault(name, abandoned).abandon(outcome.thread)
                outcome = ComponentTimeout(name, outcome.limit_s)
            results[index] = outcome
        return results

    @staticmethod
    def _take(
        values: dict[str, Any], name: str, result: Any, raised: tuple[str, BaseException] | None
    ) -> tuple[str, BaseException] | None:
        if isinstance(result, BaseException):
            values[name] = None
            return raised or (name, result)
        try:
            values[name] = _as_value(result)
        except _NotANumber as exc:
            values[name] = None
            return raised or (name, TypeError(str(exc)))
        return raised

    def score(
        self,
        messages: Sequence[Message],
        execution: ExecutionResult | None = None,
        reference: Any = None,
        *,
        task: Any = None,
        state: Any = None,
    ) -> Score:
        """Score one conversation. ``messages``: :class:`Message` objects or dicts of their fields (OpenAI's
        ``{"role": ..., "content": ...}``); anything else is a ValueError naming the message."""
        return self.score_input(
            ScoringInput(execution=execution, reference=reference, messages=_messages(messages), task=task, state=state)
        )
