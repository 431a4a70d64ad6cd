"""Round thirty-six (third wave), a hook past its ``hook_timeout_s``: worded as every other hook failure.

Before this round a hung hook's record read ``HookTimeout: environment 'x': respond() did not return ...`` while a
hook that raised reads ``environment 'x': respond() raised ValueError: ... (at file:line)``: the one hook failure
worded apart, the platform's class name first. Now every path that records it (a local run, a replayed recording,
the environment's ``metrics()``, TRL's episodes and the AWS workflow, through ``episode.hook_failure``) starts with
the environment and the hook, and ends with where the hook is defined.
"""

from __future__ import annotations

import re

import pytest

from rewardpipe.episode import HookTimeout, hook_failure, run_episode
from rewardpipe.models import Rollout
from rewardpipe.runner import plan_step, run_slots, score_rollouts
from tests.api import test_hook_timeout as hung
from tests.api.test_hook_timeout import GoOnThenStop, Hangs, NeverRuns, Stalling


@pytest.fixture(autouse=True)
def _release_abandoned_calls():
    hung.release.clear()
    yield
    hung.release.set()  # the abandoned calls return and their threads end


class Hanging(Stalling):
    """test_hook_timeout's environment (its hook a task names hangs), its own ``replay()`` hanging too."""

    def replay(self, task, messages):
        self._maybe_hang(task, "replay")
        return super().replay(task, messages)


def _worded_as_a_hook_failure(message: str, hook: str) -> None:
    assert not message.startswith("HookTimeout")
    assert message.startswith(f"environment 'stalling': {hook}() did not return within hook_timeout_s=0.2 s")
    assert re.search(rf"\({hook}\(\) is at \S*test_(round_thirtysix_c_)?hook_timeout\.py:\d+\)$", message), message


@pytest.mark.parametrize("hook", ["start", "respond"])
def test_a_local_runs_hung_hook_reads_like_a_raising_one(hook):
    (record,) = run_slots(
        plan_step([Hangs(task_id="t", prompt="p", hang_in=hook)], 0, 1, 1),
        policy=GoOnThenStop(),
        env=Hanging(),
        executor=NeverRuns(),
        run_id="run",
    )
    assert record.status == "error" and record.error.kind == "simulator_error"
    _worded_as_a_hook_failure(record.error.message, hook)


def test_a_hung_metrics_hook_and_a_hung_replay_are_worded_alike():
    record = run_episode(
        Hangs(task_id="t", prompt="p", hang_in="metrics"),
        GoOnThenStop(),
        Hanging(),
        NeverRuns(),
        run_id="run",
        step=0,
        group_id="g",
        rollout_id="r",
    )
    assert record.status == "scored"
    _worded_as_a_hook_failure(record.metrics["env_metrics_error"], "metrics")

    rollout = Rollout(
        rollout_id="r",
        group_id="g",
        task_id="t",
        step=0,
        messages=[{"role": "user", "content": "p"}, {"role": "assistant", "content": "go"}],
    )
    tasks = {"t": Hangs(task_id="t", prompt="p", hang_in="replay")}
    (replayed,) = score_rollouts([rollout], tasks, executor=NeverRuns(), env=Hanging(), run_id="run")
    assert replayed.error.kind == "replay_failed"
    _worded_as_a_hook_failure(replayed.error.message, "replay")


def test_the_aws_workflow_words_a_hung_hook_as_the_local_run_does():
    from rewardpipe.aws.rollout import hook_failed

    env = Hanging()
    timeout = HookTimeout(env, "start", env.hook_timeout_s)
    assert str(hook_failed(env, "start", timeout)) == hook_failure(env, "start", timeout)
    _worded_as_a_hook_failure(hook_failure(env, "start", timeout), "start")
