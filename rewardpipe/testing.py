"""Doctor's checks inside pytest, for a user's own environment or reward::

    from rewardpipe.testing import check_environment, check_reward
    from acme_rl.guess_env import ENVIRONMENT

    def test_the_environment_is_healthy():
        check_environment(ENVIRONMENT, "tasks/train.jsonl")

    def test_the_reward_moves():
        check_reward(JSON_ANSWER, [{"completion": '{"answer": 4}', "reference": 4},
                                   {"completion": "four", "reference": 4}])

Each raises ``AssertionError`` listing every problem found (the same checks and messages as ``rewardpipe
doctor``) and otherwise returns what it looked at, warnings included, for further assertions.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["EnvironmentReport", "check_environment", "check_reward", "score"]

#: ``score()``'s ``reference`` when it is left out (``reference=None`` says "this sample has none")
_NOT_GIVEN: Any = object()


class EnvironmentReport(list):
    """The diagnoses of :func:`check_environment` (one :class:`rewardpipe.doctor.TaskDiagnosis` per task)."""

    @property
    def warnings(self) -> list[str]:
        return [f"{d.task_id}: {w}" for d in self for w in d.warnings]


def _rows(env: Any, rows: Any) -> list[Any]:
    from rewardpipe.models import load_task_rows

    if isinstance(rows, (str, os.PathLike)):
        return load_task_rows(Path(rows), env.task_model)
    if isinstance(rows, (Mapping, env.task_model)):  # one row given where rows are: its keys were read as rows
        raise ValueError(
            f"rows must be a list of task rows (or a task file's path), got one {type(rows).__name__}: "
            "wrap it in a list"
        )
    return [_row(env, index, row) for index, row in enumerate(rows)]


def _row(env: Any, index: int, row: Any) -> Any:
    """``row`` as a row of the environment's task model; one it cannot be is a ValueError naming the row (its
    position and ``task_id``) and every field wrong, as a task file's line is named (pydantic's error named
    neither the row nor, for a list of many, which one)."""
    from pydantic import ValidationError

    from rewardpipe.models import _describe_validation_error
    from rewardpipe.safe_text import printable

    if isinstance(row, env.task_model):
        return row
    try:
        return env.task_model.model_validate(row)
    except ValidationError as exc:
        task_id = row.get("task_id") if isinstance(row, Mapping) else None
        named = f" ({printable(str(task_id))[:80]!r})" if task_id is not None else ""
        raise ValueError(
            f"task row {index}{named} is not a row of {env.task_model.__name__}: {_describe_validation_error(exc)}"
        ) from None


def check_environment(
    env: Any, rows: Any, *, reward: Any = None, executor: Any = None, max_turns: int | None = None
) -> EnvironmentReport:
    """Play every task of ``rows`` (task rows, dicts, or a JSONL path) through the environment's scenarios
    with the real loop (and the real sandbox when the environment runs code) and check what ``rewardpipe
    doctor`` checks: every component takes 2+ values, the ``reference`` scenario reaches each outcome's
    maximum, values stay in their ranges, nothing raises or comes back None unexplained, two plays agree,
    the state survives JSON. ``env`` and ``reward`` may be references (``pkg.module:ATTR``...)."""
    from rewardpipe.doctor import diagnose
    from rewardpipe.references import resolve_environment, resolve_reward

    env = resolve_environment(env)
    reward = resolve_reward(reward) if reward is not None else env.reward
    readers = [c.name for c in reward.components if "reference" in c.inputs]
    if readers:  # every play's components would be None: a finding per scenario, none of them saying why
        raise ValueError(
            f"reward '{reward.name}' scores single-turn samples: its component(s) {', '.join(readers)} read "
            f"'reference', which an episode does not have (check it with check_reward); environment '{env.name}' "
            f"is scored by its own reward '{env.reward.name}' unless reward= names another"
        )
    tasks = _rows(env, rows)
    if not tasks:
        raise AssertionError("check_environment needs at least one task row")
    if executor is None:
        if env.runs_code:
            from rewardpipe.execution import get_executor

            executor = get_executor()
        else:
            from rewardpipe.runner import NoSandbox

            executor = NoSandbox()
    report = EnvironmentReport(diagnose(tasks, env, executor, reward=reward, max_turns=max_turns))
    problems = [f"{d.task_id}: [{f.check}] {f.message}" for d in report for f in d.findings if f.severity == "error"]
    if problems:
        raise AssertionError(f"environment '{env.name}' has {len(problems)} problem(s):\n  " + "\n  ".join(problems))
    return report


def score(
    reward: Any,
    *,
    completion: str | None = None,
    messages: Sequence[Any] | None = None,
    reference: Any = _NOT_GIVEN,
    task: Any = None,
    state: Any = None,
    execution: Any = None,
) -> Any:
    """One sample's :class:`rewardpipe.rewards.base.Score` (give ``completion`` or ``messages``, and
    ``reference`` when the reward reads it: ``reference=None`` for a sample that has none)."""
    from rewardpipe.references import resolve_reward

    reward = resolve_reward(reward)
    if reference is _NOT_GIVEN:
        problem = missing_reference(reward)
        if problem is not None:  # scored with None, its components gave the model's minimum: a silent 0
            raise ValueError(f"{problem}: pass reference=...")
        reference = None
    return reward.score_input(_input(completion, messages, reference, task, state, execution))


def missing_reference(reward: Any) -> str | None:
    """What is wrong with a sample that gives no ``reference`` to ``reward``: None when the reward reads none.
    Scored without it, a component comparing the answer with the reference gave its minimum, a 0 that looked
    like the model's (``rewardpipe score`` and :func:`check_reward` refuse such a sample, naming this)."""
    if "reference" not in reward.reads:
        return None
    readers = [c.name for c in reward.components if "reference" in c.inputs] or ["its diagnostics"]
    return (
        f"no 'reference', which reward '{reward.name}' reads ({', '.join(readers)}): give the sample its "
        f"reference answer (null when it has none, for the components to say so)"
    )


