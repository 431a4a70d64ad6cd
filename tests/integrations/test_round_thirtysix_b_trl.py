"""Round thirty-six (second wave), the TRL integration's examples and episodes.

The callback stored records but no transcripts, so `monitor` and `report` printed example paths nobody could open; a
TRL multi-turn batch waited one ``hook_timeout_s`` per hanging hook, one after another.
"""

from __future__ import annotations

import json
import threading

import pytest

from rewardpipe import Reward, component
from rewardpipe.integrations.trl import (
    TRANSCRIPT_MESSAGE_CHARS,
    TRANSCRIPT_MESSAGES,
    RewardPipeCallback,
    _clean_row,
    transcript_messages,
)
from rewardpipe.integrations.trl_episodes import EpisodeRollout, rollout_output
from rewardpipe.store import open_store, transcript_key
from tests.api.conftest import CharCodec
from tests.core.test_round_thirtysix_adoption import NumberGame, NumberTask
from tests.test_trl_integration import _drive, _FakeTrainer

HOSTILE = "</script><script>alert(1)</script> \x1b[31m {{7*7}} ${HOME}"


@component(range=(0, 1), role="outcome")
def starts_with_answer(completion):
    return float(completion.startswith("ANSWER"))


def _examples(callback):
    return [example for alarm in callback.alarms for example in alarm.examples if example.get("transcript_key")]


def test_an_alarms_example_rollouts_from_a_trl_run_are_stored_transcripts_of_the_prompt_and_completion(tmp_path):
    # Before: the records were stored and the alarm's examples named transcript keys, but no transcript was there.
    callback = RewardPipeCallback(reward=Reward("tags", [starts_with_answer]), store=str(tmp_path), run_id="trl-run")
    trainer = _FakeTrainer(callback.reward_funcs, [1.0], 2)
    prompts = [[{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"q{g}"}] for g in range(4)]
    prompts = [p for p in prompts for _ in range(2)]
    completions = [[{"role": "assistant", "content": f"{HOSTILE} {i}"}] for i in range(8)]  # dead: 0 everywhere
    _drive(callback, trainer, prompts, completions)
    examples = _examples(callback)
    assert examples, callback.alarms
    store = open_store(str(tmp_path))
    for example in examples:
        transcript = store.get_transcript(example["transcript_key"])
        index = int(transcript.rollout_id[1:])
        assert [(m.role, m.content) for m in transcript.messages] == [
            ("system", "Be brief."),
            ("user", f"q{index // 2}"),
            ("assistant", f"{HOSTILE} {index}"),  # stored as the model wrote it: data, never interpreted
        ]
        assert transcript.components == {"starts_with_answer": 0.0} and transcript.status == "scored"
    keys = sorted(p.name for p in (tmp_path / "runs" / "trl-run" / "transcripts").rglob("*.json"))
    assert len(keys) == 8  # one per stored record


def test_an_episodes_transcript_is_its_conversation_with_the_environment(tmp_path):
    rollout = EpisodeRollout([NumberTask(task_id="t", prompt="Guess.", secret=7)], env=NumberGame(), max_turns=2)
    callback = RewardPipeCallback(episodes=rollout, store=str(tmp_path), run_id="episodes")

    def guesses(contexts, max_new_tokens):
        return [[ord("3"), 0] for _ in contexts]  # never the secret: every episode ends at its turn limit, lost

    episodes = rollout.play(["Guess."] * 4, CharCodec(), guesses, max_completion_tokens=50, group_size=2)
    rows = rollout_output(episodes, rollout.env)["rewardpipe_episode"]
    trainer = _FakeTrainer(callback.reward_funcs, [1.0], 2)
    _drive(callback, trainer, ["Guess."] * 4, ["3no3"] * 4, rewardpipe_episode=rows)
    assert not callback.failures
    transcript = open_store(str(tmp_path)).get_transcript(transcript_key("episodes", 0, "g1", "c3"))
    assert [(m.role, m.content) for m in transcript.messages] == [
        ("user", "Guess."),
        ("assistant", "3"),
        ("user", "no"),  # the environment's reply, as it said it (the codec renders it for the model)
        ("assistant", "3"),
    ]
    assert transcript.verdict.status == "not_executed" and transcript.components == {"won": 0.0}


