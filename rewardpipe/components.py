"""Reward components: small functions that say which inputs they read by their parameter names.

::

    from rewardpipe import component

    @component(range=(0.0, 1.0), role="outcome")
    def answer_matches(completion, reference) -> float | None:
        ...

A component's parameters pick its inputs from a closed vocabulary (:data:`INPUTS`); a name outside it is an
error when the function is decorated (so at import of the user's module), naming the parameter: a typo
(``complection``) never silently receives nothing. A function whose only parameter is ``data`` receives the
whole :class:`rewardpipe.rewards.base.ScoringInput` (the form rewardpipe's first rewards were written in).

Which inputs a component reads is worked out once, when it is decorated, and the scorer builds an input
only when some component asks for it: a reward whose components read ``completion`` never parses a
transcript. A component returns a float within its declared ``range``, or ``None`` when it cannot compute
for a reason that is not the model's (the tests did not run, the reference is unreadable). An exception is
caught by the scorer and recorded as an error (``component_raised``), never as a 0.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from operator import attrgetter
from typing import Any

from rewardpipe import bounded

#: The inputs a component can ask for, by parameter name, and what each one is.
INPUTS: dict[str, str] = {
    "completion": "the text of the last assistant message ('' when there is none)",
    "messages": "the conversation: a list of rewardpipe.Message (tool_calls, tool_call_id and name included)",
    "transcript": "a parsed view of the conversation (rewardpipe.Transcript: assistant texts, turn kinds, code)",
    "task": "the environment's task row, hidden fields included (None for a single-turn sample without one)",
    "state": "the episode's final state (None when a sample is scored without an environment)",
    "execution": "the sandbox's rewardpipe.ExecutionResult (None when nothing was executed)",
    "reference": "a single-turn sample's reference answer (None in a multi-turn episode)",
}
#: The one parameter name that receives the whole ScoringInput instead of one input.
LEGACY_INPUT = "data"
ROLES = ("outcome", "shaping", "penalty")
#: Names the monitor uses for targets of its own; a component cannot take them.
RESERVED_NAMES = frozenset({"aggregate", "errors"})
# A component's name is a record key, a metric name (rewardpipe/<name>/...) and a TRL reward function's name.
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


class ComponentDefinitionError(TypeError):
    """A component is declared wrongly (an unknown input, a bad range or role); raised at decoration."""


class ComponentUnavailable(Exception):
    """Raised by a component that cannot compute for a reason that is not the model's, to say why: the same as
    returning ``None`` (the sample becomes a ``component_unavailable`` error record, never a 0), with the reason
    in the record's message instead of just the component's name (the LLM judge raises it when its endpoint
    failed or its answer could not be read)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ComponentTimeout(Exception):
    """A component with a ``timeout_s`` did not return in time: its sample is a ``component_timeout`` error
    record (never a 0) and the batch goes on without waiting for it."""

    def __init__(self, name: str, timeout_s: float, still_running: int = 0) -> None:
        message = f"component '{name}' did not finish within {timeout_s:g} s"
        if still_running:
            message = f"component '{name}' not called: {still_running} earlier calls still running past {timeout_s:g} s"
        super().__init__(message)
        self.timeout_s = timeout_s
        self.still_running = still_running


#: How many of one component's calls past their ``timeout_s`` may still be running (each holds a thread): beyond
#: it the next call is not started, and its sample is a ``component_timeout`` at once. Read when a component is
#: defined.
MAX_ABANDONED_CALLS = bounded.MAX_ABANDONED_CALLS


def check_timeout(timeout_s: Any, name: str) -> float | None:
    problem = bounded.limit_problem(timeout_s, "timeout_s")
    if problem:
        raise ComponentDefinitionError(f"component '{name}': {problem}")
    return bounded.real_number(timeout_s)


