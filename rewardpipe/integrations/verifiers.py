"""verifiers adapter: the reward components as a ``vf.Rubric`` and the user simulator as an environment turn.

Supported: verifiers 0.2.1 (the ``[verifiers]`` extra; ``make test-verifiers`` runs a real ``vf.MultiTurnEnv``
rollout and a real ``vf.Rubric`` against it). 0.3 moved this API under ``verifiers.legacy`` and 0.4 replaced
it with ``verifiers.v1``, which has neither ``Rubric`` nor ``MultiTurnEnv``. Reward functions ask for what
they need by argument name (``completion``, ``answer``, ``prompt``, ``info``, ``**kwargs``) and return a
float; ``vf.Rubric(funcs=[...], weights=[...])`` sums them with the weights. Messages arrive as dicts or as
verifiers' pydantic message objects; both are read.

* :func:`rubric_functions` gives ``(funcs, weights)``, one function per component (named after it, so
  verifiers logs each one) of any reward (a built-in name, ``package.module:ATTR``, ``file.py:ATTR``, an
  installed short name); each sample is scored once (:class:`SampleScorer`), not once per component;
  :func:`rubric` wraps them in ``vf.Rubric``.
* :func:`from_verifiers` (:mod:`rewardpipe.integrations.verifiers_env`) goes the other way: a classic verifiers
  environment, its Rubric as components, runs inside rewardpipe's loop (``run``, ``doctor``, TRL's
  ``rollout_func``) as a rewardpipe Environment.
* :func:`simulator_env_response` is the body of a ``vf.MultiTurnEnv.env_response``: given the conversation
  so far and the task, it returns the simulator's user turn. Keep the task under an ``info`` key of your own
  (``info["rewardpipe_task"]``): verifiers 0.2 reads ``info["task"]`` as its own task payload. What the
  simulator already revealed is read off the conversation (verifiers keeps no simulator state).

verifiers turns a reward-function exception into 0.0; here a component that raised (``component_raised``) or
could not compute, or scoring that failed around the components (logged), makes the sample ``float("nan")`` in
every function instead, never a zero. A NaN reward would
make the whole group's advantages NaN (verifiers 0.2.1's ``Rubric.score_group`` subtracts the group's plain mean,
and GRPO trainers take a plain mean and standard deviation per group), so :func:`rubric`, which sees the group,
settles such a sample (:func:`settle_group`): its reward becomes the mean of its group's scored samples (its
advantage 0, the others' as if it were absent), its component metrics the scored samples' means, and its
``reward_error`` metric 1 (0 for every scored sample), and it is marked failed the way verifiers marks a rollout
(``state["error"]``, a ``vf.Error``). A group with no scored sample gets each component's mid-range for all
(advantages 0). A rollout scored alone (``Rubric.score_rollout``, verifiers' independent scoring)
has no group to take a value from and stays NaN, flagged ``reward_error`` 1 and marked failed the way verifiers marks
a rollout (``state["error"]``, a ``vf.Error``); the functions of :func:`rubric_functions` in a rubric of your own
stay NaN too (with no mark: they see no state). A rollout verifiers ended on a failure that is not the model's
(``state["error"]`` an ``InfraError``, or a ``ModelError`` other than an invalid or empty response) is unscorable
to :func:`rubric` too, its cut conversation never scored as an answer.
"""

from __future__ import annotations

import functools
import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, cast

from rewardpipe.integrations.verifiers_env import VerifiersEnvironment, VfState, VfTask, from_verifiers
from rewardpipe.integrations.verifiers_watch import GroupWatch
from rewardpipe.models import Message, Task, nova_fields
from rewardpipe.rewards import Reward, get_reward
from rewardpipe.single_turn import score_samples

__all__ = [
    "REWARD_ERROR",
    "GroupWatch",
    "SampleScorer",
    "VerifiersEnvironment",
    "VfState",
    "VfTask",
    "from_verifiers",
    "rubric",
    "rubric_functions",
    "settle_group",
    "simulator_env_response",
]

logger = logging.getLogger("rewardpipe.verifiers")

