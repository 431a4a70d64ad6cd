"""The local runner: the main job. Groups of K rollouts per step, scored, stored, and monitored.

Each step runs in three phases so the expensive part batches well: (1) every rollout's conversation
(policy and environment turns), (2) every execution job through the executor's worker pool, (3) scoring.
The phases are exactly the steps of :mod:`rewardpipe.episode`, the same ones the state machine runs, over
any environment.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from rewardpipe.environment import Environment, EpisodeState
from rewardpipe.episode import (
    ENDED_BY_ENV,
    POLICY_EXHAUSTED,
    RECORDING_ENDED,
    TURN_LIMIT,
    ConversationError,
    EnvServices,
    EpisodeError,
    HookTimeout,
    ReplayMismatch,
    build_record,
    converse,
    each_with_bounded_hooks,
    env_replay,
    episode_metrics,
    error_record,
    execution_job,
    failure_record,
    finish_episode,
    hook_failure,
    start_episode,
    unstarted_record,
)
from rewardpipe.execution.result import ExecutionJob, ExecutionResult
from rewardpipe.gc_pause import paused_gc
from rewardpipe.models import Record, Rollout
from rewardpipe.rewards import Reward
from rewardpipe.rewards.base import how_failed
from rewardpipe.transcripts import RolloutTranscript, transcript_of_episode

ProgressFn = Callable[[str, int, int], None]
# Receives each rollout's transcript as it is scored (e.g. ``store.put_transcript``); its failures are the
# caller's to handle, a transcript is evidence, never a reason to lose a record.
TranscriptFn = Callable[[RolloutTranscript], Any]


class NoSandbox:
    """The executor of an environment that runs no code (no sandbox is started for it): asked to run a job
    anyway, it says so, and that rollout gets an error record, never a score."""

    def run(self, job: Any) -> Any:  # noqa: ARG002 - the executor interface's signature
        raise RuntimeError("this environment declared no execution_job, so no sandbox was started")

    def run_batch(self, jobs: list, workers: int | None = None) -> list:  # noqa: ARG002 - the executor interface's signature
        return [self.run(job) for job in jobs]

    def close(self) -> None:
        pass


@dataclass
class Slot:
    """One rollout to produce: its ids and its task."""

    task: Any
    step: int
    group_id: str
    rollout_id: str


def plan_step(tasks: Sequence[Any], step: int, groups_per_step: int, group_size: int) -> list[Slot]:
    """Round-robin over the task set: step n takes the next ``groups_per_step`` tasks, K rollouts each."""
    if not tasks:
        raise ValueError("the task set is empty")
    if group_size < 1 or groups_per_step < 1:
        raise ValueError("group size and groups per step must be at least 1")
    slots = []
    for g in range(groups_per_step):
        task = tasks[(step * groups_per_step + g) % len(tasks)]
        group_id = f"s{step}-g{g:03d}-{task.task_id}"
        for k in range(group_size):
            slots.append(Slot(task, step, group_id, f"{group_id}-k{k}"))
    return slots


def slots_from_rollouts(rollouts: Iterable[Rollout], tasks: dict[str, Any]) -> tuple[list[Slot], list[Rollout]]:
    """Slots for replaying recorded rollouts; rollouts naming an unknown task are returned separately."""
    slots, unknown = [], []
    for rollout in rollouts:
        task = tasks.get(rollout.task_id)
        if task is None:
            unknown.append(rollout)
        else:
            slots.append(Slot(task, rollout.step, rollout.group_id, rollout.rollout_id))
    return slots, unknown


def _rollout_failure(rollout: Rollout, run_id: str, kind: str, message: str, reward: Reward) -> Record:
    return failure_record(
        run_id=run_id,
        step=rollout.step,
        group_id=rollout.group_id,
        rollout_id=rollout.rollout_id,
        task_id=rollout.task_id,
        kind=kind,
        message=message,
        reward=reward,
    )


def unknown_task_record(rollout: Rollout, run_id: str, reward: Reward) -> Record:
    return _rollout_failure(
        rollout, run_id, "unknown_task", f"task '{rollout.task_id}' is not in the task file", reward
    )


def _execute_all(executor: Any, jobs: list[ExecutionJob], workers: int | None) -> list[ExecutionResult | Exception]:
    if not jobs:
        return []
    try:
        return list(executor.run_batch(jobs, workers=workers))
    except Exception:  # noqa: BLE001 - fall back to one by one so one crash costs one record
        results: list[ExecutionResult | Exception] = []
        for job in jobs:
            try:
                results.append(executor.run(job))
            except Exception as exc:  # noqa: BLE001
                results.append(exc)
        return results


def _job(state: EpisodeState, task: Any, env: Environment) -> ExecutionJob | Exception | None:
    try:
        return execution_job(state, task, env)
    except Exception as exc:  # noqa: BLE001 - the environment's execution_job failed: its episode's error
        return exc


def score_episodes(
    episodes: Sequence[tuple[EpisodeState, Any]],
    *,
    executor: Any,
    reward: Reward | None = None,
    env: Environment,
    workers: int | None = None,
    env_metrics: Sequence[dict[str, Any]] | None = None,
) -> list[tuple[Record, ExecutionResult | None]]:
    """Score conversations that have ended (``next_action`` "execute" or "score"), in order: every execution
    job runs in one batch on the executor, then each episode is scored. One crashed execution costs its own
    episode an error record; the others are scored. Returns ``(record, execution)`` per episode.
    ``env_metrics``: each episode's :func:`~rewardpipe.episode.episode_metrics` when the caller has read them
    (the environment's ``metrics()`` is then not called again)."""
    reward = reward if reward is not None else env.reward
    # together when the environment bounds its hooks: hanging ones cost the batch one timeout, not one each
    planned = each_with_bounded_hooks(env, lambda episode: _job(episode[0], episode[1], env), episodes)
    jobs = [(index, job) for index, job in enumerate(planned) if isinstance(job, ExecutionJob)]
    results = _execute_all(executor, [job for _, job in jobs], workers)
    executions: dict[int, Any] = {index: result for (index, _), result in zip(jobs, results, strict=True)}
    scored: list[tuple[Record, ExecutionResult | None]] = []
    known = list(env_metrics) if env_metrics is not None else [None] * len(episodes)
    together = _scored_together(episodes, planned, executions, reward, env, known) if reward.has_async else {}
    for index, (state, task) in enumerate(episodes):
        outcome = executions.get(index)
        if index in together:
            scored.append((together[index], outcome))
        elif isinstance(failure := planned[index], Exception):
            scored.append(
                (error_record(state, "simulator_error", hook_failure(env, "execution_job", failure), reward), None)
            )
        elif isinstance(outcome, Exception):
            scored.append((error_record(state, "executor_crash", f"{type(outcome).__name__}: {outcome}", reward), None))
        else:
            scored.append((finish_episode(state, task, outcome, reward, env, known[index]), outcome))
    return scored


def _scored_together(
    episodes: Sequence[tuple[EpisodeState, Any]],
    planned: list,
    executions: dict[int, Any],
    reward: Reward,
    env: Environment,
    known: Sequence[dict[str, Any] | None],
) -> dict[int, Record]:
    """The records of the episodes that can be scored, scored as one batch (``Reward.score_many``): a reward
    with async components (an LLM judge) makes its calls for the whole batch at once, not episode by episode."""
    from rewardpipe.episode import record_from_score
    from rewardpipe.rewards.base import ScoringInput

    ready = [
        index
        for index, (state, _) in enumerate(episodes)
        if not isinstance(planned[index], Exception)
        and not isinstance(executions.get(index), Exception)
        and state.next_action in ("execute", "score")
    ]
    scores = reward.score_many(
        [
            ScoringInput(
                execution=executions.get(i), messages=episodes[i][0].messages, task=episodes[i][1], state=episodes[i][0]
            )
            for i in ready
        ]
    )
    return {
        i: record_from_score(
            score,
            **episodes[i][0].record_ids(),
            extra_metrics=known[i] if known[i] is not None else episode_metrics(episodes[i][0], episodes[i][1], env),
        )
        for i, score in zip(ready, scores, strict=False)
    }


def run_slots(
    slots: Sequence[Slot],
    *,
    policy: Any,
    env: Environment,
    executor: Any,
    reward: Reward | None = None,
    run_id: str,
    max_turns: int | None = None,
    workers: int | None = None,
    conversation_threads: int = 1,
    progress: ProgressFn | None = None,
    on_transcript: TranscriptFn | None = None,
    services: EnvServices | None = None,
) -> list[Record]:
    """Produce one record per slot, in slot order. Never raises for a single rollout's failure.

    The three kinds of work overlap: a rollout's execution job is handed to the sandbox (``workers``
    executions at a time, default one per core) the moment its conversation ends, and each finished
    execution is scored while later conversations are still being played, so the turn loop and scoring
    run in this process while the sandbox's processes execute code.

    ``reward`` defaults to the environment's; ``max_turns`` to its turn limit. ``on_transcript`` gets every
    rollout's transcript, failed ones included (with the turns so far).
    """
    reward = reward if reward is not None else env.reward
    finished: dict[int, Record] = {}
    ended: dict[int, tuple[EpisodeState, ExecutionResult | None]] = {}
    running: dict[int, tuple[EpisodeState, Future]] = {}
    finished_executions: queue.SimpleQueue[int] = queue.SimpleQueue()
    lock = threading.Lock()
    talked = [0]

    def settle(index: int, state: EpisodeState, execution: Future | None) -> None:
        outcome: ExecutionResult | None = None
        if execution is not None:
            try:
                outcome = execution.result()
            except Exception as exc:  # noqa: BLE001 - one crashed execution costs one record, as an error
                finished[index] = error_record(state, "executor_crash", f"{type(exc).__name__}: {exc}", reward)
                ended[index] = (state, None)
                return
        finished[index] = finish_episode(state, slots[index].task, outcome, reward, env)
        ended[index] = (state, outcome)

    def settle_done() -> None:
        ready = []
        with lock:
            while True:
                try:
                    index = finished_executions.get_nowait()
                except queue.Empty:
                    break
                ready.append((index, *running.pop(index)))
        for index, state, execution in ready:
            settle(index, state, execution)

    def talk(index: int) -> None:
        slot = slots[index]
        try:
            state = start_episode(
                slot.task,
                env=env,
                run_id=run_id,
                step=slot.step,
                group_id=slot.group_id,
                rollout_id=slot.rollout_id,
                max_turns=max_turns,
            )
        except Exception as exc:  # noqa: BLE001 - the environment's start failed: this rollout's error
            finished[index] = unstarted_record(
                run_id=run_id,
                step=slot.step,
                group_id=slot.group_id,
                rollout_id=slot.rollout_id,
                task_id=slot.task.task_id,
                kind="simulator_error",
                message=hook_failure(env, "start", exc),
                reward=reward,
            )
            _count()
            return
        try:
            state = converse(state, slot.task, policy, env, services=services)
        except ConversationError as exc:  # endpoint or environment failure: an error record, never a score
            finished[index] = error_record(exc.state, exc.kind, str(exc), reward)
            ended[index] = (exc.state, None)
        else:
            job = _job(state, slot.task, env)
            if isinstance(job, Exception):
                finished[index] = error_record(
                    state, "simulator_error", hook_failure(env, "execution_job", job), reward
                )
                ended[index] = (state, None)
            elif job is None:
                settle(index, state, None)
            else:
                with lock:
                    execution = pool.submit(executor.run, job)
                    running[index] = (state, execution)

                    # Told, not polled: scanning every running execution after each conversation is
                    # quadratic in the step's size.
                    def executed(_: Future[ExecutionResult], index: int = index) -> None:
                        finished_executions.put(index)

                    execution.add_done_callback(executed)
        settle_done()
        _count()

    def _count() -> None:
        with lock:
            talked[0] += 1
        if progress:
            progress("conversations", talked[0], len(slots))

    # A step allocates many small objects (states, messages) and keeps them all: each automatic collection
    # would re-walk every one of them (about a sixth of a cheap environment's turn loop). The loop makes no
    # reference cycles of its own; any an environment makes are collected when the step ends.
    with paused_gc(), ThreadPoolExecutor(workers or os.cpu_count() or 2, thread_name_prefix="rewardpipe-run") as pool:
        if conversation_threads > 1:
            with ThreadPoolExecutor(conversation_threads) as talkers:
                list(talkers.map(talk, range(len(slots))))
        else:
            for index in range(len(slots)):
                talk(index)
        if progress:
            progress("executions", len(finished), len(slots))
        for index, (state, execution) in sorted(running.items()):
            settle(index, state, execution)
    _settle_left_open(
        executor,
        ended,
        finished,
        lambda index, state, outcome: finish_episode(state, slots[index].task, outcome, reward, env),
    )
    if on_transcript is not None:
        for index in sorted(ended):
            state, outcome = ended[index]
            on_transcript(transcript_of_episode(state, slots[index].task, outcome, finished[index], env=env))
    return [finished[i] for i in range(len(slots))]


def _settle_left_open(
    executor: Any,
    ended: dict[int, tuple[EpisodeState, ExecutionResult | None]],
    finished: dict[int, Record],
    rescore: Callable[[int, EpisodeState, ExecutionResult], Record],
) -> None:
    """Once every execution of the step has run, rescore each one the executor left undecided and can decide now
    (``settle``: an answer whose hidden tests failed to load on a name it does not define is the model's
    ``failed`` once another answer to the same tests loaded). Executions run one by one as conversations end, so
    the answer that left the name out may have run first; without this its 0 stayed an excluded ``error``."""
    settle = getattr(executor, "settle", None)
    if settle is None:
        return
    for index, (state, outcome) in sorted(ended.items()):
        if outcome is None:
            continue
        settled = settle(outcome)
        if settled is not outcome:
            finished[index] = rescore(index, state, settled)
            ended[index] = (state, settled)


def _replay_failure(env: Environment, exc: Exception) -> str:
    """What a ``replay_failed`` record says. A recording the environment answers differently, or a hook the platform
    stopped (a timeout, a state that is no state), says so as it is; an exception of the user's own hooks, raised
    while the recording was played through them, names the environment and the line of the user's file that
    raised, as ``run``'s simulator_error does (``KeyError: 'secret'`` alone named neither)."""
    if isinstance(exc, HookTimeout):  # worded as every path words a hook past its hook_timeout_s
        return hook_failure(env, exc.hook, exc)
    if isinstance(exc, (ReplayMismatch, EpisodeError)):
        return f"{type(exc).__name__}: {exc}"
    return hook_failure(env, "replay", exc)


def score_rollouts(
    rollouts: Sequence[Rollout],
    tasks: dict[str, Any],
    *,
    executor: Any,
    env: Environment,
    reward: Reward | None = None,
    run_id: str,
    workers: int | None = None,
    on_transcript: TranscriptFn | None = None,
    max_turns: int | None = None,
) -> list[Record]:
    """Score recorded conversations as they are (no new turns): each is replayed into the environment's
    state (:meth:`rewardpipe.Environment.replay`), its execution job runs, and the reward scores it. Each
    record carries the metrics ``run`` writes: the end reason and the environment's own.

    ``on_transcript`` gets the transcript of every rollout whose task is known and whose replay worked.
    ``max_turns`` is the turn limit the recording was played under (default: the environment's): a recording
    the replay leaves without an end reason that stops on the model's turn at that limit ended by
    ``turn_limit``.
    """
    reward = reward if reward is not None else env.reward
    turn_limit = max_turns if max_turns is not None else env.max_turns
    states: dict[int, EpisodeState | Exception] = {}
    jobs: list[tuple[int, ExecutionJob]] = []
    for index, rollout in enumerate(rollouts):
        task = tasks.get(rollout.task_id)
        if task is None:
            continue
        try:
            state = env_replay(env, task, list(rollout.messages))  # bounded by hook_timeout_s
            if not isinstance(state, EpisodeState):
                raise TypeError(f"replay() returned {type(state).__name__}, not a state")
            state = state.model_copy(
                update={
                    "run_id": run_id,
                    "step": rollout.step,
                    "group_id": rollout.group_id,
                    "rollout_id": rollout.rollout_id,
                    "task_id": rollout.task_id,
                }
            )
            if state.end_reason in (None, RECORDING_ENDED, POLICY_EXHAUSTED) and rollout.end_reason is not None:
                state = state.evolve(end_reason=rollout.end_reason)  # the recorder's word where the replay has none
            elif state.end_reason in (None, RECORDING_ENDED):
                state = state.evolve(end_reason=_recorded_end_reason(state, turn_limit))
            job = execution_job(state, task, env)
        except Exception as exc:  # noqa: BLE001 - a recording the environment cannot replay costs its own line
            states[index] = exc
            continue
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - a replay() calling sys.exit() (or CancelledError): that line's
            states[index] = EpisodeError(f"environment '{env.name}': replay() {how_failed(exc)}")
            continue
        states[index] = state
        if job is not None:
            jobs.append((index, job))
    results = _execute_all(executor, [job for _, job in jobs], workers)
    executions = {i: r for (i, _), r in zip(jobs, results, strict=True)}
    records = []
    for index, rollout in enumerate(rollouts):
        task = tasks.get(rollout.task_id)
        if task is None:
            records.append(unknown_task_record(rollout, run_id, reward))
            continue
        state = states[index]
        if isinstance(state, Exception):
            records.append(_rollout_failure(rollout, run_id, "replay_failed", _replay_failure(env, state), reward))
            continue
        outcome = executions.get(index)
        if isinstance(outcome, Exception):
            record = _rollout_failure(rollout, run_id, "executor_crash", f"{type(outcome).__name__}: {outcome}", reward)
            outcome = None
        else:
            record = build_record(
                **state.record_ids(),
                messages=list(rollout.messages),
                execution=outcome,
                reward=reward,
                task=task,
                state=state,
                extra_metrics=episode_metrics(state, task, env),
            )
        records.append(record)
        if on_transcript is not None:
            on_transcript(transcript_of_episode(state, task, outcome, record, env=env))
    return records


def _recorded_end_reason(state: EpisodeState, turn_limit: int) -> str:
    """Why a replayed recording ended, when the environment's replay does not say (or the default replay says
    only that the recording stopped): as a live run would have named it, the turn limit when it stops on the
    model's turn at the limit; otherwise what the replay said, or that the environment ended it."""
    last = state.messages[-1] if state.messages else None
    if last is not None and last.role == "assistant" and state.assistant_turns >= turn_limit:
        return TURN_LIMIT
    return state.end_reason or ENDED_BY_ENV