def test_a_transcript_is_bounded_and_a_ranks_malformed_one_is_left_out():
    long = [{"role": "user", "content": "task"}] + [
        {"role": "assistant", "content": "x" * (TRANSCRIPT_MESSAGE_CHARS * 3)} for _ in range(TRANSCRIPT_MESSAGES * 2)
    ]
    kept = transcript_messages(long)
    assert len(kept) == TRANSCRIPT_MESSAGES and kept[0]["content"] == "task"
    assert all(len(m["content"]) <= TRANSCRIPT_MESSAGE_CHARS for m in kept)
    # a message with no chat role or no text is evidence lost, never the row's failure
    assert transcript_messages([{"role": 3, "content": "a"}, {"role": "user", "content": object()}]) == []
    row = ({"x": 1.0}, None, {"task_id": "t", "transcript": {"messages": "not a list"}})
    assert "transcript" not in _clean_row(row, ["x"])[2]
    row = ({"x": 1.0}, None, {"transcript": {"messages": long, "verdict": {"status": 5, "reason": "r" * 10_000}}})
    clean = _clean_row(row, ["x"])[2]["transcript"]
    assert len(clean["messages"]) == TRANSCRIPT_MESSAGES and len(json.dumps(clean)) < 200_000
    assert clean["verdict"]["status"] == "not_executed" and len(clean["verdict"]["reason"]) == 2000


def test_a_store_of_your_own_without_put_transcript_still_takes_every_record():
    class RecordsOnly:
        def __init__(self):
            self.records = []

        def put_record(self, record):
            self.records.append(record)

        def put_json(self, key, value):
            pass

    store = RecordsOnly()
    callback = RewardPipeCallback(reward=Reward("tags", [starts_with_answer]), store=store, run_id="own")
    trainer = _FakeTrainer(callback.reward_funcs, [1.0], 2)
    _drive(callback, trainer, ["q"] * 4, ["ANSWER", "x", "ANSWER", "y"])
    assert len(store.records) == 4 and not callback.failures


# -- hanging environment hooks in a TRL batch: one timeout in all -------------------------------------------------


class HangingReply(NumberGame):
    """Its reply (or its metrics) hangs for the episodes named in ``hangs`` until released; every call is counted."""

    name = "hanging_reply"
    hook_timeout_s = 2.0

    def __init__(self, hook: str) -> None:
        self.hook = hook
        self.entered: list[str] = []
        self.release = threading.Event()

    def _maybe_hang(self, state) -> None:
        self.entered.append(state.rollout_id)
        if state.group_id == "b0-g0":
            self.release.wait(30)

    def respond(self, state, task, ctx):
        if self.hook == "respond":
            self._maybe_hang(state)
        return super().respond(state, task, ctx)

    def metrics(self, state, task):
        if self.hook == "metrics":
            self._maybe_hang(state)
        return {}

    def on_policy_turn(self, state, task, text):
        if self.hook == "execution_job":  # the model's first turn is its answer: the environment plans no run
            return state.evolve(next_action="execute")
        return super().on_policy_turn(state, task, text)

    def execution_job(self, state, task):
        self._maybe_hang(state)


