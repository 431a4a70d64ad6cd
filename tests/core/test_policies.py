"""Scripted and replay policies: determinism, mixed strategies inside a group, collapse, exhaustion.

``run --policy scripted`` plays the environment's ``scripted_policy()``: for ask-before-coding, the seeded
strategy mix of rewardpipe.envs.ask_before_coding.scenarios."""

import pytest

from rewardpipe.envs.ask_before_coding.environment import ENVIRONMENT as ENV
from rewardpipe.envs.ask_before_coding.scenarios import STRATEGY_WEIGHTS
from rewardpipe.episode import PolicyExhausted, apply_policy_turn, run_episode, start_episode
from rewardpipe.models import Message, Rollout
from rewardpipe.parsing import TurnKind, classify_turn
from rewardpipe.policies import ReplayPolicy
from rewardpipe.rewards import get_reward
from tests.core.conftest import FakeExecutor, make_task, passes_only_reference

TASK = make_task()
REWARD = get_reward("ask_before_coding")
GROUP = [f"g-0:{k}" for k in range(8)]


def ScriptedPolicy(seed=0, weights=None, collapse_from_step=None):  # noqa: N802 - the policy it stands for
    return ENV.scripted_policy(seed=seed, weights=weights, collapse_from_step=collapse_from_step)


def state_for(rollout_id: str, step: int = 0, max_turns: int = 6):
    return start_episode(
        TASK, env=ENV, run_id="run", step=step, group_id="g-0", rollout_id=rollout_id, max_turns=max_turns
    )


def play(policy, rollout_id: str, step: int = 0, max_turns: int = 6):
    return run_episode(
        TASK,
        policy,
        ENV,
        FakeExecutor(passes_only_reference),
        REWARD,
        run_id="run",
        step=step,
        group_id="g-0",
        rollout_id=rollout_id,
        max_turns=max_turns,
    )


def test_same_seed_gives_identical_rollouts():
    first = [play(ScriptedPolicy(seed=5), rid) for rid in GROUP]
    second = [play(ScriptedPolicy(seed=5), rid) for rid in GROUP]
    assert [r.components for r in first] == [r.components for r in second]
    assert [ScriptedPolicy(seed=5).strategy(state_for(rid), TASK) for rid in GROUP] == [
        ScriptedPolicy(seed=5).strategy(state_for(rid), TASK) for rid in GROUP
    ]


def test_different_seeds_give_different_strategy_mixes():
    mixes = {tuple(ScriptedPolicy(seed=seed).strategy(state_for(rid), TASK) for rid in GROUP) for seed in range(4)}
    assert len(mixes) > 1


def test_strategy_changes_with_the_training_step():
    policy = ScriptedPolicy(seed=1)
    by_step = {tuple(policy.strategy(state_for(rid, step=step), TASK) for rid in GROUP) for step in range(4)}
    assert len(by_step) > 1


def test_a_group_mixes_strategies_so_components_vary_inside_it():
    policy = ScriptedPolicy(seed=0)
    strategies = [policy.strategy(state_for(rid), TASK) for rid in GROUP]
    assert len(set(strategies)) >= 2
    records = [play(policy, rid) for rid in GROUP]
    assert all(r.status == "scored" for r in records)
    varying = [name for name in REWARD.component_names if len({r.components[name] for r in records}) > 1]
    assert "guessed_immediately" in varying or "asked_before_coding" in varying
    assert len({r.aggregate for r in records}) > 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_strategies_behave_as_documented(seed):
    policy = ScriptedPolicy(seed=seed)
    for rid in GROUP:
        strategy = policy.strategy(state_for(rid), TASK)
        record = play(policy, rid)
        if strategy == "guess":
            assert record.components["guessed_immediately"] == -1.0
            assert record.components["correctness"] == 0.0  # a signature-only stub
        elif strategy == "ask_first":
            assert record.components["asked_before_coding"] == 1.0
        elif strategy == "ask_later":
            assert record.components["asked_before_coding"] == 0.6
        elif strategy == "loop":
            assert record.metrics["committed"] is False
            assert record.components["loop_penalty"] == -0.5


def test_asking_about_everything_earns_the_reference_solution():
    policy = ScriptedPolicy(seed=0, weights={"ask_first": 1.0})
    records = [play(policy, rid, max_turns=10) for rid in GROUP]
    full = [r for r in records if r.metrics["spec_revealed"] == len(TASK.spec)]
    partial = [r for r in records if r.metrics["spec_revealed"] < len(TASK.spec)]
    assert full and partial  # the number of planned questions varies within the group
    assert all(r.components["correctness"] == 1.0 for r in full)
    assert all(r.components["correctness"] == 0.0 for r in partial)


