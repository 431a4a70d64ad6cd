"""Round thirty-six (second wave), the TRL integration's examples and episodes.

The callback stored records but no transcripts, so `monitor` and `report` printed example paths nobody could open; a
TRL multi-turn batch waited one ``hook_timeout_s`` per hanging hook, one after another.
"""

from __future__ import annotations

import json

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
