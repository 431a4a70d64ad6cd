"""Round thirty-six, adoption: the TRL callback's stored records say what failed, as `run` and `score` do.

A user's component that raised, or an environment hook of theirs, stored a record whose message was only "no
component could be computed": the alarm's examples promise to name "the component and what it did", and did not.
"""

from __future__ import annotations

import json
import logging

import pytest

from rewardpipe import Reward, component
from rewardpipe.integrations.trl import RewardPipeCallback, _clean_row, batch_records, reward_functions
from rewardpipe.integrations.trl_episodes import EPISODE_FIELD, EpisodeRollout
from tests.core.test_round_thirtysix_adoption import NumberGame, NumberTask
from tests.test_trl_integration import _drive, _FakeTrainer


@component(range=(0, 1), role="outcome")
def tagged(completion):
    if "BOOM" in completion:
        raise RuntimeError("format checker exploded")
    return float(completion.startswith("ANSWER"))


def _stored_errors(root, run_id):
    records = [json.loads(p.read_text()) for p in (root / "runs" / run_id).glob("step=*/group=*/*.json")]
    return {r["rollout_id"]: r["error"] for r in records}


def test_a_user_component_that_raised_is_named_with_its_line_in_the_stored_record_and_the_alarm(tmp_path):
    callback = RewardPipeCallback(reward=Reward("tags", [tagged]), store=str(tmp_path), run_id="trl-run")
    trainer = _FakeTrainer(callback.reward_funcs, [1.0], 2)
    prompts = [f"q{g}" for g in range(4) for _ in range(2)]
    completions = ["ANSWER 1", "x", "BOOM", "ANSWER 2", "x", "ANSWER 3", "ANSWER 4", "y"]
    _drive(callback, trainer, prompts, completions)
    error = _stored_errors(tmp_path, "trl-run")["c2"]
    assert error["kind"] == "component_raised"
    assert "'tagged' raised RuntimeError: format checker exploded" in error["message"]
    assert "test_round_thirtysix_adoption_trl.py:" in error["message"]
    (alarm,) = [a for a in callback.alarms if a.kind == "error_rate"]
    assert "format checker exploded" in alarm.examples[0]["reason"]


def test_an_episodes_hook_failure_is_named_in_the_stored_record(tmp_path):
    rollout = EpisodeRollout([NumberTask(task_id="t", prompt="Guess.", secret=7)], env=NumberGame())
    callback = RewardPipeCallback(episodes=rollout, store=str(tmp_path), run_id="episodes")
    said = "environment 'number_game': respond() raised KeyError: 'x' (at my_env.py:3)"
    scored = {"status": "scored", "error": None, "components": {"won": 1.0}}
    failed = {"status": "error", "error": "simulator_error", "error_message": said, "components": {"won": None}}
    rows = [{"rollout_id": f"r{i}", "task_id": "t", **(failed if i == 1 else scored)} for i in range(4)]
    trainer = _FakeTrainer(callback.reward_funcs, [1.0], 2)
    _drive(callback, trainer, ["Guess."] * 4, ["7"] * 4, **{EPISODE_FIELD: rows})
    assert _stored_errors(tmp_path, "episodes")["c1"] == {"kind": "simulator_error", "message": said}


def test_a_rows_error_message_from_another_process_is_kept_bounded_and_only_as_text():
    kept = _clean_row(({"x": None}, "component_raised", {"error_message": "m" * 10_000}), ["x"])[2]
    assert kept["error_message"] == "m" * 2000
    assert "error_message" not in _clean_row(({"x": None}, "component_raised", {"error_message": 5}), ["x"])[2]
    assert "error_message" not in _clean_row(({"x": 1.0}, None, {"error_message": "stale"}), ["x"])[2]
    (record,) = batch_records({"x": [None]}, 1, errors=["component_raised"], details=[kept])
    assert record["error"]["message"] == "m" * 2000


@pytest.mark.parametrize(
    "make", [lambda reward: reward_functions(reward), lambda reward: RewardPipeCallback(reward=reward)]
)
def test_an_episode_reward_given_for_single_turn_completions_is_warned_about(caplog, make):
    # The environment's reward reads `state`; single-turn completions have none, so every component would fail on
    # every completion and TRL would train on no reward, with no word until the error alarm.
    with caplog.at_level(logging.WARNING, logger="rewardpipe.trl"):
        make(NumberGame.reward)
    assert "reads `state`" in caplog.text and "won" in caplog.text and "EpisodeRollout" in caplog.text


def test_a_single_turn_reward_is_not_warned_about(caplog):
    with caplog.at_level(logging.WARNING, logger="rewardpipe.trl"):
        reward_functions(Reward("tags", [tagged]))
    assert "reads `state`" not in caplog.text