def test_collapse_from_step_makes_every_rollout_guess():
    policy = ScriptedPolicy(seed=0, collapse_from_step=3)
    before = {policy.strategy(state_for(rid, step=2), TASK) for rid in GROUP}
    assert before != {"guess"}
    for step in (3, 7):
        records = [play(policy, rid, step=step) for rid in GROUP]
        assert {r.components["guessed_immediately"] for r in records} == {-1.0}
        assert {r.metrics["assistant_turns"] for r in records} == {1}


def test_ask_later_opens_with_a_non_question():
    policy = ScriptedPolicy(seed=0, weights={"ask_later": 1.0})
    state = state_for("x")
    first = policy.next_turn(state, TASK)
    assert classify_turn(first) is TurnKind.OTHER
    after_first = apply_policy_turn(state, first, ENV, TASK).model_copy(update={"next_action": "policy"})
    second = policy.next_turn(after_first, TASK)
    assert classify_turn(second) is TurnKind.QUESTION


def test_scripted_policy_commits_by_the_last_turn():
    policy = ScriptedPolicy(seed=0, weights={"ask_first": 1.0})
    for rid in GROUP:
        record = play(policy, rid, max_turns=2)
        assert record.metrics["committed"] is True


@pytest.mark.parametrize(
    "weights, match",
    [
        ({"guess": 1.0, "yolo": 1.0}, "yolo"),
        ({"guess": -1.0}, "guess"),
        ({"guess": float("nan")}, "guess"),
        ({"guess": "1"}, "guess"),
        ({"guess": 0.0, "loop": 0.0}, "positive"),
    ],
)
def test_bad_strategy_weights_are_rejected_up_front(weights, match):
    with pytest.raises(ValueError, match=match):
        ScriptedPolicy(weights=weights)


def test_default_weights_cover_every_strategy():
    assert set(ScriptedPolicy().scenarios(TASK)) == set(STRATEGY_WEIGHTS)


# --- ReplayPolicy ------------------------------------------------------------------------------------------


def recorded(rollout_id: str, *assistant_turns: str, step: int = 0) -> Rollout:
    messages = [Message(role="user", content="prompt")]
    for turn in assistant_turns:
        messages += [Message(role="nova_assistant", content=turn), Message(role="user", content="reply")]
    return Rollout(rollout_id=rollout_id, group_id="g", task_id=TASK.task_id, step=step, messages=messages)


def test_replay_tells_the_same_rollout_id_apart_across_steps():
    policy = ReplayPolicy([recorded("k0", "step zero?", step=0), recorded("k0", "step one?", step=1)])
    assert policy.next_turn(state_for("k0", step=0), TASK) == "step zero?"
    assert policy.next_turn(state_for("k0", step=1), TASK) == "step one?"
    with pytest.raises(KeyError, match="step 2"):
        policy.next_turn(state_for("k0", step=2), TASK)  # ambiguous: which recording?


def test_replay_of_a_rollout_recorded_at_one_step_matches_any_step():
    assert ReplayPolicy([recorded("only", "hi?", step=4)]).next_turn(state_for("only", step=0), TASK) == "hi?"


def test_replay_rejects_the_same_rollout_recorded_twice_for_a_step():
    with pytest.raises(ValueError, match="'k0'.*step 0"):
        ReplayPolicy([recorded("k0", "a?"), recorded("k0", "b?")])


def test_replay_returns_recorded_turns_in_order_then_is_exhausted():
    policy = ReplayPolicy([recorded("a", "first?", "second?"), recorded("b", "other")])
    state = state_for("a")
    assert policy.next_turn(state, TASK) == "first?"
    state = apply_policy_turn(state, "first?", ENV, TASK).model_copy(update={"next_action": "policy"})
    assert policy.next_turn(state, TASK) == "second?"
    state = apply_policy_turn(state, "second?", ENV, TASK).model_copy(update={"next_action": "policy"})
    with pytest.raises(PolicyExhausted, match="2 assistant turn"):
        policy.next_turn(state, TASK)
    assert policy.next_turn(state_for("b"), TASK) == "other"


def test_replay_of_an_unknown_rollout_raises_key_error():
    with pytest.raises(KeyError, match="missing"):
        ReplayPolicy([recorded("a", "x")]).next_turn(state_for("missing"), TASK)


def test_run_episode_scores_an_exhausted_replay():
    policy = ReplayPolicy([recorded("a", "Are negative numbers allowed?", "And floats?")])
    record = play(policy, "a")
    assert record.status == "scored"
    assert record.metrics["end_reason"].startswith("policy_exhausted")
    assert record.metrics["spec_revealed"] == 2
    assert record.components["correctness"] == 0.0
