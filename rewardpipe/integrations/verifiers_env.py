"""A classic verifiers environment as a rewardpipe :class:`~rewardpipe.Environment`: ``from_verifiers``.

::

    from rewardpipe.integrations.verifiers import from_verifiers

    ENVIRONMENT = from_verifiers("my_vf_env:load_environment", env_args={"difficulty": "easy"},
                                 ranges={"correct_answer": (0, 1), "format_reward": (0, 1)})

then ``rewardpipe run --env mypkg.envs:ENVIRONMENT ...``, ``rewardpipe doctor --env ...``, or TRL's
``EpisodeRollout(tasks, env=ENVIRONMENT)``. Supported: verifiers ``>=0.2,<0.4`` with the classic API
(``vf.MultiTurnEnv`` / ``vf.SingleTurnEnv`` with ``env_response`` and the ``@vf.stop`` conditions of
``is_completed``, ``vf.Rubric``); 0.3.1 keeps that API under ``verifiers.legacy``, which is read too.

How the verifiers environment runs inside rewardpipe's loop (the platform keeps the turn limit, failure
classification, the record and the transcript):

* **Tasks.** Each dataset row (``prompt``/``question``, ``answer``, ``info``, ``task``) becomes a
  :class:`VfTask`; :meth:`VerifiersEnvironment.task_rows` gives them, :meth:`~VerifiersEnvironment.write_tasks`
  writes a task file for ``--tasks``.
* **State.** verifiers' state dict lives in :class:`VfState` (``vf_state``) without the parts verifiers
  rebuilds from the conversation (prompt, completion, trajectory) or holds live (client, timing, usage
  tracker). Before each call into verifiers a verifiers ``State`` is rebuilt from it and the conversation;
  after each call what the environment put in it must survive JSON (the state is paused and replayed between
  steps): a live object is a clear error naming the key (an environment error record for that rollout).
* **Turns.** ``start`` runs ``setup_state``; after each model turn the stop conditions (``is_completed``)
  decide between ending (``score``) and the environment's turn; ``respond`` awaits ``env_response(messages,
  state)``, appends what it returns (a ``final_env_response`` ends the episode with it), then asks the stop
  conditions again.
* **Reward.** Each rubric function (``RubricGroup`` rubrics flattened; weight-0 metrics left out) becomes a
  component with the rubric's weight (named after the function, made a valid, unique component name:
  :func:`component_name`), called with the keyword names verifiers uses (``prompt``,
  ``completion``, ``answer``, ``state``, ``info``, ``task``, ``parser``, ...). An exception is an error record
  (``component_raised``), never verifiers' 0.0. Ranges come from ``ranges=``; a function without one is
  assumed to lie in [0, 1] and ``doctor`` warns with the range it observed.
* **Tools.** The tools it offers the model (``info["tool_defs"]``, else its ``tool_defs``; a classic 0.3 release's
  ``oai_tools``) are its ``tool_schemas``, OpenAI-style, which rewardpipe's policies send as ``tools=``.
* **Refused.** Environments that execute model-written code (verifiers' sandbox, Python, CLI-agent and
  code-tool environments) would bypass rewardpipe's sandbox; group-level reward functions (``completions``...)
  score a group, not a rollout; ``EnvGroup``.

The pure parts (state round trip, task rows, refusals) need no verifiers; running an environment needs the
``[verifiers]`` extra.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import math
import re
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from rewardpipe.components import RESERVED_NAMES, Component
from rewardpipe.environment import DEFAULT_MAX_TURNS, MAX_TURNS, Environment, EpisodeState, TaskRow
from rewardpipe.models import Message
from rewardpipe.rewards.base import Reward, run_coroutines

SUPPORTED = ((0, 2), (0, 4))  # verifiers >= 0.2, < 0.4
#: verifiers' own state keys that rewardpipe rebuilds for every call (from the task, the conversation, or fresh):
#: never stored, so what is stored is the environment's own state (plus the JSON-safe framework keys below).
REBUILT_KEYS = frozenset(
    {
        "input",
        "task",
        "prompt",
        "completion",
        "trajectory",
        "client",
        "model",
        "sampling_args",
        "tool_defs",
        "usage_tracker",
        "usage",
        "timing",
        "trajectory_id",
        "reward",
        "metrics",
        "error",
        "responses",
        "answer",
        "info",
        "example_id",
        "turn",
    }
)
#: A dataset row's keys :class:`VfTask` holds in fields of their own (every other column is one of its ``columns``).
ROW_FIELDS = frozenset({"prompt", "answer", "info", "example_id", "task"})
#: Group-level reward functions' parameters (a function of a whole group, not of one rollout).
GROUP_PARAMETERS = frozenset({"states", "prompts", "completions", "answers", "tasks", "infos"})
#: Environment classes (by name, anywhere in the class's ancestry) that run model-written code themselves.
CODE_RUNNING_CLASSES = frozenset(
    {
        "SandboxEnv",
        "PythonEnv",
        "CliAgentEnv",
        "SandboxMixin",
        "HarborEnv",
        "OpenCodeEnv",
        "CodeMathEnv",
        "BashEnv",
        "SmolaAgentToolEnv",
    }
)
#: Tool names that execute model-written code (a ToolEnv offering one is refused).
CODE_TOOLS = frozenset(
    {
        "python",
        "run_python",
        "exec",
        "execute",
        "execute_code",
        "run_code",
        "code_interpreter",
        "bash",
        "shell",
        "run_shell",
        "sh",
        "eval",
        "jupyter",
    }
)
UNDECLARED_RANGE = (0.0, 1.0)
#: verifiers' stop conditions that are the platform's own end reasons under another name.
END_REASONS = {"max_turns_reached": "turn_limit", "prompt_too_long": "context_limit"}


class VerifiersError(ValueError):
    """A verifiers environment that cannot run inside rewardpipe, or a reference that names none."""


class VfTask(TaskRow):
    """A verifiers dataset row: its ``prompt`` (messages, system prompt included as verifiers formats it),
    ``answer``, ``info`` and ``task`` (verifiers' own task label or payload), its ``example_id``, and its other
    ``columns`` (``question``, ``level``...), which verifiers hands its rubric functions by name."""

    answer: str = ""
    info: dict[str, Any] = Field(default_factory=dict)
    vf_task: Any = None
    example_id: int = 0
    columns: dict[str, Any] = Field(default_factory=dict)
    #: The row's answer as the dataset holds it when it is not text (a number, a list of accepted answers): what
    #: verifiers hands its rubric functions. ``answer`` is its text (what the scripted reference answers).
    vf_answer: Any = None

    def rubric_answer(self) -> Any:
        """The ``answer`` verifiers' rubric functions and state get: the row's own value, else its text."""
        return self.answer if self.vf_answer is None else self.vf_answer


class VfState(EpisodeState):
    """The episode state: rewardpipe's (ids, messages, next action) plus the verifiers environment's own
    state keys (``vf_state``, JSON only)."""

    vf_state: dict[str, Any] = Field(default_factory=dict)


# -- pure helpers -----------------------------------------------------------------------------------------------


def json_problem(value: Any, where: str = "state") -> str | None:
    """Why ``value`` does not survive a JSON round trip (the first offending key path), or None."""
    if value is None or isinstance(value, (bool, int, str)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where} is {value!r} (JSON has no NaN or infinity)"
    if isinstance(value, list):
        for index, item in enumerate(value):
            problem = json_problem(item, f"{where}[{index}]")
            if problem:
                return problem
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{where} has the key {key!r}, not a string (JSON keys are strings)"
            problem = json_problem(item, f"{where}[{key!r}]")
            if problem:
                return problem
        return None
    kind = type(value).__name__
    hint = " (a tuple reads back as a list: store a list)" if isinstance(value, tuple) else ""
    return f"{where} holds a {kind}, which does not survive JSON{hint}"


def stored_state(vf_state: Mapping[str, Any], env_name: str, step: str) -> dict[str, Any]:
    """What is kept of verifiers' state after ``step``: every key verifiers does not rebuild, checked to survive
    JSON (a live object, NaN, a tuple... is an error naming the key and the step)."""
    kept = {key: value for key, value in dict(vf_state).items() if key not in REBUILT_KEYS}
    final = kept.get("final_env_response")
    if final is not None:
        kept["final_env_response"] = [_plain(m) for m in final] if isinstance(final, list) else _plain(final)
    problem = json_problem(kept, "state")
    if problem:
        raise VerifiersError(
            f"verifiers environment '{env_name}': after {step}, its {problem}. rewardpipe pauses and replays an "
            f"episode's state between steps, so the state must be JSON: keep ids, numbers, strings, lists and "
            f"dicts in it, and live objects (clients, files, sandboxes) elsewhere"
        )
    return kept


def _plain(message: Any) -> Any:
    """A verifiers message (dict or pydantic object) as a plain dict, JSON only."""
    if isinstance(message, Mapping):
        data = dict(message)
    elif hasattr(message, "model_dump"):
        data = message.model_dump(mode="json", exclude_none=True)
    else:
        return message
    return {key: value for key, value in data.items() if value is not None}


def to_message(message: Any) -> Message:
    data = _plain(message)
    if not isinstance(data, Mapping):
        raise VerifiersError(f"the environment answered with {type(message).__name__}, not a chat message")
    return Message.model_validate(data)


def task_row(row: Mapping[str, Any], index: int) -> VfTask:
    """A verifiers dataset row as a :class:`VfTask` (``info`` may be JSON text, as verifiers stores it)."""
    prompt = row.get("prompt")
    if prompt is None or prompt == [] or prompt == "":
        prompt = row.get("question")
    if isinstance(prompt, list):
        prompt = [_plain(m) for m in prompt]
    info = row.get("info") or {}
    if isinstance(info, str):
        try:
            info = json.loads(info) if info.strip() else {}
        except (ValueError, RecursionError):  # nested past the recursion limit: no JSON this reader can hold
            raise VerifiersError(f"row {index}: info is not JSON: {info[:80]!r}") from None
    example_id = row.get("example_id", index)
    answer = row.get("answer")
    # verifiers keeps the whole row as the rollout's input and passes its other columns to rubric functions by
    # name (a function reading ``level`` raised, or read its **kwargs default, when they were dropped here). Only
    # JSON ones: a task row is written to a task file and read back (an image column stays verifiers' own).
    columns = {
        key: value
        for key, value in row.items()
        if key not in ROW_FIELDS and isinstance(key, str) and not json_problem(value)
    }
    return VfTask(
        task_id=str(row.get("id", row.get("task_id", f"vf-{example_id}"))),
        prompt=prompt,
        answer="" if answer is None else str(answer),
        info=dict(info),
        vf_task=row.get("task"),
        example_id=int(example_id) if isinstance(example_id, int) else index,
        columns=columns,
        vf_answer=None if answer is None or isinstance(answer, str) or json_problem(answer) else answer,
    )


def refuse_code_execution(vf_env: Any, classes: Iterable[type]) -> None:
    """VerifiersError for an environment that runs model-written code itself (it would bypass the sandbox)."""
    ancestry = {cls.__name__ for cls in type(vf_env).__mro__}
    found = sorted(ancestry & CODE_RUNNING_CLASSES) or sorted(
        name for name in ancestry if any(word in name for word in ("Sandbox", "PythonEnv", "CodeEnv"))
    )
    tools = [getattr(t, "__name__", getattr(t, "name", "")) for t in getattr(vf_env, "tools", None) or []]
    risky = sorted({str(t) for t in tools} & CODE_TOOLS)
    if found or risky:
        what = f"it is a {', '.join(found)}" if found else f"its tools {risky} run model-written code"
        raise VerifiersError(
            f"verifiers environment {type(vf_env).__name__} is refused: {what}, in its own process or sandbox, "
            f"which would bypass rewardpipe's sandbox. Write it as a rewardpipe Environment whose execution_job "
            f"hands the code to the sandbox instead"
        )
    group = [cls for cls in classes if cls is not None and isinstance(vf_env, cls)]
    if group:
        raise VerifiersError(
            f"verifiers environment {type(vf_env).__name__} is an EnvGroup: wrap each of its environments on its own"
        )


def flatten_rubric(rubric: Any) -> list[tuple[Any, Callable[..., Any], float]]:
    """``(rubric, function, weight)`` for every function of a rubric, a RubricGroup's rubrics flattened."""
    inner = getattr(rubric, "rubrics", None)
    if isinstance(inner, list):
        return [entry for sub in inner for entry in flatten_rubric(sub)]
    funcs = list(getattr(rubric, "funcs", None) or getattr(rubric, "reward_funcs", None) or [])
    weights = list(getattr(rubric, "weights", None) or getattr(rubric, "reward_weights", None) or [1.0] * len(funcs))
    return [(rubric, fn, float(w)) for fn, w in zip(funcs, weights, strict=False)]


def component_name(label: str, taken: set[str]) -> str:
    """The component name of a rubric function labelled ``label`` (its ``__name__``), unique among ``taken``.

    verifiers names a function as Python does (``<lambda>``, any length); a component's name is a record key and
    a metric name (a letter or ``_`` first, then at most 63 letters, digits, ``_``, ``.`` or ``-``; never
    ``aggregate`` or ``errors``). Other characters become ``_`` (``<lambda>`` is ``_lambda_``), a long name is
    cut, and a name already taken gets ``_<n>``, the first free ``n`` from the number of names taken."""
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", label) or "rubric_function"
    if not re.match(r"[A-Za-z_]", base):
        base = "_" + base
    base = base[:64]
    if base in RESERVED_NAMES:
        base = f"{base}_fn"
    name, n = base, len(taken)
    while name in taken:
        suffix = f"_{n}"
        name, n = base[: 64 - len(suffix)] + suffix, n + 1
    return name


def _task_payload(module: Any, row: Mapping[str, Any], task: VfTask) -> Any:
    """The rollout's ``state["task"]`` as verifiers makes it of the row (0.2's ``flatten_task_input``: a payload
    under ``info["task"]`` first, which its rubric hands the functions as ``task`` and field by field); a release
    without it, or a row it refuses (a plain-text task label), keeps the row's ``task``, else the row."""
    try:
        flatten = importlib.import_module(f"{module.__name__}.types").flatten_task_input
    except (ImportError, AttributeError):
        flatten = None
    if callable(flatten):
        try:
            return flatten(row)
        except (ValueError, TypeError):
            pass
    return task.vf_task if task.vf_task is not None else dict(row)


def _is_group_function(fn: Callable[..., Any], rubric: Any = None) -> bool:
    """Whether verifiers calls ``fn`` once per group: the rubric's own reading when it has one (0.2 also takes a
    function annotated to return a list as a group function, whatever its parameters), else by its parameters or
    that annotation."""
    own = getattr(rubric, "_is_group_func", None)
    if callable(own):
        try:
            return bool(own(fn))
        except (TypeError, ValueError):  # no signature to read: judged below
            pass
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    returns = signature.return_annotation
    return bool(set(signature.parameters) & GROUP_PARAMETERS) or returns is list or typing.get_origin(returns) is list


# -- the verifiers side ------------------------------------------------------------------------------------------


@functools.cache
def _verifiers() -> tuple[Any, Any, Any]:
    """(the module holding the classic API, MultiTurnEnv, EnvGroup) of the installed verifiers."""
    try:
        import verifiers
    except ImportError:
        raise VerifiersError(
            "from_verifiers needs the verifiers package: pip install 'rewardpipe[verifiers]'"
        ) from None
    version = getattr(verifiers, "__version__", "0")
    try:
        parts = tuple(int(p) for p in version.split("+")[0].split(".")[:2])
    except ValueError:
        parts = (0, 0)
    if not SUPPORTED[0] <= parts < SUPPORTED[1]:
        raise VerifiersError(
            f"verifiers {version} is installed; from_verifiers wraps the classic API of "
            f"verifiers >=0.2,<0.4 (0.4 runs a whole rollout as one coroutine, which cannot be "
            f"cut into rewardpipe's steps)"
        )
    for name in ("verifiers.legacy", "verifiers"):
        try:
            module = importlib.import_module(name)
            multi_turn = module.MultiTurnEnv
        except (ImportError, AttributeError):
            continue
        try:
            group = module.EnvGroup
        except AttributeError:
            group = None
        return module, multi_turn, group
    raise VerifiersError(f"verifiers {version} has no MultiTurnEnv (neither verifiers.legacy nor verifiers)")


def _load(reference: Any, env_args: Mapping[str, Any] | None) -> Any:
    if not isinstance(reference, str):
        if env_args:
            raise VerifiersError("env_args are for a reference to load_environment, not an environment object")
        return reference
    module_name, _, attr = reference.partition(":")
    if not module_name or not attr:
        raise VerifiersError(f"{reference!r} is not a reference: write 'package.module:load_environment'")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except ImportError as exc:
        raise VerifiersError(f"cannot import {module_name!r} for {reference!r}: {exc}") from None
    except AttributeError:
        raise VerifiersError(f"{module_name!r} has no attribute {attr!r} ({reference!r})") from None
    if callable(target) and not hasattr(target, "env_response"):
        return target(**dict(env_args or {}))
    if env_args:
        raise VerifiersError(f"{reference!r} is an environment, not a function: it takes no env_args")
    return target


class VerifiersEnvironment(Environment):
    """A verifiers environment inside rewardpipe's loop (see the module docstring). Made by :func:`from_verifiers`."""

    task_model = VfTask
    state_model = VfState

    def __init__(
        self,
        vf_env: Any,
        *,
        name: str,
        version: str,
        reward_name: str,
        ranges: Mapping[str, tuple[float, float]] | None = None,
        roles: Mapping[str, str] | None = None,
        max_turns: int | None = None,
        scenarios: Callable[[VfTask], Mapping[str, Any]] | None = None,
    ) -> None:
        self.vf_env = vf_env
        # Per wrapped environment, so set on the instance (the base class declares them as class attributes).
        self.name = name  # type: ignore[misc]
        self.version = version  # type: ignore[misc]
        turns = getattr(vf_env, "max_turns", -1)
        self.max_turns = max_turns or (  # type: ignore[misc]
            min(turns, MAX_TURNS) if isinstance(turns, int) and turns > 0 else DEFAULT_MAX_TURNS
        )
        self._scenarios = scenarios
        self.undeclared: list[str] = []
        self.reward = self._reward(reward_name, dict(ranges or {}), dict(roles or {}))  # type: ignore[misc]

    # -- the reward ------------------------------------------------------------------------------------------

    def _reward(self, reward_name: str, ranges: dict[str, tuple[float, float]], roles: dict[str, str]) -> Reward:
        components: list[Component] = []
        seen: set[str] = set()
        for rubric, fn, weight in flatten_rubric(getattr(self.vf_env, "rubric", None)):
            label = getattr(fn, "__name__", None) or type(fn).__name__
            if weight == 0.0:
                continue  # a verifiers metric: logged by verifiers, no part of the reward
            if _is_group_function(fn, rubric):
                raise VerifiersError(
                    f"rubric function '{label}' scores a whole group (completions, states...); "
                    f"rewardpipe scores each rollout on its own: write it per rollout"
                )
            name = component_name(label, seen)
            seen.add(name)
            value_range = ranges.pop(name, None)
            if value_range is None:
                self.undeclared.append(name)
                value_range = UNDECLARED_RANGE
            components.append(
                Component(
                    name,
                    weight,
                    _RubricCall(self, rubric, fn),
                    f"verifiers rubric: {label}",
                    value_range,
                    roles.pop(name, "outcome" if not components else "shaping"),
                )
            )
        if ranges or roles:
            raise VerifiersError(
                f"ranges/roles name unknown rubric function(s) {sorted({*ranges, *roles})}; the "
                f"rubric has {sorted(seen)}"
            )
        if not components:
            raise VerifiersError(f"verifiers environment '{self.name}' has no rubric function with a weight")
        return Reward(reward_name, components)

    # -- verifiers' state, rebuilt for each call ------------------------------------------------------------

    def vf_state(self, state: Any, task: Any) -> Any:
        """A verifiers ``State`` for ``state``: the task's inputs, the conversation, and the stored keys."""
        module, _, _ = _verifiers()
        state_type = getattr(module, "State", dict)
        opening = len(task.prompt_messages())
        conversation = [m.model_dump(mode="json") for m in state.messages]
        row: dict[str, Any] = {
            **task.columns,  # the dataset's own columns, as verifiers' input row holds them
            "prompt": conversation[:opening],
            "answer": task.rubric_answer(),
            "info": dict(task.info),
            "example_id": task.example_id,
        }
        if task.vf_task is not None:
            row["task"] = task.vf_task
        if isinstance(state_type, type) and issubclass(state_type, dict) and hasattr(state_type, "INPUT_FIELDS"):
            vf = state_type(input=row)  # 0.2: the inputs under "input", read through the State
        else:
            vf = dict(row)
        vf["task"] = _task_payload(module, row, task)
        vf["prompt"] = self._messages(conversation[:opening])
        vf["completion"] = self._messages(conversation[opening:])
        # One trajectory step per model turn (what verifiers' stop conditions count); no live response objects.
        steps = []
        for index in range(opening, len(conversation)):
            if conversation[index]["role"] == "assistant":
                steps.append(
                    {
                        "prompt": self._messages(conversation[:index]),
                        "completion": self._messages([conversation[index]]),
                        "response": None,
                        "tokens": None,
                        "reward": None,
                        "advantage": None,
                        "is_truncated": False,
                        "trajectory_id": state.rollout_id,
                        "extras": {},
                    }
                )
        vf["trajectory"] = steps
        vf.update(
            {
                "trajectory_id": state.rollout_id,
                "client": None,
                "model": "rewardpipe",
                "sampling_args": None,
                "reward": None,
                "metrics": None,
                "error": None,
                "final_env_response": None,
                "tool_defs": [],
                "is_completed": False,
                "is_truncated": False,
                "turn": len(steps),
            }
        )
        timing = getattr(importlib.import_module(f"{module.__name__}.types"), "RolloutTiming", None)
        if timing is not None:
            vf["timing"] = timing()
        # A copy (the stored state is JSON): verifiers changes its state in place, and the state a hook was
        # given must stay as it was.
        for key, value in json.loads(json.dumps(state.vf_state)).items():
            vf[key] = value
        return vf

    def _messages(self, messages: list[dict[str, Any]]) -> Any:
        """Messages as the classic API's own message objects (0.3.1: verifiers.legacy's), or plain dicts."""
        module, _, _ = _verifiers()
        try:
            normalize = importlib.import_module(f"{module.__name__}.utils.message_utils").normalize_messages
        except (ImportError, AttributeError):
            return [dict(m) for m in messages]
        return normalize([dict(m) for m in messages], field_name="messages")

    def _run(self, coroutine: Any) -> Any:
        (result,) = run_coroutines([coroutine])
        if isinstance(result, BaseException):
            raise result
        return result

    def _completed(self, vf: Any) -> bool:
        return bool(self._run(self.vf_env.is_completed(vf)))

    def _failed(self, vf: Any, step: str) -> None:
        error = vf.get("error")
        if error is not None:
            raise VerifiersError(
                f"verifiers environment '{self.name}' set an error in {step}: {type(error).__name__}: {error}"
            )

    # -- the episode -----------------------------------------------------------------------------------------

    # The hooks take the base types the Environment protocol declares (a VfTask and a VfState arrive).
    def start(self, task: Any) -> EpisodeState:
        state = VfState(messages=task.prompt_messages())
        vf = self.vf_state(state, task)
        setup = getattr(self.vf_env, "setup_state", None)
        if setup is not None:
            returned = self._run(setup(vf))
            vf = returned if returned is not None else vf
        self._failed(vf, "setup_state")
        return state.evolve(vf_state=stored_state(vf, self.name, "setup_state"))

    def on_policy_turn(self, state: Any, task: Any, text: str) -> EpisodeState:  # noqa: ARG002 - the hook's
        vf = self.vf_state(state, task)
        done = self._completed(vf)
        kept = stored_state(vf, self.name, "the stop conditions")
        if done:
            return state.evolve(vf_state=kept, next_action="score", end_reason=_end_reason(vf))
        return state.evolve(vf_state=kept, next_action="env")

    def respond(self, state: Any, task: Any, ctx: Any) -> EpisodeState:  # noqa: ARG002 - the hook's
        vf = self.vf_state(state, task)
        replies = self._run(self.vf_env.env_response(vf["prompt"] + vf["completion"], vf))
        if isinstance(replies, tuple) and len(replies) == 2:  # older classic releases: (messages, state)
            replies, vf = replies
        self._failed(vf, "env_response")
        final = vf.get("final_env_response")
        kept = stored_state(vf, self.name, "env_response")
        if final is not None:
            added = [to_message(m) for m in (final if isinstance(final, list) else [final])]
            return state.append(*added, vf_state=kept, next_action="score", end_reason="final_env_response")
        added = [to_message(m) for m in (replies or [])]
        after = state.append(*added, vf_state=kept)
        vf = self.vf_state(after, task)
        if self._completed(vf):
            return after.evolve(
                vf_state=stored_state(vf, self.name, "the stop conditions"),
                next_action="score",
                end_reason=_end_reason(vf),
            )
        return after.evolve(next_action="policy")

    def tool_schemas(self, task: Any = None) -> list[dict[str, Any]]:
        """The tools the verifiers environment offers the model for ``task`` (``info["tool_defs"]``, else its
        ``tool_defs``; a classic 0.3 release's ``oai_tools``), OpenAI-style, as rewardpipe's policies send them
        (``tools=``) and a callback trainer or TRL's chat template gets them. ``[]`` when it offers none."""
        info = getattr(task, "info", None)
        tools = info.get("tool_defs") if isinstance(info, Mapping) and "tool_defs" in info else None
        if tools is None:
            tools = getattr(self.vf_env, "tool_defs", None)
        if tools is None:
            tools = getattr(self.vf_env, "oai_tools", None)
        return [openai_tool(tool) for tool in tools or []]

    # -- doctor ----------------------------------------------------------------------------------------------

    def scenarios(self, task: Any) -> Mapping[str, Any]:
        """Given ones (``from_verifiers(scenarios=...)``), else: ``reference`` answers the task's ``answer`` every
        turn, ``no_answer`` says it does not know."""
        if self._scenarios is not None:
            return self._scenarios(task)
        from rewardpipe.policies import ScriptedPolicy

        return {
            "reference": ScriptedPolicy(lambda _state, t: t.answer or "(no answer)"),
            "no_answer": ScriptedPolicy(lambda _state, _task: "I do not know."),
        }

    def check_task(self, task: Any, runs: Mapping[str, Any]) -> list[Any]:  # noqa: ARG002 - the hook's
        """A warning per rubric function without a declared range, with the values doctor observed."""
        from rewardpipe.doctor import Finding

        findings = []
        for name in self.undeclared:
            seen = sorted(
                v
                for run in runs.values()
                if run.record is not None
                for v in [run.record.components.get(name)]
                if v is not None
            )
            observed = f"observed {seen[0]:g}..{seen[-1]:g}" if seen else "no value observed"
            findings.append(
                Finding(
                    "undeclared_range",
                    f"rubric function '{name}' has no declared range, so "
                    f"[0, 1] is assumed ({observed} in this task's scenarios): declare it with "
                    f"from_verifiers(ranges={{'{name}': (lo, hi)}})",
                    "warning",
                )
            )
        return findings

    # -- tasks -----------------------------------------------------------------------------------------------

    def task_rows(self, split: str = "train", n: int = -1) -> list[VfTask]:
        """The environment's dataset (``train``) or eval dataset (``eval``) as task rows."""
        getter = getattr(self.vf_env, "get_dataset" if split == "train" else "get_eval_dataset")
        dataset = getter(n=n)
        return [task_row(row, index) for index, row in enumerate(dataset)]

    def write_tasks(self, path: str | Path, split: str = "train", n: int = -1) -> Path:
        """Write :meth:`task_rows` as a JSONL task file (for ``--tasks``)."""
        path = Path(path)
        path.write_text("".join(row.model_dump_json() + "\n" for row in self.task_rows(split, n)), encoding="utf-8")
        return path


def openai_tool(tool: Any) -> dict[str, Any]:
    """A verifiers tool definition (a ``vf.Tool``, its dict ``{"name", "description", "parameters"}``, or an OpenAI
    ``{"type": "function", "function": ...}`` one) as the OpenAI schema rewardpipe's policies send."""
    plain = tool.model_dump(exclude_none=True) if hasattr(tool, "model_dump") else tool
    if not isinstance(plain, Mapping):
        raise VerifiersError(f"a tool definition must be a vf.Tool or a dict, got {type(tool).__name__}")
    if plain.get("type") == "function" and isinstance(plain.get("function"), Mapping):
        return json.loads(json.dumps(plain))
    if not isinstance(plain.get("name"), str):
        raise VerifiersError(f"a tool definition needs a name, got keys {sorted(map(str, plain))[:20]}")
    function = {key: plain[key] for key in ("name", "description", "parameters", "strict") if key in plain}
    return {"type": "function", "function": json.loads(json.dumps(function))}


def _end_reason(vf: Any) -> str:
    """The stop condition that ended the episode (its function's name), as the episode's end reason."""
    condition = str(vf.get("stop_condition") or "stopped")
    return END_REASONS.get(condition, condition)


class _RubricCall:
    """One rubric function as a component: called with verifiers' keyword names, from the episode's task and
    state (a verifiers State rebuilt for it). Async rubric functions are awaited; an exception propagates, so
    the record is ``component_raised``, not a 0.0."""

    def __init__(self, env: VerifiersEnvironment, rubric: Any, fn: Callable[..., Any]) -> None:
        self.env, self.rubric, self.fn = env, rubric, fn
        self.__name__ = getattr(fn, "__name__", "rubric_function")
        self.__signature__ = inspect.Signature(
            [
                inspect.Parameter("task", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                inspect.Parameter("state", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            ]
        )

    def __call__(self, task: VfTask, state: VfState) -> Any:
        if task is None or state is None:
            raise VerifiersError(
                "a verifiers rubric function scores an episode of its environment (it needs the "
                "task and the final state)"
            )
        vf = self.env.vf_state(state, task)
        objects = (
            self.rubric.score_objects(vf)
            if hasattr(self.rubric, "score_objects")
            else {
                "prompt": vf["prompt"],
                "completion": vf["completion"],
                "answer": task.rubric_answer(),
                "state": vf,
                "info": task.info,
                "task": task.vf_task,
                **getattr(self.rubric, "class_objects", {}),
            }
        )
        parameters = inspect.signature(self.fn).parameters
        if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
            objects = {k: v for k, v in objects.items() if k in parameters}
        value = self.fn(**objects)
        if inspect.isawaitable(value):
            value = self.env._run(value)
        return value


def from_verifiers(
    reference: Any,
    env_args: Mapping[str, Any] | None = None,
    *,
    ranges: Mapping[str, Sequence[float]] | None = None,
    roles: Mapping[str, str] | None = None,
    name: str | None = None,
    max_turns: int | None = None,
    scenarios: Callable[[VfTask], Mapping[str, Any]] | None = None,
) -> VerifiersEnvironment:
    """A classic verifiers environment as a rewardpipe Environment.

    ``reference``: ``"package.module:load_environment"`` (called with ``env_args``), a reference to an
    environment object, or the object. ``ranges`` maps rubric function names to ``(lo, hi)``; ``roles`` to
    ``outcome``/``shaping``/``penalty`` (default: the first function is the outcome). ``name`` defaults to the
    module's name; ``max_turns`` to the environment's own (else rewardpipe's default). ``scenarios(task)``
    gives doctor's scripted policies (default: ``reference`` answers the dataset's answer).
    """
    _, multi_turn, group = _verifiers()
    vf_env = _load(reference, env_args)
    refuse_code_execution(vf_env, [group])
    if not isinstance(vf_env, multi_turn):
        raise VerifiersError(
            f"{type(vf_env).__name__} is not a verifiers MultiTurnEnv (or SingleTurnEnv): "
            f"from_verifiers wraps the classic env_response / is_completed API"
        )
    module = reference.partition(":")[0] if isinstance(reference, str) else type(vf_env).__module__
    label = name or module.rsplit(".", 1)[-1].replace("-", "_") or "verifiers_env"
    import verifiers

    version = f"{getattr(vf_env, 'env_id', '') or label}+verifiers{getattr(verifiers, '__version__', '?')}"
    return VerifiersEnvironment(
        vf_env,
        name=label,
        version=version,
        reward_name=label,
        ranges={k: (float(v[0]), float(v[1])) for k, v in (ranges or {}).items()},
        roles=roles,
        max_turns=max_turns,
        scenarios=scenarios,
    )
