"""The one definition of a rollout, as explicit steps.

The local runner calls :func:`run_episode`, which is just these steps in a loop; the Step Functions state
machine calls the same steps one Lambda at a time, carrying :class:`EpisodeState` as JSON between them and
branching on ``next_action``:

    start_episode ──► policy turn ──► apply_policy_turn ──┬─ "simulator" ─► apply_simulator_turn ─► policy turn
                                                          ├─ "execute"   ─► execution_job ─► (sandbox) ─► finish
                                                          └─ "score"     ─► finish_episode (nothing to run)
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, Literal

from pydantic import Field

from rewardpipe.execution.result import ExecutionJob, ExecutionResult
from rewardpipe.models import ErrorInfo, Message, Record, RolloutIdentity, Task
from rewardpipe.parsing import TurnKind, parse_turn
from rewardpipe.rewards.base import Reward

if TYPE_CHECKING:  # pragma: no cover
    from rewardpipe.policies import Policy
    from rewardpipe.simulator import Simulator

DEFAULT_MAX_TURNS = 6
MAX_TURNS = 100  # assistant turns one episode may take; also the CLI's --max-turns bound
DEFAULT_EXEC_TIMEOUT_S = 10.0

NextAction = Literal["policy", "simulator", "execute", "score"]


class EpisodeState(RolloutIdentity):
    """A rollout in progress: the conversation so far and what the orchestration does next."""

    turn_kinds: list[TurnKind] = Field(default_factory=list)
    revealed: list[int] = Field(default_factory=list)
    # Assistant turns (0-based) whose simulator reply revealed a new spec item: the questions that were real.
    answered_turns: list[int] = Field(default_factory=list)
    max_turns: int = Field(default=DEFAULT_MAX_TURNS, ge=1, le=MAX_TURNS)
    next_action: NextAction = "policy"
    end_reason: str | None = None
    final_code: str | None = None

    @property
    def assistant_turns(self) -> int:
        return len(self.turn_kinds)


class EpisodeError(RuntimeError):
    """A step was called in the wrong phase (a bug in the orchestration, not in the model)."""


def start_episode(
    task: Task, *, run_id: str, step: int, group_id: str, rollout_id: str, max_turns: int = DEFAULT_MAX_TURNS
) -> EpisodeState:
    return EpisodeState(
        run_id=run_id,
        step=step,
        group_id=group_id,
        rollout_id=rollout_id,
        task_id=task.task_id,
        messages=[Message(role="user", content=task.prompt)],
        max_turns=max_turns,
    )


def _successor(state: EpisodeState) -> EpisodeState:
    """A copy of ``state`` that can be changed without touching it: fresh lists, while the Message objects
    are shared (they are never mutated), so a turn costs a list copy instead of a deep copy of the whole
    conversation."""
    return state.model_copy(update={"messages": list(state.messages), "turn_kinds": list(state.turn_kinds),
                                    "revealed": list(state.revealed)})


def _expect(state: EpisodeState, action: NextAction) -> None:
    if state.next_action != action:
        raise EpisodeError(f"rollout {state.rollout_id}: expected next_action '{action}', state is '{state.next_action}'")


def apply_policy_turn(state: EpisodeState, text: str) -> EpisodeState:
    """Append the assistant turn, classify it, and decide what happens next."""
    _expect(state, "policy")
    parsed = parse_turn(text)
    new = _successor(state)
    new.messages.append(Message(role="assistant", content=text))
    new.turn_kinds.append(parsed.kind)
    if parsed.kind is TurnKind.COMMIT:
        new.final_code = parsed.code
        new.next_action = "execute"
        new.end_reason = "committed"
    elif new.assistant_turns >= new.max_turns:
        new.next_action = "score"
        new.end_reason = "turn_limit"
    else:
        new.next_action = "simulator"
    return new


def apply_simulator_turn(state: EpisodeState, task: Task, simulator: "Simulator") -> EpisodeState:
    _expect(state, "simulator")
    reply = simulator.respond(state, task)
    new = _successor(state)
    new.messages.append(Message(role="user", content=reply.text))
    if reply.revealed is not None and reply.revealed not in new.revealed:
        new.revealed.append(reply.revealed)
        new.answered_turns.append(new.assistant_turns - 1)
    new.next_action = "policy"
    return new


def end_without_commit(state: EpisodeState, reason: str) -> EpisodeState:
    """Stop the episode early (e.g. a replay ran out of turns): it is scored as it stands."""
    new = _successor(state)
    new.next_action = "score"
    new.end_reason = reason
    return new


def task_job(task: Task, code: str, job_id: str) -> ExecutionJob:
    """Run ``code`` against ``task``'s hidden tests, with the task's budget and trust mode."""
    return ExecutionJob(
        id=job_id,
        code=code,
        tests=task.tests,
        entry_point=task.entry_point,
        tests_format=task.tests_format,
        timeout_s=task.timeout_s or DEFAULT_EXEC_TIMEOUT_S,
        trust_mode=task.trust_mode,
    )


def execution_job(state: EpisodeState, task: Task) -> ExecutionJob | None:
    if state.final_code is None:
        return None
    return task_job(task, state.final_code, state.rollout_id)


def checked_score(components: dict[str, float | None], weights: dict[str, float], aggregate: float | None,
                  error: ErrorInfo | None) -> tuple[dict[str, float | None], float | None, ErrorInfo | None]:
    """``(components, aggregate, error)`` fit for a record: a component value or an aggregate that is not a
    finite number within ±MAX_SCORE_MAGNITUDE (huge weights overflow to inf; a custom component can
    return anything) is left out (None) and the record becomes an error saying so: a null, infinite or
    absurd reward must never be handed to a trainer as a score, nor reach the monitor's statistics.
    Every record built from a score goes through it (:func:`build_record`), locally and on AWS."""
    from rewardpipe.models import score_problem

    bad_components = {name: problem for name, value in components.items()
                      if (problem := score_problem(value)) is not None}
    if bad_components:
        name, problem = next(iter(bad_components.items()))
        components = {name: None if name in bad_components else value for name, value in components.items()}
        return components, None, error or ErrorInfo(kind="component_out_of_range",
                                                     message=f"component '{name}': {problem}")
    problem = score_problem(aggregate)
    if problem is None:
        return components, aggregate, error
    shown = ", ".join(f"{name}={value:g}" for name, value in weights.items())
    kind = "non_finite_aggregate" if not math.isfinite(aggregate) else "aggregate_out_of_range"  # type: ignore[arg-type]
    return components, None, error or ErrorInfo(
        kind=kind, message=f"the weighted sum of the components is {aggregate} (weights {shown}): {problem}; "
                           f"use smaller weights")


def build_record(
    *,
    run_id: str,
    step: int,
    group_id: str,
    rollout_id: str,
    task_id: str,
    messages: list[Message],
    execution: ExecutionResult | None,
    reward: Reward,
    extra_metrics: dict | None = None,
    answered_turns: frozenset[int] | None = None,
) -> Record:
    score = reward.score(messages, execution, answered_turns=answered_turns)
    metrics = {**score.metrics, **(extra_metrics or {})}
    components, aggregate, error = checked_score(score.components, score.weights, score.aggregate, score.error)
    return Record(
        run_id=run_id,
        step=step,
        group_id=group_id,
        rollout_id=rollout_id,
        task_id=task_id,
        status="error" if error else "scored",
        error=error,
        components=components,
        weights=score.weights,
        aggregate=aggregate,
        metrics=metrics,
    )


def finish_episode(state: EpisodeState, task: Task, execution: ExecutionResult | None, reward: Reward) -> Record:
    if state.next_action not in ("execute", "score"):
        raise EpisodeError(f"rollout {state.rollout_id}: cannot score an episode in phase '{state.next_action}'")
    return build_record(
        **state.record_ids(),
        messages=state.messages,
        execution=execution,
        reward=reward,
        answered_turns=frozenset(state.answered_turns),
        extra_metrics={
            "end_reason": state.end_reason,
            "spec_revealed": len(state.revealed),
            "spec_items": len(task.spec),
        },
    )


def failure_record(
    *,
    run_id: str,
    step: int,
    group_id: str,
    rollout_id: str,
    task_id: str,
    kind: str,
    message: str,
    reward: Reward,
    metrics: dict | None = None,
) -> Record:
    """The record for an infrastructure failure: every component unknown, never a score of 0."""
    return Record(
        run_id=run_id,
        step=step,
        group_id=group_id,
        rollout_id=rollout_id,
        task_id=task_id,
        status="error",
        error=ErrorInfo(kind=kind, message=message[:2000]),
        components={name: None for name in reward.component_names},
        weights=reward.weights,
        aggregate=None,
        metrics=metrics or {},
    )


def error_record(state: EpisodeState, kind: str, message: str, reward: Reward) -> Record:
    """:func:`failure_record` for an episode, keeping how far the conversation got."""
    return failure_record(
        **state.record_ids(),
        kind=kind,
        message=message,
        reward=reward,
        metrics={"assistant_turns": state.assistant_turns, "end_reason": state.end_reason},
    )


class PolicyExhausted(Exception):
    """A policy has no further turn to give (e.g. a replayed transcript ended)."""


class ConversationError(RuntimeError):
    """The policy or the simulator failed mid-conversation.

    ``kind`` says which (``policy_error`` or ``simulator_error``) and ``state`` is the state the failing
    step was given, so the caller can record the failure against the right party with the turns so far.
    The message is ``"<ExceptionType>: <message>"`` of the original exception (also kept as ``cause``).
    """

    def __init__(self, kind: str, state: EpisodeState, cause: Exception):
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.kind = kind
        self.state = state
        self.cause = cause


def converse(
    state: EpisodeState,
    task: Task,
    policy: "Policy",
    simulator: "Simulator",
    pause: Callable[[EpisodeState], bool] | None = None,
) -> EpisodeState:
    """Run policy and simulator turns until the episode commits or hits the turn limit.

    A failure of the policy (including a turn that is not text) or of the simulator raises
    :class:`ConversationError` naming which one failed; the caller decides how to record it.

    ``pause(state)`` is asked before every turn; when it says True the conversation stops there and the
    state is returned as it stands (``next_action`` still ``policy`` or ``simulator``), for the caller to
    resume later with the same function. The state machine pauses when the next turn is the trainer's
    (callback mode) or when its Lambda is running out of time; the local runner never pauses.
    """
    while state.next_action in ("policy", "simulator"):
        if pause is not None and pause(state):
            return state
        if state.next_action == "policy":
            try:
                text = policy.next_turn(state, task)
            except PolicyExhausted as exc:
                return end_without_commit(state, f"policy_exhausted: {exc}" if str(exc) else "policy_exhausted")
            except Exception as exc:  # noqa: BLE001 - any policy failure, classified for the caller
                raise ConversationError("policy_error", state, exc) from exc
            if not isinstance(text, str):
                problem = TypeError(f"policy returned {type(text).__name__}, not text")
                raise ConversationError("policy_error", state, problem)
            state = apply_policy_turn(state, text)
        else:
            try:
                state = apply_simulator_turn(state, task, simulator)
            except Exception as exc:  # noqa: BLE001 - any simulator failure, classified for the caller
                raise ConversationError("simulator_error", state, exc) from exc
    return state


def run_episode(
    task: Task,
    policy: "Policy",
    simulator: "Simulator",
    executor,
    reward: Reward,
    *,
    run_id: str,
    step: int,
    group_id: str,
    rollout_id: str,
    max_turns: int = DEFAULT_MAX_TURNS,
) -> Record:
    """One rollout end to end. Every failure of the machinery becomes an error record."""
    state = start_episode(task, run_id=run_id, step=step, group_id=group_id, rollout_id=rollout_id, max_turns=max_turns)
    try:
        state = converse(state, task, policy, simulator)
    except ConversationError as exc:  # a policy/simulator failure is infrastructure, not a score
        return error_record(exc.state, exc.kind, str(exc), reward)
    job = execution_job(state, task)
    execution = None
    if job is not None:
        try:
            execution = executor.run(job)
        except Exception as exc:  # noqa: BLE001
            return error_record(state, "executor_crash", f"{type(exc).__name__}: {exc}", reward)
    return finish_episode(state, task, execution, reward)
