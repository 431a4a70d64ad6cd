"""``@component(timeout_s=...)``: a call that does not return in time costs its own sample, never the batch.

Without it one hung call (an endpoint that never answers, a loop on one odd input) held every rollout of the
run. With it the sample is a ``component_timeout`` error record (never a 0) and the others are scored.
"""

from __future__ import annotations

import asyncio
import copy
import threading

import pytest

from rewardpipe import Reward, component
from rewardpipe.components import ComponentDefinitionError
from rewardpipe.rewards.base import ScoringInput

LIMIT_S = 0.2
release = threading.Event()  # set at the end of the module: no thread outlives the tests by more than that


@pytest.fixture(scope="module", autouse=True)
def _release_hung_calls():
    yield
    release.set()


@component(range=(0, 1), role="outcome", timeout_s=LIMIT_S)
def passes(completion):
    if "hang" in completion:
        release.wait()
    if "boom" in completion:
        raise ValueError("a bug of the component's own")
    if "none" in completion:
        return None
    return 1.0 if "good" in completion else 0.0


@component(range=(0, 1), role="shaping", timeout_s=LIMIT_S)
async def judged(completion):
    if "slow judge" in completion:
        await asyncio.sleep(3600)  # cancelled at the limit
    if "judge timeout" in completion:
        raise TimeoutError("the judge's own HTTP timeout")
    return 0.5


@component(range=(0, 1), role="shaping")
def brevity(completion):
    return 1.0 if len(completion) < 40 else 0.0


def _inputs(*completions):
    return [ScoringInput(completion=c) for c in completions]


def test_a_hung_plain_component_costs_its_own_sample_only():
    reward = Reward("r", [passes, brevity])
    scores = reward.score_many(_inputs("good", "hang", "bad"))
    assert [s.aggregate for s in scores] == [2.0, None, 1.0]
    hung = scores[1]
    assert hung.error.kind == "component_timeout" and "passes" in hung.error.message
    assert f"{LIMIT_S:g} s" in hung.error.message
    assert hung.components["brevity"] == 1.0  # the other components of that sample still ran


def test_a_hung_async_component_is_cancelled_and_costs_its_own_sample_only():
    reward = Reward("r", [judged, brevity])
    scores = reward.score_many(_inputs("fine", "a slow judge", "fine too"))
    assert [s.error.kind if s.error else None for s in scores] == [None, "component_timeout", None]
    assert [s.aggregate for s in scores] == [1.5, None, 1.5]


@component(range=(0, 1), role="shaping", timeout_s=LIMIT_S)
async def blocking_judge(completion):
    if "blocks" in completion:
        import time

        time.sleep(LIMIT_S * 2)  # a synchronous call inside async def: the loop cannot cancel it
    return 0.5


def test_an_async_component_that_blocks_the_loop_past_its_limit_is_a_timeout_not_its_late_value():
    """Round nineteen (left open in round eighteen): the deadline could not fire while the call held the loop,
    so the blocking call's sample took its late value while the calls it held waiting were cancelled at their
    limits: the one at fault scored, its victims did not. It is a component_timeout too."""
    reward = Reward("r", [blocking_judge, brevity])
    scores = reward.score_many(_inputs("fine", "this one blocks", "fine too"))
    assert scores[1].error is not None and scores[1].error.kind == "component_timeout"
    assert "blocking_judge" in scores[1].error.message
    assert scores[1].components["brevity"] == 1.0


def test_what_the_component_raises_or_returns_is_told_as_without_a_limit():
    reward = Reward("r", [passes, judged])
    boom, none, own_timeout = reward.score_many(_inputs("boom", "none", "judge timeout"))
    assert boom.error.kind == "component_raised" and "a bug of the component's own" in boom.error.message
    assert none.error.kind == "component_unavailable"
    # a TimeoutError the component raised itself is its error, not the time limit
    assert own_timeout.error.kind == "component_raised" and "HTTP timeout" in own_timeout.error.message
    single = reward.score_input(ScoringInput(completion="good"))
    assert single.error is None and single.aggregate == 1.5


def test_calling_the_component_yourself_is_not_bounded():
    assert passes("good") == 1.0 and asyncio.run(judged("x")) == 0.5


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True, "5"])
def test_a_bad_limit_is_refused_naming_the_component(bad):
    with pytest.raises(ComponentDefinitionError, match=r"component 'limited': timeout_s"):
        component(range=(0, 1), role="shaping", timeout_s=bad, name="limited")(lambda completion: 1.0)


