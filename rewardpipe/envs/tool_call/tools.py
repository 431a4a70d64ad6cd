"""Tools as typed plain functions: ``(world, **arguments) -> (result, new_world)``.

::

    @tool
    def transfer(world: dict, source: str, target: str, amount_cents: Annotated[int, Field(gt=0)]):
        \"\"\"Move money between two accounts.

        Args:
            source: the account the money leaves.
            target: the account it goes to.
            amount_cents: how much, in cents.
        \"\"\"
        ...
        return {"balance_cents": ...}, new_world

The first parameter receives the world (a JSON object; the tool gets its own copy, so changing it in place
changes nothing); every other parameter is an argument the model gives, and must carry a type hint. From
the hints (``typing.Annotated`` constraints included) and the docstring (its first paragraph describes the
tool, its ``Args:`` section each argument), :func:`tool` builds the pydantic model that validates the
arguments and the JSON schema an OpenAI-compatible endpoint is sent (``tools=[...]``).

The model's arguments are hostile. They are validated **strictly** against the schema (``"5"`` is not an
integer, an unknown argument is an error), bounded in size before they are parsed (an object given as one,
by its compact JSON text; ``NaN``, ``Infinity`` and numbers beyond a float are not JSON), and never evaluated:
nothing but the tool's own code runs. A tool is trusted code, but an exception it raises (an unknown account,
insufficient funds) is an answer the model reads (``{"error": "..."}``), never a crash of the rollout.
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

#: The longest arguments text (a JSON object) parsed; longer is an invalid call.
MAX_ARGUMENT_CHARS = 8192
#: The longest tool-result text a tool message carries (longer is cut, and says so).
MAX_RESULT_CHARS = 4000
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")


class ToolDefinitionError(TypeError):
    """A tool function cannot be described (a parameter without a type hint, ``*args``, a bad name)."""


def _docstring_parts(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """``(description, {argument: description})`` from a Google-style docstring."""
    doc = inspect.getdoc(fn) or ""
    paragraphs = doc.split("\n\n")
    description = " ".join(paragraphs[0].split()) if paragraphs and not paragraphs[0].startswith("Args:") else ""
    arguments: dict[str, str] = {}
    lines = doc.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() in ("Args:", "Arguments:"))
    except StopIteration:
        return description, arguments
    current = None
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        match = re.match(r"^\s+(\w+)(?:\s*\([^)]*\))?\s*:\s*(.*)$", line)
        if match and (current is None or len(line) - len(line.lstrip()) <= 4):
            current = match.group(1)
            arguments[current] = match.group(2).strip()
        elif current is not None:
            arguments[current] = f"{arguments[current]} {line.strip()}".strip()
    return description, arguments


def _without_titles(schema: Any) -> Any:
    """The schema without pydantic's ``title`` keys (noise in a prompt); property names are kept."""
    if isinstance(schema, dict):
        return {
            key: (
                _without_titles(value)
                if key != "properties"
                else {name: _without_titles(sub) for name, sub in value.items()}
            )
            for key, value in schema.items()
            if key != "title"
        }
    if isinstance(schema, list):
        return [_without_titles(item) for item in schema]
    return schema


