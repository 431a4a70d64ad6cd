"""An environment's ``hook_timeout_s``: a hook that hangs (a game engine looping on one odd move of the model's, a
simulator's call that never answers) costs its own rollout, as a ``simulator_error``, never the run."""

from __future__ import annotations

import threading
import time

import pytest

from rewardpipe import EnvContext, Environment, EpisodeState, Reward, TaskRow, component
from rewardpipe.environment import check_environment
from rewardpipe.episode import HookTimeout, call_hook, run_episode, start_episode
from rewardpipe.execution.result import ExecutionJob
from rewardpipe.runner import plan_step, run_slots

LIMIT_S = 0.2
release = threading.Event()  # set at the end of each test: the abandoned calls return and their threads end


@pytest.fixture(autouse=True)
def _release_abandoned_calls():
    release.clear()
    yield
    release.set()


@component(range=(0, 1), role="outcome")
def said_stop(state: EpisodeState) -> float:
    return float(any(m.content == "stop" for m in state.messages if m.role == "assistant"))


class Hangs(TaskRow):
    hang_in: str = ""  # the hook that hangs for this task ("" for none)


class Stalling(Environment):
    """Answers 'go on' until the model says 'stop'; the hook a task names hangs until the test ends."""

    name = "stalling"
    version = "1"
    task_model = Hangs
    max_turns = 3
    hook_timeout_s = LIMIT_S
    reward = Reward("stalling", [said_stop])

    def _maybe_hang(self, task: Hangs, hook: str) -> None:
        if task.hang_in == hook:
            release.wait()

    def start(self, task):
        self._maybe_hang(task, "start")
        return super().start(task)

    def on_policy_turn(self, state, task, text):
        self._maybe_hang(task, "on_policy_turn")
        if text == "stop":
            return state.evolve(next_action="execute" if task.hang_in == "execution_job" else "score")
        return state.evolve(next_action="env")

    def respond(self, state, task, ctx: EnvContext):
        self._maybe_hang(task, "respond")
        return state.append({"role": "user", "content": "go on"}, next_action="policy")

    def execution_job(self, state, task):
        self._maybe_hang(task, "execution_job")
        return ExecutionJob(code="x = 1", tests="", entry_point="x", tests_format="check")

    def metrics(self, state, task):
        self._maybe_hang(task, "metrics")
        return {"turns_seen": state.assistant_turns}


class GoOnThenStop:
    def next_turn(self, state, task):
        return "stop" if state.assistant_turns else "go"


class NeverRuns:
    def run(self, job):
        raise AssertionError("a timed-out execution_job must not reach the sandbox")

    def run_batch(self, jobs, workers=None):
        raise AssertionError("a timed-out execution_job must not reach the sandbox")


@pytest.mark.parametrize("hook", ["start", "on_policy_turn", "respond", "execution_job"])
def test_a_hung_hook_is_its_rollouts_simulator_error_and_the_run_goes_on(hook):
    tasks = [Hangs(task_id="fine", prompt="p"), Hangs(task_id="stuck", prompt="p", hang_in=hook)]
    started = time.monotonic()
    records = run_slots(
        plan_step(tasks, 0, 2, 2), policy=GoOnThenStop(), env=Stalling(), executor=NeverRuns(), run_id="run"
    )
    elapsed = time.monotonic() - started
    by_task = {}
    for record in records:
        by_task.setdefault(record.task_id, []).append(record)
    assert [r.status for r in by_task["fine"]] == ["scored", "scored"]
    assert [r.components for r in by_task["fine"]] == [{"said_stop": 1.0}] * 2
    for record in by_task["stuck"]:
        assert record.status == "error" and record.error.kind == "simulator_error"
        assert f"{hook}() did not return within hook_timeout_s=0.2 s" in record.error.message
        assert record.aggregate is None  # never a 0
    assert elapsed < 60  # the run ended although both stuck calls still hang (released only after the test)


def test_a_hung_metrics_hook_leaves_the_score_and_says_why():
    record = run_episode(
        Hangs(task_id="t", prompt="p", hang_in="metrics"),
        GoOnThenStop(),
        Stalling(),
        NeverRuns(),
        run_id="run",
        step=0,
        group_id="g",
        rollout_id="r",
    )
    assert record.status == "scored" and record.components == {"said_stop": 1.0}
    assert "metrics() did not return within" in record.metrics["env_metrics_error"]


def test_a_hook_within_its_limit_returns_its_value_and_its_own_errors():
    env = Stalling()
    state = start_episode(Hangs(task_id="t", prompt="p"), env=env, run_id="r", step=0, group_id="g", rollout_id="r")
    assert state.messages[0].content == "p"

    class Raises(Stalling):
        def start(self, task):
            raise KeyError("the env's own bug")

    with pytest.raises(KeyError, match="the env's own bug"):
        call_hook(Raises(), "start", Hangs(task_id="t", prompt="p"))


def test_without_a_limit_a_hook_runs_in_the_callers_thread():
    seen: list[threading.Thread] = []

    class Unbounded(Stalling):
        hook_timeout_s = None

        def start(self, task):
            seen.append(threading.current_thread())
            return super().start(task)

    call_hook(Unbounded(), "start", Hangs(task_id="t", prompt="p"))
    assert seen == [threading.current_thread()]


def test_calls_still_running_past_the_limit_are_bounded(monkeypatch):
    """A hook hung on every input would leave a thread behind per rollout: past the cap the next call is not
    started and its rollout fails at once, saying why."""
    from rewardpipe import bounded

    class HangsAlways(Stalling):
        def start(self, task):
            calls.append(task.task_id)
            release.wait()

    calls: list[str] = []
    monkeypatch.setattr(bounded, "MAX_ABANDONED_CALLS", 2)
    env = HangsAlways()
    for name in ("a", "b"):
        with pytest.raises(HookTimeout, match="did not return"):
            call_hook(env, "start", Hangs(task_id=name, prompt="p"))
    # No wait for a call that is never made: a call made would now wait 30 s, far past the bound (a bound of
    # LIMIT_S itself, 0.2 s, a loaded machine's scheduling alone could pass)
    env.hook_timeout_s = 30.0
    started = time.monotonic()
    with pytest.raises(HookTimeout, match="not called: 2 earlier calls still running"):
        call_hook(env, "start", Hangs(task_id="c", prompt="p"))
    assert time.monotonic() - started < 10
    assert calls == ["a", "b"]


@pytest.mark.parametrize("value", [0, -1, True, "5", float("nan"), float("inf")])
def test_a_bad_hook_timeout_is_refused_naming_it(value):
    class Bad(Stalling):
        hook_timeout_s = value

    with pytest.raises(ValueError, match="hook_timeout_s must be a number of seconds above 0"):
        check_environment(Bad())


def test_an_unchecked_environment_with_a_bad_limit_fails_its_rollouts_not_the_run():
    class Bad(Stalling):
        hook_timeout_s = "soon"

    records = run_slots(
        plan_step([Hangs(task_id="t", prompt="p")], 0, 1, 2),
        policy=GoOnThenStop(),
        env=Bad(),
        executor=NeverRuns(),
        run_id="run",
    )
    assert [(r.status, r.error.kind) for r in records] == [("error", "simulator_error")] * 2
    assert "hook_timeout_s must be a number" in records[0].error.message