def test_the_limit_is_kept_by_replace_a_copy_and_the_manifest():
    assert passes.describe()["timeout_s"] == LIMIT_S and "timeout_s" not in brevity.describe()
    assert passes.replace(weight=2.0).timeout_s == LIMIT_S
    assert copy.deepcopy(passes) == passes
    assert passes != passes.replace(timeout_s=None) and passes.replace(timeout_s=None).timeout_s is None


def test_check_reward_reports_a_component_past_its_limit():
    from rewardpipe.testing import check_reward

    with pytest.raises(AssertionError, match=r"\[component_timeout\] component 'passes' did not finish"):
        check_reward(Reward("r", [passes, brevity]), [{"completion": "good"}, {"completion": "hang"}])


started: list[str] = []


@component(range=(0, 1), role="outcome", timeout_s=LIMIT_S)
def counted(completion):
    started.append(completion)
    if "hang" in completion:
        release.wait()
    return 1.0


def test_score_columns_waits_out_a_hung_call_once():
    """Round eighteen: score_columns (TRL's reward functions) scored a failed sample again to name its error,
    so a call past its limit was started a second time: twice the wait and a second abandoned thread."""
    started.clear()
    columns = Reward("r", [counted, brevity]).score_columns(_inputs("fine", "hang"))
    assert columns.aggregates == [2.0, None] and columns.values == [[1.0, None], [1.0, None]]
    assert columns.errors[1].kind == "component_timeout" and "counted" in columns.errors[1].message
    assert started == ["fine", "hang"]


def test_the_run_manifest_keeps_the_limit():
    """Round eighteen: Component.describe() gave timeout_s, but the manifest's ComponentInfo ignored fields it
    did not know, so no written manifest carried the limit its run was scored under."""
    from rewardpipe.cli.common import new_manifest
    from rewardpipe.models import RunManifest

    manifest = new_manifest(
        run_id="r", command="score", configuration={}, tasks_file=None, reward=Reward("r", [passes, brevity])
    )
    written = RunManifest.model_validate(manifest.to_dict()).to_dict()["components"]
    assert written["passes"]["timeout_s"] == LIMIT_S
    assert "timeout_s" not in written["brevity"]  # a manifest without limits is written as before


def test_a_plain_component_under_a_limit_reads_its_inputs_and_context_as_without_one():
    """Round eighteen: the whole call ran in the worker thread, so the sample's lazy inputs (a messages
    function, the transcript) were built there, where an abandoned call went on mutating the ScoringInput the
    next components read, and the caller's context variables were unset (a thread starts with an empty
    context). The inputs are now taken in the caller's thread and the call runs in a copy of its context."""
    import contextvars

    from rewardpipe.models import Message

    step = contextvars.ContextVar("step", default=None)
    built_in: list[threading.Thread] = []

    def messages():
        built_in.append(threading.current_thread())
        return [Message(role="user", content="q"), Message(role="assistant", content="a")]

    @component(range=(0, 10), role="shaping", timeout_s=60.0)
    def reads(messages):
        return float(step.get() or 0) + len(messages)

    token = step.set(7)
    try:
        score = Reward("r", [reads]).score_input(ScoringInput(messages=messages))
    finally:
        step.reset(token)
    assert score.error is None and score.components["reads"] == 9.0
    assert built_in == [threading.current_thread()]


def test_calls_past_the_limit_still_running_are_bounded(monkeypatch):
    """Round eighteen: every call past its limit left a thread behind, so a component hung on every sample (an
    endpoint that never answers) left one per sample, per batch, without end, and each sample waited the whole
    limit. Once MAX_ABANDONED_CALLS of a component's calls are still running, its next call is not started: the
    sample is a component_timeout at once, saying why."""
    from rewardpipe import components

    monkeypatch.setattr(components, "MAX_ABANDONED_CALLS", 2, raising=False)

    @component(range=(0, 1), role="outcome", timeout_s=LIMIT_S)
    def stuck(completion):
        started.append(completion)
        release.wait()
        return 1.0

    started.clear()
    scores = Reward("r", [stuck]).score_many(_inputs("a", "b", "c", "d"))
    assert [s.error.kind for s in scores] == ["component_timeout"] * 4
    assert started == ["a", "b"]
    assert "2 earlier calls still running" in scores[3].error.message