#: The metric :func:`rubric` adds to every rollout: 1.0 when its sample could not be scored, else 0.0.
REWARD_ERROR = "reward_error"


def _message(value: Any) -> dict[str, Any] | None:
    """One chat message as a dict: verifiers passes dicts (older releases) or its pydantic message objects
    (``UserMessage``, ``AssistantMessage``... in 0.2); anything without a role is dropped."""
    if isinstance(value, Mapping):
        message = dict(value)
    elif hasattr(value, "model_dump"):
        message = value.model_dump()
    else:
        message = {"role": getattr(value, "role", None), "content": getattr(value, "content", None)}
    return message if isinstance(message.get("role"), str) else None


def _messages(value: Any, role: str) -> list[dict[str, Any]]:
    if isinstance(value, list):
        return [m for m in map(_message, value) if m is not None]
    return [{"role": role, "content": value if isinstance(value, str) else ""}]


class _Entry:
    """The samples seen with one content: each one's scores (in arrival order) and how many each function has
    been served. Identical rollouts of a group are as many samples, each scored once."""

    __slots__ = ("results", "served")

    def __init__(self) -> None:
        self.results: list[Future[dict[str, float]]] = []
        self.served: dict[str, int] = {}


class SampleScorer:
    """Scores each sample once and serves every component's rubric function from it.

    verifiers calls the rubric's functions one by one for each rollout (``score_rollout``), or each function
    over the whole group before the next (``score_group``); either way each function is called once per
    rollout with that rollout's completion, answer and prompt. A function's n-th call for a content reads the
    n-th sample with that content, scoring it if no other function has yet (its code runs once). So a group
    holding identical rollouts, as GRPO groups often do, is scored once per rollout, not once per function.
    Samples every function has read are forgotten, and at most ``keep`` contents are held (the oldest go
    first), so memory stays bounded. Thread-safe: a sample being scored on one thread is waited for, not
    scored again."""

    def __init__(self, reward: Reward, executor: Any = None, keep: int = 4096) -> None:
        import threading
        from collections import OrderedDict

        self.reward, self.executor, self.keep = reward, executor, keep
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.samples_scored = 0
        self._unkeyed = 0

    def _score(self, sample: dict[str, Any]) -> dict[str, float]:
        """The sample's value of every component; NaN in each when it could not be scored. Scoring that raises (an
        infrastructure fault outside the components: the sandbox's executor could not be made) is logged and NaN
        too: verifiers would turn the exception into 0.0, a wrong answer's score, in every function."""
        try:
            result = score_samples([sample], self.reward, executor=self.executor)[0]
        except Exception as exc:  # noqa: BLE001 - an interrupt still stops the run
            logger.warning(
                "rewardpipe: reward %r could not score a sample (%s: %s); it is NaN in every rubric function",
                self.reward.name,
                type(exc).__name__,
                str(exc)[:500],
            )
            return dict.fromkeys(self.reward.component_names, math.nan)
        rewards, flags = nova_fields(result)  # components and flags apart, whatever their names
        failed = bool(flags.get("reward_error"))
        return {c: math.nan if failed or c not in rewards else float(rewards[c]) for c in self.reward.component_names}

    def _key(self, sample: dict[str, Any]) -> str:
        """The sample's content as a key. An answer whose dict keys do not sort (``{1: ..., "unit": ...}``) or
        that nests past the recursion limit made ``json.dumps`` raise out of every rubric function, which
        verifiers turned into 0.0: such a sample is keyed by its repr, else by itself (scored once per
        function, never a 0)."""
        try:
            return json.dumps(sample, sort_keys=True, default=repr)
        except (TypeError, ValueError, RecursionError):
            try:
                return "repr:" + repr(sample)
            except RecursionError:
                with self._lock:
                    self._unkeyed += 1
                    return f"unkeyed:{self._unkeyed}"

    def value(self, name: str, completion: Any, answer: Any, prompt: Any) -> float:
        sample = {
            "id": 0,
            # a completion that is no text nor messages (None, a number) has no answer: NaN, never a 0
            "messages": _messages(prompt or "", "user")
            + (_messages(completion, "assistant") if isinstance(completion, (str, list)) else []),
            "metadata": {"reference_answer": answer},
        }
        key = self._key(sample)
        mine = False
        with self._lock:
            entry = self._cache.get(key)
            if entry is None:
                entry = self._cache[key] = _Entry()
                while len(self._cache) > self.keep:
                    self._cache.popitem(last=False)
            index = entry.served.get(name, 0)
            entry.served[name] = index + 1
            if index == len(entry.results):  # no function has read this sample yet: this call scores it
                entry.results.append(Future())
                mine = True
                self.samples_scored += 1
            future = entry.results[index]
        if mine:
            try:
                scored = self._score(sample)
            except BaseException as exc:  # every function waiting on this sample gets it too
                future.set_exception(exc)
                raise
            future.set_result(scored)
        values = future.result()
        with self._lock:
            done = len(entry.results)
            if all(entry.served.get(c, 0) >= done for c in values) and self._cache.get(key) is entry:
                del self._cache[key]  # every function has read every sample of this content
        return values[name]


