"""TRL ``GRPOTrainer`` adapter: one reward function per component, and the within-group monitor per batch.

Supported: TRL 1.13 (the ``.[trl]`` extra pins trl, transformers, accelerate, datasets and a CPU torch;
``make test-trl`` trains a real GRPOTrainer with them). The reward functions use only TRL's documented
reward-function call (``prompts``, ``completions``, dataset columns as keyword lists, plus
``trainer_state`` / ``log_metric``), which TRL has had since 0.2x.

TRL logs every reward function on its own (``rewards/<name>/mean`` and ``/std``) and sums them with
``reward_weights``. Handing it one function per component gives per-component curves for free, and the
weights stay rewardpipe's::

    from rewardpipe.integrations.trl import RewardPipeCallback
    monitor = RewardPipeCallback(reward="gsm8k", store="runs")       # store optional
    trainer = GRPOTrainer(model=..., reward_funcs=monitor.reward_funcs,
                          args=GRPOConfig(reward_weights=monitor.reward_weights, ...), callbacks=[monitor])

A sample that cannot be scored (unreadable reference, harness failure) gets ``None`` from every function:
TRL treats ``None`` as "no reward" and leaves it out, where a 0.0 would enter the group's baseline.

TRL's per-function statistics are batch-wide (``rewards/<name>/std`` can be large while the component is
constant inside every group). :class:`RewardPipeCallback` runs the within-group monitor on every training
batch with the weights TRL actually uses, logs ``rewardpipe/<component>/zero_variance_group_fraction`` and
``rewardpipe/<component>/within_group_std`` through TRL's ``log_metric`` hook (so they land in
``trainer.state.log_history`` and every ``report_to`` backend), keeps the alarms in ``callback.alarms`` and,
given a store, writes the records so ``rewardpipe monitor`` and ``rewardpipe report`` read a TRL run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from rewardpipe.integrations.progress import StorableBatch, StoredProgress
from rewardpipe.models import (
    MAX_SCORE_MAGNITUDE,
    MAX_TASK_ID_LENGTH,
    TRAINER_TRANSCRIPT_MESSAGE_CHARS,
    TRAINER_TRANSCRIPT_MESSAGES,
    ErrorInfo,
    Message,
    chat_role,
    content_to_text,
    cut_text,
    first_and_last,
    id_problem,
    non_finite_error,
    nova_fields,
)
from rewardpipe.rewards import Reward, ScoringInput, get_reward
from rewardpipe.single_turn import prompt_digest_id, score_samples

RewardFn = Callable[..., list]
logger = logging.getLogger("rewardpipe.trl")

# Dataset columns read as the reference answer, in order of preference (GSM8K calls it "answer";
# `reference` is the field of rewardpipe's own samples, the name a component's parameter has).
REFERENCE_COLUMNS = ("reference_answer", "answer", "solution", "reference")
# Keyword arguments TRL adds to every reward call that are not dataset columns.
_TRL_HOOKS = ("trainer_state", "log_extra", "log_metric", "environments", "completion_ids")


def _as_messages(value: Any, role: str) -> list[dict[str, Any]]:
    """TRL passes plain strings (standard datasets) or message lists (conversational datasets)."""
    if isinstance(value, list):
        return list(value)
    return [{"role": role, "content": value}]


def _samples(prompts: Sequence[Any], completions: Sequence[Any], columns: Mapping[str, Any]) -> list[dict]:
    samples = []
    given = _columns(completions, columns)
    for index, completion in enumerate(completions):
        metadata = {name: values[index] for name, values in given.items()}
        reference = next((metadata[c] for c in REFERENCE_COLUMNS if metadata.get(c) is not None), None)
        if reference is not None:
            metadata["reference_answer"] = reference
        prompt = prompts[index] if index < len(prompts) else ""
        messages = _as_messages(prompt, "user") + _as_messages(completion, "assistant")
        samples.append({"id": index, "messages": messages, "metadata": metadata})
    return samples


def resolve_reward(reward: str | Reward, weights: Mapping[str, float] | None) -> Reward:
    """A reward by any reference (a built-in name, ``package.module:ATTR``, ``file.py:ATTR``, an installed
    short name) or a Reward object, with ``weights`` overriding its component weights."""
    return get_reward(reward, weights)


@dataclass
class ScoredBatch:
    """One batch as the reward functions saw it: per completion, each component's value (``None`` when it
    could not be computed) and the error kind of an unscorable completion. The values come as rows
    (``values``) or as one column per component (``columns``); :meth:`rows` and :meth:`column` read either."""

    fingerprint: Any
    values: list[dict[str, float | None]] | None
    errors: list[str | None]
    served: set[str] = field(default_factory=set)
    # Per completion, what its stored record should say beyond the components (``task_id``, ``metrics``):
    # the multi-turn episodes know their task and how the conversation went; single-turn samples do not.
    details: list[dict[str, Any]] = field(default_factory=list)
    columns: dict[str, list[float | None]] | None = None
    # Per completion, what its error said (``component 'x' raised ValueError: ... (at file:line)``), for its stored
    # record and the alarms' examples: the kind alone did not say which component failed, nor where.
    error_messages: list[str | None] = field(default_factory=list)

    def rows(self) -> list[dict[str, float | None]]:
        if self.values is None:
            names = list(self.columns or {})
            self.values = [
                dict(zip(names, row, strict=True)) for row in zip(*(self.columns or {}).values(), strict=True)
            ]
        return self.values

    def column(self, name: str) -> list[float | None]:
        if self.columns is not None:
            return list(self.columns[name])
        return [row[name] for row in self.rows()]


class BatchKey:
    """What a reward-function call was given (prompts, completions, the dataset's columns), compared by
    content: equal lists of the same strings are one batch. TRL hands every reward function the same lists,
    so the comparison is a pass of identity checks over them; the batch scored before stays referenced, so
    its lists are never freed and reused under the next batch."""

    __slots__ = ("columns", "completions", "prompts")

    def __init__(self, prompts: Sequence[Any], completions: Sequence[Any], columns: dict[str, Sequence[Any]]) -> None:
        self.prompts, self.completions, self.columns = prompts, completions, columns

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, BatchKey)
            and len(self.completions) == len(other.completions)
            and self.completions == other.completions
            and self.prompts == other.prompts
            and self.columns == other.columns
        )

    def __hash__(self) -> int:  # pragma: no cover - keys are compared, never hashed
        return len(self.completions)


def _columns(completions: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Sequence[Any]]:
    """The dataset columns of a reward-function call: lists with one value per completion (a numpy array or a
    pandas Series, as a caller outside TRL may hand over, is read as its list)."""
    count = len(completions)
    columns: dict[str, Sequence[Any]] = {}
    for name, values in kwargs.items():
        if name in _TRL_HOOKS:
            continue
        if not isinstance(values, (list, tuple)):
            # Taken only as lists, an ``answer`` column given as an array was dropped without a word: every
            # sample then had no reference, an error record each.
            tolist = getattr(values, "tolist", None)
            values = tolist() if callable(tolist) and getattr(values, "ndim", None) == 1 else None
            if values is not None:
                # Each call makes new floats, and a NaN equals no other: the next function's call would be another
                # batch (scored again, never monitored). Every NaN is the one math.nan, equal to itself by identity.
                values = [math.nan if isinstance(v, float) and v != v else v for v in values]
        if isinstance(values, (list, tuple)) and len(values) == count:
            columns[name] = values
    return columns


def _answer(value: Any) -> str | None:
    """A completion's answer: a string, or the text of the last assistant message of a conversational
    completion (the model's final turn, after any tool calls and results). ``None`` when there is none to score:
    ``None``, a number, ``[]``, user turns only, or a last assistant message whose content does not read as
    text (malformed trainer input: an error record, never a 0). An empty string is an answer (the model said
    nothing, and that is scored)."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        return None
    for message in reversed(value):
        role = message.get("role") if isinstance(message, dict) else getattr(message, "role", None)
        if chat_role(role) == "assistant":
            content = message.get("content") if isinstance(message, dict) else getattr(message, "content", "")
            try:
                return content_to_text(content)
            except ValueError:
                return None
    return None


def _text(value: Any) -> str:
    """A completion's text (:func:`_answer`), ``""`` when it has none."""
    answer = _answer(value)
    return "" if answer is None else answer


def prompt_task_id(prompt: Any, columns: Mapping[str, Sequence[Any]], index: int) -> str:
    """The task a single-turn completion answers, for its stored record: the dataset's ``task_id`` column when it
    holds a valid id (text or a number), else the id ``rewardpipe score`` gives a sample of that prompt with no
    task_id (``p-`` and a digest of the prompt's messages), so one prompt is one task in every batch and at any
    position (the group's position, ``p0``, named unrelated prompts one task)."""
    named = columns.get("task_id")
    value = named[index] if named is not None and index < len(named) else None
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str) and value and len(value) <= MAX_TASK_ID_LENGTH and id_problem(value) is None:
        return value
    try:  # the prompt's messages (no answer among them: a prompt's assistant turns are the prompt's)
        messages = [Message.model_validate(m) for m in _as_messages(prompt, "user")]
        return prompt_digest_id([*messages, Message(role="assistant", content="")])
    except Exception:  # noqa: BLE001 - a prompt no message can hold: a digest of its text, never the batch's failure
        text = f"<unreadable {type(prompt).__name__}>"
        with contextlib.suppress(ValueError, TypeError, RecursionError):
            text = json.dumps(prompt, sort_keys=True, default=str, ensure_ascii=False)
        return prompt_digest_id(text)


def _has_answer(value: Any) -> bool:
    """Whether a completion holds an answer to score (:func:`_answer`): the message read as the answer is the
    one this checks, so a completion is never scored on one message and judged on another."""
    return _answer(value) is not None


class CompletionInput:
    """The inputs of one TRL completion (the :class:`~rewardpipe.rewards.base.ScoringInput` vocabulary): its
    text and reference are at hand; its messages and transcript (prompt and completion as rewardpipe
    Messages) are built only if a component reads them. No task, state or execution: a single-turn sample."""

    __slots__ = ("_lazy", "_prompt", "_raw", "completion", "reference")
    task = None
    state = None
    execution = None

    def __init__(self, prompt: Any, completion: Any, text: str, reference: Any) -> None:
        self.completion = text
        self.reference = reference
        self._prompt = prompt
        self._raw = completion
        self._lazy: ScoringInput | None = None

    def _full(self) -> ScoringInput:
        if self._lazy is None:
            out = []
            for item in _as_messages(self._prompt, "user") + _as_messages(self._raw, "assistant"):
                try:
                    out.append(Message.model_validate(item))
                except ValueError:
                    continue  # a part TRL added that is not a chat message (an image, say): nothing to score
            self._lazy = ScoringInput(reference=self.reference, messages=out, completion=self.completion)
        return self._lazy

    @property
    def messages(self) -> Sequence[Message]:
        return self._full().messages

    @property
    def transcript(self) -> Any:
        return self._full().transcript


def references(key: BatchKey) -> list[Any]:
    """Each completion's reference answer: the first of REFERENCE_COLUMNS that has one."""
    columns = [key.columns[name] for name in REFERENCE_COLUMNS if name in key.columns]
    if not columns:
        return [None] * len(key.completions)
    if len(columns) == 1:
        return list(columns[0])
    return [next((values[i] for values in columns if values[i] is not None), None) for i in range(len(key.completions))]


def completion_inputs(key: BatchKey, reads_reference: bool = True) -> list[CompletionInput]:
    prompts, completions = key.prompts, key.completions
    count = len(prompts)
    refs = references(key) if reads_reference else [None] * len(completions)
    return [
        CompletionInput(
            prompts[index] if index < count else "",
            completion,
            completion if completion.__class__ is str else _text(completion),
            reference,
        )
        for index, (completion, reference) in enumerate(zip(completions, refs, strict=False))
    ]


_LIMIT = MAX_SCORE_MAGNITUDE


class BatchScorer:
    """Scores a batch once and serves it to each component's reward function.

    TRL calls the reward functions one after the other with the same inputs. The batch is recognised by
    its *content* (:class:`BatchKey`), never by object identity: ``id()`` of a freed list is reused by the
    next one, so an id-keyed cache can hand one batch's scores to the next. A component that raises makes its
    completion an error (``component_raised``): ``None`` in every component, never a 0 and never a lost batch.
    A component asked
    twice for the same content means a new batch (two consecutive batches can be identical), so it is scored
    again. When every component has been served, ``on_complete`` receives the batch and the call's keyword
    arguments (TRL's hooks).
    """

    def __init__(
        self,
        reward: Reward,
        executor: Any = None,
        on_complete: Callable[[ScoredBatch, Mapping[str, Any]], None] | None = None,
    ) -> None:
        self.reward = reward
        self.executor = executor
        self.on_complete = on_complete
        self.current: ScoredBatch | None = None
        # Whether each completion's details carry its transcript (set by the callback when it stores the run).
        self.keeps_transcripts = False
        self.batches_scored = 0
        self.incomplete_batches = 0
        self._warned_no_reference = False

    def read_batch(
        self, prompts: Sequence[Any], completions: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> tuple[Any, Any]:
        """``(what to score, the batch's content key)`` from one reward-function call."""
        key = BatchKey(prompts, completions, _columns(completions, kwargs))
        return key, key

    def _score(self, key: BatchKey, fingerprint: Any, kwargs: Mapping[str, Any]) -> ScoredBatch:  # noqa: ARG002 - _score's signature (the episodes subclass's reads kwargs)
        self._warn_without_reference(key)
        batch = self._score_columns(key, fingerprint)
        # A completion with no answer (None, a number, no assistant message) is malformed input: an error.
        for index, completion in enumerate(key.completions):
            if completion.__class__ is not str and not _has_answer(completion):
                batch.errors[index] = batch.errors[index] or "malformed_sample"
                if batch.columns is not None:
                    for column in batch.columns.values():
                        column[index] = None
                else:
                    batch.rows()[index] = dict.fromkeys(self.reward.component_names)
        if self.on_complete is not None:  # the monitor stores each record under its prompt's task
            prompts = list(key.prompts)
            batch.details = [
                {"task_id": prompt_task_id(prompts[i] if i < len(prompts) else None, key.columns, i)}
                for i in range(len(key.completions))
            ]
            for detail, message in zip(batch.details, batch.error_messages, strict=False):
                if message is not None:
                    detail[ERROR_MESSAGE] = message
            if self.keeps_transcripts:
                for index, (detail, completion) in enumerate(zip(batch.details, key.completions, strict=False)):
                    detail[TRANSCRIPT] = completion_transcript(
                        prompts[index] if index < len(prompts) else "", completion
                    )
        return batch

    def _warn_without_reference(self, key: BatchKey) -> None:
        """Once per scorer: a reward that reads ``reference`` given a batch with no reference column. Its
        components are called with ``None`` (a user's may score that 0.0 for every completion), and nothing
        else would say the dataset's column has another name."""
        if self._warned_no_reference or not self.reward.reads_input("reference"):
            return
        if any(name in key.columns for name in REFERENCE_COLUMNS):
            return
        self._warned_no_reference = True
        logger.warning(
            "rewardpipe: reward %r reads `reference` but the batch has no reference column (one of %s); "
            "its components get None. Columns given: %s",
            self.reward.name,
            ", ".join(REFERENCE_COLUMNS),
            ", ".join(sorted(key.columns)) or "none",
        )

    def _score_columns(self, key: BatchKey, fingerprint: Any) -> ScoredBatch:
        if self.reward.needs_execution:  # code to run: the single-turn scorer batches it through the sandbox
            return self._score_samples(key, fingerprint)
        inputs = completion_inputs(key, self.reward.reads_input("reference"))
        # cast: a CompletionInput offers ScoringInput's attributes (duck-typed, built lazily), not its class
        scores = self.reward.score_columns(cast("list[ScoringInput]", inputs))
        # The reward's scores are bounded (rewardpipe.models.checked_score): a value that is not finite, or an
        # aggregate beyond ±MAX_SCORE_MAGNITUDE, is the non_finite_score it has always been here; an error sample's
        # columns are None already.
        errors: list[str | None] = [None if e is None else _row_kind(e) for e in scores.errors]
        names = scores.names
        self.batches_scored += 1
        batch = ScoredBatch(fingerprint, None, errors, columns=dict(zip(names, scores.values, strict=True)))
        batch.error_messages = [None if e is None else e.message for e in scores.errors]
        return batch

    def _score_samples(self, key: BatchKey, fingerprint: Any) -> ScoredBatch:
        samples = _samples(key.prompts, key.completions, key.columns)
        results = score_samples(samples, self.reward, executor=self.executor)
        values, errors = [], []
        for result in results:
            rewards, metrics = nova_fields(result)  # components and flags apart, whatever their names
            failed = bool(metrics.get("reward_error"))
            values.append({c: None if failed else rewards.get(c) for c in self.reward.component_names})
            kind = next((name[len("error_") :] for name in metrics if name.startswith("error_")), "unscored")
            errors.append(kind if failed else None)
        self.batches_scored += 1
        return ScoredBatch(fingerprint, values, errors)

    def values(
        self, component: str, prompts: Sequence[Any], completions: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> list[float | None]:
        payload, fingerprint = self.read_batch(prompts, completions, kwargs)
        batch = self.current
        if batch is None or batch.fingerprint != fingerprint or component in batch.served:
            if batch is not None and batch.served != set(self.reward.component_names):
                self.incomplete_batches += 1
                logger.warning(
                    "rewardpipe: only %s of the components %s were asked for a batch; pass every function of "
                    "reward_funcs to GRPOTrainer or the within-group monitor cannot run",
                    sorted(batch.served),
                    self.reward.component_names,
                )
            batch = self.current = self._score(payload, fingerprint, kwargs)
        batch.served.add(component)
        out = batch.column(component)
        if batch.served == set(self.reward.component_names) and self.on_complete is not None:
            self.on_complete(batch, kwargs)
        return out

    def functions(self) -> list[RewardFn]:
        def component_fn(name: str) -> RewardFn:
            def fn(prompts, completions, **kwargs) -> list:
                return self.values(name, prompts, completions, kwargs)

            fn.__name__ = f"{self.reward.name}_{name}"  # TRL names its logged columns after the function
            fn.rewardpipe_component = name  # type: ignore[attr-defined]
            return fn

        return [component_fn(name) for name in self.reward.component_names]


def reward_functions(
    reward_name: str | Reward = "gsm8k", weights: Mapping[str, float] | None = None, executor: Any = None
) -> tuple[list[RewardFn], list[float]]:
    """``(reward_funcs, reward_weights)`` for ``GRPOTrainer``: one function per component of the reward.

    The batch is scored once (the first function called for a batch scores it, the others read the
    result), so code is executed once per completion however many components there are.
    """
    reward = resolve_reward(reward_name, weights)
    warn_if_episode_reward(reward)
    return BatchScorer(reward, executor).functions(), [c.weight for c in reward.components]


def warn_if_episode_reward(reward: Reward) -> None:
    """Warn when a reward given for single-turn completions reads ``state``, an environment's episode: a completion
    has none (None), so each component reading it fails on every completion and TRL trains on no reward at all, with
    nothing said until the callback's error alarm (``rewardpipe score --reward`` warns the same way). Episodes are
    played by ``EpisodeRollout``."""
    readers = [c.name for c in reward.components if "state" in c.inputs]
    if readers:
        logger.warning(
            "rewardpipe: reward %r reads `state`, an environment's episode (its component(s) %s), which a single-turn "
            "completion does not have (None): play episodes with EpisodeRollout(tasks, env=...) as rollout_func and "
            "RewardPipeCallback(episodes=...)",
            reward.name,
            ", ".join(readers),
        )


# --------------------------------------------------------------------------------------------------
# Within-group monitoring


def weighted_aggregate(components: Mapping[str, float | None], weights: Mapping[str, float]) -> float | None:
    """The reward TRL trains on (``sum_then_normalize``): Σ weight × value over the components that have a
    value (TRL's ``nansum``), ``None`` when none has (TRL drops such a completion as unscorable)."""
    present = [(name, value) for name, value in components.items() if value is not None]
    if not present:
        return None
    return sum(weights.get(name, 1.0) * value for name, value in present)


def batch_records(
    component_values: Mapping[str, Sequence[float | None]],
    group_size: int,
    *,
    weights: Mapping[str, float] | None = None,
    step: int = 0,
    run_id: str = "trl",
    errors: Sequence[str | None] | None = None,
    metrics: Mapping[str, Any] | None = None,
    details: Sequence[Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Records (``rewardpipe.models.Record`` shape) for one batch of ``group_size`` adjacent completions per
    prompt, in the order TRL gathers them. ``weights`` default to 1.0 each, which is what TRL uses when
    ``reward_weights`` is not set. ``details`` (one mapping per completion) may name the ``task_id`` and add
    ``metrics`` of each record."""
    if group_size < 1:
        raise ValueError("group_size must be at least 1")
    lengths = {len(values) for values in component_values.values()}
    if len(lengths) > 1:
        raise ValueError(f"every component needs one value per completion; got lengths {sorted(lengths)}")
    count = lengths.pop() if lengths else 0
    if count % group_size:
        raise ValueError(f"{count} completions do not split into groups of {group_size}")
    weights = {name: float((weights or {}).get(name, 1.0)) for name in component_values}
    # One task per group (a GRPO group is one prompt; the monitor refuses a group of several tasks): a completion
    # whose details name no task takes its group's, the first one named there, else the prompt's position.
    group_tasks: dict[int, str] = {}
    for index, detail in enumerate(details or []):
        if index < count and detail.get("task_id"):
            group_tasks.setdefault(index // group_size, str(detail["task_id"]))
    records = []
    for index in range(count):
        components = {name: values[index] for name, values in component_values.items()}
        kind = errors[index] if errors is not None else None
        failed = kind is not None or all(value is None for value in components.values())
        detail = details[index] if details is not None and index < len(details) else {}
        message = detail.get(ERROR_MESSAGE) or "no component could be computed"
        records.append(
            {
                "run_id": run_id,
                "step": step,
                "group_id": f"g{index // group_size}",
                "rollout_id": f"c{index}",
                "task_id": str(
                    detail.get("task_id") or group_tasks.get(index // group_size) or f"p{index // group_size}"
                ),
                "status": "error" if failed else "scored",
                "error": {"kind": kind or "unscored", "message": message} if failed else None,
                "components": components,
                "weights": weights,
                "aggregate": None if failed else weighted_aggregate(components, weights),
                "metrics": {**dict(metrics or {}), **dict(detail.get("metrics") or {})},
            }
        )
    return records


def monitor_batch(
    component_values: Mapping[str, Sequence[float | None]],
    group_size: int,
    step: int = 0,
    thresholds: Any = None,
    previous_state: Any = None,
    weights: Mapping[str, float] | None = None,
    history: Any = None,
):
    """Within-group verdicts for one TRL batch (``num_generations`` adjacent completions per prompt).

    ``component_values`` maps a component to one value per completion, ``None`` for an unscorable one;
    a completion whose values are all ``None`` counts as an error record. ``weights`` must be the weights TRL
    trains with (``GRPOConfig.reward_weights``; 1.0 each when unset), or the aggregate's verdict describes a
    reward nobody trains on. Returns a ``MonitorResult``; pass its ``state`` back as ``previous_state`` on the
    next step to keep the alarm hysteresis, and the same ``history``
    (:class:`rewardpipe.monitoring.pooling.StepHistory`) every step so a batch with fewer than ``min_groups``
    groups is judged together with the batches after it (without one, such a batch never gets a verdict).
    """
    from rewardpipe.monitoring import monitor_records

    records = batch_records(component_values, group_size, weights=weights, step=step)
    return monitor_records(records, thresholds, previous_state, history)


def gather_across_processes(rows: list[Any]) -> list[Any]:
    """Every process's rows, in process order (how TRL gathers rewards), so a group split across processes
    is judged whole. A single process returns its rows unchanged."""
    try:
        from accelerate import PartialState
        from accelerate.utils import gather_object
    except ImportError:
        return rows
    if PartialState().num_processes <= 1:
        return rows
    return list(gather_object(rows))


def broadcast_from_main(value: Any) -> Any:
    """The main process's ``value`` on every process (``accelerate.utils.broadcast_object_list`` from process 0, a
    collective every process takes part in); a single process's own value."""
    try:
        from accelerate import PartialState
        from accelerate.utils import broadcast_object_list
    except ImportError:
        return value
    if PartialState().num_processes <= 1:
        return value
    box = [value]
    broadcast_object_list(box, from_process=0)
    return box[0]


def _row_kind(error: ErrorInfo) -> str:
    """The error kind a row gives for a sample the reward could not score: its own, except for a value that is no
    score, which the rows have always called ``non_finite_score`` (NaN, an infinity, an aggregate beyond the bound)
    or ``component_out_of_range`` (a finite component beyond it)."""
    if non_finite_error(error) or error.kind == "aggregate_out_of_range":
        return "non_finite_score"
    return error.kind


#: The key of a completion's details (gathered with its row) that carries its error's message, and the most of it kept.
ERROR_MESSAGE = "error_message"
ERROR_MESSAGE_CHARS = 2000
#: The key of a completion's details (gathered with its row) that carries its transcript (``messages`` and
#: ``verdict``), which the callback stores beside its record so an alarm's example rollouts can be opened. Bounded:
#: every process sends its rows to the main one, and the model's text may be any length.
TRANSCRIPT = "transcript"
TRANSCRIPT_MESSAGE_CHARS = TRAINER_TRANSCRIPT_MESSAGE_CHARS
TRANSCRIPT_MESSAGES = TRAINER_TRANSCRIPT_MESSAGES
#: What a single-turn completion's transcript says of execution: the callback sees the components, not the sandbox's.
COMPLETION_VERDICT = {
    "status": "not_executed",
    "reason": "a TRL completion: the callback keeps no execution verdict (a code reward's result is in its components)",
}


def transcript_messages(messages: Iterable[Any]) -> list[dict[str, str]]:
    """``messages`` (chat dicts or Messages: a prompt's, a completion's, an episode's) as a stored transcript's,
    bounded: each message's text cut to ``TRANSCRIPT_MESSAGE_CHARS``, and the first one (the task, or its
    instructions) with the last ``TRANSCRIPT_MESSAGES - 1`` kept. Each is plain data (a role and a text): the model's
    text is never read as anything else, and a message that has no chat role or no text is left out (evidence, never
    the batch's failure)."""
    kept: list[dict[str, str]] = []
    for message in messages:
        get = message.get if isinstance(message, Mapping) else lambda name, m=message: getattr(m, name, None)
        role = chat_role(get("role"))
        try:
            text = content_to_text(get("content"))
        except ValueError:
            continue
        if role is not None:
            kept.append({"role": role, "content": cut_text(text, TRANSCRIPT_MESSAGE_CHARS)})
    return first_and_last(kept, TRANSCRIPT_MESSAGES)


def completion_transcript(prompt: Any, completion: Any) -> dict[str, Any]:
    """A single-turn completion's transcript: its prompt (a conversational one as its messages) and its answer."""
    return {
        "messages": transcript_messages([*_as_messages(prompt, "user"), *_as_messages(completion, "assistant")]),
        "verdict": COMPLETION_VERDICT,
    }


def _clean_transcript(given: Any) -> dict[str, Any] | None:
    """A gathered row's transcript as the store may take it (bounded again: a rank's row is not trusted)."""
    if not isinstance(given, Mapping) or not isinstance(given.get("messages"), list):
        return None
    verdict: Mapping[str, Any] = given["verdict"] if isinstance(given.get("verdict"), Mapping) else {}
    clean = {k: verdict[k][:ERROR_MESSAGE_CHARS] for k in ("status", "reason") if isinstance(verdict.get(k), str)}
    return {
        "messages": transcript_messages(
            m for m in given["messages"][: TRANSCRIPT_MESSAGES * 2] if isinstance(m, Mapping)
        ),
        "verdict": {**COMPLETION_VERDICT, **clean},
    }


def _clean_row(row: Any, names: Sequence[str]) -> tuple[dict[str, float | None], str | None, dict[str, Any]]:
    """One gathered row ``(values, error kind, details)`` as the monitor may read it. Rows come from every
    process: one a rank sent malformed (not a triple, a value that is not a number, an error kind that is
    not text) is that completion's error record (``malformed_row``), a non-finite or out-of-range value is
    one too (as in the local scorer), so one bad row never costs the batch its verdict or its records."""
    empty: dict[str, float | None] = dict.fromkeys(names)
    if not isinstance(row, (tuple, list)) or len(row) != 3 or not isinstance(row[0], Mapping):
        return empty, "malformed_row", {}
    raw, kind, detail = row
    error: str | None = kind if kind is None or isinstance(kind, str) else "malformed_row"
    values: dict[str, float | None] = {}
    for name in names:
        value = raw.get(name)
        if value is None:
            values[name] = None
        elif not isinstance(value, (int, float)):
            error = error or "malformed_row"
        elif not -_LIMIT <= value <= _LIMIT:  # NaN fails both comparisons
            error = error or ("component_out_of_range" if math.isfinite(value) else "non_finite_score")
        else:
            values[name] = float(value)
    details: dict[str, Any] = {}
    if isinstance(detail, Mapping):
        if isinstance(detail.get("task_id"), (str, int)) and not isinstance(detail.get("task_id"), bool):
            details["task_id"] = detail["task_id"]
        if isinstance(detail.get("metrics"), Mapping):
            details["metrics"] = detail["metrics"]
        if error is not None and isinstance(detail.get(ERROR_MESSAGE), str):  # bounded: a rank's row is not trusted
            details[ERROR_MESSAGE] = detail[ERROR_MESSAGE][:ERROR_MESSAGE_CHARS]
        transcript = _clean_transcript(detail.get(TRANSCRIPT))
        if transcript is not None:
            details[TRANSCRIPT] = transcript
    return (empty if error is not None else values), error, details


#: The most different things (warning kinds, reasons) the callback says once each about one topic.
SAID_ONCE_LIMIT = 10


@dataclass
class BatchJudgement:
    """The main process's judgement of one batch, which every process takes (sent with accelerate's broadcast):
    the batch's step, its :class:`~rewardpipe.monitoring.StepReport`, the alarms it raised, the run warnings of
    the batch and the monitor state after it."""

    step: int
    report: Any
    alarms: list[Any]
    warnings: list[dict[str, str]]
    state: Any


class RewardPipeMonitor:
    """Per-component within-group monitoring for a TRL ``GRPOTrainer`` run.

    ``reward``: a registered reward name or a :class:`rewardpipe.rewards.Reward` (default ``gsm8k``, or the
    episodes' reward); ``weights`` override its component weights. ``episodes``: an
    :class:`~rewardpipe.integrations.trl_episodes.EpisodeRollout` handed to GRPOTrainer as ``rollout_func``;
    the reward functions then read the components of the multi-turn episodes it scored. Hand
    ``callback.reward_funcs`` and ``callback.reward_weights`` to GRPOTrainer and ``callback`` to its ``callbacks``. On
    every training batch (reward functions are not monitored during evaluation), once every component has been computed:

    * the batch of every process is gathered (``accelerate.utils.gather_object``, in process order, the
      order TRL gathers rewards in), so a group split across processes is judged whole; the main process judges
      it and every process takes its judgement (``accelerate.utils.broadcast_object_list``; only the main process
      reads a resumed run's store back), so every process logs the same metric names, which TRL's metric
      averaging requires (one collective per name), and holds the same alarms, reports, warnings and state;
    * the monitor runs with the weights the trainer really uses (``trainer.reward_weights``, read from the
      trainer the ``log_metric`` hook belongs to; the callback's own weights only if that is unavailable);
    * ``rewardpipe/<component>/zero_variance_group_fraction``, ``.../within_group_std`` and ``.../dead``
      (also for ``aggregate``) and ``rewardpipe/error_rate`` go to TRL's ``log_metric``;
    * a component with fewer than ``min_groups`` groups in a batch (2 a batch with
      ``per_device_train_batch_size=8, num_generations=4``) is judged over consecutive batches together
      (:mod:`rewardpipe.monitoring.pooling`): its verdict and alarm say "pooled over steps a-b", and
      ``rewardpipe/<component>/pooled_batches`` logs how many batches it took;
    * alarms are appended to ``callback.alarms`` and logged as warnings; with ``store`` (a directory,
      ``s3://bucket/prefix`` or a Store) the main process writes the records, alarms and monitor state
      under ``runs/<run_id>/``, with ``step`` = the generation batch index (the trainer's ``global_step`` is
      each record's ``metrics.global_step``); a run resumed under the same ``run_id`` goes on after the
      steps and with the monitor state the store holds.

    ``ignore`` lists components that get statistics but never alarms (e.g. a rarely-fired penalty).
    The monitor's aggregate is the ``sum_then_normalize`` reward; with ``normalize_then_sum`` (each component is
    normalized inside its group there), or reward functions of your own beside rewardpipe's, it is not the reward
    trained on and raises no alarm (a warning says so once): read the per-component verdicts.
    """

    def __init__(
        self,
        reward: str | Reward | None = None,
        weights: Mapping[str, float] | None = None,
        store: Any = None,
        ignore: Iterable[str] = (),
        *,
        episodes: Any = None,
        thresholds: Any = None,
        run_id: str | None = None,
        executor: Any = None,
        gather: Callable[[list[Any]], list[Any]] | None = None,
        broadcast: Callable[[Any], Any] | None = None,
    ) -> None:
        from rewardpipe.monitoring import Thresholds
        from rewardpipe.monitoring.pooling import StepHistory

        if reward is None:
            reward = episodes.reward if episodes is not None else "gsm8k"
        self.reward = resolve_reward(reward, weights)
        self._reward_reference = reward if isinstance(reward, str) else None  # (the manifest's, as run's)
        base = thresholds or Thresholds()
        ignored = tuple(dict.fromkeys([*base.ignore, *ignore]))
        unknown = set(ignored) - set(self.reward.component_names) - {"aggregate", "errors"}
        if unknown:
            raise ValueError(
                f"ignore names unknown component(s) {sorted(unknown)}; known: {self.reward.component_names}"
            )
        # Each component is judged by its own declared range and role (explicit range_overrides win).
        self.thresholds = base.for_reward(self.reward).model_copy(update={"ignore": ignored})
        if run_id is not None and run_id != "":
            from rewardpipe.store import run_id_problem

            problem = run_id_problem(run_id, "run_id")  # the rule of --run-id: refused now, not after hours
            if problem is not None:
                raise ValueError(problem)
        # The default is unique to this callback: two trainings started in the same second against one store (a
        # sweep) shared "trl-<that second>", the second going on in the first one's run. Resuming takes a run_id.
        self.run_id = run_id or f"trl-{datetime.now(UTC):%Y%m%dT%H%M%S}-{secrets.token_hex(3)}"
        self.store = self._open_store(store)
        self.gather = gather or gather_across_processes
        self.broadcast = broadcast or broadcast_from_main
        if episodes is not None:  # multi-turn: the components come scored from the EpisodeRollout
            from rewardpipe.integrations.trl_episodes import EpisodeScorer

            self.scorer: BatchScorer = EpisodeScorer(self.reward, episodes=episodes, on_complete=self._on_batch)
        else:
            warn_if_episode_reward(self.reward)
            self.scorer = BatchScorer(self.reward, executor, on_complete=self._on_batch)
        # Stored, each record has its transcript beside it: an alarm's example rollouts can be opened (show, report).
        # (a store of your own without put_transcript takes the records alone)
        self.scorer.keeps_transcripts = callable(getattr(self.store, "put_transcript", None))
        self.reward_funcs = self.scorer.functions()
        self.reward_weights = [c.weight for c in self.reward.components]
        self.alarms: list[Any] = []
        # The monitor's warnings about the run (llm_user_replaced, values_out_of_range...), each batch's; each kind is
        # logged once, as `rewardpipe monitor` says it once.
        self.warnings: list[dict[str, Any]] = []
        self.reports: list[Any] = []  # one StepReport per monitored batch
        self.state: Any = None  # the monitor's hysteresis state
        # The last batches, so a component short of groups in small batches is judged over several of them
        # (rewardpipe.monitoring.pooling: 2 groups a batch never reach min_groups on their own).
        self.history = StepHistory()
        self.batches = 0
        self.failures: list[str] = []  # monitor failures (logged; training goes on)
        self.group_size: int | None = None
        self._said: dict[str, set[str]] = {}  # what was logged once, by topic (_first_time)
        self._resumed = self.store is None  # the store's own steps and state of this run not read yet
        # The run's manifest and a marker per step stored whole (the main process's), so monitor and report never
        # judge a step the store stopped taking half-way as the whole batch.
        self.progress: StoredProgress | None = None
        if self.store is not None:
            self.progress = StoredProgress(self.store, self.run_id, "trl")
        # (step, global step) of the stored run's last batch, read on resuming: a trainer resumed from a checkpoint
        # before it is said to have rolled back (_rolled_back)
        self._stored_global_step: tuple[int, int] | None = None

    @staticmethod
    def _open_store(store: Any) -> Any:
        if store is None:
            return None
        if isinstance(store, (str, os.PathLike)):
            from rewardpipe.store import open_store

            return open_store(store)
        return store

    # -- transformers.TrainerCallback events ---------------------------------------------------------

    def on_train_begin(self, args, state, control, **kwargs):  # noqa: ARG002 - TrainerCallback's signature
        self.group_size = getattr(args, "num_generations", None)
        self._keep_transcripts_as_the_main_process()
        return control

    def on_train_end(self, args, state, control, **kwargs):  # noqa: ARG002 - TrainerCallback's signature
        """The main process marks the stored run finished (its manifest's ``finished_at``) when every step of it was
        stored whole, as after each such step (again here: the last step's mark may have failed). A run with a step
        cut short stays in progress, that step named unfinished by ``monitor`` and ``report``."""
        if self.progress is not None and getattr(state, "is_world_process_zero", True):
            failed = self.progress.finish()
            if failed is not None:
                self._not_stored(failed)
        return control

    def _keep_transcripts_as_the_main_process(self) -> None:
        """Every process keeps its completions' transcripts when the main process stores them (its choice, sent
        to the others: a collective every process's ``on_train_begin`` takes part in). The main process stores
        every process's rows, so the store it was given is what counts: given to the main process only (``store=...
        if RANK == 0 else None``), the other processes kept no transcripts, their completions were stored without
        one and the alarms named examples that did not exist. A choice that does not arrive keeps them (bounded
        text sent for nothing, rather than examples that cannot be opened)."""
        try:
            keeps = self.broadcast(self.scorer.keeps_transcripts)
        except Exception as exc:  # monitoring never stops a run
            self.failures.append(f"transcripts: {type(exc).__name__}: {exc}")
            logger.exception("rewardpipe: the main process's choice to store transcripts did not arrive")
            keeps = True
        self.scorer.keeps_transcripts = bool(keeps)

    # -- the monitor -----------------------------------------------------------------------------------

    def _trainer_view(self, trainer: Any) -> tuple[dict[str, float], int | None, bool, bool]:
        """(weights, group size, is training, is main process) as the trainer itself has them."""
        weights = dict(self.reward.weights)
        group_size, training, main = self.group_size, True, True
        if trainer is None:
            return weights, group_size, training, main
        funcs = list(getattr(trainer, "reward_funcs", []) or [])
        trl_weights = getattr(trainer, "reward_weights", None)
        if trl_weights is not None and len(funcs) == len(trl_weights):
            # the attribute reward_functions() sets on each function it builds (mypy sees a plain Callable)
            mine = {id(fn): fn.rewardpipe_component for fn in self.reward_funcs}  # type: ignore[attr-defined]
            for fn, weight in zip(
                funcs, trl_weights.tolist() if hasattr(trl_weights, "tolist") else trl_weights, strict=True
            ):
                if id(fn) in mine:
                    weights[mine[id(fn)]] = float(weight)
        model = getattr(trainer, "model", None)
        training = bool(getattr(model, "training", True))
        group_size = getattr(trainer, "num_generations", None) or group_size
        accelerator = getattr(trainer, "accelerator", None)
        main = bool(getattr(accelerator, "is_main_process", True))
        return weights, group_size, training, main

    def _on_batch(self, batch: ScoredBatch, kwargs: Mapping[str, Any]) -> None:
        # Everything here is monitoring, the cross-process gather and the trainer's attributes included: a
        # gather that raises (a rank gone, a timeout), a rank's malformed rows or a store that fails is a
        # logged failure in ``self.failures``, never an exception out of a reward function (TRL would stop).
        # The gather is a collective: a process that failed before it still takes part (one malformed row per
        # completion: its error records), or every other process would wait in it for ever.
        problem: Exception | None = None
        apart: str | None = None
        try:
            log_metric = kwargs.get("log_metric")
            trainer = getattr(log_metric, "__self__", None)
            weights, group_size, training, main = self._trainer_view(trainer)
            apart = self._aggregate_apart(trainer)
        except Exception as exc:  # noqa: BLE001 - reported after the gather
            problem, (weights, group_size, training, main) = (
                exc,
                (dict(self.reward.weights), self.group_size, True, True),
            )
        if not training:
            return
        try:
            values = batch.rows()
            details = batch.details or [{} for _ in values]
            local: list[Any] = list(zip(values, batch.errors, details, strict=False))
        except Exception as exc:  # noqa: BLE001 - reported after the gather
            problem, local = problem or exc, [None] * len(batch.errors)
        judged: BatchJudgement | None = None
        try:
            gathered = self.gather(local)
            if problem is not None:
                raise problem
            if not group_size:
                raise ValueError(
                    "RewardPipeCallback does not know the group size: add it to GRPOTrainer(callbacks=[...])"
                )
            if main:  # the others take its judgement (_take_judgement): they cannot read a resumed run's store
                rows = [_clean_row(row, self.reward.component_names) for row in gathered]
                judged = self._monitor(rows, weights, group_size, kwargs, apart)
        except Exception as exc:  # monitoring must never stop a training run; it says so loudly
            self.failures.append(f"{type(exc).__name__}: {exc}")
            logger.exception("rewardpipe: the within-group monitor failed on batch %s", self.batches)
        self._take_judgement(judged, kwargs.get("log_metric"))

    def _take_judgement(self, judged: BatchJudgement | None, log_metric: Any) -> None:
        """The main process's judgement of the batch (its report, alarms, warnings, monitor state and step), taken
        and logged by every process. Only the main process judges: it alone reads a resumed run's store back (its
        steps, its monitor state, its open pool of small batches), so another process judging the same rows from
        its own state raised other alarms (an alarm open at the checkpoint raised again, at other step numbers) and
        logged other metric names. TRL averages each logged metric over the processes with one collective per name,
        in name order: different names mismatch those collectives (values under the wrong name, or a wait for
        ever). So every process logs the main one's figures (a collective each takes part in, whatever its own part
        did), or nothing when it has none."""
        try:
            shared = self.broadcast(judged)
        except Exception as exc:  # monitoring never stops a run
            self.failures.append(f"figures: {type(exc).__name__}: {exc}")
            logger.exception("rewardpipe: the main process's figures of batch %s did not arrive", self.batches)
            shared, log_metric = judged, None  # the main process keeps what it judged (and stored); nothing logged
        if not isinstance(shared, BatchJudgement):
            self.batches += 1
            return
        self.batches = shared.step + 1
        self.state = shared.state
        self.reports.append(shared.report)
        self.alarms.extend(shared.alarms)
        for alarm in shared.alarms:
            logger.warning("rewardpipe alarm at batch %s: %s", alarm.step, alarm.message)
        for warning in shared.warnings:
            self.warnings.append({**warning, "batch": shared.step})
            if self._first_time("warning", warning["kind"]):
                logger.warning("rewardpipe warning at batch %s: %s", shared.step, warning["message"])
        if callable(log_metric):
            for name, value in self.metrics(shared.report).items():
                log_metric(name, value)

    def _first_time(self, topic: str, what: str) -> bool:
        """Whether ``what`` (a warning's kind, a reason) is said for the first time about ``topic``: each is said
        once, and at most SAID_ONCE_LIMIT of one topic (a reason quoting the trainer's function names could
        otherwise differ, and be said, every batch)."""
        said = self._said.setdefault(topic, set())
        if what in said or len(said) >= SAID_ONCE_LIMIT:
            return False
        said.add(what)
        return True

    def _aggregate_apart(self, trainer: Any) -> str | None:
        """Why the monitor's aggregate (the weighted sum of rewardpipe's components) is not the reward the trainer
        trains on, or None when it is: reward functions of your own beside rewardpipe's (TRL sums them in, where the
        monitor cannot see them), or ``multi_objective_aggregation="normalize_then_sum"`` (each component is
        normalized inside its group before the sum). Each reason is said once, in a warning."""
        mine = {id(fn) for fn in self.reward_funcs}
        others = [
            str(getattr(fn, "__name__", type(fn).__name__))
            for fn in list(getattr(trainer, "reward_funcs", None) or [])
            if id(fn) not in mine
        ]
        reason = None
        if others:
            reason = f"the trainer also trains on reward functions that are not rewardpipe's ({', '.join(others[:10])})"
        elif getattr(trainer, "multi_objective_aggregation", None) == "normalize_then_sum":
            reason = "the trainer normalizes each component inside its group before the sum (normalize_then_sum)"
        if reason is not None and self._first_time("aggregate_apart", reason):
            logger.warning(
                "rewardpipe: %s; the monitor's aggregate, the weighted sum of rewardpipe's components, is not the "
                "reward trained on, so it raises no alarm (each component is judged as usual)",
                reason,
            )
        return reason

    def _monitor(
        self,
        rows: list,
        weights: dict[str, float],
        group_size: int,
        kwargs: Mapping[str, Any],
        apart: str | None = None,
    ) -> BatchJudgement:
        """Judge the gathered batch and store it (the main process's part): what every process then takes
        (:meth:`_take_judgement`). With ``apart`` (why the aggregate is not the reward trained on:
        :meth:`_aggregate_apart`) the aggregate raises no alarm."""
        from rewardpipe.monitoring import monitor_records

        thresholds = self.thresholds
        if apart is not None and "aggregate" not in thresholds.ignore:
            thresholds = thresholds.model_copy(update={"ignore": (*thresholds.ignore, "aggregate")})

        trainer_state = kwargs.get("trainer_state")
        names = self.reward.component_names
        if not self._resumed:
            self._resume()
        records = batch_records(
            {name: [row[0][name] for row in rows] for name in names},
            group_size,
            weights=weights,
            step=self.batches,
            run_id=self.run_id,
            errors=[row[1] for row in rows],
            metrics={"global_step": int(getattr(trainer_state, "global_step", 0) or 0)},
            details=[row[2] for row in rows],
        )
        batch = self._storable(records)
        result = monitor_records(batch.judged(), thresholds, self.state, self.history)
        if self.store is not None:
            if self._resumed:
                self._persist(batch, result, [row[2].get(TRANSCRIPT) for row in rows])
            else:  # the stored run could not be read: writing would replace its steps and state
                if self.progress is not None:
                    self.progress.incomplete = True
                self._not_stored(f"{len(records)} record(s): the run's stored steps could not be read")
        warnings = list(result.warnings)
        rolled_back = self._rolled_back(int(getattr(trainer_state, "global_step", 0) or 0))
        if rolled_back is not None:
            warnings.append({"kind": "resumed_before_stored_steps", "message": rolled_back})
        return BatchJudgement(self.batches, result.step(self.batches), result.alarms, warnings, result.state)

    def _storable(self, records: list[dict[str, Any]]) -> StorableBatch:
        """The batch's records validated once, for the judgement and the store: each one that does not validate (a
        rank's metrics that are no metric values, a task id with a lone surrogate) replaced by its error record, and
        said: one bad sample is counted as an error, in the judgement and in the store, and never costs its step (a
        step is whole when every rollout is accounted for)."""
        batch = StorableBatch.of(records)
        for line in batch.replaced:
            self.failures.append(line)
            logger.warning("rewardpipe: batch %s: %s", self.batches, line)
        return batch

    def _rolled_back(self, global_step: int) -> str | None:
        """What to say, once, when the trainer resumed from a checkpoint before the last batch the stored run holds
        (its global step smaller than that batch's): the stored batches since were trained by a run rolled back since,
        and the trainer's global steps go back in the records (the callback's steps go on)."""
        stored, self._stored_global_step = self._stored_global_step, None
        if stored is None or global_step >= stored[1]:
            return None
        return (
            f"the trainer resumed at global step {global_step}, before the stored run's last batch (step {stored[0]}, "
            f"global step {stored[1]}): the stored batches of the global steps since {global_step} were trained by "
            f"a run since rolled back to its checkpoint; they stay stored and this run goes on at step "
            f"{self.batches} (each record's metrics.global_step says which)"
        )

    def _resume(self) -> None:
        """Go on after the steps this run already has in the store (a run resumed from a checkpoint under its
        ``run_id``): step numbers continue after the last stored one and the saved monitor state (its
        hysteresis, its checked steps, its open pools of small batches, whose stored batches are read back) is
        carried on, so nothing stored is written over. A store that cannot be read is reported and tried again at
        the next batch; this batch is not stored."""
        from rewardpipe.monitoring.state import load_state

        listing = getattr(self.store, "list_steps", None)  # a store of your own may only write: nothing to read
        try:
            steps = listing(self.run_id) if callable(listing) else []
            state, bad = load_state(self.store, self.run_id) if hasattr(self.store, "get_bytes") else (None, None)
        except Exception as exc:  # noqa: BLE001 - reported, training goes on
            self.failures.append(f"resume: {type(exc).__name__}: {exc}")
            logger.warning("rewardpipe: the stored steps of run %s could not be read: %s", self.run_id, exc)
            return
        if bad is not None:
            self.failures.append(f"resume: {bad.reason}")
            logger.warning("rewardpipe: %s: %s", bad.key, bad.reason)
        last = max([*steps, -1 if state is None or state.last_step is None else state.last_step])
        if last >= self.batches:
            logger.info(
                "rewardpipe: run %s has steps up to %s in the store; going on at %s", self.run_id, last, last + 1
            )
            self.batches = last + 1
            self.state = state or self.state
            self._stored_global_step = self._last_global_step(steps)
            if steps and callable(getattr(self.store, "iter_records", None)):
                # The saved state may hold a pool of small batches still open (``pooled_since``): its batches
                # are read back from the store when it needs them, as monitor_step does, or the pool started over.
                from rewardpipe.monitoring.pooling import StepHistory, stored_step

                stored = sorted(set(steps))
                self.history = StepHistory(load=stored_step(self.store, self.run_id), listing=lambda: stored)
        self._resumed = True
        if self.progress is not None:
            failed = self.progress.start(
                reward=self.reward,
                configuration={"num_generations": self.group_size},
                stored_steps=bool(steps),
                reward_reference=self._reward_reference,
            )
            if failed is not None:
                self._not_stored(failed)

    def _last_global_step(self, steps: Sequence[int]) -> tuple[int, int] | None:
        """``(step, global step)`` of the last batch the stored run holds (one record of it read), or None."""
        reader = getattr(self.store, "iter_records", None)
        if not steps or not callable(reader):
            return None
        try:
            record = next(iter(reader(self.run_id, max(steps), on_bad=lambda _bad: None)), None)
        except Exception:  # noqa: BLE001 - said nothing of: the rollback warning is a courtesy, never a failure
            return None
        value = (record.metrics or {}).get("global_step") if record is not None else None
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        return max(steps), value

    @staticmethod
    def metrics(report: Any) -> dict[str, float]:
        """The scalars logged for one batch; statistics that need more groups than the batch has are left
        out rather than logged as NaN, and so is ``dead`` for a component the batch gave no verdict on
        (``insufficient_data``: a small batch waiting for its pool): a 0.0 there said "alive" of a component
        dead in every batch, whose curve read 0, 0, 0, 1 over each pool of four small batches."""
        out: dict[str, float] = {"rewardpipe/error_rate": float(report.error_rate)}
        for name, stats in [*report.components.items(), ("aggregate", report.aggregate)]:
            if stats.zero_variance_group_fraction is not None:
                out[f"rewardpipe/{name}/zero_variance_group_fraction"] = float(stats.zero_variance_group_fraction)
            if stats.within_group_std_mean is not None and math.isfinite(stats.within_group_std_mean):
                out[f"rewardpipe/{name}/within_group_std"] = float(stats.within_group_std_mean)
            if stats.verdict != "insufficient_data":
                out[f"rewardpipe/{name}/dead"] = 1.0 if stats.verdict == "dead" else 0.0
            if stats.pooled_steps:  # judged over several small batches: how many
                out[f"rewardpipe/{name}/pooled_batches"] = float(len(stats.pooled_steps))
        return out

    def _persist(self, batch: StorableBatch, result: Any, transcripts: Sequence[dict[str, Any] | None] = ()) -> None:
        from rewardpipe.monitoring import StoreAlarmSink, dispatch, state_key
        from rewardpipe.transcripts import RolloutTranscript

        # A record that does not validate is stored as its error record (one with no ids to store it under loses
        # itself only, and its step is not whole). A store that refuses a write (throttled, access
        # denied, bucket gone) ends this batch's record writes (each further one would wait out the store's
        # retries: monitoring must not stall training), but the alarms and the monitor state are still tried.
        lost: list[str] = []
        progress = self.progress
        reopened = progress.before_step() if progress is not None else None
        if reopened is not None:
            lost.append(reopened)
        whole = True  # every record of the step stored: it is marked finished
        records = batch.raw
        for index, (raw, record, problem) in enumerate(zip(records, batch.records, batch.problems, strict=True)):
            if record is None:
                whole = False
                lost.append(f"record {raw.get('rollout_id')}: {problem}")
                continue
            given = transcripts[index] if index < len(transcripts) else None
            try:  # a transcript no store takes (a message no Message is) loses itself only, never its record
                transcript = None if given is None else RolloutTranscript.model_validate({**raw, **given})
            except ValueError as exc:
                transcript = None
                lost.append(f"transcript {raw.get('rollout_id')}: {type(exc).__name__}: {exc}")
            try:
                self.store.put_record(record)
                if transcript is not None:
                    self.store.put_transcript(transcript)
            except Exception as exc:  # noqa: BLE001 - reported below, training goes on
                whole = False
                lost.append(
                    f"{len(records) - index} record(s) from {raw.get('rollout_id')} on: {type(exc).__name__}: {exc}"
                )
                break
        marked = progress.step_stored(self.batches, len(records), whole) if progress is not None else None
        if marked is not None:
            lost.append(marked)
        for failure in dispatch(result.alarms, [StoreAlarmSink(self.store, self.run_id)]):
            lost.append(f"alarm: {failure.error}")
        try:
            self.store.put_json(state_key(self.run_id), result.state.to_dict())
        except Exception as exc:  # noqa: BLE001 - a refused state write is reported, training goes on
            lost.append(f"monitor state: {type(exc).__name__}: {exc}")
        for message in lost:
            self._not_stored(message)

    def _not_stored(self, message: str) -> None:
        self.failures.append(f"not stored: {message}")
        logger.warning("rewardpipe: not stored at batch %s: %s", self.batches, message)


def _callback_class() -> type:
    """``RewardPipeMonitor`` as a real ``transformers.TrainerCallback`` (the Trainer calls every event method
    on its callbacks). Built on first use: importing transformers takes seconds, and the reward functions
    above do not need it."""
    try:
        from transformers import TrainerCallback
    except ImportError:  # without the [trl] extra there is no Trainer to hand it to
        return RewardPipeMonitor

    class RewardPipeCallback(RewardPipeMonitor, TrainerCallback):
        __doc__ = RewardPipeMonitor.__doc__

    return RewardPipeCallback


def __getattr__(name: str) -> Any:
    if name == "RewardPipeCallback":
        cls = globals()[name] = _callback_class()
        return cls
    if name == "EpisodeRollout":  # the multi-turn rollout_func (rewardpipe.integrations.trl_episodes)
        from rewardpipe.integrations.trl_episodes import EpisodeRollout

        return EpisodeRollout
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
