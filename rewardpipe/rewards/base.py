"""The reward abstraction: a weighted sum of small, pure, named components.

A component returns a float, or ``None`` when it cannot be computed for infrastructure reasons (the tests
could not run, the reference answer is unreadable). ``None`` is never folded into 0: the whole score becomes
an error so the monitor and the trainer can leave the sample out instead of learning from a fake zero.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from rewardpipe.execution.result import ExecutionResult
from rewardpipe.models import ErrorInfo, Message, MetricValue
from rewardpipe.parsing import ParsedTurn, TurnKind, parse_turn


@dataclass(frozen=True)
class Transcript:
    """A parsed view of a conversation, built once and shared by every component."""

    messages: tuple[Message, ...]
    assistant_turns: tuple[ParsedTurn, ...]
    assistant_texts: tuple[str, ...]

    @classmethod
    def from_messages(cls, messages: Sequence[Message]) -> "Transcript":
        texts = tuple(m.content for m in messages if m.role == "assistant")
        return cls(tuple(messages), tuple(parse_turn(t) for t in texts), texts)

    @property
    def kinds(self) -> list[TurnKind]:
        return [turn.kind for turn in self.assistant_turns]

    def final_commit_index(self) -> int | None:
        """Index (among assistant turns) of the last committing turn: its code is what gets executed."""
        for index in range(len(self.assistant_turns) - 1, -1, -1):
            if self.assistant_turns[index].kind is TurnKind.COMMIT:
                return index
        return None

    @property
    def final_code(self) -> str | None:
        index = self.final_commit_index()
        return None if index is None else self.assistant_turns[index].code


@dataclass(frozen=True)
class ScoringInput:
    transcript: Transcript
    execution: ExecutionResult | None = None
    reference: Any = None
    # Assistant turns (0-based, among assistant turns) the user answered with a newly revealed spec item: the
    # simulator's bookkeeping. None when the scorer never saw the simulator; components that need it then
    # fall back to judging the question's own words (rewardpipe.questions).
    answered_turns: frozenset[int] | None = None


ComponentFn = Callable[[ScoringInput], "float | None"]


@dataclass(frozen=True)
class Component:
    name: str
    weight: float
    fn: ComponentFn
    description: str = ""
    # The values the component can take, used by the monitor's "constant at min/max" causes and by doctor.
    value_range: tuple[float, float] = (0.0, 1.0)


@dataclass
class Score:
    components: dict[str, float | None]
    weights: dict[str, float]
    aggregate: float | None
    metrics: dict[str, MetricValue] = field(default_factory=dict)
    error: ErrorInfo | None = None


DiagnosticsFn = Callable[[ScoringInput], dict[str, MetricValue]]
ErrorFn = Callable[[ScoringInput], "ErrorInfo | None"]


@dataclass(frozen=True)
class Reward:
    name: str
    components: tuple[Component, ...]
    diagnostics: DiagnosticsFn | None = None
    # Explains *why* a component came back None (e.g. the executor's reason); defaults to a generic message.
    explain_error: ErrorFn | None = None
    needs_execution: bool = False
    # Which code of a transcript gets executed; default: the last committing turn's (multi-turn semantics).
    executed_code: Callable[[Transcript], "str | None"] | None = None

    def code_to_execute(self, transcript: Transcript) -> str | None:
        return self.executed_code(transcript) if self.executed_code else transcript.final_code

    @property
    def weights(self) -> dict[str, float]:
        return {c.name: c.weight for c in self.components}

    @property
    def component_names(self) -> list[str]:
        return [c.name for c in self.components]

    def with_weights(self, weights: Mapping[str, float] | None) -> "Reward":
        """A copy with some weights overridden; unknown names are an error, not silently ignored."""
        if not weights:
            return self
        unknown = set(weights) - set(self.component_names)
        if unknown:
            raise ValueError(
                f"reward '{self.name}' has no component(s) {sorted(unknown)}; known: {self.component_names}"
            )
        for name, value in weights.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"weight for '{name}' must be a finite number, got {value!r}")
        comps = tuple(
            Component(c.name, float(weights.get(c.name, c.weight)), c.fn, c.description, c.value_range)
            for c in self.components
        )
        return dataclasses.replace(self, components=comps)

    def score_input(self, data: ScoringInput) -> Score:
        values: dict[str, float | None] = {}
        for component in self.components:
            value = component.fn(data)
            values[component.name] = None if value is None else float(value)
        metrics = dict(self.diagnostics(data)) if self.diagnostics else {}
        if any(v is None for v in values.values()):
            error = (self.explain_error(data) if self.explain_error else None) or ErrorInfo(
                kind="component_unavailable",
                message="could not compute: " + ", ".join(n for n, v in values.items() if v is None),
            )
            return Score(values, self.weights, None, metrics, error)
        aggregate = sum(self.weights[name] * value for name, value in values.items())  # type: ignore[operator]
        return Score(values, self.weights, aggregate, metrics, None)

    def score(
        self,
        messages: Sequence[Message],
        execution: ExecutionResult | None = None,
        reference: Any = None,
        answered_turns: "frozenset[int] | None" = None,
    ) -> Score:
        return self.score_input(ScoringInput(Transcript.from_messages(messages), execution, reference, answered_turns))