def rubric_functions(
    reward: Any = "gsm8k", weights: Mapping[str, float] | None = None, executor: Any = None
) -> tuple[list[Callable[..., float]], list[float]]:
    """``(funcs, weights)``: one rubric function per component of ``reward`` (any reference: a built-in name,
    ``package.module:ATTR``, ``file.py:ATTR``, an installed short name; or a Reward). Each sample is scored
    once, whatever the number of components; one that cannot be scored (a component raised, or returned
    None) is NaN in every function, never verifiers' 0.0."""
    resolved = get_reward(reward, weights)
    scorer = SampleScorer(resolved, executor)

    def component_fn(name: str) -> Callable[..., float]:
        def fn(completion: Any = None, answer: Any = None, prompt: Any = None, **_: Any) -> float:
            return scorer.value(name, completion, answer, prompt)

        fn.__name__ = name
        fn.rewardpipe_scorer = scorer  # type: ignore[attr-defined]
        return fn

    return [component_fn(c.name) for c in resolved.components], [c.weight for c in resolved.components]


def rubric(
    reward: str | Reward = "gsm8k",
    weights: Mapping[str, float] | None = None,
    *,
    watch: GroupWatch | None = None,
    **rubric_kwargs: Any,
) -> Any:
    """``vf.Rubric`` of the reward's components (needs the ``verifiers`` package). Its ``score_group`` settles a
    sample that could not be scored from its group (:func:`settle_group`), so one failure never makes the
    group's advantages NaN; every rollout gets a ``reward_error`` metric. With ``watch``
    (:class:`~rewardpipe.integrations.verifiers_watch.GroupWatch`) every group it scores is handed to the
    within-group monitor first, its unscorable samples as errors."""
    resolved = get_reward(reward, weights)
    funcs, w = rubric_functions(resolved)
    middles = {c.name: (c.value_range[0] + c.value_range[1]) / 2.0 for c in resolved.components}
    return _rubric_class()(
        funcs=funcs,
        weights=w,
        rewardpipe_middles=middles,
        rewardpipe_reward=resolved.name,
        rewardpipe_watch=watch,
        **rubric_kwargs,
    )


_RUBRIC_CLASS: Any = None


