"""The ask-before-coding environment: the model sees a brief, under-specified coding request; a user
simulator privately holds the full specification and reveals a detail only when asked; each turn the model
either asks a clarifying question or commits code; committing ends the episode and the code runs against the
task's hidden tests (contracts.md §1).

* task: :class:`~rewardpipe.envs.ask_before_coding.tasks.Task`;
* state: :class:`AskBeforeCodingState` (the turn kinds, which hidden details were revealed and which
  assistant turn each answered, the committed code);
* ``on_policy_turn``: the turn classifier (:mod:`~rewardpipe.envs.ask_before_coding.turns`): a commit ends
  the episode with ``execute``, anything else hands the turn to the user;
* ``respond``: the rule-based simulator, or an LLM playing the user (``configure(simulator="openai")``,
  through rewardpipe's chat client);
* ``execution_job``: the committed code against the hidden tests;
* ``replay``: which questions were answered is read off the recorded replies;
* ``scenarios``: doctor's four strategies, ``reference`` among them; ``--policy scripted`` plays the
  seeded mix of :mod:`~rewardpipe.envs.ask_before_coding.scenarios`;
* reward: :data:`~rewardpipe.envs.ask_before_coding.reward.ASK_BEFORE_CODING`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rewardpipe.environment import EnvContext, Environment
from rewardpipe.envs.ask_before_coding.reward import ASK_BEFORE_CODING
from rewardpipe.envs.ask_before_coding.state import FALLBACK_NO_TEXT, AskBeforeCodingState
from rewardpipe.envs.ask_before_coding.tasks import Task
from rewardpipe.envs.ask_before_coding.turns import classify
from rewardpipe.execution.result import ExecutionJob
from rewardpipe.models import Message
from rewardpipe.parsing import TurnKind

DEFAULT_EXEC_TIMEOUT_S = 10.0

POLICY_SYSTEM_PROMPT = (
    "You are a careful programmer helping a user. The request may leave out details that matter. "
    "Each turn, either ask the user one clarifying question (no code), or, when you know enough, reply with "
    "the complete solution as a single ```python fenced block defining the requested function."
)


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


_RULE_SIMULATOR: Any = None


def rule_simulator() -> Any:
    global _RULE_SIMULATOR
    if _RULE_SIMULATOR is None:
        from rewardpipe.envs.ask_before_coding.simulator import RuleBasedSimulator

        _RULE_SIMULATOR = RuleBasedSimulator()
    return _RULE_SIMULATOR


class AskBeforeCoding(Environment[AskBeforeCodingState, Task]):
    """See the module docstring. ``AskBeforeCoding(simulator=None)``: ``simulator`` is any object with
    ``respond(state, task) -> SimulatorReply`` (default: the rule-based one)."""

    name = "ask_before_coding"
    version = "1"
    task_model = Task
    state_model = AskBeforeCodingState
    max_turns = 6
    reward = ASK_BEFORE_CODING
    system_prompt = POLICY_SYSTEM_PROMPT
    collapse_scenario = "guess"

    def __init__(self, simulator: Any = None, *, llm_user: bool = False) -> None:
        self.simulator = simulator
        self.llm_user = llm_user
        self.calls_llm = llm_user  # type: ignore[misc]  # an instance's own setting

    def configure(self, **options: str) -> AskBeforeCoding:
        """``simulator=rule`` (default) or ``simulator=openai``: an LLM plays the user, through the run's
        chat client (``--sim-base-url``/``--sim-model``)."""
        unknown = set(options) - {"simulator"}
        if unknown:
            raise ValueError(
                f"environment 'ask_before_coding' takes the option simulator=rule|openai, "
                f"not {', '.join(sorted(unknown))}"
            )
        choice = options.get("simulator", "rule")
        if choice not in ("rule", "openai"):
            raise ValueError(f"simulator must be rule or openai, got {choice!r}")
        return AskBeforeCoding(self.simulator, llm_user=choice == "openai")

    # -- the episode ------------------------------------------------------------------------------------

    def on_policy_turn(self, state: AskBeforeCodingState, task: Task, text: str) -> AskBeforeCodingState:  # noqa: ARG002 - Environment hook: its signature is the public API v1
        kind, code = classify(text)
        kinds = [*state.turn_kinds, kind]
        if kind is TurnKind.COMMIT:
            return state.evolve(turn_kinds=kinds, final_code=code, next_action="execute", end_reason="committed")
        return state.evolve(turn_kinds=kinds, next_action="env")

    def _simulator(self, ctx: EnvContext | None) -> Any:
        if self.simulator is not None:
            return self.simulator
        if self.llm_user:
            from rewardpipe.envs.ask_before_coding.simulator import OpenAISimulator

            if ctx is None:
                raise RuntimeError("the LLM-played user needs the run's chat client")
            return OpenAISimulator(chat=ctx.chat)
        return rule_simulator()

    def respond(self, state: AskBeforeCodingState, task: Task, ctx: EnvContext | None = None) -> AskBeforeCodingState:
        reply = self._simulator(ctx).respond(state, task)
        revealed, answered = state.revealed, state.answered_turns
        if reply.revealed is not None and reply.revealed not in revealed:
            revealed = [*revealed, reply.revealed]
            answered = [*answered, len(state.turn_kinds) - 1]
        fallback = getattr(reply, "fallback", None)  # a simulator of the user's own may not mark its replies
        restated = state.restated_turns
        if getattr(reply, "restated", None) is not None:
            restated = [*restated, len(state.turn_kinds) - 1]
        return state.append(
            Message(role="user", content=reply.text),
            revealed=revealed,
            answered_turns=answered,
            restated_turns=restated,
            next_action="policy",
            user_fallbacks=state.user_fallbacks + (fallback is not None),
            user_no_text=state.user_no_text + (fallback == FALLBACK_NO_TEXT),
        )

    def execution_job(self, state: AskBeforeCodingState, task: Task) -> ExecutionJob | None:
        if state.final_code is None:
            return None
        return task_job(task, state.final_code, state.rollout_id)

    # -- scoring recorded conversations, doctor, the record -----------------------------------------------

    def replay(self, task: Task, messages: Sequence[Message]) -> AskBeforeCodingState:
        """The state of a recorded conversation: turn kinds re-classified, the final committed code, and which
        questions were answered with a hidden detail read off the recorded replies."""
        from rewardpipe.envs.ask_before_coding.replies import reveals_in
        from rewardpipe.episode import recording_stopped

        kinds, code = [], None
        for message in messages:
            if message.role == "assistant":
                kind, turn_code = classify(message.content)
                kinds.append(kind)
                if kind is TurnKind.COMMIT:
                    code = turn_code
        reveals = reveals_in(messages, task.spec, task.entry_point)
        return AskBeforeCodingState(
            task_id=task.task_id,
            messages=list(messages),
            turn_kinds=kinds,
            revealed=[index for _, index in reveals],
            answered_turns=[turn for turn, _ in reveals],
            final_code=code,
            next_action="execute" if code is not None else "score",
            # a commit ends the episode as in a live run; the simulator never ends one: without a commit the
            # recording stopped, as the default replay names it (the platform names a stop at the turn limit)
            end_reason="committed" if code is not None else recording_stopped(messages),
        )

    def scenarios(self, task: Task) -> dict[str, Any]:
        from rewardpipe.envs.ask_before_coding.scenarios import doctor_scenarios

        return doctor_scenarios(task)

    def scripted_policy(
        self, *, seed: int = 0, collapse_from_step: int | None = None, weights: Mapping[str, float] | None = None
    ) -> Any:
        """The seeded strategy mix of :mod:`~rewardpipe.envs.ask_before_coding.scenarios` (``weights`` per
        strategy, default :data:`~rewardpipe.envs.ask_before_coding.scenarios.STRATEGY_WEIGHTS`)."""
        from rewardpipe.envs.ask_before_coding.scenarios import training_scenarios
        from rewardpipe.policies import ScenarioMix

        return ScenarioMix(
            training_scenarios(dict(weights) if weights else None),
            seed=seed,
            collapse_from_step=collapse_from_step,
            collapse_to=self.collapse_scenario,
        )

    def metrics(self, state: AskBeforeCodingState, task: Task) -> dict[str, Any]:
        """``spec_revealed`` of ``spec_items``; with an LLM-played user (or any reply replaced), ``llm_user_fallbacks``
        (the user's replies the rule-based user's answer replaced: no text before the user model's ``max_tokens``, or
        a reply the rules cannot vet) and ``llm_user_no_text`` (those of the first kind)."""
        metrics: dict[str, Any] = {"spec_revealed": len(state.revealed), "spec_items": len(task.spec)}
        if self.llm_user or getattr(self.simulator, "marks_fallbacks", False) or state.user_fallbacks:
            metrics.update(llm_user_fallbacks=state.user_fallbacks, llm_user_no_text=state.user_no_text)
        return metrics

    def transcript_fields(self, state: AskBeforeCodingState, task: Task | None) -> dict[str, Any]:
        from rewardpipe.transcripts import RevealedItem

        spec = task.spec if task is not None else []
        turns = dict(zip(state.revealed, state.answered_turns, strict=False))
        # executed_code: the committed code, also when the task (and so the job) is not at hand
        return {
            "executed_code": state.final_code,
            "turn_kinds": [str(getattr(k, "value", k)) for k in state.turn_kinds],
            "revealed": [
                RevealedItem(index=i, text=spec[i] if 0 <= i < len(spec) else "", turn=turns.get(i))
                for i in state.revealed
            ],
        }

    def check_task(self, task: Task, runs: Mapping[str, Any]) -> list[str]:
        """The reference solution passes its tests, a stub fails them, and the simulator reveals every
        hidden detail to generic questions."""
        from rewardpipe.execution.result import ExecutionStatus

        problems = []
        reference = runs["reference"].execution if "reference" in runs else None
        stub = runs["guess"].execution if "guess" in runs else None
        if reference is None or reference.status is not ExecutionStatus.PASSED:
            detail = f"{reference.status.value}: {reference.reason}" if reference else "no result"
            problems.append(f"reference solution does not pass its own tests ({detail})")
        if stub is None or stub.status is ExecutionStatus.PASSED:
            problems.append("a stub that returns None passes the tests: they cannot tell right from wrong")
        elif stub.status is ExecutionStatus.ERROR:
            problems.append(f"the harness fails on a stub solution ({stub.reason})")
        if "reference" in runs and runs["reference"].state is not None:
            missing = sorted(set(range(len(task.spec))) - set(runs["reference"].state.revealed))
            if missing:
                problems.append(f"the simulator never revealed spec item(s) {missing} to generic questions")
        return problems


ENVIRONMENT = AskBeforeCoding()
