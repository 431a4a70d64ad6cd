"""Within-group monitoring of a verifiers run: :class:`GroupWatch`, fed by :func:`.verifiers.rubric` (``watch=``).

verifiers scores a GRPO group together (``Rubric.score_group``), so the rubric sees each group whole: its
components, the prompt and every completion. Given ``watch=GroupWatch(...)`` it hands every group to the watch
before settling the unscorable samples (one that could not be scored is an error record here, never the group's
mean it trains on). verifiers names no training step, so the watch counts groups: every ``groups_per_step`` groups
(set it to the prompts of one training batch) are judged as one step by rewardpipe's monitor
(:func:`rewardpipe.monitoring.monitor_records`, the one every other path uses: its verdicts, pooling of small steps,
hysteresis and causes); :meth:`GroupWatch.flush` judges the groups left at the end. An alarm is logged (logger
``rewardpipe.verifiers``) with its cause and an example rollout's completion, and kept in ``alarms``; the
transcripts of the latest steps are kept for :meth:`GroupWatch.transcript`. Each group's within-group figures
(:meth:`GroupWatch.group_metrics`, the ones TRL's callback logs) are put in its rollouts' metrics by the rubric, where
vf-eval and the trainers average them over a batch. A rollout verifiers scores alone (``score_rollout``) has no group
and is not watched.

verifiers (0.2.1, and 0.3.1's classic API) scores an evaluation (``env.evaluate``, ``vf-eval``, a trainer's periodic
eval) with the same ``Rubric.score_group`` as training, and nothing in the groups it hands over tells the two apart:
counted, an evaluation's groups would fill training steps and be judged as what the model trained on. Groups scored
inside :meth:`GroupWatch.evaluating` (a context: the evaluation's tasks inherit it) are counted apart
(``evaluation_groups``), never in a step; a group of another size than the run's first one (an evaluation outside
it most often asks another number of rollouts per example) is warned of once. An evaluation given a rubric of its
own without ``watch`` is never seen at all.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import PurePath
from typing import Any

from rewardpipe.integrations.progress import StorableBatch, StoredProgress
from rewardpipe.models import TRAINER_TRANSCRIPT_MESSAGE_CHARS, TRAINER_TRANSCRIPT_MESSAGES, cut_text, first_and_last
from rewardpipe.safe_text import printable

logger = logging.getLogger("rewardpipe.verifiers")

#: How many steps' transcripts a watch keeps for its alarms' examples.
KEPT_STEPS = 4
#: A kept conversation's bounds, as the TRL callback's transcripts: each message's text, and the first message with
#: the last ones. The model's text (a tool's output in it) may be any length, and a watch holds KEPT_STEPS steps of
#: every rollout's conversation, then stores them.
KEPT_MESSAGE_CHARS = TRAINER_TRANSCRIPT_MESSAGE_CHARS
KEPT_MESSAGES = TRAINER_TRANSCRIPT_MESSAGES
#: The watches (by id) whose groups scored in this context are an evaluation's (:meth:`GroupWatch.evaluating`): a
#: context variable, so an evaluation's asyncio tasks and ``asyncio.to_thread`` calls see it and the training's
#: tasks running beside it (created outside it) do not.
_EVALUATING: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar(
    "rewardpipe_verifiers_evaluating", default=frozenset()
)


def _value(value: Any) -> float | None:
    """A component's metric as the monitor reads it: a finite number, else None (NaN: the sample was unscorable)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer past a float's range (a reward function's own int)
        return None
    return number if math.isfinite(number) else None


def _population_std(values: Sequence[float]) -> float:
    """The population std of finite values (the monitor's within-group std); 0.0 where rounding makes it no number."""
    mean = math.fsum(values) / len(values)
    spread = math.sqrt(max(math.fsum((value - mean) ** 2 for value in values) / len(values), 0.0))
    return spread if math.isfinite(spread) else 0.0


def _bounded(conversation: Any) -> Any:
    """``conversation`` with each message's text cut to KEPT_MESSAGE_CHARS (a text part's too) and, past KEPT_MESSAGES
    messages, its first and last ones; anything that is no list of messages as it is (its transcript is refused
    when stored, and loses itself only)."""
    if not isinstance(conversation, list):
        return conversation
    return [_bounded_message(message) for message in first_and_last(conversation, KEPT_MESSAGES)]


def _bounded_message(message: Any) -> Any:
    if not isinstance(message, Mapping):
        return message
    content = message.get("content")
    if isinstance(content, str):
        content = cut_text(content, KEPT_MESSAGE_CHARS)
    elif isinstance(content, list):
        content = [
            {**part, "text": cut_text(part["text"], KEPT_MESSAGE_CHARS)}
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
            else part
            for part in content[:KEPT_MESSAGES]
        ]
    return {**message, "content": content}


class GroupWatch:
    """Per-component within-group verdicts of the groups a verifiers rubric scores.

    ``groups_per_step``: groups judged together as one step (a training batch's prompts); ``thresholds``: a
    :class:`rewardpipe.monitoring.Thresholds` (default the monitor's); ``run_id``: the records' run. Thread-safe
    (verifiers scores groups concurrently). After each step: ``reports`` (one ``StepReport`` per step),
    ``alarms`` (every alarm raised), ``state`` (the hysteresis carried from step to step).

    ``store`` (a directory, ``s3://bucket/prefix`` or a :class:`rewardpipe.store.Store`): each judged step's records,
    transcripts and alarms and the monitor state are written there, with the run's manifest and a marker per step
    stored whole (:mod:`rewardpipe.integrations.progress`), so ``rewardpipe monitor`` and ``rewardpipe report`` read
    the run and never judge a step the store took only part of; a run the store already holds goes on after its
    last step, with its saved state. A write the store refuses is logged and listed in ``failures``; scoring goes
    on."""

    def __init__(
        self, groups_per_step: int = 8, thresholds: Any = None, run_id: str = "verifiers", store: Any = None
    ) -> None:
        from rewardpipe.monitoring import Thresholds
        from rewardpipe.monitoring.pooling import StepHistory
        from rewardpipe.store import open_store, run_id_problem

        if not isinstance(groups_per_step, int) or isinstance(groups_per_step, bool) or groups_per_step < 1:
            raise ValueError(f"groups_per_step must be a whole number of at least 1, got {groups_per_step!r}")
        problem = run_id_problem(run_id)
        if problem is not None:
            raise ValueError(problem)
        self.groups_per_step = groups_per_step
        self.thresholds = thresholds if thresholds is not None else Thresholds()
        self.run_id = run_id
        self.step = 0  # the step the next group belongs to
        self.reports: list[Any] = []
        self.alarms: list[Any] = []
        self.failures: list[str] = []
        self.state: Any = None
        self.store = open_store(str(store)) if isinstance(store, (str, PurePath)) else store
        # The run's manifest and a marker per step stored whole: monitor and report never judge a step the store
        # stopped taking half-way as the whole step.
        self.progress: StoredProgress | None = None
        self._stored_before = False  # the store held steps of this run when the watch started (its manifest's say)
        if self.store is not None:
            self.progress = StoredProgress(self.store, run_id, "verifiers")
            self._stored_before = self._resume()
        self.history = StepHistory()
        self._pending: list[dict[str, Any]] = []
        self._groups = 0  # groups in _pending
        self._transcripts: dict[str, tuple[int, list[dict[str, Any]]]] = {}  # transcript key -> (step, messages)
        self._lock = threading.Lock()
        self.evaluation_groups = 0  # groups scored inside evaluating(): in no training step
        self._group_size: int | None = None  # the first training group's rollouts (a group of another size is said)
        self._size_warned = False

    @contextlib.contextmanager
    def evaluating(self) -> Iterator[None]:
        """Groups this watch is given inside the context (and in the asyncio tasks and threads started from it) are
        an evaluation's: counted in ``evaluation_groups``, never in a training step. verifiers gives the rubric
        nothing that tells an evaluation's groups from training ones, so wrap ``env.evaluate(...)`` (or give the
        evaluation a rubric without ``watch``)."""
        token = _EVALUATING.set(_EVALUATING.get() | {id(self)})
        try:
            yield
        finally:
            _EVALUATING.reset(token)

    def _is_evaluation(self, size: int) -> bool:
        """Whether a group of ``size`` rollouts is an evaluation's (inside :meth:`evaluating`); a training group of
        another size than the run's first is warned of once (an evaluation not wrapped, most likely). Under the
        lock."""
        if id(self) in _EVALUATING.get():
            self.evaluation_groups += 1
            return True
        if self._group_size is None:
            self._group_size = size
        elif size != self._group_size and not self._size_warned:
            self._size_warned = True
            logger.warning(
                "rewardpipe: a group of %s rollout(s) after groups of %s rollouts in run %s: verifiers does not tell "
                "an evaluation's groups from training ones, so this one is counted in training step %s; run "
                "evaluations inside `with watch.evaluating():` (or with a rubric without watch=) to keep them out",
                size,
                self._group_size,
                self.run_id,
                self.step,
            )
        return False

    def add_group(
        self,
        components: Sequence[Mapping[str, Any]],
        weights: Mapping[str, float],
        conversations: Sequence[list[dict[str, Any]]] | None = None,
    ) -> Any:
        """One group: each rollout's component values (a NaN or missing value: the rollout could not be scored,
        an error record), the weights, and each rollout's conversation (kept for the alarms' examples). Returns
        the ``StepReport`` when this group completed a step, else None."""
        from rewardpipe.store import transcript_key  # the runner's key: alarm examples point at it

        if not components:  # no rollout to judge: not a group (it would make an empty step)
            return None
        with self._lock:
            if self._is_evaluation(len(components)):
                return None
            group_id = f"g{self._groups}"
            step = self.step
            # the whole group is built before any of it is kept: a rollout that raised half-way left the rollouts
            # before it pending, and the next group was filed under the same group id
            records = [self._record(step, group_id, index, values, weights) for index, values in enumerate(components)]
            self._pending += records
            for index, record in enumerate(records):
                if conversations is not None and index < len(conversations):
                    key = transcript_key(self.run_id, step, group_id, record["rollout_id"])
                    self._transcripts[key] = (step, _bounded(conversations[index]))
            self._groups += 1
            if self._groups < self.groups_per_step:
                return None
            return self._judge()

    def _record(
        self, step: int, group_id: str, index: int, values: Any, weights: Mapping[str, float]
    ) -> dict[str, Any]:
        """One rollout's record: an error record when a component is missing or no finite number, or when the
        weighted sum is none (:func:`rewardpipe.models.checked_score`, as every record's score)."""
        from rewardpipe.models import checked_score

        weight_of = {name: float(weight) for name, weight in weights.items()}
        numbers = {name: _value(values.get(name)) if isinstance(values, Mapping) else None for name in weights}
        failed = any(number is None for number in numbers.values())
        error: dict[str, Any] | None = None
        aggregate = None
        if failed:
            error = {"kind": "unscorable", "message": "a component raised or could not compute"}
        else:
            total = sum(weight_of[name] * float(number or 0.0) for name, number in numbers.items())
            numbers, aggregate, checked = checked_score(numbers, weight_of, total, None)
            error = None if checked is None else checked.model_dump(exclude_none=True)
        return {
            "run_id": self.run_id,
            "step": step,
            "group_id": group_id,
            "rollout_id": f"{group_id}-r{index}",
            "task_id": group_id,
            "status": "scored" if error is None else "error",
            "error": error,
            "components": dict.fromkeys(weights) if failed else numbers,
            "weights": weight_of,
            "aggregate": aggregate,
        }

    def group_metrics(self, components: Sequence[Mapping[str, Any]], weights: Mapping[str, float]) -> dict[str, float]:
        """One group's within-group figures as verifiers rollout metrics (``state["metrics"]``, which vf-eval and
        the trainers average over a batch's rollouts), under the names TRL's callback logs:
        ``rewardpipe/<component>/within_group_std`` (the population std of the group's scored values) and
        ``rewardpipe/<component>/zero_variance_group_fraction`` (1.0 when the group gives GRPO nothing of it, by the
        monitor's own zero-variance rule), also for ``aggregate``. Every rollout of the group carries the group's
        figures, so their mean over a batch of equal groups is the batch's figure. A group with fewer than two
        scored rollouts compares nothing: 1.0 and a std of 0.0 (the monitor leaves such a group out of its figures;
        a rollout's metrics cannot be left out, and a NaN would make the batch's mean NaN). The step's verdict
        (``dead``) and alarms are not rollout metrics: a step is judged after its last group, when its rollouts'
        metrics are already set (``reports``, ``alarms`` and the log have them)."""
        from rewardpipe.monitoring.thresholds import varies

        records = [self._record(0, "g", index, values, weights) for index, values in enumerate(components)]
        scored = [record for record in records if record["status"] == "scored"]
        columns = {name: [float(record["components"][name]) for record in scored] for name in weights}
        columns["aggregate"] = [float(record["aggregate"]) for record in scored]
        epsilon = float(getattr(self.thresholds, "epsilon", 1e-6))
        figures: dict[str, float] = {}
        for name, values in columns.items():
            spread = _population_std(values) if len(values) >= 2 else 0.0
            alive = len(values) >= 2 and varies(values, epsilon, weights.get(name, 1.0))
            figures[f"rewardpipe/{name}/within_group_std"] = spread
            figures[f"rewardpipe/{name}/zero_variance_group_fraction"] = 0.0 if alive else 1.0
        return figures

    def flush(self) -> Any:
        """Judge the groups not yet judged (the end of a run) as a step; None when there are none. With a store, the
        run is marked finished when every step of it was stored whole (as after each such step)."""
        with self._lock:
            report = self._judge() if self._pending else None
            if self.progress is not None:
                self._note(self.progress.finish())
            return report

    def _note(self, failed: str | None) -> None:
        """A write of the run's manifest or step markers that failed: listed in ``failures`` and logged."""
        if failed is not None:
            self.failures.append(f"not stored: {failed}")
            logger.warning("rewardpipe: not stored: %s", failed)

    def transcript(self, example: Mapping[str, Any] | Any) -> list[dict[str, Any]] | None:
        """The conversation of an alarm's example (a dict of ``Alarm.to_dict()["examples"]`` or its key), if kept."""
        key = example.get("transcript_key") if isinstance(example, Mapping) else example
        kept = self._transcripts.get(key) if isinstance(key, str) else None
        return None if kept is None else kept[1]

    def _judge(self) -> Any:
        from rewardpipe.monitoring import monitor_records

        records, self._pending, self._groups = self._pending, [], 0
        step, self.step = self.step, self.step + 1
        # each record validated once, for the judgement and the store: one that does not validate is its error
        # record, counted, and never costs its step
        batch = StorableBatch.of(records)
        for line in batch.replaced:
            self.failures.append(line)
            logger.warning("rewardpipe: step %s: %s", step, line)
        try:
            result = monitor_records(batch.judged(), self.thresholds, self.state, self.history)
        except Exception:  # monitoring never stops the scoring: it says so loudly
            logger.exception("rewardpipe: the within-group monitor failed on step %s", step)
            return None
        self.state = result.state
        if self.store is not None:
            self._persist(batch, result)
        report = result.step(step)
        self.reports.append(report)
        for alarm in result.alarms:
            self.alarms.append(alarm)
            self._log(alarm)
        for key in [key for key, (kept, _) in self._transcripts.items() if kept <= step - KEPT_STEPS]:
            del self._transcripts[key]
        return report

    def _resume(self) -> bool:
        """Go on after the steps the store holds for this run, with its saved monitor state; whether it had any."""
        from rewardpipe.monitoring.state import load_state

        if self.run_id not in self.store.list_runs():
            return False
        steps = self.store.list_steps(self.run_id)
        state, bad = load_state(self.store, self.run_id)
        if bad is not None:
            logger.warning("rewardpipe: %s: %s", bad.key, bad.reason)
        self.state = state
        last = max([*steps, -1 if state.last_step is None else state.last_step])
        self.step = last + 1
        if last >= 0:  # said: every watch's run id is "verifiers" unless given, so another training's run goes on here
            logger.warning(
                "rewardpipe: run %s already holds steps up to %s in the store; this watch goes on at step %s with its "
                "saved monitor state (pass another run_id= for a new run)",
                self.run_id,
                last,
                self.step,
            )
        return bool(steps)

    def _persist(self, batch: StorableBatch, result: Any) -> None:
        """The step's records, transcripts, alarms and the monitor state into the store; a refused write is logged."""
        from rewardpipe.monitoring import StoreAlarmSink, dispatch, state_key
        from rewardpipe.store import transcript_key
        from rewardpipe.transcripts import RolloutTranscript

        records = batch.raw
        lost: list[str] = []
        refused: list[str] = []  # one line for the step's refused records (a full disk refuses every one)
        progress = self.progress
        if progress is not None:
            if progress.manifest is None and not self.reports:  # the first step stored: the run's manifest first
                weights = records[0]["weights"] if records else {}
                self._note(progress.start(reward="verifiers", weights=weights, stored_steps=self._stored_before))
            self._note(progress.before_step())
        for record, valid, problem in zip(records, batch.records, batch.problems, strict=True):
            if valid is None:
                refused.append(f"{record.get('rollout_id')}: {problem}")
                continue
            try:  # a record the store refuses loses itself only, never the step's records after it
                self.store.put_record(valid)
            except Exception as exc:  # noqa: BLE001 - reported, scoring goes on
                refused.append(f"{record['rollout_id']}: {type(exc).__name__}: {exc}")
                continue
            ids = {k: record[k] for k in ("run_id", "step", "group_id", "rollout_id", "task_id")}
            key = transcript_key(self.run_id, record["step"], record["group_id"], record["rollout_id"])
            kept = self._transcripts.get(key)
            if kept is None:
                continue
            transcript = {
                **ids,
                "messages": kept[1],
                "verdict": {"status": "not_executed", "reason": "a verifiers rollout"},
                "status": record["status"],
                "components": record["components"],
                "aggregate": record["aggregate"],
            }
            try:  # a conversation that is no transcript (a message part of its own kind) loses itself only
                self.store.put_transcript(RolloutTranscript.model_validate(transcript))
            except Exception as exc:  # noqa: BLE001 - reported, scoring goes on
                lost.append(f"transcript of {record['rollout_id']}: {type(exc).__name__}: {exc}")
        if refused:
            lost.insert(0, f"records: {len(refused)} of {len(records)}, the first {refused[0]}")
        if progress is not None and records:
            marked = progress.step_stored(records[0]["step"], len(records), not refused)
            if marked is not None:
                lost.append(marked)
        lost += [
            f"alarm: {failure.error}" for failure in dispatch(result.alarms, [StoreAlarmSink(self.store, self.run_id)])
        ]
        try:
            self.store.put_json(state_key(self.run_id), result.state.to_dict())
        except Exception as exc:  # noqa: BLE001 - reported, scoring goes on
            lost.append(f"monitor state: {type(exc).__name__}: {exc}")
        for message in lost:
            self.failures.append(f"not stored: {message}")
            logger.warning("rewardpipe: not stored at step %s: %s", records[0]["step"] if records else "?", message)

    def _log(self, alarm: Any) -> None:
        data = alarm.to_dict()
        examples = data.get("examples") or []
        shown = ""
        if examples:
            conversation = self.transcript(examples[0]) or []
            last = conversation[-1].get("content") if conversation and isinstance(conversation[-1], Mapping) else None
            shown = f"; example {examples[0].get('rollout_id')}: {examples[0].get('reason')}"
            if isinstance(last, str):
                shown += f", its completion: {last[:200]!r}"
        logger.warning(
            "rewardpipe: ALARM %s %s at step %s: %s%s",
            data.get("kind"),
            data.get("component"),
            data.get("step"),
            printable(str(data.get("message")), keep_newlines=False),
            printable(shown, keep_newlines=False),
        )