def _rubric_class() -> Any:
    """The ``vf.Rubric`` subclass :func:`rubric` builds, made once verifiers is importable."""
    global _RUBRIC_CLASS
    if _RUBRIC_CLASS is None:
        import verifiers as vf  # optional dependency

        class RewardpipeRubric(vf.Rubric):
            """A ``vf.Rubric`` whose unscorable samples never poison their group (:func:`settle_group`)."""

            def __init__(
                self,
                *args: Any,
                rewardpipe_middles: Mapping[str, float],
                rewardpipe_reward: str = "",
                rewardpipe_watch: GroupWatch | None = None,
                **kwargs: Any,
            ) -> None:
                super().__init__(*args, **kwargs)
                self.rewardpipe_middles = dict(rewardpipe_middles)
                self.rewardpipe_reward = rewardpipe_reward
                self.rewardpipe_watch = rewardpipe_watch

            async def score_rollout(self, state: Any) -> None:
                cut = _cut_by_infrastructure(vf, state)
                await super().score_rollout(state)
                if cut:  # no group to settle it from: NaN, as any unscorable rollout scored alone
                    self._unscorable(state)
                    state["reward"] = math.nan
                metrics = state.get("metrics") or {}
                failed = any(_nan(metrics.get(name)) for name in self.rewardpipe_middles)
                state["metrics"] = {**metrics, REWARD_ERROR: 1.0 if failed else 0.0}
                if failed:  # no group to settle it from: its reward stays NaN
                    self._mark_failed(state, "NaN")

            def _unscorable(self, state: Any) -> None:
                """Every component of ``state`` NaN: a rollout rewardpipe must not score (settled as any unscorable
                one)."""
                state["metrics"] = {**(state.get("metrics") or {}), **dict.fromkeys(self.rewardpipe_middles, math.nan)}

            def _mark_failed(self, state: Any, reward: str) -> None:
                """verifiers' own mark of a failed rollout, ``state["error"]`` (unless it has one): vf-eval counts and
                prints it, a trainer dropping errored rollouts drops it. The reward alone (NaN, or a group's settled
                mean) passed for a score."""
                if state.get("error") is None:
                    state["error"] = _scoring_error(vf)(
                        f"rewardpipe could not score this rollout with reward '{self.rewardpipe_reward}' "
                        f"(a component raised or could not compute; see the rewardpipe.verifiers log): its reward is "
                        f"{reward}, never a 0"
                    )

            async def score_group(self, states: list[Any]) -> None:
                unset = [
                    [
                        (step.get("advantage") is None, step.get("reward") is None)
                        for step in state.get("trajectory") or []
                    ]
                    for state in states
                ]
                cut = [_cut_by_infrastructure(vf, state) for state in states]
                await super().score_group(states)
                for state, infrastructure in zip(states, cut, strict=True):
                    if infrastructure:  # its conversation was cut by a failure that is not the model's: no score
                        self._unscorable(state)
                weights = dict(zip((getattr(f, "__name__", "") for f in self.funcs), self.weights, strict=False))
                if self.rewardpipe_watch is not None:  # before settling: an unscorable sample is an error there
                    _watch_group(self.rewardpipe_watch, states, weights, self.rewardpipe_middles)
                if settle_group(states, self.rewardpipe_middles, weights):
                    for state in states:
                        if state["metrics"][REWARD_ERROR]:
                            self._mark_failed(state, "its group's settled mean (advantage 0)")
                    for state, steps in zip(states, unset, strict=True):
                        for step, (advantage, step_reward) in zip(state.get("trajectory") or [], steps, strict=False):
                            if advantage:
                                step["advantage"] = state["advantage"]
                            if step_reward:
                                step["reward"] = state["reward"]

        _RUBRIC_CLASS = RewardpipeRubric
    return _RUBRIC_CLASS


def _watch_group(watch: GroupWatch, states: list[Any], weights: Mapping[str, float], names: Mapping[str, Any]) -> None:
    """Hand one scored group to ``watch``: each rollout's component metrics and its conversation; and give each
    rollout the group's within-group figures as metrics (:meth:`GroupWatch.group_metrics`, the figures TRL's callback
    logs), which vf-eval and the trainers average over a batch. Monitoring never stops the scoring: a failure is
    logged."""
    components = [state.get("metrics") or {} for state in states]
    component_weights = {name: float(weights.get(name, 1.0)) for name in names}
    try:
        watch.add_group(
            components,
            component_weights,
            [
                _messages(state.get("prompt"), "user") + _messages(state.get("completion"), "assistant")
                for state in states
            ],
        )
    except Exception:
        logger.exception("rewardpipe: the within-group monitor could not take a group")
    try:
        figures = watch.group_metrics(components, component_weights)
    except Exception:  # the rollouts keep their own metrics; the figures are missing from every one, never a part
        logger.exception("rewardpipe: the group's within-group figures could not be computed")
        return
    for state in states:
        state["metrics"] = {**(state.get("metrics") or {}), **figures}


