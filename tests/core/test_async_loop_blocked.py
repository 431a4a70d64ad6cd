"""An async component that blocks its event loop (a synchronous HTTP call or ``time.sleep`` inside ``async def``)
past its ``timeout_s`` no longer holds the batch: its sample is a ``component_timeout``, the loop is abandoned, and
the other samples' async calls are scored on a loop of their own.

Left open in round nineteen: the deadline cannot fire on a loop that never gets control back, so the whole batch
waited for the blocking call however long it took (for ever, for a call that never returns)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from rewardpipe import Reward, bounded, component
from rewardpipe.rewards.base import ScoringInput

LIMIT_S = 0.2
BATCH_WAIT_S = 20  # far beyond what a released batch takes; the blocked call itself waits for the test's end
release = threading.Event()
calls: list[str] = []


@pytest.fixture(autouse=True)
def _release_blocked_calls():
    release.clear()
    calls.clear()
    yield
    release.set()


@component(range=(0, 1), role="outcome", timeout_s=LIMIT_S)
async def judge(completion):
    calls.append(completion)
    await asyncio.sleep(0.01)  # in flight, on the loop, when the blocking call takes it
    if "blocks" in completion:
        release.wait()  # a synchronous wait inside async def: the loop is held until the test ends
    await asyncio.sleep(0.01)
    return 1.0 if "good" in completion else 0.0


@component(range=(0, 1), role="shaping")
def brevity(completion):
    return 1.0 if len(completion) < 40 else 0.0


def _within(seconds, fn, *args):
    """``fn(*args)``, failing the test (not hanging it) if it has not returned in ``seconds``."""
    outcome: list = []
    worker = threading.Thread(target=lambda: outcome.append(fn(*args)), daemon=True)
    worker.start()
    worker.join(seconds)
    assert outcome, f"still waiting after {seconds} s: the blocked event loop held the batch"
    return outcome[0]


def _inputs(*completions):
    return [ScoringInput(completion=c) for c in completions]


def test_a_loop_blocked_past_the_limit_costs_its_own_sample_and_the_batch_goes_on():
    reward = Reward("r", [judge, brevity])
    scores = _within(BATCH_WAIT_S, reward.score_many, _inputs("good", "this one blocks", "good too", "bad"))
    assert [s.error.kind if s.error else None for s in scores] == [None, "component_timeout", None, None]
    assert "judge" in scores[1].error.message and f"{LIMIT_S:g} s" in scores[1].error.message
    assert [s.components["judge"] for s in scores] == [1.0, None, 1.0, 0.0]  # the victims are scored, not charged
    assert scores[1].components["brevity"] == 1.0 and scores[1].aggregate is None


def test_one_sample_scored_alone_is_bounded_too():
    reward = Reward("r", [judge, brevity])
    score = _within(BATCH_WAIT_S, reward.score_input, ScoringInput(completion="it blocks"))
    assert score.error.kind == "component_timeout" and score.aggregate is None


def test_from_inside_a_running_event_loop():
    """A notebook or an async trainer scores from a running loop: the watched loop is still a thread's own."""
    reward = Reward("r", [judge, brevity])

    async def score_from_a_loop():
        return reward.score_many(_inputs("good", "blocks here"))

    scores = _within(BATCH_WAIT_S, asyncio.run, score_from_a_loop())
    assert [s.error.kind if s.error else None for s in scores] == [None, "component_timeout"]


def test_a_component_blocking_every_batch_is_not_called_once_its_abandoned_loops_reach_the_cap(monkeypatch):
    monkeypatch.setattr(bounded, "MAX_ABANDONED_CALLS", 2)
    reward = Reward("r", [judge, brevity])
    for _ in range(2):
        _within(BATCH_WAIT_S, reward.score_many, _inputs("blocks"))
    calls.clear()
    # No call, no wait: the refused call's limit is made 30 s, so a wait for it (or for the calls still running,
    # up to it) would pass the 10 s bound by far; a bound of LIMIT_S itself, 0.2 s, a loaded machine's scheduling
    # alone could pass. The reward's limits are read per call; there is no public way to change one after the
    # calls that reach the cap have timed out at the short one.
    monkeypatch.setitem(reward._async_limits, "judge", 30.0)
    started = time.monotonic()
    (score,) = reward.score_many(_inputs("blocks again"))
    assert time.monotonic() - started < 10
    assert calls == [] and score.error.kind == "component_timeout"
    assert "2 earlier calls still running past 30 s" in score.error.message


def test_an_async_component_awaiting_past_its_limit_is_still_cancelled_on_a_watched_loop():
    @component(range=(0, 1), role="outcome", timeout_s=LIMIT_S)
    async def slow(completion):
        await asyncio.sleep(3600 if "slow" in completion else 0)
        return 1.0

    scores = _within(BATCH_WAIT_S, Reward("r", [slow]).score_many, _inputs("fast", "slow"))
    assert [s.error.kind if s.error else None for s in scores] == [None, "component_timeout"]