def with_timeout(call: Callable[..., Any], name: str, timeout_s: float, is_async: bool) -> Callable[..., Any]:
    """``call`` (a component's function) bounded by ``timeout_s``, called with the same arguments: an async
    component's coroutine is awaited under ``asyncio.timeout`` (cancelled at the deadline); a plain one runs in a
    daemon thread of its own, in a copy of the caller's context (its context variables), and a call still running
    at the deadline is abandoned (Python cannot stop a thread): it raises :class:`ComponentTimeout` for the sample
    while the call goes on in the background until it returns or the process ends. The scorer takes the inputs
    from the sample in its own thread before the call, so an abandoned call never builds them. Called within a
    deadline of the main thread (:func:`rewardpipe.bounded.main_thread_deadline`: the reward Lambda's batch), a plain
    one is stopped in place instead, as that deadline is, so a call stuck in one C call is stopped too."""
    if is_async:
        import asyncio

        async def bounded_coroutine(*args: Any, **kwargs: Any) -> Any:
            loop = asyncio.get_running_loop()
            started = loop.time()
            limit = asyncio.timeout(timeout_s)
            try:
                async with limit:
                    value = await call(*args, **kwargs)
            except TimeoutError:
                if limit.expired():  # ours; a TimeoutError of the component's own (an HTTP timeout) is its error
                    raise ComponentTimeout(name, timeout_s) from None
                raise
            # A call that blocked the event loop (time.sleep, a synchronous HTTP call inside ``async def``) is
            # never cancelled: the loop cannot run the deadline while it is held. Past its limit all the same,
            # its value is not taken (the calls it held waiting were cancelled at theirs).
            if loop.time() - started > timeout_s:
                raise ComponentTimeout(name, timeout_s)
            return value

        return bounded_coroutine

    calls = bounded.AbandonedCalls(f"rewardpipe-component-{name}", MAX_ABANDONED_CALLS)

    def timed_out(still_running: int) -> ComponentTimeout:
        return ComponentTimeout(name, timeout_s, still_running)

    def bounded_call(*args: Any, **kwargs: Any) -> Any:
        if bounded.main_thread_deadline() is not None:
            # Within a deadline of the main thread (the reward Lambda's batch): stopped in place like it. In a thread
            # of its own, a call stuck in one C call (a regex backtracking) held the interpreter lock from the main
            # thread too, and neither this limit nor the batch's could stop it.
            return bounded.call_on_main_thread_until(lambda: call(*args, **kwargs), (), timeout_s, timed_out)
        return calls.call(call, args, kwargs, timeout_s, timed_out)

    return bounded_call


def _where(fn: Any) -> str:
    code = getattr(inspect.unwrap(fn), "__code__", None) if callable(fn) else None
    return f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""


def check_name(name: Any, what: str = "component") -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):  # fullmatch: "$" also matches before a final "\n"
        raise ComponentDefinitionError(
            f"{what} name {name!r} must start with a letter or '_' and hold at most 64 letters, digits, '_', "
            f"'.' or '-' (it becomes a record key and a metric name)"
        )
    if name in RESERVED_NAMES:
        raise ComponentDefinitionError(f"{what} name {name!r} is reserved for the monitor's own targets")
    return name


def _two_numbers(value_range: Any) -> tuple[float, float] | None:
    """``(lo, hi)`` as floats when ``value_range`` is an ordered pair of real numbers, else None. Real numbers only,
    as for a weight: ``float()`` took ``"0"`` and ``True``, so ``range=("0", "1")`` or ``(False, True)`` was silently
    read as ``(0.0, 1.0)``; a set or a mapping has no order to read lo and hi from."""
    if isinstance(value_range, (str, bytes, AbstractSet, Mapping)):
        return None
    try:
        lo, hi = value_range
    except (TypeError, ValueError):
        return None
    low, high = bounded.real_number(lo), bounded.real_number(hi)
    return None if low is None or high is None else (low, high)