def _input(
    completion: str | None, messages: Sequence[Any] | None, reference: Any, task: Any, state: Any, execution: Any
) -> Any:
    from rewardpipe.models import Message
    from rewardpipe.rewards.base import ScoringInput

    if messages is None:
        if completion is None:
            raise ValueError("a sample needs 'completion' or 'messages'")
        if not isinstance(completion, str):
            kind = type(completion).__name__
            raise ValueError(f"'completion' must be the answer's text, got {kind} {completion!r:.80}")
        messages = [Message(role="assistant", content=completion)]
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise ValueError(f"'messages' must be a list of messages {{'role', 'content'}}, got {type(messages).__name__}")
    messages = [_message(position, m) for position, m in enumerate(messages)]
    return ScoringInput(execution=execution, reference=reference, messages=messages, task=task, state=state)


def _message(position: int, message: Any) -> Any:
    from pydantic import ValidationError

    from rewardpipe.models import Message, field_error

    if isinstance(message, Message):
        return message
    try:
        return Message.model_validate(message)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ValueError(field_error({**first, "loc": (f"messages[{position}]", *first["loc"])})) from None


def _sample_input(index: int, sample: Mapping[str, Any]) -> Any:
    """:func:`_input` for the ``index``-th sample; a sample it cannot read (a message whose content is a number, a
    role that is none) is a ValueError naming the sample and the field, where pydantic's error named neither."""
    fields = ("completion", "messages", "reference", "task", "state", "execution")
    try:
        return _input(*(sample.get(field) for field in fields))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"sample {index}: {exc}") from None


def _given(data: Any) -> dict[str, Any]:
    """The inputs a ScoringInput was given, as its keyword arguments."""
    return {
        "messages": data.messages,
        "task": data.task,
        "state": data.state,
        "execution": data.execution,
        "reference": data.reference,
    }


# What a sample of check_reward may hold: what it reads, and the ids of a samples file's line (not read).
_SAMPLE_KEYS = frozenset(
    ("completion", "messages", "reference", "task", "state", "execution", "rollout_id", "group_id", "task_id", "step")
)


def _samples_file(path: str | os.PathLike[str]) -> list[Any]:
    """The samples of a JSONL file (a samples file of `rewardpipe score`): one JSON object a line."""
    import json

    from rewardpipe.models import open_input

    samples = []
    with open_input(Path(path)) as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                sample = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{os.fspath(path)}:{lineno}: not valid JSON ({exc})") from None
            if not isinstance(sample, dict):
                raise ValueError(
                    f"{os.fspath(path)}:{lineno}: not a JSON object (a sample is one: "
                    '{"messages": [...], "reference": ...})'
                )
            samples.append(sample)
    return samples