def _cut_by_infrastructure(vf: Any, state: Any) -> bool:
    """Whether verifiers ended the rollout on a failure that is not the model's: its ``state["error"]`` an
    ``InfraError`` (a sandbox, a tunnel) or a ``ModelError`` other than an invalid or empty response (the model's
    server could not be reached). verifiers scores such a rollout's cut conversation all the same; its score would
    be a 0 for the infrastructure's failure. A tool call the model wrote badly (``ToolError``) is the model's own."""
    error = state.get("error")
    kinds = [getattr(vf, name, None) for name in ("InfraError", "ModelError", "InvalidModelResponseError")]
    if error is None or not all(isinstance(kind, type) for kind in kinds):  # a release without these errors
        return False
    infra, model, invalid = cast("list[type]", kinds)
    return isinstance(error, infra) or (isinstance(error, model) and not isinstance(error, invalid))


@functools.cache
def _scoring_error(vf: Any) -> type[Exception]:
    """The ``vf.Error`` a rollout scored alone carries when it could not be scored (``state["error"]``)."""
    base = getattr(vf, "Error", None)
    if not (isinstance(base, type) and issubclass(base, Exception)):  # a release without verifiers.errors
        base = RuntimeError
    return type("RewardpipeScoringError", (base,), {"__module__": __name__})


def _nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def settle_group(states: list[Any], middles: Mapping[str, float], weights: Mapping[str, float]) -> bool:
    """Settle the samples of one group (verifiers states, after scoring) that could not be scored: a component
    metric NaN. Each gets the mean reward of the group's scored samples (so its advantage is 0 and theirs are what
    they would be without it) and, as component metrics, the scored samples' means; with no scored sample in the
    group, every component's mid-range (``middles``) and the reward they weigh to (``weights``: every rubric
    function's weight by name). Every state gets ``reward_error`` (1.0 for a settled one) and the advantages are
    taken again from the settled rewards (reward minus the group's mean, as ``score_group`` takes them). Returns
    whether any sample was settled (nothing else changes when none was)."""
    failed = [any(_nan((state.get("metrics") or {}).get(name)) for name in middles) for state in states]
    for state, bad in zip(states, failed, strict=True):
        state["metrics"] = {**(state.get("metrics") or {}), REWARD_ERROR: 1.0 if bad else 0.0}
    if not any(failed):
        return False
    scored = [state for state, bad in zip(states, failed, strict=True) if not bad]
    for state, bad in zip(states, failed, strict=True):
        if not bad:
            continue
        metrics = state["metrics"]
        for name, middle in middles.items():
            metrics[name] = sum(s["metrics"][name] for s in scored) / len(scored) if scored else middle
        if scored:
            state["reward"] = sum(float(s["reward"]) for s in scored) / len(scored)
        else:
            state["reward"] = sum(
                weight * float(metrics.get(name, 0.0)) for name, weight in weights.items() if name in metrics
            )
    mean = sum(float(state["reward"]) for state in states) / len(states)
    for state in states:
        state["advantage"] = float(state["reward"]) - mean
    return True


def simulator_env_response(
    messages: Sequence[Mapping[str, Any]], task: Task | Mapping[str, Any], simulator: Any = None
) -> list[dict[str, str]]:
    """The user simulator's next turn for a conversation, as a one-message list.

    The simulator sees the hidden ``spec`` of the task but never its tests or reference solution.
    """
    from rewardpipe.envs.ask_before_coding.environment import ENVIRONMENT
    from rewardpipe.envs.ask_before_coding.simulator import RuleBasedSimulator

    task = task if isinstance(task, Task) else Task.model_validate(task)
    parsed = [Message.model_validate(m) for m in _messages(list(messages), "user")]
    # verifiers keeps no simulator bookkeeping: what was revealed is read off the conversation so far (the
    # environment's replay, as recorded transcripts are scored), so a detail is never revealed twice and the
    # next one comes out.
    state = ENVIRONMENT.replay(task, parsed).model_copy(
        update={"run_id": "verifiers", "group_id": "g", "rollout_id": "r", "next_action": "env", "end_reason": None}
    )
    reply = (simulator or RuleBasedSimulator()).respond(state, task)
    return [{"role": "user", "content": reply.text}]