def check_range(value_range: Any, name: str) -> tuple[float, float]:
    bounds = _two_numbers(value_range)
    if bounds is None:
        raise ComponentDefinitionError(f"component '{name}': range must be two numbers (lo, hi), got {value_range!r}")
    lo, hi = bounds
    if not (math.isfinite(lo) and math.isfinite(hi)) or not lo < hi:
        raise ComponentDefinitionError(
            f"component '{name}': range must be two finite numbers with lo < hi, got {value_range!r}"
        )
    return lo, hi


def check_returns_a_value(fn: Any, name: str) -> None:
    """Refuse, when the component is defined, a function that cannot return a value: a generator function (sync or
    async) hands back a generator, so every sample it scored was a ``component_raised`` error record; a component
    given to ``@component`` again has no parameters of its own to read inputs by."""
    if isinstance(fn, Component):
        raise ComponentDefinitionError(
            f"component '{name}': {fn.name!r} is already a component; decorate the function once (use "
            f".replace(...) to change its settings)"
        )
    target = inspect.unwrap(fn)
    if inspect.isgeneratorfunction(target) or inspect.isasyncgenfunction(target):
        kind = "an async generator" if inspect.isasyncgenfunction(target) else "a generator"
        raise ComponentDefinitionError(
            f"component '{name}'{_where(fn)}: {getattr(target, '__name__', repr(target))} is {kind} function "
            f"(it uses yield): a component returns one number (or None), so return the value instead of yielding it"
        )


def check_weight(weight: Any, name: str) -> float:
    number = bounded.real_number(weight)
    if number is None or not math.isfinite(number):
        raise ComponentDefinitionError(f"component '{name}': weight must be a finite number, got {weight!r}")
    return number


def input_names(fn: Callable[..., Any], what: str) -> tuple[tuple[str, ...], bool]:
    """``(inputs, positional)``: the inputs ``fn`` reads, by parameter name, and whether they can all be
    passed positionally in that order. ComponentDefinitionError names a parameter outside :data:`INPUTS`."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        raise ComponentDefinitionError(f"{what}{_where(fn)}: cannot read its parameters") from None
    params = list(signature.parameters.values())
    if len(params) == 1 and params[0].name == LEGACY_INPUT:
        return (LEGACY_INPUT,), params[0].kind is not inspect.Parameter.KEYWORD_ONLY
    known = ", ".join(INPUTS)
    names = []
    for param in params:
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise ComponentDefinitionError(
                f"{what}{_where(fn)}: parameter '{param.name}' takes any number of values; name each input it "
                f"reads instead ({known})"
            )
        if param.name not in INPUTS:
            raise ComponentDefinitionError(
                f"{what}{_where(fn)}: parameter '{param.name}' is not an input; a component's parameters are "
                f"chosen from: {known} (or a single parameter 'data', which receives the whole ScoringInput)"
            )
        names.append(param.name)
    positional = all(p.kind is not inspect.Parameter.KEYWORD_ONLY for p in params)
    return tuple(names), positional


def leading_positional(fn: Callable[..., Any]) -> int:
    """How many of ``fn``'s parameters come before its keyword-only ones (positional-only ones among them): what a
    caller passes by position when some are keyword-only (0 when its signature cannot be read)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 0
    return sum(1 for p in params if p.kind is not inspect.Parameter.KEYWORD_ONLY)