def test_the_watch_passes_values_exceptions_and_cancellation_through():
    async def steps(n):
        total = 0
        for i in range(n):
            await asyncio.sleep(0)
            total += i
        return total

    async def raises():
        await asyncio.sleep(0)
        raise KeyError("its own")

    results = bounded.run_watched([steps(5), raises()], [1.0, 1.0])
    assert results[0] == 10 and isinstance(results[1], KeyError)


def test_a_loop_blocked_inside_a_task_the_component_started_is_found_too():
    """Round twenty-one: a component awaiting ``asyncio.gather`` (or a TaskGroup, ``create_task``) of its own
    calls, one of which blocks, held the loop unseen: the batch waited for the blocking call, then every sample on
    the loop (the good ones too) was a ``component_timeout``."""

    async def ask(completion):
        await asyncio.sleep(0.01)
        if "blocks" in completion:
            release.wait()  # a synchronous wait inside a task of the component's own
        return 1.0

    @component(range=(0, 1), role="outcome", timeout_s=LIMIT_S)
    async def gathered(completion):
        (value,) = await asyncio.gather(ask(completion))
        return value

    @component(range=(0, 1), role="outcome", timeout_s=LIMIT_S)
    async def grouped(completion):
        async with asyncio.TaskGroup() as group:
            task = group.create_task(ask(completion))
        return task.result()

    for judged in (gathered, grouped):
        scores = _within(BATCH_WAIT_S, Reward("r", [judged]).score_many, _inputs("good", "this one blocks", "good"))
        assert [s.error.kind if s.error else None for s in scores] == [None, "component_timeout", None]
        assert scores[0].aggregate == scores[2].aggregate == 1.0


def test_a_call_in_a_worker_thread_past_the_limit_does_not_hold_the_batch():
    """Round twenty-one: ``asyncio.to_thread`` (the way asyncio itself offers to call blocking code) past the
    limit was cancelled at it, but closing the watched loop waited for the worker thread: the batch waited for the
    blocking call however long it took."""

    @component(range=(0, 1), role="outcome", timeout_s=LIMIT_S)
    async def threaded(completion):
        if "blocks" in completion:
            await asyncio.to_thread(release.wait)
        return 1.0

    reward = Reward("r", [threaded])
    started = time.monotonic()
    scores = _within(BATCH_WAIT_S, reward.score_many, _inputs("good", "this one blocks"))
    assert time.monotonic() - started < BATCH_WAIT_S / 2
    assert [s.error.kind if s.error else None for s in scores] == [None, "component_timeout"]
    score = _within(BATCH_WAIT_S, reward.score_input, ScoringInput(completion="it blocks"))
    assert score.error.kind == "component_timeout"


@component(range=(0, 1), role="shaping")
async def unbounded(completion):
    await asyncio.sleep(0.01)
    if "holds" in completion:
        unblock.wait(BATCH_WAIT_S)  # a synchronous wait inside async def, past the judge's limit
    return 0.5


unblock = threading.Event()


def test_a_component_without_a_limit_blocking_the_loop_is_waited_for_without_costing_the_others_their_limit():
    """Round twenty-one: an async component without ``timeout_s`` blocking the loop on one sample (it may take its
    time) held every other call on the loop past its own limit: each sample's judge was a ``component_timeout``
    it did not cause, the whole batch lost. Now the others go on on a loop of their own while it is waited for."""
    unblock.clear()
    threading.Timer(LIMIT_S * 5, unblock.set).start()
    reward = Reward("r", [unbounded, judge])
    scores = _within(BATCH_WAIT_S, reward.score_many, _inputs("good", "it holds but is good", "good too", "bad"))
    assert [s.error for s in scores] == [None] * 4
    assert [s.components for s in scores] == [
        {"unbounded": 0.5, "judge": 1.0},
        {"unbounded": 0.5, "judge": 1.0},
        {"unbounded": 0.5, "judge": 1.0},
        {"unbounded": 0.5, "judge": 0.0},
    ]


def test_the_loop_left_to_a_component_without_a_limit_runs_no_further_step_of_the_others():
    """A wake-up of another call, queued before its cancellation, ran on the loop left to the unbounded call: a
    judge that then blocked held that loop, and the batch waited for the judge's blocking call."""
    unblock.clear()
    threading.Timer(LIMIT_S * 5, unblock.set).start()
    reward = Reward("r", [unbounded, judge])
    started = time.monotonic()
    scores = _within(BATCH_WAIT_S, reward.score_many, _inputs("good", "it holds, then blocks", "good too"))
    assert time.monotonic() - started < BATCH_WAIT_S / 2
    assert [s.error.kind if s.error else None for s in scores] == [None, "component_timeout", None]
    assert scores[1].components == {"unbounded": 0.5, "judge": None}