@pytest.mark.parametrize("hook", ["respond", "metrics", "execution_job"])
def test_a_batchs_hanging_hooks_time_out_together_not_one_after_another(monkeypatch, hook):
    # Before: each hanging hook was waited for in turn (2 episodes with a 1 s timeout took 2.0 s): when the first one
    # timed out, the second had not even been called. Now they are waited for together: every hanging call has begun
    # when the first timeout fires, so the batch costs one hook_timeout_s, however many hang.
    from rewardpipe import episode

    env = HangingReply(hook)
    started_at_timeout: list[int] = []

    class CountedTimeout(episode.HookTimeout):
        def __init__(self, *args, **kwargs):
            started_at_timeout.append(sum(1 for r in env.entered if r.startswith("b0-g0")))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(episode, "HookTimeout", CountedTimeout)
    rollout = EpisodeRollout([NumberTask(task_id="t", prompt="Guess.", secret=7)], env=env, max_turns=2)

    def guesses(contexts, max_new_tokens):
        return [[ord("3"), 0] for _ in contexts]

    try:
        episodes = rollout.play(["Guess."] * 4, CharCodec(), guesses, max_completion_tokens=50, group_size=2)
        rows = rollout_output(episodes, env)["rewardpipe_episode"]
    finally:
        env.release.set()
    assert started_at_timeout == [2, 2]  # both hanging calls under way at each timeout: waited for together
    by_id = {row["rollout_id"]: row for row in rows}
    for hanging in ("b0-g0-k0", "b0-g0-k1"):
        if hook != "metrics":  # the episode is an error record naming the hook, never a 0
            assert by_id[hanging]["status"] == "error" and by_id[hanging]["components"] == {"won": None}
            assert f"{hook}() did not return within hook_timeout_s" in by_id[hanging]["error_message"]
        else:  # a late metrics() leaves its values out, as everywhere: the score stands
            assert f"{hook}() did not return" in by_id[hanging]["env_metrics_error"]
    for other in ("b0-g1-k0", "b0-g1-k1"):  # the other group is unaffected
        assert by_id[other]["status"] == "scored" and by_id[other]["components"] == {"won": 0.0}
        assert "env_metrics_error" not in by_id[other]


# -- several processes: every rank logs the same episode figures ----------------------------------------------------


def test_every_process_logs_the_same_episode_metric_names_whatever_its_own_episodes_report():
    # TRL averages each logged metric over the processes with one collective per name, in name order: a rank whose
    # episodes reported a metric the other's did not (env_observations_cut only when a reply was cut; none of an
    # environment's metrics on a rank whose episodes all failed) logged a name the other did not, and the collectives
    # paired values of different metrics, or waited for ever. The names are now the union over the processes.
    from rewardpipe.integrations.trl_episodes import EpisodeScorer

    base = {"task_id": "t", "status": "scored", "error": None, "components": {"won": 1.0}, "assistant_turns": 1}
    ranks = {
        "cut": [{**base, "rollout_id": "a", "env_observations_cut": 1}],
        "plain": [{**base, "rollout_id": "b"}],
        "failed": [{"rollout_id": "c", "task_id": "t", "status": "error", "error": "unknown_task", "components": {}}],
    }
    offered: dict[str, list[str]] = {}

    def logged_by(rank: str) -> dict[str, float]:
        scorer = EpisodeScorer(NumberGame.reward)
        # the collective: every rank's names, in process order (each rank offers its own first, here, then the rest)
        scorer.gather = lambda names: [*names, *(n for r, other in offered.items() if r != rank for n in other)]
        logged: dict[str, float] = {}
        for fn in scorer.functions():
            fn(["Guess."], ["7"], rewardpipe_episode=ranks[rank], log_metric=logged.__setitem__, trainer_state=None)
        return logged

    from rewardpipe.integrations.trl_episodes import episode_metrics

    for rank, rows in ranks.items():
        offered[rank] = sorted(episode_metrics(rows))
    figures = {rank: logged_by(rank) for rank in ranks}
    assert len({tuple(sorted(f)) for f in figures.values()}) == 1, figures  # one name set on every rank
    assert figures["plain"]["rewardpipe/episode/env_observations_cut"] == 0.0  # its episodes had none cut
    assert figures["cut"]["rewardpipe/episode/env_observations_cut"] == 1.0