def check_reward(
    reward: Any, samples: Iterable[Mapping[str, Any]] | str | os.PathLike[str], *, require_variation: bool = True
) -> list[Any]:
    """Score ``samples`` (dicts, or the path of a JSONL file of them, with ``completion`` or ``messages``, and
    ``reference`` (required when the reward reads it), ``task``, ``state``, ``execution`` as needed) and check:
    no component raised, changed its inputs or came back None without an explanation, every value is inside its
    component's declared range, and (with ``require_variation``) every component takes at least two values across
    the samples. Returns the scores."""
    from rewardpipe.models import NOT_A_SCORE_KINDS
    from rewardpipe.references import resolve_reward
    from rewardpipe.rewards.mutation import changed_inputs, mutating_components, pristine_copy, written_down

    reward = resolve_reward(reward)
    samples = _samples_file(samples) if isinstance(samples, (str, os.PathLike)) else list(samples)
    for index, sample in enumerate(samples):
        if not isinstance(sample, Mapping):  # a path given as a list, or a list of completions
            raise ValueError(
                f"sample {index} is a {type(sample).__name__}, not a dict of 'completion' or 'messages' and "
                f"'reference', 'task', 'state', 'execution' as needed (or give the samples file's path)"
            )
        unknown = [str(key) for key in sample if key not in _SAMPLE_KEYS]
        if unknown:  # a typo (`refrence`) was dropped: every sample scored without what it was meant to carry
            raise ValueError(
                f"sample {index}: unknown key(s) {', '.join(repr(k) for k in unknown)}; a sample gives 'completion' "
                f"or 'messages', and 'reference', 'task', 'state', 'execution' as needed (a samples file's ids, "
                f"'rollout_id', 'group_id', 'task_id', 'step', are allowed and not read)"
            )
        if "reference" not in sample and missing_reference(reward) is not None:
            raise ValueError(f"sample {index}: {missing_reference(reward)}")
    inputs = [_sample_input(index, s) for index, s in enumerate(samples)]
    if not inputs:
        raise AssertionError("check_reward needs at least one sample")
    given = [_given(data) for data in inputs]
    pristine = [(pristine_copy(sample), written_down(sample)) for sample in given]
    scores = reward.score_many(inputs)
    problems: list[str] = []
    for index, (sample, (copied, before)) in enumerate(zip(given, pristine, strict=True)):
        if copied is not None and changed_inputs(before, sample):
            found = mutating_components(reward, copied)
            problems.extend(f"sample {index}: [component_mutated_input] {finding}" for finding in found)
    seen: dict[str, set[float]] = {c.name: set() for c in reward.components}
    for index, score in enumerate(scores):
        if score.error is not None and score.error.kind in (
            "component_raised",
            "component_timeout",
            "component_unavailable",
        ):
            check = "unexplained_none" if score.error.kind == "component_unavailable" else score.error.kind
            problems.append(f"sample {index}: [{check}] {score.error.message}")
        elif score.error is not None and score.error.kind in NOT_A_SCORE_KINDS:
            # NaN, an infinity or an absurd number (doctor's out_of_range): the value is left out of the score
            problems.append(f"sample {index}: [out_of_range] {score.error.message}")
        for comp in reward.components:
            value = score.components.get(comp.name)
            if value is None:
                continue
            seen[comp.name].add(value)
            lo, hi = comp.value_range
            if not lo - 1e-9 <= value <= hi + 1e-9:
                problems.append(
                    f"sample {index}: [out_of_range] component '{comp.name}' is {value:g}, outside its "
                    f"declared range [{lo:g}, {hi:g}]"
                )
    if require_variation:
        for name, values in seen.items():
            if not values:  # every sample's record was an error (listed above): nothing to judge it by
                problems.append(
                    f"[component_never_varies] component '{name}' took no value on any sample, so whether it "
                    f"varies is unknown"
                )
            elif len(values) < 2:
                problems.append(
                    f"[component_never_varies] component '{name}' takes only the value(s) "
                    f"{sorted(values)} across the samples: it would be dead"
                )
    if problems:
        raise AssertionError(f"reward '{reward.name}' has {len(problems)} problem(s):\n  " + "\n  ".join(problems))
    return scores
