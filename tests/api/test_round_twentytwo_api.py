"""Round twenty-two, public API (an independent review): a user's environment, reward, dataset or input that cost
more than its own sample, or was blamed on the wrong party.

* TRL episodes called the environment's ``metrics()`` twice per episode: once for the record (scoring), once
  again for the row handed to the reward functions. A ``metrics()`` that counts, samples or calls a service did
  it twice, and the row could disagree with the record. It is read once; the record and the row share it.
* The calls of an environment's hooks past ``hook_timeout_s`` were counted per environment *class*: two
  environments of one class (two configurations, each its own backend) shared the cap of 32, so one's hung
  hooks refused every call of the other's (its rollouts all ``simulator_error``). Counted per environment.
* verl: ``extra_info["question"]`` (or ``["prompt"]``) was read by its truth value: a dataset column read with
  numpy gives an array, whose ``bool()`` raises, so ``compute_score`` raised and verl's reward manager failed
  the whole batch on that one sample. Read by type.
* gsm8k read a numeric reference only when it was an ``int`` or a ``float``: ``numpy.int64`` (a parquet or
  pandas integer column, verl's ``ground_truth``) and ``Decimal`` were unreadable references, every sample of
  such a dataset an error record. Any real number is read.
* ``Reward.score(messages)`` took OpenAI-style dicts as they were: every component of the sample then "raised
  AttributeError: 'dict' object has no attribute 'role'", the caller's input blamed on the user's reward.
  Dicts are read as messages; anything else is a ValueError naming the message.
"""

from __future__ import annotations

import threading
from decimal import Decimal

import pytest

from rewardpipe import Environment, EpisodeState, Message, Reward, TaskRow, component
from rewardpipe.episode import HookTimeout, call_hook


@component(range=(0, 1), role="outcome")
def said_a(completion: str) -> float:
    return float(completion == "a")


# -- TRL episodes: metrics() once per episode -------------------------------------------------------------


def test_trl_episodes_read_the_environments_metrics_once_per_episode():
    from rewardpipe.envs.ask_before_coding.environment import AskBeforeCoding
    from rewardpipe.integrations.trl_episodes import EPISODE_FIELD, EpisodeRollout, rollout_output
    from tests.test_trl_episodes import TASKS, CharCodec, ScriptedModel

    calls: list[str] = []

    class Counting(AskBeforeCoding):
        def metrics(self, state, task):
            calls.append(state.rollout_id)
            return {**super().metrics(state, task), "metrics_calls": len(calls)}

    env = Counting()
    rollout = EpisodeRollout(TASKS, env=env, max_turns=6)
    prompts = [TASKS[0].prompt, TASKS[0].prompt, TASKS[1].prompt, TASKS[1].prompt]
    episodes = rollout.play(prompts, CharCodec(), ScriptedModel(), max_completion_tokens=4000, group_size=2)
    rows = rollout_output(episodes, env)[EPISODE_FIELD]
    # Before: 8 calls (each episode's twice), and the row said a later call than its record.
    assert sorted(calls) == sorted(e.rollout_id for e in episodes)
    for episode, row in zip(episodes, rows, strict=True):
        assert row["metrics_calls"] == episode.record.metrics["metrics_calls"]


# -- hook_timeout_s: counted per environment --------------------------------------------------------------


class Slow(Environment):
    name = "slow_backend"
    version = "1"
    max_turns = 2
    hook_timeout_s = 0.05
    reward = Reward("slow", [said_a])

    def __init__(self, hangs: bool) -> None:
        self.hangs = hangs
        self.release = threading.Event()

    def start(self, task):
        if self.hangs:
            self.release.wait(5)
        return super().start(task)


def test_one_environments_hung_hooks_do_not_refuse_another_of_the_same_class(monkeypatch):
    from rewardpipe import bounded

    monkeypatch.setattr(bounded, "MAX_ABANDONED_CALLS", 1)
    hung, healthy = Slow(hangs=True), Slow(hangs=False)
    task = TaskRow(task_id="t", prompt="p")
    try:
        with pytest.raises(HookTimeout, match="did not return"):
            call_hook(hung, "start", task)
        with pytest.raises(HookTimeout, match="not called: 1 earlier"):
            call_hook(hung, "start", task)  # its own cap still holds
        # Before: HookTimeout "not called: 1 earlier calls still running", the other backend's hung call.
        assert isinstance(call_hook(healthy, "start", task), EpisodeState)
    finally:
        hung.release.set()


# -- verl and gsm8k: a dataset's numpy values -------------------------------------------------------------


@pytest.mark.parametrize("key", ["question", "prompt"])
def test_verl_scores_a_sample_whose_question_is_a_numpy_array(key):
    np = pytest.importorskip("numpy")
    from rewardpipe.integrations.verl import compute_score

    out = compute_score("gsm8k", "#### 4", "#### 4", {key: np.array(["What is 2+2?", "(twice)"])})
    assert out["reward_error"] == 0.0 and out["score"] > 0


def test_verl_still_reads_the_question_before_the_prompt_and_skips_an_empty_one():
    from rewardpipe.integrations.verl import _prompt

    assert _prompt({"question": "q", "prompt": "p"}) == "q"
    assert _prompt({"question": "", "prompt": "p"}) == "p"
    assert _prompt({"question": 7}) == "7" and _prompt({}) == ""


def test_gsm8k_reads_a_numpy_integer_or_a_decimal_reference():
    np = pytest.importorskip("numpy")
    from rewardpipe.rewards.gsm8k import reference_value

    for reference in (np.int64(4), np.int32(4), np.float32(4.0), Decimal("4"), 4, 4.0):
        assert reference_value(reference) == Decimal(4), reference
    for reference in (True, np.bool_(True), None, Decimal("NaN"), float("inf")):
        assert reference_value(reference) is None, reference


def test_a_verl_sample_with_a_numpy_integer_ground_truth_is_scored():
    np = pytest.importorskip("numpy")
    from rewardpipe.integrations.verl import compute_score

    out = compute_score("gsm8k", "#### 4", np.int64(4), {})
    assert out["reward_error"] == 0.0 and out["answer_correct"] == 1.0


# -- Reward.score: dict messages ---------------------------------------------------------------------------


def test_reward_score_reads_openai_style_dicts_as_messages():
    reward = Reward("r", [said_a])
    score = reward.score([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])
    assert score.error is None and score.components == {"said_a": 1.0}
    mixed = [Message(role="user", content="q"), {"role": "assistant", "content": "b"}]
    assert reward.score(mixed).components == {"said_a": 0.0}


@pytest.mark.parametrize(
    ("messages", "said"),
    [
        ("a", "messages must be a list of messages, got str"),
        ({"role": "user", "content": "q"}, "got dict"),
        ([{"role": "user", "content": "q"}, 3], r"messages\[1\] is a int"),
        ([{"role": "nobody", "content": "q"}], r"messages\[0\] is not a message"),
    ],
)
def test_reward_score_refuses_what_is_no_message_naming_it(messages, said):
    """Before: no error for the caller; every component 'raised AttributeError', the reward blamed."""
    with pytest.raises(ValueError, match=said):
        Reward("r", [said_a]).score(messages)