@dataclass(frozen=True)
class Tool:
    """A tool: its ``name``, ``description``, the function, the model validating its arguments and the
    OpenAI-style schema (``{"type": "function", "function": {"name", "description", "parameters"}}``)."""

    name: str
    description: str
    fn: Callable[..., Any]
    arguments_model: type[BaseModel]

    @property
    def parameters(self) -> dict[str, Any]:
        return _without_titles(self.arguments_model.model_json_schema())

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def validate(self, arguments: Any) -> dict[str, Any]:
        """The arguments, checked strictly against the schema (ValidationError naming what is wrong)."""
        validated = self.arguments_model.model_validate(arguments, strict=True)
        return {name: getattr(validated, name) for name in type(validated).model_fields}

    def __call__(self, world: Any, **arguments: Any) -> Any:
        return self.fn(world, **arguments)


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None) -> Any:
    """Describe a typed plain function as a :class:`Tool` (see the module docstring); ``@tool`` or
    ``@tool(name="...")``."""

    def make(function: Callable[..., Any]) -> Tool:
        tool_name = name or function.__name__
        if not _NAME.fullmatch(tool_name):  # fullmatch: "$" also matches before a final "\n"
            raise ToolDefinitionError(f"tool name {tool_name!r} must be letters, digits, '_' or '-' (at most 64)")
        parameters = list(inspect.signature(function).parameters.values())
        if not parameters:
            raise ToolDefinitionError(f"tool '{tool_name}': its first parameter receives the world")
        hints = typing.get_type_hints(function, include_extras=True)
        description, documented = _docstring_parts(function)
        fields: dict[str, Any] = {}
        for parameter in parameters[1:]:
            if parameter.kind not in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
                raise ToolDefinitionError(
                    f"tool '{tool_name}': parameter '{parameter.name}' must be a plain "
                    f"named parameter (no *args, **kwargs or positional-only)"
                )
            if parameter.name not in hints:
                raise ToolDefinitionError(
                    f"tool '{tool_name}': parameter '{parameter.name}' needs a type hint "
                    f"(it becomes the argument's JSON schema)"
                )
            default = ... if parameter.default is parameter.empty else parameter.default
            fields[parameter.name] = (hints[parameter.name], Field(default, description=documented.get(parameter.name)))
        model = create_model(f"{tool_name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
        return Tool(tool_name, description or tool_name, function, model)

    return make(fn) if fn is not None else make


@dataclass(frozen=True)
class CallOutcome:
    """What one call did: ``status`` is ``ok``, ``tool_error`` (the tool raised: the call was valid) or
    ``invalid`` (unknown tool, arguments that are not a JSON object or do not type-check); ``content`` is the
    tool message's text; ``world`` the world after it (the same object when the call changed nothing);
    ``arguments`` the validated arguments (None for an invalid call)."""

    status: str
    content: str
    world: dict[str, Any]
    arguments: dict[str, Any] | None = None

    @property
    def valid(self) -> bool:
        return self.status != "invalid"


def _short(text: object, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "..."


def _message(payload: Mapping[str, Any]) -> str:
    text = json.dumps(payload, ensure_ascii=False, sort_keys=True)
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + f"... [cut: the result is {len(text)} characters]"
    return text


def _validation_problem(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors()[:3]:
        where = ".".join(str(part) for part in error.get("loc", ())) or "arguments"
        problems.append(f"{where}: {error.get('msg', 'invalid')}")
    more = f" (and {exc.error_count() - 3} more)" if exc.error_count() > 3 else ""
    return "; ".join(problems) + more


def _copy_world(world: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(world))


class Toolset:
    """The tools an environment offers, by name."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        self.tools: dict[str, Tool] = {}
        for item in tools:
            if not isinstance(item, Tool):
                raise ToolDefinitionError(f"{item!r} is not a tool: decorate it with @tool")
            if item.name in self.tools:
                raise ToolDefinitionError(f"two tools are named '{item.name}'")
            self.tools[item.name] = item

    def schemas(self) -> list[dict[str, Any]]:
        return [item.schema() for item in self.tools.values()]

    def call(self, name: Any, arguments: Any, world: dict[str, Any]) -> CallOutcome:
        """Validate and run one call; every failure is an outcome, never an exception (the tool's
        returning something that is not ``(JSON result, JSON object world)`` is the tool author's bug,
        and raises)."""
        item = self.tools.get(name) if isinstance(name, str) else None
        if item is None:
            known = ", ".join(self.tools)
            shown = _short(name, 80) if isinstance(name, str) else type(name).__name__
            return CallOutcome("invalid", _message({"error": f"unknown tool {shown!r}; the tools are {known}"}), world)
        if isinstance(arguments, str):
            if len(arguments) > MAX_ARGUMENT_CHARS:
                return CallOutcome(
                    "invalid",
                    _message({"error": f"arguments of {len(arguments)} characters; at most {MAX_ARGUMENT_CHARS}"}),
                    world,
                )
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except (ValueError, RecursionError) as exc:
                return CallOutcome("invalid", _message({"error": f"arguments are not JSON: {_short(exc, 120)}"}), world)
        if isinstance(arguments, dict):
            # Arguments given as an object (a structured call may carry one, a recorded transcript too) are
            # bounded as the text is, by their compact JSON text: unbounded, a 5 MB argument was validated,
            # handed to the tool and written again into the call's log key. And they are JSON, parsed or given:
            # Python reads NaN, Infinity and 1e999 where JSON has no such number; a float argument took them
            # into the world, which a state written as JSON (a deployment's turns, the record) carries as null.
            try:
                size = len(json.dumps(arguments, ensure_ascii=False, separators=(",", ":"), allow_nan=False))
            except (TypeError, ValueError, RecursionError) as exc:
                return CallOutcome("invalid", _message({"error": f"arguments are not JSON: {_short(exc, 120)}"}), world)
            if size > MAX_ARGUMENT_CHARS:
                return CallOutcome(
                    "invalid",
                    _message({"error": f"arguments of {size} characters as JSON; at most {MAX_ARGUMENT_CHARS}"}),
                    world,
                )
        if not isinstance(arguments, dict):
            return CallOutcome(
                "invalid",
                _message({"error": f"arguments must be a JSON object, got {type(arguments).__name__}"}),
                world,
            )
        try:
            validated = item.validate(arguments)
        except ValidationError as exc:
            return CallOutcome(
                "invalid",
                _message({"error": f"arguments do not match {item.name}'s schema: {_validation_problem(exc)}"}),
                world,
            )
        try:
            returned = item.fn(_copy_world(world), **validated)
        except Exception as exc:  # noqa: BLE001 - the tool's refusal is an answer the model reads
            return CallOutcome(
                "tool_error", _message({"error": _short(f"{type(exc).__name__}: {exc}")}), world, validated
            )
        if not (isinstance(returned, tuple) and len(returned) == 2 and isinstance(returned[1], dict)):
            raise ToolDefinitionError(
                f"tool '{item.name}' must return (result, new_world), the world a JSON "
                f"object; it returned {type(returned).__name__}"
            )
        result, new_world = returned
        try:
            content = _message({"result": result})
            json.dumps(new_world)
        except (TypeError, ValueError) as exc:
            raise ToolDefinitionError(f"tool '{item.name}' returned something that is not JSON: {exc}") from None
        return CallOutcome("ok", content, world if new_world == world else new_world, validated)