def is_async_callable(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004 - is the __call__ method async; not a callable() test


def make_caller(
    fn: Callable[..., Any], inputs: tuple[str, ...], positional: bool, leading: int = 0
) -> Callable[[Any], Any]:
    """``call(data)`` that hands ``fn`` the inputs it asked for from a ScoringInput, decided once here
    (the scorer calls it for every sample: no signature is read, no dict is built per call). When some are
    keyword-only (``positional`` False), the first ``leading`` (:func:`leading_positional`) are passed by position:
    a positional-only one passed by keyword failed every sample it scored."""
    if inputs == (LEGACY_INPUT,):
        return fn if positional else (lambda data: fn(data=data))
    if not inputs:
        return lambda data: fn()  # noqa: ARG005 - every compiled component is called with the sample's data
    if not positional:
        getters = tuple((name, attrgetter(name)) for name in inputs[leading:])
        if leading:
            head = tuple(attrgetter(name) for name in inputs[:leading])
            return lambda data: fn(*[get(data) for get in head], **{name: get(data) for name, get in getters})
        return lambda data: fn(**{name: get(data) for name, get in getters})
    if len(inputs) == 1:
        get = attrgetter(inputs[0])
        return lambda data: fn(get(data))
    get_all = attrgetter(*inputs)
    return lambda data: fn(*get_all(data))


#: ``Component``'s parameters, in order: what makes one component equal to another.
SETTINGS = ("name", "weight", "fn", "description", "value_range", "role", "timeout_s")


class Component:
    """One named, weighted term of a reward, with its value range and role.

    ``Component(name, weight, fn, description="", value_range=(0.0, 1.0), role=None)``; the
    :func:`component` decorator is the usual way to make one. Calling a component calls its function, so
    a decorated function stays directly testable (``answer_matches(completion="...", reference=1)``).

    ``role`` is ``outcome``, ``shaping`` or ``penalty``; left out (rewardpipe's own early components), a
    range whose maximum is 0 and minimum negative makes a ``penalty``, anything else ``shaping``.
    """

    __slots__ = (
        "_call",
        "_positional",
        "description",
        "fn",
        "inputs",
        "is_async",
        "name",
        "role",
        "single_input",
        "timeout_s",
        "value_range",
        "weight",
    )
    # The slots' types (set once, through object.__setattr__, in __init__).
    name: str
    weight: float
    fn: Callable[..., Any]
    description: str
    value_range: tuple[float, float]
    role: str
    inputs: tuple[str, ...]
    is_async: bool
    single_input: bool
    timeout_s: float | None
    _call: Callable[[Any], Any]
    _positional: bool

    def __init__(
        self,
        name: str,
        weight: float,
        fn: Callable[..., Any],
        description: str = "",
        value_range: tuple[float, float] = (0.0, 1.0),
        role: str | None = None,
        timeout_s: float | None = None,
    ) -> None:
        name = check_name(name)
        timeout_s = check_timeout(timeout_s, name)
        if not callable(fn):
            raise ComponentDefinitionError(f"component '{name}': {fn!r} is not a function")
        check_returns_a_value(fn, name)
        value_range = check_range(value_range, name)
        if role is None:
            role = "penalty" if value_range[1] == 0.0 and value_range[0] < 0.0 else "shaping"
        if role not in ROLES:
            raise ComponentDefinitionError(f"component '{name}': role must be one of {', '.join(ROLES)}, got {role!r}")
        inputs, positional = input_names(fn, f"component '{name}'")
        asynchronous = is_async_callable(fn)
        # the limit bounds the function, not the caller: the inputs are taken in the scorer's thread
        bounded = fn if timeout_s is None else with_timeout(fn, name, timeout_s, asynchronous)
        caller = make_caller(bounded, inputs, positional, leading_positional(fn))
        for slot, value in (
            ("name", name),
            ("weight", check_weight(weight, name)),
            ("fn", fn),
            ("description", description or ""),
            ("value_range", value_range),
            ("role", role),
            ("inputs", inputs),
            ("is_async", asynchronous),
            ("_call", caller),
            ("_positional", positional),
            # one input, passed positionally, no time limit: the scorer calls fn with it directly
            ("single_input", len(inputs) == 1 and positional and inputs != (LEGACY_INPUT,) and timeout_s is None),
            ("timeout_s", timeout_s),
        ):
            object.__setattr__(self, slot, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a Component is immutable; use .replace({name}=...)")

    @property
    def range(self) -> tuple[float, float]:
        return self.value_range

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def evaluate(self, data: Any) -> Any:
        """The component's value for one ScoringInput (a coroutine for an async component)."""
        return self._call(data)

    def _settings(self) -> tuple[Any, ...]:
        """What the component was made with, in the order of :data:`SETTINGS` (``Component``'s parameters):
        what equality compares, ``replace`` starts from and a copy is made of."""
        return (self.name, self.weight, self.fn, self.description, self.value_range, self.role, self.timeout_s)

    def replace(self, **changes: Any) -> Component:
        fields: dict[str, Any] = dict(zip(SETTINGS, self._settings(), strict=True))
        unknown = set(changes) - set(fields)
        if unknown:
            raise TypeError(f"Component has no field(s) {sorted(unknown)}")
        fields.update(changes)
        return Component(**fields)

    def describe(self) -> dict[str, Any]:
        """What travels with every manifest: the range, the role and the weight (and the time limit, if any)."""
        described: dict[str, Any] = {"range": list(self.value_range), "role": self.role, "weight": self.weight}
        if self.timeout_s is not None:
            described["timeout_s"] = self.timeout_s
        return described

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, Component):
            return NotImplemented
        return self._settings() == other._settings()

    def __hash__(self) -> int:
        return hash((self.name, self.weight, id(self.fn), self.value_range, self.role))

    def __repr__(self) -> str:
        limit = "" if self.timeout_s is None else f", timeout_s={self.timeout_s:g}"
        return (
            f"Component({self.name!r}, weight={self.weight:g}, range={self.value_range}, role={self.role!r}, "
            f"inputs={self.inputs}{limit})"
        )

    def __reduce__(self) -> Any:  # picklable whenever its function is (multiprocessing, deepcopy)
        return (Component, self._settings())


def component(
    fn: Callable[..., Any] | None = None,
    *,
    range: Iterable[float] | None = None,
    role: str | None = None,
    weight: float = 1.0,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
) -> Any:
    """Declare a reward component: ``@component(range=(lo, hi), role="outcome"|"shaping"|"penalty",
    weight=1.0, name=None)`` on a plain function, sync or async. ``name`` defaults to the function's name,
    ``description`` to the first line of its docstring. Returns a :class:`Component` (still callable).

    ``timeout_s`` bounds each scoring call: a call that has not returned by then makes its sample a
    ``component_timeout`` error record and scoring goes on (see :func:`with_timeout`); calling the component
    yourself is never bounded."""

    def decorate(function: Callable[..., Any]) -> Component:
        if isinstance(function, Component):  # it has no __name__: say what it is, not that it needs a name
            check_returns_a_value(function, function.name)
        label = name if name is not None else getattr(function, "__name__", None)
        if label is None or label == "<lambda>":
            raise ComponentDefinitionError(
                f"{function!r}{_where(function)}: give the component a name= (a lambda has none of its own)"
            )
        if range is None or role is None:
            missing = " and ".join(n for n, v in (("range=(lo, hi)", range), ("role=", role)) if v is None)
            raise ComponentDefinitionError(
                f"component '{label}'{_where(function)}: {missing} must be given: the monitor judges a component "
                f"by its range and role (role is one of {', '.join(ROLES)})"
            )
        if role not in ROLES:
            raise ComponentDefinitionError(
                f"component '{label}'{_where(function)}: role must be one of {', '.join(ROLES)}, got {role!r}"
            )
        doc = description if description is not None else (inspect.getdoc(function) or "").strip().split("\n")[0]
        return Component(label, weight, function, doc, range, role, timeout_s)  # type: ignore[arg-type]

    if fn is not None:
        if range is None and role is None and callable(fn):
            return decorate(fn)  # bare @component: the error names what is missing
        raise TypeError("component() takes its settings as keywords: @component(range=(lo, hi), role=...)")
    return decorate
